//! Fixtures of the engine tests: the generated tiny model (engines/tiny/generate.py) loaded into
//! real ONNX Runtime sessions, copies of it to break, and the project venv's Python for reference
//! outputs.
#![allow(dead_code)] // each test binary uses a different subset

use edgevlm::engine::{EngineOptions, Engines};
use edgevlm::generate::Generator;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The tiny model directory; fails with the command that makes it.
pub fn tiny_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
    assert!(
        dir.join("manifest.toml").is_file(),
        "{} is missing: run scripts/setup.sh (it generates the tiny model)",
        dir.display()
    );
    dir
}

/// CPU options for a model directory, one intra-op thread (deterministic and light on CI).
pub fn options(dir: &Path) -> EngineOptions {
    let mut o = EngineOptions::cpu(dir);
    o.engine.threads = 1;
    o
}

/// The tiny model on the CPU.
pub fn tiny() -> Arc<Engines> {
    Arc::new(Engines::load(&options(&tiny_dir())).unwrap_or_else(|e| panic!("{e}")))
}

/// A generator on the tiny model.
pub fn generator() -> Generator {
    Generator::new(tiny())
}

/// The venv's Python; fails with the command that makes it.
pub fn python() -> PathBuf {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/setup.sh (it creates the venv)",
        py.display()
    );
    py
}

/// A copy of the tiny model in a temporary directory, removed when dropped.
pub struct TempModel(PathBuf);

impl std::ops::Deref for TempModel {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempModel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh copy of the tiny model directory to modify.
pub fn tiny_copy(name: &str) -> TempModel {
    let dir = std::env::temp_dir().join(format!("edgevlm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(tiny_dir()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    TempModel(dir)
}

/// A deterministic RGB frame with structure in both directions.
pub fn frame(width: u32, height: u32, seed: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity((width * height * 3) as usize);
    for y in 0..height {
        for x in 0..width {
            out.push(((x * 7 + y * 3 + seed * 31) % 256) as u8);
            out.push(((x * y + seed * 17) % 256) as u8);
            out.push(((x * 3 + y * 5 + seed + 128) % 256) as u8);
        }
    }
    out
}

/// Largest absolute difference.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
