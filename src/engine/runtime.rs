//! Finding, checking and starting the ONNX Runtime shared library.
//!
//! ort's implicit loader panics when the library is missing, and any ort call made after a failed
//! load panics too (docs/ENGINES.md, "ONNX Runtime"), so nothing here touches ort before the library has been found and
//! probed by hand: a wrong installation is an [`EngineError`] that says what to install.

use super::error::EngineError;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The environment variable ort itself reads; honoured after the config key.
pub const LIBRARY_ENV: &str = "ORT_DYLIB_PATH";

/// One process-wide ONNX Runtime: the library it came from and the environment every session uses.
pub struct OrtRuntime {
    env: ort::environment::Environment,
    library: PathBuf,
    version: String,
    threads: usize,
}

impl std::fmt::Debug for OrtRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtRuntime")
            .field("library", &self.library)
            .field("version", &self.version)
            .field("threads", &self.threads)
            .finish()
    }
}

impl OrtRuntime {
    /// The library file in use.
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// The library's version string (`1.32.0`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Intra-op threads of the shared pool (0: ONNX Runtime's default, one per physical core).
    pub fn threads(&self) -> usize {
        self.threads
    }

    pub(crate) fn env(&self) -> &ort::environment::Environment {
        &self.env
    }
}

// ort allows one environment per process (a second `build()` fails even after the first is
// dropped), so the runtime is created once and leaked; later callers must ask for the same library.
static RUNTIME: Mutex<Option<&'static OrtRuntime>> = Mutex::new(None);

/// The process's ONNX Runtime, started on first use from `library` (or the default search).
///
/// `threads` sizes the intra-op pool shared by every session (0: ONNX Runtime's default); it only
/// takes effect on the first call.
pub fn runtime(library: Option<&Path>, threads: usize) -> Result<&'static OrtRuntime, EngineError> {
    let path = resolve_library(library)?;
    // Probe before looking at the running runtime, so a bad path is reported as bad even when
    // another library is already loaded.
    let version = probe_library(&path)?;
    let mut slot = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(rt) = *slot {
        if same_file(&rt.library, &path) {
            return Ok(rt);
        }
        return Err(EngineError::LibraryConflict {
            loaded: rt.library.clone(),
            requested: path,
        });
    }
    let rt = start(&path, version, threads)?;
    let rt: &'static OrtRuntime = Box::leak(Box::new(rt));
    *slot = Some(rt);
    Ok(rt)
}

fn start(path: &Path, version: String, threads: usize) -> Result<OrtRuntime, EngineError> {
    let builder = ort::init_from(path).map_err(|e| EngineError::LibraryUnusable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let env_error = |e: ort::Error| EngineError::Environment {
        library: path.to_path_buf(),
        reason: e.to_string(),
    };
    // One pool shared by the three sessions bounds the threads on a small device; no spinning,
    // because the cores are shared with GStreamer decoding between model runs.
    let pool = ort::environment::GlobalThreadPoolOptions::default()
        .with_intra_threads(threads)
        .and_then(|p| p.with_inter_threads(1))
        .and_then(|p| p.with_spin_control(false))
        .map_err(env_error)?;
    let env = builder
        .with_name("edgevlm")
        .with_telemetry(false)
        .with_global_thread_pool(pool)
        .build()
        .map_err(env_error)?;
    // ONNX Runtime's INFO level narrates every graph transformer of every session; keep warnings
    // and errors (they reach `tracing` through ort's logger).
    env.set_log_level(ort::logging::LogLevel::Warning);
    tracing::info!(library = %path.display(), version = %version, threads, "ONNX Runtime loaded");
    Ok(OrtRuntime {
        env,
        library: path.to_path_buf(),
        version,
        threads,
    })
}

/// Where the library is: the configured path, then `ORT_DYLIB_PATH`, then the project's venv
/// (`.venv/lib/python3*/site-packages/onnxruntime/capi/`) next to the working directory or any
/// ancestor of the executable, then the dynamic linker's own search path.
pub fn resolve_library(configured: Option<&Path>) -> Result<PathBuf, EngineError> {
    if let Some(p) = configured {
        return existing(p, "engine.onnxruntime_library");
    }
    if let Some(v) = std::env::var_os(LIBRARY_ENV).filter(|v| !v.is_empty()) {
        return existing(Path::new(&v), LIBRARY_ENV);
    }
    let mut searched = Vec::new();
    let mut roots: Vec<PathBuf> = std::env::current_dir().into_iter().collect();
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    for root in &roots {
        let venv = root.join(".venv");
        if let Some(found) = venv_library(&venv) {
            return Ok(found);
        }
        if venv.is_dir() {
            searched.push(format!(
                "{}: no onnxruntime/capi/libonnxruntime.so.* in it",
                venv.display()
            ));
        }
    }
    if searched.is_empty() {
        searched.push(format!(
            "no .venv in {} or above the executable",
            roots
                .first()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "the working directory".into())
        ));
    }
    for name in ["libonnxruntime.so.1", "libonnxruntime.so"] {
        // SAFETY: loading ONNX Runtime runs only its static initialisers, which have no
        // preconditions; the handle is dropped at once.
        if unsafe { libloading::Library::new(name) }.is_ok() {
            return Ok(PathBuf::from(name));
        }
    }
    searched.push("libonnxruntime.so(.1) on the system library path: not found".into());
    Err(EngineError::LibraryNotFound {
        searched: format!(
            "engine.onnxruntime_library unset; {LIBRARY_ENV} unset; {}",
            searched.join("; ")
        ),
    })
}

