//! The bounded, overwrite-oldest window of one camera's sampled frames.
//!
//! Only the camera task writes; readers take `Arc` snapshots under a lock held for the copy of a
//! few pointers, so neither side waits on the other for long and GStreamer's thread never waits.

use super::Frame;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The last `span` of sampled frames of one camera.
#[derive(Debug)]
pub struct Window {
    span: Duration,
    capacity: usize,
    inner: Mutex<VecDeque<Arc<Frame>>>,
    /// Signalled on every push, for readers that follow the window (the watch worker).
    pushed: Condvar,
    /// The last sequence number the follower has taken (`u64::MAX`: no follower yet), and when
    /// it last asked: a file camera is read no faster than its follower encodes
    /// ([`Window::follower_lag`]).
    followed: std::sync::atomic::AtomicU64,
    followed_at: Mutex<Option<std::time::Instant>>,
}

/// No follower has asked yet.
const NO_FOLLOWER: u64 = u64::MAX;

/// What the window holds right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowInfo {
    /// Frames held.
    pub frames: usize,
    /// Stream time of the oldest frame.
    pub oldest: Option<Duration>,
    /// Stream time of the newest frame.
    pub newest: Option<Duration>,
    /// Bytes of pixel data held.
    pub bytes: usize,
}

impl Window {
    /// A window of `span` stream time holding at most `capacity` frames (whatever the timestamps).
    pub fn new(span: Duration, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Window {
            span,
            capacity,
            inner: Mutex::new(VecDeque::with_capacity(capacity)),
            pushed: Condvar::new(),
            followed: std::sync::atomic::AtomicU64::new(NO_FOLLOWER),
            followed_at: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Arc<Frame>>> {
        // A reader that panicked cannot leave the deque inconsistent: keep serving.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds the newest frame and evicts what fell out of the span or over capacity.
    /// Returns how many frames were evicted.
    pub fn push(&self, frame: Arc<Frame>) -> usize {
        let newest = frame.pts;
        let mut q = self.lock();
        q.push_back(frame);
        let mut evicted = 0;
        while let Some(front) = q.front() {
            let too_old = newest.saturating_sub(front.pts) >= self.span && q.len() > 1;
            if too_old || q.len() > self.capacity {
                q.pop_front();
                evicted += 1;
            } else {
                break;
            }
        }
        drop(q);
        self.pushed.notify_all();
        evicted
    }

    /// Frames with a sequence number above `seq` (all when `None`), oldest first.
    pub fn newer_than(&self, seq: Option<u64>) -> Vec<Arc<Frame>> {
        let q = self.lock();
        let start = match seq {
            Some(s) => q.partition_point(|f| f.seq <= s),
            None => 0,
        };
        q.range(start..).cloned().collect()
    }

    /// Announces a follower before it first asks (the watch worker, as it starts): from now a file
    /// camera waits for it, as for a follower that asked, instead of reading on while its thread
    /// starts; frames read meanwhile could slide out of the window unseen, a different number
    /// on each run.
    pub fn expect_follower(&self) {
        let mut at = self.followed_at.lock().unwrap_or_else(|p| p.into_inner());
        if at.is_none() {
            *at = Some(std::time::Instant::now());
        }
    }

    /// Frames pushed that the follower has not taken yet, if a follower asked within `alive`
    /// (`None`: nobody follows, or the follower stopped asking). The camera task of a source that
    /// is not live waits while this is over a few frames, so a file is never read faster than
    /// its frames are encoded and none is evicted unseen.
    pub fn follower_lag(&self, alive: Duration) -> Option<u64> {
        let at = *self.followed_at.lock().unwrap_or_else(|p| p.into_inner());
        if at.is_none_or(|t| t.elapsed() > alive) {
            return None;
        }
        let taken = self.followed.load(std::sync::atomic::Ordering::Acquire);
        let q = self.lock();
        let newest = q.back()?.seq;
        Some(match taken {
            NO_FOLLOWER => q.len() as u64,
            t => newest.saturating_sub(t),
        })
    }

    /// Like [`Window::newer_than`], waiting up to `timeout` for such a frame to arrive. The
    /// caller is the window's follower: `seq` is the last frame it has taken.
    pub fn wait_newer_than(&self, seq: Option<u64>, timeout: Duration) -> Vec<Arc<Frame>> {
        if let Some(s) = seq {
            self.followed.store(s, std::sync::atomic::Ordering::Release);
        }
        *self.followed_at.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(std::time::Instant::now());
        let newer = |q: &VecDeque<Arc<Frame>>| match (seq, q.back()) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(s), Some(b)) => b.seq > s,
        };
        let q = self.lock();
        let q = if newer(&q) {
            q
        } else {
            self.pushed
                .wait_timeout_while(q, timeout, |q| !newer(q))
                .map(|(q, _)| q)
                .unwrap_or_else(|p| p.into_inner().0)
        };
        let start = match seq {
            Some(s) => q.partition_point(|f| f.seq <= s),
            None => 0,
        };
        q.range(start..).cloned().collect()
    }

    /// Frames with `t0 <= pts <= t1`, oldest first.
    pub fn snapshot(&self, t0: Duration, t1: Duration) -> Vec<Arc<Frame>> {
        let q = self.lock();
        let start = q.partition_point(|f| f.pts < t0);
        q.range(start..)
            .take_while(|f| f.pts <= t1)
            .cloned()
            .collect()
    }

    /// The last `n` frames, oldest first.
    pub fn last(&self, n: usize) -> Vec<Arc<Frame>> {
        let q = self.lock();
        q.range(q.len().saturating_sub(n)..).cloned().collect()
    }

    /// The newest frame.
    pub fn latest(&self) -> Option<Arc<Frame>> {
        self.lock().back().cloned()
    }

    /// Counts and bounds of what is held.
    pub fn info(&self) -> WindowInfo {
        let q = self.lock();
        WindowInfo {
            frames: q.len(),
            oldest: q.front().map(|f| f.pts),
            newest: q.back().map(|f| f.pts),
            bytes: q.iter().map(|f| f.rgb.len()).sum(),
        }
    }

    /// The configured span.
    pub fn span(&self) -> Duration {
        self.span
    }

    /// The frame-count bound.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn frame(seq: u64, pts_ms: u64) -> Arc<Frame> {
        Arc::new(Frame {
            camera: "c".into(),
            seq,
            pts: Duration::from_millis(pts_ms),
            wall_time: SystemTime::UNIX_EPOCH,
            width: 28,
            height: 28,
            rgb: vec![0; 28 * 28 * 3].into_boxed_slice(),
            tokens: None,
        })
    }

