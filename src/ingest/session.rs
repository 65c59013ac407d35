//! One run of a camera's GStreamer pipeline, from start to error, end of stream or stop.
//!
//! The supervisor owns the loop around sessions (restart, backoff, watchdog); a session only builds
//! the pipeline from its template, configures it through properties, and turns the streaming
//! thread's output into sampled [`Frame`]s and bus messages into [`SessionEvent`]s.

use super::geometry::{Geometry, camera_geometry};
use super::template::Template;
use crate::config::{CameraConfig, Scaler, Secret, SourceUri, VisionConfig};
use crate::ring::{Counters, Frame, SampleDecision, Sampler, handoff};
use edgevlm_resize::Resizer;
use futures_util::StreamExt;
use gst_video::prelude::*;
use ringbuf::traits::{Consumer as _, Producer as _};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Notify;

/// Why a session could not start or had to end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IngestError {
    /// GStreamer itself could not be initialised.
    #[error("GStreamer could not be initialised: {0}")]
    Init(String),
    /// The template needs an element this machine does not have (hardware or plugin missing).
    #[error(
        "camera {camera}: pipeline template `{template}` needs the GStreamer element `{element}`, \
         which is not installed on this machine{hint}"
    )]
    MissingElement {
        /// Camera id.
        camera: String,
        /// Template name.
        template: String,
        /// Missing factory name.
        element: String,
        /// What to install or choose instead.
        hint: String,
    },
    /// The template is malformed or its elements lack the properties edgevlm sets.
    #[error("camera {camera}: pipeline template `{template}`: {message}")]
    Template {
        /// Camera id.
        camera: String,
        /// Template name.
        template: String,
        /// What is wrong.
        message: String,
    },
    /// The camera's password could not be read.
    #[error("camera {camera}: {message}")]
    Credentials {
        /// Camera id.
        camera: String,
        /// What failed (names the file or variable, never the content).
        message: String,
    },
    /// The pipeline refused to start.
    #[error("camera {camera}: pipeline did not start: {message}")]
    Start {
        /// Camera id.
        camera: String,
        /// GStreamer's reason.
        message: String,
    },
}

impl IngestError {
    /// Errors that a retry cannot fix: the camera is stopped instead of retried.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            IngestError::Init(_)
                | IngestError::MissingElement { .. }
                | IngestError::Template { .. }
        )
    }
}

/// Initialises GStreamer once for the process.
pub fn init() -> Result<(), IngestError> {
    static INIT: OnceLock<Result<(), String>> = OnceLock::new();
    INIT.get_or_init(|| gst::init().map_err(|e| e.to_string()))
        .clone()
        .map_err(IngestError::Init)
}

/// State of a camera that outlives its sessions (shared with the supervisor and readers).
#[derive(Debug)]
pub struct CameraShared {
    /// Camera id.
    pub id: Arc<str>,
    /// Ingest counters.
    pub counters: Counters,
    /// The model geometry, fixed by the first negotiation (or the config) for the camera's life.
    pub geometry: OnceLock<Geometry>,
    /// The caps the source delivered last, for status and `probe`.
    pub source_caps: Mutex<Option<String>>,
    /// What `decode = "keyframes"` does now (`None`: the camera decodes every frame by config).
    decode: Mutex<Option<String>>,
    epoch: Instant,
    /// Milliseconds after `epoch` of the last decoded frame (0: none yet in this session).
    last_input_ms: AtomicU64,
    /// Milliseconds after `epoch` when the camera task last showed it is not stuck.
    heartbeat_ms: AtomicU64,
    resume: Mutex<Resume>,
}

/// Where the stream clock and frame numbering continue after a restart.
#[derive(Debug, Default, Clone, Copy)]
struct Resume {
    first_frame_at: Option<Instant>,
    last_pts: Option<Duration>,
    next_seq: u64,
}

impl CameraShared {
    /// Shared state for camera `id`; `size` fixes the geometry up front (its tokens those of
    /// `vision`'s model).
    pub fn new(id: &str, size: Option<(u32, u32)>, vision: &VisionConfig) -> Self {
        let geometry = OnceLock::new();
        if let Some((width, height)) = size {
            let _ = geometry.set(Geometry::fixed(width, height, vision));
        }
        CameraShared {
            id: id.into(),
            counters: Counters::default(),
            geometry,
            source_caps: Mutex::new(None),
            decode: Mutex::new(None),
            epoch: Instant::now(),
            last_input_ms: AtomicU64::new(0),
            heartbeat_ms: AtomicU64::new(0),
            resume: Mutex::new(Resume::default()),
        }
    }

