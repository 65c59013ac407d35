//! Memory: each camera's encoded recent footage, and the live KV cache built on it
//! (docs/ARCHITECTURE.md, "Memory and live KV cache").
//!
//! ```text
//! window (RGB frames) ──encode once──► Memory (per frame: pts, keep-mask, kept visual tokens)
//!                      identical frame: previous features reused, no encoder run
//!                                              │ incremental prefill, one stream item per frame
//!                                              ▼
//!                                        LiveCache (system turn + frame items) ──fork──► narration,
//!                                              rebuilt from Memory with slack        question
//! ```
//!
//! The memory keeps the window's span of frames as visual tokens only (never the pixels a second
//! time); questions and cache rebuilds read it and never run the vision encoder again.

mod encode;
pub(crate) mod live;
pub mod plan;

pub use encode::FrameEncoder;
pub(crate) use live::stream_format;
pub use live::{Evictions, LiveCache, LiveOptions, LiveView, RebuildReason};

use crate::base::Histogram;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// One sampled frame as the model sees it: its time, which tokens DiffFP kept, and their features.
/// For a model that encodes clips (Apollo) one item is a whole clip: `seq` is its last frame's,
/// `pts` its first frame's time and `end` its last frame's.
pub struct MemoryFrame {
    /// The frame's sequence number in its camera (see [`crate::ring::Frame::seq`]).
    pub seq: u64,
    /// Stream time.
    pub pts: Duration,
    /// Stream time of the item's last frame (`pts` for a frame; a clip's last sampled frame).
    pub end: Duration,
    /// Wall-clock time it was sampled.
    pub wall: SystemTime,
    /// DiffFP's keep flags, one per token (`None`: pruning did not run, every token kept).
    pub keep: Option<Box<[bool]>>,
    /// Visual tokens before pruning.
    pub total: usize,
    /// The first frame of a stream (or after a restart): kept whole, not activity.
    pub key_frame: bool,
    /// The features came from the previous frame (bit-identical pixels): no encoder run.
    pub reused: bool,
    /// The kept tokens' features, `kept() * hidden` floats, in token order.
    pub tokens: Arc<[f32]>,
    hidden: usize,
}

impl std::fmt::Debug for MemoryFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryFrame")
            .field("seq", &self.seq)
            .field("pts", &self.pts)
            .field("kept", &self.kept())
            .field("total", &self.total)
            .field("key_frame", &self.key_frame)
            .field("reused", &self.reused)
            .finish()
    }
}

impl MemoryFrame {
    /// Kept visual tokens.
    pub fn kept(&self) -> usize {
        self.tokens.len() / self.hidden.max(1)
    }

    /// Share of the frame's tokens kept (1.0 for a key frame or an unpruned frame).
    pub fn kept_ratio(&self) -> f64 {
        if self.total == 0 {
            1.0
        } else {
            self.kept() as f64 / self.total as f64
        }
    }

    /// Bytes of features held.
    pub fn bytes(&self) -> usize {
        self.tokens.len() * std::mem::size_of::<f32>() + self.keep.as_ref().map_or(0, |k| k.len())
    }
}

/// The encoded frames of one camera's window, oldest first, evicted by stream time like the
/// window itself (and by a frame-count bound whatever the timestamps).
#[derive(Debug)]
pub struct Memory {
    span: Duration,
    capacity: usize,
    frames: VecDeque<Arc<MemoryFrame>>,
    bytes: usize,
}

impl Memory {
    /// A memory of `span` stream time holding at most `capacity` frames.
    pub fn new(span: Duration, capacity: usize) -> Memory {
        Memory {
            span,
            capacity: capacity.max(1),
            frames: VecDeque::with_capacity(capacity.max(1)),
            bytes: 0,
        }
    }

    /// Adds the newest frame; returns how many old frames were evicted.
    pub fn push(&mut self, frame: Arc<MemoryFrame>) -> usize {
        let newest = frame.pts;
        self.bytes += frame.bytes();
        self.frames.push_back(frame);
        let mut evicted = 0;
        while let Some(front) = self.frames.front() {
            let too_old = newest.saturating_sub(front.pts) >= self.span && self.frames.len() > 1;
            if too_old || self.frames.len() > self.capacity {
                self.bytes -= front.bytes();
                self.frames.pop_front();
                evicted += 1;
            } else {
                break;
            }
        }
        evicted
    }

