//! The runtime as a library: [`Runtime::start`] wires every stage of a configuration together
//! and returns a [`Running`] handle that reloads, reports, answers health checks and shuts down.
//! The `edgevlm run` binary adds only arguments, signals and systemd notifications; tests start
//! a whole runtime in process the same way.
//!
//! ```text
//! start: supervisor (cameras) ─► endpoints (metrics, control socket) ─► MQTT (broker, publisher,
//!        question intake) ─► the model loads in the background ─► watches + question service
//! one control loop: model loaded │ command (reload, health, shutdown) │ status tick
//! ```
//!
//! Cameras run from the first moment: the model can take minutes to load (a first TensorRT build),
//! and meanwhile status, metrics and the control socket answer, and questions wait (up to
//! [`LOAD_HOLD`]) for it. A reload during the load applies to the cameras at once; the watches
//! follow the reloaded cameras when the model is there.

mod changes;
pub mod preflight;
mod questions;
mod report;
mod watches;

pub use report::{camera_summary, mqtt_line};

use crate::base::Clock;
use crate::config::{BrokerChoice, Config};
use crate::engine::Engines;
use crate::evidence::Snapshotter;
use crate::publish::{self, Connection, Endpoint, Publisher, StartOptions, Topics};
use crate::query::{CameraDirectory, QueryService};
use crate::supervisor::{CameraState, RateMeter, ReloadSummary, Supervisor};
use crate::telemetry::{control, metrics};
use crate::watch::Outputs;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use watches::{Watches, load_model};

/// How long a question that arrives while the model loads may wait for it.
pub const LOAD_HOLD: Duration = Duration::from_secs(10);

/// How long a stop waits for a model load in progress to end.
const LOAD_WAIT: Duration = Duration::from_secs(30);

/// How long stopping a camera may take before it is abandoned.
const STOP_BOUND: Duration = Duration::from_secs(10);

/// At shutdown, time allowed to deliver what the outbox holds and `offline`.
const MQTT_FLUSH_BOUND: Duration = Duration::from_secs(3);

/// The `reason` of every camera's last retained status after a clean stop.
pub const STOPPED_REASON: &str = "edgevlm stopped";

/// Where the model stands (defined with the status it is reported in).
pub use crate::telemetry::control::ModelStatus;

/// What [`Runtime::start`] needs besides the configuration.
#[derive(Debug, Clone, Default)]
pub struct RuntimeOptions {
    /// The clock every stage reads (a manual one or `tokio::time::pause` in tests).
    pub clock: Clock,
}

/// Starts runtimes.
#[derive(Debug)]
pub struct Runtime;

/// A running runtime: every stage of a configuration, driven by one control task.
#[derive(Debug)]
pub struct Running {
    commands: mpsc::Sender<Command>,
    reports: watch::Receiver<control::Snapshot>,
    model: watch::Receiver<ModelStatus>,
    questions: watch::Receiver<Option<QueryService>>,
    outputs: Outputs,
    publisher: Option<Publisher>,
    task: JoinHandle<()>,
}

enum Command {
    Reload(Box<Config>, oneshot::Sender<ReloadSummary>),
    Health(oneshot::Sender<Result<(), String>>),
    Shutdown,
}

