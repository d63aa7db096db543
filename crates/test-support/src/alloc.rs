//! A counting global allocator for the decode benchmark: unsafe code lives in this crate only
//! (the workspace forbids it elsewhere).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Counts live heap bytes and live allocations of the whole process.
pub struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static LIVE_ALLOCS: AtomicIsize = AtomicIsize::new(0);

fn grew(bytes: usize, allocs: isize) {
    LIVE_BYTES.fetch_add(bytes as isize, Ordering::Relaxed);
    LIVE_ALLOCS.fetch_add(allocs, Ordering::Relaxed);
}

fn shrank(bytes: usize, allocs: isize) {
    LIVE_BYTES.fetch_sub(bytes as isize, Ordering::Relaxed);
    LIVE_ALLOCS.fetch_sub(allocs, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size(), 1);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size(), 1);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size(), 1);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shrank(layout.size(), 0);
            grew(new_size, 0);
        }
        p
    }
}

/// Live heap bytes and live allocations, when `Counting` is the global allocator.
pub fn live() -> (isize, isize) {
    (
        LIVE_BYTES.load(Ordering::Relaxed),
        LIVE_ALLOCS.load(Ordering::Relaxed),
    )
}
