//! Watching, end to end on the tiny model: frames pruned by the real DiffFP, encoded once into
//! memory, the live KV cache extended incrementally, narration triggers, and questions answered
//! from memory (issue "Watching").

mod engine_common;

use edgevlm::base::Clock;
use edgevlm::config::SnapshotConfig;
use edgevlm::config::{CameraConfig, NarrateConfig, NarrateTriggers, QueryConfig, SourceUri};
use edgevlm::evidence::{Snapshotter, picture};
use edgevlm::family::videollama3;
use edgevlm::generate::render::{self, FrameSlot, Role};
use edgevlm::generate::{GenerateOptions, Generator, KvCache};
use edgevlm::memory::{CameraMemory, FrameEncoder, LiveCache, MemoryFrame};
use edgevlm::narrate::{EventType, Trigger};
use edgevlm::prune::{PruneParams, Pruner};
use edgevlm::query::ErrorCode;
use edgevlm::query::{AskLimits, AskRequest, QueryService};
use edgevlm::ring::{Frame, TokenMask};
use edgevlm::watch::{CameraWatch, Outputs, WatchOptions};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const W: usize = 336;
const H: usize = 196;
const SYSTEM: &str = "You are a helpful assistant.";

/// A synthetic camera: a fixed background, moving boxes drawn on it, pruned by the real DiffFP,
/// with stream and wall clocks driven by the test.
struct Scene {
    pruner: Pruner,
    seq: u64,
}

impl Scene {
    fn new() -> Scene {
        Scene {
            pruner: Pruner::new(W, H, PruneParams::default()).unwrap(),
            seq: 0,
        }
    }

    /// A frame at `secs` with boxes `(x, y, size)`.
    fn frame(&mut self, secs: f64, boxes: &[(usize, usize, usize)]) -> Arc<Frame> {
        let mut rgb = vec![0u8; W * H * 3];
        for y in 0..H {
            for x in 0..W {
                let i = (y * W + x) * 3;
                rgb[i] = (x * 255 / W) as u8;
                rgb[i + 1] = (y * 255 / H) as u8;
                rgb[i + 2] = 96;
            }
        }
        for &(bx, by, size) in boxes {
            for y in by..(by + size).min(H) {
                for x in bx..(bx + size).min(W) {
                    let i = (y * W + x) * 3;
                    rgb[i..i + 3].copy_from_slice(&[250, 250, 20]);
                }
            }
        }
        let decision = self.pruner.push(&rgb, W * 3).unwrap();
        let tokens = Some(TokenMask::from_decision(decision));
        let seq = self.seq;
        self.seq += 1;
        Arc::new(Frame {
            camera: "cam".into(),
            seq,
            pts: Duration::from_secs_f64(secs),
            wall_time: SystemTime::UNIX_EPOCH + Duration::from_secs_f64(1.7e9 + secs),
            width: W as u32,
            height: H as u32,
            rgb: rgb.into_boxed_slice(),
            tokens,
        })
    }

    /// `n` frames at 1 fps from `t0`, a small box moving right by a token per frame.
    fn moving(&mut self, t0: u64, n: u64) -> Vec<Arc<Frame>> {
        (0..n)
            .map(|i| {
                let x = ((t0 + i) as usize * 28) % (W - 56);
                self.frame((t0 + i) as f64, &[(x, 56, 40)])
            })
            .collect()
    }
}

fn encode(generator: &Generator, frames: &[Arc<Frame>]) -> Vec<Arc<MemoryFrame>> {
    FrameEncoder::new()
        .encode(generator.engines().vision(), frames)
        .unwrap()
        .into_iter()
        .map(Arc::new)
        .collect()
}

fn camera(window_secs: u64, narrate: NarrateConfig) -> CameraConfig {
    let mut c = CameraConfig::new("cam", SourceUri::parse("test://ball").unwrap());
    c.window = Duration::from_secs(window_secs);
    c.narrate = narrate;
    c
}

fn live_options(budget: usize, window_frames: usize) -> edgevlm::memory::LiveOptions {
    edgevlm::memory::LiveOptions {
        system: Some(SYSTEM.into()),
        budget,
        slack: 0.25,
        window_frames,
        policy: Default::default(),
    }
}

/// The reference render of `frames` as one stream (system turn first) and their visual rows.
fn full_stream(frames: &[Arc<MemoryFrame>]) -> (render::Rendered, Vec<&[f32]>) {
    let slots: Vec<FrameSlot> = frames
        .iter()
        .map(|f| FrameSlot {
            time_secs: f.pts.as_secs_f64(),
            kept: f.kept(),
        })
        .collect();
    let full = videollama3::stream(&slots, &[], Some(SYSTEM)).unwrap();
    (full, frames.iter().map(|f| &f.tokens[..]).collect())
}

fn greedy(
    generator: &Generator,
    cache: &KvCache,
    prompt: &edgevlm::generate::Prompt<'_>,
) -> Vec<u32> {
    let opts = GenerateOptions {
        max_new_tokens: 12,
        ..GenerateOptions::default()
    };
    generator
        .generate(cache, prompt, &opts, |_| {})
        .unwrap()
        .tokens
}

