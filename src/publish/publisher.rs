//! The typed publishing API the stages call. Every method serialises, pushes into the outbox and
//! returns: nothing here waits on the network (a `std` mutex is held for the push only).

use super::outbox::{Class, Message, Outbox, OutboxStats, Pushed};
use super::payload::{Chunk, ErrorReply, Instance, StatsMessage, StatusMessage, unix_now};
use super::topics::Topics;
use crate::narrate::{ChangeEvent, Narration};
use crate::query::{Answer, CameraDirectory, Deltas, QueryError, QueryLimits, ValidQuery};
use crate::supervisor::CameraReport;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Where the answer to one query goes: its answer topic (or MQTT 5 response topic) and the
/// correlation data to echo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyTo {
    /// The query's id (empty only for error replies to a query without a usable id).
    pub id: String,
    /// The camera asked about.
    pub camera: String,
    /// Topic the replies are published on.
    pub topic: String,
    /// MQTT 5 correlation data from the query, echoed on every reply.
    pub correlation: Option<Vec<u8>>,
}

/// A valid question, handed to the query stage.
#[derive(Debug, Clone)]
pub struct QueryRequest {
    /// The query's id (its answer topic).
    pub id: String,
    /// What was asked, checked (it carries when it arrived).
    pub query: ValidQuery,
    /// Where to answer.
    pub reply: ReplyTo,
}

/// Counters of the MQTT side, for status lines and metrics.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PublishStats {
    /// Connected to the broker now.
    pub connected: bool,
    /// Successful connections (CONNACKs) since start.
    pub connects: u64,
    /// Connection attempts or connections that failed.
    pub connection_errors: u64,
    /// The last connection error.
    pub last_error: Option<String>,
    /// Outbox bound.
    pub outbox_capacity: u64,
    /// Outbox counters.
    pub outbox: OutboxStats,
    /// Valid questions handed to the query stage.
    pub queries_accepted: u64,
    /// Questions refused by validation.
    pub queries_rejected: u64,
    /// Valid questions refused because the query queue was full (`busy`).
    pub queries_busy: u64,
    /// Retained messages on query topics, refused and cleared (a stored question is stale).
    pub queries_retained_ignored: u64,
    /// Questions over the MQTT packet limit, cut by the size guard and answered `too_large`.
    pub queries_oversized: u64,
    /// Publishes an MQTT 5 broker acknowledged with a failure reason (e.g. not authorized).
    pub refused_by_broker: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub connected: AtomicBool,
    pub connects: AtomicU64,
    pub connection_errors: AtomicU64,
    pub queries_accepted: AtomicU64,
    pub queries_rejected: AtomicU64,
    pub queries_busy: AtomicU64,
    pub queries_retained_ignored: AtomicU64,
    /// Questions over the MQTT packet limit, cut by the size guard.
    pub queries_oversized: AtomicU64,
    pub refused_by_broker: AtomicU64,
}

/// Retained per-topic state (availability, camera status): the latest value wins and is sent
/// again after every reconnect, outside the bounded outbox.
#[derive(Debug, Default)]
pub(crate) struct RetainedState {
    /// Topic → payload; `None`: clear the retained message (empty payload), then forget it.
    pub values: BTreeMap<String, Option<Vec<u8>>>,
    /// Topics to (re)send.
    pub dirty: BTreeSet<String>,
}

pub(crate) struct Shared {
    pub topics: Topics,
    pub outbox: Mutex<Outbox>,
    pub retained: Mutex<RetainedState>,
    pub wake: Notify,
    pub cameras: Mutex<CameraDirectory>,
    pub limits: QueryLimits,
    pub counters: Counters,
    pub last_error: Mutex<Option<String>>,
    pub instance: Instance,
    /// `mqtt.chunk_interval_ms`.
    pub chunk_interval: Duration,
    /// This runtime's client id, named in its statuses.
    pub node: String,
    /// Home Assistant's discovery prefix, when discovery is on.
    pub discovery: Mutex<Option<String>>,
    /// Each camera's last published status, without its time (to publish only changes).
    pub last_status: Mutex<BTreeMap<String, Vec<u8>>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these cannot leave it inconsistent in a way that matters more
    // than stopping publishing altogether.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The handle the stages publish through; cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("prefix", &self.shared.topics.prefix())
            .finish_non_exhaustive()
    }
}

