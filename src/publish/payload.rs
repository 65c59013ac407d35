//! Message payloads (JSON, UTF-8). docs/MQTT.md shows an example of each; a test parses them into
//! these types, so the document and the code cannot drift apart.
//!
//! Times: `*_secs` fields of stream time are seconds of the camera's presentation clock; `ts` and
//! `wall_*` fields are Unix time in seconds (fractional). Durations are in milliseconds (`*_ms`).

use crate::supervisor::CameraReport;
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
}

/// One streamed piece of a narration or an answer: `{id, seq, delta, done}` (QoS 1).
///
/// `seq` counts from 0 per id; the last chunk has `done: true` (its `delta` may be empty). A
/// final message with the whole text always follows, so a subscriber that missed chunks (it
/// joined late, or the connection dropped: chunks are not kept across an outage) still gets
/// everything from the final message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chunk {
    /// Id of the narration or query.
    pub id: String,
    /// 0, 1, 2, … per id.
    pub seq: u64,
    /// Text added since the previous chunk (UTF-8 safe: never half a character).
    pub delta: String,
    /// Whether this is the last chunk.
    pub done: bool,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model ended its turn.
    Stop,
    /// The token limit was reached.
    MaxTokens,
}

/// The final answer to a question, on its answer topic after the chunks (QoS 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// The query's id.
    pub id: String,
    /// Camera id.
    pub camera: String,
    /// The full text.
    pub text: String,
    /// Why generation stopped.
    pub finish: FinishReason,
    /// Stream time of the first frame used.
    pub window_start_secs: f64,
    /// Stream time of the last frame used.
    pub window_end_secs: f64,
    /// Frames used.
    pub frames: u32,
    /// Visual tokens used (after DiffFP).
    pub visual_tokens: u32,
    /// Prompt tokens in all.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub generated_tokens: u32,
    /// Milliseconds from receiving the query to the first token.
    pub first_token_ms: f64,
    /// Milliseconds from receiving the query to the last token.
    pub total_ms: f64,
}

/// What was wrong with a request (or why it could not be answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The payload is larger than `mqtt.query_max_bytes`.
    TooLarge,
    /// Not UTF-8 JSON, or not a JSON object.
    Malformed,
    /// A required field (`id`, `question`) is absent.
    MissingField,
    /// A field has the wrong type or an invalid value, or is unknown.
    InvalidField,
    /// No camera of that id.
    UnknownCamera,
    /// The question is empty or only whitespace.
    EmptyQuestion,
    /// The question is longer than `mqtt.question_max_chars`.
    QuestionTooLong,
    /// `window_secs` asks for more footage than the camera keeps (`window_secs` of the camera).
    WindowTooLong,
    /// An MQTT 5 response topic that replies may not use.
    BadResponseTopic,
    /// Too many questions are waiting (`mqtt.query_queue`); ask again later.
    Busy,
    /// The engine stage is not enabled, so nothing can answer.
    NoModel,
    /// The camera has no frames in the requested window (stopped or just started).
    NoFrames,
    /// The conversation fills the model's context; start a new one.
    ContextFull,
    /// The runtime failed while answering (see its log).
    Internal,
    /// A code this version does not know (sent by a newer runtime).
    #[serde(other)]
    Other,
}

impl ErrorCode {
    /// The code as it appears in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Malformed => "malformed",
            ErrorCode::MissingField => "missing_field",
            ErrorCode::InvalidField => "invalid_field",
            ErrorCode::UnknownCamera => "unknown_camera",
            ErrorCode::EmptyQuestion => "empty_question",
            ErrorCode::QuestionTooLong => "question_too_long",
            ErrorCode::WindowTooLong => "window_too_long",
            ErrorCode::BadResponseTopic => "bad_response_topic",
            ErrorCode::Busy => "busy",
            ErrorCode::NoModel => "no_model",
            ErrorCode::NoFrames => "no_frames",
            ErrorCode::ContextFull => "context_full",
            ErrorCode::Internal => "internal",
            ErrorCode::Other => "other",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request error: a machine-readable code and a sentence that says what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(deny_unknown_fields)]
