//! Leaves every stage may use and that use no stage: the injected [`Clock`], retry [`Backoff`],
//! lock-free latency [`Histogram`]s, and [`log_safe`] for text from outside.

pub mod backoff;
pub mod clock;
pub mod histogram;
pub mod memory;
pub mod text;

pub use backoff::Backoff;
pub use clock::Clock;
pub use histogram::{Histogram, HistogramSnapshot, LATENCY_BUCKETS, write_histogram};
pub use text::log_safe;
