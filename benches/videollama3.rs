//! edgevlm against transformers on the reduced VideoLLaMA3 (the "Measure" section of the
//! VideoLLaMA3 issue): the decode step, time to first token, and a question over 60 and 180 frames
//! answered from memory against re-encoding the window per request.
//!
//! ```text
//! scripts/videollama3-parity.sh        # once: target/videollama3-reduced/{checkpoint,model,parity}
//! .venv-export/bin/python engines/videollama3/bench_reference.py      # transformers' side (JSON)
//! cargo bench --bench videollama3 -- --warm-up-time 1 --measurement-time 5
//! ```
//!
//! `target/videollama3-reduced/model` (the reduced checkpoint exported to the engine contract;
//! `EDGEVLM_VIDEOLLAMA3_PARITY` names another root) on ONNX Runtime's CPU provider with one
//! intra-op thread (`EDGEVLM_BENCH_THREADS` overrides); names carry the device (`cpu1/...`). The
//! frames are the parity clip "moving" (8 decoded 1280x720 frames, resized by edgevlm to 364x196,
//! 91 tokens per frame) and what is synthesised from it.
//!
//! - `vision/{1,4}`: the vision encoder alone on one and four of the clip's resized frames, every
//!   token kept (frames per second for the families table of the README).
//! - `decode_step/cache_300`: one greedy step of the runtime's decode loop (`Decoding::next_token`
//!   feeding the token sampled before: embedding, decoder, argmax) with 299 positions cached, so
//!   the step attends over 300. The cache is the clip's offline prompt padded with text tokens.
//! - `ttft/offline/8`: a request that re-encodes the clip: resize the 8 source frames, DiffFP,
//!   the vision encoder, the offline prompt (`family::videollama3::offline`, the processor's), prefill and
//!   the first token.
//! - `ttft/memory/{60,180}`: a question on a live cache that already holds N frames (built outside
//!   the timed part, frame by frame through `LiveCache::append`): fork, prefill the question
//!   (`family::videollama3::stream_ask`), first token.
//! - `ttft/reencode/{60,180}`: what the reference pipelines do per request on the same N frames
//!   (already resized and pruned, as the ring holds them): the vision encoder on all N, the
//!   offline prompt, prefill from an empty cache, first token.
//! - `prefill/{60,180}`: the prefill part of `reencode` alone (the N frames' features already
//!   encoded): the offline prompt from an empty cache to its first token, as tokens per second.
//!
//! The N frames cycle the clip's resized frames with fresh sequence numbers and 1 fps timestamps,
//! pruned by DiffFP in sequence (the jump from the last frame back to the first keeps more
//! tokens); the geometry stays the clip's. bench_reference.py runs the same quantities in
//! transformers (processor + `generate(max_new_tokens=1)`, the processor told to keep that
//! geometry); when its JSON is there, the summary at the end prints both and the ratios, of the
//! medians and of the fastest samples (on a shared machine, contention only adds time).

mod common;

use criterion::{BenchmarkId, Criterion, SamplingMode};
use edgevlm::engine::{EngineOptions, Engines};
use edgevlm::family::videollama3;
use edgevlm::generate::render::{FrameSlot, Role};
use edgevlm::generate::{GenerateOptions, Generator, KvCache, Prompt};
use edgevlm::ingest::Resizer;
use edgevlm::memory::{FrameEncoder, LiveCache, LiveOptions, MemoryFrame};
use edgevlm::prune::{PruneParams, Pruner};
use edgevlm::ring::{Frame, TokenMask};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

const CLIP: &str = "moving";
/// Question windows (frames at 1 fps).
const WINDOWS: [usize; 2] = [60, 180];
/// Positions the decode step attends over (cached + the token fed).
const DECODE_CACHE: usize = 300;

fn root() -> PathBuf {
    std::env::var_os("EDGEVLM_VIDEOLLAMA3_PARITY")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/videollama3-reduced"))
}

#[derive(serde::Deserialize)]
struct Case {
    frames: usize,
    source_width: u32,
    source_height: u32,
    width: u32,
    height: u32,
    hidden: usize,
    system: String,
    question: String,
    offline_ids: Vec<u32>,
    offline_tokens: Vec<u32>,
}

struct Fixture {
    generator: Generator,
    case: Case,
    /// The clip's decoded source frames.
    source: Vec<Vec<u8>>,
}

