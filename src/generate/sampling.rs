//! Choosing the next token from logits.
//!
//! [`Sampling`] cannot express an invalid combination: greedy has no knobs; random sampling always
//! has a positive temperature and a seed, and its truncation is one of none / top-k / top-p /
//! top-k-then-top-p with values checked when they are made. The order matches Hugging Face's
//! warpers (temperature, then top-k, then top-p), so a seeded configuration means what it means
//! there. The random generator is our own SplitMix64 so that a seed gives the same tokens across
//! dependency upgrades.

use std::num::NonZeroUsize;

/// A sampling parameter out of range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    /// Temperature must be finite and > 0 (use [`Sampling::Greedy`] for 0).
    #[error("temperature must be a finite number > 0 (use greedy decoding for 0), got {0}")]
    Temperature(f32),
    /// top-p must be in (0, 1].
    #[error("top_p must be > 0 and <= 1, got {0}")]
    TopP(f32),
    /// top-k must be >= 1.
    #[error("top_k must be >= 1, got 0")]
    TopK,
}

/// A temperature > 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Temperature(f32);

impl Temperature {
    /// Checks `t` (finite, > 0).
    pub fn new(t: f32) -> Result<Temperature, SamplingError> {
        if t.is_finite() && t > 0.0 {
            Ok(Temperature(t))
        } else {
            Err(SamplingError::Temperature(t))
        }
    }

    /// The value.
    pub fn get(self) -> f32 {
        self.0
    }
}

/// A nucleus mass in (0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TopP(f32);

impl TopP {
    /// Checks `p` (0 < p <= 1).
    pub fn new(p: f32) -> Result<TopP, SamplingError> {
        if p > 0.0 && p <= 1.0 {
            Ok(TopP(p))
        } else {
            Err(SamplingError::TopP(p))
        }
    }

    /// The value.
    pub fn get(self) -> f32 {
        self.0
    }
}

/// A candidate count >= 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopK(NonZeroUsize);

impl TopK {
    /// Checks `k` (>= 1).
    pub fn new(k: usize) -> Result<TopK, SamplingError> {
        NonZeroUsize::new(k).map(TopK).ok_or(SamplingError::TopK)
    }

    /// The value.
    pub fn get(self) -> usize {
        self.0.get()
    }
}

/// Which candidates random sampling draws from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Truncation {
    /// The whole vocabulary.
    None,
    /// The `k` most likely tokens.
    TopK(TopK),
    /// The smallest set of most likely tokens whose mass reaches `p`.
    TopP(TopP),
    /// Top-k first, then top-p within those.
    TopKTopP(TopK, TopP),
}

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Sampling {
    /// The most likely token (lowest id on ties); the reference evaluation's temperature 0.
    #[default]
    Greedy,
    /// A seeded random draw.
    Random {
        /// Logits are divided by it.
        temperature: Temperature,
        /// Candidate set.
        truncation: Truncation,
        /// Seed of the generator; the same seed and logits give the same tokens.
        seed: u64,
    },
}

impl Sampling {
    /// Builds a configuration from optional knobs as they arrive from a request or config:
    /// temperature `None` or 0 means greedy (and then top-k/top-p must be absent).
    pub fn from_parts(
        temperature: Option<f32>,
        top_k: Option<usize>,
        top_p: Option<f32>,
        seed: u64,
    ) -> Result<Sampling, SamplingError> {
        let top_k = top_k.map(TopK::new).transpose()?;
        let top_p = top_p.map(TopP::new).transpose()?;
        match temperature {
            None | Some(0.0) if top_k.is_none() && top_p.is_none() => Ok(Sampling::Greedy),
            None => Ok(Sampling::Random {
                temperature: Temperature(1.0),
                truncation: Truncation::from_parts(top_k, top_p),
                seed,
            }),
            Some(t) => Ok(Sampling::Random {
                temperature: Temperature::new(t)?,
                truncation: Truncation::from_parts(top_k, top_p),
                seed,
            }),
        }
    }
}

