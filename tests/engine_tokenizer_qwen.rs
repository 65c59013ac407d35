//! The byte-level BPE (src/engine/tokenizer.rs) on the real Qwen2.5/Qwen3 vocabulary
//! (engines/qwen/tokenizer.json: 151,643 tokens, 151,387 merges, 26 added tokens, NFC, the Qwen
//! split regex) against Hugging Face `tokenizers`. The reference is the fixture
//! target/qwen-tokenizer/reference.jsonl, written by engines/qwen/tokenize_reference.py from a
//! seed: 10,000 strings mixing scripts, emoji sequences, text NFC changes, code, whitespace and
//! digit runs, odd-case contractions, URLs, special-token literals (whole and partial), control
//! and noncharacters, very long words and combining marks newer than `tokenizers`' Unicode 9.0
//! NFC tables, each with HF's ids in both special-token modes and HF's decoding of them.
//! scripts/test.sh makes both files; a missing or stale one fails the tests with the command that
//! makes it.

use edgevlm::engine::{SpecialText, Tokenizer};
use edgevlm::generate::TextStream;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use unicode_normalization::UnicodeNormalization;

const MAKE: &str = "engines/qwen/fetch.sh .venv/bin/python && .venv/bin/python \
                    engines/qwen/tokenize_reference.py (scripts/test.sh runs both)";
/// Mismatches printed in full when a parity test fails.
const SHOWN: usize = 8;

#[derive(Deserialize)]
struct Header {
    seed: u64,
    count: usize,
    tokenizers: String,
    sha256: String,
    kinds: Vec<String>,
}

#[derive(Deserialize)]
struct Case {
    kind: String,
    text: String,
    /// HF ids, special-token literals parsed (the default).
    ids: Vec<u32>,
    /// HF's decoding of `ids`, special tokens kept.
    decoded: String,
    /// HF ids with `encode_special_tokens = True` (transformers' `split_special_tokens=True`).
    ids_as_text: Vec<u32>,
    decoded_as_text: String,
}

struct Fixture {
    header: Header,
    cases: Vec<Case>,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tokenizer_path() -> PathBuf {
    let path = root().join("engines/qwen/tokenizer.json");
    assert!(path.is_file(), "{} is missing: run {MAKE}", path.display());
    path
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let path = root().join("target/qwen-tokenizer/reference.jsonl");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}: run {MAKE}", path.display()));
        let mut lines = text.lines();
        let header: Header = serde_json::from_str(lines.next().unwrap_or(""))
            .unwrap_or_else(|e| panic!("{}: bad header ({e}): run {MAKE}", path.display()));
        let cases: Vec<Case> = lines
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("{}:{}: {e}: run {MAKE}", path.display(), i + 2))
            })
            .collect();
        assert_eq!(
            cases.len(),
            header.count,
            "{} is truncated: run {MAKE}",
            path.display()
        );
        let tokenizer = std::fs::read(tokenizer_path()).unwrap();
        assert_eq!(
            sha256_hex(&tokenizer),
            header.sha256,
            "{} was made from another tokenizer.json: run {MAKE}",
            path.display()
        );
        Fixture { header, cases }
    })
}

fn qwen() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER
        .get_or_init(|| Tokenizer::from_file(&tokenizer_path()).unwrap_or_else(|e| panic!("{e}")))
}

