//! Benchmark suite `cache`: ad-cache against a bare `lru::LruCache` behind a `Mutex`, and more.
//!
//! Cache hits against the bare LRU, a cached VJP transform against rebuilding it, and the
//! heap a full cache really holds against its byte limit.
//!
//! Rows:
//! - `cache/hit_1thread ns_per_hit`: `Cache::get` hitting one of 64 cached keys (fingerprint,
//!   lock, LRU promotion, exact key confirmation, statistics, `Arc` clone), against the baseline
//!   `lru_mutex`: `lru::LruCache<u64, Arc<_>>` behind `std::sync::Mutex`, `get` + `Arc` clone.
//!   Target: ratio ≤ 1.3.
//! - `cache/2threads_90pct_hits ns_per_op`: two threads, each running a fixed sequence of
//!   lookups, 90 % on a hot set of 64 keys and 10 % on cold keys; a miss builds a value of
//!   mixed size (64 B to 64 KiB) and inserts it. Ours: `get_or_insert_with` under a 4 MiB
//!   byte budget; baseline: `get`, then `put` on a miss, entry limit only (no byte accounting).
//!   Wall time divided by the operations of both threads.
//! - `cache/vjp_10k ns_per_request`: a VJP request for a 10k-operation graph (`vecad`):
//!   **ours = cache hit** (building the `LinearizeKey`, i.e. the key's fingerprint, then
//!   `get`, confirmed by pointer equality), **baseline = rebuilding** the transform
//!   (`linearize` + `transpose`). `ratio` = hit / rebuild (target ≤ 0.01, i.e. ≥ 100× faster);
//!   `cache/vjp_10k speedup_rebuild_over_hit` gives rebuild / hit directly.
//! - `cache/vjp_10k_structural ns_per_request`: the same hit when the caller re-recorded the
//!   graph (a different `Arc`): confirmation is graph-core's linear `structural_eq`, against
//!   the same rebuild baseline.
//! - `cache/vjp_10k_structural_2threads hits_per_s_ratio`: aggregate hits/s of two threads
//!   each hitting with its own re-recorded graph, over one thread's (target ≥ 1.7: the
//!   exact comparison runs outside the cache's lock). Needs two idle cores.
//! - `cache/retained_eager reported_over_freed`: an eager loop (4 programs of 500 to 4,000
//!   operations re-recorded for 5 steps, VJP transforms cached) reports `retained_bytes`; a
//!   counting global allocator measures the heap freed by dropping the cache. Target 0.9–1.1.
//!   (The allocator adds one relaxed atomic load per allocation to every row of this suite,
//!   ours and baselines alike.)
//! - `cache/retained_shared_parents heap_held_bytes (N shared parents)`: traced VJP entries
//!   whose roots read 1, 12 or 100 shared parent graphs (a quarter of the 4 MiB byte limit in
//!   all; the caller holds them while inserting, then drops them) fill the cache well past
//!   its limit; the counting allocator measures the heap freed by dropping it, against the
//!   byte limit (`ratio` = held / limit, target 0.95–1.05).

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::convert::Infallible;
use std::hint::black_box;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ad_cache::{
    Cache, CacheLimits, LinearizeKey, RetainedBytes, TracedKey, TracedKeyParts, TransformKind,
    VjpTransform,
};
use criterion::Criterion;
use lru::LruCache;
use rand_xoshiro::SplitMix64;
use rand_xoshiro::rand_core::{Rng, SeedableRng};
use tracegraph_benches::{Row, criterion_mean_ns, emit, emit_time_ratio};
use vecad::VecOp;

const HOT: u64 = 64;

/// Counts net bytes released while `COUNTING` is on (one thread measures at a time).
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static FREED: AtomicI64 = AtomicI64::new(0);

fn note(delta: i64) {
    if COUNTING.load(Ordering::Relaxed) {
        FREED.fetch_add(delta, Ordering::Relaxed);
    }
}

