//! The runtime as a library, in process: start a whole configuration (cameras, the tiny model,
//! watches, the control socket), reload it, check its health, shut it down.

use edgevlm::config::Config;
use edgevlm::runtime::{ModelStatus, Runtime, RuntimeOptions};
use edgevlm::supervisor::CameraState;
use edgevlm::telemetry::control;
use std::path::Path;
use std::time::Duration;
use tokio::sync::watch;

/// A failure bound only: every wait below ends as soon as its signal comes.
const BOUND: Duration = Duration::from_secs(60);

fn config(dir: &Path, cameras: &str) -> Config {
    let text = format!(
        "[runtime]\nstatus_interval_secs = 0.2\nstate_dir = \"{dir}/state\"\n\
         [telemetry]\ncontrol_socket = \"{dir}/edgevlm.sock\"\n\
         [engine]\nmodel_dir = \"{model}\"\nthreads = 1\n\
         [mqtt]\nenabled = false\n{cameras}",
        dir = dir.display(),
        model = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("engines/tiny/model")
            .display(),
    );
    Config::parse(&text, None).unwrap_or_else(|e| panic!("{e}"))
}

fn camera(id: &str, pattern: &str) -> String {
    format!(
        "[[cameras]]\nid = \"{id}\"\nuri = \"test://{pattern}\"\nsample_fps = 2\nwindow_secs = 10\n\
         narrate = [\"interval\"]\nnarrate_interval_secs = 1\n"
    )
}

/// Waits until the reports satisfy `cond` (each new report is a positive signal).
async fn reports_until(
    reports: &mut watch::Receiver<control::Snapshot>,
    what: &str,
    cond: impl Fn(&control::Snapshot) -> bool,
) -> control::Snapshot {
    let found = tokio::time::timeout(BOUND, reports.wait_for(|s| cond(s)))
        .await
        .map(|r| r.map(|s| s.clone()));
    match found {
        Ok(Ok(s)) => s,
        _ => panic!(
            "no report with {what} within {BOUND:?}: {:?}",
            reports.borrow().cameras
        ),
    }
}

/// The model's state once its load has ended (ready or unavailable).
async fn model_settled(rt: &edgevlm::runtime::Running) -> ModelStatus {
    let mut model = rt.model();
    tokio::time::timeout(BOUND, model.wait_for(|m| *m != ModelStatus::Loading))
        .await
        .expect("the model load ends")
        .expect("the runtime is alive")
        .clone()
}

fn running(s: &control::Snapshot, id: &str) -> bool {
    s.cameras
        .iter()
        .any(|c| c.camera == id && c.state == CameraState::Running && c.memory.is_some())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_runtime_starts_narrates_reloads_and_shuts_down_in_process() {
    let dir = tempdir();
    let socket = dir.join("edgevlm.sock");
    let rt = Runtime::start(
        config(&dir, &camera("a", "ball")),
        RuntimeOptions::default(),
    )
    .await
    .expect("the runtime starts");
    let mut narrations = rt.outputs().narrations.subscribe();
    assert!(
        socket.exists(),
        "the control socket is there from the start"
    );

    let status = model_settled(&rt).await;
    assert_eq!(status, ModelStatus::Ready);
    let mut reports = rt.reports();
    let snap = reports_until(&mut reports, "camera a running with a memory", |s| {
        running(s, "a")
    })
    .await;
    assert!(snap.model.starts_with("ready (tiny"), "{}", snap.model);

    // The watch stage is wired: the camera narrates on its interval.
    let n = tokio::time::timeout(BOUND, narrations.recv())
        .await
        .expect("a narration within the bound")
        .expect("the narration channel is open");
    assert_eq!(n.camera, "a");
    assert!(n.frames >= 1 && n.generated_tokens >= 1, "{n:?}");
    rt.healthy().await.expect("healthy");

    // The status carries the live cache's bytes and the memory plan's bound on them.
    let cfg = config(&dir, &camera("a", "ball"));
    let plan = edgevlm::memory::plan::Plan::for_config(&cfg, &cfg.engine.model_dir, None, None)
        .expect("a plan of the tiny model");
    let planned = plan.camera("a").unwrap().cache_bytes;
    let snap = reports_until(&mut reports, "camera a's cache in its report", |s| {
        s.cameras
            .iter()
            .any(|c| c.camera == "a" && c.memory.is_some_and(|m| m.cache_bytes > 0))
    })
    .await;
    let m = snap.cameras[0].memory.unwrap();
    assert_eq!(m.cache_planned_bytes, planned);
    assert!(m.cache_bytes <= planned, "{m:?}");

    // Reload: b is added, a is untouched (same window: its frame numbering goes on).
    let before = reports.borrow().cameras[0].clone();
    let summary = rt
        .reload(config(&dir, &(camera("a", "ball") + &camera("b", "smpte"))))
        .await
        .expect("the runtime takes the reload");
    assert_eq!(summary.added, vec!["b"]);
    assert_eq!(summary.unchanged, vec!["a"]);
    assert!(summary.removed.is_empty() && summary.restarted.is_empty());
    let snap = reports_until(&mut reports, "camera b running with a memory", |s| {
        running(s, "b")
    })
    .await;
    let a = snap.cameras.iter().find(|c| c.camera == "a").unwrap();
    assert_eq!(a.counters.restarts, 0);
    // The plan was made again for the reloaded configuration: b has its bound too.
    let b = snap.cameras.iter().find(|c| c.camera == "b").unwrap();
    assert_eq!(
        b.memory.unwrap().cache_planned_bytes,
        planned,
        "same shape as a"
    );
    assert!(
        a.counters.sampled >= before.counters.sampled,
        "camera a kept counting: {a:?} after {before:?}"
    );

    // Reload: a is removed, b changes (restarted).
    let summary = rt
        .reload(config(&dir, &camera("b", "snow")))
        .await
        .expect("the runtime takes the reload");
    assert_eq!(summary.removed, vec!["a"]);
    assert_eq!(summary.restarted, vec!["b"]);
    let snap = reports_until(&mut reports, "only camera b", |s| {
        s.cameras.len() == 1 && running(s, "b")
    })
    .await;
    assert_eq!(snap.cameras[0].source, "test://snow");
    rt.healthy().await.expect("healthy after two reloads");

    rt.shutdown().await;
    assert!(!socket.exists(), "shutdown removes the control socket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_model_the_cameras_run_and_the_model_is_reported_unavailable() {
    let dir = tempdir();
    let mut cfg = config(&dir, &camera("a", "ball"));
    cfg.engine.model_dir = dir.join("no-such-model");
    let rt = Runtime::start(cfg, RuntimeOptions::default())
        .await
        .expect("the runtime starts without its model");
    let status = model_settled(&rt).await;
    let ModelStatus::Unavailable(why) = status else {
        panic!("expected unavailable, got {status:?}");
    };
    assert!(why.contains("no-such-model"), "{why}");
    let mut reports = rt.reports();
    let snap = reports_until(&mut reports, "camera a running", |s| {
        s.cameras
            .iter()
            .any(|c| c.camera == "a" && c.state == CameraState::Running)
    })
    .await;
    assert!(snap.model.starts_with("unavailable:"), "{}", snap.model);
    rt.healthy().await.expect("healthy without a model");
    rt.shutdown().await;
}

fn tempdir() -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("edgevlm-runtime-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
