//! Miss explanations, per-kind counters and eviction reasons.

use std::sync::Arc;

use ad_cache::{Cache, CacheLimits, GraphKey, HeapMeter, RetainedBytes};
use graph_core::{Graph, GraphBuilder, Role, StableHash, StableHasher};

/// An operation with a shape, as a tensor engine records it.
#[derive(Debug, Clone, PartialEq)]
enum Shaped {
    /// Reads graph input 0 as a tensor of this shape.
    Load(Vec<usize>),
    Relu,
}

impl StableHash for Shaped {
    fn stable_hash(&self, h: &mut StableHasher) {
        match self {
            Shaped::Load(shape) => {
                h.write_tag(0);
                h.write_len(shape.len());
                for &d in shape {
                    h.write_u64(d as u64);
                }
            }
            Shaped::Relu => h.write_tag(1),
        }
    }
}

impl RetainedBytes for Shaped {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        if let Shaped::Load(shape) = self {
            shape.visit_heap(meter);
        }
    }
}

/// `relu(load(x: shape))`.
fn record(shape: &[usize]) -> Arc<Graph<Shaped>> {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let (_, l) = b.add_op1(Shaped::Load(shape.to_vec()), &[x.into()], Role::Primary);
    let (_, y) = b.add_op1(Shaped::Relu, &[l.into()], Role::Primary);
    b.set_outputs(&[y]);
    Arc::new(b.build().unwrap())
}

#[test]
fn a_miss_names_the_shape_that_differs_and_its_cost() {
    let cache: Cache<GraphKey<Shaped>, Vec<u64>> = Cache::new();
    cache.set_explain_misses(true);
    let compute = |n: usize| move || Ok::<_, String>(vec![7u64; n]);
    cache
        .get_or_insert_with(GraphKey::new(record(&[2, 3])), compute(100))
        .unwrap();
    cache
        .get_or_insert_with(GraphKey::new(record(&[2, 4])), compute(200))
        .unwrap();
    // A re-recording of the first: a hit, nothing to explain.
    cache
        .get_or_insert_with(GraphKey::new(record(&[2, 3])), compute(1))
        .unwrap();
    let explained = cache.take_miss_explanations();
    assert_eq!(explained.len(), 2, "{explained:?}");
    assert_eq!(
        explained[0].compared, 0,
        "nothing cached to compare the first with"
    );
    assert!(explained[0].closest.is_none());
    let second = &explained[1];
    assert_eq!(second.kind, "graph");
    assert_eq!(second.compared, 1);
    let diff = second.closest.as_ref().expect("a difference");
    assert!(
        diff.what.contains("[2, 4]") && diff.what.contains("[2, 3]"),
        "{}",
        diff.what
    );
    assert_eq!(
        diff.agree, 1,
        "the input agrees, the first operation differs"
    );
    // The miss's cost: its compute time and what its entry retains.
    assert!(second.compute_time.is_some());
    let bytes = cache
        .entries()
        .into_iter()
        .find(|(k, _)| k.graph().fingerprint() == record(&[2, 4]).fingerprint())
        .map(|(_, b)| b);
    assert_eq!(second.retained_bytes, bytes);
    assert!(bytes.is_some_and(|b| b > 200 * 8));
    let text = second.to_string();
    assert!(
        text.contains("[2, 4]") && text.contains("costing"),
        "{text}"
    );
    // Drained.
    assert!(cache.take_miss_explanations().is_empty());
    // On demand, for a key not cached: the closest of both cached keys.
    let why = cache
        .explain(&GraphKey::new(record(&[3, 4])))
        .expect("a miss");
    assert_eq!(why.compared, 2);
    assert!(why.closest.expect("closest").what.contains("[3, 4]"));
    assert!(cache.explain(&GraphKey::new(record(&[2, 4]))).is_none());
}

#[test]
fn kind_counters_survive_eviction_and_clear() {
    let cache: Cache<GraphKey<Shaped>, u64> = Cache::with_limits(CacheLimits {
        max_entries: std::num::NonZeroUsize::new(1).unwrap(),
        ..CacheLimits::default()
    });
    for shape in [[1, 1], [1, 2], [1, 1]] {
        cache
            .get_or_insert_with(GraphKey::new(record(&shape)), || Ok::<_, String>(1))
            .unwrap();
    }
    cache.clear();
    let kinds = cache.kind_stats();
    assert_eq!(kinds.len(), 1);
    assert_eq!(
        (
            kinds[0].kind,
            kinds[0].hits,
            kinds[0].misses,
            kinds[0].computed
        ),
        ("graph", 0, 3, 3)
    );
    let s = cache.stats();
    assert_eq!(
        (s.evictions, s.evicted_for_entries, s.evicted_for_bytes),
        (2, 2, 0)
    );
    cache.reset_stats();
    assert!(cache.kind_stats().is_empty());
}

#[test]
fn eviction_reasons_are_counted_apart() {
    let cache: Cache<u64, Vec<u8>> = Cache::with_limits(CacheLimits {
        max_entries: std::num::NonZeroUsize::new(2).unwrap(),
        max_retained_bytes: Some(10_000),
    });
    cache.insert(1, vec![0; 10]);
    cache.insert(2, vec![0; 10]);
    cache.insert(3, vec![0; 10]); // evicts 1 for the entry limit
    cache.remove(&3); // explicit: not an eviction
    // 8 + 24 + 9_950 bytes, with entry 2's 42 over the byte limit: evicts 2 for bytes.
    cache.insert(4, vec![0; 9_950]);
    cache.insert(5, vec![0; 20_000]); // oversize: rejected
    let s = cache.stats();
    assert_eq!(
        (
            s.evicted_for_entries,
            s.evicted_for_bytes,
            s.rejected,
            s.removals,
            s.evictions
        ),
        (1, 1, 1, 1, 2),
        "{s:?}"
    );
}
