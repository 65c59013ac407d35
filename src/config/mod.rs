//! Configuration: one strict TOML file, units in key names, every problem reported with its path.
//!
//! `docs/CONFIG.md` documents every key and default; a test keeps it in step with [`known_keys`].

mod decode;
mod engine;
mod home_assistant;
mod http;
mod mqtt;
mod pipeline;
mod prune;
mod snapshots;
mod source;
mod watch;

pub use decode::{ConfigError, ConfigErrors};
pub use engine::{
    CacheMemory, CpuArena, EngineConfig, MemoryPatterns, ProviderKind, TensorRtSettings,
};
pub use home_assistant::HomeAssistantConfig;
pub use http::HttpConfig;
pub use mqtt::{
    BrokerChoice, BrokerUser, EMBEDDED_MAX_CLIENTS, EmbeddedConfig, MqttConfig, MqttProtocol,
    TlsFiles, USER_MAX_CONNECTIONS, WhenFull, check_topic_prefix,
};
pub use pipeline::{
    ElementSpec, MAX_FILE_BYTES, REQUIRED_NAMES, SOURCE_KINDS, Template, TemplateProblem,
};
pub(crate) use pipeline::{elements_of, split_links};
pub use prune::{ParsePruneModeError, PruneMode, PruneParams};
pub use snapshots::{SNAPSHOT_MAX_WIDTH, SNAPSHOT_MIN_WIDTH, SnapshotConfig};
pub use source::{CredentialSource, PasswordSource, Secret, SourceUri, TEST_PATTERNS, redact_uri};
pub use watch::{
    CacheConfig, CachePolicy, MIN_CACHE_BUDGET, MemoryConfig, NarrateConfig, NarrateTriggers,
    QueryConfig,
};

use decode::{Fields, Sink};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The whole runtime configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Process-wide settings.
    pub runtime: RuntimeConfig,
    /// The model's visual-token budget, which fixes each camera's geometry.
    pub vision: VisionConfig,
    /// Metrics endpoint and control socket.
    pub telemetry: TelemetryConfig,
    /// MQTT broker, topics, outbox and questions.
    pub mqtt: MqttConfig,
    /// Cameras in file order.
    pub cameras: Vec<CameraConfig>,
    /// The model and how it runs (`[engine]`).
    pub engine: EngineConfig,
    /// Visual-token memory and live KV cache (`[memory]`).
    pub memory: MemoryConfig,
    /// Questions over recent footage (`[query]`).
    pub query: QueryConfig,
    /// The picture published with each narration and event (`[snapshots]`).
    pub snapshots: SnapshotConfig,
    /// Home Assistant MQTT discovery (`[home_assistant]`).
    pub home_assistant: HomeAssistantConfig,
    /// The HTTP API and web page (`[http]`).
    pub http: HttpConfig,
}

/// How the runtime reports on itself (`[telemetry]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// Address of the Prometheus `/metrics` endpoint; `None`: off.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Unix socket answered with the instance's status (`edgevlm status`); `None`: off.
    pub control_socket: Option<PathBuf>,
}

/// Process-wide settings (`[runtime]`).
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// How often `run` logs a status line per camera.
    pub status_interval: Duration,
    /// Where state (engine caches, …) is kept.
    pub state_dir: PathBuf,
    /// How often memory the C allocator holds free goes back to the system (`None`: never;
    /// `base::memory`).
    pub release_memory: Option<Duration>,
}

/// The visual-token budget (`[vision]`), as the reference resize rule uses it (docs/CONFIG.md, `[vision]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VisionConfig {
    /// Visual tokens the model accepts for one request (reference class default 16384).
    pub max_visual_tokens: u32,
    /// Most frames shown to the model in one request (reference: 180).
    pub max_frames: u32,
    /// Fewest tokens per frame (reference: 16).
    pub min_frame_tokens: u32,
    /// The model's own processor rule, which replaces the budget above when the model directory
    /// declares one (`[vision.processor]` of a transformers-native VideoLLaMA3 export). Not a
    /// configuration key: `run` takes it from the configured model's manifest.
    pub processor: Option<ProcessorGeometry>,
    /// Square frames of one side, when the model's encoder takes fixed images (SmolVLM2's
    /// `images` layout, 512 x 512): replaces every rule above. Not a configuration key: `run`
    /// takes it from the configured model's manifest.
    pub square: Option<SquareFrames>,
    /// Clips of frames, when the model's encoder takes clips (Apollo's `clips` layout): a
    /// memory item is a clip, and cameras sample at the clip's rate. Not a configuration key:
    /// `run` takes it from the configured model's manifest.
    pub clip: Option<ClipFrames>,
}

/// The frames of a model whose vision encoder takes square images of a fixed side (SmolVLM2,
/// Apollo): every camera's frames are resized to `side` x `side` (SmolVLM2: stretched in its
/// processor's two steps, `ingest::square`; Apollo: padded to a centred square of `pad` first),
/// and a DiffFP block covers `token_px` pixels square.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SquareFrames {
    /// The square side (`vision.image_size`).
    pub side: u32,
    /// Pixels per token side (`patch_size * merge_size`: 64 for SmolVLM2).
    pub token_px: u32,
    /// Pad each frame to a centred square of this RGB colour before the resize (Apollo: its
    /// processor's mean); `None`: stretch (SmolVLM2).
    pub pad: Option<[u8; 3]>,
}

/// The clip of a model that encodes clips (Apollo; `vision.clip_*` of its manifest).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipFrames {
    /// Frames in a clip.
    pub frames: u32,
    /// Seconds a clip spans.
    pub secs: f64,
    /// Visual tokens of a clip.
    pub tokens: u32,
}

impl ClipFrames {
    /// The sampling rate a camera needs for these clips (`frames / secs`).
    pub fn fps(&self) -> f64 {
        f64::from(self.frames) / self.secs
    }
}

/// The frame-size rule of a checkpoint's video processor (transformers' VideoLLaMA3: `smart_resize`
/// with `max_pixels` shared by the frames of a request; docs/ENGINES.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessorGeometry {
    /// Fewest pixels per frame.
    pub min_pixels: u64,
    /// Most pixels per request, divided by its frames.
    pub max_pixels: u64,
    /// Most frames in one request.
    pub max_frames: u32,
}

