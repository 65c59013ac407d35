//! Model families: what differs between them, one folder each, chosen from the manifest's
//! `family` through [`shape`]. memory, narrate, query and the memory plan use a family only
//! through its [`Shape`]; adding a family is a folder here, a `Family` variant and its manifest.
//! `words.rs` writes text as the Python processors do (number words, `timedelta`).
//!
//! Today a shape carries the streaming format a live camera needs (prompt prefix, frame items,
//! questions, narrations, the turn that closes an answer); what a family needs of its manifest
//! (vision layout, special tokens) and its stop tokens sit with `engine::Family` (the manifest's
//! own checks, below this module), and its preprocessing is read from the manifest by `ingest`
//! and `engine::vision` (docs/ENGINES.md).

pub mod apollo;
pub mod smolvlm2;
pub mod videollama3;
pub mod words;

pub use crate::engine::Family;
use crate::engine::SpecialTokens;
use crate::generate::render::{RenderError, Rendered, Role};

/// One model family.
pub trait Shape: Send + Sync {
    /// Which family.
    fn family(&self) -> Family;

    /// Its live streaming format, or why it has none.
    fn stream(&self) -> Result<&dyn StreamFormat, String>;
}

/// How a family lays a live camera out in its context: the renders memory, narrations and
/// questions append to the live cache, in this order: [`prefix`](StreamFormat::prefix) once,
/// a [`frame`](StreamFormat::frame) item per frame, then a question or a narration prompt.
pub trait StreamFormat: Send + Sync {
    /// The system turn that opens a stream (`None`: no system turn, an empty render).
    fn prefix(&self, system: Option<&str>) -> Rendered;

    /// One frame with `kept` visual tokens, with its stream time as text when `time_secs` is set
    /// (models whose manifest sets `stream_timestamps`).
    fn frame(&self, kept: usize, time_secs: Option<f64>) -> Result<Rendered, RenderError>;

    /// One memory item with `kept` visual tokens and, when set, the stream times of its first and
    /// last frame: a frame (both the same; this default renders [`frame`](Self::frame)) or, for
    /// a family that encodes clips (Apollo), a clip.
    fn item(&self, kept: usize, time: Option<(f64, f64)>) -> Result<Rendered, RenderError> {
        self.frame(kept, time.map(|t| t.0))
    }

    /// A message on the time line followed by the opening of the assistant's turn: a question
    /// (`Role::User`) or a narration prompt.
    fn ask(&self, role: Role, text: &str) -> Rendered;

    /// The assistant's turn opening alone: what follows a frame when the model chose to speak.
    fn speak(&self) -> Rendered;

    /// The family's "when to speak" signal: the ids of the token that opens a turn (speak) and of
    /// the one that opens the next frame (keep watching), whose probabilities after a frame the
    /// model trigger compares (`narrate::speak_probability`); `None` when the family has none.
    fn speak_signal(&self, special: &SpecialTokens) -> Option<(u32, u32)>;

    /// What closes an answer's turn before new footage and the next question: `ended` when the
    /// answer ended with the model's own end-of-turn token (fed before this render), not cut.
    fn turn_close(&self, ended: bool) -> Rendered;
}

/// The shape of `family`.
pub fn shape(family: Family) -> &'static dyn Shape {
    match family {
        Family::Tiny => &videollama3::VideoLlama3(Family::Tiny),
        Family::Videollama3 => &videollama3::VideoLlama3(Family::Videollama3),
        Family::Apollo => &apollo::Apollo,
        Family::Smolvlm2 => &smolvlm2::SmolVlm2,
    }
}

/// The live streaming format of `family`, or why it has none.
pub fn stream(family: Family) -> Result<&'static dyn StreamFormat, String> {
    shape(family).stream()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_its_own_shape_and_a_stream_format() {
        for f in Family::ALL {
            assert_eq!(shape(f).family(), f);
            assert_eq!(f.to_string().parse::<Family>(), Ok(f));
        }
        let unknown = "llava".parse::<Family>().unwrap_err();
        assert!(
            unknown.contains("tiny, videollama3, apollo, smolvlm2"),
            "{unknown}"
        );
        assert!(stream(Family::Smolvlm2).is_ok());
        assert!(stream(Family::Tiny).is_ok());
        assert!(stream(Family::Videollama3).is_ok());
        assert!(stream(Family::Apollo).is_ok());
    }

    #[test]
    fn a_turn_is_closed_by_what_the_model_did_not_already_write() {
        let f = stream(Family::Videollama3).unwrap();
        assert_eq!(f.turn_close(true).text(), "\n");
        assert_eq!(f.turn_close(false).text(), "<|im_end|>\n");
    }

    #[test]
    fn videollama3_speaks_when_a_turn_opens_rather_than_the_next_frame() {
        let special = SpecialTokens {
            endoftext: 1,
            im_start: 2,
            im_end: 3,
            image: 4,
            image_literal: Default::default(),
            stream_start: Some(5),
            stream_end: Some(6),
            end_of_utterance: None,
            fake_token_around_image: None,
            global_image: None,
        };
        let f = stream(Family::Videollama3).unwrap();
        assert_eq!(f.speak_signal(&special), Some((2, 5)));
    }
}
