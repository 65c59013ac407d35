//! systemd integration: the unit file verifies, and `run` speaks the notify protocol.

mod common;

use common::edgevlm;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

/// Every notify message sent to a socket, read on a thread of its own.
struct Notices(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Notices {
    fn listen(path: &std::path::Path) -> Notices {
        let sock = UnixDatagram::bind(path).unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = sock.recv(&mut buf) {
                let m = String::from_utf8_lossy(&buf[..n]).into_owned();
                into.lock().unwrap().push(m);
            }
        });
        Notices(seen)
    }

    fn messages(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
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

    fn wait_with_output(mut self) -> std::process::Output {
        self.0.take().unwrap().wait_with_output().unwrap()
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
        "ExecStartPre=/usr/local/bin/edgevlm validate",
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
        .replace("/usr/local/bin/edgevlm", env!("CARGO_BIN_EXE_edgevlm"))
        .replace("/etc/edgevlm/credentials/front-door.pw", "/etc/hostname");
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
    let child = Guard::run(&cfg, Some(&sock_path));
    std::thread::sleep(Duration::from_secs(4));
    child.signal(libc::SIGTERM);
    let out = child.wait_with_output();
    std::thread::sleep(Duration::from_millis(200));
    let messages = notices.messages();
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
    let pings = messages.iter().filter(|m| m.contains("WATCHDOG=1")).count();
    // WatchdogSec=1s means a ping every 0.5 s: at least 5 in 4 s.
    assert!(pings >= 5, "{pings} watchdog pings: {messages:?}");
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
    let broker = format!("mqtt://127.0.0.1:{port}");
    let asked = ask_until_it_reaches_the_runtime(&broker);
    let err = String::from_utf8_lossy(&asked.stderr);
    assert_eq!(asked.status.code(), Some(1), "{err}");
    assert!(
        err.contains("busy") && err.contains("the model is still loading"),
        "{err}"
    );
    // A reload during the load waits for it; SIGHUP's default action would kill the process.
    child.signal(libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.running(), "SIGHUP killed the run");
    let status = edgevlm()
        .args(["status", "-c", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("model: loading"),
        "{status:?}"
    );

    child.signal(libc::SIGTERM);
    let stopped = Instant::now();
    let out = child.wait_with_output();
    let waited = stopped.elapsed();
    std::thread::sleep(Duration::from_millis(300));
    let messages = notices.messages();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    // The load is still blocked on the FIFO: the exit must not wait for it.
    assert!(waited < Duration::from_secs(10), "stopping took {waited:?}");
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
    let child = Guard::run(&cfg, None);
    let text = wait_for_camera_status(&cfg, || {});
    assert!(text.contains("model: loading"), "{text}");
    // The load finishes 1.5 s after the question was asked.
    let real = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
    let finish = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
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
    let broker = format!("mqtt://127.0.0.1:{port}");
    let asked = ask_until_it_reaches_the_runtime(&broker);
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
             [[cameras]]\nid = \"porch\"\nuri = \"test://ball\"\n",
            model.display()
        ),
    )
    .unwrap();
    (cfg, port, manifest)
}

/// `edgevlm status` until it lists the camera (20 s at most), calling `between` each round.
fn wait_for_camera_status(cfg: &std::path::Path, mut between: impl FnMut()) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut text = String::new();
    while Instant::now() < deadline {
        between();
        let status = edgevlm()
            .args(["status", "-c", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        text = String::from_utf8_lossy(&status.stdout).into_owned();
        if text.lines().any(|l| l.starts_with("porch")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    text
}

/// `edgevlm ask porch …`, again while it reaches nobody (exit 3: the runtime has not subscribed
/// yet), for 30 s at most.
fn ask_until_it_reaches_the_runtime(broker: &str) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = edgevlm()
            .args([
                "ask",
                "porch",
                "What moves?",
                "--timeout-secs",
                "15",
                "--broker",
                broker,
            ])
            .output()
            .unwrap();
        if out.status.code() != Some(3) || Instant::now() > deadline {
            return out;
        }
    }
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
    // Several status lines (each a log write) fail meanwhile.
    std::thread::sleep(Duration::from_secs(1));
    assert!(child.running(), "the run died with its stderr");
    let status = edgevlm()
        .args(["status", "--json", "-c", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(
        doc["report_age_secs"].as_f64().unwrap() < 1.0,
        "the main loop stopped reporting: {doc}"
    );
    child.signal(libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!child.running(), "no exit after SIGTERM");
    assert!(child.wait_with_output().status.success());
    let _ = std::fs::remove_dir_all(&dir);
}
