//! A prompt: text, token ids and visual tokens in the order the model reads them.

use crate::engine::SpecialText;
use std::borrow::Cow;

/// One run of a prompt.
#[derive(Debug, Clone)]
pub enum Piece<'a> {
    /// Text, tokenised chunk by chunk (docs/ENGINES.md, "KV cache and generation") with special
    /// tokens parsed or not.
    Text(Cow<'a, str>, SpecialText),
    /// Token ids as they are.
    Tokens(Cow<'a, [u32]>),
    /// Visual tokens (`n * hidden` floats, e.g. a frame's kept tokens), fed as embeddings.
    Visual(&'a [f32]),
}

/// What to prefill, in order.
#[derive(Debug, Clone, Default)]
pub struct Prompt<'a> {
    pieces: Vec<Piece<'a>>,
}

impl<'a> Prompt<'a> {
    /// An empty prompt.
    pub fn new() -> Prompt<'a> {
        Prompt::default()
    }

    /// Template text: `<|im_start|>` and the other special tokens written in it are special tokens.
    pub fn text(&mut self, text: impl Into<Cow<'a, str>>) -> &mut Prompt<'a> {
        self.pieces
            .push(Piece::Text(text.into(), SpecialText::Parse));
        self
    }

    /// Text from outside (a question): special-token literals in it are plain text, so a request
    /// cannot close the user turn or open a system one.
    pub fn untrusted_text(&mut self, text: impl Into<Cow<'a, str>>) -> &mut Prompt<'a> {
        self.pieces
            .push(Piece::Text(text.into(), SpecialText::AsText));
        self
    }

    /// Token ids.
    pub fn tokens(&mut self, ids: impl Into<Cow<'a, [u32]>>) -> &mut Prompt<'a> {
        self.pieces.push(Piece::Tokens(ids.into()));
        self
    }

    /// Visual tokens, `n * hidden` floats.
    pub fn visual(&mut self, rows: &'a [f32]) -> &mut Prompt<'a> {
        self.pieces.push(Piece::Visual(rows));
        self
    }

    /// Appends a piece.
    pub fn push(&mut self, piece: Piece<'a>) -> &mut Prompt<'a> {
        self.pieces.push(piece);
        self
    }

    /// Appends every piece of `other`.
    pub fn extend(&mut self, other: Prompt<'a>) -> &mut Prompt<'a> {
        self.pieces.extend(other.pieces);
        self
    }

    /// The pieces in order.
    pub fn pieces(&self) -> &[Piece<'a>] {
        &self.pieces
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }
}
