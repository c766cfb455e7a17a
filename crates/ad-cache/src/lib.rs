//! ad-cache: a bounded, collision-safe cache of derived graph transforms.
//!
//! AD engines and graph compilers rebuild the same derived graphs again and again (linearized
//! JVP graphs, transposed VJP graphs, plans, analyses). This crate memoizes them in a
//! [`Cache`]:
//!
//! * **Bounded**: at most [`CacheLimits::max_entries`] entries and
//!   [`CacheLimits::max_retained_bytes`] retained bytes, least recently used first out. Limits
//!   are set one way: a [`CacheLimits`] given to [`Cache::with_limits`], or later to
//!   [`Cache::set_limits`], which applies them at once ([`Cache::new`] takes the default, 128
//!   entries and 64 MiB). A value larger than the byte limit alone is returned to the caller
//!   but not retained, and evicts nothing.
//! * **Retained bytes** come from the [`RetainedBytes`] trait, a deep logical estimate
//!   computed once per entry at insert, for its key and value *together* in one
//!   [`HeapMeter`], so that an allocation both reach (a recorded graph the key holds and the
//!   transform reads from) is charged once, and against the other entries, so that an
//!   allocation several entries keep alive (a parent graph many cached roots share, an
//!   `Arc` field such as a shared table or a step's parameters) is charged to the cache
//!   once while any of them holds it and released with the last, whoever else held it at
//!   insert (implemented for primitives, `Vec`, `Box`, `Arc`, `String`, slices and
//!   graph-core [`Graph`](graph_core::Graph)s).
//! * **Collision safe**: a [`CacheKey`] has a 128-bit fingerprint to find its entry and an
//!   exact equality to confirm it; a fingerprint match with an unequal key is a miss, counted
//!   in [`CacheStats::collisions`], and never returns the other key's value.
//! * **Single flight**: [`Cache::get_or_insert_with`] computes a missing value once for all
//!   threads asking at the same time; an error reaches every waiter and is not cached. A
//!   request for a key from inside its own computation fails at once
//!   ([`CacheError::Reentrant`]) instead of waiting for itself; a wait that would close a
//!   cycle of computations across threads (each waiting for the next) fails at once
//!   ([`CacheError::WaitCycle`]), and only that request: a computation that then fails is
//!   retried by its waiters with their own computations. **Every wait ends**: a wait for
//!   another thread's computation lasts at most the cache's [`Cache::wait_limit`]
//!   (default [`DEFAULT_WAIT_LIMIT`], 10 s; [`Cache::get_or_insert_with_timeout`] sets its
//!   own), then fails with [`CacheError::Timeout`], which bounds a worker thread that the
//!   computation joins (a stolen `rayon::join` closure) asking for the key being computed;
//!   such a worker that acts for the computation through a [`FlightContext`] fails at once
//!   instead. [`Cache::get_or_compute`] turns every refused request (re-entrant, cycle,
//!   time limit) into a computation without the cache.
//! * **Misses that explain themselves** (like JAX's `JAX_EXPLAIN_CACHE_MISSES`):
//!   [`Cache::set_explain_misses`] compares every computed miss with the most recently
//!   used cached keys of its kind (at most [`EXPLAIN_CANDIDATES`], one linear walk each,
//!   [`CacheKey::difference`]) and keeps a [`MissExplanation`] naming the closest key's
//!   first difference ("operation 0: Load([2, 4]) vs Load([2, 3])") and the miss's cost
//!   (compute time, retained bytes) for [`Cache::take_miss_explanations`];
//!   [`Cache::explain`] answers for one key on demand.
//! * **Parallel hits**: exact key comparisons run outside the cache's lock, so hits on
//!   re-recorded (equal but not identical) graphs proceed in parallel.
//! * **Observable**: [`Cache::stats`] (hits, misses, inserts, evictions by reason —
//!   entries, bytes, oversize, displaced, explicit removals —, bytes, …),
//!   [`Cache::kind_stats`] (per transform kind, surviving eviction and [`Cache::clear`]),
//!   [`Cache::reset_stats`].
//!
//! AD keys and values, one family generic over the key's graph type ([`KeyGraph`]):
//! [`EagerKey`] (a recorded graph and output slots), [`EngineTracedKey`] (kind, roots, and
//! the engine's own input and alias-entry key types, each an [`EngineKeyPart`] checked
//! against the roots when the key is built, and an output that is always a
//! [`TracedOutput`] ([`OutputPart`] is sealed)) and [`TransformKey`], the ready-made
//! eager-or-traced key of an engine that caches both in one cache (it forwards
//! fingerprint, equality, `quick_eq`, pricing and miss explanations).
//!
//! **Wrong answers are impossible through the public API**: a [`TracedOutput`]'s fields
//! are private and its one constructor, [`TracedOutput::of`], maps a value in the graph's
//! own numbering to its canonical index, so a raw engine node id can never stand where a
//! canonical index belongs (a tape re-recorded in another order misses instead of serving
//! another output's transform); one named in another graph than its root is refused
//! ([`KeyError::ForeignValue`]); every [`TransformKey`] variant carries its
//! [`TransformKind`] (an eager JVP and an eager VJP of one recording are different keys).
//! Over graph-core graphs they are [`LinearizeKey`] and [`TracedKey`] (built from named
//! [`TracedKeyParts`]); [`GraphKey`] keys anything derived from one graph. Cached values:
//! [`LinearizedGraph`] and [`VjpTransform`]. Engines with their own graph type implement
//! graph-core's `GraphView` and wrap their graphs in a `CanonicalGraph`; the `engine_cache`
//! example is such an engine-side transform cache. Every key has `with_fingerprint`, which
//! makes it claim a fingerprint computed elsewhere (a wrong one only causes misses). A
//! reference AD engine that builds these values (the workspace's unpublished `vecad` crate)
//! drives the tests, the `vjp_cache` example and the benchmarks.
//!
//! ```
//! use std::sync::Arc;
//! use ad_cache::{Cache, GraphKey};
//! use graph_core::{GraphBuilder, Role};
//!
//! // Memoize a per-graph analysis (here: the number of live operations).
//! let mut b = GraphBuilder::<u32>::new();
//! let x = b.add_input(0);
//! let (_, y) = b.add_op1(7, &[x.into()], Role::Primary);
//! b.set_outputs(&[y]);
//! let g = Arc::new(b.build()?);
//!
//! let cache: Cache<GraphKey<u32>, usize> = Cache::new();
//! let n = cache.get_or_insert_with(GraphKey::new(Arc::clone(&g)), || {
//!     Ok::<_, std::convert::Infallible>(g.canonical_ops().len())
//! })?;
//! assert_eq!(*n, 1);
//! assert!(cache.get(&GraphKey::new(g)).is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod bytes;
mod cache;
mod explain;
mod graph_bytes;
mod keys;
mod view_keys;
mod wait;

pub use bytes::{HeapMeter, RetainedBytes};
pub use cache::{Cache, CacheError, CacheKey, CacheLimits, CacheStats, DEFAULT_WAIT_LIMIT};
pub use explain::{
    EXPLAIN_CANDIDATES, EXPLAIN_LOG, KeyDifference, KindStats, MissExplanation, graph_difference,
};
pub use keys::{
    GRAPH_KEY_DOMAIN, GraphKey, KEY_VERSION, KeyError, LINEARIZE_KEY_DOMAIN, LinearizedGraph,
    TRACED_KEY_DOMAIN, TransformKind, VjpTransform,
};
pub use view_keys::{
    EAGER_KEY_DOMAIN, ENGINE_TRACED_KEY_DOMAIN, EagerKey, EngineKeyPart, EngineTracedKey,
    EngineTracedParts, IntoTracedParts, KeyGraph, LinearizeKey, OutputPart, TracedKey,
    TracedKeyParts, TracedOutput, TransformKey,
};
pub use wait::FlightContext;

pub use graph_core::Fingerprint;
