//! Shared test helpers: a value with a chosen weight and a key with a chosen fingerprint.

use ad_cache::{CacheKey, Fingerprint, HeapMeter, RetainedBytes};

/// A cached value whose heap weight is chosen by the test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Blob {
    pub(crate) id: u64,
    pub(crate) weight: u64,
}

impl RetainedBytes for Blob {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        meter.add(self.weight);
    }
}

/// The retained bytes the cache charges for a `u64` key and a `Blob` of `weight`.
pub(crate) fn entry_weight(weight: u64) -> u64 {
    8 + std::mem::size_of::<Blob>() as u64 + weight
}

/// A key whose fingerprint the test sets: two unequal keys may share one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ForcedKey {
    pub(crate) fingerprint: u128,
    pub(crate) id: u64,
}

impl CacheKey for ForcedKey {
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint(self.fingerprint)
    }
    fn same_key(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl RetainedBytes for ForcedKey {
    const HEAP_FREE: bool = true;
    fn visit_heap<'a>(&'a self, _: &mut HeapMeter<'a>) {}
}
