//! `edgevlm engines check|build`: model directories and TensorRT engine caches.

use crate::{EnginesAction, load};
use std::path::Path;
use std::process::ExitCode;

pub(crate) fn engines(action: EnginesAction) -> ExitCode {
    use edgevlm::engine::{EngineOptions, ProviderKind};
    let (args, sizes) = match action {
        EnginesAction::Check(args) => (args, None),
        EnginesAction::Build { args, sizes } => (args, Some(sizes)),
        EnginesAction::Init {
            dir,
            variant,
            force,
        } => return init(&dir, variant.as_deref(), force),
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
                    .push(edgevlm::ingest::Geometry::new(width, height));
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

/// `edgevlm engines init DIR`: the manifest of a downloaded SmolVLM2 directory, then the same
/// checks as `engines check` would make of the manifest itself.
fn init(dir: &Path, variant: Option<&str>, force: bool) -> ExitCode {
    let path = dir.join("manifest.toml");
    if path.exists() && !force {
        eprintln!("error: {} exists; --force replaces it", path.display());
        return ExitCode::from(2);
    }
    let text = match edgevlm::family::smolvlm2::checkpoint::manifest(dir, variant) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // What would not load is not written.
    if let Err(e) = edgevlm::engine::Manifest::parse(&text, dir) {
        eprintln!("error: the manifest made from {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    if let Err(e) = std::fs::write(&path, text) {
        eprintln!("error: {}: cannot write: {e}", path.display());
        return ExitCode::FAILURE;
    }
    println!(
        "wrote {} (family smolvlm2); `edgevlm engines check {}` runs each model once",
        path.display(),
        dir.display()
    );
    ExitCode::SUCCESS
}
