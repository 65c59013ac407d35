//! The reference resize: torch's uint8 antialiased bicubic (and Lanczos), bit-exact, on packed
//! RGB24 frames.
//!
//! VideoLLaMA3's video processor resizes each decoded RGB frame with torchvision's
//! `resize(interpolation=BICUBIC, antialias=True)`, which on the CPU hands the uint8 tensor to
//! `torch.nn.functional.interpolate(mode="bicubic", antialias=True, align_corners=False)`. On x86
//! (AVX2) that runs PyTorch's fixed-point separable kernel (`upsample_avx_bilinear_bicubic_uint8`,
//! after Pillow-SIMD), whose result this module reproduces byte for byte:
//!
//! - per axis, filter weights in f64: Keys cubic with a = -0.5, support `2 * scale` when
//!   downscaling (`scale = in / out`, 2 when upscaling) — or, for [`Kernel::Lanczos`] (torch's
//!   `mode="lanczos"`, which SmolVLM2's processor runs), Pillow's 3-lobe Lanczos with support
//!   `3 * scale` (3), through the very same steps — centre `scale * (i + 0.5)`, window
//!   `[trunc(centre - support + 0.5), trunc(centre + support + 0.5))` clipped to the input, weights
//!   normalised to sum 1;
//! - weights quantised to i16 with one precision per axis, the largest `p <= 22` for which
//!   `round(max_weight * 2^(p+1)) < 2^15`, each rounded half away from zero;
//! - horizontal pass first, into a uint8 intermediate image (source height x target width), then the
//!   vertical pass; each output is `clamp((sum(w * px) + 2^(p-1)) >> p, 0, 255)` in i32 (an axis
//!   whose size does not change is skipped; equal sizes copy).
//!
//! The arithmetic is integer from the quantised weights on, so the sums may be taken in any order,
//! and the kernels are written for the auto-vectoriser rather than after the AVX2 code: both passes
//! broadcast one weight over a run of contiguous bytes (one i32 lane per byte). The vertical pass is
//! that shape already (a weight per source row, lanes across the row). The horizontal pass is made
//! that shape by transposing tiles of 16 source rows, so that one source column of the tile is 48
//! contiguous bytes (16 rows x RGB); its output tile is transposed back into the intermediate rows.
//! On x86_64 the same code is compiled a second time with AVX2 enabled and chosen at run time (the
//! SSE2 baseline lacks the widening loads and 32-bit multiplies, and runs it about 1.4x slower);
//! other targets (aarch64, where NEON is baseline) run the portable build. No intrinsics. tests/ingest_resize.rs checks both builds against
//! fixtures that engines/videollama3/resize_reference.py makes with torch.
//!
//! A [`Resizer`] is built once per (source size, target size), which is fixed for a camera: it
//! holds the weights and the intermediate image, so [`Resizer::resize`] does not allocate.

/// Why a resize could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResizeError {
    /// A width or height is zero.
    #[error("resize {src_w}x{src_h} -> {dst_w}x{dst_h}: sizes must be non-zero")]
    EmptySize {
        /// Source width.
        src_w: u32,
        /// Source height.
        src_h: u32,
        /// Target width.
        dst_w: u32,
        /// Target height.
        dst_h: u32,
    },
    /// The source buffer does not hold the frame its size and stride describe.
    #[error("resize source: {len} bytes with stride {stride} cannot hold {width}x{height} RGB24")]
    Source {
        /// Bytes given.
        len: usize,
        /// Row stride given.
        stride: usize,
        /// Source width.
        width: u32,
        /// Source height.
        height: u32,
    },
    /// The target buffer is not exactly one packed frame.
    #[error("resize target: {len} bytes, a packed {width}x{height} RGB24 frame is {expected}")]
    Target {
        /// Bytes given.
        len: usize,
        /// Bytes needed.
        expected: usize,
        /// Target width.
        width: u32,
        /// Target height.
        height: u32,
    },
}

