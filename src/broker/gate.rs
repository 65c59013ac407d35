//! The gate in front of rumqttd: admission, per-user authentication and a publish rule that
//! rumqttd itself cannot express.
//!
//! Admission bounds what any local process can hold (docs/MQTT.md, "Connection limits"):
//! - at most [`MAX_PENDING`] sockets that have not sent CONNECT; one more closes the oldest, so a
//!   flood of idle sockets cannot keep a real client out, and each has [`CONNECT_TIMEOUT`];
//! - at most [`EMBEDDED_MAX_CLIENTS`] logged-in clients, of which users without `ask` hold at most
//!   all but [`ASKER_RESERVE`] (askers always find a slot), and each user at most its
//!   `max_connections`; a client over a limit gets CONNACK "server unavailable".
//!
//! rumqttd keeps a record of every client id it has seen, for the life of the process (its
//! "graveyard" stores each clean session's connection events): a few KiB per connection of a
//! client with a fresh id, as `mosquitto_pub` and `edgevlm ask` use. So the gate hands rumqttd a
//! pooled id instead of a clean-session client's own (`edgevlm-gate-N`, reused once free; the same
//! id for two connections of one client id, so a session takeover still happens): rumqttd then
//! sees at most as many ids as clients are connected at once. A persistent session
//! (`clean_session = false`) keeps its own id, as its stored session needs it.
//!
//! For each client: read its CONNECT (64 KiB at most); with `[[mqtt.users]]`, check user name and
//! password (without, every client is the anonymous user, who may ask); refuse a will on a topic
//! the user may not publish, refuse the runtime's own client id (a session takeover would
//! disconnect the runtime), then replace the login by the internal one and relay the connection
//! to rumqttd. Broker-to-client bytes are copied as they are; client-to-broker packets are framed,
//! and every PUBLISH topic is checked: under the topic prefix only `<prefix>/<camera>/query`, and
//! only by users with `ask = true`. A refused PUBLISH closes the connection (MQTT 3.1.1 §3.3.5: a
//! server that does not authorize a PUBLISH either acknowledges it or closes the connection;
//! closing makes the refusal visible to the client).

use super::acks::{AckOrder, ack_pkid};
use super::filters::Filters;
use crate::base::log_safe;
use crate::config::{EMBEDDED_MAX_CLIENTS, Secret};
use crate::publish::{MAX_INCOMING_BYTES, Topics};
use bytes::BytesMut;
use rumqttc::mqttbytes::{self, v4::Packet};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// Sockets that have not sent their CONNECT yet, at most; a new one closes the oldest.
pub const MAX_PENDING: usize = 64;
/// Time a client has to send its CONNECT.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Slots only users with `ask` may take.
pub const ASKER_RESERVE: usize = 32;
/// Largest CONNECT accepted.
const MAX_CONNECT: usize = 64 * 1024;
/// The ids the gate gives rumqttd for clean-session clients; refused to clients.
pub const POOLED_ID_PREFIX: &str = "edgevlm-gate-";

pub(super) struct User {
    pub name: String,
    pub password: Secret,
    pub ask: bool,
    pub max_connections: usize,
}

pub(super) struct Gate {
    /// Empty: no `[[mqtt.users]]`, every client is the anonymous user.
    pub users: Vec<User>,
    pub upstream: SocketAddr,
    pub internal: (String, Secret),
    pub topics: Topics,
    pub runtime_client_id: String,
}

/// CONNACK return codes (MQTT 3.1.1 §3.2.2.3).
const UNACCEPTABLE_PROTOCOL: u8 = 1;
const IDENTIFIER_REJECTED: u8 = 2;
const SERVER_UNAVAILABLE: u8 = 3;
const BAD_USER_OR_PASSWORD: u8 = 4;
const NOT_AUTHORIZED: u8 = 5;

/// Without `[[mqtt.users]]`: every local client, allowed to ask; bounded only by the total.
fn anonymous() -> User {
    User {
        name: "anonymous".into(),
        password: Secret::new(""),
        ask: true,
        max_connections: EMBEDDED_MAX_CLIENTS,
    }
}

/// What the gate refused or closed, for the log and `/metrics`.
#[derive(Debug, Default)]
pub struct GateCounters {
    /// Logins refused because a connection limit was reached.
    pub refused_busy: AtomicU64,
    /// Sockets closed because they sent no CONNECT in time or a newer socket needed the slot.
    pub closed_idle: AtomicU64,
}

