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
fn validate_prints_a_summary_and_the_memory_plan_for_a_valid_file() {
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
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].contains("valid: 1 camera: demo (test://ball"),
        "{stdout}"
    );
    // The memory plan of the demo's model, against this machine's memory.
    assert!(
        lines[1].starts_with("memory plan on cpu (videollama3): ")
            && lines[1].contains("(MemTotal, "),
        "{stdout}"
    );
}

/// A configuration of `cameras` cameras at 336x196 with `window` seconds on the tiny model.
fn planned_config(name: &str, extra: &str, cameras: usize, window: u32) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("edgevlm-plan-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
    let mut text = format!("[engine]\nmodel_dir = \"{}\"\n{extra}\n", tiny.display());
    for i in 0..cameras {
        text.push_str(&format!(
            "[[cameras]]\nid = \"cam{i}\"\nuri = \"test://ball\"\nwidth = 336\nheight = 196\n\
             window_secs = {window}\n"
        ));
        if i == 0 {
            text.push_str("cache_policy = \"sink_recent\"\ncache_budget = 400\n");
        }
    }
    let file = dir.join("edgevlm.toml");
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn plan_tells_each_cameras_kv_bytes_and_the_total_against_the_device() {
    let file = planned_config("fits", "", 3, 30);
    let out = edgevlm()
        .args([
            "plan",
            "-c",
            file.to_str().unwrap(),
            "--json",
            "--device-memory",
            "4096",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bpp = plan["bytes_per_position"].as_u64().unwrap();
    let cams = plan["cameras"].as_array().unwrap();
    assert_eq!(cams.len(), 3);
    let mut caches = 0;
    for c in cams {
        let n = |k: &str| c[k].as_u64().unwrap();
        // 12 x 7 tokens per frame; the window's 30 frames, one at its edge and 25 % stale.
        assert_eq!(n("frame_tokens"), 84);
        // At the default 1 fps, before pruning.
        assert_eq!(c["tokens_per_second"].as_f64(), Some(84.0));
        assert_eq!(n("window_cache_frames"), 30 + 1 + 7);
        assert_eq!(n("cache_positions"), n("window_positions").min(n("budget")));
        assert_eq!(n("cache_bytes"), n("cache_positions") * bpp);
        caches += n("cache_bytes") + n("narration_bytes");
    }
    assert_eq!(cams[0]["policy"], "sink_recent");
    assert_eq!(cams[0]["cache_positions"], 400);
    assert_eq!(cams[1]["policy"], "window");
    let n = |k: &str| plan[k].as_u64().unwrap();
    let shared = plan["questions"]["bytes"].as_u64().unwrap()
        + plan["conversations"]["bytes"].as_u64().unwrap();
    let features: u64 = cams
        .iter()
        .map(|c| c["features_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(
        n("total_bytes"),
        n("weights_bytes") + caches + shared + features
    );
    assert!(n("weights_bytes") > 0);
    assert_eq!(plan["device"]["bytes"], 4096u64 << 20);

    // The table names every camera and says it fits.
    let out = edgevlm()
        .args([
            "plan",
            "-c",
            file.to_str().unwrap(),
            "--device-memory",
            "4096",
        ])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("cam0") && table.contains("cam2"), "{table}");
    assert!(table.contains("(--device-memory): fits"), "{table}");
}

#[test]
fn a_configuration_over_the_devices_memory_is_refused_by_plan_and_validate() {
    // 16 cameras with an hour of footage each, on 64 MiB.
    let file = planned_config("over", "device_memory_mib = 64", 16, 3600);
    let out = edgevlm()
        .args(["plan", "-c", file.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("DOES NOT FIT"));
    assert!(
        stderr.contains("the plan needs")
            && stderr.contains("but the device has 64.0 MiB (engine.device_memory_mib)"),
        "{stderr}"
    );
    let out = edgevlm()
        .args(["validate", file.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the plan needs"), "{stderr}");
    assert!(stderr.trim_end().ends_with("1 problem(s)"), "{stderr}");
    assert!(out.stdout.is_empty());
    // The same cameras on enough memory pass.
    let file = planned_config("enough", "device_memory_mib = 65536", 16, 3600);
    let out = edgevlm()
        .args(["validate", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The shipped configurations for NVIDIA devices name a GPU provider, hardware templates and a
/// model that a device has and this machine does not.
fn for_a_gpu_device(config: &str) -> bool {
    config.contains("provider = \"tensorrt\"") || config.contains("provider = \"cuda\"")
}

#[test]
fn every_shipped_configuration_validates() {
    // validate checks that each camera's elements are installed: on a machine without an NVIDIA
    // GPU or a Jetson (the build machines), the hardware configurations may fail that check only.
    gst::init().unwrap();
    let mut n = 0;
    for entry in std::fs::read_dir("configs").unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        n += 1;
        let out = edgevlm()
            .args(["validate", path.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !for_a_gpu_device(&std::fs::read_to_string(&path).unwrap()) {
            assert!(out.status.success(), "{}:\n{stderr}", path.display());
            continue;
        }
        // Refused here only for what this machine lacks: the file's own checks pass.
        assert_eq!(out.status.code(), Some(2), "{}:\n{stderr}", path.display());
        let machine = [
            "engine.model_dir: ",
            "engine.provider: ",
            "engine.vision_provider: ",
            "engine.embed_provider: ",
            "engine.decoder_provider: ",
        ];
        for p in stderr.lines().filter(|l| !l.ends_with("problem(s)")) {
            if machine.iter().any(|m| p.starts_with(m)) {
                continue;
            }
            // `cameras[N].pipeline: template `T` needs the GStreamer element(s) `a`, … , which …`
            let elements = p
                .split_once("needs the GStreamer element")
                .and_then(|(_, rest)| rest.split_once(", which"))
                .map(|(names, _)| names.split('`').skip(1).step_by(2).collect::<Vec<_>>())
                .unwrap_or_default();
            let hardware = [
                "nvh264dec",
                "nvh265dec",
                "nvv4l2decoder",
                "nvvidconv",
                "cudaconvertscale",
                "cudadownload",
            ];
            assert!(
                p.starts_with("cameras[")
                    && !elements.is_empty()
                    && elements
                        .iter()
                        .all(|e| hardware.contains(e) && gst::ElementFactory::find(e).is_none()),
                "{}: not a machine problem: {p}\n{stderr}",
                path.display()
            );
        }
        assert!(stderr.contains("engine.model_dir: "), "{stderr}");
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

#[test]
fn a_cache_policy_the_model_cannot_run_is_refused_by_validate() {
    // The tiny model without its rotary settings: keys cannot be renumbered in place.
    let dir = scratch("norope");
    let model = tiny_copy(&dir);
    let manifest = std::fs::read_to_string(model.join("manifest.toml")).unwrap();
    let without: String = manifest
        .lines()
        .filter(|l| !l.starts_with("rope_theta"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(without, manifest);
    std::fs::write(model.join("manifest.toml"), without).unwrap();
    let file = dir.join("edgevlm.toml");
    std::fs::write(
        &file,
        format!(
            "[engine]\nmodel_dir = \"{}\"\n[[cameras]]\nid = \"a\"\nuri = \"test://ball\"\n\
             [[cameras]]\nid = \"b\"\nuri = \"test://ball\"\ncache_policy = \"compress\"\n",
            model.display()
        ),
    )
    .unwrap();
    let out = edgevlm()
        .args(["validate", file.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "cameras[1].cache_policy: camera b: `compress` renumbers cached keys by rotary"
        ) && stderr.contains("gives no text.rope_theta"),
        "{stderr}"
    );
    assert!(!stderr.contains("cameras[0]"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A fresh directory for one test.
fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("edgevlm-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `edgevlm validate [extra] FILE` on `config` written to `dir/edgevlm.toml`, run from another
/// working directory (relative paths follow the file): (exit code, stdout, stderr).
fn validate_text(dir: &Path, config: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let file = dir.join("edgevlm.toml");
    std::fs::write(&file, config).unwrap();
    let out = edgevlm()
        .current_dir(std::env::temp_dir())
        .arg("validate")
        .args(extra)
        .arg(&file)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A copy of the tiny model in `dir/model`.
fn tiny_copy(dir: &Path) -> std::path::PathBuf {
    let model = dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
    for entry in std::fs::read_dir(&tiny).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), model.join(entry.file_name())).unwrap();
    }
    model
}

const ONE_CAMERA: &str = "[[cameras]]\nid = \"a\"\nuri = \"test://ball\"\n";

#[test]
fn validate_refuses_a_model_whose_files_do_not_match_its_family() {
    // The tiny model (frames in, tokens per frame out) relabelled Apollo, whose encoder takes
    // clips: refused with the manifest, the key and what the family takes.
    let dir = scratch("validate-family");
    let model = tiny_copy(&dir);
    let manifest = model.join("manifest.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("family = \"tiny\"", "family = \"apollo\""),
    )
    .unwrap();
    let (code, _, stderr) = validate_text(
        &dir,
        &format!("[engine]\nmodel_dir = \"model\"\n{ONE_CAMERA}"),
        &[],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("manifest.toml")
            && stderr.contains("vision.layout: family `apollo` takes layout = \"clips\""),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn validate_refuses_a_model_directory_that_is_missing_or_incomplete() {
    let dir = scratch("validate-model");
    let (code, _, stderr) = validate_text(
        &dir,
        &format!("[engine]\nmodel_dir = \"nowhere\"\n{ONE_CAMERA}"),
        &[],
    );
    assert_eq!(code, Some(2), "{stderr}");
    // Resolved against the file's directory, and named.
    let missing = dir.join("nowhere");
    assert!(
        stderr.contains(&format!(
            "engine.model_dir: {} is not a directory",
            missing.display()
        )),
        "{stderr}"
    );

    // A manifest whose decoder file is gone.
    let model = tiny_copy(&dir);
    std::fs::remove_file(model.join("decoder_model_merged.onnx")).unwrap();
    let in_model = format!("[engine]\nmodel_dir = \"model\"\n{ONE_CAMERA}");
    let (code, _, stderr) = validate_text(&dir, &in_model, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("engine.model_dir: ")
            && stderr.contains("decoder_model_merged.onnx (named by decoder in ")
            && stderr.contains("is missing"),
        "{stderr}"
    );

    // A manifest that does not parse.
    std::fs::write(model.join("manifest.toml"), "[text\nhidden_size = 1\n").unwrap();
    let (code, _, stderr) = validate_text(&dir, &in_model, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("engine.model_dir: ") && stderr.contains("manifest.toml"),
        "{stderr}"
    );
}

#[cfg(not(feature = "ort-cuda"))]
#[test]
fn validate_refuses_a_provider_this_binary_was_built_without() {
    let dir = scratch("validate-provider");
    let model = tiny_copy(&dir);
    let (code, _, stderr) = validate_text(
        &dir,
        &format!(
            "[engine]\nmodel_dir = \"{}\"\nprovider = \"cpu\"\ndecoder_provider = \"cuda\"\n{ONE_CAMERA}",
            model.display()
        ),
        &[],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "engine.decoder_provider: `cuda` is not compiled into this binary (it has: cpu)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("engine.provider:"), "{stderr}");
}

#[test]
fn validate_refuses_mqtt_tls_files_that_cannot_be_used() {
    let dir = scratch("validate-tls");
    let not_pem = dir.join("ca.pem");
    std::fs::write(&not_pem, "this is not a certificate\n").unwrap();
    let config = format!(
        "[engine]\nenabled = false\n[mqtt]\nbroker = \"mqtts://127.0.0.1:8883\"\nca_file = \"ca.pem\"\n{ONE_CAMERA}"
    );
    let (code, _, stderr) = validate_text(&dir, &config, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "mqtt.ca_file: {}: no PEM certificate in the file",
            not_pem.display()
        )),
        "{stderr}"
    );
    // A directory is no file.
    std::fs::remove_file(&not_pem).unwrap();
    std::fs::create_dir(&not_pem).unwrap();
    let (code, _, stderr) = validate_text(&dir, &config, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("mqtt.ca_file: "), "{stderr}");
}

#[test]
fn validate_deep_loads_and_runs_the_engines() {
    let dir = scratch("validate-deep");
    let model = tiny_copy(&dir);
    let config = format!(
        "[engine]\nmodel_dir = \"{}\"\n{ONE_CAMERA}",
        model.display()
    );
    let (code, stdout, stderr) = validate_text(&dir, &config, &["--deep"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("engines: loaded and ran once each"),
        "{stdout}"
    );

    // A corrupt decoder passes the cheap checks (the file is there) but not the deep one.
    let decoder = model.join("decoder_model_merged.onnx");
    let bytes = std::fs::read(&decoder).unwrap();
    std::fs::write(&decoder, &bytes[..bytes.len() / 2]).unwrap();
    let (code, stdout, stderr) = validate_text(&dir, &config, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.contains("engines: loaded"), "{stdout}");
    let (code, _, stderr) = validate_text(&dir, &config, &["--deep"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("engine.model_dir: the engines do not load or run: ")
            && stderr.contains("decoder_model_merged.onnx"),
        "{stderr}"
    );
}

/// `edgevlm validate` on `toml` written as `edgevlm.toml` in a fresh directory with `files` beside
/// it: the exit code, stdout and stderr.
fn validate_in_dir(
    name: &str,
    toml: &str,
    files: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let dir = std::env::temp_dir().join(format!("edgevlm-tpl-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (file, text) in files {
        std::fs::write(dir.join(file), text).unwrap();
    }
    let result = validate_text(&dir, toml, &[]);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

const NO_MODEL: &str = "[engine]\nenabled = false\n";

#[test]
fn validate_refuses_a_template_whose_elements_are_not_installed_here() {
    gst::init().unwrap();
    if gst::ElementFactory::find("nvh264dec").is_some() {
        eprintln!("skipped: this machine has nvh264dec");
        return;
    }
    let toml = format!(
        "{NO_MODEL}[[cameras]]\nid = \"gpu\"\nuri = \"rtsp://10.0.0.31/h264\"\npipeline = \"rtsp-nvdec\"\n\
         [[cameras]]\nid = \"off\"\nuri = \"rtsp://10.0.0.32/h264\"\npipeline = \"rtsp-nvdec\"\n\
         enabled = false\n\
         [[cameras]]\nid = \"cpu\"\nuri = \"rtsp://10.0.0.33/h264\"\n"
    );
    let (code, stdout, stderr) = validate_in_dir("nvdec", &toml, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    // One line for the enabled camera; the disabled one and the software one pass.
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].starts_with(
            "cameras[0].pipeline: template `rtsp-nvdec` needs the GStreamer elements `nvh264dec`"
        ) && lines[0].contains(
            "which are not installed on this machine; provided by an NVIDIA GPU driver and \
             gstreamer1.0-plugins-bad built with nvcodec"
        ),
        "{stderr}"
    );
    assert!(lines[1].ends_with("1 problem(s)"), "{stderr}");
}

#[test]
fn a_pipeline_file_is_read_beside_the_config_and_checked_with_its_file_and_line() {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/custom.pipeline"),
    )
    .unwrap();
    // The shipped example passes, relative to the configuration's directory.
    let toml = format!(
        "{NO_MODEL}[[cameras]]\nid = \"own\"\nuri = \"rtsp://10.0.0.31/h265\"\n\
         pipeline_file = \"mine.pipeline\"\n"
    );
    let (code, stdout, stderr) =
        validate_in_dir("good", &toml, &[("mine.pipeline", example.as_str())]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("valid: 1 camera: own"), "{stdout}");

    // An element no plugin provides: refused by validate with the file and its line.
    let unknown = example.replace("avdec_h265", "nosuchdec265");
    let (code, _, stderr) =
        validate_in_dir("unknown", &toml, &[("mine.pipeline", unknown.as_str())]);
    assert_eq!(code, Some(2), "{stderr}");
    let line = example
        .lines()
        .position(|l| l.contains("avdec_h265"))
        .unwrap()
        + 1;
    let want = format!(
        "cameras[0].pipeline_file: {}:{line}: element `nosuchdec265` is not installed on this \
         machine; no installed GStreamer plugin has an element of that name",
        std::env::temp_dir()
            .join(format!("edgevlm-tpl-{}-unknown", std::process::id()))
            .join("mine.pipeline")
            .display()
    );
    assert!(
        stderr.lines().any(|l| l.starts_with(&want)),
        "missing `{want}` in:\n{stderr}"
    );
    assert!(stderr.trim_end().ends_with("1 problem(s)"), "{stderr}");
}

#[test]
fn a_pipeline_file_that_breaks_the_contract_is_refused_with_each_line() {
    let bad = "# mine: spliced\n# source: rtsp\n# delivers: video/x-raw,format=RGB\n\
               rtspsrc name=src location={uri} ! decodebin\n\
               ! videorate name=rate ! videoconvertscale name=scale\n\
               ! capsfilter name=caps ! fakesink name=sink\n";
    let toml = format!(
        "{NO_MODEL}[[cameras]]\nid = \"a\"\nuri = \"rtsp://10.0.0.31/x\"\n\
         pipeline_file = \"bad.pipeline\"\n\
         [[cameras]]\nid = \"b\"\nuri = \"/clips/a.mp4\"\npipeline_file = \"rtsp.pipeline\"\n\
         [[cameras]]\nid = \"c\"\nuri = \"rtsp://10.0.0.32/x\"\npipeline = \"rtsp\"\n\
         pipeline_file = \"rtsp.pipeline\"\n\
         [[cameras]]\nid = \"d\"\nuri = \"rtsp://10.0.0.33/x\"\npipeline_file = \"none.pipeline\"\n"
    );
    let rtsp = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/rtsp.pipeline"),
    )
    .unwrap();
    let (code, stdout, stderr) = validate_in_dir(
        "contract",
        &toml,
        &[("bad.pipeline", bad), ("rtsp.pipeline", rtsp.as_str())],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty());
    let dir = std::env::temp_dir().join(format!("edgevlm-tpl-{}-contract", std::process::id()));
    let at = |file: &str| dir.join(file).display().to_string();
    let expected = [
        format!(
            "cameras[0].pipeline_file: {}:4: `location={{uri}}` is a placeholder",
            at("bad.pipeline")
        ),
        format!(
            "cameras[0].pipeline_file: {}:6: element `sink` is `fakesink`, but it must be \
             `appsink`",
            at("bad.pipeline")
        ),
        format!(
            "cameras[1].pipeline_file: {}:2: `# source: rtsp`, but the camera's uri \
             file:///clips/a.mp4 is of kind `file`",
            at("rtsp.pipeline")
        ),
        "cameras[2].pipeline_file: give `pipeline` (a built-in template, here `rtsp`) or \
         `pipeline_file` (your own), not both"
            .to_string(),
        format!(
            "cameras[3].pipeline_file: cannot read {}: ",
            at("none.pipeline")
        ),
    ];
    for e in &expected {
        assert!(
            stderr.lines().any(|l| l.starts_with(e.as_str())),
            "missing `{e}` in:\n{stderr}"
        );
    }
    assert!(stderr.trim_end().ends_with("5 problem(s)"), "{stderr}");
}
