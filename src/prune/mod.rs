//! Differential Frame Pruner (DiffFP) of VideoLLaMA3: which visual tokens of a frame changed.
//!
//! Each token covers a `block x block` RGB pixel block (`block = patch * merge`, 28 by default).
//! A token of frame t is kept iff `d = 255 * mean|x_t - x_{t-1}| > threshold` over the block's
//! `N = 3 * block^2` normalised values (`x = (u/255 - 0.5) / 0.5`), compared with the previous
//! *pushed* frame (not the last kept token). The first frame after construction or
//! [`Pruner::reset`] is kept whole, and every frame keeps at least `min_tokens` tokens by forcing
//! the first ones in raster order. See docs/REFERENCE.md §1a.
//!
//! Modes: [`PruneMode::Reference`] reproduces the reference float32 masks with an integer rule on
//! the sum of absolute 8-bit differences (see [`SadBound`] for the derivation and its proof);
//! [`PruneMode::Adaptive`] is ours (threshold above the camera's noise floor, see
//! [`NOISE_QUANTILE`] and friends); [`PruneMode::Off`] keeps everything.
//!
//! The CPU computes SADs per frame ([`Pruner::push`]); a batch of frames can go to the GPU
//! (feature `prune-cuda`, [`Backend::select`], [`Pruner::push_batch`]). Decisions are always made by
//! the same CPU code, so GPU and CPU masks are identical.

mod adaptive;
mod backend;
mod bound;
mod cpu;
#[cfg(feature = "prune-cuda")]
mod cuda;
mod decide;
mod error;
mod grid;
pub mod inspect;
pub mod oracle;
mod stage;

pub use crate::config::{ParsePruneModeError, PruneMode, PruneParams};
pub use adaptive::{
    NOISE_CAP_LEVELS, NOISE_FACTOR, NOISE_FALL, NOISE_MARGIN_LEVELS, NOISE_QUANTILE, NOISE_RISE,
};
pub use backend::{Backend, BackendChoice, BackendKind};
pub use bound::{CALIBRATION_BLOCKS, SadBound};
#[doc(hidden)]
pub use cpu::{SadBench, SadKernel};
pub use decide::{Decision, PruneStats};
pub use error::PruneError;
pub use grid::{BlockGrid, MAX_BLOCK};
pub use stage::CameraPrune;

use decide::Decider;

impl PruneParams {
    /// Check what can be checked without a frame size (`min_tokens` is checked by
    /// [`Pruner::new`], which knows the tokens per frame).
    pub fn validate(&self) -> Result<(), PruneError> {
        if self.patch == 0 || self.merge == 0 {
            return Err(PruneError::ZeroPatchOrMerge {
                patch: self.patch,
                merge: self.merge,
            });
        }
        if self
            .patch
            .checked_mul(self.merge)
            .is_none_or(|b| b > MAX_BLOCK)
        {
            return Err(PruneError::BlockTooLarge {
                patch: self.patch,
                merge: self.merge,
                max: MAX_BLOCK,
            });
        }
        if !self.threshold.is_finite() || self.threshold < 0.0 {
            return Err(PruneError::BadThreshold {
                threshold: self.threshold,
            });
        }
        Ok(())
    }
}

/// Per-frame state shared by the CPU and batch paths.
#[derive(Debug)]
struct State {
    geom: BlockGrid,
    /// Copy of the previous pushed frame (aligned block-row slots, see `cpu`).
    prev: cpu::PrevFrame,
    have_prev: bool,
    decider: Decider,
    decision: Decision,
}

impl State {
    /// CPU path for one validated frame.
    fn push_checked(&mut self, rgb: &[u8], stride: usize) {
        if self.have_prev {
            self.prev
                .sad_and_copy(rgb, stride, self.decision.sads_mut());
            self.decider.decide(&mut self.decision);
        } else {
            self.prev.store(rgb, stride);
            self.decider.key_frame(&mut self.decision);
            self.have_prev = true;
        }
    }
}

/// Where this pruner's batches go.
#[derive(Debug)]
enum Engine {
    Cpu,
    #[cfg(feature = "prune-cuda")]
    Cuda(Box<cuda::CudaSad>),
}

/// DiffFP state of one camera: the previous frame, the decision buffers and the counters.
///
/// Everything is allocated in [`Pruner::new`]; pushing frames on the CPU allocates nothing
/// (`tests/no_alloc.rs` checks it). GPU batches only add cudarc's small per-launch argument
/// list.
#[derive(Debug)]
pub struct Pruner {
    params: PruneParams,
    state: State,
    engine: Engine,
}

impl Pruner {
    /// CPU pruner for `width x height` RGB24 frames.
    pub fn new(width: usize, height: usize, params: PruneParams) -> Result<Pruner, PruneError> {
        params.validate()?;
        let geom = BlockGrid::new(width, height, params.patch, params.merge)?;
        if params.min_tokens > geom.tokens() {
            return Err(PruneError::MinTokensTooLarge {
                min_tokens: params.min_tokens,
                tokens: geom.tokens(),
            });
        }
        let state = State {
            geom,
            prev: cpu::PrevFrame::new(&geom),
            have_prev: false,
            decider: Decider::new(params, &geom),
            decision: Decision::new(&geom),
        };
        Ok(Pruner {
            params,
            state,
            engine: Engine::Cpu,
        })
    }

