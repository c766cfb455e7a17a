//! Eviction order, oversize rejection, limits, clear, statistics, errors, panics and poisoning.

use std::num::NonZeroUsize;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Barrier};

use ad_cache::{Cache, CacheError, CacheKey, CacheLimits, Fingerprint, HeapMeter, RetainedBytes};

use crate::common::{Blob, entry_weight};

fn blob(id: u64, weight: u64) -> Blob {
    Blob { id, weight }
}

fn keys(cache: &Cache<u64, Blob>) -> Vec<u64> {
    cache.entries().into_iter().map(|e| e.0).collect()
}

fn n(x: usize) -> NonZeroUsize {
    NonZeroUsize::new(x).unwrap()
}

#[test]
fn defaults_are_128_entries_and_64_mib() {
    let cache: Cache<u64, Blob> = Cache::new();
    let limits = cache.limits();
    assert_eq!(limits.max_entries.get(), 128);
    assert_eq!(limits.max_retained_bytes, Some(64 * 1024 * 1024));
}

#[test]
fn evicts_least_recently_used_by_count() {
    let cache: Cache<u64, Blob> = Cache::with_limits(CacheLimits {
        max_entries: n(3),
        ..CacheLimits::default()
    });
    for k in 1..=3 {
        cache.insert(k, blob(k, 0));
    }
    assert_eq!(keys(&cache), [3, 2, 1]);
    assert!(cache.get(&1).is_some()); // 1 becomes most recent
    cache.insert(4, blob(4, 0));
    assert_eq!(keys(&cache), [4, 1, 3]);
    let s = cache.stats();
    assert_eq!((s.evictions, s.evicted_bytes), (1, entry_weight(0)));
}

#[test]
fn evicts_by_bytes_until_both_limits_hold() {
    let w = entry_weight(100);
    let cache: Cache<u64, Blob> = Cache::with_limits(CacheLimits {
        max_entries: n(10),
        max_retained_bytes: Some(3 * w),
    });
    for k in 1..=3 {
        cache.insert(k, blob(k, 100));
    }
    assert_eq!(cache.retained_bytes(), 3 * w);
    // A double-size entry pushes out the two least recently used.
    cache.insert(9, blob(9, 100 + w));
    assert_eq!(keys(&cache), [9, 3]);
    assert_eq!(cache.retained_bytes(), 3 * w);
    // The peak is taken after eviction: it never reads above the limit (it read 5 * w).
    assert_eq!(cache.stats().peak_retained_bytes, 3 * w);
    assert_eq!(cache.stats().evictions, 2);
}

#[test]
fn the_peak_never_exceeds_the_byte_limit() {
    // With a 1000 B limit the peak once read 1264 B: it was taken before eviction.
    let cache: Cache<u64, Blob> = Cache::with_limits(CacheLimits {
        max_retained_bytes: Some(1000),
        ..CacheLimits::default()
    });
    for k in 0..200u64 {
        let weight = (k * 37) % 600;
        if k % 2 == 0 {
            cache.insert(k, blob(k, weight));
        } else {
            cache
                .get_or_insert_with(k, || Ok::<_, ()>(blob(k, weight)))
                .unwrap();
        }
        let s = cache.stats();
        assert!(s.retained_bytes <= 1000);
        assert!(
            s.peak_retained_bytes <= 1000,
            "peak {}",
            s.peak_retained_bytes
        );
    }
    assert!(cache.stats().evictions > 0, "the limit was exercised");
}

