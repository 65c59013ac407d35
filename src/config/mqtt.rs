//! The `[mqtt]` section: which broker, how to log in, topic prefix, outbox and query limits.
//!
//! Decoded with the same collector as the rest of the file, so every problem is reported with its
//! path (`mqtt.broker: …`, `mqtt.users[1].password_file: …`).

use super::decode::{Fields, Sink, type_name};
use super::source::{CredentialSource, PasswordSource};
use super::{Retry, decode_retry, ranged, resolve, secs};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// MQTT publishing and the question interface (`[mqtt]`).
#[derive(Debug, Clone, PartialEq)]
pub struct MqttConfig {
    /// Whether `run` publishes at all.
    pub enabled: bool,
    /// Which broker.
    pub broker: BrokerChoice,
    /// Protocol version spoken to an external broker (the embedded one speaks 3.1.1).
    pub protocol: MqttProtocol,
    /// First topic level(s) of every topic (`edgevlm/<camera>/narration`).
    pub topic_prefix: String,
    /// Stable client id (a broker keeps one session per id).
    pub client_id: String,
    /// Login to an external broker.
    pub credentials: Option<CredentialSource>,
    /// TLS files for `mqtts://`.
    pub tls: TlsFiles,
    /// MQTT keep-alive; a dead link is noticed after one to two of these.
    pub keep_alive: Duration,
    /// First reconnect delay; doubles per failure.
    pub retry_initial: Duration,
    /// Cap on the reconnect delay.
    pub retry_max: Duration,
    /// Messages the outbox holds while the broker is unreachable or slow.
    pub outbox_capacity: usize,
    /// What a full outbox does with one more message.
    pub outbox_when_full: WhenFull,
    /// Largest query payload accepted.
    pub query_max_bytes: usize,
    /// Longest question, in characters.
    pub question_max_chars: usize,
    /// Valid questions waiting for the query stage; beyond this they are answered `busy`.
    pub query_queue: usize,
    /// Streamed text (narration and answer chunks) is sent at most this often: the first piece
    /// at once, then what accumulated. Zero: every token is its own message.
    pub chunk_interval: Duration,
    /// The embedded broker's listener and users.
    pub embedded: EmbeddedConfig,
}

/// Where the broker is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerChoice {
    /// rumqttd inside the process, on a loopback address.
    Embedded,
    /// Mosquitto, EMQX, … at `host:port`, over TLS when `tls`.
    External {
        /// Host name or address.
        host: String,
        /// TCP port.
        port: u16,
        /// `mqtts://`.
        tls: bool,
    },
}

impl std::fmt::Display for BrokerChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BrokerChoice::Embedded => f.write_str("embedded"),
            BrokerChoice::External { host, port, tls } => {
                let scheme = if *tls { "mqtts" } else { "mqtt" };
                if host.contains(':') {
                    write!(f, "{scheme}://[{host}]:{port}")
                } else {
                    write!(f, "{scheme}://{host}:{port}")
                }
            }
        }
    }
}

impl BrokerChoice {
    /// Parses `embedded`, `mqtt://host[:port]` or `mqtts://host[:port]`; never echoes credentials.
    pub fn parse(text: &str) -> Result<BrokerChoice, String> {
        let text = text.trim();
        if text == "embedded" {
            return Ok(BrokerChoice::Embedded);
        }
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(format!(
                "expected \"embedded\", \"mqtt://host:port\" or \"mqtts://host:port\", got \"{}\"",
                super::redact_uri(text)
            ));
        };
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "mqtt" | "tcp" => false,
            "mqtts" | "ssl" => true,
            other => {
                return Err(format!(
                    "unsupported scheme `{other}` (expected mqtt or mqtts; websockets are not supported)"
                ));
            }
        };
        let authority = rest.trim_end_matches('/');
        if authority.contains('@') {
            return Err(format!(
                "`{}` carries credentials in the URL; put the user name in `username` and the \
                 password in `password_file` or `password_env` instead",
                super::redact_uri(text)
            ));
        }
        if authority.contains(['/', '?', '#']) {
            return Err(format!("`{text}`: a broker URL has no path"));
        }
        let default_port = if tls { 8883 } else { 1883 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let Some((host, after)) = v6.split_once(']') else {
                return Err(format!("`{text}`: unterminated [IPv6] address"));
            };
            match after.strip_prefix(':') {
                Some(p) => (host.to_string(), parse_port(p, text)?),
                None if after.is_empty() => (host.to_string(), default_port),
                None => return Err(format!("`{text}`: unexpected `{after}` after the address")),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), parse_port(p, text)?),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty() {
            return Err(format!("`{text}` has no host"));
        }
        Ok(BrokerChoice::External { host, port, tls })
    }
}

