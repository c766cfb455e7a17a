//! AD keys and values over graph-core: exact confirmation of hits, forced collisions, bytes.

use std::sync::Arc;

use ad_cache::{
    Cache, CacheKey, Fingerprint, GraphKey, LinearizeKey, LinearizedGraph, RetainedBytes,
    TracedKey, TracedKeyParts, TransformKind, VjpTransform,
};
use graph_core::{Graph, GraphBuilder, Role, ValueId};
use vecad::VecOp;

fn unary(op: VecOp) -> Arc<Graph<VecOp>> {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let (_, y) = b.add_op1(op, &[x.into()], Role::Primary);
    let (_, s) = b.add_op1(VecOp::Sum, &[y.into()], Role::Primary);
    b.set_outputs(&[s]);
    Arc::new(b.build().unwrap())
}

fn grad(g: &Graph<VecOp>, t: &VjpTransform<VecOp>, x: &[f64]) -> Vec<f64> {
    vecad::eval_vjp(g, t, &[x], &[&[1.0]]).unwrap().remove(0)
}

#[test]
fn two_graphs_forced_onto_one_fingerprint_never_share_a_transform() {
    let sin = unary(VecOp::Sin);
    let exp = unary(VecOp::Exp);
    assert_ne!(sin.fingerprint(), exp.fingerprint());
    let forced = Fingerprint(0xDEAD_BEEF);
    let key_sin = LinearizeKey::new(Arc::clone(&sin), &[0])
        .unwrap()
        .with_fingerprint(forced);
    let key_exp = LinearizeKey::new(Arc::clone(&exp), &[0])
        .unwrap()
        .with_fingerprint(forced);
    let cache: Cache<LinearizeKey<VecOp>, VjpTransform<VecOp>> = Cache::new();

    let t_sin = cache
        .get_or_insert_with(key_sin.clone(), || vecad::vjp(&sin, &[0]))
        .unwrap();
    assert!(
        cache.get(&key_exp).is_none(),
        "exp must not get sin's transform"
    );
    let t_exp = cache
        .get_or_insert_with(key_exp.clone(), || vecad::vjp(&exp, &[0]))
        .unwrap();
    assert!(!Arc::ptr_eq(&t_sin, &t_exp));
    // The transform returned for exp really is exp's: d/dx sum(exp x) = exp x.
    let x = [0.25, 1.5];
    let g = grad(&exp, &t_exp, &x);
    assert!((g[1] - 1.5f64.exp()).abs() < 1e-12);
    let from_cache = cache.get(&key_exp).unwrap();
    assert!(Arc::ptr_eq(&from_cache, &t_exp));
    let s = cache.stats();
    // get(exp) on sin's entry; get_or_insert_with(exp)'s miss on it; its insert displacing it.
    assert_eq!(s.collisions, 3);
    assert_eq!((s.hits, s.entries), (1, 1));
    assert!(
        cache.get(&key_sin).is_none(),
        "sin's entry was displaced, not aliased"
    );
}

#[test]
fn traced_keys_forced_onto_one_fingerprint_are_told_apart() {
    let sin = unary(VecOp::Sin);
    let cos = unary(VecOp::Cos);
    let out = |g: &Arc<Graph<VecOp>>| g.outputs()[0];
    let a = TracedKey::new(TracedKeyParts {
        kind: TransformKind::Vjp,
        roots: vec![Arc::clone(&sin)],
        output_root: 0,
        output: out(&sin),
        wrt: 0,
        aliases: vec![],
    })
    .unwrap()
    .with_fingerprint(Fingerprint(1));
    let b = TracedKey::new(TracedKeyParts {
        kind: TransformKind::Vjp,
        roots: vec![Arc::clone(&cos)],
        output_root: 0,
        output: out(&cos),
        wrt: 0,
        aliases: vec![],
    })
    .unwrap()
    .with_fingerprint(Fingerprint(1));
    let cache: Cache<TracedKey<VecOp>, VjpTransform<VecOp>> = Cache::new();
    cache.insert(a.clone(), vecad::vjp(&sin, &[0]).unwrap());
    assert!(cache.get(&b).is_none());
    assert_eq!(cache.stats().collisions, 1);
    assert!(cache.get(&a).is_some());
}

