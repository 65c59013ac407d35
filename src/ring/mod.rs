//! Ring: fixed-fps sampling by presentation timestamp and the bounded per-camera window.
//!
//! Data flow: GStreamer's streaming thread offers every delivered frame to the [`Sampler`]; sampled
//! frames are copied once and pushed through a bounded lock-free SPSC hand-off ([`handoff`]) that
//! never blocks that thread; the camera task moves them into the [`Window`], which keeps the last
//! `window_secs` of footage and serves snapshots to readers.

mod sampler;
mod window;

pub use sampler::{SampleDecision, Sampler};
pub use window::{Window, WindowInfo};

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// One sampled frame: packed RGB24 at the camera's model geometry, rows without padding.
pub struct Frame {
    /// Camera id.
    pub camera: Arc<str>,
    /// Sequence number among the camera's sampled frames (continues across restarts).
    pub seq: u64,
    /// Stream time: time since the camera's first frame, continuous across restarts.
    pub pts: Duration,
    /// Wall-clock time the frame was sampled.
    pub wall_time: SystemTime,
    /// Width in pixels (a multiple of 28).
    pub width: u32,
    /// Height in pixels (a multiple of 28).
    pub height: u32,
    /// `width * height * 3` bytes, row-major RGB.
    pub rgb: Box<[u8]>,
    /// DiffFP's decision for this frame (set by the camera task before the frame enters the
    /// window; `None` if pruning could not run for this geometry).
    pub tokens: Option<TokenMask>,
}

/// Which visual tokens of a frame DiffFP keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenMask {
    /// One flag per merged token, rows of tokens top to bottom, left to right.
    pub keep: Box<[bool]>,
    /// Tokens kept.
    pub kept: usize,
    /// The first frame of the camera's stream (or after a restart): kept whole.
    pub key_frame: bool,
    /// Every block is bit-identical to the previous frame: its encoder output can be reused.
    pub identical: bool,
    /// The threshold applied (reference units; adaptive mode reports its own).
    pub threshold: f32,
}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A frame is hundreds of kilobytes; say what it is instead of dumping it.
        f.debug_struct("Frame")
            .field("camera", &self.camera)
            .field("seq", &self.seq)
            .field("pts", &self.pts)
            .field("size", &format_args!("{}x{}", self.width, self.height))
            .field("bytes", &self.rgb.len())
            .field("kept", &self.tokens.as_ref().map(|t| t.kept))
            .finish()
    }
}

/// The SPSC hand-off between GStreamer's streaming thread and the camera task.
pub mod handoff {
    use super::Frame;
    use ringbuf::HeapRb;
    use ringbuf::traits::Split;

    /// Producer side, owned by the appsink callback.
    pub type Producer = ringbuf::HeapProd<Frame>;
    /// Consumer side, owned by the camera task.
    pub type Consumer = ringbuf::HeapCons<Frame>;

    /// Frames that may wait between the two threads. When full the newest frame is dropped and
    /// counted as overflow: the camera task is behind, and frames already queued keep their order.
    pub const CAPACITY: usize = 4;

    /// A new hand-off queue.
    pub fn channel() -> (Producer, Consumer) {
        HeapRb::<Frame>::new(CAPACITY).split()
    }
}

/// Per-camera ingest counters, updated lock-free from the streaming thread.
#[derive(Debug, Default)]
pub struct Counters {
    /// Decoded frames that reached the rate stage (the camera's real rate).
    pub frames_in: AtomicU64,
    /// Frames accepted into the window.
    pub sampled: AtomicU64,
    /// Frames whose timestamp was not after the last sampled one (reordered or rewound).
    pub late: AtomicU64,
    /// Sampled frames lost because the hand-off queue was full.
    pub overflow: AtomicU64,
    /// Pipeline restarts.
    pub restarts: AtomicU64,
    /// Visual tokens of pruned frames, before pruning.
    pub tokens_total: AtomicU64,
    /// Visual tokens DiffFP kept.
    pub tokens_kept: AtomicU64,
    /// Frames bit-identical to their predecessor (encoder output reusable).
    pub frames_identical: AtomicU64,
    /// Compressed frames the decoder never got (`decode = "keyframes"`).
    pub undecoded: AtomicU64,
    /// Pipelines that did not reach Null within the stop's bound and were left behind.
    pub left_behind: AtomicU64,
    /// DiffFP's current threshold (f32 bits; adaptive mode moves it).
    pub prune_threshold_bits: std::sync::atomic::AtomicU32,
}

/// A consistent-enough copy of [`Counters`] for status lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterSnapshot {
    /// Decoded frames in.
    pub frames_in: u64,
    /// Frames sampled into the window.
    pub sampled: u64,
    /// Frames decimated by the fixed-fps sampling (in - sampled - late - overflow).
    pub dropped: u64,
    /// Frames with a timestamp not after the last sampled one.
    pub late: u64,
    /// Sampled frames lost to a full hand-off.
    pub overflow: u64,
    /// Pipeline restarts.
    pub restarts: u64,
    /// Visual tokens before pruning.
    pub tokens_total: u64,
    /// Visual tokens kept by DiffFP.
    pub tokens_kept: u64,
    /// Frames bit-identical to their predecessor.
    pub frames_identical: u64,
    /// Compressed frames not decoded (`decode = "keyframes"`; absent in older reports).
    #[serde(default)]
    pub undecoded: u64,
    /// Pipelines left behind by a stop that did not end in time (absent in older reports).
    #[serde(default)]
    pub left_behind: u64,
}

impl CounterSnapshot {
    /// Share of visual tokens DiffFP kept (1.0 before any frame).
    pub fn kept_ratio(&self) -> f64 {
        if self.tokens_total == 0 {
            1.0
        } else {
            self.tokens_kept as f64 / self.tokens_total as f64
        }
    }
}

impl Counters {
    /// Records one pruned frame.
    pub fn record_prune(&self, mask: &TokenMask) {
        self.tokens_total
            .fetch_add(mask.keep.len() as u64, Ordering::Relaxed);
        self.tokens_kept
            .fetch_add(mask.kept as u64, Ordering::Relaxed);
        if mask.identical {
            Self::bump(&self.frames_identical);
        }
        self.prune_threshold_bits
            .store(mask.threshold.to_bits(), Ordering::Relaxed);
    }

    /// DiffFP's current threshold, once a frame was pruned.
    pub fn prune_threshold(&self) -> Option<f32> {
        (self.tokens_total.load(Ordering::Relaxed) > 0)
            .then(|| f32::from_bits(self.prune_threshold_bits.load(Ordering::Relaxed)))
    }

    /// Adds one to a counter.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> CounterSnapshot {
        let frames_in = self.frames_in.load(Ordering::Relaxed);
        let sampled = self.sampled.load(Ordering::Relaxed);
        let late = self.late.load(Ordering::Relaxed);
        let overflow = self.overflow.load(Ordering::Relaxed);
        CounterSnapshot {
            frames_in,
            sampled,
            dropped: frames_in.saturating_sub(sampled + late + overflow),
            late,
            overflow,
            restarts: self.restarts.load(Ordering::Relaxed),
            tokens_total: self.tokens_total.load(Ordering::Relaxed),
            tokens_kept: self.tokens_kept.load(Ordering::Relaxed),
            frames_identical: self.frames_identical.load(Ordering::Relaxed),
            undecoded: self.undecoded.load(Ordering::Relaxed),
            left_behind: self.left_behind.load(Ordering::Relaxed),
        }
    }
}
