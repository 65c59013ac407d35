//! The model geometry of a camera: VideoLLaMA3's resize rule (or a square side, for a model whose
//! encoder takes fixed images), fixed once per camera.
//!
//! The reference (`simple_batched_resize`, docs/REFERENCE.md §1b) sizes frames from the number of
//! frames in the request, so a sliding window would change resolution, and with it DiffFP's
//! comparisons. A streaming runtime fixes it per camera from the window length instead
//! (docs/ARCHITECTURE.md, "Ingest").

use crate::config::{ProcessorGeometry, VisionConfig};

/// Pixels per merged token side of VideoLLaMA3's rules: patch 14 x merge 2.
pub const TOKEN_PX: u32 = 28;

/// Width and height of the frames a camera hands to the model, multiples of `token_px`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Pixels per visual token side: [`TOKEN_PX`], or the square model's (64 for SmolVLM2).
    #[serde(skip)]
    pub token_px: u32,
    /// For a model that encodes clips (Apollo): the visual tokens a frame is worth, its clip's
    /// tokens over its frames (what [`tokens`](Self::tokens) reports instead of the grid).
    #[serde(skip)]
    pub clip_share: Option<u32>,
}

impl Geometry {
    /// A geometry of VideoLLaMA3's 28-pixel tokens.
    pub fn new(width: u32, height: u32) -> Geometry {
        Geometry {
            width,
            height,
            token_px: TOKEN_PX,
            clip_share: None,
        }
    }

    /// The geometry a camera configured to `width` x `height` (`cameras.width`/`height`) has under
    /// `vision`: a square model's tokens when the model takes square frames.
    pub fn fixed(width: u32, height: u32, vision: &VisionConfig) -> Geometry {
        Geometry {
            width,
            height,
            token_px: vision.square.map_or(TOKEN_PX, |s| s.token_px),
            clip_share: clip_share(vision),
        }
    }

    /// Visual tokens per frame (after the encoder's merge; a clip's share for a clips model).
    pub fn tokens(&self) -> u32 {
        if let Some(share) = self.clip_share {
            return share;
        }
        let px = self.token_px.max(1);
        (self.width / px) * (self.height / px)
    }

    /// Bytes of one packed RGB frame.
    pub fn frame_bytes(&self) -> usize {
        self.width as usize * self.height as usize * 3
    }
}

impl std::fmt::Display for Geometry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

/// The reference resize rule for a `src_w` x `src_h` source (display size, square pixels) when
/// `frames` frames go into one request.
pub fn reference_geometry(src_w: u32, src_h: u32, frames: u32, vision: &VisionConfig) -> Geometry {
    let f = f64::from(TOKEN_PX);
    let (w, h) = (f64::from(src_w.max(1)), f64::from(src_h.max(1)));
    let frames = u64::from(frames.max(1));
    // Integer division, as Python's `//` on ints.
    let budget =
        (u64::from(vision.max_visual_tokens) * u64::from(TOKEN_PX * TOKEN_PX) / frames) as f64;
    let min_pixels = f64::from(vision.min_frame_tokens) * f * f;

    let mut hb = round_half_even(h / f) * f;
    let mut wb = round_half_even(w / f) * f;
    if hb * wb > budget {
        let s = (h * w / budget).sqrt();
        hb = (h / s / f).floor() * f;
        wb = (w / s / f).floor() * f;
    }
    if hb * wb < min_pixels {
        let s = (min_pixels / (h * w)).sqrt();
        hb = (h * s / f).ceil() * f;
        wb = (w * s / f).ceil() * f;
    }
    // Extreme aspect ratios can floor one side to zero before the minimum rule; never emit zero.
    Geometry::new((wb as u32).max(TOKEN_PX), (hb as u32).max(TOKEN_PX))
}

/// The size transformers' VideoLLaMA3 video processor gives `frames` frames of a `src_w` x
/// `src_h` source: Qwen2-VL's `smart_resize` with factor `patch * merge` (28), `min_pixels`, and
/// `max_pixels` divided by the frame count (integer division, VideoLLaMA3's change to Qwen's rule;
/// docs/ENGINES.md, "VideoLLaMA3 preprocessing"). Note the rule's `elif`: a frame shrunk to fit
/// the budget is not raised back to `min_pixels`, so many frames can give fewer than
/// `min_pixels / 784` tokens. `None` for an aspect ratio over 200, which the processor refuses.
pub fn processor_geometry(
    src_w: u32,
    src_h: u32,
    frames: u32,
    p: &ProcessorGeometry,
    factor: u32,
) -> Option<Geometry> {
    let f = f64::from(factor.max(1));
    let (w, h) = (f64::from(src_w.max(1)), f64::from(src_h.max(1)));
    if w.max(h) / w.min(h) > 200.0 {
        return None;
    }
    let max_pixels = (p.max_pixels / u64::from(frames.max(1))) as f64;
    let min_pixels = p.min_pixels as f64;
    let mut hb = round_half_even(h / f) * f;
    let mut wb = round_half_even(w / f) * f;
    if hb * wb > max_pixels {
        let beta = (h * w / max_pixels).sqrt();
        hb = f.max((h / beta / f).floor() * f);
        wb = f.max((w / beta / f).floor() * f);
    } else if hb * wb < min_pixels {
        let beta = (min_pixels / (h * w)).sqrt();
        hb = (h * beta / f).ceil() * f;
        wb = (w * beta / f).ceil() * f;
    }
    Some(Geometry {
        width: wb as u32,
        height: hb as u32,
        token_px: factor.max(1),
        clip_share: None,
    })
}

