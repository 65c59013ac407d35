//! Integer form of the reference decision `255 * mean|x_t - x_{t-1}| > threshold`, and its
//! calibration against the float32 formula (derivation on [`SadBound`]).

use std::ops::RangeInclusive;

use super::oracle::{Normalise, score_values};

/// Integer keep rule for one threshold: `keep iff SAD >= min_keep_sad`.
///
/// Derivation (N = 3 * block^2 values per block, 2352 by default). With mean = std = 0.5,
/// `x = 2u/255 - 1`, so `|Δx| = 2|Δu|/255` and, in exact arithmetic,
///
/// ```text
/// d = 255 * (1/N) * Σ 2|Δu|/255 = 2 * SAD / N          (= SAD / 1176 for N = 2352)
/// d > t  <=>  SAD > t * N / 2                          (= t * 1176; 117.6 for t = 0.1)
/// ```
///
/// `B = t * N / 2` is computed exactly in f64 (t is an f32 with 24 significant bits; N / 2
/// needs at most 18 bits and a half), so the exact rule is `keep iff SAD >= floor(B) + 1`.
///
/// The reference evaluates `d` in float32, so near `B` rounding can decide instead. A rigorous
/// bound on that error, in SAD units, is `2 * (SAD * (γ(N-1) + 2u) + 127.5 * min(SAD, N) *
/// 2^-22)` with `u = 2^-24`: each normalised value is off by at most 2^-24, so each nonzero
/// `|Δx|` by less than 2^-22; any summation order of N nonnegative terms is off by at most
/// `γ(N-1) = (N-1)u / (1 - (N-1)u)` relative; `/ N` and `* 255` round once each; the factor 2 is
/// margin. SADs within that distance of `B` form the *ambiguous window* ([`SadBound::ambiguous`]).
///
/// - For the default 0.1 the window is empty (117 and 118 are 0.6 and 0.4 away, the error is
///   at most 0.04): the integer rule equals the float32 formula for every block and every
///   summation order (sequential, pairwise, vectorised as in torch).
/// - When `B` is an integer (0.5, 1, 2.5, 10: B = 588, 1176, 2940, 11760), `d == t` exactly at
///   SAD = B and float32 rounding decides, differently for different blocks with the same SAD
///   (measured at 0.5: no block of one-level changes is kept, about a third of blocks of 1..7
///   level changes are; at 100, 99.8 % of random blocks with SAD 117600 are kept). No integer
///   rule can match every block there; [`SadBound::calibrated`] adopts the oracle's majority.
/// - The bound is pessimistic: it also flags near-ties such as 0.7 (B = 823.19998) and SADs
///   next to a tie, where calibration confirms the exact rule.
#[derive(Clone, Debug, PartialEq)]
pub struct SadBound {
    threshold: f32,
    real_bound: f64,
    min_keep_sad: u32,
    ambiguous: Option<(u32, u32)>,
    calibrated: bool,
}

impl SadBound {
    /// Exact-arithmetic rule `SAD > threshold * N / 2`, with the ambiguous window computed but
    /// not calibrated (used by adaptive mode, whose threshold changes every frame).
    pub fn exact(threshold: f32, values_per_block: usize) -> Self {
        let real_bound = f64::from(threshold) * values_per_block as f64 / 2.0;
        let min_keep = (real_bound.floor() + 1.0).clamp(0.0, f64::from(u32::MAX));
        SadBound {
            threshold,
            real_bound,
            min_keep_sad: min_keep as u32,
            ambiguous: ambiguous_window(real_bound, values_per_block),
            calibrated: false,
        }
    }

