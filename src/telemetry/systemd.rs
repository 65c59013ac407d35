//! The systemd notify protocol: READY, WATCHDOG, STATUS, RELOADING and STOPPING.
//!
//! Every call is a no-op when the process was not started by systemd (`NOTIFY_SOCKET` unset), so
//! development runs and tests are unaffected; a failure to notify is logged, never fatal.

use sd_notify::NotifyState;
use std::time::Duration;

/// The service manager connection of this process.
#[derive(Debug, Clone)]
pub struct Systemd {
    watchdog: Option<Duration>,
}

impl Systemd {
    /// Reads `NOTIFY_SOCKET`/`WATCHDOG_USEC` from the environment.
    pub fn from_env() -> Self {
        Systemd {
            watchdog: sd_notify::watchdog_enabled(),
        }
    }

    /// How often to ping the watchdog (half of `WatchdogSec`), if systemd asked for it.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog.map(|w| w / 2)
    }

    /// Startup finished: cameras and engines are up.
    pub fn ready(&self, status: &str) {
        send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// The main loop is alive and every camera task answers.
    pub fn watchdog(&self) {
        send(&[NotifyState::Watchdog]);
    }

    /// A one-line status for `systemctl status`.
    pub fn status(&self, status: &str) {
        send(&[NotifyState::Status(status)]);
    }

    /// A configuration reload started (READY follows when it is applied).
    pub fn reloading(&self) {
        // systemd >= 253 wants the monotonic time with RELOADING=1 to match it with READY=1.
        match NotifyState::monotonic_usec_now() {
            Ok(now) => send(&[NotifyState::Reloading, now]),
            Err(_) => send(&[NotifyState::Reloading]),
        }
    }

    /// Shutdown started.
    pub fn stopping(&self) {
        send(&[NotifyState::Stopping]);
    }
}

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "Cannot notify systemd");
    }
}
