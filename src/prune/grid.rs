//! Frame and token-block geometry, and validation of incoming frame buffers.

use super::error::PruneError;

/// Largest block side: keeps every per-block sum (at most `3 * 256^2 * 255`) far inside `u32`
/// and covers any ViT patch/merge in use (28 for VideoLLaMA3).
pub const MAX_BLOCK: usize = 256;

/// BlockGrid of one camera's frames and of their token blocks (`block = patch * merge` pixels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockGrid {
    width: usize,
    height: usize,
    block: usize,
    rows: usize,
    cols: usize,
}

impl BlockGrid {
    /// BlockGrid of `width x height` RGB24 frames cut into `patch * merge` pixel blocks.
    pub fn new(
        width: usize,
        height: usize,
        patch: usize,
        merge: usize,
    ) -> Result<Self, PruneError> {
        if patch == 0 || merge == 0 {
            return Err(PruneError::ZeroPatchOrMerge { patch, merge });
        }
        let block = patch.checked_mul(merge).filter(|&b| b <= MAX_BLOCK).ok_or(
            PruneError::BlockTooLarge {
                patch,
                merge,
                max: MAX_BLOCK,
            },
        )?;
        if width == 0 || height == 0 {
            return Err(PruneError::ZeroSize { width, height });
        }
        if !width.is_multiple_of(block) || !height.is_multiple_of(block) {
            return Err(PruneError::NotBlockMultiple {
                width,
                height,
                block,
            });
        }
        // Every byte count used later (frame bytes, SAD totals) must fit without overflow.
        let fits = width
            .checked_mul(height)
            .and_then(|p| p.checked_mul(3 * 255))
            .is_some_and(|v| u32::try_from(v).is_ok());
        if !fits {
            return Err(PruneError::FrameTooLarge { width, height });
        }
        Ok(BlockGrid {
            width,
            height,
            block,
            rows: height / block,
            cols: width / block,
        })
    }

    /// Frame width in pixels.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Frame height in pixels.
    pub fn height(&self) -> usize {
        self.height
    }

    /// Token block side in pixels (`patch * merge`).
    pub fn block(&self) -> usize {
        self.block
    }

    /// Token grid rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Token grid columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Tokens per frame (`rows * cols`).
    pub fn tokens(&self) -> usize {
        self.rows * self.cols
    }

    /// Bytes in one packed frame row (`width * 3`).
    pub fn row_bytes(&self) -> usize {
        self.width * 3
    }

    /// Bytes of one block row (`block * 3`, 84 for the default 28-pixel block).
    pub fn block_row_bytes(&self) -> usize {
        self.block * 3
    }

    /// 8-bit values per token block (`3 * block^2`, 2352 for the default).
    pub fn values_per_block(&self) -> usize {
        3 * self.block * self.block
    }

    /// Bytes in one packed frame (`width * height * 3`).
    pub fn frame_bytes(&self) -> usize {
        self.row_bytes() * self.height
    }

    /// Check that `len` bytes with `stride` bytes per row hold a whole frame.
    ///
    /// The last row may stop right after its pixels (no trailing padding required).
    pub fn check_frame(&self, len: usize, stride: usize) -> Result<(), PruneError> {
        let row_bytes = self.row_bytes();
        if stride < row_bytes {
            return Err(PruneError::StrideTooSmall { stride, row_bytes });
        }
        let needed = stride
            .checked_mul(self.height - 1)
            .and_then(|b| b.checked_add(row_bytes))
            .ok_or(PruneError::BufferTooShort {
                len,
                needed: usize::MAX,
                stride,
            })?;
        if len < needed {
            return Err(PruneError::BufferTooShort {
                len,
                needed,
                stride,
            });
        }
        Ok(())
    }
}
