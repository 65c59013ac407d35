//! Lock-free latency histograms with fixed buckets, rendered as Prometheus histograms.
//!
//! Fixed bounds rather than a sketch: Prometheus aggregates buckets across scrapes and instances
//! only when every series shares the same `le` values, and a fixed array of counters lets
//! `observe` run on hot paths without a lock or an allocation.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bucket upper bounds in seconds for request-scale latencies (5 ms to a minute).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Counts of durations per bucket, plus their sum; shared by reference between threads.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One per bound, then the `+Inf` bucket; not cumulative.
    counts: Box<[AtomicU64]>,
    sum_nanos: AtomicU64,
}

impl Histogram {
    /// A histogram over `bounds` (seconds, strictly increasing, finite).
    ///
    /// # Panics
    ///
    /// If `bounds` are not strictly increasing finite numbers: they are constants, so this is a
    /// programming error caught by the first test that builds one.
    pub fn new(bounds: &'static [f64]) -> Histogram {
        assert!(
            bounds.iter().all(|b| b.is_finite()) && bounds.windows(2).all(|w| w[0] < w[1]),
            "histogram bounds must be finite and strictly increasing: {bounds:?}"
        );
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    /// A histogram over [`LATENCY_BUCKETS`].
    pub fn latency() -> Histogram {
        Histogram::new(LATENCY_BUCKETS)
    }

    /// Counts one duration.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        // First bound >= secs: a value equal to a bound belongs to it (Prometheus `le`).
        let i = self.bounds.partition_point(|&b| b < secs);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        HistogramSnapshot {
            bounds: self.bounds,
            // Derived from the buckets rather than kept apart, so a scrape racing an `observe`
            // still sees `_count` equal to the `+Inf` bucket, as Prometheus requires.
            count: counts.iter().sum(),
            counts,
            sum_secs: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram::latency()
    }
}

/// A histogram's counts at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Bucket upper bounds in seconds.
    pub bounds: &'static [f64],
    /// Observations per bucket, not cumulative: `bounds.len() + 1` entries, the last `+Inf`.
    pub counts: Vec<u64>,
    /// Observations in all.
    pub count: u64,
    /// Sum of the observations in seconds.
    pub sum_secs: f64,
}

impl HistogramSnapshot {
    /// Upper bound of the bucket holding the `q`-quantile (`q` clamped to 0..=1); observations
    /// past the last bound report that bound. `None` when empty (or `q` is NaN, or there are no
    /// finite bounds to report).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 || q.is_nan() {
            return None;
        }
        // The rank-th smallest observation, 1-based, as Prometheus' histogram_quantile ranks.
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return self.bounds.get(i).or(self.bounds.last()).copied();
            }
        }
        self.bounds.last().copied()
    }

    /// Mean observation in seconds; `None` when empty.
    pub fn mean_secs(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_secs / self.count as f64)
    }
}

