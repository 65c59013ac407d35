//! Leaves every stage may use and that use no stage: the injected [`Clock`], retry [`Backoff`],
//! and lock-free latency [`Histogram`]s.

pub mod backoff;
pub mod clock;
pub mod histogram;

pub use backoff::Backoff;
pub use clock::Clock;
pub use histogram::{Histogram, HistogramSnapshot, LATENCY_BUCKETS, write_histogram};
