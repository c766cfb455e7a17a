//! Graph views: an engine-side graph type (`Tape`) fingerprints and compares like `Graph`.
//!
//! It gets the same fingerprints, value hashes and exact equality as the equal `Graph`, with
//! its own numbering, parents and input keys.

use std::sync::Arc;

use graph_core::{
    CanonicalGraph, Fingerprint, Graph, GraphError, GraphView, NodeValue, Operand, Role,
    StableHash, StableHasher, structural_eq,
};
use proptest::prelude::*;

use crate::common::{Spec, TOp, seeded, shuffle};
use crate::props::spec;

/// One node of a [`Tape`].
#[derive(Clone, Debug)]
struct TNode {
    payload: TOp,
    role: Role,
    operands: Vec<Operand>,
    results: u32,
}

/// An engine's own graph: nodes in a vector, operands naming `(node, slot)` pairs, `u64`
/// input keys, parents held as canonical graphs.
#[derive(Clone, Debug)]
struct Tape {
    inputs: Vec<u64>,
    nodes: Vec<TNode>,
    outputs: Vec<NodeValue>,
    parents: Vec<Arc<CanonicalGraph<Tape>>>,
}

impl GraphView for Tape {
    fn num_inputs(&self) -> usize {
        self.inputs.len()
    }
    fn hash_input(&self, position: u32, h: &mut StableHasher) {
        h.write_u64(self.inputs[position as usize]);
    }
    fn input_eq(&self, position: u32, other: &Self, other_position: u32) -> bool {
        self.inputs[position as usize] == other.inputs[other_position as usize]
    }
    fn num_nodes(&self) -> usize {
        self.nodes.len()
    }
    fn num_operands(&self, node: u32) -> usize {
        self.nodes[node as usize].operands.len()
    }
    fn operand(&self, node: u32, i: usize) -> Operand {
        self.nodes[node as usize].operands[i]
    }
    fn num_results(&self, node: u32) -> u32 {
        self.nodes[node as usize].results
    }
    fn role(&self, node: u32) -> &Role {
        &self.nodes[node as usize].role
    }
    fn hash_payload(&self, node: u32, h: &mut StableHasher) {
        self.nodes[node as usize].payload.stable_hash(h);
    }
    fn payload_eq(&self, node: u32, other: &Self, other_node: u32) -> bool {
        self.nodes[node as usize].payload == other.nodes[other_node as usize].payload
    }
    fn num_outputs(&self) -> usize {
        self.outputs.len()
    }
    fn output(&self, i: usize) -> NodeValue {
        self.outputs[i]
    }
    fn parent(&self, parent: u32) -> Option<&CanonicalGraph<Self>> {
        self.parents.get(parent as usize).map(|p| &**p)
    }
}

/// The tape of `spec`, nodes numbered in an order shuffled by `seed`, with `parents` and
/// extra parent operands `(op, parent, value)` appended to spec operation `op`.
fn tape(
    s: &Spec,
    seed: Option<u64>,
    parents: &[Arc<CanonicalGraph<Tape>>],
    parent_refs: &[(usize, usize, NodeValue)],
) -> Tape {
    let mut order: Vec<usize> = (0..s.ops.len()).collect();
    if let Some(seed) = seed {
        shuffle(&mut seeded(seed), &mut order);
    }
    // node_of[spec op] = its node number.
    let mut node_of = vec![0u32; s.ops.len()];
    for (node, &op) in order.iter().enumerate() {
        node_of[op] = node as u32;
    }
    let firsts = s.first_outputs();
    let value = |i: usize| -> NodeValue {
        if i < s.keys.len() {
            return NodeValue::Input(i as u32);
        }
        let op = firsts.iter().rposition(|&f| f <= i).expect("an op output");
        NodeValue::Result {
            node: node_of[op],
            slot: (i - firsts[op]) as u32,
        }
    };
    let nodes = order
        .iter()
        .map(|&op| {
            let o = &s.ops[op];
            let mut operands: Vec<Operand> =
                o.inputs.iter().map(|&i| Operand::Local(value(i))).collect();
            for &(at, parent, v) in parent_refs {
                if at == op {
                    operands.push(Operand::Parent {
                        parent: parent as u32,
                        value: v,
                    });
                }
            }
            TNode {
                payload: o.payload.clone(),
                role: o.role.clone(),
                operands,
                results: o.n_out as u32,
            }
        })
        .collect();
    Tape {
        inputs: s.keys.clone(),
        nodes,
        outputs: s.outputs.iter().map(|&i| value(i)).collect(),
        parents: parents.to_vec(),
    }
}

