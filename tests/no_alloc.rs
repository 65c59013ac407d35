//! Pushing frames allocates nothing once the pruner is built (every mode, CPU path).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Frame, Rng};
use edgevlm::prune::{PruneMode, PruneParams, Pruner};

/// System allocator that counts allocations made by the current test thread.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(|c| c.get()) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarding the caller's layout to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn pushing_frames_allocates_nothing_after_construction() {
    let mut rng = Rng(1);
    let frames: Vec<Frame> = (0..8)
        .map(|_| Frame::random(336, 196, &mut rng).padded(8, 0))
        .collect();
    for mode in [PruneMode::Reference, PruneMode::Adaptive, PruneMode::Off] {
        for threshold in [0.1, 0.5] {
            let params = PruneParams {
                mode,
                threshold,
                ..PruneParams::default()
            };
            let mut p = Pruner::new(336, 196, params).unwrap();
            COUNTING.with(|c| c.set(true));
            for (t, f) in frames.iter().enumerate() {
                if t == 4 {
                    p.reset();
                }
                let d = p.push(&f.data, f.stride).unwrap();
                std::hint::black_box(d.kept());
            }
            COUNTING.with(|c| c.set(false));
            assert_eq!(
                ALLOCATIONS.load(Ordering::Relaxed),
                0,
                "{mode} at {threshold}"
            );
        }
    }
}
