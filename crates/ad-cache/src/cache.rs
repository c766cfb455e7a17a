//! The generic cache: LRU by entry count and retained bytes, collision-safe keys, single flight.

use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::Fingerprint;
use crate::bytes::{Priced, Prior, Reached, RetainedBytes, price_entry};
use crate::explain::{EXPLAIN_CANDIDATES, EXPLAIN_LOG, KeyDifference, KindStats, MissExplanation};
use crate::wait::{
    FlightMark, begin_leading, begin_wait, current_actor, end_leading, note_refused,
};

/// The default bound on a wait for another thread's computation of a key
/// ([`Cache::wait_limit`]): 10 seconds.
pub const DEFAULT_WAIT_LIMIT: Duration = Duration::from_secs(10);

/// A cache key: a 128-bit fingerprint used to find the entry, and an exact equality that
/// confirms it.
///
/// The cache stores at most one entry per fingerprint. A lookup whose fingerprint matches an
/// entry whose key is not [`same_key`](CacheKey::same_key) is a **miss**, counted in
/// [`CacheStats::collisions`]; the other key's value is never returned. Implementations must
/// make equal keys have equal fingerprints; unequal keys may share one (that is the case the
/// cache guards against).
pub trait CacheKey: Clone + Send + Sync + 'static {
    /// The key's 128-bit fingerprint. Called once per cache call, before any lock is taken;
    /// it should be cheap (graph-core caches a graph's fingerprint, so this is O(1) for keys
    /// built from graphs).
    fn fingerprint(&self) -> Fingerprint;

    /// Exact equality of the full key, called only on a fingerprint match, **without** the
    /// cache's lock (other threads keep using the cache while a long comparison runs).
    /// Compare pointers first where keys hold `Arc`s.
    fn same_key(&self, other: &Self) -> bool;

    /// An exact answer to [`same_key`](CacheKey::same_key) when one is cheap (integers,
    /// short fields, pointer equality of the `Arc`s keys hold), or `None` to have the cache
    /// call `same_key` outside its lock. It runs under the cache's lock, so it must never
    /// walk a graph and should not panic; when it returns `Some`, it must agree with
    /// `same_key`. The default is `None` (every hit is confirmed outside the lock, which
    /// costs a second lock acquisition).
    #[inline]
    fn quick_eq(&self, other: &Self) -> Option<bool> {
        let _ = other;
        None
    }

    /// The key's transform kind, for [`Cache::kind_stats`] and miss explanations ("eager-jvp",
    /// "traced-vjp"); the empty string (the default) keeps no per-kind counters. A key type
    /// should return a small, fixed set of labels.
    #[inline]
    fn kind_label(&self) -> &'static str {
        ""
    }

    /// The first difference between this key and `other` (a cached key of the same
    /// [`kind_label`](CacheKey::kind_label)), for miss explanations; `None` (the default)
    /// when the key type describes none or none is found. It runs outside the cache's lock
    /// and should be one linear walk.
    fn difference(&self, other: &Self) -> Option<KeyDifference> {
        let _ = other;
        None
    }
}

/// `u64` keys: the fingerprint is the value itself (no two keys share one), equality is `==`.
impl CacheKey for u64 {
    #[inline]
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint(u128::from(*self))
    }

    #[inline]
    fn same_key(&self, other: &Self) -> bool {
        self == other
    }

    #[inline]
    fn quick_eq(&self, other: &Self) -> Option<bool> {
        Some(self == other)
    }
}

/// Why [`Cache::get_or_insert_with`] returned no value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError<E> {
    /// The computation failed (in this thread, or in the thread this one waited for).
    #[error("computing the cached value failed")]
    Compute(#[source] E),
    /// The value for this key is being computed by this very thread (or by the computation
    /// it works for, see [`FlightContext`](crate::FlightContext)): the request was made from
    /// inside its own computation, directly or through other calls. Waiting would never
    /// end, so the request fails at once.
    #[error("re-entrant request: the value for key {fingerprint} is being computed by this thread")]
    Reentrant {
        /// The key's fingerprint.
        fingerprint: Fingerprint,
    },
    /// Waiting for the computation of this key would close a cycle of computations each
    /// waiting for the next (this one computes a key that the computation it would wait for
    /// is, directly or through others, waiting for). This request fails at once; the others
    /// in the cycle go on waiting and proceed once this request's computation returns.
    #[error("waiting for key {fingerprint} would close a cycle of {computations} computations")]
    WaitCycle {
        /// The key's fingerprint.
        fingerprint: Fingerprint,
        /// The computations in the cycle, this request's own included.
        computations: usize,
    },
    /// Another thread's computation of this key did not finish within the time given to
    /// [`Cache::get_or_insert_with_timeout`]. That computation goes on (and stores its
    /// value when it finishes); this request gave up.
    #[error("waited {waited:?} for another thread's computation of key {fingerprint}")]
    Timeout {
        /// The key's fingerprint.
        fingerprint: Fingerprint,
        /// How long this request waited.
        waited: Duration,
    },
}

impl<E> CacheError<E> {
    /// The same error with the computation's error (if that is what this is) mapped by `f`;
    /// the other variants are kept as they are.
    pub fn map_compute<F>(self, f: impl FnOnce(E) -> F) -> CacheError<F> {
        match self {
            CacheError::Compute(e) => CacheError::Compute(f(e)),
            CacheError::Reentrant { fingerprint } => CacheError::Reentrant { fingerprint },
            CacheError::WaitCycle {
                fingerprint,
                computations,
            } => CacheError::WaitCycle {
                fingerprint,
                computations,
            },
            CacheError::Timeout {
                fingerprint,
                waited,
            } => CacheError::Timeout {
                fingerprint,
                waited,
            },
        }
    }

    /// The computation's error, if that is what this is.
    pub fn into_compute(self) -> Option<E> {
        match self {
            CacheError::Compute(e) => Some(e),
            CacheError::Reentrant { .. }
            | CacheError::WaitCycle { .. }
            | CacheError::Timeout { .. } => None,
        }
    }
}

