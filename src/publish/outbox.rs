//! The outbox: our own bounded queue of outgoing messages, so that nothing promised is lost while
//! the broker is unreachable.
//!
//! rumqttc keeps unacknowledged QoS 1 publishes in `EventLoop::pending`, but clears them when the
//! broker answers a reconnect with `session_present = false` (rumqttc 0.25 CHANGELOG;
//! docs/ARCHITECTURE.md, "Platform facts"): a broker restart without persistence, or any clean
//! session, silently loses them. So a reliable message stays here until its PUBACK, and
//! everything unacknowledged is sent again, in order, after every CONNACK. That can duplicate a
//! message (QoS 1 allows it); it never loses one within the bound.
//!
//! Plain data, no I/O: the connection task drives it, the hot path only pushes.

use crate::config::WhenFull;
use std::collections::VecDeque;

/// How a message is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Kept until acknowledged and resent after a reconnect (narrations, answers, errors, events).
    Reliable,
    /// Streamed chunks: sent with QoS 1 while connected, but neither queued while the broker is
    /// unreachable nor resent after a reconnect (the final message carries the whole text).
    Stream,
}

/// One outgoing message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Topic.
    pub topic: String,
    /// Payload.
    pub payload: Vec<u8>,
    /// Retained by the broker.
    pub retain: bool,
    /// Delivery class.
    pub class: Class,
    /// MQTT 5 correlation data to echo (replies to a query that carried it).
    pub correlation: Option<Vec<u8>>,
}

impl Message {
    /// Approximate memory held by the message.
    pub fn size(&self) -> usize {
        std::mem::size_of::<Entry>()
            + self.topic.len()
            + self.payload.len()
            + self.correlation.as_ref().map_or(0, Vec::len)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Waiting to be handed to the client.
    Queued,
    /// Handed to the client; not acknowledged yet.
    Sent,
}

#[derive(Debug, Clone)]
struct Entry {
    id: u64,
    message: Message,
    state: State,
}

/// Counters of the outbox, cumulative since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OutboxStats {
    /// Messages accepted.
    pub accepted: u64,
    /// Messages delivered (acknowledged by the broker for QoS 1).
    pub delivered: u64,
    /// Messages lost to a full outbox (by the `when_full` policy).
    pub dropped_full: u64,
    /// Chunks not queued because the broker was unreachable, or not resent after an outage.
    pub stream_skipped: u64,
    /// Messages refused because they are larger than the largest payload published.
    pub dropped_oversized: u64,
    /// Messages sent again after a reconnect.
    pub resent: u64,
    /// Messages waiting now (queued or awaiting acknowledgement).
    pub pending: u64,
    /// Approximate bytes held now.
    pub pending_bytes: u64,
}

/// What happened to a pushed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued.
    Queued,
    /// Queued; the oldest message was dropped to make room.
    QueuedDroppedOldest,
    /// Refused: the outbox is full (`drop_newest`).
    DroppedNewest,
    /// A chunk while disconnected: not queued.
    Skipped,
    /// Refused: larger than [`MAX_PAYLOAD_BYTES`](super::MAX_PAYLOAD_BYTES).
    Oversized,
}

/// The bounded outbox.
#[derive(Debug)]
pub struct Outbox {
    capacity: usize,
    when_full: WhenFull,
    entries: VecDeque<Entry>,
    /// Entries `[0, sent)` are `Sent`, the rest `Queued` (acknowledgements remove from the prefix).
    sent: usize,
    next_id: u64,
    connected: bool,
    bytes: usize,
    stats: OutboxStats,
}

impl Outbox {
    /// An empty outbox of `capacity` messages.
    pub fn new(capacity: usize, when_full: WhenFull) -> Self {
        Outbox {
            capacity: capacity.max(1),
            when_full,
            entries: VecDeque::new(),
            sent: 0,
            next_id: 1,
            connected: false,
            bytes: 0,
            stats: OutboxStats::default(),
        }
    }

