//! `edgevlm run`: the main loop (cameras, telemetry, MQTT, signals).

use crate::cli::watch::{Watching, load_model};
use anyhow::Context;
use edgevlm::config::Config;
use edgevlm::memory::Outputs;
use edgevlm::publish::CameraDirectory;
use edgevlm::supervisor::{CameraReport, RateMeter, Supervisor};
use edgevlm::telemetry::{Systemd, control, metrics};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) async fn run(path: PathBuf, config: Config) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    edgevlm::ingest::init()?;
    tracing::info!(summary = %config.summary(), "Starting");
    let mut supervisor = Supervisor::start(&config);
    let (views_tx, views_rx) = tokio::sync::watch::channel(supervisor.views());
    let (reports_tx, reports_rx) =
        tokio::sync::watch::channel((Instant::now(), Arc::new(Vec::new())));
    let (mqtt, questions) = match start_mqtt(&config)? {
        Some((p, q, c)) => (Some((p, c)), Some(q)),
        None => (None, None),
    };
    // Once sent here, /metrics shows the engines' counters and each camera's memory.
    let (engines_tx, engines_rx) = tokio::sync::watch::channel(None);
    let (memories_tx, memories_rx) = tokio::sync::watch::channel(Vec::new());
    if let Some(addr) = config.telemetry.metrics_listen {
        let listener = metrics::bind(addr)
            .await
            .with_context(|| format!("telemetry.metrics_listen: cannot listen on {addr}"))?;
        tracing::info!(address = %addr, "Serving Prometheus metrics on /metrics");
        let publisher = mqtt.as_ref().map(|(p, _)| p.clone());
        tokio::spawn(metrics::serve(
            listener,
            metrics::Sources {
                views: views_rx.clone(),
                publisher,
                engines: engines_rx,
                memories: memories_rx.clone(),
            },
        ));
    }
    let control_socket = config.telemetry.control_socket.clone();
    if let Some(path) = &control_socket {
        let listener = control::bind(path)
            .await
            .map_err(|e| anyhow::anyhow!("telemetry.control_socket: {e}"))?;
        tokio::spawn(control::serve(listener, reports_rx));
    }
    // The endpoints answer while the model loads (TensorRT can take minutes the first time).
    let model = load_model(&config).await;
    let _ = engines_tx.send(model.as_ref().ok().map(|(e, _)| e.clone()));
    let outputs = Outputs::new(mqtt.as_ref().map(|(p, _)| p.clone()));
    let mut watching = Watching::new(&config, model, outputs);
    watching.sync(&supervisor).await;
    let _ = memories_tx.send(watching.memories());
    if let (Some(questions), Some((publisher, _))) = (questions, &mqtt) {
        tokio::spawn(edgevlm::query::serve_mqtt(
            watching.service().clone(),
            questions,
            publisher.clone(),
        ));
    }
    let systemd = Systemd::from_env();
    systemd.ready(&camera_summary(&supervisor));
    // Without WatchdogSec the tick still runs (cheaply) so the loop has one shape.
    let mut watchdog = tokio::time::interval(
        systemd
            .watchdog_interval()
            .unwrap_or(Duration::from_secs(3600)),
    );
    let mut meters: HashMap<String, RateMeter> = HashMap::new();
    for cam in supervisor.cameras() {
        // Prime the meters so the first status line already has rates.
        let meter = meters.entry(cam.id().to_string()).or_default();
        meter.rates(Instant::now(), cam.shared.counters.snapshot());
    }
    let mut ticker = tokio::time::interval(config.runtime.status_interval);
    ticker.tick().await;
    let mut sigterm = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut sighup = signal(SignalKind::hangup()).context("cannot watch SIGHUP")?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = sigterm.recv() => break,
            _ = watchdog.tick() => match supervisor.healthy().and_then(|()| watching.healthy()) {
                // WATCHDOG=1 only from this loop and only while healthy: a stuck runtime or a stuck
                // camera task stops the pings and systemd restarts the service.
                Ok(()) => systemd.watchdog(),
                Err(why) => tracing::error!(reason = %why, "Unhealthy; not feeding the systemd watchdog"),
            },
            _ = sighup.recv() => match Config::load(&path) {
                Ok(new) => {
                    systemd.reloading();
                    let s = supervisor.reload(&new, STOP_BOUND).await;
                    watching.sync(&supervisor).await;
                    let _ = memories_tx.send(watching.memories());
                    if let Some((publisher, _)) = &mqtt {
                        // [mqtt] itself is read at start only; cameras follow reloads.
                        publisher.set_cameras(CameraDirectory::from_config(&new));
                        for gone in &s.removed {
                            publisher.clear_status(gone);
                        }
                    }
                    let _ = views_tx.send(supervisor.views());
                    systemd.ready(&camera_summary(&supervisor));
                    tracing::info!(
                        added = ?s.added, removed = ?s.removed, restarted = ?s.restarted,
                        unchanged = s.unchanged.len(), "Configuration reloaded"
                    );
                    if new.runtime.status_interval != ticker.period() {
                        ticker = tokio::time::interval(new.runtime.status_interval);
                        ticker.tick().await;
                    }
                }
                Err(errors) => {
                    for e in &errors.0 {
                        tracing::error!(problem = %e, "Invalid configuration");
                    }
                    tracing::error!(
                        file = %path.display(),
                        problems = errors.0.len(),
                        "Configuration rejected; the running configuration stays in place"
                    );
                }
            },
            _ = ticker.tick() => {
                let mut reports = Vec::with_capacity(supervisor.cameras().len());
                for cam in supervisor.cameras() {
                    let meter = meters.entry(cam.id().to_string()).or_default();
                    let mut r = CameraReport::collect(cam, meter);
                    r.memory = watching.memory(cam.id()).map(|m| m.report());
                    tracing::info!(target: "status", "{}", r.line());
                    if let Some((publisher, _)) = &mqtt {
                        publisher.status(&r);
                    }
                    reports.push(r);
                }
                if let Some((publisher, _)) = &mqtt {
                    tracing::info!(target: "status", "{}", mqtt_line(&publisher.stats()));
                }
                let _ = reports_tx.send((Instant::now(), Arc::new(reports)));
                systemd.status(&camera_summary(&supervisor));
            }
        }
    }
    tracing::info!("Shutting down");
    systemd.stopping();
    // Generation first (it ends at its next token), then the cameras it reads from.
    watching.shutdown().await;
    supervisor.shutdown(STOP_BOUND).await;
    if let Some((_, connection)) = mqtt {
        // After the cameras: whatever they published last is flushed, then `offline`.
        connection.shutdown(MQTT_FLUSH_BOUND).await;
    }
    if let Some(path) = control_socket {
        let _ = std::fs::remove_file(path);
    }
    // Nothing loads engines in this loop yet; the sender is held for it until the run ends.
    drop(engines_tx);
    Ok(())
}

