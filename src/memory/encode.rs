//! Encoding sampled frames into memory frames: one vision encoder run per batch of new frames,
//! none for frames DiffFP found bit-identical to their predecessor.

use super::MemoryFrame;
use crate::engine::{EngineError, VisionEncoder};
use crate::ring::Frame;
use std::sync::Arc;

/// Turns a camera's sampled frames into [`MemoryFrame`]s, remembering the previous frame's full
/// encoder output so an identical successor costs nothing.
#[derive(Debug, Default)]
pub struct FrameEncoder {
    /// `(seq, width, height, every token's features)` of the last frame encoded or reused.
    last: Option<(u64, u32, u32, Arc<[f32]>)>,
}

impl FrameEncoder {
    /// A fresh encoder state (nothing to reuse).
    pub fn new() -> FrameEncoder {
        FrameEncoder::default()
    }

    /// Forgets the previous frame (after a gap or a restart).
    pub fn reset(&mut self) {
        self.last = None;
    }

    /// Encodes `frames` (consecutive, oldest first, one geometry) and returns them with only their
    /// kept tokens. A frame marked identical whose predecessor is the frame encoded just before
    /// reuses that output: an encoder is deterministic, so the features are the same.
    pub fn encode(
        &mut self,
        vision: &VisionEncoder,
        frames: &[Arc<Frame>],
    ) -> Result<Vec<MemoryFrame>, EngineError> {
        let hidden = vision.hidden();
        // Which frames need the encoder: identical ones chain back to the last encoded frame.
        let mut previous = self.last.as_ref().map(|(s, w, h, _)| (*s, *w, *h));
        let mut needs = Vec::with_capacity(frames.len());
        for f in frames {
            let reuse = f
                .tokens
                .as_ref()
                .is_some_and(|t| t.identical && !t.key_frame)
                && previous == Some((f.seq.wrapping_sub(1), f.width, f.height));
            needs.push(!reuse);
            previous = Some((f.seq, f.width, f.height));
        }
        let to_encode: Vec<&[u8]> = frames
            .iter()
            .zip(&needs)
            .filter(|(_, n)| **n)
            .map(|(f, _)| &f.rgb[..])
            .collect();
        let encoded = match frames.iter().zip(&needs).find(|(_, n)| **n) {
            Some((first, _)) if !to_encode.is_empty() => {
                Some(vision.encode(&to_encode, first.width, first.height)?)
            }
            _ => None,
        };
        let mut out = Vec::with_capacity(frames.len());
        let mut next_encoded = 0;
        for (f, need) in frames.iter().zip(needs) {
            let full: Arc<[f32]> = if need {
                let e = encoded
                    .as_ref()
                    .ok_or_else(|| EngineError::input("vision encoder", "no encoder output"))?;
                let rows: Arc<[f32]> = e.frame(next_encoded).into();
                next_encoded += 1;
                rows
            } else {
                match &self.last {
                    Some((_, _, _, rows)) => rows.clone(),
                    None => return Err(EngineError::input("vision encoder", "nothing to reuse")),
                }
            };
            let total = full.len() / hidden;
            let mask = f.tokens.as_ref().filter(|t| t.keep.len() == total);
            let tokens: Arc<[f32]> = match mask {
                Some(m) if m.kept < total => {
                    let mut kept = Vec::with_capacity(m.kept * hidden);
                    for (row, keep) in full.chunks_exact(hidden).zip(m.keep.iter()) {
                        if *keep {
                            kept.extend_from_slice(row);
                        }
                    }
                    kept.into()
                }
                _ => full.clone(),
            };
            out.push(MemoryFrame {
                seq: f.seq,
                pts: f.pts,
                wall: f.wall_time,
                keep: mask.map(|m| m.keep.clone()),
                total,
                key_frame: f.tokens.as_ref().is_none_or(|t| t.key_frame),
                reused: !need,
                tokens,
                hidden,
            });
            self.last = Some((f.seq, f.width, f.height, full));
        }
        Ok(out)
    }
}
