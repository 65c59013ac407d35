//! `POST /v1/chat/completions` and `GET /v1/models`, as OpenAI's API has them, so existing
//! clients (the `openai` package, Open WebUI, Home Assistant's OpenAI conversation) can talk to a
//! camera (docs/HTTP.md, "OpenAI-compatible").
//!
//! `model` names the camera: `door`, `camera:door`, or `camera:door:30` for the last 30 s. The
//! last user message is the question. A chat is a conversation over the camera's memory: the
//! first answer opens one (`query.conversations`), and a later request that carries that first
//! exchange (its first user message and the answer to it, as OpenAI clients resend the whole
//! chat) continues it, with the footage that arrived since. A chat whose conversation was
//! forgotten (`query.conversation_ttl_secs`) starts a new one from its last message.

use super::{App, error, query_error};
use crate::query::{ErrorCode, FinishReason, QueryError, ValidQuery};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc;

/// Chats remembered (first exchange → conversation id), oldest forgotten first.
pub const CHATS: usize = 256;

/// Chats: the hash of a first exchange → the conversation it opened.
#[derive(Debug, Default)]
pub struct Chats(std::sync::Mutex<VecDeque<(u64, String)>>);

impl Chats {
    fn find(&self, key: u64) -> Option<String> {
        let q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        q.iter().find(|(k, _)| *k == key).map(|(_, c)| c.clone())
    }

    fn remember(&self, key: u64, conversation: String) {
        let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= CHATS {
            q.pop_front();
        }
        q.push_back((key, conversation));
    }
}

#[derive(Deserialize)]
pub(super) struct ChatRequest {
    model: String,
    messages: Vec<Message>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    temperature: Option<f64>,
    #[serde(default)]
    stream: bool,
    // Other fields clients send (`top_p`, `n`, `user`, …) are ignored: they do not change a
    // greedy answer.
}

#[derive(Deserialize)]
struct Message {
    role: String,
    content: Content,
}

/// A message's content: a string, or OpenAI's list of parts (the text parts are used).
#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Value>),
}

impl Content {
    fn text(&self) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// `door`, `camera:door` or `camera:door:30` → (camera, window).
fn parse_model(model: &str) -> Result<(String, Option<Duration>), QueryError> {
    let rest = model.strip_prefix("camera:").unwrap_or(model);
    let (camera, window) = match rest.rsplit_once(':') {
        Some((c, w)) if model.starts_with("camera:") => {
            let secs: f64 = w.trim_end_matches('s').parse().map_err(|_| {
                QueryError::new(
                    ErrorCode::InvalidField,
                    format!("`model` = \"{model}\": the window after the camera is seconds, such as \"camera:door:30\""),
                )
            })?;
            if !(secs.is_finite() && secs > 0.0) {
                return Err(QueryError::new(
                    ErrorCode::InvalidField,
                    format!("`model` = \"{model}\": the window must be positive"),
                ));
            }
            (c, Some(Duration::from_secs_f64(secs)))
        }
        _ => (rest, None),
    };
    Ok((camera.to_string(), window))
}

fn key_of(camera: &str, first_user: &str, first_answer: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (camera, first_user, first_answer).hash(&mut h);
    h.finish()
}

fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Stop => "stop",
        FinishReason::MaxTokens => "length",
    }
}

