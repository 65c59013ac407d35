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

/// Timings of questions asked from an empty cache (no live cache): each run encodes the footage,
/// builds the prompt, prefills it and takes the first token, then one more decode step.
pub struct QuestionTimes {
    /// From the start of the encoding to the first token.
    pub ttft: Vec<std::time::Duration>,
    /// The prefill and first token alone.
    pub prefill: Vec<std::time::Duration>,
    /// The decode step after the first token.
    pub step: Vec<std::time::Duration>,
    /// Positions of the prompt.
    pub prompt_tokens: usize,
}

/// Asks `rendered` (a prompt of `items` visual items) `runs` times from an empty cache, the
/// features coming from `encode` each time (its cost is part of the time to the first token).
pub fn question_from_scratch(
    generator: &edgevlm::generate::Generator,
    rendered: &edgevlm::generate::render::Rendered,
    items: usize,
    runs: usize,
    mut encode: impl FnMut() -> edgevlm::engine::VisualTokens,
) -> QuestionTimes {
    use std::time::Instant;
    let hidden = generator.engines().decoder().hidden();
    let two = edgevlm::generate::GenerateOptions {
        max_new_tokens: 2,
        ..Default::default()
    };
    let mut out = QuestionTimes {
        ttft: Vec::new(),
        prefill: Vec::new(),
        step: Vec::new(),
        prompt_tokens: 0,
    };
    for _ in 0..runs {
        let t = Instant::now();
        let features = encode();
        let rows: Vec<&[f32]> = (0..items).map(|i| features.frame(i)).collect();
        let prompt = rendered.prompt(&rows, hidden).expect("rows");
        let empty = generator.empty_cache().expect("cache");
        let p = Instant::now();
        let mut d = generator.start(&empty, &prompt, &two).expect("prefill");
        let first = d.next_token().expect("decode").expect("a token");
        let now = Instant::now();
        out.ttft.push(now - t);
        out.prefill.push(now - p);
        std::hint::black_box(first.id);
        let s = Instant::now();
        let _ = d.next_token().expect("decode");
        out.step.push(s.elapsed());
        out.prompt_tokens = d.finish().prompt_tokens;
    }
    out
}
