//! `RetainedBytes` and its `HeapMeter`: what cached keys and values keep alive, each once.

use std::collections::HashMap;
use std::sync::Arc;

/// A deep, logical estimate of what a value keeps alive, reported to a [`HeapMeter`].
///
/// # The rule
///
/// A value retains its inline size ([`std::mem::size_of_val`]) plus the heap memory it
/// *owns*: a `Vec`'s whole capacity, a `String`'s capacity, a `Box`'s pointee, recursively.
/// It is a logical estimate (allocator headers and padding of the heap blocks are not
/// counted), not process RSS. All arithmetic saturates at `u64::MAX`.
///
/// Shared ownership is decided for everything being priced *together*: a cache prices an
/// entry's key and value in one [`HeapMeter`], so an allocation both of them reach (say the
/// recorded graph a key holds and the transform in the value reads from) is charged once;
/// and it prices each entry against the shared allocations its other entries reach, so an
/// allocation several entries reach is charged to the cache once while any of them is
/// cached, and released with the last.
///
/// * An `Arc` field through its own [`RetainedBytes`] impl (the default for `Arc<T>`) is
///   [`HeapMeter::owned_arc`]: charged in full once per cache while any entry holds it,
///   released with the last, whoever else held it at insert (a caller that drops it after
///   the insert leaves the cache its owner, and the cache's bytes say so).
/// * [`HeapMeter::arc`]: an `Arc` the value shares, by explicit choice. It is charged (pointee, its heap, the
///   two reference counts), once however often it is reached, when every strong reference to
///   it comes from what is being priced (the key, the value, the allocations already
///   charged and, in a cache, the entries already cached) and there is no weak reference;
///   otherwise nothing, because whoever else holds it keeps it alive whether or not the
///   cache does.
/// * [`HeapMeter::owned_arc`]: an `Arc` the value *owns* by contract whatever its reference
///   count, charged in full (once) when its holder is. Keys use it for the graphs they are
///   built from: the caller usually still holds a recorded graph when the entry is stored
///   and drops it right after, leaving the cache its only owner. (A caller that keeps the
///   graph alive is over-charged by it, never under-charged.)
/// * [`HeapMeter::part_arc`]: an `Arc` that is part of its holder (a graph's parent
///   graphs): owned by contract when the holder is, else decided as by `arc`. So the
///   parents of a key's graphs (parameter subgraphs that many traced roots share, say) are
///   charged once to the cache while any entry reaches them, whoever else holds them.
///
/// The reference counts (for [`HeapMeter::arc`] and [`HeapMeter::part_arc`]) are read once,
/// when the entry is priced at insert; later changes do not re-price an entry (a shared allocation an earlier entry did not keep alive is charged
/// by the first later entry that finds the cache holding every reference to it).
///
/// Implement [`visit_heap`](RetainedBytes::visit_heap); the provided methods price a value
/// on its own.
///
/// ```
/// use std::sync::Arc;
/// use ad_cache::{HeapMeter, RetainedBytes};
///
/// struct Node {
///     name: String,
///     shared: Arc<Vec<u64>>,
/// }
///
/// impl RetainedBytes for Node {
///     fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
///         self.name.visit_heap(meter);
///         meter.arc(&self.shared);
///     }
/// }
///
/// let shared = Arc::new(vec![0u64; 100]);
/// let node = Node { name: "x".repeat(10), shared: Arc::clone(&shared) };
/// // `shared` is also held here: not charged.
/// assert_eq!(node.heap_bytes(), 10);
/// drop(shared);
/// // Now the node alone keeps it alive: the Vec, its 800 bytes and the two counts.
/// assert_eq!(node.heap_bytes(), 10 + 24 + 800 + 16);
/// ```
pub trait RetainedBytes {
    /// True when values of this type own no heap memory at all, so containers can skip
    /// walking their elements. Leave it `false` unless
    /// [`visit_heap`](Self::visit_heap) never reports anything.
    const HEAP_FREE: bool = false;