#[test]
fn a_reentrant_request_for_the_key_being_computed_fails_at_once() {
    let cache: Cache<u64, Blob> = Cache::new();
    let outer = cache.get_or_insert_with(1, || {
        // Inside key 1's computation: asking for key 1 again used to wait for itself forever.
        let inner = cache.get_or_insert_with(1, || Ok::<_, String>(blob(2, 0)));
        assert_eq!(
            inner.unwrap_err(),
            CacheError::Reentrant {
                fingerprint: 1u64.fingerprint()
            }
        );
        // Other keys work as usual from inside a computation.
        let other = cache.get_or_insert_with(7, || Ok::<_, String>(blob(7, 0)));
        assert_eq!(other.unwrap().id, 7);
        Ok::<_, String>(blob(1, 0))
    });
    assert_eq!(outer.unwrap().id, 1);
    assert_eq!(cache.get(&1).unwrap().id, 1);
    let s = cache.stats();
    // Outer miss, re-entrant miss, key 7's miss, then the final hit.
    assert_eq!((s.misses, s.hits, s.inserts), (3, 1, 2));
}

#[test]
fn a_reentrant_request_for_a_colliding_key_computes_its_own_value() {
    use crate::common::ForcedKey;
    let cache: Cache<ForcedKey, Blob> = Cache::new();
    let a = ForcedKey {
        fingerprint: 5,
        id: 1,
    };
    let b = ForcedKey {
        fingerprint: 5,
        id: 2,
    };
    let outer = cache.get_or_insert_with(a.clone(), || {
        let inner = cache.get_or_insert_with(b.clone(), || Ok::<_, ()>(blob(2, 0)));
        assert_eq!(inner.unwrap().id, 2, "b gets its own value, not an error");
        Ok::<_, ()>(blob(1, 0))
    });
    assert_eq!(outer.unwrap().id, 1);
    // One entry per fingerprint: a's store displaced b's.
    assert_eq!(cache.get(&a).unwrap().id, 1);
    assert!(cache.get(&b).is_none());
}

#[test]
fn oversize_entry_is_returned_not_retained_and_evicts_nothing() {
    let cache: Cache<u64, Blob> = Cache::with_limits(CacheLimits {
        max_retained_bytes: Some(1000),
        ..CacheLimits::default()
    });
    for k in 1..=4 {
        cache.insert(k, blob(k, 10));
    }
    let before = cache.entries();
    let big = cache.insert(99, blob(99, 5000));
    assert_eq!(big.id, 99);
    assert_eq!(cache.entries(), before);
    assert!(cache.get(&99).is_none());
    let computed = cache.get_or_insert_with(98, || Ok::<_, ()>(blob(98, 5000)));
    assert_eq!(computed.unwrap().id, 98);
    assert_eq!(cache.entries().len(), 4);
    let s = cache.stats();
    assert_eq!((s.rejected, s.evictions, s.inserts), (2, 0, 4));
    // An entry of exactly the limit is kept, alone.
    let exact = 1000 - entry_weight(0);
    cache.insert(50, blob(50, exact));
    assert_eq!(keys(&cache), [50]);
}

#[test]
fn shrinking_limits_evicts_at_once() {
    let cache: Cache<u64, Blob> = Cache::with_limits(CacheLimits {
        max_retained_bytes: None,
        ..CacheLimits::default()
    });
    for k in 1..=6 {
        cache.insert(k, blob(k, 10 * k));
    }
    cache.get(&2);
    cache.set_limits(CacheLimits {
        max_entries: n(3),
        max_retained_bytes: None,
    });
    assert_eq!(keys(&cache), [2, 6, 5]);
    cache.set_limits(CacheLimits {
        max_entries: n(3),
        max_retained_bytes: Some(entry_weight(20) + entry_weight(60)),
    });
    assert_eq!(keys(&cache), [2, 6]);
    // A limit below the smallest entry empties the cache.
    cache.set_limits(CacheLimits {
        max_entries: n(3),
        max_retained_bytes: Some(1),
    });
    assert!(cache.is_empty());
    assert_eq!(cache.retained_bytes(), 0);
    assert_eq!(cache.stats().evictions, 6);
}