#[test]
fn an_equal_graph_built_separately_hits_through_structural_equality() {
    let a = unary(VecOp::Cos);
    let b = unary(VecOp::Cos);
    assert!(!Arc::ptr_eq(&a, &b));
    let cache: Cache<GraphKey<VecOp>, VjpTransform<VecOp>> = Cache::new();
    let first = cache
        .get_or_insert_with(GraphKey::new(Arc::clone(&a)), || vecad::vjp(&a, &[0]))
        .unwrap();
    let second = cache
        .get_or_insert_with(
            GraphKey::new(Arc::clone(&b)),
            || -> Result<_, vecad::VecAdError> { panic!("an equal graph must hit") },
        )
        .unwrap();
    assert!(Arc::ptr_eq(&first, &second));
    assert_eq!(cache.stats().hits, 1);
}

#[test]
fn linearize_key_distinguishes_output_slots() {
    let g = unary(VecOp::Sin);
    let all = LinearizeKey::all_outputs(Arc::clone(&g));
    let one = LinearizeKey::new(Arc::clone(&g), &[0]).unwrap();
    let none = LinearizeKey::new(Arc::clone(&g), &[]).unwrap();
    assert_eq!(all.fingerprint(), one.fingerprint());
    assert!(all.same_key(&one));
    assert_ne!(one.fingerprint(), none.fingerprint());
    assert!(!one.same_key(&none));
    assert!(matches!(
        LinearizeKey::new(g, &[1]),
        Err(ad_cache::KeyError::OutputSlot {
            slot: 1,
            outputs: 1
        })
    ));
}

/// A graph with two outputs, its values numbered in the order given.
fn two_outputs(sin_first: bool) -> Arc<Graph<VecOp>> {
    let mut b = GraphBuilder::new();
    let x = b.add_input(3);
    let y = b.add_input(4);
    let (s, c) = if sin_first {
        let s = b.add_op1(VecOp::Sin, &[x.into()], Role::Primary).1;
        (s, b.add_op1(VecOp::Cos, &[y.into()], Role::Primary).1)
    } else {
        let c = b.add_op1(VecOp::Cos, &[y.into()], Role::Primary).1;
        (b.add_op1(VecOp::Sin, &[x.into()], Role::Primary).1, c)
    };
    b.set_outputs(&[s, c]);
    Arc::new(b.build().unwrap())
}

#[test]
fn traced_key_fields_and_canonical_outputs() {
    let g1 = two_outputs(true);
    let g2 = two_outputs(false);
    let key = |g: &Arc<Graph<VecOp>>, kind, slot: usize, wrt, aliases: Vec<(u64, u64)>| {
        TracedKey::new(TracedKeyParts {
            kind,
            roots: vec![Arc::clone(g)],
            output_root: 0,
            output: g.outputs()[slot],
            wrt,
            aliases,
        })
        .unwrap()
    };
    let base = key(&g1, TransformKind::Vjp, 0, 3, vec![(1, 2), (5, 6)]);
    // Renumbered graph, permuted alias map: the same key.
    let same = key(&g2, TransformKind::Vjp, 0, 3, vec![(5, 6), (1, 2), (1, 2)]);
    assert_eq!(base.fingerprint(), same.fingerprint());
    assert!(base.same_key(&same));
    for other in [
        key(&g1, TransformKind::Jvp, 0, 3, vec![(1, 2), (5, 6)]),
        key(&g1, TransformKind::Vjp, 1, 3, vec![(1, 2), (5, 6)]),
        key(&g1, TransformKind::Vjp, 0, 4, vec![(1, 2), (5, 6)]),
        key(&g1, TransformKind::Vjp, 0, 3, vec![(1, 2)]),
        key(&g1, TransformKind::Vjp, 0, 3, vec![(1, 2), (6, 5)]),
    ] {
        assert_ne!(base.fingerprint(), other.fingerprint(), "{other:?}");
        assert!(!base.same_key(&other), "{other:?}");
    }
    // Several roots sharing a parent: the order of roots matters, each root enters once.
    let two = TracedKey::new(TracedKeyParts {
        kind: TransformKind::Vjp,
        roots: vec![Arc::clone(&g1), unary(VecOp::Exp)],
        output_root: 0,
        output: g1.outputs()[0],
        wrt: 3,
        aliases: vec![],
    })
    .unwrap();
    let swapped = TracedKey::new(TracedKeyParts {
        kind: TransformKind::Vjp,
        roots: vec![unary(VecOp::Exp), Arc::clone(&g1)],
        output_root: 1,
        output: g1.outputs()[0],
        wrt: 3,
        aliases: vec![],
    })
    .unwrap();
    assert_ne!(two.fingerprint(), swapped.fingerprint());
    assert!(matches!(
        TracedKey::new(TracedKeyParts {
            kind: TransformKind::Vjp,
            roots: vec![Arc::clone(&g1)],
            output_root: 1,
            output: ValueId(0),
            wrt: 0,
            aliases: vec![]
        }),
        Err(ad_cache::KeyError::NoSuchRoot { .. })
    ));
    assert!(matches!(
        TracedKey::new(TracedKeyParts {
            kind: TransformKind::Vjp,
            roots: vec![g1],
            output_root: 0,
            output: ValueId(99),
            wrt: 0,
            aliases: vec![]
        }),
        Err(ad_cache::KeyError::DeadOutput { .. })
    ));
}

