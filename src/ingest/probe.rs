//! `edgevlm probe`: attach to one source once and report what it delivers, without retries.

use super::session::{CameraShared, Session, SessionEvent};
use crate::config::{CameraConfig, VisionConfig};
use crate::ring::Frame;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a probe saw.
#[derive(Debug, Clone)]
pub struct ProbeSummary {
    /// Frames reported.
    pub frames: usize,
    /// Caps the source delivered.
    pub source_caps: Option<String>,
    /// Model geometry used.
    pub geometry: Option<super::Geometry>,
    /// Wall time from start to the last frame.
    pub elapsed: Duration,
    /// Frames decoded (that reached the sampler).
    pub decoded: u64,
    /// Compressed frames not decoded (`decode = "keyframes"`).
    pub undecoded: u64,
    /// What keyframe decoding did last (`None`: every frame decoded by configuration).
    pub decode: Option<String>,
}

/// Attaches to `cfg`'s source and calls `on_frame` for each of the first `frames` sampled frames.
/// Fails with a message naming the (redacted) source and the reason when the source is
/// unreachable, not video, ends early, or delivers no frame within `cfg.connect_timeout`.
pub async fn probe(
    cfg: &CameraConfig,
    vision: &VisionConfig,
    frames: usize,
    mut on_frame: impl FnMut(&Frame),
) -> Result<ProbeSummary, String> {
    let source = cfg.uri.redacted();
    let fail = |reason: String| format!("cannot read {source}: {reason}");
    let shared = Arc::new(CameraShared::new(&cfg.id, cfg.size, vision));
    let started = Instant::now();
    let (c, v, s) = (cfg.clone(), *vision, shared.clone());
    let mut session = tokio::task::spawn_blocking(move || Session::start(&c, &v, s))
        .await
        .map_err(|e| fail(format!("pipeline start crashed: {e}")))?
        .map_err(|e| fail(e.to_string()))?;

    let mut seen = 0usize;
    let result = loop {
        if seen >= frames {
            break Ok(());
        }
        // Before the first frame the connect timeout applies; afterwards the stall bound.
        let limit = if seen == 0 {
            cfg.connect_timeout
        } else {
            cfg.stall.max(Duration::from_secs_f64(2.0 / cfg.sample_fps))
        };
        match tokio::time::timeout(limit, session.next_event()).await {
            Err(_) if seen == 0 => {
                break Err(fail(format!(
                    "no frame within {:.1} s (is it reachable and a video source?)",
                    limit.as_secs_f64()
                )));
            }
            Err(_) => {
                break Err(fail(format!(
                    "no frame for {:.1} s after frame {seen}",
                    limit.as_secs_f64()
                )));
            }
            Ok(SessionEvent::FramesReady) => {
                while let Some(frame) = session.pop_frame() {
                    if seen < frames {
                        on_frame(&frame);
                        seen += 1;
                    }
                }
            }
            Ok(SessionEvent::Error(e)) => break Err(fail(e)),
            Ok(SessionEvent::Eos) if seen == 0 => {
                break Err(fail("ended before the first frame".into()));
            }
            Ok(SessionEvent::Eos) => break Ok(()),
        }
    };
    let elapsed = started.elapsed();
    let _ = tokio::task::spawn_blocking(move || session.stop()).await;
    result.map(|()| ProbeSummary {
        frames: seen,
        source_caps: shared
            .source_caps
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default(),
        geometry: shared.geometry.get().copied(),
        elapsed,
        decoded: shared.counters.snapshot().frames_in,
        undecoded: shared.counters.snapshot().undecoded,
        decode: shared.decode(),
    })
}
