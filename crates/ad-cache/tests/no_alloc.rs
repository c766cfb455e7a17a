//! A cache hit allocates nothing: counted by a global allocator in this test binary alone.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use std::sync::Arc;

use ad_cache::{Cache, LinearizeKey, VjpTransform};
use vecad::VecOp;

/// Counts allocations made by the current thread while counting is on.
struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    // `try_with`: thread-locals may be gone while a thread shuts down.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counter only reads
// and writes const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by `f` on this thread.
fn allocations_in<R>(f: impl FnOnce() -> R) -> (u64, R) {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|on| on.set(true));
    let r = f();
    COUNTING.with(|on| on.set(false));
    (ALLOCATIONS.with(Cell::get), r)
}

#[test]
fn the_counter_sees_allocations() {
    let (n, v) = allocations_in(|| vec![1u8; 64]);
    assert_eq!(v.len(), 64);
    assert!(n >= 1, "the counting allocator must count");
}

#[test]
fn a_hit_allocates_nothing() {
    let cache: Cache<u64, Vec<f64>> = Cache::new();
    for k in 0..64u64 {
        cache.insert(k, vec![k as f64; 16]);
    }
    // Warm up: first use of the lock and thread-locals.
    assert!(cache.get(&3).is_some());
    let (n, sum) = allocations_in(|| {
        let mut sum = 0.0;
        for round in 0..100u64 {
            let k = round % 64;
            if let Some(v) = cache.get(&k) {
                sum += v[0];
            }
            if let Ok(v) = cache.get_or_insert_with(k, || Ok::<_, ()>(Vec::new())) {
                sum += v[1];
            }
        }
        sum
    });
    assert!(sum > 0.0);
    assert_eq!(n, 0, "hits allocated {n} times");
    assert_eq!(cache.stats().hits, 201);
    // A miss that computes does allocate: the counter is live in this test too.
    let (n, _) = allocations_in(|| cache.get_or_insert_with(1000, || Ok::<_, ()>(vec![0.0; 8])));
    assert!(n > 0);
}

#[test]
fn a_graph_key_hit_allocates_nothing() {
    let primal = Arc::new(vecad::chain_graph(200, 11).unwrap());
    let cache: Cache<LinearizeKey<VecOp>, VjpTransform<VecOp>> = Cache::new();
    let key = LinearizeKey::new(Arc::clone(&primal), &[0]).unwrap();
    cache.insert(key.clone(), vecad::vjp(&primal, &[0]).unwrap());
    assert!(cache.get(&key).is_some());
    let (n, hits) = allocations_in(|| (0..50).filter(|_| cache.get(&key).is_some()).count());
    assert_eq!(hits, 50);
    assert_eq!(n, 0, "graph-key hits allocated {n} times");
}