fn parse_port(p: &str, text: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("`{text}` has an invalid port `{p}`")),
        Ok(port) => Ok(port),
    }
}

/// MQTT protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MqttProtocol {
    /// MQTT 3.1.1 (rumqttc's v4 API); replies go to `<prefix>/<camera>/answer/<id>`.
    V311,
    /// MQTT 5: a query's response topic and correlation data are honoured.
    V5,
}

/// What a full queue does with one more item (vector's `when_full`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Evict the oldest message to make room (fresh narrations matter most).
    DropOldest,
    /// Refuse the new message (what was promised first is delivered first).
    DropNewest,
}

impl std::fmt::Display for WhenFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WhenFull::DropOldest => "drop_oldest",
            WhenFull::DropNewest => "drop_newest",
        })
    }
}

/// TLS material for `mqtts://` (PEM files).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA certificates that sign the broker's certificate; `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain, for brokers that require one.
    pub client_cert_file: Option<PathBuf>,
    /// The client certificate's private key.
    pub client_key_file: Option<PathBuf>,
}

/// The embedded broker (`broker = "embedded"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedConfig {
    /// Loopback address it listens on.
    pub listen: SocketAddr,
    /// People allowed to connect; empty: anonymous clients are allowed (loopback only).
    pub users: Vec<BrokerUser>,
}

/// One login of the embedded broker (`[[mqtt.users]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerUser {
    /// User name.
    pub name: String,
    /// Where the password is read (at start).
    pub password: PasswordSource,
    /// Whether this user may publish questions.
    pub ask: bool,
    /// Connections this user may hold at once through the embedded broker's gate.
    pub max_connections: usize,
}

/// Default of `[[mqtt.users]] max_connections`.
pub const USER_MAX_CONNECTIONS: usize = 16;
/// Client connections the embedded broker's gate holds at most (every user together).
pub const EMBEDDED_MAX_CLIENTS: usize = 256;

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            enabled: true,
            broker: BrokerChoice::Embedded,
            protocol: MqttProtocol::V311,
            topic_prefix: "edgevlm".into(),
            client_id: default_client_id(),
            credentials: None,
            tls: TlsFiles::default(),
            keep_alive: Duration::from_secs(30),
            retry_initial: Duration::from_millis(500),
            retry_max: Duration::from_secs(5),
            outbox_capacity: 1000,
            outbox_when_full: WhenFull::DropOldest,
            query_max_bytes: 16 * 1024,
            question_max_chars: 2000,
            query_queue: 16,
            chunk_interval: Duration::from_millis(100),
            embedded: EmbeddedConfig {
                listen: SocketAddr::from(([127, 0, 0, 1], 1883)),
                users: Vec::new(),
            },
        }
    }
}

/// `edgevlm-<hostname>`, reduced to characters every broker accepts in a client id.
pub fn default_client_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(48)
        .collect();
    if host.is_empty() {
        "edgevlm".into()
    } else {
        format!("edgevlm-{host}")
    }
}