impl Runtime {
    /// Starts every stage of `config` (see the module documentation). Must be called inside a
    /// tokio runtime. `Err` for what cannot start at all: GStreamer, a listen address in use, an
    /// MQTT broker that cannot be set up.
    pub async fn start(mut config: Config, options: RuntimeOptions) -> anyhow::Result<Running> {
        use anyhow::Context;
        crate::ingest::init()?;
        // The model's own frame-size rule, if its manifest has one: cameras start before the model
        // loads, and the manifest alone is cheap to read. `[engine]` is read at start only, so a
        // reload keeps it.
        let model_frames = model_frames(&config);
        config.follow_model_frames(&model_frames);
        let clock = options.clock;
        tracing::info!(
            summary = %config.summary(),
            gstreamer = %crate::ingest::gstreamer_summary(),
            "Starting"
        );
        let supervisor = Supervisor::start_with(&config, clock.clone());
        // A file's watch worker starts when the model has loaded; until then (30 s at most) the
        // file waits for it, instead of reading on and sliding its first frames out of the window
        // unseen, more or fewer with the host's speed (docs/ARCHITECTURE.md, "Ingest").
        for view in supervisor.views() {
            if !view.config.uri.is_live() {
                view.window.expect_follower();
            }
        }
        let (views_tx, views_rx) = watch::channel(supervisor.views());
        // The first report exists before `start` returns (states, no rates yet); it also primes
        // the rate meters, so the first status line already has rates.
        let mut meters = HashMap::new();
        let mut first = control::Snapshot::starting("loading");
        first.taken = clock.now();
        first.cameras = Arc::new(report::collect(
            &supervisor,
            &mut meters,
            None,
            None,
            &clock,
            &|_| false,
            false,
        ));
        let (reports_tx, reports_rx) = watch::channel(first);
        let (model_tx, model_rx) = watch::channel(ModelStatus::Loading);
        let (mqtt, gate) = match start_mqtt(&config, &clock)? {
            Some((m, gate)) => (Some(m), gate),
            None => (None, None),
        };
        let publisher = mqtt.as_ref().map(|m| m.0.clone());
        let snapshots = match config.snapshots.enabled {
            true => Some(
                Snapshotter::start(config.snapshots, publisher.clone())
                    .context("snapshots: cannot start the encoder thread")?,
            ),
            false => None,
        };
        let (engines_tx, engines_rx) = watch::channel(None);
        let (memories_tx, memories_rx) = watch::channel(Vec::new());
        let mut servers = Vec::new();
        let metric_sources = metrics::Sources {
            views: views_rx,
            publisher: publisher.clone(),
            gate,
            engines: engines_rx,
            memories: memories_rx,
            snapshots: snapshots.clone(),
        };
        if let Some(addr) = config.telemetry.metrics_listen {
            let listener = metrics::bind(addr)
                .await
                .with_context(|| format!("telemetry.metrics_listen: cannot listen on {addr}"))?;
            tracing::info!(address = %addr, "Serving Prometheus metrics on /metrics");
            servers.push(tokio::spawn(metrics::serve(
                listener,
                metric_sources.clone(),
            )));
        }
        let control_socket = config.telemetry.control_socket.clone();
        if let Some(path) = &control_socket {
            let listener = control::bind(path)
                .await
                .map_err(|e| anyhow::anyhow!("telemetry.control_socket: {e}"))?;
            servers.push(tokio::spawn(control::serve(listener, reports_rx.clone())));
        }
        let (service_tx, service_rx) = watch::channel(None);
        let questions = service_rx.clone();
        let (mqtt_publisher, connection) = match mqtt {
            Some((p, questions, connection)) => {
                servers.push(tokio::spawn(questions::serve(
                    questions,
                    service_rx,
                    p.clone(),
                    clock.clone(),
                )));
                (Some(p), Some(connection))
            }
            None => (None, None),
        };
        if let Some(p) = &mqtt_publisher {
            if config.home_assistant.discovery {
                p.enable_discovery(&config.home_assistant.discovery_prefix);
            }
            for camera in &config.cameras {
                introduce(p, &camera.id);
            }
        }
        let mut outputs = Outputs::new(mqtt_publisher.clone());
        if let Some(s) = snapshots.clone() {
            outputs = outputs.with_snapshots(s);
        }
        let http_cameras = Arc::new(std::sync::Mutex::new(CameraDirectory::from_config(&config)));
        let history = Arc::new(crate::http::History::new(config.http.history));
        if let Some((listener, tokens)) = crate::http::bind(&config.http)
            .await
            .map_err(|e| anyhow::anyhow!(e))?
        {
            servers.push(tokio::spawn(
                history
                    .clone()
                    .follow(outputs.narrations.subscribe(), outputs.events.subscribe()),
            ));
            let sources = crate::http::Sources {
                reports: reports_rx.clone(),
                model: model_rx.clone(),
                service: questions.clone(),
                cameras: http_cameras.clone(),
                limits: crate::query::QueryLimits {
                    max_bytes: config.mqtt.query_max_bytes,
                    question_max_chars: config.mqtt.question_max_chars,
                    max_tokens: crate::query::MAX_TOKENS_LIMIT,
                },
                snapshots: snapshots.clone(),
                history: history.clone(),
                metrics: metric_sources,
                narrations: outputs.narrations.clone(),
                events: outputs.events.clone(),
            };
            servers.push(tokio::spawn(crate::http::serve(
                listener,
                tokens,
                config.http.clone(),
                sources,
            )));
        }
        let (commands, commands_rx) = mpsc::channel(8);
        let model_config = config.clone();
        let load = tokio::spawn(async move { load_model(&model_config).await });
        let control = Control {
            config,
            clock: clock.clone(),
            supervisor,
            watches: None,
            outputs: outputs.clone(),
            publisher: mqtt_publisher,
            connection,
            meters,
            views: views_tx,
            reports: reports_tx,
            model: model_tx,
            engines: engines_tx,
            memories: memories_tx,
            service: service_tx,
            control_socket,
            servers,
            changes: changes::Changes::new(),
            http_cameras,
            history,
        };
        let task = tokio::spawn(control.run(load, commands_rx));
        Ok(Running {
            commands,
            reports: reports_rx,
            model: model_rx,
            questions,
            outputs,
            publisher,
            task,
        })
    }
}

