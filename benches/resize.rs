//! Reference resize cost (crates/resize/src/lib.rs): torch's uint8 antialiased bicubic in Rust, per
//! frame (and SmolVLM2's two Lanczos steps, group `smolvlm2/`), for the model geometries of common cameras, next to a memcpy of the source frame (the
//! floor: a resize must read the frame once). `rust` runs the kernels the CPU gets (the AVX2 build
//! on x86_64 machines that have it), `rust-portable` the baseline build (SSE2 on x86_64), `build`
//! is `Resizer::new` (once per camera). Throughput is the source frame's RGB bytes.
//!
//! Run: `cargo bench --bench resize -- --warm-up-time 1 --measurement-time 3`
//! (torch's time for the same: `.venv-export/bin/python engines/videollama3/resize_compare.py`).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use edgevlm::ingest::Resizer;

/// (source, target): 1080p and 720p at a 180- and a 60-frame window, VGA at 180 (the `[vision]` rule, docs/CONFIG.md).
const CASES: [((u32, u32), (u32, u32)); 3] = [
    ((1920, 1080), (336, 196)),
    ((1280, 720), (616, 336)),
    ((640, 480), (308, 224)),
];

fn frame(width: u32, height: u32) -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..width as usize * height as usize * 3)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Smooth ramps with noise: the content does not change the work, only realism.
            ((i / 3 % 1920) as u64 / 8 + (state & 15)) as u8
        })
        .collect()
}

fn resize(c: &mut Criterion) {
    for ((sw, sh), (dw, dh)) in CASES {
        let src = frame(sw, sh);
        let mut group = c.benchmark_group(format!("resize/{sw}x{sh}->{dw}x{dh}"));
        group.throughput(Throughput::Bytes(src.len() as u64));
        let mut r = Resizer::new(sw, sh, dw, dh).expect("resizer");
        let mut dst = vec![0u8; r.dst_len()];
        group.bench_function("rust", |b| {
            b.iter(|| {
                r.resize(black_box(&src), sw as usize * 3, &mut dst)
                    .expect("resize");
                black_box(&dst);
            })
        });
        let mut p = Resizer::new(sw, sh, dw, dh).expect("resizer").portable();
        group.bench_function("rust-portable", |b| {
            b.iter(|| {
                p.resize(black_box(&src), sw as usize * 3, &mut dst)
                    .expect("resize");
                black_box(&dst);
            })
        });
        group.bench_function("build", |b| {
            b.iter(|| black_box(Resizer::new(sw, sh, black_box(dw), dh).expect("resizer")))
        });
        let mut copy = vec![0u8; src.len()];
        group.bench_function("memcpy-source", |b| {
            b.iter(|| {
                copy.copy_from_slice(black_box(&src));
                black_box(&copy);
            })
        });
        group.finish();
    }
}

/// SmolVLM2's two Lanczos steps (`family::smolvlm2::preprocess`: longest edge to 512, then
/// 512 x 512) next to one bicubic step to the same square, on the same frames: what the wider
/// filter and the second pass cost.
fn smolvlm2(c: &mut Criterion) {
    use edgevlm::family::smolvlm2::preprocess::FrameResize;
    use edgevlm::ingest::Kernel;
    for (sw, sh) in [(1920, 1080), (640, 480)] {
        let src = frame(sw, sh);
        let mut group = c.benchmark_group(format!("smolvlm2/{sw}x{sh}->512x512"));
        group.throughput(Throughput::Bytes(src.len() as u64));
        let mut two = FrameResize::new(sw, sh, 512, 512).expect("resizer");
        let mut dst = vec![0u8; two.dst_len()];
        group.bench_function("lanczos-two-steps", |b| {
            b.iter(|| {
                two.resize(black_box(&src), sw as usize * 3, &mut dst)
                    .expect("resize");
                black_box(&dst);
            })
        });
        let mut one = Resizer::with_kernel(sw, sh, 512, 512, Kernel::Bicubic).expect("resizer");
        group.bench_function("bicubic-one-step", |b| {
            b.iter(|| {
                one.resize(black_box(&src), sw as usize * 3, &mut dst)
                    .expect("resize");
                black_box(&dst);
            })
        });
        group.finish();
    }
}

criterion_group!(benches, resize, smolvlm2);
criterion_main!(benches);
