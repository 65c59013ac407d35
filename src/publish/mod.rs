//! Publishing over MQTT and the question interface (docs/MQTT.md is the normative API).
//!
//! [`start`] spawns the connection task and returns a [`Publisher`] (the typed, non-blocking API
//! the narration and query stages call), the receiver of valid questions ([`QueryRequest`]) and a
//! [`Connection`] to shut down cleanly. Every outgoing message goes through a bounded outbox of
//! our own that survives reconnects (see `outbox.rs` for why rumqttc's own queue is not enough).

pub mod ask;
mod claim;
mod connection;
pub mod discovery;
mod guard;
pub mod outbox;
pub mod payload;
mod publisher;
mod tls;
pub mod topics;
mod wire;

pub use claim::{ClientIdClaim, claim};
pub use outbox::{OutboxStats, Pushed};
pub use payload::{
    AnswerMessage, Chunk, ErrorNotice, ErrorReply, Instance, StatsMessage, StatusMessage, unix_now,
    unix_secs,
};
pub use publisher::{
    AnswerStream, NarrationStream, PublishStats, Publisher, QueryRequest, ReplyTo,
};
pub use tls::client_config as tls_client_config;
pub use topics::Topics;
pub use wire::ConnectOptions;

use crate::base::{Backoff, Clock};
use crate::config::{BrokerChoice, MqttConfig, MqttProtocol, Secret};
use crate::query::{CameraDirectory, MAX_TOKENS_LIMIT, QueryLimits};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Largest payload published; larger messages are refused (and counted) instead of making the
/// client fail the connection over and over while resending them.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// Largest packet accepted from the broker: a query over `mqtt.query_max_bytes` but under this is
/// read whole, so its sender gets a `too_large` reply. A larger one is cut before rumqttc sees it
/// (MQTT 3.1.1: the size guard, `guard.rs`) or never sent by the broker (MQTT 5: CONNECT's
/// Maximum Packet Size); docs/MQTT.md, "Message sizes".
pub const MAX_INCOMING_BYTES: usize = MAX_PAYLOAD_BYTES + 4096;

/// Capacity of rumqttc's request channel.
const CLIENT_CHANNEL: usize = connection::HANDED_LIMIT + 16;

/// Where and how to connect.
#[derive(Clone)]
pub struct Endpoint {
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// User name and password.
    pub login: Option<(String, Secret)>,
    /// TLS client configuration.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Endpoint({})", self.describe())
    }
}

impl Endpoint {
    /// A plain TCP endpoint without login.
    pub fn plain(host: impl Into<String>, port: u16) -> Self {
        Endpoint {
            host: host.into(),
            port,
            login: None,
            tls: None,
        }
    }

    /// The external broker of a configuration: reads the password and the TLS files now.
    pub fn external(cfg: &MqttConfig) -> Result<Endpoint, PublishError> {
        let BrokerChoice::External { host, port, tls } = &cfg.broker else {
            return Err(PublishError::NotExternal);
        };
        let login = match &cfg.credentials {
            None => None,
            Some(c) => {
                let password = match &c.password {
                    Some(source) => source.load().map_err(PublishError::Password)?,
                    None => Secret::new(""),
                };
                Some((c.username.clone(), password))
            }
        };
        let tls = if *tls {
            Some(tls::client_config(&cfg.tls).map_err(PublishError::Tls)?)
        } else {
            None
        };
        Ok(Endpoint {
            host: host.clone(),
            port: *port,
            login,
            tls,
        })
    }

    /// `mqtt[s]://[user@]host:port`, never with the password.
    pub fn describe(&self) -> String {
        let scheme = if self.tls.is_some() { "mqtts" } else { "mqtt" };
        let user = self
            .login
            .as_ref()
            .map(|(u, _)| format!("{u}@"))
            .unwrap_or_default();
        if self.host.contains(':') {
            format!("{scheme}://{user}[{}]:{}", self.host, self.port)
        } else {
            format!("{scheme}://{user}{}:{}", self.host, self.port)
        }
    }
}

/// Why publishing could not start.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The password could not be read (the message names the source, never the content).
    #[error("mqtt.password: {0}")]
    Password(String),
    /// TLS material is unusable.
    #[error("mqtt TLS: {0}")]
    Tls(String),
    /// [`Endpoint::external`] on an embedded configuration.
    #[error("mqtt.broker is \"embedded\"; start the embedded broker and use its endpoint")]
    NotExternal,
}

/// The running connection; shut it down to publish `offline` and disconnect cleanly.
#[derive(Debug)]
pub struct Connection {
    shutdown: watch::Sender<bool>,
    controller: JoinHandle<()>,
    poller: JoinHandle<()>,
    claim: Option<ClientIdClaim>,
}

