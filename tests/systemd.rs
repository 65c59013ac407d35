//! systemd integration: the unit file verifies, and `run` speaks the notify protocol.

mod common;

use common::edgevlm;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

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
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();

    // Its own configuration: the demo's metrics port and socket may be in use by a running demo.
    let cfg = dir.join("edgevlm.toml");
    std::fs::write(
        &cfg,
        "[mqtt]\nenabled = false\n\n[runtime]\nstate_dir = \"state\"\n\n[[cameras]]\nid = \"demo\"\nuri = \"test://ball\"\n",
    )
    .unwrap();
    let child = edgevlm()
        .args(["run", "-c", cfg.to_str().unwrap()])
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "1000000")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut messages: Vec<String> = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(4);
    while Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf) {
            messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && !messages.iter().any(|m| m.contains("STOPPING=1")) {
        if let Ok(n) = sock.recv(&mut buf) {
            messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let first = messages.first().cloned().unwrap_or_default();
    assert!(
        first.contains("READY=1"),
        "first message was {first:?}: {messages:?}"
    );
    assert!(first.contains("STATUS=1 camera"), "{first:?}");
    let pings = messages.iter().filter(|m| m.contains("WATCHDOG=1")).count();
    // WatchdogSec=1s means a ping every 0.5 s: at least 5 in 4 s.
    assert!(pings >= 5, "{pings} watchdog pings: {messages:?}");
    assert!(
        messages.last().is_some_and(|m| m.contains("STOPPING=1")),
        "{messages:?}"
    );
}
