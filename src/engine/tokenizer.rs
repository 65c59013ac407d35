//! A compact byte-level BPE that reads Hugging Face `tokenizer.json` files of the Qwen2 /
//! VideoLLaMA3 / GPT-2 kind.
//!
//! Why not the `tokenizers` crate: it took ~130 s and 77 crates to build on the 2-core build box
//! (default features off, fancy-regex), for a runtime that needs one tokenizer family; this file
//! plus fancy-regex and unicode-normalization build in ~20 s. What it supports is exactly what those
//! files use, and anything else is refused at load time with the offending field named, never
//! tokenised differently:
//!
//! - model `BPE` (merges as `"a b"` strings or `["a", "b"]` pairs, `ignore_merges`), no dropout,
//!   no byte fallback, no subword prefix/suffix;
//! - normalizer none or `NFC`;
//! - pre-tokenizers `ByteLevel` (GPT-2 regex or none, `add_prefix_space`) and `Split`
//!   (regex or literal, `Isolated`), alone or in a `Sequence`;
//! - added tokens matched leftmost-longest on the raw text, with `lstrip`/`rstrip`;
//! - decoder `ByteLevel`.
//!
//! Parity with the Python `tokenizers` package is tested in tests/engine_tokenizer.rs (the tiny
//! vocabulary and variants of it) and tests/engine_tokenizer_qwen.rs (the real Qwen2.5/Qwen3
//! vocabulary on 10,000 strings). Two things it takes care to do as `tokenizers` 0.23 does rather
//! than as the Unicode of today would: NFC with Unicode 9.0's tables ([`nfc_as_hf`]), and special
//! tokens as text ([`SpecialText::AsText`]) matched and then dropped, not unseen.
//!
//! Speed (benches/tokenizer.rs): the file is parsed with its strings borrowed into flat tables
//! (~10x faster than through `serde_json::Value`); split patterns ending in `|\s+(?!\S)|\s+`
//! (GPT-2's, Qwen's) run as a plain regex with the look-ahead done by hand ([`Splitter`]), ~10x
//! faster than fancy-regex's backtracking VM; words are cached.

use super::error::EngineError;
use fancy_regex::Regex;
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::borrow::Cow;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

/// GPT-2's pre-tokenizer regex, used by `ByteLevel` with `use_regex: true`.
const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// The end of GPT-2's and Qwen's split patterns, which [`Splitter`] runs without fancy-regex's VM.
const LOOKAHEAD_TAIL: &str = r"|\s+(?!\S)|\s+";

/// Words longer than this are not cached (they are rare and would crowd out common ones).
const CACHE_WORD_MAX: usize = 64;
/// Cached words before the cache is cleared.
const CACHE_CAPACITY: usize = 20_000;

/// Combining marks and composition parts that unicode-normalization 0.1.26 (its tables: Unicode
/// 18.0) knows and Hugging Face `tokenizers` 0.23 (unicode-normalization-alignments, Unicode 9.0)
/// does not: there they are unassigned, so they never reorder and never compose. Found by
/// normalising, for every code point `c`, `c`, `a` U+0345 `c`, NFD(`c`) and NFD(`c`) U+0301 with
/// both and keeping the code points of the strings that differ; see [`nfc_as_hf`]. The fixture
/// of tests/engine_tokenizer_qwen.rs has a string for each.
#[rustfmt::skip]
const NFC_NEWER_THAN_HF: &[(u32, u32)] = &[
    (0x05C8, 0x05C9), (0x07FD, 0x07FD), (0x0897, 0x089F), (0x08CA, 0x08D3), (0x09FE, 0x09FE),
    (0x0C3C, 0x0C3C), (0x0D3B, 0x0D3C), (0x0EBA, 0x0EBA), (0x1715, 0x1715), (0x1ABF, 0x1AF0),
    (0x1DF6, 0x1DFA), (0xA82C, 0xA82C), (0x105D2, 0x105D2), (0x105DA, 0x105DA), (0x10D24, 0x10D27),
    (0x10D69, 0x10D6D), (0x10EAB, 0x10EAC), (0x10ECB, 0x10ECF), (0x10EF0, 0x10EFB),
    (0x10EFD, 0x10EFF), (0x10F46, 0x10F50), (0x10F82, 0x10F85), (0x11070, 0x11070),
    (0x1133B, 0x1133B), (0x11382, 0x11382), (0x11384, 0x11384), (0x1138B, 0x1138B),
    (0x11390, 0x11390), (0x113B8, 0x113B8), (0x113BB, 0x113BB), (0x113C2, 0x113C2),
    (0x113C9, 0x113C9), (0x113CE, 0x113D0), (0x1145E, 0x1145E), (0x11839, 0x1183A),
    (0x11930, 0x11930), (0x11935, 0x11935), (0x1193D, 0x1193E), (0x11943, 0x11943),
    (0x119E0, 0x119E0), (0x11A34, 0x11A34), (0x11A47, 0x11A47), (0x11A99, 0x11A99),
    (0x11D42, 0x11D42), (0x11D44, 0x11D45), (0x11D97, 0x11D97), (0x11F41, 0x11F42),
    (0x1611E, 0x16120), (0x16129, 0x16129), (0x1612F, 0x1612F), (0x16D63, 0x16D63),
    (0x16D67, 0x16D67), (0x16FF0, 0x16FF1), (0x1D127, 0x1D128), (0x1D250, 0x1D252),
    (0x1D25B, 0x1D25C), (0x1D25F, 0x1D25F), (0x1D280, 0x1D281), (0x1E08F, 0x1E08F),
    (0x1E130, 0x1E136), (0x1E2AE, 0x1E2AE), (0x1E2EC, 0x1E2EF), (0x1E4EC, 0x1E4EF),
    (0x1E5EE, 0x1E5EF), (0x1E6E3, 0x1E6E3), (0x1E6E6, 0x1E6E6), (0x1E6EE, 0x1E6EF),
    (0x1E6F5, 0x1E6F5),
];
/// The unicode-normalization tables [`NFC_NEWER_THAN_HF`] was derived against.
#[cfg(test)]
const NFC_TABLES_PROBED: (u8, u8, u8) = (18, 0, 0);

