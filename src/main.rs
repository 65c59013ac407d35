//! The `edgevlm` command line: only argument handling; every stage lives in the library.

use anyhow::Context;
use clap::{Parser, Subcommand};
use edgevlm::config::{CameraConfig, Config, CredentialSource, PasswordSource, SourceUri};
use edgevlm::supervisor::{CameraReport, RateMeter, Supervisor};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

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
    /// Run the cameras of a configuration until SIGINT/SIGTERM.
    Run {
        /// Configuration file.
        #[arg(short, long, default_value = "configs/edgevlm.toml")]
        config: PathBuf,
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
        Command::Run { config } => match load(&config) {
            Some(cfg) => report(runtime().and_then(|rt| rt.block_on(run(cfg)))),
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
        // ort's own info lines (library version notes, provider registration) are noise for users.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,ort=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
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

async fn run(config: Config) -> anyhow::Result<()> {
    edgevlm::ingest::init()?;
    tracing::info!(summary = %config.summary(), "Starting");
    let supervisor = Supervisor::start(&config);
    let mut meters = vec![RateMeter::default(); supervisor.cameras().len()];
    let mut ticker = tokio::time::interval(config.runtime.status_interval);
    ticker.tick().await;
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot watch SIGTERM")?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = sigterm.recv() => break,
            _ = ticker.tick() => {
                for (cam, meter) in supervisor.cameras().iter().zip(meters.iter_mut()) {
                    let r = CameraReport::collect(cam, meter);
                    tracing::info!(target: "status", "{}", r.line());
                }
            }
        }
    }
    tracing::info!("Shutting down");
    supervisor.shutdown(Duration::from_secs(10)).await;
    Ok(())
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
