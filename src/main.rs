//! The `edgevlm` command line: only argument handling; every stage lives in the library.

use anyhow::Context;
use clap::{Parser, Subcommand};
use edgevlm::config::{CameraConfig, Config, CredentialSource, PasswordSource, SourceUri};
use edgevlm::publish::CameraDirectory;
use edgevlm::supervisor::{CameraReport, RateMeter, Supervisor};
use edgevlm::telemetry::{Systemd, control, metrics};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "edgevlm",
    version,
    about = "Let a video language model watch live cameras on an edge device"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the cameras of a configuration until SIGINT/SIGTERM; SIGHUP re-reads the file.
    Run {
        /// Configuration file.
        #[arg(short, long, default_value = "configs/edgevlm.toml")]
        config: PathBuf,
    },
    /// DiffFP masks of a clip, one JSON line per frame (inspection and parity checks).
    Prune {
        /// Consecutive packed RGB24 frames of --width x --height.
        #[arg(long, conflicts_with = "uri", required_unless_present = "uri")]
        raw: Option<PathBuf>,
        /// A video source instead (rtsp://, file://, test://, …), ingested at the model geometry.
        #[arg(long)]
        uri: Option<String>,
        /// Frame width (multiple of 28); with --uri, default from the source.
        #[arg(long)]
        width: Option<u32>,
        /// Frame height (multiple of 28).
        #[arg(long)]
        height: Option<u32>,
        /// reference (VideoLLaMA3, default), adaptive (ours) or off.
        #[arg(long, default_value = "reference")]
        mode: String,
        /// Threshold on 255 * mean |diff| of normalised values.
        #[arg(long, default_value_t = 0.1)]
        threshold: f32,
        /// Tokens kept per frame at least.
        #[arg(long, default_value_t = 1)]
        min_tokens: usize,
        /// With --uri: sampling rate.
        #[arg(long, default_value_t = 1.0)]
        sample_fps: f64,
        /// With --uri: frames to prune.
        #[arg(long, default_value_t = 10)]
        frames: usize,
    },
    /// Print a one-screen summary of a running instance (through its control socket).
    Status {
        /// Configuration of the running instance (to find its control socket).
        #[arg(short, long, default_value = "configs/edgevlm.toml")]
        config: PathBuf,
        /// The control socket, instead of reading it from the configuration.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Print the raw JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Ask a question about a camera over MQTT and print the answer as it streams.
    ///
    /// Exit status: 0 answered, 1 the runtime replied with an error (its code and message are
    /// printed), 3 no answer in time or the broker is unreachable, 2 bad arguments.
    Ask {
        /// Camera id.
        camera: String,
        /// The question.
        question: String,
        /// Broker URL (mqtt://host:port or mqtts://host:port).
        #[arg(long, default_value = "mqtt://127.0.0.1:1883")]
        broker: String,
        /// Topic prefix of the runtime.
        #[arg(long, default_value = "edgevlm")]
        prefix: String,
        /// Seconds of recent footage to ground the answer on (default: the camera's window).
        #[arg(long)]
        window_secs: Option<f64>,
        /// Most tokens to generate.
        #[arg(long)]
        max_tokens: Option<u32>,
        /// Give up after this many seconds without the final answer.
        #[arg(long, default_value_t = 60.0)]
        timeout_secs: f64,
        /// Query id (default: a fresh one).
        #[arg(long)]
        id: Option<String>,
        /// Broker user name.
        #[arg(long)]
        username: Option<String>,
        /// Environment variable that holds the broker password.
        #[arg(long, requires = "username", conflicts_with = "password_file")]
        password_env: Option<String>,
        /// File that holds the broker password.
        #[arg(long, requires = "username")]
        password_file: Option<PathBuf>,
        /// CA certificates (PEM) for an mqtts:// broker (default: the system's).
        #[arg(long)]
        ca_file: Option<PathBuf>,
        /// Print the final answer (or the error reply) as one JSON line instead of the text.
        #[arg(long)]
        json: bool,
    },
    /// Check a configuration file: every problem is reported, one line each; exit 2 if any.
    Validate {
        /// Configuration file.
        file: PathBuf,
    },
    /// Attach to one source and print one line per sampled frame.
    Probe {
        /// rtsp://, file://, v4l2://, test:// or a file path (no credentials in the URL).
        uri: String,
        /// Sampling rate.
        #[arg(long, default_value_t = 1.0)]
        sample_fps: f64,
        /// Frames to print before exiting.
        #[arg(long, default_value_t = 5)]
        frames: usize,
        /// Model width (multiple of 28); default: chosen from the source by the reference rule.
        #[arg(long, requires = "height")]
        width: Option<u32>,
        /// Model height (multiple of 28).
        #[arg(long, requires = "width")]
        height: Option<u32>,
        /// Print JSON lines instead of text.
        #[arg(long)]
        json: bool,
        /// Seconds allowed until the first frame.
        #[arg(long, default_value_t = 10.0)]
        timeout_secs: f64,
        /// Pipeline template (default: from the URI scheme).
        #[arg(long)]
        pipeline: Option<String>,
        /// RTSP user name.
        #[arg(long)]
        username: Option<String>,
        /// Environment variable that holds the RTSP password.
        #[arg(long, requires = "username", conflicts_with = "password_file")]
        password_env: Option<String>,
        /// File that holds the RTSP password.
        #[arg(long, requires = "username")]
        password_file: Option<PathBuf>,
    },
    /// Print a rendered prompt with one placeholder per kept token (inspection and parity checks).
    ///
    /// videollama3 and tiny: `<image>` per kept token, offline (`Time 0.0s:` per frame) or stream
    /// (one `<|stream_start|>` item per frame, the question as a user message after the last).
    /// apollo: --timestamps are clip starts, each clip ends 3/4 of --clip-duration later (its last
    /// sampled frame), `<|video_token|>` per token. Exit status 2 on bad arguments.
    Prompt {
        /// videollama3, apollo or tiny.
        #[arg(long)]
        family: String,
        /// Frame (or Apollo clip start) times in seconds, increasing, e.g. 0,1,2.
        #[arg(long)]
        timestamps: String,
        /// Kept tokens per frame, one per timestamp (default: 1 per frame, 32 per Apollo clip).
        #[arg(long)]
        kept: Option<String>,
        /// The question.
        #[arg(long)]
        question: String,
        /// offline (default) or stream (videollama3 and tiny only).
        #[arg(long, default_value = "offline")]
        format: String,
        /// Apollo: `config.clip_duration` as stored ("2" int, "2.0" float).
        #[arg(long, default_value = "2")]
        clip_duration: String,
        /// Apollo: video duration in seconds (default: last clip start + clip duration).
        #[arg(long)]
        duration: Option<f64>,
    },
    /// Check a model directory, or build its TensorRT engines (docs/ENGINES.md).
    Engines {
        #[command(subcommand)]
        action: EnginesAction,
    },
}

