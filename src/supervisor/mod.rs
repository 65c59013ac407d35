//! Supervision: one task per camera that keeps its pipeline running through failures.
//!
//! A camera that errors, ends or stalls is restarted with exponential backoff plus jitter, without
//! touching the other cameras; each keeps a status (`starting|running|retrying|stopped`) with the
//! last retry reason. Fatal problems (a missing hardware element, a broken template) and the end
//! of a file stop the camera instead of retrying forever.

mod report;

pub use report::{CameraReport, RateMeter};

use crate::base::{Backoff, Clock};
use crate::config::{CameraConfig, Config, VisionConfig};
use crate::ingest::{CameraShared, IngestError, Session, SessionEvent};
use crate::prune::CameraPrune;
use crate::ring::Window;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Lifecycle state of a camera.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CameraState {
    /// The pipeline is being built or is waiting for its first frame.
    Starting,
    /// Frames are arriving.
    Running,
    /// The last session failed; the next attempt waits for the backoff delay.
    Retrying,
    /// Not running: disabled, finished, fatally misconfigured, or shut down.
    Stopped,
}

impl std::fmt::Display for CameraState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CameraState::Starting => "starting",
            CameraState::Running => "running",
            CameraState::Retrying => "retrying",
            CameraState::Stopped => "stopped",
        })
    }
}

/// The published status of a camera.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CameraStatus {
    /// Current state.
    pub state: CameraState,
    /// Why the camera is retrying or stopped (the last failure), if it is.
    pub reason: Option<String>,
    /// Restarts so far.
    pub restarts: u64,
    /// When the state last changed.
    pub since: Instant,
}

impl CameraStatus {
    fn new(state: CameraState, reason: Option<String>, since: Instant) -> Self {
        CameraStatus {
            state,
            reason,
            restarts: 0,
            since,
        }
    }
}

/// What can be read about a camera from outside its task; cheap to clone (for reporters).
#[derive(Debug, Clone)]
pub struct CameraView {
    /// The camera's configuration.
    pub config: CameraConfig,
    /// Its sampled frames.
    pub window: Arc<Window>,
    /// Counters, geometry and source caps.
    pub shared: Arc<CameraShared>,
    status: watch::Receiver<CameraStatus>,
}

impl CameraView {
    /// The camera id.
    pub fn id(&self) -> &str {
        &self.config.id
    }

    /// The current status.
    pub fn status(&self) -> CameraStatus {
        self.status.borrow().clone()
    }

    /// A receiver that sees every status change.
    pub fn watch(&self) -> watch::Receiver<CameraStatus> {
        self.status.clone()
    }
}

/// One supervised camera: its view plus control of its task.
#[derive(Debug)]
pub struct CameraHandle {
    view: CameraView,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl std::ops::Deref for CameraHandle {
    type Target = CameraView;

    fn deref(&self) -> &CameraView {
        &self.view
    }
}

impl CameraHandle {
    /// A clone of the camera's view.
    pub fn view(&self) -> CameraView {
        self.view.clone()
    }

    /// Stops this camera's task and waits (at most `bound`) for its pipeline to reach Null.
    async fn stop(&mut self, bound: Duration) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take()
            && tokio::time::timeout(bound, task).await.is_err()
        {
            tracing::warn!(camera = %self.view.config.id, bound_secs = bound.as_secs_f64(), "Camera did not stop in time");
        }
    }
}

/// All cameras of a configuration, each in its own task.
#[derive(Debug)]
pub struct Supervisor {
    cameras: Vec<CameraHandle>,
    vision: VisionConfig,
    clock: Clock,
}

/// What a configuration reload changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadSummary {
    /// Cameras started because they are new.
    pub added: Vec<String>,
    /// Cameras stopped because they are gone.
    pub removed: Vec<String>,
    /// Cameras restarted because their configuration changed.
    pub restarted: Vec<String>,
    /// Cameras left running untouched.
    pub unchanged: Vec<String>,
}

impl Supervisor {
    /// Starts every enabled camera on the system clock. Must be called inside a tokio runtime.
    pub fn start(config: &Config) -> Supervisor {
        Supervisor::start_with(config, Clock::system())
    }

    /// Starts every enabled camera; status times, the frame-age watchdog and the backoff follow
    /// `clock`. Must be called inside a tokio runtime.
    pub fn start_with(config: &Config, clock: Clock) -> Supervisor {
        let cameras = config
            .cameras
            .iter()
            .map(|cfg| spawn_camera(cfg.clone(), config.vision, clock.clone()))
            .collect();
        Supervisor {
            cameras,
            vision: config.vision,
            clock,
        }
    }