fn canonical(t: Tape) -> CanonicalGraph<Tape> {
    CanonicalGraph::new(t).expect("valid tape")
}

fn sorted(mut v: Vec<Fingerprint>) -> Vec<Fingerprint> {
    v.sort();
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn a_view_has_the_fingerprint_and_value_hashes_of_the_equal_graph(
        s in spec(24, 6, 4, 3), seed in any::<u64>(), seed2 in any::<u64>()
    ) {
        let g = s.build_shuffled(Some(seed), &[]);
        let t = canonical(tape(&s, Some(seed2), &[], &[]));
        prop_assert_eq!(t.fingerprint(), g.fingerprint());
        prop_assert_eq!(t.canonical().order().len(), g.canonical_ops().len());
        prop_assert_eq!(
            sorted(t.value_hashes().all_values().collect()),
            sorted(g.value_hashes().to_vec())
        );
        // Each graph output has the same hash and canonical index in both.
        for (i, &v) in g.outputs().iter().enumerate() {
            let tv = t.graph().output(i);
            prop_assert_eq!(t.value_hashes().value(tv), g.value_hash(v));
            prop_assert_eq!(t.index(tv), g.canonical_index(v));
        }
        let u = canonical(tape(&s, None, &[], &[]));
        prop_assert!(t.structurally_eq(&u));
        prop_assert_eq!(u.fingerprint(), t.fingerprint());
    }

    #[test]
    fn view_equality_agrees_with_fingerprint_equality(
        a in spec(3, 2, 2, 2), b in spec(3, 2, 2, 2), seed in any::<u64>()
    ) {
        let (ta, tb) = (canonical(tape(&a, None, &[], &[])), canonical(tape(&b, Some(seed), &[], &[])));
        let same = ta.fingerprint() == tb.fingerprint();
        prop_assert_eq!(ta.structurally_eq(&tb), same);
        prop_assert_eq!(tb.structurally_eq(&ta), same);
        prop_assert_eq!(same, structural_eq(&a.build(), &b.build()));
    }

    #[test]
    fn view_parents_enter_by_structure_as_graph_parents_do(
        s in spec(12, 6, 4, 2), p1 in spec(6, 2, 2, 2), p2 in spec(6, 2, 2, 2), seed in any::<u64>()
    ) {
        let (g1, g2) = (Arc::new(p1.build()), Arc::new(p2.build()));
        let (t1, t2) = (
            Arc::new(canonical(tape(&p1, Some(seed), &[], &[]))),
            Arc::new(canonical(tape(&p2, None, &[], &[]))),
        );
        let same = structural_eq(&g1, &g2);
        prop_assert_eq!(t1.structurally_eq(&t2), same);
        let mut s = s;
        s.outputs.push(s.keys.len());
        s.ops[0].role = Role::Primary;
        let grefs = |p: &Arc<Graph<TOp>>| [(0usize, 0usize, p.outputs()[0])];
        let trefs = |p: &Arc<CanonicalGraph<Tape>>| [(0usize, 0usize, p.graph().output(0))];
        let ga = s.try_build(None, std::slice::from_ref(&g1), &grefs(&g1)).expect("valid");
        let gb = s.try_build(None, std::slice::from_ref(&g2), &grefs(&g2)).expect("valid");
        let ta = canonical(tape(&s, Some(seed), std::slice::from_ref(&t1), &trefs(&t1)));
        let ta2 = canonical(tape(&s, None, std::slice::from_ref(&t1), &trefs(&t1)));
        let tb = canonical(tape(&s, None, std::slice::from_ref(&t2), &trefs(&t2)));
        prop_assert_eq!(ta.fingerprint(), ga.fingerprint());
        prop_assert_eq!(tb.fingerprint(), gb.fingerprint());
        prop_assert!(ta.structurally_eq(&ta2));
        prop_assert_eq!(ta.structurally_eq(&tb), same);
        prop_assert_eq!(
            sorted(ta.value_hashes().all_values().collect()),
            sorted(ga.value_hashes().to_vec())
        );
    }
}

