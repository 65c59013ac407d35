//! `decode = "keyframes"`: only keyframes reach the camera's video decoder while the stream's
//! keyframe interval (its GOP) divides the sample period (1 s, 0.5 s, 0.25 s … at 1 fps), so a
//! 1 fps camera on a 1 s GOP decodes one frame a second instead of thirty (docs/ARCHITECTURE.md,
//! "Keyframe decoding"). A GOP longer than the period would leave sample slots empty; one that does
//! not divide it (25 frames at 30 fps against 1 s) puts keyframes off the sample grid, so the
//! sampler would take frames up to half a period off their slot and miss some slots (measured:
//! 48 of 60 samples, up to 0.5 s off): both decode every frame instead.
//!
//! The gate is a probe on the decoder's sink pad (the decoder `decodebin` plugs, found through
//! `deep-element-added`): compressed buffers flagged `DELTA_UNIT` are dropped there, before any
//! decoding work. The interval is measured from the keyframes' timestamps as they pass; the gate
//! opens (drops deltas) after two intervals in a row within the period, and closes (every frame is
//! decoded again) at the first keyframe whose interval is over it, so decoding always restarts at a
//! keyframe and never references a dropped frame. Sampling stays PTS-based downstream: the
//! sampler sees fewer, keyframe-only, frames and picks by their timestamps.

use super::session::CameraShared;
use crate::ring::Counters;
use gst::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Intervals within the period needed before deltas are dropped.
const OPEN_AFTER: u32 = 2;

/// The gate's state for one session.
#[derive(Debug)]
struct Gate {
    period: Duration,
    last_key: Option<gst::ClockTime>,
    good: u32,
    open: bool,
}

/// What the gate does with one compressed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Decode it.
    Pass,
    /// Drop it before the decoder.
    Drop,
}

/// A change of the gate's state, for the log and the status.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Change {
    /// Deltas are dropped from now on (the measured interval).
    Opened(Duration),
    /// Every frame is decoded from now on: the interval is over the period.
    Longer(Duration),
    /// Every frame is decoded from now on: the interval does not divide the period.
    OffGrid(Duration),
}

/// How far `k` GOPs may be from the period, as a share of it, and still divide it: timestamp
/// rounding (90 kHz RTP clocks, millisecond container time bases) and the drift between a camera's
/// clock and ours, which rtspsrc's jitter buffer follows (measured on the RTSP test camera: 1 s
/// GOPs read 1.003-1.005 s while its skew estimate settles). A drift of `d` moves keyframes off the
/// grid by `d` per period, so one sample slot in `1 / (2 d)` periods is skipped: at the bound, 1 %.
const ALIGN_SHARE: f64 = 0.01;

/// Whether keyframes `gop` apart land on the grid of `period` (the GOP divides the period).
fn divides(gop: Duration, period: Duration) -> bool {
    let (g, p) = (gop.as_secs_f64(), period.as_secs_f64());
    let k = (p / g).round();
    k >= 1.0 && (k * g - p).abs() <= ALIGN_SHARE * p
}

impl Gate {
    fn new(period: Duration) -> Gate {
        Gate {
            period,
            last_key: None,
            good: 0,
            open: false,
        }
    }

    /// The verdict on a buffer (`key`: not a delta unit) with timestamp `pts`, and the state
    /// change it caused.
    fn push(&mut self, key: bool, pts: Option<gst::ClockTime>) -> (Verdict, Option<Change>) {
        if !key {
            return (
                if self.open {
                    Verdict::Drop
                } else {
                    Verdict::Pass
                },
                None,
            );
        }
        let Some(pts) = pts else {
            return (Verdict::Pass, None);
        };
        let mut change = None;
        if let Some(last) = self.last_key
            && pts > last
        {
            let gop = Duration::from_nanos((pts - last).nseconds());
            if divides(gop, self.period) {
                self.good += 1;
                if !self.open && self.good >= OPEN_AFTER {
                    self.open = true;
                    change = Some(Change::Opened(gop));
                }
            } else {
                // Reported at every such interval (the status shows the last one).
                self.good = 0;
                self.open = false;
                change = Some(if gop > self.period {
                    Change::Longer(gop)
                } else {
                    Change::OffGrid(gop)
                });
            }
        }
        self.last_key = Some(pts);
        (Verdict::Pass, change)
    }
}

/// The status text of a gate in `state`.
pub(crate) fn describe(change: &Change, period: Duration) -> String {
    match change {
        // One decimal while open: the retained status changes when the state does, not with jitter.
        Change::Opened(gop) => format!("keyframes (GOP {:.1} s)", gop.as_secs_f64()),
        Change::Longer(gop) => format!(
            "full: GOP {:.2} s is over the {:.2} s sample period",
            gop.as_secs_f64(),
            period.as_secs_f64()
        ),
        Change::OffGrid(gop) => format!(
            "full: GOP {:.2} s does not divide the {:.2} s sample period",
            gop.as_secs_f64(),
            period.as_secs_f64()
        ),
    }
}