impl Running {
    /// Applies a new configuration (already validated): cameras added, removed or changed are
    /// started, stopped or restarted, the others are not touched; `[engine]` and `[mqtt]` are read
    /// at start only. Returns what changed.
    pub async fn reload(&self, config: Config) -> Result<ReloadSummary, String> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Reload(Box::new(config), tx))
            .await
            .map_err(|_| "the runtime has stopped".to_string())?;
        rx.await.map_err(|_| "the runtime has stopped".to_string())
    }

    /// `Ok` while every camera task and watch worker is alive and the control task answers.
    pub async fn healthy(&self) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Health(tx)).await.is_err() {
            return Err("the runtime's control task has ended".into());
        }
        rx.await
            .unwrap_or_else(|_| Err("the runtime's control task has ended".into()))
    }

    /// The latest camera reports and model state (refreshed every `runtime.status_interval_secs`).
    pub fn reports(&self) -> watch::Receiver<control::Snapshot> {
        self.reports.clone()
    }

    /// The model's state; changes once, when the load ends.
    pub fn model(&self) -> watch::Receiver<ModelStatus> {
        self.model.clone()
    }

    /// The question service once the model is loaded (`None` until then): what MQTT questions
    /// go to, for in-process askers (`edgevlm eval`, tests).
    pub fn questions(&self) -> watch::Receiver<Option<QueryService>> {
        self.questions.clone()
    }

    /// Every narration and change event, for in-process listeners.
    pub fn outputs(&self) -> &Outputs {
        &self.outputs
    }

    /// The MQTT publisher, when MQTT is on.
    pub fn publisher(&self) -> Option<&Publisher> {
        self.publisher.as_ref()
    }

    /// Stops everything in order: generation (it ends at its next token), the cameras it reads
    /// from, then MQTT (what the cameras published last is flushed, then `offline`), and removes
    /// the control socket. A model still loading is waited for (at most 30 s): exiting under it crashed.
    pub async fn shutdown(self) {
        let _ = self.commands.send(Command::Shutdown).await;
        let _ = self.task.await;
    }
}