    /// What keyframe decoding does now (`keyframes (GOP 1.00 s)`, `full: …`), for the status;
    /// `None` when the camera decodes every frame by its configuration.
    pub fn decode(&self) -> Option<String> {
        self.decode
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set_decode(&self, text: Option<String>) {
        *self.decode.lock().unwrap_or_else(|p| p.into_inner()) = text;
    }

    fn mark_input(&self) {
        let ms = self.epoch.elapsed().as_millis().max(1) as u64;
        self.last_input_ms.store(ms, Ordering::Relaxed);
    }

    /// Counts as input now, if a frame already arrived in this session: a file camera waiting for
    /// its frames to be encoded is not stalled.
    pub fn touch_input(&self) {
        if self.last_input_ms.load(Ordering::Relaxed) != 0 {
            self.mark_input();
        }
    }

    /// When the last decoded frame arrived, if one arrived since the session started.
    pub fn last_input(&self) -> Option<Instant> {
        match self.last_input_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.epoch + Duration::from_millis(ms)),
        }
    }

    /// Records that the camera task is alive (it loops at least every second).
    pub fn beat(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.heartbeat_ms.store(ms, Ordering::Relaxed);
    }

    /// Time since the camera task last called [`beat`](Self::beat).
    pub fn since_heartbeat(&self) -> Duration {
        let ms = self.heartbeat_ms.load(Ordering::Relaxed);
        self.epoch
            .elapsed()
            .saturating_sub(Duration::from_millis(ms))
    }

    fn resume(&self) -> Resume {
        *self.resume.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a running session reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEvent {
    /// Sampled frames are waiting in the hand-off; take them with [`Session::pop_frame`].
    FramesReady,
    /// The pipeline failed; the message names the element and never contains a password.
    Error(String),
    /// The source ended (a file finished, or a live camera disconnected).
    Eos,
}

/// A running pipeline for one camera.
pub struct Session {
    pipeline: gst::Pipeline,
    bus: gst::bus::BusStream,
    frames: handoff::Consumer,
    notify: Arc<Notify>,
    /// Set before the pipeline goes to Null: a file's streaming thread waiting for room in the
    /// hand-off gives up.
    stopping: Arc<AtomicBool>,
    secret: Option<Secret>,
    shared: Arc<CameraShared>,
    stopped: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("camera", &self.shared.id)
            .finish()
    }
}

