//! The vision encoder: packed RGB frames in, visual tokens `[T, N, hidden]` out.
//!
//! Normalisation happens here (the graph takes normalised `pixel_values`): a 256-entry table per
//! channel turns `(v/255 - mean) / std` into one lookup, and the planar input buffer is kept between
//! calls, so encoding a frame allocates only its output.

use super::error::EngineError;
use super::manifest::Manifest;
use super::stats::EngineStats;
use ort::session::Session;
use ort::value::TensorRef;
use std::sync::{Arc, Mutex};
use std::time::Instant;

const MODEL: &str = "vision encoder";

/// Visual tokens of a batch of frames, frame-major: `[frames, tokens_per_frame, hidden]`.
#[derive(Clone, PartialEq)]
pub struct VisualTokens {
    frames: usize,
    tokens_per_frame: usize,
    hidden: usize,
    data: Vec<f32>,
}

impl std::fmt::Debug for VisualTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A frame is thousands of floats; say its shape instead.
        write!(
            f,
            "VisualTokens [{} x {} x {}]",
            self.frames, self.tokens_per_frame, self.hidden
        )
    }
}

impl VisualTokens {
    /// Number of frames.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Tokens per frame: `(height / 28) * (width / 28)` for patch 14, merge 2.
    pub fn tokens_per_frame(&self) -> usize {
        self.tokens_per_frame
    }

    /// Width of one token (the decoder's hidden size).
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// `[frames, tokens_per_frame, hidden]`.
    pub fn shape(&self) -> [usize; 3] {
        [self.frames, self.tokens_per_frame, self.hidden]
    }

    /// All tokens, frame-major, row-major.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// One frame's tokens, `tokens_per_frame * hidden` floats in raster order of the merged grid.
    pub fn frame(&self, i: usize) -> &[f32] {
        let n = self.tokens_per_frame * self.hidden;
        &self.data[i * n..(i + 1) * n]
    }

    /// One token of one frame.
    pub fn token(&self, frame: usize, token: usize) -> &[f32] {
        let start = (frame * self.tokens_per_frame + token) * self.hidden;
        &self.data[start..start + self.hidden]
    }

    /// Takes the buffer.
    pub fn into_vec(self) -> Vec<f32> {
        self.data
    }
}

struct State {
    session: Session,
    /// Planar `[T, 3, H, W]` input, reused across calls.
    pixels: Vec<f32>,
}

/// The vision encoder session with its normalisation.
pub struct VisionEncoder {
    state: Mutex<State>,
    lut: [[f32; 256]; 3],
    input: String,
    output: String,
    token_px: u32,
    hidden: usize,
    max_batch: usize,
    stats: Arc<EngineStats>,
}

impl std::fmt::Debug for VisionEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VisionEncoder")
            .field("token_px", &self.token_px)
            .field("hidden", &self.hidden)
            .field("max_batch", &self.max_batch)
            .finish_non_exhaustive()
    }
}

impl VisionEncoder {
    pub(crate) fn new(
        session: Session,
        m: &Manifest,
        max_batch: usize,
        stats: Arc<EngineStats>,
    ) -> VisionEncoder {
        let mut lut = [[0f32; 256]; 3];
        for (c, table) in lut.iter_mut().enumerate() {
            for (v, x) in table.iter_mut().enumerate() {
                // transformers' fused rescale + normalise, in f32: `(v - mean * 255) / (std * 255)`
                // (its `rescale_and_normalize`), so the values are bit-identical to the processor's
                // (tests/videollama3_parity.rs).
                let (mean, std) = (m.vision.mean[c] * 255.0, m.vision.std[c] * 255.0);
                *x = (v as f32 - mean) / std;
            }
        }
        VisionEncoder {
            state: Mutex::new(State {
                session,
                pixels: Vec::new(),
            }),
            lut,
            input: m.vision.input.clone(),
            output: m.vision.output.clone(),
            token_px: m.vision.token_px(),
            hidden: m.text.hidden_size as usize,
            max_batch: max_batch.max(1),
            stats,
        }
    }