/// The state the control task owns.
struct Control {
    config: Config,
    clock: Clock,
    supervisor: Supervisor,
    watches: Option<Watches>,
    outputs: Outputs,
    publisher: Option<Publisher>,
    connection: Option<Connection>,
    meters: HashMap<String, RateMeter>,
    views: watch::Sender<Vec<crate::supervisor::CameraView>>,
    reports: watch::Sender<control::Snapshot>,
    model: watch::Sender<ModelStatus>,
    engines: watch::Sender<Option<Arc<Engines>>>,
    memories: watch::Sender<Vec<Arc<crate::memory::CameraMemory>>>,
    service: watch::Sender<Option<crate::query::QueryService>>,
    control_socket: Option<PathBuf>,
    servers: Vec<JoinHandle<()>>,
    /// Camera state changes, published when they happen.
    changes: changes::Changes,
    /// The cameras HTTP questions may name.
    http_cameras: Arc<std::sync::Mutex<CameraDirectory>>,
    /// Recent narrations and events, for HTTP.
    history: Arc<crate::http::History>,
}

type Loaded = Result<(Arc<Engines>, usize), String>;

/// Gives the allocator's free pages back to the system, on a blocking thread
/// (`runtime.release_memory_secs`, `base::memory`).
fn release_memory() {
    tokio::task::spawn_blocking(|| {
        let before = crate::base::memory::resident_bytes();
        if let Some(took) = crate::base::memory::release_free_memory() {
            let after = crate::base::memory::resident_bytes();
            tracing::debug!(
                allocator = crate::base::memory::ALLOCATOR,
                rss_before = before,
                rss_after = after,
                took_us = took.as_micros() as u64,
                "Returned free memory to the system"
            );
        }
    });
}

impl Control {
    async fn run(mut self, mut load: JoinHandle<Loaded>, mut commands: mpsc::Receiver<Command>) {
        let mut ticker = tokio::time::interval(self.config.runtime.status_interval);
        ticker.tick().await;
        let mut release = self
            .config
            .runtime
            .release_memory
            .map(tokio::time::interval);
        let mut loading = true;
        self.changes.follow(&self.supervisor);
        loop {
            tokio::select! {
                loaded = &mut load, if loading => {
                    loading = false;
                    let loaded = loaded.unwrap_or_else(|e| Err(format!("loading the model crashed: {e}")));
                    self.attach(loaded).await;
                }
                command = commands.recv() => match command {
                    Some(Command::Reload(config, done)) => {
                        let _ = done.send(self.reload(*config).await);
                        if self.config.runtime.status_interval != ticker.period() {
                            ticker = tokio::time::interval(self.config.runtime.status_interval);
                            ticker.tick().await;
                        }
                        if self.config.runtime.release_memory != release.as_ref().map(|r| r.period()) {
                            release = self.config.runtime.release_memory.map(tokio::time::interval);
                        }
                    }
                    Some(Command::Health(answer)) => {
                        let health = self.supervisor.healthy().and_then(|()| {
                            self.watches.as_ref().map_or(Ok(()), Watches::healthy)
                        });
                        let _ = answer.send(health);
                    }
                    Some(Command::Shutdown) | None => break,
                },
                _ = ticker.tick() => self.report(),
                _ = async { release.as_mut().expect("guarded").tick().await }, if release.is_some() => {
                    release_memory();
                }
                changed = self.changes.next() => self.report_changed(&changed),
            }
        }
        if loading {
            // Leaving the load running while the process exits crashed it (ONNX Runtime's
            // globals are destroyed under a session being created): the stop waits for it.
            tracing::info!(
                bound_secs = LOAD_WAIT.as_secs(),
                "Shutting down before the model finished loading; waiting for the load to end"
            );
            if tokio::time::timeout(LOAD_WAIT, &mut load).await.is_err() {
                tracing::warn!("The model load did not end in time; stopping anyway");
            }
        } else {
            tracing::info!("Shutting down");
        }
        self.stop().await;
    }

