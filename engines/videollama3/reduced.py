#!/usr/bin/env python3
"""Build a reduced VideoLLaMA3 checkpoint with transformers' own classes, in the native layout.

    .venv-export/bin/python engines/videollama3/reduced.py --out target/videollama3-reduced/checkpoint

The directory it writes has the layout of the transformers-native checkpoints users download
(`lkhl/VideoLLaMA3-2B-Image-HF` and the 7B one): config.json, model.safetensors,
generation_config.json, tokenizer.json + tokenizer_config.json, preprocessor_config.json,
video_preprocessor_config.json, processor_config.json and chat_template.jinja. The architecture is
the real one — `VideoLlama3ForConditionalGeneration`: the NaViT-style vision encoder with its axial
2-D rotary embedding and per-frame attention, the 2x2 bilinear merge, the two-layer GELU projector,
a Qwen2 decoder with grouped-query attention and untied embeddings (as the 7B) — at dimensions small
enough for a 2-core CI machine, with seeded random weights. It is what `export.py` and the parity
suite (engines/videollama3/parity.py, tests/videollama3_parity.rs) run on.

Tokenizer: the real Qwen vocabulary (engines/qwen/tokenizer.json, fetched by engines/qwen/fetch.sh),
with the Qwen2.5 added tokens (151643..151664; the file also carries Qwen3's four later additions,
151665..151668, which Qwen2.5 does not have and which are dropped) and VideoLLaMA3's own added tokens
`<image>`, `<|stream_start|>`, `<|stream_end|>` after them (151665..151667), as its training script
adds them. The -HF checkpoints place visual tokens with Qwen2-VL's `<|image_pad|>` (151655) and
`<|video_pad|>` (151656).

The chat template is written here (the checkpoint's own chat_template.jinja could not be read from
this machine): VideoLLaMA3's template (docs/ENGINES.md, "VideoLLaMA3 prompt") with the -HF
placeholders: a video item renders as `<|video_pad|>` followed by a newline, which the processor
expands to `Time {t:.1f}s:` + one `<|video_pad|>` per kept token per frame, frames joined by `,`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
QWEN_TOKENIZER = REPO / "engines" / "qwen" / "tokenizer.json"
QWEN25_LAST_ADDED = 151664          # <|file_sep|>: the last of Qwen2.5's added tokens
VIDEOLLAMA3_ADDED = ["<image>", "<|stream_start|>", "<|stream_end|>"]
VOCAB_ROWS = 151936                 # Qwen2.5's embedding rows (padded past the tokenizer's ids)
FIRST_PADDING_ID = QWEN25_LAST_ADDED + 1 + len(VIDEOLLAMA3_ADDED)

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'stream' -%}{{- '<|stream_start|>stream\\n' -}}"
    "{%- else -%}{{- '<|im_start|>' + message['role'] + '\\n' -}}{%- endif -%}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'video' -%}{{- '<|video_pad|>\\n' -}}"
    "{%- elif item['type'] == 'image' -%}{{- '<|image_pad|>\\n' -}}"
    "{%- elif item['type'] == 'text' -%}{{- item['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- if message['role'] == 'stream' -%}{{- '<|stream_end|>\\n' -}}"
    "{%- else -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Reduced dimensions. Text: Qwen2 with GQA (4 query heads over 2 KV heads); vision: 2 layers whose
# head dim (16) gives the axial rotary 4 frequencies per axis. Untied embeddings and a wider
# initialisation than transformers' 0.02: with tied random embeddings greedy decoding repeats one
# token forever (its own embedding scores highest), which would make token parity a weak check;
# these give 27-32 distinct tokens in 32 and top-2 logit margins of about 1e-2.
TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            vocab_size=VOCAB_ROWS, tie_word_embeddings=False, initializer_range=0.1,
            bos_token_id=151643, eos_token_id=151645, use_sliding_window=False)
VISION = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_channels=3, patch_size=14, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6,
              rope_parameters={"rope_type": "axial", "rope_theta": 10000.0}, initializer_range=0.05)


def qwen25_tokenizer_json() -> dict:
    if not QWEN_TOKENIZER.exists():
        raise SystemExit(f"reduced.py: {QWEN_TOKENIZER} is missing; run engines/qwen/fetch.sh first")
    tok = json.loads(QWEN_TOKENIZER.read_text(encoding="utf-8"))
    added = [a for a in tok["added_tokens"] if a["id"] <= QWEN25_LAST_ADDED]
    next_id = QWEN25_LAST_ADDED + 1
    for literal in VIDEOLLAMA3_ADDED:
        added.append({"id": next_id, "content": literal, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
        next_id += 1
    tok["added_tokens"] = added
    return tok


def write_processor(out: Path, tokenizer, video) -> None:
    """Writes the processor files of a checkpoint (tokenizer, image and video processors, chat
    template) in the layout the published -HF checkpoints use."""
    from transformers import VideoLlama3ImageProcessor, VideoLlama3Processor

    image = VideoLlama3ImageProcessor()
    processor = VideoLlama3Processor(image_processor=image, tokenizer=tokenizer, video_processor=video,
                                     chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(out)
    # The published -HF checkpoints keep each processor's settings in its own file
    # (preprocessor_config.json, video_preprocessor_config.json) and processor_config.json names
    # only the class; transformers 5 nests them instead. Write the published layout.
    image.to_json_file(out / "preprocessor_config.json")
    video.to_json_file(out / "video_preprocessor_config.json")
    (out / "processor_config.json").write_text(json.dumps({"processor_class": "VideoLlama3Processor"}, indent=2) + "\n")


def build(out: Path, seed: int) -> None:
    from tokenizers import Tokenizer
    from transformers import (PreTrainedTokenizerFast, Qwen2Config, VideoLlama3Config,
                              VideoLlama3ForConditionalGeneration, VideoLlama3Processor,
                              VideoLlama3VideoProcessor, VideoLlama3VisionConfig)

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = VideoLlama3Config(text_config=Qwen2Config(**TEXT).to_dict(),
                               vision_config=VideoLlama3VisionConfig(**VISION).to_dict(),
                               image_token_id=151655, video_token_id=151656, tie_word_embeddings=False)
    model = VideoLlama3ForConditionalGeneration(config).eval()
    # The embedding's padding rows (ids past the tokenizer's last, 151668..151935) are never
    # produced by a trained model; with random weights greedy decoding would pick one now and then,
    # which edgevlm never does (it samples only ids the tokenizer has). Zero logits make them lose.
    with torch.no_grad():
        model.lm_head.weight[FIRST_PADDING_ID:] = 0.0
    model.save_pretrained(out, safe_serialization=True)

    backend = Tokenizer.from_str(json.dumps(qwen25_tokenizer_json()))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                                   "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", *VIDEOLLAMA3_ADDED],
        clean_up_tokenization_spaces=False, model_max_length=32768)
    # The processor's defaults are the checkpoints' (transformers' VideoLlama3VideoProcessor):
    # at least 128 tokens' worth of pixels, 768 tokens' worth per video divided by the frame
    # count, bicubic, mean = std = 0.5, DiffFP on. Written out so the export reads them from the files.
    video = VideoLlama3VideoProcessor(size={"shortest_edge": 128 * 28 * 28, "longest_edge": 768 * 28 * 28})
    write_processor(out, tokenizer, video)
    loaded = VideoLlama3Processor.from_pretrained(out)
    if dict(loaded.video_processor.size) != dict(video.size):
        raise SystemExit(f"reduced.py: the written processor reloads with size {loaded.video_processor.size}")
    params = sum(p.numel() for p in model.parameters())
    print(f"reduced VideoLLaMA3: {params / 1e6:.2f}M parameters (seed {seed}) -> {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=20261201)
    args = ap.parse_args()
    build(args.out, args.seed)


if __name__ == "__main__":
    main()
