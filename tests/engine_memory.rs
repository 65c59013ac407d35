//! Resident memory of the decoder on the tiny model (engines/tiny/generate.py) with real ONNX
//! Runtime sessions: ONNX Runtime's memory patterns against none, and the KV cache pool.
//!
//! These tests read the process's resident memory, so they live in a test binary of their own and
//! take `SERIAL` for their whole length: in a binary shared with other tests (cargo test runs a
//! binary's tests on parallel threads), another test freeing or allocating between two readings
//! moves the figure. A CI run of the memory-pattern control in `engine_decode` read a growth of
//! 0 KiB where it grows by 4 MiB when alone.

mod engine_common;

use edgevlm::engine::{Engines, LogitRows};
use std::sync::Mutex;

/// Held by each test here for its whole length: no two read resident memory at once.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Resident memory gained over the second half of a walk over (cache length, new positions)
/// pairs, each pair once, after the largest run: `(KiB grown, runs in the measured half)`.
fn growth_over_new_lengths(patterns: edgevlm::engine::MemoryPatterns) -> (u64, usize) {
    let mut opts = engine_common::options(&engine_common::tiny_dir());
    opts.engine.memory_patterns = patterns;
    let engines = Engines::load(&opts).unwrap_or_else(|e| panic!("{e}"));
    let d = engines.decoder();
    let hidden = d.hidden();
    let run = |past: &edgevlm::engine::PastKv, s: usize| {
        let positions: Vec<i64> = (past.len()..past.len() + s).map(|p| p as i64).collect();
        let embeds = vec![0.01f32; s * hidden];
        d.forward(past, &embeds, &positions, LogitRows::Last)
            .unwrap()
            .present
    };
    const LENGTHS: usize = 20;
    const STEP: usize = 60;
    const MAX_NEW: usize = 64;
    // Caches of 60, 120, ... 1,200 positions, the largest first; then the largest run on it.
    let empty = d.empty_cache().unwrap();
    let caches: Vec<_> = (1..=LENGTHS).rev().map(|k| run(&empty, k * STEP)).collect();
    drop(run(&caches[0], MAX_NEW));
    // A fixed walk over the other (cache, new positions) pairs, each pair once.
    let mut pairs: Vec<(usize, usize)> = (0..LENGTHS)
        .flat_map(|c| (1..=MAX_NEW).map(move |s| (c, s)))
        .filter(|&pair| pair != (0, MAX_NEW))
        .collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in (1..pairs.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        pairs.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let (first, second) = pairs.split_at(pairs.len() / 2);
    let walk = |pairs: &[(usize, usize)]| {
        for &(c, s) in pairs {
            drop(run(&caches[c], s));
        }
        edgevlm::base::memory::resident_bytes().unwrap()
    };
    let warm = walk(first);
    let after = walk(second);
    (after.saturating_sub(warm) / 1024, second.len())
}

#[test]
fn memory_patterns_grow_memory_with_every_new_length_and_the_decoder_can_run_without() {
    let _serial = serial();
    // The decoder sees a new pair of (cache length, new positions) on nearly every run. ONNX
    // Runtime's memory patterns (its default, `engine.memory_patterns = "all"`) are cached per
    // set of input shapes and never evicted, so resident memory grows with every new pair
    // (docs/RELIABILITY.md, "Memory over a long run"). With `"vision"` the decoder runs without
    // them, and after the largest run, runs at other pairs within it reuse the arena. When this
    // test was written the measured half grew by 4.0 MiB with patterns and by 0 KiB without.
    use edgevlm::engine::MemoryPatterns;
    let (with, runs) = growth_over_new_lengths(MemoryPatterns::All);
    let (without, _) = growth_over_new_lengths(MemoryPatterns::FixedShapes);
    eprintln!(
        "{runs} runs at new lengths: {with} KiB grown with memory patterns, {without} without"
    );
    assert!(
        with > 1024,
        "with memory patterns {runs} runs at new lengths grew resident memory by only {with} KiB: \
         the control no longer shows the growth"
    );
    assert!(
        without < 512,
        "without memory patterns {runs} runs at new lengths grew resident memory by {without} KiB"
    );
}

#[test]
fn caches_come_from_the_pool_a_generation_reuses_its_blocks_and_dropped_caches_go_back_to_the_system()
 {
    let _serial = serial();
    // On the CPU provider the decoder writes each new cache into a block of its own pool, not into
    // ONNX Runtime's arena (docs/RELIABILITY.md, "Memory over a long run").
    let engines = Engines::load(&engine_common::options(&engine_common::tiny_dir())).unwrap();
    let d = engines.decoder();
    let pool = || {
        d.cache_pool()
            .expect("the CPU provider's caches are pooled")
    };
    let hidden = d.hidden();
    let run = |past: &edgevlm::engine::PastKv, s: usize| {
        let positions: Vec<i64> = (past.len()..past.len() + s).map(|p| p as i64).collect();
        d.forward(
            past,
            &vec![0.01f32; s * hidden],
            &positions,
            LogitRows::Last,
        )
        .unwrap()
        .present
    };
    let start = pool();
    let long = d.max_context() / 2;
    let base = run(&d.empty_cache().unwrap(), long);
    let held = pool().live_bytes - start.live_bytes;
    assert!(
        held >= base.bytes(),
        "a cache of {} bytes holds {held} bytes of the pool",
        base.bytes()
    );

    // A generation: one position at a time. Each step's new cache takes the block the step
    // before last gave back, so the pool maps a handful of blocks, not one per token.
    let steps = 2 * edgevlm::engine::CACHE_GRAIN;
    let mut cache = run(&base, 1);
    for _ in 1..steps {
        cache = run(&cache, 1);
        let s = pool();
        assert!(
            s.idle_bytes <= s.live_bytes + 2 * s.largest_bytes,
            "the pool keeps more idle than its bound: {s:?}"
        );
    }
    let s = pool();
    let mapped = s.mapped - start.mapped - 1;
    assert!(
        mapped <= 6,
        "{steps} decode steps mapped {mapped} new blocks: blocks are not reused ({s:?})"
    );
    assert!(s.reused - start.reused >= steps as u64 - 6, "{s:?}");

    drop(cache);
    drop(base);
    let s = pool();
    assert_eq!(s.live_bytes, start.live_bytes, "{s:?}");
    assert!(s.idle_bytes <= 2 * s.largest_bytes, "{s:?}");

    // Eight caches held at once, then dropped: beyond two of the largest blocks, their memory goes
    // back to the system at once.
    let empty = d.empty_cache().unwrap();
    let caches: Vec<_> = (0..8).map(|k| run(&empty, long - k)).collect();
    let held = pool().live_bytes - start.live_bytes;
    let before = edgevlm::base::memory::resident_bytes().unwrap();
    drop(caches);
    let after = edgevlm::base::memory::resident_bytes().unwrap();
    let s = pool();
    assert!(s.idle_bytes <= 2 * s.largest_bytes, "{s:?}");
    assert!(
        before.saturating_sub(after) >= held as u64 / 2,
        "dropping {held} bytes of caches gave back only {} bytes of resident memory",
        before.saturating_sub(after)
    );
}
