//! The engine stage's errors: each says what went wrong, where (library, file, tensor), and what to
//! do about it, and has a [`ErrorKind`] that tells a supervisor whether retrying can help.

use std::path::PathBuf;

/// What installing ONNX Runtime takes, appended to every library error.
pub(crate) const INSTALL_HINT: &str = "run scripts/setup.sh (it installs the onnxruntime wheel into \
     .venv), or `pip install onnxruntime>=1.20` (onnxruntime-gpu for CUDA/TensorRT) and point \
     engine.onnxruntime_library or ORT_DYLIB_PATH at its onnxruntime/capi/libonnxruntime.so.1.*";

/// Whether an error is worth retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The installation or the model directory is wrong; retrying cannot help until a person fixes it.
    Setup,
    /// The caller passed something the model cannot take (wrong frame size, unknown token id).
    Input,
    /// A run failed inside ONNX Runtime (out of memory, device lost); a retry may succeed.
    Runtime,
}

/// Everything that can go wrong while loading or running the engines.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No ONNX Runtime shared library was found where it was looked for.
    #[error("ONNX Runtime library not found (looked at: {searched}); {INSTALL_HINT}")]
    LibraryNotFound {
        /// Each place looked at and what was there.
        searched: String,
    },
    /// A file was found but is not a usable ONNX Runtime library.
    #[error("cannot use {path} as the ONNX Runtime library: {reason}; {INSTALL_HINT}")]
    LibraryUnusable {
        /// The library file.
        path: PathBuf,
        /// Why (not loadable, not ONNX Runtime, too old).
        reason: String,
    },
    /// The process already runs another ONNX Runtime library; one process can hold only one.
    #[error(
        "ONNX Runtime is already loaded from {loaded} in this process, so {requested} cannot be \
         used; give every engine the same engine.onnxruntime_library"
    )]
    LibraryConflict {
        /// The library in use.
        loaded: PathBuf,
        /// The library asked for.
        requested: PathBuf,
    },
    /// Creating the ONNX Runtime environment failed.
    #[error("cannot start ONNX Runtime ({library}): {reason}")]
    Environment {
        /// The library in use.
        library: PathBuf,
        /// ONNX Runtime's message.
        reason: String,
    },
    /// The provider was not compiled into this binary.
    #[error(
        "execution provider `{provider}` is not compiled into this edgevlm; rebuild with \
         `cargo build --release --features gpu` (or the feature `ort-{provider}` alone)"
    )]
    ProviderNotBuilt {
        /// `cuda` or `tensorrt`.
        provider: &'static str,
    },
    /// The provider is compiled in but ONNX Runtime could not register it; there is no CPU fallback.
    #[error("execution provider `{provider}` cannot be used for {file}: {reason}")]
    ProviderUnavailable {
        /// `cuda` or `tensorrt`.
        provider: &'static str,
        /// The model file the session was for.
        file: PathBuf,
        /// ONNX Runtime's message, with what to install.
        reason: String,
    },
    /// `manifest.toml` is missing, unreadable or invalid.
    #[error("{path}: {message}")]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// The offending key and what is wrong with it.
        message: String,
    },
    /// A file the manifest names does not exist.
    #[error("{file}: missing (named by [files] {key} in manifest.toml)")]
    MissingFile {
        /// The absent file.
        file: PathBuf,
        /// The manifest key that names it.
        key: &'static str,
    },
    /// ONNX Runtime could not read a model file.
    #[error(
        "{file}: not a loadable ONNX model ({size_bytes} bytes): {reason}; the file is corrupt or \
         truncated, so regenerate or re-export it"
    )]
    CorruptModel {
        /// The model file.
        file: PathBuf,
        /// Its size, which shows truncation at a glance.
        size_bytes: u64,
        /// ONNX Runtime's message.
        reason: String,
    },
    /// ONNX Runtime read the file but refused to build a session from it.
    #[error("{file}: ONNX Runtime rejected the model on the `{provider}` provider: {reason}")]
    ModelRejected {
        /// The model file.
        file: PathBuf,
        /// The provider the session was built for.
        provider: &'static str,
        /// ONNX Runtime's message.
        reason: String,
    },
    /// A file's sha256 differs from the one the manifest records.
    #[error(
        "{file}: sha256 {found} ({size_bytes} bytes) differs from manifest.toml's {expected}; the \
         file is corrupt, truncated or from another export"
    )]
    Checksum {
        /// The file.
        file: PathBuf,
        /// The manifest's value.
        expected: String,
        /// The file's value.
        found: String,
        /// Its size.
        size_bytes: u64,
    },
    /// A model's declared inputs or outputs do not follow the manifest (the first mismatch found).
    #[error("{file}: tensor `{tensor}`: expected {expected}, found {found}")]
    Contract {
        /// The model file.
        file: PathBuf,
        /// The tensor name.
        tensor: String,
        /// What the manifest implies.
        expected: String,
        /// What the file declares.
        found: String,
    },
    /// `tokenizer.json` is invalid, unsupported or disagrees with the manifest.
    #[error("{file}: {message}")]
    Tokenizer {
        /// The tokenizer file.
        file: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The caller passed input the model cannot take.
    #[error("{model}: {message}")]
    Input {
        /// Which model (`vision encoder`, `decoder`, …).
        model: &'static str,
        /// What is wrong with the input.
        message: String,
    },
    /// A run failed inside ONNX Runtime.
    #[error("{model}: inference failed: {reason}")]
    Run {
        /// Which model.
        model: &'static str,
        /// ONNX Runtime's message.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl EngineError {
    /// Whether retrying can help.
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::Input { .. } => ErrorKind::Input,
            EngineError::Run { .. } => ErrorKind::Runtime,
            _ => ErrorKind::Setup,
        }
    }

    pub(crate) fn run(model: &'static str, e: impl std::fmt::Display) -> EngineError {
        EngineError::Run {
            model,
            reason: e.to_string(),
        }
    }

    pub(crate) fn input(model: &'static str, message: impl Into<String>) -> EngineError {
        EngineError::Input {
            model,
            message: message.into(),
        }
    }
}
