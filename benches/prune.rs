//! DiffFP throughput: integer CPU pruner vs the straightforward float32 formula vs a memcpy of
//! the same frame (the floor: the pruner must at least read the frame and store it as the
//! next previous frame). Throughput is one frame's RGB bytes per iteration.
//!
//! `sad/` times the fused SAD-and-copy kernel alone: the target's own (SSE2 on x86_64, NEON on
//! aarch64) against the portable loop, on the same frames (docs/ARCHITECTURE.md, "arm64").
//!
//! Run: `cargo bench --bench prune -- --warm-up-time 1 --measurement-time 3`
//! (with `--features prune-cuda` on a GPU machine the `cuda/` cases run too).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use edgevlm::prune::oracle::{FloatPruner, Normalise};
use edgevlm::prune::{BlockGrid, PruneParams, Pruner, SadBench, SadKernel};

const SIZES: [(usize, usize); 2] = [(336, 196), (1288, 728)];

/// Two frames that differ in a realistic way: noise everywhere on half the blocks.
fn frames(width: usize, height: usize) -> [Vec<u8>; 2] {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let a: Vec<u8> = (0..width * height * 3).map(|_| next() as u8).collect();
    let b = a
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            if (i / 84) % 2 == 0 {
                v.wrapping_add((next() % 3) as u8)
            } else {
                v
            }
        })
        .collect();
    [a, b]
}

fn cpu(c: &mut Criterion) {
    for (w, h) in SIZES {
        let bytes = (w * h * 3) as u64;
        let input = frames(w, h);
        let mut group = c.benchmark_group(format!("cpu/{w}x{h}"));
        group.throughput(Throughput::Bytes(bytes));

        let mut pruner = Pruner::new(w, h, PruneParams::default()).expect("valid geometry");
        let mut t = 0usize;
        group.bench_function("integer", |bench| {
            bench.iter(|| {
                t ^= 1;
                black_box(
                    pruner
                        .push(black_box(&input[t]), w * 3)
                        .expect("valid frame")
                        .kept(),
                )
            })
        });

        let mut float = FloatPruner::new(w, h, &PruneParams::default(), Normalise::Rescale)
            .expect("valid geometry");
        group.bench_function("float32", |bench| {
            bench.iter(|| {
                t ^= 1;
                black_box(
                    float
                        .push(black_box(&input[t]), w * 3)
                        .expect("valid frame")[0],
                )
            })
        });

        let mut prev = vec![0u8; w * h * 3];
        group.bench_function("memcpy", |bench| {
            bench.iter(|| {
                t ^= 1;
                prev.copy_from_slice(black_box(&input[t]));
                black_box(prev[0])
            })
        });
        group.finish();
    }
}

fn kernel(c: &mut Criterion) {
    let params = PruneParams::default();
    // One case on targets where the native kernel is the portable loop.
    let kernels: &[SadKernel] = if SadKernel::Native.name() == SadKernel::Portable.name() {
        &[SadKernel::Native]
    } else {
        &[SadKernel::Native, SadKernel::Portable]
    };
    for (w, h) in SIZES {
        let geom = BlockGrid::new(w, h, params.patch, params.merge).expect("valid geometry");
        let input = frames(w, h);
        // The kernels must agree before their times mean anything.
        let mut native = SadBench::new(&geom);
        let mut portable = SadBench::new(&geom);
        for f in input.iter().chain(&input) {
            assert_eq!(
                native.run(SadKernel::Native, f, w * 3),
                portable.run(SadKernel::Portable, f, w * 3),
                "{} and portable SADs differ at {w}x{h}",
                SadKernel::Native.name()
            );
        }
        let mut group = c.benchmark_group(format!("sad/{w}x{h}"));
        group.throughput(Throughput::Bytes((w * h * 3) as u64));
        for &k in kernels {
            let mut bench = SadBench::new(&geom);
            let mut t = 0usize;
            group.bench_function(k.name(), |b| {
                b.iter(|| {
                    t ^= 1;
                    black_box(bench.run(k, black_box(&input[t]), w * 3)[0])
                })
            });
        }
        group.finish();
    }
}

#[cfg(feature = "prune-cuda")]
fn gpu(c: &mut Criterion) {
    use edgevlm::prune::{Backend, BackendKind};
    const BATCH: usize = 16;
    let (backend, choice) = Backend::select(true);
    eprintln!("{choice}");
    if backend.kind() != BackendKind::Cuda {
        eprintln!("cuda benches skipped: no usable GPU");
        return;
    }
    for (w, h) in SIZES {
        let input = frames(w, h);
        let batch: Vec<&[u8]> = (0..BATCH).map(|i| input[i % 2].as_slice()).collect();
        let mut pruner = Pruner::with_backend(w, h, PruneParams::default(), &backend, BATCH)
            .expect("GPU buffers");
        let mut group = c.benchmark_group(format!("cuda/{w}x{h}"));
        group.throughput(Throughput::Bytes((w * h * 3 * BATCH) as u64));
        group.bench_function(format!("batch{BATCH}"), |bench| {
            bench.iter(|| {
                let mut kept = 0;
                pruner
                    .push_batch(&batch, w * 3, |_, d| kept += d.kept())
                    .expect("GPU batch");
                black_box(kept)
            })
        });
        group.finish();
    }
}

#[cfg(not(feature = "prune-cuda"))]
fn gpu(_: &mut Criterion) {}

criterion_group!(benches, cpu, kernel, gpu);
criterion_main!(benches);