    /// The model load ended: start the watches and the question service on it (or without it).
    async fn attach(&mut self, loaded: Loaded) {
        let _ = self
            .engines
            .send(loaded.as_ref().ok().map(|(e, _)| e.clone()));
        let status = match &loaded {
            Ok(_) => ModelStatus::Ready,
            Err(why) => ModelStatus::Unavailable(why.clone()),
        };
        let line = report::model_state(&loaded);
        self.reports.send_modify(|s| s.model = line);
        let mut watches = Watches::new(
            &self.config,
            loaded,
            self.outputs.clone(),
            self.clock.clone(),
        );
        watches.sync(&self.supervisor).await;
        let _ = self.memories.send(watches.memories());
        let _ = self.service.send(Some(watches.service().clone()));
        self.watches = Some(watches);
        let _ = self.model.send(status);
    }

    async fn reload(&mut self, mut new: Config) -> ReloadSummary {
        new.follow_model_frames(&self.config.vision);
        // `[engine]` and `[mqtt]` are read at start only.
        new.engine = self.config.engine.clone();
        new.mqtt = self.config.mqtt.clone();
        let s = self.supervisor.reload(&new, STOP_BOUND).await;
        self.changes.follow(&self.supervisor);
        if let Some(w) = &mut self.watches {
            w.replan(&new);
            w.sync(&self.supervisor).await;
            let _ = self.memories.send(w.memories());
        }
        if let Some(publisher) = &self.publisher {
            publisher.set_cameras(CameraDirectory::from_config(&new));
            for gone in &s.removed {
                publisher.forget(gone);
            }
            for added in &s.added {
                introduce(publisher, added);
            }
            // A restarted camera's watch starts afresh: an event in progress is not continued.
            for restarted in &s.restarted {
                publisher.activity(restarted, false);
            }
        }
        if let Some(snapshots) = &self.outputs.snapshots {
            for gone in &s.removed {
                snapshots.forget(gone);
            }
        }
        *self.http_cameras.lock().unwrap_or_else(|p| p.into_inner()) =
            CameraDirectory::from_config(&new);
        for gone in &s.removed {
            self.history.forget(gone);
        }
        // `[snapshots]`, `[home_assistant]` and `[http]` are read at start only, like `[engine]`
        // and `[mqtt]`.
        new.snapshots = self.config.snapshots;
        new.home_assistant = self.config.home_assistant.clone();
        new.http = self.config.http.clone();
        let _ = self.views.send(self.supervisor.views());
        tracing::info!(
            added = ?s.added, removed = ?s.removed, restarted = ?s.restarted,
            unchanged = s.unchanged.len(), "Configuration reloaded"
        );
        self.config = new;
        self.report();
        s
    }

    /// Takes every camera's report: logged, published as retained status, and kept for the
    /// control socket.
    fn report(&mut self) {
        self.take_reports(&|_| true, true);
    }

    /// A camera's state changed: its report is logged and published now, every report is kept.
    fn report_changed(&mut self, changed: &std::collections::BTreeSet<String>) {
        self.take_reports(&|id| changed.contains(id), false);
    }

    fn take_reports(&mut self, emit: &dyn Fn(&str) -> bool, mqtt_line: bool) {
        let cameras = report::collect(
            &self.supervisor,
            &mut self.meters,
            self.watches.as_ref(),
            self.publisher.as_ref(),
            &self.clock,
            emit,
            mqtt_line,
        );
        let taken = self.clock.now();
        self.reports.send_modify(|s| {
            s.taken = taken;
            s.cameras = Arc::new(cameras);
        });
    }