/// Checks a topic prefix: one or more non-empty levels without wildcards, not a `$` system topic.
pub fn check_topic_prefix(p: &str) -> Result<(), String> {
    if p.is_empty() || p.len() > 128 {
        return Err(format!("must be 1-128 bytes, got {} bytes", p.len()));
    }
    if p.starts_with('$') {
        return Err(format!(
            "`{p}`: topics starting with `$` are reserved for brokers"
        ));
    }
    if p.contains(['+', '#', '\0']) {
        return Err(format!("`{p}`: must not contain `+`, `#` or NUL"));
    }
    if p.split('/').any(str::is_empty) {
        return Err(format!(
            "`{p}`: empty topic level (no leading, trailing or doubled `/`)"
        ));
    }
    Ok(())
}

/// `[mqtt]`, assembled from its parts; each part reads and checks its own keys.
///
/// The parts run in the order the keys were always read: problems are reported in that order.
pub(super) fn decode_mqtt(t: &toml::Table, base_dir: Option<&Path>, sink: &mut Sink) -> MqttConfig {
    let d = MqttConfig::default();
    let mut f = Fields::new("mqtt", "mqtt", t);
    let enabled = f.get("enabled", d.enabled, sink);
    let broker = decode_broker(&mut f, &d, sink);
    let embedded = broker == BrokerChoice::Embedded;
    let protocol = decode_protocol(&mut f, &d, embedded, sink);
    let listen = decode_listen(&mut f, &d, embedded, sink);
    let topic_prefix = decode_topic_prefix(&mut f, &d, sink);
    let client_id = decode_client_id(&mut f, &d, sink);
    let credentials = decode_broker_login(&mut f, base_dir, embedded, sink);
    let tls = decode_tls(&mut f, base_dir, &broker, sink);
    let link = decode_link_timing(&mut f, &d, sink);
    let outbox = decode_outbox(&mut f, &d, sink);
    let limits = decode_query_limits(&mut f, &d, sink);
    let chunk_ms = bounded(
        &mut f,
        "chunk_interval_ms",
        d.chunk_interval.as_millis() as usize,
        0,
        5000,
        sink,
    );
    let users = decode_users(&mut f, base_dir, embedded, sink);
    f.finish(sink);

    MqttConfig {
        enabled,
        broker,
        protocol,
        topic_prefix,
        client_id,
        credentials,
        tls,
        keep_alive: link.keep_alive,
        retry_initial: link.retry.initial,
        retry_max: link.retry.max,
        outbox_capacity: outbox.capacity,
        outbox_when_full: outbox.when_full,
        query_max_bytes: limits.query_max_bytes,
        question_max_chars: limits.question_max_chars,
        query_queue: limits.query_queue,
        chunk_interval: Duration::from_millis(u64::from(chunk_ms)),
        embedded: EmbeddedConfig { listen, users },
    }
}

/// `broker`: `embedded` or an `mqtt://` / `mqtts://` URL ([`BrokerChoice::parse`]).
fn decode_broker(f: &mut Fields<'_>, d: &MqttConfig, sink: &mut Sink) -> BrokerChoice {
    match f.opt::<String>("broker", sink) {
        None => d.broker.clone(),
        Some(b) => BrokerChoice::parse(&b).unwrap_or_else(|e| {
            sink.error(f.path_of("broker"), e);
            d.broker.clone()
        }),
    }
}

/// `protocol`: `3.1.1` or `5`; the embedded broker speaks 3.1.1 only.
fn decode_protocol(
    f: &mut Fields<'_>,
    d: &MqttConfig,
    embedded: bool,
    sink: &mut Sink,
) -> MqttProtocol {
    let protocol = f.choice(
        "protocol",
        &[("3.1.1", MqttProtocol::V311), ("5", MqttProtocol::V5)],
        d.protocol,
        sink,
    );
    if embedded && protocol == MqttProtocol::V5 {
        sink.error(
            f.path_of("protocol"),
            "the embedded broker speaks MQTT 3.1.1 only (rumqttd 0.20); use an external broker \
             (e.g. mosquitto) for MQTT 5",
        );
    }
    protocol
}

