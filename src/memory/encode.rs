//! Encoding sampled frames into memory frames: one vision encoder run per batch of new frames,
//! none for frames DiffFP found bit-identical to their predecessor. For a model that encodes
//! clips (Apollo), consecutive frames wait until they fill a clip, and one memory item is a clip.

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
    /// Clips: the consecutive sampled frames of the clip being filled.
    pending: Vec<Arc<Frame>>,
}

impl FrameEncoder {
    /// A fresh encoder state (nothing to reuse).
    pub fn new() -> FrameEncoder {
        FrameEncoder::default()
    }

    /// Forgets the previous frame (after a gap or a restart).
    pub fn reset(&mut self) {
        self.last = None;
        self.pending.clear();
    }

    /// Frames waiting for their clip to fill (always 0 for a model of frames).
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Clips: adds `frames` to the clip being filled and encodes every clip they complete, in one
    /// encoder run. A frame that does not follow the previous one (a gap in `seq`, another
    /// geometry) starts a new clip: a clip is consecutive sampled frames.
    fn encode_clips(
        &mut self,
        vision: &VisionEncoder,
        frames: &[Arc<Frame>],
        clip: crate::engine::ClipSpec,
    ) -> Result<Vec<MemoryFrame>, EngineError> {
        let per_clip = clip.frames as usize;
        let mut complete: Vec<Vec<Arc<Frame>>> = Vec::new();
        for f in frames {
            if let Some(prev) = self.pending.last()
                && (f.seq != prev.seq.wrapping_add(1)
                    || (f.width, f.height) != (prev.width, prev.height))
            {
                self.pending.clear();
            }
            self.pending.push(f.clone());
            if self.pending.len() == per_clip {
                complete.push(std::mem::take(&mut self.pending));
            }
        }
        let Some(first) = complete.first().and_then(|c| c.first()) else {
            return Ok(Vec::new());
        };
        let (width, height) = (first.width, first.height);
        // Clips completed in one call share a geometry (a new geometry starts a new clip, and the
        // caller hands one geometry at a time).
        let rgb: Vec<&[u8]> = complete.iter().flatten().map(|f| &f.rgb[..]).collect();
        let encoded = vision.encode(&rgb, width, height)?;
        let hidden = vision.hidden();
        Ok(complete
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (first, last) = (&c[0], &c[c.len() - 1]);
                let tokens: Arc<[f32]> = encoded.frame(i).into();
                MemoryFrame {
                    seq: last.seq,
                    pts: first.pts,
                    end: last.pts,
                    wall: first.wall_time,
                    keep: None,
                    total: tokens.len() / hidden.max(1),
                    key_frame: false,
                    reused: false,
                    tokens,
                    hidden,
                }
            })
            .collect())
    }

    /// Encodes `frames` (consecutive, oldest first, one geometry) and returns them with only their
    /// kept tokens. A frame marked identical whose predecessor is the frame encoded just before
    /// reuses that output: an encoder is deterministic, so the features are the same.
    pub fn encode(
        &mut self,
        vision: &VisionEncoder,
        frames: &[Arc<Frame>],
    ) -> Result<Vec<MemoryFrame>, EngineError> {
        if let Some(clip) = vision.clip() {
            return self.encode_clips(vision, frames, clip);
        }
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
                end: f.pts,
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
