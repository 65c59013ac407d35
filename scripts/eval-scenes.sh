#!/usr/bin/env bash
# Measures the scenes model with `edgevlm eval` (docs/EVAL.md, "The scenes model"): held-out scenes
# (seeds never trained on) under Apollo's three conditions, DiffFP off / reference / adaptive, and
# long clips with the camera's window at 12 / 30 / 60 / 120 s. Writes target/scenes-eval/*.json and
# prints the tables. MORE=1 adds the further held-out sets of docs/EVAL.md (60 clips from seed 1000,
# 100 from seed 2000) and the accuracy per kind over them and the short set together.
#   SHORT=40 LONG=8 MORE=1 scripts/eval-scenes.sh            (after cargo build --release)
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
if [ -n "${MORE:-}" ]; then
  .venv/bin/python engines/scenes/scenes.py --split heldout --first 1000 --count 60 --out "$OUT/fresh"
  .venv/bin/python engines/scenes/scenes.py --split heldout --first 2000 --count 100 --out "$OUT/third"
  for set in fresh third; do
    echo "== further held-out scenes ($set), prune reference, window 60 s"
    "$BIN" eval --clips "$OUT/$set/clips.jsonl" --questions "$OUT/$set/questions.jsonl" \
      --window-secs 60 --conditions video,centre,text --json "$OUT/$set-reference.json"
  done
  echo "== all held-out scenes together (short, fresh, third), prune reference, window 60 s"
  .venv/bin/python - "$OUT"/{short,fresh,third}-reference.json <<'PY'
import json, sys
runs = [json.load(open(f))["scores"] for f in sys.argv[1:]]
conds = ("video", "centre", "text")
print(f"{'kind':<10}" + "".join(f"{c:>20}" for c in conds))
for kind in runs[0]:
    cells = []
    for c in conds:
        right = sum(r[kind][c]["right"] for r in runs if kind in r)
        total = sum(r[kind][c]["total"] for r in runs if kind in r)
        cells.append(f"{100 * right / total:6.1f} % ({right}/{total})")
    print(f"{kind:<10}" + "".join(f"{c:>20}" for c in cells))
PY
fi
