//! The task that owns the broker connection.
//!
//! Two tasks: the *poller* only polls rumqttc's event loop (which progresses only while polled,
//! and whose `poll` is not safe to cancel in a `select!`), backs off with jitter after errors
//! (rumqttc retries in a tight loop by itself; docs/ARCHITECTURE.md, "Platform facts") and
//! forwards events; the *controller* owns the outbox side: it hands messages to the client,
//! matches packet ids to messages, re-subscribes and republishes `online` and the retained state
//! after every CONNACK, and validates incoming questions.

use super::outbox::{Class, Message};
use super::payload::{ErrorNotice, ErrorReply, unix_now};
use super::publisher::{QueryRequest, ReplyTo, Shared, lock};
use super::wire::{Incoming, WireClient, WireEvent, WireLoop};
use crate::base::{Backoff, Clock, log_safe};
use crate::query::{ErrorCode, QueryError};
use crate::query::{Rejection, refuse_cut, validate};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Publishes handed to rumqttc but not yet written, at most (its channel has headroom above
/// this for SUBSCRIBE and DISCONNECT).
pub(crate) const HANDED_LIMIT: usize = 64;

/// A connection that lasted this long resets the reconnect backoff.
const STABLE_AFTER: Duration = Duration::from_secs(10);

type Polled = Result<WireEvent, (String, Duration)>;

pub(crate) struct Poller {
    pub eventloop: WireLoop,
    pub events: mpsc::Sender<Polled>,
    /// How many errors the controller has seen (it must stop handing messages first).
    pub seen_errors: watch::Receiver<u64>,
    pub backoff: Backoff,
}

impl Poller {
    pub async fn run(mut self) {
        let mut errors = 0u64;
        let mut connected_at: Option<Instant> = None;
        loop {
            match self.eventloop.poll().await {
                Ok(WireEvent::Disconnected) => {
                    let _ = self.events.send(Ok(WireEvent::Disconnected)).await;
                    return;
                }
                Ok(event) => {
                    if matches!(event, WireEvent::ConnAck) {
                        connected_at = Some(Instant::now());
                    }
                    if self.events.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    self.eventloop.forget_pending();
                    if connected_at
                        .take()
                        .is_some_and(|t| t.elapsed() >= STABLE_AFTER)
                    {
                        self.backoff.reset();
                    }
                    let delay = self.backoff.next_delay();
                    errors += 1;
                    if self.events.send(Err((e, delay))).await.is_err() {
                        return;
                    }
                    let until = errors;
                    let seen = async {
                        let _ = self.seen_errors.wait_for(|n| *n >= until).await;
                    };
                    tokio::join!(tokio::time::sleep(delay), seen);
                    // Anything handed to the client before the controller saw the error would be
                    // sent on the next connection without the controller knowing: drop it (the
                    // outbox still has every reliable message).
                    self.eventloop.forget_pending();
                }
            }
        }
    }
}

pub(crate) struct Controller {
    pub shared: Arc<Shared>,
    pub client: WireClient,
    pub events: mpsc::Receiver<Polled>,
    pub seen_errors: watch::Sender<u64>,
    pub queries: mpsc::Sender<QueryRequest>,
    pub shutdown: watch::Receiver<bool>,
    pub describe: String,
    /// Outbox ids of the publishes handed to the client, in order (`None`: retained state).
    pub handed: VecDeque<Option<u64>>,
    /// Packet id → outbox id, written and awaiting PUBACK.
    pub inflight: HashMap<u16, u64>,
    pub connected: bool,
    pub warned_mismatch: bool,
    pub was_connected: bool,
    /// Timestamps questions on arrival.
    pub clock: Clock,
    /// Retained questions refused and cleared (see [`RetainedQuestions`]).
    pub retained_questions: RetainedQuestions,
}

/// What the controller remembers of the retained questions it refused, so that each is answered
/// once and the echo of its clearing is not taken for a question. Bounded.
#[derive(Debug, Default)]
pub(crate) struct RetainedQuestions {
    /// Query topics whose retained message was cleared, until the empty message comes back.
    cleared: HashSet<String>,
    /// (topic, payload hash) of the questions refused, newest last.
    refused: VecDeque<(String, u64)>,
}

/// Retained questions remembered at most.
const RETAINED_REMEMBERED: usize = 256;

impl RetainedQuestions {
    /// Records a retained question; false if it was refused before (delivered again, e.g. on a
    /// reconnection before its clearing reached the broker).
    fn first_time(&mut self, topic: &str, payload: &[u8]) -> bool {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        payload.hash(&mut h);
        let key = (topic.to_string(), h.finish());
        if self.refused.contains(&key) {
            return false;
        }
        if self.refused.len() >= RETAINED_REMEMBERED {
            self.refused.pop_front();
        }
        self.refused.push_back(key);
        true
    }

    /// Records that `topic`'s retained message is being cleared; false if it already is.
    fn clearing(&mut self, topic: &str) -> bool {
        if self.cleared.len() >= RETAINED_REMEMBERED {
            self.cleared.clear();
        }
        self.cleared.insert(topic.to_string())
    }

    /// Whether an empty message on `topic` is the echo of a clearing (forgotten once seen).
    fn is_echo(&mut self, topic: &str, payload: &[u8]) -> bool {
        payload.is_empty() && self.cleared.remove(topic)
    }
}

impl Controller {
    pub async fn run(mut self, flush_bound: Duration) {
        loop {
            tokio::select! {
                biased;
                _ = self.shutdown.changed() => break,
                event = self.events.recv() => match event {
                    Some(event) => self.handle(event),
                    None => {
                        tracing::error!("MQTT event loop ended unexpectedly; publishing stopped");
                        return;
                    }
                },
                _ = self.shared.wake.notified() => {}
            }
            self.pump();
        }
        self.close(flush_bound).await;
    }

    /// Clean shutdown: `offline` (retained) after everything queued, wait for the acknowledgements
    /// (at most `bound`), then DISCONNECT (which suppresses the last will in MQTT 3.1.1, hence the
    /// explicit `offline`).
    async fn close(&mut self, bound: Duration) {
        let deadline = tokio::time::Instant::now() + bound;
        if !self.connected {
            tracing::info!(
                pending = lock(&self.shared.outbox).len(),
                "MQTT broker unreachable at shutdown; queued messages are dropped"
            );
            return;
        }
        let available = self.shared.topics.available();
        lock(&self.shared.outbox).push(Message {
            topic: available,
            payload: b"offline".to_vec(),
            retain: true,
            class: Class::Reliable,
            correlation: None,
        });
        self.pump();
        while self.connected && !lock(&self.shared.outbox).is_empty() {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(event)) => self.handle(event),
                Ok(None) | Err(_) => break,
            }
            self.pump();
        }
        let left = lock(&self.shared.outbox).len();
        if left > 0 {
            tracing::warn!(
                pending = left,
                "MQTT messages not acknowledged before shutdown"
            );
        }
        if self.connected && self.client.try_disconnect().is_ok() {
            while let Ok(Some(event)) = tokio::time::timeout_at(deadline, self.events.recv()).await
            {
                if matches!(event, Ok(WireEvent::Disconnected) | Err(_)) {
                    break;
                }
            }
        }
        tracing::info!(broker = %self.describe, "MQTT disconnected");
    }

    fn handle(&mut self, event: Polled) {
        let counters = &self.shared.counters;
        match event {
            Err((error, delay)) => {
                counters.connection_errors.fetch_add(1, Ordering::Relaxed);
                counters.connected.store(false, Ordering::Relaxed);
                let lost = self.connected;
                self.connected = false;
                self.handed.clear();
                self.inflight.clear();
                lock(&self.shared.outbox).disconnected();
                self.seen_errors.send_modify(|n| *n += 1);
                let retry = format!("{:.1}", delay.as_secs_f64());
                if lost {
                    tracing::warn!(broker = %self.describe, error = %error, retry_in_secs = %retry, "MQTT connection lost; messages wait in the outbox");
                } else {
                    tracing::warn!(broker = %self.describe, error = %error, retry_in_secs = %retry, "MQTT broker unreachable");
                }
                *lock(&self.shared.last_error) = Some(error);
            }
            Ok(WireEvent::ConnAck) => {
                self.connected = true;
                counters.connected.store(true, Ordering::Relaxed);
                counters.connects.fetch_add(1, Ordering::Relaxed);
                lock(&self.shared.outbox).connected();
                for filter in [
                    self.shared.topics.query_filter(),
                    self.shared.topics.status_filter(),
                ] {
                    if self.client.try_subscribe(&filter).is_err() {
                        tracing::error!(filter = %filter, "MQTT request channel full; not subscribed");
                    }
                }
                {
                    let mut r = lock(&self.shared.retained);
                    r.values
                        .insert(self.shared.topics.available(), Some(b"online".to_vec()));
                    let topics: Vec<String> = r.values.keys().cloned().collect();
                    r.dirty.extend(topics);
                }
                let pending = lock(&self.shared.outbox).len();
                if self.was_connected {
                    tracing::info!(broker = %self.describe, resending = pending, "MQTT reconnected");
                } else {
                    tracing::info!(broker = %self.describe, pending, "MQTT connected");
                }
                self.was_connected = true;
            }
            Ok(WireEvent::Written(pkid)) => match self.handed.pop_front() {
                Some(Some(id)) if pkid == 0 => lock(&self.shared.outbox).delivered(id),
                Some(Some(id)) => {
                    self.inflight.insert(pkid, id);
                }
                Some(None) => {}
                None => {
                    if !self.warned_mismatch {
                        self.warned_mismatch = true;
                        tracing::warn!(pkid, "MQTT publish written that was not handed by us");
                    }
                }
            },
            Ok(WireEvent::Acked(pkid, refused)) => {
                if let Some(id) = self.inflight.remove(&pkid) {
                    lock(&self.shared.outbox).delivered(id);
                }
                if let Some(reason) = refused {
                    counters.refused_by_broker.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(reason = %reason, "The MQTT broker refused a publish");
                }
            }
            Ok(WireEvent::Message(m)) => {
                if self.shared.topics.status_camera(&m.topic).is_some() {
                    self.status(m);
                } else {
                    self.question(m);
                }
            }
            Ok(WireEvent::SubscribeRefused) => {
                tracing::error!(
                    filters = %format!("{}, {}", self.shared.topics.query_filter(), self.shared.topics.status_filter()),
                    "The MQTT broker refused a subscription (check its ACL: the runtime reads questions and statuses)"
                );
            }
            Ok(WireEvent::Disconnected) | Ok(WireEvent::Subscribed) | Ok(WireEvent::Other) => {}
        }
    }

    /// Hands retained state, then queued messages, to the client while its channel has room.
    fn pump(&mut self) {
        if !self.connected {
            return;
        }
        while self.handed.len() < HANDED_LIMIT {
            let next_state = {
                let mut r = lock(&self.shared.retained);
                match r.dirty.pop_first() {
                    None => None,
                    Some(topic) => {
                        let value = r.values.get(&topic).cloned().flatten();
                        if value.is_none() {
                            r.values.remove(&topic);
                        }
                        Some((topic, value))
                    }
                }
            };
            if let Some((topic, value)) = next_state {
                let payload = value.unwrap_or_default();
                if self
                    .client
                    .try_publish(&topic, true, true, payload, None)
                    .is_ok()
                {
                    self.handed.push_back(None);
                } else {
                    lock(&self.shared.retained).dirty.insert(topic);
                    return;
                }
                continue;
            }
            let mut outbox = lock(&self.shared.outbox);
            let Some((id, m)) = outbox.next_to_send() else {
                return;
            };
            let ok = self
                .client
                .try_publish(
                    &m.topic,
                    true,
                    m.retain,
                    m.payload.clone(),
                    m.correlation.as_deref(),
                )
                .is_ok();
            if ok {
                self.handed.push_back(Some(id));
            } else {
                outbox.unsend(id);
                return;
            }
        }
    }

    /// A message on `<prefix>/+/query`: validate, then hand it on or reply with an error.
    fn question(&mut self, m: Incoming) {
        let shared = self.shared.clone();
        let topics = &shared.topics;
        let counters = &shared.counters;
        let Some(camera) = topics.query_camera(&m.topic) else {
            return;
        };
        if self.retained_questions.is_echo(&m.topic, &m.payload) {
            return;
        }
        if m.retain {
            counters
                .queries_retained_ignored
                .fetch_add(1, Ordering::Relaxed);
            self.refuse_retained(&m, camera);
            return;
        }
        let correlation = m.correlation.as_ref().map(|c| c.to_vec());
        let response_topic = match &m.response_topic {
            Some(t) if topics.response_topic_allowed(t) => Some(Ok(t.clone())),
            Some(t) => Some(Err(t.clone())),
            None => None,
        };
        let result = match m.oversized {
            // Cut by the size guard: too large whatever it says.
            Some(len) => {
                counters.queries_oversized.fetch_add(1, Ordering::Relaxed);
                Err(refuse_cut(&m.payload, len, &shared.limits))
            }
            None => {
                let cameras = lock(&shared.cameras);
                validate(
                    camera,
                    &m.payload,
                    self.clock.now(),
                    &shared.limits,
                    &cameras,
                )
            }
        };
        let reply_for = |id: &str| ReplyTo {
            id: id.to_string(),
            camera: camera.to_string(),
            topic: match &response_topic {
                Some(Ok(t)) => t.clone(),
                _ => topics.answer(camera, id),
            },
            correlation: correlation.clone(),
        };
        let publisher = super::Publisher {
            shared: shared.clone(),
        };
        match (result, &response_topic) {
            (result, Some(Err(bad))) => {
                counters.queries_rejected.fetch_add(1, Ordering::Relaxed);
                let error = QueryError::new(
                    ErrorCode::BadResponseTopic,
                    format!(
                        "replies may not be published on `{}` (the runtime's own topics are \
                         reserved; use a topic outside `{}/` or an answer topic)",
                        bad.chars().take(128).collect::<String>(),
                        topics.prefix()
                    ),
                );
                match result {
                    Ok((id, _)) => {
                        publisher.answer_error(&reply_for(&id), error);
                    }
                    Err(Rejection { id: Some(id), .. }) => {
                        publisher.answer_error(&reply_for(&id), error);
                    }
                    Err(r) => self.notice(&m.topic, camera, r.raw_id, error),
                }
            }
            (Ok((id, query)), _) => {
                let reply = reply_for(&id);
                let request = QueryRequest { id, query, reply };
                match self.queries.try_send(request) {
                    Ok(()) => {
                        counters.queries_accepted.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(mpsc::error::TrySendError::Full(r)) => {
                        counters.queries_busy.fetch_add(1, Ordering::Relaxed);
                        publisher.answer_error(
                            &r.reply,
                            QueryError::new(
                                ErrorCode::Busy,
                                format!(
                                    "{} questions are already waiting (mqtt.query_queue); ask again later",
                                    self.queries.max_capacity()
                                ),
                            ),
                        );
                    }
                    Err(mpsc::error::TrySendError::Closed(r)) => {
                        counters.queries_accepted.fetch_add(1, Ordering::Relaxed);
                        publisher.answer_error(&r.reply, QueryError::no_model());
                    }
                }
            }
            (Err(rejection), _) => {
                counters.queries_rejected.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(topic = %log_safe(&m.topic, 256), code = %rejection.error.code, "Question refused");
                match (rejection.id, &response_topic) {
                    (Some(id), _) => {
                        publisher.answer_error(&reply_for(&id), rejection.error);
                    }
                    // An MQTT 5 requester is waiting on its response topic: answer there even
                    // without an id (the correlation data identifies the request).
                    (None, Some(Ok(_))) => {
                        let reply = reply_for("");
                        let body = ErrorReply {
                            id: String::new(),
                            error: rejection.error,
                        };
                        publisher.push(
                            reply.topic,
                            serde_json::to_vec(&body).unwrap_or_default(),
                            Class::Reliable,
                            reply.correlation,
                        );
                    }
                    (None, _) => self.notice(&m.topic, camera, rejection.raw_id, rejection.error),
                }
            }
        }
    }

    /// A retained status on `<prefix>/+/status`, delivered when the runtime subscribes: one
    /// that an earlier run of this node published for a camera this one does not have is
    /// stale, and everything retained about that camera is cleared (status, activity, snapshot,
    /// Home Assistant entities). Other nodes' statuses (a shared prefix) and live ones (this
    /// run's own, echoed) are left alone.
    fn status(&mut self, m: Incoming) {
        if !m.retain || m.payload.is_empty() {
            return;
        }
        let Some(camera) = self.shared.topics.status_camera(&m.topic) else {
            return;
        };
        if lock(&self.shared.cameras).window(camera).is_some() {
            return;
        }
        let Ok(status) = serde_json::from_slice::<serde_json::Value>(&m.payload) else {
            return;
        };
        let ours = status["node"].as_str() == Some(self.shared.node.as_str());
        let this_run = status["instance"].as_str() == Some(self.shared.instance.id.as_str());
        if !ours || this_run {
            return;
        }
        tracing::info!(
            camera = %log_safe(camera, 64),
            "Cleared the retained state of a camera a previous run published and this configuration no longer has"
        );
        let publisher = super::Publisher {
            shared: self.shared.clone(),
        };
        publisher.forget(camera);
    }

    /// A stored question is stale, and would be answered again after every reconnection: its
    /// asker gets `retained` once (when an id can be read), and its retained copy is cleared
    /// (an empty retained message on its topic), so it cannot come back.
    fn refuse_retained(&mut self, m: &Incoming, camera: &str) {
        let shared = self.shared.clone();
        let publisher = super::Publisher {
            shared: shared.clone(),
        };
        if self.retained_questions.clearing(&m.topic) {
            publisher.push_message(Message {
                topic: m.topic.clone(),
                payload: Vec::new(),
                retain: true,
                class: Class::Reliable,
                correlation: None,
            });
        }
        if !self.retained_questions.first_time(&m.topic, &m.payload) {
            return;
        }
        tracing::info!(topic = %log_safe(&m.topic, 256), "Retained question refused and cleared");
        let id = match m.oversized {
            Some(len) => refuse_cut(&m.payload, len, &shared.limits).id,
            None => {
                let cameras = lock(&shared.cameras);
                match validate(
                    camera,
                    &m.payload,
                    self.clock.now(),
                    &shared.limits,
                    &cameras,
                ) {
                    Ok((id, _)) => Some(id),
                    Err(r) => r.id,
                }
            }
        };
        let error = QueryError::new(
            ErrorCode::Retained,
            "the question was published retained: it is not answered (the broker would deliver \
             it again after every reconnection) and its retained copy is cleared; publish it \
             without the retain flag",
        );
        match id {
            Some(id) => {
                let reply = ReplyTo {
                    topic: shared.topics.answer(camera, &id),
                    id,
                    camera: camera.to_string(),
                    correlation: m.correlation.as_ref().map(|c| c.to_vec()),
                };
                publisher.answer_error(&reply, error);
            }
            None => self.notice(&m.topic, camera, None, error),
        }
    }

    fn notice(&self, topic: &str, camera: &str, raw_id: Option<String>, error: QueryError) {
        let notice = ErrorNotice {
            topic: topic.chars().take(256).collect(),
            camera: Some(camera.chars().take(64).collect()),
            id: raw_id,
            error,
            ts: unix_now(),
        };
        let publisher = super::Publisher {
            shared: self.shared.clone(),
        };
        publisher.push(
            self.shared.topics.errors(),
            serde_json::to_vec(&notice).unwrap_or_default(),
            Class::Reliable,
            None,
        );
    }
}