/// Bytes of one kernel run (one i32 accumulator per byte).
const LANES: usize = 48;
/// Source rows per horizontal tile: one tile column (16 rows x RGB) is one kernel run.
const TILE_ROWS: usize = LANES / 3;

/// The quantised filter of one axis, as torch computes it.
#[derive(Debug, Clone)]
struct Filter {
    /// First input index of each output's window.
    first: Vec<usize>,
    /// Window length of each output.
    len: Vec<usize>,
    /// `max(len)`: the row length of `weights`.
    taps: usize,
    /// `first.len() * taps` weights, output-major, zero past each window's length.
    weights: Vec<i16>,
    /// Fixed-point precision: weights are `round(w * 2^precision)`.
    precision: u32,
}

/// The interpolation filter, as torch's `interpolate(mode=…, antialias=True)` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kernel {
    /// `"bicubic"`: Keys' cubic, a = -0.5, support 2 (VideoLLaMA3's processor).
    #[default]
    Bicubic,
    /// `"lanczos"`: Lanczos with 3 lobes, `sinc(x) * sinc(x / 3)`, support 3 (SmolVLM2's video
    /// processor, whose `resample` is PIL's LANCZOS; torchvision >= 0.27 runs it on uint8 with
    /// the same fixed-point separable passes as bicubic).
    Lanczos,
}

impl Kernel {
    /// Half-width of the filter at scale 1.
    fn support(self) -> f64 {
        match self {
            Kernel::Bicubic => 2.0,
            Kernel::Lanczos => 3.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Kernel::Bicubic => keys_cubic(x),
            Kernel::Lanczos => lanczos3(x),
        }
    }
}

/// `sin(pi x) / (pi x)`, 1 at 0, evaluated as Pillow and torch do (`x *= pi`, then `sin(x) / x`).
fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        return 1.0;
    }
    let x = x * std::f64::consts::PI;
    x.sin() / x
}

/// Lanczos with a = 3 (Pillow's `lanczos_filter`): `sinc(x) * sinc(x / 3)` on `[-3, 3)`.
fn lanczos3(x: f64) -> f64 {
    if (-3.0..3.0).contains(&x) {
        sinc(x) * sinc(x / 3.0)
    } else {
        0.0
    }
}

/// Keys' cubic convolution kernel with a = -0.5 (`HelperInterpCubic::aa_filter`), evaluated in the
/// same order as the C++ (constants folded exactly: a + 2 = 1.5, a + 3 = 2.5, 5a = -2.5, ...).
fn keys_cubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
    } else {
        0.0
    }
}

impl Filter {
    /// `_compute_index_ranges_int16_weights` with `kernel`, antialias on, align_corners off and
    /// no explicit scale factor.
    fn new(input: usize, output: usize, kernel: Kernel) -> Filter {
        let scale = input as f64 / output as f64;
        let (support, invscale) = if scale >= 1.0 {
            (kernel.support() * scale, 1.0 / scale)
        } else {
            (kernel.support(), 1.0)
        };
        let max_taps = (support.ceil() as usize) * 2 + 1;
        let mut first = Vec::with_capacity(output);
        let mut len = Vec::with_capacity(output);
        let mut weights = vec![0f64; output * max_taps];
        let mut max_weight = 0f64;
        for (i, w) in weights.chunks_exact_mut(max_taps).enumerate() {
            let center = scale * (i as f64 + 0.5);
            // `as i64` truncates toward zero, as the C++ cast does.
            let lo = ((center - support + 0.5) as i64).max(0);
            let hi = ((center + support + 0.5) as i64).min(input as i64);
            let n = (hi - lo).clamp(0, max_taps as i64) as usize;
            let mut total = 0f64;
            for (j, wj) in w[..n].iter_mut().enumerate() {
                *wj = kernel.weight(((j as i64 + lo) as f64 - center + 0.5) * invscale);
                total += *wj;
            }
            if total != 0.0 {
                for wj in &mut w[..n] {
                    *wj /= total;
                    max_weight = max_weight.max(*wj);
                }
            }
            first.push(lo as usize);
            len.push(n);
        }
        let mut precision = 0u32;
        while precision < 22 {
            let next = (0.5 + max_weight * f64::from(1u32 << (precision + 1))) as i32;
            if next >= 1 << 15 {
                break;
            }
            precision += 1;
        }
        let taps = len.iter().copied().max().unwrap_or(0).max(1);
        let unit = f64::from(1u32 << precision);
        let mut quantised = vec![0i16; output * taps];
        for ((q, w), &n) in quantised
            .chunks_exact_mut(taps)
            .zip(weights.chunks_exact(max_taps))
            .zip(&len)
        {
            for (qj, &wj) in q[..n].iter_mut().zip(&w[..n]) {
                let v = wj * unit;
                *qj = if v < 0.0 {
                    (-0.5 + v) as i32 as i16
                } else {
                    (0.5 + v) as i32 as i16
                };
            }
        }
        Filter {
            first,
            len,
            taps,
            weights: quantised,
            precision,
        }
    }
}

