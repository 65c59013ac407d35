#!/usr/bin/env python3
"""Check a generated tiny model against the engines contract with ONNX Runtime.

    python3 engines/tiny/check.py [--model engines/tiny/model]

Prints one line per check and exits non-zero if any fails. Uses onnxruntime and numpy; the
`tokenizers` package is used when installed (round-trip checks), otherwise those checks are skipped
and prompts are encoded by the small reference BPE encoder below. Runs on one core in seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import numpy as np
import onnxruntime as ort

HERE = Path(__file__).resolve().parent
FILES = ["vision_encoder.onnx", "embed_tokens.onnx", "decoder_model_merged.onnx", "tokenizer.json", "manifest.toml"]


class Report:
    def __init__(self):
        self.failures = 0

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        print(f"{'ok  ' if ok else 'FAIL'}  {name}" + (f"  [{detail}]" if detail else ""), flush=True)
        self.failures += 0 if ok else 1
        return ok

    def section(self, title: str) -> None:
        print(f"\n== {title}", flush=True)


def session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def max_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b))) if a.size else 0.0


# --------------------------------------------------------------------------------------------------
# Tokenisation


class ReferenceBpe:
    """A minimal byte-level BPE encoder/decoder over tokenizer.json, for ASCII prompts.

    It applies merges by rank, leftmost first, as Hugging Face tokenizers does; when `tokenizers` is
    installed the two are compared, which checks that tokenizer.json means what generate.py intended.
    """

    SPLIT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")

    def __init__(self, spec: dict):
        self.vocab: dict[str, int] = spec["model"]["vocab"]
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(spec["model"]["merges"])}
        self.special = {t["content"]: t["id"] for t in spec["added_tokens"]}
        self.id_to_token = {i: t for t, i in self.vocab.items()} | {i: t for t, i in self.special.items()}
        self.char_of_byte = self._bytes_to_unicode()
        self.byte_of_char = {c: b for b, c in self.char_of_byte.items()}
        self.special_split = re.compile("(" + "|".join(re.escape(s) for s in self.special) + ")")

    @staticmethod
    def _bytes_to_unicode() -> dict[int, str]:
        printable = (list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100)))
        table, extra = {b: chr(b) for b in printable}, 0
        for b in range(256):
            if b not in table:
                table[b] = chr(256 + extra)
                extra += 1
        return table

    def _bpe(self, symbols: list[str]) -> list[str]:
        while len(symbols) > 1:
            ranked = [(self.ranks.get(p, 1 << 30), i) for i, p in enumerate(zip(symbols, symbols[1:]))]
            rank, i = min(ranked)
            if rank == 1 << 30:
                break
            symbols = symbols[:i] + [symbols[i] + symbols[i + 1]] + symbols[i + 2:]
        return symbols

    def encode(self, text: str) -> list[int]:
        ids = []
        for part in self.special_split.split(text):
            if part in self.special:
                ids.append(self.special[part])
                continue
            for piece in self.SPLIT.findall(part):
                ids += [self.vocab[s] for s in self._bpe([self.char_of_byte[b] for b in piece.encode("utf-8")])]
        return ids

    def decode(self, ids: list[int]) -> str:
        out, buf = [], bytearray()
        for i in ids:
            tok = self.id_to_token[i]
            if tok in self.special:
                out.append(buf.decode("utf-8", "replace") + tok)
                buf = bytearray()
            else:
                buf += bytes(self.byte_of_char[c] for c in tok)
        return "".join(out) + buf.decode("utf-8", "replace")


def check_tokenizer(r: Report, model: Path, manifest: dict, ref: ReferenceBpe) -> None:
    r.section("tokenizer")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        print("SKIP  Hugging Face round trips: the `tokenizers` package is not installed")
        return
    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    size = tok.get_vocab_size(with_added_tokens=True)
    r.check("tokenizer size equals the decoder vocab", size == manifest["text"]["vocab_size"],
            f"{size} vs {manifest['text']['vocab_size']}")
    for key, content in [("endoftext", "<|endoftext|>"), ("im_start", "<|im_start|>"), ("im_end", "<|im_end|>"),
                         ("image", "<image>"), ("stream_start", "<|stream_start|>"), ("stream_end", "<|stream_end|>")]:
        ids = tok.encode(content).ids
        r.check(f"{content} is one token with the manifest id", ids == [manifest["special_tokens"][key]], f"{ids}")
    rng = np.random.default_rng(7)
    samples = {
        "ASCII": "Time 12.0s: a cat walks past the camera.",
        "whitespace": "  leading spaces, tabs\tand\nnewlines\r\n  ",
        "emoji, CJK, accents": "emoji 📷🎥🐈‍⬛ and CJK 摄像头看见一只猫 and accents: café naïve Ωmega",
        "chat prompt with special tokens": "<|im_start|>user\nTime 0.0s:<image>,Time 1.0s:<image>\nWhat happened?<|im_end|>\n",
        # Random code points across the planes (surrogates excluded: not valid in UTF-8).
        "64 random code points": "".join(chr(c) for c in rng.integers(1, 0x10FFFF, 64) if not 0xD800 <= c < 0xE000),
    }
    for label, text in samples.items():
        ids = tok.encode(text, add_special_tokens=False).ids
        back = tok.decode(ids, skip_special_tokens=False)
        r.check(f"round trip: {label}", back == text, f"{len(text)} chars -> {len(ids)} ids")
    prompt = samples["chat prompt with special tokens"]
    r.check("reference encoder agrees with tokenizers on a chat prompt",
            ref.encode(prompt) == tok.encode(prompt, add_special_tokens=False).ids)
    mixed = samples["emoji, CJK, accents"]
    r.check("reference decoder agrees with tokenizers", ref.decode(ref.encode(mixed)) == tok.decode(tok.encode(mixed).ids))


# --------------------------------------------------------------------------------------------------
# Vision encoder


def check_vision(r: Report, model: Path, manifest: dict) -> ort.InferenceSession:
    r.section("vision encoder")
    vis = session(model / manifest["files"]["vision_encoder"])
    inp, outp = manifest["vision"]["input"], manifest["vision"]["output"]
    hidden = manifest["text"]["hidden_size"]
    factor = manifest["vision"]["patch_size"] * manifest["vision"]["merge_size"]
    rng = np.random.default_rng(1)
    for h, w in [(196, 336), (56, 56)]:
        for t in (1, 3):
            px = rng.uniform(-1, 1, (t, 3, h, w)).astype(np.float32)
            (out,) = vis.run([outp], {inp: px})
            want = (t, (h // factor) * (w // factor), hidden)
            r.check(f"{w}x{h} T={t} -> {list(want)}", out.shape == want and bool(np.isfinite(out).all()),
                    f"got {list(out.shape)}")

    a, b = (rng.uniform(-1, 1, (1, 3, 112, 84)).astype(np.float32) for _ in range(2))
    (alone,) = vis.run([outp], {inp: a})
    (pair,) = vis.run([outp], {inp: np.concatenate([a, b])})
    (swapped,) = vis.run([outp], {inp: np.concatenate([b, a])})
    d1, d2 = max_diff(pair[0], alone[0]), max_diff(swapped[1], alone[0])
    r.check("frames are independent: [a, b][0] == [a] and [b, a][1] == [a]", max(d1, d2) <= 1e-5,
            f"max abs diff {max(d1, d2):.2e}")
    r.check("different frames give different tokens", max_diff(pair[0], pair[1]) > 1e-2,
            f"max abs diff {max_diff(pair[0], pair[1]):.2e}")
    # A frame made of one 28-pixel strip repeated 4 times: without a position signal every merged
    # row would be identical (attention is permutation-invariant).
    (strips,) = vis.run([outp], {inp: np.tile(a[:, :, :28, :], (1, 1, 4, 1))})
    grid = strips[0].reshape(4, 3, hidden)
    spread = max_diff(grid[0], grid[1])
    r.check("identical rows at different heights encode differently (position signal)", spread > 1e-3,
            f"max abs diff {spread:.2e}")
    return vis


# --------------------------------------------------------------------------------------------------
# Decoder


class Decoder:
    def __init__(self, model: Path, manifest: dict):
        text = manifest["text"]
        self.sess = session(model / manifest["files"]["decoder"])
        self.embed = session(model / manifest["files"]["embed_tokens"])
        self.t = text
        self.layers = range(text["num_layers"])
        self.past_names = [text[k].format(i=i) for i in self.layers for k in ("past_key", "past_value")]
        self.present_names = [text[k].format(i=i) for i in self.layers for k in ("present_key", "present_value")]

    def empty_past(self) -> list[np.ndarray]:
        # The first call passes zero-length past tensors: [1, kv_heads, 0, head_dim].
        shape = (1, self.t["num_kv_heads"], 0, self.t["head_dim"])
        return [np.zeros(shape, np.float32) for _ in self.past_names]

    def embeds(self, ids: list[int]) -> np.ndarray:
        (e,) = self.embed.run([self.t["inputs_embeds"]], {self.t["input_ids"]: np.array([ids], np.int64)})
        return e

    def run(self, embeds: np.ndarray, mask: list[int], positions: list[int], past: list[np.ndarray]):
        feeds = {
            self.t["inputs_embeds"]: embeds,
            self.t["attention_mask"]: np.array([mask], np.int64),
            self.t["position_ids"]: np.array([positions], np.int64),
        } | dict(zip(self.past_names, past))
        logits, *present = self.sess.run([self.t["logits"]] + self.present_names, feeds)
        return logits, present


def check_cache(r: Report, dec: Decoder, ids: list[int]) -> None:
    r.section("decoder: KV cache")
    n = len(ids)
    e = dec.embeds(ids)
    vocab = dec.t["vocab_size"]
    full, full_present = dec.run(e, [1] * n, list(range(n)), dec.empty_past())
    r.check(f"prefill of {n} tokens -> logits [1, {n}, {vocab}]", full.shape == (1, n, vocab))
    want = (1, dec.t["num_kv_heads"], n, dec.t["head_dim"])
    r.check(f"present.* shapes are {list(want)}", all(p.shape == want for p in full_present))

    # Prefill n-7, then a 3-token chunk (past and new both non-empty), then 4 single steps.
    bounds = [0, n - 7, n - 4] + list(range(n - 3, n + 1))
    past, rows = dec.empty_past(), []
    for start, end in zip(bounds, bounds[1:]):
        logits, past = dec.run(e[:, start:end], [1] * end, list(range(start, end)), past)
        rows.append(logits)
    inc = np.concatenate(rows, axis=1)
    d = max_diff(inc, full)
    r.check(f"prefill {n - 7} + chunk 3 + 4 steps == one prefill of {n} (all logits)", d <= 1e-4, f"max abs diff {d:.2e}")
    d_last = max_diff(inc[:, -1], full[:, -1])
    r.check("last-token logits match", d_last <= 1e-4, f"max abs diff {d_last:.2e}")
    dp = max(max_diff(a, b) for a, b in zip(past, full_present))
    r.check("returned caches match the one-shot caches", dp <= 1e-4, f"max abs diff {dp:.2e}")


def check_mask(r: Report, dec: Decoder, ids: list[int]) -> None:
    r.section("decoder: attention_mask")
    n = len(ids)
    e = dec.embeds(ids)
    base, _ = dec.run(e, [1] * n, list(range(n)), dec.empty_past())

    # Insert a junk token at index 3 with mask 0; real tokens keep their position ids.
    at = 3
    rng = np.random.default_rng(3)
    junk = lambda: rng.normal(0, 3, (1, 1, e.shape[2])).astype(np.float32)  # noqa: E731
    padded = lambda j: np.concatenate([e[:, :at], j, e[:, at:]], axis=1)  # noqa: E731
    mask = [1] * at + [0] + [1] * (n - at)
    pos = list(range(at)) + [0] + list(range(at, n))
    keep = [i for i in range(n + 1) if i != at]
    out1, _ = dec.run(padded(junk()), mask, pos, dec.empty_past())
    d = max_diff(out1[:, keep], base)
    r.check("a masked key inside the prompt changes no real token's logits", d <= 1e-4, f"max abs diff {d:.2e}")
    out2, _ = dec.run(padded(junk()), mask, pos, dec.empty_past())
    d = max_diff(out2[:, keep], out1[:, keep])
    r.check("the masked token's content does not matter", d <= 1e-6, f"max abs diff {d:.2e}")

    # The same masked key sitting in the cache while later tokens are decoded one by one.
    past_len = at + 2
    _, past = dec.run(padded(junk())[:, :past_len], mask[:past_len], pos[:past_len], dec.empty_past())
    rows = []
    x = padded(junk())
    for i in range(past_len, n + 1):
        logits, past = dec.run(x[:, i:i + 1], mask[:i + 1], pos[i:i + 1], past)
        rows.append(logits)
    d = max_diff(np.concatenate(rows, axis=1), base[:, past_len - 1:])
    r.check("a masked key in the past cache is ignored by later steps", d <= 1e-4, f"max abs diff {d:.2e}")

    # Left padding: fully masked query rows must not produce NaN, and real rows are unaffected.
    left = np.concatenate([junk(), junk(), e], axis=1)
    out3, _ = dec.run(left, [0, 0] + [1] * n, [0, 0] + list(range(n)), dec.empty_past())
    d = max_diff(out3[:, 2:], base)
    r.check("left padding: finite logits and real rows unchanged", bool(np.isfinite(out3).all()) and d <= 1e-4,
            f"max abs diff {d:.2e}")


def chat_prompt(manifest: dict, dec: Decoder, vis: ort.InferenceSession, encode) -> np.ndarray:
    """System + user turn with two 56x56 video frames (4 visual tokens each) + assistant prefix."""
    tpl, image_id = manifest["chat_template"], manifest["special_tokens"]["image"]
    rng = np.random.default_rng(5)
    frames = rng.uniform(-1, 1, (2, 3, 56, 56)).astype(np.float32)
    (visual,) = vis.run([manifest["vision"]["output"]], {manifest["vision"]["input"]: frames})
    text = (tpl["system_prefix"] + tpl["default_system"] + tpl["turn_end"] + tpl["user_prefix"]
            + "Time 0.0s:<image>,Time 1.0s:<image>\nWhat is happening?" + tpl["turn_end"] + tpl["assistant_prefix"])
    ids = encode(text)
    # Expand each <image> to that frame's tokens, as the runtime splices encoder output.
    pieces, frame = [], 0
    for tok in ids:
        if tok == image_id:
            pieces.append(visual[frame][None])
            frame += 1
        else:
            pieces.append(dec.embeds([tok]))
    return np.concatenate(pieces, axis=1)


def greedy(dec: Decoder, prompt: np.ndarray, steps: int) -> list[int]:
    n = prompt.shape[1]
    logits, past = dec.run(prompt, [1] * n, list(range(n)), dec.empty_past())
    out = []
    for i in range(steps):
        tok = int(np.argmax(logits[0, -1]))
        out.append(tok)
        logits, past = dec.run(dec.embeds([tok]), [1] * (n + i + 1), [n + i], past)
    return out


def check_generation(r: Report, manifest: dict, dec: Decoder, vis, ref: ReferenceBpe) -> None:
    r.section("greedy generation")
    prompt = chat_prompt(manifest, dec, vis, ref.encode)
    first, second = greedy(dec, prompt, 20), greedy(dec, prompt, 20)
    print(f"      prompt {prompt.shape[1]} positions (8 visual); generated ids {first}")
    print(f"      text {ref.decode(first)!r}")
    r.check("20 greedy tokens are deterministic", first == second)
    distinct = len(set(first))
    r.check("generation is not one repeated token", distinct > 1, f"{distinct} distinct ids")


# --------------------------------------------------------------------------------------------------
# Files


def check_files(r: Report, model: Path, manifest: dict) -> None:
    r.section("files and determinism")
    for name, digest in manifest["generator"]["sha256"].items():
        got = hashlib.sha256((model / name).read_bytes()).hexdigest()
        r.check(f"manifest sha256 of {name}", got == digest)
    sizes = {name: (model / name).stat().st_size for name in FILES}
    total = sum(sizes.values())
    r.check("model is small", total < 5 * 1024 * 1024, f"{total} bytes in {len(FILES)} files")

    seed = manifest["generator"]["seed"]
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for k in range(2):
            out = Path(tmp) / f"run{k}"
            subprocess.run([sys.executable, str(HERE / "generate.py"), "--out", str(out), "--seed", str(seed)],
                           check=True, stdout=subprocess.DEVNULL)
            runs.append({name: (out / name).read_bytes() for name in FILES})
        r.check(f"two generations with seed {seed} are byte-identical", runs[0] == runs[1])
        r.check("the checked model equals a fresh generation",
                runs[0] == {name: (model / name).read_bytes() for name in FILES},
                "regenerate it if generate.py changed")
        other = Path(tmp) / "other"
        subprocess.run([sys.executable, str(HERE / "generate.py"), "--out", str(other), "--seed", str(seed + 1)],
                       check=True, stdout=subprocess.DEVNULL)
        r.check("another seed changes the weights",
                (other / "decoder_model_merged.onnx").read_bytes() != runs[0]["decoder_model_merged.onnx"])


def main() -> int:
    parser = argparse.ArgumentParser(description="Check the generated tiny model.")
    parser.add_argument("--model", type=Path, default=HERE / "model", help="model directory (default: engines/tiny/model)")
    args = parser.parse_args()
    manifest = tomllib.loads((args.model / "manifest.toml").read_text(encoding="utf-8"))
    print(f"checking {args.model} (onnxruntime {ort.__version__}, numpy {np.__version__})")
    r = Report()
    ref = ReferenceBpe(json.loads((args.model / "tokenizer.json").read_text(encoding="utf-8")))
    check_tokenizer(r, args.model, manifest, ref)
    vis = check_vision(r, args.model, manifest)
    dec = Decoder(args.model, manifest)
    ids = ref.encode("Time 3.0s: a person walks to the door and opens it.")
    check_cache(r, dec, ids)
    check_mask(r, dec, ids)
    check_generation(r, manifest, dec, vis, ref)
    check_files(r, args.model, manifest)
    print(f"\n{'all checks passed' if r.failures == 0 else f'{r.failures} check(s) FAILED'}")
    return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