/// How special tokens written in the text are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialText {
    /// `<|im_start|>` in the text is the special token (prompt templates).
    Parse,
    /// Special tokens are ordinary text (user input: a question cannot inject `<|im_end|>`), as
    /// with `tokenizers`' `encode_special_tokens` (transformers' `split_special_tokens=True`).
    /// Added tokens that are not special (Qwen's `<think>`, `<tool_call>`) are still matched.
    AsText,
}

#[derive(Debug, Clone)]
struct AddedToken {
    content: String,
    id: u32,
    special: bool,
    lstrip: bool,
    rstrip: bool,
}

#[derive(Debug)]
enum PreStep {
    /// Split on a regex, keeping matches and gaps as pieces (`Isolated`).
    Split(Splitter),
    /// The byte-level step: optional prefix space, optional GPT-2 split.
    ByteLevel {
        add_prefix_space: bool,
        split: Option<Splitter>,
    },
}

/// A multiply-rotate hasher for keys that come from tokenizer.json (id pairs, token bytes), several
/// times faster than SipHash on them. Not for keys an attacker picks (hash flooding): the word
/// cache, keyed by input text, keeps std's randomised SipHash.
#[derive(Default, Clone, Copy)]
struct FileKeyHasher(u64);

impl FileKeyHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FileKeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        // The product's high bits are the well-mixed ones; hashbrown indexes with the low bits.
        let x = self.0;
        (x ^ (x >> 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (x >> 29)
    }
}

type FileKeyMap<K, V> = HashMap<K, V, BuildHasherDefault<FileKeyHasher>>;

fn pair_key(left: u32, right: u32) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

/// `flags` bits.
const ASSIGNED: u8 = 1;
const SPECIAL: u8 = 2;

/// A loaded `tokenizer.json`.
pub struct Tokenizer {
    path: PathBuf,
    nfc: bool,
    steps: Vec<PreStep>,
    byte_ids: [u32; 256],
    /// `left << 32 | right` -> `(rank, merged)`.
    merges: FileKeyMap<u64, (u32, u32)>,
    /// Whole-word lookup for `ignore_merges`.
    word_ids: Option<FileKeyMap<Box<[u8]>, u32>>,
    /// The bytes of all tokens back to back: id `i` is `token_data[offsets[i]..offsets[i + 1]]`.
    token_data: Vec<u8>,
    offsets: Vec<u32>,
    /// [`ASSIGNED`] | [`SPECIAL`] per id.
    flags: Vec<u8>,
    added: Vec<AddedToken>,
    /// Whether some added token starts with this byte (the matcher skips all other positions).
    added_first: [bool; 256],
    cache: Mutex<WordCache>,
}

/// Token ids of recently seen words (pre-tokenizer pieces).
type WordCache = HashMap<Box<[u8]>, Box<[u32]>>;

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .field("ids", &self.flags.len())
            .field("merges", &self.merges.len())
            .field("added", &self.added.len())
            .finish_non_exhaustive()
    }
}

/// A piece of pre-tokenised text: a byte range of the normalised segment, maybe preceded by the
/// space ByteLevel's `add_prefix_space` put there (which is not in the segment).
#[derive(Debug, Clone, Copy)]
struct Piece {
    start: usize,
    end: usize,
    space: bool,
}

#[derive(Clone, Copy)]
struct Sym {
    id: u32,
    prev: usize,
    next: usize,
    alive: bool,
}

/// A pair of adjacent symbols that a merge joins; ordered by rank, then position (the derived
/// order, fields first to last).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    rank: u32,
    pos: usize,
    left: u32,
    right: u32,
    merged: u32,
}

/// Buffers one `encode` call reuses from word to word.
#[derive(Default)]
struct Scratch {
    pieces: Vec<Piece>,
    next: Vec<Piece>,
    ranges: Vec<(usize, usize)>,
    joined: String,
    word: Vec<u8>,
    syms: Vec<Sym>,
    /// Min-heap on (rank, position) through Reverse.
    heap: BinaryHeap<Reverse<Candidate>>,
}