/// The two limits a cache keeps: at most `max_entries` entries and, when set, at most
/// `max_retained_bytes` retained bytes (the sum of the entries' charges, see
/// [`RetainedBytes`]).
///
/// This is the one way to set limits: give them to [`Cache::with_limits`] when creating a
/// cache, or to [`Cache::set_limits`] later; [`Cache::new`] uses the default
/// (128 entries, 64 MiB). Change one field with a struct update:
///
/// ```
/// use ad_cache::{Cache, CacheLimits};
/// let cache: Cache<u64, Vec<u8>> = Cache::with_limits(CacheLimits {
///     max_retained_bytes: Some(1 << 20),
///     ..CacheLimits::default()
/// });
/// assert_eq!(cache.limits().max_entries.get(), 128);
/// cache.set_limits(CacheLimits { max_retained_bytes: None, ..cache.limits() });
/// assert_eq!(cache.limits().max_retained_bytes, None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// The most entries kept (default 128).
    pub max_entries: NonZeroUsize,
    /// The most retained bytes kept, or `None` for no byte limit (default `Some(64 MiB)`).
    pub max_retained_bytes: Option<u64>,
}

impl Default for CacheLimits {
    /// 128 entries and 64 MiB.
    fn default() -> Self {
        CacheLimits {
            max_entries: NonZeroUsize::new(128).unwrap_or(NonZeroUsize::MIN),
            max_retained_bytes: Some(64 << 20),
        }
    }
}

/// A snapshot of a cache's state and counters. Counters saturate at `u64::MAX`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Entries held now.
    pub entries: u64,
    /// Retained bytes of the entries held now.
    pub retained_bytes: u64,
    /// The most retained bytes held at once since creation or the last
    /// [`reset_stats`](Cache::reset_stats), taken after each insert's evictions: it never
    /// exceeds the byte limit in force at the time.
    pub peak_retained_bytes: u64,
    /// Lookups (`get`, `get_or_insert_with`) that found their key.
    pub hits: u64,
    /// Lookups that did not (including collisions, and callers that waited for another
    /// thread's computation).
    pub misses: u64,
    /// Values stored (new entries and replacements); oversize values are not counted here.
    pub inserts: u64,
    /// Inserts that replaced the value of an equal key.
    pub replacements: u64,
    /// Entries removed to keep the limits, or displaced by a colliding key (the sum of
    /// `evicted_for_entries`, `evicted_for_bytes` and `displaced`).
    pub evictions: u64,
    /// Entries evicted to keep the entry limit.
    pub evicted_for_entries: u64,
    /// Entries evicted to keep the byte limit.
    pub evicted_for_bytes: u64,
    /// Entries displaced by a colliding key's insert.
    pub displaced: u64,
    /// Entries removed by [`remove`](Cache::remove) (not evictions).
    pub removals: u64,
    /// Retained bytes of the evicted entries.
    pub evicted_bytes: u64,
    /// Values larger than the byte limit on their own (oversize): returned to the caller, not
    /// retained.
    pub rejected: u64,
    /// Fingerprint matches whose keys were not equal (on lookup or insert).
    pub collisions: u64,
    /// Calls to [`clear`](Cache::clear).
    pub clears: u64,
}

