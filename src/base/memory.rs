//! Giving back to the system the memory the C allocator holds free.
//!
//! The KV caches ONNX Runtime returns, GStreamer's buffers, the broker's logs and every Rust
//! allocation go through the C allocator (and the decoder's working buffers too under
//! `engine.cpu_arena = "vision"`: `engine/cpu.rs`). Which allocator that is depends on the build:
//! - **jemalloc** (the default, the `jemalloc` feature: `src/main.rs`): its background threads
//!   return freed pages on their own about 10 s after they were freed (`dirty_decay_ms`); the
//!   release below purges every arena at once (`arena.<all>.purge`), so the freed pages go now.
//! - **glibc** (`--no-default-features`): malloc keeps freed memory in per-thread arenas for reuse
//!   and returns to the system only what is free at the top of a heap, so with a dozen threads
//!   (cameras, questions, ONNX Runtime's pool) resident memory stays well above what is in use: in
//!   the 2-hour soak (docs/RELIABILITY.md, "Memory over a long run"), 124.8 MB held in 16 arenas for
//!   77.3 MB in use. `malloc_trim(0)` releases the free pages of every arena (glibc >= 2.8 walks
//!   them all, not only the tops); it cannot return pages that hold a live block anywhere, which is
//!   why glibc builds still grow slowly over hours.
//!
//! The runtime calls [`release_free_memory`] every `runtime.release_memory_secs` (60 s by default),
//! off the async threads.

use std::time::{Duration, Instant};

/// The allocator this build serves allocations with, as `/metrics` and the logs name it.
pub const ALLOCATOR: &str = if cfg!(feature = "jemalloc") {
    "jemalloc"
} else {
    "libc"
};

/// Returns the allocator's free pages to the system; how long it took, or `None` where the
/// allocator has no such call (a C library other than glibc, without jemalloc).
pub fn release_free_memory() -> Option<Duration> {
    #[cfg(feature = "jemalloc")]
    {
        let started = Instant::now();
        // "arena.<i>.purge" with i = MALLCTL_ARENAS_ALL (4096 in jemalloc 5): every arena.
        let name = c"arena.4096.purge";
        // SAFETY: a documented mallctl that reads and writes nothing (null old and new values).
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        (rc == 0).then(|| started.elapsed())
    }
    #[cfg(all(not(feature = "jemalloc"), target_os = "linux", target_env = "gnu"))]
    {
        let started = Instant::now();
        // SAFETY: malloc_trim takes a pad size and only walks the allocator's own state, under
        // the allocator's locks; it is safe to call from any thread at any time.
        unsafe { libc::malloc_trim(0) };
        Some(started.elapsed())
    }
    #[cfg(all(
        not(feature = "jemalloc"),
        not(all(target_os = "linux", target_env = "gnu"))
    ))]
    {
        let _ = Instant::now();
        None
    }
}

/// What the allocator itself holds, in bytes (jemalloc's `stats.*`, refreshed at each call):
/// `allocated` in live allocations, `active` in the pages that hold them, `resident` in pages it
/// has touched and not given back (its metadata included), `mapped` in the extents it has mapped,
/// `retained` in mappings kept without resident pages. A leak grows `allocated`; fragmentation
/// grows `active` and `resident` while `allocated` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocatorStats {
    pub allocated: u64,
    pub active: u64,
    pub resident: u64,
    pub mapped: u64,
    pub retained: u64,
}