/// The horizontal pass: its filter and the two tiles it transposes through.
#[derive(Debug, Clone)]
struct Horizontal {
    filter: Filter,
    /// Source width.
    input: usize,
    /// `input` columns of [`LANES`] bytes: column x holds pixel x of the tile's rows.
    tile: Vec<u8>,
    /// One column of [`LANES`] bytes per output pixel.
    out_tile: Vec<u8>,
}

impl Horizontal {
    fn new(filter: Filter, input: usize) -> Horizontal {
        let outputs = filter.first.len();
        Horizontal {
            filter,
            input,
            tile: vec![0; input * LANES],
            out_tile: vec![0; outputs * LANES],
        }
    }

    /// Resizes `rows` rows of `src` (`stride` bytes apart) into packed rows of `dst`.
    #[inline(always)]
    fn run(&mut self, src: &[u8], stride: usize, rows: usize, dst: &mut [u8]) {
        let f = &self.filter;
        let outputs = f.first.len();
        let round = 1i32 << (f.precision - 1);
        let mut y = 0;
        while y < rows {
            let n = TILE_ROWS.min(rows - y);
            transpose_in(&src[y * stride..], stride, n, self.input, &mut self.tile);
            for (x, out) in self
                .out_tile
                .as_chunks_mut::<LANES>()
                .0
                .iter_mut()
                .enumerate()
            {
                let k = &f.weights[x * f.taps..][..f.len[x]];
                kernel(
                    k,
                    &self.tile,
                    f.first[x] * LANES,
                    LANES,
                    round,
                    f.precision,
                    out,
                );
            }
            transpose_out(&self.out_tile, n, outputs, &mut dst[y * outputs * 3..]);
            y += n;
        }
    }
}

/// Copies pixel x of rows `0..n` of `src` into column x of `tile` (row r at bytes `3r..3r + 3`).
/// Moves 4 bytes at a time: the 4th lands on the next row's slot, which is written after it (rows
/// ascend); the tile's last row and the source's last pixel move 3 bytes.
#[inline(always)]
fn transpose_in(src: &[u8], stride: usize, n: usize, width: usize, tile: &mut [u8]) {
    // Full tiles get the row count as a constant (the inner loop unrolls).
    if n == TILE_ROWS {
        transpose_in_rows::<TILE_ROWS>(src, stride, TILE_ROWS, width, tile);
    } else {
        transpose_in_rows::<0>(src, stride, n, width, tile);
    }
}

