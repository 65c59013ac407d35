#!/usr/bin/env bash
# Runs the whole test suite with real parts (GStreamer pipelines, an in-process RTSP server,
# ONNX Runtime on the generated tiny model). Installs its prerequisites first (skipped when present).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

echo "== tiny model: generator determinism and ONNX Runtime checks"
.venv/bin/python engines/tiny/check.py --model engines/tiny/model

echo "== cargo tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --locked --no-fail-fast
else
  cargo test --locked --no-fail-fast
fi
