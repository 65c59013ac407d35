//! Rendered prompts: what every family's format (`crate::family`) is made of.
//!
//! A render is a list of segments: template text, untrusted text and visual spans. The same
//! segments give the reference text (one placeholder per kept token, for inspection and parity) and
//! a [`Prompt`] to prefill (each text segment tokenised on its own, visual rows where the
//! placeholders are). Pruned tokens are simply absent, so positions stay contiguous.
//!
//! Segment boundaries fall only where the references' tokenisation already splits: at a special
//! token or a visual span. The question starts at the last such boundary before it (its leading
//! `\n` goes with it), so tokenising it as untrusted text gives the reference's ids unless the
//! question itself contains a special-token literal, which then stays plain text.

use super::prompt::Prompt;
use crate::engine::{SpecialText, Tokenizer};

/// Why a render was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RenderError {
    /// No frame or clip to render.
    #[error("no frames: at least one timestamp is needed")]
    NoFrames,
    /// A timestamp is negative, NaN or infinite.
    #[error("timestamp {index} is {value}: timestamps must be finite and >= 0")]
    BadTimestamp {
        /// Frame or clip index.
        index: usize,
        /// The value given.
        value: f64,
    },
    /// Timestamps must strictly increase.
    #[error("timestamp {index} ({value}) is not after timestamp {} ({previous})", index - 1)]
    NotIncreasing {
        /// Index of the offending timestamp.
        index: usize,
        /// The one before it.
        previous: f64,
        /// The offending value.
        value: f64,
    },
    /// A frame keeps no token (DiffFP keeps at least one, docs/REFERENCE.md §1c: `1 <= k`).
    #[error("frame {index} keeps 0 tokens: every frame keeps at least 1")]
    NothingKept {
        /// Frame index.
        index: usize,
    },
    /// An Apollo clip ends before it starts.
    #[error("clip {index} ends at {end} before it starts at {start}")]
    ClipEnd {
        /// Clip index.
        index: usize,
        /// Start in seconds.
        start: f64,
        /// End in seconds.
        end: f64,
    },
    /// The video duration is negative or not finite.
    #[error("video duration {0} is not a finite number >= 0")]
    BadDuration(f64),
    /// The number of visual row sets differs from the number of visual spans.
    #[error("{got} visual row sets given for {expected} frames or clips")]
    RowCount {
        /// Spans in the render.
        expected: usize,
        /// Row sets given.
        got: usize,
    },
    /// A span's rows do not hold its kept tokens.
    #[error(
        "span {index} keeps {tokens} tokens ({expected} floats at hidden {hidden}) but {got} floats were given"
    )]
    RowLength {
        /// Span index.
        index: usize,
        /// Kept tokens of the span.
        tokens: usize,
        /// Hidden size.
        hidden: usize,
        /// `tokens * hidden`.
        expected: usize,
        /// Floats given.
        got: usize,
    },
}

/// One sampled frame: its stream time and how many of its visual tokens DiffFP kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameSlot {
    /// Seconds from the start of the video or window.
    pub time_secs: f64,
    /// Kept visual tokens (at least 1).
    pub kept: usize,
}

/// Who speaks a dialogue message in the streaming format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A question from outside.
    User,
    /// An earlier answer or narration.
    Assistant,
}

/// A dialogue message placed on the stream's time line.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// The text (untrusted: special-token literals stay text).
    pub text: String,
    /// When it was said; frames at or before this time come first (docs/REFERENCE.md §1c).
    pub time_secs: f64,
}

/// A run of a render.
#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    /// Text tokenised on its own; template text parses special tokens, questions do not.
    Text(String, SpecialText),
    /// Visual span `index` with `tokens` kept tokens.
    Visual {
        /// Index of the frame or clip (into the rows given to [`Rendered::prompt`]).
        index: usize,
        /// Kept tokens.
        tokens: usize,
    },
}

/// A rendered prompt, before visual rows are attached.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    segments: Vec<Segment>,
    placeholder: &'static str,
}

impl Rendered {
    pub(crate) fn new(placeholder: &'static str) -> Rendered {
        Rendered {
            segments: Vec::new(),
            placeholder,
        }
    }

    pub(crate) fn template(&mut self, text: &str) {
        self.push_text(text, SpecialText::Parse);
    }

    pub(crate) fn untrusted(&mut self, text: &str) {
        self.push_text(text, SpecialText::AsText);
    }

    fn push_text(&mut self, text: &str, mode: SpecialText) {
        if text.is_empty() {
            return;
        }
        // Adjacent template pieces are one chunk, as in the reference string.
        if let Some(Segment::Text(last, m)) = self.segments.last_mut()
            && *m == mode
        {
            last.push_str(text);
            return;
        }
        self.segments.push(Segment::Text(text.to_owned(), mode));
    }

