//! SmolVLM2 (`HuggingFaceTB/SmolVLM2-256M-Video-Instruct`, `-500M-`, `-2.2B-`; transformers'
//! `SmolVLMProcessor`; docs/ENGINES.md, "SmolVLM2"): its video prompt. Each frame is one image
//! of `image_seq_len` tokens (64 for 256M and 500M: a 512x512 frame, 16-pixel patches, a 4x4
//! pixel shuffle) between `<fake_token_around_image>` marks, after its `MM:SS` time:
//!
//! ```text
//! <|im_start|>User: You are provided the following series of {n in words} frames from a {H:MM:SS} [H:MM:SS] video.\n
//! \nFrame from 00:00:<fake_token_around_image><global-img><image>×64<fake_token_around_image>
//! \nFrame from 00:01:…
//! \n\n{question}<end_of_utterance>\nAssistant:
//! ```
//!
//! Its published ONNX files load as they are downloaded (`checkpoint.rs` writes their manifest:
//! `edgevlm engines init`; the vision encoder's `images` layout takes pixel values with a pixel
//! attention mask), frames are resized as its processor does (`preprocess.rs`, that is
//! `ingest::square`, which ingest runs for a camera of a square-image model), and generation stops
//! on `<end_of_utterance>`.
//!
//! A live camera uses the same pieces, laid out as a conversation that goes on (SmolVLM2 has no
//! streaming format of its own; docs/ENGINES.md, "SmolVLM2 on a live camera"): one user turn
//! holds the frames, each as in the video prompt, until a question closes it and opens the
//! assistant's; after the answer a new user turn takes the next frames.
//!
//! ```text
//! live   <|im_start|>[System: {system}<end_of_utterance>\n]User: You are provided the following series of frames from a live video.\n
//!        \nFrame from MM:SS:<fake_token_around_image><global-img><image>×kept<fake_token_around_image>  … per frame
//!        \n\n{question}<end_of_utterance>\nAssistant:{answer}<end_of_utterance>\nUser:  … next frames
//! ```
//!
//! Every item starts or ends at a special token or a newline, so items tokenized one by one give
//! the tokens of the whole text (tests/smolvlm2_live.rs checks it with the directory's tokenizer).
//! SmolVLM2 has no "when to speak" signal: its cameras narrate on `interval` and `change`.

pub mod checkpoint;
pub mod preprocess;

use super::words::{number_words, timedelta_str};
use super::{Family, Shape, StreamFormat};
use crate::engine::SpecialTokens;
use crate::generate::render::{
    FrameSlot, RenderError, Rendered, Role, check_frames, template_text,
};

/// The image placeholder SmolVLM2's tokenizer has (`image_token`).
pub const IMAGE_PLACEHOLDER: &str = "<image>";
/// The mark around each image (`fake_image_token`).
pub const FAKE_TOKEN_AROUND_IMAGE: &str = "<fake_token_around_image>";
/// The mark of an image that is not a tile of a split one (`global_image_token`).
pub const GLOBAL_IMAGE: &str = "<global-img>";
/// What ends a turn (`end_of_utterance_token`): the model's stop token.
pub const END_OF_UTTERANCE: &str = "<end_of_utterance>";
/// Tokens per frame of the 256M and 500M models (`image_seq_len`).
pub const IMAGE_SEQ_LEN: usize = 64;

/// The SmolVLM2 shape.
#[derive(Debug, Clone, Copy)]
pub struct SmolVlm2;

impl Shape for SmolVlm2 {
    fn family(&self) -> Family {
        Family::Smolvlm2
    }

    fn stream(&self) -> Result<&dyn StreamFormat, String> {
        Ok(self)
    }
}

/// What opens the user turn of a live camera's frames (the video prompt's sentence, without the
/// frame count and duration a live camera does not have).
pub const LIVE_INTRO: &str =
    "User: You are provided the following series of frames from a live video.\n";

impl StreamFormat for SmolVlm2 {
    fn prefix(&self, system: Option<&str>) -> Rendered {
        let mut r = Rendered::new(IMAGE_PLACEHOLDER);
        r.template("<|im_start|>");
        if let Some(system) = system.filter(|s| !s.is_empty()) {
            // The chat template's system message: `System: {text}<end_of_utterance>\n`.
            r.template("System: ");
            r.template(system);
            r.template(&format!("{END_OF_UTTERANCE}\n"));
        }
        r.template(LIVE_INTRO);
        r
    }