    /// Every frame, oldest first.
    pub fn frames(&self) -> &VecDeque<Arc<MemoryFrame>> {
        &self.frames
    }

    /// Frames with `pts >= t0`, oldest first.
    pub fn since(&self, t0: Duration) -> Vec<Arc<MemoryFrame>> {
        let start = self.frames.partition_point(|f| f.pts < t0);
        self.frames.range(start..).cloned().collect()
    }

    /// Frames with a sequence number above `seq`, oldest first.
    pub fn after_seq(&self, seq: u64) -> Vec<Arc<MemoryFrame>> {
        let start = self.frames.partition_point(|f| f.seq <= seq);
        self.frames.range(start..).cloned().collect()
    }

    /// The newest frame.
    pub fn newest(&self) -> Option<&Arc<MemoryFrame>> {
        self.frames.back()
    }

    /// The oldest frame.
    pub fn oldest(&self) -> Option<&Arc<MemoryFrame>> {
        self.frames.front()
    }

    /// Frames held.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Bytes of features and masks held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The configured span.
    pub fn span(&self) -> Duration {
        self.span
    }

    /// Drops every frame (the camera restarted with another geometry).
    pub fn clear(&mut self) {
        self.frames.clear();
        self.bytes = 0;
    }
}

/// Counters and latency histograms of one camera's watching (memory, live cache, narration and
/// answers), read by status reports and `/metrics`.
#[derive(Debug, Default)]
pub struct WatchStats {
    /// Frames run through the vision encoder, counted once they are in the live cache too
    /// (a frame is in memory a moment before it is counted).
    pub frames_encoded: AtomicU64,
    /// Frames whose features were reused from the previous (bit-identical) frame.
    pub frames_reused: AtomicU64,
    /// Sampled frames that left the window before the memory could encode them.
    pub frames_missed: AtomicU64,
    /// Encoder or prefill failures (the frame is skipped; the cache is rebuilt).
    pub errors: AtomicU64,
    /// Live cache rebuilds from memory.
    pub rebuilds: AtomicU64,
    /// Frames evicted from the live cache in place (`cache_policy = "sink_recent"`).
    pub evicted_frames: AtomicU64,
    /// Visual tokens dropped from frames the live cache keeps (`cache_policy = "compress"`).
    pub compressed_tokens: AtomicU64,
    /// Positions in the live cache.
    pub cache_positions: AtomicU64,
    /// Bytes of the live cache's tensors.
    pub cache_bytes: AtomicU64,
    /// The memory plan's bound on those bytes (0: no plan).
    pub cache_planned_bytes: AtomicU64,
    /// Frames in the memory.
    pub memory_frames: AtomicU64,
    /// Bytes of features in the memory.
    pub memory_bytes: AtomicU64,
    /// Narrations published.
    pub narrations: AtomicU64,
    /// Narrations a trigger asked for but that were skipped because generation was behind.
    pub narrations_skipped: AtomicU64,
    /// Narrations that failed while generating.
    pub narration_errors: AtomicU64,
    /// Questions answered.
    pub answers: AtomicU64,
    /// Questions that failed while generating (not refused requests).
    pub answer_errors: AtomicU64,
    /// Time from the trigger to a narration's first token.
    pub narration_first_token: Histogram,
    /// Time from the trigger to a narration's last token.
    pub narration_total: Histogram,
    /// Time from receiving a question to its first token.
    pub answer_first_token: Histogram,
    /// Time from receiving a question to its last token.
    pub answer_total: Histogram,
    /// Time to append one round of new frames to the live cache (encode excluded).
    pub append: Histogram,
}

