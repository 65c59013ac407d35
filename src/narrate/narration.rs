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
    /// Stream time of the first frame it covers (the first since the previous narration).
    pub stream_start_secs: f64,
    /// Stream time of the last frame it covers.
    pub stream_end_secs: f64,
    /// Wall-clock time (Unix seconds) of the first frame it covers.
    pub wall_start: f64,
    /// Wall-clock time (Unix seconds) of the last frame it covers.
    pub wall_end: f64,
    /// Stream time of the first frame the model saw (the live cache holds the camera's window,
    /// so this is usually before `stream_start_secs`).
    pub window_start_secs: f64,
    /// Stream time of the last frame the model saw.
    pub window_end_secs: f64,
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
    /// The most change in the span: the largest share of a frame's visual tokens DiffFP kept,
    /// 0–1 (key frames, which are kept whole, do not count).
    pub activity: f64,
    /// The id of the change event in progress when it was generated, if any.
    pub event: Option<String>,
    /// Its snapshot; `null` when snapshots are off or the snapshot queue was full.
    pub snapshot: Option<SnapshotRef>,
    /// The camera's `watch_for` question and the model's answer (`null` without `watch_for`).
    pub watch: Option<WatchAnswer>,
}

/// Whether the footage shows what the camera watches for, as the model answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchAnswer {
    /// The camera's `watch_for`.
    #[serde(rename = "for")]
    pub watch_for: String,
    /// `true` (yes), `false` (no), or `null` when the answer began with neither.
    pub answer: Option<bool>,
    /// The rest of the model's answer: its reason (the whole answer when it said neither).
    pub reason: String,
}

impl WatchAnswer {
    /// Reads a model's answer: a leading yes or no (any case, then punctuation), then the reason.
    pub fn parse(watch_for: &str, text: &str) -> WatchAnswer {
        let t = text.trim();
        let word: String = t
            .chars()
            .take_while(|c| c.is_alphabetic())
            .collect::<String>()
            .to_lowercase();
        let answer = match word.as_str() {
            "yes" => Some(true),
            "no" => Some(false),
            _ => None,
        };
        let reason = match answer {
            Some(_) => t[word.len()..]
                .trim_start_matches(|c: char| c.is_whitespace() || ",.;:!-".contains(c))
                .to_string(),
            None => t.to_string(),
        };
        WatchAnswer {
            watch_for: watch_for.to_string(),
            answer,
            reason,
        }
    }
}

/// What a narration or an event says about its snapshot; the JPEG itself is published on
/// `<prefix>/<camera>/snapshot/<id>` (`crate::evidence`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRef {
    /// The snapshot's id: the id of the narration or event message it was taken for.
    pub id: String,
    /// The sampled frame's sequence number in its camera.
    pub frame: u64,
    /// Stream time of that frame.
    pub stream_secs: f64,
    /// Wall-clock time (Unix seconds) it was sampled.
    pub ts: f64,
    /// Width of the JPEG.
    pub width: u32,
    /// Height of the JPEG.
    pub height: u32,
}

/// Start or end of activity, as the change detector decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// Activity began.
    Start,
    /// Activity ended.
    End,
}

/// What an event message says happened (Frigate's event types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventType {
    /// Activity began: a new event id.
    New,
    /// A narration of the event was published (`narration` names it).
    Update,
    /// Activity ended.
    End,
}

/// An event message on `<prefix>/<camera>/events` (QoS 1, not retained). The messages of one
/// event (`new`, any `update`s, `end`) share its `id`; narrations generated during it carry the
/// id in their `event` field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeEvent {
    /// The event's id (`<camera>-ev-<Unix ms of its first frame>`).
    pub id: String,
    /// Camera id.
    pub camera: String,
    /// `new`, `update` or `end`.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// Stream time of the frame that started the event.
    pub start_stream_secs: f64,
    /// Wall-clock time (Unix seconds) of that frame.
    pub start_ts: f64,
    /// Stream time of the frame this message is about (for `end`, the frame that ended it).
    pub stream_secs: f64,
    /// Wall-clock time (Unix seconds) of that frame.
    pub ts: f64,
    /// Share of that frame's visual tokens DiffFP kept (how much moved), 0–1.
    pub activity: f64,
    /// The most activity in the event so far.
    pub peak_activity: f64,
    /// `update`: the narration that was published.
    pub narration: Option<String>,
    /// The event's picture: `new`, the frame that started it; `update`, the narration's;
    /// `end`, the frame with the most activity in the whole event. `null` when snapshots are off
    /// or the snapshot queue was full.
    pub snapshot: Option<SnapshotRef>,
    /// `update`: the narration's `watch` answer, when the camera has `watch_for`.
    pub watch: Option<WatchAnswer>,
}
