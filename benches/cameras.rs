//! Many cameras on one box: vision encoder throughput with 1, 4 and 8 cameras, each camera a
//! thread that encodes one frame at a time as fast as it can, with runs shared across cameras
//! (`vision_batch_frames = 8`, `vision_batch_wait_ms = 3`) and without (`vision_batch_frames =
//! 1`: each frame its own run, the cameras taking turns at the session).
//!
//! `cargo bench --bench cameras` (after scripts/setup.sh). The tiny model and the scenes model
//! (a small VideoLLaMA3, engines/scenes) at 336x196 (84 tokens a frame), on the CPU with
//! `EDGEVLM_BENCH_THREADS` intra-op threads (default 1). A documented harness rather than
//! criterion: what is measured is throughput under contention, frames per second of all cameras
//! together, and the fairness of the split (the slowest camera's share of the mean).
//! Decode steps are not batched: the decoder contract has a batch of one (docs/ARCHITECTURE.md,
//! "Batching across cameras").

mod common;

use edgevlm::engine::{EngineOptions, Engines};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const SIZE: (u32, u32) = (336, 196);
const RUN: Duration = Duration::from_secs(4);

fn engines(model: &str, batch: u32) -> Arc<Engines> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(model);
    assert!(
        dir.join("manifest.toml").is_file(),
        "{} is missing (scripts/setup.sh generates engines/tiny/model)",
        dir.display()
    );
    let mut opts = EngineOptions::cpu(&dir);
    opts.engine.threads = common::threads() as u32;
    opts.engine.vision_batch_frames = batch;
    opts.engine.vision_batch_wait_ms = Some(3);
    Arc::new(Engines::load(&opts).expect("load the model"))
}

/// Frames per second of all cameras together, the slowest camera's share of the mean, and the
/// mean frames per run.
fn throughput(e: &Arc<Engines>, cameras: usize) -> (f64, f64, f64) {
    let (w, h) = SIZE;
    let barrier = Arc::new(Barrier::new(cameras));
    let before = e.vision().batch_counts();
    let started = Instant::now();
    let threads: Vec<_> = (0..cameras)
        .map(|c| {
            let (e, barrier) = (e.clone(), barrier.clone());
            std::thread::spawn(move || {
                let frame: Vec<u8> = (0..w * h * 3)
                    .map(|i| ((i as usize * 37 + c * 101) % 251) as u8)
                    .collect();
                barrier.wait();
                let t0 = Instant::now();
                let mut n = 0u64;
                while t0.elapsed() < RUN {
                    e.vision().encode(&[&frame[..]], w, h).expect("encode");
                    n += 1;
                }
                n
            })
        })
        .collect();
    let counts: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let secs = started.elapsed().as_secs_f64();
    let total: u64 = counts.iter().sum();
    let mean = total as f64 / cameras as f64;
    let least = counts.iter().copied().min().unwrap_or(0) as f64;
    let after = e.vision().batch_counts();
    let per_run = (after.frames - before.frames) as f64 / (after.runs - before.runs).max(1) as f64;
    (total as f64 / secs, least / mean.max(1e-9), per_run)
}

fn main() {
    let dev = common::device();
    println!(
        "\nVision encoder throughput, {}x{} frames, {dev}, {} s per row",
        SIZE.0,
        SIZE.1,
        RUN.as_secs()
    );
    println!(
        "{:<16} {:>8} {:>12} {:>12} {:>9} {:>12} {:>9}",
        "model", "cameras", "alone fr/s", "shared fr/s", "gain", "frames/run", "fairness"
    );
    for model in ["engines/tiny/model", "engines/scenes/model"] {
        let alone = engines(model, 1);
        let shared = engines(model, 8);
        for cameras in [1usize, 4, 8] {
            // Warm both sessions for this shape first.
            let _ = throughput(&alone, 1);
            let (a, _, _) = throughput(&alone, cameras);
            let (s, fair, per_run) = throughput(&shared, cameras);
            println!(
                "{:<16} {cameras:>8} {a:>12.1} {s:>12.1} {:>8.2}x {per_run:>12.2} {:>8.0}%",
                model
                    .trim_start_matches("engines/")
                    .trim_end_matches("/model"),
                s / a,
                fair * 100.0
            );
        }
    }
}