impl Tokenizer {
    /// Reads and checks a `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Tokenizer, EngineError> {
        let text = std::fs::read_to_string(path).map_err(|e| EngineError::Tokenizer {
            file: path.to_path_buf(),
            message: format!("cannot read: {e}"),
        })?;
        Tokenizer::from_json(&text, path)
    }

    /// Parses tokenizer JSON text; `path` is only used in messages.
    pub fn from_json(text: &str, path: &Path) -> Result<Tokenizer, EngineError> {
        let err = |message: String| EngineError::Tokenizer {
            file: path.to_path_buf(),
            message,
        };
        // From a `&str`, not bytes: checking the UTF-8 of the whole text at once is much faster
        // than string by string.
        let file: RawFile = serde_json::from_str(text)
            .map_err(|e| err(format!("not valid JSON (the file may be truncated): {e}")))?;
        build(file, path).map_err(err)
    }

    /// The file this tokenizer was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One past the highest id (ids below it may still be unassigned; see [`Tokenizer::has_id`]).
    pub fn len(&self) -> usize {
        self.flags.len()
    }

    /// Whether the tokenizer has no tokens at all (never true for a loaded file).
    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }

    /// Whether `id` names a token.
    pub fn has_id(&self, id: u32) -> bool {
        self.flags
            .get(id as usize)
            .is_some_and(|f| f & ASSIGNED != 0)
    }

    /// Whether `id` is a special added token (`<|im_end|>`, `<image>`, …).
    pub fn is_special(&self, id: u32) -> bool {
        self.flags
            .get(id as usize)
            .is_some_and(|f| f & SPECIAL != 0)
    }

    /// The bytes a token decodes to (`None` for an unassigned id).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        if !self.has_id(id) {
            return None;
        }
        Some(&self.token_data[self.offsets[i] as usize..self.offsets[i + 1] as usize])
    }

    /// The id of an added token by its text (`<|im_end|>`).
    pub fn added_token_id(&self, content: &str) -> Option<u32> {
        self.added
            .iter()
            .find(|t| t.content == content)
            .map(|t| t.id)
    }

    /// Encodes text without adding any special token of its own.
    pub fn encode(&self, text: &str, special: SpecialText) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 1);
        self.encode_into(text, special, &mut ids);
        ids
    }

    /// Like [`Tokenizer::encode`], appending to `ids`.
    pub fn encode_into(&self, text: &str, special: SpecialText, ids: &mut Vec<u32>) {
        let mut scratch = Scratch::default();
        let mut rest = 0;
        while rest < text.len() {
            match self.next_added(text, rest, special) {
                Some((start, end, id)) => {
                    self.encode_segment(&text[rest..start], ids, &mut scratch);
                    ids.push(id);
                    rest = end;
                }
                None => {
                    self.encode_segment(&text[rest..], ids, &mut scratch);
                    break;
                }
            }
        }
    }

    /// Decodes ids to text (invalid UTF-8 becomes U+FFFD); special tokens are skipped if asked.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            if skip_special && self.is_special(id) {
                continue;
            }
            if let Some(b) = self.token_bytes(id) {
                bytes.extend_from_slice(b);
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The leftmost (then longest) added token at or after `from`: `(start, end, id)` with the
    /// `lstrip`/`rstrip` whitespace included in the span.
    fn next_added(
        &self,
        text: &str,
        from: usize,
        special: SpecialText,
    ) -> Option<(usize, usize, u32)> {
        let bytes = text.as_bytes();
        let mut at = from;
        while let Some(skip) = bytes[at..]
            .iter()
            .position(|&b| self.added_first[b as usize])
        {
            // A token's first byte is never a UTF-8 continuation byte, so `start` is a char
            // boundary whenever a token matches there.
            let start = at + skip;
            let best = self
                .added
                .iter()
                .filter(|t| bytes[start..].starts_with(t.content.as_bytes()))
                .max_by_key(|t| t.content.len());
            match best {
                None => at = start + 1,
                // As `tokenizers` does with `encode_special_tokens`: the special token is matched
                // and the match dropped, so the search goes on after it.
                Some(t) if t.special && special == SpecialText::AsText => {
                    at = start + t.content.len();
                }
                Some(t) => {
                    let mut s = start;
                    let mut e = start + t.content.len();
                    if t.lstrip {
                        s = from + text[from..s].trim_end().len();
                    }
                    if t.rstrip {
                        e = text.len() - text[e..].trim_start().len();
                    }
                    return Some((s, e, t.id));
                }
            }
        }
        None
    }

    fn encode_segment(&self, segment: &str, ids: &mut Vec<u32>, scratch: &mut Scratch) {
        if segment.is_empty() {
            return;
        }
        let text = if self.nfc && !matches!(is_nfc_quick(segment.chars()), IsNormalized::Yes) {
            Cow::Owned(nfc_as_hf(segment))
        } else {
            Cow::Borrowed(segment)
        };
        let pieces = self.pre_tokenize(&text, scratch);
        for p in &pieces {
            let bytes = &text.as_bytes()[p.start..p.end];
            if p.space {
                let mut word = std::mem::take(&mut scratch.word);
                word.clear();
                word.push(b' ');
                word.extend_from_slice(bytes);
                self.encode_word(&word, ids, scratch);
                scratch.word = word;
            } else {
                self.encode_word(bytes, ids, scratch);
            }
        }
        scratch.pieces = pieces;
    }

    /// The pieces of `text` after all pre-tokenizer steps (the vector is `scratch.pieces`, to be
    /// put back).
    fn pre_tokenize(&self, text: &str, scratch: &mut Scratch) -> Vec<Piece> {
        let mut cur = std::mem::take(&mut scratch.pieces);
        let mut next = std::mem::take(&mut scratch.next);
        cur.clear();
        cur.push(Piece {
            start: 0,
            end: text.len(),
            space: false,
        });
        for step in &self.steps {
            next.clear();
            for &p in &cur {
                match step {
                    PreStep::Split(s) => split_piece(s, text, p, &mut next, scratch),
                    PreStep::ByteLevel {
                        add_prefix_space,
                        split,
                    } => {
                        let mut p = p;
                        if *add_prefix_space && !p.space && !text[p.start..p.end].starts_with(' ') {
                            p.space = true;
                        }
                        match split {
                            Some(s) => split_piece(s, text, p, &mut next, scratch),
                            None => next.push(p),
                        }
                    }
                }
            }
            std::mem::swap(&mut cur, &mut next);
        }
        scratch.next = next;
        cur
    }

    fn encode_word(&self, word: &[u8], ids: &mut Vec<u32>, scratch: &mut Scratch) {
        match word {
            [] => return,
            // One byte is its own token (digits, punctuation, spaces: a good part of all words).
            [b] => {
                ids.push(self.byte_ids[*b as usize]);
                return;
            }
            _ => {}
        }
        if let Some(map) = &self.word_ids
            && let Some(&id) = map.get(word)
        {
            ids.push(id);
            return;
        }
        let cacheable = word.len() <= CACHE_WORD_MAX;
        if cacheable {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(hit) = cache.get(word) {
                ids.extend_from_slice(hit);
                return;
            }
        }
        let start = ids.len();
        self.merge(word, ids, scratch);
        if cacheable {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.len() >= CACHE_CAPACITY {
                cache.clear();
            }
            cache.insert(word.into(), ids[start..].into());
        }
    }

    /// BPE merges of one word: the lowest-ranked adjacent pair first, leftmost among equals (as
    /// Hugging Face's `Word::merge_all`), with a heap so long words stay O(n log n).
    fn merge(&self, word: &[u8], out: &mut Vec<u32>, scratch: &mut Scratch) {
        const NONE: usize = usize::MAX;
        let n = word.len();
        let syms = &mut scratch.syms;
        syms.clear();
        syms.extend(word.iter().enumerate().map(|(i, &b)| Sym {
            id: self.byte_ids[b as usize],
            prev: if i == 0 { NONE } else { i - 1 },
            next: if i + 1 == n { NONE } else { i + 1 },
            alive: true,
        }));
        let heap = &mut scratch.heap;
        heap.clear();
        let push = |heap: &mut BinaryHeap<_>, syms: &[Sym], pos: usize| {
            let next = syms[pos].next;
            if next != NONE {
                let (left, right) = (syms[pos].id, syms[next].id);
                if let Some(&(rank, merged)) = self.merges.get(&pair_key(left, right)) {
                    heap.push(Reverse(Candidate {
                        rank,
                        pos,
                        left,
                        right,
                        merged,
                    }));
                }
            }
        };
        for pos in 0..n {
            push(heap, syms, pos);
        }
        while let Some(Reverse(Candidate {
            pos,
            left,
            right,
            merged,
            ..
        })) = heap.pop()
        {
            let next = syms[pos].next;
            // The pair may have changed since it was pushed; only merge what is still there.
            // (Hugging Face looks the current pair up and compares the merged id; that is the
            // same test, as a changed pair spells a longer string, so another token.)
            if !syms[pos].alive || next == NONE || syms[pos].id != left || syms[next].id != right {
                continue;
            }
            syms[pos].id = merged;
            let after = syms[next].next;
            syms[next].alive = false;
            syms[pos].next = after;
            if after != NONE {
                syms[after].prev = pos;
            }
            if syms[pos].prev != NONE {
                push(heap, syms, syms[pos].prev);
            }
            push(heap, syms, pos);
        }
        let mut i = 0;
        while i != NONE {
            out.push(syms[i].id);
            i = syms[i].next;
        }
    }
}

