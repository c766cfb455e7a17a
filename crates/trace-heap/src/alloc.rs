//! The tracking global allocator: the crate's one `unsafe` module, each block with its reason.
//!
//! [`TrackingAlloc`] forwards every call to the allocator it wraps, unchanged, and around the
//! call reads the tracker's state word once (one relaxed load); only when tracking is on does
//! it call the safe recording hooks of `hook.rs`, which never allocate.

// `GlobalAlloc` is an unsafe trait with unsafe methods: implementing it and calling the inner
// allocator's methods is the only unsafe code of this crate, and all of it is here; the
// workspace lints deny `unsafe_code` everywhere else.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};

use crate::hook;

/// A global allocator that wraps another (by default [`System`]) and, while a heap tracker
/// runs ([`crate::start`]), records the allocations made through it. Declare it once in the
/// program's binary:
///
/// ```
/// #[global_allocator]
/// static ALLOC: trace_heap::TrackingAlloc = trace_heap::TrackingAlloc::system();
/// # fn main() {}
/// ```
///
/// or around an allocator the program already has: `TrackingAlloc::new(MyAlloc)`. Until a
/// tracker starts (and whenever none runs, or the session is outside its recorded windows and
/// no tracked allocation is live) each call costs one relaxed atomic load over the inner
/// allocator.
#[derive(Debug, Default, Clone, Copy)]
pub struct TrackingAlloc<A = System> {
    inner: A,
}

impl TrackingAlloc<System> {
    /// The system allocator, tracked.
    pub const fn system() -> TrackingAlloc<System> {
        TrackingAlloc { inner: System }
    }
}

impl<A> TrackingAlloc<A> {
    /// `inner`, tracked.
    pub const fn new(inner: A) -> TrackingAlloc<A> {
        TrackingAlloc { inner }
    }

    /// The wrapped allocator.
    pub const fn inner(&self) -> &A {
        &self.inner
    }
}

// SAFETY: every method passes its arguments to the same method of `inner` unchanged and
// returns what `inner` returned unchanged, so `inner`'s compliance with `GlobalAlloc`'s
// contract (blocks that fit the layout, are not handed out twice, and are released only by
// `dealloc`/`realloc` with their layout) is this allocator's. The hooks called around it are
// safe code that reads the pointer only as an integer (never dereferences it), allocates
// nothing and does not unwind (no panicking operation: atomics, thread-local `Cell`s with
// constant initializers read through `try_with`, and the TSC clock made before recording
// starts).
unsafe impl<A: GlobalAlloc> GlobalAlloc for TrackingAlloc<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract for `layout` (non-zero size); it is
        // forwarded unchanged.
        let p = unsafe { self.inner.alloc(layout) };
        let state = hook::state();
        if state != 0 && !p.is_null() {
            hook::on_alloc(state, p as usize, layout.size());
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`: the caller's layout, forwarded unchanged.
        let p = unsafe { self.inner.alloc_zeroed(layout) };
        let state = hook::state();
        if state != 0 && !p.is_null() {
            hook::on_alloc(state, p as usize, layout.size());
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let state = hook::state();
        if state != 0 {
            // Recorded before the block goes back to `inner`: an allocation another thread
            // receives at this address afterwards is then recorded after this free.
            hook::on_free(state, ptr as usize, layout.size());
        }
        // SAFETY: the caller guarantees `ptr` was allocated by this allocator (so by `inner`,
        // which made every block this allocator returned) with `layout`.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let state = hook::state();
        let freed = state != 0 && hook::on_free(state, ptr as usize, layout.size());
        // SAFETY: the caller guarantees `ptr` is a block of this allocator (hence of `inner`)
        // with `layout`, and that `new_size` is non-zero and does not overflow when rounded
        // up to the alignment; forwarded unchanged.
        let p = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if state != 0 {
            if !p.is_null() {
                hook::on_alloc(state, p as usize, new_size);
            } else if freed {
                // The old block stays valid when a reallocation fails: it was recorded as
                // freed, so it is recorded again (now).
                hook::on_alloc(state, ptr as usize, layout.size());
            }
        }
        p
    }
}
