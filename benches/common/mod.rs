//! Helpers shared by the benches (sessions of ONNX Runtime for engine, watch, videollama3; the
//! process's memory for publish and http).
#![allow(dead_code)] // each bench binary uses a different subset

use std::path::PathBuf;

/// Intra-op threads of the sessions (`EDGEVLM_BENCH_THREADS`, default 1).
pub fn threads() -> usize {
    std::env::var("EDGEVLM_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// The device prefix of bench names (`cpu1`, `cpu2`, ...).
pub fn device() -> String {
    format!("cpu{}", threads())
}

/// Where criterion writes its results: found as criterion finds it (`CARGO_TARGET_DIR`, else
/// `cargo metadata`), so a summary can read them back.
pub fn criterion_dir() -> PathBuf {
    let metadata = || {
        let out = std::process::Command::new(std::env::var_os("CARGO")?)
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        Some(PathBuf::from(v["target_directory"].as_str()?))
    };
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(metadata)
        .unwrap_or_else(|| PathBuf::from("target"))
        .join("criterion")
}

/// This process's resident memory, in KiB (`VmRSS`).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The median and the fastest of some timings (the plain harnesses of the family benches: on a
/// shared machine contention only adds time, so the fastest is the cleaner figure).
pub fn median_and_fastest(
    mut v: Vec<std::time::Duration>,
) -> (std::time::Duration, std::time::Duration) {
    v.sort();
    (v[v.len() / 2], v[0])
}

/// Milliseconds of a duration.
pub fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