    /// Applies a new (already validated) configuration: cameras that were added, removed or
    /// changed are started, stopped or restarted; the others keep running untouched.
    pub async fn reload(&mut self, config: &Config, bound: Duration) -> ReloadSummary {
        let mut summary = ReloadSummary::default();
        // The geometry of every camera follows the vision budget: a new budget restarts them all.
        let vision_changed = config.vision != self.vision;
        self.vision = config.vision;
        let mut old: Vec<CameraHandle> = std::mem::take(&mut self.cameras);
        for cfg in &config.cameras {
            match old.iter().position(|c| c.view.config.id == cfg.id) {
                Some(i) if old[i].view.config == *cfg && !vision_changed => {
                    summary.unchanged.push(cfg.id.clone());
                    self.cameras.push(old.remove(i));
                }
                Some(i) => {
                    let mut previous = old.remove(i);
                    previous.stop(bound).await;
                    summary.restarted.push(cfg.id.clone());
                    self.cameras
                        .push(spawn_camera(cfg.clone(), config.vision, self.clock.clone()));
                }
                None => {
                    summary.added.push(cfg.id.clone());
                    self.cameras
                        .push(spawn_camera(cfg.clone(), config.vision, self.clock.clone()));
                }
            }
        }
        for mut gone in old {
            gone.stop(bound).await;
            summary.removed.push(gone.view.config.id.clone());
        }
        summary
    }

    /// `Err` with the reason when a camera task crashed or is stuck (no heartbeat for
    /// [`HEARTBEAT_LIMIT`]): the systemd watchdog is then no longer fed and the service restarts.
    pub fn healthy(&self) -> Result<(), String> {
        for c in &self.cameras {
            let Some(task) = &c.task else { continue };
            let state = c.status().state;
            if task.is_finished() && state != CameraState::Stopped {
                return Err(format!("camera {}: task ended in state {state}", c.id()));
            }
            let quiet = c.shared.since_heartbeat();
            if !task.is_finished() && quiet > HEARTBEAT_LIMIT {
                return Err(format!(
                    "camera {}: task stuck for {:.0} s in state {state}",
                    c.id(),
                    quiet.as_secs_f64()
                ));
            }
        }
        Ok(())
    }

    /// Every camera, in configuration order.
    pub fn cameras(&self) -> &[CameraHandle] {
        &self.cameras
    }

    /// Views of every camera, for reporters that outlive a reload.
    pub fn views(&self) -> Vec<CameraView> {
        self.cameras.iter().map(CameraHandle::view).collect()
    }

    /// The camera called `id`.
    pub fn camera(&self, id: &str) -> Option<&CameraHandle> {
        self.cameras.iter().find(|c| c.id() == id)
    }

    /// Stops every camera and waits (at most `bound`) for their pipelines to reach Null.
    pub async fn shutdown(mut self, bound: Duration) {
        for c in &self.cameras {
            let _ = c.stop.send(true);
        }
        let tasks: Vec<_> = self
            .cameras
            .iter_mut()
            .filter_map(|c| c.task.take())
            .collect();
        let all = futures_util::future::join_all(tasks);
        if tokio::time::timeout(bound, all).await.is_err() {
            tracing::warn!(
                bound_secs = bound.as_secs_f64(),
                "Cameras did not stop in time"
            );
        }
    }
}

fn spawn_camera(cfg: CameraConfig, vision: VisionConfig, clock: Clock) -> CameraHandle {
    let (stop, shutdown) = watch::channel(false);
    let shared = Arc::new(CameraShared::new(&cfg.id, cfg.size, &vision));
    // One spare slot: timestamps jitter around the window's edge.
    let window = Arc::new(Window::new(cfg.window, cfg.window_frames() + 1));
    let initial = if cfg.enabled {
        CameraStatus::new(CameraState::Starting, None, clock.now())
    } else {
        CameraStatus::new(
            CameraState::Stopped,
            Some("disabled in the configuration".into()),
            clock.now(),
        )
    };
    let (tx, rx) = watch::channel(initial);
    let view = CameraView {
        config: cfg,
        window,
        shared,
        status: rx,
    };
    if !view.config.enabled {
        return CameraHandle {
            view,
            stop,
            task: None,
        };
    }
    let tx = Arc::new(tx);
    let camera = CameraTask {
        prune: CameraPrune::new(&view.config.id, view.config.prune),
        cfg: view.config.clone(),
        vision,
        shared: view.shared.clone(),
        window: view.window.clone(),
        status: tx.clone(),
        shutdown,
        clock: clock.clone(),
    };
    let id = view.config.id.clone();
    let task = tokio::spawn(async move {
        // A bug in one camera's task must not take the process or the other cameras down.
        if let Err(e) = tokio::spawn(camera.run()).await
            && e.is_panic()
        {
            tracing::error!(camera = %id, "Camera task crashed; camera stopped");
            tx.send_modify(|s| {
                s.state = CameraState::Stopped;
                s.reason = Some("internal error: the camera task crashed (see log)".into());
                s.since = clock.now();
            });
        }
    });
    CameraHandle {
        view,
        stop,
        task: Some(task),
    }
}

