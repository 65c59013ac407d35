//! `edgevlm validate` and the shipped configurations.

mod common;

use common::edgevlm;
use std::path::Path;

#[test]
fn validate_reports_every_problem_with_its_path_and_exits_2() {
    let dir = std::env::temp_dir().join(format!("edgevlm-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        r#"
[vision]
max_frames = 0

[[cameras]]
id = "front door"
uri = "rtsp://admin:Secr3t-pw@192.0.2.10/live"
sample_fps = 0
latency_ms = -5

[[cameras]]
id = "yard"
uri = "ftp://x/y"
window_secs = 30
stall_sec = 5
password_file = "/nonexistent/pw"
"#,
    )
    .unwrap();
    let out = edgevlm()
        .args(["validate", file.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let expected = [
        "vision.max_frames: must be between 1 and 10000, got 0",
        "cameras[0].id: must be 1-64 characters",
        "cameras[0].uri: `rtsp://***@192.0.2.10/live` carries credentials in the URL",
        "cameras[0].sample_fps: must be > 0 and <= 30, got 0",
        "cameras[0].latency_ms: expected a non-negative integer",
        "cameras[1].uri: unsupported scheme `ftp`",
        "cameras[1].stall_sec: unknown key; did you mean `stall_secs`?",
        "cameras[1].password_file: cannot read /nonexistent/pw",
        "cameras[1].username: is required when a password is given",
    ];
    let lines: Vec<&str> = stderr.lines().collect();
    for e in expected {
        assert!(
            lines.iter().any(|l| l.starts_with(e)),
            "missing `{e}` in:\n{stderr}"
        );
    }
    assert!(lines.last().unwrap().ends_with("9 problem(s)"), "{stderr}");
    assert!(!stderr.contains("Secr3t-pw"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn validate_prints_a_one_line_summary_for_a_valid_file() {
    let out = edgevlm()
        .args(["validate", "configs/edgevlm.toml"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        stdout.contains("valid: 1 camera: demo (test://ball"),
        "{stdout}"
    );
}

#[test]
fn every_shipped_configuration_validates() {
    let mut n = 0;
    for entry in std::fs::read_dir("configs").unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            n += 1;
            let out = edgevlm()
                .args(["validate", path.to_str().unwrap()])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}:\n{}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    assert!(n >= 1);
}

#[test]
fn a_missing_file_is_one_clear_error() {
    let out = edgevlm()
        .args(["validate", "/nonexistent/edgevlm.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/edgevlm.toml"));
}

#[test]
fn config_doc_lists_every_key() {
    let doc = std::fs::read_to_string(Path::new("docs/CONFIG.md")).unwrap();
    for key in edgevlm::config::known_keys() {
        match key.rsplit_once('.') {
            Some((_, leaf)) => assert!(
                doc.contains(&format!("| `{leaf}`")) || doc.contains(&format!("`, `{leaf}`")),
                "docs/CONFIG.md has no table row for `{key}`"
            ),
            None => assert!(
                doc.contains(&format!("`[{key}]`")) || doc.contains(&format!("`[[{key}]]`")),
                "docs/CONFIG.md has no section for `{key}`"
            ),
        }
    }
}
