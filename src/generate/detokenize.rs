//! Incremental detokenisation that never emits broken UTF-8.
//!
//! A byte-level BPE splits multi-byte characters across tokens (an emoji is often 2-4 tokens), so
//! decoding token by token would print U+FFFD halves. [`TextStream`] keeps the bytes of an
//! unfinished character until the token that completes it arrives; a byte sequence that can never
//! become valid is replaced by U+FFFD exactly as `String::from_utf8_lossy` would replace it in the
//! whole text, so the concatenated deltas always equal the lossy decoding of all bytes. Work per
//! token is O(token length), not O(text) as with re-decoding the whole sequence.

use crate::engine::Tokenizer;

/// Streams text deltas from token ids.
#[derive(Debug, Clone, Default)]
pub struct TextStream {
    pending: Vec<u8>,
    skip_special: bool,
}

impl TextStream {
    /// A stream; special tokens (`<|im_end|>`, `<image>`, …) are dropped from the text if
    /// `skip_special`.
    pub fn new(skip_special: bool) -> TextStream {
        TextStream {
            pending: Vec::new(),
            skip_special,
        }
    }

    /// Adds one token; returns the text that became complete (often empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        if self.skip_special && tokenizer.is_special(id) {
            return String::new();
        }
        match tokenizer.token_bytes(id) {
            Some(bytes) => self.push_bytes(bytes),
            None => String::new(),
        }
    }

    /// Adds raw bytes; returns the text that became complete.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = start + e.valid_up_to();
                    // from_utf8 just said these bytes are valid, so this never falls back.
                    out.push_str(std::str::from_utf8(&self.pending[start..valid]).unwrap_or(""));
                    match e.error_len() {
                        // Invalid no matter what follows: replace it, as from_utf8_lossy does.
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            start = valid + n;
                        }
                        // An unfinished character at the end: wait for more bytes.
                        None => {
                            start = valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }

    /// Bytes held back (an unfinished character).
    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// Ends the stream: an unfinished character becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream_bytes(chunks: &[&[u8]]) -> (Vec<String>, String) {
        let mut s = TextStream::new(true);
        let mut deltas: Vec<String> = chunks.iter().map(|c| s.push_bytes(c)).collect();
        deltas.push(s.finish());
        let all = deltas.concat();
        (deltas, all)
    }

    #[test]
    fn a_character_split_across_tokens_is_emitted_whole_once_complete() {
        let euro = "€".as_bytes(); // e2 82 ac
        let (deltas, all) = stream_bytes(&[b"a", &euro[..1], &euro[1..2], &euro[2..], b"b"]);
        assert_eq!(deltas, ["a", "", "", "€", "b", ""]);
        assert_eq!(all, "a€b");
    }

    #[test]
    fn bytes_that_can_never_be_valid_become_one_replacement_each_like_from_utf8_lossy() {
        let bytes: &[&[u8]] = &[b"x", &[0xe2, 0x82], b"y", &[0xff], &[0xf0, 0x9f]];
        let whole: Vec<u8> = bytes.concat();
        let (_, all) = stream_bytes(bytes);
        assert_eq!(all, String::from_utf8_lossy(&whole));
    }

    #[test]
    fn any_split_of_any_bytes_streams_to_the_lossy_decoding() {
        // Deterministic pseudo-random byte soup biased towards UTF-8 lead/continuation bytes.
        let mut x: u64 = 0x1234_5678;
        for _ in 0..500 {
            let mut bytes = Vec::new();
            let mut chunks = Vec::new();
            for _ in 0..20 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let len = (x % 4) as usize;
                let start = bytes.len();
                for j in 0..len {
                    let b = [
                        0x41, 0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80, 0xff,
                    ][((x >> (8 * j)) % 11) as usize];
                    bytes.push(b);
                }
                chunks.push(start..bytes.len());
            }
            let parts: Vec<&[u8]> = chunks.iter().map(|r| &bytes[r.clone()]).collect();
            let (_, all) = stream_bytes(&parts);
            assert_eq!(all, String::from_utf8_lossy(&bytes), "{bytes:x?}");
        }
    }
}