/// `listen`: the embedded broker's loopback address, with a fixed port.
fn decode_listen(
    f: &mut Fields<'_>,
    d: &MqttConfig,
    embedded: bool,
    sink: &mut Sink,
) -> SocketAddr {
    let Some(a) = f.opt::<String>("listen", sink) else {
        return d.embedded.listen;
    };
    let problem = match a.parse::<SocketAddr>() {
        Ok(addr) if !addr.ip().is_loopback() => format!(
            "{addr} is not a loopback address; the embedded broker is for this machine \
             only (use mosquitto with TLS and ACLs to serve a network)"
        ),
        Ok(addr) if addr.port() == 0 => "needs a fixed port (clients must find it)".into(),
        Ok(addr) => {
            if !embedded {
                sink.error(f.path_of("listen"), "only applies to broker = \"embedded\"");
            }
            return addr;
        }
        Err(_) => format!("expected an address such as \"127.0.0.1:1883\", got \"{a}\""),
    };
    sink.error(f.path_of("listen"), problem);
    d.embedded.listen
}

/// `topic_prefix`: the first level(s) of every topic ([`check_topic_prefix`]).
fn decode_topic_prefix(f: &mut Fields<'_>, d: &MqttConfig, sink: &mut Sink) -> String {
    let topic_prefix: String = f.get("topic_prefix", d.topic_prefix.clone(), sink);
    if let Err(e) = check_topic_prefix(&topic_prefix) {
        sink.error(f.path_of("topic_prefix"), e);
    }
    topic_prefix
}

/// `client_id`: 1-64 characters every broker accepts.
fn decode_client_id(f: &mut Fields<'_>, d: &MqttConfig, sink: &mut Sink) -> String {
    let client_id: String = f.get("client_id", d.client_id.clone(), sink);
    if !(1..=64).contains(&client_id.len())
        || !client_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        sink.error(
            f.path_of("client_id"),
            format!("must be 1-64 characters of A-Z, a-z, 0-9, `-`, `_` or `.`, got `{client_id}`"),
        );
    }
    client_id
}

/// The runtime's login to an external broker; the embedded broker's login is internal.
fn decode_broker_login(
    f: &mut Fields<'_>,
    base_dir: Option<&Path>,
    embedded: bool,
    sink: &mut Sink,
) -> Option<CredentialSource> {
    let credentials = decode_credentials(f, base_dir, sink);
    if credentials.is_some() && embedded {
        sink.error(
            f.path_of("username"),
            "the runtime's own login to the embedded broker is internal; list the people who \
             connect in [[mqtt.users]]",
        );
    }
    credentials
}

/// `ca_file`, `client_cert_file`, `client_key_file`: readable PEM files, for an mqtts:// broker
/// only; the client certificate and key come together.
fn decode_tls(
    f: &mut Fields<'_>,
    base_dir: Option<&Path>,
    broker: &BrokerChoice,
    sink: &mut Sink,
) -> TlsFiles {
    let tls_broker = matches!(broker, BrokerChoice::External { tls: true, .. });
    let mut tls = TlsFiles::default();
    for (key, slot) in [
        ("ca_file", &mut tls.ca_file),
        ("client_cert_file", &mut tls.client_cert_file),
        ("client_key_file", &mut tls.client_key_file),
    ] {
        let Some(p) = f.opt::<PathBuf>(key, sink) else {
            continue;
        };
        let p = resolve(&p, base_dir);
        if !tls_broker {
            sink.error(f.path_of(key), "only applies to an mqtts:// broker");
        } else if let Err(e) = std::fs::metadata(&p) {
            sink.error(f.path_of(key), format!("cannot read {}: {e}", p.display()));
        }
        *slot = Some(p);
    }
    if tls.client_cert_file.is_some() != tls.client_key_file.is_some() {
        sink.error(
            f.path_of("client_key_file"),
            "client_cert_file and client_key_file must be given together",
        );
    }
    tls
}

