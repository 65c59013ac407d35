//! Decision logic shared by every SAD backend: SADs in, keep mask, scores and stats out.
//!
//! Keeping this on the CPU for all backends is what makes GPU masks identical to CPU masks:
//! a backend only has to produce the same integer SADs.

use std::fmt;

use super::adaptive::NoiseFloor;
use super::bound::SadBound;
use super::grid::BlockGrid;
use super::{PruneMode, PruneParams};

/// The pruning decision for one frame; owned by the pruner and overwritten by the next frame.
#[derive(Clone, PartialEq)]
pub struct Decision {
    keep: Vec<bool>,
    scores: Vec<f32>,
    sads: Vec<u32>,
    kept: usize,
    grid: (usize, usize),
    key_frame: bool,
    identical: bool,
    threshold_used: f32,
}

impl Decision {
    /// Empty decision sized for `geom` (allocated once per pruner).
    pub(crate) fn new(geom: &BlockGrid) -> Self {
        let n = geom.tokens();
        Decision {
            keep: vec![false; n],
            scores: vec![0.0; n],
            sads: vec![0; n],
            kept: 0,
            grid: (geom.rows(), geom.cols()),
            key_frame: false,
            identical: false,
            threshold_used: 0.0,
        }
    }

    /// Keep flag per token, raster order (row-major over the token grid).
    pub fn keep(&self) -> &[bool] {
        &self.keep
    }

    /// Raster indices of the kept tokens, ascending.
    pub fn kept_indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.keep
            .iter()
            .enumerate()
            .filter(|(_, k)| **k)
            .map(|(i, _)| i)
    }

    /// Number of kept tokens.
    pub fn kept(&self) -> usize {
        self.kept
    }

    /// Token grid as (rows, cols).
    pub fn grid(&self) -> (usize, usize) {
        self.grid
    }

    /// Reference score `d = 255 * mean|Δx|` per token: the f32 nearest to `2 * SAD / N`
    /// (`SAD / 1176` for 28-pixel blocks), i.e. the exact value rounded once. On key frames it
    /// is `threshold_used + 1`, as the reference forces it.
    pub fn scores(&self) -> &[f32] {
        &self.scores
    }

    /// Sum of absolute 8-bit differences per token against the previous frame; 0 on key frames.
    pub fn sads(&self) -> &[u32] {
        &self.sads
    }

    /// Whether this is the first frame after construction or `reset()` (kept whole).
    pub fn key_frame(&self) -> bool {
        self.key_frame
    }

    /// Whether every block is bit-identical to the previous frame (never on key frames): the
    /// encoder may reuse the previous frame's features, which is exact because the encoder
    /// attends within one frame only.
    pub fn identical(&self) -> bool {
        self.identical
    }

    /// Threshold applied to this frame in reference units (`d`); adaptive mode reports its own,
    /// `off` reports negative infinity (every score passes).
    pub fn threshold_used(&self) -> f32 {
        self.threshold_used
    }

    /// Keep mask as "0110…", one character per token in raster order.
    pub fn mask_string(&self) -> String {
        self.keep
            .iter()
            .map(|&k| if k { '1' } else { '0' })
            .collect()
    }

    /// Mutable SAD slot for a backend to fill before [`Decider::decide`].
    pub(crate) fn sads_mut(&mut self) -> &mut [u32] {
        &mut self.sads
    }
}

impl fmt::Debug for Decision {
    // A decision of a large frame has thousands of tokens: summarise instead of dumping.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("grid", &self.grid)
            .field("kept", &self.kept)
            .field("key_frame", &self.key_frame)
            .field("identical", &self.identical)
            .field("threshold_used", &self.threshold_used)
            .finish_non_exhaustive()
    }
}

/// Running counters of one pruner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PruneStats {
    /// Frames pushed, key frames included.
    pub frames: u64,
    /// Tokens seen (frames times tokens per frame).
    pub tokens_total: u64,
    /// Tokens kept.
    pub tokens_kept: u64,
    /// Frames flagged `identical` to their previous frame.
    pub frames_identical: u64,
}

