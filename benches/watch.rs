//! Watching speed on the tiny model (engines/tiny/generate.py) with ONNX Runtime on the CPU: the
//! performance goals of the "Watching" issue (#5).
//!
//! `cargo bench --bench watch` (after scripts/setup.sh). One intra-op thread unless
//! `EDGEVLM_BENCH_THREADS` says otherwise; names carry the device (`cpu1/...`). Frames are
//! synthetic 336x196 (84 tokens) pruned by the real DiffFP: a fixed background with a small box
//! that moves one token cell per frame, so DiffFP keeps 2 tokens per frame (84 for the first).
//!
//! - `ttft/memory/{frames}`: time to first token of a question (`QueryService::answer`,
//!   `max_tokens = 1`, whole window) on a camera whose memory and live cache already hold
//!   `frames` frames: the runtime's path (fork the live cache, prefill the question). The time is
//!   `AnswerReport::first_token`, counted from `AskRequest::new` just before the call.
//! - `ttft/reencode/{frames}`: what the reference pipelines do per request: the vision encoder on
//!   the `frames` raw frames, their DiffFP-kept tokens, the `family::videollama3::stream` render and the
//!   question prefilled from an empty cache, then one token (wall time of all of it).
//! - `step/window/{secs}`: `CameraWatch::step` for one new frame (encode, memory, live cache append,
//!   no narration trigger) at 1 fps on a window of `secs` seconds that is already full. Each
//!   iteration steps a whole number of rebuild periods and reports the time per frame, so the
//!   live cache's rebuilds from memory are included, amortised.
//!
//! Context: a streaming frame item is 8 template positions plus the kept tokens, so 600 frames
//! take ~6,100 positions even at 2 kept tokens per frame: more than the tiny model's declared
//! `max_context` of 4096. The decoder graph has no position limit (RoPE is computed from
//! `position_ids`), so the bench loads a copy of the model whose manifest declares
//! `max_context = 16384` and uses a live-cache budget of [`BUDGET`] positions, enough for a 600 s
//! window plus the rebuild slack. Everything else is the tiny model as generated.
//!
//! Ten samples per benchmark; the slow ones (re-encode, step) take one iteration per sample, so
//! criterion's "Unable to complete 10 samples" warnings are expected. About 3 minutes on one core.
//! Setup lines (`watch: ...`) say what each cache holds and where the time goes (engine seconds);
//! at the end, the medians criterion saved during this run are printed as a summary (stderr).

mod common;

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use edgevlm::config::{
    CacheConfig, CachePolicy, CameraConfig, NarrateConfig, NarrateTriggers, QueryConfig, SourceUri,
};
use edgevlm::engine::{EngineOptions, EngineStatsSnapshot, Engines};
use edgevlm::family::videollama3;
use edgevlm::generate::render::{FrameSlot, Role};
use edgevlm::generate::{GenerateOptions, Generator};
use edgevlm::memory::{CameraMemory, RebuildReason, WatchStats};
use edgevlm::prune::{PruneParams, Pruner};
use edgevlm::query::{AskLimits, AskRequest, QueryService};
use edgevlm::ring::{Frame, TokenMask};
use edgevlm::watch::{CameraWatch, Outputs, WatchOptions};
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

const W: usize = 336;
const H: usize = 196;
/// Token cells per row and column (28 px each).
const COLS: usize = W / 28;
const ROWS: usize = H / 28;
const SYSTEM: &str = "You are a helpful assistant.";
const QUESTION: &str = "What moved?";
/// Live-cache budget (positions): a 600-frame window at 10 positions per frame fits in
/// `(1 - SLACK)` of it, and with its slack of stale frames (750 frames) in all of it.
const BUDGET: usize = 9000;
const SLACK: f64 = 0.25;
/// The declared context of the bench's copy of the tiny model.
const MAX_CONTEXT: usize = 16384;
/// Question windows (frames at 1 fps).
const TTFT_FRAMES: [usize; 3] = [60, 180, 600];
/// Narration windows (seconds at 1 fps).
const STEP_WINDOWS: [u64; 2] = [60, 600];

