//! VideoLLaMA3 (docs/REFERENCE.md §1c; docs/ENGINES.md, "VideoLLaMA3 prompt"): its offline video
//! prompt and its streaming format, which the `tiny` family shares. The streaming format is what a
//! live camera uses: the system turn, each frame as a `stream` item, questions and narrations as
//! messages, and the model's own "when to speak" signal (`<|im_start|>` against
//! `<|stream_start|>` after a frame).
//!
//! ```text
//! offline   <|im_start|>system\n…<|im_end|>\n<|im_start|>user\nTime 0.0s:[k0],Time 1.0s:[k1]\n{q}<|im_end|>\n<|im_start|>assistant\n
//! stream    <|stream_start|>stream\n[k]\n<|stream_end|>\n … interleaved with messages by time
//! ```

use super::{Family, Shape, StreamFormat};
use crate::engine::SpecialTokens;
use crate::generate::render::{
    FrameSlot, Message, RenderError, Rendered, Role, check_frames, template_text, time_1dp,
};

/// VideoLLaMA3's visual placeholder (docs/REFERENCE.md §1c).
pub const IMAGE_PLACEHOLDER: &str = "<image>";
/// VideoLLaMA3's default system message (`example_videollama3.py`).
pub const SYSTEM: &str = "You are a helpful assistant.";

/// The VideoLLaMA3 shape (also the `tiny` family's: the same formats).
#[derive(Debug, Clone, Copy)]
pub struct VideoLlama3(pub Family);

impl Shape for VideoLlama3 {
    fn family(&self) -> Family {
        self.0
    }

    fn stream(&self) -> Result<&dyn StreamFormat, String> {
        Ok(self)
    }
}

impl StreamFormat for VideoLlama3 {
    fn prefix(&self, system: Option<&str>) -> Rendered {
        stream_prefix(system)
    }

    fn frame(&self, kept: usize, time_secs: Option<f64>) -> Result<Rendered, RenderError> {
        stream_frame(kept, time_secs)
    }

    fn ask(&self, role: Role, text: &str) -> Rendered {
        stream_ask(role, text)
    }

    fn speak(&self) -> Rendered {
        stream_speak()
    }

    fn speak_signal(&self, special: &SpecialTokens) -> Option<(u32, u32)> {
        // After a frame the reference model writes `<|im_start|>` to speak or `<|stream_start|>`
        // for the next frame (docs/REFERENCE.md §1c).
        // The manifest's checks made sure it names it (`Family::required_tokens`).
        Some((special.im_start, special.stream_start?))
    }

    fn turn_close(&self, ended: bool) -> Rendered {
        // After `<|im_end|>` (generated and fed) only its newline is missing; a cut answer needs
        // both.
        template_text(if ended { "\n" } else { "<|im_end|>\n" })
    }
}

/// VideoLLaMA3's offline video prompt (also the `tiny` family's), with `system` as the system
/// message (`None`: no system turn).
pub fn offline(
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
pub fn stream(
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
pub fn stream_prefix(system: Option<&str>) -> Rendered {
    let mut r = Rendered::new(IMAGE_PLACEHOLDER);
    if let Some(system) = system {
        r.template("<|im_start|>system\n");
        r.template(system);
        r.template("<|im_end|>\n");
    }
    r
}

/// One frame as a streaming item, exactly as [`stream`] renders each frame: appended
/// to a cache of earlier items it gives the same tokens as a full render (segments split only at
/// special tokens and visual spans).
///
/// `time_secs`: the frame's stream time, rendered as `Time {t:.1}s:` before its tokens, for models
/// whose manifest sets `stream_timestamps` (the reference's items have none: `None`).
pub fn stream_frame(kept: usize, time_secs: Option<f64>) -> Result<Rendered, RenderError> {
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
pub fn stream_ask(role: Role, text: &str) -> Rendered {
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

/// The assistant's turn opening alone: what follows a frame when the model chose to speak.
pub fn stream_speak() -> Rendered {
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