#[test]
fn graph_bytes_grow_with_the_graph() {
    let small = vecad::chain_graph(10, 3).unwrap();
    let big = vecad::chain_graph(1000, 3).unwrap();
    let (s, b) = (small.retained_bytes(), big.retained_bytes());
    assert!(s > 0 && b > 50 * s, "small {s}, big {b}");
    // Per operation, at least the op record and its operands.
    let per_op = std::mem::size_of::<VecOp>() + std::mem::size_of::<Role>();
    assert!(b >= 1000 * per_op as u64);
}

/// A graph without parents with heap-owning payloads (names of different lengths) and a
/// linearized operation's mask.
fn named_graph(n: usize) -> Graph<String> {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let y = b.add_input(1);
    let mut last = x;
    for i in 0..n {
        let name = "op".repeat(i % 5 + 1);
        let role = if i % 3 == 0 {
            Role::Linearized {
                active: vec![true, false],
            }
        } else {
            Role::Primary
        };
        let (_, v) = b.add_op1(name, &[last.into(), y.into()], role);
        last = v;
    }
    b.set_outputs(&[last]);
    b.build().unwrap()
}

#[test]
fn graph_bytes_are_graph_cores_table_heap_plus_payload_heap() {
    for n in [0, 1, 7, 300] {
        let g = named_graph(n);
        let payload_heap: u64 = g.ops().map(|op| op.payload().capacity() as u64).sum();
        let check = |g: &Graph<String>| {
            let expected = g.arena_heap_bytes() as u64 + payload_heap;
            assert_eq!(g.heap_bytes(), expected, "{n} ops");
            assert_eq!(
                g.retained_bytes(),
                std::mem::size_of::<Graph<String>>() as u64 + expected,
                "{n} ops"
            );
        };
        check(&g);
        // Value hashes are graph-core tables too once computed: still in agreement.
        let before = g.arena_heap_bytes();
        let _ = g.value_hashes();
        assert!(n == 0 || g.arena_heap_bytes() > before);
        check(&g);
        // Held alone through an Arc: the graph, the Arc's counters and the same heap.
        let arc = Arc::new(g);
        assert_eq!(
            arc.heap_bytes(),
            std::mem::size_of::<Graph<String>>() as u64
                + 2 * std::mem::size_of::<usize>() as u64
                + arc.arena_heap_bytes() as u64
                + payload_heap
        );
    }
    // Heap-free payloads: exactly graph-core's figure.
    let g = vecad::chain_graph(50, 3).unwrap();
    if <VecOp as RetainedBytes>::HEAP_FREE {
        assert_eq!(g.heap_bytes(), g.arena_heap_bytes() as u64);
    } else {
        let payload_heap: u64 = g.ops().map(|op| op.payload().heap_bytes()).sum();
        assert_eq!(g.heap_bytes(), g.arena_heap_bytes() as u64 + payload_heap);
    }
}