/// NFC as Hugging Face `tokenizers` computes it. Its tables are Unicode 9.0's; every character it
/// normalises is normalised the same by today's tables (Unicode's stability policy), but to it the
/// later marks and composition parts of [`NFC_NEWER_THAN_HF`] are unassigned: starters that never
/// reorder or compose, which cut the text into runs that are normalised on their own. So here: NFC
/// of the runs between those characters, the characters kept as they are.
fn nfc_as_hf(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut run = 0;
    for (i, c) in text.char_indices() {
        if newer_than_hf(c) {
            out.extend(text[run..i].nfc());
            out.push(c);
            run = i + c.len_utf8();
        }
    }
    out.extend(text[run..].nfc());
    out
}

fn newer_than_hf(c: char) -> bool {
    let c = c as u32;
    c >= NFC_NEWER_THAN_HF[0].0
        && NFC_NEWER_THAN_HF
            .binary_search_by(|&(lo, hi)| {
                if hi < c {
                    Ordering::Less
                } else if lo > c {
                    Ordering::Greater
                } else {
                    Ordering::Equal
                }
            })
            .is_ok()
}

/// A split pattern (`Isolated`: matches and the gaps between them are pieces).
///
/// A pattern that ends in `|\s+(?!\S)|\s+` (GPT-2's and Qwen's) also gets the form `HEAD|(\s+)`,
/// which has no look-around, so fancy-regex hands it whole to the `regex` crate's DFA instead of
/// running its backtracking VM (about ten times slower on these patterns). The look-ahead is then
/// applied by hand to what the last group matched, a maximal run of n whitespace chars: followed
/// by more text and n > 1, `\s+(?!\S)` would have backtracked to n - 1 chars (the last one is left
/// to lead the next word), so the match is cut to that; otherwise `\s+(?!\S)` or `\s+` matches all
/// of it, as here. HEAD's branches come first in both forms, so they match the same. HEAD must
/// compile on its own, which proves the tail's `|` is at the top level (not escaped, not inside a
/// group or class).
///
/// Every piece starts where the last one ended unless there is a gap, so where HEAD cannot tell
/// where it starts ([`looks_only_ahead`]) the fast form is also compiled anchored, `^(?:...)`, and
/// run on the rest of the text: a forward scan only, where an unanchored search also scans back
/// from the match's end to find its start.
#[derive(Debug)]
struct Splitter {
    /// The pattern as written.
    full: Regex,
    fast: Option<FastForm>,
}

#[derive(Debug)]
struct FastForm {
    /// `HEAD|(\s+)`.
    re: Regex,
    /// `^(?:HEAD|(\s+))`.
    anchored: Option<Regex>,
    /// The index of the `(\s+)` group.
    group: usize,
}

impl Splitter {
    fn new(pattern: &str) -> Result<Splitter, String> {
        let full = Regex::new(pattern)
            .map_err(|e| format!("pre_tokenizer regex `{pattern}` does not compile: {e}"))?;
        let fast = pattern.strip_suffix(LOOKAHEAD_TAIL).and_then(|head| {
            let group = Regex::new(head).ok()?.captures_len();
            Some(FastForm {
                re: Regex::new(&format!(r"{head}|(\s+)")).ok()?,
                anchored: looks_only_ahead(head)
                    .then(|| Regex::new(&format!(r"^(?:{head}|(\s+))")).ok())
                    .flatten(),
                group,
            })
        });
        Ok(Splitter { full, fast })
    }

    /// Appends the pieces of `text` as byte ranges of it.
    fn split(&self, text: &str, out: &mut Vec<(usize, usize)>) {
        let mark = out.len();
        if let Some(fast) = &self.fast {
            if split_fast(fast, text, out) {
                return;
            }
            out.truncate(mark);
        }
        split_isolated(&self.full, text, out);
    }
}

/// Whether a pattern matches the same on the text from some position on as on the whole text at
/// that position: no `^` but a class's `[^`, no `\A`, `\b`, `\B`, `\<`, `\>`, `\G`, `\K`, no
/// `(?<` (look-behind; named groups are refused with it, to keep this simple). Conservative: a
/// false `false` only costs speed.
fn looks_only_ahead(pattern: &str) -> bool {
    let b = pattern.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                if matches!(
                    b.get(i + 1),
                    Some(b'A' | b'b' | b'B' | b'<' | b'>' | b'G' | b'K')
                ) {
                    return false;
                }
                i += 2;
                continue;
            }
            b'[' if b.get(i + 1) == Some(&b'^') => i += 1,
            b'^' => return false,
            b'(' if b[i + 1..].starts_with(b"?<") => return false,
            _ => {}
        }
        i += 1;
    }
    true
}