/// The tiny model, copied to a temporary directory with `max_context` raised to [`MAX_CONTEXT`].
fn generator() -> Generator {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/tiny/model");
    let manifest = std::fs::read_to_string(src.join("manifest.toml"))
        .expect("run scripts/setup.sh first (it generates engines/tiny/model)");
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("max_context"))
        .expect("the manifest declares max_context");
    let manifest = manifest.replacen(line, &format!("max_context = {MAX_CONTEXT}"), 1);
    let dir = std::env::temp_dir().join(format!("edgevlm-bench-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() && path.file_name().is_some_and(|n| n != "manifest.toml") {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(dir.join("manifest.toml"), manifest).unwrap();
    let mut opts = EngineOptions::cpu(&dir);
    opts.engine.threads = (common::threads()) as u32;
    opts.engine.prefill_chunk_tokens = 512;
    let engines = Engines::load(&opts).expect("load the tiny model");
    // The sessions and the tokenizer are in memory now.
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(engines.decoder().max_context(), MAX_CONTEXT);
    Generator::new(Arc::new(engines))
}

/// A synthetic camera: a fixed background and a small box (inside one token cell) that moves to
/// the next cell every frame, pruned by the real DiffFP; 1 fps stream time.
struct Scene {
    pruner: Pruner,
    background: Vec<u8>,
    seq: u64,
}

impl Scene {
    fn new() -> Scene {
        let mut background = vec![0u8; W * H * 3];
        for y in 0..H {
            for x in 0..W {
                let i = (y * W + x) * 3;
                background[i] = (x * 255 / W) as u8;
                background[i + 1] = (y * 255 / H) as u8;
                background[i + 2] = 96;
            }
        }
        Scene {
            pruner: Pruner::new(W, H, PruneParams::default()).unwrap(),
            background,
            seq: 0,
        }
    }

    /// The next frame: DiffFP keeps the cell the box left and the one it entered.
    fn next(&mut self) -> Arc<Frame> {
        let seq = self.seq;
        self.seq += 1;
        let cell = seq as usize % (COLS * ROWS);
        let (bx, by) = ((cell % COLS) * 28 + 8, (cell / COLS) * 28 + 8);
        let mut rgb = self.background.clone();
        for y in by..by + 12 {
            for x in bx..bx + 12 {
                let i = (y * W + x) * 3;
                rgb[i..i + 3].copy_from_slice(&[250, 250, 20]);
            }
        }
        let decision = self.pruner.push(&rgb, W * 3).unwrap();
        let secs = seq as f64;
        Arc::new(Frame {
            camera: "cam".into(),
            seq,
            pts: Duration::from_secs_f64(secs),
            wall_time: SystemTime::UNIX_EPOCH + Duration::from_secs_f64(1.7e9 + secs),
            width: W as u32,
            height: H as u32,
            rgb: rgb.into_boxed_slice(),
            tokens: Some(TokenMask::from_decision(decision)),
        })
    }

    fn take(&mut self, n: usize) -> Vec<Arc<Frame>> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// A watcher with no narration trigger on a 1 fps camera keeping `window_secs`.
fn watcher(generator: &Generator, window_secs: u64) -> (CameraWatch, Arc<CameraMemory>) {
    watcher_with(generator, window_secs, CacheConfig::default())
}

/// [`watcher`] with a cache policy and budget.
fn watcher_with(
    generator: &Generator,
    window_secs: u64,
    cache: CacheConfig,
) -> (CameraWatch, Arc<CameraMemory>) {
    let mut cam = CameraConfig::new("cam", SourceUri::parse("test://ball").unwrap());
    cam.window = Duration::from_secs(window_secs);
    cam.sample_fps = 1.0;
    cam.cache = cache;
    cam.narrate = NarrateConfig {
        triggers: NarrateTriggers::default(),
        ..NarrateConfig::default()
    };
    let memory = Arc::new(CameraMemory::new(
        "cam",
        cam.window,
        cam.window_frames() + 1,
    ));
    let w = CameraWatch::new(
        generator.clone(),
        memory.clone(),
        WatchOptions {
            camera: cam,
            system: Some(SYSTEM.into()),
            budget: BUDGET,
            slack: SLACK,
            poll: Duration::from_millis(50),
        },
        Outputs::new(None),
    );
    (w, memory)
}

fn service(generator: &Generator) -> QueryService {
    QueryService::new(
        Ok(generator.clone()),
        QueryConfig::default(),
        AskLimits::default(),
        Some(SYSTEM.into()),
        BUDGET,
        SLACK,
    )
}

/// One question with one token through the runtime's path; returns its time to first token.
fn ask_memory(svc: &QueryService, frames: usize) -> Duration {
    let mut req = AskRequest::new("cam", QUESTION);
    req.max_tokens = Some(1);
    let a = svc.answer(&req, &mut |_| {}).unwrap();
    debug_assert!(a.forked && a.frames == frames);
    black_box(a.first_token)
}

/// What a reference pipeline does per request: encode every frame, keep DiffFP's tokens, render
/// the stream and the question, prefill from an empty cache, one token. Returns the prompt length.
fn ask_reencode(generator: &Generator, frames: &[Arc<Frame>]) -> usize {
    let engines = generator.engines();
    let hidden = engines.decoder().hidden();
    let rgb: Vec<&[u8]> = frames.iter().map(|f| &f.rgb[..]).collect();
    let encoded = engines.vision().encode(&rgb, W as u32, H as u32).unwrap();
    let mut rows: Vec<Vec<f32>> = Vec::with_capacity(frames.len());
    let mut slots = Vec::with_capacity(frames.len());
    for (i, f) in frames.iter().enumerate() {
        let keep = &f.tokens.as_ref().unwrap().keep;
        let kept: Vec<f32> = encoded
            .frame(i)
            .chunks_exact(hidden)
            .zip(keep.iter())
            .filter(|(_, k)| **k)
            .flat_map(|(r, _)| r.iter().copied())
            .collect();
        slots.push(FrameSlot {
            time_secs: f.pts.as_secs_f64(),
            kept: kept.len() / hidden,
        });
        rows.push(kept);
    }
    let stream = videollama3::stream(&slots, &[], Some(SYSTEM)).unwrap();
    let row_refs: Vec<&[f32]> = rows.iter().map(|r| &r[..]).collect();
    let mut prompt = stream.prompt(&row_refs, hidden).unwrap();
    let ask = videollama3::stream_ask(Role::User, QUESTION);
    prompt.extend(ask.prompt(&[], hidden).unwrap());
    let opts = GenerateOptions {
        max_new_tokens: 1,
        ..GenerateOptions::default()
    };
    let g = generator
        .generate(&generator.empty_cache().unwrap(), &prompt, &opts, |_| {})
        .unwrap();
    black_box(g.prompt_tokens)
}

fn rebuilds(memory: &CameraMemory) -> u64 {
    WatchStats::get(&memory.stats.rebuilds)
}

/// A target time that gives 10 samples of one iteration each (criterion then warns that it
/// cannot complete them in that time: the warning is expected).
fn ten_of(one: Duration) -> Duration {
    one * 9
}

/// Seconds in ONNX Runtime since `before`: (vision encoder, embedding + decoder).
fn engine_secs(g: &Generator, before: &EngineStatsSnapshot) -> (f64, f64) {
    let now = g.engines().stats();
    (
        now.vision_seconds - before.vision_seconds,
        now.embed_seconds - before.embed_seconds + now.prefill_seconds - before.prefill_seconds
            + now.decode_seconds
            - before.decode_seconds,
    )
}

fn median_of(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn bench(c: &mut Criterion) {
    let g = generator();
    let dev = common::device();

    // ---- Time to first token: memory (live cache) vs re-encoding the window per request.
    let mut group = c.benchmark_group(format!("{dev}/ttft"));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(300));
    for n in TTFT_FRAMES {
        let mut scene = Scene::new();
        let frames = scene.take(n);
        let (mut w, memory) = watcher(&g, n as u64);
        w.step(&frames);
        let live = memory.snapshot().live.expect("a live cache");
        let svc = service(&g);
        svc.set_camera(memory.clone());
        let mut req = AskRequest::new("cam", QUESTION);
        req.max_tokens = Some(1);
        let a = svc.answer(&req, &mut |_| {}).unwrap();
        // Where the time goes: the question's prefill alone on the live cache, and the re-encode
        // path split into encoder and decoder.
        let hidden = g.engines().decoder().hidden();
        let ask = videollama3::stream_ask(Role::User, QUESTION);
        let ask = ask.prompt(&[], hidden).unwrap();
        let prefill_only = median_of(
            (0..5)
                .map(|_| {
                    let t = Instant::now();
                    black_box(g.prefill(&live.cache, &ask).unwrap());
                    t.elapsed()
                })
                .collect(),
        );
        let before = g.engines().stats();
        let t = Instant::now();
        let reencode_prompt = ask_reencode(&g, &frames);
        let reencode_once = t.elapsed();
        let (vision_s, decoder_s) = engine_secs(&g, &before);
        eprintln!(
            "watch: {n} frames: live cache holds {} frames, {} visual tokens, {} positions \
             ({} rebuilds); question forked = {}, prompt {} positions (re-encode prompt {}); \
             question prefill alone on the cache {:.2} ms; one re-encode {:.0} ms (vision \
             encoder {:.0} ms, embedding + decoder {:.0} ms)",
            live.frames,
            live.visual_tokens,
            live.cache.len(),
            rebuilds(&memory),
            a.forked,
            a.prompt_tokens,
            reencode_prompt,
            prefill_only.as_secs_f64() * 1e3,
            reencode_once.as_secs_f64() * 1e3,
            vision_s * 1e3,
            decoder_s * 1e3,
        );
        assert_eq!(live.frames, n, "the live cache must hold the whole window");
        assert!(
            a.forked && a.frames == n,
            "the question must fork the cache"
        );
        assert_eq!(
            a.prompt_tokens, reencode_prompt,
            "both paths must prefill the same prompt"
        );

        group.sampling_mode(SamplingMode::Auto);
        group.measurement_time(Duration::from_secs(2));
        group.bench_function(BenchmarkId::new("memory", n), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| ask_memory(&svc, n)).sum())
        });
        group.sampling_mode(SamplingMode::Flat);
        group.measurement_time(ten_of(reencode_once));
        group.bench_function(BenchmarkId::new("reencode", n), |b| {
            b.iter(|| ask_reencode(&g, &frames))
        });
    }
    group.finish();

    // ---- Narration step per new frame on a full window, rebuilds included.
    let mut group = c.benchmark_group(format!("{dev}/step"));
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.warm_up_time(Duration::from_millis(300));
    group.throughput(Throughput::Elements(1));
    let mut counts = Vec::new();
    for secs in STEP_WINDOWS {
        let window = secs as usize;
        let mut scene = Scene::new();
        let (mut w, memory) = watcher(&g, secs);
        w.step(&scene.take(window));
        // A rebuild comes once the cache holds more than `slack` of the window in evicted frames:
        // every `floor(slack * window) + 1` frames. Each iteration steps whole periods (>= 100).
        let period = (SLACK * window as f64).floor() as usize + 1;
        let per_iter = period * 100usize.div_ceil(period);
        // One untimed-by-criterion round: the window starts sliding, and it sizes the samples.
        let t = Instant::now();
        for f in scene.take(per_iter) {
            w.step(&[f]);
        }
        let once = t.elapsed();
        let (r0, stepped) = (rebuilds(&memory), std::cell::Cell::new(0usize));
        let rebuild_time = std::cell::Cell::new(Duration::ZERO);
        let before = g.engines().stats();
        group.measurement_time(ten_of(once));
        group.bench_function(BenchmarkId::new("window", secs), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    // Frames are made (and pruned) outside the timed part: that is ingest's work.
                    let frames = scene.take(per_iter);
                    let t = Instant::now();
                    for f in frames {
                        let count = w.live().map(|l| l.rebuilds().0);
                        w.step(&[f]);
                        if let Some((n, Some((_, d)))) = w.live().map(|l| l.rebuilds())
                            && Some(n) != count
                        {
                            rebuild_time.set(rebuild_time.get() + d);
                        }
                    }
                    total += t.elapsed();
                    stepped.set(stepped.get() + per_iter);
                }
                // Per frame, so criterion's time is the step time of one new frame.
                total / per_iter as u32
            })
        });
        let (vision_s, decoder_s) = engine_secs(&g, &before);
        let live = w.live().expect("a live cache");
        let (_, last_rebuild) = live.rebuilds();
        counts.push(StepCounts {
            vision_s,
            decoder_s,
            rebuild_s: rebuild_time.get().as_secs_f64(),
            window: secs,
            frames: stepped.get(),
            rebuilds: rebuilds(&memory) - r0,
            period,
            per_iter,
            cache_frames: live.frames(),
            positions: live.cache().len(),
            last_rebuild,
        });
    }
    group.finish();
    for s in &counts {
        eprintln!(
            "watch: step window {} s: {} rebuilds in {} frames stepped under criterion (1 per \
             {:.1}; expected 1 per {}; {} frames per iteration); last {:?}; cache now {} frames, \
             {} positions",
            s.window,
            s.rebuilds,
            s.frames,
            s.frames as f64 / s.rebuilds.max(1) as f64,
            s.period,
            s.per_iter,
            s.last_rebuild
                .map(|(r, d)| format!("{r:?} {:.1} ms", d.as_secs_f64() * 1e3)),
            s.cache_frames,
            s.positions
        );
        assert!(
            s.last_rebuild
                .is_none_or(|(r, _)| r != RebuildReason::Budget),
            "the budget must not force rebuilds"
        );
    }
    *STEP_COUNTS.lock().unwrap() = counts;
}

