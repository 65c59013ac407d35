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
    assert!(wait_until(Duration::from_secs(15), || ready(&sup)).await);
    let keep_window = sup.camera("keep").unwrap().window.clone();
    let keep_seq = keep_window.latest().unwrap().seq;

    let summary = sup
        .reload(
            &config(
                "[[cameras]]\nid = \"keep\"\nuri = \"test://ball\"\nsample_fps = 4\n\n\
                 [[cameras]]\nid = \"change\"\nuri = \"test://smpte\"\nsample_fps = 2\n\n\
                 [[cameras]]\nid = \"new\"\nuri = \"test://checkers-8\"\nsample_fps = 4\n",
            ),
            Duration::from_secs(10),
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
        wait_until(Duration::from_secs(5), || keep.window.latest().unwrap().seq
            > keep_seq + 2)
        .await
    );
    assert_eq!(keep.status().state, CameraState::Running);
    assert_eq!(keep.shared.counters.snapshot().restarts, 0);

    let changed = sup.camera("change").unwrap();
    assert_eq!(changed.config.sample_fps, 2.0);
    assert!(wait_until(Duration::from_secs(10), || ready(&sup)).await);
    sup.shutdown(Duration::from_secs(10)).await;
}

#[test]
fn sighup_with_an_invalid_file_keeps_the_running_configuration() {
    let dir = std::env::temp_dir().join(format!("edgevlm-hup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("edgevlm.toml");
    let good = "[mqtt]\nenabled = false\n\n[runtime]\nstatus_interval_secs = 0.3\n\n[[cameras]]\nid = \"a\"\nuri = \"test://ball\"\nsample_fps = 2\n";
    std::fs::write(&file, good).unwrap();
    let child = edgevlm()
        .args(["run", "-c", file.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let hup = || {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, libc::SIGHUP) };
    };
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(
        &file,
        "[[cameras]]\nid = \"a\"\nuri = \"test://ball\"\nsample_fps = 99\n",
    )
    .unwrap();
    hup();
    std::thread::sleep(Duration::from_secs(1));
    std::fs::write(
        &file,
        format!("{good}\n[[cameras]]\nid = \"b\"\nuri = \"test://smpte\"\n"),
    )
    .unwrap();
    hup();
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
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