fn fixture() -> Fixture {
    let root = root();
    let dir = root.join("parity").join(CLIP);
    let missing = |what: &Path, e: std::io::Error| -> ! {
        panic!(
            "{}: {e}. The reduced VideoLLaMA3 and its fixtures are built by \
             scripts/videollama3-parity.sh (under target/videollama3-reduced/)",
            what.display()
        )
    };
    let case_path = dir.join("case.json");
    let text = std::fs::read_to_string(&case_path).unwrap_or_else(|e| missing(&case_path, e));
    let case: Case = serde_json::from_str(&text).expect("case.json parses");
    let frames_path = dir.join("frames.rgb");
    let bytes = std::fs::read(&frames_path).unwrap_or_else(|e| missing(&frames_path, e));
    let frame_len = (case.source_width * case.source_height * 3) as usize;
    assert_eq!(bytes.len(), frame_len * case.frames, "frames.rgb size");
    let source = bytes.chunks_exact(frame_len).map(<[u8]>::to_vec).collect();
    let model = root.join("model");
    if let Err(e) = std::fs::metadata(model.join("manifest.toml")) {
        missing(&model.join("manifest.toml"), e);
    }
    let mut opts = EngineOptions::cpu(&model);
    opts.engine.threads = (common::threads()) as u32;
    let engines = Engines::load(&opts).expect("the exported model loads");
    Fixture {
        generator: Generator::new(Arc::new(engines)),
        case,
        source,
    }
}

fn one_token() -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: 1,
        ..GenerateOptions::default()
    }
}

/// Token ids that pad a prompt to a length (the same rule as bench_reference.py).
fn filler(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 7919) % 5000 + 100).collect()
}

/// A ring frame as ingest makes it: resized RGB with its DiffFP mask; `i` seconds at 1 fps.
fn ring_frame(case: &Case, i: usize, rgb: Vec<u8>, pruner: &mut Pruner) -> Arc<Frame> {
    let d = pruner.push(&rgb, (case.width * 3) as usize).expect("prune");
    let tokens = Some(TokenMask::from_decision(d));
    Arc::new(Frame {
        camera: Arc::from(CLIP),
        seq: i as u64,
        pts: Duration::from_secs(i as u64),
        wall_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + i as u64),
        width: case.width,
        height: case.height,
        rgb: rgb.into_boxed_slice(),
        tokens,
    })
}

fn pruner(case: &Case) -> Pruner {
    Pruner::new(
        case.width as usize,
        case.height as usize,
        PruneParams::default(),
    )
    .expect("pruner")
}

/// The offline question over memory frames, prefilled from an empty cache: the first token and
/// the prompt's positions.
fn ask_offline(g: &Generator, case: &Case, mem: &[MemoryFrame]) -> (u32, usize) {
    let slots: Vec<FrameSlot> = mem
        .iter()
        .map(|f| FrameSlot {
            time_secs: f.pts.as_secs_f64(),
            kept: f.kept(),
        })
        .collect();
    let rows: Vec<&[f32]> = mem.iter().map(|f| &f.tokens[..]).collect();
    let offline = videollama3::offline(&slots, &case.question, Some(&case.system)).expect("render");
    let prompt = offline.prompt(&rows, case.hidden).expect("prompt");
    let empty = g.empty_cache().expect("cache");
    first_token(g, &empty, &prompt)
}

fn first_token(g: &Generator, cache: &KvCache, prompt: &Prompt<'_>) -> (u32, usize) {
    let mut d = g.start(cache, prompt, &one_token()).expect("prefill");
    let id = d.next_token().expect("decode").expect("a token").id;
    let n = d.finish().prompt_tokens;
    (black_box(id), n)
}

/// The clip's source frames resized to its geometry, as ingest hands them on.
fn resized(f: &Fixture, resizer: &mut Resizer) -> Vec<Vec<u8>> {
    let stride = (f.case.source_width * 3) as usize;
    f.source
        .iter()
        .map(|src| {
            let mut rgb = vec![0u8; resizer.dst_len()];
            resizer.resize(src, stride, &mut rgb).expect("resize");
            rgb
        })
        .collect()
}

