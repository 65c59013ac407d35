//! `edgevlm engines check` and `edgevlm engines build` as a user runs them.

mod engine_common;

use std::process::Command;

fn edgevlm() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_edgevlm"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c.env_remove("ORT_DYLIB_PATH").env("RUST_LOG", "warn");
    c
}

#[test]
fn engines_check_prints_a_summary_of_a_valid_model_directory() {
    let dir = engine_common::tiny_dir();
    let out = edgevlm()
        .args(["engines", "check", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for part in [
        "ok (tiny model)",
        "decoder_model_merged.onnx",
        "sha256 ok",
        "onnx runtime 1.",
        "providers: vision cpu, embedding cpu, decoder cpu",
        "2 kv heads x 16, vocab 512",
        "vision encoder: 1 frame 56x56 -> [1, 4, 64]",
        "meaningless by design",
    ] {
        assert!(stdout.contains(part), "missing `{part}` in:\n{stdout}");
    }
}

#[test]
fn engines_check_exits_1_with_the_first_problem() {
    let dir = engine_common::tiny_copy("cli-broken");
    let manifest = std::fs::read_to_string(dir.join("manifest.toml")).unwrap();
    std::fs::write(
        dir.join("manifest.toml"),
        manifest.replace("head_dim = 16", "head_dim = 8"),
    )
    .unwrap();
    let out = edgevlm()
        .args(["engines", "check", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("decoder_model_merged.onnx: tensor `past_key_values.0.key`: expected dimension 3 (head dim) = 8"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_missing_library_named_by_the_environment_is_an_error_not_a_panic() {
    let out = edgevlm()
        .env("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so")
        .args(["engines", "check"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("ONNX Runtime library not found (looked at: ORT_DYLIB_PATH = /nonexistent/libonnxruntime.so: no such file)"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn engines_build_on_a_machine_without_tensorrt_says_what_is_missing() {
    let out = edgevlm()
        .args(["engines", "build", "--size", "336x196"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    if cfg!(feature = "ort-tensorrt") {
        assert!(
            stderr.contains("execution provider `tensorrt` cannot be used"),
            "{stderr}"
        );
        assert!(
            stderr.contains("built without the TensorRT execution provider"),
            "{stderr}"
        );
    } else {
        assert!(
            stderr.contains("`tensorrt` is not compiled into this edgevlm"),
            "{stderr}"
        );
        assert!(stderr.contains("--features gpu"), "{stderr}");
    }
}

#[test]
fn engines_build_rejects_a_malformed_size() {
    let out = edgevlm()
        .args(["engines", "build", "--size", "336by196"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--size must be WIDTHxHEIGHT"));
}

#[test]
fn onnx_runtime_writes_no_telemetry_unless_the_user_turns_it_on() {
    // The PyPI wheel's library writes a device id and a telemetry store under
    // $XDG_CACHE_HOME/Microsoft (else $HOME/.cache/Microsoft) when ORT_DISABLE_TELEMETRY
    // is not set; edgevlm sets it. Both variables are the test's own: a machine that
    // sets XDG_CACHE_HOME (CI does) would otherwise send the files elsewhere. The library
    // also stays quiet on its own when it sees a CI service's variable (its list, read off
    // libonnxruntime.so 1.32, is below), so the control clears them: a CI machine sets `CI`.
    let dir = engine_common::tiny_dir();
    let telemetry = |home: &std::path::Path, env: Option<&str>| {
        let _ = std::fs::remove_dir_all(home);
        std::fs::create_dir_all(home).unwrap();
        let mut c = edgevlm();
        c.env("HOME", home)
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env_remove("ORT_DISABLE_TELEMETRY");
        for quiet in [
            "CI",
            "ORT_RUNNING_UNIT_TESTS",
            "TF_BUILD",
            "GITHUB_ACTIONS",
            "GITLAB_CI",
            "CIRCLECI",
            "TRAVIS",
            "JENKINS_URL",
            "CODEBUILD_BUILD_ID",
            "BUILDKITE",
            "TEAMCITY_VERSION",
            "APPVEYOR",
            "BITBUCKET_BUILD_NUMBER",
        ] {
            c.env_remove(quiet);
        }
        if let Some(v) = env {
            c.env("ORT_DISABLE_TELEMETRY", v);
        }
        let out = c
            .args(["engines", "check", dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        home.join("cache/Microsoft").exists() || home.join(".cache/Microsoft").exists()
    };
    let home = std::env::temp_dir().join(format!("edgevlm-home-{}", std::process::id()));
    assert!(
        !telemetry(&home, None),
        "telemetry files written by default"
    );
    // The control: the user's own setting wins, and then the library writes them.
    assert!(
        telemetry(&home, Some("0")),
        "the library no longer writes its files"
    );
    let _ = std::fs::remove_dir_all(&home);
}