    /// Rule that matches the float32 oracle as closely as any integer rule can: exact outside
    /// the ambiguous window; inside it, at each SAD, the majority decision of the oracle over
    /// [`CALIBRATION_BLOCKS`] seeded random blocks with that SAD (built at the top of the window
    /// and shrunk one level at a time).
    ///
    /// Why not one canonical block: with every term equal (an even spread), sequential f32
    /// summation rounds the same way at every step and drifts by up to a few SAD units at large
    /// thresholds (at 100 it moved the bound by 2 where 2000 random blocks all agree with exact
    /// arithmetic). Random blocks are what frames look like; the majority is the decision that
    /// disagrees with the oracle least often.
    pub fn calibrated(threshold: f32, values_per_block: usize) -> Self {
        let mut bound = SadBound::exact(threshold, values_per_block);
        let Some((lo, hi)) = bound.ambiguous else {
            return bound;
        };
        let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
        let mut blocks: Vec<(Vec<u8>, Vec<u8>)> = (0..CALIBRATION_BLOCKS)
            .map(|kind| {
                let (mut prev, mut cur) =
                    (vec![0u8; values_per_block], vec![0u8; values_per_block]);
                random_block(&mut rng, hi, kind, &mut prev, &mut cur);
                (prev, cur)
            })
            .collect();
        // Walk down from the top of the window: every SAD above `hi` keeps, so the rule stays a
        // single threshold as long as the oracle keeps contiguously from the top. Each step
        // takes one level off every block, so the oracle runs once per block per SAD.
        let mut min_keep = hi.saturating_add(1);
        for sad in (lo..=hi).rev() {
            let votes = blocks
                .iter()
                .filter(|(prev, cur)| score_values(Normalise::Rescale, cur, prev) > threshold)
                .count();
            if 2 * votes <= CALIBRATION_BLOCKS {
                break;
            }
            min_keep = sad;
            for (prev, cur) in &mut blocks {
                shrink_by_one(&mut rng, prev, cur);
            }
        }
        bound.calibrated = min_keep != bound.min_keep_sad;
        bound.min_keep_sad = min_keep;
        bound
    }

    /// Whether a block with this SAD is kept.
    #[inline]
    pub fn keeps(&self, sad: u32) -> bool {
        sad >= self.min_keep_sad
    }

    /// Smallest SAD that is kept.
    pub fn min_keep_sad(&self) -> u32 {
        self.min_keep_sad
    }

    /// The threshold this rule implements, in reference units (`d`).
    pub fn threshold(&self) -> f32 {
        self.threshold
    }

    /// `threshold * N / 2`, exact: the real-arithmetic SAD bound.
    pub fn real_bound(&self) -> f64 {
        self.real_bound
    }

    /// SADs where float32 rounding can decide the reference's result; `None` when the integer
    /// rule provably equals the float32 formula for every block.
    pub fn ambiguous(&self) -> Option<RangeInclusive<u32>> {
        self.ambiguous.map(|(lo, hi)| lo..=hi)
    }

    /// Whether calibration moved the bound away from the exact-arithmetic `floor(B) + 1`.
    pub fn is_calibrated(&self) -> bool {
        self.calibrated
    }
}

/// Oracle evaluations per SAD when calibrating (odd, so a vote cannot tie).
pub const CALIBRATION_BLOCKS: usize = 9;

/// Small deterministic generator (xorshift64) so calibration is reproducible.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Random block pair with exactly `sad`: random previous values, then changes on random values,
/// each moving away from its previous value, until the SAD is reached. `kind` cycles the step
/// size (1 level, up to 7, up to 255): noise-like, small and edge-like changes.
///
/// Previous values are drawn at least `need = ceil(sad / N)` levels from the end(s) they move
/// towards, so every value has `need` levels of room in its direction and the final pass can
/// always complete the SAD (total room >= N * need - SAD so far >= what is left).
fn random_block(rng: &mut Xorshift, sad: u32, kind: usize, prev: &mut [u8], cur: &mut [u8]) {
    let n = prev.len() as u64;
    let sad = u64::from(sad).min(255 * n);
    let need = sad.div_ceil(n.max(1));
    // Both signs only while a value can have `need` levels of room on both sides.
    let signed = need <= 64;
    let (lo, hi) = if signed {
        (need, 255 - need)
    } else {
        (0, 255 - need)
    };
    for (p, c) in prev.iter_mut().zip(cur.iter_mut()) {
        *p = (lo + rng.next() % (hi - lo + 1)) as u8;
        *c = *p;
    }
    let max_step = [1u64, 7, 255][kind % 3];
    let mut left = sad;
    for _ in 0..16 * n {
        if left == 0 {
            break;
        }
        let i = (rng.next() % n) as usize;
        let step = (rng.next() % max_step + 1).min(left);
        let (p, c) = (u64::from(prev[i]), u64::from(cur[i]));
        let down = signed && (c < p || (c == p && rng.next() & 1 == 0));
        let next = if down {
            c.checked_sub(step)
        } else {
            Some(c + step).filter(|&v| v <= 255)
        };
        if let Some(v) = next {
            cur[i] = v as u8;
            left -= step;
        }
    }
    for (p, c) in prev.iter().zip(cur.iter_mut()) {
        if left == 0 {
            break;
        }
        let take = if *c < *p {
            u64::from(*c)
        } else {
            u64::from(255 - *c)
        }
        .min(left);
        *c = if *c < *p {
            *c - take as u8
        } else {
            *c + take as u8
        };
        left -= take;
    }
}

