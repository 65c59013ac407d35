//! Acknowledgements sent upstream in the order the broker sent its publishes.
//!
//! The gate drops the answers a client did not ask for (`filters.rs`) and acknowledges them to the
//! broker itself. rumqttd 0.20 accepts acknowledgements (PUBACK, PUBREC) of its QoS 1/2 publishes
//! only in the order it sent them: an ack that is not for the oldest publish in flight closes the
//! connection ("Unsolicited/ooo ack", `router/routing.rs`). The gate's own ack for a dropped
//! answer could overtake the client's ack for an earlier answer it passed on, and the client was
//! disconnected, losing what was published while it reconnected (seen as a lost reply in
//! tests/mqtt_limits.rs, about 1 run in 12 under load). So every ack goes through this queue: the
//! gate's wait for the client's acks of earlier publishes, and a client's ack waits for nothing but
//! those before it.
//!
//! Bound: one entry per publish the broker has in flight to this connection, which the broker
//! bounds (`max_inflight_count`, broker/mod.rs); a client that never acks stops the broker from
//! sending more, not this queue from growing.

use bytes::BytesMut;
use std::collections::VecDeque;

#[derive(Debug)]
enum Entry {
    /// Dropped by the gate: acked by the gate when it reaches the front.
    Dropped(u16),
    /// Passed on to the client: its ack, once the client has sent it.
    Passed { pkid: u16, ack: Option<BytesMut> },
}

/// The publishes in flight from the broker to one client, in the broker's order.
#[derive(Debug, Default)]
pub(super) struct AckOrder {
    queue: VecDeque<Entry>,
}

impl AckOrder {
    /// A QoS 1/2 publish with `pkid` was passed on to the client.
    pub(super) fn passed(&mut self, pkid: u16) {
        self.queue.push_back(Entry::Passed { pkid, ack: None });
    }

    /// A QoS 1 publish with `pkid` was dropped: the acks that can now go upstream, in order.
    pub(super) fn dropped(&mut self, pkid: u16) -> Vec<BytesMut> {
        self.queue.push_back(Entry::Dropped(pkid));
        self.ready()
    }

    /// The client acked `pkid` with `frame` (a PUBACK or PUBREC): the acks that can now go
    /// upstream, in order. An ack for nothing the gate passed on goes on at once (the broker
    /// judges it).
    pub(super) fn client_ack(&mut self, pkid: u16, frame: BytesMut) -> Vec<BytesMut> {
        let waiting = self.queue.iter_mut().find_map(|e| match e {
            Entry::Passed { pkid: p, ack } if *p == pkid && ack.is_none() => Some(ack),
            _ => None,
        });
        match waiting {
            Some(slot) => {
                *slot = Some(frame);
                self.ready()
            }
            None => vec![frame],
        }
    }

    /// How many publishes are in flight (for tests and bounds).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.queue.len()
    }

    /// Pops the front while it can be acked.
    fn ready(&mut self) -> Vec<BytesMut> {
        let mut out = Vec::new();
        loop {
            match self.queue.front_mut() {
                Some(Entry::Dropped(pkid)) => {
                    out.push(puback(*pkid));
                    self.queue.pop_front();
                }
                Some(Entry::Passed { ack, .. }) if ack.is_some() => {
                    out.extend(ack.take());
                    self.queue.pop_front();
                }
                _ => return out,
            }
        }
    }
}

/// A PUBACK for `pkid` (MQTT 3.1.1).
fn puback(pkid: u16) -> BytesMut {
    BytesMut::from(&[0x40, 0x02, (pkid >> 8) as u8, pkid as u8][..])
}

/// The packet id of a PUBACK or PUBREC frame from the client (MQTT 3.1.1: two bytes after the
/// fixed header).
pub(super) fn ack_pkid(frame: &[u8]) -> Option<u16> {
    match frame.first()? >> 4 {
        4 | 5 => Some(u16::from_be_bytes([*frame.get(2)?, *frame.get(3)?])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkids(frames: &[BytesMut]) -> Vec<(u8, u16)> {
        frames
            .iter()
            .map(|f| (f[0] >> 4, ack_pkid(f).unwrap()))
            .collect()
    }

    #[test]
    fn the_gates_ack_waits_for_the_clients_ack_of_an_earlier_publish() {
        let mut q = AckOrder::default();
        q.passed(1);
        assert!(q.dropped(2).is_empty(), "2 must not overtake 1");
        q.passed(3);
        assert!(q.dropped(4).is_empty());
        assert_eq!(pkids(&q.client_ack(1, puback(1))), [(4, 1), (4, 2)]);
        assert_eq!(pkids(&q.client_ack(3, puback(3))), [(4, 3), (4, 4)]);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn dropped_publishes_at_the_front_are_acked_at_once() {
        let mut q = AckOrder::default();
        assert_eq!(pkids(&q.dropped(7)), [(4, 7)]);
        q.passed(8);
        assert_eq!(pkids(&q.dropped(9)), []);
        assert_eq!(pkids(&q.client_ack(8, puback(8))), [(4, 8), (4, 9)]);
    }

    #[test]
    fn a_client_ack_out_of_order_or_unknown_is_not_held_for_ever() {
        let mut q = AckOrder::default();
        q.passed(1);
        q.passed(2);
        // The client acks 2 first: held until 1 is acked, so the broker sees 1, 2.
        assert!(q.client_ack(2, puback(2)).is_empty());
        assert_eq!(pkids(&q.client_ack(1, puback(1))), [(4, 1), (4, 2)]);
        // An ack for nothing in flight goes on (the broker decides what it means).
        assert_eq!(pkids(&q.client_ack(42, puback(42))), [(4, 42)]);
        // A PUBREC (QoS 2) completes its entry like a PUBACK.
        q.passed(5);
        let pubrec = BytesMut::from(&[0x50, 0x02, 0, 5][..]);
        assert_eq!(pkids(&q.dropped(6)), []);
        assert_eq!(pkids(&q.client_ack(5, pubrec)), [(5, 5), (4, 6)]);
    }

    #[test]
    fn the_packet_id_is_read_from_acks_only() {
        assert_eq!(ack_pkid(&[0x40, 0x02, 0x01, 0x02]), Some(0x0102));
        assert_eq!(ack_pkid(&[0x50, 0x02, 0x00, 0x09]), Some(9));
        assert_eq!(ack_pkid(&[0x62, 0x02, 0x00, 0x09]), None);
        assert_eq!(ack_pkid(&[0x40, 0x02]), None);
    }
}
