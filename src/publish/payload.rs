//! Message payloads (JSON, UTF-8). docs/MQTT.md shows an example of each; a test parses them into
//! these types, so the document and the code cannot drift apart.
//!
//! Times: `*_secs` fields of stream time are seconds of the camera's presentation clock; `ts` and
//! `wall_*` fields are Unix time in seconds (fractional). Durations are in milliseconds (`*_ms`).

use crate::query::{Answer, QueryError};
use crate::supervisor::CameraReport;
use serde::{Deserialize, Serialize};

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

/// The retained status of a camera: what it is and how it runs, the parts of its
/// [`CameraReport`] that change only when something happens (its figures are in
/// [`StatsMessage`]), and the run of the runtime that published it (so a consumer can tell a
/// stale status after a crash). Published when it changes and after every reconnection.
#[derive(Debug, Clone, Serialize)]
pub struct StatusMessage<'a> {
    /// Camera id.
    pub camera: &'a str,
    /// Lifecycle state.
    pub state: crate::supervisor::CameraState,
    /// Last failure or stop reason.
    pub reason: Option<&'a str>,
    /// Source address, credentials removed.
    pub source: &'a str,
    /// Pipeline template.
    pub pipeline: &'a str,
    /// Model geometry (`WxH`), once negotiated.
    pub geometry: Option<&'a str>,
    /// Visual tokens per frame at that geometry.
    pub tokens_per_frame: Option<u32>,
    /// What the source delivers.
    pub source_caps: Option<&'a str>,
    /// DiffFP mode.
    pub prune_mode: &'a str,
    /// What `decode = "keyframes"` does now (`null`: every frame decoded by configuration).
    pub decode: Option<&'a str>,
    /// The family of the model watching it (`null`: no model loaded).
    pub family: Option<crate::engine::Family>,
    /// Which runtime published it: its MQTT client id (`mqtt.client_id`).
    pub node: &'a str,
    /// Which run published it (drawn at random at start).
    pub instance: &'a str,
    /// When that run started (Unix seconds).
    pub started: f64,
    /// When it was published (Unix seconds).
    pub ts: f64,
}

impl<'a> StatusMessage<'a> {
    /// The status part of `report`, published by `instance` of `node`, at `ts`.
    pub fn of(report: &'a CameraReport, node: &'a str, instance: &'a Instance, ts: f64) -> Self {
        StatusMessage {
            camera: &report.camera,
            state: report.state,
            reason: report.reason.as_deref(),
            source: &report.source,
            pipeline: &report.pipeline,
            geometry: report.geometry.as_deref(),
            tokens_per_frame: report.tokens_per_frame,
            source_caps: report.source_caps.as_deref(),
            prune_mode: &report.prune_mode,
            decode: report.decode.as_deref(),
            family: report.family,
            node,
            instance: &instance.id,
            started: instance.started,
            ts,
        }
    }
}

/// A camera's figures on `<prefix>/<camera>/stats`, every `runtime.status_interval_secs`, not
/// retained: rates, window, DiffFP and the cumulative counters of its [`CameraReport`], rounded.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsMessage {
    /// Camera id.
    pub camera: String,
    /// Decoded frames per second since the last report (2 decimals).
    pub fps_in: f64,
    /// Sampled frames per second since the last report (2 decimals).
    pub fps_sampled: f64,
    /// Frames in the window.
    pub window_frames: usize,
    /// Stream time the window spans (0.1 s).
    pub window_span_secs: f64,
    /// Seconds in the current state (0.1 s).
    pub state_secs: f64,
    /// Share of visual tokens DiffFP kept so far (3 decimals).
    pub kept_ratio: f64,
    /// DiffFP's current threshold (3 decimals).
    pub prune_threshold: Option<f64>,
    /// Cumulative counters.
    pub counters: crate::ring::CounterSnapshot,
    /// Memory, narrations and answers (`null` when no model is loaded).
    pub memory: Option<crate::memory::MemoryReport>,
    /// Which runtime: its MQTT client id.
    pub node: String,
    /// Which run.
    pub instance: String,
    /// When (Unix seconds, 0.01 s).
    pub ts: f64,
}

/// `x` rounded to `decimals` places.
fn round(x: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    (x * p).round() / p
}

impl StatsMessage {
    /// The figures of `report`, rounded.
    pub fn of(report: &CameraReport, node: &str, instance: &Instance, ts: f64) -> Self {
        StatsMessage {
            camera: report.camera.clone(),
            fps_in: round(report.fps_in, 2),
            fps_sampled: round(report.fps_sampled, 2),
            window_frames: report.window_frames,
            window_span_secs: round(report.window_span_secs, 1),
            state_secs: round(report.state_secs, 1),
            kept_ratio: round(report.kept_ratio, 3),
            prune_threshold: report.prune_threshold.map(|t| round(f64::from(t), 3)),
            counters: report.counters,
            memory: report.memory,
            node: node.to_string(),
            instance: instance.id.clone(),
            ts: round(ts, 2),
        }
    }
}

/// One run of the runtime: a random id drawn when the publisher starts and the start time.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// 16 hex digits.
    pub id: String,
    /// Unix seconds.
    pub started: f64,
}

impl Instance {
    /// A new run, now.
    pub fn new() -> Instance {
        use std::hash::{BuildHasher, Hasher};
        // std's RandomState is seeded from the OS's random source once per process; the pid and
        // the time make two runs in one process (tests) differ too.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        Instance {
            id: format!("{:016x}", h.finish()),
            started: unix_now(),
        }
    }
}

impl Default for Instance {
    fn default() -> Self {
        Instance::new()
    }
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
    use crate::query::ErrorCode;

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
