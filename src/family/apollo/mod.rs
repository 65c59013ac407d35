//! Apollo (docs/REFERENCE.md §2): its prompt (a header sentence, clip lines joined by `,\n`, the
//! question) and what it takes to render one, Python's number words and `timedelta` text among
//! them, and the live format a camera's clips go in.
//!
//! ```text
//! apollo    header + "{s:.1}-{e:.1} seconds: "[32] joined by ",\n" + "\n\n" + {q}
//! ```
//!
//! A live camera's memory items are clips (the vision encoder's `clips` layout: 4 frames
//! sampled at 2 fps in, 32 tokens out, `memory::FrameEncoder`). Apollo has no streaming format,
//! so the live one is built from its video prompt (docs/ENGINES.md, "Apollo on a live camera"):
//! one user turn of clip lines, each ending in the `,\n` that joins them, until a question closes
//! the turn; the header sentence loses the clip count and duration a live camera does not have.
//!
//! ```text
//! live   [<|im_start|>system\n\n{system}<|im_end|>\n]<|im_start|>user\nYou are provided the following series of clips from a live video.\n
//!        {s:.1}-{e:.1} seconds: <|video_token|>×32,\n                     … per clip
//!        \n{question}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n<|im_start|>user\n  … next clips
//! ```
//!
//! Apollo has no "when to speak" signal: its cameras narrate on `interval` and `change`.

use super::words::{number_words, timedelta_str};
use super::{Family, Shape, StreamFormat};
use crate::engine::SpecialTokens;
use crate::generate::render::{RenderError, Rendered, Role, check_times, template_text, time_1dp};

/// Apollo's video placeholder (docs/REFERENCE.md §2).
pub const VIDEO_PLACEHOLDER: &str = "<|video_token|>";
/// Apollo's system prompt, with the leading blank line of `conv_qwen`.
pub const SYSTEM: &str =
    "<|im_start|>system\n\nYou are a helpful vision-language assistant.<|im_end|>\n";

/// The Apollo shape.
#[derive(Debug, Clone, Copy)]
pub struct Apollo;

impl Shape for Apollo {
    fn family(&self) -> Family {
        Family::Apollo
    }

    fn stream(&self) -> Result<&dyn StreamFormat, String> {
        Ok(self)
    }
}

/// What opens the user turn of a live camera's clips (the video prompt's header, without the
/// clip count and duration a live camera does not have).
pub const LIVE_INTRO: &str = "You are provided the following series of clips from a live video.\n";

impl StreamFormat for Apollo {
    fn prefix(&self, system: Option<&str>) -> Rendered {
        let mut r = Rendered::new(VIDEO_PLACEHOLDER);
        if let Some(system) = system.filter(|s| !s.is_empty()) {
            // `conv_qwen`'s system turn, with its blank line.
            r.template("<|im_start|>system\n\n");
            r.template(system);
            r.template("<|im_end|>\n");
        }
        r.template("<|im_start|>user\n");
        r.template(LIVE_INTRO);
        r
    }

    fn frame(&self, kept: usize, time_secs: Option<f64>) -> Result<Rendered, RenderError> {
        self.item(kept, time_secs.map(|t| (t, t)))
    }

    fn item(&self, kept: usize, time: Option<(f64, f64)>) -> Result<Rendered, RenderError> {
        if kept == 0 {
            return Err(RenderError::NothingKept { index: 0 });
        }
        // Clip lines always carry their times; a manifest without `stream_timestamps` gets
        // 0.0-0.0 (`engines/apollo/generate.py` writes it on).
        let (start, end) = time.unwrap_or((0.0, 0.0));
        check_times(std::iter::once(start))?;
        if !end.is_finite() || end < start {
            return Err(RenderError::ClipEnd {
                index: 0,
                start,
                end,
            });
        }
        let mut r = Rendered::new(VIDEO_PLACEHOLDER);
        r.template(&format!("{}-{} seconds: ", time_1dp(start), time_1dp(end)));
        r.visual(kept);
        r.template(",\n");
        Ok(r)
    }

    fn ask(&self, _role: Role, text: &str) -> Rendered {
        // After the last clip's `,\n`: the video prompt's blank line before the question.
        let mut r = Rendered::new(VIDEO_PLACEHOLDER);
        r.untrusted(&format!("\n{text}"));
        r.template("<|im_end|>\n<|im_start|>assistant\n");
        r
    }

    fn speak(&self) -> Rendered {
        template_text("<|im_end|>\n<|im_start|>assistant\n")
    }

    fn speak_signal(&self, _special: &SpecialTokens) -> Option<(u32, u32)> {
        None
    }

    fn turn_close(&self, ended: bool) -> Rendered {
        template_text(if ended {
            "\n<|im_start|>user\n"
        } else {
            "<|im_end|>\n<|im_start|>user\n"
        })
    }
}

/// How an Apollo config stores `clip_duration`: Python prints an int as `2` and a float as `2.0`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConfigNumber {
    /// An integer value.
    Int(i64),
    /// A floating-point value.
    Float(f64),
}

impl std::fmt::Display for ConfigNumber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigNumber::Int(i) => write!(f, "{i}"),
            ConfigNumber::Float(x) => f.write_str(&super::words::py_float_str(*x)),
        }
    }
}

/// One Apollo clip: first and last sampled frame times and its connector tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipSlot {
    /// Time of the clip's first sampled frame.
    pub start_secs: f64,
    /// Time of its last sampled frame (not the clip end: 1.5 s for a 2-s clip).
    pub end_secs: f64,
    /// Connector output tokens (`num_output_tokens`, 32 for `-t32`).
    pub tokens: usize,
}

/// An Apollo video as its prompt describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApolloVideo {
    /// The clips in order.
    pub clips: Vec<ClipSlot>,
    /// `config.clip_duration` as stored.
    pub clip_duration: ConfigNumber,
    /// Whole video duration in seconds (`total_frames / src_fps`).
    pub duration_secs: f64,
}

/// Apollo's prompt (docs/REFERENCE.md §2: header sentence, clip lines joined by `,\n`, question).
pub fn prompt(video: &ApolloVideo, question: &str) -> Result<Rendered, RenderError> {
    check_times(video.clips.iter().map(|c| c.start_secs))?;
    for (index, c) in video.clips.iter().enumerate() {
        if !c.end_secs.is_finite() || c.end_secs < c.start_secs {
            return Err(RenderError::ClipEnd {
                index,
                start: c.start_secs,
                end: c.end_secs,
            });
        }
        if c.tokens == 0 {
            return Err(RenderError::NothingKept { index });
        }
    }
    if !video.duration_secs.is_finite() || video.duration_secs < 0.0 {
        return Err(RenderError::BadDuration(video.duration_secs));
    }
    let mut r = Rendered::new(VIDEO_PLACEHOLDER);
    r.template(SYSTEM);
    r.template("<|im_start|>user\n");
    r.template(&format!(
        "You are provided the following series of {}, {} second clips from a {} [H:MM:SS] video.\n",
        number_words(video.clips.len() as u64),
        video.clip_duration,
        timedelta_str(video.duration_secs)
    ));
    for (i, c) in video.clips.iter().enumerate() {
        if i > 0 {
            r.template(",\n");
        }
        r.template(&format!(
            "{}-{} seconds: ",
            time_1dp(c.start_secs),
            time_1dp(c.end_secs)
        ));
        r.visual(c.tokens);
    }
    r.untrusted(&format!("\n\n{question}"));
    r.template("<|im_end|>\n<|im_start|>assistant\n");
    Ok(r)
}
