//! One face over rumqttc's MQTT 3.1.1 (`rumqttc`) and MQTT 5 (`rumqttc::v5`) clients, so the
//! connection task is written once.

use super::guard::{self, Guard};
use crate::config::{MqttProtocol, Secret};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

/// What is needed to connect.
#[derive(Clone)]
pub struct ConnectOptions {
    /// Broker host.
    pub host: String,
    /// Broker port.
    pub port: u16,
    /// 3.1.1 or 5.
    pub protocol: MqttProtocol,
    /// Stable client id.
    pub client_id: String,
    /// Keep-alive.
    pub keep_alive: Duration,
    /// User name and password.
    pub login: Option<(String, Secret)>,
    /// TLS client configuration (`mqtts://`).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Last will: topic and payload (retained, QoS 1).
    pub will: Option<(String, String)>,
    /// Largest packet accepted from the broker.
    pub max_incoming: usize,
    /// Largest packet we send.
    pub max_outgoing: usize,
    /// Capacity of rumqttc's request channel.
    pub channel: usize,
    /// Time allowed for TCP + TLS + CONNECT.
    pub connect_timeout: Duration,
    /// MQTT 3.1.1: connect through the size guard (`guard.rs`), so a PUBLISH over
    /// `max_incoming` from the broker is cut instead of failing the connection. MQTT 5 asks the
    /// broker itself (CONNECT's Maximum Packet Size).
    pub guard: bool,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("protocol", &self.protocol)
            .field("client_id", &self.client_id)
            .field("user", &self.login.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// An incoming PUBLISH.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// Topic.
    pub topic: String,
    /// Payload.
    pub payload: Bytes,
    /// Retained (delivered because it was stored, not because it was just sent).
    pub retain: bool,
    /// MQTT 5 response topic.
    pub response_topic: Option<String>,
    /// MQTT 5 correlation data.
    pub correlation: Option<Bytes>,
    /// The size guard cut this message: its original payload length (`payload` is then only
    /// its first bytes).
    pub oversized: Option<usize>,
}

/// What the event loop reported, reduced to what the connection task needs.
#[derive(Debug)]
pub enum WireEvent {
    /// Connected.
    ConnAck,
    /// A PUBLISH was written with this packet id (0 for QoS 0), in the order they were handed.
    Written(u16),
    /// The broker acknowledged packet id; `Some(reason)` when an MQTT 5 broker refused it.
    Acked(u16, Option<String>),
    /// A message on a subscribed topic.
    Message(Incoming),
    /// A subscription was granted (SUBACK).
    Subscribed,
    /// A subscription was refused.
    SubscribeRefused,
    /// The DISCONNECT we asked for was written.
    Disconnected,
    /// Anything else (pings, …).
    Other,
}

/// The request side.
#[derive(Clone)]
pub enum WireClient {
    /// MQTT 3.1.1.
    V4(rumqttc::AsyncClient),
    /// MQTT 5.
    V5(rumqttc::v5::AsyncClient),
}

/// The event-loop side.
pub enum WireLoop {
    /// MQTT 3.1.1, with its size guard when it has one.
    V4(Box<rumqttc::EventLoop>, Option<Guard>),
    /// MQTT 5.
    V5(Box<rumqttc::v5::EventLoop>),
}

/// Builds a client and its event loop (nothing connects until the loop is polled).
pub fn build(o: &ConnectOptions) -> (WireClient, WireLoop) {
    let keep_alive = o.keep_alive.max(Duration::from_secs(1));
    let connect_secs = o.connect_timeout.as_secs().max(1);
    match o.protocol {
        MqttProtocol::V311 => {
            let guard = o.guard.then_some(()).and_then(|()| {
                let upstream = guard::Upstream {
                    host: o.host.clone(),
                    port: o.port,
                    tls: o.tls.clone(),
                    connect_timeout: o.connect_timeout,
                };
                guard::start(upstream, o.max_incoming)
                    .inspect_err(|e| {
                        tracing::warn!(error = %e, "MQTT size guard could not start; connecting directly (a message over the size limit will drop the connection)");
                    })
                    .ok()
            });
            let mut opts = match &guard {
                Some(g) => rumqttc::MqttOptions::new(
                    &o.client_id,
                    g.socket.to_string_lossy().into_owned(),
                    0,
                ),
                None => rumqttc::MqttOptions::new(&o.client_id, &o.host, o.port),
            };
            opts.set_keep_alive(keep_alive)
                .set_clean_session(true)
                .set_max_packet_size(o.max_incoming, o.max_outgoing)
                .set_inflight(100);
            if let Some((user, pass)) = &o.login {
                opts.set_credentials(user, pass.expose());
            }
            if let Some((topic, payload)) = &o.will {
                opts.set_last_will(rumqttc::LastWill::new(
                    topic,
                    payload.as_bytes().to_vec(),
                    rumqttc::QoS::AtLeastOnce,
                    true,
                ));
            }
            if guard.is_some() {
                // The guard holds the TCP or TLS connection to the broker.
                opts.set_transport(rumqttc::Transport::Unix);
            } else if let Some(tls) = &o.tls {
                opts.set_transport(rumqttc::Transport::tls_with_config(
                    rumqttc::TlsConfiguration::Rustls(tls.clone()),
                ));
            }
            let (client, mut eventloop) = rumqttc::AsyncClient::new(opts, o.channel);
            let mut net = eventloop.network_options();
            net.set_connection_timeout(connect_secs);
            // No Nagle: a chunk written right after a PUBACK would otherwise wait for the
            // broker's delayed ACK, 40 ms on Linux (docs/MQTT.md, "Connection behaviour").
            net.set_tcp_nodelay(true);
            eventloop.set_network_options(net);
            (
                WireClient::V4(client),
                WireLoop::V4(Box::new(eventloop), guard),
            )
        }
        MqttProtocol::V5 => {
            use rumqttc::v5;
            let mut opts = v5::MqttOptions::new(&o.client_id, &o.host, o.port);
            opts.set_keep_alive(keep_alive)
                .set_clean_start(true)
                .set_max_packet_size(Some(o.max_incoming as u32))
                .set_connection_timeout(connect_secs);
            if let Some((user, pass)) = &o.login {
                opts.set_credentials(user, pass.expose());
            }
            if let Some((topic, payload)) = &o.will {
                opts.set_last_will(v5::mqttbytes::v5::LastWill::new(
                    topic,
                    payload.as_bytes().to_vec(),
                    v5::mqttbytes::QoS::AtLeastOnce,
                    true,
                    None,
                ));
            }
            if let Some(tls) = &o.tls {
                opts.set_transport(rumqttc::Transport::tls_with_config(
                    rumqttc::TlsConfiguration::Rustls(tls.clone()),
                ));
            }
            let mut net = opts.network_options();
            net.set_tcp_nodelay(true);
            opts.set_network_options(net);
            let (client, eventloop) = v5::AsyncClient::new(opts, o.channel);
            (WireClient::V5(client), WireLoop::V5(Box::new(eventloop)))
        }
    }
}

/// The client's request channel is full (or the event loop is gone).
#[derive(Debug)]
pub struct ChannelFull;

impl WireClient {
    /// Hands a PUBLISH to the event loop without waiting.
    pub fn try_publish(
        &self,
        topic: &str,
        reliable: bool,
        retain: bool,
        payload: Vec<u8>,
        correlation: Option<&[u8]>,
    ) -> Result<(), ChannelFull> {
        match self {
            WireClient::V4(c) => {
                let qos = if reliable {
                    rumqttc::QoS::AtLeastOnce
                } else {
                    rumqttc::QoS::AtMostOnce
                };
                c.try_publish(topic, qos, retain, payload)
                    .map_err(|_| ChannelFull)
            }
            WireClient::V5(c) => {
                use rumqttc::v5::mqttbytes::{QoS, v5::PublishProperties};
                let qos = if reliable {
                    QoS::AtLeastOnce
                } else {
                    QoS::AtMostOnce
                };
                let props = PublishProperties {
                    correlation_data: correlation.map(Bytes::copy_from_slice),
                    content_type: Some(if payload.first() == Some(&b'{') {
                        "application/json".into()
                    } else {
                        "text/plain".into()
                    }),
                    payload_format_indicator: Some(1),
                    ..Default::default()
                };
                c.try_publish_with_properties(topic, qos, retain, payload, props)
                    .map_err(|_| ChannelFull)
            }
        }
    }