impl Truncation {
    fn from_parts(top_k: Option<TopK>, top_p: Option<TopP>) -> Truncation {
        match (top_k, top_p) {
            (None, None) => Truncation::None,
            (Some(k), None) => Truncation::TopK(k),
            (None, Some(p)) => Truncation::TopP(p),
            (Some(k), Some(p)) => Truncation::TopKTopP(k, p),
        }
    }
}

/// SplitMix64: small, fast, and stable by construction (it is all in this file).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// A [`Sampling`] with its generator state; one per generation.
#[derive(Debug, Clone)]
pub struct Sampler {
    sampling: Sampling,
    rng: SplitMix64,
    /// Scratch candidate list, reused between tokens.
    scratch: Vec<(f32, u32)>,
}

impl Sampler {
    /// A sampler seeded from the configuration.
    pub fn new(sampling: Sampling) -> Sampler {
        let seed = match sampling {
            Sampling::Greedy => 0,
            Sampling::Random { seed, .. } => seed,
        };
        Sampler {
            sampling,
            rng: SplitMix64(seed),
            scratch: Vec::new(),
        }
    }

    /// Picks a token among the ids `allowed` accepts; `None` if no allowed logit is a number.
    ///
    /// NaN logits are never chosen; `+inf` wins greedy decoding and takes all the mass when sampling.
    pub fn sample(&mut self, logits: &[f32], allowed: impl Fn(u32) -> bool) -> Option<u32> {
        match self.sampling {
            Sampling::Greedy => argmax(logits, allowed),
            Sampling::Random {
                temperature,
                truncation,
                ..
            } => {
                let cands = &mut self.scratch;
                cands.clear();
                cands.extend(
                    logits
                        .iter()
                        .enumerate()
                        .filter(|(i, l)| !l.is_nan() && allowed(*i as u32))
                        .map(|(i, &l)| (l, i as u32)),
                );
                if cands.is_empty() {
                    return None;
                }
                let max = cands.iter().map(|c| c.0).fold(f32::NEG_INFINITY, f32::max);
                if max == f32::INFINITY {
                    // Infinite logits take all the mass; the lowest such id keeps it deterministic.
                    return cands.iter().find(|c| c.0 == f32::INFINITY).map(|c| c.1);
                }
                if max == f32::NEG_INFINITY {
                    return cands.iter().map(|c| c.1).min();
                }
                let t = temperature.get();
                for c in cands.iter_mut() {
                    c.0 = ((c.0 - max) / t).exp();
                }
                let (k, p) = match truncation {
                    Truncation::None => (None, None),
                    Truncation::TopK(k) => (Some(k.get()), None),
                    Truncation::TopP(p) => (None, Some(p.get())),
                    Truncation::TopKTopP(k, p) => (Some(k.get()), Some(p.get())),
                };
                let by_prob =
                    |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
                if let Some(k) = k
                    && k < cands.len()
                {
                    cands.select_nth_unstable_by(k - 1, by_prob);
                    cands.truncate(k);
                }
                if let Some(p) = p {
                    cands.sort_unstable_by(by_prob);
                    let total: f64 = cands.iter().map(|c| f64::from(c.0)).sum();
                    let mut acc = 0.0;
                    let mut keep = cands.len();
                    for (i, c) in cands.iter().enumerate() {
                        acc += f64::from(c.0) / total;
                        if acc >= f64::from(p) {
                            keep = i + 1;
                            break;
                        }
                    }
                    cands.truncate(keep.max(1));
                } else {
                    // Keep the draw independent of selection order.
                    cands.sort_unstable_by(by_prob);
                }
                let total: f64 = cands.iter().map(|c| f64::from(c.0)).sum();
                let mut u = self.rng.next_f64() * total;
                for c in cands.iter() {
                    u -= f64::from(c.0);
                    if u < 0.0 {
                        return Some(c.1);
                    }
                }
                cands.last().map(|c| c.1)
            }
        }
    }
}