impl Default for VisionConfig {
    fn default() -> Self {
        VisionConfig {
            max_visual_tokens: 16384,
            max_frames: 180,
            min_frame_tokens: 16,
            processor: None,
            square: None,
            clip: None,
        }
    }
}

/// Who scales a camera's frames to the model geometry (`scaler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scaler {
    /// edgevlm's resize, bit-identical to the reference processor's (torch's antialiased
    /// bicubic): the pipeline delivers RGB at the source size and `ingest::Resizer` scales the
    /// sampled frames. The default: GStreamer's bilinear scaling changes pixels by several levels
    /// and, on still scenes, a sixth of DiffFP's decisions (docs/ARCHITECTURE.md, "Ingest").
    Reference,
    /// The template's scaler element scales (GStreamer, NVDEC or Jetson hardware): cheaper on a
    /// weak CPU, not the reference's pixels.
    Pipeline,
}

/// Which compressed frames a camera's decoder gets (`decode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecodeMode {
    /// Every frame is decoded; the sampler keeps one per sample period.
    #[default]
    Full,
    /// Only keyframes reach the decoder while the stream's keyframe interval is at most the
    /// sample period (measured from the stream); otherwise every frame is decoded
    /// (docs/ARCHITECTURE.md, "Keyframe decoding").
    Keyframes,
}

impl DecodeMode {
    /// The config name.
    pub fn name(self) -> &'static str {
        match self {
            DecodeMode::Full => "full",
            DecodeMode::Keyframes => "keyframes",
        }
    }
}

/// RTSP lower transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtspTransport {
    /// Interleaved over the RTSP TCP connection (works through NAT and Wi-Fi).
    Tcp,
    /// RTP over UDP.
    Udp,
    /// rtspsrc's default order: UDP, multicast, then TCP.
    Auto,
}

impl RtspTransport {
    /// The value of rtspsrc's `protocols` property.
    pub fn rtspsrc_protocols(self) -> &'static str {
        match self {
            RtspTransport::Tcp => "tcp",
            RtspTransport::Udp => "udp",
            RtspTransport::Auto => "tcp+udp-mcast+udp",
        }
    }
}

/// One camera (`[[cameras]]`).
#[derive(Debug, Clone, PartialEq)]
pub struct CameraConfig {
    /// Identifier used in logs and MQTT topics (`[A-Za-z0-9_-]`, unique).
    pub id: String,
    /// Where frames come from.
    pub uri: SourceUri,
    /// Pipeline template: a built-in name (`pipelines/<name>.pipeline`), or the path of the
    /// camera's own `pipeline_file`.
    pub pipeline: String,
    /// The template read from `pipeline_file` when the configuration was loaded (its text, so a
    /// reload that finds the file changed restarts the camera); `None`: built in, by `pipeline`.
    pub pipeline_file: Option<Template>,
    /// Whether the camera is started.
    pub enabled: bool,
    /// Sampling rate in frames per second of stream time.
    pub sample_fps: f64,
    /// How much sampled footage is kept.
    pub window: Duration,
    /// Fixed model geometry; `None` chooses it from the source by the reference rule.
    pub size: Option<(u32, u32)>,
    /// A running camera that delivers no decoded frame for this long is restarted.
    pub stall: Duration,
    /// Time allowed from (re)start to the first frame.
    pub connect_timeout: Duration,
    /// First retry delay; doubles per failure.
    pub retry_initial: Duration,
    /// Cap on the retry delay.
    pub retry_max: Duration,
    /// RTSP transport.
    pub rtsp_transport: RtspTransport,
    /// Who scales frames to the model geometry.
    pub scaler: Scaler,
    /// Which compressed frames are decoded.
    pub decode: DecodeMode,
    /// RTSP jitter-buffer latency.
    pub latency_ms: u32,
    /// RTSP credentials, if any.
    pub credentials: Option<CredentialSource>,
    /// DiffFP parameters (reference values by default).
    pub prune: PruneParams,
    /// When the camera speaks.
    pub narrate: NarrateConfig,
    /// How its live KV cache stays within its budget.
    pub cache: CacheConfig,
}

impl CameraConfig {
    /// A camera with every default, for programmatic use (tests, `probe`).
    pub fn new(id: impl Into<String>, uri: SourceUri) -> Self {
        let pipeline = uri.default_pipeline().to_string();
        CameraConfig {
            id: id.into(),
            uri,
            pipeline,
            pipeline_file: None,
            enabled: true,
            sample_fps: 1.0,
            window: Duration::from_secs(60),
            size: None,
            stall: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(30),
            rtsp_transport: RtspTransport::Tcp,
            scaler: Scaler::Reference,
            decode: DecodeMode::Full,
            latency_ms: 200,
            credentials: None,
            prune: PruneParams::default(),
            narrate: NarrateConfig::default(),
            cache: CacheConfig::default(),
        }
    }

    /// The camera's template: its own file's, or the built-in one `pipeline` names (an error
    /// when that is unknown or reads another kind of source).
    pub fn template(&self) -> Result<Template, String> {
        match &self.pipeline_file {
            Some(t) => Ok(t.clone()),
            None => Template::for_camera(&self.pipeline, &self.uri),
        }
    }

    /// Number of sampled frames the window holds at most.
    pub fn window_frames(&self) -> usize {
        (self.window.as_secs_f64() * self.sample_fps)
            .ceil()
            .max(1.0) as usize
    }
}

/// Sample rates above this are rejected: the model stages cannot use more, and memory grows with it.
pub const MAX_SAMPLE_FPS: f64 = 30.0;
/// Longest window; the window holds every sampled frame, so memory is bounded by this.
pub const MAX_WINDOW_SECS: f64 = 3600.0;

impl Config {
    /// Follows the frame rules of the configured model (`VisionSpec::frame_rules`, which `run`
    /// reads from its manifest at start and keeps on reload): `[vision]`'s processor rule and
    /// square, and, for a model of square frames, every camera's DiffFP blocks at the model's
    /// tokens (a block is what one token covers).
    pub fn follow_model_frames(&mut self, model: &VisionConfig) {
        self.vision.processor = model.processor;
        self.vision.square = model.square;
        self.vision.clip = model.clip;
        if let Some(s) = model.square {
            for c in &mut self.cameras {
                c.prune.patch = s.token_px as usize;
                c.prune.merge = 1;
            }
        }
    }

