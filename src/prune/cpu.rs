//! CPU fast path: exact per-block sums of absolute 8-bit differences (SAD) on packed RGB24,
//! fused with the copy of the current frame into the previous-frame buffer.
//!
//! Why it looks like this (measured on the 2-core EPYC dev box, see benches/prune.rs):
//! - One pass that loads `cur` and `prev` once and stores `cur` over `prev` in the same loop:
//!   a separate copy pass re-reads the frame and cost about 30 % more.
//! - Row-major order (a frame row at a time, every block of it) so the loads stream; walking one
//!   block at a time over 28 strided rows was 4x slower on 1288x728 frames.
//! - Two rows per step, each block row cut into 16-byte chunks summed into a vector
//!   accumulator, reduced once per block and row pair. Each target with a kernel of its own
//!   uses intrinsics that are part of its baseline (no run-time detection):
//!   - x86_64: SSE2 `psadbw`. LLVM's autovectoriser picks 4-byte `psadbw` for the portable
//!     loop, which took 2.8x and 3.2x the SSE2 time on 336x196 frames and 2.0x and 1.9x on
//!     1288x728, where SSE2 runs at about memcpy speed (`sad/` in benches/prune.rs, two runs).
//!   - aarch64: NEON `uabd` per chunk, `uadalp` into eight u16 lanes. For the portable loop
//!     LLVM emits `uabd`/`uabal` but widens every chunk's sums to u32 lanes
//!     (`ushll`/`uaddl`/`uaddl2`): 107 instructions for two 84-byte block rows against 58 for
//!     the NEON kernel (each compiled alone, rustc 1.95, opt-level 3). That count is the only
//!     speed evidence: no arm64 machine was at hand, and times under qemu mean nothing.
//!   - Other targets use the portable loop.
//! - The previous frame is kept in [`PrevFrame`]'s layout: every 84-byte block row starts a
//!   16-byte-aligned 96-byte slot, so its loads and stores never straddle a cache line
//!   (17 % faster on 336x196 than the packed layout; 14 % more memory).
//!
//! Every kernel is exact integer code. The tests run the target's kernel and the portable one
//! against plain sums; scripts/check-arm64.sh runs them for aarch64 under qemu-user.

use super::grid::BlockGrid;

/// 16 bytes aligned to 16: the unit of [`PrevFrame`]'s storage.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(16))]
pub(crate) struct Lane16([u8; 16]);

/// View lanes as bytes.
fn lane_bytes(lanes: &[Lane16]) -> &[u8] {
    // SAFETY: `Lane16` is `repr(C)` over `[u8; 16]` with size 16 (align 16 adds no padding), so
    // `len` lanes are exactly `16 * len` initialised bytes, borrowed for the same lifetime.
    unsafe { std::slice::from_raw_parts(lanes.as_ptr().cast::<u8>(), lanes.len() * 16) }
}

/// View lanes as mutable bytes.
fn lane_bytes_mut(lanes: &mut [Lane16]) -> &mut [u8] {
    // SAFETY: as in `lane_bytes`; every byte pattern is a valid `Lane16`.
    unsafe { std::slice::from_raw_parts_mut(lanes.as_mut_ptr().cast::<u8>(), lanes.len() * 16) }
}

/// The previous frame, one 16-byte-aligned slot of `ceil(block_row_bytes / 16)` lanes per
/// block row (the tail of a slot is padding and never read as pixels).
#[derive(Clone)]
pub(crate) struct PrevFrame {
    geom: BlockGrid,
    slot: usize,
    lanes: Vec<Lane16>,
}

impl std::fmt::Debug for PrevFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrevFrame")
            .field("bytes", &(self.lanes.len() * 16))
            .finish()
    }
}

impl PrevFrame {
    /// Zeroed buffer for frames of `geom`.
    pub(crate) fn new(geom: &BlockGrid) -> Self {
        let slot = geom.block_row_bytes().div_ceil(16);
        PrevFrame {
            geom: *geom,
            slot,
            lanes: vec![Lane16::default(); slot * geom.tokens() * geom.block()],
        }
    }

    /// Lanes of one frame row.
    fn row_lanes(&self) -> usize {
        self.slot * self.geom.cols()
    }

