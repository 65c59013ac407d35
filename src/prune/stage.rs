//! DiffFP as a stage of a camera's flow: each sampled frame, before it enters the window, gets
//! its keep-mask against the camera's previous sampled frame. The supervisor's camera task calls
//! [`CameraPrune::apply`] on every frame it hands to the window.

use super::{Decision, Pruner};
use crate::config::PruneParams;
use crate::ring::{Counters, Frame, TokenMask};

impl TokenMask {
    /// Copies a pruner decision (the pruner reuses its buffers for the next frame).
    pub fn from_decision(d: &Decision) -> Self {
        TokenMask {
            keep: d.keep().into(),
            kept: d.kept(),
            key_frame: d.key_frame(),
            identical: d.identical(),
            threshold: d.threshold_used(),
        }
    }
}

/// One camera's DiffFP: the pruner for its current geometry, made on the first frame (and again
/// when a restart brings another size).
#[derive(Debug)]
pub struct CameraPrune {
    camera: String,
    params: PruneParams,
    pruner: Option<Pruner>,
    /// Why pruning is off for this camera, once it failed (logged once).
    failed: Option<String>,
}

impl CameraPrune {
    /// DiffFP for camera `camera` with its `prune_*` settings.
    pub fn new(camera: impl Into<String>, params: PruneParams) -> CameraPrune {
        CameraPrune {
            camera: camera.into(),
            params,
            pruner: None,
            failed: None,
        }
    }

    /// The keep-mask of a sampled frame against the previous one, counted in `counters`; `None`
    /// when DiffFP cannot run for this camera (then the frame keeps every token, and the reason
    /// is logged once).
    pub fn apply(&mut self, frame: &Frame, counters: &Counters) -> Option<TokenMask> {
        let (w, h) = (frame.width as usize, frame.height as usize);
        let fits = |p: &Pruner| p.grid().width() == w && p.grid().height() == h;
        if !self.pruner.as_ref().is_some_and(fits) {
            match Pruner::new(w, h, self.params) {
                Ok(p) => self.pruner = Some(p),
                Err(e) => {
                    self.off(format!("pruner for {w}x{h}: {e}"));
                    return None;
                }
            }
        }
        let decision = match self.pruner.as_mut()?.push(&frame.rgb, w * 3) {
            Ok(d) => d,
            Err(e) => {
                self.off(e.to_string());
                return None;
            }
        };
        let mask = TokenMask::from_decision(decision);
        counters.record_prune(&mask);
        Some(mask)
    }

    /// After a restart the previous frame is from before the outage: the next frame is a key
    /// frame, kept whole.
    pub fn reset(&mut self) {
        if let Some(p) = &mut self.pruner {
            p.reset();
        }
    }

    /// Why DiffFP is off for this camera, if it is.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    fn off(&mut self, why: String) {
        if self.failed.is_none() {
            tracing::error!(camera = %self.camera, reason = %why, "DiffFP cannot run; frames keep every token");
        }
        self.failed = Some(why);
    }
}