    /// Reads and validates a file; every problem is returned at once.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                path: String::new(),
                message: format!("cannot read {}: {e}", path.display()),
            }])
        })?;
        Config::parse(&text, path.parent())
    }

    /// Parses and validates TOML text; relative `password_file`s resolve against `base_dir`.
    pub fn parse(text: &str, base_dir: Option<&Path>) -> Result<Config, ConfigErrors> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let message = e.message().to_string();
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start].matches('\n').count() + 1;
                    format!("TOML syntax error at line {line}: ")
                })
                .unwrap_or_else(|| "TOML syntax error: ".into());
            ConfigErrors(vec![ConfigError {
                path: String::new(),
                message: format!("{at}{message}"),
            }])
        })?;
        let mut sink = Sink::default();
        let config = decode_config(&table, base_dir, &mut sink);
        if sink.errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors(sink.errors))
        }
    }

    /// One line that says what the configuration runs (the first cameras, then a count).
    pub fn summary(&self) -> String {
        const LISTED: usize = 3;
        let mut cams: Vec<String> = self
            .cameras
            .iter()
            .take(if self.cameras.len() > LISTED + 1 {
                LISTED
            } else {
                LISTED + 1
            })
            .map(|c| {
                format!(
                    "{} ({}, {} fps, {} s window{})",
                    c.id,
                    c.uri,
                    c.sample_fps,
                    c.window.as_secs_f64(),
                    if c.enabled { "" } else { ", disabled" }
                )
            })
            .collect();
        if self.cameras.len() > cams.len() {
            cams.push(format!("and {} more", self.cameras.len() - cams.len()));
        }
        format!(
            "{} camera{}: {}",
            self.cameras.len(),
            if self.cameras.len() == 1 { "" } else { "s" },
            cams.join("; ")
        )
    }
}

/// Every key the decoder understands, as `section.key` / `cameras[].key` patterns.
pub fn known_keys() -> Vec<String> {
    let mut table = toml::Table::new();
    table.insert(
        "cameras".into(),
        toml::Value::Array(vec![toml::Value::Table(toml::Table::new())]),
    );
    for section in [
        "runtime",
        "vision",
        "telemetry",
        "engine",
        "mqtt",
        "memory",
        "query",
        "snapshots",
        "home_assistant",
        "http",
    ] {
        table.insert(section.into(), toml::Value::Table(toml::Table::new()));
    }
    let mut mqtt = toml::Table::new();
    mqtt.insert(
        "users".into(),
        toml::Value::Array(vec![toml::Value::Table(toml::Table::new())]),
    );
    table.insert("mqtt".into(), toml::Value::Table(mqtt));
    let mut sink = Sink::default();
    let _ = decode_config(&table, None, &mut sink);
    sink.known
}

fn decode_config(table: &toml::Table, base_dir: Option<&Path>, sink: &mut Sink) -> Config {
    let mut top = Fields::new("", "", table);
    let empty = toml::Table::new();

    let runtime_t = top.table("runtime", sink).unwrap_or(&empty);
    let runtime = decode_runtime(runtime_t, base_dir, sink);
    let vision_t = top.table("vision", sink).unwrap_or(&empty);
    let vision = decode_vision(vision_t, sink);
    let telemetry_t = top.table("telemetry", sink).unwrap_or(&empty);
    let telemetry = decode_telemetry(telemetry_t, &runtime, sink);
    let engine_t = top.table("engine", sink).unwrap_or(&empty);
    let engine = engine::decode_engine(engine_t, base_dir, sink);
    let mqtt_t = top.table("mqtt", sink).unwrap_or(&empty);
    let mqtt = mqtt::decode_mqtt(mqtt_t, base_dir, sink);
    let memory_t = top.table("memory", sink).unwrap_or(&empty);
    let memory = watch::decode_memory(memory_t, sink);
    let query_t = top.table("query", sink).unwrap_or(&empty);
    let query = watch::decode_query(query_t, sink);
    let snapshots_t = top.table("snapshots", sink).unwrap_or(&empty);
    let snapshots = snapshots::decode_snapshots(snapshots_t, sink);
    let ha_t = top.table("home_assistant", sink).unwrap_or(&empty);
    let home_assistant = home_assistant::decode_home_assistant(ha_t, mqtt.enabled, sink);
    let http_t = top.table("http", sink).unwrap_or(&empty);
    let http = http::decode_http(http_t, base_dir, sink);

    let cameras = decode_cameras(&mut top, base_dir, &vision, sink);
    top.finish(sink);
    check_unique_ids(&cameras, sink);
    check_cache_budgets(&cameras, sink);

    Config {
        runtime,
        vision,
        telemetry,
        mqtt,
        cameras,
        engine,
        memory,
        query,
        snapshots,
        home_assistant,
        http,
    }
}

/// The one rule for every path in the file, defaults included: a relative path is relative to the
/// file's directory; a configuration read from no file keeps it relative to the working directory.
fn resolve(p: &Path, base_dir: Option<&Path>) -> PathBuf {
    match base_dir {
        Some(base) if p.is_relative() => base.join(p),
        _ => p.to_path_buf(),
    }
}

fn decode_telemetry(t: &toml::Table, runtime: &RuntimeConfig, sink: &mut Sink) -> TelemetryConfig {
    let mut f = Fields::new("telemetry", "telemetry", t);
    let metrics_listen = f.opt::<String>("metrics_listen", sink).and_then(|a| {
        match a.parse::<std::net::SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                sink.error(
                    f.path_of("metrics_listen"),
                    format!("expected an address such as \"127.0.0.1:9464\", got \"{a}\""),
                );
                None
            }
        }
    });
    let socket: String = f.get("control_socket", "edgevlm.sock".to_string(), sink);
    let control_socket = (!socket.is_empty()).then(|| {
        // Relative to the state directory (itself resolved against the config file's directory).
        let p = PathBuf::from(&socket);
        if p.is_relative() {
            runtime.state_dir.join(p)
        } else {
            p
        }
    });
    if let Some(p) = &control_socket
        && p.as_os_str().len() > 100
    {
        sink.error(
            f.path_of("control_socket"),
            format!(
                "{} is too long for a Unix socket path (at most 100 bytes)",
                p.display()
            ),
        );
    }
    f.finish(sink);
    TelemetryConfig {
        metrics_listen,
        control_socket,
    }
}