/// [`Splitter`]'s fast form; `false` (and whatever it pushed is to be dropped) if the regex
/// matched the empty string, where iteration rules are subtle: the pattern as written then runs.
fn split_fast(fast: &FastForm, text: &str, out: &mut Vec<(usize, usize)>) -> bool {
    let mut last = 0;
    while last < text.len() {
        let anchored = match &fast.anchored {
            Some(re) => match re.find(&text[last..]) {
                Ok(m) => m.map(|m| (last + m.start(), last + m.end())),
                Err(_) => return false,
            },
            None => None,
        };
        let (start, mut end) = match anchored {
            Some(m) => m,
            // No piece starts here (or no anchored form): the next match, after a gap.
            None => match fast.re.find_from_pos(text, last) {
                Ok(Some(m)) => (m.start(), m.end()),
                Ok(None) => break,
                Err(_) => return false,
            },
        };
        if start == end {
            return false;
        }
        if end < text.len() {
            let run = &text[start..end];
            // `\s` is Unicode White_Space, as `char::is_whitespace`: cheap to rule out first.
            if let Some(c) = run.chars().next_back()
                && c.len_utf8() < run.len()
                && run.chars().all(char::is_whitespace)
                && matches!(fast.re.captures_from_pos(text, start),
                    Ok(Some(caps)) if caps.get(fast.group).is_some())
            {
                end -= c.len_utf8();
            }
        }
        if start > last {
            out.push((last, start));
        }
        out.push((start, end));
        last = end;
    }
    if last < text.len() {
        out.push((last, text.len()));
    }
    true
}

fn split_isolated(re: &Regex, text: &str, out: &mut Vec<(usize, usize)>) {
    let mut last = 0;
    for m in re.find_iter(text) {
        let Ok(m) = m else {
            // fancy-regex gives up on pathological backtracking; keep the rest as one piece rather
            // than lose text.
            break;
        };
        if m.start() > last {
            out.push((last, m.start()));
        }
        if m.end() > m.start() {
            out.push((m.start(), m.end()));
        }
        last = m.end();
    }
    if last < text.len() {
        out.push((last, text.len()));
    }
}

/// Splits one piece of `text` into `out`; a piece with a prefix space is split with the space.
fn split_piece(s: &Splitter, text: &str, p: Piece, out: &mut Vec<Piece>, scratch: &mut Scratch) {
    let ranges = &mut scratch.ranges;
    ranges.clear();
    if !p.space {
        s.split(&text[p.start..p.end], ranges);
        out.extend(ranges.iter().map(|&(a, b)| Piece {
            start: p.start + a,
            end: p.start + b,
            space: false,
        }));
        return;
    }
    let joined = &mut scratch.joined;
    joined.clear();
    joined.push(' ');
    joined.push_str(&text[p.start..p.end]);
    s.split(joined, ranges);
    // Offsets in `joined` are one past those in `text`; the piece at 0 keeps the space.
    out.extend(ranges.iter().map(|&(a, b)| Piece {
        start: p.start + a.saturating_sub(1),
        end: p.start + b - 1,
        space: a == 0,
    }));
}

/// GPT-2's reversible byte -> printable char table.
fn byte_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(256 + n).unwrap_or('\u{FFFD}');
            n += 1;
            c
        };
    }
    table
}

/// The inverse of [`byte_chars`]: char (all below 324) -> byte, -1 for other chars.
fn char_bytes(chars: &[char; 256]) -> [i16; 324] {
    let mut inv = [-1i16; 324];
    for (b, &c) in chars.iter().enumerate() {
        inv[c as usize] = b as i16;
    }
    inv
}

/// Appends the bytes of a token string, as Hugging Face's ByteLevel decoder does: every char
/// mapped back to its byte, or the string's own UTF-8 if any char is outside the table.
fn push_token_bytes(token: &str, inv: &[i16; 324], out: &mut Vec<u8>) {
    let mark = out.len();
    for c in token.chars() {
        match inv.get(c as usize) {
            Some(&b) if b >= 0 => out.push(b as u8),
            _ => {
                out.truncate(mark);
                out.extend_from_slice(token.as_bytes());
                return;
            }
        }
    }
}

// ---- tokenizer.json, parsed with its strings borrowed --------------------------------------
//
// The vocabulary and merges (300,000 strings in Qwen's file) are read straight into vectors of
// strings borrowed from the JSON text (all but those with escapes); everything else is small and
// read as `Value`. The visitors accept any JSON type where the file might have the wrong one, so
// that a wrong type is reported by `build` with the field named, not as invalid JSON.

#[derive(Deserialize)]
struct RawFile<'a> {
    #[serde(borrow, default)]
    model: Option<RawModel<'a>>,
    #[serde(default)]
    added_tokens: Value,
    #[serde(default)]
    normalizer: Value,
    #[serde(default)]
    pre_tokenizer: Value,
    #[serde(default)]
    decoder: Value,
}

/// `model`: `vocab` and `merges` as vectors, the other fields as they are.
#[derive(Default)]
struct RawModel<'a> {
    object: bool,
    other: serde_json::Map<String, Value>,
    /// `None`: missing or not an object.
    vocab: Option<RawVocab<'a>>,
    /// `None`: missing or not an array.
    merges: Option<RawMerges<'a>>,
}

#[derive(Default)]
struct RawVocab<'a> {
    entries: Vec<(Cow<'a, str>, u32)>,
    /// The first token whose id is not a u32.
    bad: Option<String>,
}

#[derive(Default)]
struct RawMerges<'a> {
    pairs: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// The first malformed entry's message.
    bad: Option<String>,
}

/// Consumes a value of any type (for lenient visitors' rejected branches).
macro_rules! accept_any_as {
    ($value:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}
macro_rules! accept_str_as {
    ($value:expr) => {
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}
macro_rules! accept_seq_as {
    ($value:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($value)
        }
    };
}
macro_rules! accept_map_as {
    ($value:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($value)
        }
    };
}

