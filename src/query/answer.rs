//! What the query stage produces: answers and the errors a question can get, with their codes.
//! `crate::publish` serialises them as they are (docs/MQTT.md lists every code).

use serde::{Deserialize, Serialize};

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
    /// The question was a retained message: not answered (it would be answered again after
    /// every reconnection); its retained copy is cleared.
    Retained,
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
            ErrorCode::Retained => "retained",
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