/// Hashes a `u128` fingerprint by folding and one multiply; fingerprints are already uniform.
#[derive(Debug, Clone, Copy, Default)]
struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100000001B3);
        }
    }

    fn write_u128(&mut self, x: u128) {
        let folded = (x as u64) ^ ((x >> 64) as u64);
        let full = u128::from(folded ^ self.0).wrapping_mul(0x9E3779B97F4A7C15);
        self.0 = (full as u64) ^ ((full >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct BuildFingerprintHasher;

impl BuildHasher for BuildFingerprintHasher {
    type Hasher = FingerprintHasher;
    fn build_hasher(&self) -> FingerprintHasher {
        FingerprintHasher(0)
    }
}

struct Slot<K, V> {
    /// Shared so that a lookup can compare it with [`CacheKey::same_key`] after releasing the
    /// lock, while other threads evict or replace the entry.
    key: Arc<K>,
    value: Arc<V>,
    /// What the entry retains priced on its own: `own` plus every shared allocation it keeps
    /// alive, in full.
    bytes: u64,
    /// What it retains outright (inline sizes, heap owned outside shared allocations, and
    /// its list of shared allocations).
    own: u64,
    /// The shared allocations its charged part reaches: (identity, strong references).
    shared: Box<[(usize, usize)]>,
}

/// A shared allocation that entries of one cache reach, charged to the cache at most once.
///
/// Its identity is its pointee's address. The entries listing it keep it alive (their keys
/// and values are immutable behind `Arc`s), so the address cannot be reused while the record
/// exists; the record goes with the last entry that lists it.
struct SharedRecord {
    bytes: u64,
    /// Entries that list it.
    holders: usize,
    /// Strong references to it from those entries' charged parts.
    refs: usize,
    /// Charged to the cache: some entry kept it alive on the cache's behalf when priced.
    charged: bool,
}

/// What a single-flight computation is at, with the key it computes for: waiters match
/// flights by fingerprint and confirm the key. The leader takes the key back out before
/// pricing the entry, so the entry is priced ([`RetainedBytes`]) exactly as by
/// [`Cache::insert`] (the flight's copy of the key is not alive then).
enum FlightState<K, V> {
    Running(K),
    /// The leader has taken its key back to store the entry; it finishes shortly.
    Storing,
    Ready(K, Arc<V>),
    Failed(K, Arc<dyn Any + Send + Sync>),
    /// The computing thread panicked; waiters retry.
    Abandoned,
}

struct Flight<K, V> {
    /// The leader (the thread computing the value, or the computation it works for: a
    /// request from it for the same key is re-entrant) in the process-wide wait-for graph.
    mark: Arc<FlightMark>,
    state: Mutex<FlightState<K, V>>,
    done: Condvar,
}

impl<K, V> Flight<K, V> {
    fn finish(&self, state: FlightState<K, V>) {
        *lock(&self.state) = state;
        self.mark.finish();
        self.done.notify_all();
    }
}

struct Counters {
    hits: u64,
    misses: u64,
    inserts: u64,
    replacements: u64,
    evictions: u64,
    evicted_for_entries: u64,
    evicted_for_bytes: u64,
    displaced: u64,
    removals: u64,
    evicted_bytes: u64,
    rejected: u64,
    collisions: u64,
    clears: u64,
    peak_retained_bytes: u64,
}

impl Counters {
    const ZERO: Counters = Counters {
        hits: 0,
        misses: 0,
        inserts: 0,
        replacements: 0,
        evictions: 0,
        evicted_for_entries: 0,
        evicted_for_bytes: 0,
        displaced: 0,
        removals: 0,
        evicted_bytes: 0,
        rejected: 0,
        collisions: 0,
        clears: 0,
        peak_retained_bytes: 0,
    };
}

fn bump(c: &mut u64) {
    *c = c.saturating_add(1);
}

struct State<K, V> {
    lru: LruCache<u128, Slot<K, V>, BuildFingerprintHasher>,
    in_flight: std::collections::HashMap<u128, Arc<Flight<K, V>>, BuildFingerprintHasher>,
    limits: CacheLimits,
    retained_bytes: u64,
    /// Shared allocations the entries reach, by identity.
    shared: std::collections::HashMap<usize, SharedRecord>,
    counters: Counters,
    /// Counters per transform kind ([`CacheKey::kind_label`]); a handful of kinds.
    kinds: Vec<KindStats>,
    /// The latest miss explanations (explain mode), oldest first.
    explanations: VecDeque<MissExplanation>,
}

/// Entries taken out under the lock, dropped after it is released.
type Evicted<K, V> = Vec<Slot<K, V>>;

/// The entry under a fingerprint, compared with a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// No entry has the fingerprint.
    Empty,
    /// The entry is the key's.
    Same,
    /// The entry is another key's (a collision).
    Other,
}

impl<K: CacheKey, V> State<K, V> {
    /// After a [`Cache::probe`]: on a hit promotes the entry (only the one hit) and returns
    /// its value; when `count`, counts a hit, or a miss (and a collision).
    fn take_hit(
        &mut self,
        fp: u128,
        found: Found,
        count: bool,
        kind: &'static str,
    ) -> Option<Arc<V>> {
        if found == Found::Same
            && let Some(slot) = self.lru.get(&fp)
        {
            let v = Arc::clone(&slot.value);
            if count {
                bump(&mut self.counters.hits);
                if !kind.is_empty() {
                    bump(&mut self.kind(kind).hits);
                }
            }
            return Some(v);
        }
        if count {
            if found == Found::Other {
                bump(&mut self.counters.collisions);
            }
            bump(&mut self.counters.misses);
            if !kind.is_empty() {
                bump(&mut self.kind(kind).misses);
            }
        }
        None
    }

    /// The counters of `kind`, created on first use.
    fn kind(&mut self, kind: &'static str) -> &mut KindStats {
        let i = match self.kinds.iter().position(|k| k.kind == kind) {
            Some(i) => i,
            None => {
                self.kinds.push(KindStats {
                    kind,
                    ..KindStats::default()
                });
                self.kinds.len() - 1
            }
        };
        &mut self.kinds[i]
    }

    fn note_retained(&mut self) {
        if self.retained_bytes > self.counters.peak_retained_bytes {
            self.counters.peak_retained_bytes = self.retained_bytes;
        }
    }

    /// Takes a slot's charges off the cache (its own bytes, and each shared allocation no
    /// other entry lists any more) and returns the bytes released.
    fn release(&mut self, slot: &Slot<K, V>) -> u64 {
        let mut freed = slot.own;
        for &(ptr, refs) in &slot.shared {
            if let Some(rec) = self.shared.get_mut(&ptr) {
                rec.holders = rec.holders.saturating_sub(1);
                rec.refs = rec.refs.saturating_sub(refs);
                if rec.holders == 0 {
                    if rec.charged {
                        freed = freed.saturating_add(rec.bytes);
                    }
                    self.shared.remove(&ptr);
                }
            }
        }
        self.retained_bytes = self.retained_bytes.saturating_sub(freed);
        freed
    }

    /// Adds a slot's charges: its own bytes, and each shared allocation it keeps alive
    /// that the cache did not charge yet.
    fn charge(&mut self, slot: &Slot<K, V>, reached: &[Reached]) {
        let mut added = slot.own;
        for r in reached {
            let rec = self.shared.entry(r.ptr).or_insert(SharedRecord {
                bytes: r.bytes,
                holders: 0,
                refs: 0,
                charged: false,
            });
            rec.holders += 1;
            rec.refs = rec.refs.saturating_add(r.refs);
            if r.charged && !rec.charged {
                rec.charged = true;
                rec.bytes = r.bytes;
                added = added.saturating_add(r.bytes);
            }
        }
        self.retained_bytes = self.retained_bytes.saturating_add(added);
    }

    fn evict_one(&mut self, out: &mut Evicted<K, V>) -> bool {
        let for_entries = self.lru.len() > self.limits.max_entries.get();
        match self.lru.pop_lru() {
            Some((_, slot)) => {
                let freed = self.release(&slot);
                bump(&mut self.counters.evictions);
                if for_entries {
                    bump(&mut self.counters.evicted_for_entries);
                } else {
                    bump(&mut self.counters.evicted_for_bytes);
                }
                self.counters.evicted_bytes = self.counters.evicted_bytes.saturating_add(freed);
                out.push(slot);
                true
            }
            None => false,
        }
    }

    fn over_limits(&self) -> bool {
        self.lru.len() > self.limits.max_entries.get()
            || self
                .limits
                .max_retained_bytes
                .is_some_and(|max| self.retained_bytes > max)
    }

    /// Stores `key` and `value` (`priced` together; `found`: what [`Cache::probe`] found
    /// under `fp`, for this state) unless they are larger than the byte limit alone, then
    /// evicts least recently used entries (never the new one) until both limits hold. The
    /// peak is taken after eviction.
    ///
    /// The entry is priced against what the cache holds now: a shared allocation the cache
    /// already charges stays charged (once), and references to it from other entries count
    /// as the cache's, so an allocation that entries keep alive only together is charged.
    fn store(
        &mut self,
        fp: u128,
        (key, value): (Arc<K>, Arc<V>),
        priced: &Priced,
        found: Found,
        out: &mut Evicted<K, V>,
    ) -> Option<u64> {
        let d = priced.decide(|ptr| {
            self.shared.get(&ptr).map(|r| Prior {
                charged: r.charged,
                refs: r.refs,
            })
        });
        let shared: Box<[(usize, usize)]> = d.reached.iter().map(|r| (r.ptr, r.refs)).collect();
        let list =
            (shared.len() as u64).saturating_mul(std::mem::size_of::<(usize, usize)>() as u64);
        let slot = Slot {
            key,
            value,
            bytes: d.total.saturating_add(list),
            own: d.own.saturating_add(list),
            shared,
        };
        if self
            .limits
            .max_retained_bytes
            .is_some_and(|max| slot.bytes > max)
        {
            bump(&mut self.counters.rejected);
            out.push(slot);
            return None;
        }
        let bytes = slot.bytes;
        bump(&mut self.counters.inserts);
        if let Some(old) = self.lru.pop(&fp) {
            let freed = self.release(&old);
            if found == Found::Same {
                bump(&mut self.counters.replacements);
            } else {
                bump(&mut self.counters.collisions);
                bump(&mut self.counters.evictions);
                bump(&mut self.counters.displaced);
                self.counters.evicted_bytes = self.counters.evicted_bytes.saturating_add(freed);
            }
            out.push(old);
        }
        self.charge(&slot, &d.reached);
        self.lru.push(fp, slot);
        while self.lru.len() > 1 && self.over_limits() {
            self.evict_one(out);
        }
        self.note_retained();
        Some(bytes)
    }

    fn enforce_limits(&mut self, out: &mut Evicted<K, V>) {
        while self.over_limits() && self.evict_one(out) {}
    }
}

/// A wait limit as stored: nanoseconds, `u64::MAX` for none (saturating below it).
fn duration_ns(limit: Option<Duration>) -> u64 {
    limit.map_or(u64::MAX, |d| {
        u64::try_from(d.as_nanos())
            .unwrap_or(u64::MAX - 1)
            .min(u64::MAX - 1)
    })
}

/// Locks a mutex, recovering the guard from a poisoned lock: a panic elsewhere never fails
/// a lookup here.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A bounded, thread-safe, collision-safe LRU cache of `Arc<V>` values.
///
/// * **Limits** ([`CacheLimits`]): at most `max_entries` entries and at most
///   `max_retained_bytes` retained bytes; least recently used entries are evicted until both
///   hold. A value whose own size exceeds the byte limit is returned but not retained, evicts
///   nothing and is counted in [`CacheStats::rejected`]. An insert never evicts itself, so
///   [`CacheStats::peak_retained_bytes`] (taken after eviction) never exceeds the byte limit.
/// * **Retained bytes** of an entry are what its key and value keep alive *together*, each
///   shared allocation once, computed at insert (see [`RetainedBytes`] for what is charged).
///   The cache's retained bytes count a shared allocation that several entries reach once,
///   while any of them is cached; [`entries`](Cache::entries) reports each entry priced on
///   its own (shared allocations in full), so those figures may add up to more.
/// * **Collision safety**: see [`CacheKey`]. Exact key comparisons
///   ([`CacheKey::same_key`]) run without the cache's lock; only the entry actually hit is
///   promoted to most recently used.
/// * **Single flight**: [`get_or_insert_with`](Cache::get_or_insert_with) runs the computation
///   once for all threads that miss on the same key at once. A request for a key from
///   inside that key's own computation fails at once with [`CacheError::Reentrant`]; a wait
///   that would close a cycle of computations across threads fails at once with
///   [`CacheError::WaitCycle`]; [`get_or_insert_with_timeout`](Cache::get_or_insert_with_timeout)
///   bounds a wait.
/// * **Poisoning**: a panic in another thread never makes a call fail; the state is recovered.
///   No user code runs under the lock except [`CacheKey::quick_eq`]; evicted values are
///   dropped after the lock is released.
///
/// A hit whose key [`quick_eq`](CacheKey::quick_eq) confirms takes the lock once, promotes the
/// entry and clones the `Arc`: it allocates nothing.
///
/// ```
/// use ad_cache::{Cache, CacheLimits};
/// let cache: Cache<u64, Vec<f64>> = Cache::with_limits(CacheLimits {
///     max_retained_bytes: Some(1 << 20),
///     ..CacheLimits::default()
/// });
/// let v = cache.get_or_insert_with(7, || Ok::<_, std::convert::Infallible>(vec![1.0; 4]));
/// assert_eq!(v.unwrap().len(), 4);
/// assert!(cache.get(&7).is_some());
/// assert_eq!(cache.stats().hits, 1);
/// ```
pub struct Cache<K, V> {
    state: Mutex<State<K, V>>,
    /// The wait limit in nanoseconds, `u64::MAX` for none (read without the lock).
    wait_limit_ns: AtomicU64,
    /// Explain mode ([`Cache::set_explain_misses`]).
    explain: AtomicBool,
}

impl<K: CacheKey, V> fmt::Debug for Cache<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("limits", &self.limits())
            .field("stats", &self.stats())
            .finish()
    }
}

