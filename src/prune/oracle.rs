//! Straightforward float32 DiffFP, written to mirror the reference arithmetic step by step.
//!
//! This is the oracle the integer fast path is proven against and the float baseline in the
//! benches. It is deliberately naive: it normalises every value into a float frame the way the
//! reference processor does, then sums `|x_t - x_{t-1}|` over the 2352 values of a token block in
//! the reference's index order. It allocates its float buffers once, in [`FloatPruner::new`].

use super::PruneParams;
use super::error::PruneError;
use super::grid::BlockGrid;

/// How 8-bit values become normalised float32 values (mean = std = 0.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Normalise {
    /// docs/REFERENCE.md §1a: `v = f32(u * (1/255) in f64)`, then `x = (v - 0.5f32) / 0.5f32`.
    #[default]
    Rescale,
    /// Fast processors fold the rescale into mean/std: `x = (f32(u) - 127.5) / 127.5`.
    ///
    /// Kept as a second oracle because the rounding differs; the integer rule must agree with
    /// both wherever the decision does not hinge on float rounding.
    Fused,
}

impl Normalise {
    /// Normalised float32 value of one 8-bit channel value.
    pub fn apply(self, u: u8) -> f32 {
        match self {
            Normalise::Rescale => {
                // transformers rescales in float64 and casts to float32 before normalising.
                let v = (f64::from(u) * (1.0 / 255.0)) as f32;
                (v - 0.5f32) / 0.5f32
            }
            Normalise::Fused => (f32::from(u) - 127.5f32) / 127.5f32,
        }
    }
}

/// Reference score `d = 255 * mean |x_t - x_{t-1}|` of block `n` of two normalised frames.
///
/// `a` and `b` are packed normalised frames (`width * 3` floats per row). Values are visited in
/// the reference's token-row order: sub-patches (mh, mw) in raster order, then (C, py, px).
fn block_score(geom: &BlockGrid, patch: usize, a: &[f32], b: &[f32], n: usize) -> f32 {
    let merge = geom.block() / patch;
    let (by, bx) = (n / geom.cols(), n % geom.cols());
    let row = geom.width() * 3;
    let mut sum = 0.0f32;
    for mh in 0..merge {
        for mw in 0..merge {
            for c in 0..3 {
                for py in 0..patch {
                    let y = by * geom.block() + mh * patch + py;
                    for px in 0..patch {
                        let x = bx * geom.block() + mw * patch + px;
                        let i = y * row + x * 3 + c;
                        sum += (a[i] - b[i]).abs();
                    }
                }
            }
        }
    }
    let mean = sum / geom.values_per_block() as f32;
    255.0f32 * mean
}

/// Float32 reference pruner: keep masks exactly as the reference formula computes them in f32.
#[derive(Debug)]
pub struct FloatPruner {
    geom: BlockGrid,
    patch: usize,
    threshold: f32,
    min_tokens: usize,
    norm: Normalise,
    prev: Vec<f32>,
    cur: Vec<f32>,
    have_prev: bool,
    keep: Vec<bool>,
    scores: Vec<f32>,
}

impl FloatPruner {
    /// Float pruner for `width x height` frames; uses `params`' threshold, min_tokens, patch and
    /// merge (the mode is ignored: this is the reference formula), validated as by
    /// [`super::Pruner::new`].
    pub fn new(
        width: usize,
        height: usize,
        params: &PruneParams,
        norm: Normalise,
    ) -> Result<Self, PruneError> {
        params.validate()?;
        let geom = BlockGrid::new(width, height, params.patch, params.merge)?;
        if params.min_tokens > geom.tokens() {
            return Err(PruneError::MinTokensTooLarge {
                min_tokens: params.min_tokens,
                tokens: geom.tokens(),
            });
        }
        let n = geom.frame_bytes();
        Ok(FloatPruner {
            geom,
            patch: params.patch,
            threshold: params.threshold,
            min_tokens: params.min_tokens,
            norm,
            prev: vec![0.0; n],
            cur: vec![0.0; n],
            have_prev: false,
            keep: vec![false; geom.tokens()],
            scores: vec![0.0; geom.tokens()],
        })
    }

    /// Forget the previous frame: the next frame is a key frame, kept whole.
    pub fn reset(&mut self) {
        self.have_prev = false;
    }

    /// Prune one RGB24 frame with rows `stride` bytes apart; returns the keep mask in raster
    /// order.
    pub fn push(&mut self, rgb: &[u8], stride: usize) -> Result<&[bool], PruneError> {
        self.geom.check_frame(rgb.len(), stride)?;
        let row = self.geom.row_bytes();
        for y in 0..self.geom.height() {
            let src = &rgb[y * stride..y * stride + row];
            let dst = &mut self.cur[y * row..(y + 1) * row];
            for (d, &u) in dst.iter_mut().zip(src) {
                *d = self.norm.apply(u);
            }
        }
        if self.have_prev {
            for n in 0..self.geom.tokens() {
                let d = block_score(&self.geom, self.patch, &self.cur, &self.prev, n);
                self.scores[n] = d;
                self.keep[n] = d > self.threshold;
            }
        } else {
            // The reference forces frame 0's score to threshold + 1.
            self.scores.fill(self.threshold + 1.0);
            self.keep.fill(true);
        }
        if self.keep.iter().filter(|&&k| k).count() < self.min_tokens {
            self.keep[..self.min_tokens].fill(true);
        }
        std::mem::swap(&mut self.prev, &mut self.cur);
        self.have_prev = true;
        Ok(&self.keep)
    }

    /// Reference scores of the last frame, raster order.
    pub fn scores(&self) -> &[f32] {
        &self.scores
    }
}

/// Float32 reference score of one block given directly as two 8-bit value sequences.
///
/// The values are in the reference's token-row order already, so this is the plain
/// "normalise, |diff|, sum in index order, / N, * 255" formula. Used to calibrate and to test
/// the integer bound on synthetic blocks.
pub fn score_values(norm: Normalise, cur: &[u8], prev: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (&a, &b) in cur.iter().zip(prev) {
        sum += (norm.apply(a) - norm.apply(b)).abs();
    }
    let mean = sum / cur.len() as f32;
    255.0f32 * mean
}
