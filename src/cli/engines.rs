//! `edgevlm engines check|build`: model directories and TensorRT engine caches.

use crate::{EnginesAction, load};
use std::process::ExitCode;

pub(crate) fn engines(action: EnginesAction) -> ExitCode {
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
        opts.engine.model_dir = dir;
    }
    if let Some(lib) = args.onnxruntime_library {
        opts.engine.onnxruntime_library = Some(lib);
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