impl Session {
    /// Builds the camera's pipeline and sets it playing. Blocking: call from a blocking context.
    pub fn start(
        cfg: &CameraConfig,
        vision: &VisionConfig,
        shared: Arc<CameraShared>,
    ) -> Result<Session, IngestError> {
        init()?;
        let camera = cfg.id.clone();
        let tpl_err = |message: String| IngestError::Template {
            camera: camera.clone(),
            template: cfg.pipeline.clone(),
            message,
        };
        let template: Template = cfg.template().map_err(&tpl_err)?;
        template.check_text().map_err(&tpl_err)?;
        if let Some(missing) = template.missing_elements()?.into_iter().next() {
            return Err(IngestError::MissingElement {
                camera: camera.clone(),
                template: template.name.to_string(),
                hint: format!("; {}", missing.hint),
                element: missing.factory,
            });
        }
        // With stand-ins for elements newer than the running GStreamer (`compat`).
        let launch = super::compat::launch_line(&template.launch());

        let pipeline = gst::parse::launch(&launch)
            .map_err(|e| tpl_err(format!("does not parse: {e}")))?
            .downcast::<gst::Pipeline>()
            .map_err(|_| tpl_err("is not a pipeline of several elements".into()))?;
        let by_name = |name: &str| {
            pipeline
                .by_name(name)
                .ok_or_else(|| tpl_err(format!("has no element named `{name}`")))
        };
        let src = by_name("src")?;
        let rate = by_name("rate")?;
        let scale = by_name("scale")?;
        let capsfilter = by_name("caps")?;
        let sink = by_name("sink")?
            .downcast::<gst_app::AppSink>()
            .map_err(|_| tpl_err("element `sink` is not an appsink".into()))?;

        let secret = configure_source(&src, cfg).map_err(|e| match e {
            SourceError::Credentials(message) => IngestError::Credentials {
                camera: camera.clone(),
                message,
            },
            SourceError::Property(message) => tpl_err(message),
        })?;

        let fps = gst::Fraction::approximate_f64(cfg.sample_fps)
            .ok_or_else(|| tpl_err(format!("sample_fps {} has no fraction", cfg.sample_fps)))?;
        let frames_per_request = (cfg.window_frames() as u32).min(vision.max_frames);
        // The caps filter starts without a size unless the geometry is already fixed; the probe
        // fixes it from the first source caps (and records those caps for status either way).
        capsfilter.set_property(
            "caps",
            output_caps(shared.geometry.get().copied(), fps, cfg.scaler),
        );
        // SmolVLM2's processor stretches the frame to the square; GStreamer's scalers keep the
        // display aspect with borders unless told not to (Apollo pads: its borders stay, black
        // rather than its processor's mean).
        if vision.square.is_some_and(|s| s.pad.is_none())
            && cfg.scaler == Scaler::Pipeline
            && scale.find_property("add-borders").is_some()
        {
            scale.set_property("add-borders", false);
        }
        install_geometry_probe(
            &scale,
            capsfilter.clone(),
            shared.clone(),
            frames_per_request,
            *vision,
            fps,
            cfg.scaler,
        )
        .map_err(&tpl_err)?;
        install_input_probe(&rate, shared.clone()).map_err(&tpl_err)?;
        if cfg.decode == crate::config::DecodeMode::Keyframes {
            super::keyframes::install(&pipeline, shared.clone(), cfg.sample_fps);
        }

        let (producer, frames) = handoff::channel();
        let notify = Arc::new(Notify::new());
        let stopping = Arc::new(AtomicBool::new(false));
        sink.set_property("max-buffers", 2u32);
        sink.set_property("drop", true);
        sink.set_property("sync", false);
        sink.set_callbacks(
            gst_app::AppSinkCallbacks::builder()
                .new_sample(new_sample_handler(
                    producer,
                    notify.clone(),
                    shared.clone(),
                    cfg.sample_fps,
                    cfg.uri.is_live(),
                    Scaling {
                        scaler: cfg.scaler,
                        square: vision.square.map(|s| s.pad),
                    },
                    stopping.clone(),
                ))
                .build(),
        );

        shared.last_input_ms.store(0, Ordering::Relaxed);
        let bus = pipeline
            .bus()
            .ok_or_else(|| tpl_err("pipeline has no bus".into()))?
            .stream();
        let session = Session {
            pipeline,
            bus,
            frames,
            notify,
            stopping,
            secret,
            shared: shared.clone(),
            stopped: false,
        };
        if let Err(e) = session.pipeline.set_state(gst::State::Playing) {
            // The bus usually holds the precise reason (file not found, connection refused, …).
            let reason = session.pending_error().unwrap_or_else(|| e.to_string());
            return Err(IngestError::Start {
                camera,
                message: reason,
            });
        }
        Ok(session)
    }

    /// Waits for the next thing the supervisor must act on.
    pub async fn next_event(&mut self) -> SessionEvent {
        loop {
            tokio::select! {
                _ = self.notify.notified() => return SessionEvent::FramesReady,
                msg = self.bus.next() => {
                    let Some(msg) = msg else {
                        return SessionEvent::Error("pipeline bus closed".into());
                    };
                    if let Some(event) = self.classify(&msg) {
                        return event;
                    }
                }
            }
        }
    }

    /// The next sampled frame waiting in the hand-off.
    pub fn pop_frame(&mut self) -> Option<Frame> {
        self.frames.try_pop()
    }