impl Publisher {
    pub(crate) fn new(
        topics: Topics,
        outbox: Outbox,
        limits: QueryLimits,
        cameras: CameraDirectory,
        chunk_interval: Duration,
        node: String,
    ) -> Self {
        Publisher {
            shared: Arc::new(Shared {
                topics,
                outbox: Mutex::new(outbox),
                retained: Mutex::new(RetainedState::default()),
                wake: Notify::new(),
                cameras: Mutex::new(cameras),
                limits,
                counters: Counters::default(),
                last_error: Mutex::new(None),
                instance: Instance::new(),
                chunk_interval,
                node,
                discovery: Mutex::new(None),
                last_status: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// The topic layout.
    pub fn topics(&self) -> &Topics {
        &self.shared.topics
    }

    /// A finished narration on `<prefix>/<camera>/narration` (QoS 1, kept until acknowledged).
    pub fn narration(&self, narration: &Narration) -> Pushed {
        let topic = self.shared.topics.narration(&narration.camera);
        self.push(topic, json(narration), Class::Reliable, None)
    }

    /// A narration chunk on `<prefix>/<camera>/narration/stream` (QoS 1 while connected; not
    /// queued during an outage).
    pub fn narration_chunk(&self, camera: &str, chunk: &Chunk) -> Pushed {
        let topic = self.shared.topics.narration_stream(camera);
        self.push(topic, json(chunk), Class::Stream, None)
    }

    /// An answer chunk on the query's reply topic.
    pub fn answer_chunk(&self, reply: &ReplyTo, chunk: &Chunk) -> Pushed {
        self.push(
            reply.topic.clone(),
            json(chunk),
            Class::Stream,
            reply.correlation.clone(),
        )
    }

    /// The final answer on the query's reply topic (QoS 1, kept until acknowledged).
    pub fn answer_final(&self, reply: &ReplyTo, answer: &Answer) -> Pushed {
        self.push(
            reply.topic.clone(),
            json(answer),
            Class::Reliable,
            reply.correlation.clone(),
        )
    }

    /// An error reply `{id, error: {code, message}}` on the query's reply topic.
    pub fn answer_error(&self, reply: &ReplyTo, error: QueryError) -> Pushed {
        let body = ErrorReply {
            id: reply.id.clone(),
            error,
        };
        self.push(
            reply.topic.clone(),
            json(&body),
            Class::Reliable,
            reply.correlation.clone(),
        )
    }

    /// A change event on `<prefix>/<camera>/events` (QoS 1).
    pub fn event(&self, event: &ChangeEvent) -> Pushed {
        let topic = self.shared.topics.events(&event.camera);
        self.push(topic, json(event), Class::Reliable, None)
    }

    /// A camera's report: its status, retained, when it differs from the last one published
    /// (sent again after a reconnect), and its figures on the stats topic (not retained).
    pub fn status(&self, report: &CameraReport) {
        let (node, instance) = (&self.shared.node, &self.shared.instance);
        let now = unix_now();
        let key = json(&StatusMessage::of(report, node, instance, 0.0));
        let changed = lock(&self.shared.last_status).get(&report.camera) != Some(&key);
        if changed {
            let body = json(&StatusMessage::of(report, node, instance, now));
            self.set_retained(self.shared.topics.status(&report.camera), Some(body));
            lock(&self.shared.last_status).insert(report.camera.clone(), key);
        }
        self.push(
            self.shared.topics.stats(&report.camera),
            json(&StatsMessage::of(report, node, instance, now)),
            Class::Stream,
            None,
        );
    }

    /// Clears the retained status, activity and snapshot of a camera that no longer exists.
    pub fn clear_status(&self, camera: &str) {
        lock(&self.shared.last_status).remove(camera);
        self.set_retained(self.shared.topics.status(camera), None);
        self.set_retained(self.shared.topics.activity(camera), None);
        self.set_retained(self.shared.topics.snapshot(camera), None);
    }

    /// Whether a change event is in progress on `camera`: `ON` / `OFF`, retained.
    pub fn activity(&self, camera: &str, active: bool) {
        let value = if active { "ON" } else { "OFF" };
        self.set_retained(
            self.shared.topics.activity(camera),
            Some(value.as_bytes().to_vec()),
        );
    }

    /// Turns Home Assistant discovery on under `discovery_prefix` (at start).
    pub fn enable_discovery(&self, discovery_prefix: &str) {
        *lock(&self.shared.discovery) = Some(discovery_prefix.to_string());
    }

    /// Announces `camera` to Home Assistant, when discovery is on (retained discovery configs,
    /// sent again after every reconnection).
    pub fn announce(&self, camera: &str) {
        for (topic, body) in self.discovery_configs(camera) {
            self.set_retained(topic, Some(json(&body)));
        }
    }

    /// `camera`'s Home Assistant discovery configs (none when discovery is off).
    fn discovery_configs(&self, camera: &str) -> Vec<(String, serde_json::Value)> {
        let prefix = lock(&self.shared.discovery).clone();
        prefix.map_or_else(Vec::new, |p| {
            super::discovery::camera_configs(&p, &self.shared.node, &self.shared.topics, camera)
        })
    }

    /// Forgets a camera that no longer exists: its retained status, activity and snapshot are
    /// cleared, and its Home Assistant entities removed when discovery is on.
    pub fn forget(&self, camera: &str) {
        self.clear_status(camera);
        for (topic, _) in self.discovery_configs(camera) {
            self.set_retained(topic, None);
        }
    }

    /// A snapshot (JPEG) on `<prefix>/<camera>/snapshot/<id>` (QoS 1 while connected, not queued
    /// during an outage, like chunks), and as the camera's retained `<prefix>/<camera>/snapshot`
    /// (the newest one is sent again after a reconnect).
    pub fn snapshot(&self, camera: &str, id: &str, jpeg: &[u8]) -> Pushed {
        self.set_retained(self.shared.topics.snapshot(camera), Some(jpeg.to_vec()));
        self.push(
            self.shared.topics.snapshot_of(camera, id),
            jpeg.to_vec(),
            Class::Stream,
            None,
        )
    }

    /// Counts a valid question refused as `busy` by the question stage.
    pub fn count_busy(&self) {
        self.shared
            .counters
            .queries_busy
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Replaces the cameras questions may name (after a reload).
    pub fn set_cameras(&self, cameras: CameraDirectory) {
        *lock(&self.shared.cameras) = cameras;
    }

    /// A stream of chunks for one answer, numbering them; `finish` sends the last chunk and the
    /// final message.
    pub fn answer_stream(&self, reply: ReplyTo) -> AnswerStream {
        AnswerStream {
            chunker: Chunker::new(self.shared.chunk_interval),
            publisher: self.clone(),
            reply,
        }
    }

    /// A stream of chunks for one narration.
    pub fn narration_stream(
        &self,
        camera: impl Into<String>,
        id: impl Into<String>,
    ) -> NarrationStream {
        NarrationStream {
            chunker: Chunker::new(self.shared.chunk_interval),
            publisher: self.clone(),
            camera: camera.into(),
            id: id.into(),
        }
    }

    /// This run of the runtime, as the status messages name it.
    pub fn instance(&self) -> &Instance {
        &self.shared.instance
    }

    /// Whether the broker connection is up.
    pub fn is_connected(&self) -> bool {
        self.shared.counters.connected.load(Ordering::Relaxed)
    }

    /// Counters.
    pub fn stats(&self) -> PublishStats {
        let c = &self.shared.counters;
        let outbox = lock(&self.shared.outbox);
        PublishStats {
            connected: c.connected.load(Ordering::Relaxed),
            connects: c.connects.load(Ordering::Relaxed),
            connection_errors: c.connection_errors.load(Ordering::Relaxed),
            last_error: lock(&self.shared.last_error).clone(),
            outbox_capacity: outbox.capacity() as u64,
            outbox: outbox.stats(),
            queries_accepted: c.queries_accepted.load(Ordering::Relaxed),
            queries_rejected: c.queries_rejected.load(Ordering::Relaxed),
            queries_busy: c.queries_busy.load(Ordering::Relaxed),
            queries_retained_ignored: c.queries_retained_ignored.load(Ordering::Relaxed),
            queries_oversized: c.queries_oversized.load(Ordering::Relaxed),
            refused_by_broker: c.refused_by_broker.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn push(
        &self,
        topic: String,
        payload: Vec<u8>,
        class: Class,
        correlation: Option<Vec<u8>>,
    ) -> Pushed {
        self.push_message(Message {
            topic,
            payload,
            retain: false,
            class,
            correlation,
        })
    }

    pub(crate) fn push_message(&self, message: Message) -> Pushed {
        let topic_for_log = (message.class == Class::Reliable).then(|| message.topic.clone());
        let outcome = lock(&self.shared.outbox).push(message);
        match outcome {
            Pushed::Queued | Pushed::Skipped => {}
            Pushed::Oversized => {
                tracing::error!(
                    topic = topic_for_log.as_deref().unwrap_or(""),
                    "MQTT message larger than 1 MiB refused"
                );
            }
            Pushed::QueuedDroppedOldest | Pushed::DroppedNewest => {
                tracing::debug!(
                    topic = topic_for_log.as_deref().unwrap_or(""),
                    outcome = ?outcome,
                    "MQTT outbox full; a message was dropped"
                );
            }
        }
        self.shared.wake.notify_one();
        outcome
    }

    fn set_retained(&self, topic: String, payload: Option<Vec<u8>>) {
        {
            let mut r = lock(&self.shared.retained);
            r.values.insert(topic.clone(), payload);
            r.dirty.insert(topic);
        }
        self.shared.wake.notify_one();
    }
}

/// Groups a token stream into chunks: the first piece is sent at once, then whatever accumulated
/// once `interval` has passed since the last chunk (checked as each piece arrives), and the rest
/// with the closing chunk. A piece of text so waits at most `interval` plus one token's
/// generation time.
#[derive(Debug)]
struct Chunker {
    interval: Duration,
    seq: u64,
    pending: String,
    last_sent: Option<Instant>,
}

impl Chunker {
    fn new(interval: Duration) -> Chunker {
        Chunker {
            interval,
            seq: 0,
            pending: String::new(),
            last_sent: None,
        }
    }

    /// Adds `delta`; returns the chunk to send now, if one is due.
    fn push(&mut self, id: &str, delta: &str) -> Option<Chunk> {
        self.pending.push_str(delta);
        let due = self.last_sent.is_none_or(|t| t.elapsed() >= self.interval);
        if !due || self.pending.is_empty() {
            return None;
        }
        self.last_sent = Some(Instant::now());
        Some(self.take(id, false))
    }

    /// The closing chunk, with what has not been sent yet.
    fn finish(&mut self, id: &str) -> Chunk {
        self.take(id, true)
    }

    fn take(&mut self, id: &str, done: bool) -> Chunk {
        let chunk = Chunk {
            id: id.to_string(),
            seq: self.seq,
            delta: std::mem::take(&mut self.pending),
            done,
        };
        self.seq += 1;
        chunk
    }
}

/// Chunks of one answer, numbered from 0.
#[derive(Debug)]
pub struct AnswerStream {
    publisher: Publisher,
    reply: ReplyTo,
    chunker: Chunker,
}

impl AnswerStream {
    /// Where the replies go.
    pub fn reply(&self) -> &ReplyTo {
        &self.reply
    }

    /// Adds the next piece of text; it is published now or with a later chunk
    /// (`mqtt.chunk_interval_ms`). `None`: held for a later chunk.
    pub fn chunk(&mut self, delta: &str) -> Option<Pushed> {
        let chunk = self.chunker.push(&self.reply.id, delta)?;
        Some(self.publisher.answer_chunk(&self.reply, &chunk))
    }

    /// Publishes the closing chunk (`done: true`, with the text not sent yet, possibly empty)
    /// and the final answer.
    pub fn finish(mut self, answer: &Answer) -> Pushed {
        let chunk = self.chunker.finish(&self.reply.id);
        self.publisher.answer_chunk(&self.reply, &chunk);
        self.publisher.answer_final(&self.reply, answer)
    }

    /// Ends the answer with an error reply instead (e.g. generation failed midway).
    pub fn fail(self, error: QueryError) -> Pushed {
        self.publisher.answer_error(&self.reply, error)
    }
}

impl Deltas for AnswerStream {
    fn delta(&mut self, text: &str) {
        self.chunk(text);
    }
}

/// Chunks of one narration, numbered from 0.
#[derive(Debug)]
pub struct NarrationStream {
    publisher: Publisher,
    camera: String,
    id: String,
    chunker: Chunker,
}

impl NarrationStream {
    /// Adds the next piece of text; it is published now or with a later chunk
    /// (`mqtt.chunk_interval_ms`). `None`: held for a later chunk.
    pub fn chunk(&mut self, delta: &str) -> Option<Pushed> {
        let chunk = self.chunker.push(&self.id, delta)?;
        Some(self.publisher.narration_chunk(&self.camera, &chunk))
    }

    /// Publishes the closing chunk (with the text not sent yet) and the narration itself.
    pub fn finish(mut self, narration: &Narration) -> Pushed {
        let chunk = self.chunker.finish(&self.id);
        self.publisher.narration_chunk(&self.camera, &chunk);
        self.publisher.narration(narration)
    }
}

fn json<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    // Our payload types are plain structs of strings and numbers: serialisation cannot fail.
    serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deltas(c: &[Chunk]) -> Vec<(&str, bool)> {
        c.iter().map(|c| (c.delta.as_str(), c.done)).collect()
    }

    #[test]
    fn the_first_piece_goes_at_once_and_the_rest_waits_for_the_interval() {
        let mut c = Chunker::new(Duration::from_secs(3600));
        let mut sent: Vec<Chunk> = ["A", " red", " ball"]
            .iter()
            .filter_map(|d| c.push("n", d))
            .collect();
        sent.push(c.finish("n"));
        assert_eq!(deltas(&sent), [("A", false), (" red ball", true)]);
        assert_eq!(sent.iter().map(|c| c.seq).collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn a_zero_interval_sends_every_piece_and_an_empty_closing_chunk() {
        let mut c = Chunker::new(Duration::ZERO);
        // An empty first piece is not a chunk: the first text still goes at once.
        let mut sent: Vec<Chunk> = ["", "A", " ball"]
            .iter()
            .filter_map(|d| c.push("n", d))
            .collect();
        sent.push(c.finish("n"));
        assert_eq!(deltas(&sent), [("A", false), (" ball", false), ("", true)]);
    }

    #[test]
    fn pieces_after_the_interval_go_together() {
        let mut c = Chunker::new(Duration::from_millis(30));
        assert!(c.push("n", "A").is_some());
        assert!(c.push("n", " red").is_none());
        std::thread::sleep(Duration::from_millis(40));
        let next = c.push("n", " ball").expect("due after the interval");
        assert_eq!(next.delta, " red ball");
        assert_eq!(c.finish("n").delta, "");
    }
}