    /// Reports the heap memory this value owns beyond its inline size to `meter`: bytes it
    /// owns outright with [`HeapMeter::add`] (or by visiting its fields), shared allocations
    /// with [`HeapMeter::arc`] or [`HeapMeter::owned_arc`].
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>);

    /// Heap bytes this value keeps alive on its own, beyond its inline size.
    fn heap_bytes(&self) -> u64 {
        let mut meter = HeapMeter::new();
        self.visit_heap(&mut meter);
        meter.total()
    }

    /// Inline size plus [`heap_bytes`](Self::heap_bytes), saturating.
    fn retained_bytes(&self) -> u64 {
        (std::mem::size_of_val(self) as u64).saturating_add(self.heap_bytes())
    }
}

/// An `Arc` reached while pricing, type-erased so its pointee can be walked later.
trait SharedAlloc<'a> {
    fn strong_weak(&self) -> (usize, usize);
    /// The pointee's inline size plus the two reference counts.
    fn block_bytes(&self) -> u64;
    fn visit_pointee(&'a self, meter: &mut HeapMeter<'a>);
}

impl<'a, T: RetainedBytes + ?Sized> SharedAlloc<'a> for Arc<T> {
    fn strong_weak(&self) -> (usize, usize) {
        (Arc::strong_count(self), Arc::weak_count(self))
    }
    fn block_bytes(&self) -> u64 {
        let inner: &T = self;
        (std::mem::size_of_val(inner) as u64)
            .saturating_add(2 * std::mem::size_of::<usize>() as u64)
    }
    fn visit_pointee(&'a self, meter: &mut HeapMeter<'a>) {
        let inner: &'a T = self;
        inner.visit_heap(meter);
    }
}

/// How a holder reaches a shared allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// [`HeapMeter::arc`]: decided by its reference counts.
    Shared,
    /// [`HeapMeter::owned_arc`]: owned by contract.
    Owned,
    /// [`HeapMeter::part_arc`]: owned by contract when its holder is, else as `Shared`.
    Part,
}

struct Shared<'a> {
    alloc: &'a (dyn SharedAlloc<'a> + 'a),
    /// The pointee's address: the allocation's identity while it is alive.
    ptr: usize,
    /// Bytes its pointee owns outright (found while walking it).
    own: u64,
}

/// Collects what values report through [`RetainedBytes::visit_heap`] and decides which
/// shared allocations they keep alive (see the rule on [`RetainedBytes`]).
///
/// Walks are iterative over shared allocations: a chain of a million `Arc`s (graph parents,
/// say) is walked without deep recursion.
#[derive(Default)]
pub struct HeapMeter<'a> {
    /// Bytes owned outright by the values priced (not through an `Arc`).
    root: u64,
    shared: Vec<Shared<'a>>,
    index: HashMap<*const (), usize>,
    /// (holder: `None` for the values priced, index of the allocation, how).
    edges: Vec<(Option<usize>, usize, Reach)>,
    /// The allocation whose pointee is being walked, if any.
    current: Option<usize>,
    /// Allocations discovered whose pointees are not walked yet.
    unwalked: Vec<usize>,
}

impl std::fmt::Debug for HeapMeter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapMeter")
            .field("owned_bytes", &self.root)
            .field("shared_allocations", &self.shared.len())
            .finish()
    }
}

impl<'a> HeapMeter<'a> {
    /// An empty meter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reports `bytes` of heap memory owned outright by the value being walked.
    pub fn add(&mut self, bytes: u64) {
        match self.current {
            None => self.root = self.root.saturating_add(bytes),
            Some(i) => self.shared[i].own = self.shared[i].own.saturating_add(bytes),
        }
    }

    /// Reports an `Arc` the value shares: charged when what is being priced holds every
    /// strong reference to it (see [`RetainedBytes`]).
    pub fn arc<T: RetainedBytes + ?Sized>(&mut self, arc: &'a Arc<T>) {
        self.reference(arc, Reach::Shared);
    }

