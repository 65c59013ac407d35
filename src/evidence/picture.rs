//! A sampled frame made into a snapshot: scaled down to a width, optionally with DiffFP's decision
//! drawn on it, and encoded as JPEG.

use crate::ring::{Frame, TokenMask};

/// The size a `width` x `height` frame is shown at when it may be at most `max_width` wide: the
/// same size when it fits (a snapshot is never enlarged), else scaled to `max_width` keeping the
/// aspect ratio (height rounded, at least 1).
pub fn fitted(width: u32, height: u32, max_width: u32) -> (u32, u32) {
    if width <= max_width || width == 0 {
        return (width, height);
    }
    let h = (u64::from(height) * u64::from(max_width) + u64::from(width) / 2) / u64::from(width);
    (max_width, (h as u32).max(1))
}

/// Scales row-major RGB down by averaging the source pixels each target pixel covers (a box
/// filter: no aliasing on the downscale, exact when the factor is whole).
pub fn scale_down(rgb: &[u8], width: u32, height: u32, to_w: u32, to_h: u32) -> Vec<u8> {
    let (w, h, tw, th) = (
        width as usize,
        height as usize,
        to_w as usize,
        to_h as usize,
    );
    debug_assert_eq!(rgb.len(), w * h * 3);
    if (tw, th) == (w, h) {
        return rgb.to_vec();
    }
    let mut out = Vec::with_capacity(tw * th * 3);
    for ty in 0..th {
        let (y0, y1) = (ty * h / th, ((ty + 1) * h / th).max(ty * h / th + 1));
        for tx in 0..tw {
            let (x0, x1) = (tx * w / tw, ((tx + 1) * w / tw).max(tx * w / tw + 1));
            let mut sum = [0u32; 3];
            for y in y0..y1.min(h) {
                for px in rgb[(y * w + x0) * 3..(y * w + x1.min(w)) * 3].chunks_exact(3) {
                    sum[0] += u32::from(px[0]);
                    sum[1] += u32::from(px[1]);
                    sum[2] += u32::from(px[2]);
                }
            }
            let n = ((y1.min(h) - y0) * (x1.min(w) - x0)) as u32;
            out.extend(sum.map(|s| ((s + n / 2) / n) as u8));
        }
    }
    out
}

/// A token's side in pixels for a `width` x `height` frame cut into `tokens` square blocks (the
/// model's `patch * merge`), if there is one.
pub fn token_block(width: u32, height: u32, tokens: usize) -> Option<u32> {
    let area = u64::from(width) * u64::from(height);
    let tokens = tokens as u64;
    if tokens == 0 || !area.is_multiple_of(tokens) {
        return None;
    }
    let b = (area / tokens).isqrt();
    (b > 0 && b * b == area / tokens && u64::from(width).is_multiple_of(b)).then_some(b as u32)
}

/// Draws DiffFP's decision on a frame at its own size: the pixels of tokens it dropped are dimmed
/// to a third, the kept ones are left as they are. Returns false (and leaves the frame alone)
/// when the mask does not cut the frame into square token blocks.
pub fn draw_kept(rgb: &mut [u8], width: u32, height: u32, mask: &TokenMask) -> bool {
    let Some(block) = token_block(width, height, mask.keep.len()) else {
        return false;
    };
    let (cols, rows) = ((width / block) as usize, (height / block) as usize);
    if mask.keep.len() != cols * rows {
        return false;
    }
    let (w, b) = (width as usize, block as usize);
    for (i, keep) in mask.keep.iter().enumerate() {
        if *keep {
            continue;
        }
        let (r, c) = (i / cols, i % cols);
        for y in r * b..(r + 1) * b {
            for v in &mut rgb[(y * w + c * b) * 3..(y * w + (c + 1) * b) * 3] {
                *v /= 3;
            }
        }
    }
    true
}

