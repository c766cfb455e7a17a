//! Benchmark suite `cache`: ad-cache hits against a bare `lru::LruCache` behind a `Mutex`, and a cached VJP transform against rebuilding it.
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

use std::convert::Infallible;
use std::hint::black_box;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ad_cache::{Cache, CacheLimits, LinearizeKey, VjpTransform};
use criterion::Criterion;
use lru::LruCache;
use tracegraph_benches::{Row, criterion_mean_ns, emit, emit_time_ratio};
use vecad::VecOp;

const HOT: u64 = 64;

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
        })
    });
    let mut k = 0u64;
    g.bench_function("lru_mutex", |b| {
        b.iter(|| {
            k = (k + 7) % HOT;
            let v = base.lock().unwrap().get(black_box(&k)).cloned();
            black_box(v)
        })
    });
    g.finish();
}

/// One thread's operation sequence: `(key, size of the value built on a miss)`.
fn op_sequence(seed: u64, len: usize) -> Vec<(u64, usize)> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
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
        let v = match hit {
            Some(v) => v,
            None => {
                let v = Arc::new(vec![1u8; size]);
                base.lock().unwrap().put(key, Arc::clone(&v));
                v
            }
        };
        black_box(v);
    };
    // Warm both: the hot set is cached before measuring.
    two_threads(&seqs, 20_000, ours_op);
    two_threads(&seqs, 20_000, base_op);
    let mut g = c.benchmark_group("cache_2threads");
    g.bench_function("ad_cache", |b| {
        b.iter_custom(|iters| two_threads(&seqs, iters, ours_op))
    });
    g.bench_function("lru_mutex", |b| {
        b.iter_custom(|iters| two_threads(&seqs, iters, base_op))
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
        b.iter(|| black_box(vecad::vjp(black_box(&primal), &[0]).expect("transform")))
    });
    g.bench_function("hit", |b| {
        b.iter(|| {
            let key = LinearizeKey::new(Arc::clone(black_box(&primal)), &[0]).expect("slot 0");
            black_box(cache.get(&key).expect("cached"))
        })
    });
    g.bench_function("hit_structural", |b| {
        b.iter(|| {
            let key = LinearizeKey::new(Arc::clone(black_box(&rerecorded)), &[0]).expect("slot 0");
            black_box(cache.get(&key).expect("cached"))
        })
    });
    g.finish();
}

fn main() {
    let mut c = tracegraph_benches::criterion();
    bench_hit(&mut c);
    bench_two_threads(&mut c);
    bench_vjp(&mut c);
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
}
