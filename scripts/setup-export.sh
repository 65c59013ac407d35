#!/usr/bin/env bash
# Creates the export venv (.venv-export: torch, torchvision, transformers, onnx) used by
# engines/videollama3/export.py and the VideoLLaMA3 parity suite, and fetches the real Qwen
# tokenizer. Idempotent. Separate from .venv because torch from PyPI brings its CUDA libraries
# (about 5.8 GB, about 3 minutes to install here).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! .venv-export/bin/python -c 'import torch, torchvision, transformers, onnx, onnxscript, onnxruntime, num2words' >/dev/null 2>&1; then
  echo "setup-export: creating .venv-export (torch, transformers, onnx; several GB)"
  python3 -m venv .venv-export
  .venv-export/bin/pip install -q --disable-pip-version-check -r engines/videollama3/requirements.txt
fi
engines/qwen/fetch.sh .venv-export/bin/python >/dev/null