    /// Store a validated frame (rows `stride` bytes apart).
    pub(crate) fn store(&mut self, cur: &[u8], stride: usize) {
        let (rb, brb, row_lanes, slot) = (
            self.geom.row_bytes(),
            self.geom.block_row_bytes(),
            self.row_lanes(),
            self.slot,
        );
        for (y, row) in self.lanes.chunks_exact_mut(row_lanes).enumerate() {
            let src = &cur[y * stride..y * stride + rb];
            for (dst, s) in row.chunks_exact_mut(slot).zip(src.chunks_exact(brb)) {
                lane_bytes_mut(dst)[..brb].copy_from_slice(s);
            }
        }
    }

    /// Write the frame packed (`width * 3` bytes per row) into `out` (`frame_bytes` long).
    #[cfg_attr(not(any(test, feature = "prune-cuda")), allow(dead_code))]
    pub(crate) fn unpack_into(&self, out: &mut [u8]) {
        let (rb, brb, row_lanes, slot) = (
            self.geom.row_bytes(),
            self.geom.block_row_bytes(),
            self.row_lanes(),
            self.slot,
        );
        for (row, dst) in self
            .lanes
            .chunks_exact(row_lanes)
            .zip(out.chunks_exact_mut(rb))
        {
            for (s, d) in row.chunks_exact(slot).zip(dst.chunks_exact_mut(brb)) {
                d.copy_from_slice(&lane_bytes(s)[..brb]);
            }
        }
    }

    /// Per-block SAD of `cur` (rows `stride` bytes apart) against this frame, then store `cur`.
    /// Writes one SAD per token in raster order.
    ///
    /// The caller has validated `cur` with [`BlockGrid::check_frame`]; the buffer and `sads` are
    /// sized for the geometry at construction, so the slicing below cannot go out of bounds.
    pub(crate) fn sad_and_copy(&mut self, cur: &[u8], stride: usize, sads: &mut [u32]) {
        self.sad_and_copy_with(cur, stride, sads, pair_sad_copy);
    }

    /// [`Self::sad_and_copy`] through the kernel `kernel` names ([`SadBench`] and the tests).
    fn sad_and_copy_by(&mut self, kernel: SadKernel, cur: &[u8], stride: usize, sads: &mut [u32]) {
        match kernel {
            SadKernel::Native => self.sad_and_copy(cur, stride, sads),
            SadKernel::Portable => {
                self.sad_and_copy_with(cur, stride, sads, portable::pair_sad_copy)
            }
        }
    }

    /// [`Self::sad_and_copy`] through `kernel` (a function item, so each kernel gets its own
    /// fully inlined copy of the loops).
    #[inline(always)]
    fn sad_and_copy_with(
        &mut self,
        cur: &[u8],
        stride: usize,
        sads: &mut [u32],
        kernel: impl Fn([&[u8]; 2], [&mut [Lane16]; 2]) -> u32 + Copy,
    ) {
        let geom = self.geom;
        let (rb, brb, block) = (geom.row_bytes(), geom.block_row_bytes(), geom.block());
        let row_lanes = self.row_lanes();
        let slot = self.slot;
        for (by, sad_row) in sads.chunks_exact_mut(geom.cols()).enumerate() {
            sad_row.fill(0);
            let rows = &mut self.lanes[by * block * row_lanes..(by + 1) * block * row_lanes];
            let mut pairs = rows.chunks_exact_mut(2 * row_lanes);
            let mut y = by * block;
            for pair in &mut pairs {
                let (p0, p1) = pair.split_at_mut(row_lanes);
                let c0 = &cur[y * stride..y * stride + rb];
                let c1 = &cur[(y + 1) * stride..(y + 1) * stride + rb];
                if brb == 84 {
                    // The default block: lengths known at compile time, loops fully unrolled.
                    rows_fixed::<84, 6>([c0, c1], [p0, p1], sad_row, kernel);
                } else {
                    rows_dyn(brb, slot, [c0, c1], [p0, p1], sad_row, kernel);
                }
                y += 2;
            }
            // Odd block side (never with merge 2): the last row of the block row goes alone.
            let last = pairs.into_remainder();
            if !last.is_empty() {
                let c = &cur[y * stride..y * stride + rb];
                let blocks = c.chunks_exact(brb).zip(last.chunks_exact_mut(slot));
                for (s, (cc, pp)) in sad_row.iter_mut().zip(blocks) {
                    *s += portable::sad_copy(cc, &mut lane_bytes_mut(pp)[..brb]);
                }
            }
        }
    }
}

