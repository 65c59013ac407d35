#!/usr/bin/env python3
"""GStreamer's in-pipeline scaling vs the reference resize (torch uint8 antialiased bicubic).

    .venv-export/bin/python engines/videollama3/resize_compare.py [--frames 30] [--work DIR]

Measures what edgevlm's `rtsp`/`file` templates deliver today against what the VideoLLaMA3
processor computes, on the same decoded frames:

- GStreamer: `decodebin ! videorate drop-only=true ! videoconvertscale add-borders=false !
  capsfilter(video/x-raw,format=RGB,width=W,height=H,pixel-aspect-ratio=1/1) ! appsink`, the
  element chain of pipelines/rtsp.pipeline and file.pipeline with the properties session.rs sets
  (none on the scaler: method bilinear, dither bayer, chroma linear, by default);
- reference: the same decoded frames converted to RGB at the source size by `videoconvert`, then
  `torchvision.transforms.v2.functional.resize(BICUBIC, antialias=True)` on the uint8 tensor.

For each clip it prints per-pixel differences (max and mean |diff| in grey levels, share of bytes
and of pixels differing) and the effect on DiffFP masks: on consecutive frames, a 28x28x3 block is
kept iff the sum of |delta u8| over its 2352 values exceeds 117.6 (mean |delta normalised| * 255
> 0.1 with normalised = 2u/255 - 1); the first frame is kept whole and a frame keeps at least its
top-left block. Extra rows isolate the causes: converting to RGB first and scaling with
`videoscale` (the same bilinear method), and other GStreamer methods.

It also times torch's resize per frame on one thread (the Rust figure is `cargo bench --bench
resize`). Clips (1920x1080 and 1280x720 at 30 fps, x264): videotestsrc `ball` (a moving ball on a
still background), `smpte` scrolling 4 px per frame, and a seeded photo-like image panned 3 px per
frame with sensor noise (engines/videollama3/resize_reference.py's generator), and a still photo-like
scene (no noise) with one textured disc moving 8 px per frame.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as tvF

sys.path.insert(0, str(Path(__file__).resolve().parent))
from resize_reference import synthetic  # noqa: E402

BLOCK = 28
THRESHOLD = 117.6  # sum of |delta u8| over a 28x28x3 block
TIMING = [((1920, 1080), (336, 196)), ((1280, 720), (616, 336)), ((640, 480), (308, 224))]
# (clip source size, target): 1080p at a 180-frame window, 720p at a 60-frame one (the `[vision]` rule, docs/CONFIG.md).
GEOMETRIES = [((1920, 1080), (336, 196)), ((1280, 720), (616, 336))]


def gst(*args: str) -> None:
    subprocess.run(["gst-launch-1.0", "-q", *args], check=True)


def read_rgb(path: Path, width: int, height: int) -> np.ndarray:
    """Frames written by filesink: RGB rows padded to 4 bytes."""
    data = np.fromfile(path, dtype=np.uint8)
    stride = (width * 3 + 3) // 4 * 4
    n = data.size // (stride * height)
    if n * stride * height != data.size or n == 0:
        raise SystemExit(f"{path}: {data.size} bytes is not a whole number of {width}x{height} frames")
    return np.ascontiguousarray(data.reshape(n, height, stride)[:, :, : width * 3].reshape(n, height, width, 3))


def make_clips(work: Path, w: int, h: int, frames: int) -> dict[str, Path]:
    clips = {}
    enc = ["!", "x264enc", "threads=1", "!", "mp4mux", "!", "filesink"]  # threads=1: deterministic
    for name, props in [("ball", ["pattern=ball"]), ("smpte-scroll", ["pattern=smpte", "horizontal-speed=4"])]:
        out = work / f"{name}-{w}x{h}.mp4"
        gst("videotestsrc", *props, f"num-buffers={frames}", "!",
            f"video/x-raw,format=I420,width={w},height={h},framerate=30/1", *enc, f"location={out}")
        clips[name] = out
    # Photo-like pan with sensor noise.
    rng = np.random.default_rng(7)
    big = synthetic(w + 3 * frames + 8, h + frames + 8, rng).astype(np.int16)
    raw = work / f"pan-{w}x{h}.rgb"
    with open(raw, "wb") as f:
        for t in range(frames):
            crop = big[t : t + h, 3 * t : 3 * t + w]
            noisy = np.clip(crop + rng.normal(0, 2, crop.shape).round(), 0, 255).astype(np.uint8)
            f.write(noisy.tobytes())
    out = work / f"pan-{w}x{h}.mp4"
    gst("filesrc", f"location={raw}", "!",
        "rawvideoparse", "format=rgb", f"width={w}", f"height={h}", "framerate=30/1",
        "!", "videoconvert", "!", "video/x-raw,format=I420", *enc, f"location={out}")
    clips["photo-pan"] = out
    # A still photo-like scene (no sensor noise) with one object moving across it.
    still = synthetic(w, h, rng)
    raw = work / f"still-{w}x{h}.rgb"
    yy, xx = np.mgrid[0:h, 0:w]
    radius = h // 10
    with open(raw, "wb") as f:
        for t in range(frames):
            cx, cy = w // 5 + 8 * t, h // 2 + int(h / 6 * np.sin(t / 5))
            disc = (xx - cx) ** 2 + (yy - cy) ** 2 < radius**2
            frame = still.copy()
            frame[disc] = np.stack([(xx[disc] * 7) % 256, (yy[disc] * 5) % 256, np.full(disc.sum(), 200)], -1)
            f.write(frame.tobytes())
    out = work / f"still-object-{w}x{h}.mp4"
    gst("filesrc", f"location={raw}", "!",
        "rawvideoparse", "format=rgb", f"width={w}", f"height={h}", "framerate=30/1",
        "!", "videoconvert", "!", "video/x-raw,format=I420", *enc, f"location={out}")
    clips["photo-still-object"] = out
    return clips


def gst_scaled(clip: Path, work: Path, tag: str, w: int, h: int, chain: list[str]) -> np.ndarray:
    out = work / f"{clip.stem}-{tag}-{w}x{h}.rgb"
    caps = f"video/x-raw,format=RGB,width={w},height={h},pixel-aspect-ratio=1/1"
    gst("filesrc", f"location={clip}", "!", "decodebin", "!", *chain, "!", "capsfilter", f"caps={caps}",
        "!", "filesink", f"location={out}")
    return read_rgb(out, w, h)


def source_rgb(clip: Path, work: Path, w: int, h: int) -> np.ndarray:
    out = work / f"{clip.stem}-rgb.rgb"
    gst("filesrc", f"location={clip}", "!", "decodebin", "!", "videoconvert", "!",
        "video/x-raw,format=RGB", "!", "filesink", f"location={out}")
    return read_rgb(out, w, h)


def torch_resize(frames: np.ndarray, w: int, h: int) -> np.ndarray:
    t = torch.from_numpy(frames).permute(0, 3, 1, 2)  # [T, 3, H, W], channels-last strides
    r = tvF.resize(t, [h, w], interpolation=InterpolationMode.BICUBIC, antialias=True)
    return np.ascontiguousarray(r.permute(0, 2, 3, 1).numpy())


def masks(frames: np.ndarray) -> np.ndarray:
    """DiffFP keep masks [T, rows, cols] on consecutive frames."""
    t, h, w, _ = frames.shape
    rows, cols = h // BLOCK, w // BLOCK
    f = frames[:, : rows * BLOCK, : cols * BLOCK].astype(np.int32)
    sad = np.abs(np.diff(f, axis=0)).reshape(t - 1, rows, BLOCK, cols, BLOCK, 3).sum(axis=(2, 4, 5))
    keep = np.ones((t, rows, cols), dtype=bool)
    keep[1:] = sad > THRESHOLD
    empty = ~keep.reshape(t, -1).any(axis=1)
    keep[empty, 0, 0] = True
    return keep


def pixel_stats(a: np.ndarray, b: np.ndarray) -> str:
    d = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return (f"max {int(d.max()):3d}  mean {d.mean():6.2f}  bytes differing {100 * (d > 0).mean():5.1f}%  "
            f"pixels differing {100 * (d.max(axis=-1) > 0).mean():5.1f}%  |diff|>8: {100 * (d > 8).mean():5.1f}%")


def mask_stats(ref: np.ndarray, other: np.ndarray) -> str:
    r, o = ref[1:], other[1:]  # the first frame is kept whole either way
    differ = int((r != o).sum())
    return (f"mask bits differing {differ}/{r.size} ({100 * differ / r.size:.1f}%): kept ref {int(r.sum())}, "
            f"this {int(o.sum())}; ref-only {int((r & ~o).sum())}, this-only {int((o & ~r).sum())}; "
            f"frames with any difference {int((r != o).any(axis=(1, 2)).sum())}/{r.shape[0]}")


def timing() -> None:
    torch.set_num_threads(1)
    print("== torch resize per frame (1 thread, tvF.resize bicubic antialias, uint8 [1,3,H,W])")
    rng = np.random.default_rng(1)
    for (sw, sh), (dw, dh) in TIMING:
        frame = rng.integers(0, 256, (sh, sw, 3), dtype=np.uint8)
        for layout, t in [("channels-last (decoder HWC permuted)", torch.from_numpy(frame).permute(2, 0, 1)[None]),
                          ("contiguous CHW", torch.from_numpy(frame).permute(2, 0, 1).contiguous()[None])]:
            def run() -> None:
                tvF.resize(t, [dh, dw], interpolation=InterpolationMode.BICUBIC, antialias=True)
            for _ in range(5):
                run()
            samples = []
            for _ in range(100):
                t0 = time.perf_counter()
                run()
                samples.append(time.perf_counter() - t0)
            print(f"{sw}x{sh} -> {dw}x{dh} {layout:38s} median {1e3 * statistics.median(samples):7.3f} ms  "
                  f"min {1e3 * min(samples):7.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--work", type=Path, help="keep the clips and decoded frames here")
    ap.add_argument("--no-timing", action="store_true")
    args = ap.parse_args()
    if not args.no_timing:
        timing()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for (sw, sh), (dw, dh) in GEOMETRIES:
            clips = make_clips(work, sw, sh, args.frames)
            for name, clip in clips.items():
                print(f"\n== {name} {sw}x{sh} -> {dw}x{dh}, {args.frames} frames")
                src = source_rgb(clip, work, sw, sh)
                ref = torch_resize(src, dw, dh)
                ref_mask = masks(ref)
                variants = {
                    "edgevlm template (videoconvertscale, bilinear)": [
                        "videorate", "drop-only=true", "!", "videoconvertscale", "add-borders=false"],
                    "  RGB first, then videoscale bilinear": [
                        "videoconvert", "!", "video/x-raw,format=RGB", "!", "videoscale", "add-borders=false"],
                    "  videoconvertscale method=catrom": [
                        "videoconvertscale", "add-borders=false", "method=catrom"],
                    "  videoconvertscale method=lanczos": [
                        "videoconvertscale", "add-borders=false", "method=lanczos"],
                }
                for i, (label, chain) in enumerate(variants.items()):
                    out = gst_scaled(clip, work, f"v{i}", dw, dh, chain)
                    if out.shape != ref.shape:
                        raise SystemExit(f"{label}: {out.shape} frames vs reference {ref.shape}")
                    print(f"{label:48s} {pixel_stats(out, ref)}")
                    print(f"{'':48s} {mask_stats(ref_mask, masks(out))}")
                print(f"{'reference kept per frame (after the first)':48s} "
                      f"{ref_mask[1:].sum(axis=(1, 2)).mean():.1f} of {ref_mask[0].size}")


if __name__ == "__main__":
    main()