    /// Adds a message (the hot path; never waits).
    pub fn push(&mut self, message: Message) -> Pushed {
        if message.payload.len() > super::MAX_PAYLOAD_BYTES {
            self.stats.dropped_oversized += 1;
            return Pushed::Oversized;
        }
        if message.class == Class::Stream && !self.connected {
            self.stats.stream_skipped += 1;
            return Pushed::Skipped;
        }
        let mut outcome = Pushed::Queued;
        if self.entries.len() >= self.capacity {
            match self.when_full {
                WhenFull::DropNewest => {
                    self.stats.dropped_full += 1;
                    return Pushed::DroppedNewest;
                }
                WhenFull::DropOldest => {
                    if let Some(old) = self.entries.pop_front() {
                        self.bytes -= old.message.size();
                        if old.state == State::Sent {
                            // Possibly on its way already; no longer guaranteed.
                            self.sent -= 1;
                        }
                        self.stats.dropped_full += 1;
                        outcome = Pushed::QueuedDroppedOldest;
                    }
                }
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.bytes += message.size();
        self.entries.push_back(Entry {
            id,
            message,
            state: State::Queued,
        });
        self.stats.accepted += 1;
        outcome
    }

    /// The next queued message to hand to the client, marked sent; `None` when nothing waits.
    pub fn next_to_send(&mut self) -> Option<(u64, &Message)> {
        let entry = self.entries.get_mut(self.sent)?;
        entry.state = State::Sent;
        self.sent += 1;
        Some((entry.id, &entry.message))
    }

    /// The client could not take the message just returned by `next_to_send` (its channel is
    /// full): it is queued again, first.
    pub fn unsend(&mut self, id: u64) {
        if self.sent > 0 && self.entries[self.sent - 1].id == id {
            self.sent -= 1;
            self.entries[self.sent].state = State::Queued;
        }
    }

    /// The broker acknowledged message `id` (or a QoS 0 message was written).
    pub fn delivered(&mut self, id: u64) {
        if let Some(pos) = self.entries.iter().take(self.sent).position(|e| e.id == id) {
            if let Some(e) = self.entries.remove(pos) {
                self.bytes -= e.message.size();
            }
            self.sent -= 1;
            self.stats.delivered += 1;
        }
    }

    /// The connection is up: queued messages may be sent.
    pub fn connected(&mut self) {
        self.connected = true;
    }

    /// The connection is lost: everything sent but unacknowledged is queued again (in order, in
    /// front of what was never sent); chunks are dropped instead.
    pub fn disconnected(&mut self) {
        self.connected = false;
        for e in self.entries.iter_mut().take(self.sent) {
            e.state = State::Queued;
            if e.message.class == Class::Reliable {
                self.stats.resent += 1;
            }
        }
        self.sent = 0;
        let before = self.entries.len();
        let mut freed = 0;
        self.entries.retain(|e| {
            let keep = e.message.class == Class::Reliable;
            if !keep {
                freed += e.message.size();
            }
            keep
        });
        self.bytes -= freed;
        self.stats.stream_skipped += (before - self.entries.len()) as u64;
    }

    /// Whether the connection is up.
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// Whether nothing waits (queued or unacknowledged).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Messages waiting (queued or unacknowledged).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The bound.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Counters.
    pub fn stats(&self) -> OutboxStats {
        OutboxStats {
            pending: self.entries.len() as u64,
            pending_bytes: self.bytes as u64,
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(n: u32, class: Class) -> Message {
        Message {
            topic: "t".into(),
            payload: n.to_string().into_bytes(),
            retain: false,
            class,
            correlation: None,
        }
    }

    fn drain(o: &mut Outbox) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        while let Some((id, m)) = o.next_to_send() {
            out.push((id, String::from_utf8(m.payload.clone()).unwrap()));
        }
        out
    }

    #[test]
    fn unacknowledged_messages_are_resent_in_order_after_a_reconnect() {
        let mut o = Outbox::new(10, WhenFull::DropOldest);
        o.connected();
        for n in 0..4 {
            o.push(msg(n, Class::Reliable));
        }
        let sent = drain(&mut o);
        assert_eq!(sent.len(), 4);
        o.delivered(sent[1].0);
        o.disconnected();
        o.push(msg(4, Class::Reliable));
        o.connected();
        let again: Vec<String> = drain(&mut o).into_iter().map(|(_, p)| p).collect();
        assert_eq!(again, ["0", "2", "3", "4"]);
        assert_eq!(o.stats().resent, 3);
    }

    #[test]
    fn chunks_are_not_kept_across_an_outage() {
        let mut o = Outbox::new(10, WhenFull::DropOldest);
        assert_eq!(o.push(msg(0, Class::Stream)), Pushed::Skipped);
        o.connected();
        o.push(msg(1, Class::Stream));
        o.push(msg(2, Class::Reliable));
        o.disconnected();
        assert_eq!(o.len(), 1);
        assert_eq!(o.stats().stream_skipped, 2);
    }

    #[test]
    fn a_full_outbox_follows_its_policy_and_counts_drops() {
        let mut o = Outbox::new(3, WhenFull::DropOldest);
        for n in 0..5 {
            o.push(msg(n, Class::Reliable));
        }
        o.connected();
        let kept: Vec<String> = drain(&mut o).into_iter().map(|(_, p)| p).collect();
        assert_eq!(kept, ["2", "3", "4"]);
        assert_eq!(o.stats().dropped_full, 2);

        let mut o = Outbox::new(3, WhenFull::DropNewest);
        for n in 0..5 {
            o.push(msg(n, Class::Reliable));
        }
        o.connected();
        let kept: Vec<String> = drain(&mut o).into_iter().map(|(_, p)| p).collect();
        assert_eq!(kept, ["0", "1", "2"]);
        assert_eq!(o.stats().dropped_full, 2);
    }

    #[test]
    fn a_message_the_client_refused_is_sent_first_next_time() {
        let mut o = Outbox::new(3, WhenFull::DropOldest);
        o.connected();
        o.push(msg(0, Class::Reliable));
        o.push(msg(1, Class::Reliable));
        let (id, _) = o.next_to_send().unwrap();
        o.delivered(id);
        let (id, _) = o.next_to_send().unwrap();
        o.unsend(id);
        assert_eq!(drain(&mut o)[0].1, "1");
        assert!(o.stats().pending_bytes > 0);
    }
}
