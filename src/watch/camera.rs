//! One camera's watch: follows the camera's window, encodes each new frame once into memory,
//! extends the live cache, asks the narrator whether to speak, narrates, and hands narrations and
//! change events to the outputs.
//!
//! It runs on its own thread because every step is a blocking engine call; ingest never waits on
//! it (the window is its only input). When it falls behind, frames wait in the window (and are
//! counted as missed if they leave it first), and of the narrations triggered while it catches up
//! only the newest is generated: the others are skipped and counted, never queued.

use crate::config::CameraConfig;
use crate::evidence::Snapshotter;
use crate::generate::Generator;
use crate::memory::{
    CameraMemory, FrameEncoder, LiveCache, LiveOptions, MemoryFrame, RebuildReason, WatchStats,
};
use crate::narrate::{
    self, ChangeEvent, ChangeKind, EventType, FrameSignal, Narration, Narrator, SnapshotRef,
    Trigger, WatchAnswer,
};
use crate::publish::Publisher;
use crate::ring::{Frame, Window};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast;

/// Where a worker's narrations and change events go.
#[derive(Debug, Clone)]
pub struct Outputs {
    /// The MQTT publisher, if MQTT is on.
    pub publisher: Option<Publisher>,
    /// Every narration, for in-process listeners (tests, the log).
    pub narrations: broadcast::Sender<Narration>,
    /// Every change event.
    pub events: broadcast::Sender<ChangeEvent>,
    /// Where snapshots of narrations and events are taken, if they are.
    pub snapshots: Option<Snapshotter>,
}

impl Outputs {
    /// Outputs with no publisher, no snapshots and small broadcast channels.
    pub fn new(publisher: Option<Publisher>) -> Outputs {
        Outputs {
            publisher,
            narrations: broadcast::channel(64).0,
            events: broadcast::channel(64).0,
            snapshots: None,
        }
    }

    /// The same outputs, with snapshots taken by `snapshots`.
    pub fn with_snapshots(self, snapshots: Snapshotter) -> Outputs {
        Outputs {
            snapshots: Some(snapshots),
            ..self
        }
    }
}

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// The camera (id, narration keys, DiffFP minimum, window).
    pub camera: CameraConfig,
    /// System message of the stream.
    pub system: Option<String>,
    /// Context positions the live cache may use.
    pub budget: usize,
    /// Rebuild slack (`memory.rebuild_slack`).
    pub slack: f64,
    /// How long to wait for a frame before checking for shutdown.
    pub poll: Duration,
}