fn decode_runtime(t: &toml::Table, base_dir: Option<&Path>, sink: &mut Sink) -> RuntimeConfig {
    let mut f = Fields::new("runtime", "runtime", t);
    let status_secs: f64 = f.get("status_interval_secs", 10.0, sink);
    if !(status_secs.is_finite() && (0.1..=3600.0).contains(&status_secs)) {
        sink.error(
            f.path_of("status_interval_secs"),
            format!("must be between 0.1 and 3600, got {status_secs}"),
        );
    }
    let state_dir = resolve(&f.get("state_dir", PathBuf::from("state"), sink), base_dir);
    let release_secs: f64 = f.get("release_memory_secs", 60.0, sink);
    if !(release_secs.is_finite()
        && (release_secs == 0.0 || (1.0..=86_400.0).contains(&release_secs)))
    {
        sink.error(
            f.path_of("release_memory_secs"),
            format!("must be 0 (never) or between 1 and 86400, got {release_secs}"),
        );
    }
    f.finish(sink);
    RuntimeConfig {
        status_interval: secs(status_secs, Duration::from_secs(10)),
        state_dir,
        release_memory: (release_secs > 0.0).then(|| secs(release_secs, Duration::from_secs(60))),
    }
}

fn decode_vision(t: &toml::Table, sink: &mut Sink) -> VisionConfig {
    let d = VisionConfig::default();
    let mut f = Fields::new("vision", "vision", t);
    let v = VisionConfig {
        max_visual_tokens: f.get("max_visual_tokens", d.max_visual_tokens, sink),
        max_frames: f.get("max_frames", d.max_frames, sink),
        min_frame_tokens: f.get("min_frame_tokens", d.min_frame_tokens, sink),
        processor: None,
        square: None,
        clip: None,
    };
    if v.max_visual_tokens < 1 {
        sink.error(f.path_of("max_visual_tokens"), "must be > 0, got 0");
    }
    if !(1..=10_000).contains(&v.max_frames) {
        sink.error(
            f.path_of("max_frames"),
            format!("must be between 1 and 10000, got {}", v.max_frames),
        );
    }
    if v.min_frame_tokens < 1 {
        sink.error(f.path_of("min_frame_tokens"), "must be > 0, got 0");
    }
    f.finish(sink);
    v
}

/// The `[[cameras]]` array, one [`CameraConfig`] per valid entry.
fn decode_cameras(
    top: &mut Fields<'_>,
    base_dir: Option<&Path>,
    vision: &VisionConfig,
    sink: &mut Sink,
) -> Vec<CameraConfig> {
    let mut cameras = Vec::new();
    match top.raw("cameras", sink) {
        None => sink.error("cameras", "at least one [[cameras]] entry is required"),
        Some(toml::Value::Array(items)) => {
            if items.is_empty() {
                sink.error("cameras", "at least one [[cameras]] entry is required");
            }
            for (i, item) in items.iter().enumerate() {
                let path = format!("cameras[{i}]");
                match item {
                    toml::Value::Table(t) => {
                        if let Some(c) = decode_camera(&path, t, base_dir, vision, sink) {
                            cameras.push(c);
                        }
                    }
                    other => sink.error(
                        path,
                        format!("expected a table, got {}", decode::type_name(other)),
                    ),
                }
            }
        }
        Some(other) => sink.error(
            "cameras",
            format!(
                "expected an array of tables ([[cameras]]), got {}",
                decode::type_name(other)
            ),
        ),
    }
    cameras
}

/// Reports every camera whose `cache_budget` cannot hold one whole frame of its fixed geometry and
/// a system turn (a first frame is kept whole); a camera that follows its source is checked when
/// its first frame arrives (the live cache logs it).
fn check_cache_budgets(cameras: &[CameraConfig], sink: &mut Sink) {
    for (i, cam) in cameras.iter().enumerate() {
        if let (Some(budget), Some((w, h))) = (cam.cache.budget, cam.size) {
            let frame = (w / 28) * (h / 28);
            if budget < frame + MIN_CACHE_BUDGET {
                sink.error(
                    format!("cameras[{i}].cache_budget"),
                    format!(
                        "{budget} positions cannot hold one {w}x{h} frame ({frame} visual tokens) \
                         and the prompt around it: give at least {}",
                        frame + MIN_CACHE_BUDGET
                    ),
                );
            }
        }
    }
}

/// Reports every camera whose id an earlier camera already has.
fn check_unique_ids(cameras: &[CameraConfig], sink: &mut Sink) {
    for (i, cam) in cameras.iter().enumerate() {
        if let Some(first) = cameras[..i].iter().position(|c| c.id == cam.id) {
            sink.error(
                format!("cameras[{i}].id"),
                format!("duplicate id `{}` (also cameras[{first}])", cam.id),
            );
        }
    }
}

