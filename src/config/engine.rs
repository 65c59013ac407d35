//! `[engine]` and `[engine.tensorrt]`: which model, which ONNX Runtime, which providers.

use super::decode::{Fields, Sink};
use std::path::PathBuf;

/// The execution provider a model runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProviderKind {
    /// ONNX Runtime's CPU provider (MLAS); always available.
    #[default]
    Cpu,
    /// NVIDIA CUDA (cargo feature `ort-cuda`, an onnxruntime-gpu library).
    Cuda,
    /// NVIDIA TensorRT with CUDA for the nodes TensorRT does not take (cargo feature `ort-tensorrt`).
    TensorRt,
}

impl ProviderKind {
    /// Every provider, in the order the docs list them.
    pub const ALL: [ProviderKind; 3] = [
        ProviderKind::Cpu,
        ProviderKind::Cuda,
        ProviderKind::TensorRt,
    ];

    /// The name used in the config and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Cpu => "cpu",
            ProviderKind::Cuda => "cuda",
            ProviderKind::TensorRt => "tensorrt",
        }
    }

    /// Parses a config/CLI name.
    pub fn from_name(name: &str) -> Option<ProviderKind> {
        ProviderKind::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// TensorRT build options (`[engine.tensorrt]` in the config).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorRtSettings {
    /// Build fp16 kernels (inputs and outputs stay f32).
    pub fp16: bool,
    /// Builder workspace limit in MiB.
    pub workspace_mib: u32,
    /// TensorRT builder optimisation level, 0-5 (higher builds longer, may run faster).
    pub builder_optimization_level: u8,
    /// Run the vision encoder on this Jetson DLA core (0 or 1) where possible, with GPU fallback.
    pub dla_core: Option<u32>,
}

impl Default for TensorRtSettings {
    fn default() -> Self {
        TensorRtSettings {
            fp16: true,
            // Orin Nano has 8 GB shared between CPU and GPU; 1 GiB leaves room for the caches.
            workspace_mib: 1024,
            builder_optimization_level: 3,
            dla_core: None,
        }
    }
}

/// The engine stage's settings (`[engine]`).
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Whether the model is loaded (off: ingest only; questions are answered `no_model`).
    pub enabled: bool,
    /// Model directory (holds `manifest.toml`).
    pub model_dir: PathBuf,
    /// ONNX Runtime shared library; `None` searches `ORT_DYLIB_PATH`, then the project venv.
    pub onnxruntime_library: Option<PathBuf>,
    /// Provider of all three models unless overridden.
    pub provider: ProviderKind,
    /// Override for the vision encoder.
    pub vision_provider: Option<ProviderKind>,
    /// Override for the token embedding.
    pub embed_provider: Option<ProviderKind>,
    /// Override for the decoder.
    pub decoder_provider: Option<ProviderKind>,
    /// GPU index for CUDA/TensorRT.
    pub device_id: u32,
    /// Intra-op threads shared by the sessions (0: one per physical core).
    pub threads: u32,
    /// Most frames per vision encoder run.
    pub vision_batch_frames: u32,
    /// How long a vision encoder run waits for other cameras' frames to join it, in
    /// milliseconds (frames already queued always share a run); `None`: by the vision provider
    /// ([`EngineConfig::vision_batch_wait`]).
    pub vision_batch_wait_ms: Option<u32>,
    /// Most tokens per decoder run while prefilling.
    pub prefill_chunk_tokens: u32,
    /// Which CPU sessions keep ONNX Runtime's arena allocator (`cpu_arena`).
    pub cpu_arena: CpuArena,
    /// Which sessions let ONNX Runtime cache memory patterns (`memory_patterns`).
    pub memory_patterns: MemoryPatterns,
    /// Where the CPU decoder's KV caches live (`cache_memory`).
    pub cache_memory: CacheMemory,
    /// `[engine.tensorrt]`.
    pub tensorrt: TensorRtSettings,
    /// Memory of the device that holds the KV caches, in MiB, for the memory plan; `None` reads it
    /// from the device (docs/ARCHITECTURE.md, "Memory plan").
    pub device_memory_mib: Option<u32>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            enabled: true,
            model_dir: PathBuf::from("engines/tiny/model"),
            onnxruntime_library: None,
            provider: ProviderKind::Cpu,
            vision_provider: None,
            embed_provider: None,
            decoder_provider: None,
            device_id: 0,
            threads: 0,
            vision_batch_frames: 4,
            vision_batch_wait_ms: None,
            prefill_chunk_tokens: 512,
            cpu_arena: CpuArena::default(),
            memory_patterns: MemoryPatterns::default(),
            cache_memory: CacheMemory::default(),
            tensorrt: TensorRtSettings::default(),
            device_memory_mib: None,
        }
    }
}

