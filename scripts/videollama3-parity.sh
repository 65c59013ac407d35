#!/usr/bin/env bash
# Builds the VideoLLaMA3 parity fixtures under target/videollama3-reduced/ (git-ignored):
#   checkpoint/   a reduced VideoLLaMA3 made with transformers' own classes (seeded random weights,
#                 the real Qwen tokenizer), in the transformers-native checkpoint layout
#   model/        that checkpoint exported to the engine contract by engines/videollama3/export.py
#   model-fp16/   the same with float16 weights
#   parity/       transformers' outputs on decoded clips (engines/videollama3/parity.py)
# tests/videollama3_parity.rs runs `edgevlm engines check` on both exports and compares edgevlm
# with parity/. Rebuilt only when a script that makes them changed (a stamp of their hashes).
#   scripts/videollama3-parity.sh
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-export.sh
PY=.venv-export/bin/python
OUT=target/videollama3-reduced
stamp="$(cat engines/videollama3/{reduced,export,parity}.py engines/qwen/tokenizer.json \
  engines/videollama3/requirements.txt | sha256sum | cut -d' ' -f1)"
if [ -f "$OUT/stamp" ] && [ "$(cat "$OUT/stamp")" = "$stamp" ]; then
  echo "videollama3 parity: fixtures up to date ($OUT)"
else
  rm -rf "$OUT"
  mkdir -p "$OUT"
  echo "== videollama3 parity: reduced checkpoint (transformers' own classes)"
  $PY engines/videollama3/reduced.py --out "$OUT/checkpoint" 2>&1 | grep -v "Writing model shards" || true
  echo "== videollama3 parity: export (float32, float16)"
  $PY engines/videollama3/export.py "$OUT/checkpoint" --out "$OUT/model" 2>&1 | grep -E "diff|wrote|export.py:"
  $PY engines/videollama3/export.py "$OUT/checkpoint" --out "$OUT/model-fp16" --dtype float16 2>&1 \
    | grep -E "diff|wrote|export.py:"
  echo "== videollama3 parity: transformers oracle on decoded clips"
  $PY engines/videollama3/parity.py --checkpoint "$OUT/checkpoint" --out "$OUT/parity" 2>&1 \
    | grep -v "Loading weights"
  echo "$stamp" > "$OUT/stamp"
fi