fn size(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counter touches
// only static atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(-size(layout.size()));
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(-size(layout.size()));
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(size(layout.size()) - size(new_size));
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(size(layout.size()));
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn bench_hit(c: &mut Criterion) {
    let ours: Cache<u64, Vec<u8>> = Cache::new();
    let base: Mutex<LruCache<u64, Arc<Vec<u8>>>> =
        Mutex::new(LruCache::new(NonZeroUsize::new(128).unwrap()));
    for k in 0..HOT {
        ours.insert(k, vec![k as u8; 256]);
        base.lock().unwrap().put(k, Arc::new(vec![k as u8; 256]));
    }
    let mut g = c.benchmark_group("cache_hit");
    let mut k = 0u64;
    g.bench_function("ad_cache", |b| {
        b.iter(|| {
            k = (k + 7) % HOT;
            black_box(ours.get(black_box(&k)))
        });
    });
    let mut k = 0u64;
    g.bench_function("lru_mutex", |b| {
        b.iter(|| {
            k = (k + 7) % HOT;
            let v = base.lock().unwrap().get(black_box(&k)).cloned();
            black_box(v)
        });
    });
    g.finish();
}

/// One thread's operation sequence: `(key, size of the value built on a miss)`.
fn op_sequence(seed: u64, len: usize) -> Vec<(u64, usize)> {
    let mut rng = SplitMix64::seed_from_u64(seed);
    let mut next = move || rng.next_u64();
    (0..len)
        .map(|_| {
            let r = next();
            if r % 10 == 0 {
                let key = 1_000 + (r >> 8) % 1_000_000;
                (key, 1024 + ((r >> 40) as usize % (63 * 1024)))
            } else {
                let key = (r >> 8) % HOT;
                (key, 64 + (key as usize * 61) % 4000)
            }
        })
        .collect()
}

/// Runs `op` over each thread's sequence `iters` times in all, on two threads at once.
fn two_threads<F: Fn(u64, usize) + Sync>(
    seqs: &[Vec<(u64, usize)>; 2],
    iters: u64,
    op: F,
) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for seq in seqs {
            let op = &op;
            s.spawn(move || {
                for i in 0..iters as usize {
                    let (key, size) = seq[i % seq.len()];
                    op(key, size);
                }
            });
        }
    });
    start.elapsed()
}

fn bench_two_threads(c: &mut Criterion) {
    let seqs = [op_sequence(11, 1 << 16), op_sequence(23, 1 << 16)];
    let ours: Cache<u64, Vec<u8>> = Cache::with_limits(CacheLimits {
        max_entries: NonZeroUsize::new(4096).unwrap(),
        max_retained_bytes: Some(4 << 20),
    });
    let base: Mutex<LruCache<u64, Arc<Vec<u8>>>> =
        Mutex::new(LruCache::new(NonZeroUsize::new(256).unwrap()));
    let ours_op = |key: u64, size: usize| {
        let v = ours.get_or_insert_with(key, || Ok::<_, Infallible>(vec![1u8; size]));
        black_box(v.ok());
    };
    let base_op = |key: u64, size: usize| {
        let hit = base.lock().unwrap().get(&key).cloned();
        let v = if let Some(v) = hit {
            v
        } else {
            let v = Arc::new(vec![1u8; size]);
            base.lock().unwrap().put(key, Arc::clone(&v));
            v
        };
        black_box(v);
    };
    // Warm both: the hot set is cached before measuring.
    two_threads(&seqs, 20_000, ours_op);
    two_threads(&seqs, 20_000, base_op);
    let mut g = c.benchmark_group("cache_2threads");
    g.bench_function("ad_cache", |b| {
        b.iter_custom(|iters| two_threads(&seqs, iters, ours_op));
    });
    g.bench_function("lru_mutex", |b| {
        b.iter_custom(|iters| two_threads(&seqs, iters, base_op));
    });
    g.finish();
    let s = ours.stats();
    eprintln!(
        "cache_2threads: ad_cache hits {} misses {} evictions {} rejected {} retained {} B",
        s.hits, s.misses, s.evictions, s.rejected, s.retained_bytes
    );
}

