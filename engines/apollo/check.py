#!/usr/bin/env python3
"""Checks the tiny Apollo-shaped model and writes the runtime's reference (tests/apollo_live.rs).

- Two generations with the same seed are byte-identical and equal the checked model directory.
- ONNX Runtime's clip encoder equals `generate.reference_clip`, the same computation written in
  numpy from docs/REFERENCE.md §2 (float64), within 1e-4, on random clips and on a batch of two
  (clips are independent: a clip's tokens do not depend on the other clip in the batch).
- Writes OUT/clip.json: four 56x56 RGB frames (uint8, a white square moving right on grey) and the
  reference tokens of that clip, normalised as the runtime does; the runtime's encoder must give
  the same tokens.

    python3 engines/apollo/check.py [--model engines/apollo/model] [--out target/apollo-reference]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate as apollo  # noqa: E402

TOLERANCE = 1e-4


def frames() -> np.ndarray:
    """[4, S, S, 3] uint8: a white 14-pixel square moving right over grey, one step a frame."""
    s = apollo.ClipConfig().image_size
    out = np.full((4, s, s, 3), 90, dtype=np.uint8)
    for i in range(4):
        out[i, 20:34, 4 + 10 * i:18 + 10 * i] = 255
    return out


def normalise(rgb: np.ndarray) -> np.ndarray:
    """[..., S, S, 3] uint8 -> [..., 3, S, S] float32 as the runtime does: (v - 127.5) / 127.5."""
    x = (rgb.astype(np.float32) - np.float32(0.5 * 255)) / np.float32(0.5 * 255)
    return np.moveaxis(x, -1, -3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path(__file__).resolve().parent / "model")
    parser.add_argument("--out", type=Path, default=Path("target/apollo-reference"))
    args = parser.parse_args()
    failures = []

    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        ha = apollo.generate(Path(a), 0)
        hb = apollo.generate(Path(b), 0)
        if ha != hb:
            failures.append("two generations with seed 0 differ")
        for name, digest in ha.items():
            mine = (args.model / name).read_bytes()
            if hashlib.sha256(mine).hexdigest() != digest:
                failures.append(f"{args.model / name} is not what generate.py writes; regenerate it")

    cc = apollo.ClipConfig()
    weights = apollo.load_weights(args.model)
    session = ort.InferenceSession(str(args.model / "vision_encoder.onnx"), providers=["CPUExecutionProvider"])
    rs = np.random.RandomState(7)
    two = normalise(rs.randint(0, 256, (2, 4, cc.image_size, cc.image_size, 3)).astype(np.uint8))
    got = session.run(None, {"pixel_values": two})[0]
    ref = apollo.reference_clip(cc, 64, weights, two)
    diff = float(np.abs(got - ref).max())
    print(f"clip encoder, 2 random clips: ONNX Runtime vs numpy reference max |diff| {diff:.2e} "
          f"(values up to {np.abs(ref).max():.2f}), shape {list(got.shape)}")
    if got.shape != (2, cc.clip_tokens, 64) or diff > TOLERANCE:
        failures.append(f"clip encoder differs from the reference by {diff}")
    alone = session.run(None, {"pixel_values": two[1:]})[0]
    if float(np.abs(alone[0] - got[1]).max()) > 1e-5:
        failures.append("a clip's tokens depend on the other clip in the batch")

    clip = frames()
    tokens = apollo.reference_clip(cc, 64, weights, normalise(clip)[None])[0]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "clip.json").write_text(json.dumps({
        "size": cc.image_size,
        "frames": [f.reshape(-1).tolist() for f in clip],
        "tokens": [float(v) for v in tokens.reshape(-1)],
        "clip_tokens": cc.clip_tokens,
        "hidden": 64,
    }))
    print(f"wrote {args.out / 'clip.json'}: 4 frames and the reference's {cc.clip_tokens} tokens")
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
