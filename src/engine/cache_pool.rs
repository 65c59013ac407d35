//! Host memory for the decoder's KV caches on the CPU provider.
//!
//! A cache lives for many decoder runs (a camera's for minutes, a question's for its generation),
//! and every run makes a new one a few positions longer. Left to ONNX Runtime, those outputs come
//! from the session's arena, between the run's own short-lived buffers: long-lived blocks of ever
//! new sizes scattered through it, so a later run finds no free block large enough and the arena
//! grows, in steps, for as long as the process runs (docs/RELIABILITY.md, "Memory over a long
//! run"). Here they come from this pool instead, so after each run the arena holds nothing.
//!
//! A block is one anonymous mapping holding every layer's key and value tensors for up to
//! `capacity` positions (a multiple of [`GRAIN`]). A dropped cache's block goes back to the pool;
//! the next cache that fits it closely takes it (a generation alternates between two), and the
//! pool keeps no more idle bytes than are in use plus two of the largest blocks: beyond that, the
//! oldest idle blocks are unmapped, which gives their pages back to the system at once. So the
//! pool's memory is at most twice the caches alive plus two of the largest blocks, and it cannot
//! fragment: every block is its own mapping.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Positions a block's capacity is rounded up to: a generation of up to this many tokens stays in
/// one size of block.
pub const GRAIN: usize = 64;

/// One anonymous mapping, unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    bytes: usize,
    capacity: usize,
}

// The mapping is plain memory owned by this value alone.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(bytes: usize, capacity: usize) -> std::io::Result<Mapping> {
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(ptr.cast()).ok_or_else(|| std::io::Error::other("null mapping"))?,
            bytes,
            capacity,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of this length; no view of it outlives its block.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes) };
    }
}

/// The pool's counters (`status` and tests read them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CachePoolStats {
    /// Bytes of blocks held by caches.
    pub live_bytes: usize,
    /// Bytes of idle blocks kept for reuse.
    pub idle_bytes: usize,
    /// Blocks mapped since the start.
    pub mapped: u64,
    /// Blocks taken from the idle ones since the start.
    pub reused: u64,
    /// Idle blocks unmapped since the start.
    pub unmapped: u64,
    /// Bytes of the largest block mapped so far.
    pub largest_bytes: usize,
}

#[derive(Default)]
struct State {
    /// Oldest returned first.
    idle: Vec<Mapping>,
    stats: CachePoolStats,
}

/// Cache blocks of one decoder (one layout of layers, heads and head width).
pub struct CachePool {
    state: Mutex<State>,
    /// Floats of one position in one tensor (`kv_heads * head_dim`).
    row: usize,
    /// Tensors of a cache (`2 * layers`).
    tensors: usize,
}

impl std::fmt::Debug for CachePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachePool")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

fn page_round(bytes: usize) -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096);
    bytes.div_ceil(page) * page
}

impl CachePool {
    /// A pool for caches of `tensors` tensors of `row` floats per position.
    pub fn new(tensors: usize, row: usize) -> Arc<CachePool> {
        Arc::new(CachePool {
            state: Mutex::new(State::default()),
            row,
            tensors,
        })
    }

    /// The counters now.
    pub fn stats(&self) -> CachePoolStats {
        self.lock().stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A block for at least `positions` positions: an idle one of the capacity it would be given
    /// (or up to a quarter more), else a new mapping.
    pub fn take(self: &Arc<CachePool>, positions: usize) -> std::io::Result<CacheBlock> {
        if positions == 0 {
            return Ok(CacheBlock {
                map: None,
                capacity: 0,
                pool: self.clone(),
            });
        }
        let capacity = positions.div_ceil(GRAIN) * GRAIN;
        let most = capacity + (capacity / 4).max(GRAIN);
        let mut state = self.lock();
        let fit = state
            .idle
            .iter()
            .enumerate()
            .filter(|(_, m)| m.capacity >= capacity && m.capacity < most)
            .min_by_key(|(_, m)| m.capacity)
            .map(|(i, _)| i);
        let map = match fit {
            Some(i) => {
                let map = state.idle.remove(i);
                state.stats.idle_bytes -= map.bytes;
                state.stats.reused += 1;
                map
            }
            None => {
                let bytes = page_round(capacity * self.row * self.tensors * 4);
                let map = Mapping::new(bytes, capacity)?;
                state.stats.mapped += 1;
                state.stats.largest_bytes = state.stats.largest_bytes.max(bytes);
                map
            }
        };
        state.stats.live_bytes += map.bytes;
        let capacity = map.capacity;
        Ok(CacheBlock {
            map: Some(map),
            capacity,
            pool: self.clone(),
        })
    }

    fn give_back(&self, map: Mapping) {
        let mut state = self.lock();
        state.stats.live_bytes -= map.bytes;
        state.stats.idle_bytes += map.bytes;
        state.idle.push(map);
        // No more idle than in use, plus two of the largest blocks (so that a step that grows a
        // cache past its block's capacity, and drops it, does not map and unmap a block every
        // time): the oldest idle blocks go back to the system.
        let keep = state.stats.live_bytes + 2 * state.stats.largest_bytes;
        let mut dropped = Vec::new();
        while state.stats.idle_bytes > keep && !state.idle.is_empty() {
            let old = state.idle.remove(0);
            state.stats.idle_bytes -= old.bytes;
            state.stats.unmapped += 1;
            dropped.push(old);
        }
        drop(state);
        // Unmapped outside the lock.
        drop(dropped);
    }
}

/// One cache's memory: `tensors` tensors of `[1, heads, len, dim]` floats, tensor `j` starting at
/// float `j * capacity * row`.
pub struct CacheBlock {
    map: Option<Mapping>,
    capacity: usize,
    pool: Arc<CachePool>,
}

impl std::fmt::Debug for CacheBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CacheBlock {{ capacity: {} }}", self.capacity)
    }
}