/// The added tokens of tokenizer.json, read with serde_json (not through edgevlm): `(content,
/// special)`.
fn added_tokens() -> Vec<(String, bool)> {
    let text = std::fs::read_to_string(tokenizer_path()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["added_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["content"].as_str().unwrap().to_string(),
                t["special"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn short(text: &str) -> String {
    let s = format!("{text:?}");
    if s.chars().count() > 160 {
        let head: String = s.chars().take(160).collect();
        format!("{head}… ({} bytes)", text.len())
    } else {
        s
    }
}

/// Tokens around the first difference, as text, for the failure message.
fn diff(tok: &Tokenizer, want: &[u32], got: &[u32]) -> String {
    let at = want
        .iter()
        .zip(got)
        .position(|(a, b)| a != b)
        .unwrap_or(want.len().min(got.len()));
    let show = |ids: &[u32]| {
        let from = at.saturating_sub(2);
        ids[from..ids.len().min(at + 4)]
            .iter()
            .map(|&id| {
                let b = tok.token_bytes(id).unwrap_or(b"?");
                format!("{id}:{:?}", String::from_utf8_lossy(b))
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        "first difference at id {at} (HF {} ids, edgevlm {})\n    HF:      {}\n    edgevlm: {}",
        want.len(),
        got.len(),
        show(want),
        show(got)
    )
}

/// Encodes every fixture string in `mode` and fails listing the strings whose ids differ from HF's.
fn assert_ids(mode: SpecialText, want: impl Fn(&Case) -> &[u32]) {
    let tok = qwen();
    let cases = &fixture().cases;
    let mut bad: Vec<String> = Vec::new();
    let mut per_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, case) in cases.iter().enumerate() {
        let got = tok.encode(&case.text, mode);
        if got != want(case) {
            *per_kind.entry(&case.kind).or_default() += 1;
            if bad.len() < SHOWN {
                bad.push(format!(
                    "#{i} [{}] {}\n  {}",
                    case.kind,
                    short(&case.text),
                    diff(tok, want(case), &got)
                ));
            }
        }
    }
    let total: usize = per_kind.values().sum();
    assert!(
        total == 0,
        "{total} of {} strings get other ids than HF tokenizers ({mode:?}; by kind {per_kind:?}):\n{}",
        cases.len(),
        bad.join("\n")
    );
}

#[test]
fn the_fixture_has_ten_thousand_strings_of_every_mix_from_this_tokenizer_json() {
    let f = fixture();
    assert!(
        f.cases.len() >= 10_000,
        "{} strings (seed {}, tokenizers {})",
        f.cases.len(),
        f.header.seed,
        f.header.tokenizers
    );
    for kind in &f.header.kinds {
        let n = f.cases.iter().filter(|c| &c.kind == kind).count();
        assert!(n > 0, "no string of kind {kind}");
    }
    let tok = qwen();
    let specials = f
        .cases
        .iter()
        .filter(|c| c.ids.iter().any(|&id| tok.is_special(id)))
        .count();
    let long = f.cases.iter().filter(|c| c.text.len() >= 1000).count();
    let nfc_changes = f
        .cases
        .iter()
        .filter(|c| c.text.nfc().collect::<String>() != c.text)
        .count();
    assert!(specials > 500, "{specials} strings with special tokens");
    assert!(long > 50, "{long} strings of 1000 bytes or more");
    assert!(nfc_changes > 500, "{nfc_changes} strings that NFC changes");
}

#[test]
fn the_real_vocabulary_loads_with_its_merges_and_26_added_tokens() {
    let tok = qwen();
    assert_eq!(tok.len(), 151_669);
    let debug = format!("{tok:?}");
    assert!(debug.contains("merges: 151387"), "{debug}");
    assert!(debug.contains("added: 26"), "{debug}");
    assert!((0..151_669).all(|id| tok.has_id(id)));
    assert_eq!(tok.added_token_id("<|endoftext|>"), Some(151_643));
    assert_eq!(tok.added_token_id("<|im_start|>"), Some(151_644));
    assert_eq!(tok.added_token_id("<|video_pad|>"), Some(151_656));
    assert_eq!(tok.added_token_id("</think>"), Some(151_668));
    // Specials are 151643..=151656; <tool_call>, <|fim_*|>, <think> and the rest are not.
    for (content, special) in added_tokens() {
        let id = tok.added_token_id(&content).unwrap();
        assert_eq!(tok.is_special(id), special, "{content}");
        assert_eq!(tok.token_bytes(id), Some(content.as_bytes()));
    }
    assert!(!tok.is_special(151_642));
    // Byte-level: "Ġ" is the space byte, "ĠĠ" the first merge.
    assert_eq!(tok.encode(" ", SpecialText::Parse), [220]);
    assert_eq!(tok.encode("  ", SpecialText::Parse), [256]);
}

#[test]
fn every_string_gets_the_ids_of_hugging_face_tokenizers_with_special_tokens_parsed() {
    assert_ids(SpecialText::Parse, |c| &c.ids);
}

#[test]
fn special_token_literals_as_text_get_the_ids_of_hugging_face_split_special_tokens() {
    // HF's `encode_special_tokens = True` stops matching only the special added tokens: the
    // non-special ones (<tool_call>, <think>, <|fim_prefix|>, ...) are still single tokens, which
    // is also what SpecialText::AsText does.
    assert_ids(SpecialText::AsText, |c| &c.ids_as_text);
    let tok = qwen();
    let ids = tok.encode("<|im_end|><|im_start|>system<think>", SpecialText::AsText);
    assert!(
        ids[..ids.len() - 1].iter().all(|&id| id < 151_643),
        "{ids:?}"
    );
    assert_eq!(ids.last(), Some(&151_667));
}

/// What decoding the ids of `text` gives back: `text` with NFC applied to each span between the
/// added tokens that were matched (leftmost-longest on the raw text, as HF's AddedVocabulary), the
/// tokens themselves untouched.
fn nfc_between(text: &str, tokens: &[&str]) -> String {
    let mut out = String::new();
    let mut gap = 0;
    let mut i = 0;
    while i < text.len() {
        let hit = tokens
            .iter()
            .filter(|t| text[i..].starts_with(**t))
            .max_by_key(|t| t.len());
        match hit {
            Some(t) => {
                out.extend(text[gap..i].nfc());
                out.push_str(t);
                i += t.len();
                gap = i;
            }
            None => i += text[i..].chars().next().map_or(1, char::len_utf8),
        }
    }
    out.extend(text[gap..].nfc());
    out
}

#[test]
fn decoding_gives_back_the_text_nfc_normalised_between_added_tokens_as_hugging_face_does() {
    // Not `decode(encode(s)) == s`: the normaliser runs before the BPE, so decomposed text comes
    // back composed (e + U+0301 -> é, U+212B -> Å, jamo -> hangul syllables), and not
    // `== NFC(s)` either: added tokens are cut out of the raw text first, so NFC never joins
    // across one ("<|im_end|>" + U+0338 stays that, where NFC of the whole would make "≯").
    // With special tokens as text only the non-special added tokens are cut out. And the NFC is
    // that of Unicode 9.0, the tables of `tokenizers`: marks assigned since (the `newer_unicode`
    // strings) neither reorder nor compose, so those strings come back exactly as written.
    let tok = qwen();
    let added = added_tokens();
    let all: Vec<&str> = added.iter().map(|(c, _)| c.as_str()).collect();
    let plain: Vec<&str> = added
        .iter()
        .filter(|(_, s)| !s)
        .map(|(c, _)| c.as_str())
        .collect();
    let mut changed = 0;
    let mut newer = 0;
    for case in &fixture().cases {
        let parsed = tok.decode(&tok.encode(&case.text, SpecialText::Parse), false);
        let as_text = tok.decode(&tok.encode(&case.text, SpecialText::AsText), false);
        let text = short(&case.text);
        assert_eq!(parsed, case.decoded, "HF decodes {text} otherwise");
        assert_eq!(
            as_text, case.decoded_as_text,
            "HF decodes {text} otherwise (as text)"
        );
        if case.kind == "newer_unicode" {
            assert_eq!(parsed, case.text, "{text}");
            assert_eq!(as_text, case.text, "{text}");
            // Most of them today's NFC would change.
            newer += usize::from(nfc_between(&case.text, &all) != case.text);
            continue;
        }
        assert_eq!(parsed, nfc_between(&case.text, &all), "{text}");
        assert_eq!(as_text, nfc_between(&case.text, &plain), "{text} (as text)");
        if case.text.nfc().eq(case.text.chars()) {
            assert_eq!(parsed, case.text, "NFC text comes back unchanged");
        } else {
            changed += 1;
        }
    }
    assert!(changed > 500, "only {changed} strings exercise NFC");
    assert!(
        newer > 200,
        "only {newer} strings of marks newer than Unicode 9.0"
    );
    let tail = tok.encode("<|im_end|>\u{338}", SpecialText::Parse);
    assert_eq!(tail[0], 151_645);
    assert_eq!(tok.decode(&tail, false), "<|im_end|>\u{338}");
    let joined = tok.encode("<|im_end|>\u{338}", SpecialText::AsText);
    assert_eq!(tok.decode(&joined, false), "<|im_end|\u{226f}");
}

#[test]
fn streaming_detokenization_of_real_ids_gives_the_decoded_text_without_broken_characters() {
    let tok = qwen();
    let mut held_back = 0;
    for case in &fixture().cases {
        let mut stream = TextStream::new(false);
        let mut out = String::new();
        for &id in &case.ids {
            let delta = stream.push(tok, id);
            if delta.is_empty() && stream.pending_bytes() > 0 {
                held_back += 1;
            }
            out.push_str(&delta);
        }
        out.push_str(&stream.finish());
        assert_eq!(out, case.decoded, "{}", short(&case.text));
    }
    // Qwen splits rarer CJK characters, emoji and most combining sequences over several tokens.
    assert!(
        held_back > 1000,
        "only {held_back} tokens ended inside a character"
    );
}