#[test]
fn clear_and_stats_after_clear() {
    let cache: Cache<u64, Blob> = Cache::new();
    for k in 0..5 {
        cache.insert(k, blob(k, 1));
    }
    cache.get(&1);
    cache.get(&42);
    cache.clear();
    let s = cache.stats();
    assert_eq!((s.entries, s.retained_bytes, s.clears), (0, 0, 1));
    assert_eq!((s.hits, s.misses, s.inserts), (1, 1, 5));
    assert_eq!(s.evictions, 0, "a clear is not an eviction");
    assert_eq!(s.peak_retained_bytes, 5 * entry_weight(1));
    assert!(cache.get(&1).is_none());
    cache.insert(7, blob(7, 1));
    cache.reset_stats();
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.inserts, s.clears), (0, 0, 0, 0));
    assert_eq!((s.entries, s.peak_retained_bytes), (1, entry_weight(1)));
}

#[test]
fn replacement_and_remove() {
    let cache: Cache<u64, Blob> = Cache::new();
    cache.insert(1, blob(1, 10));
    cache.insert(2, blob(2, 10));
    cache.insert(1, blob(3, 30));
    assert_eq!(cache.get(&1).unwrap().id, 3);
    assert_eq!(keys(&cache), [1, 2]);
    assert_eq!(cache.retained_bytes(), entry_weight(30) + entry_weight(10));
    assert_eq!(cache.stats().replacements, 1);
    assert!(cache.contains(&2));
    assert_eq!(cache.remove(&2).unwrap().id, 2);
    assert!(!cache.contains(&2));
    assert_eq!(cache.retained_bytes(), entry_weight(30));
}

#[test]
fn an_error_is_returned_and_not_cached() {
    let cache: Cache<u64, Blob> = Cache::new();
    let r = cache.get_or_insert_with(1, || Err::<Blob, _>("boom".to_string()));
    assert_eq!(r.unwrap_err(), CacheError::Compute("boom".to_string()));
    assert!(cache.is_empty());
    let r = cache.get_or_insert_with(1, || Ok::<_, String>(blob(1, 0)));
    assert_eq!(r.unwrap().id, 1);
    let s = cache.stats();
    assert_eq!((s.misses, s.inserts), (2, 1));
}

#[test]
fn a_panicking_computation_releases_its_waiters() {
    let cache: Arc<Cache<u64, Blob>> = Arc::new(Cache::new());
    let barrier = Arc::new(Barrier::new(2));
    let leader = {
        let (cache, barrier) = (Arc::clone(&cache), Arc::clone(&barrier));
        std::thread::spawn(move || {
            catch_unwind(AssertUnwindSafe(|| {
                cache.get_or_insert_with(5, || -> Result<Blob, ()> {
                    barrier.wait();
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    panic!("computation failed")
                })
            }))
            .is_err()
        })
    };
    barrier.wait();
    // The leader is inside its computation: this call waits on it, then computes itself.
    let got = cache.get_or_insert_with(5, || Ok::<_, ()>(blob(55, 0)));
    assert!(leader.join().unwrap(), "the leader panicked");
    assert_eq!(got.unwrap().id, 55);
    assert_eq!(cache.stats().misses, 2);
    assert_eq!(cache.get(&5).unwrap().id, 55);
}

/// A key whose equality check panics on demand, to poison the cache's lock.
#[derive(Debug, Clone)]
struct PanicKey {
    id: u64,
    explode: bool,
}

impl CacheKey for PanicKey {
    fn fingerprint(&self) -> Fingerprint {
        self.id.fingerprint()
    }
    fn same_key(&self, other: &Self) -> bool {
        assert!(!(self.explode || other.explode), "key comparison exploded");
        self.id == other.id
    }
}

impl RetainedBytes for PanicKey {
    fn visit_heap<'a>(&'a self, _: &mut HeapMeter<'a>) {}
}

