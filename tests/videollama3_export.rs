//! engines/videollama3/export.py on good and bad checkpoints, and `edgevlm engines check` on what
//! it wrote (the fixtures of scripts/videollama3-parity.sh, which scripts/test.sh runs first).
//!
//! Bad checkpoints are copies of the reduced one with one thing wrong (the large files linked,
//! not copied); each must stop the export before anything is written, with a message that names
//! the file and says what was found and what was expected.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "common/tempdir.rs"]
mod tempdir;

use tempdir::TempDir;

fn tempdir() -> TempDir {
    tempdir::tempdir("videollama3-export")
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn root() -> PathBuf {
    repo().join("target/videollama3-reduced")
}

fn require(path: &Path) {
    assert!(
        path.exists(),
        "{} is missing: scripts/videollama3-parity.sh builds the reduced VideoLLaMA3 fixtures \
         (scripts/test.sh runs it)",
        path.display()
    );
}

fn edgevlm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_edgevlm"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run edgevlm")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A copy of the reduced checkpoint in a temporary directory: small files copied, the weights
/// linked unless `copy_weights`.
fn checkpoint_copy(copy_weights: bool) -> TempDir {
    let src = root().join("checkpoint");
    require(&src);
    let dir = tempdir();
    for entry in std::fs::read_dir(&src).expect("read checkpoint") {
        let path = entry.expect("entry").path();
        let to = dir.path().join(path.file_name().expect("name"));
        if path.extension().is_some_and(|e| e == "safetensors") && !copy_weights {
            std::os::unix::fs::symlink(&path, &to).expect("link");
        } else {
            std::fs::copy(&path, &to).expect("copy");
        }
    }
    dir
}

/// Runs the export on `ckpt`; returns (exit code, stderr, whether it wrote anything).
fn export(ckpt: &Path) -> (Option<i32>, String, bool) {
    let python = repo().join(".venv-export/bin/python");
    require(&python);
    let out = tempdir();
    let target = out.path().join("model");
    let o = Command::new(python)
        .arg(repo().join("engines/videollama3/export.py"))
        .arg(ckpt)
        .arg("--out")
        .arg(&target)
        .output()
        .expect("run export.py");
    let wrote = target.join("manifest.toml").exists();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        wrote,
    )
}

fn edit_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json");
    f(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).expect("json")).expect("write");
}

fn last_line(stderr: &str) -> &str {
    stderr.trim_end().lines().last().unwrap_or("")
}

#[test]
fn engines_check_accepts_both_exports_and_names_their_weight_files() {
    for m in ["model", "model-fp16"] {
        let dir = root().join(m);
        require(&dir);
        let o = edgevlm(&["engines", "check", dir.to_str().expect("utf-8")]);
        let t = text(&o);
        assert!(o.status.success(), "{m}: {t}");
        assert!(t.contains("ok (videollama3 model)"), "{t}");
        for f in [
            "decoder_model_merged.onnx.data",
            "embed_tokens.onnx.data",
            "vision_encoder.onnx.data",
        ] {
            assert!(
                t.lines().any(|l| l.contains(f) && l.contains("sha256 ok")),
                "{m}: {f} not checked:\n{t}"
            );
        }
        assert!(t.contains("<|video_pad|> = 151656"), "{t}");
    }
}

#[test]
fn engines_check_refuses_a_missing_or_altered_weight_file_by_name() {
    let src = root().join("model");
    require(&src);
    for (what, damage) in [("missing", 0), ("truncated", 1)] {
        let dir = tempdir();
        for entry in std::fs::read_dir(&src).expect("read") {
            let path = entry.expect("entry").path();
            std::fs::copy(&path, dir.path().join(path.file_name().expect("name"))).expect("copy");
        }
        let data = dir.path().join("decoder_model_merged.onnx.data");
        if damage == 0 {
            std::fs::remove_file(&data).expect("remove");
        } else {
            let len = std::fs::metadata(&data).expect("meta").len();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&data)
                .expect("open")
                .set_len(len / 2)
                .expect("truncate");
        }
        let o = edgevlm(&["engines", "check", dir.path().to_str().expect("utf-8")]);
        let t = text(&o);
        assert!(!o.status.success(), "{what}: {t}");
        assert!(t.contains("decoder_model_merged.onnx.data"), "{what}: {t}");
        if damage == 1 {
            assert!(t.contains("sha256"), "{what}: {t}");
        }
    }
}

#[test]
fn an_unexpected_architecture_or_config_key_stops_the_export_with_what_was_found() {
    let ck = checkpoint_copy(false);
    let cfg = ck.path().join("config.json");
    edit_json(&cfg, |v| {
        v["architectures"] = serde_json::json!(["LlavaForConditionalGeneration"])
    });
    let (code, err, wrote) = export(ck.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(!wrote);
    let line = last_line(&err);
    assert!(line.contains("LlavaForConditionalGeneration"), "{line}");
    assert!(
        line.contains("expected ['VideoLlama3ForConditionalGeneration']"),
        "{line}"
    );

    let ck = checkpoint_copy(false);
    let cfg = ck.path().join("config.json");
    edit_json(&cfg, |v| {
        v["text_config"]["use_mrope"] = serde_json::json!(true)
    });
    let (code, err, wrote) = export(ck.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(!wrote);
    let line = last_line(&err);
    assert!(
        line.contains("unexpected text_config keys ['use_mrope']"),
        "{line}"
    );
}

#[test]
fn a_truncated_safetensors_or_a_missing_tokenizer_is_named() {
    let ck = checkpoint_copy(true);
    let weights = ck.path().join("model.safetensors");
    let len = std::fs::metadata(&weights).expect("meta").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&weights)
        .expect("open")
        .set_len(len - 1000)
        .expect("truncate");
    let (code, err, wrote) = export(ck.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(!wrote);
    let line = last_line(&err);
    assert!(line.contains("model.safetensors"), "{line}");
    assert!(line.contains(&format!("{} bytes", len - 1000)), "{line}");
    assert!(line.contains("truncated"), "{line}");

    let ck = checkpoint_copy(false);
    std::fs::remove_file(ck.path().join("tokenizer.json")).expect("remove");
    let (code, err, wrote) = export(ck.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(!wrote);
    let line = last_line(&err);
    assert!(line.contains("tokenizer.json is missing"), "{line}");
}
