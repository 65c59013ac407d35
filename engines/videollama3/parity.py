#!/usr/bin/env python3
"""The VideoLLaMA3 parity oracle: transformers' own VideoLLaMA3 on decoded clips, written for edgevlm.

    .venv-export/bin/python engines/videollama3/parity.py \
        --checkpoint target/videollama3-reduced/checkpoint --out target/videollama3-reduced/parity

For each clip (x264-encoded GStreamer test patterns, decoded to RGB by GStreamer: static, one
object moving, a scene cut, a 4:3 source, and a frame count that makes the processor shrink the
frames) it runs the checkpoint's processor and model and writes what tests/videollama3_parity.rs
compares edgevlm with:

  frames.rgb             the decoded source frames, uint8 [T, H0, W0, 3] (both sides start here)
  pixel_values.f32       the processor's normalised frames, unpatchified to [T, 3, H, W]
  vision.f32             get_video_features, [T * (H/28) * (W/28), hidden], every token
  offline_logits.f32     [33, vocab]: after the offline prompt, then after each greedy token
  followup_logits.f32    [33, vocab]: the same for a follow-up in the same conversation
  stream_logits.f32      [33, vocab]: the streaming (live) format, one-shot
  case.json              geometry, timestamps, the compression mask, prompt ids, greedy tokens,
                         questions, and the exact strings the ids came from

Greedy decoding runs 32 tokens with no stop token on both sides, so each step is compared.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

SYSTEM = "You are a helpful assistant."
QUESTION = "What is moving in the video, and where does it go?"
FOLLOW_UP = "Which colour is it?"
NEW_TOKENS = 32

# name -> (list of (gst pattern, frames), width, height)
CLIPS = {
    "static": ([("smpte", 6)], 1280, 720),
    "moving": ([("ball", 8)], 1280, 720),
    "cut": ([("smpte", 4), ("ball", 4)], 1280, 720),
    "four_three": ([("ball", 6)], 640, 480),
    "shrink": ([("ball", 24)], 640, 360),
}


def decode_clip(pattern: str, frames: int, width: int, height: int) -> np.ndarray:
    """x264-encodes `frames` test-pattern frames at 1 fps and decodes them back to RGB24."""
    if shutil.which("gst-launch-1.0") is None:
        raise SystemExit("parity.py: gst-launch-1.0 not found (scripts/setup.sh installs GStreamer)")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "frames.rgb"
        # Motion of the ball pattern follows the frame count, so at 1 fps it moves visibly per frame.
        cmd = ["gst-launch-1.0", "-q", "videotestsrc", f"pattern={pattern}", f"num-buffers={frames}",
               "animation-mode=frames", "!", f"video/x-raw,width={width},height={height},framerate=1/1",
               "!", "x264enc", "speed-preset=ultrafast", "key-int-max=30", "!", "h264parse", "!", "avdec_h264",
               "!", "videoconvert", "!", "video/x-raw,format=RGB", "!", "filesink", f"location={raw}"]
        subprocess.run(cmd, check=True)
        data = np.fromfile(raw, dtype=np.uint8)
    # GStreamer pads RGB rows to 4 bytes; the sizes used here are multiples of 4 wide.
    if data.size != frames * height * width * 3:
        raise SystemExit(f"parity.py: {pattern} decoded to {data.size} bytes, expected {frames}x{width}x{height}x3")
    return data.reshape(frames, height, width, 3)


def unpatchify(patches: torch.Tensor, t: int, gh: int, gw: int, m: int, p: int) -> torch.Tensor:
    """The processor's patch rows (merge-block order) back to [T, 3, H, W]."""
    x = patches.reshape(t, gh // m, gw // m, m, m, 3, p, p)       # (t, hb, wb, mh, mw, C, py, px)
    x = x.permute(0, 5, 1, 3, 6, 2, 4, 7)                         # (t, C, hb, mh, py, wb, mw, px)
    return x.reshape(t, 3, gh * p, gw * p)


def greedy(model, inputs: dict, input_ids: torch.Tensor) -> tuple[list[int], np.ndarray]:
    """32 greedy tokens with no stop token; the logits each token was chosen from."""
    out = model.generate(**{**inputs, "input_ids": input_ids,
                            "attention_mask": torch.ones_like(input_ids)},
                         max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                         eos_token_id=None, pad_token_id=0, output_logits=True,
                         return_dict_in_generate=True)
    tokens = out.sequences[0, input_ids.shape[1]:].tolist()
    logits = torch.stack([lg[0] for lg in out.logits]).float().numpy()
    # The logits after the last token, which generate never computes: one more forward pass.
    full = torch.cat([input_ids, out.sequences[:, input_ids.shape[1]:]], dim=1)
    last = model(**{**inputs, "input_ids": full, "attention_mask": torch.ones_like(full)}).logits[0, -1]
    return tokens, np.concatenate([logits, last[None].float().numpy()])


def margins(logits: np.ndarray) -> list[float]:
    top = np.sort(logits, axis=1)[:, -2:]
    return [float(x) for x in (top[:, 1] - top[:, 0])]


def run_case(name: str, spec, model, processor, out: Path) -> dict:
    from transformers.video_utils import VideoMetadata

    parts, width, height = spec
    frames = np.concatenate([decode_clip(p, n, width, height) for p, n in parts])
    t = frames.shape[0]
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    frames.tofile(d / "frames.rgb")
    video = torch.from_numpy(frames).permute(0, 3, 1, 2).contiguous()        # [T, 3, H0, W0] uint8
    meta = VideoMetadata(total_num_frames=t, fps=1.0, frames_indices=list(range(t)))
    tok = processor.tokenizer

    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": QUESTION}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], videos=[video], video_metadata=[meta], return_tensors="pt")
    grid = inputs["video_grid_thw"][0].tolist()
    m = int(inputs["video_merge_sizes"][0])
    p = processor.video_processor.patch_size
    gh, gw = grid[1], grid[2]
    pixels = unpatchify(inputs["pixel_values_videos"], t, gh, gw, m, p)
    pixels.numpy().astype("<f4").tofile(d / "pixel_values.f32")
    mask = inputs["video_compression_mask"].tolist()
    n_tok = (gh // m) * (gw // m)
    kept = [int(sum(mask[i * n_tok:(i + 1) * n_tok])) for i in range(t)]
    timestamps = [float(x) for x in meta.timestamps]
    prompt_ids = inputs["input_ids"][0].tolist()
    video_inputs = {k: inputs[k] for k in ("pixel_values_videos", "video_grid_thw", "video_merge_sizes",
                                           "video_compression_mask")}
    with torch.no_grad():
        vision = model.model.get_video_features(inputs["pixel_values_videos"], inputs["video_grid_thw"],
                                                inputs["video_merge_sizes"]).pooler_output[0]
        vision.float().numpy().astype("<f4").tofile(d / "vision.f32")

        offline_tokens, offline_logits = greedy(model, video_inputs, inputs["input_ids"])
        offline_logits.astype("<f4").tofile(d / "offline_logits.f32")

        # The follow-up continues the same token sequence: the 32 answer tokens (cut at the limit,
        # so its turn is closed with <|im_end|>\n), then the next user turn.
        follow_text = f"<|im_end|>\n<|im_start|>user\n{FOLLOW_UP}<|im_end|>\n<|im_start|>assistant\n"
        follow_ids = tok(follow_text, add_special_tokens=False)["input_ids"]
        ids2 = torch.tensor([prompt_ids + offline_tokens + follow_ids])
        follow_tokens, follow_logits = greedy(model, video_inputs, ids2)
        follow_logits.astype("<f4").tofile(d / "followup_logits.f32")

        # The streaming format the live cache keeps (docs/ENGINES.md, "VideoLLaMA3 prompt"): the
        # system turn, one stream item per frame with its kept tokens, then the question.
        pad = processor.video_token
        stream_text = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
        stream_text += "".join(f"<|stream_start|>stream\n{pad * k}\n<|stream_end|>\n" for k in kept)
        stream_text += f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
        stream_ids = tok(stream_text, add_special_tokens=False)["input_ids"]
        stream_tokens, stream_logits = greedy(model, video_inputs, torch.tensor([stream_ids]))
        stream_logits.astype("<f4").tofile(d / "stream_logits.f32")

    case = {
        "name": name, "frames": t, "source_width": width, "source_height": height,
        "width": gw * p, "height": gh * p, "tokens_per_frame": n_tok, "hidden": int(vision.shape[-1]),
        "vocab": int(offline_logits.shape[1]), "timestamps": timestamps, "mask": "".join("1" if b else "0" for b in mask),
        "kept": kept, "system": SYSTEM, "question": QUESTION, "follow_up": FOLLOW_UP,
        "offline_text": text, "offline_ids": prompt_ids, "offline_tokens": offline_tokens,
        "followup_ids": follow_ids, "followup_tokens": follow_tokens,
        "stream_text": stream_text, "stream_ids": stream_ids, "stream_tokens": stream_tokens,
        "new_tokens": NEW_TOKENS,
        "min_top2_margin": {"offline": min(margins(offline_logits)), "followup": min(margins(follow_logits)),
                            "stream": min(margins(stream_logits))},
    }
    (d / "case.json").write_text(json.dumps(case, indent=1))
    print(f"{name}: {t} frames {width}x{height} -> {gw * p}x{gh * p} ({n_tok} tokens/frame), "
          f"kept {sum(kept)}/{t * n_tok}, prompt {len(prompt_ids)} ids, "
          f"min top-2 logit margin {min(case['min_top2_margin'].values()):.2e}")
    return case


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--clips", nargs="*", default=list(CLIPS), choices=list(CLIPS))
    args = ap.parse_args()
    torch.set_num_threads(2)
    from transformers import AutoProcessor, VideoLlama3ForConditionalGeneration

    model = VideoLlama3ForConditionalGeneration.from_pretrained(args.checkpoint, dtype=torch.float32,
                                                               attn_implementation="eager").eval()
    processor = AutoProcessor.from_pretrained(args.checkpoint)
    args.out.mkdir(parents=True, exist_ok=True)
    cases = [run_case(name, CLIPS[name], model, processor, args.out) for name in args.clips]
    (args.out / "index.json").write_text(json.dumps([c["name"] for c in cases]))


if __name__ == "__main__":
    main()
