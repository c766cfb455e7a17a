//! Property test: the cache against a reference model (a `Vec` in recency order).

use std::num::NonZeroUsize;

use ad_cache::{Cache, CacheError, CacheLimits, CacheStats};
use proptest::prelude::*;

use crate::common::{Blob, entry_weight};

#[derive(Debug, Clone)]
enum Op {
    Get(u64),
    Insert(u64, u64),
    GetOrInsert { key: u64, weight: u64, fail: bool },
    SetLimits { entries: usize, bytes: Option<u64> },
    Clear,
    ResetStats,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u64..8;
    let weight = 0u64..300;
    prop_oneof![
        4 => key.clone().prop_map(Op::Get),
        3 => (key.clone(), weight.clone()).prop_map(|(k, w)| Op::Insert(k, w)),
        3 => (key, weight, proptest::bool::weighted(0.2))
            .prop_map(|(key, weight, fail)| Op::GetOrInsert { key, weight, fail }),
        1 => (1usize..7, proptest::option::weighted(0.8, 0u64..700))
            .prop_map(|(entries, bytes)| Op::SetLimits { entries, bytes }),
        1 => Just(Op::Clear),
        1 => Just(Op::ResetStats),
    ]
}

/// The reference: entries most recently used first, and the counters.
struct Model {
    entries: Vec<(u64, Blob, u64)>,
    limits: CacheLimits,
    stats: CacheStats,
    lookups: u64,
    /// A `SetLimits` since the last reset: the peak may be above today's limit.
    limits_shrank: bool,
}

impl Model {
    fn retained(&self) -> u64 {
        self.entries.iter().map(|e| e.2).sum()
    }

    fn over(&self) -> bool {
        self.entries.len() > self.limits.max_entries.get()
            || self
                .limits
                .max_retained_bytes
                .is_some_and(|m| self.retained() > m)
    }

    fn evict_lru(&mut self) {
        let for_entries = self.entries.len() > self.limits.max_entries.get();
        let (_, _, w) = self.entries.pop().expect("evicting from an empty model");
        self.stats.evictions += 1;
        if for_entries {
            self.stats.evicted_for_entries += 1;
        } else {
            self.stats.evicted_for_bytes += 1;
        }
        self.stats.evicted_bytes += w;
    }

    fn get(&mut self, key: u64) -> Option<Blob> {
        self.lookups += 1;
        if let Some(i) = self.entries.iter().position(|e| e.0 == key) {
            let e = self.entries.remove(i);
            let v = e.1.clone();
            self.entries.insert(0, e);
            self.stats.hits += 1;
            Some(v)
        } else {
            self.stats.misses += 1;
            None
        }
    }

    fn insert(&mut self, key: u64, value: Blob) {
        let w = entry_weight(value.weight);
        if self.limits.max_retained_bytes.is_some_and(|m| w > m) {
            self.stats.rejected += 1;
            return;
        }
        self.stats.inserts += 1;
        if let Some(i) = self.entries.iter().position(|e| e.0 == key) {
            self.entries.remove(i);
            self.stats.replacements += 1;
        }
        self.entries.insert(0, (key, value, w));
        while self.entries.len() > 1 && self.over() {
            self.evict_lru();
        }
        // The peak is taken after eviction.
        self.stats.peak_retained_bytes = self.stats.peak_retained_bytes.max(self.retained());
    }
}

fn check(cache: &Cache<u64, Blob>, model: &Model) -> Result<(), TestCaseError> {
    let got: Vec<(u64, u64)> = cache.entries();
    let want: Vec<(u64, u64)> = model.entries.iter().map(|e| (e.0, e.2)).collect();
    prop_assert_eq!(&got, &want, "entries in recency order");
    let stats = cache.stats();
    let retained: u64 = got.iter().map(|e| e.1).sum();
    prop_assert_eq!(stats.retained_bytes, retained);
    prop_assert_eq!(stats.entries, got.len() as u64);
    let limits = cache.limits();
    prop_assert!(got.len() <= limits.max_entries.get());
    if let Some(max) = limits.max_retained_bytes {
        prop_assert!(retained <= max, "retained {retained} > limit {max}");
        if !model.limits_shrank {
            prop_assert!(stats.peak_retained_bytes <= max, "peak above the limit");
        }
    }
    prop_assert_eq!(stats.hits + stats.misses, model.lookups);
    let mut want_stats = model.stats;
    want_stats.entries = want.len() as u64;
    want_stats.retained_bytes = model.retained();
    prop_assert_eq!(stats, want_stats);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn cache_matches_reference_model(ops in proptest::collection::vec(op(), 1..80)) {
        let limits = CacheLimits {
            max_entries: NonZeroUsize::new(4).unwrap(),
            max_retained_bytes: Some(600),
        };
        let cache: Cache<u64, Blob> = Cache::with_limits(limits);
        let mut model = Model {
            entries: Vec::new(),
            limits,
            stats: CacheStats::default(),
            lookups: 0,
            limits_shrank: false,
        };
        for (i, op) in ops.into_iter().enumerate() {
            let id = i as u64;
            match op {
                Op::Get(k) => {
                    let got = cache.get(&k).map(|v| (*v).clone());
                    prop_assert_eq!(got, model.get(k));
                }
                Op::Insert(k, w) => {
                    let v = Blob { id, weight: w };
                    let back = cache.insert(k, v.clone());
                    prop_assert_eq!(&*back, &v);
                    model.insert(k, v);
                }
                Op::GetOrInsert { key, weight, fail } => {
                    let v = Blob { id, weight };
                    let got = cache.get_or_insert_with(key, || {
                        if fail { Err(id) } else { Ok(v.clone()) }
                    });
                    match model.get(key) {
                        Some(old) => prop_assert_eq!(got.map(|a| (*a).clone()), Ok(old)),
                        None if fail => prop_assert_eq!(got, Err(CacheError::Compute(id))),
                        None => {
                            prop_assert_eq!(got.map(|a| (*a).clone()), Ok(v.clone()));
                            model.insert(key, v);
                        }
                    }
                }
                Op::SetLimits { entries, bytes } => {
                    let limits = CacheLimits {
                        max_entries: NonZeroUsize::new(entries).unwrap(),
                        max_retained_bytes: bytes,
                    };
                    cache.set_limits(limits);
                    model.limits = limits;
                    model.limits_shrank = true;
                    while model.over() {
                        model.evict_lru();
                    }
                }
                Op::Clear => {
                    cache.clear();
                    model.entries.clear();
                    model.stats.clears += 1;
                }
                Op::ResetStats => {
                    cache.reset_stats();
                    model.stats = CacheStats::default();
                    model.stats.peak_retained_bytes = model.retained();
                    model.lookups = 0;
                    model.limits_shrank = false;
                }
            }
            check(&cache, &model)?;
        }
    }
}
