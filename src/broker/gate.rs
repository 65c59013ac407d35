//! The gate in front of rumqttd when `[[mqtt.users]]` are configured: per-user authentication and
//! a publish rule that rumqttd itself cannot express.
//!
//! For each client: read its CONNECT (5 s, 64 KiB at most), check user name and password, refuse
//! a will on a topic the user may not publish, refuse the runtime's own client id (a session
//! takeover would disconnect the runtime), then replace the login by the internal one and relay
//! the connection to rumqttd. Broker-to-client bytes are copied as they are; client-to-broker
//! packets are framed, and every PUBLISH topic is checked: under the topic prefix only
//! `<prefix>/<camera>/query`, and only by users with `ask = true`. A refused PUBLISH closes the
//! connection (MQTT 3.1.1 §3.3.5: a server that does not authorize a PUBLISH either acknowledges
//! it or closes the connection; closing makes the refusal visible to the client).

use crate::base::log_safe;
use crate::config::Secret;
use crate::publish::{MAX_INCOMING_BYTES, Topics};
use bytes::BytesMut;
use rumqttc::mqttbytes::{self, v4::Packet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Clients connected through the gate at most; more are refused at accept.
const MAX_CLIENTS: usize = 256;
/// Time a client has to send its CONNECT.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest CONNECT accepted.
const MAX_CONNECT: usize = 64 * 1024;

pub(super) struct User {
    pub name: String,
    pub password: Secret,
    pub ask: bool,
}

pub(super) struct Gate {
    pub users: Vec<User>,
    pub upstream: SocketAddr,
    pub internal: (String, Secret),
    pub topics: Topics,
    pub runtime_client_id: String,
}

/// CONNACK return codes (MQTT 3.1.1 §3.2.2.3).
const UNACCEPTABLE_PROTOCOL: u8 = 1;
const IDENTIFIER_REJECTED: u8 = 2;
const BAD_USER_OR_PASSWORD: u8 = 4;
const NOT_AUTHORIZED: u8 = 5;

pub(super) async fn serve(listener: TcpListener, gate: Arc<Gate>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CLIENTS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "MQTT gate failed to accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::warn!(peer = %peer, limit = MAX_CLIENTS, "MQTT client refused: too many connections");
            continue;
        };
        let gate = gate.clone();
        tokio::spawn(async move {
            if let Err(reason) = relay(&gate, stream).await {
                tracing::debug!(peer = %peer, reason = %reason, "MQTT gate closed a connection");
            }
            drop(permit);
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

async fn relay(gate: &Gate, mut client: TcpStream) -> Result<(), String> {
    let mut buf = BytesMut::with_capacity(4096);
    let connect =
        match tokio::time::timeout(CONNECT_TIMEOUT, read_connect(&mut client, &mut buf)).await {
            Err(_) => return Err("no CONNECT within 5 s".into()),
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
    if connect.client_id == gate.runtime_client_id {
        tracing::warn!(user = %user.name, "MQTT client refused: it used the runtime's own client id");
        return refuse(
            &mut client,
            IDENTIFIER_REJECTED,
            "runtime's client id".into(),
        )
        .await;
    }
    if let Some(will) = &connect.last_will
        && let Err(why) = may_publish(&gate.topics, user, &will.topic)
    {
        tracing::warn!(user = %user.name, reason = %why, "MQTT client refused: last will not allowed");
        return refuse(&mut client, NOT_AUTHORIZED, why).await;
    }
    let user_name = user.name.clone();
    let mut connect = connect;
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
    let (mut up_rx, mut up_tx) = upstream.into_split();
    let down = async {
        let _ = tokio::io::copy(&mut up_rx, &mut client_tx).await;
        Ok::<(), String>(())
    };
    let up = async {
        loop {
            loop {
                match mqttbytes::check(buf.iter(), MAX_INCOMING_BYTES) {
                    Ok(header) => {
                        let frame = buf.split_to(header.frame_length());
                        if frame[0] >> 4 == 3 {
                            let topic = publish_topic(&frame).ok_or("malformed PUBLISH")?;
                            if let Err(why) = may_publish(&gate.topics, user, &topic) {
                                tracing::warn!(user = %user_name, reason = %why, "MQTT client disconnected: publish not allowed");
                                return Err(why);
                            }
                        }
                        up_tx.write_all(&frame).await.map_err(|e| e.to_string())?;
                    }
                    Err(mqttbytes::Error::InsufficientBytes(_)) => break,
                    Err(e) => return Err(format!("bad packet: {e}")),
                }
            }
            let n = client_rx
                .read_buf(&mut buf)
                .await
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Ok(());
            }
        }
    };
    tokio::select! {
        r = down => r,
        r = up => r,
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
    fn the_topic_is_read_from_a_raw_publish() {
        let mut out = BytesMut::new();
        let mut publish = rumqttc::Publish::new("a/b", rumqttc::QoS::AtLeastOnce, vec![0u8; 300]);
        publish.pkid = 1;
        Packet::Publish(publish).write(&mut out, 1 << 20).unwrap();
        assert_eq!(publish_topic(&out).as_deref(), Some("a/b"));
        assert_eq!(publish_topic(&out[..3]), None);
    }
}