#[test]
fn the_live_cache_items_render_the_reference_stream_text() {
    let frames = [
        FrameSlot {
            time_secs: 0.0,
            kept: 3,
        },
        FrameSlot {
            time_secs: 1.0,
            kept: 1,
        },
        FrameSlot {
            time_secs: 2.0,
            kept: 2,
        },
    ];
    let full = videollama3::stream(&frames, &[], Some(SYSTEM))
        .unwrap()
        .text();
    let mut incremental = videollama3::stream_prefix(Some(SYSTEM)).text();
    for f in &frames {
        incremental.push_str(&videollama3::stream_frame(f.kept, None).unwrap().text());
    }
    assert_eq!(incremental, full);
    let ask = videollama3::stream_ask(Role::User, "What moved?").text();
    assert_eq!(
        ask,
        "<|im_start|>user\nWhat moved?<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn incremental_prefill_gives_the_same_tokens_as_a_full_prefill() {
    let generator = engine_common::generator();
    let hidden = generator.engines().decoder().hidden();
    let mut scene = Scene::new();
    let frames = scene.moving(0, 8);
    let mem_frames = encode(&generator, &frames);
    assert!(
        mem_frames[1..].iter().any(|f| f.kept() < f.total),
        "DiffFP pruned nothing"
    );

    // Incremental: one frame at a time onto the live cache, as the worker does.
    let mut memory = edgevlm::memory::Memory::new(Duration::from_secs(60), 61);
    let mut live = LiveCache::new(&generator, live_options(3000, 60)).unwrap();
    for f in &mem_frames {
        memory.push(f.clone());
        assert_eq!(
            live.append(
                &generator,
                &memory.frames().iter().cloned().collect::<Vec<_>>(),
                std::slice::from_ref(f)
            )
            .unwrap(),
            None
        );
    }
    assert_eq!(live.frames(), 8);

    // Full: the reference render of the same frames, prefilled from an empty cache.
    let (full, rows) = full_stream(&mem_frames);
    let empty = generator.empty_cache().unwrap();
    let prefill = generator
        .prefill(&empty, &full.prompt(&rows, hidden).unwrap())
        .unwrap();
    assert_eq!(prefill.cache.len(), live.cache().len(), "same positions");
    let max_diff = prefill
        .logits
        .iter()
        .zip(live.logits())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        max_diff < 1e-3,
        "logits after the frames differ by {max_diff}"
    );

    // The same question on both caches gives the same greedy answer.
    let ask = videollama3::stream_ask(Role::User, "What moved?");
    let q = ask.prompt(&[], hidden).unwrap();
    let a = greedy(&generator, live.cache(), &q);
    let b = greedy(&generator, &prefill.cache, &q);
    assert!(!a.is_empty());
    assert_eq!(a, b);
}

#[test]
fn identical_frames_reuse_the_previous_features_without_an_encoder_run() {
    let generator = engine_common::generator();
    let mut scene = Scene::new();
    let still: Vec<Arc<Frame>> = (0..5)
        .map(|i| scene.frame(i as f64, &[(100, 50, 40)]))
        .collect();
    assert!(
        still[1..]
            .iter()
            .all(|f| f.tokens.as_ref().unwrap().identical)
    );
    let before = generator.engines().stats();
    let mut enc = FrameEncoder::new();
    let out = enc.encode(generator.engines().vision(), &still).unwrap();
    let after = generator.engines().stats();
    assert_eq!(
        after.vision_frames - before.vision_frames,
        1,
        "only the first frame is encoded"
    );
    assert!(!out[0].reused && out[1..].iter().all(|f| f.reused));
    // Reused features are exactly what the encoder gives for that frame.
    let fresh = FrameEncoder::new()
        .encode(generator.engines().vision(), &still[4..5])
        .unwrap();
    let keep = still[4].tokens.as_ref().unwrap();
    let hidden = generator.engines().decoder().hidden();
    let kept_fresh: Vec<f32> = fresh[0]
        .tokens
        .chunks_exact(hidden)
        .zip(keep.keep.iter())
        .filter(|(_, k)| **k)
        .flat_map(|(r, _)| r.iter().copied())
        .collect();
    assert_eq!(&out[4].tokens[..], &kept_fresh[..]);
}

fn watcher(
    generator: &Generator,
    window_secs: u64,
    narrate: NarrateConfig,
    budget: usize,
) -> (CameraWatch, Arc<CameraMemory>, Outputs) {
    watcher_with(generator, window_secs, narrate, budget, Outputs::new(None))
}

fn watcher_with(
    generator: &Generator,
    window_secs: u64,
    narrate: NarrateConfig,
    budget: usize,
    outputs: Outputs,
) -> (CameraWatch, Arc<CameraMemory>, Outputs) {
    watcher_of(generator, camera(window_secs, narrate), budget, outputs)
}

/// A watcher of `cam` with the test's system turn and slack.
fn watcher_of(
    generator: &Generator,
    cam: CameraConfig,
    budget: usize,
    outputs: Outputs,
) -> (CameraWatch, Arc<CameraMemory>, Outputs) {
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
            budget,
            slack: 0.25,
            poll: Duration::from_millis(50),
        },
        outputs.clone(),
    );
    (w, memory, outputs)
}

fn quiet() -> NarrateConfig {
    NarrateConfig {
        triggers: NarrateTriggers::default(),
        ..NarrateConfig::default()
    }
}