impl Connection {
    /// Keeps `claim` on the client id for as long as the connection lives.
    pub fn hold(mut self, claim: ClientIdClaim) -> Connection {
        self.claim = Some(claim);
        self
    }

    /// Publishes retained `offline` after what is queued, waits for acknowledgements (at most
    /// `bound`) and disconnects.
    pub async fn shutdown(self, bound: Duration) {
        let _ = self.shutdown.send(true);
        let grace = bound + Duration::from_millis(500);
        if tokio::time::timeout(grace, self.controller).await.is_err() {
            tracing::warn!("MQTT connection did not close in time");
        }
        self.poller.abort();
        drop(self.claim);
    }
}

/// Settings of [`start`] that are not in the configuration file.
#[derive(Debug, Clone)]
pub struct StartOptions {
    /// Time allowed for TCP + TLS + CONNECT.
    pub connect_timeout: Duration,
    /// At shutdown, time allowed to flush the outbox and publish `offline`.
    pub flush_bound: Duration,
    /// The clock questions are timestamped with on arrival (the hold while the model loads and
    /// time to first token count from it).
    pub clock: Clock,
}

impl Default for StartOptions {
    fn default() -> Self {
        StartOptions {
            connect_timeout: Duration::from_secs(5),
            flush_bound: Duration::from_secs(3),
            clock: Clock::system(),
        }
    }
}

/// Starts the connection task (inside a tokio runtime). Returns the publishing handle, the
/// receiver of valid questions (drop it and every valid question is answered `no_model`) and the
/// connection.
pub fn start(
    cfg: &MqttConfig,
    endpoint: Endpoint,
    cameras: CameraDirectory,
    options: StartOptions,
) -> (Publisher, mpsc::Receiver<QueryRequest>, Connection) {
    let topics = Topics::new(cfg.topic_prefix.clone());
    let describe = endpoint.describe();
    let connect = ConnectOptions {
        host: endpoint.host,
        port: endpoint.port,
        protocol: cfg.protocol,
        client_id: cfg.client_id.clone(),
        keep_alive: cfg.keep_alive,
        login: endpoint.login,
        tls: endpoint.tls,
        will: Some((topics.available(), "offline".into())),
        max_incoming: MAX_INCOMING_BYTES,
        max_outgoing: MAX_PAYLOAD_BYTES + 4096,
        channel: CLIENT_CHANNEL,
        connect_timeout: options.connect_timeout,
        guard: cfg.protocol == MqttProtocol::V311
            && matches!(cfg.broker, BrokerChoice::External { .. }),
    };
    let (client, eventloop) = wire::build(&connect);
    let limits = QueryLimits {
        max_bytes: cfg.query_max_bytes,
        question_max_chars: cfg.question_max_chars,
        max_tokens: MAX_TOKENS_LIMIT,
    };
    let publisher = Publisher::new(
        topics,
        outbox::Outbox::new(cfg.outbox_capacity, cfg.outbox_when_full),
        limits,
        cameras,
        cfg.chunk_interval,
        cfg.client_id.clone(),
    );
    let (events_tx, events_rx) = mpsc::channel(256);
    let (seen_tx, seen_rx) = watch::channel(0u64);
    let (queries_tx, queries_rx) = mpsc::channel(cfg.query_queue.max(1));
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let seed = cfg
        .client_id
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let poller = connection::Poller {
        eventloop,
        events: events_tx,
        seen_errors: seen_rx,
        backoff: Backoff::new(cfg.retry_initial, cfg.retry_max, seed),
    };
    let controller = connection::Controller {
        shared: publisher.shared.clone(),
        client,
        events: events_rx,
        seen_errors: seen_tx,
        queries: queries_tx,
        shutdown: shutdown_rx,
        describe: describe.clone(),
        handed: Default::default(),
        inflight: Default::default(),
        connected: false,
        warned_mismatch: false,
        was_connected: false,
        clock: options.clock.clone(),
        retained_questions: Default::default(),
    };
    tracing::info!(
        broker = %describe,
        protocol = match cfg.protocol { MqttProtocol::V311 => "3.1.1", MqttProtocol::V5 => "5" },
        client_id = %cfg.client_id,
        prefix = %cfg.topic_prefix,
        "MQTT publisher starting"
    );
    let poller = tokio::spawn(poller.run());
    let flush = options.flush_bound;
    let controller = tokio::spawn(controller.run(flush));
    (
        publisher,
        queries_rx,
        Connection {
            shutdown: shutdown_tx,
            controller,
            poller,
            claim: None,
        },
    )
}
