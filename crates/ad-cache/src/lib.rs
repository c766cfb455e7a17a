//! ad-cache: a bounded, collision-safe cache of derived graph transforms.
//!
//! AD engines and graph compilers rebuild the same derived graphs again and again. This crate
//! memoizes them in a [`Cache`]: LRU by entry count and by [`RetainedBytes`], with statistics,
//! `clear()`, single flight, and keys whose every hit is confirmed by exact equality.

#![forbid(unsafe_code)]

mod bytes;
mod cache;

pub use bytes::RetainedBytes;
pub use cache::{
    Cache, CacheKey, CacheLimits, CacheStats, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_RETAINED_BYTES,
};

/// Placeholder until graph-core exports its fingerprint.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Fingerprint(pub u128);