impl EngineConfig {
    /// How long a vision run waits for other cameras' frames: `vision_batch_wait_ms`, else 3 ms
    /// on a GPU provider and none on the CPU, where shared runs gain little (`cargo bench
    /// --bench cameras`: 1.1x at 8 cameras on two threads) and waiting would add latency.
    pub fn vision_batch_wait(&self) -> std::time::Duration {
        let provider = self.vision_provider.unwrap_or(self.provider);
        let ms = self.vision_batch_wait_ms.unwrap_or(match provider {
            ProviderKind::Cpu => 0,
            ProviderKind::Cuda | ProviderKind::TensorRt => 3,
        });
        std::time::Duration::from_millis(u64::from(ms))
    }
}

/// Which sessions on the CPU use ONNX Runtime's arena allocator
/// (`engine.cpu_arena`; docs/RELIABILITY.md, "Memory over a long run").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CpuArena {
    /// Only sessions whose shapes do not vary (the vision encoder); the decoder and embedder
    /// allocate from the system allocator run by run (`"vision"`).
    FixedShapes,
    /// Every session, as ONNX Runtime does by default (`"all"`).
    #[default]
    All,
}

/// Which sessions let ONNX Runtime plan their buffers once per set of input shapes and keep the
/// plan (memory patterns; `engine.memory_patterns`; docs/RELIABILITY.md, "Memory over a long run").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MemoryPatterns {
    /// Only the vision encoder, whose shapes are fixed per camera geometry; the decoder and the
    /// embedder, whose shapes change run by run, keep no plans (`"vision"`, the default: a plan
    /// per new cache length grows memory with every length, and the decoder is no slower
    /// without).
    #[default]
    FixedShapes,
    /// Every session, as ONNX Runtime does by default (`"all"`).
    All,
}

/// Where the CPU decoder's KV caches live (`engine.cache_memory`; docs/RELIABILITY.md, "Memory
/// over a long run"). A GPU provider's caches always live in its own device memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CacheMemory {
    /// The runtime's pool of mappings, outside ONNX Runtime's arena (`"pool"`).
    #[default]
    Pool,
    /// ONNX Runtime's arena, between each run's own buffers (`"onnxruntime"`).
    OnnxRuntime,
}

/// Decodes `[engine]`. Relative paths are relative to the file's directory, like every path of
/// the configuration, the default `model_dir` (`engines/tiny/model`) included: a configuration
/// read from no file (tests, `EngineConfig::default`) has the working directory as its own.
pub(crate) fn decode_engine(
    t: &toml::Table,
    base_dir: Option<&std::path::Path>,
    sink: &mut Sink,
) -> EngineConfig {
    let d = EngineConfig::default();
    let mut f = Fields::new("engine", "engine", t);
    let enabled: bool = f.get("enabled", d.enabled, sink);
    let files = decode_model_files(&mut f, &d, base_dir, sink);
    let provider = decode_provider(&mut f, "provider", sink).unwrap_or(d.provider);
    let vision_provider = decode_provider(&mut f, "vision_provider", sink);
    let embed_provider = decode_provider(&mut f, "embed_provider", sink);
    let decoder_provider = decode_provider(&mut f, "decoder_provider", sink);
    let device_id: u32 = f.get("device_id", d.device_id, sink);
    let threads: u32 = f.get("threads", d.threads, sink);
    range(&f, "threads", threads, 0, 256, sink);
    let vision_batch_frames: u32 = f.get("vision_batch_frames", d.vision_batch_frames, sink);
    range(&f, "vision_batch_frames", vision_batch_frames, 1, 64, sink);
    let vision_batch_wait_ms: Option<u32> = f.opt("vision_batch_wait_ms", sink);
    if let Some(ms) = vision_batch_wait_ms {
        range(&f, "vision_batch_wait_ms", ms, 0, 100, sink);
    }
    let prefill_chunk_tokens: u32 = f.get("prefill_chunk_tokens", d.prefill_chunk_tokens, sink);
    range(
        &f,
        "prefill_chunk_tokens",
        prefill_chunk_tokens,
        16,
        8192,
        sink,
    );
    let cpu_arena = f.choice(
        "cpu_arena",
        &[("all", CpuArena::All), ("vision", CpuArena::FixedShapes)],
        d.cpu_arena,
        sink,
    );
    let memory_patterns = f.choice(
        "memory_patterns",
        &[
            ("all", MemoryPatterns::All),
            ("vision", MemoryPatterns::FixedShapes),
        ],
        d.memory_patterns,
        sink,
    );
    let cache_memory = f.choice(
        "cache_memory",
        &[
            ("pool", CacheMemory::Pool),
            ("onnxruntime", CacheMemory::OnnxRuntime),
        ],
        d.cache_memory,
        sink,
    );
    let device_memory_mib: Option<u32> = f.opt("device_memory_mib", sink);
    if let Some(mib) = device_memory_mib {
        range(&f, "device_memory_mib", mib, 64, 1 << 24, sink);
    }
    let empty = toml::Table::new();
    let trt_t = f.table("tensorrt", sink).unwrap_or(&empty);
    let tensorrt = decode_tensorrt(trt_t, sink);
    f.finish(sink);
    EngineConfig {
        enabled,
        model_dir: files.model_dir,
        onnxruntime_library: files.onnxruntime_library,
        provider,
        vision_provider,
        embed_provider,
        decoder_provider,
        device_id,
        threads,
        vision_batch_frames,
        vision_batch_wait_ms,
        prefill_chunk_tokens,
        cpu_arena,
        memory_patterns,
        cache_memory,
        tensorrt,
        device_memory_mib,
    }
}

