//! The `edgevlm` command line: only argument handling; every stage lives in the library.

mod cli;

use anyhow::Context;
use clap::{Parser, Subcommand};
use edgevlm::config::{CameraConfig, Config, CredentialSource, PasswordSource, SourceUri};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// With the `jemalloc` feature (on by default), jemalloc serves every allocation of the process:
/// it also exports `malloc` and `free`, so GStreamer and ONNX Runtime use it too. glibc's
/// per-thread arenas fragment under the runtime's mix of threads and grew resident memory by about
/// 25 KiB a minute for hours; jemalloc did not (docs/RELIABILITY.md, "Memory over a long run").
/// `--no-default-features` builds with glibc's malloc.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    Prune(PruneArgs),
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
    Ask(cli::ask::AskArgs),
    /// Score a question set over clips through the runtime, with the video, its centre frame
    /// only and no frame (Apollo's conditions); prints a table, `--json` writes every answer.
    Eval(cli::eval::EvalArgs),
    /// The memory plan of a configuration on its model: KV cache bytes per camera, questions,
    /// conversations and weights against the device's memory; exit 2 if it cannot fit.
    Plan(cli::plan::PlanArgs),
    /// Check a configuration file: every problem is reported, one line each; exit 2 if any. When
    /// the model directory can be read, the memory plan is checked too.
    Validate {
        /// Configuration file.
        file: PathBuf,
        /// Also load the engines and run each model once (seconds to minutes; the cheap checks
        /// of files, providers and libraries always run).
        #[arg(long)]
        deep: bool,
    },
    /// Attach to one source and print one line per sampled frame.
    Probe(ProbeArgs),
    /// Print a rendered prompt with one placeholder per kept token (inspection and parity checks).
    ///
    /// videollama3 and tiny: `<image>` per kept token, offline (`Time 0.0s:` per frame) or stream
    /// (one `<|stream_start|>` item per frame, the question as a user message after the last).
    /// apollo: --timestamps are clip starts, each clip ends 3/4 of --clip-duration later (its last
    /// sampled frame), `<|video_token|>` per token. smolvlm2: the video prompt of its processor,
    /// each frame a global image of 64 `<image>` after its `MM:SS` time. Exit status 2 on bad
    /// arguments.
    Prompt {
        /// tiny, videollama3, apollo or smolvlm2.
        #[arg(long)]
        family: String,
        /// Frame (or Apollo clip start) times in seconds, increasing, e.g. 0,1,2.
        #[arg(long)]
        timestamps: String,
        /// Kept tokens per frame, one per timestamp (default: 1 per frame, 32 per Apollo clip, 64 per
        /// SmolVLM2 frame).
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
        /// Apollo and SmolVLM2: video duration in seconds (default: Apollo's last clip start + clip
        /// duration, SmolVLM2's last frame time).
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
    /// Write DIR/manifest.toml for a model directory as downloaded from the hub (SmolVLM2:
    /// config.json, the processor settings, tokenizer.json and the published onnx/ files).
    Init {
        /// The downloaded model directory.
        dir: PathBuf,
        /// Published file variant (`q4`, `int8`, `fp16` …: onnx/decoder_model_merged_q4.onnx).
        #[arg(long)]
        variant: Option<String>,
        /// Replace an existing manifest.toml.
        #[arg(long)]
        force: bool,
    },
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
    // The ONNX Runtime library of the PyPI wheel (what setup.sh and the Debian package ship)
    // carries Microsoft's telemetry on Linux: whatever `with_telemetry(false)` says, it writes a
    // device id under ~/.cache/Microsoft and starts an uploader unless this is set
    // (docs/PACKAGE.md). A value the user set wins.
    if std::env::var_os("ORT_DISABLE_TELEMETRY").is_none() {
        // SAFETY: set first thing in main, before any other thread exists (the logger, tokio and
        // GStreamer start later), so no thread can read the environment meanwhile.
        unsafe { std::env::set_var("ORT_DISABLE_TELEMETRY", "1") };
    }
    let cli = Cli::parse();
    init_logging(matches!(cli.command, Command::Eval(_)));
    match cli.command {
        Command::Validate { file, deep } => validate(&file, deep),
        Command::Plan(args) => cli::plan::plan(args),
        Command::Ask(args) => cli::ask::ask(args),
        Command::Eval(args) => cli::eval::eval(args),
        Command::Prune(args) => prune(args),
        Command::Status {
            config,
            socket,
            json,
        } => status(&config, socket, json),
        Command::Run { config } => match load(&config) {
            Some(cfg) => report(tokio_runtime().and_then(|rt| {
                let result = rt.block_on(cli::run::run(config, cfg));
                // A model still loading when a signal stopped the run must not hold the exit.
                rt.shutdown_background();
                result
            })),
            None => ExitCode::from(2),
        },
        Command::Probe(args) => {
            let (frames, json) = (args.frames, args.json);
            let cam = match probe_camera(args) {
                Ok(cam) => cam,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            report(
                tokio_runtime().and_then(|rt| rt.block_on(cli::inspect::probe(cam, frames, json))),
            )
        }
        Command::Engines { action } => cli::engines::engines(action),
        Command::Prompt {
            family,
            timestamps,
            kept,
            question,
            format,
            clip_duration,
            duration,
        } => {
            let args = cli::prompt::CliArgs {
                family: &family,
                timestamps: &timestamps,
                kept: kept.as_deref(),
                question: &question,
                format: &format,
                clip_duration: &clip_duration,
                duration_secs: duration,
            };
            match cli::prompt::render_cli(&args) {
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

/// `edgevlm prune`'s arguments.
#[derive(clap::Args)]
struct PruneArgs {
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
}

/// `edgevlm prune`: DiffFP masks of a raw clip or of a live source.
fn prune(a: PruneArgs) -> ExitCode {
    let mode = match a.mode.parse() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: --mode: {e}");
            return ExitCode::from(2);
        }
    };
    let params = edgevlm::prune::PruneParams {
        mode,
        threshold: a.threshold,
        min_tokens: a.min_tokens,
        ..Default::default()
    };
    if let Err(e) = params.validate() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    match (a.raw, a.uri) {
        (Some(raw), _) => {
            let (Some(w), Some(h)) = (a.width, a.height) else {
                eprintln!("error: --raw needs --width and --height");
                return ExitCode::from(2);
            };
            let mut out = std::io::stdout().lock();
            match edgevlm::prune::inspect::raw_file(&raw, w as usize, h as usize, params, &mut out)
            {
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
            cam.sample_fps = a.sample_fps;
            cam.prune = params;
            if let (Some(w), Some(h)) = (a.width, a.height) {
                cam.size = Some((w, h));
            }
            let frames = a.frames;
            report(tokio_runtime().and_then(|rt| rt.block_on(cli::inspect::prune_uri(cam, frames))))
        }
        (None, None) => ExitCode::from(2),
    }
}

/// `edgevlm status`: the control socket from the arguments or the configuration.
fn status(config: &std::path::Path, socket: Option<PathBuf>, json: bool) -> ExitCode {
    let socket = match socket {
        Some(s) => s,
        None => match load(config) {
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
    report(tokio_runtime().and_then(|rt| rt.block_on(cli::status::status(socket, json))))
}

/// `edgevlm probe`'s arguments.
#[derive(clap::Args)]
struct ProbeArgs {
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
    #[arg(long, conflicts_with = "pipeline_file")]
    pipeline: Option<String>,
    /// Your own pipeline template file instead (checked like `pipeline_file` in a configuration).
    #[arg(long)]
    pipeline_file: Option<PathBuf>,
    /// full (default) or keyframes (only keyframes decoded while the GOP is within the period).
    #[arg(long, default_value = "full")]
    decode: String,
    /// RTSP user name.
    #[arg(long)]
    username: Option<String>,
    /// Environment variable that holds the RTSP password.
    #[arg(long, requires = "username", conflicts_with = "password_file")]
    password_env: Option<String>,
    /// File that holds the RTSP password.
    #[arg(long, requires = "username")]
    password_file: Option<PathBuf>,
}

/// The camera `edgevlm probe` attaches to, or what is wrong with the arguments.
fn probe_camera(a: ProbeArgs) -> Result<CameraConfig, String> {
    let uri = SourceUri::parse(&a.uri).map_err(|e| format!("uri: {e}"))?;
    let mut cam = CameraConfig::new("probe", uri);
    if let Some(p) = a.pipeline {
        cam.pipeline = p;
    }
    if let Some(file) = a.pipeline_file {
        let t = edgevlm::config::Template::load_for_camera(&file, &cam.uri)
            // One `error: --pipeline-file: FILE:LINE: …` line per problem.
            .map_err(|problems| {
                format!(
                    "--pipeline-file: {}",
                    problems.join("\nerror: --pipeline-file: ")
                )
            })?;
        cam.pipeline = file.display().to_string();
        cam.pipeline_file = Some(t);
    }
    if !(a.sample_fps.is_finite() && a.sample_fps > 0.0 && a.sample_fps <= 30.0) {
        return Err(format!(
            "--sample-fps must be > 0 and <= 30, got {}",
            a.sample_fps
        ));
    }
    cam.sample_fps = a.sample_fps;
    cam.decode = match a.decode.as_str() {
        "full" => edgevlm::config::DecodeMode::Full,
        "keyframes" => edgevlm::config::DecodeMode::Keyframes,
        other => return Err(format!("--decode must be full or keyframes, got `{other}`")),
    };
    if let (Some(w), Some(h)) = (a.width, a.height) {
        if w == 0 || h == 0 || w % 28 != 0 || h % 28 != 0 {
            return Err(format!(
                "--width and --height must be multiples of 28, got {w}x{h}"
            ));
        }
        cam.size = Some((w, h));
    }
    cam.connect_timeout = Duration::try_from_secs_f64(a.timeout_secs).map_err(|_| {
        format!(
            "--timeout-secs must be a positive number, got {}",
            a.timeout_secs
        )
    })?;
    cam.credentials = a.username.map(|username| CredentialSource {
        username,
        password: a
            .password_env
            .map(PasswordSource::Env)
            .or(a.password_file.map(PasswordSource::File)),
    });
    Ok(cam)
}

fn init_logging(quiet: bool) {
    // `eval` runs a runtime per batch of clips: its status lines and camera stops are not news.
    let default = if quiet {
        "error,ort=warn,rumqttd=off"
    } else {
        "info,ort=warn,rumqttd=off"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // ort's info lines are noise for users; rumqttd (the embedded broker) logs every client
        // disconnect at ERROR. RUST_LOG overrides both (e.g. RUST_LOG=info,rumqttd=info).
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never in journald or captured logs.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        // On a write error (a restarted journald, a closed pipe) the default reports it with
        // `eprintln!`, which panics on the same broken stderr: the log line is lost, not the run.
        .log_internal_errors(false)
        .init();
}

fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
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

fn validate(path: &std::path::Path, deep: bool) -> ExitCode {
    use edgevlm::runtime::preflight;
    match Config::load(path) {
        Ok(c) => {
            // What the file names on this machine (docs/CONFIG.md, "Validation"), then the
            // memory plan when the model can be read.
            let mut problems: Vec<(String, String)> = if deep {
                preflight::deep_problems(&c)
            } else {
                preflight::machine_problems(&c)
            }
            .into_iter()
            .map(|p| (p.path, p.reason))
            .collect();
            let plan = c.engine.enabled.then(|| {
                edgevlm::memory::plan::Plan::for_config(&c, &c.engine.model_dir, None, None)
            });
            match &plan {
                Some(Ok(p)) => problems.extend(p.problems(&c)),
                // A model whose family cannot watch cameras never narrates nor answers: refused
                // whenever a camera is enabled (other plan failures are the model checks' to say).
                Some(Err(e @ edgevlm::memory::plan::PlanError::Family(_)))
                    if c.cameras.iter().any(|cam| cam.enabled) =>
                {
                    problems.push((
                        "engine.model_dir".to_string(),
                        format!(
                            "{}: {e}",
                            c.engine.model_dir.join("manifest.toml").display()
                        ),
                    ));
                }
                _ => {}
            }
            // Templates (built in or a camera's own file) naming elements this machine lacks.
            problems.extend(edgevlm::ingest::missing_elements(&c));
            if !problems.is_empty() {
                for (key, why) in &problems {
                    if key.is_empty() {
                        eprintln!("{why}");
                    } else {
                        eprintln!("{key}: {why}");
                    }
                }
                eprintln!("{}: {} problem(s)", path.display(), problems.len());
                return ExitCode::from(2);
            }
            println!("{}: valid: {}", path.display(), c.summary());
            match plan {
                Some(Ok(p)) => println!("{}", p.line()),
                Some(Err(e)) => println!(
                    "memory plan: not made ({}: {e})",
                    c.engine.model_dir.display()
                ),
                None => {}
            }
            if deep && c.engine.enabled {
                println!("engines: loaded and ran once each (--deep)");
            }
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
