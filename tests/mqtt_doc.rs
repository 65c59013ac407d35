//! docs/MQTT.md and the code agree: every JSON example parses into the type it documents, strictly.

use edgevlm::narrate::{ChangeEvent, Narration};
use edgevlm::publish::{Chunk, ErrorNotice, ErrorReply, StatusMessage};
use edgevlm::query::{Answer, CameraDirectory, QueryLimits, validate};
use edgevlm::ring::CounterSnapshot;
use edgevlm::supervisor::{CameraReport, CameraState};
use std::collections::BTreeSet;
use std::time::Duration;

/// `(tag, body)` of every fenced block opened with "```json TAG".
fn examples() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string("docs/MQTT.md").unwrap();
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in doc.lines() {
        match &mut current {
            None => {
                if let Some(tag) = line.strip_prefix("```json ") {
                    current = Some((tag.trim().to_string(), String::new()));
                }
            }
            Some((_, body)) => {
                if line.starts_with("```") {
                    out.push(current.take().unwrap());
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    out
}

fn keys(v: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let Some(obj) = v.as_object() {
        for (k, v) in obj {
            let path = format!("{prefix}{k}");
            keys(v, &format!("{path}."), out);
            out.insert(path);
        }
    }
}

#[test]
fn every_json_example_in_mqtt_md_parses_into_its_type() {
    let examples = examples();
    let tags: BTreeSet<&str> = examples.iter().map(|(t, _)| t.as_str()).collect();
    for required in [
        "status",
        "stats",
        "narration",
        "chunk",
        "query",
        "answer",
        "error_reply",
        "error_notice",
        "event",
    ] {
        assert!(
            tags.contains(required),
            "docs/MQTT.md has no `{required}` example"
        );
    }
    for (tag, body) in &examples {
        let result: Result<(), String> = match tag.as_str() {
            "narration" => serde_json::from_str::<Narration>(body)
                .map(drop)
                .map_err(|e| e.to_string()),
            "chunk" => serde_json::from_str::<Chunk>(body)
                .map(drop)
                .map_err(|e| e.to_string()),
            "answer" => serde_json::from_str::<Answer>(body)
                .map(drop)
                .map_err(|e| e.to_string()),
            "error_reply" => serde_json::from_str::<ErrorReply>(body)
                .map(drop)
                .map_err(|e| e.to_string()),
            "error_notice" => serde_json::from_str::<ErrorNotice>(body)
                .map(drop)
                .map_err(|e| e.to_string()),
            "event" => serde_json::from_str::<ChangeEvent>(body)
                .map(drop)
                .map_err(|e| e.to_string()),
            "query" => {
                let cameras = CameraDirectory::new([("door".to_string(), Duration::from_secs(60))]);
                let limits = QueryLimits {
                    max_bytes: 16384,
                    question_max_chars: 2000,
                    max_tokens: 4096,
                };
                validate(
                    "door",
                    body.as_bytes(),
                    std::time::Instant::now(),
                    &limits,
                    &cameras,
                )
                .map(drop)
                .map_err(|r| r.error.to_string())
            }
            "status" => {
                // The status is part of a CameraReport (serialise-only): the example must have
                // exactly its fields.
                let report = CameraReport {
                    camera: "door".into(),
                    state: CameraState::Running,
                    reason: None,
                    source: String::new(),
                    pipeline: String::new(),
                    geometry: None,
                    tokens_per_frame: None,
                    source_caps: None,
                    fps_in: 0.0,
                    fps_sampled: 0.0,
                    window_frames: 0,
                    window_span_secs: 0.0,
                    state_secs: 0.0,
                    prune_mode: String::new(),
                    kept_ratio: 0.0,
                    prune_threshold: None,
                    decode: None,
                    counters: CounterSnapshot::default(),
                    memory: Some(edgevlm::memory::MemoryReport {
                        narration_first_token_p50_ms: Some(0.0),
                        answer_first_token_p50_ms: Some(0.0),
                        ..Default::default()
                    }),
                    family: Some(edgevlm::engine::Family::Videollama3),
                };
                let instance = edgevlm::publish::Instance::new();
                let code = serde_json::to_value(StatusMessage::of(&report, "node", &instance, 0.0))
                    .unwrap();
                let doc: serde_json::Value = serde_json::from_str(body)
                    .map_err(|e| e.to_string())
                    .unwrap();
                let (mut want, mut got) = (BTreeSet::new(), BTreeSet::new());
                keys(&code, "", &mut want);
                keys(&doc, "", &mut got);
                if want == got {
                    Ok(())
                } else {
                    Err(format!(
                        "fields differ: only in the code {:?}, only in the doc {:?}",
                        want.difference(&got).collect::<Vec<_>>(),
                        got.difference(&want).collect::<Vec<_>>()
                    ))
                }
            }
            "stats" => serde_json::from_str::<edgevlm::publish::StatsMessage>(body)
                .map(drop)
                .map_err(|e| e.to_string()),
            other => Err(format!("unknown example tag `{other}`")),
        };
        if let Err(e) = result {
            panic!("docs/MQTT.md `{tag}` example does not match the code: {e}\n{body}");
        }
    }
}

#[test]
fn every_error_code_is_documented() {
    let doc = std::fs::read_to_string("docs/MQTT.md").unwrap();
    for code in [
        "too_large",
        "malformed",
        "missing_field",
        "invalid_field",
        "unknown_camera",
        "retained",
        "empty_question",
        "question_too_long",
        "window_too_long",
        "bad_response_topic",
        "busy",
        "no_model",
        "no_frames",
        "context_full",
        "internal",
    ] {
        assert!(
            doc.contains(&format!("| `{code}` |")),
            "{code} has no row in docs/MQTT.md"
        );
    }
}