/// The slots logged-in clients hold.
#[derive(Default)]
struct Slots {
    total: usize,
    non_askers: usize,
    per_user: HashMap<String, usize>,
}

/// Pooled client ids: the client's own id → (pooled id, connections using it).
#[derive(Default)]
struct ClientIds {
    leased: HashMap<String, (usize, usize)>,
    free: Vec<usize>,
    next: usize,
}

struct Admission {
    slots: Mutex<Slots>,
    ids: Mutex<ClientIds>,
    /// Sockets waiting for their CONNECT, oldest first, each with the sender that closes it.
    pending: Mutex<VecDeque<(u64, oneshot::Sender<()>)>>,
    next: AtomicU64,
    counters: Arc<GateCounters>,
    warned: Mutex<Option<Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Counters and queues of ids: a panic elsewhere cannot leave them inconsistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A logged-in client's slot, given back on drop.
struct Slot {
    admission: Arc<Admission>,
    user: String,
    ask: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = lock(&self.admission.slots);
        s.total -= 1;
        if !self.ask {
            s.non_askers -= 1;
        }
        if let Some(n) = s.per_user.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                s.per_user.remove(&self.user);
            }
        }
    }
}

/// A pooled id in use, given back on drop.
struct Lease {
    admission: Arc<Admission>,
    /// The client's own id (`None`: it sent an empty one, shared with nobody).
    own: Option<String>,
    pooled: usize,
}

impl Lease {
    fn id(&self) -> String {
        format!("{POOLED_ID_PREFIX}{}", self.pooled)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut ids = lock(&self.admission.ids);
        let last = match &self.own {
            None => true,
            Some(own) => match ids.leased.get_mut(own) {
                Some((_, users)) if *users > 1 => {
                    *users -= 1;
                    false
                }
                _ => {
                    ids.leased.remove(own);
                    true
                }
            },
        };
        if last {
            ids.free.push(self.pooled);
        }
    }
}

impl Admission {
    fn new(counters: Arc<GateCounters>) -> Admission {
        Admission {
            slots: Mutex::default(),
            ids: Mutex::default(),
            pending: Mutex::default(),
            next: AtomicU64::new(0),
            counters,
            warned: Mutex::new(None),
        }
    }

    /// The pooled id for a clean-session client whose own id is `own`: the one its other
    /// connection uses if it has one (rumqttd then takes that session over), else a free one.
    fn lease(self: &Arc<Self>, own: &str) -> Lease {
        let mut ids = lock(&self.ids);
        let fresh = |ids: &mut ClientIds| {
            ids.free.pop().unwrap_or_else(|| {
                ids.next += 1;
                ids.next - 1
            })
        };
        let (own, pooled) = if own.is_empty() {
            (None, fresh(&mut ids))
        } else if let Some((pooled, users)) = ids.leased.get_mut(own) {
            *users += 1;
            (Some(own.to_string()), *pooled)
        } else {
            let pooled = fresh(&mut ids);
            ids.leased.insert(own.to_string(), (pooled, 1));
            (Some(own.to_string()), pooled)
        };
        Lease {
            admission: self.clone(),
            own,
            pooled,
        }
    }

    /// A new socket, before its CONNECT: the oldest waiting one is closed if there are too many.
    fn arrive(&self) -> (u64, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut pending = lock(&self.pending);
        if pending.len() >= MAX_PENDING
            && let Some((_, oldest)) = pending.pop_front()
        {
            let _ = oldest.send(());
        }
        pending.push_back((id, tx));
        (id, rx)
    }

    /// The socket `id` sent its CONNECT (or gave up).
    fn leave(&self, id: u64) {
        lock(&self.pending).retain(|(i, _)| *i != id);
    }

    fn admit(self: &Arc<Self>, user: &User) -> Result<Slot, String> {
        let mut s = lock(&self.slots);
        let mine = s.per_user.get(&user.name).copied().unwrap_or(0);
        if mine >= user.max_connections {
            return Err(format!(
                "user `{}` holds its {} connections (max_connections)",
                user.name, user.max_connections
            ));
        }
        if s.total >= EMBEDDED_MAX_CLIENTS {
            return Err(format!(
                "the embedded broker holds {EMBEDDED_MAX_CLIENTS} clients"
            ));
        }
        if !user.ask && s.non_askers >= EMBEDDED_MAX_CLIENTS - ASKER_RESERVE {
            return Err(format!(
                "the last {ASKER_RESERVE} connections are kept for users who may ask"
            ));
        }
        s.total += 1;
        if !user.ask {
            s.non_askers += 1;
        }
        *s.per_user.entry(user.name.clone()).or_default() += 1;
        Ok(Slot {
            admission: self.clone(),
            user: user.name.clone(),
            ask: user.ask,
        })
    }

