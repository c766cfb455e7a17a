//! Threads: no lost statistic updates, and single flight runs each computation once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use ad_cache::{Cache, CacheError, CacheLimits};
use rand_xoshiro::SplitMix64;
use rand_xoshiro::rand_core::{Rng, SeedableRng};

use crate::common::Blob;

#[test]
fn counters_lose_no_update_under_contention() {
    for threads in [2usize, 4, 8] {
        let cache: Arc<Cache<u64, Blob>> = Arc::new(Cache::with_limits(CacheLimits {
            max_entries: std::num::NonZeroUsize::new(16).unwrap(),
            max_retained_bytes: Some(16 * 1024),
        }));
        let per_thread = 2_000u64;
        let computed = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let cache = Arc::clone(&cache);
                let computed = Arc::clone(&computed);
                std::thread::spawn(move || {
                    let mut lookups = 0u64;
                    let mut rng = SplitMix64::seed_from_u64(t);
                    for i in 0..per_thread {
                        let x = rng.next_u64();
                        let key = x % 40;
                        if i % 3 == 0 {
                            cache.insert(
                                key,
                                Blob {
                                    id: key,
                                    weight: x % 900,
                                },
                            );
                        } else {
                            let v = cache.get_or_insert_with(key, || {
                                computed.fetch_add(1, Ordering::Relaxed);
                                Ok::<_, ()>(Blob {
                                    id: key,
                                    weight: x % 900,
                                })
                            });
                            assert_eq!(v.unwrap().id, key);
                            lookups += 1;
                        }
                    }
                    lookups
                })
            })
            .collect();
        let lookups: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        let s = cache.stats();
        assert_eq!(s.hits + s.misses, lookups, "{threads} threads");
        let inserts = threads as u64 * per_thread.div_ceil(3);
        assert!(computed.load(Ordering::Relaxed) <= s.misses);
        assert_eq!(
            s.inserts + s.rejected,
            inserts + computed.load(Ordering::Relaxed),
            "{threads} threads"
        );
        assert!(s.entries <= 16 && s.retained_bytes <= 16 * 1024);
        let kept: u64 = cache.entries().iter().map(|e| e.1).sum();
        assert_eq!(kept, s.retained_bytes);
    }
}

#[test]
fn single_flight_runs_each_computation_once() {
    for threads in [2usize, 5, 8] {
        let cache: Arc<Cache<u64, Blob>> = Arc::new(Cache::new());
        let runs: Arc<Mutex<HashMap<u64, u64>>> = Arc::default();
        let barrier = Arc::new(Barrier::new(threads));
        let keys = 20u64;
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (cache, runs, barrier) =
                    (Arc::clone(&cache), Arc::clone(&runs), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    for key in 0..keys {
                        barrier.wait();
                        let v = cache
                            .get_or_insert_with(key, || {
                                *runs.lock().unwrap().entry(key).or_default() += 1;
                                // Long enough for the other threads to arrive and wait.
                                std::thread::sleep(std::time::Duration::from_millis(2));
                                Ok::<_, ()>(Blob { id: key, weight: 0 })
                            })
                            .unwrap();
                        got.push(v);
                    }
                    got
                })
            })
            .collect();
        let results: Vec<Vec<Arc<Blob>>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let runs = runs.lock().unwrap();
        for key in 0..keys {
            assert_eq!(
                runs.get(&key),
                Some(&1),
                "key {key} computed once ({threads} threads)"
            );
            let first = &results[0][key as usize];
            for r in &results {
                assert!(
                    Arc::ptr_eq(first, &r[key as usize]),
                    "every thread got the same Arc"
                );
            }
        }
        let s = cache.stats();
        assert_eq!(s.hits + s.misses, threads as u64 * keys);
        assert_eq!(s.inserts, keys);
    }
}

#[test]
fn an_error_reaches_every_waiter() {
    let threads = 6;
    let cache: Arc<Cache<u64, Blob>> = Arc::new(Cache::new());
    let runs = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (cache, runs, barrier) =
                (Arc::clone(&cache), Arc::clone(&runs), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let waiting = Arc::clone(&cache);
                cache.get_or_insert_with(3, || {
                    runs.fetch_add(1, Ordering::SeqCst);
                    // Fails only once every caller has asked (each call counts its miss
                    // before it waits on the flight): all of them wait on this computation,
                    // however the threads were scheduled.
                    while waiting.stats().misses < threads as u64 {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    Err::<Blob, _>(format!("failed #{}", runs.load(Ordering::SeqCst)))
                })
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let runs = runs.load(Ordering::SeqCst);
    // One computation ran; every caller got its error, and the error is not cached.
    assert_eq!(runs, 1);
    for r in &results {
        assert!(
            matches!(r, Err(CacheError::Compute(e)) if e == "failed #1"),
            "{r:?}"
        );
    }
    assert!(cache.is_empty(), "errors are not cached");
}