/// Installs the gate on every video decoder `pipeline` gets (decodebin plugs it at run time).
pub(crate) fn install(pipeline: &gst::Pipeline, shared: Arc<CameraShared>, sample_fps: f64) {
    let period = Duration::from_secs_f64(1.0 / sample_fps.max(1e-6));
    shared.set_decode(Some("full: measuring the keyframe interval".into()));
    pipeline.connect_deep_element_added(move |_, _, element| {
        let is_video_decoder = element.factory().is_some_and(|f| {
            let klass = f.klass();
            klass.contains("Decoder") && klass.contains("Video")
        });
        if !is_video_decoder {
            return;
        }
        let Some(pad) = element.static_pad("sink") else {
            return;
        };
        let gate = Mutex::new(Gate::new(period));
        let shared = shared.clone();
        let decoder = element.name();
        pad.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
            let Some(buffer) = info.buffer() else {
                return gst::PadProbeReturn::Ok;
            };
            let flags = buffer.flags();
            // Codec headers travel flagged HEADER (and maybe DELTA_UNIT): always decoded.
            let key = !flags.contains(gst::BufferFlags::DELTA_UNIT)
                || flags.contains(gst::BufferFlags::HEADER);
            let (verdict, change) = gate
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(key, buffer.pts());
            if let Some(change) = change {
                let text = describe(&change, period);
                let was = shared.decode();
                if was.as_deref() != Some(text.as_str()) {
                    let was_open = was.as_deref().is_some_and(|w| w.starts_with("keyframes"));
                    match &change {
                        Change::Opened(_) => tracing::info!(
                            camera = %shared.id, decoder = %decoder,
                            "Decoding keyframes only: {text}"
                        ),
                        _ if was_open => tracing::warn!(
                            camera = %shared.id, decoder = %decoder,
                            "Decoding every frame again: {text}"
                        ),
                        _ => tracing::warn!(
                            camera = %shared.id, decoder = %decoder,
                            "decode = \"keyframes\" cannot apply, decoding every frame: {text}"
                        ),
                    }
                    // The status keeps the last interval's text; only state changes are logged.
                    shared.set_decode(Some(text));
                }
            }
            match verdict {
                Verdict::Pass => gst::PadProbeReturn::Ok,
                Verdict::Drop => {
                    Counters::bump(&shared.counters.undecoded);
                    // `Handled`, not `Drop`: gstreamer-rs has already taken the buffer out of the
                    // probe info and frees it here; with `Drop` GStreamer would unref the null it
                    // left (a CRITICAL per buffer). Upstream sees GST_FLOW_OK either way.
                    gst::PadProbeReturn::Handled
                }
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Option<gst::ClockTime> {
        Some(gst::ClockTime::from_mseconds(ms))
    }

    /// Feeds a stream of `gop_ms` GOPs of `per_gop` frames; returns the verdicts of deltas.
    fn run(gate: &mut Gate, from_ms: u64, gops: u64, gop_ms: u64, per_gop: u64) -> Vec<Verdict> {
        let mut out = Vec::new();
        for g in 0..gops {
            for i in 0..per_gop {
                let ms = from_ms + g * gop_ms + i * gop_ms / per_gop;
                let (v, _) = gate.push(i == 0, t(ms));
                if i > 0 {
                    out.push(v);
                }
            }
        }
        out
    }

    #[test]
    fn deltas_are_dropped_after_two_intervals_within_the_period() {
        let mut g = Gate::new(Duration::from_secs(1));
        let v = run(&mut g, 0, 5, 1000, 30);
        // GOP 0 and 1: measuring (decoded); from the third keyframe on, deltas are dropped.
        assert!(v[..2 * 29].iter().all(|v| *v == Verdict::Pass));
        assert!(v[2 * 29..].iter().all(|v| *v == Verdict::Drop));
        assert!(g.open);
    }

    #[test]
    fn a_gop_over_the_period_decodes_everything_from_its_keyframe_on() {
        let mut g = Gate::new(Duration::from_secs(1));
        run(&mut g, 0, 4, 1000, 30);
        assert!(g.open);
        // The camera switches to a 2 s GOP: the first long interval closes the gate at its keyframe.
        let (v, change) = g.push(true, t(5000));
        assert_eq!(v, Verdict::Pass);
        assert_eq!(change, Some(Change::Longer(Duration::from_secs(2))));
        assert_eq!(g.push(false, t(5033)).0, Verdict::Pass);
        // And stays closed while the GOP is long.
        let v = run(&mut g, 7000, 3, 2000, 60);
        assert!(v.iter().all(|v| *v == Verdict::Pass));
        assert!(!g.open);
        assert_eq!(
            describe(
                &Change::Longer(Duration::from_secs(2)),
                Duration::from_secs(1)
            ),
            "full: GOP 2.00 s is over the 1.00 s sample period"
        );
    }

    #[test]
    fn only_a_gop_that_divides_the_period_opens_the_gate() {
        let s = Duration::from_secs_f64;
        assert!(divides(s(1.0), s(1.0)));
        assert!(divides(s(0.5), s(1.0)));
        assert!(divides(s(1.0), s(2.0)));
        // A 90 kHz clock's rounding, a camera's clock drift.
        assert!(divides(s(1.000011), s(1.0)));
        assert!(divides(s(1.005), s(1.0)));
        assert!(!divides(s(1.02), s(1.0)));
        assert!(!divides(s(25.0 / 30.0), s(1.0)));
        assert!(!divides(s(0.9), s(1.0)));
        assert!(!divides(s(2.0), s(1.0)));
        let mut g = Gate::new(s(1.0));
        let v = run(&mut g, 0, 6, 833, 25);
        assert!(v.iter().all(|v| *v == Verdict::Pass));
        assert_eq!(
            describe(&Change::OffGrid(s(25.0 / 30.0)), s(1.0)),
            "full: GOP 0.83 s does not divide the 1.00 s sample period"
        );
    }

    #[test]
    fn a_stream_without_timestamps_is_decoded_whole() {
        let mut g = Gate::new(Duration::from_secs(1));
        for _ in 0..100 {
            assert_eq!(g.push(true, None).0, Verdict::Pass);
            assert_eq!(g.push(false, None).0, Verdict::Pass);
        }
    }
}