/// Two frame rows, block rows of `B` bytes in slots of `L` lanes.
#[inline(always)]
fn rows_fixed<const B: usize, const L: usize>(
    cur: [&[u8]; 2],
    prev: [&mut [Lane16]; 2],
    sads: &mut [u32],
    kernel: impl Fn([&[u8]; 2], [&mut [Lane16]; 2]) -> u32,
) {
    let [c0, c1] = cur;
    let [p0, p1] = prev;
    let blocks = c0.as_chunks::<B>().0.iter().zip(c1.as_chunks::<B>().0).zip(
        p0.as_chunks_mut::<L>()
            .0
            .iter_mut()
            .zip(p1.as_chunks_mut::<L>().0),
    );
    for (s, ((a0, a1), (b0, b1))) in sads.iter_mut().zip(blocks) {
        *s += kernel([a0, a1], [b0, b1]);
    }
}

/// Two frame rows, any block row length.
#[inline(always)]
fn rows_dyn(
    brb: usize,
    slot: usize,
    cur: [&[u8]; 2],
    prev: [&mut [Lane16]; 2],
    sads: &mut [u32],
    kernel: impl Fn([&[u8]; 2], [&mut [Lane16]; 2]) -> u32,
) {
    let [c0, c1] = cur;
    let [p0, p1] = prev;
    let blocks = c0
        .chunks_exact(brb)
        .zip(c1.chunks_exact(brb))
        .zip(p0.chunks_exact_mut(slot).zip(p1.chunks_exact_mut(slot)));
    for (s, ((a0, a1), (b0, b1))) in sads.iter_mut().zip(blocks) {
        *s += kernel([a0, a1], [b0, b1]);
    }
}

#[cfg(target_arch = "x86_64")]
use sse2::pair_sad_copy;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
use neon::pair_sad_copy;

#[cfg(not(any(
    target_arch = "x86_64",
    all(target_arch = "aarch64", target_feature = "neon")
)))]
use portable::pair_sad_copy;

/// Name of the kernel [`PrevFrame::sad_and_copy`] uses on this target.
const KERNEL: &str = if cfg!(target_arch = "x86_64") {
    "sse2"
} else if cfg!(all(target_arch = "aarch64", target_feature = "neon")) {
    "neon"
} else {
    "portable"
};

/// Which kernel [`SadBench`] runs.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SadKernel {
    /// The one production uses on this target ([`SadKernel::name`] says which).
    Native,
    /// The portable loop, whatever the target.
    Portable,
}

impl SadKernel {
    /// `sse2`, `neon` or `portable`.
    pub fn name(self) -> &'static str {
        match self {
            SadKernel::Native => KERNEL,
            SadKernel::Portable => "portable",
        }
    }
}

/// Benchmark hook (benches/prune.rs): the fused SAD and copy of whole frames through a chosen
/// kernel, so the portable loop can be timed against the native one on the same inputs. Not
/// part of the API; production always uses the native kernel.
#[doc(hidden)]
#[derive(Debug)]
pub struct SadBench {
    prev: PrevFrame,
    sads: Vec<u32>,
}

impl SadBench {
    /// Zeroed previous frame for frames of `geom`.
    pub fn new(geom: &BlockGrid) -> Self {
        SadBench {
            prev: PrevFrame::new(geom),
            sads: vec![0; geom.tokens()],
        }
    }

    /// Per-block SADs of `cur` against the previous frame, which becomes `cur`.
    ///
    /// # Panics
    /// If `cur` does not hold a frame of the geometry ([`BlockGrid::check_frame`]).
    pub fn run(&mut self, kernel: SadKernel, cur: &[u8], stride: usize) -> &[u32] {
        self.prev
            .geom
            .check_frame(cur.len(), stride)
            .expect("SadBench::run: frame does not fit the geometry");
        self.prev
            .sad_and_copy_by(kernel, cur, stride, &mut self.sads);
        &self.sads
    }
}