    fn frame(&self, kept: usize, time_secs: Option<f64>) -> Result<Rendered, RenderError> {
        if kept == 0 {
            return Err(RenderError::NothingKept { index: 0 });
        }
        let mut r = Rendered::new(IMAGE_PLACEHOLDER);
        match time_secs {
            Some(t) if !t.is_finite() || t < 0.0 => {
                return Err(RenderError::BadTimestamp { index: 0, value: t });
            }
            Some(t) => r.template(&format!(
                "\nFrame from {}:{FAKE_TOKEN_AROUND_IMAGE}{GLOBAL_IMAGE}",
                frame_time(t)
            )),
            // A manifest without `stream_timestamps` (`engines init` writes it on).
            None => r.template(&format!("\nFrame:{FAKE_TOKEN_AROUND_IMAGE}{GLOBAL_IMAGE}")),
        }
        r.visual(kept);
        r.template(FAKE_TOKEN_AROUND_IMAGE);
        Ok(r)
    }

    fn ask(&self, _role: Role, text: &str) -> Rendered {
        // A question and a narration prompt alike end the user turn, as the video prompt's
        // question does.
        let mut r = Rendered::new(IMAGE_PLACEHOLDER);
        r.untrusted(&format!("\n\n{text}"));
        r.template(&format!("{END_OF_UTTERANCE}\nAssistant:"));
        r
    }

    fn speak(&self) -> Rendered {
        let mut r = Rendered::new(IMAGE_PLACEHOLDER);
        r.template(&format!("{END_OF_UTTERANCE}\nAssistant:"));
        r
    }

    fn speak_signal(&self, _special: &SpecialTokens) -> Option<(u32, u32)> {
        None
    }

    fn turn_close(&self, ended: bool) -> Rendered {
        // After `<end_of_utterance>` (generated and fed) its newline follows; a cut answer needs
        // both. The next user turn opens for the frames that come.
        template_text(if ended {
            "\nUser:"
        } else {
            "<end_of_utterance>\nUser:"
        })
    }
}

/// A frame's time as the processor writes it: whole minutes and seconds, `{:02}:{:02}`
/// (`int(t // 60)`, `int(t % 60)`; minutes go past 59, there is no hour field).
fn frame_time(t: f64) -> String {
    let minutes = (t / 60.0).floor();
    let seconds = (t - minutes * 60.0).floor();
    format!("{:02}:{:02}", minutes as u64, seconds as u64)
}

/// SmolVLM2's video prompt for one user turn: the frames (times in seconds, `kept` tokens each,
/// `IMAGE_SEQ_LEN` for the published models) and the question, with the assistant's turn opened.
/// `duration_secs`: the video's duration (`None`: the last frame's time, as the processor does
/// without one); whole seconds are written, truncated.
pub fn video_prompt(
    frames: &[FrameSlot],
    duration_secs: Option<f64>,
    question: &str,
) -> Result<Rendered, RenderError> {
    check_frames(frames)?;
    let duration = match duration_secs {
        Some(d) if !d.is_finite() || d < 0.0 => return Err(RenderError::BadDuration(d)),
        Some(d) => d,
        None => frames.last().map_or(0.0, |f| f.time_secs),
    };
    let mut r = Rendered::new(IMAGE_PLACEHOLDER);
    r.template(&format!(
        "<|im_start|>User: You are provided the following series of {} frames from a {} [H:MM:SS] video.\n",
        number_words(frames.len() as u64),
        timedelta_str(duration.trunc())
    ));
    for f in frames {
        r.template(&format!(
            "\nFrame from {}:{FAKE_TOKEN_AROUND_IMAGE}{GLOBAL_IMAGE}",
            frame_time(f.time_secs)
        ));
        r.visual(f.kept);
        r.template(FAKE_TOKEN_AROUND_IMAGE);
    }
    r.untrusted(&format!("\n\n{question}"));
    r.template(&format!("{END_OF_UTTERANCE}\nAssistant:"));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_times_are_whole_minutes_and_seconds_without_hours() {
        assert_eq!(frame_time(0.0), "00:00");
        assert_eq!(frame_time(59.99), "00:59");
        assert_eq!(frame_time(75.5), "01:15");
        assert_eq!(frame_time(3_725.0), "62:05");
    }

    #[test]
    fn each_frame_is_a_global_image_between_marks_after_its_time() {
        let frames = [
            FrameSlot {
                time_secs: 0.0,
                kept: 2,
            },
            FrameSlot {
                time_secs: 1.5,
                kept: 2,
            },
        ];
        let r = video_prompt(&frames, Some(3.9), "What moves?").unwrap();
        assert_eq!(
            r.text(),
            "<|im_start|>User: You are provided the following series of two frames from a \
             0:00:03 [H:MM:SS] video.\n\
             \nFrame from 00:00:<fake_token_around_image><global-img><image><image><fake_token_around_image>\
             \nFrame from 00:01:<fake_token_around_image><global-img><image><image><fake_token_around_image>\
             \n\nWhat moves?<end_of_utterance>\nAssistant:"
        );
        assert_eq!(r.visual_tokens(), 4);
        assert!(matches!(
            video_prompt(&[], None, "q"),
            Err(RenderError::NoFrames)
        ));
        assert!(matches!(
            video_prompt(&frames, Some(f64::NAN), "q"),
            Err(RenderError::BadDuration(_))
        ));
    }
}