#[test]
fn memory_and_cache_stay_bounded_over_a_long_run() {
    let generator = engine_common::generator();
    let (mut w, memory, _) = watcher(&generator, 20, quiet(), 3000);
    let mut scene = Scene::new();
    let mut t = 0u64;
    let mut max_positions = 0;
    // 10 simulated minutes at 1 fps: motion for 5 s out of every 15, stillness otherwise.
    while t < 600 {
        let f = if t % 15 < 5 {
            scene.moving(t, 1).remove(0)
        } else {
            scene.frame(t as f64, &[(0, 0, 28)])
        };
        w.step(&[f]);
        let (frames, bytes) = memory.size();
        assert!(frames <= 21, "memory holds {frames} frames at t={t}");
        assert!(
            bytes <= 21 * 84 * 64 * 4 + 21 * 84,
            "memory holds {bytes} bytes"
        );
        let live = w.live().unwrap();
        max_positions = max_positions.max(live.cache().len());
        // Stale frames in the cache never exceed the slack: 25 % of 21 window frames.
        assert!(
            live.frames() <= 21 + 5,
            "cache holds {} frames",
            live.frames()
        );
        t += 1;
    }
    let stats = &memory.stats;
    let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(get(&stats.frames_encoded) + get(&stats.frames_reused), 600);
    assert!(
        get(&stats.frames_reused) > 300,
        "static frames reuse features"
    );
    // Rebuilds happen once per ~slack of the window (5 frames), not per frame.
    let rebuilds = get(&stats.rebuilds);
    assert!((90..=130).contains(&rebuilds), "{rebuilds} rebuilds");
    assert!(max_positions <= 3000);
    assert_eq!(get(&stats.errors), 0);
}

#[test]
fn the_context_budget_bounds_the_cache_by_rebuilding_with_the_newest_frames() {
    let generator = engine_common::generator();
    let (mut w, _, _) = watcher(&generator, 600, quiet(), 400);
    let mut scene = Scene::new();
    let mut rebuilt_to = Vec::new();
    let mut rebuilds = 0;
    for t in 0..40 {
        let f = scene.frame(t as f64, &[(((t * 56) % 280) as usize, 0, 150)]);
        w.step(&[f]);
        let live = w.live().unwrap();
        assert!(
            live.cache().len() <= 400,
            "cache {} > budget",
            live.cache().len()
        );
        let (count, last) = live.rebuilds();
        if count > rebuilds {
            rebuilds = count;
            if let Some((edgevlm::memory::RebuildReason::Budget, _)) = last {
                rebuilt_to.push(live.cache().len());
            }
        }
    }
    assert!(!rebuilt_to.is_empty(), "the budget never forced a rebuild");
    // A rebuild leaves a slack's worth of room (75 % of the budget).
    assert!(rebuilt_to.iter().all(|n| *n <= 300), "{rebuilt_to:?}");
}

