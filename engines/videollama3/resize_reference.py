#!/usr/bin/env python3
"""Fixtures for edgevlm's resize (crates/resize/src/lib.rs): torch's uint8 antialiased bicubic and Lanczos.

    .venv-export/bin/python engines/videollama3/resize_reference.py [--out target/resize-reference]

The reference VideoLLaMA3 video processor (transformers, `VideoLlama3VideoProcessor`) resizes each
decoded RGB uint8 frame with torchvision's `resize(..., interpolation=BICUBIC, antialias=True)`;
on the CPU torchvision hands the uint8 tensor straight to `torch.nn.functional.interpolate(
mode="bicubic", antialias=True, align_corners=False)`, i.e. PyTorch's `_upsample_bicubic2d_aa` on
uint8 (the PIL-SIMD-like fixed-point kernel on AVX2 machines). This script writes source frames and
torch's output for each (source, target) pair; tests/ingest_resize.rs checks the Rust resizer
against them byte for byte. SmolVLM2's video processor resizes with LANCZOS (its `resample` is
PIL's 1), which torchvision >= 0.27 also runs natively on uint8 CPU tensors: those cases are here
too, with the processor's two steps (longest edge to 512, then 512 x 512).

Sources: x264-encoded videotestsrc patterns decoded by GStreamer (needs gst-launch-1.0 with x264enc
and avdec_h264) and seeded synthetic photo-like images (gradients, blobs, hard edges, fine stripes,
noise, saturated areas). Layout of the output directory:

    manifest.json           {"torch": ..., "cases": [{"source", "src_w", "src_h", "dst_w",
                             "dst_h", "output"}, ...], "sources": {name: {"width", "height"}}}
    src-<name>.rgb          packed RGB24, no row padding
    out-<name>-<W>x<H>.rgb  packed RGB24, torch's output

Deterministic: the synthetic images are seeded and the decoded frames are stored, so the Rust test
does not depend on the encoder. Rewrites the directory only when the inputs changed (a stamp file).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torchvision
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as tvF

REPO = Path(__file__).resolve().parents[2]
SEED = 20240611
FORMAT_VERSION = 2

# (pattern, width, height): decoded by GStreamer from x264 (4:2:0 needs even sizes).
GST_SOURCES = [
    ("smpte", 1920, 1080),
    ("ball", 1920, 1080),
    ("snow", 1280, 720),
    ("smpte", 1280, 720),
    ("ball", 640, 480),
    ("smpte", 320, 240),
]
# (width, height) of synthetic photo-like images.
SYNTH_SOURCES = [(1920, 1080), (1280, 720), (640, 480), (320, 240), (100, 60), (333, 211), (336, 196)]

# Target sizes per source size. Model geometries (the `[vision]` rule, docs/CONFIG.md) plus edge cases: upscale (100x60),
# mixed (333x211 -> 308x224: width down, height up), one axis only (640x480 -> 640x224 and
# 308x480), identity (336x196 -> 336x196).
TARGETS = {
    (1920, 1080): [(336, 196), (616, 336), (392, 224), (112, 56)],
    (1280, 720): [(616, 336), (336, 196), (1288, 728), (112, 56)],
    (640, 480): [(308, 224), (224, 168), (640, 224), (308, 480)],
    (320, 240): [(224, 168), (112, 56), (336, 252)],
    (100, 60): [(336, 196), (112, 56), (56, 28)],
    (333, 211): [(308, 224), (224, 168), (112, 56)],
    (336, 196): [(336, 196), (335, 197)],
}

# Lanczos targets (SmolVLM2's video processor: the longest edge to 512 keeping the aspect ratio,
# the other edge truncated and made even, then 512 x 512), per source size.
LANCZOS_TARGETS = {
    (1920, 1080): [(512, 288)],
    (1280, 720): [(512, 288), (512, 512)],
    (640, 480): [(512, 384), (512, 512)],
    (320, 240): [(512, 384)],
    (100, 60): [(512, 308), (512, 512)],
    (336, 196): [(512, 512)],
}
LANCZOS_SOURCES = {(512, 288), (512, 384)}  # second steps: 512 x 512 from the first steps' sizes


def gst_frames(pattern: str, width: int, height: int, count: int, tmp: Path) -> list[np.ndarray]:
    """`count` frames of a videotestsrc pattern, through x264 and back, as RGB arrays."""
    raw = tmp / f"{pattern}-{width}x{height}.rgb"
    cmd = [
        "gst-launch-1.0", "-q",
        "videotestsrc", f"pattern={pattern}", f"num-buffers={count}",
        "!", f"video/x-raw,format=I420,width={width},height={height},framerate=30/1",
        "!", "x264enc", "threads=1", "!", "avdec_h264", "!", "videoconvert",
        "!", "video/x-raw,format=RGB", "!", "filesink", f"location={raw}",
    ]
    subprocess.run(cmd, check=True)
    data = np.fromfile(raw, dtype=np.uint8)
    stride = (width * 3 + 3) // 4 * 4  # GStreamer pads RGB rows to 4 bytes
    frame_bytes = stride * height
    if data.size != frame_bytes * count:
        raise SystemExit(f"{' '.join(cmd)}: {data.size} bytes, expected {frame_bytes * count}")
    frames = data.reshape(count, height, stride)[:, :, : width * 3]
    return [np.ascontiguousarray(f.reshape(height, width, 3)) for f in frames]


def synthetic(width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """A photo-like image: smooth gradients and blobs, hard-edged shapes, stripes, noise, clipping."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    u, v = x / max(width - 1, 1), y / max(height - 1, 1)
    img = np.zeros((height, width, 3))
    for c in range(3):
        a, b = rng.uniform(-1, 1, 2)
        img[..., c] = 128 + 90 * (a * u + b * v)
        for _ in range(4):  # soft blobs
            cx, cy = rng.uniform(0, 1, 2)
            r = rng.uniform(0.05, 0.3)
            img[..., c] += rng.uniform(-80, 80) * np.exp(-((u - cx) ** 2 + (v - cy) ** 2) / (2 * r * r))
    for _ in range(12):  # hard-edged rectangles and discs, some pure black / white
        colour = rng.choice([0.0, 255.0], 3) if rng.uniform() < 0.4 else rng.uniform(0, 255, 3)
        cx, cy = rng.uniform(0, 1, 2)
        rw, rh = rng.uniform(0.02, 0.25, 2)
        if rng.uniform() < 0.5:
            m = (np.abs(u - cx) < rw) & (np.abs(v - cy) < rh)
        else:
            m = ((u - cx) * width) ** 2 + ((v - cy) * height) ** 2 < (rw * min(width, height)) ** 2
        img[m] = colour
    # Fine stripes (1-3 px) in one band: the aliasing stress case.
    x0, x1 = int(0.6 * width), int(0.9 * width)
    y0, y1 = int(0.1 * height), int(0.35 * height)
    period = int(rng.integers(2, 7))
    stripes = ((np.arange(x1 - x0) // max(period // 2, 1)) % 2 * 255.0)[None, :, None]
    img[y0:y1, x0:x1] = stripes
    img += rng.normal(0, 6, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def torch_resize(frame: np.ndarray, width: int, height: int,
                 interpolation=InterpolationMode.BICUBIC) -> np.ndarray:
    """The reference: tvF.resize on a uint8 [T, 3, H, W] tensor, bicubic (or Lanczos), antialias (CPU)."""
    hwc = torch.from_numpy(frame)
    # As a decoder hands it over ([T, H, W, 3] permuted: channels-last strides) and contiguous
    # channels-first; both must give the same bytes (different kernels inside torch).
    views = [hwc.permute(2, 0, 1)[None], hwc.permute(2, 0, 1).contiguous()[None]]
    outs = [
        tvF.resize(t, [height, width], interpolation=interpolation, antialias=True)
        for t in views
    ]
    if not torch.equal(outs[0], outs[1]):
        raise SystemExit(f"torch layouts disagree for {frame.shape} -> {width}x{height}")
    return np.ascontiguousarray(outs[0][0].permute(1, 2, 0).numpy())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "target" / "resize-reference")
    ap.add_argument("--force", action="store_true", help="regenerate even if the stamp matches")
    args = ap.parse_args()
    out: Path = args.out

    script = Path(__file__).read_bytes()
    stamp = hashlib.sha256(
        script + f"{torch.__version__}|{torchvision.__version__}|{torch.backends.cpu.get_cpu_capability()}".encode()
    ).hexdigest()
    stamp_file = out / "stamp"
    if not args.force and stamp_file.is_file() and stamp_file.read_text().strip() == stamp:
        print(f"resize fixtures up to date in {out}")
        return
    if shutil.which("gst-launch-1.0") is None:
        raise SystemExit("gst-launch-1.0 not found (scripts/setup.sh installs GStreamer)")

    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)
    sources: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pattern, w, h in GST_SOURCES:
            frames = gst_frames(pattern, w, h, 3, Path(tmp))
            sources[f"gst-{pattern}-{w}x{h}"] = frames[2]  # a P/B frame, not the first I frame
    for w, h in SYNTH_SOURCES:
        sources[f"synth-{w}x{h}"] = synthetic(w, h, rng)

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cases = []
    for name, frame in sources.items():
        h, w = frame.shape[:2]
        frame.tofile(out / f"src-{name}.rgb")
        for dw, dh in TARGETS[(w, h)]:
            res = torch_resize(frame, dw, dh)
            fname = f"out-{name}-{dw}x{dh}.rgb"
            res.tofile(out / fname)
            cases.append(
                {"source": f"src-{name}.rgb", "src_w": w, "src_h": h, "dst_w": dw, "dst_h": dh, "output": fname,
                 "kernel": "bicubic"}
            )
        for dw, dh in LANCZOS_TARGETS.get((w, h), []):
            res = torch_resize(frame, dw, dh, InterpolationMode.LANCZOS)
            fname = f"out-{name}-{dw}x{dh}-lanczos.rgb"
            res.tofile(out / fname)
            cases.append(
                {"source": f"src-{name}.rgb", "src_w": w, "src_h": h, "dst_w": dw, "dst_h": dh, "output": fname,
                 "kernel": "lanczos"}
            )
            if (dw, dh) in LANCZOS_SOURCES:
                # The processor's second step, from the first step's output.
                second = torch_resize(res, 512, 512, InterpolationMode.LANCZOS)
                src_name = f"src-{name}-{dw}x{dh}-lanczos.rgb"
                res.tofile(out / src_name)
                sname = f"out-{name}-{dw}x{dh}-lanczos-512x512.rgb"
                second.tofile(out / sname)
                cases.append(
                    {"source": src_name, "src_w": dw, "src_h": dh, "dst_w": 512, "dst_h": 512, "output": sname,
                     "kernel": "lanczos"}
                )
    manifest = {
        "format": FORMAT_VERSION,
        "generator": "engines/videollama3/resize_reference.py",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
        "sources": {name: {"width": f.shape[1], "height": f.shape[0]} for name, f in sources.items()},
        "cases": cases,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    stamp_file.write_text(stamp + "\n")
    print(f"wrote {len(cases)} resize cases from {len(sources)} sources to {out}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