/// Appends the `_bucket` (cumulative), `_sum` and `_count` lines of one histogram series.
///
/// `labels` is the inner label text (`camera="a"`), possibly empty; HELP and TYPE are the caller's,
/// written once per family.
pub fn write_histogram(out: &mut String, name: &str, labels: &str, snap: &HistogramSnapshot) {
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cumulative = 0u64;
    for (i, c) in snap.counts.iter().enumerate() {
        cumulative += c;
        let _ = match snap.bounds.get(i) {
            Some(le) => writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            ),
            None => writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}"
            ),
        };
    }
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(out, "{name}_sum{braces} {}", snap.sum_secs);
    let _ = writeln!(out, "{name}_count{braces} {}", snap.count);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_value_equal_to_a_bound_lands_in_that_bucket() {
        let h = Histogram::latency();
        h.observe(Duration::ZERO);
        h.observe(ms(5));
        h.observe(ms(5) + Duration::from_nanos(1));
        h.observe(Duration::from_millis(2500));
        h.observe(Duration::from_secs(60));
        h.observe(Duration::from_secs(61));
        let s = h.snapshot();
        assert_eq!(s.counts.len(), LATENCY_BUCKETS.len() + 1);
        let mut want = vec![0u64; LATENCY_BUCKETS.len() + 1];
        want[0] = 2; // 0 and exactly 5 ms
        want[1] = 1; // just over 5 ms
        want[8] = 1; // exactly 2.5 s
        want[12] = 1; // exactly 60 s
        want[13] = 1; // +Inf
        assert_eq!(s.counts, want);
        assert_eq!(s.count, 6);
        let sum = 0.005 + 0.005000001 + 2.5 + 60.0 + 61.0;
        assert!((s.sum_secs - sum).abs() < 1e-9, "{}", s.sum_secs);
    }

    #[test]
    fn buckets_render_cumulatively_with_and_without_labels() {
        static BOUNDS: &[f64] = &[0.1, 1.0];
        let h = Histogram::new(BOUNDS);
        for d in [ms(50), ms(100), ms(700), Duration::from_secs(3)] {
            h.observe(d);
        }
        let s = h.snapshot();
        let mut out = String::new();
        write_histogram(&mut out, "x_seconds", "camera=\"a\"", &s);
        assert_eq!(
            out,
            "x_seconds_bucket{camera=\"a\",le=\"0.1\"} 2\n\
             x_seconds_bucket{camera=\"a\",le=\"1\"} 3\n\
             x_seconds_bucket{camera=\"a\",le=\"+Inf\"} 4\n\
             x_seconds_sum{camera=\"a\"} 3.85\n\
             x_seconds_count{camera=\"a\"} 4\n"
        );
        let mut bare = String::new();
        write_histogram(&mut bare, "x_seconds", "", &s);
        assert_eq!(
            bare,
            "x_seconds_bucket{le=\"0.1\"} 2\n\
             x_seconds_bucket{le=\"1\"} 3\n\
             x_seconds_bucket{le=\"+Inf\"} 4\n\
             x_seconds_sum 3.85\n\
             x_seconds_count 4\n"
        );
    }

    #[test]
    fn quantiles_report_the_upper_bound_of_their_bucket() {
        let h = Histogram::latency();
        // 90 fast (<= 10 ms), 9 at 200 ms, 1 past the last bound.
        for _ in 0..90 {
            h.observe(ms(8));
        }
        for _ in 0..9 {
            h.observe(ms(200));
        }
        h.observe(Duration::from_secs(120));
        let s = h.snapshot();
        assert_eq!(s.quantile(0.0), Some(0.01));
        assert_eq!(s.quantile(0.5), Some(0.01));
        assert_eq!(s.quantile(0.9), Some(0.01));
        assert_eq!(s.quantile(0.91), Some(0.25));
        assert_eq!(s.quantile(0.99), Some(0.25));
        assert_eq!(s.quantile(1.0), Some(60.0), "+Inf reports the last bound");
        assert_eq!(s.quantile(7.0), Some(60.0), "q is clamped");
        assert_eq!(s.quantile(f64::NAN), None);
        let mean = s.mean_secs().unwrap();
        assert!((mean - (0.72 + 1.8 + 120.0) / 100.0).abs() < 1e-9, "{mean}");
    }

    #[test]
    fn an_empty_histogram_has_no_quantiles_or_mean_and_renders_zeros() {
        let s = Histogram::default().snapshot();
        assert_eq!(s.count, 0);
        assert_eq!(s.quantile(0.5), None);
        assert_eq!(s.mean_secs(), None);
        let mut out = String::new();
        write_histogram(&mut out, "e", "", &s);
        assert_eq!(out.lines().count(), LATENCY_BUCKETS.len() + 3);
        assert!(out.starts_with("e_bucket{le=\"0.005\"} 0\n"), "{out}");
        assert!(out.contains("e_bucket{le=\"60\"} 0\ne_bucket{le=\"+Inf\"} 0\n"));
        assert!(out.ends_with("e_sum 0\ne_count 0\n"), "{out}");
    }

    #[test]
    fn observations_from_several_threads_are_all_counted() {
        let h = Histogram::latency();
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let h = &h;
                scope.spawn(move || {
                    for i in 0..1000 {
                        h.observe(ms((t * 1000 + i) % 300));
                    }
                });
            }
        });
        let s = h.snapshot();
        assert_eq!(s.count, 4000);
        assert_eq!(s.counts.iter().sum::<u64>(), 4000);
    }

    #[test]
    #[should_panic(expected = "strictly increasing")]
    fn unsorted_bounds_are_refused() {
        static BAD: &[f64] = &[1.0, 0.5];
        let _ = Histogram::new(BAD);
    }
}
