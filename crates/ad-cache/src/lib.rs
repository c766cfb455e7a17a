//! ad-cache: a bounded, collision-safe cache of derived graph transforms.
//!
//! AD engines and graph compilers rebuild the same derived graphs again and again. This crate
//! memoizes them in a [`Cache`]: LRU by entry count and by [`RetainedBytes`], with statistics,
//! `clear()`, single flight, and keys whose every hit is confirmed by exact equality.

#![forbid(unsafe_code)]

mod bytes;
mod cache;
mod graph_bytes;
mod keys;
pub mod vecad;

pub use bytes::RetainedBytes;
pub use cache::{
    Cache, CacheKey, CacheLimits, CacheStats, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_RETAINED_BYTES,
};
pub use graph_bytes::graphs_heap_bytes;
pub use keys::{
    GRAPH_KEY_DOMAIN, GraphKey, KEY_VERSION, KeyError, LINEARIZE_KEY_DOMAIN, LinearizeKey,
    LinearizedGraph, TRACED_KEY_DOMAIN, TracedKey, TransformKind, VjpTransform,
};

pub use graph_core::Fingerprint;
