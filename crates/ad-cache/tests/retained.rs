//! Reported retained bytes against the heap really freed when the cache is dropped.
//!
//! A counting global allocator in this test binary alone measures what dropping the cache
//! frees: the heap the cache alone kept alive.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use ad_cache::{
    Cache, CacheLimits, LinearizeKey, RetainedBytes, TracedKey, TracedKeyParts, TransformKind,
    VjpTransform,
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

/// A traced root reading `parent`'s output through a parent: `sum(out * x^(ops + 1))`, with
/// its own input key so that every root is a different key.
fn root_reading(parent: &Arc<Graph<VecOp>>, input_key: u64, ops: usize) -> Arc<Graph<VecOp>> {
    let mut b = GraphBuilder::new();
    b.add_parent(Arc::clone(parent));
    let out = ValueRef::Parent {
        parent: ParentId(0),
        value: parent.outputs()[0],
    };
    let x = b.add_input(input_key);
    let (_, mut v) = b.add_op1(VecOp::Mul, &[out, x.into()], Role::Primary);
    for _ in 0..ops {
        v = b
            .add_op1(VecOp::Mul, &[v.into(), x.into()], Role::Primary)
            .1;
    }
    let (_, l) = b.add_op1(VecOp::Sum, &[v.into()], Role::Primary);
    b.set_outputs(&[l]);
    Arc::new(b.build().unwrap())
}

/// `parents` shared parent graphs (a quarter of the byte limit in all) under traced VJP
/// entries, many more than fit: when full, the heap the cache really holds is within 5% of
/// its byte limit, and of what it reports. The caller holds the parents while it inserts and
/// drops them afterwards (the cache then keeps them alive alone).
fn shared_parents_fill_the_limit(parents: usize) {
    let limit: u64 = 4 << 20;
    let probe = Arc::new(vecad::chain_graph(1_000, 0).unwrap());
    let per_op = probe.retained_bytes() / 1_000;
    let ops = usize::try_from(limit / 4 / per_op / parents as u64)
        .unwrap()
        .max(20);
    let shared: Vec<Arc<Graph<VecOp>>> = (0..parents)
        .map(|j| Arc::new(vecad::chain_graph(ops, 100 + j as u64).unwrap()))
        .collect();
    let cache: Cache<TracedKey<VecOp>, VjpTransform<VecOp>> = Cache::with_limits(CacheLimits {
        max_retained_bytes: Some(limit),
        max_entries: std::num::NonZeroUsize::new(1 << 20).unwrap(),
    });
    let mut i = 0u64;
    while cache.stats().evictions < 200 {
        let parent = &shared[(i as usize) % parents];
        let root = root_reading(parent, 1_000 + i, 8 + (i as usize % 5));
        let key = TracedKey::new(TracedKeyParts {
            kind: TransformKind::Vjp,
            roots: vec![Arc::clone(&root)],
            output_root: 0,
            output: root.outputs()[0],
            wrt: 1_000 + i,
            aliases: vec![],
        })
        .unwrap();
        cache
            .get_or_insert_with(key, || vecad::vjp(&root, &[0]))
            .unwrap();
        i += 1;
        assert!(i < 100_000, "the cache never filled");
    }
    drop(shared);
    drop(probe);
    let s = cache.stats();
    let entries = cache.len();
    let freed = freed_by_dropping(cache);
    let held = freed as f64 / limit as f64;
    let reported = freed as f64 / s.retained_bytes as f64;
    eprintln!(
        "{parents} shared parents of {ops} ops: {entries} entries, {i} inserted, reported \
         {} B, freed {freed} B, held/limit {held:.3}, freed/reported {reported:.3}",
        s.retained_bytes
    );
    assert!(s.retained_bytes <= limit && s.peak_retained_bytes <= limit);
    assert!(
        (0.95..=1.05).contains(&held),
        "{parents} shared parents: the cache held {freed} B against a {limit} B limit ({held:.3})"
    );
    assert!(
        (0.95..=1.05).contains(&reported),
        "{parents} shared parents: freed {freed} B, reported {} B",
        s.retained_bytes
    );
}

#[test]
fn one_shared_parent_is_charged_once() {
    shared_parents_fill_the_limit(1);
}

#[test]
fn twelve_shared_parents_are_charged_once_each() {
    shared_parents_fill_the_limit(12);
}

#[test]
fn a_hundred_shared_parents_are_charged_once_each() {
    shared_parents_fill_the_limit(100);
}

/// Fills a cache with a 4 MiB byte limit through `fill` (which drops every `Arc` it made
/// once it has inserted), then checks the heap really held (what dropping the cache frees)
/// against the limit: within 0.95–1.05.
fn arc_fields_fill_the_limit(what: &str, fill: impl FnOnce(&Cache<u64, (Arc<Vec<u8>>, Vec<u8>)>)) {
    let limit: u64 = 4 << 20;
    let cache: Cache<u64, (Arc<Vec<u8>>, Vec<u8>)> = Cache::with_limits(CacheLimits {
        max_entries: std::num::NonZeroUsize::new(100_000).unwrap(),
        max_retained_bytes: Some(limit),
    });
    fill(&cache);
    let s = cache.stats();
    assert!(s.evictions > 0, "{what}: the limit was reached");
    assert!(s.retained_bytes <= limit && s.peak_retained_bytes <= limit);
    let entries = cache.len();
    let freed = freed_by_dropping(cache);
    let held = freed as f64 / limit as f64;
    eprintln!("{what}: {entries} entries, freed {freed} B, held/limit {held:.3}");
    assert!(
        (0.95..=1.05).contains(&held),
        "{what}: the cache held {freed} B against a {limit} B limit ({held:.3})"
    );
}

/// One shared 1 MiB table that every entry's value holds; the caller holds it while it
/// inserts and drops it afterwards.
#[test]
fn a_shared_table_the_caller_drops_after_insert_is_charged() {
    arc_fields_fill_the_limit("shared table", |cache| {
        let table = Arc::new(vec![1u8; 1 << 20]);
        for i in 0..400u64 {
            cache.insert(i, (Arc::clone(&table), vec![2u8; 16 << 10]));
        }
        drop(table);
    });
}

/// A training loop: each step makes new parameters (256 KiB) that the step's four cached
/// transforms hold, and drops them when the step ends.
#[test]
fn a_training_loop_of_arc_parameters_is_charged() {
    arc_fields_fill_the_limit("training loop", |cache| {
        for step in 0..80u64 {
            let params = Arc::new(vec![step as u8; 256 << 10]);
            for j in 0..4 {
                cache.insert(step * 4 + j, (Arc::clone(&params), vec![3u8; 8 << 10]));
            }
            drop(params);
        }
    });
}
