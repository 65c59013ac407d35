//! Engine speed on the tiny model (engines/tiny/generate.py) with ONNX Runtime on the CPU.
//!
//! `cargo bench --bench engine` (after scripts/setup.sh). One intra-op thread unless
//! `EDGEVLM_BENCH_THREADS` says otherwise, so numbers compare across machines with different core
//! counts; names carry the device (`cpu1/...`). The tiny model is ~0.8 MB, so these figures are
//! the runtime's overhead plus small matmuls: what they show is how cost scales (frames, tokens,
//! cache length), not what a 2B model does.
//!
//! - `vision_encoder/{geometry}/{frames}`: frames per second through normalisation + the encoder.
//! - `prefill/{tokens}`: prompt tokens per second from an empty cache.
//! - `decode_step/cache_{len}`: one token (embedding + decoder) after a cache of `len` positions.
//!   The cache is passed by reference to the runtime; what grows with `len` is the graph's own
//!   attention and its past/new concatenation.
//! - `generate/64_tokens`: the greedy decode loop, tokens per second.
//! - `fork/cache_2048`: forking a 2048-position cache.
//! - `cpu_arena/{model}/{arena}/...`: prefill, decode step and generation on the tiny and the
//!   scenes model with ONNX Runtime's arena on every session (`all`, its default and the
//!   runtime's) and only on the vision encoder (`fixed_shapes`, `engine.cpu_arena = "vision"`),
//!   both loaded in the same run
//!   (docs/RELIABILITY.md, "Where the slow growth was").
//! - `cache_memory/{model}/{pool,onnxruntime}/...`: the same work with the decoder's KV caches in
//!   the runtime's pool (`engine.cache_memory = "pool"`, the default) and in ONNX Runtime's arena,
//!   both loaded in the same run (docs/RELIABILITY.md, "Memory over a long run").

mod common;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use edgevlm::config::EngineConfig;
use edgevlm::engine::{CacheMemory, CpuArena, EngineOptions, Engines, LogitRows};
use edgevlm::generate::{GenerateOptions, Generator, KvCache, Prompt};
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn generator() -> Generator {
    generator_of("engines/tiny/model", |_| {})
}

fn generator_of(model: &str, set: fn(&mut EngineConfig)) -> Generator {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(model);
    assert!(
        dir.join("manifest.toml").is_file(),
        "run scripts/setup.sh first (it generates engines/tiny/model)"
    );
    let mut opts = EngineOptions::cpu(&dir);
    set(&mut opts.engine);
    opts.engine.threads = (common::threads()) as u32;
    opts.engine.prefill_chunk_tokens = 512;
    Generator::new(Arc::new(Engines::load(&opts).expect("load the tiny model")))
}

fn frame(w: u32, h: u32) -> Vec<u8> {
    (0..w * h * 3).map(|i| (i * 37 % 251) as u8).collect()
}

/// A cache of `len` positions made from pseudo-random token ids.
fn cache_of(g: &Generator, len: usize) -> KvCache {
    let ids: Vec<u32> = (0..len as u32).map(|i| (i * 7919) % 500).collect();
    let mut p = Prompt::new();
    p.tokens(&ids[..]);
    g.prefill(&g.empty_cache().unwrap(), &p).unwrap().cache
}

