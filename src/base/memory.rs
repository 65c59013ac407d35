//! Giving back to the system the memory the C allocator holds free.
//!
//! The KV caches ONNX Runtime returns, GStreamer's buffers, the broker's logs and every Rust
//! allocation go through the C allocator (and the decoder's working buffers too under
//! `engine.cpu_arena = "vision"`: `engine/cpu.rs`). glibc's malloc keeps freed memory in
//! per-thread arenas for reuse and returns to the system only what is free at the top of a heap,
//! so with a dozen threads (cameras, questions, ONNX Runtime's pool) resident memory stays well
//! above what is in use: in the 2-hour soak (docs/RELIABILITY.md, "Memory over a long run"),
//! 124.8 MB held in 16 arenas for 77.3 MB in use. `malloc_trim(0)` releases the free pages of
//! every arena (glibc >= 2.8 walks them all, not only the tops); the runtime calls it every
//! `runtime.release_memory_secs` (60 s by default), off the async threads.

use std::time::{Duration, Instant};

/// Returns the allocator's free pages to the system; how long it took, or `None` where the C
/// library has no such call (not glibc).
pub fn release_free_memory() -> Option<Duration> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let started = Instant::now();
        // SAFETY: malloc_trim takes a pad size and only walks the allocator's own state, under
        // the allocator's locks; it is safe to call from any thread at any time.
        unsafe { libc::malloc_trim(0) };
        Some(started.elapsed())
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = Instant::now();
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

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn freed_memory_goes_back_to_the_system() {
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