/// A running watch worker: one camera's [`CameraWatch`] on its own thread.
#[derive(Debug)]
pub struct WatchWorker {
    memory: Arc<CameraMemory>,
    window: Arc<Window>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl WatchWorker {
    /// Starts following `window` on a thread named `watch-<camera>`.
    pub fn start(
        generator: Generator,
        window: Arc<Window>,
        memory: Arc<CameraMemory>,
        opts: WatchOptions,
        outputs: Outputs,
    ) -> std::io::Result<WatchWorker> {
        let state = CameraWatch::new(generator, memory.clone(), opts, outputs);
        let stop = state.stop.clone();
        let name = format!("watch-{}", memory.camera);
        window.expect_follower();
        let follow = window.clone();
        let thread = std::thread::Builder::new()
            .name(name.chars().take(15).collect())
            .spawn(move || state.follow(&follow))?;
        Ok(WatchWorker {
            memory,
            window,
            stop,
            thread: Some(thread),
        })
    }

    /// The camera's memory.
    pub fn memory(&self) -> &Arc<CameraMemory> {
        &self.memory
    }

    /// The window it follows.
    pub fn window(&self) -> &Arc<Window> {
        &self.window
    }

    /// Whether the thread ended (it only ends when asked to).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Asks the worker to stop without waiting (a narration in progress ends at its next token).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Asks the worker to stop and waits at most `bound`; returns whether it stopped in time.
    pub fn stop(mut self, bound: Duration) -> bool {
        self.stop.store(true, Ordering::Relaxed);
        let until = Instant::now() + bound;
        while Instant::now() < until {
            if self.is_finished() {
                if let Some(t) = self.thread.take() {
                    let _ = t.join();
                }
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

impl Drop for WatchWorker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One camera's watch as a state machine, driven by [`WatchWorker`]'s thread or directly (tests,
/// benches) with [`CameraWatch::step`].
pub struct CameraWatch {
    generator: Generator,
    memory: Arc<CameraMemory>,
    outputs: Outputs,
    stop: Arc<AtomicBool>,
    opts: WatchOptions,
    encoder: FrameEncoder,
    live: Option<LiveCache>,
    narrator: Narrator,
    last_seq: Option<u64>,
    geometry: Option<(u32, u32)>,
    last_error_log: Option<Instant>,
    /// The frames since the last narration: the next narration's picture.
    span_pick: Pick,
    /// The change event in progress.
    event: Option<ActiveEvent>,
}

/// A trigger that fired, with the span of footage it narrates.
struct Fired {
    trigger: Trigger,
    span: (Duration, SystemTime),
    end: (Duration, SystemTime),
    /// The frame with the most change in the span (else its last frame) and that change.
    pick: Pick,
    /// The event in progress when it fired.
    event: Option<String>,
}

/// The frame a narration or an event is about: the one with the most change (key frames, kept
/// whole, do not count), else the last one.
#[derive(Debug, Clone, Default)]
struct Pick {
    best: Option<(Arc<Frame>, f64)>,
    last: Option<Arc<Frame>>,
}

impl Pick {
    fn see(&mut self, frame: &Arc<Frame>, change: Option<f64>) {
        if let Some(c) = change
            && self.best.as_ref().is_none_or(|(_, b)| c > *b)
        {
            self.best = Some((frame.clone(), c));
        }
        self.last = Some(frame.clone());
    }

    fn frame(&self) -> Option<&Arc<Frame>> {
        self.best.as_ref().map(|(f, _)| f).or(self.last.as_ref())
    }

    /// The most change seen (0 if only key frames).
    fn peak(&self) -> f64 {
        self.best.as_ref().map_or(0.0, |(_, c)| *c)
    }

    /// The pick of two spans together.
    fn merge(self, later: Pick) -> Pick {
        let best = match (self.best, later.best) {
            (Some(a), Some(b)) => Some(if b.1 > a.1 { b } else { a }),
            (a, b) => a.or(b),
        };
        Pick {
            best,
            last: later.last.or(self.last),
        }
    }
}

/// A change event between its `new` and its `end`.
#[derive(Debug)]
struct ActiveEvent {
    id: String,
    start: (f64, f64),
    pick: Pick,
}

/// A sampled frame as the triggers see it, from DiffFP's decision on it (a frame DiffFP did not
/// look at is whole: a key frame).
fn frame_signal(frame: &Frame) -> FrameSignal {
    let (kept, total, key_frame) = frame
        .tokens
        .as_ref()
        .map_or((0, 0, true), |t| (t.kept, t.keep.len(), t.key_frame));
    FrameSignal {
        pts: frame.pts,
        wall: frame.wall_time,
        kept,
        total,
        key_frame,
    }
}

fn unix_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl std::fmt::Debug for CameraWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CameraWatch")
            .field("camera", &self.memory.camera)
            .field("last_seq", &self.last_seq)
            .finish_non_exhaustive()
    }
}

impl CameraWatch {
    /// A watcher for one camera's memory.
    pub fn new(
        generator: Generator,
        memory: Arc<CameraMemory>,
        opts: WatchOptions,
        outputs: Outputs,
    ) -> CameraWatch {
        CameraWatch {
            narrator: Narrator::new(opts.camera.narrate.clone(), opts.camera.prune.min_tokens),
            generator,
            memory,
            outputs,
            stop: Arc::new(AtomicBool::new(false)),
            encoder: FrameEncoder::new(),
            live: None,
            last_seq: None,
            geometry: None,
            opts,
            last_error_log: None,
            span_pick: Pick::default(),
            event: None,
        }
    }

    fn stats(&self) -> &WatchStats {
        &self.memory.stats
    }

    /// The live cache, once built.
    pub fn live(&self) -> Option<&LiveCache> {
        self.live.as_ref()
    }

    /// Follows `window` until stopped.
    fn follow(mut self, window: &Window) {
        tracing::debug!(camera = %self.memory.camera, "Watch worker started");
        while !self.stop.load(Ordering::Relaxed) {
            let frames = window.wait_newer_than(self.last_seq, self.opts.poll);
            // A file: one frame a round, however many arrived together, so its memory and live
            // cache take the same steps on every run (docs/ARCHITECTURE.md, "Ingest").
            let per_round = if self.opts.camera.uri.is_live() {
                frames.len().max(1)
            } else {
                1
            };
            for round in frames.chunks(per_round) {
                self.step(round);
            }
        }
        tracing::debug!(camera = %self.memory.camera, "Watch worker stopped");
    }

    /// Processes new frames (oldest first): encode, memory, live cache, triggers, at most one
    /// narration. Frames already seen are ignored.
    pub fn step(&mut self, frames: &[Arc<Frame>]) {
        let start = match self.last_seq {
            Some(s) => frames.partition_point(|f| f.seq <= s),
            None => 0,
        };
        let frames = &frames[start..];
        if frames.is_empty() {
            return;
        }
        // A bug in one round must not end the camera's memory: reset and go on.
        let round = std::panic::catch_unwind(AssertUnwindSafe(|| self.round(frames)));
        if round.is_err() {
            WatchStats::bump(&self.stats().errors);
            tracing::error!(camera = %self.memory.camera, "Watch worker round crashed; live cache reset");
            self.live = None;
            self.encoder.reset();
            self.last_seq = frames.last().map(|f| f.seq);
        }
    }

    fn error(&mut self, what: &str, e: &dyn std::fmt::Display) {
        WatchStats::bump(&self.stats().errors);
        // One line per 10 s at most: a broken engine must not flood the log at the frame rate.
        if self
            .last_error_log
            .is_none_or(|t| t.elapsed() > Duration::from_secs(10))
        {
            self.last_error_log = Some(Instant::now());
            tracing::error!(camera = %self.memory.camera, error = %e, "{what}");
        }
    }

    fn round(&mut self, frames: &[Arc<Frame>]) {
        if let (Some(last), Some(first)) = (self.last_seq, frames.first()) {
            let gap = first.seq.saturating_sub(last + 1);
            if gap > 0 {
                self.stats().frames_missed.fetch_add(gap, Ordering::Relaxed);
                self.encoder.reset();
            }
        }
        self.last_seq = frames.last().map(|f| f.seq);
        let mut fired: Vec<Fired> = Vec::new();
        let batch = self.generator.engines().vision().max_batch();
        let mut rest = frames;
        while !rest.is_empty() {
            let g = (rest[0].width, rest[0].height);
            if self.geometry != Some(g) {
                // A restart with another geometry: old features cannot share a cache with new ones.
                if self.geometry.is_some() {
                    self.memory.clear();
                    self.live = None;
                }
                self.encoder.reset();
                self.geometry = Some(g);
            }
            let same = rest
                .iter()
                .take(batch)
                .take_while(|f| (f.width, f.height) == g)
                .count();
            let (chunk, tail) = rest.split_at(same);
            rest = tail;
            self.chunk(chunk, &mut fired);
        }
        if let Some(last) = fired.pop() {
            let skipped = fired.len() as u64;
            if skipped > 0 {
                self.stats()
                    .narrations_skipped
                    .fetch_add(skipped, Ordering::Relaxed);
                tracing::debug!(camera = %self.memory.camera, skipped, "Generation behind: narrations skipped");
            }
            let span = fired.first().map_or(last.span, |f| f.span);
            // The skipped narrations' footage is this one's: its picture is the best of it all.
            let pick = fired
                .drain(..)
                .fold(Pick::default(), |a, f| a.merge(f.pick))
                .merge(last.pick);
            self.narrate(Fired { span, pick, ..last });
        }
    }

    /// Encodes `chunk` into memory and the live cache. Its frames are counted (encoded or reused)
    /// only then: a reader that waits for every sampled frame to be counted (`edgevlm eval`) then
    /// finds them in the live cache too, not one or two frames short of it, with the question
    /// prefilling those itself in another grouping and the answer depending on the timing.
    fn chunk(&mut self, chunk: &[Arc<Frame>], fired: &mut Vec<Fired>) {
        if let Some((encoded, reused)) = self.watch_chunk(chunk, fired) {
            let stats = self.stats();
            stats.frames_reused.fetch_add(reused, Ordering::Relaxed);
            stats.frames_encoded.fetch_add(encoded, Ordering::Relaxed);
        }
    }

    /// [`Self::chunk`]'s work: the frames encoded and reused, `None` if the encoder failed.
    fn watch_chunk(&mut self, chunk: &[Arc<Frame>], fired: &mut Vec<Fired>) -> Option<(u64, u64)> {
        let vision = self.generator.engines().vision();
        let encoded = match self.encoder.encode(vision, chunk) {
            Ok(v) => v,
            Err(e) => {
                self.encoder.reset();
                self.error("Vision encoder failed; frames skipped", &e);
                return None;
            }
        };
        let reused = encoded.iter().filter(|f| f.reused).count() as u64;
        // A clip is its frames, each run through the encoder.
        let per_item = vision.clip().map_or(1, |c| u64::from(c.frames));
        let counts = Some(((encoded.len() as u64 - reused) * per_item, reused));
        let encoded: Vec<Arc<MemoryFrame>> = encoded.into_iter().map(Arc::new).collect();
        self.memory.push(&encoded);

        let t0 = Instant::now();
        if vision.clip().is_some() {
            // Clips: the clips these frames completed go into the live cache at once; the
            // triggers see every sampled frame, with DiffFP's view of it (a clip keeps all its
            // tokens, so its own count says nothing of change).
            if !encoded.is_empty() {
                if self.extend(&encoded).is_err() {
                    return counts;
                }
                self.stats().append.observe(t0.elapsed());
            }
            for frame in chunk {
                self.observe(frame_signal(frame), frame, None, fired);
            }
            if !encoded.is_empty()
                && let Some(live) = &self.live
            {
                self.memory.set_live(Some(Arc::new(live.view())));
            }
            return counts;
        }
        let model = self.opts.camera.narrate.triggers.model;
        let manifest = self.generator.engines().manifest();
        let signal = crate::family::stream(manifest.family)
            .ok()
            .and_then(|f| f.speak_signal(&manifest.special_tokens));
        // With the model trigger each frame needs its own logits; otherwise one prefill per chunk.
        let groups: Vec<&[Arc<MemoryFrame>]> = if model {
            encoded.chunks(1).collect()
        } else {
            vec![&encoded[..]]
        };
        // The encoder gives one frame per sampled frame, in order: `chunk[at + i]` is the
        // sampled frame of `group[i]`.
        let mut at = 0;
        for group in groups {
            let speak = match self.extend(group) {
                Ok(true) => self
                    .live
                    .as_ref()
                    .zip(signal)
                    .and_then(|(l, (speak, watch))| {
                        narrate::speak_probability(l.logits(), speak, watch)
                    }),
                Ok(false) => None,
                Err(()) => return counts,
            };
            for (i, f) in group.iter().enumerate() {
                let last = i + 1 == group.len();
                let frame = &chunk[at + i];
                debug_assert_eq!(frame.seq, f.seq);
                let signal = FrameSignal {
                    pts: f.pts,
                    wall: f.wall,
                    kept: f.kept(),
                    total: f.total,
                    key_frame: f.key_frame,
                };
                self.observe(signal, frame, if last { speak } else { None }, fired);
            }
            at += group.len();
        }
        self.stats().append.observe(t0.elapsed());
        if let Some(live) = &self.live {
            self.memory.set_live(Some(Arc::new(live.view())));
        }
        counts
    }

    /// Appends frames to the live cache (building it first if needed). `Ok(true)`: the logits are
    /// those after the last of these frames.
    fn extend(&mut self, frames: &[Arc<MemoryFrame>]) -> Result<bool, ()> {
        let generator = self.generator.clone();
        if self.live.is_none() {
            let cache = self.opts.camera.cache;
            let opts = LiveOptions {
                system: self.opts.system.clone(),
                budget: cache
                    .budget
                    .map_or(self.opts.budget, |b| self.opts.budget.min(b as usize)),
                slack: self.opts.slack,
                // Memory items: clips for a model that encodes clips.
                window_frames: match generator.engines().vision().clip() {
                    Some(clip) => self
                        .opts
                        .camera
                        .window_frames()
                        .div_ceil(clip.frames as usize),
                    None => self.opts.camera.window_frames(),
                },
                policy: cache.policy,
            };
            let memory = self.memory.snapshot().frames;
            let built = LiveCache::new(&generator, opts).and_then(|mut l| {
                l.rebuild(&generator, &memory, RebuildReason::Initial)
                    .map(|()| l)
            });
            match built {
                Ok(l) => {
                    WatchStats::bump(&self.stats().rebuilds);
                    self.live = Some(l);
                    return Ok(true);
                }
                Err(e) => {
                    self.error("Live cache build failed", &e);
                    return Err(());
                }
            }
        }
        let live = self.live.as_mut().ok_or(())?;
        // A snapshot (pointers), so questions never wait on this prefill or a rebuild.
        let memory = self.memory.snapshot().frames;
        let result = live.append(&generator, &memory, frames);
        self.memory.stats.evicted_frames.store(
            live.evictions().frames,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.memory.stats.compressed_tokens.store(
            live.evictions().tokens,
            std::sync::atomic::Ordering::Relaxed,
        );
        match result {
            Ok(rebuilt) => {
                if let Some(reason) = rebuilt {
                    WatchStats::bump(&self.memory.stats.rebuilds);
                    let (_, last) = live.rebuilds();
                    tracing::debug!(
                        camera = %self.memory.camera, ?reason,
                        ms = last.map(|(_, d)| d.as_secs_f64() * 1e3).unwrap_or(0.0),
                        frames = live.frames(), positions = live.cache().len(),
                        "Live cache rebuilt from memory"
                    );
                }
                Ok(true)
            }
            Err(e) => {
                self.live = None;
                self.error("Live cache prefill failed; rebuilding from memory", &e);
                Err(())
            }
        }
    }

    fn observe(
        &mut self,
        signal: FrameSignal,
        frame: &Arc<Frame>,
        speak: Option<f64>,
        fired: &mut Vec<Fired>,
    ) {
        let f = &signal;
        let span = self.narrator.span_start().unwrap_or((f.pts, f.wall));
        let obs = self.narrator.observe(&signal, speak);
        let change = (!f.key_frame).then(|| f.ratio());
        self.span_pick.see(frame, change);
        if let Some(ev) = &mut self.event {
            ev.pick.see(frame, change);
        }
        let at = (f.pts.as_secs_f64(), unix_secs(f.wall));
        match obs.event {
            Some(ChangeKind::Start) => {
                let id = format!("{}-ev-{}", self.memory.camera, (at.1 * 1e3).round() as u64);
                let mut pick = Pick::default();
                pick.see(frame, change);
                let snapshot = self.snapshot(&id, Some(frame));
                self.event = Some(ActiveEvent {
                    id,
                    start: at,
                    pick,
                });
                if let Some(p) = &self.outputs.publisher {
                    p.activity(&self.memory.camera, true);
                }
                self.emit(EventType::New, at, f.ratio(), None, snapshot, None);
            }
            Some(ChangeKind::End) => {
                let best = self.event.as_ref().and_then(|e| e.pick.frame().cloned());
                let id = self.event.as_ref().map(|e| format!("{}-end", e.id));
                let snapshot = id.and_then(|id| self.snapshot(&id, best.as_ref()));
                self.emit(EventType::End, at, f.ratio(), None, snapshot, None);
                self.event = None;
                if let Some(p) = &self.outputs.publisher {
                    p.activity(&self.memory.camera, false);
                }
            }
            None => {}
        }
        if let Some(trigger) = obs.fire {
            // The span is consumed now, whether this narration is generated or skipped.
            self.narrator.spoke(f.pts);
            fired.push(Fired {
                trigger,
                span,
                end: (f.pts, f.wall),
                pick: std::mem::take(&mut self.span_pick),
                event: self.event.as_ref().map(|e| e.id.clone()),
            });
        }
    }

    /// Queues a snapshot of `frame` under `id`, if snapshots are taken.
    fn snapshot(&self, id: &str, frame: Option<&Arc<Frame>>) -> Option<SnapshotRef> {
        let snapshots = self.outputs.snapshots.as_ref()?;
        snapshots.submit(&self.memory.camera, id, frame?)
    }

    /// Publishes a message of the event in progress (`at`: stream and Unix seconds of the frame
    /// it is about).
    fn emit(
        &self,
        kind: EventType,
        at: (f64, f64),
        activity: f64,
        narration: Option<String>,
        snapshot: Option<SnapshotRef>,
        watch: Option<WatchAnswer>,
    ) {
        let Some(ev) = &self.event else { return };
        let event = ChangeEvent {
            id: ev.id.clone(),
            camera: self.memory.camera.clone(),
            kind,
            start_stream_secs: ev.start.0,
            start_ts: ev.start.1,
            stream_secs: at.0,
            ts: at.1,
            activity,
            peak_activity: ev.pick.peak(),
            narration,
            snapshot,
            watch,
        };
        if let Some(p) = &self.outputs.publisher {
            p.event(&event);
        }
        let _ = self.outputs.events.send(event);
    }

    fn narrate(&mut self, fired: Fired) {
        let Some(live) = self.live.as_ref().map(LiveCache::view) else {
            return;
        };
        let camera = self.memory.camera.clone();
        let started_wall = SystemTime::now();
        let id = format!(
            "{camera}-{}",
            started_wall
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0)
        );
        let mut stream = self
            .outputs
            .publisher
            .as_ref()
            .map(|p| p.narration_stream(&camera, &id));
        let cfg = self.opts.camera.narrate.clone();
        let result = narrate::generate_narration(
            &self.generator,
            &live,
            fired.trigger,
            &cfg,
            &self.stop,
            |delta| {
                if let Some(s) = stream.as_mut() {
                    s.chunk(delta);
                }
            },
        );
        let g = match result {
            Ok(g) => g,
            Err(e) => {
                WatchStats::bump(&self.stats().narration_errors);
                self.error("Narration failed", &e);
                return;
            }
        };
        if g.cut && g.text.trim().is_empty() {
            // Stopped before it said anything: nothing true to publish. (Its chunks, if any,
            // were whitespace; the stream ends without a final message.)
            tracing::info!(camera = %camera, "Narration cut off by the stop before any text; not published");
            return;
        }
        let stats = self.stats();
        WatchStats::bump(&stats.narrations);
        stats.narration_first_token.observe(g.first_token);
        stats.narration_total.observe(g.total);
        let snapshot = self.snapshot(&id, fired.pick.frame());
        let window = live.span.unwrap_or((fired.span.0, fired.end.0));
        // The camera's own question, on the same footage, before the narration goes out.
        let watch = match (&cfg.watch_for, g.cut) {
            (Some(w), false) => {
                match narrate::answer_watch(&self.generator, &live, w, &self.stop) {
                    Ok(a) => Some(a),
                    Err(e) => {
                        self.error("Watch-for answer failed", &e);
                        None
                    }
                }
            }
            _ => None,
        };
        let narration = Narration {
            id,
            camera: camera.clone(),
            trigger: fired.trigger,
            text: g.text,
            stream_start_secs: fired.span.0.as_secs_f64(),
            stream_end_secs: fired.end.0.as_secs_f64(),
            wall_start: unix_secs(fired.span.1),
            wall_end: unix_secs(fired.end.1),
            window_start_secs: window.0.as_secs_f64(),
            window_end_secs: window.1.as_secs_f64(),
            frames: live.frames as u32,
            visual_tokens: live.visual_tokens as u32,
            prompt_tokens: g.prompt_tokens as u32,
            generated_tokens: g.generated_tokens as u32,
            first_token_ms: g.first_token.as_secs_f64() * 1e3,
            total_ms: g.total.as_secs_f64() * 1e3,
            incomplete: g.cut,
            activity: fired.pick.peak(),
            event: fired.event.clone(),
            snapshot,
            watch,
        };
        tracing::info!(
            target: "narration",
            camera = %camera,
            trigger = ?narration.trigger,
            span = format!("{:.1}-{:.1}s", narration.stream_start_secs, narration.stream_end_secs),
            tokens = narration.generated_tokens,
            first_token_ms = format!("{:.0}", narration.first_token_ms),
            "{:?}",
            narration.text
        );
        if let Some(s) = stream {
            s.finish(&narration);
        }
        // The event it belongs to, if still in progress, gets an update naming it.
        if let (Some(ev), Some(id)) = (&self.event, &narration.event)
            && ev.id == *id
        {
            let at = (narration.stream_end_secs, narration.wall_end);
            self.emit(
                EventType::Update,
                at,
                narration.activity,
                Some(narration.id.clone()),
                narration.snapshot.clone(),
                narration.watch.clone(),
            );
        }
        let _ = self.outputs.narrations.send(narration);
    }
}