    /// Sets the pipeline to Null. Blocking (RTSP teardown): call from a blocking context.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if !self.stopped {
            self.stopped = true;
            self.stopping.store(true, Ordering::Release);
            if !to_null_within(&self.pipeline, STOP_BOUND) {
                Counters::bump(&self.shared.counters.left_behind);
                tracing::warn!(
                    camera = %self.shared.id,
                    bound_secs = STOP_BOUND.as_secs(),
                    "The pipeline did not reach Null in time and is left behind with its thread; \
                     the camera goes on with a new one (docs/ARCHITECTURE.md, \"Platform facts\")"
                );
            }
        }
    }

    /// An error already posted on the bus, if any (used when a state change fails).
    fn pending_error(&self) -> Option<String> {
        let bus = self.pipeline.bus()?;
        while let Some(msg) = bus.pop() {
            if let Some(SessionEvent::Error(e)) = self.classify(&msg) {
                return Some(e);
            }
        }
        None
    }

    fn classify(&self, msg: &gst::Message) -> Option<SessionEvent> {
        use gst::MessageView;
        match msg.view() {
            MessageView::Error(e) => {
                let src = e
                    .src()
                    .map(|s| s.path_string().to_string())
                    .unwrap_or_else(|| "pipeline".into());
                let debug = e
                    .debug()
                    .map(|d| debug_detail(&d))
                    .filter(|d| !d.is_empty())
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default();
                Some(SessionEvent::Error(
                    self.scrub(&format!("{src}: {}{debug}", e.error())),
                ))
            }
            MessageView::Eos(_) => Some(SessionEvent::Eos),
            MessageView::Warning(w) => {
                tracing::warn!(
                    camera = %self.shared.id,
                    warning = %self.scrub(&w.error().to_string()),
                    "Pipeline warning"
                );
                None
            }
            // rtspsrc posts this before EOS when the server stops sending (RTCP timeout;
            // docs/ARCHITECTURE.md, "Platform facts").
            MessageView::Element(el)
                if el
                    .structure()
                    .is_some_and(|s| s.name() == "GstRTSPSrcTimeout") =>
            {
                Some(SessionEvent::Error(
                    "RTSP server stopped sending (RTCP timeout)".into(),
                ))
            }
            _ => None,
        }
    }

    fn scrub(&self, text: &str) -> String {
        match &self.secret {
            Some(s) => s.scrub(text),
            None => text.to_string(),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A pipeline dropped outside Null leaks its threads and sockets.
        self.shutdown();
    }
}

/// How long a pipeline may take to reach Null. A stop takes milliseconds, or up to rtspsrc's
/// `tcp-timeout` (5 s) for a server that stopped answering its TEARDOWN.
const STOP_BOUND: Duration = Duration::from_secs(15);

/// Sets `pipeline` to Null on a thread of its own and waits at most `bound`: whether it got there.
///
/// GStreamer 1.18's rtspsrc can deadlock there for good when its own task is closing the session
/// after the server's end of stream (its rtpbin waits for a jitterbuffer's streaming lock while
/// our state change waits for it; seen in the Debian 11 root, docs/ARCHITECTURE.md, "Platform
/// facts"). Blocking the caller for ever would hold the camera in its stop and the runtime in its
/// shutdown (it waits for its blocking tasks); past the bound the pipeline and the thread are left
/// behind, a leak the camera survives.
fn to_null_within(pipeline: &gst::Pipeline, bound: Duration) -> bool {
    let (done, wait) = std::sync::mpsc::channel();
    let p = pipeline.clone();
    let stopper = std::thread::Builder::new()
        .name("pipeline-stop".into())
        .spawn(move || {
            let _ = p.set_state(gst::State::Null);
            let _ = done.send(());
        });
    match stopper {
        Ok(_) => wait.recv_timeout(bound).is_ok(),
        // No thread to be had: stop here, unbounded, as before.
        Err(_) => {
            let _ = pipeline.set_state(gst::State::Null);
            true
        }
    }
}

/// GStreamer's debug text starts with the C source location (`gstrtspsrc.c(8336): fn (): path:`);
/// keep only the human part after it.
fn debug_detail(debug: &str) -> String {
    debug
        .lines()
        .map(str::trim)
        .filter(|l| !(l.is_empty() || (l.contains(".c(") && l.contains("():"))))
        .collect::<Vec<_>>()
        .join("; ")
}

enum SourceError {
    Credentials(String),
    Property(String),
}

/// Sets the source element's properties from the camera's URI and credentials.
fn configure_source(src: &gst::Element, cfg: &CameraConfig) -> Result<Option<Secret>, SourceError> {
    let prop = |name: &str, value: glib::Value| {
        set_checked(src, name, value).map_err(SourceError::Property)
    };
    let prop_str =
        |name: &str, value: &str| set_from_str(src, name, value).map_err(SourceError::Property);
    match &cfg.uri {
        SourceUri::Rtsp(url) => {
            prop("location", url.to_value())?;
            prop_str("protocols", cfg.rtsp_transport.rtspsrc_protocols())?;
            prop("latency", cfg.latency_ms.to_value())?;
            prop("drop-on-latency", true.to_value())?;
            let tcp_timeout_us = cfg.connect_timeout.as_micros().min(u128::from(u64::MAX)) as u64;
            prop("tcp-timeout", tcp_timeout_us.to_value())?;
            if let Some(creds) = &cfg.credentials {
                prop("user-id", creds.username.to_value())?;
                if let Some(source) = &creds.password {
                    let secret = source.load().map_err(SourceError::Credentials)?;
                    prop("user-pw", secret.expose().to_value())?;
                    return Ok(Some(secret));
                }
            }
        }
        SourceUri::File(path) => {
            if !path.is_file() {
                return Err(SourceError::Credentials(format!(
                    "video file {} does not exist or is not a file",
                    path.display()
                )));
            }
            prop("location", path.to_string_lossy().to_value())?;
        }
        SourceUri::V4l2(dev) => prop("device", dev.to_string_lossy().to_value())?,
        SourceUri::Test(pattern) => prop_str("pattern", pattern)?,
    }
    Ok(None)
}