/// "3 cameras: 2 running, 1 retrying", for systemd's STATUS=.
pub(crate) fn camera_summary(supervisor: &Supervisor) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for cam in supervisor.cameras() {
        let state = cam.status().state.to_string();
        match counts.iter_mut().find(|(s, _)| *s == state) {
            Some((_, n)) => *n += 1,
            None => counts.push((state, 1)),
        }
    }
    let n = supervisor.cameras().len();
    let parts: Vec<String> = counts.iter().map(|(s, k)| format!("{k} {s}")).collect();
    format!(
        "{n} camera{}: {}",
        if n == 1 { "" } else { "s" },
        parts.join(", ")
    )
}

/// How long stopping a camera may take before it is abandoned.
const STOP_BOUND: Duration = Duration::from_secs(10);

/// At shutdown, time allowed to deliver what the outbox holds and `offline`.
const MQTT_FLUSH_BOUND: Duration = Duration::from_secs(3);

/// The publisher, the valid questions it receives, and its connection.
type Mqtt = (
    edgevlm::publish::Publisher,
    tokio::sync::mpsc::Receiver<edgevlm::publish::QueryRequest>,
    edgevlm::publish::Connection,
);

/// Starts the embedded broker (if configured) and the publisher.
pub(crate) fn start_mqtt(config: &Config) -> anyhow::Result<Option<Mqtt>> {
    use edgevlm::config::BrokerChoice;
    use edgevlm::publish::{self, Endpoint, StartOptions, Topics};
    let m = &config.mqtt;
    if !m.enabled {
        tracing::info!("MQTT disabled (mqtt.enabled = false)");
        return Ok(None);
    }
    let endpoint = match m.broker {
        BrokerChoice::Embedded => {
            let topics = Topics::new(m.topic_prefix.clone());
            edgevlm::broker::EmbeddedBroker::start(&m.embedded, &topics, &m.client_id)?
                .runtime_endpoint()
        }
        BrokerChoice::External { .. } => Endpoint::external(m)?,
    };
    let (publisher, queries, connection) = publish::start(
        m,
        endpoint,
        CameraDirectory::from_config(config),
        StartOptions::default(),
    );
    Ok(Some((publisher, queries, connection)))
}

/// One status line for the MQTT side.
pub(crate) fn mqtt_line(s: &edgevlm::publish::PublishStats) -> String {
    let mut line = format!(
        "mqtt: {} | outbox {}/{} | delivered {} | dropped {} (full) {} (chunks offline) | questions {} accepted, {} refused, {} busy",
        if s.connected {
            "connected"
        } else {
            "disconnected"
        },
        s.outbox.pending,
        s.outbox_capacity,
        s.outbox.delivered,
        s.outbox.dropped_full,
        s.outbox.stream_skipped,
        s.queries_accepted,
        s.queries_rejected,
        s.queries_busy,
    );
    if !s.connected
        && let Some(e) = &s.last_error
    {
        line.push_str(&format!(" | last error: {e}"));
    }
    line
}
