//! `edgevlm ask`: publish a question, print the answer as it streams.
//!
//! Subscribes to the answer topic first (so no chunk can be missed), then publishes the query.
//! Chunks are printed in `seq` order; a duplicate (QoS 1) is skipped; after a gap the rest is
//! taken from the final message, which always carries the whole text.

use super::Endpoint;
use super::payload::{AnswerMessage, ErrorReply};
use super::topics::Topics;
use crate::config::MqttProtocol;
use crate::query::Answer;
use std::time::{Duration, Instant};

/// What to ask.
#[derive(Debug, Clone)]
pub struct AskOptions {
    /// Broker.
    pub endpoint: Endpoint,
    /// Topic prefix of the runtime.
    pub prefix: String,
    /// Camera id.
    pub camera: String,
    /// The question.
    pub question: String,
    /// Footage to ground the answer on; `None`: the camera's whole window.
    pub window_secs: Option<f64>,
    /// Most tokens to generate.
    pub max_tokens: Option<u32>,
    /// Conversation id: a follow-up with the same id continues from the previous answer.
    pub conversation: Option<String>,
    /// Give up after this long without the final message.
    pub timeout: Duration,
    /// Query id; `None`: a fresh one.
    pub id: Option<String>,
}

/// How a question ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AskOutcome {
    /// The final answer arrived.
    Answered(Answer),
    /// The runtime replied with an error.
    Refused(ErrorReply),
}

/// Why no reply arrived.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// Nothing final within the timeout.
    #[error("no answer within {0:.0} s (is edgevlm running, and is the camera id right?)")]
    Timeout(f64),
    /// The broker could not be reached or dropped the connection.
    #[error("MQTT: {0}")]
    Connection(String),
}

/// A fresh query id: time and process, unique enough for one machine.
pub fn fresh_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "ask-{:x}-{:x}",
        std::process::id(),
        nanos & 0xffff_ffff_ffff
    )
}

/// Asks and calls `on_text` with each new piece of text, in order. MQTT 3.1.1.
pub async fn ask(
    options: AskOptions,
    mut on_text: impl FnMut(&str),
) -> Result<AskOutcome, AskError> {
    let topics = Topics::new(options.prefix.clone());
    let id = options.id.clone().unwrap_or_else(fresh_id);
    let answer_topic = topics.answer(&options.camera, &id);
    let connect = super::ConnectOptions {
        host: options.endpoint.host.clone(),
        port: options.endpoint.port,
        protocol: MqttProtocol::V311,
        client_id: format!("edgevlm-{id}"),
        keep_alive: Duration::from_secs(30),
        login: options.endpoint.login.clone(),
        tls: options.endpoint.tls.clone(),
        will: None,
        max_incoming: super::MAX_INCOMING_BYTES,
        max_outgoing: super::MAX_INCOMING_BYTES,
        channel: 16,
        connect_timeout: options.timeout.min(Duration::from_secs(10)),
        // A one-question client: a message too large for it ends the ask with an error.
        guard: false,
    };
    let (client, mut eventloop) = super::wire::build(&connect);
    let mut query = serde_json::json!({ "id": id, "question": options.question });
    if let Some(w) = options.window_secs {
        query["window_secs"] = serde_json::json!(w);
    }
    if let Some(m) = options.max_tokens {
        query["max_tokens"] = serde_json::json!(m);
    }
    if let Some(c) = &options.conversation {
        query["conversation"] = serde_json::json!(c);
    }
    let deadline = Instant::now() + options.timeout;
    let mut subscribed = false;
    let mut asked = false;
    let mut next_seq = 0u64;
    let mut printed = String::new();
    let mut gap = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(AskError::Timeout(options.timeout.as_secs_f64()));
        }
        let event = match tokio::time::timeout(left, eventloop.poll()).await {
            Err(_) => return Err(AskError::Timeout(options.timeout.as_secs_f64())),
            Ok(Err(e)) => return Err(AskError::Connection(e)),
            Ok(Ok(e)) => e,
        };
        match event {
            super::wire::WireEvent::ConnAck if !subscribed => {
                subscribed = true;
                client
                    .try_subscribe(&answer_topic)
                    .map_err(|_| AskError::Connection("request channel full".into()))?;
            }
            super::wire::WireEvent::SubscribeRefused => {
                return Err(AskError::Connection(format!(
                    "the broker refused the subscription to {answer_topic}"
                )));
            }
            super::wire::WireEvent::Subscribed if !asked => {
                // The SUBACK: only now is it safe to ask.
                asked = true;
                client
                    .try_publish(
                        &topics.query(&options.camera),
                        true,
                        false,
                        query.to_string().into_bytes(),
                        None,
                    )
                    .map_err(|_| AskError::Connection("request channel full".into()))?;
            }
            super::wire::WireEvent::Message(m) if m.topic == answer_topic => {
                match AnswerMessage::parse(&m.payload) {
                    Ok(AnswerMessage::Chunk(c)) => {
                        if c.seq == next_seq && !gap {
                            on_text(&c.delta);
                            printed.push_str(&c.delta);
                            next_seq += 1;
                        } else if c.seq > next_seq {
                            gap = true;
                        }
                    }
                    Ok(AnswerMessage::Final(a)) => {
                        match a.text.strip_prefix(printed.as_str()) {
                            Some(rest) => on_text(rest),
                            None => {
                                on_text("\n");
                                on_text(&a.text);
                            }
                        }
                        let _ = client.try_disconnect();
                        return Ok(AskOutcome::Answered(a));
                    }
                    Ok(AnswerMessage::Error(e)) => {
                        let _ = client.try_disconnect();
                        return Ok(AskOutcome::Refused(e));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "Ignoring an unreadable message on the answer topic");
                    }
                }
            }
            _ => {}
        }
    }
}
