//! Traversals: topological order, reachability, consumers, pruning, subgraphs, value groups.

use std::sync::Arc;

use graph_core::{GraphBuilder, OpId, Role, ValueId, ValueRef, structural_eq};

use crate::common::{TOp, mlp};

/// x, w -> a = add(x, w); b = mul(a, x); dead = const(x); c = named(b); outputs [c, a].
fn with_dead_code() -> (graph_core::Graph<TOp>, [ValueId; 6]) {
    let mut g = GraphBuilder::new();
    let x = g.add_input(10);
    let w = g.add_input(11);
    let (_, a) = g.add_op1(TOp::Add, &[x.into(), w.into()], Role::Primary);
    let (_, b) = g.add_op1(TOp::Mul, &[a.into(), x.into()], Role::Primary);
    let (_, dead) = g.add_op1(TOp::Const(3), &[x.into()], Role::Primary);
    let (_, c) = g.add_op1(TOp::Named("n".into()), &[b.into()], Role::Primary);
    g.set_outputs(&[c, a]);
    (g.build().expect("valid"), [x, w, a, b, dead, c])
}

#[test]
fn topo_order_respects_dependencies() {
    let (g, _) = with_dead_code();
    let order = g.topo_order();
    assert_eq!(order.len(), g.num_ops());
    let mut pos = vec![usize::MAX; g.num_ops()];
    for (i, op) in order.iter().enumerate() {
        pos[op.index()] = i;
    }
    for op in g.ops() {
        for r in op.inputs() {
            if let ValueRef::Local(v) = r
                && let Some((p, _)) = g.producer(*v)
            {
                assert!(pos[p.index()] < pos[op.id().index()]);
            }
        }
    }
}

#[test]
fn canonical_order_is_post_order_from_outputs() {
    let (g, [x, w, a, b, dead, c]) = with_dead_code();
    assert_eq!(g.canonical_ops(), &[OpId(0), OpId(1), OpId(3)]);
    assert_eq!(g.canonical_index(x), Some(0));
    assert_eq!(g.canonical_index(w), Some(1));
    assert_eq!(g.canonical_index(a), Some(2));
    assert_eq!(g.canonical_index(b), Some(3));
    assert_eq!(g.canonical_index(c), Some(4));
    assert_eq!(g.canonical_index(dead), None);
    assert!(!g.is_live_op(OpId(2)));
    assert!(g.is_live_op(OpId(3)));
}

#[test]
fn ancestors_and_reachability() {
    let (g, [x, w, a, b, dead, c]) = with_dead_code();
    let r = g.ancestors(&[b]).expect("known value");
    assert_eq!(r.values().collect::<Vec<_>>(), vec![x, w, a, b]);
    assert_eq!(r.ops().collect::<Vec<_>>(), vec![OpId(0), OpId(1)]);
    assert_eq!((r.num_values(), r.num_ops()), (4, 2));
    assert!(!r.contains_value(c) && !r.contains_op(OpId(3)));
    let live = g.reachable_from_outputs();
    assert!(!live.contains_value(dead));
    assert_eq!(live.num_ops(), 3);
    assert_eq!(
        g.ancestors(&[ValueId(77)]).unwrap_err(),
        graph_core::GraphError::UnknownValue { value: ValueId(77) }
    );
}

#[test]
fn consumers_lists_each_reader_once() {
    let (g, [x, _, a, _, dead, _]) = with_dead_code();
    let users = g.consumers();
    assert_eq!(users[x.index()], vec![OpId(0), OpId(1), OpId(2)]);
    assert_eq!(users[a.index()], vec![OpId(1)]);
    assert!(users[dead.index()].is_empty());
}

#[test]
fn prune_to_own_outputs_keeps_fingerprint_and_drops_dead_code() {
    let (g, [_, _, a, _, dead, _]) = with_dead_code();
    let p = g.prune_to(g.outputs()).expect("prune");
    assert_eq!(p.graph.num_ops(), 3);
    assert_eq!(p.graph.fingerprint(), g.fingerprint());
    assert!(structural_eq(&p.graph, &g));
    assert_eq!(p.value_map[dead.index()], None);
    assert_eq!(p.op_map[2], None);
    let na = p.value_map[a.index()].expect("a kept");
    assert_eq!(p.graph.producer(na).map(|(op, _)| op), p.op_map[0]);

    // Pruning to `a` alone keeps both inputs but only one operation.
    let q = g.prune_to(&[a]).expect("prune to a");
    assert_eq!(q.graph.num_ops(), 1);
    assert_eq!(q.graph.inputs().len(), 2);
    assert_ne!(q.graph.fingerprint(), g.fingerprint());
}

