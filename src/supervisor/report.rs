//! Per-camera status reports: what `run` logs now and what the MQTT status topic will carry.

use super::{CameraState, CameraView};
use crate::ring::CounterSnapshot;
use serde::Serialize;
use std::time::Instant;

/// Turns counter snapshots into rates over the time between two reports.
#[derive(Debug, Default, Clone)]
pub struct RateMeter {
    last: Option<(Instant, CounterSnapshot)>,
}

impl RateMeter {
    /// Frames per second in and sampled since the previous call (0 on the first call).
    pub fn rates(&mut self, now: Instant, counters: CounterSnapshot) -> (f64, f64) {
        let rates = match self.last {
            Some((then, prev)) => {
                let dt = now.duration_since(then).as_secs_f64();
                if dt > 0.0 {
                    (
                        counters.frames_in.saturating_sub(prev.frames_in) as f64 / dt,
                        counters.sampled.saturating_sub(prev.sampled) as f64 / dt,
                    )
                } else {
                    (0.0, 0.0)
                }
            }
            None => (0.0, 0.0),
        };
        self.last = Some((now, counters));
        rates
    }
}

/// A camera's status at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct CameraReport {
    /// Camera id.
    pub camera: String,
    /// Lifecycle state.
    pub state: CameraState,
    /// Last failure or stop reason.
    pub reason: Option<String>,
    /// Source address, credentials removed.
    pub source: String,
    /// Pipeline template.
    pub pipeline: String,
    /// Model geometry (`WxH`), once negotiated.
    pub geometry: Option<String>,
    /// Visual tokens per frame at that geometry.
    pub tokens_per_frame: Option<u32>,
    /// What the source delivers.
    pub source_caps: Option<String>,
    /// Decoded frames per second since the last report.
    pub fps_in: f64,
    /// Sampled frames per second since the last report.
    pub fps_sampled: f64,
    /// Frames in the window.
    pub window_frames: usize,
    /// Stream time the window spans.
    pub window_span_secs: f64,
    /// Seconds in the current state.
    pub state_secs: f64,
    /// DiffFP mode.
    pub prune_mode: String,
    /// Share of visual tokens DiffFP kept so far.
    pub kept_ratio: f64,
    /// DiffFP's current threshold (adaptive mode moves it), once a frame was pruned.
    pub prune_threshold: Option<f32>,
    /// What `decode = "keyframes"` does now (`keyframes (GOP 1.00 s)`, or `full: ` and why);
    /// `null` for a camera that decodes every frame by its configuration.
    pub decode: Option<String>,
    /// Cumulative counters.
    pub counters: CounterSnapshot,
    /// Memory, narrations and answers (`null` when no model is loaded).
    pub memory: Option<crate::memory::MemoryReport>,
    /// The family of the model watching it (`null` when no model is loaded).
    pub family: Option<crate::engine::Family>,
}

impl CameraReport {
    /// Reads a camera's status, counters and window at `now`.
    pub fn collect(handle: &CameraView, meter: &mut RateMeter, now: Instant) -> CameraReport {
        let status = handle.status();
        let counters = handle.shared.counters.snapshot();
        let (fps_in, fps_sampled) = meter.rates(now, counters);
        let info = handle.window.info();
        let geometry = handle.shared.geometry.get().copied();
        CameraReport {
            camera: handle.id().to_string(),
            state: status.state,
            reason: status.reason,
            source: handle.config.uri.redacted(),
            pipeline: handle.config.pipeline.clone(),
            geometry: geometry.map(|g| g.to_string()),
            tokens_per_frame: geometry.map(|g| g.tokens()),
            source_caps: handle
                .shared
                .source_caps
                .lock()
                .map(|c| c.clone())
                .unwrap_or_default(),
            fps_in,
            fps_sampled,
            window_frames: info.frames,
            window_span_secs: match (info.oldest, info.newest) {
                (Some(a), Some(b)) => (b - a).as_secs_f64(),
                _ => 0.0,
            },
            state_secs: now.duration_since(status.since).as_secs_f64(),
            prune_mode: handle.config.prune.mode.to_string(),
            kept_ratio: counters.kept_ratio(),
            prune_threshold: handle.shared.counters.prune_threshold(),
            decode: handle.shared.decode(),
            counters,
            memory: None,
            family: None,
        }
    }

    /// One human-readable line.
    pub fn line(&self) -> String {
        let mut s = format!(
            "{}: {} | in {:.1} fps, sampled {:.2} fps | window {} frames / {:.0} s | {} | kept {:.0}% ({}) | restarts {}",
            self.camera,
            self.state,
            self.fps_in,
            self.fps_sampled,
            self.window_frames,
            self.window_span_secs,
            self.geometry
                .as_deref()
                .map(|g| format!("{g} ({} tokens)", self.tokens_per_frame.unwrap_or(0)))
                .unwrap_or_else(|| "geometry pending".into()),
            self.kept_ratio * 100.0,
            self.prune_mode,
            self.counters.restarts,
        );
        if let Some(d) = &self.decode {
            s.push_str(&format!(
                " | decode {d}, {} undecoded",
                self.counters.undecoded
            ));
        }
        if let Some(m) = &self.memory {
            s.push_str(" | ");
            s.push_str(&m.line());
        }
        if let Some(r) = &self.reason {
            s.push_str(&format!(" | last: {r}"));
        }
        s
    }
}
