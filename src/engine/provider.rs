//! Choosing an execution provider per model and registering it on a session.
//!
//! A requested provider is registered with `error_on_failure`: if ONNX Runtime cannot use it the
//! session is not created, instead of quietly running on the CPU (docs/ENGINES.md, "Execution providers"). One module per
//! provider: [`super::cpu`], [`super::cuda`], [`super::tensorrt`].

use super::error::EngineError;
use super::tensorrt::Profile;
use crate::config::{ProviderKind, TensorRtSettings};
use std::path::Path;

impl ProviderKind {
    /// Whether this binary was compiled with the provider.
    pub fn is_built(self) -> bool {
        match self {
            ProviderKind::Cpu => true,
            ProviderKind::Cuda => cfg!(feature = "ort-cuda"),
            ProviderKind::TensorRt => cfg!(feature = "ort-tensorrt"),
        }
    }

    /// Whether tensors of this provider live in GPU memory.
    pub fn is_gpu(self) -> bool {
        !matches!(self, ProviderKind::Cpu)
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
// Without the `ort-cuda` feature only the CPU provider reads it.
#[cfg_attr(not(feature = "ort-cuda"), allow(dead_code))]
pub(crate) struct SessionPlan<'a> {
    pub role: ModelRole,
    pub kind: ProviderKind,
    /// CPU only: whether the session keeps ONNX Runtime's arena allocator.
    pub arena: bool,
    /// Whether ONNX Runtime caches a memory pattern per set of input shapes
    /// (`engine.memory_patterns`; `engine/session.rs`).
    pub memory_pattern: bool,
    pub device_id: i32,
    /// TensorRT build options (TensorRT only).
    #[cfg_attr(not(feature = "ort-tensorrt"), allow(dead_code))]
    pub tensorrt: &'a TensorRtSettings,
    /// Engine and timing cache directory (TensorRT only).
    #[cfg_attr(not(feature = "ort-tensorrt"), allow(dead_code))]
    pub cache_dir: &'a Path,
    /// Optimisation profile (TensorRT only).
    #[cfg_attr(not(feature = "ort-tensorrt"), allow(dead_code))]
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
        ProviderKind::Cpu => super::cpu::register(builder, plan.arena, file),
        ProviderKind::Cuda => super::cuda::register(builder, plan, file),
        ProviderKind::TensorRt => super::tensorrt::register(builder, plan, file),
    }
}

/// Where a provider's outputs should stay between runs: the decoder keeps its KV cache there, so a
/// GPU cache never crosses to the host (`IoBinding`; docs/ENGINES.md, "KV cache and generation").
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
#[cfg(feature = "ort-cuda")]
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