/// Sets a property after checking it exists, is writable and accepts the value (glib panics
/// otherwise, and a panic must not be reachable from a config file or a custom template).
fn set_checked(el: &gst::Element, name: &str, value: glib::Value) -> Result<(), String> {
    let pspec = el
        .find_property(name)
        .ok_or_else(|| format!("element `{}` has no property `{name}`", el.name()))?;
    let flags = pspec.flags();
    if !flags.contains(glib::ParamFlags::WRITABLE)
        || flags.contains(glib::ParamFlags::CONSTRUCT_ONLY)
    {
        return Err(format!(
            "property `{name}` of `{}` is not writable",
            el.name()
        ));
    }
    if !value.type_().is_a(pspec.value_type()) || !value_fits(&pspec, &value) {
        return Err(format!(
            "property `{name}` of `{}` does not accept a {} value",
            el.name(),
            value.type_()
        ));
    }
    el.set_property(name, value);
    Ok(())
}

/// Whether `pspec` takes `value` as it is: glib's own check before it sets a property (and
/// panics), run on a copy. `g_param_value_validate` exists in every GLib we support, where
/// `ParamSpec::value_is_valid` needs 2.74 (docs/ARCHITECTURE.md, "Platform floors").
fn value_fits(pspec: &glib::ParamSpec, value: &glib::Value) -> bool {
    use glib::translate::{ToGlibPtr, ToGlibPtrMut, from_glib};
    let mut copy = value.clone();
    // SAFETY: both pointers come from live borrows of a ParamSpec and of our own Value for the
    // duration of the call; the function only reads the spec and may rewrite the copy in place.
    let changed: bool = unsafe {
        from_glib(glib::gobject_ffi::g_param_value_validate(
            pspec.to_glib_none().0,
            copy.to_glib_none_mut().0,
        ))
    };
    !changed
}

fn set_from_str(el: &gst::Element, name: &str, value: &str) -> Result<(), String> {
    let pspec = el
        .find_property(name)
        .ok_or_else(|| format!("element `{}` has no property `{name}`", el.name()))?;
    let v = <glib::Value as gst::prelude::GstValueExt>::deserialize(value, pspec.value_type())
        .map_err(|_| {
            format!(
                "`{value}` is not a valid value for `{name}` of `{}`",
                el.name()
            )
        })?;
    set_checked(el, name, v)
}

/// The caps the template delivers: RGB at the sample rate at most (a slower source at its own
/// rate: `videorate drop-only=true` cannot raise a rate, and a fixed rate above the source's fails
/// to negotiate); with [`Scaler::Pipeline`] at the model geometry once known, with
/// [`Scaler::Reference`] at the source size (the sample handler scales).
fn output_caps(geometry: Option<Geometry>, fps: gst::Fraction, scaler: Scaler) -> gst::Caps {
    let b = gst_video::VideoCapsBuilder::new()
        .format(gst_video::VideoFormat::Rgb)
        .framerate_range(gst::Fraction::new(0, 1)..=fps);
    if scaler == Scaler::Reference {
        return b.build();
    }
    let b = b.pixel_aspect_ratio(gst::Fraction::new(1, 1));
    match geometry {
        Some(g) => b.width(g.width as i32).height(g.height as i32).build(),
        None => b.build(),
    }
}

