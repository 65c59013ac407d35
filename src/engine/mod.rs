//! Engines: the model side. A model directory (`engines/<model>/`) holds a vision
//! encoder, a token embedding and a decoder as ONNX files plus a manifest and a tokenizer; this
//! module loads them into ONNX Runtime sessions on the CPU, CUDA or TensorRT, checks them against
//! the manifest, and runs them. Generation on top of them lives in [`crate::generate`]. The
//! contract of a model directory: docs/ENGINES.md, "Model directories".
//!
//! One [`Engines`] serves every camera: its methods take `&self` and serialise runs per model.

#![warn(missing_docs)]

mod cache_pool;
mod contract;
mod cpu;
mod cuda;
mod error;
mod manifest;
mod progress;
mod provider;
mod runtime;
mod session;
mod stats;
mod tensorrt;
mod text;
mod tokenizer;
mod vision;
mod warm;

pub use crate::config::{CacheMemory, CpuArena, MemoryPatterns, ProviderKind, TensorRtSettings};
pub use cache_pool::{CachePoolStats, GRAIN as CACHE_GRAIN};
pub use error::{EngineError, ErrorKind};
pub use manifest::{
    ChatTemplate, ClipSpec, Family, Files, Generator, ImageLiteral, Manifest, ProcessorSpec,
    Resample, ResizeRule, SpecialTokens, TextSpec, VisionLayout, VisionSpec,
};
pub use progress::Progress;
pub use provider::ModelRole;
pub use runtime::{LIBRARY_ENV, OrtRuntime, probe_library, resolve_library, runtime};
pub use stats::{EngineStats, EngineStatsSnapshot};
pub use tensorrt::{
    Profile, cache_dir as tensorrt_cache_dir, decoder_profile, embed_profile, vision_profile,
};
pub use text::{Decoder, DecoderOutput, Embedder, LogitRows, PastKv, Rope};
pub use tokenizer::{SpecialText, Tokenizer};
pub use vision::{BatchCounts, VisionEncoder, VisualTokens};
pub use warm::{BuildReport, build_engines, warm_up};

use crate::config::EngineConfig;
use crate::ingest::Geometry;
use provider::SessionPlan;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to load a model directory: `[engine]` as configured, plus what the rest of the
/// configuration says the engines must serve.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// `[engine]`: model directory, ONNX Runtime library, providers, threads, batch sizes.
    pub engine: EngineConfig,
    /// Where the TensorRT engine and timing caches go (`<state_dir>/engines/tensorrt/...`).
    pub state_dir: PathBuf,
    /// Camera geometries the vision encoder must serve (TensorRT profiles).
    pub geometries: Vec<Geometry>,
}

impl EngineOptions {
    /// CPU defaults for a model directory.
    pub fn cpu(model_dir: impl Into<PathBuf>) -> EngineOptions {
        EngineOptions {
            engine: EngineConfig {
                model_dir: model_dir.into(),
                ..EngineConfig::default()
            },
            state_dir: PathBuf::from("state"),
            geometries: Vec::new(),
        }
    }

    /// The same provider for all three models.
    pub fn with_provider(mut self, provider: ProviderKind) -> EngineOptions {
        self.engine.provider = provider;
        self.engine.vision_provider = None;
        self.engine.embed_provider = None;
        self.engine.decoder_provider = None;
        self
    }

    /// Options from the configuration: `[engine]`, `runtime.state_dir`, and the fixed
    /// `width`/`height` of the cameras as the geometries to serve.
    pub fn from_config(config: &crate::config::Config) -> EngineOptions {
        let mut geometries: Vec<Geometry> = config
            .cameras
            .iter()
            .filter(|c| c.enabled)
            .filter_map(|c| c.size)
            .map(|(width, height)| Geometry::fixed(width, height, &config.vision))
            .collect();
        geometries.sort_by_key(|g| (g.width, g.height));
        geometries.dedup();
        EngineOptions {
            engine: config.engine.clone(),
            state_dir: config.runtime.state_dir.clone(),
            geometries,
        }
    }

    /// The providers of the vision encoder, the token embedding and the decoder.
    pub fn providers(&self) -> [ProviderKind; 3] {
        let e = &self.engine;
        [
            e.vision_provider.unwrap_or(e.provider),
            e.embed_provider.unwrap_or(e.provider),
            e.decoder_provider.unwrap_or(e.provider),
        ]
    }
}

