//! Telemetry: how the runtime reports on itself: systemd notify, a Prometheus endpoint with its
//! latency histograms, and the control socket behind `edgevlm status`.

pub mod control;
pub mod metrics;
mod systemd;

pub use systemd::Systemd;
