#!/usr/bin/env bash
# Measures the scenes model with `edgevlm eval` (docs/EVAL.md, "The scenes model"): held-out scenes
# (seeds never trained on) under Apollo's three conditions, DiffFP off / reference / adaptive, and
# long clips with the camera's window at 12 / 30 / 60 / 120 s. Writes target/scenes-eval/*.json and
# prints the tables.
#   scripts/eval-scenes.sh            (after cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/edgevlm}
OUT=target/scenes-eval
mkdir -p "$OUT"
.venv/bin/python engines/scenes/scenes.py --split heldout --first 0 --count "${SHORT:-60}" --out "$OUT/short"
.venv/bin/python engines/scenes/scenes.py --split heldout --first 5000 --count "${LONG:-12}" --frames 150 --out "$OUT/long"
for prune in reference off adaptive; do
  echo "== held-out scenes, prune $prune, window 60 s"
  conditions=video
  [ "$prune" = reference ] && conditions=video,centre,text
  "$BIN" eval --clips "$OUT/short/clips.jsonl" --questions "$OUT/short/questions.jsonl" \
    --prune "$prune" --window-secs 60 --conditions "$conditions" --json "$OUT/short-$prune.json"
done
for window in 12 30 60 120; do
  echo "== 150-s held-out scenes, prune reference, window $window s"
  "$BIN" eval --clips "$OUT/long/clips.jsonl" --questions "$OUT/long/questions.jsonl" \
    --window-secs "$window" --conditions video --json "$OUT/long-$window.json"
done