/// One `[[cameras]]` entry, assembled from its parts; `None` when its id or uri is unusable (reported).
///
/// The parts run in the order the keys were always read: problems are reported in that order.
fn decode_camera(
    path: &str,
    t: &toml::Table,
    base_dir: Option<&Path>,
    vision: &VisionConfig,
    sink: &mut Sink,
) -> Option<CameraConfig> {
    let mut f = Fields::new(path, "cameras[]", t);
    let d = CameraConfig::new("", SourceUri::Test("ball".into()));
    let source = decode_source(&mut f, sink);
    let sampling = decode_sampling(&mut f, &d, sink);
    let size = decode_size(&mut f, vision, sink);
    let timing = decode_timing(&mut f, &d, sink);
    let stream = decode_stream(&mut f, &d, sink);
    let credentials = decode_camera_credentials(&mut f, source.uri.as_ref(), base_dir, sink);
    let prune = decode_prune(&mut f, size, sink);
    let narrate = watch::decode_narrate(&mut f, sink);
    let cache = watch::decode_cache(&mut f, sink);
    f.finish(sink);

    let uri = source.uri?;
    let (pipeline, pipeline_file) = decode_pipeline(
        path,
        source.pipeline.as_deref(),
        source.pipeline_file.as_deref(),
        &uri,
        base_dir,
        sink,
    );
    let template = match &pipeline_file {
        Some(t) => Some(t.clone()),
        None => Template::by_name(&pipeline),
    };
    if stream.decode == DecodeMode::Keyframes
        && let Some(t) = template
        && !t.decodes_in_software()
    {
        sink.error(
            format!("{path}.decode"),
            format!(
                "\"keyframes\" needs a template that decodes in software (decodebin: rtsp, file); \
                 `{pipeline}` {}",
                if t.file.is_some() {
                    "has no decodebin, whose decoder the keyframe gate watches"
                } else if t.source_kind() == "rtsp" {
                    "decodes on the GPU, where a full decode costs the CPU nothing"
                } else {
                    "delivers raw frames, with nothing to skip"
                }
            ),
        );
    }
    Some(CameraConfig {
        id: source.id?,
        uri,
        pipeline,
        pipeline_file,
        enabled: source.enabled,
        sample_fps: sampling.sample_fps,
        window: sampling.window,
        size,
        stall: timing.stall,
        connect_timeout: timing.connect_timeout,
        retry_initial: timing.retry.initial,
        retry_max: timing.retry.max,
        rtsp_transport: stream.rtsp_transport,
        scaler: stream.scaler,
        decode: stream.decode,
        latency_ms: stream.latency_ms,
        credentials,
        prune,
        narrate,
        cache,
    })
}

/// What a camera is and where its frames come from (`id`, `uri`, `pipeline`, `pipeline_file`,
/// `enabled`).
struct CameraSource {
    /// `None`: missing or invalid type (reported); an invalid id is reported but kept.
    id: Option<String>,
    /// `None`: missing, invalid type or unparsable (reported).
    uri: Option<SourceUri>,
    /// The template as written; checked against the uri by [`decode_pipeline`].
    pipeline: Option<String>,
    /// The user template file as written (relative to the configuration's directory).
    pipeline_file: Option<PathBuf>,
    enabled: bool,
}

fn decode_source(f: &mut Fields<'_>, sink: &mut Sink) -> CameraSource {
    let id = decode_camera_id(f, sink);
    let uri = decode_uri(f, sink);
    let pipeline = f.opt("pipeline", sink);
    let pipeline_file = f.opt("pipeline_file", sink);
    let enabled = f.get("enabled", true, sink);
    CameraSource {
        id,
        uri,
        pipeline,
        pipeline_file,
        enabled,
    }
}

/// `id`: required, 1-64 characters that are safe in an MQTT topic.
fn decode_camera_id(f: &mut Fields<'_>, sink: &mut Sink) -> Option<String> {
    let id: Option<String> = f.opt("id", sink);
    match &id {
        None if !f.has("id") => sink.error(f.path_of("id"), "is required"),
        Some(id) if !valid_id(id) => sink.error(
            f.path_of("id"),
            format!(
                "must be 1-64 characters of A-Z, a-z, 0-9, `_` or `-` (it is used in MQTT topics), got `{id}`"
            ),
        ),
        _ => {}
    }
    id
}

/// `uri`: required, parsed (and refused when it carries credentials) by [`SourceUri::parse`].
fn decode_uri(f: &mut Fields<'_>, sink: &mut Sink) -> Option<SourceUri> {
    match f.opt::<String>("uri", sink) {
        None => {
            if !f.has("uri") {
                sink.error(f.path_of("uri"), "is required");
            }
            None
        }
        Some(u) => match SourceUri::parse(&u) {
            Ok(uri) => Some(uri),
            Err(msg) => {
                sink.error(f.path_of("uri"), msg);
                None
            }
        },
    }
}

/// The camera's pipeline template, which must read its uri: a built-in one by name (the uri's
/// default when not given), or the user's `pipeline_file`, read and checked now (so `validate` and
/// a reload check it), its path relative to the configuration's directory. Returns the name (the
/// file's path for a user template) and the user template.
fn decode_pipeline(
    path: &str,
    pipeline: Option<&str>,
    pipeline_file: Option<&Path>,
    uri: &SourceUri,
    base_dir: Option<&Path>,
    sink: &mut Sink,
) -> (String, Option<Template>) {
    let Some(file) = pipeline_file else {
        let pipeline = pipeline.unwrap_or(uri.default_pipeline()).to_string();
        if let Err(why) = Template::for_camera(&pipeline, uri) {
            sink.error(format!("{path}.pipeline"), why);
        }
        return (pipeline, None);
    };
    let key = format!("{path}.pipeline_file");
    if let Some(name) = pipeline {
        sink.error(
            key.clone(),
            format!(
                "give `pipeline` (a built-in template, here `{name}`) or `pipeline_file` (your \
                 own), not both"
            ),
        );
    }
    let file = resolve(file, base_dir);
    let name = file.display().to_string();
    match Template::load_for_camera(&file, uri) {
        Ok(t) => (name, Some(t)),
        Err(problems) => {
            for p in problems {
                sink.error(key.clone(), p);
            }
            (name, None)
        }
    }
}

/// How often a camera samples and how much it keeps (`sample_fps`, `window_secs`).
struct Sampling {
    sample_fps: f64,
    window: Duration,
}

fn decode_sampling(f: &mut Fields<'_>, d: &CameraConfig, sink: &mut Sink) -> Sampling {
    let sample_fps: f64 = f.get("sample_fps", d.sample_fps, sink);
    let fps_ok = sample_fps.is_finite() && sample_fps > 0.0 && sample_fps <= MAX_SAMPLE_FPS;
    if !fps_ok {
        sink.error(
            f.path_of("sample_fps"),
            format!("must be > 0 and <= {MAX_SAMPLE_FPS}, got {sample_fps}"),
        );
    }
    let window_secs: f64 = f.get("window_secs", d.window.as_secs_f64(), sink);
    if !(window_secs.is_finite() && window_secs > 0.0 && window_secs <= MAX_WINDOW_SECS) {
        sink.error(
            f.path_of("window_secs"),
            format!("must be > 0 and <= {MAX_WINDOW_SECS}, got {window_secs}"),
        );
    } else if fps_ok && window_secs * sample_fps < 1.0 {
        sink.error(
            f.path_of("window_secs"),
            format!(
                "must hold at least one sampled frame (>= 1/sample_fps = {} s), got {window_secs}",
                1.0 / sample_fps
            ),
        );
    }
    Sampling {
        sample_fps,
        window: secs(window_secs, d.window),
    }
}