    async fn stop(mut self) {
        // Generation first (it ends at its next token), then the cameras it reads from.
        let _ = self.service.send(None);
        if let Some(w) = &mut self.watches {
            w.shutdown().await;
        }
        if let Some(publisher) = &self.publisher {
            // The retained status tells the truth after a clean stop: every camera `stopped`,
            // sent before `offline` (docs/MQTT.md, "Status").
            let reports = report::collect(
                &self.supervisor,
                &mut self.meters,
                self.watches.as_ref(),
                None,
                &self.clock,
                &|_| false,
                false,
            );
            for mut r in reports {
                r.state = CameraState::Stopped;
                r.reason = Some(STOPPED_REASON.into());
                publisher.status(&r);
                publisher.activity(&r.camera, false);
            }
        }
        self.supervisor.shutdown(STOP_BOUND).await;
        if let Some(connection) = self.connection {
            // After the cameras: whatever they published last is flushed, then `offline`.
            connection.shutdown(MQTT_FLUSH_BOUND).await;
        }
        for s in self.servers {
            s.abort();
        }
        if let Some(path) = self.control_socket {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The publisher, the valid questions it receives, and its connection.
type Mqtt = (Publisher, mpsc::Receiver<publish::QueryRequest>, Connection);

/// What the embedded broker's gate counts (`None` with an external broker).
type GateCounters = Option<Arc<crate::broker::GateCounters>>;

/// Starts the embedded broker (if configured) and the publisher.
/// A camera's first retained state: no activity yet, and its Home Assistant device when
/// discovery is on.
fn introduce(publisher: &Publisher, camera: &str) {
    publisher.activity(camera, false);
    publisher.announce(camera);
}

fn start_mqtt(config: &Config, clock: &Clock) -> anyhow::Result<Option<(Mqtt, GateCounters)>> {
    let m = &config.mqtt;
    if !m.enabled {
        tracing::info!("MQTT disabled (mqtt.enabled = false)");
        return Ok(None);
    }
    let (endpoint, gate, claim) = match &m.broker {
        BrokerChoice::Embedded => {
            let topics = Topics::new(m.topic_prefix.clone());
            let broker = crate::broker::EmbeddedBroker::start(&m.embedded, &topics, &m.client_id)?;
            (broker.runtime_endpoint(), Some(broker.counters()), None)
        }
        BrokerChoice::External { host, port, .. } => {
            // An embedded broker is this process's own; an external one is shared with any
            // other edgevlm on the host, which must not use the same client id.
            let about = format!("state_dir {}", config.runtime.state_dir.display());
            let claim = publish::claim(
                &std::env::temp_dir(),
                &format!("{host}:{port}"),
                &m.client_id,
                &about,
            )
            .map_err(|e| anyhow::anyhow!(e))?;
            (Endpoint::external(m)?, None, Some(claim))
        }
    };
    let (publisher, questions, mut connection) = publish::start(
        m,
        endpoint,
        CameraDirectory::from_config(config),
        StartOptions {
            clock: clock.clone(),
            ..StartOptions::default()
        },
    );
    if let Some(claim) = claim {
        connection = connection.hold(claim);
    }
    Ok(Some(((publisher, questions, connection), gate)))
}

/// The frame rules of the configured model's manifest (`VisionSpec::frame_rules`: a
/// transformers-native VideoLLaMA3's processor rule, SmolVLM2's square images), over `[vision]`.
/// A manifest that cannot be read here is reported by the model load itself.
fn model_frames(config: &Config) -> crate::config::VisionConfig {
    // Only a regular file is read here: anything else (a FIFO, a device) could block the start,
    // which must keep serving status while the model loads.
    let path = config.engine.model_dir.join("manifest.toml");
    if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
        return config.vision;
    }
    let Ok(manifest) = crate::engine::Manifest::load(&config.engine.model_dir) else {
        return config.vision;
    };
    let rules = manifest.vision.frame_rules(config.vision);
    if let Some(p) = rules.processor {
        tracing::info!(
            min_pixels = p.min_pixels,
            max_pixels = p.max_pixels,
            max_frames = p.max_frames,
            "Frame sizes follow the model's processor"
        );
    }
    if let Some(s) = rules.square {
        tracing::info!(
            side = s.side,
            token_px = s.token_px,
            "Frames are the model's square images"
        );
    }
    rules
}