impl<K: CacheKey, V: RetainedBytes + Send + Sync + 'static> Default for Cache<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: CacheKey + RetainedBytes, V: RetainedBytes + Send + Sync + 'static> Cache<K, V> {
    /// Stores `value` under `key`, replacing an equal key's value, and returns it. When the
    /// value is larger than the byte limit alone it is returned without being retained and
    /// the cache is left exactly as it was.
    pub fn insert(&self, key: K, value: V) -> Arc<V> {
        self.insert_arc(key, Arc::new(value))
    }

    /// [`insert`](Cache::insert) for a value already in an `Arc`. The value is charged as if
    /// the cache owned it alone.
    pub fn insert_arc(&self, key: K, value: Arc<V>) -> Arc<V> {
        let fp = key.fingerprint().0;
        let priced = price_entry(&key, value.as_ref());
        let mut evicted = Vec::new();
        {
            let (mut st, found) = self.probe(fp, &key);
            st.store(
                fp,
                (Arc::new(key), Arc::clone(&value)),
                &priced,
                found,
                &mut evicted,
            );
        }
        drop(evicted);
        value
    }

    /// Returns the value for `key`, computing it with `f` on a miss.
    ///
    /// Single flight: when several threads miss on an equal key at once, `f` runs in one of
    /// them; the others wait and receive the same `Arc` — or a clone of the same error. An
    /// error is never cached: the next call computes again. If the computing thread panics,
    /// the waiters retry (one of them computes); so does a thread that waited on the flight
    /// of another key with the same fingerprint (a collision): it never receives that key's
    /// value. Every call counts exactly one hit or miss.
    ///
    /// Re-entrancy: a request made from inside `f` (on the thread running it, or on a
    /// worker that entered its [`FlightContext`](crate::FlightContext)) for an equal key
    /// fails at once with [`CacheError::Reentrant`] instead of waiting for itself; one for a
    /// colliding key computes its own value. Requests for other keys work as usual.
    ///
    /// Cycles: before waiting for another thread's computation, the request follows the
    /// process-wide wait-for graph (who waits for which computation, over every cache). If
    /// the computation it would wait for is, directly or through others, waiting for one
    /// this thread is running (thread 1 computes A and asks for B while thread 2 computes B
    /// and asks for A), the request fails at once with [`CacheError::WaitCycle`]. Only that
    /// request fails: when its computation then fails too (the error passed on with `?`),
    /// the threads waiting for it do not receive that error but retry with their own
    /// computations, so the rest of the cycle still computes and caches its values.
    ///
    /// Every wait ends: a wait for another thread's computation lasts at most the cache's
    /// [`wait_limit`](Cache::wait_limit) (default [`DEFAULT_WAIT_LIMIT`], 10 s), then fails
    /// with [`CacheError::Timeout`]. That bounds what the cache cannot see: a computation
    /// that joins a worker thread (a stolen `rayon::join` closure, a scoped thread) which
    /// asks for the key being computed. Hand such a worker the computation's
    /// [`FlightContext`](crate::FlightContext) to have its request fail at once
    /// ([`CacheError::Reentrant`]) instead, or use [`get_or_compute`](Cache::get_or_compute)
    /// to have a refused request compute its value without the cache.
    ///
    /// # Errors
    /// [`CacheError::Compute`] with the error of `f`, whether `f` ran in this thread or in
    /// the one it waited for; [`CacheError::Reentrant`], [`CacheError::WaitCycle`] and
    /// [`CacheError::Timeout`] as above.
    pub fn get_or_insert_with<E, F>(&self, key: K, f: F) -> Result<Arc<V>, CacheError<E>>
    where
        E: Clone + Send + Sync + 'static,
        F: FnOnce() -> Result<V, E>,
    {
        self.get_or_insert_waiting(key, None, &mut Some(f), true)
    }

