//! What the narrate stage produces: narrations and change events. `crate::publish` serialises
//! them as they are (docs/MQTT.md shows each; a test parses the examples into these types).

use serde::{Deserialize, Serialize};

/// What made the runtime speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// The model chose to speak (VideoLLaMA3 streaming "when to speak").
    Model,
    /// The change detector saw activity.
    Change,
    /// A fixed cadence.
    Interval,
}

/// A finished narration, on `<prefix>/<camera>/narration` (QoS 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Narration {
    /// Unique id; the chunks on `…/narration/stream` carry the same id.
    pub id: String,
    /// Camera id.
    pub camera: String,
    /// Why it was produced.
    pub trigger: Trigger,
    /// The full text.
    pub text: String,
    /// Stream time of the first frame it covers.
    pub stream_start_secs: f64,
    /// Stream time of the last frame it covers.
    pub stream_end_secs: f64,
    /// Wall-clock time (Unix seconds) of the first frame it covers.
    pub wall_start: f64,
    /// Wall-clock time (Unix seconds) of the last frame it covers.
    pub wall_end: f64,
    /// Frames shown to the model.
    pub frames: u32,
    /// Visual tokens after DiffFP.
    pub visual_tokens: u32,
    /// Prompt tokens in all (text and visual).
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub generated_tokens: u32,
    /// Milliseconds from the request to the first generated token.
    pub first_token_ms: f64,
    /// Milliseconds from the request to the last token.
    pub total_ms: f64,
    /// The runtime stopped while it was being generated: `text` is what was said until then.
    /// (One cut before any text is not published.)
    #[serde(default)]
    pub incomplete: bool,
}

/// Start or end of activity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// Activity began.
    Start,
    /// Activity ended.
    End,
}

/// A change event on `<prefix>/<camera>/events` (QoS 1, not retained).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeEvent {
    /// Camera id.
    pub camera: String,
    /// `start` or `end`.
    #[serde(rename = "type")]
    pub kind: ChangeKind,
    /// Stream time of the frame that decided it.
    pub stream_secs: f64,
    /// Wall-clock time (Unix seconds) of that frame.
    pub ts: f64,
    /// Share of the frame's visual tokens DiffFP kept (how much moved), 0–1.
    pub activity: f64,
}