/// How the link to the broker is kept and re-established.
struct LinkTiming {
    keep_alive: Duration,
    retry: Retry,
}

fn decode_link_timing(f: &mut Fields<'_>, d: &MqttConfig, sink: &mut Sink) -> LinkTiming {
    let keep_alive = ranged(
        f,
        "keep_alive_secs",
        d.keep_alive.as_secs_f64(),
        1.0,
        3600.0,
        sink,
    );
    LinkTiming {
        keep_alive: secs(keep_alive, d.keep_alive),
        retry: decode_retry(f, d.retry_initial, d.retry_max, sink),
    }
}

/// What is kept while the broker cannot take messages.
struct Outbox {
    capacity: usize,
    when_full: WhenFull,
}

fn decode_outbox(f: &mut Fields<'_>, d: &MqttConfig, sink: &mut Sink) -> Outbox {
    let capacity = bounded(f, "outbox_capacity", d.outbox_capacity, 1, 1_000_000, sink);
    let when_full = f.choice(
        "outbox_when_full",
        &[
            ("drop_oldest", WhenFull::DropOldest),
            ("drop_newest", WhenFull::DropNewest),
        ],
        d.outbox_when_full,
        sink,
    );
    Outbox {
        capacity: capacity.max(1) as usize,
        when_full,
    }
}

/// How large and how many questions are accepted.
struct QueryLimits {
    query_max_bytes: usize,
    question_max_chars: usize,
    query_queue: usize,
}

fn decode_query_limits(f: &mut Fields<'_>, d: &MqttConfig, sink: &mut Sink) -> QueryLimits {
    let max_bytes = bounded(f, "query_max_bytes", d.query_max_bytes, 256, 1 << 20, sink);
    let max_chars = bounded(
        f,
        "question_max_chars",
        d.question_max_chars,
        1,
        100_000,
        sink,
    );
    let queue = bounded(f, "query_queue", d.query_queue, 1, 1024, sink);
    QueryLimits {
        query_max_bytes: max_bytes as usize,
        question_max_chars: max_chars.max(1) as usize,
        query_queue: queue.max(1) as usize,
    }
}

/// An integer `key` (default `default`) that must lie in `min..=max`; out of range is reported
/// and returned as is.
fn bounded(
    f: &mut Fields<'_>,
    key: &'static str,
    default: usize,
    min: u32,
    max: u32,
    sink: &mut Sink,
) -> u32 {
    let v: u32 = f.get(key, default as u32, sink);
    if !(min..=max).contains(&v) {
        sink.error(
            f.path_of(key),
            format!("must be between {min} and {max}, got {v}"),
        );
    }
    v
}

/// `[[mqtt.users]]`: the people the embedded broker lets in.
fn decode_users(
    f: &mut Fields<'_>,
    base_dir: Option<&Path>,
    embedded: bool,
    sink: &mut Sink,
) -> Vec<BrokerUser> {
    let mut users = Vec::new();
    let Some(value) = f.raw("users", sink) else {
        return users;
    };
    let toml::Value::Array(items) = value else {
        sink.error(
            f.path_of("users"),
            format!(
                "expected an array of tables ([[mqtt.users]]), got {}",
                type_name(value)
            ),
        );
        return users;
    };
    if !embedded && !items.is_empty() {
        sink.error(
            f.path_of("users"),
            "users apply to the embedded broker; an external broker has its own (see the \
             Mosquitto ACL example in docs/MQTT.md)",
        );
    }
    for (i, item) in items.iter().enumerate() {
        let path = format!("mqtt.users[{i}]");
        let toml::Value::Table(t) = item else {
            sink.error(path, format!("expected a table, got {}", type_name(item)));
            continue;
        };
        if let Some(user) = decode_user(&path, t, &users, base_dir, sink) {
            users.push(user);
        }
    }
    users
}

