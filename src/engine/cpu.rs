//! The CPU execution provider: ONNX Runtime's default, always present.

use super::error::EngineError;
use super::provider::unavailable;
use crate::config::ProviderKind;
use std::path::Path;

/// Registers the CPU provider, with ONNX Runtime's arena allocator when `arena` is set: by default
/// on every session (`engine.cpu_arena = "all"`), or only for the vision encoder (`"vision"`).
///
/// The arena keeps the largest buffers any run has needed and never gives them back; memory
/// patterns are cached per input shape. The vision encoder's shapes are fixed per camera
/// geometry, so its arena reaches its size on the first run and stays there. The decoder's and the
/// embedder's shapes follow the cache length and the prompt, so their arena's high mark creeps up
/// as caches reach lengths they had not reached before (bounded by the longest cache). Without it
/// their buffers come from the system allocator run by run, which in the 2-hour soaks held more
/// resident memory and grew faster, not slower (docs/RELIABILITY.md, "Memory over a long run").
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
