//! Prompt rendering per model family (docs/REFERENCE.md §1c and §2;
//! docs/ENGINES.md, "VideoLLaMA3 prompt").
//!
//! A render is a list of segments: template text, untrusted text and visual spans. The same
//! segments give the reference text (one placeholder per kept token, for inspection and parity) and
//! a [`Prompt`] to prefill (each text segment tokenised on its own, visual rows where the
//! placeholders are). Pruned tokens are simply absent, so positions stay contiguous.
//!
//! ```text
//! offline   <|im_start|>system\n…<|im_end|>\n<|im_start|>user\nTime 0.0s:[k0],Time 1.0s:[k1]\n{q}<|im_end|>\n<|im_start|>assistant\n
//! stream    <|stream_start|>stream\n[k]\n<|stream_end|>\n … interleaved with messages by time
//! apollo    header + "{s:.1}-{e:.1} seconds: "[32] joined by ",\n" + "\n\n" + {q}
//! ```
//!
//! Segment boundaries fall only where the references' tokenisation already splits: at a special
//! token or a visual span. The question starts at the last such boundary before it (its leading
//! `\n` goes with it), so tokenising it as untrusted text gives the reference's ids unless the
//! question itself contains a special-token literal, which then stays plain text.

use super::prompt::Prompt;
use crate::engine::{SpecialText, Tokenizer};
use std::fmt::Write as _;