fn bench(c: &mut Criterion) {
    let g = generator();
    let dev = common::device();

    let mut group = c.benchmark_group(format!("{dev}/vision_encoder"));
    for (w, h) in [(336u32, 196u32), (56, 56)] {
        for t in [1usize, 4] {
            let f = frame(w, h);
            let frames: Vec<&[u8]> = (0..t).map(|_| &f[..]).collect();
            group.throughput(Throughput::Elements(t as u64));
            group.bench_with_input(BenchmarkId::new(format!("{w}x{h}"), t), &frames, |b, fr| {
                b.iter(|| black_box(g.engines().vision().encode(fr, w, h).unwrap()))
            });
        }
    }
    group.finish();

    let mut group = c.benchmark_group(format!("{dev}/prefill"));
    for n in [128usize, 512] {
        let ids: Vec<u32> = (0..n as u32).map(|i| (i * 7919) % 500).collect();
        let empty = g.empty_cache().unwrap();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &ids, |b, ids| {
            b.iter(|| {
                let mut p = Prompt::new();
                p.tokens(&ids[..]);
                black_box(g.prefill(&empty, &p).unwrap())
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group(format!("{dev}/decode_step"));
    group.throughput(Throughput::Elements(1));
    for len in [64usize, 512, 2048] {
        let cache = cache_of(&g, len);
        group.bench_with_input(BenchmarkId::new("cache", len), &cache, |b, cache| {
            let decoder = g.engines().decoder();
            let embed = g.engines().embedder().embed(&[42]).unwrap();
            let pos = [cache.next_position()];
            // The step reads `cache` and returns a new cache; the old one is untouched, so every
            // iteration measures the same step.
            b.iter(|| {
                let past = past_of(cache);
                black_box(
                    decoder
                        .forward(past, &embed, &pos, LogitRows::Last)
                        .unwrap(),
                )
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group(format!("{dev}/generate"));
    group.throughput(Throughput::Elements(64));
    let prompt_cache = cache_of(&g, 64);
    group.bench_function("64_tokens", |b| {
        let opts = GenerateOptions {
            max_new_tokens: 64,
            stop_tokens: Some(vec![]),
            ..Default::default()
        };
        b.iter(|| {
            let mut p = Prompt::new();
            p.tokens(&[7u32][..]);
            black_box(g.generate(&prompt_cache, &p, &opts, |_| {}).unwrap())
        })
    });
    group.finish();

    let mut group = c.benchmark_group(format!("{dev}/fork"));
    let big = cache_of(&g, 2048);
    group.bench_function("cache_2048", |b| b.iter(|| black_box(big.fork())));
    group.finish();

    compare(
        c,
        "cpu_arena",
        &[
            ("all", |e| e.cpu_arena = CpuArena::All),
            ("fixed_shapes", |e| e.cpu_arena = CpuArena::FixedShapes),
        ],
    );
    compare(
        c,
        "cache_memory",
        &[
            ("pool", |e| e.cache_memory = CacheMemory::Pool),
            ("onnxruntime", |e| e.cache_memory = CacheMemory::OnnxRuntime),
        ],
    );
}

/// Prefill, a decode step and a generation under each of `variants` of the engine settings.
type Variant = (&'static str, fn(&mut EngineConfig));
fn compare(c: &mut Criterion, what: &str, variants: &[Variant]) {
    let dev = common::device();
    for (name, model) in [
        ("tiny", "engines/tiny/model"),
        ("scenes", "engines/scenes/model"),
    ] {
        let mut group = c.benchmark_group(format!("{dev}/{what}/{name}"));
        for &(label, set) in variants {
            let g = generator_of(model, set);
            let ids: Vec<u32> = (0..256u32).map(|i| (i * 7919) % 200).collect();
            let empty = g.empty_cache().unwrap();
            group.bench_function(format!("{label}/prefill_256"), |b| {
                b.iter(|| {
                    let mut p = Prompt::new();
                    p.tokens(&ids[..]);
                    black_box(g.prefill(&empty, &p).unwrap())
                })
            });
            let cache = cache_of(&g, 512);
            let decoder = g.engines().decoder();
            let embed = g.engines().embedder().embed(&[42]).unwrap();
            let pos = [cache.next_position()];
            group.bench_function(format!("{label}/decode_step_512"), |b| {
                b.iter(|| {
                    black_box(
                        decoder
                            .forward(past_of(&cache), &embed, &pos, LogitRows::Last)
                            .unwrap(),
                    )
                })
            });
            let opts = GenerateOptions {
                max_new_tokens: 32,
                stop_tokens: Some(vec![]),
                ..Default::default()
            };
            group.bench_function(format!("{label}/generate_32"), |b| {
                b.iter(|| {
                    let mut p = Prompt::new();
                    p.tokens(&[7u32][..]);
                    black_box(g.generate(&cache, &p, &opts, |_| {}).unwrap())
                })
            });
        }
        group.finish();
    }
}

/// The decoder tensors behind a cache (the generator does the same internally).
fn past_of(cache: &KvCache) -> &edgevlm::engine::PastKv {
    cache.past()
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench
}
criterion_main!(benches);
