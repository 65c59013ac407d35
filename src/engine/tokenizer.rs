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
//! Parity with the Python `tokenizers` package is tested in tests/engine_tokenizer.rs.

use super::error::EngineError;
use fancy_regex::Regex;
use serde_json::Value;
use std::collections::{BinaryHeap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use unicode_normalization::UnicodeNormalization;

/// GPT-2's pre-tokenizer regex, used by `ByteLevel` with `use_regex: true`.
const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Words longer than this are not cached (they are rare and would crowd out common ones).
const CACHE_WORD_MAX: usize = 64;
/// Cached words before the cache is cleared.
const CACHE_CAPACITY: usize = 20_000;

/// How special tokens written in the text are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialText {
    /// `<|im_start|>` in the text is the special token (prompt templates).
    Parse,
    /// Special tokens are ordinary text (user input: a question cannot inject `<|im_end|>`).
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

#[derive(Debug, Clone)]
enum PreStep {
    /// Split on a regex, keeping matches and gaps as pieces (`Isolated`).
    Split(Regex),
    /// The byte-level step: optional prefix space, optional GPT-2 split.
    ByteLevel {
        add_prefix_space: bool,
        split: Option<Regex>,
    },
}

/// A loaded `tokenizer.json`.
pub struct Tokenizer {
    path: PathBuf,
    nfc: bool,
    steps: Vec<PreStep>,
    byte_ids: [u32; 256],
    /// `(left, right)` -> `(rank, merged)`.
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// Whole-word lookup for `ignore_merges`.
    word_ids: Option<HashMap<Box<[u8]>, u32>>,
    /// Bytes of each id (`None`: no token has this id).
    bytes: Vec<Option<Box<[u8]>>>,
    special: Vec<bool>,
    added: Vec<AddedToken>,
    cache: Mutex<WordCache>,
}

/// Token ids of recently seen words (pre-tokenizer pieces).
type WordCache = HashMap<Box<[u8]>, Box<[u32]>>;

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .field("ids", &self.bytes.len())
            .field("merges", &self.merges.len())
            .field("added", &self.added.len())
            .finish_non_exhaustive()
    }
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
        let root: Value = serde_json::from_str(text)
            .map_err(|e| err(format!("not valid JSON (the file may be truncated): {e}")))?;
        build(&root, path).map_err(err)
    }

    /// The file this tokenizer was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One past the highest id (ids below it may still be unassigned; see [`Tokenizer::has_id`]).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the tokenizer has no tokens at all (never true for a loaded file).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Whether `id` names a token.
    pub fn has_id(&self, id: u32) -> bool {
        self.bytes.get(id as usize).is_some_and(Option::is_some)
    }

    /// Whether `id` is a special added token (`<|im_end|>`, `<image>`, …).
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// The bytes a token decodes to (`None` for an unassigned id).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.bytes.get(id as usize).and_then(|b| b.as_deref())
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
        let mut rest = 0;
        while rest < text.len() {
            match self.next_added(text, rest, special) {
                Some((start, end, id)) => {
                    self.encode_segment(&text[rest..start], ids);
                    ids.push(id);
                    rest = end;
                }
                None => {
                    self.encode_segment(&text[rest..], ids);
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
        for start in from..bytes.len() {
            if !text.is_char_boundary(start) {
                continue;
            }
            let best = self
                .added
                .iter()
                .filter(|t| special == SpecialText::Parse || !t.special)
                .filter(|t| bytes[start..].starts_with(t.content.as_bytes()))
                .max_by_key(|t| t.content.len());
            if let Some(t) = best {
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
        None
    }

    fn encode_segment(&self, segment: &str, ids: &mut Vec<u32>) {
        if segment.is_empty() {
            return;
        }
        let normalized;
        let segment = if self.nfc {
            normalized = segment.nfc().collect::<String>();
            normalized.as_str()
        } else {
            segment
        };
        let mut pieces: Vec<String> = vec![segment.to_string()];
        for step in &self.steps {
            let mut next = Vec::with_capacity(pieces.len());
            for piece in pieces {
                match step {
                    PreStep::Split(re) => split_isolated(re, &piece, &mut next),
                    PreStep::ByteLevel {
                        add_prefix_space,
                        split,
                    } => {
                        let piece = if *add_prefix_space && !piece.starts_with(' ') {
                            format!(" {piece}")
                        } else {
                            piece
                        };
                        match split {
                            Some(re) => split_isolated(re, &piece, &mut next),
                            None => next.push(piece),
                        }
                    }
                }
            }
            pieces = next;
        }
        for piece in pieces {
            self.encode_word(piece.as_bytes(), ids);
        }
    }

    fn encode_word(&self, word: &[u8], ids: &mut Vec<u32>) {
        if word.is_empty() {
            return;
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
        self.merge(word, ids);
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
    fn merge(&self, word: &[u8], out: &mut Vec<u32>) {
        #[derive(Clone, Copy)]
        struct Sym {
            id: u32,
            prev: usize,
            next: usize,
            alive: bool,
        }
        const NONE: usize = usize::MAX;
        let n = word.len();
        let mut syms: Vec<Sym> = word
            .iter()
            .enumerate()
            .map(|(i, &b)| Sym {
                id: self.byte_ids[b as usize],
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i + 1 == n { NONE } else { i + 1 },
                alive: true,
            })
            .collect();
        // Min-heap on (rank, position) through Reverse.
        let mut heap: BinaryHeap<std::cmp::Reverse<(u32, usize, u32)>> = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<_>, syms: &[Sym], pos: usize| {
            let next = syms[pos].next;
            if next != NONE
                && let Some(&(rank, merged)) = self.merges.get(&(syms[pos].id, syms[next].id))
            {
                heap.push(std::cmp::Reverse((rank, pos, merged)));
            }
        };
        for pos in 0..n {
            push(&mut heap, &syms, pos);
        }
        while let Some(std::cmp::Reverse((_, pos, merged))) = heap.pop() {
            let next = syms[pos].next;
            if !syms[pos].alive || next == NONE {
                continue;
            }
            // The pair may have changed since it was pushed; only merge what is still there.
            match self.merges.get(&(syms[pos].id, syms[next].id)) {
                Some(&(_, m)) if m == merged => {}
                _ => continue,
            }
            syms[pos].id = merged;
            let after = syms[next].next;
            syms[next].alive = false;
            syms[pos].next = after;
            if after != NONE {
                syms[after].prev = pos;
            }
            if syms[pos].prev != NONE {
                push(&mut heap, &syms, syms[pos].prev);
            }
            push(&mut heap, &syms, pos);
        }
        let mut i = 0;
        while i != NONE {
            out.push(syms[i].id);
            i = syms[i].next;
        }
    }
}

fn split_isolated(re: &Regex, piece: &str, out: &mut Vec<String>) {
    let mut last = 0;
    for m in re.find_iter(piece) {
        let Ok(m) = m else {
            // fancy-regex gives up on pathological backtracking; keep the rest as one piece rather
            // than lose text.
            break;
        };
        if m.start() > last {
            out.push(piece[last..m.start()].to_string());
        }
        if m.end() > m.start() {
            out.push(m.as_str().to_string());
        }
        last = m.end();
    }
    if last < piece.len() {
        out.push(piece[last..].to_string());
    }
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

/// Bytes of a token string, as Hugging Face's ByteLevel decoder does: every char mapped back to
/// its byte, or the string's own UTF-8 if any char is outside the table.
fn token_to_bytes(token: &str, char_bytes: &HashMap<char, u8>) -> Box<[u8]> {
    token
        .chars()
        .map(|c| char_bytes.get(&c).copied())
        .collect::<Option<Vec<u8>>>()
        .unwrap_or_else(|| token.as_bytes().to_vec())
        .into_boxed_slice()
}

fn build(root: &Value, path: &Path) -> Result<Tokenizer, String> {
    let model = root.get("model").ok_or("no `model`")?;
    let kind = model.get("type").and_then(Value::as_str).unwrap_or("BPE");
    if kind != "BPE" {
        return Err(format!(
            "model.type `{kind}` is not supported (only byte-level BPE)"
        ));
    }
    if model.get("dropout").is_some_and(|v| !v.is_null()) {
        return Err("model.dropout is set; BPE dropout is not supported".into());
    }
    if model.get("byte_fallback").and_then(Value::as_bool) == Some(true) {
        return Err(
            "model.byte_fallback = true (a SentencePiece-style BPE) is not supported".into(),
        );
    }
    for key in ["continuing_subword_prefix", "end_of_word_suffix"] {
        if model
            .get(key)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        {
            return Err(format!(
                "model.{key} is set; only byte-level BPE without it is supported"
            ));
        }
    }
    let ignore_merges = model
        .get("ignore_merges")
        .and_then(Value::as_bool)
        .unwrap_or(false);

    let vocab = model
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or("model.vocab is missing or not an object")?;
    let chars = byte_chars();
    let char_bytes: HashMap<char, u8> = chars
        .iter()
        .enumerate()
        .map(|(b, &c)| (c, b as u8))
        .collect();
    let mut ids: HashMap<&str, u32> = HashMap::with_capacity(vocab.len());
    let mut max_id = 0u32;
    for (token, id) in vocab {
        let id = id
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| format!("model.vocab[{token:?}]: id must be a non-negative integer"))?;
        ids.insert(token.as_str(), id);
        max_id = max_id.max(id);
    }

    let mut added = Vec::new();
    if let Some(list) = root.get("added_tokens").and_then(Value::as_array) {
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

    let size = max_id as usize + 1;
    let mut bytes: Vec<Option<Box<[u8]>>> = vec![None; size];
    let mut special = vec![false; size];
    for (token, &id) in &ids {
        bytes[id as usize] = Some(token_to_bytes(token, &char_bytes));
    }
    for t in &added {
        bytes[t.id as usize] = Some(token_to_bytes(&t.content, &char_bytes));
        special[t.id as usize] = t.special;
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

    let merges_v = model
        .get("merges")
        .and_then(Value::as_array)
        .ok_or("model.merges is missing or not an array")?;
    let mut merges = HashMap::with_capacity(merges_v.len());
    for (rank, m) in merges_v.iter().enumerate() {
        let (a, b) = match m {
            Value::String(s) => {
                let mut parts = s.split(' ');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(a), Some(b), None) => (a.to_string(), b.to_string()),
                    _ => return Err(format!("model.merges[{rank}] `{s}` is not two tokens")),
                }
            }
            Value::Array(pair) if pair.len() == 2 => match (pair[0].as_str(), pair[1].as_str()) {
                (Some(a), Some(b)) => (a.to_string(), b.to_string()),
                _ => return Err(format!("model.merges[{rank}] is not a pair of strings")),
            },
            _ => {
                return Err(format!(
                    "model.merges[{rank}] is neither \"a b\" nor [a, b]"
                ));
            }
        };
        let lookup = |t: &str| {
            ids.get(t)
                .copied()
                .ok_or_else(|| format!("model.merges[{rank}]: `{t}` is not in model.vocab"))
        };
        let merged = lookup(&format!("{a}{b}"))?;
        let key = (lookup(&a)?, lookup(&b)?);
        // The first (lowest-ranked) occurrence wins, as in Hugging Face.
        merges.entry(key).or_insert((rank as u32, merged));
    }

    let nfc = match root.get("normalizer") {
        None | Some(Value::Null) => false,
        Some(n) => parse_normalizer(n)?,
    };
    let mut steps = Vec::new();
    match root.get("pre_tokenizer") {
        None | Some(Value::Null) => {}
        Some(p) => parse_pre(p, &mut steps)?,
    }
    if !steps.iter().any(|s| matches!(s, PreStep::ByteLevel { .. })) {
        return Err("pre_tokenizer has no ByteLevel step, so this is not a byte-level BPE".into());
    }
    match root.get("decoder") {
        Some(d) if d.get("type").and_then(Value::as_str) == Some("ByteLevel") => {}
        Some(d) if !d.is_null() => {
            return Err(format!(
                "decoder type `{}` is not supported (only ByteLevel)",
                d.get("type").and_then(Value::as_str).unwrap_or("?")
            ));
        }
        _ => {
            return Err("decoder is missing (a byte-level BPE needs the ByteLevel decoder)".into());
        }
    }

    let word_ids = ignore_merges.then(|| {
        ids.iter()
            .map(|(t, &id)| (token_to_bytes(t, &char_bytes), id))
            .collect()
    });
    Ok(Tokenizer {
        path: path.to_path_buf(),
        nfc,
        steps,
        byte_ids,
        merges,
        word_ids,
        bytes,
        special,
        added,
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
    let regex = |pattern: &str| {
        Regex::new(pattern)
            .map_err(|e| format!("pre_tokenizer regex `{pattern}` does not compile: {e}"))
    };
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
                    Some(regex(GPT2_PATTERN)?)
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
            let re = if let Some(r) = pattern.get("Regex").and_then(Value::as_str) {
                regex(r)?
            } else if let Some(s) = pattern.get("String").and_then(Value::as_str) {
                regex(&fancy_regex::escape(s))?
            } else {
                return Err("pre_tokenizer Split pattern is neither Regex nor String".into());
            };
            steps.push(PreStep::Split(re));
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
    }
}
