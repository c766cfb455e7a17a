//! Scale: a 1,000,000-op chain, a depth-64 diamond and a 100,000-deep parent chain.
//!
//! All of them without recursion or blow-up.

use std::sync::Arc;

use graph_core::{Graph, GraphBuilder, Role, ValueRef, structural_eq};

use crate::common::TOp;

fn chain(n: usize, renumber: bool) -> Graph<TOp> {
    let mut b = GraphBuilder::with_capacity(n, n + 1);
    if renumber {
        // Values declared in reverse, ops added from the end of the chain backwards.
        let ids: Vec<_> = (0..=n).map(|_| b.add_value()).rev().collect();
        b.set_input(ids[0], 0);
        for i in (0..n).rev() {
            b.add_op_with_outputs(
                TOp::Const(i as i64 % 7),
                &[ids[i].into()],
                &[ids[i + 1]],
                Role::Primary,
            );
        }
        b.set_outputs(&[ids[n]]);
    } else {
        let mut v = b.add_input(0);
        for i in 0..n {
            v = b
                .add_op1(TOp::Const(i as i64 % 7), &[v.into()], Role::Primary)
                .1;
        }
        b.set_outputs(&[v]);
    }
    b.build().expect("valid chain")
}

#[test]
fn million_op_chain_builds_fingerprints_compares_and_drops() {
    let n = 1_000_000;
    let a = chain(n, false);
    let b = chain(n, true);
    assert_eq!(a.num_ops(), n);
    assert_eq!(a.canonical_ops().len(), n);
    assert_eq!(a.fingerprint(), b.fingerprint());
    assert_eq!(a.compute_fingerprint(), a.fingerprint());
    assert!(structural_eq(&a, &b));
    assert_eq!(a.topo_order().len(), n);
    let last = a.outputs()[0];
    assert_eq!(a.ancestors(&[last]).expect("known").num_ops(), n);
    drop(a);
    drop(b);
}

fn diamond(depth: usize, payload_at_top: i64) -> Graph<TOp> {
    let mut b = GraphBuilder::new();
    let mut v = b.add_input(0);
    for i in 0..depth {
        let p = if i + 1 == depth {
            TOp::Const(payload_at_top)
        } else {
            TOp::Add
        };
        v = b.add_op1(p, &[v.into(), v.into()], Role::Primary).1;
    }
    b.set_outputs(&[v]);
    b.build().expect("valid diamond")
}

#[test]
fn diamond_of_depth_64_is_linear() {
    // Expanded as a tree this has 2^64 leaves; every walk here must share subterms.
    let a = diamond(64, 1);
    let b = diamond(64, 1);
    let c = diamond(64, 2);
    assert_eq!(a.fingerprint(), b.fingerprint());
    assert!(structural_eq(&a, &b));
    assert!(!structural_eq(&a, &c));
    assert_eq!(a.value_hashes().len(), 65);
    let top = a.outputs()[0];
    assert!(a.values_equivalent(top, top).expect("known"));
    assert!(a.group_identical_values().is_empty());
    let e = a.extract_subgraph(&[top]).expect("extract");
    assert_eq!(e.graph.fingerprint(), a.fingerprint());
}

#[test]
fn deep_parent_chain_compares_and_drops_iteratively() {
    // Each graph reads the previous graph's output: a parent chain 100,000 deep, built twice
    // (different Arcs, so structural_eq must walk every parent pair).
    fn build(depth: usize) -> Arc<Graph<TOp>> {
        let mut b = GraphBuilder::new();
        let x = b.add_input(0);
        b.set_outputs(&[x]);
        let mut g = Arc::new(b.build().expect("root"));
        for i in 0..depth {
            let mut b = GraphBuilder::new();
            let p = b.add_parent(g.clone());
            let (_, y) = b.add_op1(
                TOp::Const((i % 3) as i64),
                &[ValueRef::Parent {
                    parent: p,
                    value: g.outputs()[0],
                }],
                Role::Primary,
            );
            b.set_outputs(&[y]);
            g = Arc::new(b.build().expect("link"));
        }
        g
    }
    let depth = 100_000;
    let a = build(depth);
    let b = build(depth);
    assert!(!Arc::ptr_eq(&a, &b));
    assert_eq!(a.fingerprint(), b.fingerprint());
    assert!(structural_eq(&a, &b));
    drop(a);
    drop(b);
}
