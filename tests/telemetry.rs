//! Telemetry of a running instance: the Prometheus endpoint and `edgevlm status`.

mod common;
mod engine_common;

use common::{closed_port, edgevlm};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn metric(page: &str, name: &str) -> f64 {
    try_metric(page, name).unwrap_or_else(|| panic!("{name} missing from\n{page}"))
}

fn try_metric(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The page, or `None` while nothing answers on the port.
fn try_get(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// Polls `fetch` every 100 ms until `cond` holds over what it returns (60 s at most: the bound
/// only limits a failure); returns the last value and whether it held.
fn poll<T: Default>(mut fetch: impl FnMut() -> Option<T>, cond: impl Fn(&T) -> bool) -> (T, bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = T::default();
    loop {
        if let Some(v) = fetch() {
            if cond(&v) {
                return (v, true);
            }
            last = v;
        }
        if Instant::now() >= deadline {
            return (last, false);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn metrics_and_status_describe_the_running_cameras() {
    let dir = std::env::temp_dir().join(format!("edgevlm-tel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = closed_port();
    let cfg = dir.join("edgevlm.toml");
    std::fs::write(
        &cfg,
        format!(
            "[mqtt]\nenabled = false\n\n[runtime]\nstatus_interval_secs = 0.5\nstate_dir = \"state\"\n\n\
             [engine]\nmodel_dir = \"{}\"\n\n\
             [telemetry]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
             [[cameras]]\nid = \"yard\"\nuri = \"test://ball\"\nsample_fps = 4\n\n\
             [[cameras]]\nid = \"gone\"\nuri = \"rtsp://127.0.0.1:{}/x\"\nretry_initial_secs = 0.2\n",
            common::TINY_MODEL,
            closed_port()
        ),
    )
    .unwrap();
    let child = common::KillOnDrop::new(
        edgevlm()
            .args(["run", "-c", cfg.to_str().unwrap()])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // The endpoint answers once the run has bound it.
    let (first, up) = poll(|| try_get(port, "/metrics"), |_| true);
    assert!(up, "nothing answers on the metrics port");
    assert!(first.starts_with("HTTP/1.1 200 OK"), "{first}");
    assert!(first.contains("text/plain; version=0.0.4"), "{first}");
    let sampled = |p: &str| try_metric(p, "edgevlm_camera_frames_sampled_total{camera=\"yard\"}");
    let sampled_first = sampled(&first).unwrap_or(0.0);
    // Everything the page must show, waited for together: the counter moves, the dead camera
    // was retried, and the model runs (the yard's frames are in its memory, through the vision
    // encoder). A frame is in memory before it is counted encoded or reused: the count follows
    // its prefill into the live cache (src/watch/camera.rs, `chunk`), so a page in between shows
    // memory frames and no count yet, and the count is waited for as well.
    let yard_of = |p: &str, name: &str| try_metric(p, &format!("{name}{{camera=\"yard\"}}"));
    let counted = |p: &str| {
        yard_of(p, "edgevlm_memory_frames_encoded_total").unwrap_or(0.0)
            + yard_of(p, "edgevlm_memory_frames_reused_total").unwrap_or(0.0)
    };
    let (second, held) = poll(
        || try_get(port, "/metrics"),
        |p| {
            sampled(p).is_some_and(|n| n > sampled_first)
                && try_metric(p, "edgevlm_camera_up{camera=\"yard\"}") == Some(1.0)
                && try_metric(p, "edgevlm_camera_restarts_total{camera=\"gone\"}")
                    .is_some_and(|n| n >= 1.0)
                && yard_of(p, "edgevlm_memory_frames").is_some_and(|n| n >= 1.0)
                && counted(p) >= 1.0
                && try_metric(p, "edgevlm_engine_runs_total{stage=\"vision\"}")
                    .is_some_and(|n| n >= 1.0)
        },
    );
    assert!(
        held,
        "the page never showed the running cameras and model:\n{second}"
    );
    assert!(sampled(&second) > sampled(&first), "the counter must move");
    assert_eq!(metric(&second, "edgevlm_camera_up{camera=\"yard\"}"), 1.0);
    assert_eq!(metric(&second, "edgevlm_camera_up{camera=\"gone\"}"), 0.0);
    assert!(metric(&second, "edgevlm_camera_restarts_total{camera=\"gone\"}") >= 1.0);
    assert_eq!(
        metric(
            &second,
            "edgevlm_camera_state{camera=\"gone\",state=\"running\"}"
        ),
        0.0
    );
    assert!(get(port, "/other").starts_with("HTTP/1.1 404"));
    let yard = |name: &str| metric(&second, &format!("{name}{{camera=\"yard\"}}"));
    assert!(counted(&second) >= 1.0, "{second}");
    assert!(yard("edgevlm_memory_frames") >= 1.0, "{second}");
    assert!(metric(&second, "edgevlm_engine_runs_total{stage=\"vision\"}") >= 1.0);
    assert!(second.contains("# TYPE edgevlm_answer_first_token_seconds histogram"));
    // The live cache's blocks come from the pool (the default `cache_memory`), and the process's
    // resident memory is split by kind: a soak reads what grows from the page.
    assert!(
        metric(&second, "edgevlm_kv_pool_bytes{state=\"live\"}") > 0.0,
        "{second}"
    );
    assert!(metric(&second, "edgevlm_kv_pool_blocks_total{event=\"mapped\"}") >= 1.0);
    assert!(metric(&second, "edgevlm_process_resident_bytes{kind=\"anon\"}") > 0.0);

    // `edgevlm status` shows the reports, refreshed every 0.5 s: wait for one taken after the
    // yard ran with frames in its memory and the dead camera had failed.
    let status_text = || {
        let status = edgevlm()
            .args(["status", "-c", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        status
            .status
            .success()
            .then(|| String::from_utf8_lossy(&status.stdout).into_owned())
    };
    let (text, held) = poll(status_text, |text| {
        text.lines()
            .any(|l| l.starts_with("yard") && l.contains("running"))
            && text
                .lines()
                .any(|l| l.starts_with("gone") && l.contains("Could not open resource"))
            && text
                .lines()
                .any(|l| l.trim_start().starts_with("memory ") && !l.contains("memory 0 frames"))
    });
    assert!(held, "no status with the cameras and their memory: {text}");
    let yard = text
        .lines()
        .find(|l| l.starts_with("yard"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(yard.contains("running"), "{yard}");
    let gone = text
        .lines()
        .find(|l| l.starts_with("gone"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(gone.contains("Could not open resource"), "{gone}");

    // A second instance on the same metrics port, or the same control socket, refuses to start
    // instead of stealing it.
    let refused = |cfg: &std::path::Path| {
        let out = edgevlm()
            .args(["run", "-c", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused(&cfg);
    assert!(
        err.contains("telemetry.metrics_listen: cannot listen on"),
        "{err}"
    );
    let cfg2 = dir.join("second.toml");
    std::fs::write(
        &cfg2,
        "[mqtt]\nenabled = false\n\n[runtime]\nstate_dir = \"state\"\n\n[[cameras]]\nid = \"yard\"\nuri = \"test://ball\"\n",
    )
    .unwrap();
    let err = refused(&cfg2);
    assert!(err.contains("another edgevlm instance answers on"), "{err}");

    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.into_inner().wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !dir.join("state/edgevlm.sock").exists(),
        "socket left behind"
    );
    let after = edgevlm()
        .args(["status", "-c", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!after.status.success());
    assert!(String::from_utf8_lossy(&after.stderr).contains("no edgevlm answers"));
}

#[test]
fn engine_counters_appear_on_metrics_once_the_engines_are_sent() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = rt
        .block_on(edgevlm::telemetry::metrics::bind(
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_views_tx, views_rx) = tokio::sync::watch::channel(Vec::new());
    let (engines_tx, engines_rx) = tokio::sync::watch::channel(None);
    let mut sources = edgevlm::telemetry::metrics::Sources::cameras(views_rx);
    sources.engines = engines_rx;
    rt.spawn(edgevlm::telemetry::metrics::serve(listener, sources));

    let before = get(port, "/metrics");
    assert!(before.starts_with("HTTP/1.1 200 OK"), "{before}");
    assert!(!before.contains("edgevlm_engine_"), "{before}");

    let engines = engine_common::tiny();
    let frame = engine_common::frame(56, 56, 0);
    engines.vision().encode(&[&frame], 56, 56).unwrap();
    engines_tx.send(Some(engines)).unwrap();
    let after = get(port, "/metrics");
    assert_eq!(
        metric(&after, "edgevlm_engine_runs_total{stage=\"vision\"}"),
        1.0
    );
    assert_eq!(
        metric(&after, "edgevlm_engine_items_total{stage=\"vision\"}"),
        1.0
    );
    assert!(metric(&after, "edgevlm_engine_seconds_total{stage=\"vision\"}") > 0.0);
    assert_eq!(
        metric(&after, "edgevlm_engine_runs_total{stage=\"decode\"}"),
        0.0
    );
}

#[test]
fn the_runtime_returns_free_memory_to_the_system_on_its_interval() {
    // `runtime.release_memory_secs` (src/base/memory.rs): each interval the runtime gives the
    // allocator's free pages back (jemalloc's purge, or glibc's malloc_trim) and logs, at debug,
    // what its RSS was before and after.
    let config = format!(
        "[mqtt]\nenabled = false\n[runtime]\nstate_dir = \"state\"\nrelease_memory_secs = 1\n\
         [engine]\nmodel_dir = \"{}\"\n\
         [[cameras]]\nid = \"yard\"\nuri = \"test://ball\"\nsample_fps = 2\n",
        common::TINY_MODEL
    );
    let mut run = common::run::RunProcess::start_with_env(
        "release",
        &config,
        &[("RUST_LOG", "info,edgevlm::runtime=debug")],
    );
    let released = |log: &str| log.matches("Returned free memory to the system").count();
    let deadline = Instant::now() + Duration::from_secs(60);
    while released(&run.log()) < 2 && Instant::now() < deadline && run.is_running() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = run.log();
    assert!(released(&log) >= 2, "no release twice in 60 s:\n{log}");
    let line = log
        .lines()
        .find(|l| l.contains("Returned free memory"))
        .unwrap();
    assert!(
        line.contains("rss_before=")
            && line.contains("rss_after=")
            && line.contains("took_us=")
            && line.contains(&format!(
                "allocator=\"{}\"",
                edgevlm::base::memory::ALLOCATOR
            )),
        "{line}"
    );
}
