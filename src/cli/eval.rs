//! `edgevlm eval`: a question set over clips through the runtime, under Apollo's three conditions.

use crate::tokio_runtime;
use edgevlm::config::{CacheConfig, CachePolicy, MIN_CACHE_BUDGET, PruneMode};
use edgevlm::eval::{Condition, EvalOptions, QuestionSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `edgevlm eval`.
#[derive(clap::Args)]
pub(crate) struct EvalArgs {
    /// Clip list: JSON lines `{"clip": NAME, "file": PATH}` (paths relative to this file).
    #[arg(long)]
    clips: PathBuf,
    /// Question set: JSON lines `{"clip", "question", "answer" (or "answers"), "kind"}`.
    #[arg(long)]
    questions: PathBuf,
    /// Model directory.
    #[arg(long, default_value = "engines/scenes/model")]
    model: PathBuf,
    /// Each clip camera's window in seconds.
    #[arg(long, default_value_t = 60.0)]
    window_secs: f64,
    /// Live-cache policy of the clip cameras: window, sink_recent or compress.
    #[arg(long, default_value = "window")]
    cache_policy: String,
    /// Live-cache budget of the clip cameras in positions (default: the model's context less the reserve).
    #[arg(long)]
    cache_budget: Option<u32>,
    /// Sampling rate of the clip cameras (default: 1, or the clips' rate for a model that encodes
    /// clips: 2 for Apollo).
    #[arg(long)]
    sample_fps: Option<f64>,
    /// DiffFP mode of the video condition: reference, adaptive or off.
    #[arg(long, default_value = "reference")]
    prune: String,
    /// Conditions, comma-separated: video, centre, text.
    #[arg(long, default_value = "video,centre,text")]
    conditions: String,
    /// Clips decoded at once.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Most tokens per answer.
    #[arg(long, default_value_t = 64)]
    max_tokens: u32,
    /// Engine threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Write the whole report (every question and answer) as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub(crate) fn eval(args: EvalArgs) -> ExitCode {
    let prune = match args.prune.parse::<PruneMode>() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("edgevlm eval: --prune: {e}");
            return ExitCode::from(2);
        }
    };
    let mut conditions = Vec::new();
    for name in args.conditions.split(',').map(str::trim) {
        match Condition::parse(name) {
            Some(c) if !conditions.contains(&c) => conditions.push(c),
            Some(_) => {}
            None => {
                eprintln!(
                    "edgevlm eval: --conditions `{name}`: expected any of video, centre, text"
                );
                return ExitCode::from(2);
            }
        }
    }
    if !(args.window_secs > 0.0 && args.window_secs <= 3600.0) {
        eprintln!(
            "edgevlm eval: --window-secs {}: expected (0, 3600]",
            args.window_secs
        );
        return ExitCode::from(2);
    }
    let policy = match args.cache_policy.as_str() {
        "window" => CachePolicy::Window,
        "sink_recent" => CachePolicy::SinkRecent,
        "compress" => CachePolicy::Compress,
        other => {
            eprintln!(
                "edgevlm eval: --cache-policy `{other}`: expected window, sink_recent or compress"
            );
            return ExitCode::from(2);
        }
    };
    if let Some(b) = args.cache_budget.filter(|&b| b < MIN_CACHE_BUDGET) {
        eprintln!(
            "edgevlm eval: --cache-budget {b}: expected at least {MIN_CACHE_BUDGET} positions"
        );
        return ExitCode::from(2);
    }
    let set = match QuestionSet::load(&args.clips, &args.questions) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("edgevlm eval: {e}");
            return ExitCode::from(2);
        }
    };
    // A model of clips samples at its clips' rate (`validate` refuses any other); an unreadable
    // manifest is the run's to report.
    let clip_fps = edgevlm::engine::Manifest::load(&args.model)
        .ok()
        .and_then(|m| m.vision.clip())
        .map(|c| c.fps());
    let opts = EvalOptions {
        model_dir: args.model,
        sample_fps: args.sample_fps.or(clip_fps).unwrap_or(1.0),
        window_secs: args.window_secs,
        cache: CacheConfig {
            policy,
            budget: args.cache_budget,
        },
        prune,
        conditions,
        parallel: args.parallel.max(1),
        max_tokens: args.max_tokens,
        threads: args.threads,
        clip_timeout: Duration::from_secs(600),
    };
    let result = tokio_runtime().map_err(|e| e.to_string()).and_then(|rt| {
        let r = rt.block_on(edgevlm::eval::run(&set, &opts));
        rt.shutdown_background();
        r
    });
    match result {
        Ok(report) => {
            print!("{}", report.table());
            if let Some(path) = args.json {
                let text = serde_json::to_string_pretty(&report).unwrap_or_default();
                if let Err(e) = std::fs::write(&path, text + "\n") {
                    eprintln!("edgevlm eval: {}: {e}", path.display());
                    return ExitCode::from(1);
                }
            }
            if report.clips == 0 {
                eprintln!("edgevlm eval: no clip could be evaluated");
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("edgevlm eval: {e}");
            ExitCode::from(1)
        }
    }
}