/// The clip's source frames as a request that re-encodes them sees them: resized, DiffFP (from a
/// fresh state), the vision encoder.
fn clip_memory(f: &Fixture, resizer: &mut Resizer, pr: &mut Pruner) -> Vec<MemoryFrame> {
    pr.reset();
    let frames: Vec<Arc<Frame>> = resized(f, resizer)
        .into_iter()
        .enumerate()
        .map(|(i, rgb)| ring_frame(&f.case, i, rgb, pr))
        .collect();
    FrameEncoder::new()
        .encode(f.generator.engines().vision(), &frames)
        .expect("encode")
}

/// A request that re-encodes the clip from its source frames.
fn offline_request(f: &Fixture, resizer: &mut Resizer, pr: &mut Pruner) -> (u32, usize) {
    let mem = clip_memory(f, resizer, pr);
    ask_offline(&f.generator, &f.case, &mem)
}

/// The reference pipelines' request over ring frames: encode them all, prompt, prefill, 1 token.
fn reencode_request(f: &Fixture, frames: &[Arc<Frame>]) -> (u32, usize) {
    let mem = FrameEncoder::new()
        .encode(f.generator.engines().vision(), frames)
        .expect("encode");
    ask_offline(&f.generator, &f.case, &mem)
}

/// A question on the live cache: fork, prefill the question, first token.
fn memory_request(f: &Fixture, live: &LiveCache) -> (u32, usize) {
    let fork = live.cache().fork();
    let ask = videollama3::stream_ask(Role::User, &f.case.question);
    let prompt = ask.prompt(&[], f.case.hidden).expect("ask");
    first_token(&f.generator, &fork, &prompt)
}

fn median_of(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time_once<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let t = Instant::now();
    let out = f();
    (t.elapsed(), out)
}