fn one_node(operands: Vec<Operand>, outputs: Vec<NodeValue>) -> Tape {
    Tape {
        inputs: vec![5],
        nodes: vec![TNode {
            payload: TOp::Const(9),
            role: Role::Primary,
            operands,
            results: 1,
        }],
        outputs,
        parents: Vec::new(),
    }
}

const X: Operand = Operand::Local(NodeValue::Input(0));
const Y: NodeValue = NodeValue::Result { node: 0, slot: 0 };

#[test]
fn the_documented_worked_example_as_a_view() {
    // docs/fingerprint.md's worked example, recorded by an engine.
    let t = canonical(one_node(vec![X], vec![Y]));
    let mut b = graph_core::GraphBuilder::new();
    let x = b.add_input(5);
    let (_, y) = b.add_op1(TOp::Const(9), &[x.into()], Role::Primary);
    b.set_outputs(&[y]);
    let g = b.build().expect("valid");
    assert_eq!(t.fingerprint(), g.fingerprint());
    assert_eq!(t.index(Y), Some(1));
    assert_eq!(t.index(NodeValue::Input(0)), Some(0));
    assert_eq!(t.value_hashes().value(Y), g.value_hash(y));
    assert_eq!(t.value_hashes().node(0), Some(g.op_hashes()[0]));
}

#[test]
fn bad_references_are_typed_errors() {
    let check = |t: Tape, expected: GraphError| {
        assert_eq!(CanonicalGraph::new(t).map(|_| ()), Err(expected));
    };
    let missing = Operand::Local(NodeValue::Result { node: 0, slot: 1 });
    check(
        one_node(vec![X, missing], vec![Y]),
        GraphError::ViewOperand {
            node: 0,
            operand: 1,
        },
    );
    check(
        one_node(vec![Operand::Local(NodeValue::Input(1))], vec![Y]),
        GraphError::ViewOperand {
            node: 0,
            operand: 0,
        },
    );
    check(
        one_node(vec![X], vec![Y, NodeValue::Result { node: 3, slot: 0 }]),
        GraphError::ViewOutput { position: 1 },
    );
    check(
        one_node(
            vec![Operand::Parent {
                parent: 0,
                value: NodeValue::Input(0),
            }],
            vec![Y],
        ),
        GraphError::ViewParentValue {
            node: 0,
            operand: 0,
        },
    );
    let mut masked = one_node(vec![X], vec![Y]);
    masked.nodes[0].role = Role::Linearized {
        active: vec![true, false],
    };
    check(
        masked,
        GraphError::ViewMaskArity {
            node: 0,
            operands: 1,
            mask: 2,
        },
    );
    // A node reading its own result.
    check(
        one_node(vec![Operand::Local(Y)], vec![Y]),
        GraphError::ViewCycle { node: 0 },
    );
    // A dead cycle is found too.
    let mut dead = one_node(vec![X], vec![Y]);
    for m in [2u32, 1] {
        // Node 1 reads node 2, node 2 reads node 1.
        dead.nodes.push(TNode {
            payload: TOp::Add,
            role: Role::Primary,
            operands: vec![Operand::Local(NodeValue::Result { node: m, slot: 0 })],
            results: 1,
        });
    }
    assert!(matches!(
        CanonicalGraph::new(dead),
        Err(GraphError::ViewCycle { .. })
    ));
}

#[test]
fn a_parent_value_must_be_live_there() {
    // The parent has a dead node (node 1); reading it is an error, reading node 0 is not.
    let mut p = one_node(vec![X], vec![Y]);
    p.nodes.push(TNode {
        payload: TOp::Add,
        role: Role::Primary,
        operands: vec![X],
        results: 1,
    });
    let p = Arc::new(canonical(p));
    assert!(!p.canonical().is_live(1));
    let child = |node| {
        let mut c = one_node(
            vec![Operand::Parent {
                parent: 0,
                value: NodeValue::Result { node, slot: 0 },
            }],
            vec![Y],
        );
        c.parents.push(Arc::clone(&p));
        CanonicalGraph::new(c).map(|_| ())
    };
    assert_eq!(child(0), Ok(()));
    assert_eq!(
        child(1),
        Err(GraphError::ViewParentValue {
            node: 0,
            operand: 0
        })
    );
}

