//! Choosing an execution provider per model and registering it on a session.
//!
//! A requested provider is registered with `error_on_failure`: if ONNX Runtime cannot use it the
//! session is not created, instead of quietly running on the CPU (docs/ENGINES.md, "Execution providers"). One module per
//! provider: [`super::cpu`], [`super::cuda`], [`super::tensorrt`].

use super::error::EngineError;
use super::tensorrt::Profile;
use std::path::Path;

/// The execution provider a model runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProviderKind {
    /// ONNX Runtime's CPU provider (MLAS); always available.
    #[default]
    Cpu,
    /// NVIDIA CUDA (cargo feature `tensorrt`, an onnxruntime-gpu library).
    Cuda,
    /// NVIDIA TensorRT with CUDA for the nodes TensorRT does not take (cargo feature `tensorrt`).
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

    /// Whether this binary was compiled with the provider.
    pub fn is_built(self) -> bool {
        match self {
            ProviderKind::Cpu => true,
            ProviderKind::Cuda | ProviderKind::TensorRt => cfg!(feature = "tensorrt"),
        }
    }

    /// Whether tensors of this provider live in GPU memory.
    pub fn is_gpu(self) -> bool {
        !matches!(self, ProviderKind::Cpu)
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

/// Which of the three models a session is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelRole {
    /// `vision_encoder.onnx`.
    VisionEncoder,
    /// `embed_tokens.onnx`.
    EmbedTokens,
    /// `decoder_model_merged.onnx`.
    Decoder,
}

impl ModelRole {
    /// Human name used in errors and logs.
    pub fn name(self) -> &'static str {
        match self {
            ModelRole::VisionEncoder => "vision encoder",
            ModelRole::EmbedTokens => "token embedding",
            ModelRole::Decoder => "decoder",
        }
    }

    /// The `[files]` key of the manifest.
    pub fn manifest_key(self) -> &'static str {
        match self {
            ModelRole::VisionEncoder => "vision_encoder",
            ModelRole::EmbedTokens => "embed_tokens",
            ModelRole::Decoder => "decoder",
        }
    }
}

/// Everything a provider module needs to register itself for one session.
// Without the `tensorrt` feature only the CPU provider reads it.
#[cfg_attr(not(feature = "tensorrt"), allow(dead_code))]
pub(crate) struct SessionPlan<'a> {
    pub role: ModelRole,
    pub kind: ProviderKind,
    pub device_id: i32,
    pub tensorrt: &'a TensorRtSettings,
    /// Engine and timing cache directory (TensorRT only).
    pub cache_dir: &'a Path,
    /// Optimisation profile (TensorRT only).
    pub profile: Option<Profile>,
    /// The library in use, for messages.
    pub library: &'a Path,
}

/// Registers the plan's provider on `builder`.
pub(crate) fn register(
    builder: ort::session::builder::SessionBuilder,
    plan: &SessionPlan<'_>,
    file: &Path,
) -> Result<ort::session::builder::SessionBuilder, EngineError> {
    match plan.kind {
        ProviderKind::Cpu => super::cpu::register(builder, file),
        ProviderKind::Cuda => super::cuda::register(builder, plan, file),
        ProviderKind::TensorRt => super::tensorrt::register(builder, plan, file),
    }
}

/// Where a provider's outputs should stay between runs: the decoder keeps its KV cache there, so a
/// GPU cache never crosses to the host (`IoBinding`, DESIGN §4.6).
pub(crate) fn device_memory(
    kind: ProviderKind,
    device_id: i32,
) -> Result<ort::memory::MemoryInfo<'static>, ort::Error> {
    use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
    match kind {
        ProviderKind::Cpu => MemoryInfo::new(
            AllocationDevice::CPU,
            0,
            AllocatorType::Device,
            MemoryType::Default,
        ),
        ProviderKind::Cuda | ProviderKind::TensorRt => MemoryInfo::new(
            AllocationDevice::CUDA,
            device_id,
            AllocatorType::Device,
            MemoryType::Default,
        ),
    }
}

/// Host memory for outputs the CPU reads (logits).
pub(crate) fn host_memory() -> Result<ort::memory::MemoryInfo<'static>, ort::Error> {
    device_memory(ProviderKind::Cpu, 0)
}

/// Maps a registration error to one that names the provider and says what to install.
/// `Err` naming the provider when the loaded ONNX Runtime library was built without it.
#[cfg(feature = "tensorrt")]
pub(crate) fn require_built_in<P: ort::ep::ExecutionProvider>(
    kind: ProviderKind,
    label: &str,
    plan: &SessionPlan<'_>,
    file: &Path,
) -> Result<(), EngineError> {
    if P::is_available().unwrap_or(false) {
        return Ok(());
    }
    Err(unavailable(
        kind,
        file,
        format!(
            "the ONNX Runtime library {} was built without the {label} execution provider",
            plan.library.display()
        ),
    ))
}

pub(crate) fn unavailable(
    provider: ProviderKind,
    file: &Path,
    reason: impl std::fmt::Display,
) -> EngineError {
    EngineError::ProviderUnavailable {
        provider: provider.name(),
        file: file.to_path_buf(),
        reason: format!(
            "{reason}; it needs an onnxruntime-gpu library built with CUDA{} (see docs/ENGINES.md), \
             a visible NVIDIA GPU, and engine.onnxruntime_library pointing at that library",
            if provider == ProviderKind::TensorRt {
                " and TensorRT"
            } else {
                ""
            }
        ),
    }
}
