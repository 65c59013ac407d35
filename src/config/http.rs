//! `[http]`: the HTTP API and web page (docs/HTTP.md).

use super::decode::{Fields, Sink};
use super::{PasswordSource, check_range};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// `[http]`.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    /// Where the server listens; `None`: no HTTP server.
    pub listen: Option<SocketAddr>,
    /// Bearer tokens a client must present (none: no token needed, loopback only).
    pub tokens: Vec<PasswordSource>,
    /// Origins whose browsers may call the API from their pages (CORS); empty: none.
    pub cors_origins: Vec<String>,
    /// Narrations and events kept per camera for `GET …/narrations` and `…/events`.
    pub history: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: None,
            tokens: Vec::new(),
            cors_origins: Vec::new(),
            history: 100,
        }
    }
}

pub(super) fn decode_http(t: &toml::Table, base_dir: Option<&Path>, sink: &mut Sink) -> HttpConfig {
    let d = HttpConfig::default();
    let mut f = Fields::new("http", "http", t);
    let listen = f.opt::<String>("listen", sink).and_then(|a| {
        a.parse::<SocketAddr>()
            .map_err(|_| {
                sink.error(
                    f.path_of("listen"),
                    format!("expected an address such as \"127.0.0.1:8080\", got \"{a}\""),
                )
            })
            .ok()
    });
    let mut tokens = Vec::new();
    if let Some(p) = f.opt::<PathBuf>("token_file", sink) {
        let p = super::expand_credentials_dir(&p).unwrap_or_else(|msg| {
            sink.error(f.path_of("token_file"), msg);
            p
        });
        let p = super::resolve(&p, base_dir);
        if let Err(e) = std::fs::metadata(&p) {
            sink.error(
                f.path_of("token_file"),
                format!("cannot read {}: {e}", p.display()),
            );
        }
        tokens.push(PasswordSource::File(p));
    }
    if let Some(v) = f.opt::<String>("token_env", sink) {
        tokens.push(PasswordSource::Env(v));
    }
    let cors_origins: Vec<String> = f.get("cors_origins", d.cors_origins, sink);
    for o in &cors_origins {
        if !(o.starts_with("http://") || o.starts_with("https://")) || o.ends_with('/') {
            sink.error(
                f.path_of("cors_origins"),
                format!(
                    "`{o}`: an origin is a scheme and a host, such as \"https://ha.local:8123\""
                ),
            );
        }
    }
    let history: u32 = f.get("history", d.history as u32, sink);
    check_range(&f, "history", f64::from(history), 1.0, 10_000.0, sink);
    if let Some(addr) = listen
        && !addr.ip().is_loopback()
        && tokens.is_empty()
    {
        sink.error(
            f.path_of("listen"),
            format!(
                "{addr} is not a loopback address: anyone on the network could ask and watch; \
                 set http.token_file or http.token_env (clients send `Authorization: Bearer <token>`)"
            ),
        );
    }
    f.finish(sink);
    HttpConfig {
        listen,
        tokens,
        cors_origins,
        history: history.max(1) as usize,
    }
}