struct StepCounts {
    vision_s: f64,
    decoder_s: f64,
    rebuild_s: f64,
    window: u64,
    frames: usize,
    rebuilds: u64,
    period: usize,
    per_iter: usize,
    cache_frames: usize,
    positions: usize,
    last_rebuild: Option<(RebuildReason, Duration)>,
}

static STEP_COUNTS: std::sync::Mutex<Vec<StepCounts>> = std::sync::Mutex::new(Vec::new());

/// The median criterion saved for `group/function/value` during this run, in seconds.
fn median(
    group: &str,
    function: &str,
    value: impl std::fmt::Display,
    since: SystemTime,
) -> Option<f64> {
    let path = common::criterion_dir()
        .join(group.replace('/', "_"))
        .join(function)
        .join(value.to_string())
        .join("new/estimates.json");
    let fresh = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= since);
    if !fresh {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    Some(v["median"]["point_estimate"].as_f64()? * 1e-9)
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |s| format!("{:.2} ms", s * 1e3))
}

fn summary(since: SystemTime) {
    let dev = common::device();
    let ttft = format!("{dev}/ttft");
    eprintln!("\nwatch summary (criterion medians, tiny model, {dev}):");
    eprintln!("  time to first token    memory (live cache)   re-encode    re-encode / memory");
    for n in TTFT_FRAMES {
        let m = median(&ttft, "memory", n, since);
        let r = median(&ttft, "reencode", n, since);
        let ratio = m
            .zip(r)
            .map_or("-".into(), |(m, r)| format!("{:.0}x", r / m));
        eprintln!(
            "  {n:>4} frames        {:>14}   {:>14}   {ratio:>10}",
            ms(m),
            ms(r)
        );
    }
    let first = median(&ttft, "memory", TTFT_FRAMES[0], since);
    let last = median(&ttft, "memory", TTFT_FRAMES[2], since);
    if let Some((a, b)) = first.zip(last) {
        eprintln!(
            "  memory TTFT {} / {} frames: {:.2}x",
            TTFT_FRAMES[2],
            TTFT_FRAMES[0],
            b / a
        );
    }
    let step = format!("{dev}/step");
    let counts = STEP_COUNTS.lock().unwrap();
    let s: Vec<Option<f64>> = STEP_WINDOWS
        .iter()
        .map(|w| median(&step, "window", w, since))
        .collect();
    for (w, t) in STEP_WINDOWS.iter().zip(&s) {
        let c = counts.iter().find(|c| c.window == *w);
        eprintln!(
            "  step per new frame, window {w:>3} s: {:>10}  ({})",
            ms(*t),
            c.map_or("-".into(), |c| {
                let per = |s: f64| s * 1e3 / c.frames.max(1) as f64;
                format!(
                    "per frame: vision encoder {:.2} ms, embedding + decoder {:.2} ms of which \
                     rebuilds {:.2} ms ({} rebuilds in {} frames); cache {} positions",
                    per(c.vision_s),
                    per(c.decoder_s),
                    per(c.rebuild_s),
                    c.rebuilds,
                    c.frames,
                    c.positions
                )
            })
        );
    }
    if let (Some(a), Some(b)) = (s[0], s[1]) {
        eprintln!(
            "  step ratio window {} / {}: {:.2}x",
            STEP_WINDOWS[1],
            STEP_WINDOWS[0],
            b / a
        );
    }
}