#[derive(Subcommand)]
enum EnginesAction {
    /// Validate a model directory (manifest, checksums, tokenizer, tensor contract, one run of
    /// each model) and print a summary; exit 1 with the first problem otherwise.
    Check(EngineArgs),
    /// Build the TensorRT engines for the cameras' geometries into the state directory.
    Build {
        #[command(flatten)]
        args: EngineArgs,
        /// A geometry to build for, WIDTHxHEIGHT (repeatable; adds to the config's cameras).
        #[arg(long = "size", value_name = "WxH")]
        sizes: Vec<String>,
    },
}

#[derive(clap::Args)]
struct EngineArgs {
    /// Model directory (default: engine.model_dir of the configuration).
    dir: Option<PathBuf>,
    /// Configuration file ([engine], runtime.state_dir, camera sizes); default: built-in defaults.
    #[arg(short, long)]
    config: Option<PathBuf>,
    /// Execution provider of all three models: cpu, cuda or tensorrt.
    #[arg(long)]
    provider: Option<String>,
    /// ONNX Runtime library (default: engine.onnxruntime_library, ORT_DYLIB_PATH, .venv).
    #[arg(long)]
    onnxruntime_library: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match cli.command {
        Command::Validate { file } => validate(&file),
        Command::Ask {
            camera,
            question,
            broker,
            prefix,
            window_secs,
            max_tokens,
            timeout_secs,
            id,
            username,
            password_env,
            password_file,
            ca_file,
            json,
        } => ask(AskArgs {
            camera,
            question,
            broker,
            prefix,
            window_secs,
            max_tokens,
            timeout_secs,
            id,
            username,
            password: password_env
                .map(PasswordSource::Env)
                .or(password_file.map(PasswordSource::File)),
            ca_file,
            json,
        }),
        Command::Prune {
            raw,
            uri,
            width,
            height,
            mode,
            threshold,
            min_tokens,
            sample_fps,
            frames,
        } => {
            let mode = match mode.parse() {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("error: --mode: {e}");
                    return ExitCode::from(2);
                }
            };
            let params = edgevlm::prune::PruneParams {
                mode,
                threshold,
                min_tokens,
                ..Default::default()
            };
            if let Err(e) = params.validate() {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            match (raw, uri) {
                (Some(raw), _) => {
                    let (Some(w), Some(h)) = (width, height) else {
                        eprintln!("error: --raw needs --width and --height");
                        return ExitCode::from(2);
                    };
                    let mut out = std::io::stdout().lock();
                    match edgevlm::prune::inspect::raw_file(
                        &raw, w as usize, h as usize, params, &mut out,
                    ) {
                        Ok(_) => ExitCode::SUCCESS,
                        Err(e) => {
                            eprintln!("error: {e}");
                            ExitCode::FAILURE
                        }
                    }
                }
                (None, Some(uri)) => {
                    let uri = match SourceUri::parse(&uri) {
                        Ok(u) => u,
                        Err(e) => {
                            eprintln!("error: --uri: {e}");
                            return ExitCode::from(2);
                        }
                    };
                    let mut cam = CameraConfig::new("prune", uri);
                    cam.sample_fps = sample_fps;
                    cam.prune = params;
                    if let (Some(w), Some(h)) = (width, height) {
                        cam.size = Some((w, h));
                    }
                    report(runtime().and_then(|rt| rt.block_on(prune_uri(cam, frames))))
                }
                (None, None) => ExitCode::from(2),
            }
        }
        Command::Status {
            config,
            socket,
            json,
        } => {
            let socket = match socket {
                Some(s) => s,
                None => match load(&config) {
                    Some(c) => match c.telemetry.control_socket {
                        Some(s) => s,
                        None => {
                            eprintln!(
                                "error: telemetry.control_socket is off in {}",
                                config.display()
                            );
                            return ExitCode::from(2);
                        }
                    },
                    None => return ExitCode::from(2),
                },
            };
            report(runtime().and_then(|rt| rt.block_on(status(socket, json))))
        }
        Command::Run { config } => match load(&config) {
            Some(cfg) => report(runtime().and_then(|rt| rt.block_on(run(config, cfg)))),
            None => ExitCode::from(2),
        },
        Command::Probe {
            uri,
            sample_fps,
            frames,
            width,
            height,
            json,
            timeout_secs,
            pipeline,
            username,
            password_env,
            password_file,
        } => {
            let uri = match SourceUri::parse(&uri) {
                Ok(u) => u,
                Err(e) => {
                    eprintln!("error: uri: {e}");
                    return ExitCode::from(2);
                }
            };
            let mut cam = CameraConfig::new("probe", uri);
            if let Some(p) = pipeline {
                cam.pipeline = p;
            }
            if !(sample_fps.is_finite() && sample_fps > 0.0 && sample_fps <= 30.0) {
                eprintln!("error: --sample-fps must be > 0 and <= 30, got {sample_fps}");
                return ExitCode::from(2);
            }
            cam.sample_fps = sample_fps;
            if let (Some(w), Some(h)) = (width, height) {
                if w == 0 || h == 0 || w % 28 != 0 || h % 28 != 0 {
                    eprintln!("error: --width and --height must be multiples of 28, got {w}x{h}");
                    return ExitCode::from(2);
                }
                cam.size = Some((w, h));
            }
            let Ok(timeout) = Duration::try_from_secs_f64(timeout_secs) else {
                eprintln!("error: --timeout-secs must be a positive number, got {timeout_secs}");
                return ExitCode::from(2);
            };
            cam.connect_timeout = timeout;
            cam.credentials = username.map(|username| CredentialSource {
                username,
                password: password_env
                    .map(PasswordSource::Env)
                    .or(password_file.map(PasswordSource::File)),
            });
            report(runtime().and_then(|rt| rt.block_on(probe(cam, frames, json))))
        }
        Command::Engines { action } => engines(action),
        Command::Prompt {
            family,
            timestamps,
            kept,
            question,
            format,
            clip_duration,
            duration,
        } => {
            let args = edgevlm::generate::render::CliArgs {
                family: &family,
                timestamps: &timestamps,
                kept: kept.as_deref(),
                question: &question,
                format: &format,
                clip_duration: &clip_duration,
                duration_secs: duration,
            };
            match edgevlm::generate::render::render_cli(&args) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

fn engines(action: EnginesAction) -> ExitCode {
    use edgevlm::engine::{EngineOptions, ProviderKind};
    let (args, sizes) = match action {
        EnginesAction::Check(args) => (args, None),
        EnginesAction::Build { args, sizes } => (args, Some(sizes)),
    };
    let mut opts = match &args.config {
        Some(path) => match load(path) {
            Some(cfg) => EngineOptions::from_config(&cfg),
            None => return ExitCode::from(2),
        },
        None => EngineOptions::cpu(edgevlm::config::EngineConfig::default().model_dir),
    };
    if let Some(dir) = args.dir {
        opts.model_dir = dir;
    }
    if let Some(lib) = args.onnxruntime_library {
        opts.library = Some(lib);
    }
    if let Some(name) = &args.provider {
        let Some(p) = ProviderKind::from_name(name) else {
            eprintln!("error: --provider must be cpu, cuda or tensorrt, got `{name}`");
            return ExitCode::from(2);
        };
        opts = opts.with_provider(p);
    }
    let result = match sizes {
        None => edgevlm::engine::check_dir(&opts).map(|r| print!("{r}")),
        Some(sizes) => {
            for s in sizes {
                let parsed = s
                    .split_once('x')
                    .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)));
                let Some((width, height)) = parsed else {
                    eprintln!("error: --size must be WIDTHxHEIGHT, got `{s}`");
                    return ExitCode::from(2);
                };
                opts.geometries
                    .push(edgevlm::ingest::Geometry { width, height });
            }
            edgevlm::engine::build_engines(&opts, true).map(|r| print!("{r}"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // ort's info lines are noise for users; rumqttd (the embedded broker) logs every client
        // disconnect at ERROR. RUST_LOG overrides both (e.g. RUST_LOG=info,rumqttd=info).
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,ort=warn,rumqttd=off"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never in journald or captured logs.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load(path: &std::path::Path) -> Option<Config> {
    match Config::load(path) {
        Ok(c) => Some(c),
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            eprintln!(
                "{}: {} problem(s); not started",
                path.display(),
                errors.0.len()
            );
            None
        }
    }
}

fn validate(path: &std::path::Path) -> ExitCode {
    match Config::load(path) {
        Ok(c) => {
            println!("{}: valid: {}", path.display(), c.summary());
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            eprintln!("{}: {} problem(s)", path.display(), errors.0.len());
            ExitCode::from(2)
        }
    }
}

async fn run(path: PathBuf, config: Config) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    edgevlm::ingest::init()?;
    tracing::info!(summary = %config.summary(), "Starting");
    let mut supervisor = Supervisor::start(&config);
    let (views_tx, views_rx) = tokio::sync::watch::channel(supervisor.views());
    let (reports_tx, reports_rx) =
        tokio::sync::watch::channel((Instant::now(), Arc::new(Vec::new())));
    if let Some(addr) = config.telemetry.metrics_listen {
        let listener = metrics::bind(addr)
            .await
            .with_context(|| format!("telemetry.metrics_listen: cannot listen on {addr}"))?;
        tracing::info!(address = %addr, "Serving Prometheus metrics on /metrics");
        tokio::spawn(metrics::serve(listener, views_rx.clone()));
    }
    let control_socket = config.telemetry.control_socket.clone();
    if let Some(path) = &control_socket {
        let listener = control::bind(path)
            .await
            .map_err(|e| anyhow::anyhow!("telemetry.control_socket: {e}"))?;
        tokio::spawn(control::serve(listener, reports_rx));
    }
    let mqtt = start_mqtt(&config)?;
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
            _ = watchdog.tick() => match supervisor.healthy() {
                // WATCHDOG=1 only from this loop and only while healthy: a stuck runtime or a stuck
                // camera task stops the pings and systemd restarts the service.
                Ok(()) => systemd.watchdog(),
                Err(why) => tracing::error!(reason = %why, "Unhealthy; not feeding the systemd watchdog"),
            },
            _ = sighup.recv() => match Config::load(&path) {
                Ok(new) => {
                    systemd.reloading();
                    let s = supervisor.reload(&new, STOP_BOUND).await;
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
                    let r = CameraReport::collect(cam, meter);
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

async fn prune_uri(cam: CameraConfig, frames: usize) -> anyhow::Result<()> {
    let vision = edgevlm::config::VisionConfig::default();
    let mut pruner: Option<edgevlm::prune::Pruner> = None;
    let mut failure = None;
    let mut index = 0;
    edgevlm::ingest::probe(&cam, &vision, frames, |f| {
        if failure.is_some() {
            return;
        }
        let (w, h) = (f.width as usize, f.height as usize);
        if pruner.is_none() {
            match edgevlm::prune::Pruner::new(w, h, cam.prune) {
                Ok(p) => pruner = Some(p),
                Err(e) => failure = Some(e.to_string()),
            }
        }
        if let Some(p) = pruner.as_mut() {
            match p.push(&f.rgb, w * 3) {
                Ok(d) => println!("{}", edgevlm::prune::inspect::json_line(index, d)),
                Err(e) => failure = Some(e.to_string()),
            }
            index += 1;
        }
    })
    .await
    .map_err(anyhow::Error::msg)?;
    match failure {
        Some(e) => Err(anyhow::anyhow!(e)),
        None => Ok(()),
    }
}

async fn status(socket: PathBuf, json: bool) -> anyhow::Result<()> {
    let doc = control::query(&socket).await.map_err(anyhow::Error::msg)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "edgevlm {}, pid {}, up {}, reports {:.0} s old",
        doc.version,
        doc.pid,
        human_duration(doc.uptime_secs),
        doc.report_age_secs
    );
    println!(
        "{:<16} {:<9} {:>7} {:>8} {:>14} {:>18} {:>8}  LAST",
        "CAMERA", "STATE", "IN FPS", "SAMPLED", "WINDOW", "GEOMETRY", "RESTARTS"
    );
    for c in &doc.cameras {
        let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
        let n = |k: &str| c[k].as_f64().unwrap_or(0.0);
        let geometry = match (c["geometry"].as_str(), c["tokens_per_frame"].as_u64()) {
            (Some(g), Some(t)) => format!("{g} ({t} tok)"),
            _ => "pending".into(),
        };
        println!(
            "{:<16} {:<9} {:>7.1} {:>8.2} {:>14} {:>18} {:>8}  {}",
            s("camera"),
            s("state"),
            n("fps_in"),
            n("fps_sampled"),
            format!("{} fr/{:.0} s", n("window_frames"), n("window_span_secs")),
            geometry,
            c["counters"]["restarts"].as_u64().unwrap_or(0),
            s("reason"),
        );
    }
    Ok(())
}

fn human_duration(secs: f64) -> String {
    let s = secs as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// "3 cameras: 2 running, 1 retrying", for systemd's STATUS=.
fn camera_summary(supervisor: &Supervisor) -> String {
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

/// Starts the embedded broker (if configured) and the publisher. Valid questions are answered
/// `no_model` until the query stage consumes them (issue 5): their receiver is dropped here.
fn start_mqtt(
    config: &Config,
) -> anyhow::Result<Option<(edgevlm::publish::Publisher, edgevlm::publish::Connection)>> {
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
    drop(queries);
    Ok(Some((publisher, connection)))
}

/// One status line for the MQTT side.
fn mqtt_line(s: &edgevlm::publish::PublishStats) -> String {
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

struct AskArgs {
    camera: String,
    question: String,
    broker: String,
    prefix: String,
    window_secs: Option<f64>,
    max_tokens: Option<u32>,
    timeout_secs: f64,
    id: Option<String>,
    username: Option<String>,
    password: Option<PasswordSource>,
    ca_file: Option<PathBuf>,
    json: bool,
}

fn ask(a: AskArgs) -> ExitCode {
    use edgevlm::config::{BrokerChoice, MqttConfig, TlsFiles};
    use edgevlm::publish::ask::{AskOptions, AskOutcome};
    let usage = |msg: String| {
        eprintln!("error: {msg}");
        ExitCode::from(2)
    };
    let broker = match BrokerChoice::parse(&a.broker) {
        Ok(b @ BrokerChoice::External { .. }) => b,
        Ok(BrokerChoice::Embedded) => {
            return usage("--broker: give the broker's URL (mqtt://127.0.0.1:1883)".into());
        }
        Err(e) => return usage(format!("--broker: {e}")),
    };
    if let Err(e) = edgevlm::config::check_topic_prefix(&a.prefix) {
        return usage(format!("--prefix: {e}"));
    }
    let Ok(timeout) = Duration::try_from_secs_f64(a.timeout_secs) else {
        return usage(format!(
            "--timeout-secs must be a positive number, got {}",
            a.timeout_secs
        ));
    };
    if let Some(id) = &a.id
        && !edgevlm::publish::query::valid_id(id)
    {
        return usage("--id must be 1-64 characters of A-Z, a-z, 0-9, `_`, `-` or `.`".into());
    }
    let cfg = MqttConfig {
        broker,
        credentials: a.username.map(|username| CredentialSource {
            username,
            password: a.password,
        }),
        tls: TlsFiles {
            ca_file: a.ca_file,
            ..Default::default()
        },
        ..Default::default()
    };
    let endpoint = match edgevlm::publish::Endpoint::external(&cfg) {
        Ok(e) => e,
        Err(e) => return usage(e.to_string()),
    };
    let options = AskOptions {
        endpoint,
        prefix: a.prefix,
        camera: a.camera,
        question: a.question,
        window_secs: a.window_secs,
        max_tokens: a.max_tokens,
        timeout,
        id: a.id,
    };
    let json = a.json;
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    use std::io::Write;
    let outcome = rt.block_on(edgevlm::publish::ask::ask(options, |text| {
        if !json {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    }));
    match outcome {
        Ok(AskOutcome::Answered(answer)) => {
            if json {
                println!("{}", serde_json::to_string(&answer).unwrap_or_default());
            } else {
                println!();
            }
            ExitCode::SUCCESS
        }
        Ok(AskOutcome::Refused(reply)) => {
            if json {
                println!("{}", serde_json::to_string(&reply).unwrap_or_default());
            }
            eprintln!("error: {}: {}", reply.error.code, reply.error.message);
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(3)
        }
    }
}

async fn probe(cam: CameraConfig, frames: usize, json: bool) -> anyhow::Result<()> {
    let vision = edgevlm::config::VisionConfig::default();
    let summary = edgevlm::ingest::probe(&cam, &vision, frames, |f| {
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "seq": f.seq,
                    "pts_secs": f.pts.as_secs_f64(),
                    "width": f.width,
                    "height": f.height,
                })
            );
        } else {
            println!(
                "frame {:>4}  pts {:>9.3} s  {}x{} RGB  {} bytes",
                f.seq,
                f.pts.as_secs_f64(),
                f.width,
                f.height,
                f.rgb.len()
            );
        }
    })
    .await
    .map_err(anyhow::Error::msg)?;
    eprintln!(
        "probe: {} frames from {} in {:.1} s; source {}; model geometry {}",
        summary.frames,
        cam.uri,
        summary.elapsed.as_secs_f64(),
        summary.source_caps.as_deref().unwrap_or("unknown"),
        summary
            .geometry
            .map(|g| format!("{g} ({} tokens/frame)", g.tokens()))
            .unwrap_or_else(|| "unknown".into()),
    );
    Ok(())
}
