//! `edgevlm run`: starts the runtime (`edgevlm::runtime`) and connects it to the process: signals
//! (SIGINT/SIGTERM stop, SIGHUP reloads the file) and systemd (READY, STATUS, RELOADING, the
//! watchdog).

use anyhow::Context;
use edgevlm::config::Config;
use edgevlm::runtime::{Runtime, RuntimeOptions, camera_summary};
use edgevlm::telemetry::Systemd;
use std::path::PathBuf;
use std::time::Duration;

/// How long the runtime may take to answer a health check before it counts as stuck.
const HEALTH_BOUND: Duration = Duration::from_secs(5);

pub(crate) async fn run(path: PathBuf, config: Config) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let systemd = Systemd::from_env();
    // Installed before anything starts: SIGTERM then stops the start cleanly, and a SIGHUP waits
    // (the stream keeps it) instead of killing the process by its default action.
    let mut sigterm = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut sighup = signal(SignalKind::hangup()).context("cannot watch SIGHUP")?;
    let running = Runtime::start(config, RuntimeOptions::default()).await?;
    let mut reports = running.reports();
    let mut model = running.model();
    // STATUS= says "loading" until READY=1 has been sent, whatever the order of the two changes.
    let status = |reports: &tokio::sync::watch::Receiver<_>, loaded: bool| {
        let snap: &edgevlm::telemetry::control::Snapshot = &reports.borrow();
        let cameras = camera_summary(&snap.cameras);
        if loaded {
            cameras
        } else {
            format!("loading the model; {cameras}")
        }
    };
    systemd.status(&status(&reports, false));
    // Without WatchdogSec the tick still runs (cheaply) so the loop has one shape.
    let mut watchdog = tokio::time::interval(
        systemd
            .watchdog_interval()
            .unwrap_or(Duration::from_secs(3600)),
    );
    let mut loaded = false;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = sigterm.recv() => break,
            changed = model.changed(), if !loaded => {
                loaded = true;
                if changed.is_ok() {
                    // Ready with or without a model: the runtime logged why there is none.
                    model.borrow_and_update();
                    systemd.ready(&status(&reports, true));
                }
            }
            // Pings start with READY: until then systemd's start timeout covers the load.
            _ = watchdog.tick(), if loaded => {
                let health = tokio::time::timeout(HEALTH_BOUND, running.healthy())
                    .await
                    .unwrap_or_else(|_| Err(format!("the runtime did not answer a health check within {} s", HEALTH_BOUND.as_secs())));
                match health {
                    // WATCHDOG=1 only while healthy: a stuck runtime or a stuck camera task stops
                    // the pings and systemd restarts the service.
                    Ok(()) => systemd.watchdog(),
                    Err(why) => tracing::error!(reason = %why, "Unhealthy; not feeding the systemd watchdog"),
                }
            }
            // A reload while the model loads waits for the load (the signal stays queued).
            _ = sighup.recv(), if loaded => match Config::load(&path) {
                Ok(new) => {
                    systemd.reloading();
                    if let Err(e) = running.reload(new).await {
                        tracing::error!(error = %e, "Reload failed");
                    }
                    systemd.ready(&status(&reports, loaded));
                }
                Err(errors) => {
                    for e in &errors.0 {
                        tracing::error!(problem = %e, "Invalid configuration");
                    }
                    tracing::error!(
                        file = %path.display(),
                        problems = errors.0.len(),
                        "Configuration rejected; the running configuration stays in place"
                    );
                }
            },
            changed = reports.changed() => {
                if changed.is_err() {
                    break;
                }
                reports.borrow_and_update();
                systemd.status(&status(&reports, loaded));
            }
        }
    }
    systemd.stopping();
    running.shutdown().await;
    Ok(())
}