/// A frame's share of its clip's tokens, for a model that encodes clips.
fn clip_share(vision: &VisionConfig) -> Option<u32> {
    vision.clip.map(|c| c.tokens.div_ceil(c.frames.max(1)))
}

/// The geometry a camera's frames get: the model's square when its encoder takes fixed images,
/// its processor rule when it has one (frames capped at its `max_frames`), else the reference
/// budget rule of `[vision]`.
pub fn camera_geometry(src_w: u32, src_h: u32, frames: u32, vision: &VisionConfig) -> Geometry {
    if let Some(s) = vision.square {
        return Geometry {
            width: s.side,
            height: s.side,
            token_px: s.token_px,
            clip_share: clip_share(vision),
        };
    }
    match &vision.processor {
        Some(p) => processor_geometry(src_w, src_h, frames.min(p.max_frames), p, TOKEN_PX)
            // An aspect ratio over 200 (which the processor refuses): the budget rule still sizes it.
            .unwrap_or_else(|| reference_geometry(src_w, src_h, frames, vision)),
        None => reference_geometry(src_w, src_h, frames, vision),
    }
}

/// Python's `round()`: halves go to the even neighbour.
fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vision(max_visual_tokens: u32) -> VisionConfig {
        VisionConfig {
            max_visual_tokens,
            ..VisionConfig::default()
        }
    }

    /// The worked table of docs/REFERENCE.md §1b, both token budgets.
    #[test]
    fn matches_the_reference_worked_examples() {
        let cases = [
            // (src w, src h, frames, 16384 -> WxH, 10240 -> WxH)
            (1280, 720, 1, (1288, 728), (1288, 728)),
            (1280, 720, 60, (616, 336), (476, 252)),
            (1280, 720, 180, (336, 196), (280, 140)),
            (1920, 1080, 180, (336, 196), (280, 140)),
            (640, 480, 180, (308, 224), (224, 168)),
        ];
        for (w, h, n, big, small) in cases {
            let g = reference_geometry(w, h, n, &vision(16384));
            assert_eq!((g.width, g.height), big, "{w}x{h} x{n} @16384");
            let g = reference_geometry(w, h, n, &vision(10240));
            assert_eq!((g.width, g.height), small, "{w}x{h} x{n} @10240");
        }
        assert_eq!(
            reference_geometry(1280, 720, 180, &vision(16384)).tokens(),
            84
        );
    }

    #[test]
    fn tiny_sources_are_raised_to_the_minimum() {
        let g = reference_geometry(32, 24, 1, &VisionConfig::default());
        assert!(g.tokens() >= 16, "{g}");
        assert_eq!(g.width % TOKEN_PX, 0);
        assert_eq!(g.height % TOKEN_PX, 0);
    }

    fn processor() -> ProcessorGeometry {
        // transformers' VideoLlama3VideoProcessor defaults.
        ProcessorGeometry {
            min_pixels: 128 * 28 * 28,
            max_pixels: 768 * 28 * 28,
            max_frames: 180,
        }
    }

    /// Values worked by hand from `smart_resize` (and checked against the processor itself by
    /// tests/videollama3_parity.rs).
    #[test]
    fn the_processor_rule_divides_the_budget_by_the_frames() {
        let p = processor();
        let g = |w, h, n| processor_geometry(w, h, n, &p, 28).map(|g| (g.width, g.height));
        // 602112 / 8 = 75264 px: 1288x728 is over it; beta = sqrt(921600 / 75264) = 3.499.
        assert_eq!(g(1280, 720, 8), Some((364, 196)));
        // One frame: 1288x728 is over the whole budget too; beta = sqrt(921600 / 602112) = 1.237.
        assert_eq!(g(1280, 720, 1), Some((1008, 560)));
        // 24 frames: shrunk to 28 tokens, below min_pixels' 128, and not raised (the `elif`).
        assert_eq!(g(640, 360, 24), Some((196, 112)));
        // A small source under the minimum is raised: 100x60 -> ceil to 128 tokens' worth.
        let (w, h) = g(100, 60, 1).unwrap();
        assert!(w * h >= 128 * 784 && w % 28 == 0 && h % 28 == 0, "{w}x{h}");
        assert_eq!(g(10000, 20, 1), None);
        // A camera with the processor rule follows it, its frames capped at max_frames.
        let vision = VisionConfig {
            processor: Some(ProcessorGeometry { max_frames: 8, ..p }),
            ..VisionConfig::default()
        };
        let c = camera_geometry(1280, 720, 60, &vision);
        assert_eq!((c.width, c.height), (364, 196));
    }

    #[test]
    fn python_rounding_is_half_to_even() {
        assert_eq!(round_half_even(2.5), 2.0);
        assert_eq!(round_half_even(3.5), 4.0);
        assert_eq!(round_half_even(8.57), 9.0);
    }
}
