//! The embedded broker (`mqtt.broker = "embedded"`): rumqttd in-process, loopback only.
//!
//! rumqttd 0.20 authenticates at CONNECT only (a static user map or an async handler of
//! `(client id, user, password)`); it has no per-topic ACL, and it does not tell a subscriber who
//! published a message. So "only some users may ask questions" cannot be enforced inside rumqttd
//! nor by the runtime as a subscriber. When `[[mqtt.users]]` are configured, a small gate (see
//! `gate.rs`) listens on `mqtt.listen` instead: it authenticates each client itself, checks every
//! PUBLISH topic (and the will topic) against the user's rights, and relays the connection to
//! rumqttd on an internal loopback port that only the gate and the runtime can log in to (a random
//! password made at start). Without users, rumqttd listens on `mqtt.listen` itself and every local
//! process may connect, subscribe and ask.
//!
//! rumqttd has no shutdown API: the broker lives as long as the process.

mod gate;

use crate::config::{EmbeddedConfig, Secret};
use crate::publish::{Endpoint, MAX_INCOMING_BYTES, Topics};
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

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
}

impl EmbeddedBroker {
    /// Starts rumqttd (and the gate when users are configured); returns once clients can connect.
    /// Must be called inside a tokio runtime when users are configured (the gate runs on it).
    pub fn start(
        cfg: &EmbeddedConfig,
        topics: &Topics,
        runtime_client_id: &str,
    ) -> Result<EmbeddedBroker, BrokerError> {
        let listen = cfg.listen;
        // Bind first, so a taken port is a clear startup error instead of a log line from a
        // broker thread (rumqttd cannot report the port it bound, or failing to bind).
        let mut public = Some(TcpListener::bind(listen).map_err(|e| BrokerError::Listen {
            addr: listen,
            reason: e.to_string(),
        })?);
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
            });
        }
        let gated = !users.is_empty();
        let (broker_addr, login) = if gated {
            let internal =
                TcpListener::bind((listen.ip(), 0)).map_err(|e| BrokerError::Listen {
                    addr: SocketAddr::new(listen.ip(), 0),
                    reason: e.to_string(),
                })?;
            let addr = internal
                .local_addr()
                .map_err(|e| BrokerError::Start(e.to_string()))?;
            drop(internal);
            (addr, Some((INTERNAL_USER.to_string(), random_secret()?)))
        } else {
            (listen, None)
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
        if let Some((user, pass)) = &login {
            settings.connections.auth =
                Some(HashMap::from([(user.clone(), pass.expose().to_string())]));
        }
        let config = rumqttd::Config {
            id: 0,
            router: rumqttd::RouterConfig {
                max_connections: 256,
                max_outgoing_packet_count: 200,
                max_segment_size: 2 * MAX_INCOMING_BYTES,
                max_segment_count: 4,
                custom_segment: None,
                initialized_filters: None,
                shared_subscriptions_strategy: Default::default(),
            },
            v4: Some(HashMap::from([("1".to_string(), settings)])),
            ..Default::default()
        };
        let mut broker = rumqttd::Broker::new(config);
        if !gated {
            // rumqttd binds the address itself.
            public = None;
        }
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
            login: login.clone(),
            tls: None,
        };
        let login = login.filter(|_| gated);
        if let (Some(public), Some(internal)) = (public, login) {
            public
                .set_nonblocking(true)
                .map_err(|e| BrokerError::Start(e.to_string()))?;
            let listener = tokio::net::TcpListener::from_std(public)
                .map_err(|e| BrokerError::Start(e.to_string()))?;
            let gate = gate::Gate {
                users,
                upstream: broker_addr,
                internal,
                topics: topics.clone(),
                runtime_client_id: runtime_client_id.to_string(),
            };
            tokio::spawn(gate::serve(listener, std::sync::Arc::new(gate)));
        }
        tracing::info!(
            listen = %listen,
            users = cfg.users.len(),
            "Embedded MQTT broker running (loopback only)"
        );
        Ok(EmbeddedBroker {
            listen,
            runtime_endpoint,
            gated,
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

    /// Whether clients go through the gate (users configured).
    pub fn gated(&self) -> bool {
        self.gated
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
