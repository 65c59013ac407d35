#!/usr/bin/env python3
"""Reference tokenisations of the real Qwen2.5/Qwen3 vocabulary, for tests/engine_tokenizer_qwen.rs.

    .venv/bin/python engines/qwen/tokenize_reference.py [--seed 20250601] [--count 10000]
        [--tokenizer engines/qwen/tokenizer.json] [--out target/qwen-tokenizer/reference.jsonl]
    .venv/bin/python engines/qwen/tokenize_reference.py --bench     # HF load time and encode MB/s

Generates `--count` strings (deterministic for a seed) that mix what the Qwen pre-tokenizer, NFC and
the added-token matcher decide on: CJK, kana, hangul (also as decomposed jamo), Cyrillic, Arabic and
Hebrew with bidi marks, Devanagari and Thai, emoji (ZWJ, skin tones, flags, keycaps, tag sequences),
combining marks and text NFC changes, code, whitespace runs, digit runs, contractions in odd cases,
URLs and paths, special-token literals (whole, adjacent, partial), control and noncharacters, very
long words, random soups of all of these, and the combining marks newer than the Unicode 9.0
tables of `tokenizers`' NFC. Each is encoded by Hugging Face `tokenizers`
(add_special_tokens=False) twice: special tokens parsed (the default) and with
`encode_special_tokens = True` (transformers' `split_special_tokens=True`), and each id list decoded
back (skip_special_tokens=False).

The fixture is JSON Lines: a header object (`seed`, `count`, `tokenizers` version, the `sha256` of
the tokenizer file and of this script, the `kinds` used), then one object per string: `kind`,
`text`, `ids`, `decoded`, `ids_as_text`, `decoded_as_text`. A fixture whose header already matches
is left alone (`--force` rewrites it); writing is atomic (a `.part` file renamed). Only the
`tokenizers` package is needed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
import time
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TOKENIZER = ROOT / "engines/qwen/tokenizer.json"
DEFAULT_OUT = ROOT / "target/qwen-tokenizer/reference.jsonl"
DEFAULT_SEED = 20250601
DEFAULT_COUNT = 10_000

ADDED = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
]
PARTIAL = ["<|im_sta", "<|im_end", "<|", "|>", "<|video_", "im_start|>", "<|endoftext", "<think",
           "</tool_", "<|im_start|", "< |im_end|>", "<|IM_END|>", "<||>", "<|im_end |>", "<<|im_end|>>",
           "<|im_<|im_end|>", "<|endoftext|>|>", "<|<|>|>"]

LATIN = ("the quick brown fox jumps over the lazy dog while a camera watches the street at night "
         "people cars bicycles parking lot entrance forklift warehouse delivery truck alarm motion "
         "detected person wearing red jacket left the building hello world Rust Python tokenizer").split()
CHINESE = ["摄像头", "画面", "中", "有", "一个", "人", "正在", "走路", "汽车", "停在", "门口", "请", "描述",
           "视频", "内容", "我们", "今天", "天气", "很好", "北京", "上海", "深圳", "发生", "了", "什么",
           "事情", "吗", "。", "，", "！", "？", "「", "」", "《", "》", "、", "；", "：", "（", "）"]
JAPANESE = ["カメラ", "に", "映って", "いる", "のは", "誰", "ですか", "。", "今日", "は", "いい", "天気",
            "ですね", "ひらがな", "カタカナ", "漢字", "東京", "駅", "で", "待ち合わせ", "ｶﾀｶﾅ", "ー", "ッ",
            "ゃ", "ゅ", "ょ", "ガ", "パ", "ヴ", "「", "」", "・"]
KOREAN = ["카메라", "에", "사람", "이", "있습니다", "안녕하세요", "오늘", "날씨", "가", "좋네요", "서울",
          "자동차", "주차장", "입구", "무엇", "을", "보고", "있나요", "?", "한국어", "텍스트"]
CYRILLIC = ["Привет", "мир", "камера", "видит", "человека", "у", "входа", "Съешь", "же", "ещё", "этих",
            "мягких", "французских", "булок", "да", "выпей", "чаю", "Ёлка", "ЖУРНАЛ", "Україна",
            "Ґанок", "їжак", "Београд", "Ђорђе", "ћевапи", "Қазақстан", "ӘӨҮ"]
ARABIC = ["مرحبا", "بالعالم", "الكاميرا", "ترى", "شخصا", "عند", "الباب", "السيارة", "متوقفة",
          "مُحَمَّد", "اَلْعَرَبِيَّة", "١٢٣", "٤٥٦٧", "؟", "،", "ـ", "لا", "ﻻ", "ﷺ"]
HEBREW = ["שלום", "עולם", "מצלמה", "אדם", "בכניסה", "שָׁלוֹם", "בְּרֵאשִׁית"]
DEVANAGARI = ["नमस्ते", "दुनिया", "कैमरा", "में", "एक", "व्यक्ति", "दिखाई", "दे", "रहा", "है", "।",
              "क्षत्रिय", "ज्ञान", "श्री", "हिन्दी", "०१२३४५६७८९", "क़", "ख़", "ग़", "ज़", "ड़", "फ़"]
THAI = ["สวัสดี", "ชาวโลก", "กล้อง", "เห็น", "คน", "ที่", "ประตู", "ภาษาไทย", "๑๒๓", "ฯลฯ", "ๆ",
        "น้ำ", "กรุงเทพมหานคร"]
OTHER_SCRIPTS = ["Ελληνικά", "καλημέρα", "ΣΊΣΥΦΟΣ", "ς", "Հայերեն", "ქართული", "ᎠᏍᎦᏯ", "ᠮᠣᠩᠭᠣᠯ",
                 "ትግርኛ", "ᚠᚢᚦᚨᚱᚲ", "𐌰𐌱𐌲", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝐁𝐨𝐥𝐝", "ⓒⓘⓡⓒⓛⓔ", "Ｆｕｌｌｗｉｄｔｈ",
                 "ﬁﬂ", "Ⅻ", "ǅungla", "İstanbul", "ıi", "ß", "ẞ", "Straße", "Ǆ", "ꙮ"]
EMOJI = ["😀", "🎉", "👍", "👍🏽", "👋🏿", "🧑🏻‍💻", "👨‍👩‍👧‍👦", "👩‍❤️‍💋‍👨", "🏳️‍🌈", "🏴‍☠️",
         "🇩🇪", "🇯🇵", "🇺🇸", "🇺🇳", "🇦", "🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",
         "1️⃣", "#️⃣", "*️⃣", "❤️", "❤", "☺️", "✌🏼", "🫠", "🫨", "🪿", "🙂‍↔️", "🐦‍🔥", "👁️‍🗨️",
         "\u200d", "\ufe0f", "🏽", "🤷‍♀️", "🚗", "📹", "🔥", "💯", "🧪", "⌚", "©️", "™"]
# Text that NFC changes (decomposed forms, singletons, reordering, jamo, exclusions).
NFC_CHANGES = ["e\u0301", "E\u0301", "a\u0308", "o\u0302", "n\u0303", "c\u0327", "A\u030a", "\u212b",
               "\u2126", "\u212a", "u\u0308\u0301", "a\u0323\u0307", "a\u0307\u0323", "q\u0307\u0323",
               "\u1100\u1161", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af", "\uf900",
               "\uf9d1", "\u0958", "\u0915\u093c", "\u0374", "\u037e", "\u0387", "\u1e9b\u0323",
               "\u0041\u030a\u0301", "\u00c5", "\u0344", "\u0f73", "\u2000", "\u2001", ">\u0338",
               "<\u0338", "=\u0338", "\u0627\u0653", "\u0928\u093c", "\u0e4d\u0e32", "\u0063\u0301\u0327"]
COMBINING = ["\u0301", "\u0300", "\u0308", "\u0323", "\u0338", "\u20e3", "\u0489", "\u064b", "\u0651",
             "\u093c", "\u094d", "\u0e31", "\u0e48", "\u302a", "\u3099", "\u309a", "\u1ab0", "\u1dc0"]
WHITESPACE = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r",
              " \n", "\n ", " \n ", "\t\n", "\u00a0", "\u3000", "\u2003", "\u2009", "\u202f", "\u205f",
              "\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\u1680", "\u200b", "\ufeff", "\u180e"]
PUNCT = [".", ",", "!", "?", ";", ":", "-", "--", "---", "_", "__", "(", ")", "[", "]", "{", "}", "<",
         ">", "|", "||", "/", "\\", "@", "#", "$", "%", "^", "&", "*", "+", "=", "~", "`", "'", '"',
         "...", "…", "—", "–", "“", "”", "‘", "’", "«", "»", "¿", "¡", "§", "°", "€", "£", "¥", "₹",
         "→", "⇒", "≠", "≤", "∑", "√", "∞", "★", "♥", "✓", "•", "·", "※"]
DIGITS = ["0", "1", "7", "42", "123", "2025", "3.14159", "1,000,000", "0x1F", "1e-9", "-273.15",
          "١٢٣", "۴۵۶", "०१२", "๑๒๓", "１２３", "²", "³", "½", "⅞", "Ⅻ", "ⅻ", "①", "𝟙𝟚", "〇", "六"]
CONTRACTIONS = ["I'LL", "don'T", "DON'T", "we'Re", "WE'RE", "they'VE", "I'M", "i'm", "he'D", "HE'D",
                "it'S", "IT's", "'s", "'S", "'ll", "'LL", "'lL", "'Ll", "'re", "'rE", "'ve", "'Ve", "'m",
                "'d", "'D", "'t", "'T", "o'clock", "rock'n'roll", "''s", "'''", "don’t", "it’s",
                "it'ſ", "'ſ", "'K", "'x", "ma'am", "y'all", "'123", "'\u00e9"]
URLS = ["https://example.com/a/b?c=d&e=f#frag", "http://192.168.1.10:8554/stream1",
        "rtsp://user:pa55@cam.local:554/h264", "mqtt://broker:1883/edgevlm/events",
        "/usr/local/bin/edgevlm", "/etc/edgevlm/config.toml", "C:\\Users\\Admin\\Videos\\clip.mp4",
        "~/.cache/huggingface/hub", "./scripts/test.sh", "../engines/qwen/tokenizer.json",
        "user.name+tag@example.co.uk", "https://zh.wikipedia.org/wiki/北京", "file:///tmp/a%20b.txt",
        "git@github.com:org/repo.git", "s3://bucket/key/with spaces/", "https://xn--80ak6aa92e.com/"]
CODE = [
    "fn main() {\n    let x: Vec<u32> = (0..10).collect();\n    println!(\"{x:?}\");\n}\n",
    "impl<'a> Tokenizer<'a> {\n\tpub fn encode(&self, s: &str) -> Vec<u32> {\n\t\ttodo!()\n\t}\n}",
    "def encode(self, text: str) -> list[int]:\n    \"\"\"Docstring.\"\"\"\n    return [ord(c) for c in text]\n\n\n",
    "if __name__ == '__main__':\n    main()\n",
    "class Foo:\n    def __init__(self):\n        self.x = {'a': 1, \"b\": [1, 2, 3]}\n",
    "{\n  \"name\": \"edgevlm\",\n  \"ids\": [151644, 872, 198],\n  \"ok\": true,\n  \"nested\": {\"k\": null}\n}",
    "[{\"a\":1},{\"b\":\"\\u00e9\\n\"}]",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "SELECT id, name FROM cameras WHERE fps >= 15 AND name LIKE '%gate%';",
    "for i in range(10):\n\tif i % 2 == 0:\n\t\tprint(i)\n\telse:\n\t\tcontinue\n",
    "<html>\n  <body>\n    <p class=\"x\">Hi &amp; bye</p>\n  </body>\n</html>",
    "let re = Regex::new(r\"\\s+(?!\\S)\").unwrap(); // look-ahead\n",
    "    \n    \n        indented after blank lines\n",
    "x=1;y=2;z=x+y;;;\n#!/bin/sh\nset -euo pipefail\necho \"$HOME\" | tr a-z A-Z\n",
    "```rust\nassert_eq!(a, b);\n```\n",
    "key: value\nlist:\n  - one\n  - two\n",
    "a\tb\tc\n1\t2\t3\r\n",
]
CONTROL = ["\x00", "\x01", "\x07", "\x1b", "\x1b[31mred\x1b[0m", "\x7f", "\x80", "\x9f", "\ufffd",
           "\ufffe", "\uffff", "\U0010ffff", "\U000fffff", "\ue000", "\uf8ff", "\U000e0001",
           "\U000e0041", "\u00ad", "\u2060", "\u2061", "\u034f", "\u061c", "\u200e", "\u200f",
           "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069",
           "Ã©", "Ã¤Ã¶Ã¼", "\\xc3\\x28", "\\u00e9", "%C3%A9", "&#233;", "\U0001f9ff", "\U00031350",
           "\U0001e030", "\U0001fae8", "\u1c89", "\U00010d50", "\U0002ebf0", "\u0870", "\u1e9e"]
RTL_MARKS = ["\u200e", "\u200f", "\u202b", "\u202c", "\u2067", "\u2069", "\u061c"]

POOLS = {
    "latin": LATIN, "chinese": CHINESE, "japanese": JAPANESE, "korean": KOREAN, "cyrillic": CYRILLIC,
    "arabic": ARABIC, "hebrew": HEBREW, "devanagari": DEVANAGARI, "thai": THAI, "other": OTHER_SCRIPTS,
    "emoji": EMOJI, "nfc": NFC_CHANGES, "combining": COMBINING, "whitespace": WHITESPACE,
    "punct": PUNCT, "digits": DIGITS, "contractions": CONTRACTIONS, "urls": URLS,
    "control": CONTROL, "added": ADDED, "partial": PARTIAL,
}

# Hand-picked cases, always first in the fixture.
FIXED = [
    "", " ", "  ", "\n", "\r\n", "\t", "a", "Hello, world!", "hello world", " hello", "hello ",
    "The cat sat on the mat. The dog didn't; they'll've gone.",
    "I'LL be there, don'T worry, WE'RE fine, they'Ve left, I'M here, he'D go, it'S ok",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "<|vision_start|><|video_pad|><|video_pad|><|vision_end|>What happens?<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "text with <|endoftext|> in the middle and <|im_end|>at the end<|im_end|>",
    "partial <|im_sta and <|im_end and |> and <| and <|video_pad without the end",
    "<|im_end|>\u0338 (a combining long solidus after a special token: NFC would make ≯)",
    "\u0301 starts with a combining mark", "<|im_start|>\u0301", "e\u0301<|im_end|>\u0301e",
    "cafe\u0301 na\u0131\u0308ve \u212b \u2126 \ufb01le \u1100\u1161\u11a8",
    "1234567890123456789012345678901234567890", "3.14159 2025-06-01 12:30:00 +08:00 0xDEADBEEF",
    "  leading and trailing spaces   ", "trailing spaces   \n", "   \n\n\n   \t\t\n \r\n\r\n",
    "👨‍👩‍👧‍👦 🇩🇪🇯🇵 👍🏽 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f 1️⃣",
    "日本語のテキストと中文文本和한국어 텍스트", "مرحبا \u200fبالعالم\u200e hello \u202bעברית\u202c",
    "नमस्ते दुनिया क़ ภาษาไทย", "https://example.com/path?q=1&r=2#x C:\\Windows\\System32",
    " " * 1000, "\n" * 500, "\t" * 300 + "x", "a" * 5000, "ab" * 2500, "7" * 3000, "!" * 2000,
    "中" * 2000, "😀" * 1000, "e\u0301" * 1000, "Supercalifragilisticexpialidocious" * 60,
    " " * 700 + "x" + " " * 700, "x" + "\u3000" * 500 + "y", "-" * 4000 + "\n",
]


# Combining marks and composition parts newer than the Unicode 9.0 tables of `tokenizers`' NFC
# (unicode-normalization-alignments): to it they are unassigned starters, so they neither reorder
# nor compose, where today's tables would (src/engine/tokenizer.rs, NFC_NEWER_THAN_HF).
def _newer_than_hf_nfc() -> list[tuple[int, int]]:
    """The ranges of `NFC_NEWER_THAN_HF` in src/engine/tokenizer.rs, read from there so the fixture
    covers exactly the table the tokenizer applies."""
    src = (Path(__file__).resolve().parents[2] / "src/engine/tokenizer.rs").read_text()
    table = src.split("const NFC_NEWER_THAN_HF: &[(u32, u32)] = &[", 1)[1].split("];", 1)[0]
    ranges = [(int(lo, 16), int(hi, 16)) for lo, hi in re.findall(r"\(0x([0-9A-F]+), 0x([0-9A-F]+)\)", table)]
    assert ranges, "NFC_NEWER_THAN_HF not found in src/engine/tokenizer.rs"
    return ranges


NEWER_THAN_HF_NFC = _newer_than_hf_nfc()
# Sequences today's NFC composes (Todhri, Tulu-Tigalari, Dives Akuru, Gurung Khema, Kirat Rai).
NEWER_COMPOSITIONS = ["\U000105D2\u0307", "\U000105DA\u0307", "\U00011382\U000113C9",
                      "\U00011384\U000113BB", "\U0001138B\U000113C2", "\U000113C2\U000113C2",
                      "\U000113C2\U000113B8", "\U00011935\U00011930", "\U0001611E\U0001611E\U0001611F",
                      "\U00016129\U0001611F", "\U00016D67\U00016D67", "\U00016D63\U00016D67\U00016D67"]


def newer_unicode_texts() -> list[str]:
    """Every mark of NEWER_THAN_HF_NFC where reordering (after U+0345, ccc 240) and composition
    (e + mark + U+0301) would differ, and the compositions, alone and in text."""
    out = []
    for lo, hi in NEWER_THAN_HF_NFC:
        for cp in range(lo, hi + 1):
            c = chr(cp)
            out.append(f"a\u0345{c} e{c}\u0301")
    for seq in NEWER_COMPOSITIONS:
        out.append(seq)
        out.append(f"x {seq}\u0301 {seq}<|im_end|>")
    return out


class Gen:
    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def pick(self, pool):
        return self.r.choice(pool)

    def words(self, pool, lo, hi, sep=" "):
        return sep.join(self.pick(pool) for _ in range(self.r.randint(lo, hi)))

    def sep(self):
        return self.r.choice([" ", " ", " ", "", "\n", ", ", " - ", "\t", "  "])

    def sentence(self, pool, lo=2, hi=12):
        sep = "" if pool in (CHINESE, JAPANESE) else " "
        return self.words(pool, lo, hi, sep)

    def whitespace_run(self):
        return "".join(self.pick(WHITESPACE) for _ in range(self.r.randint(1, 8)))

    def insert_randomly(self, text: str, pieces: list[str]) -> str:
        for p in pieces:
            i = self.r.randint(0, len(text))
            text = text[:i] + p + text[i:]
        return text

    def kind_cjk(self):
        pools = [CHINESE, JAPANESE, KOREAN]
        parts = [self.sentence(self.pick(pools), 1, 10) for _ in range(self.r.randint(1, 4))]
        if self.r.random() < 0.3:
            parts.append(self.sentence(LATIN, 1, 4))
        return self.sep().join(parts)

    def kind_cyrillic(self):
        return self.sentence(CYRILLIC, 1, 14) + self.pick(["", ".", "!", "?", "\n", " 2025"])

    def kind_rtl(self):
        pool = self.pick([ARABIC, ARABIC, HEBREW])
        text = self.sentence(pool, 1, 10)
        text = self.insert_randomly(text, [self.pick(RTL_MARKS) for _ in range(self.r.randint(0, 4))])
        if self.r.random() < 0.4:
            text += " " + self.sentence(LATIN, 1, 3) + " " + self.pick(DIGITS)
        return text

    def kind_indic(self):
        return self.sentence(self.pick([DEVANAGARI, THAI]), 1, 12)

    def kind_emoji(self):
        n = self.r.randint(1, 10)
        out = []
        for _ in range(n):
            out.append(self.pick(EMOJI))
            if self.r.random() < 0.3:
                out.append(self.pick([" ", "", self.pick(LATIN), "\n"]))
        return "".join(out)

    def kind_nfc(self):
        out = []
        for _ in range(self.r.randint(1, 8)):
            c = self.r.random()
            if c < 0.5:
                out.append(self.pick(NFC_CHANGES))
            elif c < 0.7:
                out.append(self.pick(LATIN + CYRILLIC) + self.pick(COMBINING))
            elif c < 0.8:
                out.append(self.pick(COMBINING) * self.r.randint(1, 5))
            else:
                out.append(self.pick([" ", "", self.pick(LATIN)]))
        return "".join(out)

    def kind_code(self):
        text = self.pick(CODE)
        if self.r.random() < 0.5:
            text = text.replace("    ", self.pick(["  ", "\t", "        ", "    "]))
        if self.r.random() < 0.3:
            text = text.replace("\n", "\r\n")
        if self.r.random() < 0.3:
            text += self.whitespace_run()
        return text

    def kind_whitespace(self):
        out = []
        for _ in range(self.r.randint(1, 8)):
            out.append(self.whitespace_run() if self.r.random() < 0.6 else self.pick(LATIN + PUNCT))
        return "".join(out)

    def kind_digits(self):
        c = self.r.random()
        if c < 0.3:
            return "".join(self.r.choice("0123456789") for _ in range(self.r.randint(1, 60)))
        if c < 0.6:
            return self.words(DIGITS, 1, 8, self.pick([" ", "", ",", "-", "."]))
        return " ".join(self.pick(LATIN + DIGITS) for _ in range(self.r.randint(2, 10)))

    def kind_contractions(self):
        out = []
        for _ in range(self.r.randint(1, 8)):
            out.append(self.pick(CONTRACTIONS) if self.r.random() < 0.5 else self.pick(LATIN))
        return self.pick([" ", "", "  "]).join(out)

    def kind_urls(self):
        text = self.pick(URLS)
        if self.r.random() < 0.5:
            text = self.sentence(LATIN, 1, 4) + " " + text + self.pick(["", ".", " ", "\n", ")"])
        return text

    def kind_special(self):
        out = []
        for _ in range(self.r.randint(1, 8)):
            c = self.r.random()
            if c < 0.35:
                out.append(self.pick(ADDED))
            elif c < 0.55:
                out.append(self.pick(PARTIAL))
            elif c < 0.65:
                out.append(self.pick(COMBINING + NFC_CHANGES))
            else:
                out.append(self.pick([" ", "\n", "", self.sentence(LATIN, 1, 3), self.pick(CHINESE)]))
        return "".join(out)

    def kind_control(self):
        out = []
        for _ in range(self.r.randint(1, 8)):
            out.append(self.pick(CONTROL) if self.r.random() < 0.6 else self.pick(LATIN + PUNCT + [" "]))
        return "".join(out)

    def kind_long(self):
        c = self.r.random()
        n = self.r.randint(100, 3000)
        if c < 0.2:
            return "".join(self.r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
        if c < 0.35:
            return (self.pick(LATIN) * (n // 5 + 1))[:n]
        if c < 0.5:
            return "".join(self.pick(CHINESE[:30] + KOREAN[:10]) for _ in range(n // 3))
        if c < 0.6:
            return self.pick(WHITESPACE) * (n // 3) + self.pick(["", "x", "\n"])
        if c < 0.7:
            return "".join(self.r.choice("0123456789") for _ in range(n))
        if c < 0.8:
            return self.pick(PUNCT) * (n // 3)
        if c < 0.9:
            return "".join(self.pick(EMOJI) for _ in range(n // 10))
        return "".join(self.pick(CYRILLIC + ARABIC + DEVANAGARI + THAI) for _ in range(n // 8))

    def kind_prose(self):
        parts = []
        for _ in range(self.r.randint(1, 6)):
            s = self.sentence(LATIN, 3, 14)
            parts.append(s[0].upper() + s[1:] + self.pick([".", "!", "?", ",", ":", ";"]))
        return self.pick([" ", "\n", "\n\n", "  "]).join(parts)

    def kind_soup(self):
        pools = list(POOLS.values())
        out = []
        for _ in range(self.r.randint(1, 20)):
            out.append(self.pick(self.pick(pools)))
            if self.r.random() < 0.3:
                out.append(self.pick([" ", "", "\n", "\t"]))
        return "".join(out)

    def kind_chat(self):
        """A rendered chat prompt with an untrusted user turn that mixes scripts."""
        user = self.r.choice([self.kind_cjk, self.kind_special, self.kind_prose, self.kind_emoji,
                              self.kind_rtl, self.kind_nfc, self.kind_code])()
        frames = "".join(f"Time {i}.0s:<|vision_start|>{'<|video_pad|>' * self.r.randint(1, 3)}"
                         "<|vision_end|>" for i in range(self.r.randint(0, 3)))
        return (f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                f"{frames}{user}<|im_end|>\n<|im_start|>assistant\n")


KINDS = {
    "cjk": 10, "cyrillic": 4, "rtl": 6, "indic": 6, "emoji": 8, "nfc": 8, "code": 6,
    "whitespace": 8, "digits": 6, "contractions": 6, "urls": 4, "special": 10, "control": 6,
    "long": 2, "prose": 4, "soup": 14, "chat": 4,
}


def generate(seed: int, count: int) -> list[tuple[str, str]]:
    g = Gen(seed)
    out = [("fixed", t) for t in FIXED] + [("newer_unicode", t) for t in newer_unicode_texts()]
    names = list(KINDS)
    weights = [KINDS[k] for k in names]
    # Every kind at least once, then drawn by weight.
    schedule = names + g.r.choices(names, weights, k=max(0, count - len(out) - len(names)))
    for kind in schedule:
        out.append((kind, getattr(g, "kind_" + kind)()))
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def bench(tokenizer_path: Path, texts: list[str]) -> None:
    from tokenizers import Tokenizer

    t0 = time.perf_counter()
    tok = Tokenizer.from_file(str(tokenizer_path))
    load_ms = (time.perf_counter() - t0) * 1e3
    total = sum(len(t.encode()) for t in texts)
    for mode in (False, True):
        tok.encode_special_tokens = mode
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for t in texts:
                tok.encode(t, add_special_tokens=False)
            best = min(best, time.perf_counter() - t0)
        batch = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            tok.encode_batch(texts, add_special_tokens=False)
            batch = min(batch, time.perf_counter() - t0)
        label = "as text" if mode else "parsed "
        print(f"HF tokenizers {label}: encode {total / best / 1e6:.2f} MB/s one call per string, "
              f"{total / batch / 1e6:.2f} MB/s encode_batch ({len(texts)} strings, {total} bytes, "
              f"RAYON_NUM_THREADS={os.environ.get('RAYON_NUM_THREADS')})")
    print(f"HF tokenizers: Tokenizer.from_file {load_ms:.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--count", type=int, default=DEFAULT_COUNT)
    ap.add_argument("--force", action="store_true", help="rewrite the fixture even if up to date")
    ap.add_argument("--bench", action="store_true", help="time HF load and encode instead of writing")
    args = ap.parse_args()
    if not args.tokenizer.is_file():
        sys.exit(f"{args.tokenizer} is missing: run engines/qwen/fetch.sh .venv/bin/python")
    items = generate(args.seed, args.count)
    if args.bench:
        bench(args.tokenizer, [t for _, t in items])
        return

    import tokenizers
    from tokenizers import Tokenizer

    header = {
        "seed": args.seed, "count": len(items), "tokenizers": tokenizers.__version__,
        "tokenizer": str(args.tokenizer.relative_to(ROOT) if args.tokenizer.is_relative_to(ROOT)
                         else args.tokenizer),
        "sha256": sha256(args.tokenizer), "generator": sha256(Path(__file__)),
        "kinds": ["fixed", "newer_unicode", *KINDS], "unicode": unicodedata.unidata_version,
    }
    if not args.force and args.out.is_file():
        with open(args.out, encoding="utf-8") as f:
            try:
                current = json.loads(f.readline())
            except ValueError:
                current = None
        if current == header:
            print(f"{args.out}: up to date ({len(items)} strings, seed {args.seed})")
            return

    tok = Tokenizer.from_file(str(args.tokenizer))
    texts = [t for _, t in items]
    tok.encode_special_tokens = False
    parsed = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    tok.encode_special_tokens = True
    as_text = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    decoded = tok.decode_batch(parsed, skip_special_tokens=False)
    decoded_as_text = tok.decode_batch(as_text, skip_special_tokens=False)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    part = args.out.with_name(args.out.name + ".part")
    with open(part, "w", encoding="utf-8") as f:
        f.write(json.dumps(header, ensure_ascii=False) + "\n")
        for i, (kind, text) in enumerate(items):
            row = {"kind": kind, "text": text, "ids": parsed[i], "decoded": decoded[i],
                   "ids_as_text": as_text[i], "decoded_as_text": decoded_as_text[i]}
            f.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
    os.replace(part, args.out)
    size = args.out.stat().st_size
    print(f"{args.out}: {len(items)} strings (seed {args.seed}), {size} bytes, tokenizers "
          f"{tokenizers.__version__}")


if __name__ == "__main__":
    main()