impl PruneStats {
    /// Kept tokens over seen tokens; 1.0 before any frame (nothing was pruned).
    pub fn kept_ratio(&self) -> f64 {
        if self.tokens_total == 0 {
            1.0
        } else {
            self.tokens_kept as f64 / self.tokens_total as f64
        }
    }
}

/// Turns per-block SADs into a [`Decision`] under the pruner's mode.
#[derive(Debug, Clone)]
pub(crate) struct Decider {
    params: PruneParams,
    values_per_block: usize,
    bound: SadBound,
    noise: NoiseFloor,
    stats: PruneStats,
}

impl Decider {
    /// Decider for validated `params` on `geom`; calibrates the reference bound once.
    pub(crate) fn new(params: PruneParams, geom: &BlockGrid) -> Self {
        let values_per_block = geom.values_per_block();
        Decider {
            params,
            values_per_block,
            bound: SadBound::calibrated(params.threshold, values_per_block),
            noise: NoiseFloor::new(geom.tokens(), values_per_block),
            stats: PruneStats::default(),
        }
    }

    /// The reference-threshold rule.
    pub(crate) fn bound(&self) -> &SadBound {
        &self.bound
    }

    /// Adaptive mode's noise floor (mean |Δu| in grey levels), if measured yet.
    pub(crate) fn noise_floor(&self) -> Option<f32> {
        self.noise.floor()
    }

    /// Counters so far.
    pub(crate) fn stats(&self) -> &PruneStats {
        &self.stats
    }

    /// First frame of a window: every token kept, scores forced to `threshold + 1`.
    pub(crate) fn key_frame(&mut self, d: &mut Decision) {
        let threshold = match self.params.mode {
            PruneMode::Reference => self.params.threshold,
            PruneMode::Adaptive => self.noise.threshold(self.params.threshold),
            PruneMode::Off => f32::NEG_INFINITY,
        };
        d.keep.fill(true);
        d.sads.fill(0);
        // The reference forces frame 0's score to threshold + 1 (off mode: +inf - still passes).
        d.scores.fill(threshold + 1.0);
        d.key_frame = true;
        d.identical = false;
        d.threshold_used = threshold;
        self.finish(d);
    }

    /// Decide from the SADs already in `d.sads` (a frame compared with its previous frame).
    pub(crate) fn decide(&mut self, d: &mut Decision) {
        d.key_frame = false;
        d.identical = d.sads.iter().all(|&s| s == 0);
        let adaptive_bound;
        let (bound, threshold) = match self.params.mode {
            PruneMode::Reference => (Some(&self.bound), self.params.threshold),
            PruneMode::Adaptive => {
                if !d.identical {
                    self.noise.update(&d.sads);
                }
                let t = self.noise.threshold(self.params.threshold);
                if t == self.params.threshold {
                    // Quiet camera: exactly reference mode, calibrated bound included.
                    (Some(&self.bound), t)
                } else {
                    adaptive_bound = SadBound::exact(t, self.values_per_block);
                    (Some(&adaptive_bound), t)
                }
            }
            PruneMode::Off => (None, f32::NEG_INFINITY),
        };
        let half_n = self.values_per_block as f64 / 2.0;
        for ((keep, score), &sad) in d.keep.iter_mut().zip(&mut d.scores).zip(&d.sads) {
            *keep = bound.is_none_or(|b| b.keeps(sad));
            *score = (f64::from(sad) / half_n) as f32;
        }
        d.threshold_used = threshold;
        self.finish(d);
    }

    /// Minimum-tokens rule (exactly the reference's: force the first `min_tokens` in raster
    /// order when fewer are kept), kept count and stats.
    fn finish(&mut self, d: &mut Decision) {
        let min = self.params.min_tokens;
        let mut kept = d.keep.iter().filter(|&&k| k).count();
        if kept < min {
            d.keep[..min].fill(true);
            kept = d.keep.iter().filter(|&&k| k).count();
        }
        d.kept = kept;
        self.stats.frames += 1;
        self.stats.tokens_total += d.keep.len() as u64;
        self.stats.tokens_kept += kept as u64;
        self.stats.frames_identical += u64::from(d.identical);
    }
}