/// How one session ended.
enum Outcome {
    /// Shutdown was requested.
    Shutdown,
    /// Nothing to retry: a file ended, or the pipeline cannot work on this machine.
    Finished(String),
    /// Retry after a backoff.
    Failed(String),
}

struct CameraTask {
    /// DiffFP, applied to every sampled frame before it enters the window.
    prune: CameraPrune,
    cfg: CameraConfig,
    vision: VisionConfig,
    shared: Arc<CameraShared>,
    window: Arc<Window>,
    status: Arc<watch::Sender<CameraStatus>>,
    shutdown: watch::Receiver<bool>,
    clock: Clock,
}

/// How often the frame-age watchdog looks.
const WATCHDOG_TICK: Duration = Duration::from_millis(250);
/// Frames a file camera may be ahead of its watch worker before it waits.
const PACE_LAG: u64 = 2;
/// A follower that has not asked for this long is gone (or busy with one long step): files are
/// not held back for it.
const PACE_ALIVE: Duration = Duration::from_secs(30);

/// A camera task silent for this long is stuck (a blocking call that never returns).
pub const HEARTBEAT_LIMIT: Duration = Duration::from_secs(60);

impl CameraTask {
    fn set_state(&self, state: CameraState, reason: Option<String>) {
        self.status.send_modify(|s| {
            if s.state != state {
                s.since = self.clock.now();
            }
            s.state = state;
            s.reason = reason;
        });
    }

    async fn run(mut self) {
        let id = self.cfg.id.clone();
        let seed = id
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let mut backoff = Backoff::new(self.cfg.retry_initial, self.cfg.retry_max, seed);
        let source = self.cfg.uri.redacted();
        tracing::info!(camera = %id, source = %source, pipeline = %self.cfg.pipeline, "Camera starting");
        loop {
            if *self.shutdown.borrow() {
                break;
            }
            let started = self.clock.now();
            match self.run_once().await {
                Outcome::Shutdown => break,
                Outcome::Finished(reason) => {
                    tracing::warn!(camera = %id, reason = %reason, "Camera stopped");
                    self.set_state(CameraState::Stopped, Some(reason));
                    return;
                }
                Outcome::Failed(reason) => {
                    // A camera that ran for a while before failing starts again from a short delay.
                    if self.clock.since(started) >= self.cfg.retry_max.max(Duration::from_secs(10))
                    {
                        backoff.reset();
                    }
                    let delay = backoff.next_delay();
                    crate::ring::Counters::bump(&self.shared.counters.restarts);
                    tracing::warn!(
                        camera = %id,
                        reason = %reason,
                        retry_in_secs = format!("{:.1}", delay.as_secs_f64()),
                        "Camera failed; retrying"
                    );
                    self.status.send_modify(|s| {
                        s.restarts += 1;
                        s.state = CameraState::Retrying;
                        s.reason = Some(reason);
                        s.since = self.clock.now();
                    });
                    if self.wait(delay).await {
                        break;
                    }
                }
            }
        }
        self.set_state(CameraState::Stopped, Some("shut down".into()));
        tracing::info!(camera = %id, "Camera stopped");
    }

    /// Sleeps for `delay` while showing a heartbeat; true if shutdown was requested meanwhile.
    async fn wait(&mut self, delay: Duration) -> bool {
        let until = tokio::time::Instant::now() + delay;
        let mut beat = tokio::time::interval(Duration::from_secs(1));
        loop {
            self.shared.beat();
            tokio::select! {
                biased;
                _ = self.shutdown.changed() => return true,
                _ = tokio::time::sleep_until(until) => return false,
                _ = beat.tick() => {}
            }
        }
    }