/// [`transpose_in`] for `N` rows (`N` = 0: `n` rows, known at run time only).
#[inline(always)]
fn transpose_in_rows<const N: usize>(
    src: &[u8],
    stride: usize,
    n: usize,
    width: usize,
    tile: &mut [u8],
) {
    let n = if N > 0 { N } else { n };
    let row_bytes = width * 3;
    let rows: [&[u8]; TILE_ROWS] = std::array::from_fn(|r| {
        if r < n {
            &src[r * stride..][..row_bytes]
        } else {
            &[]
        }
    });
    let cols = tile.as_chunks_mut::<LANES>().0;
    let last = n - 1;
    for (x, col) in cols.iter_mut().enumerate().take(width - 1) {
        for (r, row) in rows.iter().enumerate().take(last) {
            let v: [u8; 4] = row[x * 3..x * 3 + 4].try_into().expect("4 bytes");
            col[r * 3..r * 3 + 4].copy_from_slice(&v);
        }
        col[last * 3..last * 3 + 3].copy_from_slice(&rows[last][x * 3..x * 3 + 3]);
    }
    let x = width - 1;
    for (r, row) in rows.iter().enumerate().take(n) {
        cols[x][r * 3..r * 3 + 3].copy_from_slice(&row[x * 3..x * 3 + 3]);
    }
}

/// Copies column x of `tile` (rows `0..n`) back to pixel x of `n` packed rows of `width` pixels.
/// Moves 4 bytes at a time except for the last pixel of a row: the 4th byte lands on the next
/// pixel, which is written after it.
#[inline(always)]
fn transpose_out(tile: &[u8], n: usize, width: usize, dst: &mut [u8]) {
    let row_bytes = width * 3;
    for (r, row) in dst.chunks_exact_mut(row_bytes).take(n).enumerate() {
        for x in 0..width - 1 {
            let at = x * LANES + r * 3;
            let v: [u8; 4] = tile[at..at + 4].try_into().expect("4 bytes");
            row[x * 3..x * 3 + 4].copy_from_slice(&v);
        }
        let at = (width - 1) * LANES + r * 3;
        row[row_bytes - 3..].copy_from_slice(&tile[at..at + 3]);
    }
}

/// Vertical pass over rows of `row_bytes` bytes: `input` rows `stride` apart, `dst` packed.
#[inline(always)]
fn vertical(f: &Filter, input: &[u8], stride: usize, row_bytes: usize, dst: &mut [u8]) {
    let round = 1i32 << (f.precision - 1);
    for (y, out) in dst.chunks_exact_mut(row_bytes).enumerate() {
        let k = &f.weights[y * f.taps..][..f.len[y]];
        let base = f.first[y] * stride;
        if row_bytes < LANES {
            for (c, o) in out.iter_mut().enumerate() {
                let mut sum = round;
                for (t, &w) in k.iter().enumerate() {
                    sum += i32::from(w) * i32::from(input[base + t * stride + c]);
                }
                *o = (sum >> f.precision).clamp(0, 255) as u8;
            }
            continue;
        }
        // Full blocks, then one block ending at the row end (it overlaps the previous one and
        // recomputes the same values).
        let mut col = 0;
        loop {
            let col_now = col.min(row_bytes - LANES);
            let block: &mut [u8; LANES] = (&mut out[col_now..col_now + LANES])
                .try_into()
                .expect("block length");
            kernel(k, input, base + col_now, stride, round, f.precision, block);
            if col_now + LANES >= row_bytes {
                break;
            }
            col += LANES;
        }
    }
}

/// One output run of [`LANES`] bytes: `out[l] = clamp((round + sum_t k[t] * input[offset + t *
/// stride + l]) >> precision)`.
#[inline(always)]
fn kernel(
    k: &[i16],
    input: &[u8],
    offset: usize,
    stride: usize,
    round: i32,
    precision: u32,
    out: &mut [u8; LANES],
) {
    // Sub-runs of 16 lanes: their accumulators stay in registers (a 48-lane array does not).
    const SUB: usize = 16;
    let base = &input[offset..];
    for (j, o) in out.as_chunks_mut::<SUB>().0.iter_mut().enumerate() {
        let mut acc = [round; SUB];
        for (t, &w) in k.iter().enumerate() {
            let row: &[u8; SUB] = base[t * stride + j * SUB..][..SUB]
                .try_into()
                .expect("block length");
            let w = i32::from(w);
            for l in 0..SUB {
                acc[l] += w * i32::from(row[l]);
            }
        }
        for (o, a) in o.iter_mut().zip(acc) {
            *o = (a >> precision).clamp(0, 255) as u8;
        }
    }
}