    /// Pixels per token side (28): width and height must be multiples of it.
    pub fn token_px(&self) -> u32 {
        self.token_px
    }

    /// Width of one visual token's features (the LLM's hidden size).
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// Frames per encoder run; longer inputs are encoded in several runs.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Writes one packed RGB frame (`width * height * 3` bytes) as the graph's normalised planar
    /// input, `[3, height, width]` floats into `out` (which must hold `3 * width * height`).
    pub fn normalize_into(&self, frame: &[u8], out: &mut [f32]) {
        let plane = frame.len() / 3;
        let (r, gb) = out[..3 * plane].split_at_mut(plane);
        let (g, b) = gb.split_at_mut(plane);
        for (i, px) in frame.chunks_exact(3).enumerate() {
            r[i] = self.lut[0][px[0] as usize];
            g[i] = self.lut[1][px[1] as usize];
            b[i] = self.lut[2][px[2] as usize];
        }
    }

    /// Encodes packed RGB frames (`width * height * 3` bytes each, rows unpadded) of one geometry.
    pub fn encode(
        &self,
        frames: &[&[u8]],
        width: u32,
        height: u32,
    ) -> Result<VisualTokens, EngineError> {
        let px = self.token_px;
        if width == 0 || height == 0 || !width.is_multiple_of(px) || !height.is_multiple_of(px) {
            return Err(EngineError::input(
                MODEL,
                format!(
                    "frame size {width}x{height} is not a positive multiple of {px} on both sides"
                ),
            ));
        }
        if frames.is_empty() {
            return Err(EngineError::input(MODEL, "no frames to encode"));
        }
        let (w, h) = (width as usize, height as usize);
        let frame_bytes = w * h * 3;
        if let Some((i, f)) = frames
            .iter()
            .enumerate()
            .find(|(_, f)| f.len() != frame_bytes)
        {
            return Err(EngineError::input(
                MODEL,
                format!(
                    "frame {i} has {} bytes; {width}x{height} packed RGB is {frame_bytes}",
                    f.len()
                ),
            ));
        }
        let tokens = (w / px as usize) * (h / px as usize);
        let per_frame = tokens * self.hidden;
        let mut data = Vec::with_capacity(frames.len() * per_frame);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let State { session, pixels } = &mut *state;
        for batch in frames.chunks(self.max_batch) {
            let plane = w * h;
            pixels.resize(batch.len() * 3 * plane, 0.0);
            for (frame, out) in batch.iter().zip(pixels.chunks_exact_mut(3 * plane)) {
                self.normalize_into(frame, out);
            }
            // Normalisation is excluded: the stage time is what the provider costs.
            let started = Instant::now();
            let shape = [batch.len(), 3, h, w];
            // Borrowed: ONNX Runtime reads the reused buffer in place on the CPU.
            let input = TensorRef::from_array_view((shape, &pixels[..]))
                .map_err(|e| EngineError::run(MODEL, e))?;
            let outputs = session
                .run(ort::inputs![self.input.as_str() => input])
                .map_err(|e| EngineError::run(MODEL, e))?;
            let value = outputs
                .get(&self.output)
                .ok_or_else(|| EngineError::run(MODEL, format!("no output `{}`", self.output)))?;
            let (out_shape, out) = value
                .try_extract_tensor::<f32>()
                .map_err(|e| EngineError::run(MODEL, e))?;
            let want = [batch.len() as i64, tokens as i64, self.hidden as i64];
            if **out_shape != want {
                return Err(EngineError::run(
                    MODEL,
                    format!(
                        "output `{}` has shape {out_shape}, expected {want:?} for {width}x{height}",
                        self.output
                    ),
                ));
            }
            data.extend_from_slice(out);
            self.stats.record_vision(batch.len(), started.elapsed());
        }
        Ok(VisualTokens {
            frames: frames.len(),
            tokens_per_frame: tokens,
            hidden: self.hidden,
            data,
        })
    }
}