#[test]
fn a_change_event_gives_one_narration_linked_to_its_event_and_each_a_snapshot_of_its_frame() {
    let generator = engine_common::generator();
    let narrate = NarrateConfig {
        triggers: NarrateTriggers {
            change: true,
            ..NarrateTriggers::default()
        },
        max_tokens: 6,
        watch_for: Some("a yellow box".into()),
        ..NarrateConfig::default()
    };
    let snapshots = Snapshotter::start(
        SnapshotConfig {
            max_width: W as u32 / 2,
            ..SnapshotConfig::default()
        },
        None,
    )
    .unwrap();
    let mut encoded = snapshots.subscribe();
    let outputs = Outputs::new(None).with_snapshots(snapshots.clone());
    let (mut w, _, outputs) = watcher_with(&generator, 60, narrate, 3000, outputs);
    let mut narrations = outputs.narrations.subscribe();
    let mut events = outputs.events.subscribe();
    let mut scene = Scene::new();
    let big = |t: u64| [((t as usize * 84) % 168, 0, 168)];
    let active = |t: u64| (10..16).contains(&t) || (25..31).contains(&t);
    for t in 0..40u64 {
        // Quiet, a big moving object for 6 s (twice), quiet again.
        let f = if active(t) {
            scene.frame(t as f64, &big(t))
        } else {
            scene.frame(t as f64, &[])
        };
        w.step(&[f]);
    }
    let mut got = Vec::new();
    while let Ok(n) = narrations.try_recv() {
        got.push(n);
    }
    let mut ev = Vec::new();
    while let Ok(e) = events.try_recv() {
        ev.push(e);
    }
    assert_eq!(
        ev.iter().map(|e| e.kind).collect::<Vec<_>>(),
        [
            EventType::New,
            EventType::Update,
            EventType::End,
            EventType::New,
            EventType::Update,
            EventType::End
        ],
        "{ev:?}"
    );
    assert_eq!(got.len(), 2, "{got:?}");
    for (i, (n, start)) in got.iter().zip([11.0, 26.0]).enumerate() {
        assert_eq!(n.trigger, Trigger::Change);
        assert_eq!(n.camera, "cam");
        assert_eq!(
            n.stream_end_secs, start,
            "narrated when the change was confirmed"
        );
        assert!(n.generated_tokens >= 1 && n.generated_tokens <= 6);
        assert!(
            n.frames as f64 >= start,
            "the model saw the footage up to the change"
        );
        assert_eq!(
            n.window_start_secs, 0.0,
            "the window starts at the first frame"
        );
        assert_eq!(n.window_end_secs, start);
        assert!(n.first_token_ms <= n.total_ms);
        // One id links the event's messages and its narration.
        let (new, update, end) = (&ev[3 * i], &ev[3 * i + 1], &ev[3 * i + 2]);
        assert!(new.id.starts_with("cam-ev-"), "{}", new.id);
        assert_eq!(
            (update.id.as_str(), end.id.as_str()),
            (new.id.as_str(), new.id.as_str())
        );
        assert_eq!(n.event.as_deref(), Some(new.id.as_str()));
        assert_eq!(update.narration.as_deref(), Some(n.id.as_str()));
        // The camera's watch_for was asked after the narration, and its answer rides along.
        let watch = n.watch.as_ref().expect("watch_for was asked");
        assert_eq!(watch.watch_for, "a yellow box");
        assert!(
            watch.answer.is_some() || !watch.reason.is_empty(),
            "{watch:?}"
        );
        assert_eq!(update.watch.as_ref(), Some(watch));
        assert!(new.watch.is_none() && end.watch.is_none());
        assert_eq!(end.start_stream_secs, new.stream_secs);
        assert!(end.stream_secs > new.stream_secs && !active(end.stream_secs as u64));
        assert!(end.peak_activity >= n.activity && n.activity > 0.25);
        // Each picture is a frame of the activity: the event's first frame, the narration's
        // frame with the most change, the event's frame with the most change.
        let new_snap = new.snapshot.as_ref().expect("new has a snapshot");
        assert_eq!(new_snap.stream_secs, new.stream_secs);
        let n_snap = n.snapshot.as_ref().expect("the narration has a snapshot");
        assert_eq!(update.snapshot.as_ref(), Some(n_snap));
        assert!(active(n_snap.frame), "{n_snap:?}");
        assert!(n_snap.stream_secs <= n.stream_end_secs);
        let end_snap = end.snapshot.as_ref().expect("end has a snapshot");
        assert!(active(end_snap.frame), "{end_snap:?}");
        for r in [new_snap, n_snap, end_snap] {
            assert_eq!((r.width, r.height), (W as u32 / 2, H as u32 / 2));
        }
    }
    assert!(got[1].stream_start_secs > got[0].stream_end_secs);
    // The snapshot thread encodes all six; each JPEG is the size its reference says.
    let mut jpegs = Vec::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        while jpegs.len() < 6 {
            let s = tokio::time::timeout(Duration::from_secs(30), encoded.recv())
                .await
                .expect("six snapshots within 30 s")
                .unwrap();
            jpegs.push(s);
        }
    });
    let refs: Vec<_> = ev
        .iter()
        .filter_map(|e| e.snapshot.clone())
        .filter(|r| !got.iter().any(|n| n.snapshot.as_ref() == Some(r)))
        .chain(got.iter().filter_map(|n| n.snapshot.clone()))
        .collect();
    assert_eq!(refs.len(), 6);
    for r in &refs {
        let s = jpegs
            .iter()
            .find(|s| s.info == *r)
            .unwrap_or_else(|| panic!("no JPEG for {r:?}"));
        assert_eq!(picture::jpeg_size(&s.jpeg), Some((r.width, r.height)));
        assert_eq!(
            snapshots.get("cam", &r.id).map(|s| s.info.clone()),
            Some(r.clone())
        );
    }
    assert_eq!(
        snapshots
            .stats()
            .dropped
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

fn service(generator: &Generator, budget: usize, cfg: QueryConfig, queue: usize) -> QueryService {
    QueryService::new(
        Ok(generator.clone()),
        cfg,
        AskLimits {
            question_max_chars: 100,
            max_tokens: 512,
            queue,
        },
        Some(SYSTEM.into()),
        budget,
        0.25,
    )
}

#[test]
fn a_question_forks_the_live_cache_and_never_runs_the_vision_encoder() {
    let generator = engine_common::generator();
    let (mut w, memory, _) = watcher(&generator, 60, quiet(), 3000);
    let mut scene = Scene::new();
    w.step(&scene.moving(0, 30));
    let svc = service(&generator, 3000, QueryConfig::default(), 4);
    svc.set_camera(memory.clone());
    let before = generator.engines().stats();

    let mut streamed = String::new();
    let mut req = AskRequest::new("cam", "What moved?");
    req.max_tokens = Some(10);
    let a = svc.answer(&req, &mut |d| streamed.push_str(d)).unwrap();
    assert!(a.forked, "the whole window forks the live cache");
    assert_eq!(a.frames, 30);
    assert_eq!(a.window, (Duration::ZERO, Duration::from_secs(29)));
    assert_eq!(streamed, a.text, "the deltas add up to the text");
    assert!(a.generated_tokens >= 1 && a.first_token <= a.total);

    // A short window is prefilled from memory: still no encoder run.
    req.window = Some(Duration::from_secs(5));
    let b = svc.answer(&req, &mut |_| {}).unwrap();
    assert!(!b.forked);
    assert_eq!(b.frames, 5);
    assert_eq!(b.window, (Duration::from_secs(25), Duration::from_secs(29)));
    assert!(b.prompt_tokens < a.prompt_tokens);

    let after = generator.engines().stats();
    assert_eq!(
        after.vision_runs, before.vision_runs,
        "a question ran the vision encoder"
    );
    assert_eq!(after.vision_frames, before.vision_frames);
}

#[test]
fn a_forked_answer_equals_the_answer_from_a_full_prefill() {
    let generator = engine_common::generator();
    let (mut w, memory, _) = watcher(&generator, 60, quiet(), 3000);
    let mut scene = Scene::new();
    let frames = scene.moving(0, 6);
    w.step(&frames);
    let svc = service(&generator, 3000, QueryConfig::default(), 4);
    svc.set_camera(memory.clone());
    let mut req = AskRequest::new("cam", "What moved?");
    req.max_tokens = Some(12);
    let forked = svc.answer(&req, &mut |_| {}).unwrap();
    assert!(forked.forked);
    // The reference: the whole stream rendered at once and prefilled from an empty cache.
    let mem = memory.snapshot().frames;
    let hidden = generator.engines().decoder().hidden();
    let (full, rows) = full_stream(&mem);
    let mut prompt = full.prompt(&rows, hidden).unwrap();
    let ask = videollama3::stream_ask(Role::User, "What moved?");
    prompt.extend(ask.prompt(&[], hidden).unwrap());
    let opts = GenerateOptions {
        max_new_tokens: 12,
        ..GenerateOptions::default()
    };
    let reference = generator
        .generate(&generator.empty_cache().unwrap(), &prompt, &opts, |_| {})
        .unwrap();
    assert_eq!(forked.text, reference.text);
    assert_eq!(forked.prompt_tokens, reference.prompt_tokens);
}

#[test]
fn a_follow_up_continues_the_conversation_with_new_footage() {
    let generator = engine_common::generator();
    let (mut w, memory, _) = watcher(&generator, 60, quiet(), 3000);
    let mut scene = Scene::new();
    w.step(&scene.moving(0, 10));
    let svc = service(&generator, 3000, QueryConfig::default(), 4);
    svc.set_camera(memory.clone());
    let mut req = AskRequest::new("cam", "What moved?");
    req.max_tokens = Some(8);
    req.conversation = Some("c1".into());
    let first = svc.answer(&req, &mut |_| {}).unwrap();
    assert_eq!(first.turn, 1);
    assert_eq!(svc.conversation_count(), 1);

    w.step(&scene.moving(10, 3));
    req.question = "And then?".into();
    let second = svc.answer(&req, &mut |_| {}).unwrap();
    assert_eq!(second.turn, 2);
    assert_eq!(second.frames, 13, "the three new frames were added");
    assert_eq!(second.window, (Duration::ZERO, Duration::from_secs(12)));
    // The second prompt holds the whole first exchange: it is longer than the first prompt plus
    // the first answer.
    assert!(
        second.prompt_tokens > first.prompt_tokens + first.generated_tokens,
        "{} vs {} + {}",
        second.prompt_tokens,
        first.prompt_tokens,
        first.generated_tokens
    );

    // Another camera cannot continue it.
    let other = Arc::new(CameraMemory::new("other", Duration::from_secs(60), 61));
    svc.set_camera(other);
    let mut wrong = req.clone();
    wrong.camera = "other".into();
    let e = svc.answer(&wrong, &mut |_| {}).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField, "{e}");
    assert!(e.message.contains("belongs to camera `cam`"), "{e}");
}