#[error("{code}: {message}")]
pub struct QueryError {
    /// Machine-readable.
    pub code: ErrorCode,
    /// For people: what was wrong and, where it helps, what was expected.
    pub message: String,
}

impl QueryError {
    /// An error with a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        QueryError {
            code,
            message: message.into(),
        }
    }

    /// `no_model`: what a question gets when no question stage takes it (the runtime is stopping,
    /// or a publisher runs without one).
    pub fn no_model() -> Self {
        QueryError::new(
            ErrorCode::NoModel,
            "no question stage is running (the runtime is shutting down, or runs without a model)",
        )
    }
}

/// An error reply on a query's answer topic: `{id, error: {code, message}}` (QoS 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    /// The query's id.
    pub id: String,
    /// What was wrong.
    pub error: QueryError,
}

/// A bad request that had no usable id, on `<prefix>/errors` (QoS 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorNotice {
    /// The topic the request arrived on.
    pub topic: String,
    /// The camera named by that topic.
    pub camera: Option<String>,
    /// The id, when one was present but unusable in a topic (shown for correlation).
    pub id: Option<String>,
    /// What was wrong.
    pub error: QueryError,
    /// When (Unix seconds).
    pub ts: f64,
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

/// The retained status of a camera: its [`CameraReport`] plus the time it was taken.
#[derive(Debug, Clone, Serialize)]
pub struct StatusMessage<'a> {
    /// The report (flattened: `camera`, `state`, `fps_in`, …).
    #[serde(flatten)]
    pub report: &'a CameraReport,
    /// When (Unix seconds).
    pub ts: f64,
}

/// A message on an answer topic, as a client reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerMessage {
    /// A streamed piece.
    Chunk(Chunk),
    /// The final answer.
    Final(Answer),
    /// An error reply.
    Error(ErrorReply),
}

impl AnswerMessage {
    /// Tells the three shapes apart by their fields (`error`, `text`, `delta`).
    pub fn parse(payload: &[u8]) -> Result<AnswerMessage, String> {
        let v: serde_json::Value =
            serde_json::from_slice(payload).map_err(|e| format!("not JSON: {e}"))?;
        let obj = v.as_object().ok_or("not a JSON object")?;
        let r = if obj.contains_key("error") {
            serde_json::from_value(v).map(AnswerMessage::Error)
        } else if obj.contains_key("text") {
            serde_json::from_value(v).map(AnswerMessage::Final)
        } else if obj.contains_key("delta") {
            serde_json::from_value(v).map(AnswerMessage::Chunk)
        } else {
            return Err("neither a chunk, a final answer nor an error".into());
        };
        r.map_err(|e| e.to_string())
    }
}

/// Unix time now, in seconds.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Unix seconds of a `SystemTime` (0 before 1970).
pub fn unix_secs(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_topic_messages_are_told_apart_by_their_fields() {
        let c = AnswerMessage::parse(br#"{"id":"q","seq":0,"delta":"A","done":false}"#).unwrap();
        assert!(matches!(c, AnswerMessage::Chunk(_)));
        let e =
            AnswerMessage::parse(br#"{"id":"q","error":{"code":"busy","message":"m"}}"#).unwrap();
        assert!(matches!(
            e,
            AnswerMessage::Error(ErrorReply {
                error: QueryError {
                    code: ErrorCode::Busy,
                    ..
                },
                ..
            })
        ));
        let unknown =
            AnswerMessage::parse(br#"{"id":"q","error":{"code":"from_the_future","message":"m"}}"#)
                .unwrap();
        assert!(matches!(
            unknown,
            AnswerMessage::Error(ErrorReply {
                error: QueryError {
                    code: ErrorCode::Other,
                    ..
                },
                ..
            })
        ));
        assert!(AnswerMessage::parse(b"[]").is_err());
    }

    #[test]
    fn error_codes_serialize_as_documented() {
        for code in [
            ErrorCode::TooLarge,
            ErrorCode::NoModel,
            ErrorCode::WindowTooLong,
        ] {
            assert_eq!(
                serde_json::to_string(&code).unwrap(),
                format!("\"{}\"", code.as_str())
            );
        }
    }
}