/// Where the model and the onnxruntime library are (relative paths against the config's directory).
struct ModelFiles {
    model_dir: PathBuf,
    onnxruntime_library: Option<PathBuf>,
}

fn decode_model_files(
    f: &mut Fields<'_>,
    d: &EngineConfig,
    base_dir: Option<&std::path::Path>,
    sink: &mut Sink,
) -> ModelFiles {
    let resolve = |p: PathBuf| super::resolve(&p, base_dir);
    // The default is a relative path too, resolved by the same rule.
    let model_dir: PathBuf = resolve(
        f.opt::<PathBuf>("model_dir", sink)
            .unwrap_or_else(|| d.model_dir.clone()),
    );
    let onnxruntime_library: Option<PathBuf> =
        f.opt::<PathBuf>("onnxruntime_library", sink).map(resolve);
    if let Some(lib) = &onnxruntime_library
        && !lib.is_file()
    {
        sink.error(
            f.path_of("onnxruntime_library"),
            format!(
                "{} does not exist; point it at onnxruntime/capi/libonnxruntime.so.1.* of an \
                 onnxruntime wheel (scripts/setup.sh installs one into .venv)",
                lib.display()
            ),
        );
    }
    ModelFiles {
        model_dir,
        onnxruntime_library,
    }
}

fn decode_tensorrt(t: &toml::Table, sink: &mut Sink) -> TensorRtSettings {
    let d = TensorRtSettings::default();
    let mut f = Fields::new("engine.tensorrt", "engine.tensorrt", t);
    let fp16 = f.get("fp16", d.fp16, sink);
    let workspace_mib: u32 = f.get("workspace_mib", d.workspace_mib, sink);
    range(&f, "workspace_mib", workspace_mib, 64, 1 << 20, sink);
    let level: u32 = f.get(
        "builder_optimization_level",
        u32::from(d.builder_optimization_level),
        sink,
    );
    range(&f, "builder_optimization_level", level, 0, 5, sink);
    let dla_core: Option<u32> = f.opt("dla_core", sink);
    if let Some(core) = dla_core {
        range(&f, "dla_core", core, 0, 1, sink);
    }
    f.finish(sink);
    TensorRtSettings {
        fp16,
        workspace_mib,
        builder_optimization_level: level.min(5) as u8,
        dla_core,
    }
}

fn decode_provider(f: &mut Fields<'_>, key: &'static str, sink: &mut Sink) -> Option<ProviderKind> {
    let name: String = f.opt(key, sink)?;
    match ProviderKind::from_name(&name) {
        Some(p) => Some(p),
        None => {
            sink.error(
                f.path_of(key),
                format!("unknown provider `{name}` (expected cpu, cuda or tensorrt)"),
            );
            None
        }
    }
}

