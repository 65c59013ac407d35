#!/usr/bin/env python3
"""SmolVLM2 video prompts from transformers' own processor, for tests/smolvlm2_prompt.rs.

    .venv-export/bin/python engines/smolvlm2/prompt_reference.py [--out target/smolvlm2-prompt]

transformers' `SmolVLMProcessor` (the processor of HuggingFaceTB/SmolVLM2-*-Video-Instruct) turns a
chat with a video into text and ids: its chat template opens the user turn, and `<video>` becomes an
intro sentence (the frame count in words, the duration as `H:MM:SS`), then per frame
`\\nFrame from MM:SS:` and the frame as a global image of `image_seq_len` `<image>` tokens between
`<fake_token_around_image>` marks. No hub is reachable, so the tokenizer is the tiny model's
byte-level BPE (engines/tiny/model/tokenizer.json) with SmolVLM2's special tokens added: the ids
check that every special token, every visual span and every text chunk falls where the processor
puts it. Frame times come from `VideoMetadata` (frame index / fps), as the processor reads them.

Writes tokenizer.json and cases.json ({"image_seq_len", "cases": [{"name", "times", "duration",
"question", "text", "ids"}]}) under --out. Deterministic.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast
from transformers.models.smolvlm import SmolVLMImageProcessor, SmolVLMProcessor, SmolVLMVideoProcessor
from transformers.video_utils import VideoMetadata

ROOT = Path(__file__).resolve().parents[2]
SPECIAL = ["<end_of_utterance>", "<fake_token_around_image>", "<global-img>", "<video>"]
IMAGE_SEQ_LEN = 64

# (name, fps, frame indices, duration or None, question)
CASES = [
    ("three frames, half seconds, a duration", 2.0, [0, 3, 151], 200.7, "What moves?"),
    ("one frame, no duration", 1.0, [7], None, "Où est le chat ? 🐈 Describe it."),
    ("twenty-one frames every two seconds", 0.5, list(range(21)), None, "What changed in the last 10 seconds?"),
    ("past an hour", 1.0, [3600, 3725, 7322], 7322.9, "When did the red square appear?"),
]


def tokenizer_json() -> dict:
    tj = json.loads((ROOT / "engines/tiny/model/tokenizer.json").read_text(encoding="utf-8"))
    next_id = max(t["id"] for t in tj["added_tokens"]) + 1
    for content in SPECIAL:
        tj["added_tokens"].append({"id": next_id, "content": content, "single_word": False, "lstrip": False,
                                   "rstrip": False, "normalized": False, "special": True})
        next_id += 1
    return tj


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "target/smolvlm2-prompt")
    args = ap.parse_args()
    tj = tokenizer_json()
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(tj)))
    proc = SmolVLMProcessor(SmolVLMImageProcessor(), tok, SmolVLMVideoProcessor(), image_seq_len=IMAGE_SEQ_LEN)
    rng = np.random.RandomState(0)
    cases = []
    for name, fps, indices, duration, question in CASES:
        chat = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": question}]}]
        text = proc.apply_chat_template(chat, add_generation_prompt=True)
        video = rng.randint(0, 256, (len(indices), 16, 16, 3), dtype=np.uint8)
        meta = VideoMetadata(total_num_frames=max(indices) + 1, fps=fps, frames_indices=indices, duration=duration)
        out = proc(text=text, videos=[video], video_metadata=[meta], do_sample_frames=False, return_tensors="np")
        ids = out["input_ids"][0].tolist()
        cases.append({
            "name": name,
            "times": meta.timestamps,
            "duration": duration,
            "question": question,
            "text": tok.decode(ids, skip_special_tokens=False),
            "ids": ids,
        })
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    (args.out / "cases.json").write_text(
        json.dumps({"image_seq_len": IMAGE_SEQ_LEN, "cases": cases}, ensure_ascii=False, indent=1) + "\n",
        encoding="utf-8")
    print(f"prompt_reference.py: wrote {len(cases)} SmolVLM2 video prompts to {args.out}")


if __name__ == "__main__":
    main()