/// One `[[mqtt.users]]` entry: a unique printable `name`, a password source, `ask`.
fn decode_user(
    path: &str,
    t: &toml::Table,
    earlier: &[BrokerUser],
    base_dir: Option<&Path>,
    sink: &mut Sink,
) -> Option<BrokerUser> {
    let mut u = Fields::new(path, "mqtt.users[]", t);
    let name: Option<String> = u.opt("name", sink);
    let password = decode_password(&mut u, base_dir, sink);
    let ask = u.get("ask", false, sink);
    let max_connections = bounded(
        &mut u,
        "max_connections",
        USER_MAX_CONNECTIONS,
        1,
        EMBEDDED_MAX_CLIENTS as u32,
        sink,
    ) as usize;
    if u.has("password") {
        u.raw("password", sink);
        sink.error(
            u.path_of("password"),
            "passwords are never written in the config; use password_file or password_env",
        );
    }
    let has_password_key = u.has("password_file") || u.has("password_env");
    let has_name_key = u.has("name");
    u.finish(sink);
    match &name {
        None if !has_name_key => sink.error(format!("{path}.name"), "is required"),
        Some(n)
            if n.is_empty() || n.len() > 64 || n.chars().any(|c| c.is_control() || c == ':') =>
        {
            sink.error(
                format!("{path}.name"),
                format!("must be 1-64 printable characters without `:`, got `{n}`"),
            )
        }
        Some(n) if earlier.iter().any(|x| &x.name == n) => {
            sink.error(format!("{path}.name"), format!("duplicate user `{n}`"))
        }
        _ => {}
    }
    if password.is_none() && !has_password_key {
        sink.error(
            format!("{path}.password_file"),
            "a user needs a password (password_file or password_env)",
        );
    }
    Some(BrokerUser {
        name: name?,
        password: password?,
        ask,
        max_connections,
    })
}

/// `username` + password source of a table (a camera, the broker); a `password` key is refused
/// with the reason, before `finish` would call it unknown.
pub(super) fn decode_credentials(
    f: &mut Fields<'_>,
    base_dir: Option<&Path>,
    sink: &mut Sink,
) -> Option<CredentialSource> {
    let username: Option<String> = f.opt("username", sink);
    let password = decode_password(f, base_dir, sink);
    if f.has("password") {
        f.raw("password", sink);
        sink.error(
            f.path_of("password"),
            "passwords are never written in the config; use password_file (e.g. a systemd \
             credential) or password_env",
        );
    }
    match (username, password) {
        (Some(username), password) => Some(CredentialSource { username, password }),
        (None, Some(_)) => {
            sink.error(
                f.path_of("username"),
                "is required when a password is given",
            );
            None
        }
        (None, None) => None,
    }
}