fn range(f: &Fields<'_>, key: &str, v: u32, min: u32, max: u32, sink: &mut Sink) {
    if !(min..=max).contains(&v) {
        sink.error(
            f.path_of(key),
            format!("must be between {min} and {max}, got {v}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const CAM: &str = "[[cameras]]\nid = \"a\"\nuri = \"test://ball\"\n";

    fn errors(text: &str) -> Vec<String> {
        match Config::parse(&format!("{text}\n{CAM}"), None) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn the_engine_section_is_optional_and_defaults_to_the_tiny_model_on_the_cpu() {
        let c = Config::parse(CAM, None).unwrap();
        assert_eq!(c.engine, super::EngineConfig::default());
        assert_eq!(
            c.engine.model_dir,
            std::path::PathBuf::from("engines/tiny/model")
        );
    }

    #[test]
    fn relative_model_dirs_and_the_default_resolve_against_the_files_directory() {
        let base = std::path::Path::new("/etc/edgevlm");
        let c = Config::parse(CAM, Some(base)).unwrap();
        assert_eq!(c.engine.model_dir, base.join("engines/tiny/model"));
        let with = format!("[engine]\nmodel_dir = \"models/scenes\"\n{CAM}");
        let c = Config::parse(&with, Some(base)).unwrap();
        assert_eq!(c.engine.model_dir, base.join("models/scenes"));
        let abs = format!("[engine]\nmodel_dir = \"/opt/m\"\n{CAM}");
        let c = Config::parse(&abs, Some(base)).unwrap();
        assert_eq!(c.engine.model_dir, std::path::PathBuf::from("/opt/m"));
    }

    #[test]
    fn engine_keys_are_checked_with_their_paths() {
        let errs = errors(
            "[engine]\nprovider = \"gpu\"\nthreads = 1000\nmodel_dri = \"x\"\ncpu_arena = \"some\"\n\
             [engine.tensorrt]\nbuilder_optimization_level = 9\ndla_core = 2\n",
        );
        for e in [
            "engine.provider: unknown provider `gpu` (expected cpu, cuda or tensorrt)",
            "engine.threads: must be between 0 and 256, got 1000",
            "engine.cpu_arena: expected \"all\" or \"vision\", got \"some\"",
            "engine.model_dri: unknown key; did you mean `model_dir`?",
            "engine.tensorrt.builder_optimization_level: must be between 0 and 5, got 9",
            "engine.tensorrt.dla_core: must be between 0 and 1, got 2",
        ] {
            assert!(
                errs.iter().any(|g| g.starts_with(e)),
                "missing `{e}` in {errs:#?}"
            );
        }
    }

    #[test]
    fn the_cpu_arena_is_every_sessions_unless_told_vision() {
        let c = Config::parse(CAM, None).unwrap();
        assert_eq!(c.engine.cpu_arena, super::CpuArena::All);
        let c = Config::parse(&format!("[engine]\ncpu_arena = \"vision\"\n{CAM}"), None).unwrap();
        assert_eq!(c.engine.cpu_arena, super::CpuArena::FixedShapes);
    }

    #[test]
    fn memory_patterns_are_the_vision_encoders_unless_told_all() {
        let c = Config::parse(CAM, None).unwrap();
        assert_eq!(c.engine.memory_patterns, super::MemoryPatterns::FixedShapes);
        let c =
            Config::parse(&format!("[engine]\nmemory_patterns = \"all\"\n{CAM}"), None).unwrap();
        assert_eq!(c.engine.memory_patterns, super::MemoryPatterns::All);
        let e = Config::parse(
            &format!("[engine]\nmemory_patterns = \"none\"\n{CAM}"),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("engine.memory_patterns: expected \"all\" or \"vision\", got \"none\""),
            "{e}"
        );
    }

    #[test]
    fn caches_live_in_the_pool_unless_told_onnxruntime() {
        let c = Config::parse(CAM, None).unwrap();
        assert_eq!(c.engine.cache_memory, super::CacheMemory::Pool);
        let c = Config::parse(
            &format!("[engine]\ncache_memory = \"onnxruntime\"\n{CAM}"),
            None,
        )
        .unwrap();
        assert_eq!(c.engine.cache_memory, super::CacheMemory::OnnxRuntime);
        let e = Config::parse(&format!("[engine]\ncache_memory = \"arena\"\n{CAM}"), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("engine.cache_memory: expected \"pool\" or \"onnxruntime\", got \"arena\""),
            "{e}"
        );
    }

    #[test]
    fn per_model_providers_override_the_default() {
        let c = Config::parse(
            &format!("[engine]\nprovider = \"cpu\"\ndecoder_provider = \"cpu\"\n{CAM}"),
            None,
        )
        .unwrap();
        assert_eq!(c.engine.decoder_provider, Some(super::ProviderKind::Cpu));
        assert_eq!(c.engine.vision_provider, None);
    }
}