/// The index of the largest allowed, non-NaN logit (lowest index on ties).
pub fn argmax(logits: &[f32], allowed: impl Fn(u32) -> bool) -> Option<u32> {
    let mut best: Option<(f32, u32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_nan() || !allowed(i as u32) {
            continue;
        }
        if best.is_none_or(|(b, _)| l > b) {
            best = Some((l, i as u32));
        }
    }
    best.map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(truncation: Truncation, seed: u64) -> Sampler {
        Sampler::new(Sampling::Random {
            temperature: Temperature::new(1.0).unwrap(),
            truncation,
            seed,
        })
    }

    fn frequencies(s: &mut Sampler, logits: &[f32], n: usize) -> Vec<f64> {
        let mut counts = vec![0usize; logits.len()];
        for _ in 0..n {
            counts[s.sample(logits, |_| true).unwrap() as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / n as f64).collect()
    }

    #[test]
    fn invalid_parameters_cannot_be_built() {
        assert_eq!(Temperature::new(0.0), Err(SamplingError::Temperature(0.0)));
        assert!(Temperature::new(f32::NAN).is_err());
        assert!(Temperature::new(-1.0).is_err());
        assert_eq!(TopP::new(0.0), Err(SamplingError::TopP(0.0)));
        assert!(TopP::new(1.5).is_err());
        assert_eq!(TopK::new(0), Err(SamplingError::TopK));
        assert_eq!(
            Sampling::from_parts(Some(0.0), None, None, 1),
            Ok(Sampling::Greedy)
        );
        assert_eq!(
            Sampling::from_parts(None, None, None, 1),
            Ok(Sampling::Greedy)
        );
        assert!(Sampling::from_parts(Some(-0.5), None, Some(0.9), 1).is_err());
    }

    #[test]
    fn greedy_takes_the_lowest_index_among_equal_maxima_and_skips_nan_and_disallowed() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, f32::NAN], |_| true), Some(1));
        assert_eq!(argmax(&[1.0, 3.0, 2.0], |i| i != 1), Some(2));
        assert_eq!(argmax(&[f32::NAN], |_| true), None);
    }

    #[test]
    fn a_seed_gives_the_same_draws_and_another_seed_different_ones() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let draw = |seed| {
            let mut s = random(Truncation::None, seed);
            (0..64)
                .map(|_| s.sample(&logits, |_| true).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn draws_follow_the_softmax_and_top_p_keeps_the_smallest_set_reaching_p() {
        // softmax([2, 1, 0, -1]) = [0.6439, 0.2369, 0.0871, 0.0321] (numpy).
        let logits = [2.0, 1.0, 0.0, -1.0];
        let f = frequencies(&mut random(Truncation::None, 1), &logits, 40_000);
        for (got, want) in f.iter().zip([0.6439, 0.2369, 0.0871, 0.0321]) {
            assert!((got - want).abs() < 0.01, "{f:?}");
        }
        // p = 0.8: 0.6439 < 0.8 <= 0.8808, so the two best remain, renormalised: 0.7310 / 0.2690.
        let f = frequencies(
            &mut random(Truncation::TopP(TopP::new(0.8).unwrap()), 2),
            &logits,
            40_000,
        );
        assert!(
            (f[0] - 0.7310).abs() < 0.01 && f[2] == 0.0 && f[3] == 0.0,
            "{f:?}"
        );
        // top-k 3 then top-p 0.95 of [0.6439, 0.2369, 0.0871]/0.9679: 0.6652, 0.9100, 1.0 -> 3 kept.
        let f = frequencies(
            &mut random(
                Truncation::TopKTopP(TopK::new(3).unwrap(), TopP::new(0.95).unwrap()),
                3,
            ),
            &logits,
            40_000,
        );
        assert!(f[2] > 0.07 && f[3] == 0.0, "{f:?}");
    }

    #[test]
    fn temperature_sharpens_and_top_k_one_is_greedy() {
        let logits = [2.0, 1.0, 0.0, -1.0];
        let mut cold = Sampler::new(Sampling::Random {
            temperature: Temperature::new(0.25).unwrap(),
            truncation: Truncation::None,
            seed: 4,
        });
        let f = frequencies(&mut cold, &logits, 20_000);
        // softmax([8, 4, 0, -4]) = [0.9817, 0.0180, 0.0003, 0.0000]
        assert!((f[0] - 0.9817).abs() < 0.005, "{f:?}");
        let mut k1 = random(Truncation::TopK(TopK::new(1).unwrap()), 5);
        assert!((0..100).all(|_| k1.sample(&logits, |_| true) == Some(0)));
    }
}
