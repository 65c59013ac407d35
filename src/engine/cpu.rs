//! The CPU execution provider: ONNX Runtime's default, always present.

use super::error::EngineError;
use super::provider::unavailable;
use crate::config::ProviderKind;
use std::path::Path;

/// Registers the CPU provider with its arena allocator, which reuses the per-step buffers of the
/// decoder instead of going back to the system allocator every token.
pub(crate) fn register(
    builder: ort::session::builder::SessionBuilder,
    file: &Path,
) -> Result<ort::session::builder::SessionBuilder, EngineError> {
    let cpu = ort::ep::CPU::default()
        .with_arena_allocator(true)
        .build()
        .error_on_failure();
    builder
        .with_execution_providers([cpu])
        .map_err(|e| unavailable(ProviderKind::Cpu, file, e))
}