#[test]
fn extract_subgraph_keeps_only_needed_inputs() {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let y = b.add_input(1);
    let z = b.add_input(2);
    let (_, s) = b.add_op1(TOp::Named("sin".into()), &[z.into()], Role::Primary);
    let (_, t) = b.add_op1(TOp::Add, &[x.into(), y.into()], Role::Primary);
    let (_, u) = b.add_op1(TOp::Mul, &[s.into(), t.into()], Role::Primary);
    b.set_outputs(&[u]);
    let g = b.build().expect("valid");
    let e = g.extract_subgraph(&[s]).expect("extract");
    assert_eq!(e.graph.num_ops(), 1);
    assert_eq!(e.graph.inputs().len(), 1);
    assert_eq!(
        e.graph.value_key(e.graph.inputs()[0]),
        Some(graph_core::ValueKey::Input(2))
    );
    // The same computation built directly has the same fingerprint.
    let mut d = GraphBuilder::new();
    let z = d.add_input(2);
    let (_, s) = d.add_op1(TOp::Named("sin".into()), &[z.into()], Role::Primary);
    d.set_outputs(&[s]);
    assert_eq!(
        d.build().expect("valid").fingerprint(),
        e.graph.fingerprint()
    );
}

#[test]
fn extraction_keeps_parents_it_reads() {
    let parent = Arc::new(mlp());
    let unused = Arc::new(with_dead_code().0);
    let mut b = GraphBuilder::new();
    b.add_parent(unused);
    let p = b.add_parent(parent.clone());
    let x = b.add_input(0);
    let (_, y) = b.add_op1(
        TOp::Add,
        &[
            x.into(),
            ValueRef::Parent {
                parent: p,
                value: parent.outputs()[0],
            },
        ],
        Role::Primary,
    );
    b.set_outputs(&[y]);
    let g = b.build().expect("valid");
    let e = g.prune_to(&[y]).expect("prune");
    assert_eq!(e.graph.parents().len(), 1);
    assert!(Arc::ptr_eq(&e.graph.parents()[0], &parent));
    assert_eq!(e.graph.fingerprint(), g.fingerprint());
}

#[test]
fn repeated_layers_are_grouped() {
    // Two identical branches from the same input, and one that differs.
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let (_, a1) = b.add_op1(TOp::Named("linear".into()), &[x.into()], Role::Primary);
    let (_, r1) = b.add_op1(TOp::Named("relu".into()), &[a1.into()], Role::Primary);
    let (_, a2) = b.add_op1(TOp::Named("linear".into()), &[x.into()], Role::Primary);
    let (_, r2) = b.add_op1(TOp::Named("relu".into()), &[a2.into()], Role::Primary);
    let (_, a3) = b.add_op1(TOp::Named("linear2".into()), &[x.into()], Role::Primary);
    let (_, r3) = b.add_op1(TOp::Named("relu".into()), &[a3.into()], Role::Primary);
    b.set_outputs(&[r1, r2, r3]);
    let g = b.build().expect("valid");
    assert_eq!(g.group_identical_values(), vec![vec![a1, a2], vec![r1, r2]]);
    assert_eq!(
        g.group_identical_ops(),
        vec![vec![OpId(0), OpId(2)], vec![OpId(1), OpId(3)]]
    );
    assert!(g.values_equivalent(r1, r2).expect("known"));
    assert!(!g.values_equivalent(r1, r3).expect("known"));
    assert!(!g.values_equivalent(x, r3).expect("known"));
    assert_eq!(g.value_hash(r1), g.value_hash(r2));
    assert_ne!(g.value_hash(r1), g.value_hash(r3));
    assert!(g.values_equivalent(x, ValueId(99)).is_err());
}

#[test]
fn value_hashes_distinguish_slots_and_inputs() {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let y = b.add_input(0);
    let (_, outs) = b.add_op(TOp::Named("split".into()), &[x.into()], 2, Role::Primary);
    b.set_outputs(&outs);
    let g = b.build().expect("valid");
    let h = g.value_hashes();
    assert_eq!(h.len(), 4);
    assert_ne!(h[x.index()], h[y.index()], "inputs differ by position");
    assert_ne!(h[outs[0].index()], h[outs[1].index()], "slots differ");
    assert!(g.group_identical_values().is_empty());
}

#[test]
fn arena_heap_bytes_grows_with_the_graph_and_its_caches() {
    let small = mlp();
    let (big, _) = with_dead_code();
    let chain = {
        let mut b = GraphBuilder::new();
        let mut v = b.add_input(0);
        for i in 0..1000 {
            v = b.add_op1(TOp::Const(i), &[v.into()], Role::Primary).1;
        }
        b.set_outputs(&[v]);
        b.build().expect("valid")
    };
    assert!(small.arena_heap_bytes() > 0);
    // At least: value keys (16 B), producers, input offsets and operand producers (4 B each).
    assert!(chain.arena_heap_bytes() >= 1000 * (16 + 4 + 4 + 4));
    assert!(chain.arena_heap_bytes() > big.arena_heap_bytes());
    let before = chain.arena_heap_bytes();
    let _ = chain.value_hashes();
    assert!(chain.arena_heap_bytes() >= before + 1001 * 16);
}