    /// Logs a refusal at most every 10 s (a flood would otherwise flood the log).
    fn warn_refused(&self, user: &str, why: &str) {
        let n = self.counters.refused_busy.fetch_add(1, Ordering::Relaxed) + 1;
        let mut w = lock(&self.warned);
        if w.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
            *w = Some(Instant::now());
            tracing::warn!(user = %user, reason = %why, refused_so_far = n, "MQTT client refused: connection limit");
        }
    }
}

pub(super) async fn serve(listener: TcpListener, gate: Arc<Gate>, counters: Arc<GateCounters>) {
    let admission = Arc::new(Admission::new(counters));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "MQTT gate failed to accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Registered here, in accept order, not in the spawned task: tasks start in any order on
        // a multi-threaded runtime, and the oldest socket must be the first one evicted.
        let arrival = admission.arrive();
        let (gate, admission) = (gate.clone(), admission.clone());
        tokio::spawn(async move {
            if let Err(reason) = relay(&gate, &admission, stream, arrival).await {
                tracing::debug!(peer = %peer, reason = %reason, "MQTT gate closed a connection");
            }
        });
    }
}

/// Whether `user` may publish on `topic`.
fn may_publish(topics: &Topics, user: &User, topic: &str) -> Result<(), String> {
    let prefix = topics.prefix();
    let inside = topic == prefix
        || topic
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'));
    if !inside {
        return Ok(());
    }
    if topics.query_camera(topic).is_some() {
        if user.ask {
            Ok(())
        } else {
            Err(format!(
                "user `{}` may not ask questions (set ask = true in its [[mqtt.users]] entry)",
                user.name
            ))
        }
    } else {
        Err(format!(
            "`{}` is under `{prefix}/`, which only edgevlm publishes to",
            log_safe(topic, 128)
        ))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn refuse(client: &mut TcpStream, code: u8, why: String) -> Result<(), String> {
    let _ = client.write_all(&[0x20, 0x02, 0x00, code]).await;
    let _ = client.shutdown().await;
    Err(why)
}

async fn relay(
    gate: &Gate,
    admission: &Arc<Admission>,
    mut client: TcpStream,
    (id, evicted): (u64, oneshot::Receiver<()>),
) -> Result<(), String> {
    let mut buf = BytesMut::with_capacity(4096);
    let read = tokio::time::timeout(CONNECT_TIMEOUT, read_connect(&mut client, &mut buf));
    let connect = tokio::select! {
        r = read => r,
        _ = evicted => {
            admission.counters.closed_idle.fetch_add(1, Ordering::Relaxed);
            return Err("no CONNECT yet, and newer sockets needed the slot".into());
        }
    };
    admission.leave(id);
    let connect = match connect {
        Err(_) => {
            admission
                .counters
                .closed_idle
                .fetch_add(1, Ordering::Relaxed);
            return Err(format!("no CONNECT within {} s", CONNECT_TIMEOUT.as_secs()));
        }
        Ok(Err(e)) => {
            return refuse(
                &mut client,
                UNACCEPTABLE_PROTOCOL,
                format!("bad CONNECT: {e}"),
            )
            .await;
        }
        Ok(Ok(c)) => c,
    };
    let anonymous = anonymous();
    let user = if gate.users.is_empty() {
        &anonymous
    } else {
        let Some(login) = &connect.login else {
            return refuse(&mut client, NOT_AUTHORIZED, "no user name".into()).await;
        };
        let Some(user) = gate.users.iter().find(|u| {
            u.name == login.username
                && constant_time_eq(u.password.expose().as_bytes(), login.password.as_bytes())
        }) else {
            tracing::warn!(user = %log_safe(&login.username, 64), "MQTT login refused: bad user name or password");
            return refuse(&mut client, BAD_USER_OR_PASSWORD, "bad login".into()).await;
        };
        user
    };
    if connect.client_id == gate.runtime_client_id
        || connect.client_id.starts_with(POOLED_ID_PREFIX)
    {
        tracing::warn!(user = %user.name, "MQTT client refused: it used the runtime's own client id");
        return refuse(
            &mut client,
            IDENTIFIER_REJECTED,
            "the runtime's client id, or one the gate hands out".into(),
        )
        .await;
    }
    if let Some(will) = &connect.last_will
        && let Err(why) = may_publish(&gate.topics, user, &will.topic)
    {
        tracing::warn!(user = %user.name, reason = %why, "MQTT client refused: last will not allowed");
        return refuse(&mut client, NOT_AUTHORIZED, why).await;
    }
    let _slot = match admission.admit(user) {
        Ok(slot) => slot,
        Err(why) => {
            admission.warn_refused(&user.name, &why);
            return refuse(&mut client, SERVER_UNAVAILABLE, why).await;
        }
    };
    let user_name = user.name.clone();
    let mut connect = connect;
    let _lease = connect.clean_session.then(|| {
        let lease = admission.lease(&connect.client_id);
        connect.client_id = lease.id();
        lease
    });
    connect.login = Some(rumqttc::mqttbytes::v4::Login::new(
        gate.internal.0.clone(),
        gate.internal.1.expose().to_string(),
    ));
    let mut out = BytesMut::new();
    Packet::Connect(connect)
        .write(&mut out, MAX_CONNECT)
        .map_err(|e| format!("cannot re-encode CONNECT: {e}"))?;
    let mut upstream = TcpStream::connect(gate.upstream)
        .await
        .map_err(|e| format!("broker unreachable: {e}"))?;
    let _ = upstream.set_nodelay(true);
    let _ = client.set_nodelay(true);
    upstream.write_all(&out).await.map_err(|e| e.to_string())?;
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut up_rx, up_tx) = upstream.into_split();
    // Both directions write upstream: the client's packets, and the gate's PUBACKs for answers
    // it does not pass on; acks go in the order the broker sent its publishes (`acks.rs`), and
    // whoever writes holds `up_tx` from taking acks off the queue to writing them.
    let up_tx = tokio::sync::Mutex::new(up_tx);
    let filters = Mutex::new(Filters::new(gate.topics.prefix()));
    let acks = Mutex::new(AckOrder::default());
    let down = async {
        let mut from_broker = BytesMut::with_capacity(4096);
        while let Some(frame) = next_frame(
            &mut up_rx,
            &mut from_broker,
            2 * MAX_INCOMING_BYTES,
            "the broker",
        )
        .await?
        {
            let route = route_publish(&frame, &lock(&filters));
            match route {
                Route::Drop(Some(pkid)) => {
                    let mut up = up_tx.lock().await;
                    let ready = lock(&acks).dropped(pkid);
                    for ack in ready {
                        up.write_all(&ack).await.map_err(|e| e.to_string())?;
                    }
                }
                Route::Drop(None) => {}
                Route::Pass(pkid) => {
                    // Queued before the client can see it, so its ack finds its entry.
                    if let Some(pkid) = pkid {
                        lock(&acks).passed(pkid);
                    }
                    client_tx
                        .write_all(&frame)
                        .await
                        .map_err(|e| e.to_string())?
                }
            }
        }
        Ok::<(), String>(())
    };
    let up = async {
        while let Some(mut frame) =
            next_frame(&mut client_rx, &mut buf, MAX_INCOMING_BYTES, "the client").await?
        {
            match frame[0] >> 4 {
                3 => {
                    let topic = publish_topic(&frame).ok_or("malformed PUBLISH")?;
                    if let Err(why) = may_publish(&gate.topics, user, &topic) {
                        tracing::warn!(user = %user_name, reason = %why, "MQTT client disconnected: publish not allowed");
                        return Err(why);
                    }
                }
                4 | 5 => {
                    let pkid = ack_pkid(&frame).ok_or("malformed PUBACK/PUBREC")?;
                    let mut up = up_tx.lock().await;
                    let ready = lock(&acks).client_ack(pkid, frame);
                    for ack in ready {
                        up.write_all(&ack).await.map_err(|e| e.to_string())?;
                    }
                    continue;
                }
                8 | 10 => frame = rewrite_subscriptions(frame, &mut lock(&filters))?,
                _ => {}
            }
            let mut up = up_tx.lock().await;
            up.write_all(&frame).await.map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    tokio::select! {
        r = down => r,
        r = up => r,
    }
}

/// The next whole MQTT packet from `from` (buffered in `buf`); `None` once it closed.
async fn next_frame(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    buf: &mut BytesMut,
    max: usize,
    who: &str,
) -> Result<Option<BytesMut>, String> {
    loop {
        match mqttbytes::check(buf.iter(), max) {
            Ok(header) => return Ok(Some(buf.split_to(header.frame_length()))),
            Err(mqttbytes::Error::InsufficientBytes(_)) => {}
            Err(e) => return Err(format!("bad packet from {who}: {e}")),
        }
        if from.read_buf(buf).await.map_err(|e| e.to_string())? == 0 {
            return Ok(None);
        }
    }
}

/// A SUBSCRIBE with its exact answer topics replaced by their camera's `+` filter
/// (`filters.rs`), or an UNSUBSCRIBE recorded; re-encoded.
fn rewrite_subscriptions(frame: BytesMut, filters: &mut Filters) -> Result<BytesMut, String> {
    let mut input = frame.clone();
    let packet = Packet::read(&mut input, MAX_INCOMING_BYTES)
        .map_err(|e| format!("malformed SUBSCRIBE/UNSUBSCRIBE: {e}"))?;
    let packet = match packet {
        Packet::Subscribe(mut s) => {
            for f in &mut s.filters {
                f.path = filters.subscribe(&f.path);
            }
            Packet::Subscribe(s)
        }
        Packet::Unsubscribe(u) => {
            for t in &u.topics {
                filters.unsubscribe(t);
            }
            return Ok(frame);
        }
        _ => return Ok(frame),
    };
    let mut out = BytesMut::new();
    packet
        .write(&mut out, MAX_INCOMING_BYTES)
        .map_err(|e| format!("cannot re-encode SUBSCRIBE: {e}"))?;
    Ok(out)
}

/// What the gate does with a frame from the broker.
#[derive(Debug, PartialEq)]
enum Route {
    /// Pass it on; the packet id of a QoS 1/2 PUBLISH, whose ack the client owes.
    Pass(Option<u16>),
    /// Drop it: a PUBLISH the client did not ask for (an answer to another id), with the packet
    /// id the gate acknowledges at QoS 1.
    Drop(Option<u16>),
}

/// Where a broker-to-client frame goes. QoS 2 is always passed on (its handshake is the
/// client's).
fn route_publish(frame: &[u8], filters: &Filters) -> Route {
    if frame[0] >> 4 != 3 {
        return Route::Pass(None);
    }
    let qos = (frame[0] >> 1) & 3;
    let Some(topic) = publish_topic(frame) else {
        return Route::Pass(None);
    };
    // The packet id follows the topic (QoS 1 and 2 only).
    let pkid = (qos > 0)
        .then(|| {
            let mut i = 1;
            while *frame.get(i)? & 0x80 != 0 {
                i += 1;
            }
            let at = i + 1 + 2 + topic.len();
            Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]))
        })
        .flatten();
    if qos == 2 || filters.delivers(&topic) {
        Route::Pass(pkid)
    } else {
        Route::Drop(pkid)
    }
}