    /// [`get_or_insert_with`](Cache::get_or_insert_with), waiting at most `timeout` in all
    /// for other threads' computations of the key instead of the cache's
    /// [`wait_limit`](Cache::wait_limit) (this thread's own computation, when it runs `f`,
    /// is not timed).
    ///
    /// # Errors
    /// As [`get_or_insert_with`](Cache::get_or_insert_with), and [`CacheError::Timeout`]
    /// when the wait ran out (the other computation goes on and stores its value).
    pub fn get_or_insert_with_timeout<E, F>(
        &self,
        key: K,
        timeout: Duration,
        f: F,
    ) -> Result<Arc<V>, CacheError<E>>
    where
        E: Clone + Send + Sync + 'static,
        F: FnOnce() -> Result<V, E>,
    {
        self.get_or_insert_waiting(key, Some(timeout), &mut Some(f), true)
    }

    /// [`get_or_insert_with`](Cache::get_or_insert_with), except that a request the cache
    /// refuses (re-entrant, closing a wait cycle, or past the wait limit) runs `f` on this
    /// thread and returns its value **without caching it**: the request always gets a value
    /// or `f`'s own error. Use it where a key may be asked for from a worker the computation
    /// joins, or in nested requests that may form a cycle. (A computation that asks for its
    /// own key again through this path recurses, as it would without a cache.)
    ///
    /// # Errors
    /// [`CacheError::Compute`] with the error of `f` (run here or in the thread waited for).
    pub fn get_or_compute<E, F>(&self, key: K, f: F) -> Result<Arc<V>, CacheError<E>>
    where
        E: Clone + Send + Sync + 'static,
        F: FnOnce() -> Result<V, E>,
    {
        let mut f = Some(f);
        match self.get_or_insert_waiting(key, None, &mut f, false) {
            Err(e @ CacheError::Compute(_)) => Err(e),
            Err(refused) => match f.take() {
                Some(f) => f().map(Arc::new).map_err(CacheError::Compute),
                None => Err(refused),
            },
            ok => ok,
        }
    }