impl AllocatorStats {
    /// The figures by name, in the order `/metrics` renders them.
    pub fn by_state(&self) -> [(&'static str, u64); 5] {
        [
            ("allocated", self.allocated),
            ("active", self.active),
            ("resident", self.resident),
            ("mapped", self.mapped),
            ("retained", self.retained),
        ]
    }
}

/// The allocator's own figures; `None` without jemalloc (glibc's `mallinfo2` is not in the
/// glibc 2.31 of our oldest platform, and its counters are per-arena sums of the same kind).
pub fn allocator_stats() -> Option<AllocatorStats> {
    #[cfg(feature = "jemalloc")]
    {
        use std::ffi::{CStr, c_void};
        use tikv_jemalloc_sys::mallctl;
        // jemalloc caches its statistics; writing "epoch" refreshes them.
        let mut epoch: u64 = 1;
        let mut len = std::mem::size_of::<u64>();
        let ptr = &mut epoch as *mut u64 as *mut c_void;
        // SAFETY: "epoch" is a documented u64 control; old and new values point at a live u64
        // whose size is passed with each.
        if unsafe { mallctl(c"epoch".as_ptr(), ptr, &mut len, ptr, len) } != 0 {
            return None;
        }
        let read = |name: &CStr| -> Option<u64> {
            let mut value: usize = 0;
            let mut len = std::mem::size_of::<usize>();
            // SAFETY: the stats.* controls read are documented size_t values; the old value
            // points at a live usize whose size is passed; nothing is written.
            let rc = unsafe {
                mallctl(
                    name.as_ptr(),
                    &mut value as *mut usize as *mut c_void,
                    &mut len,
                    std::ptr::null_mut(),
                    0,
                )
            };
            (rc == 0).then_some(value as u64)
        };
        Some(AllocatorStats {
            allocated: read(c"stats.allocated")?,
            active: read(c"stats.active")?,
            resident: read(c"stats.resident")?,
            mapped: read(c"stats.mapped")?,
            retained: read(c"stats.retained")?,
        })
    }
    #[cfg(not(feature = "jemalloc"))]
    {
        None
    }
}

/// The resident memory of this process (`VmRSS`), in bytes; `None` off Linux.
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Resident memory of this process by kind, in bytes: anonymous (heap, arenas, the KV cache
/// pool), file-backed (code and libraries) and shared (`RssAnon`, `RssFile`, `RssShmem` of
/// `/proc/self/status`); `None` off Linux. A long run's growth is in the first kind; the second
/// only follows which code has run.
pub fn resident_by_kind() -> Option<[(&'static str, u64); 3]> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let read = |key: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    Some([
        ("anon", read("RssAnon:")?),
        ("file", read("RssFile:")?),
        ("shmem", read("RssShmem:")?),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn resident_memory_by_kind_adds_up_to_the_whole() {
        let kinds = resident_by_kind().unwrap();
        let sum: u64 = kinds.iter().map(|(_, b)| b).sum();
        let whole = resident_bytes().unwrap();
        // Two reads of a live process: within a few MiB of each other.
        assert!(sum.abs_diff(whole) < 8 << 20, "{kinds:?} against {whole}");
        assert!(kinds[0].1 > 0 && kinds[1].1 > 0, "{kinds:?}");
    }

    /// The figures are the whole process's, and the test harness runs other tests on other
    /// threads meanwhile: the two tests here that move tens of MiB take turns.
    #[allow(dead_code)] // only used where one of the two tests is built
    static LARGE_BLOCKS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    #[cfg(feature = "jemalloc")]
    fn the_allocator_counts_what_is_live_and_what_it_holds() {
        let _turn = LARGE_BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
        // Another test may free or allocate a large block between two reads (CI saw it once);
        // stats that never moved, or moved by less than the block, fail every try.
        let mut last = String::new();
        for _ in 0..5 {
            let before = allocator_stats().unwrap();
            // 64 MiB live, touched so that its pages are resident.
            let block = vec![1u8; 64 << 20];
            let during = allocator_stats().unwrap();
            std::hint::black_box(&block);
            drop(block);
            let after = allocator_stats().unwrap();
            assert!(during.active >= during.allocated, "{during:?}");
            assert!(during.resident >= during.active, "{during:?}");
            assert!(during.mapped >= during.active, "{during:?}");
            if during.allocated >= before.allocated + (60 << 20)
                && after.allocated + (60 << 20) <= during.allocated
            {
                return;
            }
            last = format!("{before:?} -> {during:?} -> {after:?}");
        }
        panic!("a 64 MiB block was not counted in five tries; the last: {last}");
    }

    #[test]
    #[cfg(all(target_os = "linux", any(feature = "jemalloc", target_env = "gnu")))]
    fn freed_memory_goes_back_to_the_system() {
        let _turn = LARGE_BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
        // Many mid-sized blocks from several threads (so in several arenas), most of them freed
        // while a few stay, so the free space is not all at the tops where free() trims it.
        let held: Vec<Vec<Box<[u8]>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let mut blocks: Vec<Box<[u8]>> = (0..2_000)
                            .map(|i| vec![(i % 255 + 1) as u8; 24 * 1024].into())
                            .collect();
                        // Keep every 50th block: each pins its neighbourhood of the heap.
                        let kept = blocks.iter().step_by(50).count();
                        let mut out = Vec::with_capacity(kept);
                        for (i, b) in blocks.drain(..).enumerate() {
                            if i % 50 == 0 {
                                out.push(b);
                            }
                        }
                        out
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let before = resident_bytes().unwrap();
        assert!(release_free_memory().is_some());
        let after = resident_bytes().unwrap();
        // About 4 x 2,000 x 24 KiB = 187 MiB was freed; most of it must be gone from RSS.
        assert!(
            before.saturating_sub(after) > 64 << 20,
            "RSS {before} -> {after} bytes"
        );
        assert_eq!(held.iter().map(Vec::len).sum::<usize>(), 160);
    }
}