#[test]
fn a_parent_the_caller_shares_is_not_charged_and_shared_parents_count_once() {
    let primal = Arc::new(vecad::chain_graph(200, 9).unwrap());
    let lin = vecad::linearize(&primal, &[0]).unwrap();
    let shared = lin.retained_bytes();
    let primal_own = primal.retained_bytes();
    // Dropping the caller's handle leaves the linear graph the primal's only owner.
    let weak_primal_bytes = {
        let LinearizedGraph {
            graph,
            tangent_inputs,
            tangent_outputs,
        } = lin;
        drop(primal);
        let lin = LinearizedGraph {
            graph,
            tangent_inputs,
            tangent_outputs,
        };
        lin.retained_bytes()
    };
    assert!(
        weak_primal_bytes >= shared + primal_own - 64,
        "sole owner charges the primal: {weak_primal_bytes} vs {shared} + {primal_own}"
    );

    // The VJP transform holds the residual graph twice (field and parent): charged once.
    let primal = Arc::new(vecad::chain_graph(200, 9).unwrap());
    let t = vecad::vjp(&primal, &[0]).unwrap();
    // Priced as an `Arc` field on its own (the default): charged in full with its parent,
    // the primal, whoever else holds them.
    let residual_alone = t.residual.heap_bytes();
    assert_eq!(
        residual_alone,
        (*t.residual).retained_bytes() + 16 + (*primal).retained_bytes() + 16
    );
    let whole = t.retained_bytes();
    // Priced alone, the transposed graph sees one of the residual's two references.
    let transposed_only = t.transposed.heap_bytes();
    assert_eq!(transposed_only, t.transposed.arena_heap_bytes() as u64);
    let inline = std::mem::size_of::<VjpTransform<VecOp>>() as u64;
    // The residual graph's own bytes (its parent, the primal, is the caller's).
    let residual_size = (*t.residual).retained_bytes() + 16;
    assert_eq!(whole, inline + transposed_only + residual_size);
    // Once the caller also holds the residual, it is no longer charged.
    let extra = Arc::clone(&t.residual);
    assert_eq!(t.retained_bytes(), inline + transposed_only);
    drop(extra);
}

#[test]
fn repeated_vjp_requests_hit() {
    let primal = Arc::new(vecad::chain_graph(300, 5).unwrap());
    let cache: Cache<LinearizeKey<VecOp>, VjpTransform<VecOp>> = Cache::new();
    let mut builds = 0;
    for _ in 0..10 {
        let key = LinearizeKey::new(Arc::clone(&primal), &[0]).unwrap();
        cache
            .get_or_insert_with(key, || {
                builds += 1;
                vecad::vjp(&primal, &[0])
            })
            .unwrap();
    }
    assert_eq!(builds, 1);
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.inserts), (9, 1, 1));
    assert!(s.retained_bytes > 0);
}

#[test]
fn concurrent_requests_for_one_transform_build_it_once() {
    let primal = Arc::new(vecad::chain_graph(2_000, 17).unwrap());
    let cache: Arc<Cache<LinearizeKey<VecOp>, VjpTransform<VecOp>>> = Arc::new(Cache::new());
    let builds = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let threads = 4;
    let barrier = Arc::new(std::sync::Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            // Each thread re-records the program: an equal graph in its own Arc.
            let mine = Arc::new((*primal).clone());
            let (cache, builds, barrier) = (
                Arc::clone(&cache),
                Arc::clone(&builds),
                Arc::clone(&barrier),
            );
            std::thread::spawn(move || {
                let key = LinearizeKey::new(Arc::clone(&mine), &[0]).unwrap();
                barrier.wait();
                cache
                    .get_or_insert_with(key, || {
                        builds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        vecad::vjp(&mine, &[0])
                    })
                    .unwrap()
            })
        })
        .collect();
    let got: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(builds.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(got.iter().all(|t| Arc::ptr_eq(t, &got[0])));
    let s = cache.stats();
    assert_eq!((s.hits + s.misses, s.inserts), (threads as u64, 1));
}