async fn read_connect(
    client: &mut TcpStream,
    buf: &mut BytesMut,
) -> Result<rumqttc::mqttbytes::v4::Connect, String> {
    loop {
        match Packet::read(buf, MAX_CONNECT) {
            Ok(Packet::Connect(c)) => return Ok(c),
            Ok(_) => return Err("the first packet is not CONNECT".into()),
            Err(mqttbytes::Error::InsufficientBytes(_)) => {}
            Err(e) => return Err(e.to_string()),
        }
        let n = client.read_buf(buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed before CONNECT".into());
        }
    }
}

/// The topic of a raw PUBLISH frame.
fn publish_topic(frame: &[u8]) -> Option<String> {
    let mut i = 1;
    while *frame.get(i)? & 0x80 != 0 {
        i += 1;
    }
    i += 1;
    let len = usize::from(u16::from_be_bytes([*frame.get(i)?, *frame.get(i + 1)?]));
    let topic = frame.get(i + 2..i + 2 + len)?;
    String::from_utf8(topic.to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(ask: bool) -> User {
        User {
            name: "u".into(),
            password: Secret::new("p"),
            ask,
            max_connections: 2,
        }
    }

    #[test]
    fn only_askers_publish_questions_and_nobody_else_publishes_under_the_prefix() {
        let t = Topics::new("edgevlm");
        assert!(may_publish(&t, &user(true), "edgevlm/door/query").is_ok());
        assert!(may_publish(&t, &user(false), "edgevlm/door/query").is_err());
        assert!(may_publish(&t, &user(true), "edgevlm/available").is_err());
        assert!(may_publish(&t, &user(true), "edgevlm/door/narration").is_err());
        assert!(may_publish(&t, &user(false), "edgevlmx/other").is_ok());
        assert!(may_publish(&t, &user(false), "home/door").is_ok());
    }

    #[test]
    fn clean_sessions_share_a_bounded_pool_of_ids_and_one_client_id_keeps_one() {
        let a = Arc::new(Admission::new(Arc::default()));
        let x1 = a.lease("x");
        let x2 = a.lease("x");
        let y = a.lease("y");
        let e1 = a.lease("");
        let e2 = a.lease("");
        // A second connection of one client id gets the same id (rumqttd takes the first over).
        assert_eq!(x1.id(), x2.id());
        let ids: std::collections::BTreeSet<String> =
            [&x1, &y, &e1, &e2].iter().map(|l| l.id()).collect();
        assert_eq!(ids.len(), 4);
        assert!(ids.iter().all(|i| i.starts_with(POOLED_ID_PREFIX)));
        // Ids come back when their last connection ends, and are reused.
        drop(x1);
        assert!(lock(&a.ids).leased.contains_key("x"));
        drop(x2);
        assert!(!lock(&a.ids).leased.contains_key("x"));
        drop((y, e1, e2));
        for i in 0..1000 {
            let _l = a.lease(&format!("client-{i}"));
        }
        assert_eq!(
            lock(&a.ids).next,
            4,
            "1000 clients one after another used the freed ids"
        );
    }

    #[test]
    fn admission_bounds_each_user_and_keeps_the_askers_share() {
        let a = Arc::new(Admission::new(Arc::default()));
        let mut viewer = user(false);
        viewer.max_connections = EMBEDDED_MAX_CLIENTS;
        let mut held: Vec<Slot> = Vec::new();
        while let Ok(slot) = a.admit(&viewer) {
            held.push(slot);
        }
        assert_eq!(held.len(), EMBEDDED_MAX_CLIENTS - ASKER_RESERVE);
        let mut asker = user(true);
        asker.name = "a".into();
        let (s1, s2) = (a.admit(&asker).unwrap(), a.admit(&asker).unwrap());
        let over = a.admit(&asker).err().unwrap();
        assert!(over.contains("max_connections"), "{over}");
        drop((s1, s2, held));
        let s = lock(&a.slots);
        assert_eq!((s.total, s.non_askers, s.per_user.len()), (0, 0, 0));
    }

    #[test]
    fn the_topic_is_read_from_a_raw_publish() {
        let mut out = BytesMut::new();
        let mut publish = rumqttc::Publish::new("a/b", rumqttc::QoS::AtLeastOnce, vec![0u8; 300]);
        publish.pkid = 1;
        Packet::Publish(publish).write(&mut out, 1 << 20).unwrap();
        assert_eq!(publish_topic(&out).as_deref(), Some("a/b"));
        assert_eq!(publish_topic(&out[..3]), None);
    }

    #[test]
    fn answers_not_asked_for_are_dropped_with_their_packet_id_and_others_pass_with_theirs() {
        let frame = |topic: &str, qos: rumqttc::QoS| {
            let mut out = BytesMut::new();
            let mut publish = rumqttc::Publish::new(topic, qos, vec![1u8; 200]);
            publish.pkid = if qos == rumqttc::QoS::AtMostOnce {
                0
            } else {
                0x1234
            };
            Packet::Publish(publish).write(&mut out, 1 << 20).unwrap();
            out
        };
        let mut f = Filters::new("edgevlm");
        f.subscribe("edgevlm/door/answer/mine");
        use rumqttc::QoS::*;
        let route = |t: &str, q| route_publish(&frame(t, q), &f);
        assert_eq!(
            route("edgevlm/door/answer/mine", AtLeastOnce),
            Route::Pass(Some(0x1234))
        );
        assert_eq!(
            route("edgevlm/door/answer/other", AtLeastOnce),
            Route::Drop(Some(0x1234))
        );
        assert_eq!(
            route("edgevlm/door/answer/other", AtMostOnce),
            Route::Drop(None)
        );
        assert_eq!(
            route("edgevlm/door/answer/other", ExactlyOnce),
            Route::Pass(Some(0x1234))
        );
        assert_eq!(route("edgevlm/door/status", AtMostOnce), Route::Pass(None));
        let puback = BytesMut::from(&[0x40, 0x02, 0, 1][..]);
        assert_eq!(route_publish(&puback, &f), Route::Pass(None));
    }
}
