//! A directory of a test's own under `target/tmp`, removed when dropped (no temp-file crate for
//! this). Test crates that do not need the rest of `common` include this file by path.

use std::path::{Path, PathBuf};

/// A directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh, empty `target/tmp/<tag>-<pid>-<n>`.
pub fn tempdir(tag: &str) -> TempDir {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/tmp")
        .join(format!(
            "{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    TempDir(dir)
}