fn bench_vjp(c: &mut Criterion) {
    let primal = Arc::new(vecad::chain_graph(10_000, 42).expect("10k-op graph"));
    let rerecorded = Arc::new((*primal).clone());
    let cache: Cache<LinearizeKey<VecOp>, VjpTransform<VecOp>> = Cache::new();
    let key = LinearizeKey::new(Arc::clone(&primal), &[0]).expect("slot 0");
    cache
        .get_or_insert_with(key, || vecad::vjp(&primal, &[0]))
        .expect("transform");
    let mut g = c.benchmark_group("cache_vjp_10k");
    g.bench_function("rebuild", |b| {
        b.iter(|| black_box(vecad::vjp(black_box(&primal), &[0]).expect("transform")));
    });
    g.bench_function("hit", |b| {
        b.iter(|| {
            let key = LinearizeKey::new(Arc::clone(black_box(&primal)), &[0]).expect("slot 0");
            black_box(cache.get(&key).expect("cached"))
        });
    });
    g.bench_function("hit_structural", |b| {
        b.iter(|| {
            let key = LinearizeKey::new(Arc::clone(black_box(&rerecorded)), &[0]).expect("slot 0");
            black_box(cache.get(&key).expect("cached"))
        });
    });
    g.finish();
}

/// Hits with re-recorded graphs (structural confirmation) from one thread, then from two at
/// once, each with its own recording: `iters` hits per thread.
fn bench_parallel_structural_hits(c: &mut Criterion) {
    let primal = Arc::new(vecad::chain_graph(10_000, 42).expect("10k-op graph"));
    let cache: Cache<LinearizeKey<VecOp>, VjpTransform<VecOp>> = Cache::new();
    let key = LinearizeKey::new(Arc::clone(&primal), &[0]).expect("slot 0");
    cache
        .get_or_insert_with(key, || vecad::vjp(&primal, &[0]))
        .expect("transform");
    let recordings = [Arc::new((*primal).clone()), Arc::new((*primal).clone())];
    let hits = |g: &Arc<graph_core::Graph<VecOp>>, iters: u64| {
        for _ in 0..iters {
            let key = LinearizeKey::new(Arc::clone(g), &[0]).expect("slot 0");
            black_box(cache.get(&key).expect("cached"));
        }
    };
    let mut g = c.benchmark_group("cache_structural_hits");
    g.bench_function("1thread", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            hits(&recordings[0], iters);
            start.elapsed()
        });
    });
    g.bench_function("2threads", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            std::thread::scope(|s| {
                for r in &recordings {
                    let hits = &hits;
                    s.spawn(move || hits(r, iters));
                }
            });
            start.elapsed()
        });
    });
    g.finish();
}

/// The eager loop of `tests/retained.rs`: returns (reported retained bytes, bytes freed by
/// dropping the cache).
fn retained_accuracy() -> (u64, i64) {
    let programs: Vec<graph_core::Graph<VecOp>> = [(2_000, 1), (500, 2), (4_000, 3), (1_000, 4)]
        .into_iter()
        .map(|(ops, seed)| vecad::chain_graph(ops, seed).expect("program"))
        .collect();
    let cache: Cache<LinearizeKey<VecOp>, VjpTransform<VecOp>> = Cache::new();
    for _step in 0..5 {
        for program in &programs {
            let recorded = Arc::new(program.clone());
            let key = LinearizeKey::new(Arc::clone(&recorded), &[0]).expect("slot 0");
            black_box(
                cache
                    .get_or_insert_with(key, || vecad::vjp(&recorded, &[0]))
                    .expect("transform"),
            );
        }
    }
    let reported = cache.retained_bytes();
    FREED.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    drop(cache);
    COUNTING.store(false, Ordering::Relaxed);
    (reported, FREED.load(Ordering::Relaxed))
}

/// A traced root reading `parent`'s output through a parent, with its own input key.
fn root_reading(
    parent: &Arc<graph_core::Graph<VecOp>>,
    input_key: u64,
    ops: usize,
) -> Arc<graph_core::Graph<VecOp>> {
    use graph_core::{GraphBuilder, ParentId, Role, ValueRef};
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
    Arc::new(b.build().expect("root"))
}