    pub(crate) fn visual(&mut self, tokens: usize) {
        let index = self.visual_spans();
        self.segments.push(Segment::Visual { index, tokens });
    }

    /// The segments in order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The family's placeholder literal (`<image>` or `<|video_token|>`).
    pub fn placeholder(&self) -> &'static str {
        self.placeholder
    }

    /// Visual spans (frames or clips).
    pub fn visual_spans(&self) -> usize {
        self.segments
            .iter()
            .filter(|s| matches!(s, Segment::Visual { .. }))
            .count()
    }

    /// Visual tokens over all spans.
    pub fn visual_tokens(&self) -> usize {
        self.segments
            .iter()
            .map(|s| match s {
                Segment::Visual { tokens, .. } => *tokens,
                Segment::Text(..) => 0,
            })
            .sum()
    }

    /// The reference text, one placeholder per kept token.
    pub fn text(&self) -> String {
        self.text_with(self.placeholder)
    }

    /// The reference text with another placeholder literal (`<|video_pad|>` for the
    /// transformers-native checkpoints, whose processor expands one per kept token the same way).
    pub fn text_with(&self, placeholder: &str) -> String {
        let mut out = String::new();
        for s in &self.segments {
            match s {
                Segment::Text(t, _) => out.push_str(t),
                Segment::Visual { tokens, .. } => {
                    for _ in 0..*tokens {
                        out.push_str(placeholder);
                    }
                }
            }
        }
        out
    }

    /// The token ids a prefill of this render feeds, with `placeholder` standing for each visual
    /// token: each text segment tokenised on its own, as [`Rendered::prompt`] does. This is what a
    /// reference processor's `input_ids` must equal (tests/videollama3_parity.rs).
    pub fn token_ids(&self, tokenizer: &Tokenizer, placeholder: u32) -> Vec<u32> {
        let mut ids = Vec::new();
        for s in &self.segments {
            match s {
                Segment::Text(t, mode) => tokenizer.encode_into(t, *mode, &mut ids),
                Segment::Visual { tokens, .. } => {
                    ids.extend(std::iter::repeat_n(placeholder, *tokens))
                }
            }
        }
        ids
    }

    /// The prompt to prefill: `rows[i]` holds span `i`'s kept tokens (`tokens * hidden` floats).
    pub fn prompt<'a>(
        &'a self,
        rows: &[&'a [f32]],
        hidden: usize,
    ) -> Result<Prompt<'a>, RenderError> {
        let spans = self.visual_spans();
        if rows.len() != spans {
            return Err(RenderError::RowCount {
                expected: spans,
                got: rows.len(),
            });
        }
        let mut prompt = Prompt::new();
        for s in &self.segments {
            match s {
                Segment::Text(t, SpecialText::Parse) => {
                    prompt.text(t.as_str());
                }
                Segment::Text(t, SpecialText::AsText) => {
                    prompt.untrusted_text(t.as_str());
                }
                Segment::Visual { index, tokens } => {
                    let r = rows[*index];
                    if r.len() != tokens * hidden {
                        return Err(RenderError::RowLength {
                            index: *index,
                            tokens: *tokens,
                            hidden,
                            expected: tokens * hidden,
                            got: r.len(),
                        });
                    }
                    prompt.visual(r);
                }
            }
        }
        Ok(prompt)
    }
}

pub(crate) fn check_times(times: impl Iterator<Item = f64>) -> Result<usize, RenderError> {
    let mut previous: Option<f64> = None;
    let mut n = 0;
    for (index, value) in times.enumerate() {
        if !value.is_finite() || value < 0.0 {
            return Err(RenderError::BadTimestamp { index, value });
        }
        if let Some(p) = previous
            && value <= p
        {
            return Err(RenderError::NotIncreasing {
                index,
                previous: p,
                value,
            });
        }
        previous = Some(value);
        n += 1;
    }
    if n == 0 {
        return Err(RenderError::NoFrames);
    }
    Ok(n)
}

pub(crate) fn check_frames(frames: &[FrameSlot]) -> Result<(), RenderError> {
    check_times(frames.iter().map(|f| f.time_secs))?;
    if let Some(index) = frames.iter().position(|f| f.kept == 0) {
        return Err(RenderError::NothingKept { index });
    }
    Ok(())
}

/// `f"{t:.1f}"`: one decimal, ties of the exact binary value to even, as Python does.
pub fn time_1dp(t: f64) -> String {
    // Rust's `{:.1}` rounds the exact binary value half to even, like CPython's formatting.
    format!("{t:.1}")
}

/// Template text alone (special tokens parsed), e.g. what closes a turn.
pub fn template_text(text: &str) -> Rendered {
    // No visual span, so no placeholder to print.
    let mut r = Rendered::new("");
    r.template(text);
    r
}
