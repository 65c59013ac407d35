//! The CPU execution provider: ONNX Runtime's default, always present.

use super::error::EngineError;
use super::provider::unavailable;
use crate::config::ProviderKind;
use std::path::Path;

/// Registers the CPU provider, with ONNX Runtime's arena allocator when `arena` is set: by default
/// only for the vision encoder (`CpuArena::FixedShapes`).
///
/// The arena keeps the largest buffers any run has needed and never gives them back; memory
/// patterns are cached per input shape. The vision encoder's shapes are fixed per camera
/// geometry, so its arena reaches its size on the first run and stays there. The decoder's and the
/// embedder's shapes follow the cache length and the prompt, so with the arena their high mark
/// crept up for hours as caches reached lengths they had not reached before; without it their
/// buffers come from the system allocator, which gives them back (docs/RELIABILITY.md, "Where the
/// slow growth was", has the heap profile and the step times with and without it).
pub(crate) fn register(
    builder: ort::session::builder::SessionBuilder,
    arena: bool,
    file: &Path,
) -> Result<ort::session::builder::SessionBuilder, EngineError> {
    let cpu = ort::ep::CPU::default()
        .with_arena_allocator(arena)
        .build()
        .error_on_failure();
    builder
        .with_execution_providers([cpu])
        .map_err(|e| unavailable(ProviderKind::Cpu, file, e))
}
