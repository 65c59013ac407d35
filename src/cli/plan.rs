//! `edgevlm plan`: the memory plan of a configuration on its model (docs/ARCHITECTURE.md,
//! "Memory plan").

use crate::load;
use edgevlm::memory::plan::{DeviceMemory, Plan};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `edgevlm plan`.
#[derive(clap::Args)]
pub(crate) struct PlanArgs {
    /// Configuration file.
    #[arg(short, long, default_value = "configs/edgevlm.toml")]
    config: PathBuf,
    /// Model directory (default: engine.model_dir of the configuration).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Memory of the device that holds the caches, in MiB (default: engine.device_memory_mib,
    /// else read from the device).
    #[arg(long, value_name = "MIB")]
    device_memory: Option<u32>,
    /// Source size assumed for cameras without width/height, WIDTHxHEIGHT (default: the most
    /// tokens any source can give a frame).
    #[arg(long, value_name = "WxH")]
    source: Option<String>,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
}

/// Exit status: 0 the plan fits (or no device figure is known), 2 it does not fit or the
/// configuration is invalid, 1 the model cannot be read.
pub(crate) fn plan(a: PlanArgs) -> ExitCode {
    let Some(config) = load(&a.config) else {
        return ExitCode::from(2);
    };
    let dir = a.model.unwrap_or_else(|| config.engine.model_dir.clone());
    let device = a.device_memory.map(|mib| DeviceMemory {
        bytes: u64::from(mib) << 20,
        source: "--device-memory".into(),
    });
    let source = match a.source.as_deref().map(parse_size) {
        None => None,
        Some(Some(wh)) => Some(wh),
        Some(None) => {
            eprintln!(
                "error: --source must be WIDTHxHEIGHT (e.g. 1920x1080), got `{}`",
                a.source.unwrap_or_default()
            );
            return ExitCode::from(2);
        }
    };
    let plan = match Plan::for_config(&config, &dir, device, source) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{}: {e}", dir.display());
            return ExitCode::from(1);
        }
    };
    if a.json {
        match serde_json::to_string_pretty(&plan) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("cannot write the plan as JSON: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        print!("{}", plan.table());
    }
    let problems = plan.problems(&config);
    for (key, why) in &problems {
        if key.is_empty() {
            eprintln!("{}: {why}", a.config.display());
        } else {
            eprintln!("{key}: {why}");
        }
    }
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}

fn parse_size(s: &str) -> Option<(u32, u32)> {
    let (w, h) = s.split_once('x')?;
    let (w, h): (u32, u32) = (w.parse().ok()?, h.parse().ok()?);
    (w > 0 && h > 0).then_some((w, h))
}