/// SSE2 kernel (x86_64 baseline).
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::{
        __m128i, _mm_add_epi64, _mm_cvtsi128_si64, _mm_load_si128, _mm_loadu_si128, _mm_sad_epu8,
        _mm_set_epi32, _mm_setzero_si128, _mm_store_si128, _mm_unpackhi_epi64,
    };

    use super::{Lane16, lane_bytes_mut};

    /// SAD of one block row in each of two frame rows against their slots, storing `cur` in
    /// the slots. `cur[i].len()` bytes are compared; the slots hold at least that many.
    #[inline(always)]
    pub(super) fn pair_sad_copy(cur: [&[u8]; 2], prev: [&mut [Lane16]; 2]) -> u32 {
        let [c0, c1] = cur;
        let [p0, p1] = prev;
        let (c0v, c0t) = c0.as_chunks::<16>();
        let (c1v, c1t) = c1.as_chunks::<16>();
        let full = c0v.len();
        // SAFETY (every block below): SSE2 is part of the x86_64 baseline; each unaligned load
        // reads the 16 bytes of a `[u8; 16]` it borrows, each aligned load/store the 16 bytes of
        // a `Lane16`, which is 16-byte aligned by its type.
        let mut acc0 = unsafe { _mm_setzero_si128() };
        let mut acc1 = acc0;
        for ((a0, a1), (b0, b1)) in c0v.iter().zip(c1v).zip(p0.iter_mut().zip(p1.iter_mut())) {
            unsafe {
                acc0 = chunk(acc0, a0, b0);
                acc1 = chunk(acc1, a1, b1);
            }
        }
        // Tails (4 bytes for the 84-byte row): both rows' 4-byte pieces share one vector.
        let t0 = &mut lane_bytes_mut(&mut p0[full..])[..c0t.len()];
        let t1 = &mut lane_bytes_mut(&mut p1[full..])[..c1t.len()];
        let (c0q, c0r) = c0t.as_chunks::<4>();
        let (c1q, c1r) = c1t.as_chunks::<4>();
        let (p0q, p0r) = t0.as_chunks_mut::<4>();
        let (p1q, p1r) = t1.as_chunks_mut::<4>();
        for ((a0, a1), (b0, b1)) in c0q.iter().zip(c1q).zip(p0q.iter_mut().zip(p1q.iter_mut())) {
            unsafe {
                let a = _mm_set_epi32(0, 0, i32::from_le_bytes(*a1), i32::from_le_bytes(*a0));
                let b = _mm_set_epi32(0, 0, i32::from_le_bytes(*b1), i32::from_le_bytes(*b0));
                acc0 = _mm_add_epi64(acc0, _mm_sad_epu8(a, b));
            }
            *b0 = *a0;
            *b1 = *a1;
        }
        let rest = super::portable::sad_copy(c0r, p0r) + super::portable::sad_copy(c1r, p1r);
        unsafe {
            let acc = _mm_add_epi64(acc0, acc1);
            let sum = _mm_add_epi64(acc, _mm_unpackhi_epi64(acc, acc));
            // Two block rows of at most 768 bytes sum to < 2^19: the cast is exact.
            _mm_cvtsi128_si64(sum) as u32 + rest
        }
    }

    /// `acc + SAD(a, b)` as two u64 lanes; stores `a` over `b`.
    ///
    /// # Safety
    /// Requires SSE2 (always present on x86_64).
    #[inline(always)]
    unsafe fn chunk(acc: __m128i, a: &[u8; 16], b: &mut Lane16) -> __m128i {
        unsafe {
            let va = _mm_loadu_si128(a.as_ptr().cast());
            let vb = _mm_load_si128((b as *const Lane16).cast());
            _mm_store_si128((b as *mut Lane16).cast(), va);
            _mm_add_epi64(acc, _mm_sad_epu8(va, vb))
        }
    }
}