    /// Reports an `Arc` the value owns by contract: charged in full whenever the value is,
    /// whatever its reference count (see [`RetainedBytes`]).
    pub fn owned_arc<T: RetainedBytes + ?Sized>(&mut self, arc: &'a Arc<T>) {
        self.reference(arc, Reach::Owned);
    }

    /// Reports an `Arc` that is part of the value reporting it (a graph's parent graphs):
    /// owned by contract when that value is (reached through [`owned_arc`](Self::owned_arc),
    /// directly or through other parts), else decided as by [`arc`](Self::arc).
    pub fn part_arc<T: RetainedBytes + ?Sized>(&mut self, arc: &'a Arc<T>) {
        self.reference(arc, Reach::Part);
    }

    fn reference<T: RetainedBytes + ?Sized>(&mut self, arc: &'a Arc<T>, reach: Reach) {
        let key = Arc::as_ptr(arc).cast::<()>();
        let i = if let Some(&i) = self.index.get(&key) {
            i
        } else {
            let i = self.shared.len();
            self.index.insert(key, i);
            self.shared.push(Shared {
                alloc: arc,
                ptr: key.addr(),
                own: 0,
            });
            self.unwalked.push(i);
            i
        };
        self.edges.push((self.current, i, reach));
    }

    /// The bytes charged for everything reported so far: what was owned outright, plus the
    /// shared allocations kept alive by it.
    pub fn total(self) -> u64 {
        self.priced().decide(|_| None).total
    }

    /// Walks every shared allocation's pointee once and returns what was found, with the
    /// reference counts read now (borrowing nothing).
    pub(crate) fn priced(mut self) -> Priced {
        // Discovery: walk each shared allocation's pointee once, iteratively (pointees
        // report their own `Arc`s, which are queued, not walked recursively).
        while let Some(i) = self.unwalked.pop() {
            let alloc = self.shared[i].alloc;
            let saved = self.current.replace(i);
            alloc.visit_pointee(&mut self);
            self.current = saved;
        }
        let allocs = self
            .shared
            .iter()
            .map(|s| {
                let (strong, weak) = s.alloc.strong_weak();
                Alloc {
                    ptr: s.ptr,
                    bytes: s.alloc.block_bytes().saturating_add(s.own),
                    strong,
                    weak,
                }
            })
            .collect();
        Priced {
            root: self.root,
            allocs,
            edges: self.edges,
        }
    }
}

/// A shared allocation found while pricing.
#[derive(Debug, Clone, Copy)]
struct Alloc {
    ptr: usize,
    /// Its block (pointee and counts) and the heap its pointee owns outright.
    bytes: u64,
    strong: usize,
    weak: usize,
}

/// What a [`HeapMeter`] found, detached from the values priced: bytes owned outright, the
/// shared allocations reached and who reaches them.
#[derive(Debug, Default)]
pub(crate) struct Priced {
    root: u64,
    allocs: Vec<Alloc>,
    edges: Vec<(Option<usize>, usize, Reach)>,
}

/// What an earlier pricing in the same cache decided for a shared allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prior {
    /// Charged to the cache (by some entry), until the last entry reaching it leaves.
    pub charged: bool,
    /// Strong references to it from what the cache's entries keep alive.
    pub refs: usize,
}

/// A shared allocation reached by the priced values' charged part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reached {
    /// Its identity (the pointee's address; the priced values keep it alive).
    pub ptr: usize,
    /// What it costs, once.
    pub bytes: u64,
    /// Strong references to it from the charged part of the priced values.
    pub refs: usize,
    /// Whether the priced values (with what `prior` said) keep it alive.
    pub charged: bool,
}

/// The outcome of [`Priced::decide`].
#[derive(Debug, Default)]
pub(crate) struct Decided {
    /// Bytes owned outright plus every charged shared allocation, each once.
    pub total: u64,
    /// Bytes owned outright.
    pub own: u64,
    /// Every shared allocation a charged holder reaches.
    pub reached: Vec<Reached>,
}