/// VideoLLaMA3's visual placeholder (docs/REFERENCE.md §1c).
pub const IMAGE_PLACEHOLDER: &str = "<image>";
/// Apollo's video placeholder (docs/REFERENCE.md §2).
pub const VIDEO_PLACEHOLDER: &str = "<|video_token|>";
/// VideoLLaMA3's default system message (`example_videollama3.py`).
pub const VIDEOLLAMA3_SYSTEM: &str = "You are a helpful assistant.";
/// Apollo's system prompt, with the leading blank line of `conv_qwen`.
pub const APOLLO_SYSTEM: &str =
    "<|im_start|>system\n\nYou are a helpful vision-language assistant.<|im_end|>\n";

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
    fn new(placeholder: &'static str) -> Rendered {
        Rendered {
            segments: Vec::new(),
            placeholder,
        }
    }

    fn template(&mut self, text: &str) {
        self.push_text(text, SpecialText::Parse);
    }

    fn untrusted(&mut self, text: &str) {
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

    fn visual(&mut self, tokens: usize) {
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

fn check_times(times: impl Iterator<Item = f64>) -> Result<usize, RenderError> {
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

fn check_frames(frames: &[FrameSlot]) -> Result<(), RenderError> {
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

/// VideoLLaMA3's offline video prompt (also the `tiny` family's), with `system` as the system
/// message (`None`: no system turn).
pub fn videollama3_offline(
    frames: &[FrameSlot],
    question: &str,
    system: Option<&str>,
) -> Result<Rendered, RenderError> {
    check_frames(frames)?;
    let mut r = Rendered::new(IMAGE_PLACEHOLDER);
    if let Some(system) = system {
        r.template("<|im_start|>system\n");
        r.template(system);
        r.template("<|im_end|>\n");
    }
    r.template("<|im_start|>user\n");
    for (i, f) in frames.iter().enumerate() {
        if i > 0 {
            r.template(",");
        }
        r.template(&format!("Time {}s:", time_1dp(f.time_secs)));
        r.visual(f.kept);
    }
    r.untrusted(&format!("\n{question}"));
    r.template("<|im_end|>\n<|im_start|>assistant\n");
    Ok(r)
}

/// VideoLLaMA3's streaming format: each frame as a `stream` item with no time text (what the
/// reference template does, docs/REFERENCE.md §1c), dialogue messages interleaved by time (a
/// frame comes first when its time is at or before the message's). No generation prompt is
/// added: after a frame the model chooses `<|im_start|>` (speak) or `<|stream_start|>` (keep
/// watching).
pub fn videollama3_stream(
    frames: &[FrameSlot],
    messages: &[Message],
    system: Option<&str>,
) -> Result<Rendered, RenderError> {
    check_frames(frames)?;
    if let Some((index, m)) = messages
        .iter()
        .enumerate()
        .find(|(_, m)| !m.time_secs.is_finite() || m.time_secs < 0.0)
    {
        return Err(RenderError::BadTimestamp {
            index,
            value: m.time_secs,
        });
    }
    let mut r = Rendered::new(IMAGE_PLACEHOLDER);
    if let Some(system) = system {
        r.template("<|im_start|>system\n");
        r.template(system);
        r.template("<|im_end|>\n");
    }
    let mut msgs: Vec<&Message> = messages.iter().collect();
    msgs.sort_by(|a, b| a.time_secs.total_cmp(&b.time_secs));
    let mut next = msgs.into_iter().peekable();
    for f in frames {
        while let Some(m) = next.next_if(|m| m.time_secs < f.time_secs) {
            message(&mut r, m);
        }
        r.template("<|stream_start|>stream\n");
        r.visual(f.kept);
        r.template("\n<|stream_end|>\n");
    }
    for m in next {
        message(&mut r, m);
    }
    Ok(r)
}

/// The system turn that opens a streaming conversation (`None`: no system turn; the render then
/// has no segment and prefills nothing).
pub fn videollama3_stream_prefix(system: Option<&str>) -> Rendered {
    let mut r = Rendered::new(IMAGE_PLACEHOLDER);
    if let Some(system) = system {
        r.template("<|im_start|>system\n");
        r.template(system);
        r.template("<|im_end|>\n");
    }
    r
}

/// One frame as a streaming item, exactly as [`videollama3_stream`] renders each frame: appended
/// to a cache of earlier items it gives the same tokens as a full render (segments split only at
/// special tokens and visual spans).
///
/// `time_secs`: the frame's stream time, rendered as `Time {t:.1}s:` before its tokens, for models
/// whose manifest sets `stream_timestamps` (the reference's items have none: `None`).
pub fn videollama3_stream_frame(
    kept: usize,
    time_secs: Option<f64>,
) -> Result<Rendered, RenderError> {
    if kept == 0 {
        return Err(RenderError::NothingKept { index: 0 });
    }
    let mut r = Rendered::new(IMAGE_PLACEHOLDER);
    match time_secs {
        Some(t) if !t.is_finite() || t < 0.0 => {
            return Err(RenderError::BadTimestamp { index: 0, value: t });
        }
        Some(t) => r.template(&format!("<|stream_start|>stream\nTime {}s:", time_1dp(t))),
        None => r.template("<|stream_start|>stream\n"),
    }
    r.visual(kept);
    r.template("\n<|stream_end|>\n");
    Ok(r)
}

/// A message on the stream's time line followed by the assistant's turn opening: what is
/// appended after the frames to ask a question (`Role::User`) or to prompt a narration.
pub fn videollama3_stream_ask(role: Role, text: &str) -> Rendered {
    let mut r = Rendered::new(IMAGE_PLACEHOLDER);
    message(
        &mut r,
        &Message {
            role,
            text: text.to_owned(),
            time_secs: 0.0,
        },
    );
    r.template("<|im_start|>assistant\n");
    r
}

/// Template text alone (special tokens parsed), e.g. what closes a turn.
pub fn template_text(text: &str) -> Rendered {
    let mut r = Rendered::new(IMAGE_PLACEHOLDER);
    r.template(text);
    r
}

/// The assistant's turn opening alone: what follows a frame when the model chose to speak.
pub fn videollama3_stream_speak() -> Rendered {
    let mut r = Rendered::new(IMAGE_PLACEHOLDER);
    r.template("<|im_start|>assistant\n");
    r
}

fn message(r: &mut Rendered, m: &Message) {
    let role = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    // The role name goes with the text: no special token separates them in the reference.
    r.template("<|im_start|>");
    r.untrusted(&format!("{role}\n{}", m.text));
    r.template("<|im_end|>\n");
}

/// Apollo's prompt (docs/REFERENCE.md §2: header sentence, clip lines joined by `,\n`, question).
pub fn apollo(video: &ApolloVideo, question: &str) -> Result<Rendered, RenderError> {
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
    r.template(APOLLO_SYSTEM);
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

/// The arguments of `edgevlm prompt`, as typed.
#[derive(Debug, Clone, Copy)]
pub struct CliArgs<'a> {
    /// `videollama3`, `apollo` or `tiny`.
    pub family: &'a str,
    /// Comma-separated seconds.
    pub timestamps: &'a str,
    /// Comma-separated kept-token counts, one per timestamp.
    pub kept: Option<&'a str>,
    /// The question.
    pub question: &'a str,
    /// `offline` or `stream`.
    pub format: &'a str,
    /// Apollo's `clip_duration` as stored (`2` or `2.0`).
    pub clip_duration: &'a str,
    /// Apollo's video duration.
    pub duration_secs: Option<f64>,
}

/// Why `edgevlm prompt` refused its arguments.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CliError {
    /// Not a known family.
    #[error("unknown family {0:?}: expected videollama3, apollo or tiny")]
    Family(String),
    /// Not a known format, or stream for Apollo.
    #[error("unknown format {0:?}: expected offline or stream (stream: videollama3 and tiny only)")]
    Format(String),
    /// A list item is not a number.
    #[error("--{list}: item {index} ({item:?}) is not {expected}")]
    Item {
        /// `timestamps` or `kept`.
        list: &'static str,
        /// Item index.
        index: usize,
        /// The item.
        item: String,
        /// What it should be.
        expected: &'static str,
    },
    /// `--kept` and `--timestamps` differ in length.
    #[error("--kept has {kept} values but --timestamps has {timestamps}: give one per timestamp")]
    Lengths {
        /// Timestamps given.
        timestamps: usize,
        /// Kept counts given.
        kept: usize,
    },
    /// `--clip-duration` is not a number.
    #[error("--clip-duration {0:?} is not a number")]
    ClipDuration(String),
    /// The inputs do not make a prompt.
    #[error(transparent)]
    Render(#[from] RenderError),
}

fn parse_list<T: std::str::FromStr>(
    text: &str,
    list: &'static str,
    expected: &'static str,
) -> Result<Vec<T>, CliError> {
    text.split(',')
        .enumerate()
        .map(|(index, item)| {
            item.trim().parse().map_err(|_| CliError::Item {
                list,
                index,
                item: item.to_owned(),
                expected,
            })
        })
        .collect()
}

/// `edgevlm prompt`: the rendered text for the arguments.
pub fn render_cli(a: &CliArgs<'_>) -> Result<String, CliError> {
    enum Kind {
        Video,
        Apollo,
    }
    let kind = match a.family {
        "videollama3" | "tiny" => Kind::Video,
        "apollo" => Kind::Apollo,
        other => return Err(CliError::Family(other.to_owned())),
    };
    let stream = match (a.format, &kind) {
        ("offline", _) => false,
        ("stream", Kind::Video) => true,
        (other, _) => return Err(CliError::Format(other.to_owned())),
    };
    let times: Vec<f64> = parse_list(a.timestamps, "timestamps", "a number of seconds")?;
    let default_kept = match kind {
        Kind::Video => 1,
        Kind::Apollo => 32,
    };
    let kept: Vec<usize> = match a.kept {
        Some(k) => parse_list(k, "kept", "a token count (0, 1, 2, …)")?,
        None => vec![default_kept; times.len()],
    };
    if kept.len() != times.len() {
        return Err(CliError::Lengths {
            timestamps: times.len(),
            kept: kept.len(),
        });
    }
    let rendered = match kind {
        Kind::Video => {
            let frames: Vec<FrameSlot> = times
                .iter()
                .zip(&kept)
                .map(|(&time_secs, &kept)| FrameSlot { time_secs, kept })
                .collect();
            if stream {
                let after = times.iter().copied().fold(0.0, f64::max);
                let question = Message {
                    role: Role::User,
                    text: a.question.to_owned(),
                    time_secs: after,
                };
                videollama3_stream(&frames, &[question], Some(VIDEOLLAMA3_SYSTEM))?
            } else {
                videollama3_offline(&frames, a.question, Some(VIDEOLLAMA3_SYSTEM))?
            }
        }
        Kind::Apollo => {
            let clip_duration = match a.clip_duration.parse::<i64>() {
                Ok(i) => ConfigNumber::Int(i),
                Err(_) => ConfigNumber::Float(
                    a.clip_duration
                        .parse()
                        .map_err(|_| CliError::ClipDuration(a.clip_duration.to_owned()))?,
                ),
            };
            let clip_secs = match clip_duration {
                ConfigNumber::Int(i) => i as f64,
                ConfigNumber::Float(x) => x,
            };
            let clips: Vec<ClipSlot> = times
                .iter()
                .zip(&kept)
                .map(|(&start_secs, &tokens)| ClipSlot {
                    start_secs,
                    // 4 frames at 4 / clip_duration fps: the last is 3/4 of a clip after the first.
                    end_secs: start_secs + clip_secs * 0.75,
                    tokens,
                })
                .collect();
            let duration_secs = a
                .duration_secs
                .unwrap_or_else(|| times.last().copied().unwrap_or(0.0) + clip_secs);
            apollo(
                &ApolloVideo {
                    clips,
                    clip_duration,
                    duration_secs,
                },
                a.question,
            )?
        }
    };
    Ok(rendered.text())
}