/// Fixes the geometry from the first caps the scaler sees, before it negotiates downstream.
fn install_geometry_probe(
    scale: &gst::Element,
    capsfilter: gst::Element,
    shared: Arc<CameraShared>,
    frames_per_request: u32,
    vision: VisionConfig,
    fps: gst::Fraction,
    scaler: Scaler,
) -> Result<(), String> {
    let pad = scale
        .static_pad("sink")
        .ok_or("element `scale` has no sink pad")?;
    pad.add_probe(gst::PadProbeType::EVENT_DOWNSTREAM, move |_, info| {
        if let Some(gst::PadProbeData::Event(ev)) = &info.data
            && let gst::EventView::Caps(c) = ev.view()
            && let Some(s) = c.caps().structure(0)
            && let (Ok(w), Ok(h)) = (s.get::<i32>("width"), s.get::<i32>("height"))
        {
            let par = s
                .get::<gst::Fraction>("pixel-aspect-ratio")
                .unwrap_or(gst::Fraction::new(1, 1));
            // The reference resizes the displayed picture; fold a non-square PAR into the width.
            let display_w = (i64::from(w) * i64::from(par.numer()) / i64::from(par.denom().max(1)))
                .clamp(1, i64::from(u32::MAX)) as u32;
            let fixed = shared.geometry.get().is_some();
            let g = *shared.geometry.get_or_init(|| {
                camera_geometry(display_w, h.max(1) as u32, frames_per_request, &vision)
            });
            if !fixed && scaler == Scaler::Pipeline {
                capsfilter.set_property("caps", output_caps(Some(g), fps, scaler));
            }
            *shared.source_caps.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(format!("{w}x{h} {}", s.get::<&str>("format").unwrap_or("")));
        }
        gst::PadProbeReturn::Ok
    })
    .ok_or("cannot watch the scaler's input")?;
    Ok(())
}

/// Counts every decoded frame and feeds the stall watchdog, whatever the sample rate.
fn install_input_probe(rate: &gst::Element, shared: Arc<CameraShared>) -> Result<(), String> {
    let pad = rate
        .static_pad("sink")
        .ok_or("element `rate` has no sink pad")?;
    pad.add_probe(gst::PadProbeType::BUFFER, move |_, _| {
        Counters::bump(&shared.counters.frames_in);
        shared.mark_input();
        gst::PadProbeReturn::Ok
    })
    .ok_or("cannot watch the decoder's output")?;
    Ok(())
}

/// Maps a session's buffer timestamps onto the camera's continuous stream clock.
struct StreamClock {
    base: Duration,
    first_pts: Option<gst::ClockTime>,
    started: Instant,
}

impl StreamClock {
    fn stream_time(&mut self, pts: Option<gst::ClockTime>) -> Duration {
        match pts {
            Some(pts) => {
                let first = *self.first_pts.get_or_insert(pts);
                self.base + Duration::from_nanos(pts.saturating_sub(first).nseconds())
            }
            // Some sources do not stamp buffers; arrival time is the best estimate.
            None => self.base + self.started.elapsed(),
        }
    }
}

type SampleHandler =
    Box<dyn FnMut(&gst_app::AppSink) -> Result<gst::FlowSuccess, gst::FlowError> + Send>;

