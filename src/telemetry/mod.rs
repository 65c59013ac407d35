//! Telemetry: how the runtime reports on itself to the system (systemd now; metrics next).

mod systemd;

pub use systemd::Systemd;