impl Priced {
    /// Decides which shared allocations are kept alive, holders before what they hold
    /// (Kahn's order over the reference DAG). `prior` tells what the cache already holds
    /// of an allocation: its references from entries count as the priced values' own, and
    /// one already charged stays charged.
    pub(crate) fn decide(&self, prior: impl Fn(usize) -> Option<Prior>) -> Decided {
        let n = self.allocs.len();
        let mut pending = vec![0usize; n];
        let mut owned_refs = vec![0usize; n];
        let mut claimed = vec![false; n];
        let mut out: Vec<Vec<(usize, Reach)>> = vec![Vec::new(); n];
        for &(holder, child, reach) in &self.edges {
            if let Some(h) = holder {
                out[h].push((child, reach));
                pending[child] += 1;
            } else {
                owned_refs[child] += 1;
                claimed[child] |= reach == Reach::Owned;
            }
        }
        let mut ready: Vec<usize> = (0..n).filter(|&i| pending[i] == 0).collect();
        let mut decided = Decided {
            total: self.root,
            own: self.root,
            reached: Vec::new(),
        };
        while let Some(i) = ready.pop() {
            let a = self.allocs[i];
            let mut charged = false;
            if owned_refs[i] > 0 {
                let before = prior(a.ptr);
                let cached_refs = before.map_or(0, |p| p.refs);
                charged = claimed[i]
                    || before.is_some_and(|p| p.charged)
                    || (owned_refs[i].saturating_add(cached_refs) >= a.strong && a.weak == 0);
                decided.reached.push(Reached {
                    ptr: a.ptr,
                    bytes: a.bytes,
                    refs: owned_refs[i],
                    charged,
                });
                if charged {
                    decided.total = decided.total.saturating_add(a.bytes);
                }
            }
            for &(c, reach) in &out[i] {
                if charged {
                    owned_refs[c] += 1;
                    claimed[c] |= reach == Reach::Owned || (reach == Reach::Part && claimed[i]);
                }
                pending[c] -= 1;
                if pending[c] == 0 {
                    ready.push(c);
                }
            }
        }
        decided
    }
}

macro_rules! heap_free {
    ($($t:ty),* $(,)?) => {$(
        impl RetainedBytes for $t {
            const HEAP_FREE: bool = true;
            fn visit_heap<'a>(&'a self, _: &mut HeapMeter<'a>) {}
        }
    )*};
}

heap_free!(
    (),
    bool,
    char,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    f32,
    f64,
    str,
    std::num::NonZeroUsize,
    std::num::NonZeroU64,
);

/// Saturating `count * size` as `u64`.
fn mul_bytes(count: usize, size: usize) -> u64 {
    (count as u64).saturating_mul(size as u64)
}

impl<T: RetainedBytes> RetainedBytes for [T] {
    const HEAP_FREE: bool = T::HEAP_FREE;
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        if !T::HEAP_FREE {
            for x in self {
                x.visit_heap(meter);
            }
        }
    }
}

impl<T: RetainedBytes, const N: usize> RetainedBytes for [T; N] {
    const HEAP_FREE: bool = T::HEAP_FREE;
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        self.as_slice().visit_heap(meter);
    }
}

impl<T: RetainedBytes> RetainedBytes for Vec<T> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        meter.add(mul_bytes(self.capacity(), std::mem::size_of::<T>()));
        self.as_slice().visit_heap(meter);
    }
}

impl RetainedBytes for String {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        meter.add(self.capacity() as u64);
    }
}

/// A `Box` owns its pointee: its inline size and its heap.
impl<T: RetainedBytes + ?Sized> RetainedBytes for Box<T> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        let inner: &'a T = self;
        meter.add(std::mem::size_of_val(inner) as u64);
        inner.visit_heap(meter);
    }
}

