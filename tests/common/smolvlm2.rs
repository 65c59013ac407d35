//! The reduced SmolVLM2 fixture (engines/smolvlm2/reduced.py, which scripts/test.sh runs): the
//! published ONNX signature with seeded random weights, as a user downloads it.

use super::tempdir::{TempDir, tempdir};
use std::path::{Path, PathBuf};

/// The fixture's directory.
pub fn fixture() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/smolvlm2-reduced");
    assert!(
        dir.join("reference.json").is_file(),
        "{}: no fixture; run .venv-export/bin/python engines/smolvlm2/reduced.py",
        dir.display()
    );
    dir
}

/// A copy of the fixture's directory (what a user downloads: no manifest) in a temp dir.
pub fn download() -> TempDir {
    let src = fixture();
    let tmp = tempdir("smolvlm2-download");
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "manifest.toml" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir(tmp.path().join(&name)).unwrap();
            for f in std::fs::read_dir(entry.path()).unwrap() {
                let f = f.unwrap();
                std::fs::copy(f.path(), tmp.path().join(&name).join(f.file_name())).unwrap();
            }
        } else {
            std::fs::copy(entry.path(), tmp.path().join(&name)).unwrap();
        }
    }
    tmp
}

/// `edgevlm engines init DIR`.
pub fn init(dir: &Path) -> std::process::Output {
    super::edgevlm()
        .args(["engines", "init"])
        .arg(dir)
        .output()
        .unwrap()
}