/// A JSON string borrowed where it has no escapes, or `None` for any other JSON value.
struct MaybeStr<'a>(Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for MaybeStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = MaybeStr<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(MaybeStr(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(MaybeStr(Some(Cow::Owned(v.to_owned()))))
            }
            accept_any_as!(MaybeStr(None));
            accept_seq_as!(MaybeStr(None));
            accept_map_as!(MaybeStr(None));
        }
        d.deserialize_any(V(PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawModel<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = RawModel<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("the model object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut m = RawModel {
                    object: true,
                    ..RawModel::default()
                };
                while let Some(key) = map.next_key::<MaybeStr>()? {
                    match key.0.as_deref() {
                        Some("vocab") => m.vocab = map.next_value::<Lenient<RawVocab>>()?.0,
                        Some("merges") => m.merges = map.next_value::<Lenient<RawMerges>>()?.0,
                        Some(k) => {
                            let k = k.to_owned();
                            m.other.insert(k, map.next_value::<Value>()?);
                        }
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(m)
            }
            accept_any_as!(RawModel::default());
            accept_str_as!(RawModel::default());
            accept_seq_as!(RawModel::default());
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// `Some` if the JSON type is the right one, `None` otherwise.
struct Lenient<T>(Option<T>);

impl<'de: 'a, 'a> Deserialize<'de> for Lenient<RawVocab<'a>> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Lenient<RawVocab<'a>>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("the vocabulary object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut v = RawVocab {
                    entries: Vec::with_capacity(map.size_hint().unwrap_or(0)),
                    bad: None,
                };
                while let Some(token) = map.next_key::<MaybeStr>()? {
                    let id = map.next_value::<Value>()?;
                    let token = token.0.unwrap_or_default();
                    match id.as_u64().and_then(|n| u32::try_from(n).ok()) {
                        Some(id) => v.entries.push((token, id)),
                        None => {
                            v.bad.get_or_insert_with(|| token.into_owned());
                        }
                    }
                }
                Ok(Lenient(Some(v)))
            }
            accept_any_as!(Lenient(None));
            accept_str_as!(Lenient(None));
            accept_seq_as!(Lenient(None));
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// One merge: `"a b"`, `[a, b]`, or something else (described for the message).
enum RawMerge<'a> {
    Text(Cow<'a, str>),
    Pair(Cow<'a, str>, Cow<'a, str>),
    NotStrings,
    Neither,
}

impl<'de: 'a, 'a> Deserialize<'de> for RawMerge<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = RawMerge<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a merge")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(RawMerge::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawMerge::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let a = seq.next_element::<MaybeStr>()?;
                let b = seq.next_element::<MaybeStr>()?;
                let mut more = false;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    more = true;
                }
                Ok(match (a, b, more) {
                    (Some(MaybeStr(Some(a))), Some(MaybeStr(Some(b))), false) => {
                        RawMerge::Pair(a, b)
                    }
                    (Some(_), Some(_), false) => RawMerge::NotStrings,
                    _ => RawMerge::Neither,
                })
            }
            accept_any_as!(RawMerge::Neither);
            accept_map_as!(RawMerge::Neither);
        }
        d.deserialize_any(V(PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Lenient<RawMerges<'a>> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Lenient<RawMerges<'a>>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("the merges array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut m = RawMerges {
                    pairs: Vec::with_capacity(seq.size_hint().unwrap_or(0)),
                    bad: None,
                };
                while let Some(merge) = seq.next_element::<RawMerge>()? {
                    let rank = m.pairs.len();
                    let pair = match merge {
                        RawMerge::Pair(a, b) => Ok((a, b)),
                        RawMerge::Text(Cow::Borrowed(s)) => match split_merge(s) {
                            Some((a, b)) => Ok((Cow::Borrowed(a), Cow::Borrowed(b))),
                            None => Err(format!("model.merges[{rank}] `{s}` is not two tokens")),
                        },
                        RawMerge::Text(Cow::Owned(s)) => match split_merge(&s) {
                            Some((a, b)) => {
                                Ok((Cow::Owned(a.to_owned()), Cow::Owned(b.to_owned())))
                            }
                            None => Err(format!("model.merges[{rank}] `{s}` is not two tokens")),
                        },
                        RawMerge::NotStrings => {
                            Err(format!("model.merges[{rank}] is not a pair of strings"))
                        }
                        RawMerge::Neither => Err(format!(
                            "model.merges[{rank}] is neither \"a b\" nor [a, b]"
                        )),
                    };
                    match pair {
                        Ok(pair) => m.pairs.push(pair),
                        Err(e) => {
                            m.bad.get_or_insert(e);
                            // Keep ranks counting.
                            m.pairs.push((Cow::Borrowed(""), Cow::Borrowed("")));
                        }
                    }
                }
                Ok(Lenient(Some(m)))
            }
            accept_any_as!(Lenient(None));
            accept_str_as!(Lenient(None));
            accept_map_as!(Lenient(None));
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// `"a b"` -> `("a", "b")`; `None` unless there is exactly one space.
fn split_merge(s: &str) -> Option<(&str, &str)> {
    let (a, b) = s.split_once(' ')?;
    (!b.contains(' ')).then_some((a, b))
}

fn build(file: RawFile, path: &Path) -> Result<Tokenizer, String> {
    let model = file.model.ok_or("no `model`")?;
    if !model.object {
        return Err("`model` is not an object".into());
    }
    let field = |k: &str| model.other.get(k);
    let kind = field("type").and_then(Value::as_str).unwrap_or("BPE");
    if kind != "BPE" {
        return Err(format!(
            "model.type `{kind}` is not supported (only byte-level BPE)"
        ));
    }
    if field("dropout").is_some_and(|v| !v.is_null()) {
        return Err("model.dropout is set; BPE dropout is not supported".into());
    }
    if field("byte_fallback").and_then(Value::as_bool) == Some(true) {
        return Err(
            "model.byte_fallback = true (a SentencePiece-style BPE) is not supported".into(),
        );
    }
    for key in ["continuing_subword_prefix", "end_of_word_suffix"] {
        if field(key)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        {
            return Err(format!(
                "model.{key} is set; only byte-level BPE without it is supported"
            ));
        }
    }
    let ignore_merges = field("ignore_merges")
        .and_then(Value::as_bool)
        .unwrap_or(false);

    let vocab = model
        .vocab
        .ok_or("model.vocab is missing or not an object")?;
    if let Some(token) = vocab.bad {
        return Err(format!(
            "model.vocab[{token:?}]: id must be a non-negative integer"
        ));
    }
    let chars = byte_chars();
    let inv = char_bytes(&chars);
    let mut ids: FileKeyMap<&str, u32> = FileKeyMap::default();
    ids.reserve(vocab.entries.len());
    let mut max_id = 0u32;
    for (token, id) in &vocab.entries {
        ids.insert(token, *id);
        max_id = max_id.max(*id);
    }

    let mut added = Vec::new();
    if let Some(list) = file.added_tokens.as_array() {
        for (i, t) in list.iter().enumerate() {
            let content = t
                .get("content")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("added_tokens[{i}].content is missing"))?;
            let id = t
                .get("id")
                .and_then(Value::as_u64)
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| format!("added_tokens[{i}].id is missing"))?;
            let flag = |k: &str| t.get(k).and_then(Value::as_bool).unwrap_or(false);
            if flag("single_word") {
                return Err(format!(
                    "added_tokens[{i}] ({content}): single_word = true is not supported"
                ));
            }
            if content.is_empty() {
                return Err(format!("added_tokens[{i}]: empty content"));
            }
            max_id = max_id.max(id);
            added.push(AddedToken {
                content: content.to_string(),
                id,
                special: flag("special"),
                lstrip: flag("lstrip"),
                rstrip: flag("rstrip"),
            });
        }
    }

    // Token strings by id: the vocabulary's first (the merges look there), then added tokens
    // over them; then their bytes back to back.
    let size = max_id as usize + 1;
    let mut source: Vec<Option<&str>> = vec![None; size];
    for (&token, &id) in &ids {
        source[id as usize] = Some(token);
    }

    let mut byte_ids = [0u32; 256];
    for (b, c) in chars.iter().enumerate() {
        let mut buf = [0u8; 4];
        byte_ids[b] = *ids.get(&*c.encode_utf8(&mut buf)).ok_or_else(|| {
            format!(
                "model.vocab has no token for byte 0x{b:02x} (`{c}`), so it is not a byte-level BPE"
            )
        })?;
    }

    let raw_merges = model
        .merges
        .ok_or("model.merges is missing or not an array")?;
    if let Some(e) = raw_merges.bad {
        return Err(e);
    }
    let mut merges = FileKeyMap::default();
    merges.reserve(raw_merges.pairs.len());
    let mut joined = String::new();
    // Files list merges in the order their results were added to the vocabulary (Qwen's merge r
    // makes id 256 + r), so the merged token is first looked for at the id after the last one:
    // a string compare instead of a hash lookup, for a third of the lookups.
    let mut next_merged: Option<u32> = None;
    for (rank, (a, b)) in raw_merges.pairs.iter().enumerate() {
        let lookup = |t: &str| {
            ids.get(t)
                .copied()
                .ok_or_else(|| format!("model.merges[{rank}]: `{t}` is not in model.vocab"))
        };
        let guess = next_merged.filter(|&id| {
            source.get(id as usize).copied().flatten().is_some_and(|s| {
                s.len() == a.len() + b.len() && s.starts_with(&**a) && s.ends_with(&**b)
            })
        });
        let merged = match guess {
            Some(id) => id,
            None => {
                joined.clear();
                joined.push_str(a);
                joined.push_str(b);
                lookup(&joined)?
            }
        };
        next_merged = merged.checked_add(1);
        let key = pair_key(lookup(a)?, lookup(b)?);
        // The first (lowest-ranked) occurrence wins, as in Hugging Face.
        merges.entry(key).or_insert((rank as u32, merged));
    }

    let mut flags = vec![0u8; size];
    for t in &added {
        source[t.id as usize] = Some(&t.content);
        if t.special {
            flags[t.id as usize] |= SPECIAL;
        }
    }
    let mut token_data = Vec::with_capacity(vocab.entries.len() * 7);
    let mut offsets = Vec::with_capacity(size + 1);
    for (id, s) in source.iter().enumerate() {
        offsets.push(token_data.len());
        if let Some(s) = s {
            flags[id] |= ASSIGNED;
            push_token_bytes(s, &inv, &mut token_data);
        }
    }
    offsets.push(token_data.len());
    let offsets: Vec<u32> = offsets
        .into_iter()
        .map(u32::try_from)
        .collect::<Result<_, _>>()
        .map_err(|_| "the tokens add up to more than 4 GiB".to_string())?;

    let nfc = match &file.normalizer {
        Value::Null => false,
        n => parse_normalizer(n)?,
    };
    let mut steps = Vec::new();
    match &file.pre_tokenizer {
        Value::Null => {}
        p => parse_pre(p, &mut steps)?,
    }
    if !steps.iter().any(|s| matches!(s, PreStep::ByteLevel { .. })) {
        return Err("pre_tokenizer has no ByteLevel step, so this is not a byte-level BPE".into());
    }
    match &file.decoder {
        d if d.get("type").and_then(Value::as_str) == Some("ByteLevel") => {}
        Value::Null => {
            return Err("decoder is missing (a byte-level BPE needs the ByteLevel decoder)".into());
        }
        d => {
            return Err(format!(
                "decoder type `{}` is not supported (only ByteLevel)",
                d.get("type").and_then(Value::as_str).unwrap_or("?")
            ));
        }
    }

    let word_ids = ignore_merges.then(|| {
        ids.iter()
            .map(|(t, &id)| {
                let mut bytes = Vec::new();
                push_token_bytes(t, &inv, &mut bytes);
                (bytes.into_boxed_slice(), id)
            })
            .collect()
    });
    let mut added_first = [false; 256];
    for t in &added {
        added_first[t.content.as_bytes()[0] as usize] = true;
    }
    Ok(Tokenizer {
        path: path.to_path_buf(),
        nfc,
        steps,
        byte_ids,
        merges,
        word_ids,
        token_data,
        offsets,
        flags,
        added,
        added_first,
        cache: Mutex::new(HashMap::new()),
    })
}