    fn get_or_insert_waiting<E, F>(
        &self,
        key: K,
        timeout: Option<Duration>,
        f: &mut Option<F>,
        mark_refusals: bool,
    ) -> Result<Arc<V>, CacheError<E>>
    where
        E: Clone + Send + Sync + 'static,
        F: FnOnce() -> Result<V, E>,
    {
        let fp = key.fingerprint().0;
        let kind = key.kind_label();
        // Taken at the first wait, so that hits never read the clock.
        let mut started: Option<Instant> = None;
        let mut counted = false;
        loop {
            let flight = {
                let (mut st, found) = self.probe(fp, &key);
                // A retry (after an abandoned flight) is not counted again.
                if let Some(v) = st.take_hit(fp, found, !counted, kind) {
                    return Ok(v);
                }
                counted = true;
                match st.in_flight.get(&fp) {
                    // The flight may be for a colliding key: confirmed below.
                    Some(flight) => Arc::clone(flight),
                    None => {
                        let flight = Arc::new(Flight {
                            mark: FlightMark::new(),
                            state: Mutex::new(FlightState::Storing),
                            done: Condvar::new(),
                        });
                        st.in_flight.insert(fp, Arc::clone(&flight));
                        drop(st);
                        let Some(f) = f.take() else {
                            // Unreachable: `f` is taken only here, followed by a return.
                            // Retire the flight rather than panic.
                            self.retire(fp, &flight, FlightState::Abandoned);
                            continue;
                        };
                        return self.lead(fp, key, flight, f);
                    }
                }
            };
            if flight.mark.leader() == current_actor() {
                // This thread runs that flight and is inside its computation: waiting would
                // never end.
                let running_same = match &*lock(&flight.state) {
                    FlightState::Running(k) => Some(k.clone()),
                    _ => None,
                };
                match running_same {
                    Some(k) if k.same_key(&key) => {
                        if mark_refusals {
                            note_refused(Some(&flight.mark));
                        }
                        return Err(CacheError::Reentrant {
                            fingerprint: Fingerprint(fp),
                        });
                    }
                    _ => {
                        // A colliding key: compute its own value without single flight.
                        let Some(f) = f.take() else { continue };
                        let value = f().map_err(CacheError::Compute)?;
                        return Ok(self.insert(key, value));
                    }
                }
            }
            let edge = match begin_wait(&flight.mark) {
                Ok(edge) => edge,
                Err(computations) => {
                    if mark_refusals {
                        note_refused(None);
                    }
                    return Err(CacheError::WaitCycle {
                        fingerprint: Fingerprint(fp),
                        computations,
                    });
                }
            };
            let limit = timeout.or_else(|| self.wait_limit());
            let start = *started.get_or_insert_with(Instant::now);
            let mut s = lock(&flight.state);
            while matches!(*s, FlightState::Running(_) | FlightState::Storing) {
                match limit {
                    None => s = flight.done.wait(s).unwrap_or_else(PoisonError::into_inner),
                    Some(limit) => {
                        let waited = start.elapsed();
                        let Some(left) = limit.checked_sub(waited).filter(|d| !d.is_zero()) else {
                            drop(s);
                            drop(edge);
                            if mark_refusals {
                                note_refused(None);
                            }
                            return Err(CacheError::Timeout {
                                fingerprint: Fingerprint(fp),
                                waited,
                            });
                        };
                        s = flight
                            .done
                            .wait_timeout(s, left)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                    }
                }
            }
            let done = match &*s {
                FlightState::Ready(k, v) => Some((k.clone(), Ok(Arc::clone(v)))),
                FlightState::Failed(k, e) => Some((k.clone(), Err(Arc::clone(e)))),
                _ => None,
            };
            drop(s);
            drop(edge);
            // The flight's key is compared without holding any lock.
            if let Some((k, outcome)) = done
                && k.same_key(&key)
            {
                match outcome {
                    Ok(v) => return Ok(v),
                    Err(e) => {
                        if let Some(e) = e.downcast_ref::<E>() {
                            return Err(CacheError::Compute(e.clone()));
                        }
                    }
                }
            }
            // Abandoned (a panic, or a failure after a refused request), another key's
            // flight, or an error of another type: look up again (the flight is gone by
            // now; this thread may lead the next one).
        }
    }

