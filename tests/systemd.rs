//! systemd integration: the unit file verifies, and `run` speaks the notify protocol.

mod common;

use common::{edgevlm, metric};
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

/// Every notify message sent to a socket, with its arrival time, read on a thread of its own.
struct Notices {
    path: std::path::PathBuf,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(Instant, String)>>>,
}

impl Notices {
    fn listen(path: &std::path::Path) -> Notices {
        let sock = UnixDatagram::bind(path).unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = sock.recv(&mut buf) {
                let m = String::from_utf8_lossy(&buf[..n]).into_owned();
                into.lock().unwrap().push((Instant::now(), m));
            }
        });
        Notices {
            path: path.to_path_buf(),
            seen,
        }
    }

    fn messages(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(_, m)| m.clone())
            .collect()
    }

    /// Arrival times of the messages containing `what`.
    fn times_of(&self, what: &str) -> Vec<Instant> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, m)| m.contains(what))
            .map(|(t, _)| *t)
            .collect()
    }

    /// Polls until `cond` holds over the messages or `bound` passes; returns whether it held.
    fn wait(&self, bound: Duration, cond: impl Fn(&[String]) -> bool) -> bool {
        let deadline = Instant::now() + bound;
        loop {
            if cond(&self.messages()) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every message the run sent, once it has exited: a marker datagram sent now queues behind
    /// everything it sent (one socket, in order), so once the marker is read, so is all of that.
    fn all_after_exit(&self) -> Vec<String> {
        const FENCE: &str = "TEST-FENCE=1";
        UnixDatagram::unbound()
            .unwrap()
            .send_to(FENCE.as_bytes(), &self.path)
            .unwrap();
        assert!(
            self.wait(Duration::from_secs(30), |m| m.iter().any(|m| m == FENCE)),
            "the marker never came back: {:?}",
            self.messages()
        );
        let mut messages = self.messages();
        let at = messages.iter().position(|m| m == FENCE).unwrap();
        messages.truncate(at);
        messages
    }
}

/// A child that is killed if the test fails before it ends the child itself.
struct Guard(Option<std::process::Child>);

impl Guard {
    /// `edgevlm run -c cfg`, stderr piped, with a notify socket (and a 1 s watchdog) if given.
    fn run(cfg: &std::path::Path, notify: Option<&std::path::Path>) -> Guard {
        let mut cmd = edgevlm();
        cmd.args(["run", "-c", cfg.to_str().unwrap()])
            .stderr(std::process::Stdio::piped());
        if let Some(sock) = notify {
            cmd.env("NOTIFY_SOCKET", sock)
                .env("WATCHDOG_USEC", "1000000");
        }
        Guard(Some(cmd.spawn().unwrap()))
    }

    fn id(&self) -> i32 {
        self.0.as_ref().unwrap().id() as i32
    }

    fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.id(), sig) };
    }

    fn running(&mut self) -> bool {
        self.0.as_mut().unwrap().try_wait().unwrap().is_none()
    }

    /// Waits for the exit (collecting stderr); a run still there after 60 s is killed and the
    /// test fails: the bound only limits a hang.
    fn wait_with_output(mut self) -> std::process::Output {
        let child = self.0.take().unwrap();
        let pid = child.id() as i32;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(out) => out.unwrap(),
            Err(_) => {
                // SAFETY: killing our own child, still unreaped (the thread waits on it).
                unsafe { libc::kill(pid, libc::SIGKILL) };
                let out = rx.recv().unwrap().unwrap();
                panic!(
                    "no exit within 60 s:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("edgevlm-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_unit_file_passes_systemd_analyze_verify() {
    let unit = std::fs::read_to_string("systemd/edgevlm.service").unwrap();
    for required in [
        "Type=notify",
        "WatchdogSec=",
        "ExecStartPre=/usr/bin/edgevlm validate",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "Restart=on-failure",
        "StateDirectory=",
        "CacheDirectory=",
        "LoadCredential=",
    ] {
        assert!(unit.contains(required), "unit lacks {required}");
    }
    assert!(
        !unit.contains("\nPrivateDevices=yes"),
        "PrivateDevices hides the GPUs"
    );
    assert!(
        !unit.contains("\nMemoryDenyWriteExecute=yes"),
        "breaks ORC and CUDA JIT"
    );

    if std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("systemd-analyze not installed: only the text was checked");
        return;
    }
    // verify checks that executables and credential sources exist: point them at real files.
    let dir = tempdir("unit");
    let local = unit
        .replace("/usr/bin/edgevlm", env!("CARGO_BIN_EXE_edgevlm"))
        .replace("/etc/edgevlm/credentials", dir.to_str().unwrap());
    let path = dir.join("edgevlm.service");
    std::fs::write(&path, local).unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && msg.trim().is_empty(), "{msg}");
}

#[test]
fn run_sends_ready_then_watchdog_pings_then_stopping() {
    let dir = tempdir("notify");
    let sock_path = dir.join("notify.sock");
    let _ = std::fs::remove_file(&sock_path);
    let notices = Notices::listen(&sock_path);

    // Its own configuration: the demo's metrics port and socket may be in use by a running demo.
    let cfg = dir.join("edgevlm.toml");
    std::fs::write(
        &cfg,
        "[mqtt]\nenabled = false\n\n[runtime]\nstate_dir = \"state\"\n\n[[cameras]]\nid = \"demo\"\nuri = \"test://ball\"\n",
    )
    .unwrap();
    let mut child = Guard::run(&cfg, Some(&sock_path));
    // READY once the model has loaded (however long that takes here), then pings.
    assert!(
        notices.wait(Duration::from_secs(60), |m| m
            .iter()
            .any(|m| m.contains("READY=1"))),
        "no READY=1 (running: {}): {:?}",
        child.running(),
        notices.messages()
    );
    // WatchdogSec=1s means a ping every 0.5 s.
    assert!(
        notices.wait(Duration::from_secs(30), |m| m
            .iter()
            .filter(|m| m.contains("WATCHDOG=1"))
            .count()
            >= 6),
        "watchdog pings: {:?}",
        notices.messages()
    );
    child.signal(libc::SIGTERM);
    let out = child.wait_with_output();
    let messages = notices.all_after_exit();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // While the model loads: a status, no READY, no pings.
    let ready_at = messages
        .iter()
        .position(|m| m.contains("READY=1"))
        .unwrap_or_else(|| panic!("no READY=1: {messages:?}"));
    assert!(
        messages[..ready_at]
            .iter()
            .all(|m| m.starts_with("STATUS=loading the model; 1 camera")),
        "{messages:?}"
    );
    assert!(
        messages[ready_at].contains("STATUS=1 camera"),
        "{messages:?}"
    );
    // Pings come at half the watchdog period: most gaps between them are well under 1 s (a
    // slow machine may delay a few, not most; pings every WatchdogSec would give gaps of 1 s).
    let pings = notices.times_of("WATCHDOG=1");
    let mut gaps: Vec<Duration> = pings.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort();
    assert!(
        gaps[gaps.len() / 2] < Duration::from_millis(850),
        "gaps between watchdog pings: {gaps:?}"
    );
    assert!(
        messages.last().is_some_and(|m| m.contains("STOPPING=1")),
        "{messages:?}"
    );
}

#[test]
fn while_the_model_loads_status_and_questions_answer_and_a_stop_is_clean() {
    let dir = tempdir("loading");
    let sock_path = dir.join("notify.sock");
    let _ = std::fs::remove_file(&sock_path);
    // Drained all along, as systemd does: a full socket would block the sender.
    let notices = Notices::listen(&sock_path);
    // A model whose manifest nobody writes: loading blocks, like a first TensorRT build.
    let (cfg, port, _) = slow_model_config(&dir);
    let mut child = Guard::run(&cfg, Some(&sock_path));
    let text = wait_for_camera_status(&cfg, || {});
    assert!(text.contains("model: loading"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("porch") && l.contains("running")),
        "the camera runs while the model loads: {text}"
    );
    // A question waits for the load a while (10 s), then gets `busy` rather than waiting minutes.
    let asked = ask_once_subscribed(port);
    let err = String::from_utf8_lossy(&asked.stderr);
    assert_eq!(asked.status.code(), Some(1), "{err}");
    assert!(
        err.contains("busy") && err.contains("the model is still loading"),
        "{err}"
    );
    // A reload during the load waits for it; SIGHUP's default action would kill the process.
    child.signal(libc::SIGHUP);
    // The run still answers after the SIGHUP (no reload happens while the model loads)...
    let status = edgevlm()
        .args(["status", "-c", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("model: loading"),
        "{status:?}"
    );
    assert!(child.running(), "SIGHUP killed the run");

    // ...and the SIGHUP, pending before the SIGTERM, is taken first (Linux delivers pending
    // signals lowest number first, and the run executes long after it): had it been fatal, the
    // exit would be by SIGHUP, not the clean exit checked below.
    child.signal(libc::SIGTERM);
    // The load is still blocked on the FIFO, forever: the exit must not wait for it (the wait is
    // bounded, so a run that waited would fail the test instead of hanging it).
    let out = child.wait_with_output();
    let messages = notices.all_after_exit();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{log}", out.status);
    assert!(log.contains("before the model finished loading"), "{log}");
    assert!(
        !messages
            .iter()
            .any(|m| m.contains("READY=1") || m.contains("WATCHDOG=1")),
        "{messages:?}"
    );
    assert!(
        messages.last().is_some_and(|m| m.contains("STOPPING=1")),
        "{messages:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_question_asked_while_the_model_loads_is_answered_once_it_has_loaded() {
    let dir = tempdir("held");
    let (cfg, port, manifest) = slow_model_config(&dir);
    let metrics_port = metrics_port(&cfg);
    let child = Guard::run(&cfg, None);
    let text = wait_for_camera_status(&cfg, || {});
    assert!(text.contains("model: loading"), "{text}");
    // The load finishes once the runtime has taken the question (its counter of valid
    // questions, on /metrics, which answers while the model loads): it is asked while the model
    // loads, however slowly this machine gets there.
    let real = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
    let finish = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        while metric(metrics_port, "edgevlm_mqtt_queries_accepted_total").unwrap_or(0.0) < 1.0 {
            assert!(
                Instant::now() < deadline,
                "the runtime never took the question"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        use std::io::Write;
        let text = std::fs::read(real.join("manifest.toml")).unwrap();
        // The loader reads the manifest more than once: the FIFO it waits on gets the text, and
        // a regular file takes the FIFO's place for the reads that follow.
        let mut fifo = std::fs::OpenOptions::new()
            .write(true)
            .open(&manifest)
            .unwrap();
        let file = manifest.with_extension("tmp");
        std::fs::write(&file, &text).unwrap();
        std::fs::rename(&file, &manifest).unwrap();
        fifo.write_all(&text).unwrap();
    });
    let asked = ask_once_subscribed(port);
    finish.join().unwrap();
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        asked.status.success(),
        "{}",
        String::from_utf8_lossy(&asked.stderr)
    );
    assert!(!String::from_utf8_lossy(&asked.stdout).trim().is_empty());
}

/// A configuration whose model directory is the tiny model with a FIFO for its manifest: the
/// load blocks until the test writes the manifest into it. Returns (config, MQTT port, FIFO).
fn slow_model_config(dir: &std::path::Path) -> (std::path::PathBuf, u16, std::path::PathBuf) {
    let real = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
    let model = dir.join("model");
    let _ = std::fs::remove_dir_all(&model);
    std::fs::create_dir_all(&model).unwrap();
    for entry in std::fs::read_dir(&real).unwrap() {
        let name = entry.unwrap().file_name();
        if name != "manifest.toml" {
            std::os::unix::fs::symlink(real.join(&name), model.join(&name)).unwrap();
        }
    }
    let manifest = model.join("manifest.toml");
    let c = std::ffi::CString::new(manifest.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let port = common::mqtt::free_port();
    let cfg = dir.join("edgevlm.toml");
    std::fs::write(
        &cfg,
        format!(
            "[mqtt]\nlisten = \"127.0.0.1:{port}\"\n\n[engine]\nmodel_dir = \"{}\"\n\n\
             [runtime]\nstate_dir = \"state\"\nstatus_interval_secs = 0.3\n\n\
             [telemetry]\nmetrics_listen = \"127.0.0.1:{}\"\n\n\
             [[cameras]]\nid = \"porch\"\nuri = \"test://ball\"\n",
            model.display(),
            common::closed_port()
        ),
    )
    .unwrap();
    (cfg, port, manifest)
}

/// The metrics port written into a configuration by [`slow_model_config`].
fn metrics_port(cfg: &std::path::Path) -> u16 {
    let text = std::fs::read_to_string(cfg).unwrap();
    let (_, rest) = text.split_once("metrics_listen = \"127.0.0.1:").unwrap();
    rest.split('"').next().unwrap().parse().unwrap()
}

/// `edgevlm status` until it shows camera `porch` running (60 s at most; the last answer
/// otherwise), calling `between` each round.
fn wait_for_camera_status(cfg: &std::path::Path, mut between: impl FnMut()) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut text = String::new();
    while Instant::now() < deadline {
        between();
        let status = edgevlm()
            .args(["status", "-c", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        text = String::from_utf8_lossy(&status.stdout).into_owned();
        // The first report comes at once (the camera starting); wait for it to run.
        if text
            .lines()
            .any(|l| l.starts_with("porch") && l.contains("running"))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    text
}

/// `edgevlm ask porch …`, once the runtime has subscribed to questions: its retained `online`
/// follows that subscription on its connection, so a question sent after it reaches the runtime.
fn ask_once_subscribed(port: u16) -> std::process::Output {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let w = common::mqtt::Subscriber::start(port, &["edgevlm/available"]).await;
        assert!(
            w.wait(Duration::from_secs(60), |m| m
                .iter()
                .any(|m| m.text == "online"))
                .await,
            "the runtime never came online: {:?}",
            w.messages()
        );
    });
    edgevlm()
        .args(["ask", "porch", "What moves?", "--broker"])
        .arg(format!("mqtt://127.0.0.1:{port}"))
        // Long enough for a held question to be answered, or refused `busy` (after 10 s).
        .args(["--timeout-secs", "60"])
        .output()
        .unwrap()
}

#[test]
fn a_broken_stderr_loses_log_lines_not_the_run() {
    // journald restarting, or a log pipe whose reader died: writes to stderr fail with EPIPE.
    let dir = tempdir("stderr");
    let cfg = dir.join("edgevlm.toml");
    std::fs::write(
        &cfg,
        "[mqtt]\nenabled = false\n\n[engine]\nenabled = false\n\n\
         [runtime]\nstate_dir = \"state\"\nstatus_interval_secs = 0.2\n\n\
         [[cameras]]\nid = \"porch\"\nuri = \"test://ball\"\n",
    )
    .unwrap();
    let mut child = Guard::run(&cfg, None);
    let text = wait_for_camera_status(&cfg, || {});
    assert!(text.lines().any(|l| l.starts_with("porch")), "{text}");
    drop(child.0.as_mut().unwrap().stderr.take());
    // When the newest report was taken, on the control socket's clock (uptime minus its age):
    // every report is preceded by its status lines, each a log write that now fails.
    let report_taken = || {
        let status = edgevlm()
            .args(["status", "--json", "-c", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&status.stdout).ok()?;
        Some(doc["uptime_secs"].as_f64()? - doc["report_age_secs"].as_f64()?)
    };
    let dropped_at = report_taken().expect("status answers");
    // Reports keep coming after the pipe broke: ten of them (0.2 s apart) is ten status lines
    // and more lost to EPIPE, with the main loop still going.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = dropped_at;
    while last < dropped_at + 2.0 {
        assert!(child.running(), "the run died with its stderr");
        assert!(
            Instant::now() < deadline,
            "the main loop stopped reporting: reports at {dropped_at} s, then {last} s"
        );
        std::thread::sleep(Duration::from_millis(100));
        last = report_taken().unwrap_or(last);
    }
    assert!(child.running(), "the run died with its stderr");
    child.signal(libc::SIGTERM);
    assert!(child.wait_with_output().status.success());
    let _ = std::fs::remove_dir_all(&dir);
}