fn parse_normalizer(n: &Value) -> Result<bool, String> {
    match n.get("type").and_then(Value::as_str) {
        Some("NFC") => Ok(true),
        Some("Sequence") => {
            let list = n
                .get("normalizers")
                .and_then(Value::as_array)
                .ok_or("normalizer.normalizers is missing")?;
            let mut nfc = false;
            for item in list {
                nfc |= parse_normalizer(item)?;
            }
            Ok(nfc)
        }
        other => Err(format!(
            "normalizer `{}` is not supported (only NFC)",
            other.unwrap_or("?")
        )),
    }
}

fn parse_pre(p: &Value, steps: &mut Vec<PreStep>) -> Result<(), String> {
    match p.get("type").and_then(Value::as_str) {
        Some("Sequence") => {
            let list = p
                .get("pretokenizers")
                .and_then(Value::as_array)
                .ok_or("pre_tokenizer.pretokenizers is missing")?;
            for item in list {
                parse_pre(item, steps)?;
            }
        }
        Some("ByteLevel") => {
            let flag = |k: &str, d: bool| p.get(k).and_then(Value::as_bool).unwrap_or(d);
            steps.push(PreStep::ByteLevel {
                add_prefix_space: flag("add_prefix_space", false),
                split: if flag("use_regex", true) {
                    Some(Splitter::new(GPT2_PATTERN)?)
                } else {
                    None
                },
            });
        }
        Some("Split") => {
            let behavior = p.get("behavior").and_then(Value::as_str).unwrap_or("");
            if behavior != "Isolated" {
                return Err(format!(
                    "pre_tokenizer Split behavior `{behavior}` is not supported (only Isolated)"
                ));
            }
            if p.get("invert").and_then(Value::as_bool) == Some(true) {
                return Err("pre_tokenizer Split invert = true is not supported".into());
            }
            let pattern = p
                .get("pattern")
                .ok_or("pre_tokenizer Split has no pattern")?;
            let splitter = if let Some(r) = pattern.get("Regex").and_then(Value::as_str) {
                Splitter::new(r)?
            } else if let Some(s) = pattern.get("String").and_then(Value::as_str) {
                Splitter::new(&fancy_regex::escape(s))?
            } else {
                return Err("pre_tokenizer Split pattern is neither Regex nor String".into());
            };
            steps.push(PreStep::Split(splitter));
        }
        other => {
            return Err(format!(
                "pre_tokenizer `{}` is not supported (ByteLevel, Split or a Sequence of them)",
                other.unwrap_or("?")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_table_is_gpt2s() {
        let t = byte_chars();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'a' as usize], 'a');
        assert_eq!(t[0], 'Ā');
        let unique: std::collections::HashSet<char> = t.iter().copied().collect();
        assert_eq!(unique.len(), 256);
        let inv = char_bytes(&t);
        assert!(
            t.iter()
                .enumerate()
                .all(|(b, &c)| inv[c as usize] == b as i16)
        );
    }

    #[test]
    fn the_fast_split_form_cuts_whitespace_runs_as_the_look_ahead_does() {
        let qwen = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
        for pattern in [qwen, GPT2_PATTERN] {
            let s = Splitter::new(pattern).unwrap();
            assert!(
                s.fast.as_ref().is_some_and(|f| f.anchored.is_some()),
                "{pattern}"
            );
            for text in [
                "a   b",
                "a \t\u{3000} b",
                "   ",
                "x   ",
                " \n  \n   y",
                "\t\tx",
                "a  ",
                " ",
                "  1",
                "a\u{a0}\u{a0}b",
                "x \r\n\r\n  z  !",
                "it's  'LL  ",
                "   \u{2028}  q",
            ] {
                let (mut fast, mut full) = (Vec::new(), Vec::new());
                s.split(text, &mut fast);
                split_isolated(&s.full, text, &mut full);
                assert_eq!(fast, full, "{pattern} on {text:?}");
            }
        }
        // Not a top-level tail (the `|` is escaped): only the pattern as written.
        assert!(Splitter::new(r"a\|\s+(?!\S)|\s+").unwrap().fast.is_none());
        // Patterns that look before the match are not run on the rest of the text.
        for head in [r"^a", r"\ba", r"(?<=x)a", r"(?m)^a|b", r"\[^a", r"\\^"] {
            assert!(!looks_only_ahead(head), "{head}");
        }
        for head in [r"[^a]b", r"\^", r"a|[[:alpha:]&&[^x]]"] {
            assert!(looks_only_ahead(head), "{head}");
        }
        let s = Splitter::new(r"\bx+|\s+(?!\S)|\s+").unwrap();
        assert!(s.fast.as_ref().is_some_and(|f| f.anchored.is_none()));
        let (mut fast, mut full) = (Vec::new(), Vec::new());
        s.split("ax xx  y", &mut fast);
        split_isolated(&s.full, "ax xx  y", &mut full);
        assert_eq!(fast, full);
    }

    #[test]
    fn nfc_leaves_marks_newer_than_hugging_faces_tables_alone() {
        assert_eq!(
            unicode_normalization::UNICODE_VERSION,
            NFC_TABLES_PROBED,
            "unicode-normalization has new tables: probe NFC_NEWER_THAN_HF again"
        );
        assert!(NFC_NEWER_THAN_HF.windows(2).all(|w| w[0].1 < w[1].0));
        assert!(NFC_NEWER_THAN_HF.iter().all(|&(lo, hi)| lo <= hi));
        // U+05C8 is ccc 0 to tokenizers (unassigned in Unicode 9), so it does not move before
        // U+0345 (ccc 240).
        assert_eq!(nfc_as_hf("a\u{345}\u{5c8}"), "a\u{345}\u{5c8}");
        assert_eq!(nfc_as_hf("a\u{345}\u{5b0}"), "a\u{5b0}\u{345}");
        // Kirat Rai (Unicode 16) composes today, not in tokenizers.
        assert_eq!(nfc_as_hf("\u{16d67}\u{16d67}"), "\u{16d67}\u{16d67}");
        // Everything else is plain NFC, runs on both sides included.
        assert_eq!(
            nfc_as_hf("e\u{301}\u{1df6}e\u{301}"),
            "\u{e9}\u{1df6}\u{e9}"
        );
    }
}
