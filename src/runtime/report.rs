//! Reports of a running runtime: each camera's report (logged, published retained, kept for the
//! control socket), the model's line, and the one-line summaries systemd and the log show.

use super::watches::Watches;
use crate::base::Clock;
use crate::engine::Engines;
use crate::publish::{PublishStats, Publisher};
use crate::supervisor::{CameraReport, RateMeter, Supervisor};
use std::collections::HashMap;
use std::sync::Arc;

/// Each camera's report; those `emit` names are logged and published as retained status
/// messages; with `mqtt_line`, the MQTT side's line is logged too.
pub(super) fn collect(
    supervisor: &Supervisor,
    meters: &mut HashMap<String, RateMeter>,
    watches: Option<&Watches>,
    publisher: Option<&Publisher>,
    clock: &Clock,
    emit: &dyn Fn(&str) -> bool,
    mqtt_line: bool,
) -> Vec<CameraReport> {
    let mut reports = Vec::with_capacity(supervisor.cameras().len());
    for cam in supervisor.cameras() {
        let meter = meters.entry(cam.id().to_string()).or_default();
        let mut r = CameraReport::collect(cam, meter, clock.now());
        r.memory = watches.and_then(|w| w.memory(cam.id())).map(|m| m.report());
        r.family = watches.and_then(|w| w.family());
        if emit(&r.camera) {
            tracing::info!(target: "status", "{}", r.line());
            if let Some(publisher) = publisher {
                publisher.status(&r);
            }
        }
        reports.push(r);
    }
    if mqtt_line && let Some(publisher) = publisher {
        tracing::info!(target: "status", "{}", self::mqtt_line(&publisher.stats()));
    }
    reports
}

/// The model's line in `edgevlm status`.
pub(super) fn model_state(model: &Result<(Arc<Engines>, usize), String>) -> String {
    match model {
        Ok((engines, budget)) => {
            let [vision, _, decoder] = engines.providers();
            format!(
                "ready ({} from {}, vision on {}, LLM on {}, loaded in {:.1} s, {budget} positions for footage)",
                engines.manifest().family,
                engines.manifest().dir.display(),
                vision.name(),
                decoder.name(),
                engines.load_time().as_secs_f64()
            )
        }
        Err(why) => format!("unavailable: {why}"),
    }
}

/// "3 cameras: 2 running, 1 retrying", for systemd's STATUS=.
pub fn camera_summary(reports: &[CameraReport]) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for r in reports {
        let state = r.state.to_string();
        match counts.iter_mut().find(|(s, _)| *s == state) {
            Some((_, n)) => *n += 1,
            None => counts.push((state, 1)),
        }
    }
    let n = reports.len();
    let parts: Vec<String> = counts.iter().map(|(s, k)| format!("{k} {s}")).collect();
    format!(
        "{n} camera{}: {}",
        if n == 1 { "" } else { "s" },
        parts.join(", ")
    )
}

/// One status line for the MQTT side.
pub fn mqtt_line(s: &PublishStats) -> String {
    let mut line = format!(
        "mqtt: {} | outbox {}/{} | delivered {} | dropped {} (full) {} (chunks offline) | questions {} accepted, {} refused, {} busy",
        if s.connected {
            "connected"
        } else {
            "disconnected"
        },
        s.outbox.pending,
        s.outbox_capacity,
        s.outbox.delivered,
        s.outbox.dropped_full,
        s.outbox.stream_skipped,
        s.queries_accepted,
        s.queries_rejected,
        s.queries_busy,
    );
    if !s.connected
        && let Some(e) = &s.last_error
    {
        line.push_str(&format!(" | last error: {e}"));
    }
    line
}