    async fn run_once(&mut self) -> Outcome {
        self.shared.beat();
        self.prune.reset();
        self.status.send_modify(|s| {
            s.state = CameraState::Starting;
            s.since = self.clock.now();
        });
        let started = self.clock.now();
        let (cfg, vision, shared) = (self.cfg.clone(), self.vision, self.shared.clone());
        let start = tokio::task::spawn_blocking(move || Session::start(&cfg, &vision, shared));
        let mut session = match start.await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) if e.is_fatal() => return Outcome::Finished(e.to_string()),
            Ok(Err(e @ IngestError::Start { .. })) if !self.cfg.uri.is_live() => {
                return Outcome::Finished(e.to_string());
            }
            Ok(Err(e)) => return Outcome::Failed(e.to_string()),
            Err(e) => return Outcome::Failed(format!("pipeline start crashed: {e}")),
        };
        let live = self.cfg.uri.is_live();
        let mut running = false;
        let mut watchdog = tokio::time::interval(WATCHDOG_TICK);
        let outcome = loop {
            tokio::select! {
                biased;
                _ = self.shutdown.changed() => break Outcome::Shutdown,
                event = session.next_event() => match event {
                    SessionEvent::FramesReady => {
                        self.take_frames(&mut session, live).await;
                        if !running {
                            running = true;
                            self.set_state(CameraState::Running, None);
                            tracing::info!(
                                camera = %self.cfg.id,
                                geometry = %self.shared.geometry.get().map(|g| g.to_string()).unwrap_or_default(),
                                source_caps = %self.shared.source_caps.lock().map(|c| c.clone().unwrap_or_default()).unwrap_or_default(),
                                "Camera running"
                            );
                        }
                    }
                    SessionEvent::Error(e) if live => break Outcome::Failed(e),
                    SessionEvent::Error(e) => break Outcome::Finished(e),
                    SessionEvent::Eos if live => {
                        self.take_frames(&mut session, live).await;
                        break Outcome::Failed("end of stream (the camera closed the connection)".into())
                    }
                    SessionEvent::Eos => {
                        // The last frames of a file may still wait in the hand-off.
                        self.take_frames(&mut session, live).await;
                        break Outcome::Finished("end of file".into());
                    }
                },
                _ = watchdog.tick() => {
                    self.shared.beat();
                    if let Some(reason) = self.watchdog(started) {
                        break Outcome::Failed(reason);
                    }
                }
            }
        };
        // Teardown of an RTSP session can block for the server's sake; keep it off the runtime.
        let _ = tokio::task::spawn_blocking(move || session.stop()).await;
        outcome
    }

    /// Frame-age watchdog: a frozen RTSP server produces no error for ~26 s (docs/ARCHITECTURE.md, "Supervision").
    /// Moves the sampled frames waiting in the hand-off through DiffFP into the window. A file is
    /// read at the pace its frames are encoded: this waits while the watch worker is behind (the
    /// hand-off then fills and the decoder waits). A live camera never waits: it would fall
    /// behind real time.
    async fn take_frames(&mut self, session: &mut Session, live: bool) {
        loop {
            if !live && self.paced().await {
                break;
            }
            let Some(mut frame) = session.pop_frame() else {
                break;
            };
            frame.tokens = self.prune.apply(&frame, &self.shared.counters);
            self.window.push(Arc::new(frame));
        }
    }

    /// Waits while the window's follower is more than [`PACE_LAG`] frames behind; returns
    /// `true` when shutdown was asked meanwhile.
    async fn paced(&mut self) -> bool {
        while self
            .window
            .follower_lag(PACE_ALIVE)
            .is_some_and(|lag| lag > PACE_LAG)
        {
            if self.shutdown.has_changed().unwrap_or(true) {
                return true;
            }
            // The source is waiting on us, not stalled.
            self.shared.touch_input();
            self.shared.beat();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    fn watchdog(&self, started: Instant) -> Option<String> {
        match self.shared.last_input() {
            None if self.clock.since(started) > self.cfg.connect_timeout => Some(format!(
                "no frame within {:.1} s of starting (connect_timeout_secs)",
                self.cfg.connect_timeout.as_secs_f64()
            )),
            Some(t) if self.clock.since(t) > self.cfg.stall => Some(format!(
                "stalled: no frame for {:.1} s (stall_secs = {})",
                self.clock.since(t).as_secs_f64(),
                self.cfg.stall.as_secs_f64()
            )),
            _ => None,
        }
    }
}