/// The loaded model: three sessions, the tokenizer and the manifest.
#[derive(Debug)]
pub struct Engines {
    manifest: Manifest,
    runtime: &'static OrtRuntime,
    vision: VisionEncoder,
    embedder: Embedder,
    decoder: Decoder,
    tokenizer: Tokenizer,
    providers: [ProviderKind; 3],
    prefill_chunk_tokens: usize,
    load_time: Duration,
    stats: Arc<EngineStats>,
}

impl Engines {
    /// Loads a model directory: manifest, tokenizer, the three sessions on their providers, each
    /// checked against the manifest.
    pub fn load(opts: &EngineOptions) -> Result<Engines, EngineError> {
        let started = Instant::now();
        let e = &opts.engine;
        let [vision_provider, embed_provider, decoder_provider] = opts.providers();
        let manifest = Manifest::load(&e.model_dir)?;
        let tokenizer = load_tokenizer(&manifest)?;
        let runtime = runtime(e.onnxruntime_library.as_deref(), e.threads as usize)?;
        let cache_dir = tensorrt::cache_dir(&opts.state_dir, &manifest, runtime.version());
        let chunk = (e.prefill_chunk_tokens as usize).max(1);
        let plan = |role: ModelRole, kind: ProviderKind| -> Result<SessionPlan<'_>, EngineError> {
            if !kind.is_built() {
                return Err(EngineError::ProviderNotBuilt {
                    provider: kind.name(),
                });
            }
            let profile = (kind == ProviderKind::TensorRt).then(|| match role {
                ModelRole::VisionEncoder => tensorrt::vision_profile(
                    &manifest,
                    &opts.geometries,
                    e.vision_batch_frames as usize,
                ),
                ModelRole::EmbedTokens => tensorrt::embed_profile(&manifest, chunk),
                ModelRole::Decoder => tensorrt::decoder_profile(&manifest, chunk),
            });
            let arena = kind == ProviderKind::Cpu
                && (e.cpu_arena == CpuArena::All || role == ModelRole::VisionEncoder);
            Ok(SessionPlan {
                role,
                kind,
                arena,
                // Without the arena a memory pattern has nothing to plan in.
                memory_pattern: (arena || kind != ProviderKind::Cpu)
                    && (e.memory_patterns == MemoryPatterns::All
                        || role == ModelRole::VisionEncoder),
                device_id: e.device_id as i32,
                tensorrt: &e.tensorrt,
                cache_dir: &cache_dir,
                profile,
                library: runtime.library(),
            })
        };
        let files = &manifest.files;
        let vision_file = manifest.file(&files.vision_encoder);
        let embed_file = manifest.file(&files.embed_tokens);
        let decoder_file = manifest.file(&files.decoder);
        let vision_session = session::open(
            runtime,
            &manifest,
            &vision_file,
            &plan(ModelRole::VisionEncoder, vision_provider)?,
        )?;
        let embed_session = session::open(
            runtime,
            &manifest,
            &embed_file,
            &plan(ModelRole::EmbedTokens, embed_provider)?,
        )?;
        let decoder_session = session::open(
            runtime,
            &manifest,
            &decoder_file,
            &plan(ModelRole::Decoder, decoder_provider)?,
        )?;
        let stats = Arc::new(EngineStats::default());
        let vision = VisionEncoder::new(
            vision_session,
            &manifest,
            e.vision_batch_frames as usize,
            e.vision_batch_wait(),
            stats.clone(),
        );
        let embedder = Embedder::new(embed_session, &manifest, stats.clone());
        let decoder = Decoder::new(
            decoder_session,
            &manifest,
            decoder_provider,
            e.device_id as i32,
            e.cache_memory,
            stats.clone(),
        )?;
        let load_time = started.elapsed();
        tracing::info!(
            model = %e.model_dir.display(),
            family = %manifest.family,
            vision = vision_provider.name(),
            embed = embed_provider.name(),
            decoder = decoder_provider.name(),
            load_ms = load_time.as_millis() as u64,
            "Engines loaded"
        );
        Ok(Engines {
            manifest,
            runtime,
            vision,
            embedder,
            decoder,
            tokenizer,
            providers: [vision_provider, embed_provider, decoder_provider],
            prefill_chunk_tokens: chunk,
            load_time,
            stats,
        })
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The ONNX Runtime in use.
    pub fn runtime(&self) -> &'static OrtRuntime {
        self.runtime
    }

    /// The vision encoder.
    pub fn vision(&self) -> &VisionEncoder {
        &self.vision
    }

    /// The token embedding.
    pub fn embedder(&self) -> &Embedder {
        &self.embedder
    }

    /// The decoder.
    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Providers of (vision encoder, embedding, decoder).
    pub fn providers(&self) -> [ProviderKind; 3] {
        self.providers
    }

    /// Most tokens per decoder run while prefilling.
    pub fn prefill_chunk_tokens(&self) -> usize {
        self.prefill_chunk_tokens
    }

    /// Time [`Engines::load`] took.
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// Runs, items and time of each stage since load (warm-up runs included).
    pub fn stats(&self) -> EngineStatsSnapshot {
        self.stats.snapshot()
    }
}

