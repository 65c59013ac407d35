//! Fixed-fps sampling by presentation timestamp (Apollo's finding: fps sampling, never uniform).
//!
//! Grid points every `1/fps` are laid from the first sampled frame; each frame belongs to its
//! nearest grid point, and the first frame of a new grid point is sampled, later ones dropped. A
//! camera slower than the rate is never padded: each of its frames reaches a new grid point. As
//! with ffmpeg's `fps` filter (what the reference loader uses) the choice is made on timestamps,
//! not on arrival order or frame counts.
//!
//! In the pipelines `videorate drop-only=true` already keeps the frame nearest each grid point
//! (before conversion, to save CPU); its picks sit up to one source frame on either side of the
//! grid, which nearest-point assignment accepts exactly once each. The sampler is what guarantees
//! the rate bound and monotonic timestamps whatever the template or the source's timestamps do.

use std::time::Duration;

/// What to do with an offered frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleDecision {
    /// Keep it: it is the first frame of a new grid point.
    Sample,
    /// Decimate it: its grid point already has a frame.
    Drop,
    /// Discard it: its timestamp is not after the last sampled frame.
    Late,
}

/// The fixed-fps sampler of one camera.
#[derive(Debug, Clone)]
pub struct Sampler {
    period_ns: u64,
    anchor_ns: Option<u64>,
    last_slot: u64,
    last_pts_ns: u64,
}

impl Sampler {
    /// A sampler at `fps` frames per second of stream time.
    pub fn new(fps: f64) -> Self {
        let period_ns = (1e9 / fps).round().max(1.0) as u64;
        Sampler {
            period_ns,
            anchor_ns: None,
            last_slot: 0,
            last_pts_ns: 0,
        }
    }

    /// The sampling period.
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// Decides for a frame at stream time `pts`; a `Sample` decision is recorded.
    pub fn offer(&mut self, pts: Duration) -> SampleDecision {
        let pts_ns = u64::try_from(pts.as_nanos()).unwrap_or(u64::MAX);
        let Some(anchor) = self.anchor_ns else {
            self.anchor_ns = Some(pts_ns);
            self.last_slot = 0;
            self.last_pts_ns = pts_ns;
            return SampleDecision::Sample;
        };
        if pts_ns <= self.last_pts_ns {
            return SampleDecision::Late;
        }
        // Nearest grid point: frames up to half a period early still belong to it.
        let slot = (pts_ns - anchor + self.period_ns / 2) / self.period_ns;
        if slot <= self.last_slot {
            return SampleDecision::Drop;
        }
        self.last_slot = slot;
        self.last_pts_ns = pts_ns;
        SampleDecision::Sample
    }

    /// Stream time of the last sampled frame, if any.
    pub fn last_sampled(&self) -> Option<Duration> {
        self.anchor_ns
            .map(|_| Duration::from_nanos(self.last_pts_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn sampled(sampler: &mut Sampler, pts_ms: impl IntoIterator<Item = u64>) -> Vec<u64> {
        pts_ms
            .into_iter()
            .filter(|&t| sampler.offer(ms(t)) == SampleDecision::Sample)
            .collect()
    }

    #[test]
    fn a_fast_camera_is_decimated_to_the_rate() {
        let mut s = Sampler::new(1.0);
        // 30 fps for 5 s: one frame per second of stream time (the first within half a period
        // of each grid point; in the pipelines videorate has already kept the nearest one).
        let got = sampled(&mut s, (0..150).map(|i| i * 1000 / 30));
        assert_eq!(got, vec![0, 500, 1500, 2500, 3500, 4500]);
    }

    #[test]
    fn a_slow_camera_is_never_padded_with_duplicates() {
        let mut s = Sampler::new(2.0);
        // 0.5 fps source sampled at 2 fps: every frame is sampled once, nothing is invented.
        let got = sampled(&mut s, [0, 2000, 4000, 6000]);
        assert_eq!(got, vec![0, 2000, 4000, 6000]);
    }

    #[test]
    fn sampling_follows_timestamps_not_arrival_count() {
        // A camera whose rate changes mid-stream still yields one frame per second of stream time
        // (uniform sampling by count would not).
        let mut s = Sampler::new(1.0);
        let mut pts: Vec<u64> = (0..30).map(|i| i * 100).collect(); // 10 fps for 3 s
        pts.extend((0..60).map(|i| 3000 + i * 50)); // 20 fps for 3 s
        assert_eq!(
            sampled(&mut s, pts),
            vec![0, 500, 1500, 2500, 3500, 4500, 5500]
        );
    }

    #[test]
    fn grid_rounding_from_videorate_does_not_lose_frames() {
        let mut s = Sampler::new(3.0);
        // videorate's grid at 3 fps lands on 333333333 ns multiples, sometimes a nanosecond short.
        let pts = [0u64, 333_333_333, 666_666_666, 999_999_999, 1_333_333_332];
        let got: Vec<_> = pts
            .iter()
            .filter(|&&t| s.offer(Duration::from_nanos(t)) == SampleDecision::Sample)
            .collect();
        assert_eq!(got.len(), 5);
    }

    #[test]
    fn frames_picked_by_videorate_on_either_side_of_the_grid_are_each_kept_once() {
        let mut s = Sampler::new(5.0);
        // 15 fps source at 5 fps: videorate's picks land up to one source frame (66 ms) off-grid.
        let picks = [0, 266, 400, 533, 866, 1000, 1133];
        assert_eq!(sampled(&mut s, picks), picks.to_vec());
    }

    #[test]
    fn a_camera_at_exactly_the_sample_rate_keeps_every_frame_despite_jitter() {
        let mut s = Sampler::new(5.0);
        // 5 fps with +-2 ms of timestamp jitter, sampled at 5 fps: nothing may be lost.
        let pts: Vec<u64> = (0..50u64)
            .map(|i| {
                i * 200 + [0, 2, 0, 0, 1][i as usize % 5] - [0, 0, 2, 1, 0][i as usize % 5] + 10
            })
            .collect();
        assert_eq!(sampled(&mut s, pts.clone()), pts);
    }

    #[test]
    fn timestamps_that_go_back_are_late() {
        let mut s = Sampler::new(1.0);
        assert_eq!(s.offer(ms(5000)), SampleDecision::Sample);
        assert_eq!(s.offer(ms(4000)), SampleDecision::Late);
        assert_eq!(s.offer(ms(5000)), SampleDecision::Late);
        assert_eq!(s.offer(ms(5400)), SampleDecision::Drop);
        assert_eq!(s.offer(ms(6000)), SampleDecision::Sample);
        assert_eq!(s.last_sampled(), Some(ms(6000)));
    }

    #[test]
    fn gaps_skip_empty_slots() {
        let mut s = Sampler::new(1.0);
        assert_eq!(
            sampled(&mut s, [0, 1000, 9000, 9400, 10000]),
            vec![0, 1000, 9000, 10000]
        );
    }
}