/// A fixed model geometry (`width` + `height`, multiples of 28 within the visual-token budget);
/// `None` follows the source.
fn decode_size(f: &mut Fields<'_>, vision: &VisionConfig, sink: &mut Sink) -> Option<(u32, u32)> {
    let width: Option<u32> = f.opt("width", sink);
    let height: Option<u32> = f.opt("height", sink);
    for (key, v) in [("width", width), ("height", height)] {
        if let Some(v) = v
            && (v == 0 || v % 28 != 0 || v > 4032)
        {
            sink.error(
                f.path_of(key),
                format!(
                    "must be a multiple of 28 (patch 14 x merge 2) between 28 and 4032, got {v}"
                ),
            );
        }
    }
    let (w, h) = match (width, height) {
        (Some(w), Some(h)) => (w, h),
        (None, None) => return None,
        (Some(_), None) | (None, Some(_)) => {
            if f.has("width") != f.has("height") {
                sink.error(
                    f.path_of(if width.is_some() { "height" } else { "width" }),
                    "width and height must be given together (or neither, to follow the source)",
                );
            }
            return None;
        }
    };
    let tokens = (w / 28) * (h / 28);
    if tokens > vision.max_visual_tokens {
        sink.error(
            f.path_of("width"),
            format!(
                "{w}x{h} is {tokens} visual tokens per frame, over vision.max_visual_tokens = {}",
                vision.max_visual_tokens
            ),
        );
    }
    Some((w, h))
}

/// When a camera counts as stalled or failed to connect, and how it retries.
struct CameraTiming {
    stall: Duration,
    connect_timeout: Duration,
    retry: Retry,
}

fn decode_timing(f: &mut Fields<'_>, d: &CameraConfig, sink: &mut Sink) -> CameraTiming {
    let stall_secs = ranged(f, "stall_secs", d.stall.as_secs_f64(), 0.5, 3600.0, sink);
    let connect_default = d.connect_timeout.as_secs_f64();
    let connect_secs = ranged(f, "connect_timeout_secs", connect_default, 0.5, 600.0, sink);
    CameraTiming {
        stall: secs(stall_secs, d.stall),
        connect_timeout: secs(connect_secs, d.connect_timeout),
        retry: decode_retry(f, d.retry_initial, d.retry_max, sink),
    }
}

/// How a camera's stream is read (`rtsp_transport`, `scaler`, `latency_ms`).
struct StreamOptions {
    rtsp_transport: RtspTransport,
    scaler: Scaler,
    decode: DecodeMode,
    latency_ms: u32,
}

fn decode_stream(f: &mut Fields<'_>, d: &CameraConfig, sink: &mut Sink) -> StreamOptions {
    let rtsp_transport = f.choice(
        "rtsp_transport",
        &[
            ("tcp", RtspTransport::Tcp),
            ("udp", RtspTransport::Udp),
            ("auto", RtspTransport::Auto),
        ],
        d.rtsp_transport,
        sink,
    );
    let scaler = f.choice(
        "scaler",
        &[
            ("reference", Scaler::Reference),
            ("pipeline", Scaler::Pipeline),
        ],
        d.scaler,
        sink,
    );
    let decode = f.choice(
        "decode",
        &[
            ("full", DecodeMode::Full),
            ("keyframes", DecodeMode::Keyframes),
        ],
        d.decode,
        sink,
    );
    let latency_ms: u32 = f.get("latency_ms", d.latency_ms, sink);
    if latency_ms > 10_000 {
        sink.error(
            f.path_of("latency_ms"),
            format!("must be <= 10000, got {latency_ms}"),
        );
    }
    StreamOptions {
        rtsp_transport,
        scaler,
        decode,
        latency_ms,
    }
}

/// A camera's login (`username` + `password_file`/`password_env`), for rtsp:// sources only.
fn decode_camera_credentials(
    f: &mut Fields<'_>,
    uri: Option<&SourceUri>,
    base_dir: Option<&Path>,
    sink: &mut Sink,
) -> Option<CredentialSource> {
    let credentials = mqtt::decode_credentials(f, base_dir, sink);
    if let (Some(_), Some(uri)) = (&credentials, uri)
        && !matches!(uri, SourceUri::Rtsp(_))
    {
        sink.error(
            f.path_of("username"),
            format!("credentials only apply to rtsp:// sources, not {uri}"),
        );
    }
    credentials
}

/// DiffFP keys of a camera; the defaults are the reference values (docs/ARCHITECTURE.md, "Prune (DiffFP)").
fn decode_prune(f: &mut Fields<'_>, size: Option<(u32, u32)>, sink: &mut Sink) -> PruneParams {
    let d = PruneParams::default();
    let mode = match f.opt::<String>("prune_mode", sink) {
        None => d.mode,
        Some(m) => m.parse::<PruneMode>().unwrap_or_else(|e| {
            sink.error(f.path_of("prune_mode"), e.to_string());
            d.mode
        }),
    };
    let threshold: f64 = f.get("prune_threshold", f64::from(d.threshold), sink);
    if !(threshold.is_finite() && (0.0..=510.0).contains(&threshold)) {
        sink.error(
            f.path_of("prune_threshold"),
            format!("must be between 0 and 510 (255 * mean |diff| of values in [-1, 1]), got {threshold}"),
        );
    }
    let min_tokens: u32 = f.get("prune_min_tokens", d.min_tokens as u32, sink);
    if min_tokens < 1 {
        sink.error(
            f.path_of("prune_min_tokens"),
            "must be >= 1 (every frame keeps a token), got 0",
        );
    }
    if let Some((w, h)) = size
        && min_tokens > (w / 28) * (h / 28)
    {
        sink.error(
            f.path_of("prune_min_tokens"),
            format!(
                "must be <= the {} tokens of a {w}x{h} frame, got {min_tokens}",
                (w / 28) * (h / 28)
            ),
        );
    }
    let merge: u32 = f.get("prune_merge_size", d.merge as u32, sink);
    if !(merge == 1 || merge == 2) {
        sink.error(
            f.path_of("prune_merge_size"),
            format!("must be 1 (14 px tokens) or 2 (28 px tokens, the video default), got {merge}"),
        );
    }
    PruneParams {
        mode,
        threshold: threshold as f32,
        min_tokens: min_tokens.max(1) as usize,
        patch: 14,
        merge: if merge == 1 { 1 } else { 2 },
    }
}