/// An `Arc` field is charged by the shared-allocation accounting of parent graphs
/// ([`HeapMeter::owned_arc`]): in full, once per cache by its identity, while any entry holds
/// it, and released with the last, whoever else held it when the entry was stored. A field
/// the caller still holds at insert and drops right after (a shared table, this step's
/// parameters) is therefore counted; one the caller keeps alive for ever is over-charged,
/// never under-charged. Implement [`RetainedBytes`] on a wrapper and report the field with
/// [`HeapMeter::arc`] to charge it only when the cache holds every reference.
impl<T: RetainedBytes + ?Sized> RetainedBytes for Arc<T> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        meter.owned_arc(self);
    }
}

impl<T: RetainedBytes> RetainedBytes for Option<T> {
    const HEAP_FREE: bool = T::HEAP_FREE;
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        if let Some(x) = self {
            x.visit_heap(meter);
        }
    }
}

impl<A: RetainedBytes, B: RetainedBytes> RetainedBytes for (A, B) {
    const HEAP_FREE: bool = A::HEAP_FREE && B::HEAP_FREE;
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        self.0.visit_heap(meter);
        self.1.visit_heap(meter);
    }
}

impl<A: RetainedBytes, B: RetainedBytes, C: RetainedBytes> RetainedBytes for (A, B, C) {
    const HEAP_FREE: bool = A::HEAP_FREE && B::HEAP_FREE && C::HEAP_FREE;
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        self.0.visit_heap(meter);
        self.1.visit_heap(meter);
        self.2.visit_heap(meter);
    }
}

/// What a cache entry's key and value reach, priced together: their inline sizes and what
/// they own outright, and the shared allocations they reach (decided by the cache).
pub(crate) fn price_entry<K: RetainedBytes, V: RetainedBytes>(key: &K, value: &V) -> Priced {
    let inline = (std::mem::size_of::<K>() as u64).saturating_add(std::mem::size_of::<V>() as u64);
    let mut meter = HeapMeter::new();
    meter.add(inline);
    key.visit_heap(&mut meter);
    value.visit_heap(&mut meter);
    meter.priced()
}

