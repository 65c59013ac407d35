//! The embedded broker (`mqtt.broker = "embedded"`): rumqttd in-process, loopback only.
//!
//! rumqttd 0.20 authenticates at CONNECT only (a static user map or an async handler of
//! `(client id, user, password)`); it has no per-topic ACL, it does not tell a subscriber who
//! published a message, and it bounds neither sockets that never send CONNECT nor connections per
//! user. So a small gate (see `gate.rs`) listens on `mqtt.listen`: it admits clients within
//! bounds, authenticates them when `[[mqtt.users]]` are configured, checks every PUBLISH topic
//! (and the will topic) against the user's rights, and relays the connection to rumqttd on an
//! internal loopback port that only the gate and the runtime can log in to (a random password
//! made at start). Without users every local process may connect, subscribe and ask, within the
//! gate's bounds; nobody but edgevlm publishes under the topic prefix either way.
//!
//! rumqttd has no shutdown API: the broker lives as long as the process.

mod acks;
mod filters;
mod gate;

pub use gate::{ASKER_RESERVE, CONNECT_TIMEOUT, GateCounters, MAX_PENDING};

use crate::config::{EMBEDDED_MAX_CLIENTS, EmbeddedConfig, Secret};
use crate::publish::{Endpoint, MAX_INCOMING_BYTES, Topics};
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

/// Topic and payload bytes at which rumqttd starts a new segment of a filter's log (it keeps
/// two).
pub const SEGMENT_BYTES: usize = 64 * 1024;

/// The internal user name the runtime and the gate log in with.
const INTERNAL_USER: &str = "edgevlm-runtime";

/// Why the embedded broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The listen address is taken or not allowed.
    #[error(
        "mqtt.listen: cannot listen on {addr}: {reason} (another broker such as mosquitto may be \
         running there: use it with broker = \"mqtt://{addr}\", or choose another mqtt.listen)"
    )]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        reason: String,
    },
    /// A user's password could not be read.
    #[error("mqtt.users[{index}] ({user}): {reason}")]
    Password {
        /// Position in the file.
        index: usize,
        /// User name.
        user: String,
        /// What failed (names the source, never the content).
        reason: String,
    },
    /// rumqttd did not come up.
    #[error("the embedded MQTT broker did not start: {0}")]
    Start(String),
}

/// A running embedded broker.
#[derive(Debug)]
pub struct EmbeddedBroker {
    listen: SocketAddr,
    runtime_endpoint: Endpoint,
    gated: bool,
    counters: std::sync::Arc<GateCounters>,
}