/// Resizes packed RGB24 frames of one source size to one target size, as torch does (see the
/// module documentation). Build once per geometry; [`resize`](Self::resize) does not allocate.
#[derive(Debug, Clone)]
pub struct Resizer {
    src: (u32, u32),
    dst: (u32, u32),
    horizontal: Option<Horizontal>,
    vertical: Option<Filter>,
    /// Source height x target width, packed: the horizontal pass's output when both passes run.
    intermediate: Vec<u8>,
    /// Run the AVX2 build of the kernels (x86_64, detected at construction).
    avx2: bool,
}

impl Resizer {
    /// A resizer from `src_w` x `src_h` to `dst_w` x `dst_h` (bicubic).
    pub fn new(src_w: u32, src_h: u32, dst_w: u32, dst_h: u32) -> Result<Resizer, ResizeError> {
        Resizer::with_kernel(src_w, src_h, dst_w, dst_h, Kernel::Bicubic)
    }

    /// A resizer from `src_w` x `src_h` to `dst_w` x `dst_h` with `kernel`.
    pub fn with_kernel(
        src_w: u32,
        src_h: u32,
        dst_w: u32,
        dst_h: u32,
        kernel: Kernel,
    ) -> Result<Resizer, ResizeError> {
        if src_w == 0 || src_h == 0 || dst_w == 0 || dst_h == 0 {
            return Err(ResizeError::EmptySize {
                src_w,
                src_h,
                dst_w,
                dst_h,
            });
        }
        let (sw, sh, dw, dh) = (
            src_w as usize,
            src_h as usize,
            dst_w as usize,
            dst_h as usize,
        );
        let horizontal = (sw != dw).then(|| Horizontal::new(Filter::new(sw, dw, kernel), sw));
        let vertical = (sh != dh).then(|| Filter::new(sh, dh, kernel));
        let intermediate = if horizontal.is_some() && vertical.is_some() {
            vec![0; sh * dw * 3]
        } else {
            Vec::new()
        };
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::arch::is_x86_feature_detected!("avx2");
        #[cfg(not(target_arch = "x86_64"))]
        let avx2 = false;
        Ok(Resizer {
            src: (src_w, src_h),
            dst: (dst_w, dst_h),
            horizontal,
            vertical,
            intermediate,
            avx2,
        })
    }

    /// The same resizer running the baseline build of the kernels even where AVX2 is available
    /// (for tests and benchmarks: both builds must give the same bytes).
    pub fn portable(mut self) -> Resizer {
        self.avx2 = false;
        self
    }

    /// Whether [`resize`](Self::resize) runs the AVX2 build of the kernels.
    pub fn uses_avx2(&self) -> bool {
        self.avx2
    }

    /// Source width and height.
    pub fn src_size(&self) -> (u32, u32) {
        self.src
    }

    /// Target width and height.
    pub fn dst_size(&self) -> (u32, u32) {
        self.dst
    }

    /// Bytes of one packed target frame.
    pub fn dst_len(&self) -> usize {
        self.dst.0 as usize * self.dst.1 as usize * 3
    }