    #[test]
    fn the_follower_lag_counts_frames_it_has_not_taken() {
        let w = Window::new(Duration::from_secs(60), 100);
        w.push(frame(0, 0));
        assert_eq!(
            w.follower_lag(Duration::from_secs(30)),
            None,
            "nobody follows yet"
        );
        // The follower's first call takes everything: nothing taken yet, one frame waiting.
        assert_eq!(w.wait_newer_than(None, Duration::ZERO).len(), 1);
        assert_eq!(w.follower_lag(Duration::from_secs(30)), Some(1));
        for s in 1..=5 {
            w.push(frame(s, s * 1000));
        }
        assert_eq!(w.wait_newer_than(Some(2), Duration::ZERO).len(), 3);
        assert_eq!(w.follower_lag(Duration::from_secs(30)), Some(3));
        assert_eq!(w.wait_newer_than(Some(5), Duration::ZERO).len(), 0);
        assert_eq!(w.follower_lag(Duration::from_secs(30)), Some(0));
        // A follower that stopped asking holds nothing back.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(w.follower_lag(Duration::from_millis(10)), None);
    }

    #[test]
    fn keeps_exactly_the_span_of_a_steady_camera() {
        let w = Window::new(Duration::from_secs(60), 61);
        for i in 0..200 {
            w.push(frame(i, i * 1000));
        }
        let info = w.info();
        assert_eq!(info.frames, 60);
        assert_eq!(info.oldest, Some(Duration::from_secs(140)));
        assert_eq!(info.newest, Some(Duration::from_secs(199)));
    }

    #[test]
    fn memory_is_bounded_by_capacity_whatever_the_timestamps() {
        // A source whose timestamps barely advance would otherwise grow the window without bound.
        let w = Window::new(Duration::from_secs(60), 10);
        for i in 0..10_000 {
            w.push(frame(i, i));
        }
        assert_eq!(w.info().frames, 10);
        assert_eq!(w.info().bytes, 10 * 28 * 28 * 3);
    }

    #[test]
    fn snapshots_select_by_stream_time() {
        let w = Window::new(Duration::from_secs(60), 100);
        for i in 0..10 {
            w.push(frame(i, i * 1000));
        }
        let s = w.snapshot(Duration::from_millis(2500), Duration::from_secs(5));
        assert_eq!(s.iter().map(|f| f.seq).collect::<Vec<_>>(), vec![3, 4, 5]);
        assert_eq!(
            w.last(2).iter().map(|f| f.seq).collect::<Vec<_>>(),
            vec![8, 9]
        );
        assert!(
            w.snapshot(Duration::from_secs(20), Duration::from_secs(30))
                .is_empty()
        );
    }

    #[test]
    fn a_snapshot_survives_eviction() {
        let w = Window::new(Duration::from_secs(2), 10);
        w.push(frame(0, 0));
        let held = w.snapshot(Duration::ZERO, Duration::MAX);
        for i in 1..10 {
            w.push(frame(i, i * 1000));
        }
        assert_eq!(held[0].seq, 0);
        assert_eq!(w.info().oldest, Some(Duration::from_secs(8)));
    }

    #[test]
    fn followers_get_only_frames_they_have_not_seen_and_wake_on_push() {
        let w = Arc::new(Window::new(Duration::from_secs(60), 61));
        for i in 0..3 {
            w.push(frame(i, i * 1000));
        }
        let seqs = |v: Vec<Arc<Frame>>| v.iter().map(|f| f.seq).collect::<Vec<_>>();
        assert_eq!(seqs(w.newer_than(None)), [0, 1, 2]);
        assert_eq!(seqs(w.newer_than(Some(0))), [1, 2]);
        assert!(w.newer_than(Some(2)).is_empty());
        let t0 = std::time::Instant::now();
        assert!(
            w.wait_newer_than(Some(2), Duration::from_millis(50))
                .is_empty()
        );
        assert!(t0.elapsed() >= Duration::from_millis(50));
        let w2 = w.clone();
        let pusher = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            w2.push(frame(3, 3000));
        });
        assert_eq!(
            seqs(w.wait_newer_than(Some(2), Duration::from_secs(10))),
            [3]
        );
        pusher.join().unwrap();
    }
}