/// What a cache entry retains priced on its own: the inline sizes of its key and value, and
/// everything they keep alive together, each shared allocation once.
#[cfg(test)]
pub(crate) fn entry_bytes<K: RetainedBytes, V: RetainedBytes>(key: &K, value: &V) -> u64 {
    price_entry(key, value).decide(|_| None).total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_are_their_size() {
        assert_eq!(7u64.retained_bytes(), 8);
        assert_eq!(1.5f64.retained_bytes(), 8);
        assert_eq!(true.retained_bytes(), 1);
    }

    #[test]
    fn vec_counts_capacity_and_element_heap() {
        let v: Vec<u32> = Vec::with_capacity(10);
        assert_eq!(v.heap_bytes(), 40);
        let nested = vec![String::with_capacity(5), String::with_capacity(7)];
        let expect = (nested.capacity() * std::mem::size_of::<String>()) as u64 + 12;
        assert_eq!(nested.heap_bytes(), expect);
    }

    #[test]
    fn box_and_slices() {
        let b: Box<[u16]> = vec![1u16, 2, 3].into_boxed_slice();
        assert_eq!(b.heap_bytes(), 6);
        let s: Box<str> = "hello".into();
        assert_eq!(s.heap_bytes(), 5);
    }

    /// An `Arc` reported with [`HeapMeter::arc`] (decided by its reference counts).
    struct Counted<T>(Arc<T>);
    impl<T: RetainedBytes> RetainedBytes for Counted<T> {
        fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
            meter.arc(&self.0);
        }
    }

    #[test]
    fn an_arc_field_is_charged_whoever_else_holds_it() {
        let a = Arc::new(vec![0u8; 100]);
        let other = Arc::clone(&a);
        assert_eq!(a.heap_bytes(), 100 + 24 + 16);
        let pair = (Arc::clone(&a), Arc::clone(&a));
        assert_eq!(
            pair.heap_bytes(),
            100 + 24 + 16,
            "once however often reached"
        );
        drop(other);
    }

    #[test]
    fn a_counted_arc_is_charged_only_when_held_alone() {
        let a = Counted(Arc::new(vec![0u8; 100]));
        let sole = a.heap_bytes();
        assert_eq!(sole, 100 + 24 + 16);
        let other = Arc::clone(&a.0);
        assert_eq!(a.heap_bytes(), 0);
        drop(other);
        assert_eq!(a.heap_bytes(), sole);
        let weak = Arc::downgrade(&a.0);
        assert_eq!(
            a.heap_bytes(),
            0,
            "a weak reference may upgrade: not charged"
        );
        drop(weak);
    }

    #[test]
    fn a_counted_arc_reached_twice_by_the_priced_values_is_charged_once() {
        let a = Arc::new(vec![0u64; 10]);
        let pair = (Counted(Arc::clone(&a)), Counted(Arc::clone(&a)));
        // The caller's `a` is a third reference: nothing charged.
        assert_eq!(pair.heap_bytes(), 0);
        drop(a);
        assert_eq!(pair.heap_bytes(), 80 + 24 + 16);
        // Key and value priced together: the same rule across both.
        let key = Counted(Arc::clone(&pair.0.0));
        drop(pair);
        let value = vec![Counted(Arc::clone(&key.0))];
        let both = entry_bytes(&key, &value);
        let inline = (std::mem::size_of_val(&key) + std::mem::size_of_val(&value)) as u64;
        assert_eq!(both, inline + 8 + 80 + 24 + 16);
        assert_eq!(key.heap_bytes(), 0, "priced apart, neither charges it");
    }

    #[test]
    fn nested_counted_arcs_are_charged_when_their_holder_is() {
        let inner = Arc::new(vec![1u8; 50]);
        let outer = Counted(Arc::new(vec![Counted(Arc::clone(&inner))]));
        // The caller holds `inner`: the outer block is charged, the inner one not.
        assert_eq!(outer.heap_bytes(), 8 + 24 + 16);
        drop(inner);
        assert_eq!(outer.heap_bytes(), 8 + 24 + 16 + 50 + 24 + 16);
        // A holder that is not charged does not make its children charged.
        let other = Arc::clone(&outer.0);
        assert_eq!(outer.heap_bytes(), 0);
        drop(other);
    }

    #[test]
    fn owned_arcs_are_charged_whatever_their_count() {
        struct Key(Arc<Vec<u8>>);
        impl RetainedBytes for Key {
            fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
                meter.owned_arc(&self.0);
            }
        }
        let g = Arc::new(vec![0u8; 40]);
        let key = Key(Arc::clone(&g));
        assert_eq!(key.heap_bytes(), 40 + 24 + 16);
        // Reached again through a shared reference: still once.
        assert_eq!(entry_bytes(&key, &Arc::clone(&g)) - 16, 40 + 24 + 16);
    }

    #[test]
    fn a_long_chain_of_arcs_does_not_recurse() {
        struct Link(Option<Arc<Link>>);
        impl RetainedBytes for Link {
            fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
                if let Some(next) = &self.0 {
                    meter.arc(next);
                }
            }
        }
        let n = 200_000u64;
        let mut head = Link(None);
        for _ in 0..n {
            head = Link(Some(Arc::new(head)));
        }
        let per = (std::mem::size_of::<Link>() + 16) as u64;
        assert_eq!(head.heap_bytes(), n * per);
        // Dropping the chain recursively would overflow the stack: unlink it iteratively.
        let mut next = head.0.take();
        while let Some(arc) = next {
            next = Arc::try_unwrap(arc).ok().and_then(|mut l| l.0.take());
        }
    }

    #[test]
    fn saturates() {
        assert_eq!(mul_bytes(usize::MAX, usize::MAX), u64::MAX);
    }
}
