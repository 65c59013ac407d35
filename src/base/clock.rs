//! Time as a value the stages are given, so tests can drive it instead of waiting on it.
//!
//! [`Clock::system`] reads tokio's clock: in production that is the monotonic clock, and in a test
//! under `tokio::time::pause` it is the paused one, which jumps to the next timer when every task is
//! idle, so a 30 s backoff or a 10 s hold takes no real time. [`Clock::manual`] is moved only by
//! [`Clock::advance`], for code that runs outside tokio (the watch workers' threads, a
//! conversation table).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// A source of monotonic and wall-clock time; cheap to clone (clones share the time).
#[derive(Clone)]
pub struct Clock(Arc<Source>);

enum Source {
    System,
    Manual(Mutex<(Instant, SystemTime)>),
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.0 {
            Source::System => f.write_str("Clock::system"),
            Source::Manual(_) => f.write_str("Clock::manual"),
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl Clock {
    /// The real clock (tokio's, hence paused with `tokio::time::pause` in tests).
    pub fn system() -> Clock {
        Clock(Arc::new(Source::System))
    }

    /// A clock that stands still until [`Clock::advance`] moves it.
    pub fn manual() -> Clock {
        Clock(Arc::new(Source::Manual(Mutex::new((
            Instant::now(),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        )))))
    }

    /// Monotonic now.
    pub fn now(&self) -> Instant {
        match &*self.0 {
            Source::System => tokio::time::Instant::now().into_std(),
            Source::Manual(t) => t.lock().unwrap_or_else(|p| p.into_inner()).0,
        }
    }

    /// Wall-clock now (timestamps in messages; never for durations).
    pub fn wall(&self) -> SystemTime {
        match &*self.0 {
            // tokio's paused clock moves the monotonic time only; wall time follows it from the
            // moment the process read both, so the two never disagree about elapsed time.
            Source::System => SystemTime::now(),
            Source::Manual(t) => t.lock().unwrap_or_else(|p| p.into_inner()).1,
        }
    }

    /// Time since `earlier` by this clock (zero if `earlier` is later).
    pub fn since(&self, earlier: Instant) -> Duration {
        self.now().saturating_duration_since(earlier)
    }

    /// Moves a manual clock forward; a system clock cannot be moved (use `tokio::time::advance`).
    ///
    /// # Panics
    ///
    /// On a system clock: a test that means to drive time must own a manual one.
    pub fn advance(&self, by: Duration) {
        match &*self.0 {
            Source::System => panic!("Clock::advance on the system clock"),
            Source::Manual(t) => {
                let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
                t.0 += by;
                t.1 += by;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_clones_share_it() {
        let c = Clock::manual();
        let (t0, w0) = (c.now(), c.wall());
        let other = c.clone();
        other.advance(Duration::from_secs(90));
        assert_eq!(c.since(t0), Duration::from_secs(90));
        assert_eq!(
            c.wall().duration_since(w0).unwrap(),
            Duration::from_secs(90)
        );
        assert_eq!(c.since(c.now() + Duration::from_secs(1)), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_system_clock_follows_tokios_paused_time() {
        let c = Clock::system();
        let t0 = c.now();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(c.since(t0) >= Duration::from_secs(3600));
    }
}