#[test]
fn a_poisoned_lock_never_fails_a_lookup() {
    let cache: Cache<PanicKey, Blob> = Cache::new();
    let key = PanicKey {
        id: 1,
        explode: false,
    };
    cache.insert(key.clone(), blob(1, 0));
    let bomb = PanicKey {
        id: 1,
        explode: true,
    };
    let result = catch_unwind(AssertUnwindSafe(|| cache.get(&bomb)));
    assert!(result.is_err(), "the comparison panicked");
    assert_eq!(cache.get(&key).unwrap().id, 1);
    cache.insert(
        PanicKey {
            id: 2,
            explode: false,
        },
        blob(2, 0),
    );
    assert_eq!(cache.len(), 2);
    assert_eq!(cache.stats().hits, 1);
}

#[test]
fn a_key_comparison_panicking_in_insert_leaves_the_cache_as_it_was() {
    let cache: Cache<PanicKey, Blob> = Cache::new();
    let key = PanicKey {
        id: 1,
        explode: false,
    };
    cache.insert(key.clone(), blob(1, 10));
    let before = cache.stats();
    let bomb = PanicKey {
        id: 1,
        explode: true,
    };
    let result = catch_unwind(AssertUnwindSafe(|| cache.insert(bomb, blob(2, 20))));
    assert!(result.is_err(), "the comparison panicked");
    // User code runs before any mutation: the old entry, its bytes and the counters stay.
    assert_eq!(cache.get(&key).map(|v| v.id), Some(1));
    let after = cache.stats();
    assert_eq!(after.entries, 1);
    assert_eq!(after.retained_bytes, before.retained_bytes);
    assert_eq!(after.inserts, before.inserts);
}

#[test]
fn cache_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Cache<u64, Blob>>();
}

/// A key whose exact comparison, when gated, meets the test twice on a barrier: once on
/// entering, once before returning.
#[derive(Debug, Clone)]
struct GatedKey {
    id: u64,
    gate: Option<Arc<Barrier>>,
}

impl CacheKey for GatedKey {
    fn fingerprint(&self) -> Fingerprint {
        self.id.fingerprint()
    }
    fn same_key(&self, other: &Self) -> bool {
        if let Some(gate) = self.gate.as_ref().or(other.gate.as_ref()) {
            gate.wait();
            gate.wait();
        }
        self.id == other.id
    }
}

impl RetainedBytes for GatedKey {
    fn visit_heap<'a>(&'a self, _: &mut HeapMeter<'a>) {}
}

#[test]
fn exact_key_comparisons_run_without_the_cache_lock() {
    let cache: Arc<Cache<GatedKey, Blob>> = Arc::new(Cache::new());
    let plain = |id| GatedKey { id, gate: None };
    cache.insert(plain(1), blob(1, 0));
    let gate = Arc::new(Barrier::new(2));
    let prober = {
        let cache = Arc::clone(&cache);
        let key = GatedKey {
            id: 1,
            gate: Some(Arc::clone(&gate)),
        };
        std::thread::spawn(move || cache.get(&key).map(|v| v.id))
    };
    gate.wait(); // the prober is inside `same_key` now
    // The cache stays usable meanwhile (it used to hold its lock during the comparison).
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = {
        let cache = Arc::clone(&cache);
        std::thread::spawn(move || {
            cache.insert(plain(2), blob(2, 0));
            let got = cache.get(&plain(2)).map(|v| v.id);
            let _ = tx.send(got);
        })
    };
    let during = rx.recv_timeout(std::time::Duration::from_secs(10));
    gate.wait(); // let the comparison return
    assert_eq!(
        during,
        Ok(Some(2)),
        "insert and get ran while a comparison was running"
    );
    assert_eq!(prober.join().unwrap(), Some(1));
    worker.join().unwrap();
    assert_eq!(cache.stats().hits, 2);
}

