//! Configuration reload: changed cameras restart, the others are not touched; a bad file is refused.

mod common;

use common::{edgevlm, wait_until};
use edgevlm::config::Config;
use edgevlm::supervisor::{CameraState, Supervisor};
use std::sync::Arc;
use std::time::Duration;

fn config(toml: &str) -> Config {
    Config::parse(toml, None).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_starts_stops_and_restarts_only_what_changed() {
    let mut sup = Supervisor::start(&config(
        "[[cameras]]\nid = \"keep\"\nuri = \"test://ball\"\nsample_fps = 4\n\n\
         [[cameras]]\nid = \"change\"\nuri = \"test://smpte\"\nsample_fps = 4\n\n\
         [[cameras]]\nid = \"drop\"\nuri = \"test://snow\"\nsample_fps = 4\n",
    ));
    let ready = |s: &Supervisor| s.cameras().iter().all(|c| c.window.info().frames >= 2);
    assert!(wait_until(Duration::from_secs(60), || ready(&sup)).await);
    let keep_window = sup.camera("keep").unwrap().window.clone();
    let keep_seq = keep_window.latest().unwrap().seq;

    let summary = sup
        .reload(
            &config(
                "[[cameras]]\nid = \"keep\"\nuri = \"test://ball\"\nsample_fps = 4\n\n\
                 [[cameras]]\nid = \"change\"\nuri = \"test://smpte\"\nsample_fps = 2\n\n\
                 [[cameras]]\nid = \"new\"\nuri = \"test://checkers-8\"\nsample_fps = 4\n",
            ),
            // Only bounds a camera that would not stop.
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(summary.unchanged, vec!["keep"]);
    assert_eq!(summary.restarted, vec!["change"]);
    assert_eq!(summary.added, vec!["new"]);
    assert_eq!(summary.removed, vec!["drop"]);
    assert!(sup.camera("drop").is_none());

    // The untouched camera kept its window and its frame numbering: it never stopped.
    let keep = sup.camera("keep").unwrap();
    assert!(Arc::ptr_eq(&keep.window, &keep_window));
    assert!(
        wait_until(Duration::from_secs(30), || keep
            .window
            .latest()
            .unwrap()
            .seq
            > keep_seq + 2)
        .await
    );
    assert_eq!(keep.status().state, CameraState::Running);
    assert_eq!(keep.shared.counters.snapshot().restarts, 0);

    let changed = sup.camera("change").unwrap();
    assert_eq!(changed.config.sample_fps, 2.0);
    assert!(wait_until(Duration::from_secs(60), || ready(&sup)).await);
    sup.shutdown(Duration::from_secs(10)).await;
}

#[test]
fn sighup_with_an_invalid_file_keeps_the_running_configuration() {
    let dir = std::env::temp_dir().join(format!("edgevlm-hup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("edgevlm.toml");
    let good = "[mqtt]\nenabled = false\n\n[runtime]\nstatus_interval_secs = 0.3\n\n[[cameras]]\nid = \"a\"\nuri = \"test://ball\"\nsample_fps = 2\n";
    std::fs::write(&file, good).unwrap();
    let log_path = dir.join("stderr.log");
    let mut child = common::KillOnDrop::new(
        edgevlm()
            .args(["run", "-c", file.to_str().unwrap()])
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let pid = child.id() as i32;
    let hup = || {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, libc::SIGHUP) };
    };
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    // Polls the log until `cond` holds (60 s at most: the bound only limits a failure).
    let wait_log = |what: &str, cond: &dyn Fn(&str) -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !cond(&read_log()) {
            if std::time::Instant::now() >= deadline {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("never logged {what}:\n{}", read_log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // Status lines come from the main loop, which watches SIGHUP before its first one: from
    // then on a SIGHUP cannot kill the run by its default action.
    wait_log("a running", &|l| l.contains("a: running"));
    std::fs::write(
        &file,
        "[[cameras]]\nid = \"a\"\nuri = \"test://ball\"\nsample_fps = 99\n",
    )
    .unwrap();
    hup();
    wait_log("the refusal", &|l| {
        l.contains("the running configuration stays in place")
    });
    std::fs::write(
        &file,
        format!("{good}\n[[cameras]]\nid = \"b\"\nuri = \"test://smpte\"\n"),
    )
    .unwrap();
    hup();
    wait_log("the reload, then b running", &|l| {
        l.split_once("Configuration reloaded")
            .is_some_and(|(_, after)| after.contains("b: running"))
    });
    let status = common::terminate(&mut child, Duration::from_secs(60), read_log);
    // The run has exited: its log is complete.
    let log = read_log();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "{log}");
    assert!(
        log.contains("cameras[0].sample_fps: must be > 0 and <= 30, got 99"),
        "{log}"
    );
    assert!(
        log.contains("the running configuration stays in place"),
        "{log}"
    );
    assert!(log.contains("added=[\"b\"]"), "{log}");
    // Camera a ran throughout: it was never stopped by either reload.
    let a_stops = log.matches("Camera stopped").count();
    assert_eq!(a_stops, 2, "only the final shutdown stops a and b:\n{log}");
    assert!(log.contains("b: running"), "{log}");
}

/// Backoff runs on tokio's clock: under `tokio::time::pause` a camera that keeps failing is
/// retried after delays that add up to minutes of (virtual) time while the test takes seconds, and
/// each delay is at least half its exponential step (equal jitter), so the retries spread out.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn retries_wait_out_the_backoff_on_tokios_clock() {
    let port = common::closed_port();
    let sup = Supervisor::start(&config(&format!(
        "[[cameras]]\nid = \"gone\"\nuri = \"rtsp://127.0.0.1:{port}/cam\"\n\
         retry_initial_secs = 20\nretry_max_secs = 80\nconnect_timeout_secs = 5\n"
    )));
    let cam = sup.camera("gone").unwrap();
    let started = tokio::time::Instant::now();
    // A real-time bound (wait_until's deadline is std time); virtual time runs ahead meanwhile.
    assert!(
        wait_until(Duration::from_secs(60), || cam.status().restarts >= 4).await,
        "restarts: {}",
        cam.status().restarts
    );
    let waited = started.elapsed();
    // Three full delays at least: >= 10 + 20 + 40 s (half of 20, 40, 80 s).
    assert!(
        waited >= Duration::from_secs(70),
        "4 restarts after only {waited:?} of tokio time: the backoff did not wait"
    );
    assert_ne!(cam.status().state, CameraState::Running);
    sup.shutdown(Duration::from_secs(10)).await;
}