#[test]
fn linearize_key_fingerprint_is_the_documented_encoding() {
    let g = unary(VecOp::Sin);
    let key = LinearizeKey::new(Arc::clone(&g), &[0]).unwrap();
    let mut bytes = Vec::new();
    let domain = ad_cache::LINEARIZE_KEY_DOMAIN;
    bytes.extend_from_slice(&(domain.len() as u64).to_le_bytes());
    bytes.extend_from_slice(domain.as_bytes());
    bytes.extend_from_slice(&ad_cache::KEY_VERSION.to_le_bytes());
    bytes.extend_from_slice(&g.fingerprint().0.to_le_bytes());
    bytes.extend_from_slice(&1u64.to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    assert_eq!(key.fingerprint(), Fingerprint::of_bytes(&bytes));
    assert_eq!(domain, "tracegraph.ad-cache.linearize-key");
}

#[test]
fn traced_key_fingerprint_is_the_documented_encoding() {
    let g = unary(VecOp::Sin);
    let key = TracedKey::new(TracedKeyParts {
        kind: TransformKind::Vjp,
        roots: vec![Arc::clone(&g)],
        output_root: 0,
        output: g.outputs()[0],
        wrt: 7,
        aliases: vec![(2, 1), (1, 0), (2, 1)],
    })
    .unwrap();
    let mut h = graph_core::StableHasher::with_domain(ad_cache::TRACED_KEY_DOMAIN, 1);
    h.write_tag(1); // Vjp
    h.write_len(1);
    h.write_fingerprint(g.fingerprint());
    h.write_u32(0);
    h.write_u32(g.canonical_index(g.outputs()[0]).unwrap());
    h.write_u64(7);
    let mut aliases = graph_core::UnorderedFingerprint::new();
    aliases.add(&(1u64, 0u64));
    aliases.add(&(2u64, 1u64));
    h.write_fingerprint(aliases.finish());
    assert_eq!(key.fingerprint(), h.finish());
    assert_eq!(
        ad_cache::TRACED_KEY_DOMAIN,
        "tracegraph.ad-cache.traced-key"
    );
}

#[test]
fn get_or_insert_with_prices_an_entry_like_insert() {
    // The caller hands the key's graph to the cache (no other reference): both ways of
    // storing must charge it, and the same amount.
    let key = || GraphKey::new(unary(VecOp::Sin));
    let by_insert: Cache<GraphKey<VecOp>, u64> = Cache::new();
    by_insert.insert(key(), 1);
    let by_flight: Cache<GraphKey<VecOp>, u64> = Cache::new();
    by_flight
        .get_or_insert_with(key(), || Ok::<_, std::convert::Infallible>(1))
        .unwrap();
    let charged = by_insert.retained_bytes();
    assert!(
        charged > key().retained_bytes() / 2,
        "the sole-owned graph is charged"
    );
    assert_eq!(by_flight.retained_bytes(), charged);
}

/// `f(x, y) = sum(sin(x) * exp(y))`, its operations added in either order (the same graph,
/// numbered differently).
fn renumbered(sin_first: bool) -> Arc<Graph<VecOp>> {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let y = b.add_input(1);
    let p = Role::Primary;
    let (s, e) = if sin_first {
        let s = b.add_op1(VecOp::Sin, &[x.into()], p.clone()).1;
        (s, b.add_op1(VecOp::Exp, &[y.into()], p.clone()).1)
    } else {
        let e = b.add_op1(VecOp::Exp, &[y.into()], p.clone()).1;
        (b.add_op1(VecOp::Sin, &[x.into()], p.clone()).1, e)
    };
    let (_, m) = b.add_op1(VecOp::Mul, &[s.into(), e.into()], p.clone());
    let (_, out) = b.add_op1(VecOp::Sum, &[m.into()], p);
    b.set_outputs(&[out]);
    Arc::new(b.build().unwrap())
}

#[test]
fn a_transform_hit_for_a_renumbered_graph_evaluates_against_it() {
    let (a, b) = (renumbered(true), renumbered(false));
    assert_eq!(a.fingerprint(), b.fingerprint());
    let cache: Cache<LinearizeKey<VecOp>, VjpTransform<VecOp>> = Cache::new();
    let from_a = cache
        .get_or_insert_with(LinearizeKey::new(Arc::clone(&a), &[0]).unwrap(), || {
            vecad::vjp(&a, &[0])
        })
        .unwrap();
    // `b` hits `a`'s transform, whose parents are `a`: evaluating it with `b`'s values must
    // read them by position in the canonical numbering, not by `a`'s arena ids.
    let hit = cache
        .get(&LinearizeKey::new(Arc::clone(&b), &[0]).unwrap())
        .unwrap();
    assert!(Arc::ptr_eq(&from_a, &hit));
    let (x, y) = ([0.3, -1.2], [0.7, 0.1]);
    let own = vecad::vjp(&b, &[0]).unwrap();
    let expected = vecad::eval_vjp(&b, &own, &[&x, &y], &[&[1.0]]).unwrap();
    let got = vecad::eval_vjp(&b, &hit, &[&x, &y], &[&[1.0]]).unwrap();
    assert_eq!(got, expected);
    for (i, (xi, yi)) in x.iter().zip(y).enumerate() {
        assert!((expected[0][i] - xi.cos() * yi.exp()).abs() < 1e-12);
        assert!((expected[1][i] - xi.sin() * yi.exp()).abs() < 1e-12);
    }
}

#[test]
fn generic_keys_work_over_graph_core_graphs() {
    use ad_cache::{EagerKey, EngineTracedKey, EngineTracedParts, KeyError, TracedOutput};
    let (sin, sin2, exp) = (unary(VecOp::Sin), unary(VecOp::Sin), unary(VecOp::Exp));
    let eager = |g: &Arc<Graph<VecOp>>| EagerKey::new(Arc::clone(g), &[0]).unwrap();
    assert!(eager(&sin).same_key(&eager(&sin2)));
    assert_eq!(eager(&sin).quick_eq(&eager(&sin2)), None);
    assert_eq!(eager(&sin).quick_eq(&eager(&sin)), Some(true));
    assert!(!eager(&sin).same_key(&eager(&exp)));
    assert_ne!(eager(&sin).fingerprint(), eager(&exp).fingerprint());
    assert_eq!(
        EagerKey::new(Arc::clone(&sin), &[1]).unwrap_err(),
        KeyError::OutputSlot {
            slot: 1,
            outputs: 1
        }
    );
    // Engine-defined entries: strings as input keys, canonically named outputs, pairs of
    // names as alias entries, in any order.
    let traced = |g: &Arc<Graph<VecOp>>, aliases: Vec<(String, String)>| {
        let roots = vec![Arc::clone(g)];
        let output = TracedOutput::of(&roots, 0, g.outputs()[0]).unwrap();
        assert_eq!((output.root(), output.canonical()), (0, 2));
        EngineTracedKey::new(EngineTracedParts {
            kind: TransformKind::Vjp,
            roots,
            output,
            wrt: "x".to_string(),
            aliases,
        })
        .unwrap()
    };
    // An output part that names no value of the canonical graph is a typed error, not a
    // key that silently misses: one input and two operations make canonical indices 0 to 2.
    let with_output = |output: TracedOutput| {
        EngineTracedKey::<_, u64, _, u64>::new(EngineTracedParts {
            kind: TransformKind::Vjp,
            roots: vec![Arc::clone(&sin)],
            output,
            wrt: 0,
            aliases: Vec::new(),
        })
        .map(|_| ())
    };
    let name =
        |g: &Arc<Graph<VecOp>>| TracedOutput::of(&[Arc::clone(g)], 0, g.outputs()[0]).unwrap();
    assert_eq!(with_output(name(&sin)), Ok(()));
    // Named in a structurally equal graph: the same value.
    assert_eq!(with_output(name(&sin2)), Ok(()));
    // Named in another graph: its index would name an unrelated value here.
    assert_eq!(
        with_output(name(&exp)),
        Err(KeyError::ForeignValue { root: 0 })
    );
    // Named in root 1 of two roots, used with one root.
    let two = [Arc::clone(&exp), Arc::clone(&sin)];
    assert_eq!(
        with_output(TracedOutput::of(&two, 1, sin.outputs()[0]).unwrap()),
        Err(KeyError::NoSuchRoot { root: 1, roots: 1 })
    );
    assert_eq!(
        TracedOutput::of(&[Arc::clone(&sin)], 1, sin.outputs()[0]),
        Err(KeyError::NoSuchRoot { root: 1, roots: 1 })
    );
    assert_eq!(
        TracedOutput::of(&[Arc::clone(&sin)], 0, graph_core::ValueId(99)),
        Err(KeyError::NotLive { root: 0 })
    );
    let pairs = vec![("a".to_string(), "b".to_string()), ("c".into(), "d".into())];
    let mut reversed = pairs.clone();
    reversed.reverse();
    assert!(traced(&sin, pairs.clone()).same_key(&traced(&sin2, reversed.clone())));
    assert_eq!(
        traced(&sin, pairs.clone()).fingerprint(),
        traced(&sin2, reversed).fingerprint()
    );
    assert!(!traced(&sin, pairs.clone()).same_key(&traced(&sin, pairs[..1].to_vec())));
    assert!(!traced(&sin, pairs.clone()).same_key(&traced(&exp, pairs)));
    let no_roots = EngineTracedKey::<Graph<VecOp>, u64, _, u64>::new(EngineTracedParts {
        kind: TransformKind::Jvp,
        roots: Vec::new(),
        output: name(&sin),
        wrt: 0,
        aliases: Vec::new(),
    });
    assert_eq!(
        no_roots.unwrap_err(),
        KeyError::NoSuchRoot { root: 0, roots: 0 }
    );
    let cache: Cache<EagerKey<Graph<VecOp>>, u32> = Cache::new();
    cache.insert(eager(&sin), 1);
    assert_eq!(cache.get(&eager(&sin2)).as_deref(), Some(&1));
    assert!(cache.stats().retained_bytes > 0);
}