#[test]
fn dead_nodes_do_not_reach_the_fingerprint_but_have_value_hashes() {
    let live = canonical(one_node(vec![X], vec![Y]));
    let mut t = one_node(vec![X], vec![Y]);
    t.nodes.push(TNode {
        payload: TOp::Named("dead".into()),
        role: Role::Primary,
        operands: vec![Operand::Local(Y)],
        results: 2,
    });
    let t = canonical(t);
    assert_eq!(t.fingerprint(), live.fingerprint());
    assert!(t.structurally_eq(&live));
    let dead = NodeValue::Result { node: 1, slot: 1 };
    assert_eq!(t.index(dead), None);
    assert!(t.value_hashes().value(dead).is_some());
    assert_ne!(
        t.value_hashes().value(dead),
        t.value_hashes()
            .value(NodeValue::Result { node: 1, slot: 0 })
    );
    assert_eq!(
        t.value_hashes()
            .value(NodeValue::Result { node: 1, slot: 2 }),
        None
    );
}

#[test]
fn engine_input_keys_are_part_of_the_identity() {
    // Inputs keyed by engine-defined strings instead of u64.
    struct Named(Vec<&'static str>);
    impl GraphView for Named {
        fn num_inputs(&self) -> usize {
            self.0.len()
        }
        fn hash_input(&self, p: u32, h: &mut StableHasher) {
            h.write_str(self.0[p as usize]);
        }
        fn input_eq(&self, p: u32, other: &Self, q: u32) -> bool {
            self.0[p as usize] == other.0[q as usize]
        }
        fn num_nodes(&self) -> usize {
            1
        }
        fn num_operands(&self, _: u32) -> usize {
            self.0.len()
        }
        fn operand(&self, _: u32, i: usize) -> Operand {
            Operand::Local(NodeValue::Input(i as u32))
        }
        fn num_results(&self, _: u32) -> u32 {
            1
        }
        fn hash_payload(&self, _: u32, h: &mut StableHasher) {
            h.write_tag(7);
        }
        fn payload_eq(&self, _: u32, _: &Self, _: u32) -> bool {
            true
        }
        fn num_outputs(&self) -> usize {
            1
        }
        fn output(&self, _: usize) -> NodeValue {
            Y
        }
    }
    let g = |keys| CanonicalGraph::new(Named(keys)).expect("valid");
    let (a, b, c) = (g(vec!["w", "x"]), g(vec!["w", "x"]), g(vec!["x", "w"]));
    assert_eq!(a.fingerprint(), b.fingerprint());
    assert!(a.structurally_eq(&b));
    assert_ne!(a.fingerprint(), c.fingerprint());
    assert!(!a.structurally_eq(&c));
    // Forced equal fingerprints (a collision) still compare exactly: unequal keys differ.
    assert!(!a.structurally_eq(&g(vec!["w", "y"])));
}

#[test]
fn deep_views_walk_without_recursion() {
    // A 300k-node chain, each node reading the previous one, in reverse node order.
    let n = 300_000u32;
    let nodes = (0..n)
        .map(|i| TNode {
            payload: TOp::Add,
            role: Role::Primary,
            operands: vec![if i + 1 == n {
                X
            } else {
                Operand::Local(NodeValue::Result {
                    node: i + 1,
                    slot: 0,
                })
            }],
            results: 1,
        })
        .collect();
    let t = Tape {
        inputs: vec![0],
        nodes,
        outputs: vec![Y],
        parents: Vec::new(),
    };
    let a = canonical(t.clone());
    let b = canonical(t);
    assert_eq!(a.canonical().order().len(), n as usize);
    assert!(a.structurally_eq(&b));
    assert_eq!(a.value_hashes().all_values().count(), n as usize + 1);
}