impl WatchStats {
    /// Adds one to a counter.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// A camera's memory, narrations and answers at one moment (status topic, `edgevlm status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryReport {
    /// Encoded frames held.
    pub frames: u64,
    /// Bytes of visual features held.
    pub bytes: u64,
    /// Positions in the live KV cache.
    pub cache_positions: u64,
    /// Bytes of the live KV cache (absent in older reports).
    #[serde(default)]
    pub cache_bytes: u64,
    /// The memory plan's bound on the live cache's bytes (`edgevlm plan`; 0: no plan).
    #[serde(default)]
    pub cache_planned_bytes: u64,
    /// Live cache rebuilds from memory.
    pub rebuilds: u64,
    /// Frames evicted from the live cache in place (`sink_recent`; absent in older reports).
    #[serde(default)]
    pub evicted_frames: u64,
    /// Visual tokens dropped from frames the live cache keeps (`compress`; absent in older
    /// reports).
    #[serde(default)]
    pub compressed_tokens: u64,
    /// Frames run through the vision encoder, counted once they are in the live cache too
    /// (a frame is in memory a moment before it is counted).
    pub frames_encoded: u64,
    /// Frames that reused the previous frame's features.
    pub frames_reused: u64,
    /// Frames that left the window before they could be encoded.
    pub frames_missed: u64,
    /// Narrations published.
    pub narrations: u64,
    /// Narrations skipped because generation was behind.
    pub narrations_skipped: u64,
    /// Questions answered.
    pub answers: u64,
    /// Failures (encoder, prefill, narration, answer); see the log.
    pub errors: u64,
    /// Median time to a narration's first token, in milliseconds (histogram bucket bound).
    pub narration_first_token_p50_ms: Option<f64>,
    /// Median time to an answer's first token, in milliseconds (histogram bucket bound).
    pub answer_first_token_p50_ms: Option<f64>,
}

impl MemoryReport {
    /// The memory part of a status line.
    pub fn line(&self) -> String {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let mut line = format!(
            "memory {} frames ({:.1} MiB), cache {} positions",
            self.frames,
            mib(self.bytes),
            self.cache_positions,
        );
        if self.cache_planned_bytes > 0 {
            line.push_str(&format!(
                " ({:.1} of {:.1} MiB planned)",
                mib(self.cache_bytes),
                mib(self.cache_planned_bytes)
            ));
        }
        line.push_str(&format!(", {} rebuilds", self.rebuilds));
        if self.evicted_frames > 0 {
            line.push_str(&format!(", {} frames evicted", self.evicted_frames));
        }
        if self.compressed_tokens > 0 {
            line.push_str(&format!(
                ", {} tokens compressed away",
                self.compressed_tokens
            ));
        }
        line.push_str(&format!(" | narrations {}", self.narrations));
        if self.narrations_skipped > 0 {
            line.push_str(&format!(" ({} skipped: behind)", self.narrations_skipped));
        }
        line.push_str(&format!(" | answers {}", self.answers));
        if self.errors > 0 {
            line.push_str(&format!(" | {} errors (see log)", self.errors));
        }
        line
    }
}

/// One camera's memory and live cache as shared between its worker and the question stage.
#[derive(Debug)]
pub struct CameraMemory {
    /// Camera id.
    pub camera: String,
    /// Footage the camera keeps (`window_secs`).
    pub window: Duration,
    /// Counters and histograms.
    pub stats: WatchStats,
    state: Mutex<Shared>,
}

#[derive(Debug)]
struct Shared {
    memory: Memory,
    live: Option<Arc<LiveView>>,
}

/// What a question takes from a camera: the live cache (if one is built) and the memory's frames.
#[derive(Debug, Clone)]
pub struct MemorySnapshot {
    /// The live cache as of the last frame appended to it.
    pub live: Option<Arc<LiveView>>,
    /// The memory's frames, oldest first.
    pub frames: Vec<Arc<MemoryFrame>>,
}

