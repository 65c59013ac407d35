//! The square-image resize of SmolVLM2's video processor (`SmolVLMVideoProcessor.resize`), which
//! ingest runs for a camera of a model of square images (`VisionConfig::square`): the longest
//! edge to `video_size` (the published processors: 512) keeping the aspect ratio, the other edge
//! truncated and made even, then again to `max_image_size` squared (512 x 512), both with torch's
//! antialiased Lanczos on uint8 frames (its `resample` is PIL's LANCZOS, which torchvision >= 0.27
//! runs natively on the CPU). Byte-identical to the processor (tests/smolvlm2_onnx.rs);
//! normalisation is the vision encoder's (`engine::vision`). It lives in ingest, which runs it,
//! and `family::smolvlm2::preprocess` names it for the family (ingest sits below the families).

use edgevlm_resize::{Kernel, ResizeError, Resizer};

/// The processor's absolute bound on a side (`MAX_IMAGE_SIZE`).
const MAX_IMAGE_SIZE: u32 = 4096;

/// The size of the processor's first step for a `width` x `height` frame and a longest edge of
/// `longest` (`get_resize_output_image_size`).
pub fn first_step(width: u32, height: u32, longest: u32) -> (u32, u32) {
    let side = longest.min(MAX_IMAGE_SIZE);
    let aspect = f64::from(width) / f64::from(height);
    // Python's int() truncates toward zero; an odd short edge grows by one.
    let even = |x: u32| x + x % 2;
    let (w, h) = if width >= height {
        (side, even((f64::from(side) / aspect) as u32))
    } else {
        (even((f64::from(side) * aspect) as u32), side)
    };
    (w.max(1), h.max(1))
}

/// Resizes frames of one source size to `image_size` x `image_size` in the processor's two steps.
#[derive(Debug, Clone)]
pub struct FrameResize {
    first: Resizer,
    second: Resizer,
    middle: Vec<u8>,
}

impl FrameResize {
    /// For `width` x `height` frames; `video_size`: the first step's longest edge, `image_size`:
    /// the square side (both 512 in the published processors).
    pub fn new(
        width: u32,
        height: u32,
        video_size: u32,
        image_size: u32,
    ) -> Result<FrameResize, ResizeError> {
        let (w, h) = first_step(width, height, video_size);
        let first = Resizer::with_kernel(width, height, w, h, Kernel::Lanczos)?;
        let second = Resizer::with_kernel(w, h, image_size, image_size, Kernel::Lanczos)?;
        Ok(FrameResize {
            middle: vec![0; first.dst_len()],
            first,
            second,
        })
    }

    /// Bytes of one resized frame.
    pub fn dst_len(&self) -> usize {
        self.second.dst_len()
    }

    /// The source frames' width and height.
    pub fn src_size(&self) -> (u32, u32) {
        self.first.src_size()
    }

    /// The resized frames' width and height (square).
    pub fn dst_size(&self) -> (u32, u32) {
        self.second.dst_size()
    }

    /// Resizes `src` (rows `stride` bytes apart) into `dst`, a packed square frame.
    pub fn resize(&mut self, src: &[u8], stride: usize, dst: &mut [u8]) -> Result<(), ResizeError> {
        self.first.resize(src, stride, &mut self.middle)?;
        let w = self.first.dst_size().0 as usize;
        self.second.resize(&self.middle, w * 3, dst)
    }
}

/// Apollo's square: each frame pasted centred on a square of its longest side filled with one
/// colour (its processor's `expand2square`, the fill being the processor's mean), then resized to
/// `image_size` x `image_size` with the antialiased bicubic resize (docs/ENGINES.md, "Apollo on a
/// live camera").
#[derive(Debug, Clone)]
pub struct PadResize {
    src: (u32, u32),
    /// The padded square, its borders filled once; each frame overwrites only its own rows.
    padded: Vec<u8>,
    /// Where the frame sits in it (x, y).
    at: (usize, usize),
    side_src: usize,
    resize: Resizer,
}

