//! Typed errors of the pruner (Display and Error by hand: the crate carries no thiserror).

use std::fmt;

/// Why a pruner could not be built or a frame could not be pruned.
#[derive(Clone, Debug, PartialEq)]
pub enum PruneError {
    /// `patch` or `merge` is zero.
    ZeroPatchOrMerge {
        /// Patch side in pixels.
        patch: usize,
        /// Merge factor.
        merge: usize,
    },
    /// `patch * merge` exceeds the supported block side.
    BlockTooLarge {
        /// Patch side in pixels.
        patch: usize,
        /// Merge factor.
        merge: usize,
        /// Largest supported block side.
        max: usize,
    },
    /// Width or height is zero.
    ZeroSize {
        /// Frame width in pixels.
        width: usize,
        /// Frame height in pixels.
        height: usize,
    },
    /// Width or height is not a multiple of the block side.
    NotBlockMultiple {
        /// Frame width in pixels.
        width: usize,
        /// Frame height in pixels.
        height: usize,
        /// Block side in pixels.
        block: usize,
    },
    /// The frame is too large for 32-bit SAD totals.
    FrameTooLarge {
        /// Frame width in pixels.
        width: usize,
        /// Frame height in pixels.
        height: usize,
    },
    /// The threshold is NaN, infinite or negative.
    BadThreshold {
        /// The rejected threshold.
        threshold: f32,
    },
    /// `min_tokens` exceeds the tokens in one frame.
    MinTokensTooLarge {
        /// Requested minimum tokens per frame.
        min_tokens: usize,
        /// Tokens per frame for this geometry.
        tokens: usize,
    },
    /// The row stride is shorter than one row of pixels.
    StrideTooSmall {
        /// Given stride in bytes.
        stride: usize,
        /// Bytes in one row of pixels (`width * 3`).
        row_bytes: usize,
    },
    /// The frame buffer is shorter than `stride * (height - 1) + width * 3`.
    BufferTooShort {
        /// Given buffer length in bytes.
        len: usize,
        /// Bytes needed.
        needed: usize,
        /// Given stride in bytes.
        stride: usize,
    },
    /// A batch holds more frames than the pruner was sized for.
    BatchTooLarge {
        /// Frames in the batch.
        frames: usize,
        /// Largest batch this pruner accepts.
        max_batch: usize,
    },
    /// The GPU backend failed at run time (driver, launch or copy error).
    Gpu {
        /// What failed, with the driver's message.
        message: String,
    },
}

impl fmt::Display for PruneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PruneError::ZeroPatchOrMerge { patch, merge } => {
                write!(
                    f,
                    "patch ({patch}) and merge ({merge}) must both be at least 1"
                )
            }
            PruneError::BlockTooLarge { patch, merge, max } => write!(
                f,
                "block side patch * merge = {patch} * {merge} exceeds the supported maximum {max}"
            ),
            PruneError::ZeroSize { width, height } => {
                write!(f, "frame size {width}x{height} has a zero dimension")
            }
            PruneError::NotBlockMultiple {
                width,
                height,
                block,
            } => write!(
                f,
                "frame size {width}x{height} is not a multiple of the {block}-pixel token block"
            ),
            PruneError::FrameTooLarge { width, height } => {
                write!(
                    f,
                    "frame size {width}x{height} is too large for 32-bit block sums"
                )
            }
            PruneError::BadThreshold { threshold } => {
                write!(f, "threshold {threshold} must be finite and at least 0")
            }
            PruneError::MinTokensTooLarge { min_tokens, tokens } => write!(
                f,
                "min_tokens {min_tokens} exceeds the {tokens} tokens of one frame"
            ),
            PruneError::StrideTooSmall { stride, row_bytes } => write!(
                f,
                "stride {stride} bytes is shorter than one row of pixels ({row_bytes} bytes)"
            ),
            PruneError::BufferTooShort {
                len,
                needed,
                stride,
            } => write!(
                f,
                "frame buffer holds {len} bytes but stride {stride} needs {needed}"
            ),
            PruneError::BatchTooLarge { frames, max_batch } => write!(
                f,
                "batch of {frames} frames exceeds this pruner's maximum of {max_batch}"
            ),
            PruneError::Gpu { message } => write!(f, "GPU pruning failed: {message}"),
        }
    }
}

impl std::error::Error for PruneError {}