impl CameraMemory {
    /// An empty memory for a camera keeping `window` of footage in at most `capacity` frames.
    pub fn new(camera: impl Into<String>, window: Duration, capacity: usize) -> CameraMemory {
        CameraMemory {
            camera: camera.into(),
            window,
            stats: WatchStats::default(),
            state: Mutex::new(Shared {
                memory: Memory::new(window, capacity),
                live: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // Holders only push or clone pointers; a panic cannot leave the state half-written.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds encoded frames (oldest first).
    pub fn push(&self, frames: &[Arc<MemoryFrame>]) {
        let mut s = self.lock();
        for f in frames {
            s.memory.push(f.clone());
        }
        self.stats
            .memory_frames
            .store(s.memory.len() as u64, Ordering::Relaxed);
        self.stats
            .memory_bytes
            .store(s.memory.bytes() as u64, Ordering::Relaxed);
    }

    /// Publishes the live cache's new state.
    pub fn set_live(&self, view: Option<Arc<LiveView>>) {
        let positions = view.as_ref().map_or(0, |v| v.cache.len() as u64);
        let bytes = view.as_ref().map_or(0, |v| v.cache.bytes() as u64);
        self.lock().live = view;
        self.stats
            .cache_positions
            .store(positions, Ordering::Relaxed);
        self.stats.cache_bytes.store(bytes, Ordering::Relaxed);
    }

    /// A consistent copy of the live cache and the frames, for a question.
    pub fn snapshot(&self) -> MemorySnapshot {
        let s = self.lock();
        MemorySnapshot {
            live: s.live.clone(),
            frames: s.memory.frames().iter().cloned().collect(),
        }
    }

    /// Frames and bytes held.
    pub fn size(&self) -> (usize, usize) {
        let s = self.lock();
        (s.memory.len(), s.memory.bytes())
    }

    /// The counters as a report.
    pub fn report(&self) -> MemoryReport {
        let s = &self.stats;
        let get = WatchStats::get;
        let (frames, bytes) = self.size();
        let p50 = |h: &Histogram| h.snapshot().quantile(0.5).map(|q| q * 1e3);
        MemoryReport {
            frames: frames as u64,
            bytes: bytes as u64,
            cache_positions: get(&s.cache_positions),
            cache_bytes: get(&s.cache_bytes),
            cache_planned_bytes: get(&s.cache_planned_bytes),
            rebuilds: get(&s.rebuilds),
            evicted_frames: get(&s.evicted_frames),
            compressed_tokens: get(&s.compressed_tokens),
            frames_encoded: get(&s.frames_encoded),
            frames_reused: get(&s.frames_reused),
            frames_missed: get(&s.frames_missed),
            narrations: get(&s.narrations),
            narrations_skipped: get(&s.narrations_skipped),
            answers: get(&s.answers),
            errors: get(&s.errors) + get(&s.narration_errors) + get(&s.answer_errors),
            narration_first_token_p50_ms: p50(&s.narration_first_token),
            answer_first_token_p50_ms: p50(&s.answer_first_token),
        }
    }

    /// Drops every frame and the live cache.
    pub fn clear(&self) {
        let mut s = self.lock();
        s.memory.clear();
        s.live = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(seq: u64, pts_ms: u64, kept: usize) -> Arc<MemoryFrame> {
        Arc::new(MemoryFrame {
            seq,
            pts: Duration::from_millis(pts_ms),
            end: Duration::from_millis(pts_ms),
            wall: SystemTime::UNIX_EPOCH,
            keep: None,
            total: 84,
            key_frame: false,
            reused: false,
            tokens: vec![0.0; kept * 8].into(),
            hidden: 8,
        })
    }

    #[test]
    fn memory_keeps_the_span_and_counts_its_bytes() {
        let mut m = Memory::new(Duration::from_secs(10), 11);
        for i in 0..100 {
            m.push(frame(i, i * 1000, 1 + (i as usize % 5)));
            assert!(m.len() <= 10);
            let bytes: usize = m.frames().iter().map(|f| f.bytes()).sum();
            assert_eq!(m.bytes(), bytes);
        }
        assert_eq!(m.oldest().unwrap().seq, 90);
        assert_eq!(m.since(Duration::from_secs(95)).len(), 5);
        assert_eq!(m.after_seq(97).len(), 2);
    }

    #[test]
    fn memory_is_bounded_by_frames_whatever_the_timestamps() {
        let mut m = Memory::new(Duration::from_secs(10), 11);
        for i in 0..100 {
            m.push(frame(i, 0, 1));
        }
        assert_eq!(m.len(), 11);
    }
}
