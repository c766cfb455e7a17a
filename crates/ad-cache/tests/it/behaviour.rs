//! Eviction order, oversize rejection, limits, clear, statistics, errors, panics and poisoning.

use std::num::NonZeroUsize;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Barrier};

use ad_cache::{Cache, CacheKey, CacheLimits, Fingerprint, RetainedBytes};

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
    assert_eq!(cache.stats().peak_retained_bytes, 5 * w);
    assert_eq!(cache.stats().evictions, 2);
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
    assert_eq!(r.unwrap_err(), "boom");
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
    fn heap_bytes(&self) -> u64 {
        0
    }
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
    assert!(result.is_err(), "the comparison panicked under the lock");
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
    assert!(result.is_err(), "the comparison panicked under the lock");
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
