//! The CPU execution provider: ONNX Runtime's default, always present.

use super::error::EngineError;
use super::provider::unavailable;
use crate::config::ProviderKind;
use std::path::Path;

/// Registers the CPU provider, with ONNX Runtime's arena allocator when `arena` is set: by default
/// on every session (`engine.cpu_arena = "all"`), or only for the vision encoder (`"vision"`).
///
/// The arena keeps the buffers runs have needed and reuses them; it grows when a run needs more
/// than it holds free, so its high mark is set by the largest run (for the decoder: the longest
/// cache with the largest prefill chunk, which the memory plan bounds), and by how the KV caches
/// alive at once fragment it. Memory patterns (`engine.memory_patterns`, `engine/session.rs`) are
/// cached per set of input shapes and never evicted. Without the arena the decoder's buffers come
/// from the system allocator run by run, which in the 2-hour soaks held more resident memory and
/// grew faster, not slower (docs/RELIABILITY.md, "Memory over a long run").
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
