//! The CUDA execution provider (cargo feature `ort-cuda`; needs an onnxruntime-gpu library).

use super::error::EngineError;
use super::provider::SessionPlan;
use std::path::Path;

/// Registers CUDA on the plan's device, failing (no CPU fallback) when ONNX Runtime cannot use it.
#[cfg(feature = "ort-cuda")]
pub(crate) fn register(
    builder: ort::session::builder::SessionBuilder,
    plan: &SessionPlan<'_>,
    file: &Path,
) -> Result<ort::session::builder::SessionBuilder, EngineError> {
    use super::provider::unavailable;
    use crate::config::ProviderKind;
    super::provider::require_built_in::<ort::ep::CUDA>(ProviderKind::Cuda, "CUDA", plan, file)?;
    builder
        .with_execution_providers([provider(plan.device_id).build().error_on_failure()])
        .map_err(|e| unavailable(ProviderKind::Cuda, file, e))
}

/// The CUDA provider as registered, also behind TensorRT for the nodes TensorRT rejects.
#[cfg(feature = "ort-cuda")]
pub(crate) fn provider(device_id: i32) -> ort::ep::CUDA {
    ort::ep::CUDA::default().with_device_id(device_id)
}

/// Without the feature the provider does not exist in this binary.
#[cfg(not(feature = "ort-cuda"))]
pub(crate) fn register(
    _builder: ort::session::builder::SessionBuilder,
    _plan: &SessionPlan<'_>,
    _file: &Path,
) -> Result<ort::session::builder::SessionBuilder, EngineError> {
    Err(EngineError::ProviderNotBuilt { provider: "cuda" })
}