/// Cache policies on the same frames: the step per new frame (mean and worst of `STEPS` frames
/// after the window is full), rebuilds, evictions and positions, for the 60-s window, the 600-s
/// window as it is, and the 600-s window held to the 60-s window's positions by each policy.
/// Plain timing (each step is milliseconds; a rebuild is the tail): the same inputs in one run.
fn policies(g: &Generator) {
    const STEPS: usize = 300;
    let dev = common::device();
    eprintln!(
        "\ncache policies (tiny model, {dev}, {STEPS} steps after the window is full, same frames):"
    );
    eprintln!(
        "  {:<34} {:>9} {:>9} {:>8} {:>9} {:>9} {:>10} {:>10} {:>7}",
        "camera",
        "mean",
        "worst",
        "rebuilds",
        "evicted",
        "thinned",
        "positions",
        "KV bytes",
        "frames"
    );
    let mut base = None;
    let mut budget = 0;
    for (label, window, policy, bounded) in [
        ("window 60 s", 60u64, CachePolicy::Window, false),
        ("window 600 s", 600, CachePolicy::Window, false),
        (
            "window 600 s, budget of 60 s",
            600,
            CachePolicy::Window,
            true,
        ),
        (
            "sink_recent 600 s, budget of 60 s",
            600,
            CachePolicy::SinkRecent,
            true,
        ),
        (
            "compress 600 s, budget of 60 s",
            600,
            CachePolicy::Compress,
            true,
        ),
    ] {
        let cache = CacheConfig {
            policy,
            budget: bounded.then_some(budget as u32),
        };
        let (mut w, memory) = watcher_with(g, window, cache);
        let mut scene = Scene::new();
        w.step(&scene.take(window as usize));
        let (r0, mut times, mut most) = (rebuilds(&memory), Vec::with_capacity(STEPS), 0);
        for f in scene.take(STEPS) {
            let t = Instant::now();
            w.step(&[f]);
            times.push(t.elapsed());
            most = most.max(w.live().map_or(0, |l| l.cache().len()));
        }
        let live = w.live().expect("a live cache");
        // Time to a question's first token on this cache (prefill of the question, one step).
        let hidden = g.engines().decoder().hidden();
        let ask = videollama3::stream_ask(Role::User, "What is moving?");
        let prompt = ask.prompt(&[], hidden).expect("question prompt");
        let ttft = (0..5)
            .map(|_| {
                let t = Instant::now();
                let mut d = g
                    .start(
                        live.cache(),
                        &prompt,
                        &edgevlm::generate::GenerateOptions::default(),
                    )
                    .expect("start");
                let _ = d.next_token().expect("first token");
                t.elapsed()
            })
            .min()
            .unwrap_or_default();
        if window == 60 {
            // The 60-s window's most positions (with its slack of stale frames) is the bound.
            budget = most;
        }
        let mean = times.iter().sum::<Duration>() / STEPS as u32;
        let worst = times.iter().max().copied().unwrap_or_default();
        let (base_mean, base_ttft) = *base.get_or_insert((mean, ttft));
        eprintln!(
            "  {label:<34} {:>7.2}ms {:>7.1}ms {:>8} {:>9} {:>9} {:>10} {:>10} {:>7}   step {:.2}x, first token {:.2} ms ({:.2}x) of 60 s",
            mean.as_secs_f64() * 1e3,
            worst.as_secs_f64() * 1e3,
            rebuilds(&memory) - r0,
            live.evictions().frames,
            live.evictions().tokens,
            most,
            live.cache().bytes(),
            live.frames(),
            mean.as_secs_f64() / base_mean.as_secs_f64(),
            ttft.as_secs_f64() * 1e3,
            ttft.as_secs_f64() / base_ttft.as_secs_f64()
        );
    }
}

fn main() {
    let since = SystemTime::now();
    if std::env::args().any(|a| a == "--policies") {
        // Only the policy table: `cargo bench --bench watch -- --policies`.
        policies(&generator());
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    summary(since);
    policies(&generator());
}