    /// Pruner whose [`Pruner::push_batch`] uses `backend`, with GPU buffers for batches of up to
    /// `max_batch` frames (larger batches are split). [`Pruner::push`] always uses the CPU: for
    /// one frame the transfers cost more than the SADs.
    pub fn with_backend(
        width: usize,
        height: usize,
        params: PruneParams,
        backend: &Backend,
        max_batch: usize,
    ) -> Result<Pruner, PruneError> {
        let pruner = Pruner::new(width, height, params)?;
        #[cfg(feature = "prune-cuda")]
        if let Some(gpu) = backend.gpu() {
            let sad = cuda::CudaSad::new(gpu, &pruner.state.geom, max_batch)?;
            return Ok(Pruner {
                engine: Engine::Cuda(Box::new(sad)),
                ..pruner
            });
        }
        // CPU engine: the batch size only sizes GPU buffers.
        let _ = (backend, max_batch);
        Ok(pruner)
    }

    /// Start a new window (or a restarted camera): the next frame is a key frame, kept whole.
    /// The adaptive noise floor is a property of the camera and survives.
    pub fn reset(&mut self) {
        self.state.have_prev = false;
    }

    /// Prune one RGB24 frame whose rows are `stride` bytes apart (`stride >= width * 3`; the
    /// last row needs no padding). The decision is valid until the next push.
    pub fn push(&mut self, rgb: &[u8], stride: usize) -> Result<&Decision, PruneError> {
        self.state.geom.check_frame(rgb.len(), stride)?;
        self.state.push_checked(rgb, stride);
        Ok(&self.state.decision)
    }

    /// Prune consecutive frames in one go, calling `on_decision(index, decision)` per frame in
    /// order; on the GPU backend the SADs of a whole batch come from one kernel launch.
    ///
    /// All frames are validated before any is processed. If the GPU fails mid-way, the frames
    /// already reported stay processed and the error is returned.
    pub fn push_batch<F>(
        &mut self,
        frames: &[&[u8]],
        stride: usize,
        mut on_decision: F,
    ) -> Result<(), PruneError>
    where
        F: FnMut(usize, &Decision),
    {
        for f in frames {
            self.state.geom.check_frame(f.len(), stride)?;
        }
        match &mut self.engine {
            Engine::Cpu => {
                for (i, f) in frames.iter().enumerate() {
                    self.state.push_checked(f, stride);
                    on_decision(i, &self.state.decision);
                }
                Ok(())
            }
            #[cfg(feature = "prune-cuda")]
            Engine::Cuda(sad) => gpu_batch(sad, &mut self.state, frames, stride, on_decision),
        }
    }

    /// Counters since construction.
    pub fn stats(&self) -> &PruneStats {
        self.state.decider.stats()
    }

    /// Frame and token geometry.
    pub fn grid(&self) -> &BlockGrid {
        &self.state.geom
    }

    /// Parameters in force.
    pub fn params(&self) -> &PruneParams {
        &self.params
    }

    /// Integer rule implementing the reference threshold (with its float32 calibration).
    pub fn bound(&self) -> &SadBound {
        self.state.decider.bound()
    }

    /// Adaptive mode's noise floor (mean |Δu| in grey levels), once measured.
    pub fn noise_floor(&self) -> Option<f32> {
        self.state.decider.noise_floor()
    }

    /// Engine used by [`Pruner::push_batch`].
    pub fn backend_kind(&self) -> BackendKind {
        match self.engine {
            Engine::Cpu => BackendKind::Cpu,
            #[cfg(feature = "prune-cuda")]
            Engine::Cuda(_) => BackendKind::Cuda,
        }
    }
}

/// GPU batch: SADs of each chunk from one launch, decisions by the shared CPU code.
#[cfg(feature = "prune-cuda")]
fn gpu_batch<F>(
    sad: &mut cuda::CudaSad,
    state: &mut State,
    frames: &[&[u8]],
    stride: usize,
    mut on_decision: F,
) -> Result<(), PruneError>
where
    F: FnMut(usize, &Decision),
{
    let tokens = state.geom.tokens();
    let mut index = 0;
    for chunk in frames.chunks(sad.max_batch()) {
        let sads = sad.sads(&state.prev, chunk, stride)?;
        for (i, per_frame) in sads.chunks_exact(tokens).enumerate() {
            if state.have_prev {
                state.decision.sads_mut().copy_from_slice(per_frame);
                state.decider.decide(&mut state.decision);
            } else {
                // The pair against the stale previous slot is meaningless: a key frame.
                state.decider.key_frame(&mut state.decision);
                state.have_prev = true;
            }
            on_decision(index + i, &state.decision);
        }
        if let Some(last) = chunk.last() {
            state.prev.store(last, stride);
        }
        index += chunk.len();
    }
    Ok(())
}
