//! Shared helpers for the pruner integration tests: a seeded generator and frame builders.

/// Seeded xorshift64 (no rand dependency; deterministic across runs).
pub struct Rng(pub u64);

impl Rng {
    /// Next raw value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Random byte.
    pub fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

/// Packed RGB24 frame with an optional row padding.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    pub width: usize,
    pub height: usize,
    pub stride: usize,
    pub data: Vec<u8>,
}

impl Frame {
    /// Frame filled with one grey level.
    pub fn grey(width: usize, height: usize, level: u8) -> Frame {
        Frame {
            width,
            height,
            stride: width * 3,
            data: vec![level; width * height * 3],
        }
    }

    /// Frame of random bytes.
    pub fn random(width: usize, height: usize, rng: &mut Rng) -> Frame {
        let data = (0..width * height * 3).map(|_| rng.byte()).collect();
        Frame {
            width,
            height,
            stride: width * 3,
            data,
        }
    }

    /// Byte index of channel `c` of pixel (x, y).
    pub fn idx(&self, x: usize, y: usize, c: usize) -> usize {
        y * self.stride + x * 3 + c
    }

    /// Read channel `c` of pixel (x, y).
    pub fn get(&self, x: usize, y: usize, c: usize) -> u8 {
        self.data[self.idx(x, y, c)]
    }

    /// Write channel `c` of pixel (x, y).
    pub fn set(&mut self, x: usize, y: usize, c: usize, v: u8) {
        let i = self.idx(x, y, c);
        self.data[i] = v;
    }

    /// Same pixels with `pad` extra bytes per row, filled with `fill`.
    pub fn padded(&self, pad: usize, fill: u8) -> Frame {
        let stride = self.width * 3 + pad;
        let mut data = vec![fill; stride * self.height];
        for y in 0..self.height {
            let src = &self.data[y * self.stride..y * self.stride + self.width * 3];
            data[y * stride..y * stride + self.width * 3].copy_from_slice(src);
        }
        Frame {
            width: self.width,
            height: self.height,
            stride,
            data,
        }
    }

    /// Byte indices of token block `n` (28-pixel blocks unless `block` says otherwise), in
    /// raster byte order (row by row, pixel by pixel, channel by channel).
    pub fn block_indices(&self, block: usize, n: usize) -> Vec<usize> {
        let cols = self.width / block;
        let (by, bx) = (n / cols, n % cols);
        let mut v = Vec::with_capacity(block * block * 3);
        for y in by * block..(by + 1) * block {
            for x in bx * block..(bx + 1) * block {
                for c in 0..3 {
                    v.push(self.idx(x, y, c));
                }
            }
        }
        v
    }

    /// Sum of absolute differences with `other` over the bytes in `idx`.
    pub fn sad_at(&self, other: &Frame, idx: &[usize]) -> u32 {
        idx.iter()
            .map(|&i| u32::from(self.data[i].abs_diff(other.data[i])))
            .sum()
    }
}