fn bench(c: &mut Criterion) {
    let f = fixture();
    let g = &f.generator;
    let case = &f.case;
    let dev = common::device();
    let mut resizer = Resizer::new(
        case.source_width,
        case.source_height,
        case.width,
        case.height,
    )
    .expect("resizer");
    let mut pr = pruner(case);

    // ---- The vision encoder alone: the clip's first frames resized, every token kept (each the
    // first frame of a fresh pruner, which keeps it whole).
    let clip = resized(&f, &mut resizer);
    let mut group = c.benchmark_group(format!("{dev}/vision"));
    group.sample_size(20);
    let whole: Vec<Arc<Frame>> = clip
        .iter()
        .take(4)
        .enumerate()
        .map(|(i, rgb)| ring_frame(case, i, rgb.clone(), &mut pruner(case)))
        .collect();
    assert!(whole.iter().all(|fr| {
        let t = fr.tokens.as_ref().expect("a mask");
        t.kept == t.keep.len()
    }));
    for k in [1, 4] {
        let frames = &whole[..k];
        group.bench_function(BenchmarkId::from_parameter(k), |b| {
            b.iter(|| {
                FrameEncoder::new()
                    .encode(g.engines().vision(), frames)
                    .expect("encode")
            })
        });
    }
    group.finish();

    // ---- Decode step at DECODE_CACHE positions: the clip's offline prompt (its frames' features)
    // padded with text to DECODE_CACHE - 2 positions; each iteration prefills one more filler token
    // and takes the first token (untimed), then the timed step feeds it at DECODE_CACHE - 1.
    // bench_reference.py caches the same DECODE_CACHE - 1 positions.
    let offline_len = case.offline_ids.len();
    let pad = filler(DECODE_CACHE - 1 - offline_len);
    let base = {
        let mem = clip_memory(&f, &mut resizer, &mut pr);
        let slots: Vec<FrameSlot> = mem
            .iter()
            .map(|m| FrameSlot {
                time_secs: m.pts.as_secs_f64(),
                kept: m.kept(),
            })
            .collect();
        let rows: Vec<&[f32]> = mem.iter().map(|m| &m.tokens[..]).collect();
        let offline =
            videollama3::offline(&slots, &case.question, Some(&case.system)).expect("render");
        let mut p = offline.prompt(&rows, case.hidden).expect("prompt");
        p.tokens(&pad[..pad.len() - 1]);
        g.prefill(&g.empty_cache().unwrap(), &p)
            .expect("prefill")
            .cache
    };
    assert_eq!(base.len(), DECODE_CACHE - 2);
    let greedy2 = GenerateOptions {
        max_new_tokens: 2,
        stop_tokens: Some(Vec::new()),
        ..GenerateOptions::default()
    };
    let feed = [pad[pad.len() - 1]];
    let step = |iters: u64| {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let mut d = g
                .start(&base, Prompt::new().tokens(&feed[..]), &greedy2)
                .expect("prefill");
            d.next_token().expect("first").expect("a token");
            assert_eq!(d.cache().len(), DECODE_CACHE - 1);
            let t = Instant::now();
            black_box(d.next_token().expect("step").expect("a token"));
            total += t.elapsed();
            debug_assert_eq!(d.cache().len(), DECODE_CACHE);
        }
        total
    };
    let mut group = c.benchmark_group(format!("{dev}/decode_step"));
    group.sample_size(50);
    group.bench_function(format!("cache_{DECODE_CACHE}"), |b| b.iter_custom(step));
    group.finish();

    // ---- Time to first token.
    let mut group = c.benchmark_group(format!("{dev}/ttft"));
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    let (once, (id, n)) = time_once(|| offline_request(&f, &mut resizer, &mut pr));
    assert_eq!(
        id, case.offline_tokens[0],
        "edgevlm's first token differs from transformers'"
    );
    eprintln!(
        "videollama3: offline {} frames: prompt {n} positions, first token {id} (transformers' \
         {}), one request {:.1} ms",
        case.frames,
        case.offline_tokens[0],
        once.as_secs_f64() * 1e3
    );
    group.bench_function(BenchmarkId::new("offline", case.frames), |b| {
        b.iter(|| offline_request(&f, &mut resizer, &mut pr))
    });

    // Windows cycle the clip's resized frames.
    for n in WINDOWS {
        let mut pr = pruner(case);
        let frames: Vec<Arc<Frame>> = (0..n)
            .map(|i| ring_frame(case, i, clip[i % clip.len()].clone(), &mut pr))
            .collect();
        let kept: usize = frames
            .iter()
            .map(|fr| fr.tokens.as_ref().unwrap().kept)
            .sum();
        // The live cache, frame by frame as a camera's memory worker builds it.
        let mut encoder = FrameEncoder::new();
        let (build, live) = time_once(|| {
            let mut mem: Vec<Arc<MemoryFrame>> = Vec::with_capacity(n);
            let mut live = LiveCache::new(
                g,
                LiveOptions {
                    system: Some(case.system.clone()),
                    budget: g.engines().decoder().max_context(),
                    slack: 0.25,
                    window_frames: n,
                    policy: Default::default(),
                },
            )
            .expect("live cache");
            for fr in &frames {
                let m = encoder
                    .encode(g.engines().vision(), std::slice::from_ref(fr))
                    .expect("encode")
                    .remove(0);
                mem.push(Arc::new(m));
                let last = mem.len() - 1;
                let rebuilt = live.append(g, &mem, &mem[last..]).expect("append");
                assert_eq!(rebuilt, None, "frame {last} was appended, not rebuilt");
            }
            live
        });
        assert_eq!(live.frames(), n);
        let (mem_once, (mem_id, mem_n)) = time_once(|| memory_request(&f, &live));
        let (re_once, (re_id, re_n)) = time_once(|| reencode_request(&f, &frames));
        let prefill_times: Vec<Duration> = (0..5)
            .map(|_| time_once(|| memory_request(&f, &live)).0)
            .collect();
        eprintln!(
            "videollama3: {n} frames: {kept} kept tokens; live cache {} positions (built in \
             {:.0} ms); memory: question {mem_n} positions, first token {mem_id}, {:.1} ms (median \
             of 5 {:.1} ms); re-encode: prompt {re_n} positions, first token {re_id}, {:.0} ms",
            live.cache().len(),
            build.as_secs_f64() * 1e3,
            mem_once.as_secs_f64() * 1e3,
            median_of(prefill_times).as_secs_f64() * 1e3,
            re_once.as_secs_f64() * 1e3,
        );
        group.sampling_mode(SamplingMode::Auto);
        group.bench_function(BenchmarkId::new("memory", n), |b| {
            b.iter(|| memory_request(&f, &live))
        });
        group.sampling_mode(SamplingMode::Flat);
        group.bench_function(BenchmarkId::new("reencode", n), |b| {
            b.iter(|| reencode_request(&f, &frames))
        });
        let mem = FrameEncoder::new()
            .encode(g.engines().vision(), &frames)
            .expect("encode");
        group.bench_function(BenchmarkId::new("prefill", n), |b| {
            b.iter(|| ask_offline(g, case, &mem))
        });
    }
    group.finish();
}