    /// Resizes `src` (rows `src_stride` bytes apart, the last row may be unpadded) into `dst`, a
    /// packed target frame of [`dst_len`](Self::dst_len) bytes.
    pub fn resize(
        &mut self,
        src: &[u8],
        src_stride: usize,
        dst: &mut [u8],
    ) -> Result<(), ResizeError> {
        let (sw, sh) = (self.src.0 as usize, self.src.1 as usize);
        let src_row = sw * 3;
        if src_stride < src_row || src.len() < src_stride * (sh - 1) + src_row {
            return Err(ResizeError::Source {
                len: src.len(),
                stride: src_stride,
                width: self.src.0,
                height: self.src.1,
            });
        }
        if dst.len() != self.dst_len() {
            return Err(ResizeError::Target {
                len: dst.len(),
                expected: self.dst_len(),
                width: self.dst.0,
                height: self.dst.1,
            });
        }
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is only set when the CPU reports AVX2 (`Resizer::new`).
            unsafe { self.run_avx2(src, src_stride, dst) };
            return Ok(());
        }
        self.run_portable(src, src_stride, dst);
        Ok(())
    }

    fn run_portable(&mut self, src: &[u8], src_stride: usize, dst: &mut [u8]) {
        self.run(src, src_stride, dst);
    }

    /// The same code as [`run_portable`](Self::run_portable), compiled for AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn run_avx2(&mut self, src: &[u8], src_stride: usize, dst: &mut [u8]) {
        self.run(src, src_stride, dst);
    }

    /// Both passes; the buffers are checked by [`resize`](Self::resize).
    #[inline(always)]
    fn run(&mut self, src: &[u8], src_stride: usize, dst: &mut [u8]) {
        let (sw, sh) = (self.src.0 as usize, self.src.1 as usize);
        let (src_row, dst_row) = (sw * 3, self.dst.0 as usize * 3);
        match (&mut self.horizontal, &self.vertical) {
            (None, None) => {
                for (y, out) in dst.chunks_exact_mut(dst_row).enumerate() {
                    out.copy_from_slice(&src[y * src_stride..][..src_row]);
                }
            }
            (Some(h), None) => h.run(src, src_stride, sh, dst),
            (None, Some(v)) => vertical(v, src, src_stride, dst_row, dst),
            (Some(h), Some(v)) => {
                h.run(src, src_stride, sh, &mut self.intermediate);
                vertical(v, &self.intermediate, dst_row, dst_row, dst);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain definition: per output, sum over its window, horizontal then vertical.
    fn naive(src: &[u8], sw: usize, sh: usize, dw: usize, dh: usize) -> Vec<u8> {
        let pass = |input: &[u8], n_in: usize, n_out: usize, lines: usize, along_x: bool| {
            let f = Filter::new(n_in, n_out, Kernel::Bicubic);
            let mut out = vec![0u8; lines * n_out * 3];
            for line in 0..lines {
                for i in 0..n_out {
                    for c in 0..3 {
                        let mut s = 1i32 << (f.precision - 1);
                        for t in 0..f.len[i] {
                            let j = f.first[i] + t;
                            let idx = if along_x {
                                (line * n_in + j) * 3 + c
                            } else {
                                (j * lines + line) * 3 + c
                            };
                            s += i32::from(f.weights[i * f.taps + t]) * i32::from(input[idx]);
                        }
                        let o = if along_x {
                            (line * n_out + i) * 3 + c
                        } else {
                            (i * lines + line) * 3 + c
                        };
                        out[o] = (s >> f.precision).clamp(0, 255) as u8;
                    }
                }
            }
            out
        };
        let h = if sw != dw {
            pass(src, sw, dw, sh, true)
        } else {
            src.to_vec()
        };
        if sh != dh {
            pass(&h, sh, dh, dw, false)
        } else {
            h
        }
    }

    fn pattern(w: usize, h: usize, seed: u32) -> Vec<u8> {
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..w * h * 3)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                // Hard 0/255 edges (overshoot, clamping) mixed with noise.
                if (i / 3 / 7) % 3 == 0 {
                    (x % 2 * 255) as u8
                } else {
                    (x >> 24) as u8
                }
            })
            .collect()
    }

    #[test]
    fn kernels_match_the_plain_definition() {
        let sizes = [
            (1, 1, 3, 2),
            (2, 3, 1, 1),
            (5, 4, 17, 9),
            (7, 5, 7, 11),
            (64, 40, 13, 7),
            (100, 60, 336, 196),
            (333, 211, 308, 224),
            (300, 8, 28, 8),
            (9, 300, 9, 28),
            (30, 20, 30, 20),
            (2, 37, 5, 3),
            (41, 33, 40, 17),
        ];
        for (i, &(sw, sh, dw, dh)) in sizes.iter().enumerate() {
            let src = pattern(sw, sh, i as u32);
            let want = naive(&src, sw, sh, dw, dh);
            let stride = sw * 3 + 5;
            let mut padded = vec![0xAAu8; stride * sh];
            for y in 0..sh {
                padded[y * stride..][..sw * 3].copy_from_slice(&src[y * sw * 3..][..sw * 3]);
            }
            let fast = Resizer::new(sw as u32, sh as u32, dw as u32, dh as u32).unwrap();
            for mut r in [fast.clone(), fast.portable()] {
                let what = format!("{sw}x{sh} -> {dw}x{dh}, avx2 {}", r.uses_avx2());
                let mut got = vec![0u8; r.dst_len()];
                r.resize(&src, sw * 3, &mut got).unwrap();
                assert!(got == want, "{what}");
                // Padded rows, and the resizer's buffers reused, give the same result.
                got.fill(0);
                r.resize(&padded[..stride * (sh - 1) + sw * 3], stride, &mut got)
                    .unwrap();
                assert!(got == want, "{what}, padded");
            }
        }
    }

    /// PyTorch's AVX2 kernels are compiled with FMA allowed; if the weights depended on whether
    /// the filter's multiply-adds are fused, a fused evaluation could quantise differently.
    #[test]
    fn weights_do_not_depend_on_fused_multiply_add() {
        fn keys_fused(x: f64) -> f64 {
            let x = x.abs();
            if x < 1.0 {
                (1.5f64.mul_add(x, -2.5) * x).mul_add(x, 1.0)
            } else if x < 2.0 {
                (-0.5f64).mul_add(x, 2.5).mul_add(x, -4.0).mul_add(x, 2.0)
            } else {
                0.0
            }
        }
        let mut sizes = vec![];
        for input in [
            60, 100, 211, 240, 320, 333, 360, 480, 576, 640, 720, 1080, 1280, 1440, 1920, 2160,
            2560, 3840,
        ] {
            for output in [
                28, 56, 112, 140, 168, 196, 224, 252, 280, 308, 336, 392, 476, 616, 728,
            ] {
                sizes.push((input, output));
            }
        }
        for (input, output) in sizes {
            let plain = Filter::new(input, output, Kernel::Bicubic);
            // The same computation with the fused filter.
            let scale = input as f64 / output as f64;
            let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
            for i in 0..output {
                let center = scale * (i as f64 + 0.5);
                let lo = plain.first[i];
                let n = plain.len[i];
                let w: Vec<f64> = (0..n)
                    .map(|j| keys_fused(((j + lo) as f64 - center + 0.5) * invscale))
                    .collect();
                let total: f64 = w.iter().sum();
                for (j, wj) in w.iter().enumerate() {
                    let v = wj / total * f64::from(1u32 << plain.precision);
                    let q = if v < 0.0 {
                        (-0.5 + v) as i32
                    } else {
                        (0.5 + v) as i32
                    };
                    assert_eq!(
                        q,
                        i32::from(plain.weights[i * plain.taps + j]),
                        "{input} -> {output}, output {i}, tap {j}"
                    );
                }
            }
        }
    }

    #[test]
    fn bad_buffers_are_refused() {
        assert!(matches!(
            Resizer::new(0, 1, 1, 1),
            Err(ResizeError::EmptySize { .. })
        ));
        let mut r = Resizer::new(4, 2, 2, 2).unwrap();
        let mut dst = vec![0; r.dst_len()];
        assert!(matches!(
            r.resize(&[0; 23], 12, &mut dst),
            Err(ResizeError::Source { .. })
        ));
        assert!(matches!(
            r.resize(&[0; 24], 11, &mut dst),
            Err(ResizeError::Source { .. })
        ));
        assert!(matches!(
            r.resize(&[0; 24], 12, &mut dst[..3]),
            Err(ResizeError::Target { .. })
        ));
        r.resize(&[0; 24], 12, &mut dst).unwrap();
    }
}
