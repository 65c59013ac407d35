//! GPU batches give exactly the CPU decisions (feature `prune-cuda`).
//!
//! Without a usable GPU these tests skip and say so, unless `EDGEVLM_REQUIRE_GPU=1`, which turns
//! the skip into a failure (scripts/device-check.sh sets it on GPU machines).
#![cfg(feature = "prune-cuda")]

mod common;

use common::{Frame, Rng};
use edgevlm::prune::{Backend, BackendKind, Decision, PruneMode, PruneParams, Pruner};

/// The GPU backend, or `None` (after saying why) when the test should skip.
fn gpu() -> Option<Backend> {
    let (backend, choice) = Backend::select(true);
    if backend.kind() == BackendKind::Cuda {
        return Some(backend);
    }
    let required = std::env::var("EDGEVLM_REQUIRE_GPU").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "EDGEVLM_REQUIRE_GPU=1 but no GPU backend: {choice}"
    );
    eprintln!("skipped: no GPU ({choice})");
    None
}

/// A video with static, slightly changed, noisy and fully changed blocks, plus an exact repeat.
fn video(width: usize, height: usize, frames: usize, pad: usize, rng: &mut Rng) -> Vec<Frame> {
    let mut f = Frame::random(width, height, rng);
    let tokens = (width / 28) * (height / 28);
    let mut out = vec![f.padded(pad, 0xAB)];
    for t in 1..frames {
        if t % 5 != 0 {
            for n in 0..tokens {
                let idx = f.block_indices(28, n);
                let kind = rng.below(4);
                let count = match kind {
                    0 => 0,
                    1 => 100 + rng.below(40) as usize,
                    _ => idx.len(),
                };
                for &i in idx.iter().take(count) {
                    f.data[i] = if kind == 3 {
                        rng.byte()
                    } else {
                        f.data[i].wrapping_add(1)
                    };
                }
            }
        }
        out.push(f.padded(pad, rng.byte()));
    }
    out
}

fn cpu_decisions(frames: &[Frame], params: PruneParams) -> Vec<Decision> {
    let (w, h) = (frames[0].width, frames[0].height);
    let mut p = Pruner::new(w, h, params).unwrap();
    frames
        .iter()
        .map(|f| p.push(&f.data, f.stride).unwrap().clone())
        .collect()
}

fn gpu_decisions(
    frames: &[Frame],
    params: PruneParams,
    gpu: &Backend,
    batch: usize,
) -> Vec<Decision> {
    let (w, h) = (frames[0].width, frames[0].height);
    let mut p = Pruner::with_backend(w, h, params, gpu, batch).unwrap();
    assert_eq!(p.backend_kind(), BackendKind::Cuda);
    let mut out = Vec::new();
    // Two calls, so the second batch starts from the first one's last frame.
    let split = frames.len() / 2;
    for part in [&frames[..split], &frames[split..]] {
        let refs: Vec<&[u8]> = part.iter().map(|f| f.data.as_slice()).collect();
        let start = out.len();
        p.push_batch(&refs, part[0].stride, |i, d| {
            assert_eq!(start + i, out.len(), "decisions come in frame order");
            out.push(d.clone());
        })
        .unwrap();
    }
    out
}

#[test]
fn gpu_batches_give_exactly_the_cpu_masks_and_sads() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rng(0xc0da);
    for (w, h, pad, batch) in [(336, 196, 0, 8), (1288, 728, 12, 4), (56, 28, 3, 64)] {
        let frames = video(w, h, 17, pad, &mut rng);
        for mode in [PruneMode::Reference, PruneMode::Adaptive, PruneMode::Off] {
            let params = PruneParams {
                mode,
                ..PruneParams::default()
            };
            let cpu = cpu_decisions(&frames, params);
            let gpu = gpu_decisions(&frames, params, &gpu, batch);
            assert_eq!(cpu.len(), gpu.len());
            for (t, (c, g)) in cpu.iter().zip(&gpu).enumerate() {
                assert_eq!(c.sads(), g.sads(), "{w}x{h} {mode} frame {t}");
                assert_eq!(c, g, "{w}x{h} {mode} frame {t}");
            }
        }
    }
}

#[test]
fn gpu_reset_starts_a_new_key_frame() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rng(5);
    let frames = video(336, 196, 4, 0, &mut rng);
    let refs: Vec<&[u8]> = frames.iter().map(|f| f.data.as_slice()).collect();
    let mut p = Pruner::with_backend(336, 196, PruneParams::default(), &gpu, 4).unwrap();
    p.push_batch(&refs, 336 * 3, |_, _| {}).unwrap();
    p.reset();
    let mut keys = Vec::new();
    p.push_batch(&refs, 336 * 3, |_, d| keys.push(d.key_frame()))
        .unwrap();
    assert_eq!(keys, [true, false, false, false]);
}
