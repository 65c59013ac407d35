//! `edgevlm engines build`: builds the TensorRT engines ahead of time by loading the model on
//! TensorRT and running each session once per shape it will serve, so that ONNX Runtime writes its
//! engine and timing caches to the state directory and the first camera does not wait minutes.

use super::error::EngineError;
use super::progress::Progress;
use super::{EngineOptions, Engines, LogitRows, ProviderKind, SpecialText, tensorrt};
use crate::ingest::Geometry;
use std::path::PathBuf;
use std::time::Duration;

/// What a build did.
#[derive(Debug)]
pub struct BuildReport {
    /// The engine and timing cache directory.
    pub cache_dir: PathBuf,
    /// `(step, duration)`.
    pub steps: Vec<(String, Duration)>,
    /// Files in the cache directory afterwards.
    pub cache_files: Vec<(String, u64)>,
    /// `(model, profile)` of each model built on TensorRT (trtexec takes the same shapes).
    pub profiles: Vec<(&'static str, tensorrt::Profile)>,
}

impl std::fmt::Display for BuildReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "TensorRT engine cache: {}", self.cache_dir.display())?;
        for (step, took) in &self.steps {
            writeln!(f, "  {step}: {:.1} s", took.as_secs_f64())?;
        }
        for (name, bytes) in &self.cache_files {
            writeln!(f, "  {name} ({bytes} bytes)")?;
        }
        for (model, p) in &self.profiles {
            writeln!(
                f,
                "  {model} profile: --minShapes={} --optShapes={} --maxShapes={}",
                p.min_shapes(),
                p.opt_shapes(),
                p.max_shapes()
            )?;
        }
        Ok(())
    }
}

/// Builds and caches the TensorRT engines of every model configured for TensorRT (all three if
/// none is), for the option's geometries.
pub fn build_engines(opts: &EngineOptions, show: bool) -> Result<BuildReport, EngineError> {
    if !ProviderKind::TensorRt.is_built() {
        return Err(EngineError::ProviderNotBuilt {
            provider: "tensorrt",
        });
    }
    let mut opts = opts.clone();
    let kinds = opts.providers();
    if !kinds.contains(&ProviderKind::TensorRt) {
        tracing::info!("No model is configured for TensorRT; building all three on TensorRT");
        opts = opts.with_provider(ProviderKind::TensorRt);
    }
    if opts.providers()[0] == ProviderKind::TensorRt && opts.geometries.is_empty() {
        return Err(EngineError::input(
            "vision encoder",
            "no camera geometry to build for: give the cameras fixed width/height in the config, \
             or pass --size WxH",
        ));
    }
    let steps_total = 2 + opts.geometries.len();
    let mut progress = if show {
        Progress::stderr(steps_total)
    } else {
        Progress::hidden(steps_total)
    };
    let mut steps = Vec::new();
    let (engines, took) = progress.step("loading sessions (TensorRT builds static parts)", || {
        Engines::load(&opts)
    });
    let engines = engines?;
    steps.push(("load".to_string(), took));
    warm_up(&engines, &opts.geometries, &mut progress, &mut steps)?;
    let cache_dir = tensorrt::cache_dir(
        &opts.state_dir,
        engines.manifest(),
        engines.runtime().version(),
    );
    let mut cache_files: Vec<(String, u64)> = std::fs::read_dir(&cache_dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let len = e.metadata().ok()?.len();
                    Some((e.file_name().to_string_lossy().into_owned(), len))
                })
                .collect()
        })
        .unwrap_or_default();
    cache_files.sort();
    let m = engines.manifest();
    let chunk = engines.prefill_chunk_tokens();
    let mut profiles = Vec::new();
    if opts.providers()[0] == ProviderKind::TensorRt {
        profiles.push((
            "vision encoder",
            tensorrt::vision_profile(
                m,
                &opts.geometries,
                opts.engine.vision_batch_frames as usize,
            ),
        ));
    }
    if opts.providers()[1] == ProviderKind::TensorRt {
        profiles.push(("token embedding", tensorrt::embed_profile(m, chunk)));
    }
    if opts.providers()[2] == ProviderKind::TensorRt {
        profiles.push(("decoder", tensorrt::decoder_profile(m, chunk)));
    }
    Ok(BuildReport {
        cache_dir,
        steps,
        cache_files,
        profiles,
    })
}

/// Runs every session at the shapes it will serve: the vision encoder once per geometry at one
/// frame and at a full batch, the embedding and the decoder at a full prefill chunk and at one
/// decode step. Provider-agnostic (on the CPU it only measures).
pub fn warm_up(
    engines: &Engines,
    geometries: &[Geometry],
    progress: &mut Progress,
    steps: &mut Vec<(String, Duration)>,
) -> Result<(), EngineError> {
    let vision = engines.vision();
    for g in geometries {
        let label = format!("vision encoder {g}");
        let (r, took) = progress.step(&label, || -> Result<(), EngineError> {
            let frame = vec![0u8; g.frame_bytes()];
            if let Some(clip) = vision.clip() {
                // A clips model runs one clip at a time (`memory::FrameEncoder`).
                vision.encode(&vec![&frame[..]; clip.frames as usize], g.width, g.height)?;
                return Ok(());
            }
            vision.encode(&[&frame], g.width, g.height)?;
            let batch: Vec<&[u8]> = (0..vision.max_batch()).map(|_| &frame[..]).collect();
            vision.encode(&batch, g.width, g.height)?;
            Ok(())
        });
        r?;
        steps.push((label, took));
    }
    let label = format!(
        "embedding + decoder (prefill {} tokens, 1 decode step)",
        engines.prefill_chunk_tokens()
    );
    let (r, took) = progress.step(&label, || -> Result<(), EngineError> {
        let m = engines.manifest();
        let tok = engines.tokenizer();
        // Any ids will do for building kernels; the system prompt's repeated to a full chunk.
        let mut seed = tok.encode(&m.chat_template.default_system, SpecialText::AsText);
        if seed.is_empty() {
            seed.push(m.special_tokens.im_start);
        }
        let n = engines
            .prefill_chunk_tokens()
            .min(m.text.max_context as usize - 1)
            .max(1);
        let ids: Vec<u32> = seed.iter().copied().cycle().take(n).collect();
        let embeds = engines.embedder().embed(&ids)?;
        let positions: Vec<i64> = (0..ids.len() as i64).collect();
        let decoder = engines.decoder();
        let out = decoder.forward(
            &decoder.empty_cache()?,
            &embeds,
            &positions,
            LogitRows::Last,
        )?;
        let one = engines.embedder().embed(&ids[..1])?;
        decoder.forward(&out.present, &one, &[ids.len() as i64], LogitRows::Last)?;
        Ok(())
    });
    r?;
    steps.push((label, took));
    Ok(())
}
