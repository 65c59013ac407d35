#!/usr/bin/env python3
"""transformers' own speed on the reduced VideoLLaMA3: the reference side of benches/videollama3.rs.

    scripts/videollama3-parity.sh        # once: builds target/videollama3-reduced/
    .venv-export/bin/python engines/videollama3/bench_reference.py [--root target/videollama3-reduced]

One intra-op thread (torch.set_num_threads(1)), float32, eager attention, CPU: the same settings
as the Rust bench (ONNX Runtime with one intra-op thread). What it measures, on the "moving" clip
(8 decoded 1280x720 frames, resized by the processor to 364x196, 91 tokens per frame):

  decode_step      one `model(input_ids=[[tok]], past_key_values=past)` call and its argmax with
                   299 positions cached (so the step attends over 300), median of many; the cache
                   is cropped back after each call. Also `generate_step`: the per-token time inside
                   `generate` ((T(1 + K) - T(1)) / K greedy tokens from a 268-position prompt).
  ttft_offline     a request that re-encodes: apply_chat_template + processor (resize, normalise,
                   DiffFP mask) + generate(max_new_tokens=1) for the offline question over the clip.
  ttft_reencode/N  the same over N frames (the clip's frames cycled, 1 fps), the processor told to
                   keep the clip's geometry (size.longest_edge scaled by N / 8), so both sides encode
                   N x 91 tokens; the processor's and generate's shares are reported too.

Medians, with minima beside them (on a shared machine contention only adds time). Prints a table
and writes target/videollama3-reduced/bench_reference.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

CLIP = "moving"
WINDOWS = (60, 180)
DECODE_CACHE = 300  # positions the decode step attends over (299 cached + the new token)
GENERATE_STEPS = 64


def filler(n: int) -> list[int]:
    """Token ids that pad a prompt to a length (the same rule as benches/videollama3.rs)."""
    return [(i * 7919) % 5000 + 100 for i in range(n)]


def timed(fn, repeats: int) -> tuple[list[float], object]:
    out = None
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


def ms(x: float) -> float:
    return x * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path("target/videollama3-reduced"))
    ap.add_argument("--decode-repeats", type=int, default=300)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from transformers import AutoProcessor, VideoLlama3ForConditionalGeneration
    from transformers.video_utils import VideoMetadata

    case_dir = args.root / "parity" / CLIP
    if not (case_dir / "case.json").is_file():
        raise SystemExit(f"{case_dir}/case.json missing: run scripts/videollama3-parity.sh first")
    case = json.loads((case_dir / "case.json").read_text())
    t, sh, sw = case["frames"], case["source_height"], case["source_width"]
    src = np.fromfile(case_dir / "frames.rgb", dtype=np.uint8).reshape(t, sh, sw, 3)
    ckpt = args.root / "checkpoint"
    model = VideoLlama3ForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32,
                                                               attn_implementation="eager").eval()
    processor = AutoProcessor.from_pretrained(ckpt)
    base_max = processor.video_processor.size["longest_edge"]
    messages = [{"role": "system", "content": case["system"]},
                {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": case["question"]}]}]

    def request(frames: torch.Tensor, size: dict | None):
        """apply_chat_template + processor + generate(1): what a request that re-encodes runs."""
        n = frames.shape[0]
        t0 = time.perf_counter()
        meta = VideoMetadata(total_num_frames=n, fps=1.0, frames_indices=list(range(n)))
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        kw = {"videos_kwargs": {"size": size}} if size else {}
        inputs = processor(text=[text], videos=[frames], video_metadata=[meta], return_tensors="pt", **kw)
        t1 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=1, do_sample=False, pad_token_id=0)
        t2 = time.perf_counter()
        grid = inputs["video_grid_thw"][0].tolist()
        info = {
            "prompt": int(inputs["input_ids"].shape[1]),
            "kept": int(inputs["video_compression_mask"].sum()),
            "geometry": [grid[2] * 14, grid[1] * 14],
            "first_token": int(out[0, -1]),
        }
        return t1 - t0, t2 - t1, info

    results: dict = {"threads": torch.get_num_threads(), "torch": torch.__version__,
                     "transformers": __import__("transformers").__version__, "clip": CLIP}
    rows = []

    # ---- Decode step at ~300 positions.
    video = torch.from_numpy(src).permute(0, 3, 1, 2).contiguous()
    meta = VideoMetadata(total_num_frames=t, fps=1.0, frames_indices=list(range(t)))
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], videos=[video], video_metadata=[meta], return_tensors="pt")
    ids = inputs["input_ids"][0].tolist()
    assert ids == case["offline_ids"], "the processor's offline ids differ from case.json"
    video_inputs = {k: inputs[k] for k in ("pixel_values_videos", "video_grid_thw", "video_merge_sizes",
                                           "video_compression_mask")}
    cached = DECODE_CACHE - 1
    prompt = torch.tensor([ids + filler(cached - len(ids))])
    with torch.no_grad():
        out = model(**video_inputs, input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=True)
        past = out.past_key_values
        assert past.get_seq_length() == cached
        tok = torch.tensor([[int(out.logits[0, -1].argmax())]])

        def step():
            o = model(input_ids=tok, past_key_values=past, use_cache=True)
            nxt = int(o.logits[0, -1].argmax())
            past.crop(-1)
            return nxt

        for _ in range(20):
            step()
        step_times, _ = timed(step, args.decode_repeats)
        assert past.get_seq_length() == cached

        # The step inside generate: 1 + K tokens minus 1 token, from a prompt that puts the steps
        # around DECODE_CACHE positions.
        gp = torch.tensor([ids + filler(DECODE_CACHE - GENERATE_STEPS // 2 - len(ids))])

        def gen(k: int):
            return model.generate(**video_inputs, input_ids=gp, attention_mask=torch.ones_like(gp),
                                  max_new_tokens=k, min_new_tokens=k, do_sample=False, eos_token_id=None,
                                  pad_token_id=0)

        gen(2)
        one = statistics.median(timed(lambda: gen(1), 5)[0])
        many = statistics.median(timed(lambda: gen(1 + GENERATE_STEPS), 5)[0])
    results["decode_step_ms"] = ms(statistics.median(step_times))
    results["decode_step_min_ms"] = ms(min(step_times))
    results["generate_step_ms"] = ms((many - one) / GENERATE_STEPS)
    rows.append(("decode_step/cache_300 (model() + argmax)", results["decode_step_ms"],
                 f"{len(step_times)} calls, min {results['decode_step_min_ms']:.2f}"))
    rows.append(("decode_step in generate (~300 cached)", results["generate_step_ms"],
                 f"{GENERATE_STEPS} tokens from {gp.shape[1]}"))

    # ---- Offline question over the clip, re-encoded (processor + generate 1 token).
    request(video, None)
    runs = [request(video, None) for _ in range(10)]
    info = runs[-1][2]
    assert info["first_token"] == case["offline_tokens"][0], "first token differs from the oracle's"
    tot = [a + b for a, b, _ in runs]
    results["ttft_offline"] = {"ms": ms(statistics.median(tot)), "min_ms": ms(min(tot)),
                               "processor_ms": ms(statistics.median(a for a, _, _ in runs)),
                               "generate_ms": ms(statistics.median(b for _, b, _ in runs)), **info,
                               "frames": t, "runs": len(runs)}
    rows.append((f"ttft/offline/{t} frames", results["ttft_offline"]["ms"],
                 f"min {results['ttft_offline']['min_ms']:.1f}; "
                 f"processor {results['ttft_offline']['processor_ms']:.1f} + generate "
                 f"{results['ttft_offline']['generate_ms']:.1f}; prompt {info['prompt']}, kept {info['kept']}"))

    # ---- N frames re-encoded per request, at the clip's geometry.
    results["ttft_reencode"] = {}
    for n in WINDOWS:
        frames = video[torch.arange(n) % t].contiguous()
        size = {"shortest_edge": processor.video_processor.size["shortest_edge"],
                "longest_edge": base_max * n // t}
        repeats = 5 if n <= 60 else 3
        request(frames, size)
        runs = [request(frames, size) for _ in range(repeats)]
        info = runs[-1][2]
        assert info["geometry"] == [case["width"], case["height"]], info
        tot = [a + b for a, b, _ in runs]
        r = {"ms": ms(statistics.median(tot)), "min_ms": ms(min(tot)), "processor_ms": ms(statistics.median(a for a, _, _ in runs)),
             "generate_ms": ms(statistics.median(b for _, b, _ in runs)), **info, "frames": n, "runs": repeats}
        results["ttft_reencode"][str(n)] = r
        rows.append((f"ttft/reencode/{n} frames", r["ms"],
                     f"min {r['min_ms']:.1f}; processor {r['processor_ms']:.1f} + generate {r['generate_ms']:.1f}; "
                     f"prompt {info['prompt']}, kept {info['kept']}, first token {info['first_token']}"))

    print(f"transformers {results['transformers']}, torch {results['torch']}, {results['threads']} thread(s)")
    print(f"{'benchmark':44} {'ms':>10}  notes")
    for name, v, note in rows:
        print(f"{name:44} {v:10.2f}  {note}")
    out = args.root / "bench_reference.json"
    out.write_text(json.dumps(results, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
