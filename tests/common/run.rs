//! `edgevlm run` as a child process, on a configuration written by the test.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

/// An `edgevlm run` child with its stderr in a log file; killed on drop, its directory removed.
pub struct RunProcess {
    child: Option<Child>,
    dir: PathBuf,
}

impl RunProcess {
    /// Writes `config` into a fresh directory (relative paths in it resolve there) and starts
    /// `edgevlm run` on it. The directory links the repository's `engines/`, so the default
    /// `engine.model_dir` (`engines/tiny/model` next to the file, made by
    /// `engines/tiny/generate.py`) is the tiny model, as for a file in the repository root.
    pub fn start(tag: &str, config: &str) -> RunProcess {
        RunProcess::start_with_env(tag, config, &[])
    }

    /// The same with environment variables set for the child (e.g. `RUST_LOG`).
    pub fn start_with_env(tag: &str, config: &str, env: &[(&str, &str)]) -> RunProcess {
        let dir = std::env::temp_dir().join(format!("edgevlm-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("engines"),
            dir.join("engines"),
        )
        .unwrap();
        let cfg = dir.join("edgevlm.toml");
        std::fs::write(&cfg, config).unwrap();
        let log = std::fs::File::create(dir.join("stderr.log")).unwrap();
        let child = super::edgevlm()
            .envs(env.iter().copied())
            .args(["run", "-c", cfg.to_str().unwrap()])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        RunProcess {
            child: Some(child),
            dir,
        }
    }

    /// Its directory (configuration, log, `state`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for RunProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