/// Move one changed value one level back towards its previous value (SAD - 1), picked at
/// random; a scan finds one when random picks keep missing (sparse blocks).
fn shrink_by_one(rng: &mut Xorshift, prev: &[u8], cur: &mut [u8]) {
    let n = prev.len() as u64;
    let picked = (0..64)
        .map(|_| (rng.next() % n.max(1)) as usize)
        .find(|&i| cur[i] != prev[i])
        .or_else(|| (0..prev.len()).find(|&i| cur[i] != prev[i]));
    if let Some(i) = picked {
        cur[i] = if cur[i] > prev[i] {
            cur[i] - 1
        } else {
            cur[i] + 1
        };
    }
}

/// Upper bound, in SAD units, of `|d_f32 * N/2 - SAD|` for a block with this SAD.
///
/// Error sources (u = 2^-24, the f32 unit roundoff):
/// - each normalised value is off by at most 2^-24 (rescale in f64, cast, `- 0.5` and `/ 0.5`;
///   the fused `(u - 127.5) / 127.5` form is off by 2^-25), so each nonzero `|Δx|` term is off by
///   at most 2^-23 + 2^-24 < 2^-22 (the subtraction adds half an ulp of a value below 2);
///   at most `min(SAD, N)` terms are nonzero, and each term's error scales by 127.5 in SAD units;
/// - summing N nonnegative terms in any order (sequential, pairwise, vectorised) is off by at
///   most `γ(N-1) = (N-1)u / (1 - (N-1)u)` relative;
/// - `/ N` and `* 255` add one rounding each (2u).
///
/// The result is doubled as a safety margin: a wider window only means more calibration.
fn float_error_in_sad_units(sad: f64, values_per_block: usize) -> f64 {
    let u = f64::powi(2.0, -24);
    let n = values_per_block as f64;
    let gamma = (n - 1.0) * u / (1.0 - (n - 1.0) * u);
    let terms = sad.min(n);
    2.0 * (sad * (gamma + 2.0 * u) + 127.5 * terms * f64::powi(2.0, -22))
}

/// SADs `s` with `|s - B| <= error(s)` and a nonzero error (an all-zero block is exact).
fn ambiguous_window(real_bound: f64, values_per_block: usize) -> Option<(u32, u32)> {
    let max_sad = 255.0 * values_per_block as f64;
    let reach = float_error_in_sad_units(real_bound + 1.0, values_per_block) + 1.0;
    let first = (real_bound - reach).floor().max(0.0);
    let last = (real_bound + reach).ceil().min(max_sad);
    let mut window: Option<(u32, u32)> = None;
    let mut s = first;
    while s <= last {
        let err = float_error_in_sad_units(s, values_per_block);
        if err > 0.0 && (s - real_bound).abs() <= err {
            let si = s as u32;
            window = Some(window.map_or((si, si), |(lo, _)| (lo, si)));
        }
        s += 1.0;
    }
    window
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_threshold_has_no_ambiguous_sad() {
        let b = SadBound::calibrated(0.1, 2352);
        assert_eq!(b.min_keep_sad(), 118);
        assert_eq!(b.ambiguous(), None);
        assert!(!b.is_calibrated());
    }

    #[test]
    fn integer_bounds_are_flagged_ambiguous() {
        for (t, sad) in [(0.5f32, 588u32), (1.0, 1176), (2.5, 2940), (10.0, 11760)] {
            let b = SadBound::calibrated(t, 2352);
            let w = b.ambiguous().expect("tie must be flagged");
            assert!(w.contains(&sad), "threshold {t}: window {w:?}");
        }
    }

    #[test]
    fn zero_threshold_keeps_any_change() {
        let b = SadBound::calibrated(0.0, 2352);
        assert!(!b.keeps(0));
        assert!(b.keeps(1));
    }

    #[test]
    fn random_blocks_have_the_requested_sad() {
        let mut rng = Xorshift(7);
        let (mut prev, mut cur) = (vec![0u8; 2352], vec![0u8; 2352]);
        for sad in [
            0u32,
            1,
            117,
            2352,
            2353,
            11760,
            150_000,
            300_000,
            2352 * 255,
        ] {
            for kind in 0..3 {
                random_block(&mut rng, sad, kind, &mut prev, &mut cur);
                let got: u32 = prev
                    .iter()
                    .zip(&cur)
                    .map(|(&a, &b)| u32::from(a.abs_diff(b)))
                    .sum();
                assert_eq!(got, sad, "kind {kind}");
            }
        }
    }
}