impl CacheBlock {
    /// Positions the block holds at most.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The pool it came from (and goes back to).
    pub fn pool(&self) -> &Arc<CachePool> {
        &self.pool
    }

    /// Address of the block's memory (dangling, and never read, when it has no positions).
    pub fn addr(&self) -> *const u8 {
        self.map
            .as_ref()
            .map_or(NonNull::<f32>::dangling().as_ptr().cast(), |m| {
                m.ptr.as_ptr().cast_const()
            })
    }

    /// Tensor `j`'s first float: `len` positions of it are `row * len` floats from there.
    pub fn tensor_ptr(&self, j: usize) -> *mut f32 {
        debug_assert!(j < self.pool.tensors);
        match &self.map {
            // SAFETY: within the mapping: j < tensors and the mapping holds
            // tensors * capacity * row floats.
            Some(m) => unsafe {
                m.ptr
                    .as_ptr()
                    .cast::<f32>()
                    .add(j * self.capacity * self.pool.row)
            },
            None => NonNull::<f32>::dangling().as_ptr(),
        }
    }

    /// Tensor `j`'s first `len` positions.
    pub fn tensor(&self, j: usize, len: usize) -> &[f32] {
        assert!(len <= self.capacity && j < self.pool.tensors);
        // SAFETY: within the mapping (or empty), and only written through `tensor_mut` or by a
        // decoder run while the block is not shared.
        unsafe { std::slice::from_raw_parts(self.tensor_ptr(j), len * self.pool.row) }
    }

    /// Tensor `j`'s first `len` positions, to write.
    pub fn tensor_mut(&mut self, j: usize, len: usize) -> &mut [f32] {
        assert!(len <= self.capacity && j < self.pool.tensors);
        // SAFETY: as `tensor`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.tensor_ptr(j), len * self.pool.row) }
    }
}

impl Drop for CacheBlock {
    fn drop(&mut self) {
        if let Some(map) = self.map.take() {
            self.pool.give_back(map);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_block_is_taken_again_by_a_close_size_and_idle_bytes_stay_bounded() {
        let pool = CachePool::new(4, 8);
        let a = pool.take(10).unwrap();
        assert_eq!(a.capacity(), GRAIN);
        let b = pool.take(70).unwrap();
        assert_eq!(b.capacity(), 2 * GRAIN);
        let b_addr = b.addr();
        drop(b);
        // Two of the largest blocks may stay idle beyond what is live.
        let s = pool.stats();
        assert_eq!((s.idle_bytes, s.unmapped), (s.largest_bytes, 0));
        let big = pool.take(1000).unwrap();
        // 100 positions fit the idle block of 128; the next step after them takes it again.
        let c = pool.take(100).unwrap();
        assert_eq!((c.addr(), pool.stats().reused), (b_addr, 1));
        drop(c);
        let d = pool.take(101).unwrap();
        assert_eq!((d.addr(), pool.stats().reused), (b_addr, 2));
        drop(d);
        // 20 positions do not take it: too large for them.
        let e = pool.take(20).unwrap();
        assert_eq!(e.capacity(), GRAIN);
        assert_eq!(pool.stats().reused, 2);
        // Many blocks dropped at once: the idle ones beyond the bound are unmapped, oldest first.
        let many: Vec<_> = (1..=20).map(|k| pool.take(k * 100).unwrap()).collect();
        drop(many);
        let s = pool.stats();
        assert!(s.idle_bytes <= s.live_bytes + 2 * s.largest_bytes, "{s:?}");
        assert!(s.unmapped > 0, "{s:?}");
        drop((a, big, e));
        let s = pool.stats();
        assert_eq!(s.live_bytes, 0);
        assert!(s.idle_bytes <= 2 * s.largest_bytes, "{s:?}");
    }

    #[test]
    fn tensors_of_a_block_do_not_overlap() {
        let pool = CachePool::new(3, 2);
        let mut b = pool.take(5).unwrap();
        for j in 0..3 {
            b.tensor_mut(j, b.capacity()).fill(j as f32);
        }
        for j in 0..3 {
            assert!(b.tensor(j, b.capacity()).iter().all(|&x| x == j as f32));
        }
        assert!(pool.take(0).unwrap().tensor(0, 0).is_empty());
    }
}