/// `password_file` / `password_env` of a table (a camera, the broker, a broker user): exactly one,
/// the file readable (after `$CREDENTIALS_DIRECTORY` expansion), the variable set.
pub(super) fn decode_password(
    f: &mut Fields<'_>,
    base_dir: Option<&Path>,
    sink: &mut Sink,
) -> Option<PasswordSource> {
    let password_file: Option<PathBuf> = f.opt("password_file", sink);
    let password_env: Option<String> = f.opt("password_env", sink);
    match (password_file, password_env) {
        (Some(_), Some(_)) => {
            sink.error(
                f.path_of("password_env"),
                "give either password_file or password_env, not both",
            );
            None
        }
        (Some(p), None) => {
            let p = match super::expand_credentials_dir(&p) {
                Ok(p) => p,
                Err(msg) => {
                    sink.error(f.path_of("password_file"), msg);
                    p
                }
            };
            let p = resolve(&p, base_dir);
            if let Err(e) = std::fs::metadata(&p) {
                sink.error(
                    f.path_of("password_file"),
                    format!("cannot read {}: {e}", p.display()),
                );
            }
            Some(PasswordSource::File(p))
        }
        (None, Some(v)) => {
            if std::env::var_os(&v).is_none() {
                sink.error(
                    f.path_of("password_env"),
                    format!("environment variable {v} is not set"),
                );
            }
            Some(PasswordSource::Env(v))
        }
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn parse(mqtt: &str) -> Result<Config, Vec<String>> {
        let text = format!("{mqtt}\n[[cameras]]\nid = \"a\"\nuri = \"test://ball\"\n");
        Config::parse(&text, None).map_err(|e| e.0.iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn without_a_section_the_embedded_broker_is_used_on_loopback() {
        let c = parse("").unwrap();
        assert!(c.mqtt.enabled);
        assert_eq!(c.mqtt.broker, BrokerChoice::Embedded);
        assert_eq!(c.mqtt.embedded.listen.to_string(), "127.0.0.1:1883");
        assert_eq!(c.mqtt.topic_prefix, "edgevlm");
        assert!(c.mqtt.client_id.starts_with("edgevlm"));
    }

    #[test]
    fn broker_urls_parse_with_default_ports_and_refuse_credentials() {
        assert_eq!(
            BrokerChoice::parse("mqtts://broker.example").unwrap(),
            BrokerChoice::External {
                host: "broker.example".into(),
                port: 8883,
                tls: true
            }
        );
        assert_eq!(
            BrokerChoice::parse("mqtt://[::1]:1884")
                .unwrap()
                .to_string(),
            "mqtt://[::1]:1884"
        );
        let e = BrokerChoice::parse("mqtt://bob:hunter2@h:1883").unwrap_err();
        assert!(e.contains("***@h:1883") && !e.contains("hunter2"), "{e}");
        assert!(BrokerChoice::parse("ws://h").unwrap_err().contains("ws"));
        assert!(
            BrokerChoice::parse("mqtt://h:0")
                .unwrap_err()
                .contains("port")
        );
    }

    #[test]
    fn every_mqtt_problem_is_reported_with_its_path() {
        let errs = parse(
            "[mqtt]\nlisten = \"0.0.0.0:1883\"\nprotocol = \"5\"\ntopic_prefix = \"a/+/b\"\n\
             outbox_when_full = \"block\"\noutbox_capacity = 0\nusername = \"u\"\n\
             ca_file = \"/etc/hosts\"\npassword = \"x\"\n\
             [[mqtt.users]]\nname = \"ops\"\n[[mqtt.users]]\nname = \"ops\"\npassword_env = \"EDGEVLM_NOPE_UNSET\"\n",
        )
        .unwrap_err();
        for expected in [
            "mqtt.listen: 0.0.0.0:1883 is not a loopback address",
            "mqtt.protocol: the embedded broker speaks MQTT 3.1.1 only",
            "mqtt.topic_prefix: `a/+/b`: must not contain",
            "mqtt.outbox_when_full: expected \"drop_oldest\" or \"drop_newest\"",
            "mqtt.outbox_capacity: must be between 1 and 1000000, got 0",
            "mqtt.username: the runtime's own login to the embedded broker is internal",
            "mqtt.ca_file: only applies to an mqtts:// broker",
            "mqtt.password: passwords are never written",
            "mqtt.users[0].password_file: a user needs a password",
            "mqtt.users[1].password_env: environment variable EDGEVLM_NOPE_UNSET is not set",
        ] {
            assert!(
                errs.iter().any(|e| e.starts_with(expected)),
                "missing `{expected}` in {errs:#?}"
            );
        }
    }

    #[test]
    fn users_belong_to_the_embedded_broker_only() {
        let errs = parse(
            "[mqtt]\nbroker = \"mqtt://127.0.0.1:1883\"\n[[mqtt.users]]\nname = \"a\"\npassword_env = \"PATH\"\n",
        )
        .unwrap_err();
        assert!(
            errs.iter()
                .any(|e| e.starts_with("mqtt.users: users apply to the embedded broker")),
            "{errs:#?}"
        );
    }
}
