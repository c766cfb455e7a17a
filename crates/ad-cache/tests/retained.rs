//! Reported retained bytes against the heap really freed when the cache is dropped (a counting global allocator in this test binary alone).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use ad_cache::{
    Cache, CacheLimits, LinearizeKey, TracedKey, TracedKeyParts, TransformKind, VjpTransform,
};
use graph_core::{Graph, GraphBuilder, ParentId, Role, ValueRef};
use vecad::VecOp;

/// Net bytes released by the current thread while counting is on.
struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static FREED: Cell<i64> = const { Cell::new(0) };
}

fn note(delta: i64) {
    // `try_with`: thread-locals may be gone while a thread shuts down.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = FREED.try_with(|n| n.set(n.get() + delta));
        }
    });
}

fn size(layout: Layout) -> i64 {
    i64::try_from(layout.size()).unwrap_or(i64::MAX)
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counter only reads
// and writes const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(-size(layout));
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(-size(layout));
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(size(layout) - i64::try_from(new_size).unwrap_or(i64::MAX));
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(size(layout));
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Net heap bytes released on this thread by dropping `x`.
fn freed_by_dropping<T>(x: T) -> i64 {
    FREED.with(|n| n.set(0));
    COUNTING.with(|on| on.set(true));
    drop(x);
    COUNTING.with(|on| on.set(false));
    FREED.with(Cell::get)
}

/// Checks that dropping `cache` frees its reported retained bytes, within ±10%.
fn check_freed<K: ad_cache::CacheKey, V>(what: &str, cache: Cache<K, V>) {
    let reported = cache.stats().retained_bytes;
    let entries = cache.len();
    let freed = freed_by_dropping(cache);
    let ratio = freed as f64 / reported as f64;
    eprintln!(
        "{what}: {entries} entries, reported {reported} B, freed {freed} B, ratio {ratio:.3}"
    );
    assert!(entries > 1, "{what}: the loop cached several entries");
    assert!(
        (0.9..=1.1).contains(&ratio),
        "{what}: dropping the cache freed {freed} B, it reported {reported} B (ratio {ratio:.3})"
    );
}

/// Programs of different sizes, as an AD engine re-records them every step.
fn programs() -> Vec<Graph<VecOp>> {
    [(2_000, 1), (500, 2), (4_000, 3), (1_000, 4)]
        .into_iter()
        .map(|(ops, seed)| vecad::chain_graph(ops, seed).unwrap())
        .collect()
}

#[test]
fn an_eager_loop_frees_what_it_reported() {
    let programs = programs();
    let cache: Cache<LinearizeKey<VecOp>, VjpTransform<VecOp>> = Cache::new();
    let (x, y) = ([0.1, -0.4], [0.5, 0.2]);
    for _step in 0..5 {
        for program in &programs {
            // Recorded afresh each step: equal structure, a new graph the caller drops.
            let recorded = Arc::new(program.clone());
            let key = LinearizeKey::new(Arc::clone(&recorded), &[0]).unwrap();
            let t = cache
                .get_or_insert_with(key, || vecad::vjp(&recorded, &[0]))
                .unwrap();
            let grad = vecad::eval_vjp(&recorded, &t, &[&x, &y], &[&[1.0]]).unwrap();
            assert_eq!(grad.len(), 2);
        }
    }
    let s = cache.stats();
    assert_eq!((s.misses, s.hits), (4, 16));
    check_freed("eager", cache);
}

/// A loss graph reading `forward`'s output through a parent: `sum(out * out)`.
fn loss_of(forward: &Arc<Graph<VecOp>>) -> Arc<Graph<VecOp>> {
    let mut b = GraphBuilder::new();
    b.add_parent(Arc::clone(forward));
    let out = ValueRef::Parent {
        parent: ParentId(0),
        value: forward.outputs()[0],
    };
    let x = b.add_input(9);
    let (_, m) = b.add_op1(VecOp::Mul, &[out, x.into()], Role::Primary);
    let (_, l) = b.add_op1(VecOp::Sum, &[m.into()], Role::Primary);
    b.set_outputs(&[l]);
    Arc::new(b.build().unwrap())
}

#[test]
fn a_traced_loop_frees_what_it_reported() {
    let programs = programs();
    let cache: Cache<TracedKey<VecOp>, VjpTransform<VecOp>> = Cache::with_limits(CacheLimits {
        max_retained_bytes: None,
        ..CacheLimits::default()
    });
    for step in 0..4u64 {
        for program in &programs {
            // Two roots recorded this step, the second reading the first through a parent.
            let forward = Arc::new(program.clone());
            let loss = loss_of(&forward);
            let key = TracedKey::new(TracedKeyParts {
                kind: TransformKind::Vjp,
                roots: vec![Arc::clone(&forward), Arc::clone(&loss)],
                output_root: 0,
                output: forward.outputs()[0],
                wrt: 0,
                // The same alias map each step, in a different order.
                aliases: if step % 2 == 0 {
                    vec![(1, 0), (2, 0)]
                } else {
                    vec![(2, 0), (1, 0)]
                },
            })
            .unwrap();
            cache
                .get_or_insert_with(key, || vecad::vjp(&forward, &[0]))
                .unwrap();
        }
    }
    let s = cache.stats();
    assert_eq!((s.misses, s.hits), (4, 12));
    check_freed("traced", cache);
}
