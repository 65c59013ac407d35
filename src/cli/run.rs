//! `edgevlm run`: the main loop (cameras, telemetry, MQTT, signals).

use crate::cli::watch::{Watching, load_model};
use anyhow::Context;
use edgevlm::config::Config;
use edgevlm::memory::Outputs;
use edgevlm::publish::{CameraDirectory, ErrorCode, QueryError};
use edgevlm::supervisor::{CameraReport, RateMeter, Supervisor};
use edgevlm::telemetry::{Systemd, control, metrics};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) async fn run(path: PathBuf, mut config: Config) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    edgevlm::ingest::init()?;
    // The model's own frame-size rule, if its manifest has one: cameras start before the model
    // loads, and the manifest alone is cheap to read. `[engine]` is read at start only, so a
    // reload keeps it.
    config.vision.processor = model_processor(&config);
    let processor = config.vision.processor;
    tracing::info!(summary = %config.summary(), "Starting");
    let mut supervisor = Supervisor::start(&config);
    let (views_tx, views_rx) = tokio::sync::watch::channel(supervisor.views());
    let (reports_tx, reports_rx) =
        tokio::sync::watch::channel(control::Snapshot::starting("loading"));
    let (mqtt, mut questions) = match start_mqtt(&config)? {
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
    let systemd = Systemd::from_env();
    let mut meters: HashMap<String, RateMeter> = HashMap::new();
    for cam in supervisor.cameras() {
        // Prime the meters so the first status line already has rates.
        let meter = meters.entry(cam.id().to_string()).or_default();
        meter.rates(Instant::now(), cam.shared.counters.snapshot());
    }
    let mut ticker = tokio::time::interval(config.runtime.status_interval);
    ticker.tick().await;
    // Installed before the model loads: SIGTERM then stops the start cleanly, and a SIGHUP waits
    // here (the stream keeps it) instead of killing the process by its default action.
    let mut sigterm = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut sighup = signal(SignalKind::hangup()).context("cannot watch SIGHUP")?;
    let publisher = mqtt.as_ref().map(|(p, _)| p);
    // The endpoints and the status reports keep answering while the model loads (TensorRT can
    // take minutes the first time).
    systemd.status(&format!(
        "loading the model; {}",
        camera_summary(&supervisor)
    ));
    let load = load_model(&config);
    tokio::pin!(load);
    let loading = Instant::now();
    let mut held = std::collections::VecDeque::new();
    let mut expire = tokio::time::interval(Duration::from_millis(250));
    let model = loop {
        tokio::select! {
            model = &mut load => break Some(model),
            // A short load answers them afterwards; nobody waits minutes (a first TensorRT build).
            Some(q) = next_question(&mut questions) => {
                let room = questions.as_ref().map_or(0, |q| q.max_capacity());
                if held.len() < room {
                    held.push_back(q);
                } else if let Some(publisher) = publisher {
                    refuse_while_loading(publisher, &q, loading);
                }
            }
            _ = expire.tick() => {
                while let Some(q) = held.pop_front_if(|q| q.received.elapsed() >= LOAD_HOLD) {
                    if let Some(publisher) = publisher {
                        refuse_while_loading(publisher, &q, loading);
                    }
                }
            }
            _ = tokio::signal::ctrl_c() => break None,
            _ = sigterm.recv() => break None,
            _ = ticker.tick() => {
                let cameras = Arc::new(collect_reports(&supervisor, &mut meters, None, publisher));
                reports_tx.send_modify(|s| {
                    s.taken = Instant::now();
                    s.cameras = cameras;
                });
                systemd.status(&format!("loading the model; {}", camera_summary(&supervisor)));
            }
        }
    };
    let Some(model) = model else {
        tracing::info!("Shutting down before the model finished loading");
        systemd.stopping();
        supervisor.shutdown(STOP_BOUND).await;
        if let Some((_, connection)) = mqtt {
            connection.shutdown(MQTT_FLUSH_BOUND).await;
        }
        if let Some(path) = control_socket {
            let _ = std::fs::remove_file(path);
        }
        return Ok(());
    };
    let _ = engines_tx.send(model.as_ref().ok().map(|(e, _)| e.clone()));
    reports_tx.send_modify(|s| s.model = model_state(&model));
    let outputs = Outputs::new(publisher.cloned());
    let mut watching = Watching::new(&config, model, outputs);
    watching.sync(&supervisor).await;
    let _ = memories_tx.send(watching.memories());
    if let (Some(questions), Some(publisher)) = (questions, publisher) {
        tokio::spawn(edgevlm::query::serve_mqtt(
            watching.service().clone(),
            held.into(),
            questions,
            publisher.clone(),
        ));
    }
    systemd.ready(&camera_summary(&supervisor));
    // Without WatchdogSec the tick still runs (cheaply) so the loop has one shape.
    let mut watchdog = tokio::time::interval(
        systemd
            .watchdog_interval()
            .unwrap_or(Duration::from_secs(3600)),
    );
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
                Ok(mut new) => {
                    new.vision.processor = processor;
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
                let cameras = Arc::new(collect_reports(&supervisor, &mut meters, Some(&watching), publisher));
                reports_tx.send_modify(|s| {
                    s.taken = Instant::now();
                    s.cameras = cameras;
                });
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
    Ok(())
}

/// How long a question that arrives while the model loads may wait for it.
const LOAD_HOLD: Duration = Duration::from_secs(10);

/// `busy`, for a question that the loading model cannot take.
fn refuse_while_loading(
    publisher: &edgevlm::publish::Publisher,
    q: &edgevlm::publish::QueryRequest,
    loading: Instant,
) {
    publisher.count_busy();
    publisher.answer_error(
        &q.reply,
        QueryError::new(
            ErrorCode::Busy,
            format!(
                "the model is still loading ({:.0} s so far; a first TensorRT start can take \
                 minutes); ask again shortly",
                loading.elapsed().as_secs_f64()
            ),
        ),
    );
}

/// The next valid question, or never when MQTT is off.
async fn next_question(
    questions: &mut Option<tokio::sync::mpsc::Receiver<edgevlm::publish::QueryRequest>>,
) -> Option<edgevlm::publish::QueryRequest> {
    match questions {
        Some(q) => q.recv().await,
        None => std::future::pending().await,
    }
}

/// The model's line in `edgevlm status`.
fn model_state(model: &Result<(Arc<edgevlm::engine::Engines>, usize), String>) -> String {
    match model {
        Ok((engines, budget)) => {
            let [vision, _, decoder] = engines.providers();
            format!(
                "ready ({} from {}, vision on {}, LLM on {}, loaded in {:.1} s, {budget} positions for footage)",
                engines.manifest().family,
                engines.manifest().dir.display(),
                vision.name(),
                decoder.name(),
                engines.load_time().as_secs_f64()
            )
        }
        Err(why) => format!("unavailable: {why}"),
    }
}

/// Each camera's report, logged and published as a retained status message.
fn collect_reports(
    supervisor: &Supervisor,
    meters: &mut HashMap<String, RateMeter>,
    watching: Option<&Watching>,
    publisher: Option<&edgevlm::publish::Publisher>,
) -> Vec<CameraReport> {
    let mut reports = Vec::with_capacity(supervisor.cameras().len());
    for cam in supervisor.cameras() {
        let meter = meters.entry(cam.id().to_string()).or_default();
        let mut r = CameraReport::collect(cam, meter);
        r.memory = watching
            .and_then(|w| w.memory(cam.id()))
            .map(|m| m.report());
        tracing::info!(target: "status", "{}", r.line());
        if let Some(publisher) = publisher {
            publisher.status(&r);
        }
        reports.push(r);
    }
    if let Some(publisher) = publisher {
        tracing::info!(target: "status", "{}", mqtt_line(&publisher.stats()));
    }
    reports
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

/// `[vision.processor]` of the configured model's manifest (transformers-native VideoLLaMA3
/// exports), as the frame-size rule of every camera. A manifest that cannot be read here is
/// reported by the model load itself.
fn model_processor(config: &Config) -> Option<edgevlm::config::ProcessorGeometry> {
    // Only a regular file is read here: anything else (a FIFO, a device) could block the start,
    // which must keep serving status while the model loads.
    let path = config.engine.model_dir.join("manifest.toml");
    if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let manifest = edgevlm::engine::Manifest::load(&config.engine.model_dir).ok()?;
    let p = manifest.vision.processor?;
    tracing::info!(
        min_pixels = p.min_pixels,
        max_pixels = p.max_pixels,
        max_frames = p.max_frames,
        "Frame sizes follow the model's processor"
    );
    Some(p.geometry())
}
