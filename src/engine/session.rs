//! Creating one ONNX Runtime session: file checks, provider registration, error classification,
//! contract check, and the log line that says which provider runs it.

use super::contract;
use super::error::EngineError;
use super::manifest::Manifest;
use super::provider::{self, SessionPlan};
use super::runtime::OrtRuntime;
use ort::session::Session;
use std::path::Path;

/// Opens `file` for `plan.role` on `plan.kind` and checks its tensors against the manifest.
pub(crate) fn open(
    rt: &OrtRuntime,
    m: &Manifest,
    file: &Path,
    plan: &SessionPlan<'_>,
) -> Result<Session, EngineError> {
    let size_bytes = match std::fs::metadata(file) {
        Ok(meta) if meta.is_file() => meta.len(),
        _ => {
            return Err(EngineError::MissingFile {
                file: file.to_path_buf(),
                key: plan.role.manifest_key(),
            });
        }
    };
    if size_bytes == 0 {
        return Err(EngineError::CorruptModel {
            file: file.to_path_buf(),
            size_bytes,
            reason: "the file is empty".into(),
        });
    }
    let builder = Session::builder(rt.env()).map_err(|e| EngineError::Environment {
        library: rt.library().to_path_buf(),
        reason: e.to_string(),
    })?;
    let builder =
        builder
            .with_log_id(plan.role.manifest_key())
            .map_err(|e| EngineError::Environment {
                library: rt.library().to_path_buf(),
                reason: e.to_string(),
            })?;
    let mut builder = provider::register(builder, plan, file)?;
    // A memory pattern is cached per set of input shapes and never evicted, and a run with one
    // takes its buffers as one block of the pattern's size: with the decoder's shapes changing
    // run by run the cache grows with every new length; without patterns the buffers come from
    // the arena tensor by tensor (`engine.memory_patterns`; docs/RELIABILITY.md, "Memory over a
    // long run", measures both).
    if !plan.memory_pattern {
        builder = builder
            .with_memory_pattern(false)
            .map_err(|e| EngineError::Environment {
                library: rt.library().to_path_buf(),
                reason: e.to_string(),
            })?;
    }
    let started = std::time::Instant::now();
    let session = builder.commit_from_file(file).map_err(|e| {
        use ort::ErrorCode as C;
        match e.code() {
            C::InvalidProtobuf | C::InvalidGraph | C::NoModel => EngineError::CorruptModel {
                file: file.to_path_buf(),
                size_bytes,
                reason: e.message().to_string(),
            },
            // An empty or cut-off protobuf can parse as a model without a graph.
            C::InvalidArgument if e.message().contains("No graph") => EngineError::CorruptModel {
                file: file.to_path_buf(),
                size_bytes,
                reason: e.message().to_string(),
            },
            C::ExecutionProviderFailure => {
                provider::unavailable(plan.kind, file, e.message().to_string())
            }
            _ => EngineError::ModelRejected {
                file: file.to_path_buf(),
                provider: plan.kind.name(),
                reason: e.message().to_string(),
            },
        }
    })?;
    contract::check(&session, m, plan.role, file)?;
    tracing::info!(
        model = plan.role.name(),
        file = %file.display(),
        provider = plan.kind.name(),
        load_ms = started.elapsed().as_millis() as u64,
        "Engine session ready"
    );
    Ok(session)
}