fn load_tokenizer(m: &Manifest) -> Result<Tokenizer, EngineError> {
    let path = m.file(&m.files.tokenizer);
    if !path.is_file() {
        return Err(EngineError::MissingFile {
            file: path,
            key: "tokenizer",
        });
    }
    let tok = Tokenizer::from_file(&path)?;
    let mismatch = |message: String| EngineError::Tokenizer {
        file: path.clone(),
        message,
    };
    if tok.len() > m.text.vocab_size as usize {
        return Err(mismatch(format!(
            "has {} ids, more than text.vocab_size = {} logits",
            tok.len(),
            m.text.vocab_size
        )));
    }
    for (content, id) in m.special_tokens.pairs() {
        match tok.added_token_id(content) {
            Some(found) if found == id => {}
            Some(found) => {
                return Err(mismatch(format!(
                    "{content} is id {found}, but manifest.toml [special_tokens] says {id}"
                )));
            }
            None => {
                return Err(mismatch(format!(
                    "has no added token {content} (manifest.toml [special_tokens] says id {id})"
                )));
            }
        }
    }
    Ok(tok)
}

/// What `edgevlm engines check` found.
#[derive(Debug)]
pub struct CheckReport {
    /// The model directory.
    pub dir: PathBuf,
    /// Its manifest.
    pub family: Family,
    /// `(file, bytes, checksum verified)`.
    pub files: Vec<(PathBuf, u64, bool)>,
    /// Library and version.
    pub library: (PathBuf, String),
    /// Providers of (vision encoder, embedding, decoder).
    pub providers: [ProviderKind; 3],
    /// Decoder shape summary.
    pub text: String,
    /// Tokenizer summary.
    pub tokenizer: String,
    /// Smoke-run timings and shapes, one line each.
    pub smoke: Vec<String>,
    /// Time to load the sessions.
    pub load_time: Duration,
}

impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}: ok ({} model)", self.dir.display(), self.family)?;
        for (file, bytes, verified) in &self.files {
            writeln!(
                f,
                "  {:<28} {:>12} bytes  {}",
                file.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                bytes,
                if *verified {
                    "sha256 ok"
                } else {
                    "no checksum in manifest"
                }
            )?;
        }
        writeln!(
            f,
            "  onnx runtime {} ({})",
            self.library.1,
            self.library.0.display()
        )?;
        writeln!(
            f,
            "  providers: vision {}, embedding {}, decoder {}; sessions loaded in {} ms",
            self.providers[0],
            self.providers[1],
            self.providers[2],
            self.load_time.as_millis()
        )?;
        writeln!(f, "  decoder: {}", self.text)?;
        writeln!(f, "  tokenizer: {}", self.tokenizer)?;
        for line in &self.smoke {
            writeln!(f, "  {line}")?;
        }
        if self.family == Family::Tiny {
            writeln!(
                f,
                "  note: the tiny model has random weights; its text is meaningless by design"
            )?;
        }
        Ok(())
    }
}