impl PadResize {
    /// For `width` x `height` frames, padded with `fill` and resized to `image_size` squared.
    pub fn new(
        width: u32,
        height: u32,
        image_size: u32,
        fill: [u8; 3],
    ) -> Result<PadResize, ResizeError> {
        let side = width.max(height);
        let resize = Resizer::with_kernel(side, side, image_size, image_size, Kernel::Bicubic)?;
        let side_src = side as usize;
        let padded = fill
            .iter()
            .copied()
            .cycle()
            .take(side_src * side_src * 3)
            .collect();
        Ok(PadResize {
            src: (width, height),
            padded,
            // Python's `(width - height) // 2`: the frame starts at the floor of the margin.
            at: ((side - width) as usize / 2, (side - height) as usize / 2),
            side_src,
            resize,
        })
    }

    /// The source frames' width and height.
    pub fn src_size(&self) -> (u32, u32) {
        self.src
    }

    /// The resized frames' width and height (square).
    pub fn dst_size(&self) -> (u32, u32) {
        self.resize.dst_size()
    }

    /// Bytes of one resized frame.
    pub fn dst_len(&self) -> usize {
        self.resize.dst_len()
    }

    /// Pads `src` (rows `stride` bytes apart) and resizes it into `dst`, a packed square frame.
    pub fn resize(&mut self, src: &[u8], stride: usize, dst: &mut [u8]) -> Result<(), ResizeError> {
        let (w, h) = (self.src.0 as usize, self.src.1 as usize);
        let row = w * 3;
        if stride < row || src.len() < stride * h.saturating_sub(1) + row {
            return Err(ResizeError::Source {
                len: src.len(),
                stride,
                width: self.src.0,
                height: self.src.1,
            });
        }
        for y in 0..h {
            let at = ((self.at.1 + y) * self.side_src + self.at.0) * 3;
            self.padded[at..at + row].copy_from_slice(&src[y * stride..y * stride + row]);
        }
        self.resize.resize(&self.padded, self.side_src * 3, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wide_frame_is_centred_on_a_square_of_the_fill_colour() {
        // 4x2 of white on a 4x4 square of (127, 127, 127), resized 1:1: rows 0 and 3 are the
        // fill, rows 1 and 2 the frame, as `expand2square` pastes at (0, (4 - 2) // 2).
        let mut r = PadResize::new(4, 2, 4, [127, 127, 127]).unwrap();
        let src = vec![255u8; 4 * 2 * 3];
        let mut dst = vec![0u8; r.dst_len()];
        r.resize(&src, 12, &mut dst).unwrap();
        let row = |y: usize| &dst[y * 12..(y + 1) * 12];
        assert!(row(0).iter().all(|&v| v == 127), "{:?}", row(0));
        assert!(row(1).iter().all(|&v| v == 255), "{:?}", row(1));
        assert!(row(2).iter().all(|&v| v == 255));
        assert!(row(3).iter().all(|&v| v == 127));
        // A tall frame goes in the middle columns.
        let mut r = PadResize::new(2, 4, 4, [0, 0, 0]).unwrap();
        let src = vec![200u8; 2 * 4 * 3];
        r.resize(&src, 6, &mut dst).unwrap();
        assert_eq!(&dst[..3], &[0, 0, 0]);
        assert_eq!(&dst[3..6], &[200, 200, 200]);
        assert_eq!(&dst[9..12], &[0, 0, 0]);
    }

    #[test]
    fn the_first_step_keeps_the_aspect_with_an_even_short_edge() {
        assert_eq!(first_step(640, 480, 512), (512, 384));
        assert_eq!(first_step(1920, 1080, 512), (512, 288));
        // 512 / (100 / 60) = 307.2: truncated to 307, then made even.
        assert_eq!(first_step(100, 60, 512), (512, 308));
        assert_eq!(first_step(480, 640, 512), (384, 512));
        assert_eq!(first_step(300, 300, 512), (512, 512));
        assert_eq!(first_step(9000, 10, 8192), (4096, 4));
    }
}
