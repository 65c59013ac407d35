//! The size guard between rumqttc's MQTT 3.1.1 client and an external broker.
//!
//! rumqttc fails the whole connection when the broker sends a packet larger than its
//! `max_incoming_packet_size` (its codec returns `PayloadSizeLimitExceeded`), and MQTT 3.1.1
//! has no way to ask a broker not to send one. Mosquitto's default `message_size_limit` is 0 (no
//! limit), so anyone allowed to publish on `<prefix>/<camera>/query` could take the runtime off
//! MQTT with one large message, and, retained, do it again on every reconnect (docs/MQTT.md,
//! "Message sizes"). Raising rumqttc's limit is no fix: it buffers a whole packet before looking
//! at it, so the bound would be MQTT's 256 MiB.
//!
//! So rumqttc connects to this guard over a Unix socket in a private directory (mode 0700), and
//! the guard holds the real connection (TCP, or TLS with the same rustls configuration).
//! Client-to-broker bytes are copied as they are. Broker-to-client packets are framed from
//! their fixed headers and copied as they are, except a PUBLISH larger than the limit: its topic,
//! flags and packet id are kept, the first [`KEPT_PREFIX`] bytes of its payload are kept, the
//! rest is read and discarded without being buffered, and rumqttc receives the same PUBLISH with
//! the payload [`MARKER`] + the original length + the kept prefix. rumqttc acknowledges it as
//! usual (same packet id), the connection task answers it `too_large` (to the asker's answer
//! topic when the kept prefix shows its id) and counts it. Memory per connection: one
//! [`BufReader`] and the kept prefix.

use rustls::pki_types::ServerName;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::task::JoinHandle;

/// First bytes of a payload the guard replaced (0xFF is never valid UTF-8, so no JSON question
/// starts this way); then the original payload length (8 bytes, big-endian), then its prefix.
pub(crate) const MARKER: &[u8; 8] = b"\xffEVLMBIG";
/// Bytes of an oversized payload kept for its sender's id.
pub(crate) const KEPT_PREFIX: usize = 4096;

/// An oversized payload, as the guard handed it on: its original length and its first bytes.
pub(crate) fn unmark(payload: &[u8]) -> Option<(usize, &[u8])> {
    let rest = payload.strip_prefix(MARKER.as_slice())?;
    let len: [u8; 8] = rest.get(..8)?.try_into().ok()?;
    Some((u64::from_be_bytes(len) as usize, &rest[8..]))
}

/// Where the guard connects.
#[derive(Clone)]
pub(crate) struct Upstream {
    pub host: String,
    pub port: u16,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub connect_timeout: Duration,
}

/// What the guard saw, for the connection task.
#[derive(Debug, Default)]
pub(crate) struct GuardState {
    /// Why the last upstream connection failed (taken by the event loop's error description).
    last_error: Mutex<Option<String>>,
    /// PUBLISH packets over the limit that were cut.
    pub oversized: AtomicU64,
}

impl GuardState {
    /// The upstream failure behind rumqttc's error, if the guard saw one since the last call.
    pub fn take_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    fn set_error(&self, e: String) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }
}

/// A running guard: its socket, removed with its directory on drop.
pub(crate) struct Guard {
    pub socket: PathBuf,
    dir: PathBuf,
    pub state: Arc<GuardState>,
    task: JoinHandle<()>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts the guard (inside a tokio runtime): a private directory under the system's temporary
/// directory with one socket; every connection rumqttc makes to it is relayed to `upstream`.
pub(crate) fn start(upstream: Upstream, limit: usize) -> std::io::Result<Guard> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = std::env::temp_dir().join(format!(
        "edgevlm-mqtt-{}-{:016x}",
        std::process::id(),
        nonce()
    ));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    let socket = dir.join("broker.sock");
    let listener = match UnixListener::bind(&socket) {
        Ok(l) => l,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    let state = Arc::new(GuardState::default());
    let task = tokio::spawn(serve(listener, upstream, limit, state.clone()));
    Ok(Guard {
        socket,
        dir,
        state,
        task,
    })
}

fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish()
}