    /// Subscribes with QoS 1 without waiting.
    pub fn try_subscribe(&self, filter: &str) -> Result<(), ChannelFull> {
        match self {
            WireClient::V4(c) => c
                .try_subscribe(filter, rumqttc::QoS::AtLeastOnce)
                .map_err(|_| ChannelFull),
            WireClient::V5(c) => c
                .try_subscribe(filter, rumqttc::v5::mqttbytes::QoS::AtLeastOnce)
                .map_err(|_| ChannelFull),
        }
    }

    /// Asks for a clean DISCONNECT (no last will).
    pub fn try_disconnect(&self) -> Result<(), ChannelFull> {
        match self {
            WireClient::V4(c) => c.try_disconnect().map_err(|_| ChannelFull),
            WireClient::V5(c) => c.try_disconnect().map_err(|_| ChannelFull),
        }
    }
}

impl WireLoop {
    /// Polls once: connects if needed, then one event. Errors are described, never carrying
    /// credentials (rumqttc's errors do not contain them).
    pub async fn poll(&mut self) -> Result<WireEvent, String> {
        match self {
            WireLoop::V4(el, guard) => {
                use rumqttc::{Event, Outgoing, Packet};
                match el.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => Ok(WireEvent::ConnAck),
                    Ok(Event::Incoming(Packet::PubAck(a))) => Ok(WireEvent::Acked(a.pkid, None)),
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        let cut = guard
                            .as_ref()
                            .and_then(|_| guard::unmark(&p.payload))
                            .map(|(len, prefix)| (len, Bytes::copy_from_slice(prefix)));
                        let (oversized, payload) = match cut {
                            Some((len, prefix)) => (Some(len), prefix),
                            None => (None, p.payload),
                        };
                        Ok(WireEvent::Message(Incoming {
                            topic: p.topic,
                            payload,
                            retain: p.retain,
                            response_topic: None,
                            correlation: None,
                            oversized,
                        }))
                    }
                    Ok(Event::Incoming(Packet::SubAck(s))) => Ok(
                        if s.return_codes
                            .iter()
                            .any(|c| matches!(c, rumqttc::SubscribeReasonCode::Failure))
                        {
                            WireEvent::SubscribeRefused
                        } else {
                            WireEvent::Subscribed
                        },
                    ),
                    Ok(Event::Outgoing(Outgoing::Publish(pkid))) => Ok(WireEvent::Written(pkid)),
                    Ok(Event::Outgoing(Outgoing::Disconnect)) => Ok(WireEvent::Disconnected),
                    Ok(_) => Ok(WireEvent::Other),
                    Err(e) => Err(guard
                        .as_ref()
                        .and_then(|g| g.state.take_error())
                        .unwrap_or_else(|| describe_v4(&e))),
                }
            }
            WireLoop::V5(el) => {
                use rumqttc::Outgoing;
                use rumqttc::v5::mqttbytes::v5::{Packet, PubAckReason, SubscribeReasonCode};
                use rumqttc::v5::{Event, Incoming as In};
                let ev: Result<Event, _> = el.poll().await;
                match ev {
                    Ok(Event::Incoming(In::ConnAck(_))) => Ok(WireEvent::ConnAck),
                    Ok(Event::Incoming(Packet::PubAck(a))) => {
                        let refused = match a.reason {
                            PubAckReason::Success | PubAckReason::NoMatchingSubscribers => None,
                            other => Some(format!("{other:?}")),
                        };
                        Ok(WireEvent::Acked(a.pkid, refused))
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        let (response_topic, correlation) = match p.properties {
                            Some(props) => (props.response_topic, props.correlation_data),
                            None => (None, None),
                        };
                        Ok(WireEvent::Message(Incoming {
                            topic: String::from_utf8_lossy(&p.topic).into_owned(),
                            payload: p.payload,
                            retain: p.retain,
                            response_topic,
                            correlation,
                            oversized: None,
                        }))
                    }
                    Ok(Event::Incoming(Packet::SubAck(s))) => Ok(
                        if s.return_codes
                            .iter()
                            .any(|c| !matches!(c, SubscribeReasonCode::Success(_)))
                        {
                            WireEvent::SubscribeRefused
                        } else {
                            WireEvent::Subscribed
                        },
                    ),
                    Ok(Event::Outgoing(Outgoing::Publish(pkid))) => Ok(WireEvent::Written(pkid)),
                    Ok(Event::Outgoing(Outgoing::Disconnect)) => Ok(WireEvent::Disconnected),
                    Ok(_) => Ok(WireEvent::Other),
                    Err(e) => Err(describe_v5(&e)),
                }
            }
        }
    }

    /// Forgets everything rumqttc would replay on its own: requests still in its channel and its
    /// `pending` list. The outbox resends what is unacknowledged, so replaying here as well would
    /// only duplicate (and would break the order in which publishes are matched to packet ids).
    pub fn forget_pending(&mut self) {
        match self {
            WireLoop::V4(el, _) => {
                el.clean();
                el.pending.clear();
            }
            WireLoop::V5(el) => {
                el.clean();
                el.pending.clear();
            }
        }
    }
}

fn describe_v4(e: &rumqttc::ConnectionError) -> String {
    use rumqttc::{ConnectReturnCode as C, ConnectionError as E};
    match e {
        E::ConnectionRefused(code) => format!(
            "the broker refused the connection: {}",
            match code {
                C::BadUserNamePassword => "bad user name or password",
                C::NotAuthorized => "not authorized",
                C::BadClientId => "client id rejected",
                C::ServiceUnavailable => "service unavailable",
                C::RefusedProtocolVersion => "protocol version refused",
                C::Success => "success",
            }
        ),
        other => other.to_string(),
    }
}

fn describe_v5(e: &rumqttc::v5::ConnectionError) -> String {
    match e {
        rumqttc::v5::ConnectionError::ConnectionRefused(code) => {
            format!("the broker refused the connection: {code:?}")
        }
        other => other.to_string(),
    }
}
