#!/usr/bin/env python3
"""Reference token ids from Hugging Face's `tokenizers` package, for tests/engine_tokenizer.rs.

    echo '{"tokenizer": "engines/tiny/model/tokenizer.json", "texts": ["hi"]}' \
        | .venv/bin/python engines/tiny/tokenize_reference.py

Reads one JSON object on stdin: `tokenizer` (a tokenizer.json path), `texts` (strings) and optional
`special_as_text` (true: special-token literals are ordinary text, `encode_special_tokens`). Writes
`{"ids": [[...], ...], "decoded": ["...", ...]}`: ids without added special tokens, and the decoding
of those ids with special tokens kept. Only the `tokenizers` package is needed.
"""

import json
import sys

from tokenizers import Tokenizer


def main() -> None:
    req = json.load(sys.stdin)
    tok = Tokenizer.from_file(req["tokenizer"])
    tok.encode_special_tokens = bool(req.get("special_as_text", False))
    ids = [tok.encode(t, add_special_tokens=False).ids for t in req["texts"]]
    decoded = [tok.decode(i, skip_special_tokens=False) for i in ids]
    json.dump({"ids": ids, "decoded": decoded}, sys.stdout, ensure_ascii=True)


if __name__ == "__main__":
    main()
