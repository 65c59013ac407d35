//! Adaptive threshold (ours, a deviation from the reference): prune sensor noise, keep motion.
//!
//! The reference threshold (mean |Δu| > 0.05 grey levels) keeps every token of a real camera,
//! whose sensor noise alone moves each value by a grey level or two between frames. Adaptive
//! mode measures that noise per camera and raises the threshold just above it:
//!
//! - per frame, the noise sample is the [`NOISE_QUANTILE`] quantile of the per-block mean
//!   |Δu| (`SAD / N`): in a scene where at least that fraction of blocks is static, it is the
//!   noise of a static block, whatever moves elsewhere;
//! - the floor tracks the samples with an asymmetric EMA, falling fast ([`NOISE_FALL`]) and
//!   rising slowly ([`NOISE_RISE`]), so a burst of global motion (a pan, a light switching)
//!   barely lifts it; key frames and bit-identical frames (decoder duplicates) are not samples;
//! - the threshold in mean |Δu| is `min(NOISE_FACTOR * floor, floor + NOISE_MARGIN_LEVELS,
//!   NOISE_CAP_LEVELS)`, reported as `d = 2 * mean|Δu|` and never below the reference threshold.
//!
//! The margin and the cap are the guarantee: a block whose mean |Δu| is more than
//! [`NOISE_MARGIN_LEVELS`] above the noise floor, or above [`NOISE_CAP_LEVELS`], is always kept.

/// Quantile of per-block mean |Δu| taken as one frame's noise sample.
pub const NOISE_QUANTILE: f32 = 0.10;
/// EMA weight of a sample above the current floor (slow rise).
pub const NOISE_RISE: f32 = 0.05;
/// EMA weight of a sample below the current floor (fast fall).
pub const NOISE_FALL: f32 = 0.5;
/// Threshold as a multiple of the noise floor (mean |Δu| units).
pub const NOISE_FACTOR: f32 = 1.25;
/// The threshold never exceeds the floor by more than this many grey levels of mean |Δu|.
pub const NOISE_MARGIN_LEVELS: f32 = 1.0;
/// The threshold never exceeds this mean |Δu| in grey levels (d = 8).
pub const NOISE_CAP_LEVELS: f32 = 4.0;

/// Per-camera noise-floor tracker.
#[derive(Debug, Clone)]
pub(crate) struct NoiseFloor {
    floor: Option<f32>,
    values_per_block: f32,
    scratch: Vec<u32>,
}

impl NoiseFloor {
    /// Tracker for frames of `tokens` blocks of `values_per_block` values.
    pub(crate) fn new(tokens: usize, values_per_block: usize) -> Self {
        NoiseFloor {
            floor: None,
            values_per_block: values_per_block as f32,
            scratch: vec![0; tokens],
        }
    }

    /// Current noise floor, mean |Δu| in grey levels; `None` before the first sample.
    pub(crate) fn floor(&self) -> Option<f32> {
        self.floor
    }

    /// Feed one frame's per-block SADs (not a key frame, not bit-identical).
    pub(crate) fn update(&mut self, sads: &[u32]) {
        let Some(k) = quantile_index(sads.len()) else {
            return;
        };
        let scratch = &mut self.scratch[..sads.len()];
        scratch.copy_from_slice(sads);
        let (_, &mut q, _) = scratch.select_nth_unstable(k);
        let sample = q as f32 / self.values_per_block;
        self.floor = Some(match self.floor {
            None => sample,
            Some(f) => {
                let w = if sample > f { NOISE_RISE } else { NOISE_FALL };
                f + w * (sample - f)
            }
        });
    }

    /// Threshold in reference units (`d`) for the next decision, at least `reference`.
    pub(crate) fn threshold(&self, reference: f32) -> f32 {
        let Some(f) = self.floor else {
            return reference;
        };
        let levels = (NOISE_FACTOR * f)
            .min(f + NOISE_MARGIN_LEVELS)
            .min(NOISE_CAP_LEVELS);
        reference.max(2.0 * levels)
    }
}

/// Index of the [`NOISE_QUANTILE`] element among `len` sorted values.
fn quantile_index(len: usize) -> Option<usize> {
    let last = len.checked_sub(1)?;
    Some(((last as f32) * NOISE_QUANTILE) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_falls_fast_and_rises_slowly() {
        let mut nf = NoiseFloor::new(10, 100);
        nf.update(&[200; 10]);
        assert_eq!(nf.floor(), Some(2.0));
        nf.update(&[1000; 10]);
        let risen = nf.floor().unwrap();
        assert!(risen > 2.0 && risen < 2.5, "{risen}");
        nf.update(&[0; 10]);
        assert!(nf.floor().unwrap() < risen / 1.9);
    }

    #[test]
    fn threshold_is_capped_above_the_floor() {
        let mut nf = NoiseFloor::new(4, 100);
        nf.update(&[2000; 4]); // floor 20 grey levels
        assert_eq!(nf.threshold(0.1), 2.0 * NOISE_CAP_LEVELS);
        let mut nf = NoiseFloor::new(4, 100);
        nf.update(&[300; 4]); // floor 3: 1.25 * 3 = 3.75 is below floor + 1 and the cap
        assert_eq!(nf.threshold(0.1), 2.0 * 3.75);
    }

    #[test]
    fn no_sample_means_reference_threshold() {
        assert_eq!(NoiseFloor::new(4, 100).threshold(0.1), 0.1);
    }
}
