//! Exponential backoff with jitter, so cameras that fail together do not reconnect in lockstep.

use std::time::Duration;

/// Retry delays: `initial * 2^n` capped at `max`, each drawn uniformly from its upper half.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    attempt: u32,
    rng: u64,
}

impl Backoff {
    /// A backoff from `initial` to `max`; `seed` makes the jitter reproducible in tests.
    pub fn new(initial: Duration, max: Duration, seed: u64) -> Self {
        Backoff {
            initial,
            max: max.max(initial),
            attempt: 0,
            rng: seed ^ 0x9E37_79B9_7F4A_7C15,
        }
    }

    /// The delay before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        let factor = 2u32.saturating_pow(self.attempt.min(30));
        let ceiling = self.initial.saturating_mul(factor).min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        // "Equal jitter": at least half the exponential delay, so a flapping camera still backs off.
        let unit = (self.next_random() >> 11) as f64 / (1u64 << 53) as f64;
        ceiling.mul_f64(0.5 + 0.5 * unit)
    }

    /// Starts again from `initial` (after a session that ran well).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// splitmix64: enough randomness for jitter without a dependency.
    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_with_jitter_in_the_upper_half() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(10), 7);
        let ceilings = [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0];
        for c in ceilings {
            let d = b.next_delay().as_secs_f64();
            assert!(d >= c / 2.0 && d <= c, "{d} not in [{}, {c}]", c / 2.0);
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_secs(1));
    }

    #[test]
    fn cameras_with_different_seeds_do_not_retry_in_lockstep() {
        let mut a = Backoff::new(Duration::from_secs(8), Duration::from_secs(8), 1);
        let mut b = Backoff::new(Duration::from_secs(8), Duration::from_secs(8), 2);
        let same = (0..20).filter(|_| a.next_delay() == b.next_delay()).count();
        assert_eq!(same, 0);
    }
}