#[test]
fn a_collision_does_not_promote_the_other_keys_entry() {
    use crate::common::ForcedKey;
    let cache: Cache<ForcedKey, Blob> = Cache::with_limits(CacheLimits {
        max_entries: n(2),
        ..CacheLimits::default()
    });
    let key = |fingerprint, id| ForcedKey { fingerprint, id };
    cache.insert(key(1, 1), blob(1, 0));
    cache.insert(key(2, 2), blob(2, 0));
    // Same fingerprint as the oldest entry, another key: a miss that must not refresh it.
    assert!(cache.get(&key(1, 99)).is_none());
    cache.insert(key(3, 3), blob(3, 0));
    assert!(cache.contains(&key(2, 2)), "the entry used last survives");
    assert!(
        !cache.contains(&key(1, 1)),
        "the least recently used one is evicted"
    );
}

#[test]
fn an_arc_field_is_charged_once_while_any_entry_holds_it_whoever_else_does() {
    let cache: Cache<u64, Arc<Vec<u8>>> = Cache::new();
    let a = Arc::new(vec![0u8; 10_000]);
    let block = 10_000 + 24 + 16;
    let inline = (std::mem::size_of::<u64>() + std::mem::size_of::<Arc<Vec<u8>>>()) as u64;
    // The caller still holds it (and may drop it any time): charged with the first entry.
    cache.insert(1, Arc::clone(&a));
    let first = cache.retained_bytes();
    assert!(
        first >= inline + block && first < inline + block + 1_000,
        "{first}"
    );
    // A second entry holding it adds only its own part.
    cache.insert(2, Arc::clone(&a));
    let both = cache.retained_bytes();
    let own = both - first;
    assert!(own < 1_000, "{own}");
    drop(a);
    // Charged once while any entry holds it, released with the last.
    cache.remove(&2);
    assert_eq!(cache.retained_bytes(), first);
    cache.remove(&1);
    assert_eq!(cache.retained_bytes(), 0);
}

#[test]
fn shared_allocation_accounting_stays_consistent_under_random_use() {
    use rand_xoshiro::SplitMix64;
    use rand_xoshiro::rand_core::{Rng, SeedableRng};
    // Values are lists of Arcs drawn from a pool the caller drops part of as it goes, so
    // entries share allocations with each other and, sometimes, with the caller.
    let limit = 64 * 1024;
    let cache: Cache<u64, Vec<Arc<Vec<u8>>>> = Cache::with_limits(CacheLimits {
        max_entries: n(24),
        max_retained_bytes: Some(limit),
    });
    let mut rng = SplitMix64::seed_from_u64(7);
    let mut pool: Vec<Arc<Vec<u8>>> = (0..16)
        .map(|i| Arc::new(vec![0u8; 256 * (i + 1)]))
        .collect();
    for step in 0..3_000u64 {
        let r = rng.next_u64();
        let key = r % 48;
        match (r >> 8) % 4 {
            0 | 1 => {
                let picks = 1 + (r >> 16) as usize % 3;
                let value: Vec<Arc<Vec<u8>>> = (0..picks)
                    .map(|k| Arc::clone(&pool[(r >> (20 + 4 * k)) as usize % pool.len()]))
                    .collect();
                cache.insert(key, value);
            }
            2 => {
                cache.remove(&key);
            }
            _ => {
                // The caller lets go of one pooled allocation and makes a new one.
                let i = (r >> 16) as usize % pool.len();
                pool[i] = Arc::new(vec![0u8; 128 * (1 + (r >> 24) as usize % 40)]);
            }
        }
        let s = cache.stats();
        assert!(s.retained_bytes <= limit, "step {step}: {s:?}");
        assert!(s.peak_retained_bytes <= limit, "step {step}: {s:?}");
        assert!(s.entries <= 24, "step {step}: {s:?}");
    }
    // Removing every entry releases every charge: nothing is left counted.
    for (key, _) in cache.entries() {
        cache.remove(&key);
    }
    assert_eq!(cache.retained_bytes(), 0);
    assert!(cache.is_empty());
}
