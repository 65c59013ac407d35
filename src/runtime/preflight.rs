//! Checks of a configuration against this machine, before anything starts.
//!
//! The configuration's own checks (`Config::load`) look at the file: keys, types, ranges. These
//! look at what the file names on the machine that will run it, so that `edgevlm validate` (the
//! systemd unit's `ExecStartPre`) refuses a configuration that can never narrate instead of
//! letting `run` start and fail later: a model directory that is missing or whose manifest and
//! files are not there, a provider this binary was built without, an ONNX Runtime library that
//! cannot be found or is too old, MQTT TLS files that cannot be read or hold no PEM. The deep
//! check (`validate --deep`) also loads the engines and runs each model once.
//!
//! Every problem names the configuration key it is about, like the configuration's own errors.

use crate::config::{BrokerChoice, Config, ProviderKind};
use crate::engine::{EngineOptions, Manifest};

/// One reason the configuration cannot run on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The configuration key (`engine.model_dir`, `mqtt.ca_file`, `cameras[0].pipeline`).
    pub path: String,
    /// What is wrong, with the file or value and what was expected.
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

/// The cheap checks: files, providers, libraries. Nothing is loaded into ONNX Runtime.
pub fn machine_problems(config: &Config) -> Vec<Problem> {
    let mut problems = Vec::new();
    if config.engine.enabled {
        engine_problems(config, &mut problems);
    }
    tls_problems(config, &mut problems);
    problems
}

/// The cheap checks, then (when they pass) the engines loaded and each model run once, as
/// `edgevlm engines check` does.
pub fn deep_problems(config: &Config) -> Vec<Problem> {
    let mut problems = machine_problems(config);
    if problems.is_empty()
        && config.engine.enabled
        && let Err(e) = crate::engine::check_dir(&EngineOptions::from_config(config))
    {
        problems.push(Problem {
            path: "engine.model_dir".into(),
            reason: format!("the engines do not load or run: {e}"),
        });
    }
    problems
}

fn engine_problems(config: &Config, problems: &mut Vec<Problem>) {
    let e = &config.engine;
    let built: Vec<&str> = ProviderKind::ALL
        .iter()
        .filter(|p| p.is_built())
        .map(|p| p.name())
        .collect();
    for (key, provider) in [
        ("provider", Some(e.provider)),
        ("vision_provider", e.vision_provider),
        ("embed_provider", e.embed_provider),
        ("decoder_provider", e.decoder_provider),
    ] {
        if let Some(p) = provider.filter(|p| !p.is_built()) {
            problems.push(Problem {
                path: format!("engine.{key}"),
                reason: format!(
                    "`{}` is not compiled into this binary (it has: {}); build with --features {} \
                     or use provider = \"cpu\"",
                    p.name(),
                    built.join(", "),
                    match p {
                        ProviderKind::TensorRt => "ort-tensorrt",
                        _ => "ort-cuda",
                    }
                ),
            });
        }
    }
    match crate::engine::resolve_library(e.onnxruntime_library.as_deref())
        .and_then(|lib| crate::engine::probe_library(&lib))
    {
        Ok(_) => {}
        Err(err) => problems.push(Problem {
            path: "engine.onnxruntime_library".into(),
            reason: err.to_string(),
        }),
    }
    let dir = &e.model_dir;
    if !dir.is_dir() {
        problems.push(Problem {
            path: "engine.model_dir".into(),
            reason: format!("{} is not a directory", dir.display()),
        });
        return;
    }
    let manifest = match Manifest::load(dir) {
        Ok(m) => m,
        Err(err) => {
            problems.push(Problem {
                path: "engine.model_dir".into(),
                reason: err.to_string(),
            });
            return;
        }
    };
    // The files the manifest names, and the weight data its checksums name (`*.onnx.data`).
    let named = manifest.file_paths().into_iter();
    let data = manifest
        .generator
        .iter()
        .flat_map(|g| g.sha256.keys())
        .map(|name| ("generator.sha256", manifest.dir.join(name)));
    for (key, path) in named.chain(data) {
        if !path.is_file() {
            problems.push(Problem {
                path: "engine.model_dir".into(),
                reason: format!(
                    "{} (named by {} in {}) is missing",
                    path.display(),
                    key,
                    dir.join("manifest.toml").display()
                ),
            });
        }
    }
}

fn tls_problems(config: &Config, problems: &mut Vec<Problem>) {
    let m = &config.mqtt;
    if !m.enabled || !matches!(m.broker, BrokerChoice::External { tls: true, .. }) {
        return;
    }
    // What `run` builds, from the same files: unreadable files, files without PEM, a key that
    // does not match its certificate.
    if let Err(reason) = crate::publish::tls_client_config(&m.tls) {
        let key = [
            ("ca_file", &m.tls.ca_file),
            ("client_cert_file", &m.tls.client_cert_file),
            ("client_key_file", &m.tls.client_key_file),
        ]
        .into_iter()
        .find(|(_, p)| {
            p.as_ref()
                .is_some_and(|p| reason.contains(&p.display().to_string()))
        })
        .map_or("broker", |(k, _)| k);
        problems.push(Problem {
            path: format!("mqtt.{key}"),
            reason,
        });
    }
}
