//! Builder validation: every `GraphError` the builder can return, each naming the offending id.

use std::sync::Arc;

use graph_core::{GraphBuilder, GraphError, OpId, ParentId, Role, ValueId, ValueKey, ValueRef};

use crate::common::{TOp, mlp};

fn check(b: GraphBuilder<TOp>, expected: GraphError) {
    match b.build() {
        Ok(g) => panic!("expected {expected:?}, built {g:?}"),
        Err(e) => {
            assert_eq!(e, expected);
            assert!(!e.to_string().is_empty());
        }
    }
}

#[test]
fn valid_graph_builds_with_keys_and_producers() {
    let g = mlp();
    assert_eq!(g.num_ops(), 4);
    assert_eq!(g.num_values(), 6);
    assert_eq!(g.inputs(), &[ValueId(0), ValueId(1)]);
    assert_eq!(g.value_key(ValueId(1)), Some(ValueKey::Input(1)));
    assert_eq!(g.producer(ValueId(2)), Some((OpId(0), 0)));
    assert_eq!(g.producer(ValueId(0)), None);
    assert_eq!(g.value_key(ValueId(99)), None);
    let op = g.op(OpId(2)).expect("op 2");
    assert_eq!(op.payload(), &TOp::Named("matmul".into()));
    assert_eq!(
        op.inputs(),
        &[ValueRef::Local(ValueId(3)), ValueRef::Local(ValueId(1))]
    );
    assert_eq!(op.outputs(), &[ValueId(4)]);
    assert_eq!(op.role(), &Role::Primary);
    assert!(op.is_live());
    assert!(g.op(OpId(4)).is_none());
    assert_eq!(g.ops().count(), 4);
}

#[test]
fn dangling_input() {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let (_, y) = b.add_op1(TOp::Add, &[x.into(), ValueId(7).into()], Role::Primary);
    b.set_outputs(&[y]);
    check(
        b,
        GraphError::DanglingInput {
            op: OpId(0),
            value: ValueId(7),
        },
    );
}

#[test]
fn dangling_parent_and_parent_value() {
    let parent = Arc::new(mlp());
    let mut b = GraphBuilder::new();
    let p = b.add_parent(parent.clone());
    let ghost = ParentId(3);
    let (_, y) = b.add_op1(
        TOp::Add,
        &[ValueRef::Parent {
            parent: ghost,
            value: ValueId(0),
        }],
        Role::Primary,
    );
    b.set_outputs(&[y]);
    check(
        b,
        GraphError::DanglingParent {
            op: OpId(0),
            parent: ghost,
        },
    );

    let mut b = GraphBuilder::new();
    let p2 = b.add_parent(parent);
    assert_eq!(p, p2);
    let (_, y) = b.add_op1(
        TOp::Add,
        &[ValueRef::Parent {
            parent: p2,
            value: ValueId(100),
        }],
        Role::Primary,
    );
    b.set_outputs(&[y]);
    check(
        b,
        GraphError::DanglingParentValue {
            op: OpId(0),
            parent: p2,
            value: ValueId(100),
        },
    );
}

#[test]
fn parent_value_must_be_live() {
    // Parent: x -> a (output), x -> dead.
    let mut pb = GraphBuilder::new();
    let x = pb.add_input(0);
    let (_, a) = pb.add_op1(TOp::Add, &[x.into()], Role::Primary);
    let (_, dead) = pb.add_op1(TOp::Mul, &[x.into()], Role::Primary);
    pb.set_outputs(&[a]);
    let parent = Arc::new(pb.build().expect("parent"));
    assert_eq!(parent.canonical_index(dead), None);
    assert_eq!(parent.canonical_index(x), Some(0));

    let mut b = GraphBuilder::new();
    let p = b.add_parent(parent);
    let (_, y) = b.add_op1(
        TOp::Add,
        &[ValueRef::Parent {
            parent: p,
            value: dead,
        }],
        Role::Primary,
    );
    b.set_outputs(&[y]);
    check(
        b,
        GraphError::ParentValueNotLive {
            op: OpId(0),
            parent: p,
            value: dead,
        },
    );
}

#[test]
fn dangling_op_output() {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    b.add_op_with_outputs(TOp::Add, &[x.into()], &[ValueId(5)], Role::Primary);
    check(
        b,
        GraphError::DanglingOpOutput {
            op: OpId(0),
            value: ValueId(5),
        },
    );
}

#[test]
fn value_produced_twice() {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let v = b.add_value();
    b.add_op_with_outputs(TOp::Add, &[x.into()], &[v], Role::Primary);
    b.add_op_with_outputs(TOp::Mul, &[x.into()], &[v], Role::Primary);
    b.set_outputs(&[v]);
    check(
        b,
        GraphError::ProducedTwice {
            value: v,
            first: OpId(0),
            second: OpId(1),
        },
    );
}

#[test]
fn input_produced_by_an_op() {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let y = b.add_input(1);
    b.add_op_with_outputs(TOp::Add, &[x.into()], &[y], Role::Primary);
    check(
        b,
        GraphError::InputProduced {
            value: y,
            op: OpId(0),
        },
    );
}