fn existing(p: &Path, source: &str) -> Result<PathBuf, EngineError> {
    if p.is_file() {
        Ok(p.to_path_buf())
    } else {
        Err(EngineError::LibraryNotFound {
            searched: format!("{source} = {}: no such file", p.display()),
        })
    }
}

/// The newest `libonnxruntime.so.*` of a venv, if any.
fn venv_library(venv: &Path) -> Option<PathBuf> {
    let lib = venv.join("lib");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&lib)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .filter_map(|e| {
            let capi = e.path().join("site-packages/onnxruntime/capi");
            let entries = std::fs::read_dir(&capi).ok()?;
            Some(
                entries
                    .flatten()
                    .map(|f| f.path())
                    .filter(|f| {
                        f.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("libonnxruntime.so"))
                    })
                    .collect::<Vec<_>>(),
            )
        })
        .flatten()
        .collect();
    // The longest name is the fully versioned file (libonnxruntime.so.1.32.0), which the wheel
    // ships without an unversioned symlink.
    found.sort_by_key(|p| (p.as_os_str().len(), p.clone()));
    found.pop()
}

/// Opens `path`, checks that it is ONNX Runtime's C library and new enough, and returns its
/// version string. Done by hand because ort would panic on each of these failures later.
pub fn probe_library(path: &Path) -> Result<String, EngineError> {
    let unusable = |reason: String| EngineError::LibraryUnusable {
        path: path.to_path_buf(),
        reason,
    };
    // SAFETY: as in `resolve_library`: opening ONNX Runtime (or any shared library the user named)
    // runs its initialisers only.
    let lib = unsafe { libloading::Library::new(path) }
        .map_err(|e| unusable(format!("it cannot be opened ({e})")))?;
    // SAFETY: the symbol's type is the C API's documented signature.
    let get_base: libloading::Symbol<unsafe extern "system" fn() -> *const ort::sys::OrtApiBase> =
        unsafe { lib.get(b"OrtGetApiBase") }.map_err(|_| {
            unusable(
                "it does not export OrtGetApiBase, so it is not ONNX Runtime's C library \
                 (wheels before 1.19 ship only a Python module)"
                    .into(),
            )
        })?;
    // SAFETY: OrtGetApiBase takes no arguments and returns a pointer to a static struct.
    let base = unsafe { get_base() };
    if base.is_null() {
        return Err(unusable("OrtGetApiBase returned null".into()));
    }
    // SAFETY: `base` is non-null and points to the library's static OrtApiBase, whose
    // GetVersionString returns a static NUL-terminated string.
    let version = unsafe {
        let s = ((*base).GetVersionString)();
        if s.is_null() {
            return Err(unusable("it returned no version string".into()));
        }
        CStr::from_ptr(s).to_string_lossy().into_owned()
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    let (major, minor) = (parts.next().flatten(), parts.next().flatten());
    match (major, minor) {
        (Some(1), Some(minor)) if minor >= ort::MINOR_VERSION => Ok(version),
        (Some(1), Some(_)) => Err(unusable(format!(
            "it is ONNX Runtime {version}; this build needs 1.{} or newer",
            ort::MINOR_VERSION
        ))),
        _ => Err(unusable(format!(
            "its version string `{version}` is not one this build understands (expected 1.{}.x or newer 1.x)",
            ort::MINOR_VERSION
        ))),
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