/// Expands a leading `$CREDENTIALS_DIRECTORY` (systemd `LoadCredential=`) in a password path.
fn expand_credentials_dir(path: &Path) -> Result<PathBuf, String> {
    let text = path.to_string_lossy();
    let rest = ["${CREDENTIALS_DIRECTORY}", "$CREDENTIALS_DIRECTORY"]
        .iter()
        .find_map(|prefix| text.strip_prefix(prefix));
    match rest {
        None => Ok(path.to_path_buf()),
        Some(rest) => match std::env::var_os("CREDENTIALS_DIRECTORY") {
            Some(dir) => Ok(PathBuf::from(dir).join(rest.trim_start_matches('/'))),
            None => Err(
                "uses $CREDENTIALS_DIRECTORY, which is not set (it is set by systemd for units \
                 with LoadCredential=)"
                    .into(),
            ),
        },
    }
}

/// A number `key` (default `default`) that must lie in `min..=max`; out of range is reported and
/// returned as is.
pub(super) fn ranged(
    f: &mut Fields<'_>,
    key: &'static str,
    default: f64,
    min: f64,
    max: f64,
    sink: &mut Sink,
) -> f64 {
    let v: f64 = f.get(key, default, sink);
    check_range(f, key, v, min, max, sink);
    v
}

pub(super) fn check_range(f: &Fields<'_>, key: &str, v: f64, min: f64, max: f64, sink: &mut Sink) {
    if !(v.is_finite() && v >= min && v <= max) {
        sink.error(
            f.path_of(key),
            format!("must be between {min} and {max}, got {v}"),
        );
    }
}

/// A reconnect schedule: the first delay, doubled per failure up to the cap.
pub(super) struct Retry {
    pub initial: Duration,
    pub max: Duration,
}

/// `retry_initial_secs` and `retry_max_secs` of a table (a camera, the broker); the cap must not
/// be below the first delay.
pub(super) fn decode_retry(
    f: &mut Fields<'_>,
    initial: Duration,
    max: Duration,
    sink: &mut Sink,
) -> Retry {
    let retry_initial = ranged(
        f,
        "retry_initial_secs",
        initial.as_secs_f64(),
        0.01,
        3600.0,
        sink,
    );
    let retry_max = ranged(f, "retry_max_secs", max.as_secs_f64(), 0.01, 86400.0, sink);
    if retry_max.is_finite() && retry_initial.is_finite() && retry_max < retry_initial {
        sink.error(
            f.path_of("retry_max_secs"),
            format!("must be >= retry_initial_secs ({retry_initial}), got {retry_max}"),
        );
    }
    Retry {
        initial: secs(retry_initial, initial),
        max: secs(retry_max, max),
    }
}

/// Seconds as a Duration; an invalid value (already reported) falls back to `fallback`.
pub(super) fn secs(v: f64, fallback: Duration) -> Duration {
    Duration::try_from_secs_f64(v).unwrap_or(fallback)
}

fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Every problem of a configuration text, as printed (none when it is valid).
#[cfg(test)]
pub(crate) fn errors(text: &str) -> Vec<String> {
    match Config::parse(text, None) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_camera_gets_every_default() {
        let c = Config::parse("[[cameras]]\nid = \"a\"\nuri = \"test://ball\"\n", None).unwrap();
        let cam = &c.cameras[0];
        assert_eq!(cam.pipeline, "test");
        assert_eq!(cam.sample_fps, 1.0);
        assert_eq!(cam.window, Duration::from_secs(60));
        assert_eq!(cam.window_frames(), 60);
        assert_eq!(c.vision, VisionConfig::default());
    }

    #[test]
    fn keyframe_decoding_is_for_templates_that_decode_in_software() {
        let c = Config::parse(
            "[[cameras]]\nid = \"a\"\nuri = \"rtsp://cam/a\"\ndecode = \"keyframes\"\n\
             [[cameras]]\nid = \"b\"\nuri = \"/clips/a.mp4\"\ndecode = \"keyframes\"\n",
            None,
        )
        .unwrap();
        assert_eq!(c.cameras[0].decode, DecodeMode::Keyframes);
        assert_eq!(c.cameras[1].decode, DecodeMode::Keyframes);
        let errs = errors(
            "[[cameras]]\nid = \"a\"\nuri = \"rtsp://cam/a\"\npipeline = \"rtsp-nvdec\"\n\
             decode = \"keyframes\"\n\
             [[cameras]]\nid = \"b\"\nuri = \"test://ball\"\ndecode = \"keyframes\"\n\
             [[cameras]]\nid = \"c\"\nuri = \"test://ball\"\ndecode = \"some\"\n",
        );
        for e in [
            "cameras[0].decode: \"keyframes\" needs a template that decodes in software \
             (decodebin: rtsp, file); `rtsp-nvdec` decodes on the GPU",
            "cameras[1].decode: \"keyframes\" needs a template that decodes in software \
             (decodebin: rtsp, file); `test` delivers raw frames",
            "cameras[2].decode: ",
        ] {
            assert!(
                errs.iter().any(|g| g.starts_with(e)),
                "missing `{e}` in {errs:#?}"
            );
        }
        assert_eq!(errs.len(), 3, "{errs:#?}");
    }

    #[test]
    fn a_pipeline_file_is_read_relative_to_the_config_and_held_as_text() {
        let dir = std::env::temp_dir().join(format!("edgevlm-pf-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("pipelines")).unwrap();
        let file = dir.join("pipelines/mine.pipeline");
        let text = Template::by_name("rtsp").unwrap().text.to_string();
        std::fs::write(&file, &text).unwrap();
        let toml = "[[cameras]]\nid = \"a\"\nuri = \"rtsp://cam/a\"\n\
                    pipeline_file = \"pipelines/mine.pipeline\"\ndecode = \"keyframes\"\n";
        let before = Config::parse(toml, Some(&dir)).unwrap();
        let cam = &before.cameras[0];
        assert_eq!(cam.pipeline, file.display().to_string());
        let t = cam.template().unwrap();
        assert_eq!(
            (t.file.as_deref(), t.text.as_ref()),
            (Some(file.as_path()), text.as_str())
        );
        // decodebin: keyframe decoding is allowed, as for the built-in `rtsp`.
        assert_eq!(cam.decode, DecodeMode::Keyframes);
        // The file is read at every load: an edited file is a changed camera (a reload restarts it).
        std::fs::write(&file, text.replace("drop-only=true", "drop-only=false")).unwrap();
        let after = Config::parse(toml, Some(&dir)).unwrap();
        assert_ne!(before.cameras[0], after.cameras[0]);
        assert_eq!(
            Config::parse(toml, Some(&dir)).unwrap().cameras[0],
            after.cameras[0]
        );
        // A user template without decodebin cannot gate keyframes, and says why.
        std::fs::write(
            &file,
            text.replace("decodebin", "rtph264depay ! avdec_h264"),
        )
        .unwrap();
        let errs = Config::parse(toml, Some(&dir)).unwrap_err().to_string();
        assert!(
            errs.ends_with(&format!(
                "`{}` has no decodebin, whose decoder the keyframe gate watches",
                file.display()
            )),
            "{errs}"
        );
        // Without the configuration's directory, the relative path does not resolve.
        let errs = errors(toml);
        assert!(
            errs.len() == 1
                && errs[0]
                    .starts_with("cameras[0].pipeline_file: cannot read pipelines/mine.pipeline: "),
            "{errs:#?}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let errs = errors(
            r#"
[runtime]
status_interval_secs = 0
colour = "red"

[[cameras]]
id = "front"
uri = "rtsp://cam/a"
sample_fps = 2

[[cameras]]
id = "front"
uri = "rtsp://admin:pw@cam/b"
sample_fps = 0
window_sec = 30
width = 100
"#,
        );
        let expected = [
            "runtime.status_interval_secs: must be between 0.1 and 3600, got 0",
            "runtime.colour: unknown key",
            "cameras[1].uri: `rtsp://***@cam/b` carries credentials",
            "cameras[1].sample_fps: must be > 0 and <= 30, got 0",
            "cameras[1].width: must be a multiple of 28",
            "cameras[1].height: width and height must be given together",
            "cameras[1].window_sec: unknown key; did you mean `window_secs`?",
        ];
        for e in expected {
            assert!(
                errs.iter().any(|got| got.starts_with(e)),
                "missing `{e}` in {errs:#?}"
            );
        }
        assert!(!errs.iter().any(|e| e.contains("pw@")), "{errs:#?}");
    }

    #[test]
    fn snapshot_and_home_assistant_settings_are_checked_with_their_paths() {
        let errs = errors(
            "[snapshots]\nmax_width = 10\nquality = 0\nqueue = 0\n\
             [home_assistant]\ndiscovery = true\ndiscovery_prefix = \"ha/#\"\n\
             [mqtt]\nenabled = false\n\
             [[cameras]]\nid = \"a\"\nuri = \"test://ball\"\n",
        );
        let expected = [
            "snapshots.max_width: must be between 32 and 3840, got 10",
            "snapshots.quality: must be between 1 and 100, got 0",
            "snapshots.queue: must be between 1 and 1024, got 0",
            "home_assistant.discovery: is true but mqtt.enabled is false",
            "home_assistant.discovery_prefix: `ha/#`: must not contain",
        ];
        let errs_http = errors(
            "[http]\nlisten = \"0.0.0.0:8080\"\ncors_origins = [\"ha.local\"]\n\
             [[cameras]]\nid = \"a\"\nuri = \"test://ball\"\n",
        );
        for e in [
            "http.listen: 0.0.0.0:8080 is not a loopback address",
            "http.cors_origins: `ha.local`: an origin is a scheme and a host",
        ] {
            assert!(
                errs_http.iter().any(|got| got.starts_with(e)),
                "missing `{e}` in {errs_http:#?}"
            );
        }
        for e in expected {
            assert!(
                errs.iter().any(|got| got.starts_with(e)),
                "missing `{e}` in {errs:#?}"
            );
        }
        let long = "x".repeat(201);
        let errs = errors(&format!(
            "[[cameras]]\nid = \"a\"\nuri = \"test://ball\"\nwatch_for = \"{long}\"\n"
        ));
        assert!(
            errs.iter().any(|e| e.starts_with(
                "cameras[0].watch_for: must be 1-200 characters without control characters"
            ) && e.ends_with("got 201")),
            "{errs:#?}"
        );
        let ok = Config::parse("[[cameras]]\nid = \"a\"\nuri = \"test://ball\"\n", None).unwrap();
        assert_eq!(ok.snapshots, SnapshotConfig::default());
        assert!(!ok.home_assistant.discovery);
    }

    #[test]
    fn types_are_checked_per_key() {
        let errs = errors("[[cameras]]\nid = 3\nuri = \"test://ball\"\nsample_fps = \"fast\"\n");
        assert!(
            errs.iter()
                .any(|e| e.starts_with("cameras[0].id: expected a string, got integer")),
            "{errs:#?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("cameras[0].sample_fps: expected a number")),
            "{errs:#?}"
        );
    }

    #[test]
    fn passwords_in_the_file_are_refused() {
        let errs =
            errors("[[cameras]]\nid=\"a\"\nuri=\"rtsp://h/x\"\nusername=\"u\"\npassword=\"p\"\n");
        assert!(
            errs.iter()
                .any(|e| e.starts_with("cameras[0].password: passwords are never written")),
            "{errs:#?}"
        );
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let errs = errors("[[cameras]]\nid = \"a\nuri = 3\n");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].contains("line 2"), "{errs:?}");
    }

    #[test]
    fn known_keys_cover_every_section() {
        let keys = known_keys();
        for k in [
            "runtime.status_interval_secs",
            "vision.max_visual_tokens",
            "cameras[].sample_fps",
            "cameras[].password_env",
        ] {
            assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
        }
    }
}