#[test]
fn duplicate_and_dangling_input_declarations() {
    let mut b = GraphBuilder::<TOp>::new();
    let x = b.add_input(0);
    b.set_input(x, 1);
    check(b, GraphError::DuplicateInput { value: x });

    let mut b = GraphBuilder::<TOp>::new();
    b.set_input(ValueId(0), 1);
    check(b, GraphError::DanglingInputDecl { value: ValueId(0) });
}

#[test]
fn unproduced_value() {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let orphan = b.add_value();
    let (_, y) = b.add_op1(TOp::Add, &[x.into(), orphan.into()], Role::Primary);
    b.set_outputs(&[y]);
    check(b, GraphError::Unproduced { value: orphan });
}

#[test]
fn cycle_through_live_ops() {
    // a = f(x, b); b = g(a): a cycle the outputs depend on.
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let va = b.add_value();
    let vb = b.add_value();
    b.add_op_with_outputs(TOp::Add, &[x.into(), vb.into()], &[va], Role::Primary);
    b.add_op_with_outputs(TOp::Mul, &[va.into()], &[vb], Role::Primary);
    b.set_outputs(&[va]);
    match b.build() {
        Err(GraphError::Cycle { op }) => assert!(op == OpId(0) || op == OpId(1)),
        other => panic!("expected a cycle, got {other:?}"),
    }
}

#[test]
fn cycle_in_dead_code_is_still_found() {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let (_, y) = b.add_op1(TOp::Add, &[x.into()], Role::Primary);
    let va = b.add_value();
    let vb = b.add_value();
    let vc = b.add_value();
    b.add_op_with_outputs(TOp::Add, &[vc.into()], &[va], Role::Primary);
    b.add_op_with_outputs(TOp::Add, &[va.into()], &[vb], Role::Primary);
    b.add_op_with_outputs(TOp::Add, &[vb.into()], &[vc], Role::Primary);
    b.set_outputs(&[y]);
    match b.build() {
        Err(GraphError::Cycle { op }) => assert!((1..=3).contains(&op.0), "{op:?}"),
        other => panic!("expected a cycle, got {other:?}"),
    }
}

#[test]
fn self_loop() {
    let mut b = GraphBuilder::new();
    let v = b.add_value();
    b.add_op_with_outputs(TOp::Add, &[v.into()], &[v], Role::Primary);
    b.set_outputs(&[v]);
    check(b, GraphError::Cycle { op: OpId(0) });
}

#[test]
fn dangling_output() {
    let mut b = GraphBuilder::<TOp>::new();
    let x = b.add_input(0);
    b.set_outputs(&[x, ValueId(9)]);
    check(b, GraphError::DanglingOutput { value: ValueId(9) });
}

#[test]
fn mask_arity() {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let (_, y) = b.add_op1(
        TOp::Mul,
        &[x.into(), x.into()],
        Role::Linearized { active: vec![true] },
    );
    b.set_outputs(&[y]);
    check(
        b,
        GraphError::MaskArity {
            op: OpId(0),
            inputs: 2,
            mask: 1,
        },
    );
}

#[test]
fn ops_may_be_added_before_their_producers() {
    // Explicit ids: the consumer is added first, as a trace reader might.
    let mut b = GraphBuilder::new();
    let x = b.add_value();
    let h = b.add_value();
    let y = b.add_value();
    b.add_op_with_outputs(TOp::Named("relu".into()), &[h.into()], &[y], Role::Primary);
    b.add_op_with_outputs(TOp::Named("exp".into()), &[x.into()], &[h], Role::Primary);
    b.set_input(x, 42);
    b.set_outputs(&[y]);
    let g = b.build().expect("valid");
    assert_eq!(g.canonical_ops(), &[OpId(1), OpId(0)]);
    assert_eq!(g.topo_order(), vec![OpId(1), OpId(0)]);
}

#[test]
fn empty_graph_and_inputs_only() {
    let g = GraphBuilder::<TOp>::new().build().expect("empty graph");
    assert_eq!(g.num_ops(), 0);
    let mut b = GraphBuilder::<TOp>::new();
    let x = b.add_input(3);
    b.set_outputs(&[x, x]);
    let h = b.build().expect("identity graph");
    assert_ne!(g.fingerprint(), h.fingerprint());
    assert_eq!(h.canonical_index(x), Some(0));
}

#[test]
fn graphs_are_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<graph_core::Graph<TOp>>();
    assert_send_sync::<GraphBuilder<TOp>>();
    let g = Arc::new(mlp());
    let fp = g.fingerprint();
    let from_thread = std::thread::spawn({
        let g = g.clone();
        move || (g.fingerprint(), g.value_hashes().len())
    })
    .join()
    .expect("thread");
    assert_eq!(from_thread, (fp, g.num_values()));
}

#[test]
fn an_op_may_not_produce_one_value_in_two_slots() {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let v = b.add_value();
    b.add_op_with_outputs(TOp::Add, &[x.into()], &[v, v], Role::Primary);
    check(
        b,
        GraphError::ProducedTwice {
            value: v,
            first: OpId(0),
            second: OpId(0),
        },
    );
}