impl EmbeddedBroker {
    /// Starts rumqttd and the gate in front of it; returns once clients can connect. Must be
    /// called inside a tokio runtime (the gate runs on it).
    pub fn start(
        cfg: &EmbeddedConfig,
        topics: &Topics,
        runtime_client_id: &str,
    ) -> Result<EmbeddedBroker, BrokerError> {
        let listen = cfg.listen;
        // Bind first, so a taken port is a clear startup error instead of a log line from a
        // broker thread (rumqttd cannot report the port it bound, or failing to bind).
        let public = TcpListener::bind(listen).map_err(|e| BrokerError::Listen {
            addr: listen,
            reason: e.to_string(),
        })?;
        let mut users = Vec::with_capacity(cfg.users.len());
        for (index, u) in cfg.users.iter().enumerate() {
            let password = u.password.load().map_err(|reason| BrokerError::Password {
                index,
                user: u.name.clone(),
                reason,
            })?;
            users.push(gate::User {
                name: u.name.clone(),
                password,
                ask: u.ask,
                max_connections: u.max_connections,
            });
        }
        let (broker_addr, login) = {
            let internal =
                TcpListener::bind((listen.ip(), 0)).map_err(|e| BrokerError::Listen {
                    addr: SocketAddr::new(listen.ip(), 0),
                    reason: e.to_string(),
                })?;
            let addr = internal
                .local_addr()
                .map_err(|e| BrokerError::Start(e.to_string()))?;
            drop(internal);
            (addr, (INTERNAL_USER.to_string(), random_secret()?))
        };
        let mut settings = rumqttd::ServerSettings {
            name: "mqtt-broker-v4".into(),
            listen: broker_addr,
            tls: None,
            next_connection_delay_ms: 1,
            connections: rumqttd::ConnectionSettings {
                connection_timeout_ms: 5000,
                max_payload_size: MAX_INCOMING_BYTES,
                max_inflight_count: 100,
                auth: None,
                external_auth: None,
                dynamic_filters: true,
            },
        };
        settings.connections.auth = Some(HashMap::from([(
            login.0.clone(),
            login.1.expose().to_string(),
        )]));
        let config = rumqttd::Config {
            id: 0,
            router: rumqttd::RouterConfig {
                // The gate's clients, the runtime itself and its `ask` clients fit.
                max_connections: EMBEDDED_MAX_CLIENTS + 8,
                max_outgoing_packet_count: 200,
                // What rumqttd keeps per subscription filter for its subscribers to read: two
                // segments, a new one started once the last holds this much topic and payload
                // (one message may exceed it). Each stored message also keeps its connection's
                // read buffer alive (about 9 KiB for a question on its own connection), so the
                // nominal size understates memory many times: 4 x 2 MiB grew for hours in a
                // soak (docs/RELIABILITY.md, "Memory over a long run").
                max_segment_size: SEGMENT_BYTES,
                max_segment_count: 2,
                custom_segment: None,
                initialized_filters: None,
                shared_subscriptions_strategy: Default::default(),
            },
            v4: Some(HashMap::from([("1".to_string(), settings)])),
            ..Default::default()
        };
        let mut broker = rumqttd::Broker::new(config);
        std::thread::Builder::new()
            .name("mqtt-broker".into())
            .spawn(move || {
                if let Err(e) = broker.start() {
                    tracing::error!(error = %e, "Embedded MQTT broker stopped");
                }
            })
            .map_err(|e| BrokerError::Start(format!("cannot start its thread: {e}")))?;
        wait_for(broker_addr, Duration::from_secs(5))?;
        let runtime_endpoint = Endpoint {
            host: broker_addr.ip().to_string(),
            port: broker_addr.port(),
            login: Some(login.clone()),
            tls: None,
        };
        public
            .set_nonblocking(true)
            .map_err(|e| BrokerError::Start(e.to_string()))?;
        let listener = tokio::net::TcpListener::from_std(public)
            .map_err(|e| BrokerError::Start(e.to_string()))?;
        let gated = !users.is_empty();
        let gate = gate::Gate {
            users,
            upstream: broker_addr,
            internal: login,
            topics: topics.clone(),
            runtime_client_id: runtime_client_id.to_string(),
        };
        let counters = std::sync::Arc::new(GateCounters::default());
        tokio::spawn(gate::serve(
            listener,
            std::sync::Arc::new(gate),
            counters.clone(),
        ));
        tracing::info!(
            listen = %listen,
            users = cfg.users.len(),
            "Embedded MQTT broker running (loopback only)"
        );
        Ok(EmbeddedBroker {
            listen,
            runtime_endpoint,
            gated,
            counters,
        })
    }

    /// Where clients connect.
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// Where the runtime itself connects (the internal listener when users are configured).
    pub fn runtime_endpoint(&self) -> Endpoint {
        self.runtime_endpoint.clone()
    }

    /// Whether clients must log in (users configured).
    pub fn gated(&self) -> bool {
        self.gated
    }

    /// What the gate refused or closed so far.
    pub fn counters(&self) -> std::sync::Arc<GateCounters> {
        self.counters.clone()
    }
}

/// 128 random bits from the kernel, hex-encoded.
fn random_secret() -> Result<Secret, BrokerError> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| BrokerError::Start(format!("cannot read /dev/urandom: {e}")))?;
    Ok(Secret::new(
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>(),
    ))
}

fn wait_for(addr: SocketAddr, bound: Duration) -> Result<(), BrokerError> {
    let deadline = Instant::now() + bound;
    loop {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(BrokerError::Start(format!(
                "nothing accepts connections on {addr} after {} s",
                bound.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