/// `parents` shared parent graphs under traced VJP entries, inserted until 200 evictions:
/// returns (the byte limit, the heap freed by dropping the full cache).
fn retained_shared_parents(parents: usize) -> (u64, i64) {
    let limit: u64 = 4 << 20;
    let per_op = vecad::chain_graph(1_000, 0)
        .expect("probe")
        .retained_bytes()
        / 1_000;
    let ops = usize::try_from(limit / 4 / per_op / parents as u64)
        .unwrap_or(usize::MAX)
        .max(20);
    let shared: Vec<Arc<graph_core::Graph<VecOp>>> = (0..parents)
        .map(|j| Arc::new(vecad::chain_graph(ops, 100 + j as u64).expect("parent")))
        .collect();
    let cache: Cache<TracedKey<VecOp>, VjpTransform<VecOp>> = Cache::with_limits(CacheLimits {
        max_retained_bytes: Some(limit),
        max_entries: NonZeroUsize::new(1 << 20).expect("nonzero"),
    });
    let mut i = 0u64;
    while cache.stats().evictions < 200 && i < 100_000 {
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
        .expect("key");
        black_box(
            cache
                .get_or_insert_with(key, || vecad::vjp(&root, &[0]))
                .expect("transform"),
        );
        i += 1;
    }
    drop(shared);
    FREED.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    drop(cache);
    COUNTING.store(false, Ordering::Relaxed);
    (limit, FREED.load(Ordering::Relaxed))
}

fn main() {
    let mut c = tracegraph_benches::criterion();
    bench_hit(&mut c);
    bench_two_threads(&mut c);
    bench_vjp(&mut c);
    bench_parallel_structural_hits(&mut c);
    c.final_summary();

    emit_time_ratio(
        "cache/hit_1thread",
        "ns_per_hit",
        "cache_hit/ad_cache",
        "lru::LruCache behind std::sync::Mutex",
        "cache_hit/lru_mutex",
        1.0,
    );
    emit_time_ratio(
        "cache/2threads_90pct_hits",
        "ns_per_op",
        "cache_2threads/ad_cache",
        "lru::LruCache behind std::sync::Mutex (get, put on miss; no byte budget)",
        "cache_2threads/lru_mutex",
        2.0,
    );
    match (
        criterion_mean_ns("cache_vjp_10k/hit"),
        criterion_mean_ns("cache_vjp_10k/rebuild"),
        criterion_mean_ns("cache_vjp_10k/hit_structural"),
    ) {
        (Some(hit), Some(rebuild), structural) => {
            emit(
                Row::new(
                    "cache/vjp_10k",
                    "ns_per_request (ours = cache hit incl. key fingerprint)",
                    hit,
                    "ns",
                )
                .vs("rebuild VJP transform (linearize + transpose)", rebuild),
            );
            emit(Row::new(
                "cache/vjp_10k",
                "speedup_rebuild_over_hit",
                rebuild / hit,
                "x",
            ));
            if let Some(s) = structural {
                emit(
                    Row::new(
                        "cache/vjp_10k_structural",
                        "ns_per_request (ours = hit on a re-recorded graph, structural_eq)",
                        s,
                        "ns",
                    )
                    .vs("rebuild VJP transform (linearize + transpose)", rebuild),
                );
            }
        }
        _ => eprintln!("bench-row: cache/vjp_10k skipped (did not run)"),
    }
    match (
        criterion_mean_ns("cache_structural_hits/1thread"),
        criterion_mean_ns("cache_structural_hits/2threads"),
    ) {
        // Each 2-thread iteration is two hits, one per thread.
        (Some(one), Some(two)) => emit(
            Row::new(
                "cache/vjp_10k_structural_2threads",
                "hits_per_s (ours = 2 threads, each its own re-recorded graph)",
                2.0e9 / two,
                "1/s",
            )
            .vs("the same hits from 1 thread", 1.0e9 / one),
        ),
        _ => eprintln!("bench-row: cache/vjp_10k_structural_2threads skipped (did not run)"),
    }
    let (reported, freed) = retained_accuracy();
    emit(
        Row::new(
            "cache/retained_eager",
            "reported_retained_bytes",
            reported as f64,
            "B",
        )
        .vs(
            "heap freed by dropping the cache (counting allocator)",
            freed as f64,
        ),
    );
    for parents in [1usize, 12, 100] {
        let (limit, held) = retained_shared_parents(parents);
        emit(
            Row::new(
                "cache/retained_shared_parents",
                &format!("heap_held_bytes ({parents} shared parents)"),
                held as f64,
                "B",
            )
            .vs("byte limit", limit as f64),
        );
    }
}
