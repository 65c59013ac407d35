#!/usr/bin/env python3
"""The committed scenes model is what the VideoLLaMA3 recipe makes of the committed checkpoint.

    .venv-export/bin/python engines/videollama3/export.py engines/scenes/checkpoint --out target/scenes-export --stream-timestamps
    .venv-export/bin/python engines/scenes/check.py target/scenes-export engines/scenes/model

Runs both directories' graphs in ONNX Runtime on the same seeded inputs (frames at the model's
224x112, a prompt's embeddings, a decoder step after a past) and fails when any output differs by
more than --tolerance, or when the manifests differ other than in their provenance lines (ONNX
files need not be byte-identical across machines: protobuf field order and float folding may
differ, the function may not).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def manifest_body(path: Path) -> list[str]:
    skip = ("#", "source =", '"')  # provenance comment, source path, file hashes
    return [l for l in path.read_text().splitlines() if l and not l.startswith(skip)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fresh", type=Path)
    ap.add_argument("committed", type=Path)
    ap.add_argument("--tolerance", type=float, default=1e-5)
    args = ap.parse_args()
    import onnxruntime as ort

    a, b = manifest_body(args.fresh / "manifest.toml"), manifest_body(args.committed / "manifest.toml")
    if a != b:
        diff = [f"  {x!r} vs {y!r}" for x, y in zip(a, b) if x != y] or ["  (different lengths)"]
        sys.exit("scenes check: the manifests differ:\n" + "\n".join(diff))

    def session(d: Path, name: str):
        return ort.InferenceSession(str(d / name), providers=["CPUExecutionProvider"])

    rng = np.random.default_rng(7)
    worst = 0.0

    def same(name: str, x, y):
        nonlocal worst
        d = float(np.abs(x - y).max())
        worst = max(worst, d)
        print(f"  {name}: max |diff| {d:.2e}")
        if not d <= args.tolerance:
            sys.exit(f"scenes check: {name} differs by {d:.3e} (tolerance {args.tolerance:g})")

    frames = rng.uniform(-1, 1, (3, 3, 112, 224)).astype(np.float32)
    same("vision", session(args.fresh, "vision_encoder.onnx").run(None, {"pixel_values": frames})[0],
         session(args.committed, "vision_encoder.onnx").run(None, {"pixel_values": frames})[0])
    ids = rng.integers(0, 500, (1, 9)).astype(np.int64)
    same("embedding", session(args.fresh, "embed_tokens.onnx").run(None, {"input_ids": ids})[0],
         session(args.committed, "embed_tokens.onnx").run(None, {"input_ids": ids})[0])
    fresh, committed = session(args.fresh, "decoder_model_merged.onnx"), session(args.committed, "decoder_model_merged.onnx")
    feed = {}
    for i in fresh.get_inputs():
        if i.name == "inputs_embeds":
            feed[i.name] = rng.normal(0, 0.5, (1, 4, i.shape[2])).astype(np.float32)
        elif i.name == "attention_mask":
            feed[i.name] = np.ones((1, 9), np.int64)
        elif i.name == "position_ids":
            feed[i.name] = np.arange(5, 9, dtype=np.int64)[None]
        else:
            feed[i.name] = rng.normal(0, 0.5, (1, i.shape[1], 5, i.shape[3])).astype(np.float32)
    for x, y, o in zip(fresh.run(None, feed), committed.run(None, feed), fresh.get_outputs()):
        same(f"decoder {o.name}", x, y)
    print(f"scenes check: the export of the checkpoint matches the committed model (max |diff| {worst:.2e})")


if __name__ == "__main__":
    main()
