//! The control socket: a local Unix socket that answers every connection with the status of the
//! running instance as one JSON document (`edgevlm status` reads it). Local only, read-only.

use crate::supervisor::CameraReport;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;
use tokio::sync::watch;

/// What the control socket answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusDoc {
    /// edgevlm version.
    pub version: String,
    /// Process id.
    pub pid: u32,
    /// Seconds since the process started.
    pub uptime_secs: f64,
    /// Seconds since the camera reports were taken (they refresh every `status_interval_secs`).
    pub report_age_secs: f64,
    /// The model: `loading`, `ready (…)` or `unavailable: why`.
    #[serde(default)]
    pub model: String,
    /// One report per camera.
    pub cameras: Vec<serde_json::Value>,
}

/// What the main loop last published for the control socket.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When the camera reports were taken.
    pub taken: Instant,
    /// The model's state, as [`StatusDoc::model`] says it.
    pub model: String,
    /// One report per camera.
    pub cameras: Arc<Vec<CameraReport>>,
}

impl Snapshot {
    /// No camera reported yet.
    pub fn starting(model: impl Into<String>) -> Self {
        Snapshot {
            taken: Instant::now(),
            model: model.into(),
            cameras: Arc::new(Vec::new()),
        }
    }
}

/// Where the model stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelStatus {
    /// Loading (cameras already run).
    Loading,
    /// Loaded; narration and questions run.
    Ready,
    /// No model serves, and why (questions get `no_model`).
    Unavailable(String),
}

/// The latest snapshot, published by the main loop.
pub type Reports = watch::Receiver<Snapshot>;

/// Binds the socket, replacing a stale one but refusing to steal one that still answers.
pub async fn bind(path: &Path) -> Result<UnixListener, String> {
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(format!(
                "another edgevlm instance answers on {} (stop it, or set runtime.control_socket)",
                path.display()
            ));
        }
        let _ = std::fs::remove_file(path);
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    UnixListener::bind(path).map_err(|e| format!("cannot listen on {}: {e}", path.display()))
}

/// Answers every connection with a [`StatusDoc`], until the listener fails.
pub async fn serve(listener: UnixListener, reports: Reports) {
    let started = Instant::now();
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let snap = reports.borrow().clone();
        let doc = StatusDoc {
            version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            uptime_secs: started.elapsed().as_secs_f64(),
            report_age_secs: snap.taken.elapsed().as_secs_f64(),
            model: snap.model,
            cameras: snap
                .cameras
                .iter()
                .filter_map(|r| serde_json::to_value(r).ok())
                .collect(),
        };
        tokio::spawn(async move {
            if let Ok(mut body) = serde_json::to_vec(&doc) {
                body.push(b'\n');
                let _ = tokio::time::timeout(Duration::from_secs(5), stream.write_all(&body)).await;
            }
        });
    }
}

/// Reads the status of the instance listening on `path`.
pub async fn query(path: &PathBuf) -> Result<StatusDoc, String> {
    use tokio::io::AsyncReadExt;
    let mut stream = tokio::net::UnixStream::connect(path).await.map_err(|e| {
        format!(
            "no edgevlm answers on {} ({e}); is `edgevlm run` running with this configuration?",
            path.display()
        )
    })?;
    let mut body = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut body))
        .await
        .map_err(|_| format!("{} did not answer within 5 s", path.display()))?
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    serde_json::from_slice(&body)
        .map_err(|e| format!("unexpected answer from {}: {e}", path.display()))
}