pub(super) async fn models(State(app): State<Arc<App>>) -> Response {
    let created = crate::publish::unix_now() as u64;
    let data: Vec<Value> = app
        .sources
        .reports
        .borrow()
        .cameras
        .iter()
        .map(|c| json!({"id": c.camera, "object": "model", "created": created, "owned_by": "edgevlm"}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

pub(super) async fn completions(
    State(app): State<Arc<App>>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let limits = app.sources.limits;
    let Ok(body) = body else {
        return super::too_large(16 * limits.max_bytes);
    };
    let req: ChatRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_field",
                format!("not a chat completion request: {e}"),
            );
        }
    };
    if let Some(t) = req.temperature
        && !(0.0..=2.0).contains(&t)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_field",
            format!("`temperature` must be between 0 and 2, got {t}"),
        );
    }
    let (camera, window) = match parse_model(&req.model) {
        Ok(m) => m,
        Err(e) => return query_error(&e),
    };
    let users: Vec<String> = req
        .messages
        .iter()
        .filter(|m| m.role == "user")
        .map(|m| m.content.text())
        .collect();
    let Some(question) = users.last().cloned() else {
        return error(
            StatusCode::BAD_REQUEST,
            "missing_field",
            "`messages` has no user message: the last one is the question",
        );
    };
    // A follow-up carries the chat's first exchange: the conversation it opened continues.
    let first_answer = req
        .messages
        .iter()
        .find(|m| m.role == "assistant")
        .map(|m| m.content.text());
    let continued = first_answer
        .as_ref()
        .and_then(|a| app.chats.find(key_of(&camera, &users[0], a)));
    let opened = continued.is_none();
    let conversation =
        continued.unwrap_or_else(|| format!("oa-{}", app.next_id.fetch_add(1, Ordering::Relaxed)));
    let validated = {
        let cameras = app
            .sources
            .cameras
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        ValidQuery::check(
            &camera,
            &question,
            window,
            req.max_completion_tokens.or(req.max_tokens),
            Some(conversation.clone()),
            std::time::Instant::now(),
            &limits,
            &cameras,
        )
    };
    let query = match validated {
        Ok(q) => q,
        Err(e) => return query_error(&e),
    };
    let Some(service) = app.sources.service.borrow().clone() else {
        return query_error(&super::not_ready(&app));
    };
    let admission = match service.admit() {
        Ok(a) => a,
        Err(e) => return query_error(&e),
    };
    let id = format!("chatcmpl-{}", app.next_id.fetch_add(1, Ordering::Relaxed));
    let created = crate::publish::unix_now() as u64;
    let model = req.model.clone();
    // The first exchange is remembered once its answer is known.
    let first_user = users[0].clone();
    let conv = conversation.clone();
    let remember = move |app: &App, answer: &str| {
        if opened {
            let first = first_answer.unwrap_or_else(|| answer.to_string());
            app.chats
                .remember(key_of(&camera, &first_user, &first), conversation.clone());
        }
    };
    if !req.stream {
        let (_, result) = service.ask_valid(admission, query, |_: &str| {}).await;
        return match result {
            Ok(r) => {
                remember(&app, &r.text);
                axum::Json(json!({
                    "id": id,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": r.text},
                        "finish_reason": finish_reason(r.finish),
                    }],
                    "usage": {
                        "prompt_tokens": r.prompt_tokens,
                        "completion_tokens": r.generated_tokens,
                        "total_tokens": r.prompt_tokens + r.generated_tokens,
                    },
                    // Beyond OpenAI's fields (clients keep them as extras): what it saw.
                    "edgevlm": {
                        "conversation": conv,
                        "turn": r.turn,
                        "frames": r.frames,
                        "window_start_secs": r.window.0.as_secs_f64(),
                        "window_end_secs": r.window.1.as_secs_f64(),
                    },
                }))
                .into_response()
            }
            Err(e) => query_error(&e),
        };
    }
    let (tx, rx) = mpsc::channel::<Event>(super::SSE_BUFFER);
    let chunk = {
        let (id, model) = (id.clone(), model.clone());
        move |delta: Value, finish: Option<&str>| {
            Event::default().data(
                json!({
                    "id": id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                })
                .to_string(),
            )
        }
    };
    let _ = tx.try_send(chunk(json!({"role": "assistant", "content": ""}), None));
    let deltas = {
        let (tx, chunk, app) = (tx.clone(), chunk.clone(), app.clone());
        move |text: &str| {
            if tx.try_send(chunk(json!({"content": text}), None)).is_err() {
                app.sse_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    let app2 = app.clone();
    tokio::spawn(async move {
        let (deltas, result) = service.ask_valid(admission, query, deltas).await;
        drop(deltas);
        let last = match result {
            Ok(r) => {
                remember(&app2, &r.text);
                chunk(json!({}), Some(finish_reason(r.finish)))
            }
            Err(e) => {
                let error = json!({"error": {"code": e.code, "message": e.message}});
                Event::default().data(error.to_string())
            }
        };
        if super::send_last(&app2, &tx, last).await {
            let _ = super::send_last(&app2, &tx, Event::default().data("[DONE]")).await;
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_names_a_camera_and_optionally_a_window() {
        assert_eq!(parse_model("door").unwrap(), ("door".into(), None));
        assert_eq!(parse_model("camera:door").unwrap(), ("door".into(), None));
        assert_eq!(
            parse_model("camera:door:30").unwrap(),
            ("door".into(), Some(Duration::from_secs(30)))
        );
        assert_eq!(
            parse_model("camera:door:x").unwrap_err().code,
            ErrorCode::InvalidField
        );
        assert_eq!(
            parse_model("camera:door:-3").unwrap_err().code,
            ErrorCode::InvalidField
        );
    }

    #[test]
    fn a_chat_is_found_by_its_first_exchange_and_chats_are_bounded() {
        let chats = Chats::default();
        chats.remember(key_of("door", "who?", "a cat"), "oa-1".into());
        assert_eq!(
            chats.find(key_of("door", "who?", "a cat")).as_deref(),
            Some("oa-1")
        );
        assert_eq!(chats.find(key_of("yard", "who?", "a cat")), None);
        for n in 0..CHATS {
            chats.remember(n as u64, format!("oa-x{n}"));
        }
        assert_eq!(chats.find(key_of("door", "who?", "a cat")), None);
    }
}