    /// Runs `f` as the single flight for `fp`, stores its value and wakes the waiters.
    fn lead<E, F>(
        &self,
        fp: u128,
        key: K,
        flight: Arc<Flight<K, V>>,
        f: F,
    ) -> Result<Arc<V>, CacheError<E>>
    where
        E: Clone + Send + Sync + 'static,
        F: FnOnce() -> Result<V, E>,
    {
        // If `f` panics, the guard retires the flight so waiters do not wait forever.
        struct Guard<'a, K: CacheKey, V> {
            cache: &'a Cache<K, V>,
            fp: u128,
            flight: Option<Arc<Flight<K, V>>>,
        }
        impl<K: CacheKey, V> Drop for Guard<'_, K, V> {
            fn drop(&mut self) {
                if let Some(flight) = self.flight.take() {
                    self.cache.retire(self.fp, &flight, FlightState::Abandoned);
                }
            }
        }
        /// Pops the thread's leading stack, also when `f` panics.
        struct Leading;
        impl Drop for Leading {
            fn drop(&mut self) {
                end_leading();
            }
        }
        let kind = key.kind_label();
        // Explain mode: the closest cached keys are compared before the key moves into the
        // flight.
        let explanation = self
            .explain
            .load(Ordering::Relaxed)
            .then(|| self.explain_miss(&key));
        // The flight holds the key while `f` runs (for re-entrant requests to recognise it)
        // and gives it back before the entry is priced.
        let mark = Arc::clone(&flight.mark);
        *lock(&flight.state) = FlightState::Running(key);
        let mut guard = Guard {
            cache: self,
            fp,
            flight: Some(flight),
        };
        let started = Instant::now();
        let result = {
            begin_leading(&mark);
            let _leading = Leading;
            f()
        };
        let compute_time = started.elapsed();
        let Some(key) = guard.flight.as_ref().and_then(|flight| {
            match std::mem::replace(&mut *lock(&flight.state), FlightState::Storing) {
                FlightState::Running(k) => Some(k),
                _ => None,
            }
        }) else {
            // Unreachable: only this thread changes a running flight's state. The guard
            // retires it as abandoned; the value is still returned.
            return result.map(Arc::new).map_err(CacheError::Compute);
        };
        match result {
            Ok(value) => {
                let value = Arc::new(value);
                // Priced before the waiters' copy of the key exists, as `insert` prices it.
                let priced = price_entry(&key, value.as_ref());
                let done_key = key.clone();
                let mut evicted = Vec::new();
                // `probe` may run `same_key` (user code); until the flight is finished the
                // guard stays armed, so a panic there still releases the waiters.
                let (mut st, found) = self.probe(fp, &key);
                let bytes = st.store(
                    fp,
                    (Arc::new(key), Arc::clone(&value)),
                    &priced,
                    found,
                    &mut evicted,
                );
                if !kind.is_empty() {
                    let k = st.kind(kind);
                    bump(&mut k.computed);
                    k.compute_time = k.compute_time.saturating_add(compute_time);
                }
                if let Some(mut e) = explanation {
                    e.compute_time = Some(compute_time);
                    e.retained_bytes = bytes;
                    if st.explanations.len() >= EXPLAIN_LOG {
                        st.explanations.pop_front();
                    }
                    st.explanations.push_back(e);
                }
                if let Some(flight) = guard.flight.take() {
                    remove_flight(&mut st, fp, &flight);
                    drop(st);
                    flight.finish(FlightState::Ready(done_key, Arc::clone(&value)));
                } else {
                    drop(st);
                }
                drop(evicted);
                Ok(value)
            }
            Err(e) => {
                if let Some(flight) = guard.flight.take() {
                    // A failure after a refused request (most likely that refusal passed on
                    // with `?`) is no answer for the key: the waiters retry.
                    let end = if mark.is_broken() {
                        FlightState::Abandoned
                    } else {
                        FlightState::Failed(key, Arc::new(e.clone()))
                    };
                    self.retire(fp, &flight, end);
                }
                Err(CacheError::Compute(e))
            }
        }
    }
}

fn remove_flight<K, V>(st: &mut State<K, V>, fp: u128, flight: &Arc<Flight<K, V>>) {
    if st
        .in_flight
        .get(&fp)
        .is_some_and(|f| Arc::ptr_eq(f, flight))
    {
        st.in_flight.remove(&fp);
    }
}

impl<K: CacheKey, V> Cache<K, V> {
    /// An empty cache with the default limits ([`CacheLimits::default`]: 128 entries,
    /// 64 MiB).
    pub fn new() -> Self {
        Self::with_limits(CacheLimits::default())
    }

    /// An empty cache with `limits`.
    pub fn with_limits(limits: CacheLimits) -> Self {
        Cache {
            state: Mutex::new(State {
                lru: LruCache::unbounded_with_hasher(BuildFingerprintHasher),
                in_flight: std::collections::HashMap::with_hasher(BuildFingerprintHasher),
                limits,
                retained_bytes: 0,
                shared: std::collections::HashMap::new(),
                counters: Counters::ZERO,
                kinds: Vec::new(),
                explanations: VecDeque::new(),
            }),
            wait_limit_ns: AtomicU64::new(duration_ns(Some(DEFAULT_WAIT_LIMIT))),
            explain: AtomicBool::new(false),
        }
    }