/// NEON kernel (aarch64 baseline: every aarch64 Linux CPU has Advanced SIMD, no detection
/// needed). Same layout and steps as the SSE2 one: `uabd` gives the 16 absolute differences of a
/// chunk, `uadalp` adds them pairwise into eight u16 lanes, reduced once per call.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon {
    use std::arch::aarch64::{
        uint16x8_t, vabd_u8, vabdq_u8, vaddlv_u8, vaddlvq_u16, vcreate_u8, vdupq_n_u16, vld1q_u8,
        vpadalq_u8, vst1q_u8,
    };

    use super::{Lane16, lane_bytes_mut};

    /// SAD of one block row in each of two frame rows against their slots, storing `cur` in
    /// the slots. `cur[i].len()` bytes are compared; the slots hold at least that many.
    #[inline(always)]
    pub(super) fn pair_sad_copy(cur: [&[u8]; 2], prev: [&mut [Lane16]; 2]) -> u32 {
        let [c0, c1] = cur;
        let [p0, p1] = prev;
        let (c0v, c0t) = c0.as_chunks::<16>();
        let (c1v, c1t) = c1.as_chunks::<16>();
        let full = c0v.len();
        // One accumulator per row. `uadalp` adds at most 2 * 255 to a u16 lane per chunk, and a
        // block row has at most 768 / 16 = 48 chunks (MAX_BLOCK): at most 24,480 < 2^16.
        // SAFETY (every block below): NEON is part of the aarch64 baseline (and the module is
        // compiled only with `target_feature = "neon"`); each load reads the 16 bytes of a
        // `[u8; 16]` or a `Lane16` it borrows, each store writes the 16 bytes of a `Lane16` it
        // borrows mutably (16-byte aligned by its type, so no store straddles a cache line).
        let mut acc0 = unsafe { vdupq_n_u16(0) };
        let mut acc1 = acc0;
        for ((a0, a1), (b0, b1)) in c0v.iter().zip(c1v).zip(p0.iter_mut().zip(p1.iter_mut())) {
            unsafe {
                acc0 = chunk(acc0, a0, b0);
                acc1 = chunk(acc1, a1, b1);
            }
        }
        // Tails (4 bytes for the 84-byte row): both rows' 4-byte pieces share one 8-byte vector.
        let t0 = &mut lane_bytes_mut(&mut p0[full..])[..c0t.len()];
        let t1 = &mut lane_bytes_mut(&mut p1[full..])[..c1t.len()];
        let (c0q, c0r) = c0t.as_chunks::<4>();
        let (c1q, c1r) = c1t.as_chunks::<4>();
        let (p0q, p0r) = t0.as_chunks_mut::<4>();
        let (p1q, p1r) = t1.as_chunks_mut::<4>();
        let mut tail = 0u32;
        for ((a0, a1), (b0, b1)) in c0q.iter().zip(c1q).zip(p0q.iter_mut().zip(p1q.iter_mut())) {
            // Byte i of `a` and of `b` come from the same position, whatever the lane order.
            let pack = |lo: &[u8; 4], hi: &[u8; 4]| {
                u64::from(u32::from_le_bytes(*lo)) | (u64::from(u32::from_le_bytes(*hi)) << 32)
            };
            let (a, b) = (pack(a0, a1), pack(b0, b1));
            // At most 8 * 255 per piece: `uaddlv` of 8 bytes cannot overflow its u16.
            tail += u32::from(unsafe { vaddlv_u8(vabd_u8(vcreate_u8(a), vcreate_u8(b))) });
            *b0 = *a0;
            *b1 = *a1;
        }
        let rest = super::portable::sad_copy(c0r, p0r) + super::portable::sad_copy(c1r, p1r);
        // Each reduction is at most 8 * 24,480: exact in the u32 that `uaddlv` returns.
        let (s0, s1) = unsafe { (vaddlvq_u16(acc0), vaddlvq_u16(acc1)) };
        s0 + s1 + tail + rest
    }

    /// `acc + pairwise(|a - b|)` as eight u16 lanes; stores `a` over `b`.
    ///
    /// # Safety
    /// Requires NEON (always present on aarch64 Linux).
    #[inline(always)]
    unsafe fn chunk(acc: uint16x8_t, a: &[u8; 16], b: &mut Lane16) -> uint16x8_t {
        unsafe {
            let va = vld1q_u8(a.as_ptr());
            let vb = vld1q_u8((b as *const Lane16).cast());
            vst1q_u8((b as *mut Lane16).cast(), va);
            vpadalq_u8(acc, vabdq_u8(va, vb))
        }
    }
}