/// Validates a model directory completely: manifest, checksums it records, tokenizer, every
/// session's tensor contract, and one smoke run through each model.
pub fn check_dir(opts: &EngineOptions) -> Result<CheckReport, EngineError> {
    let manifest = Manifest::load(&opts.engine.model_dir)?;
    let checksums = manifest.generator.as_ref().map(|g| &g.sha256);
    let mut files = Vec::new();
    for (key, path) in manifest.file_paths() {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Checksums are keyed by the path in the directory (`onnx/vision_encoder.onnx`) or, as
        // the exports write them, by the file name.
        let rel = path
            .strip_prefix(&manifest.dir)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let expected = checksums.and_then(|c| c.get(&rel).or_else(|| c.get(&name)));
        files.push(verify_file(path, key, expected)?);
    }
    // Files the checksums name beyond the four (the graphs' external weight data, `*.onnx.data`):
    // a missing or truncated one is named here, not as an ONNX Runtime load error.
    for (name, expected) in checksums.into_iter().flatten() {
        let path = manifest.dir.join(name);
        if !files.iter().any(|(p, _, _)| *p == path) {
            files.push(verify_file(path, "generator.sha256", Some(expected))?);
        }
    }
    let engines = Engines::load(opts)?;
    let m = engines.manifest();
    let t = &m.text;
    let text = format!(
        "hidden {}, {} layers, {} heads / {} kv heads x {}, vocab {}, max context {}, KV cache {} bytes/position",
        t.hidden_size,
        t.num_layers,
        t.num_heads,
        t.num_kv_heads,
        t.head_dim,
        t.vocab_size,
        t.max_context,
        m.kv_bytes_per_position()
    );
    let tok = engines.tokenizer();
    let tokenizer = format!(
        "{} ids; special tokens match the manifest (<|im_end|> = {}, {} = {})",
        tok.len(),
        m.special_tokens.im_end,
        m.special_tokens.image_literal.as_str(),
        m.special_tokens.image
    );

    let mut smoke = Vec::new();
    let px = m.vision.token_px();
    let (w, h) = match m.vision.image_size {
        // The `images` layout takes one square size.
        Some(side) => (side, side),
        None => opts
            .geometries
            .first()
            .map_or((2 * px, 2 * px), |g| (g.width, g.height)),
    };
    let frame = vec![128u8; (w * h * 3) as usize];
    // One frame, or one clip of them for the `clips` layout.
    let n = engines.vision().clip().map_or(1, |c| c.frames as usize);
    let t0 = Instant::now();
    let vt = engines.vision().encode(&vec![&frame[..]; n], w, h)?;
    smoke.push(format!(
        "vision encoder: {n} frame{} {w}x{h} -> {:?} in {:.1} ms",
        if n == 1 { "" } else { "s" },
        vt.shape(),
        t0.elapsed().as_secs_f64() * 1e3
    ));
    let ids = tok.encode(
        &format!(
            "{}hello{}",
            m.chat_template.user_prefix, m.chat_template.turn_end
        ),
        SpecialText::Parse,
    );
    let t0 = Instant::now();
    let embeds = engines.embedder().embed(&ids)?;
    let positions: Vec<i64> = (0..ids.len() as i64).collect();
    let empty = engines.decoder().empty_cache()?;
    let out = engines
        .decoder()
        .forward(&empty, &embeds, &positions, LogitRows::Last)?;
    let embeds1 = engines.embedder().embed(&[m.special_tokens.im_start])?;
    let out1 =
        engines
            .decoder()
            .forward(&out.present, &embeds1, &[ids.len() as i64], LogitRows::Last)?;
    if out1.logits.iter().any(|x| !x.is_finite()) {
        return Err(EngineError::run(
            "decoder",
            "the smoke run produced non-finite logits",
        ));
    }
    smoke.push(format!(
        "decoder: prefill {} tokens + 1 decode step -> cache {} positions, finite logits, {:.1} ms",
        ids.len(),
        out1.present.len(),
        t0.elapsed().as_secs_f64() * 1e3
    ));
    Ok(CheckReport {
        dir: opts.engine.model_dir.clone(),
        family: m.family,
        files,
        library: (
            engines.runtime().library().to_path_buf(),
            engines.runtime().version().to_string(),
        ),
        providers: engines.providers(),
        text,
        tokenizer,
        smoke,
        load_time: engines.load_time(),
    })
}

/// A model file's `(path, size, checksum verified)`: present, and equal to its checksum if the
/// manifest has one.
fn verify_file(
    path: PathBuf,
    key: &'static str,
    expected: Option<&String>,
) -> Result<(PathBuf, u64, bool), EngineError> {
    let meta = std::fs::metadata(&path).map_err(|_| EngineError::MissingFile {
        file: path.clone(),
        key,
    })?;
    if let Some(expected) = expected {
        let found = sha256_file(&path)?;
        if !found.eq_ignore_ascii_case(expected) {
            return Err(EngineError::Checksum {
                file: path,
                expected: expected.clone(),
                found,
                size_bytes: meta.len(),
            });
        }
    }
    Ok((path, meta.len(), expected.is_some()))
}

/// Lower-case hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String, EngineError> {
    let io = |e| EngineError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    /// One loaded model serves every camera's task, so it must cross threads.
    #[test]
    fn engines_and_caches_can_be_shared_across_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<super::Engines>();
        shared::<crate::generate::Generator>();
        shared::<crate::generate::KvCache>();
        shared::<super::VisualTokens>();
    }
}