#[test]
fn busy_and_invalid_questions_get_precise_errors() {
    let generator = engine_common::generator();
    let (mut w, memory, _) = watcher(&generator, 30, quiet(), 3000);
    let svc = service(&generator, 3000, QueryConfig::default(), 1);
    svc.set_camera(memory.clone());
    let ask = |q: &str| AskRequest::new("cam", q);

    // Before any frame: no_frames.
    let e = svc.answer(&ask("What moved?"), &mut |_| {}).unwrap_err();
    assert_eq!(e.code, ErrorCode::NoFrames, "{e}");
    let mut scene = Scene::new();
    w.step(&scene.moving(0, 3));

    let cases: Vec<(AskRequest, ErrorCode, &str)> = vec![
        (
            AskRequest::new("nope", "x"),
            ErrorCode::UnknownCamera,
            "no camera `nope`",
        ),
        (ask("   "), ErrorCode::EmptyQuestion, "empty"),
        (
            ask(&"x".repeat(101)),
            ErrorCode::QuestionTooLong,
            "101 characters",
        ),
        (
            AskRequest {
                window: Some(Duration::from_secs(31)),
                ..ask("x")
            },
            ErrorCode::WindowTooLong,
            "keeps (30 s",
        ),
        (
            AskRequest {
                max_tokens: Some(513),
                ..ask("x")
            },
            ErrorCode::InvalidField,
            "between 1 and 512",
        ),
    ];
    for (req, code, text) in cases {
        let e = svc.answer(&req, &mut |_| {}).unwrap_err();
        assert_eq!(e.code, code, "{e}");
        assert!(e.message.contains(text), "{e:?} should mention {text:?}");
    }

    // Concurrency 1 + queue 1: two places; the third question is refused at once.
    let a = svc.admit().unwrap();
    let b = svc.admit().unwrap();
    let e = svc.admit().unwrap_err();
    assert_eq!(e.code, ErrorCode::Busy);
    assert!(e.message.contains("query.concurrency = 1"), "{e}");
    drop(a);
    let c = svc.admit().expect("a freed place is reusable");
    drop((b, c));

    // No model: no_model with the reason.
    let none = QueryService::new(
        Err("engine.enabled = false".into()),
        QueryConfig::default(),
        AskLimits::default(),
        None,
        0,
        0.25,
    );
    none.set_camera(memory);
    let e = none.answer(&ask("What moved?"), &mut |_| {}).unwrap_err();
    assert_eq!(e.code, ErrorCode::NoModel);
    assert!(e.message.contains("engine.enabled = false"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_questions_stream_through_the_async_interface() {
    let generator = engine_common::generator();
    let (mut w, memory, _) = watcher(&generator, 30, quiet(), 3000);
    let mut scene = Scene::new();
    w.step(&scene.moving(0, 5));
    let svc = service(&generator, 3000, QueryConfig::default(), 0);
    svc.set_camera(memory);
    let admission = svc.admit().unwrap();
    // While this one holds the only place, another is busy.
    assert_eq!(svc.admit().unwrap_err().code, ErrorCode::Busy);
    let mut req = AskRequest::new("cam", "What moved?");
    req.max_tokens = Some(6);
    let text = Arc::new(std::sync::Mutex::new(String::new()));
    let sink = text.clone();
    let (_, result) = svc
        .ask(admission, req, move |d: &str| {
            sink.lock().unwrap().push_str(d)
        })
        .await;
    let report = result.unwrap();
    assert_eq!(*text.lock().unwrap(), report.text);
    assert!(svc.admit().is_ok(), "the place is free after the answer");
}

#[test]
fn the_model_trigger_reads_the_speak_signal_from_the_live_cache() {
    let generator = engine_common::generator();
    let speak_when = |threshold: f64| NarrateConfig {
        triggers: NarrateTriggers {
            model: true,
            ..NarrateTriggers::default()
        },
        speak_threshold: threshold,
        cooldown: Duration::from_secs(4),
        max_tokens: 3,
        ..NarrateConfig::default()
    };
    // Threshold 0: any speak probability above 0 speaks, limited by the 4 s cooldown.
    let (mut w, _, outputs) = watcher(&generator, 60, speak_when(0.0), 3000);
    let mut rx = outputs.narrations.subscribe();
    let mut scene = Scene::new();
    for f in scene.moving(0, 10) {
        w.step(&[f]);
    }
    let mut ends = Vec::new();
    while let Ok(n) = rx.try_recv() {
        assert_eq!(n.trigger, Trigger::Model);
        ends.push(n.stream_end_secs);
    }
    assert_eq!(ends, [0.0, 4.0, 8.0]);
    // Threshold 1: the model never passes it.
    let (mut w, _, outputs) = watcher(&generator, 60, speak_when(1.0), 3000);
    let mut rx = outputs.narrations.subscribe();
    let mut scene = Scene::new();
    for f in scene.moving(0, 10) {
        w.step(&[f]);
    }
    assert!(rx.try_recv().is_err());
}

#[test]
fn conversations_are_bounded_in_number() {
    let generator = engine_common::generator();
    let (mut w, memory, _) = watcher(&generator, 60, quiet(), 3000);
    let mut scene = Scene::new();
    w.step(&scene.moving(0, 4));
    let cfg = QueryConfig {
        conversations: 2,
        ..QueryConfig::default()
    };
    let svc = service(&generator, 3000, cfg, 4);
    svc.set_camera(memory);
    for c in ["a", "b", "c", "a"] {
        let mut req = AskRequest::new("cam", "What moved?");
        req.max_tokens = Some(2);
        req.conversation = Some(c.into());
        let r = svc.answer(&req, &mut |_| {}).unwrap();
        // "a" was forgotten (least recently used) when "c" arrived: it starts over.
        assert_eq!(r.turn, 1, "conversation {c}");
        assert!(svc.conversation_count() <= 2);
    }
}

#[test]
fn a_conversation_is_forgotten_once_its_ttl_has_passed_on_the_services_clock() {
    let generator = engine_common::generator();
    let (mut w, memory, _) = watcher(&generator, 60, quiet(), 3000);
    let mut scene = Scene::new();
    w.step(&scene.moving(0, 4));
    let clock = Clock::manual();
    let cfg = QueryConfig {
        conversation_ttl: Duration::from_secs(300),
        ..QueryConfig::default()
    };
    let svc = QueryService::new_with_clock(
        Ok(generator.clone()),
        cfg,
        AskLimits::default(),
        Some(SYSTEM.into()),
        3000,
        0.25,
        clock.clone(),
    );
    svc.set_camera(memory);
    let ask = || {
        let mut req = AskRequest::new("cam", "What moved?");
        req.max_tokens = Some(2);
        req.conversation = Some("c1".into());
        svc.answer(&req, &mut |_| {}).unwrap().turn
    };
    assert_eq!(ask(), 1);
    // Just inside the TTL: the follow-up continues the conversation.
    clock.advance(Duration::from_secs(299));
    assert_eq!(ask(), 2);
    // The TTL counts from the last use: 299 s later it is still alive, 300 s later it is gone.
    clock.advance(Duration::from_secs(299));
    assert_eq!(ask(), 3);
    clock.advance(Duration::from_secs(300));
    assert_eq!(
        svc.conversation_count(),
        1,
        "expired entries go on the next use"
    );
    assert_eq!(
        ask(),
        1,
        "a follow-up after the TTL starts a new conversation"
    );
}

#[test]
fn turning_cached_keys_by_rope_moves_them_to_other_positions_exactly() {
    // RoPE attention depends only on relative positions: a cache of positions 0..n whose keys are
    // turned by +37 must give, at position n + 37, the logits the original gives at n. Eviction
    // under `sink_recent` renumbers kept positions this way instead of recomputing them.
    let generator = engine_common::generator();
    let engines = generator.engines();
    let decoder = engines.decoder();
    let rope = decoder.rope().expect("the tiny manifest gives rope_theta");
    let hidden = decoder.hidden();
    let mut scene = Scene::new();
    let frames = encode(&generator, &scene.moving(0, 3));
    let (full, rows) = full_stream(&frames);
    let empty = generator.empty_cache().unwrap();
    let p = generator
        .prefill(&empty, &full.prompt(&rows, hidden).unwrap())
        .unwrap();
    let n = p.cache.len();
    let next = engines.embedder().embed(&[7]).unwrap();
    let at = |past: &edgevlm::engine::PastKv, pos: i64| {
        decoder
            .forward(past, &next, &[pos], edgevlm::engine::LogitRows::Last)
            .unwrap()
            .logits
    };
    let want = at(p.cache.past(), n as i64);
    let turned = p.cache.past().select(&[(0..n, 37)], rope).unwrap();
    assert_eq!(turned.len(), n);
    let diff = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max)
    };
    let moved = diff(&want, &at(&turned, n as i64 + 37));
    assert!(moved < 1e-3, "turned keys give logits {moved} away");
    // The control: the same turned keys read from the old position are not the same cache.
    let wrong = diff(&want, &at(&turned, n as i64));
    assert!(
        wrong > 100.0 * moved.max(1e-5),
        "turning changed nothing ({wrong} vs {moved})"
    );
    // Evicting nothing keeps every position and the next position.
    let same = p.cache.evict(&[], rope).unwrap();
    assert_eq!((same.len(), same.next_position()), (n, n as i64));
    assert!(diff(&want, &at(same.past(), n as i64)) == 0.0);
}

#[test]
fn sink_recent_keeps_the_system_turn_and_the_newest_frames_within_its_budget_without_rebuilding() {
    let generator = engine_common::generator();
    let hidden = generator.engines().decoder().hidden();
    let mut opts = live_options(400, 600);
    opts.policy = edgevlm::config::CachePolicy::SinkRecent;
    let mut live = LiveCache::new(&generator, opts).unwrap();
    let prefix = live.cache().len();
    assert_eq!(live.prefix_positions(), prefix);
    let mut scene = Scene::new();
    let mut memory = edgevlm::memory::Memory::new(Duration::from_secs(600), 601);
    let mut most = 0;
    for t in 0..40u64 {
        let f = encode(
            &generator,
            &[scene.frame(t as f64, &[(((t * 56) % 280) as usize, 0, 150)])],
        );
        memory.push(f[0].clone());
        let snapshot: Vec<_> = memory.frames().iter().cloned().collect();
        assert_eq!(
            live.append(&generator, &snapshot, &f).unwrap(),
            None,
            "rebuilt at t={t}"
        );
        most = most.max(live.cache().len());
        // Positions stay contiguous: the next one is the cache's length.
        assert_eq!(live.cache().next_position(), live.cache().len() as i64);
    }
    assert!(
        most <= 400,
        "cache reached {most} positions over a budget of 400"
    );
    let e = live.evictions();
    assert!(e.count > 0 && e.frames > 0, "nothing was evicted: {e:?}");
    assert_eq!(live.rebuilds().0, 0);
    // What is kept: the system turn and exactly the newest frames, as many positions as a fresh
    // stream of those frames has.
    let view = live.view();
    let kept = &memory.frames().iter().cloned().collect::<Vec<_>>()[40 - live.frames()..];
    assert_eq!(view.span.unwrap().0, kept[0].pts);
    assert_eq!(view.span.unwrap().1, Duration::from_secs(39));
    assert_eq!(e.frames as usize + live.frames(), 40);
    let (full, rows) = full_stream(kept);
    let fresh = generator
        .prefill(
            &generator.empty_cache().unwrap(),
            &full.prompt(&rows, hidden).unwrap(),
        )
        .unwrap();
    assert_eq!(fresh.cache.len(), live.cache().len());
    // A question on the evicted cache is answered.
    let ask = videollama3::stream_ask(Role::User, "What moved?");
    assert!(!greedy(&generator, live.cache(), &ask.prompt(&[], hidden).unwrap()).is_empty());
}

#[test]
fn a_camera_under_sink_recent_never_rebuilds_after_its_first_build_and_reports_its_evictions() {
    let generator = engine_common::generator();
    let mut cam = camera(20, quiet());
    cam.cache = edgevlm::config::CacheConfig {
        policy: edgevlm::config::CachePolicy::SinkRecent,
        budget: Some(400),
    };
    // The model's whole context (3000): the camera's own budget is the bound.
    let (mut w, memory, _) = watcher_of(&generator, cam, 3000, Outputs::new(None));
    let mut scene = Scene::new();
    for t in 0..60 {
        let f = scene.frame(t as f64, &[(((t * 56) % 280) as usize, 0, 150)]);
        w.step(&[f]);
        let live = w.live().unwrap();
        assert!(
            live.cache().len() <= 400,
            "cache {} at t={t}",
            live.cache().len()
        );
    }
    let report = memory.report();
    assert_eq!(report.rebuilds, 1, "only the first build");
    assert!(report.evicted_frames > 0);
    assert!(
        report.line().contains("frames evicted"),
        "{}",
        report.line()
    );
}

#[test]
fn the_memory_plan_bounds_the_live_cache_each_policy_really_builds_and_the_bound_is_reached() {
    let generator = engine_common::generator();
    let config = edgevlm::config::Config::parse(
        &format!(
            "[memory]\nsystem_prompt = \"{SYSTEM}\"\n\
             [[cameras]]\nid = \"win\"\nuri = \"test://ball\"\nwidth = 336\nheight = 196\n\
             window_secs = 20\nnarrate = []\n\
             [[cameras]]\nid = \"sink\"\nuri = \"test://ball\"\nwidth = 336\nheight = 196\n\
             window_secs = 600\nnarrate = []\ncache_policy = \"sink_recent\"\ncache_budget = 400\n\
             [[cameras]]\nid = \"comp\"\nuri = \"test://ball\"\nwidth = 336\nheight = 196\n\
             window_secs = 600\nnarrate = []\ncache_policy = \"compress\"\ncache_budget = 400\n"
        ),
        None,
    )
    .unwrap();
    let engines = generator.engines();
    let plan =
        edgevlm::memory::plan::Plan::new(&config, engines.manifest(), engines.tokenizer(), None)
            .unwrap();
    let footage = plan.max_context - plan.reserve;
    for cam in &config.cameras {
        let p = plan.camera(&cam.id).unwrap();
        assert_eq!(p.frame_tokens, 12 * 7, "{}", cam.id);
        let (mut w, memory, _) = watcher_of(&generator, cam.clone(), footage, Outputs::new(None));
        let mut scene = Scene::new();
        let mut most = 0;
        for t in 0..80 {
            // Every token kept (no DiffFP mask): the plan's bound is for unpruned frames.
            let mut f = scene.frame(t as f64, &[((t * 28) % 280, 0, 56)]);
            Arc::get_mut(&mut f).unwrap().tokens = None;
            w.step(&[f]);
            let live = w.live().unwrap();
            let bytes = live.cache().bytes() as u64;
            assert!(
                bytes <= p.cache_bytes,
                "{}: {} positions at t={t}, planned {}",
                cam.id,
                live.cache().len(),
                p.cache_positions
            );
            most = most.max(bytes);
        }
        // The bound is nearly reached (not a vacuous figure): what is left is one frame item and
        // the digits of stream times up to three years long where these frames have two.
        let slack = (p.frame_positions + 6 * p.cache_frames) as u64 * plan.bytes_per_position;
        assert!(
            most + slack > p.cache_bytes,
            "{}: reached {most} of {} bytes",
            cam.id,
            p.cache_bytes
        );
        // The status carries the live figure; the runtime sets the planned one from the plan.
        assert_eq!(
            memory.report().cache_bytes,
            w.live().unwrap().cache().bytes() as u64
        );
    }
    assert_eq!(plan.camera("win").unwrap().cache_frames, 20 + 1 + 5);
    assert!(plan.camera("sink").unwrap().cache_positions == 400);
}

#[test]
fn compression_scores_see_the_same_token_at_two_positions_as_the_same() {
    // Keys are cached after RoPE: without turning them back, one token at two positions would
    // not look alike. Two identical frames, then a different one.
    let generator = engine_common::generator();
    let engines = generator.engines();
    let rope = engines.decoder().rope().unwrap();
    let hidden = engines.decoder().hidden();
    let mut scene = Scene::new();
    let a = scene.frame(0.0, &[(0, 0, 100)]);
    let mut b = scene.frame(1.0, &[(0, 0, 100)]);
    Arc::get_mut(&mut b).unwrap().tokens = None;
    let mut a = a;
    Arc::get_mut(&mut a).unwrap().tokens = None;
    let c = {
        // Nothing in common with the others: one flat colour over the whole frame.
        let mut c = scene.frame(2.0, &[(0, 0, W)]);
        Arc::get_mut(&mut c).unwrap().tokens = None;
        c
    };
    let frames = encode(&generator, &[a, b, c]);
    let (full, rows) = full_stream(&frames);
    let p = generator
        .prefill(
            &generator.empty_cache().unwrap(),
            &full.prompt(&rows, hidden).unwrap(),
        )
        .unwrap();
    // Item positions: the stream render knows where each frame's visual tokens are.
    let mut ids = Vec::new();
    let mut visual = Vec::new();
    for s in full.segments() {
        match s {
            render::Segment::Text(t, m) => engines.tokenizer().encode_into(t, *m, &mut ids),
            render::Segment::Visual { tokens, .. } => {
                visual.push(ids.len());
                ids.extend(std::iter::repeat_n(0, *tokens));
            }
        }
    }
    let n = frames[0].kept();
    let same: Vec<(usize, usize)> = (0..n).map(|k| (visual[1] + k, visual[0] + k)).collect();
    let other: Vec<(usize, usize)> = (0..n).map(|k| (visual[2] + k, visual[1] + k)).collect();
    let (s_same, norms) = p.cache.scores(&same, &[visual[0]], rope).unwrap();
    let (s_other, _) = p.cache.scores(&other, &[], rope).unwrap();
    let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
    assert!(
        mean(&s_same) > mean(&s_other) + 0.05,
        "identical frames {} vs different {}",
        mean(&s_same),
        mean(&s_other)
    );
    assert!(norms[0] > 0.0);
    // Out of range is an error, not a panic.
    assert!(p.cache.scores(&[(p.cache.len(), 0)], &[], rope).is_err());
}

#[test]
fn compress_thins_old_footage_within_its_budget_and_keeps_more_of_it_than_sink_recent() {
    let generator = engine_common::generator();
    let run = |policy| {
        let mut opts = live_options(600, 600);
        opts.policy = policy;
        let mut live = LiveCache::new(&generator, opts).unwrap();
        let mut scene = Scene::new();
        let mut memory = edgevlm::memory::Memory::new(Duration::from_secs(600), 601);
        for t in 0..60u64 {
            let mut f = scene.frame(t as f64, &[(((t * 28) % 280) as usize, 28, 56)]);
            Arc::get_mut(&mut f).unwrap().tokens = None;
            let f = encode(&generator, &[f]);
            memory.push(f[0].clone());
            let snapshot: Vec<_> = memory.frames().iter().cloned().collect();
            assert_eq!(
                live.append(&generator, &snapshot, &f).unwrap(),
                None,
                "{policy:?} rebuilt at t={t}"
            );
            assert!(
                live.cache().len() <= 600,
                "{policy:?}: {}",
                live.cache().len()
            );
            assert_eq!(live.cache().next_position(), live.cache().len() as i64);
        }
        live
    };
    let sink = run(edgevlm::config::CachePolicy::SinkRecent);
    let comp = run(edgevlm::config::CachePolicy::Compress);
    let (vs, vc) = (sink.view(), comp.view());
    // Both end on the newest frame; compression reaches further back with the same positions.
    assert_eq!(vc.span.unwrap().1, Duration::from_secs(59));
    assert!(
        vc.span.unwrap().0 < vs.span.unwrap().0,
        "compress starts at {:?}, sink_recent at {:?}",
        vc.span,
        vs.span
    );
    assert!(
        vc.frames > vs.frames,
        "{} vs {} frames",
        vc.frames,
        vs.frames
    );
    let e = comp.evictions();
    assert!(e.tokens > 0, "{e:?}");
    // Every position is a token of the view: the system turn, each item's text and its kept
    // visual tokens (84 per whole frame here).
    assert!(vc.visual_tokens < vc.frames * 84);
    // The newest frame is whole, and a question on the compressed cache is answered.
    let hidden = generator.engines().decoder().hidden();
    let ask = videollama3::stream_ask(Role::User, "What moved?");
    assert!(!greedy(&generator, comp.cache(), &ask.prompt(&[], hidden).unwrap()).is_empty());
}