/// The median and the fastest sample (ms per iteration) criterion saved for
/// `group/function[/value]` during this run.
fn measured(group: &str, path: &str, since: SystemTime) -> Option<(f64, f64)> {
    let dir = common::criterion_dir()
        .join(group.replace('/', "_"))
        .join(path)
        .join("new");
    let fresh = std::fs::metadata(dir.join("estimates.json"))
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= since);
    if !fresh {
        return None;
    }
    let read = |name: &str| -> Option<serde_json::Value> {
        serde_json::from_slice(&std::fs::read(dir.join(name)).ok()?).ok()
    };
    let median = read("estimates.json")?["median"]["point_estimate"].as_f64()? * 1e-6;
    let sample = read("sample.json")?;
    let (iters, times) = (sample["iters"].as_array()?, sample["times"].as_array()?);
    let min = iters
        .iter()
        .zip(times)
        .filter_map(|(i, t)| Some(t.as_f64()? / i.as_f64()?))
        .fold(f64::INFINITY, f64::min)
        * 1e-6;
    Some((median, min))
}

fn summary(since: SystemTime) {
    let dev = common::device();
    let reference: Option<serde_json::Value> = std::fs::read(root().join("bench_reference.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let r = |p: &str, min: &str| {
        let v = reference.as_ref()?;
        Some((v.pointer(p)?.as_f64()?, v.pointer(min)?.as_f64()?))
    };
    let cell = |v: Option<(f64, f64)>| v.map_or("-".into(), |(m, l)| format!("{m:.2} ({l:.2})"));
    let ratio = |a: Option<(f64, f64)>, b: Option<(f64, f64)>| {
        a.zip(b).map_or("-".into(), |(a, b)| {
            format!("{:.1}x ({:.1}x)", b.0 / a.0, b.1 / a.1)
        })
    };
    eprintln!(
        "\nvideollama3 summary, ms: median (fastest), reduced model, {dev}; transformers from \
         bench_reference.json{}:",
        if reference.is_some() {
            ""
        } else {
            " (missing: run engines/videollama3/bench_reference.py)"
        }
    );
    eprintln!(
        "  {:30} {:>18} {:>20} {:>22}",
        "", "edgevlm", "transformers", "transformers/edgevlm"
    );
    let row = |name: String, e: Option<(f64, f64)>, t: Option<(f64, f64)>| {
        eprintln!(
            "  {name:30} {:>18} {:>20} {:>22}",
            cell(e),
            cell(t),
            ratio(e, t)
        )
    };
    row(
        format!("decode step, {DECODE_CACHE} positions"),
        measured(
            &format!("{dev}/decode_step"),
            &format!("cache_{DECODE_CACHE}"),
            since,
        ),
        r("/decode_step_ms", "/decode_step_min_ms"),
    );
    for k in [1, 4] {
        if let Some((m, l)) = measured(&format!("{dev}/vision"), &k.to_string(), since) {
            eprintln!(
                "  vision encoder, {k} frame(s)      {m:.2} ({l:.2}) ms: {:.0} frames/s median",
                k as f64 * 1e3 / m
            );
        }
    }
    let ttft = format!("{dev}/ttft");
    for n in WINDOWS {
        if let Some((m, l)) = measured(&ttft, &format!("prefill/{n}"), since) {
            eprintln!("  prefill of the {n}-frame prompt  {m:.2} ({l:.2}) ms");
        }
    }
    row(
        "ttft offline, 8 frames".into(),
        measured(&ttft, "offline/8", since),
        r("/ttft_offline/ms", "/ttft_offline/min_ms"),
    );
    for n in WINDOWS {
        let t = r(
            &format!("/ttft_reencode/{n}/ms"),
            &format!("/ttft_reencode/{n}/min_ms"),
        );
        row(
            format!("ttft {n} frames, memory"),
            measured(&ttft, &format!("memory/{n}"), since),
            t,
        );
        row(
            format!("ttft {n} frames, re-encode"),
            measured(&ttft, &format!("reencode/{n}"), since),
            t,
        );
    }
}

fn main() {
    let since = SystemTime::now();
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    summary(since);
}
