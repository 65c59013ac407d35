//! A configuration run in-process until one camera has footage in memory, and a question asked of
//! it over HTTP with curl (the model family tests).

use edgevlm::config::Config;
use edgevlm::memory::MemoryReport;
use edgevlm::runtime::{Running, Runtime, RuntimeOptions};
use edgevlm::supervisor::{CameraReport, CameraState};
use std::time::Duration;

/// Starts `config` (TOML text) and waits up to `bound` for `camera` to run with a memory that
/// `ready` accepts (its items are frames, or clips for a model of clips; a frame is in memory a
/// moment before it is counted encoded or reused, so a test that reads the counts waits for
/// them too). Returns the runtime and the camera's report; a camera that does not get there shuts
/// the runtime down and fails the test with every camera's report.
pub async fn watching(
    config: &str,
    camera: &str,
    ready: impl Fn(&MemoryReport) -> bool,
    bound: Duration,
) -> (Running, CameraReport) {
    let config = Config::parse(config, None).unwrap_or_else(|e| panic!("{e}"));
    let rt = Runtime::start(config, RuntimeOptions::default())
        .await
        .expect("the runtime starts");
    let mut reports = rt.reports();
    let ready = |s: &edgevlm::telemetry::control::Snapshot| {
        s.cameras.iter().any(|c| {
            c.camera == camera
                && c.state == CameraState::Running
                && c.memory.as_ref().is_some_and(&ready)
        })
    };
    let settled = tokio::time::timeout(bound, reports.wait_for(ready))
        .await
        .is_ok();
    let cameras = reports.borrow().cameras.clone();
    if !settled {
        rt.shutdown().await;
        panic!("no footage in memory: {cameras:?}");
    }
    let cam = cameras.iter().find(|c| c.camera == camera).cloned();
    (rt, cam.expect("the camera's report"))
}

/// Asks `question` of `camera` over the HTTP API on `port`, at most `max_tokens` generated:
/// (HTTP status, the answer as JSON).
pub fn ask(port: u16, camera: &str, question: &str, max_tokens: u32) -> (u16, serde_json::Value) {
    let body = serde_json::json!({ "question": question, "max_tokens": max_tokens }).to_string();
    super::curl_json(
        &format!("http://127.0.0.1:{port}/v1/cameras/{camera}/questions"),
        &["-H", "Content-Type: application/json", "-d", &body],
    )
}