    /// How long a request waits at most for another thread's computation of its key before
    /// failing with [`CacheError::Timeout`] (`None`: without end). Default
    /// [`DEFAULT_WAIT_LIMIT`] (10 s); [`get_or_insert_with_timeout`](Cache::get_or_insert_with_timeout)
    /// sets its own.
    pub fn wait_limit(&self) -> Option<Duration> {
        match self.wait_limit_ns.load(Ordering::Relaxed) {
            u64::MAX => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Sets the [`wait_limit`](Cache::wait_limit) (`None`: waits without end, which a
    /// computation that joins a worker asking for its own key turns into a hang).
    pub fn set_wait_limit(&self, limit: Option<Duration>) {
        self.wait_limit_ns
            .store(duration_ns(limit), Ordering::Relaxed);
    }

    /// Turns explain mode on or off. While on, every miss that computes its value (through
    /// [`get_or_insert_with`](Cache::get_or_insert_with) and friends) is compared with the
    /// most recently used cached keys of its kind (at most
    /// [`EXPLAIN_CANDIDATES`](crate::EXPLAIN_CANDIDATES), see [`explain`](Cache::explain)),
    /// and the explanation, with the compute time and retained bytes of the miss, is kept
    /// for [`take_miss_explanations`](Cache::take_miss_explanations) (the latest
    /// [`EXPLAIN_LOG`](crate::EXPLAIN_LOG)).
    pub fn set_explain_misses(&self, on: bool) {
        self.explain.store(on, Ordering::Relaxed);
    }

    /// Whether explain mode is on.
    pub fn explain_misses(&self) -> bool {
        self.explain.load(Ordering::Relaxed)
    }

    /// Why `key` would miss now, or `None` when it is cached: the closest of the most
    /// recently used cached keys of the same [`kind_label`](CacheKey::kind_label) (at most
    /// [`EXPLAIN_CANDIDATES`](crate::EXPLAIN_CANDIDATES), compared outside the lock by
    /// [`CacheKey::difference`]) and its first difference. Counts nothing.
    pub fn explain(&self, key: &K) -> Option<MissExplanation> {
        if self.contains(key) {
            return None;
        }
        Some(self.explain_miss(key))
    }

    fn explain_miss(&self, key: &K) -> MissExplanation {
        let kind = key.kind_label();
        let candidates: Vec<Arc<K>> = {
            let st = self.state();
            st.lru
                .iter()
                .map(|(_, slot)| &slot.key)
                .filter(|k| k.kind_label() == kind)
                .take(EXPLAIN_CANDIDATES)
                .map(Arc::clone)
                .collect()
        };
        let closest = candidates
            .iter()
            .filter_map(|c| key.difference(c))
            .max_by_key(|d| d.agree);
        MissExplanation {
            kind,
            fingerprint: key.fingerprint(),
            compared: candidates.len(),
            closest,
            compute_time: None,
            retained_bytes: None,
        }
    }

    /// The miss explanations kept since the last call (explain mode), oldest first.
    pub fn take_miss_explanations(&self) -> Vec<MissExplanation> {
        self.state().explanations.drain(..).collect()
    }

    /// Counters per transform kind ([`CacheKey::kind_label`]), in order of first use. They
    /// survive eviction and [`clear`](Cache::clear); [`reset_stats`](Cache::reset_stats)
    /// zeroes them.
    pub fn kind_stats(&self) -> Vec<KindStats> {
        self.state().kinds.clone()
    }

    fn state(&self) -> MutexGuard<'_, State<K, V>> {
        lock(&self.state)
    }

    /// Locks the state and finds out whether the entry under `fp` is `key`'s. A comparison
    /// that [`CacheKey::quick_eq`] cannot answer runs on a shared copy of the entry's key
    /// with the lock released; the lock is then taken again and the answer kept only if the
    /// same entry is still there (else the probe starts over). The answer holds for the
    /// state behind the returned guard.
    fn probe(&self, fp: u128, key: &K) -> (MutexGuard<'_, State<K, V>>, Found) {
        loop {
            let st = self.state();
            let candidate = match st.lru.peek(&fp) {
                None => return (st, Found::Empty),
                Some(slot) => match slot.key.quick_eq(key) {
                    Some(true) => return (st, Found::Same),
                    Some(false) => return (st, Found::Other),
                    None => Arc::clone(&slot.key),
                },
            };
            drop(st);
            let same = candidate.same_key(key);
            let st = self.state();
            if st
                .lru
                .peek(&fp)
                .is_some_and(|slot| Arc::ptr_eq(&slot.key, &candidate))
            {
                drop(candidate);
                return (st, if same { Found::Same } else { Found::Other });
            }
        }
    }

    fn retire(&self, fp: u128, flight: &Arc<Flight<K, V>>, end: FlightState<K, V>) {
        remove_flight(&mut self.state(), fp, flight);
        flight.finish(end);
    }

    /// The current limits.
    pub fn limits(&self) -> CacheLimits {
        self.state().limits
    }

    /// Changes the limits and evicts least recently used entries at once until both hold
    /// (possibly every entry, when one is now larger than the byte limit alone).
    pub fn set_limits(&self, limits: CacheLimits) {
        let mut evicted = Vec::new();
        {
            let mut st = self.state();
            st.limits = limits;
            st.enforce_limits(&mut evicted);
        }
        drop(evicted);
    }

    /// The value for `key`, if cached (and promotes it to most recently used). Counts a hit
    /// or a miss; a fingerprint match with an unequal key is a miss and a collision (and
    /// promotes nothing).
    pub fn get(&self, key: &K) -> Option<Arc<V>> {
        let fp = key.fingerprint().0;
        let (mut st, found) = self.probe(fp, key);
        st.take_hit(fp, found, true, key.kind_label())
    }

    /// True when `key` is cached; counts nothing and does not promote.
    pub fn contains(&self, key: &K) -> bool {
        let fp = key.fingerprint().0;
        self.probe(fp, key).1 == Found::Same
    }

    /// Removes `key`'s entry, returning its value. Not counted as an eviction.
    pub fn remove(&self, key: &K) -> Option<Arc<V>> {
        let fp = key.fingerprint().0;
        let slot = {
            let (mut st, found) = self.probe(fp, key);
            if found != Found::Same {
                return None;
            }
            let slot = st.lru.pop(&fp)?;
            st.release(&slot);
            bump(&mut st.counters.removals);
            slot
        };
        Some(slot.value)
    }

    /// Drops every entry and counts a clear. Computations in flight still store their value
    /// when they finish.
    pub fn clear(&self) {
        let old = {
            let mut st = self.state();
            bump(&mut st.counters.clears);
            st.retained_bytes = 0;
            st.shared.clear();
            std::mem::replace(
                &mut st.lru,
                LruCache::unbounded_with_hasher(BuildFingerprintHasher),
            )
        };
        drop(old);
    }

    /// Zeroes the counters; the peak restarts from the bytes retained now.
    pub fn reset_stats(&self) {
        let mut st = self.state();
        st.counters = Counters::ZERO;
        st.counters.peak_retained_bytes = st.retained_bytes;
        st.kinds.clear();
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.state().lru.len()
    }

    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Retained bytes of the entries held now.
    pub fn retained_bytes(&self) -> u64 {
        self.state().retained_bytes
    }

    /// The keys held now with their retained bytes priced on their own (a shared
    /// allocation in full in every entry that keeps it alive), most recently used first.
    pub fn entries(&self) -> Vec<(K, u64)> {
        self.state()
            .lru
            .iter()
            .map(|(_, slot)| (K::clone(&slot.key), slot.bytes))
            .collect()
    }

    /// A snapshot of the state and counters.
    pub fn stats(&self) -> CacheStats {
        let st = self.state();
        let c = &st.counters;
        CacheStats {
            entries: st.lru.len() as u64,
            retained_bytes: st.retained_bytes,
            peak_retained_bytes: c.peak_retained_bytes,
            hits: c.hits,
            misses: c.misses,
            inserts: c.inserts,
            replacements: c.replacements,
            evictions: c.evictions,
            evicted_for_entries: c.evicted_for_entries,
            evicted_for_bytes: c.evicted_for_bytes,
            displaced: c.displaced,
            removals: c.removals,
            evicted_bytes: c.evicted_bytes,
            rejected: c.rejected,
            collisions: c.collisions,
            clears: c.clears,
        }
    }
}