/// Portable kernel: the reference for the SIMD ones and the path on other targets.
mod portable {
    use super::{Lane16, lane_bytes_mut};

    /// SAD of one block row in each of two frame rows against their slots, storing `cur`.
    #[inline(always)]
    pub(super) fn pair_sad_copy(cur: [&[u8]; 2], prev: [&mut [Lane16]; 2]) -> u32 {
        let [c0, c1] = cur;
        let [p0, p1] = prev;
        sad_copy(c0, &mut lane_bytes_mut(p0)[..c0.len()])
            + sad_copy(c1, &mut lane_bytes_mut(p1)[..c1.len()])
    }

    /// SAD of `c` against `p`, then `p = c`.
    #[inline(always)]
    pub(super) fn sad_copy(c: &[u8], p: &mut [u8]) -> u32 {
        let sad = c
            .iter()
            .zip(p.iter())
            .map(|(&a, &b)| u32::from(a.abs_diff(b)))
            .sum();
        p.copy_from_slice(c);
        sad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// Plain per-block SAD of two packed frames, block by block.
    fn sad_naive(geom: &BlockGrid, cur: &[u8], stride: usize, prev: &[u8], n: usize) -> u32 {
        let (by, bx) = (n / geom.cols(), n % geom.cols());
        let (block, brb, rb) = (geom.block(), geom.block_row_bytes(), geom.row_bytes());
        let mut sad = 0u32;
        for y in by * block..(by + 1) * block {
            let c = &cur[y * stride + bx * brb..y * stride + (bx + 1) * brb];
            let p = &prev[y * rb + bx * brb..y * rb + (bx + 1) * brb];
            sad += c
                .iter()
                .zip(p)
                .map(|(&a, &b)| u32::from(a.abs_diff(b)))
                .sum::<u32>();
        }
        sad
    }

    const KERNELS: [SadKernel; 2] = [SadKernel::Native, SadKernel::Portable];

    #[test]
    fn fast_sums_equal_block_by_block_sums_and_prev_becomes_cur() {
        let shapes = [
            (56, 28, 14, 2, 0),
            (336, 196, 14, 2, 5),
            (1288, 56, 14, 2, 1),
            (60, 40, 5, 4, 3),
            (45, 30, 15, 1, 2),
            (63, 21, 7, 3, 0),
            (64, 32, 16, 1, 7),
            (512, 256, 16, 16, 3),
        ];
        for kernel in KERNELS {
            let mut rng = 0x1234_5678_9abc_def1u64;
            for (w, h, patch, merge, pad) in shapes {
                let geom = BlockGrid::new(w, h, patch, merge).unwrap();
                let rb = geom.row_bytes();
                let stride = rb + pad;
                let old: Vec<u8> = (0..geom.frame_bytes())
                    .map(|_| xorshift(&mut rng) as u8)
                    .collect();
                let cur: Vec<u8> = (0..stride * h).map(|_| xorshift(&mut rng) as u8).collect();
                let mut prev = PrevFrame::new(&geom);
                prev.store(&old, rb);
                let mut packed = vec![0u8; geom.frame_bytes()];
                prev.unpack_into(&mut packed);
                assert_eq!(packed, old, "store then unpack is the identity");

                let expected: Vec<u32> = (0..geom.tokens())
                    .map(|n| sad_naive(&geom, &cur, stride, &old, n))
                    .collect();
                let mut sads = vec![0; geom.tokens()];
                prev.sad_and_copy_by(kernel, &cur, stride, &mut sads);
                let name = kernel.name();
                assert_eq!(sads, expected, "{name}: {w}x{h} block {}", geom.block());
                prev.unpack_into(&mut packed);
                for y in 0..h {
                    assert_eq!(
                        &packed[y * rb..(y + 1) * rb],
                        &cur[y * stride..y * stride + rb],
                        "{name}: {w}x{h} row {y}"
                    );
                }
            }
        }
    }

    type PairKernel = fn([&[u8]; 2], [&mut [Lane16]; 2]) -> u32;

    /// Plain SAD of two byte runs.
    fn sad_plain(a: &[u8], b: &[u8]) -> u32 {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| u32::from(x.abs_diff(y)))
            .sum()
    }