/// A frame as a JPEG at most `max_width` wide; with `overlay`, DiffFP's decision drawn first.
/// Returns the JPEG and its size.
pub fn encode(
    frame: &Frame,
    max_width: u32,
    quality: u8,
    overlay: bool,
) -> Result<(Vec<u8>, u32, u32), String> {
    let expected = frame.width as usize * frame.height as usize * 3;
    if frame.rgb.len() != expected {
        return Err(format!(
            "frame {} has {} bytes of RGB, expected {expected} for {}x{}",
            frame.seq,
            frame.rgb.len(),
            frame.width,
            frame.height
        ));
    }
    let mut rgb = frame.rgb.to_vec();
    if let (true, Some(mask)) = (overlay, &frame.tokens) {
        draw_kept(&mut rgb, frame.width, frame.height, mask);
    }
    let (w, h) = fitted(frame.width, frame.height, max_width);
    let rgb = scale_down(&rgb, frame.width, frame.height, w, h);
    let (w16, h16) = (
        u16::try_from(w).map_err(|_| format!("{w} pixels is too wide for JPEG"))?,
        u16::try_from(h).map_err(|_| format!("{h} pixels is too high for JPEG"))?,
    );
    let mut jpeg = Vec::with_capacity(rgb.len() / 8);
    jpeg_encoder::Encoder::new(&mut jpeg, quality)
        .encode(&rgb, w16, h16, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| e.to_string())?;
    Ok((jpeg, w, h))
}

/// Width and height from a baseline or progressive JPEG's frame header (SOF0–SOF2), for checks.
pub fn jpeg_size(jpeg: &[u8]) -> Option<(u32, u32)> {
    if jpeg.get(..2)? != [0xFF, 0xD8] {
        return None;
    }
    let mut i = 2;
    while i + 9 < jpeg.len() {
        if jpeg[i] != 0xFF {
            return None;
        }
        let marker = jpeg[i + 1];
        let len = usize::from(u16::from_be_bytes([jpeg[i + 2], jpeg[i + 3]]));
        if (0xC0..=0xC2).contains(&marker) {
            let h = u16::from_be_bytes([jpeg[i + 5], jpeg[i + 6]]);
            let w = u16::from_be_bytes([jpeg[i + 7], jpeg[i + 8]]);
            return Some((u32::from(w), u32::from(h)));
        }
        i += 2 + len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_scaled_down_to_the_width_never_up() {
        assert_eq!(fitted(224, 112, 640), (224, 112));
        assert_eq!(fitted(1280, 720, 640), (640, 360));
        assert_eq!(fitted(1000, 3, 10), (10, 1));
    }

    #[test]
    fn scaling_by_a_whole_factor_averages_each_block() {
        // 4x2 -> 2x1: each target pixel is the mean of a 2x2 block.
        let rgb: Vec<u8> = [
            [0, 0, 0],
            [10, 20, 30],
            [100, 100, 100],
            [200, 200, 200],
            [20, 40, 60],
            [30, 60, 90],
            [100, 100, 100],
            [0, 0, 0],
        ]
        .concat();
        assert_eq!(scale_down(&rgb, 4, 2, 2, 1), [15, 30, 45, 100, 100, 100]);
    }

    #[test]
    fn dropped_tokens_are_dimmed_and_kept_ones_untouched() {
        let mask = TokenMask {
            keep: vec![true, false].into(),
            kept: 1,
            key_frame: false,
            identical: false,
            threshold: 0.1,
        };
        let mut rgb = vec![90u8; 4 * 2 * 3];
        assert_eq!(token_block(4, 2, 2), Some(2));
        assert!(draw_kept(&mut rgb, 4, 2, &mask));
        for y in 0..2 {
            for x in 0..4 {
                let want = if x < 2 { 90 } else { 30 };
                assert_eq!(rgb[(y * 4 + x) * 3], want, "pixel {x},{y}");
            }
        }
        // A mask that does not cut the frame into square blocks is not drawn.
        assert_eq!(token_block(6, 2, 2), None);
        assert!(!draw_kept(&mut [90u8; 6 * 2 * 3], 6, 2, &mask));
    }

    #[test]
    fn the_jpeg_has_the_fitted_size() {
        let frame = Frame {
            camera: "cam".into(),
            seq: 7,
            pts: std::time::Duration::from_secs(3),
            wall_time: std::time::SystemTime::UNIX_EPOCH,
            width: 56,
            height: 28,
            rgb: (0..56 * 28 * 3).map(|i| (i % 251) as u8).collect(),
            tokens: None,
        };
        let (jpeg, w, h) = encode(&frame, 28, 80, false).unwrap();
        assert_eq!((w, h), (28, 14));
        assert_eq!(jpeg_size(&jpeg), Some((28, 14)));
        assert_eq!(&jpeg[jpeg.len() - 2..], [0xFF, 0xD9]);
        let bad = Frame {
            rgb: vec![0; 10].into(),
            ..frame
        };
        assert!(
            encode(&bad, 28, 80, false)
                .unwrap_err()
                .contains("expected 4704")
        );
    }
}