async fn serve(listener: UnixListener, upstream: Upstream, limit: usize, state: Arc<GuardState>) {
    let mut current: Option<JoinHandle<()>> = None;
    loop {
        let client = match listener.accept().await {
            Ok((c, _)) => c,
            Err(e) => {
                tracing::warn!(error = %e, "MQTT size guard failed to accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // rumqttc reconnects only after its connection failed: a new one replaces the old.
        if let Some(old) = current.take() {
            old.abort();
        }
        let (upstream, state) = (upstream.clone(), state.clone());
        current = Some(tokio::spawn(async move {
            if let Err(e) = relay(client, &upstream, limit, &state).await {
                tracing::debug!(reason = %e, "MQTT size guard closed its connection");
            }
        }));
    }
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

async fn connect(up: &Upstream) -> Result<Box<dyn Stream>, String> {
    let tcp = tokio::time::timeout(
        up.connect_timeout,
        TcpStream::connect((up.host.as_str(), up.port)),
    )
    .await
    .map_err(|_| {
        format!(
            "no TCP connection within {} s",
            up.connect_timeout.as_secs_f64()
        )
    })?
    .map_err(|e| format!("I/O: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let Some(cfg) = &up.tls else {
        return Ok(Box::new(tcp));
    };
    let name = ServerName::try_from(up.host.clone())
        .map_err(|e| format!("TLS: `{}` is not a server name: {e}", up.host))?;
    let tls = tokio::time::timeout(
        up.connect_timeout,
        tokio_rustls::TlsConnector::from(cfg.clone()).connect(name, tcp),
    )
    .await
    .map_err(|_| "no TLS handshake within the connect timeout".to_string())?
    .map_err(|e| format!("TLS: {e}"))?;
    Ok(Box::new(tls))
}

async fn relay(
    client: UnixStream,
    up: &Upstream,
    limit: usize,
    state: &GuardState,
) -> Result<(), String> {
    let upstream = match connect(up).await {
        Ok(s) => s,
        Err(e) => {
            state.set_error(e.clone());
            return Err(e);
        }
    };
    let (mut client_rx, client_tx) = client.into_split();
    let (up_rx, mut up_tx) = tokio::io::split(upstream);
    let to_broker = async {
        let r = tokio::io::copy(&mut client_rx, &mut up_tx).await;
        let _ = up_tx.shutdown().await;
        r.map(|_| ()).map_err(|e| e.to_string())
    };
    let to_client = cut_oversized(BufReader::new(up_rx), client_tx, limit, state);
    tokio::select! {
        r = to_broker => r,
        r = to_client => r,
    }
}

/// Copies MQTT packets from `rx` to `tx`, cutting every PUBLISH longer than `limit` bytes
/// (module documentation).
async fn cut_oversized<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    mut rx: BufReader<R>,
    mut tx: W,
    limit: usize,
    state: &GuardState,
) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    loop {
        let first = match rx.read_u8().await {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.to_string()),
        };
        let mut header = vec![first];
        let mut remaining = 0usize;
        for i in 0..4 {
            let b = rx.read_u8().await.map_err(io)?;
            header.push(b);
            remaining |= usize::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                break;
            }
            if i == 3 {
                return Err("malformed remaining length from the broker".into());
            }
        }
        if first >> 4 != 3 || header.len() + remaining <= limit {
            tx.write_all(&header).await.map_err(io)?;
            let copied = tokio::io::copy_buf(&mut (&mut rx).take(remaining as u64), &mut tx)
                .await
                .map_err(io)?;
            if copied != remaining as u64 {
                return Ok(());
            }
            continue;
        }
        // An oversized PUBLISH: topic, packet id, the payload's first bytes; the rest skipped.
        let topic_len = usize::from(rx.read_u16().await.map_err(io)?);
        let qos = (first >> 1) & 3;
        let id_len = if qos > 0 { 2 } else { 0 };
        let Some(payload_len) = remaining.checked_sub(2 + topic_len + id_len) else {
            return Err("malformed PUBLISH from the broker".into());
        };
        let mut head = vec![0u8; topic_len + id_len];
        rx.read_exact(&mut head).await.map_err(io)?;
        let mut prefix = vec![0u8; payload_len.min(KEPT_PREFIX)];
        rx.read_exact(&mut prefix).await.map_err(io)?;
        let skip = (payload_len - prefix.len()) as u64;
        let skipped = tokio::io::copy_buf(&mut (&mut rx).take(skip), &mut tokio::io::sink())
            .await
            .map_err(io)?;
        if skipped != skip {
            return Ok(());
        }
        state.oversized.fetch_add(1, Ordering::Relaxed);
        let mut payload = Vec::with_capacity(MARKER.len() + 8 + prefix.len());
        payload.extend_from_slice(MARKER);
        payload.extend_from_slice(&(payload_len as u64).to_be_bytes());
        payload.extend_from_slice(&prefix);
        let mut out = vec![first];
        let mut len = 2 + head.len() + payload.len();
        loop {
            let b = (len & 0x7f) as u8;
            len >>= 7;
            out.push(if len > 0 { b | 0x80 } else { b });
            if len == 0 {
                break;
            }
        }
        out.extend_from_slice(&(topic_len as u16).to_be_bytes());
        out.extend_from_slice(&head);
        out.extend_from_slice(&payload);
        tx.write_all(&out).await.map_err(io)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use rumqttc::mqttbytes::v4::Packet;

    fn publish(topic: &str, qos: rumqttc::QoS, retain: bool, payload: Vec<u8>) -> Vec<u8> {
        let mut p = rumqttc::Publish::new(topic, qos, payload);
        p.retain = retain;
        if qos != rumqttc::QoS::AtMostOnce {
            p.pkid = 7;
        }
        let mut out = BytesMut::new();
        Packet::Publish(p).write(&mut out, 1 << 30).unwrap();
        out.to_vec()
    }

    async fn through(input: Vec<u8>, limit: usize) -> (Vec<Packet>, u64) {
        let state = GuardState::default();
        let mut out = Vec::new();
        cut_oversized(
            BufReader::new(std::io::Cursor::new(input)),
            &mut out,
            limit,
            &state,
        )
        .await
        .unwrap();
        let mut buf = BytesMut::from(&out[..]);
        let mut packets = Vec::new();
        while !buf.is_empty() {
            packets.push(Packet::read(&mut buf, 1 << 20).unwrap());
        }
        (packets, state.oversized.load(Ordering::Relaxed))
    }

    #[tokio::test]
    async fn small_packets_pass_unchanged_and_an_oversized_publish_is_cut_to_its_head() {
        let question = format!(r#"{{"id":"q7","question":"{}"}}"#, "A".repeat(3 << 20));
        let mut input = publish("a/b", rumqttc::QoS::AtLeastOnce, false, b"small".to_vec());
        input.extend(publish(
            "edgevlm/door/query",
            rumqttc::QoS::AtLeastOnce,
            true,
            question.clone().into_bytes(),
        ));
        input.extend([0xd0, 0x00]); // PINGRESP
        input.extend(publish(
            "a/c",
            rumqttc::QoS::AtMostOnce,
            false,
            vec![b'x'; 2 << 20],
        ));
        let (packets, cut) = through(input, 1 << 20).await;
        assert_eq!(cut, 2);
        assert_eq!(packets.len(), 4);
        let Packet::Publish(p) = &packets[0] else {
            panic!("{packets:?}")
        };
        assert_eq!((p.topic.as_str(), &p.payload[..]), ("a/b", &b"small"[..]));
        let Packet::Publish(p) = &packets[1] else {
            panic!("{packets:?}")
        };
        assert_eq!(p.topic, "edgevlm/door/query");
        assert!(p.retain);
        assert_eq!(
            p.pkid, 7,
            "the broker's packet id is kept, so rumqttc acknowledges it"
        );
        let (len, prefix) = unmark(&p.payload).unwrap();
        assert_eq!(len, question.len());
        assert_eq!(prefix, &question.as_bytes()[..KEPT_PREFIX]);
        assert!(matches!(packets[2], Packet::PingResp));
        let Packet::Publish(p) = &packets[3] else {
            panic!("{packets:?}")
        };
        assert_eq!((p.topic.as_str(), p.pkid), ("a/c", 0));
        assert_eq!(unmark(&p.payload).unwrap().0, 2 << 20);
    }

    #[tokio::test]
    async fn a_publish_at_the_limit_passes_and_one_byte_over_is_cut() {
        let packet = publish("t", rumqttc::QoS::AtLeastOnce, false, vec![1; 4000]);
        let (packets, cut) = through(packet.clone(), packet.len()).await;
        assert_eq!(cut, 0);
        let Packet::Publish(p) = &packets[0] else {
            panic!()
        };
        assert_eq!(p.payload.len(), 4000);
        let (packets, cut) = through(packet.clone(), packet.len() - 1).await;
        assert_eq!(cut, 1);
        let Packet::Publish(p) = &packets[0] else {
            panic!()
        };
        assert_eq!(unmark(&p.payload).unwrap().0, 4000);
    }

    #[test]
    fn only_a_marked_payload_unmarks() {
        assert!(unmark(b"{\"id\":1}").is_none());
        assert!(unmark(b"\xffEVLMBIG\x00").is_none());
        let mut p = MARKER.to_vec();
        p.extend(9u64.to_be_bytes());
        p.extend(b"{\"i");
        assert_eq!(unmark(&p), Some((9, &b"{\"i"[..])));
    }
}