    #[test]
    fn kernels_equal_plain_sums_on_every_length() {
        let mut rng = 99u64;
        let lens = (0usize..=100).chain([127, 128, 129, 255, 256, 381, 383, 384, 765, 767, 768]);
        for len in lens {
            let lanes = len.div_ceil(16);
            // Random bytes, then both extremes (the largest differences the accumulators see).
            let random: Vec<u8> = (0..2 * len + 32 * lanes)
                .map(|_| xorshift(&mut rng) as u8)
                .collect();
            let (c_rand, p_rand) = random.split_at(2 * len);
            let cases = [
                (c_rand.to_vec(), p_rand.to_vec()),
                (vec![255; 2 * len], vec![0; 32 * lanes]),
                (vec![0; 2 * len], vec![255; 32 * lanes]),
            ];
            for (c, p_bytes) in cases {
                let (c0, c1) = c.split_at(len);
                let mut p = vec![Lane16::default(); 2 * lanes];
                lane_bytes_mut(&mut p).copy_from_slice(&p_bytes);
                let (p0_old, p1_old) = p_bytes.split_at(16 * lanes);
                let expected = sad_plain(c0, &p0_old[..len]) + sad_plain(c1, &p1_old[..len]);
                let kernels: [(&str, PairKernel); 2] = [
                    (KERNEL, pair_sad_copy),
                    ("portable", portable::pair_sad_copy),
                ];
                for (name, kernel) in kernels {
                    let mut q = p.clone();
                    let (q0, q1) = q.split_at_mut(lanes);
                    assert_eq!(kernel([c0, c1], [q0, q1]), expected, "{name}: len {len}");
                    let (q0, q1) = q.split_at(lanes);
                    for (slot, c, old) in [(q0, c0, p0_old), (q1, c1, p1_old)] {
                        let bytes = lane_bytes(slot);
                        assert_eq!(&bytes[..len], c, "{name}: len {len}: slot holds cur");
                        assert_eq!(&bytes[len..], &old[len..], "{name}: len {len}: padding");
                    }
                }
            }
        }
    }

    #[test]
    fn saturated_block_sums_do_not_overflow() {
        let geom = BlockGrid::new(256, 256, 16, 16).unwrap();
        for kernel in KERNELS {
            for (old, new) in [(0u8, 255u8), (255, 0)] {
                let mut prev = PrevFrame::new(&geom);
                prev.store(&vec![old; geom.frame_bytes()], geom.row_bytes());
                let cur = vec![new; geom.frame_bytes()];
                let mut sads = vec![0; 1];
                prev.sad_and_copy_by(kernel, &cur, geom.row_bytes(), &mut sads);
                assert_eq!(sads[0], 255 * 3 * 256 * 256, "{}", kernel.name());
            }
        }
    }

    #[test]
    fn bench_hook_runs_the_named_kernel_on_whole_frames() {
        let geom = BlockGrid::new(112, 56, 14, 2).unwrap();
        let mut rng = 7u64;
        let frames: Vec<Vec<u8>> = (0..3)
            .map(|_| {
                (0..geom.frame_bytes())
                    .map(|_| xorshift(&mut rng) as u8)
                    .collect()
            })
            .collect();
        let rb = geom.row_bytes();
        let zero = vec![0u8; geom.frame_bytes()];
        for kernel in KERNELS {
            let mut bench = SadBench::new(&geom);
            let mut before = &zero;
            for f in &frames {
                let expected: Vec<u32> = (0..geom.tokens())
                    .map(|n| sad_naive(&geom, f, rb, before, n))
                    .collect();
                assert_eq!(bench.run(kernel, f, rb), expected, "{}", kernel.name());
                before = f;
            }
        }
    }
}
