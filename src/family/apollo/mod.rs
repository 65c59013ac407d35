//! Apollo (docs/REFERENCE.md §2): its prompt (a header sentence, clip lines joined by `,\n`, the
//! question) and what it takes to render one, Python's number words and `timedelta` text among
//! them. Apollo cannot watch a live camera yet: its clip encoders (two, concatenated, then a
//! Perceiver resampler) are not in the runtime, so its shape has no streaming format.
//!
//! ```text
//! apollo    header + "{s:.1}-{e:.1} seconds: "[32] joined by ",\n" + "\n\n" + {q}
//! ```

use super::{Family, Shape, StreamFormat};
use crate::generate::render::{RenderError, Rendered, check_times, time_1dp};
use std::fmt::Write as _;

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
        Err(
            "family `apollo` cannot watch live cameras yet: its clip encoders are not \
             implemented (videollama3 and tiny use the streaming format)"
                .into(),
        )
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
            ConfigNumber::Float(x) => f.write_str(&py_float_str(*x)),
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

const ONES: [&str; 20] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: [&str; 10] = [
    "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];
const SCALES: [(u64, &str); 6] = [
    (1_000_000_000_000_000_000, "quintillion"),
    (1_000_000_000_000_000, "quadrillion"),
    (1_000_000_000_000, "trillion"),
    (1_000_000_000, "billion"),
    (1_000_000, "million"),
    (1_000, "thousand"),
];

/// English cardinal words as Python's `num2words(n)` writes them: "sixty-six", "six hundred and
/// sixty-six", "one thousand and one", "one thousand, one hundred".
pub fn number_words(n: u64) -> String {
    if n < 20 {
        return ONES[n as usize].to_owned();
    }
    if n < 100 {
        let (t, u) = (n / 10, n % 10);
        return if u == 0 {
            TENS[t as usize].to_owned()
        } else {
            format!("{}-{}", TENS[t as usize], ONES[u as usize])
        };
    }
    if n < 1000 {
        let (h, rest) = (n / 100, n % 100);
        let head = format!("{} hundred", ONES[h as usize]);
        return if rest == 0 {
            head
        } else {
            format!("{head} and {}", number_words(rest))
        };
    }
    for (scale, name) in SCALES {
        if n >= scale {
            let (q, rest) = (n / scale, n % scale);
            let head = format!("{} {name}", number_words(q));
            // num2words' merge: "and" before a remainder under 100, a comma otherwise.
            return match rest {
                0 => head,
                1..100 => format!("{head} and {}", number_words(rest)),
                _ => format!("{head}, {}", number_words(rest)),
            };
        }
    }
    unreachable!("every n >= 1000 has a scale")
}

/// Python's `str(timedelta(seconds=secs))`: `H:MM:SS`, `.ffffff` when there are microseconds
/// (rounded half to even), `N day(s), ` in front past 24 hours. `secs` must be finite and >= 0.
pub fn timedelta_str(secs: f64) -> String {
    let micros = (secs * 1e6).round_ties_even().max(0.0) as u64;
    let (days, rem) = (micros / 86_400_000_000, micros % 86_400_000_000);
    let (s, us) = (rem / 1_000_000, rem % 1_000_000);
    let mut out = String::new();
    if days > 0 {
        let _ = write!(out, "{days} day{}, ", if days == 1 { "" } else { "s" });
    }
    let _ = write!(out, "{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
    if us > 0 {
        let _ = write!(out, ".{us:06}");
    }
    out
}

/// Python's `str(x)` for a float in the ordinary range: shortest round-trip digits, `.0` on whole
/// numbers (`2.0`, `1.5`). Python switches to exponent form below 1e-4 and from 1e16; so does this.
pub fn py_float_str(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let a = x.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        // Rust writes `1e16` / `1e-5`; Python writes `1e+16` / `1e-05`.
        let s = format!("{x:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    let s = format!("{x}");
    if s.contains('.') { s } else { format!("{s}.0") }
}