/// The appsink callback: sample by timestamp, copy only sampled frames, hand them off.
fn new_sample_handler(
    mut producer: handoff::Producer,
    notify: Arc<Notify>,
    shared: Arc<CameraShared>,
    fps: f64,
    live: bool,
    scaling: Scaling,
    stopping: Arc<AtomicBool>,
) -> SampleHandler {
    let Scaling { scaler, square } = scaling;
    let resume = shared.resume();
    let mut sampler = Sampler::new(fps);
    // After a restart, stream time continues from the wall clock (live) so gaps stay visible and
    // timestamps never go back; a restarted file starts after the last frame it delivered.
    let base = match (resume.first_frame_at, resume.last_pts) {
        (Some(first), Some(last)) => {
            let wall = if live {
                first.elapsed()
            } else {
                Duration::ZERO
            };
            wall.max(last + sampler.period())
        }
        _ => Duration::ZERO,
    };
    let mut clock = StreamClock {
        base,
        first_pts: None,
        started: Instant::now(),
    };
    let mut info_cache: Option<(gst::Caps, gst_video::VideoInfo)> = None;
    // Built for the first frame's source size and the camera's geometry; rebuilt if either changes.
    let mut resizer: Option<FrameScaler> = None;
    Box::new(move |sink| {
        let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
        let Some(buffer) = sample.buffer() else {
            return Ok(gst::FlowSuccess::Ok);
        };
        let pts = clock.stream_time(buffer.pts());
        match sampler.offer(pts) {
            SampleDecision::Sample => {}
            SampleDecision::Drop => return Ok(gst::FlowSuccess::Ok),
            SampleDecision::Late => {
                Counters::bump(&shared.counters.late);
                return Ok(gst::FlowSuccess::Ok);
            }
        }
        let Some(caps) = sample.caps() else {
            return Ok(gst::FlowSuccess::Ok);
        };
        if info_cache.as_ref().is_none_or(|(c, _)| c.as_ref() != caps) {
            let info =
                gst_video::VideoInfo::from_caps(caps).map_err(|_| gst::FlowError::NotNegotiated)?;
            info_cache = Some((caps.to_owned(), info));
        }
        let Some((_, info)) = &info_cache else {
            return Err(gst::FlowError::NotNegotiated);
        };
        // Only sampled frames are copied (or scaled, reading the source frame in place).
        let (rgb, width, height) = match scaler {
            Scaler::Pipeline => match copy_packed_rgb(buffer, info) {
                Some(rgb) => (rgb, info.width(), info.height()),
                None => return Err(gst::FlowError::Error),
            },
            Scaler::Reference => {
                let Some(g) = shared.geometry.get().copied() else {
                    return Err(gst::FlowError::NotNegotiated);
                };
                match scale_reference(buffer, info, g, square, &mut resizer) {
                    Ok(rgb) => (rgb, g.width, g.height),
                    Err(e) => {
                        tracing::error!(camera = %shared.id, error = %e, "Cannot scale a frame");
                        return Err(gst::FlowError::Error);
                    }
                }
            }
        };
        let seq = {
            let mut r = shared.resume.lock().unwrap_or_else(|p| p.into_inner());
            r.first_frame_at.get_or_insert_with(Instant::now);
            r.last_pts = Some(pts);
            r.next_seq += 1;
            r.next_seq - 1
        };
        let frame = Frame {
            camera: shared.id.clone(),
            seq,
            pts,
            wall_time: SystemTime::now(),
            width,
            height,
            rgb,
            tokens: None,
        };
        let mut frame = frame;
        loop {
            match producer.try_push(frame) {
                Ok(()) => {
                    Counters::bump(&shared.counters.sampled);
                    break;
                }
                // A live camera cannot wait: the newest frame is dropped and counted. A file
                // waits for room (the camera task paces it by its encoder), so nothing is lost.
                Err(back) if !live && !stopping.load(Ordering::Acquire) => {
                    frame = back;
                    notify.notify_one();
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(_) => {
                    Counters::bump(&shared.counters.overflow);
                    break;
                }
            }
        }
        notify.notify_one();
        Ok(gst::FlowSuccess::Ok)
    })
}

/// Who scales a camera's frames, and whether to the model's square (`VisionConfig::square`:
/// `Some(None)` stretched, `Some(Some(fill))` padded with `fill` first).
#[derive(Debug, Clone, Copy)]
struct Scaling {
    scaler: Scaler,
    square: Option<Option<[u8; 3]>>,
}

/// The reference resize of a camera's model: VideoLLaMA3's processor's (one antialiased bicubic
/// step), for a model of square images SmolVLM2's processor's (two Lanczos steps), or Apollo's
/// (padded to a square, then bicubic).
#[derive(Debug)]
enum FrameScaler {
    Bicubic(Box<Resizer>),
    TwoStep(Box<super::square::FrameResize>),
    Padded(Box<super::square::PadResize>),
}

impl FrameScaler {
    fn new(
        src: (u32, u32),
        g: Geometry,
        square: Option<Option<[u8; 3]>>,
    ) -> Result<FrameScaler, String> {
        match square {
            Some(None) => super::square::FrameResize::new(src.0, src.1, g.width, g.width)
                .map(|r| FrameScaler::TwoStep(Box::new(r))),
            Some(Some(fill)) => super::square::PadResize::new(src.0, src.1, g.width, fill)
                .map(|r| FrameScaler::Padded(Box::new(r))),
            None => Resizer::new(src.0, src.1, g.width, g.height)
                .map(|r| FrameScaler::Bicubic(Box::new(r))),
        }
        .map_err(|e| e.to_string())
    }

    fn fits(&self, src: (u32, u32), g: Geometry, square: Option<Option<[u8; 3]>>) -> bool {
        let dst = (g.width, g.height);
        match self {
            FrameScaler::Bicubic(r) => {
                square.is_none() && r.src_size() == src && r.dst_size() == dst
            }
            FrameScaler::TwoStep(r) => {
                square == Some(None) && r.src_size() == src && r.dst_size() == dst
            }
            FrameScaler::Padded(r) => {
                matches!(square, Some(Some(_))) && r.src_size() == src && r.dst_size() == dst
            }
        }
    }

    fn dst_len(&self) -> usize {
        match self {
            FrameScaler::Bicubic(r) => r.dst_len(),
            FrameScaler::TwoStep(r) => r.dst_len(),
            FrameScaler::Padded(r) => r.dst_len(),
        }
    }

    fn resize(&mut self, src: &[u8], stride: usize, dst: &mut [u8]) -> Result<(), String> {
        match self {
            FrameScaler::Bicubic(r) => r.resize(src, stride, dst),
            FrameScaler::TwoStep(r) => r.resize(src, stride, dst),
            FrameScaler::Padded(r) => r.resize(src, stride, dst),
        }
        .map_err(|e| e.to_string())
    }
}

/// Scales a source-size RGB buffer to the model geometry with the reference's resize (`square`:
/// the square model's), reading the buffer in place through its stride.
fn scale_reference(
    buffer: &gst::BufferRef,
    info: &gst_video::VideoInfo,
    g: Geometry,
    square: Option<Option<[u8; 3]>>,
    resizer: &mut Option<FrameScaler>,
) -> Result<Box<[u8]>, String> {
    let frame = gst_video::VideoFrameRef::from_buffer_ref_readable(buffer, info)
        .map_err(|e| format!("cannot map the frame: {e}"))?;
    let stride = frame
        .plane_stride()
        .first()
        .and_then(|s| usize::try_from(*s).ok())
        .ok_or("the frame has no stride")?;
    let data = frame.plane_data(0).map_err(|e| format!("no plane: {e}"))?;
    let src = (frame.width(), frame.height());
    if !resizer.as_ref().is_some_and(|r| r.fits(src, g, square)) {
        *resizer = Some(FrameScaler::new(src, g, square)?);
    }
    let r = resizer.as_mut().ok_or("no resizer")?;
    let mut out = vec![0u8; r.dst_len()].into_boxed_slice();
    r.resize(data, stride, &mut out)?;
    Ok(out)
}

/// Copies an RGB buffer row by row using its stride (GStreamer pads rows to 4 bytes).
fn copy_packed_rgb(buffer: &gst::BufferRef, info: &gst_video::VideoInfo) -> Option<Box<[u8]>> {
    let frame = gst_video::VideoFrameRef::from_buffer_ref_readable(buffer, info).ok()?;
    let stride = usize::try_from(*frame.plane_stride().first()?).ok()?;
    let data = frame.plane_data(0).ok()?;
    let row = frame.width() as usize * 3;
    let height = frame.height() as usize;
    if stride < row || data.len() < stride * (height.saturating_sub(1)) + row {
        return None;
    }
    let mut out = Vec::with_capacity(row * height);
    for y in 0..height {
        out.extend_from_slice(&data[y * stride..y * stride + row]);
    }
    Some(out.into_boxed_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipeline() -> gst::Pipeline {
        init().unwrap();
        gst::parse::launch("videotestsrc is-live=true ! fakesink name=sink")
            .unwrap()
            .downcast::<gst::Pipeline>()
            .unwrap()
    }

    #[test]
    fn a_pipeline_reaches_null_within_the_bound() {
        let p = pipeline();
        p.set_state(gst::State::Playing).unwrap();
        assert!(to_null_within(&p, Duration::from_secs(30)));
        assert_eq!(p.current_state(), gst::State::Null);
    }

    #[test]
    fn a_stop_stuck_on_a_streaming_thread_returns_at_the_bound_and_finishes_later() {
        let p = pipeline();
        // The sink's streaming thread is held in a probe, with its stream lock, until released:
        // going to Null waits for that lock, as rtspsrc's deadlock does for good.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Mutex::new(held);
        let (entered, inside) = std::sync::mpsc::sync_channel::<()>(1);
        let sink = p.by_name("sink").unwrap().static_pad("sink").unwrap();
        sink.add_probe(gst::PadProbeType::BUFFER, move |_, _| {
            let _ = entered.try_send(());
            let _ = held.lock().unwrap().recv();
            gst::PadProbeReturn::Remove
        });
        p.set_state(gst::State::Playing).unwrap();
        inside.recv_timeout(Duration::from_secs(30)).unwrap();

        let t0 = Instant::now();
        assert!(!to_null_within(&p, Duration::from_millis(300)));
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert_ne!(p.current_state(), gst::State::Null);
        // Released, the stop left behind completes on its own thread.
        release.send(()).unwrap();
        let (_, state, _) = p.state(gst::ClockTime::from_seconds(30));
        assert_eq!(state, gst::State::Null);
    }
}
