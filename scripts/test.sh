#!/usr/bin/env bash
# Runs the whole test suite with real parts (GStreamer pipelines, an in-process RTSP server,
# ONNX Runtime on the generated tiny model). Installs its prerequisites first (skipped when present).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

echo "== tiny model: generator determinism and ONNX Runtime checks"
.venv/bin/python engines/tiny/check.py --model engines/tiny/model

echo "== Apollo-shaped model: generator determinism, its clip encoder against the numpy reference (tests/apollo_live.rs)"
.venv/bin/python engines/apollo/check.py --model engines/apollo/model --out target/apollo-reference

echo "== Qwen tokenizer: real vocabulary and HF tokenizers reference ids (tests/engine_tokenizer_qwen.rs)"
engines/qwen/fetch.sh .venv/bin/python
.venv/bin/python engines/qwen/tokenize_reference.py

echo "== VideoLLaMA3: reduced checkpoint, export and transformers oracle (tests/videollama3_parity.rs)"
./scripts/videollama3-parity.sh
echo "== scenes model: the VideoLLaMA3 recipe on the committed checkpoint gives the committed model"
.venv-export/bin/python engines/videollama3/export.py engines/scenes/checkpoint --out target/scenes-export \
  --stream-timestamps 2>&1 | grep -E "diff|wrote|export.py:"
.venv-export/bin/python engines/scenes/check.py target/scenes-export engines/scenes/model
echo "== scenes: the truth in words (places near a line between thirds accepted on both sides)"
.venv/bin/python engines/scenes/test_scenes.py
echo "== reference resize: torch's bicubic on decoded frames (tests/ingest_resize.rs)"
.venv-export/bin/python engines/videollama3/resize_reference.py
echo "== SmolVLM2: video prompts from transformers' SmolVLMProcessor (tests/smolvlm2_prompt.rs)"
.venv-export/bin/python engines/smolvlm2/prompt_reference.py
echo "== SmolVLM2: a reduced model in the published ONNX signature, against transformers (tests/smolvlm2_onnx.rs)"
.venv-export/bin/python engines/smolvlm2/reduced.py 2>&1 | grep -E "reduced SmolVLM2|processor:|diff|identical|wrote|Error|error"

echo "== formatting and lints (rustfmt, clippy with warnings as errors)"
if command -v rustup >/dev/null 2>&1; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
  done
fi
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
