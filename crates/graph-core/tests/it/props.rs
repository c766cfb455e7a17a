//! Property tests: determinism, renumbering invariance, sensitivity, order-free multisets.
//!
//! Also: `structural_eq` holds exactly when fingerprints are equal.

use std::sync::Arc;

use graph_core::{Fingerprint, Graph, OpId, Role, ValueId, structural_eq};
use proptest::prelude::*;

use crate::common::{OpSpec, Spec, TOp, seeded, shuffle};

pub(crate) type RawOp = (u8, i64, Vec<u32>, usize, u8);

fn payload(kind: u8, param: i64) -> TOp {
    match kind % 6 {
        0 => TOp::Add,
        1 => TOp::Mul,
        2 => TOp::Const(param),
        3 => TOp::Named(["a", "b", "c"][param.rem_euclid(3) as usize].to_string()),
        4 => TOp::Shape(vec![param as usize + 1, 2]),
        _ => TOp::Scale(param as f64 * 0.5),
    }
}

pub(crate) fn normalize(n_in: usize, raw_ops: Vec<RawOp>, raw_outs: Vec<u32>, kinds: u8) -> Spec {
    let keys: Vec<u64> = (0..n_in as u64).map(|i| 100 + i).collect();
    let mut available = n_in;
    let mut ops = Vec::new();
    for (kind, param, ins, n_out, role) in raw_ops {
        let inputs: Vec<usize> = ins.iter().map(|&r| r as usize % available).collect();
        let role = match role % 3 {
            0 => Role::Primary,
            1 => Role::Transposed,
            _ => Role::Linearized {
                active: (0..inputs.len()).map(|i| (param >> i) & 1 == 1).collect(),
            },
        };
        ops.push(OpSpec {
            payload: payload(kind % kinds, param),
            inputs,
            n_out,
            role,
        });
        available += n_out;
    }
    let outputs = raw_outs.iter().map(|&r| r as usize % available).collect();
    Spec { keys, ops, outputs }
}

/// Random specs: up to `max_ops` operations, payload kinds `0..kinds`, params `0..params`.
pub(crate) fn spec(
    max_ops: usize,
    kinds: u8,
    params: i64,
    max_in: usize,
) -> impl Strategy<Value = Spec> {
    (
        1..=max_in,
        prop::collection::vec(
            (
                0..kinds,
                0..params,
                prop::collection::vec(any::<u32>(), 1..4),
                1usize..3,
                0u8..3,
            ),
            1..=max_ops,
        ),
        prop::collection::vec(any::<u32>(), 1..4),
    )
        .prop_map(move |(n_in, ops, outs)| normalize(n_in, ops, outs, kinds))
}

fn live_ops(g: &Graph<TOp>) -> Vec<usize> {
    (0..g.num_ops())
        .filter(|&i| g.is_live_op(OpId(i as u32)))
        .collect()
}

fn differs(a: &Graph<TOp>, b: &Graph<TOp>) -> Result<(), TestCaseError> {
    prop_assert_ne!(a.fingerprint(), b.fingerprint());
    prop_assert!(!structural_eq(a, b));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn deterministic_across_builds_and_calls(s in spec(24, 6, 4, 3)) {
        let a = s.build();
        let b = s.build();
        prop_assert_eq!(a.fingerprint(), b.fingerprint());
        prop_assert_eq!(a.fingerprint(), a.fingerprint());
        prop_assert_eq!(a.compute_fingerprint(), a.fingerprint());
        prop_assert!(structural_eq(&a, &b));
        prop_assert_eq!(a.value_hashes(), b.value_hashes());
    }

    #[test]
    fn renumbering_does_not_change_fingerprint(s in spec(24, 6, 4, 3), seed in any::<u64>()) {
        let a = s.build();
        let b = s.build_shuffled(Some(seed), &[]);
        prop_assert_eq!(a.fingerprint(), b.fingerprint());
        prop_assert!(structural_eq(&a, &b));
        prop_assert_eq!(a.canonical_ops().len(), b.canonical_ops().len());
        // The multiset of structural hashes is numbering-independent too.
        let mut ha = a.value_hashes().to_vec();
        let mut hb = b.value_hashes().to_vec();
        ha.sort();
        hb.sort();
        prop_assert_eq!(ha, hb);
    }

    #[test]
    fn pruning_to_own_outputs_keeps_fingerprint(s in spec(24, 6, 4, 3)) {
        let g = s.build();
        let p = g.prune_to(g.outputs()).expect("prune");
        prop_assert_eq!(p.graph.num_ops(), g.canonical_ops().len());
        prop_assert_eq!(p.graph.fingerprint(), g.fingerprint());
        prop_assert!(structural_eq(&p.graph, &g));
    }

    #[test]
    fn changing_a_live_payload_changes_fingerprint(s in spec(24, 6, 4, 3), pick in any::<usize>()) {
        let g = s.build();
        let live = live_ops(&g);
        prop_assume!(!live.is_empty());
        let i = live[pick % live.len()];
        let mut t = s.clone();
        t.ops[i].payload = TOp::Named("changed".into());
        differs(&g, &t.build())?;
    }

    #[test]
    fn changing_a_live_role_changes_fingerprint(s in spec(24, 6, 4, 3), pick in any::<usize>()) {
        let g = s.build();
        let live = live_ops(&g);
        prop_assume!(!live.is_empty());
        let i = live[pick % live.len()];
        let mut t = s.clone();
        t.ops[i].role = match &t.ops[i].role {
            Role::Primary => Role::Transposed,
            Role::Linearized { active } => Role::Linearized {
                active: active.iter().enumerate().map(|(k, a)| if k == 0 { !a } else { *a }).collect(),
            },
            _ => Role::Primary,
        };
        differs(&g, &t.build())?;
    }

    #[test]
    fn changing_a_live_edge_changes_fingerprint(
        s in spec(24, 6, 4, 3), pick in any::<usize>(), slot in any::<usize>(), to in any::<usize>()
    ) {
        let g = s.build();
        let live = live_ops(&g);
        prop_assume!(!live.is_empty());
        let i = live[pick % live.len()];
        let j = slot % s.ops[i].inputs.len();
        let old = s.ops[i].inputs[j];
        let first = s.first_outputs()[i];
        let hashes = g.value_hashes();
        // A different source (earlier, so still acyclic) that computes something else.
        let candidates: Vec<usize> = (0..first)
            .filter(|&w| hashes[w] != hashes[old])
            .collect();
        prop_assume!(!candidates.is_empty());
        let mut t = s.clone();
        t.ops[i].inputs[j] = candidates[to % candidates.len()];
        differs(&g, &t.build())?;
    }

    #[test]
    fn input_order_changes_fingerprint(s in spec(16, 6, 4, 3)) {
        prop_assume!(s.keys.len() >= 2);
        let mut t = s.clone();
        t.keys.swap(0, 1);
        differs(&s.build(), &t.build())?;
    }

    #[test]
    fn output_order_changes_fingerprint(s in spec(16, 6, 4, 3), a in any::<usize>(), b in any::<usize>()) {
        let g = s.build();
        let (a, b) = (a % s.outputs.len(), b % s.outputs.len());
        let h = g.value_hashes();
        prop_assume!(h[s.outputs[a]] != h[s.outputs[b]]);
        let mut t = s.clone();
        t.outputs.swap(a, b);
        differs(&g, &t.build())?;
    }

    #[test]
    fn parents_enter_by_structure(
        s in spec(12, 6, 4, 2), p1 in spec(6, 2, 2, 2), p2 in spec(6, 2, 2, 2), seed in any::<u64>()
    ) {
        let (p1, p2) = (Arc::new(p1.build()), Arc::new(p2.build()));
        let same = structural_eq(&p1, &p2);
        prop_assert_eq!(same, p1.fingerprint() == p2.fingerprint());
        // Op 0 reads the parent's first output and is made live.
        let mut s = s;
        s.outputs.push(s.keys.len());
        s.ops[0].role = Role::Primary;
        let refs = |p: &Arc<Graph<TOp>>| [(0usize, 0usize, p.outputs()[0])];
        let a = s.try_build(None, std::slice::from_ref(&p1), &refs(&p1)).expect("valid");
        let a2 = s.try_build(Some(seed), std::slice::from_ref(&p1), &refs(&p1)).expect("valid");
        let b = s.try_build(None, std::slice::from_ref(&p2), &refs(&p2)).expect("valid");
        prop_assert_eq!(a.fingerprint(), a2.fingerprint());
        prop_assert!(structural_eq(&a, &a2));
        prop_assert_eq!(a.fingerprint() == b.fingerprint(), same);
        prop_assert_eq!(structural_eq(&a, &b), same);
    }

    #[test]
    fn structural_eq_agrees_with_fingerprint_equality(
        a in spec(3, 2, 2, 2), b in spec(3, 2, 2, 2), seed in any::<u64>()
    ) {
        // A tiny space, so that equal structures occur often.
        let (ga, gb) = (a.build(), b.build_shuffled(Some(seed), &[]));
        prop_assert_eq!(structural_eq(&ga, &gb), ga.fingerprint() == gb.fingerprint());
        prop_assert_eq!(structural_eq(&gb, &ga), structural_eq(&ga, &gb));
    }

    #[test]
    fn unordered_fingerprint_ignores_insertion_order(
        items in prop::collection::vec((any::<u64>(), "[a-z]{0,6}"), 0..20), seed in any::<u64>()
    ) {
        let mut shuffled = items.clone();
        shuffle(&mut seeded(seed), &mut shuffled);
        prop_assert_eq!(Fingerprint::of_unordered(&items), Fingerprint::of_unordered(&shuffled));
        if !items.is_empty() {
            prop_assert_ne!(
                Fingerprint::of_unordered(&items),
                Fingerprint::of_unordered(&items[1..])
            );
        }
    }

    #[test]
    fn equivalent_values_have_equal_hashes(s in spec(16, 2, 2, 2), a in any::<usize>(), b in any::<usize>()) {
        let g = s.build();
        let n = g.num_values();
        let (va, vb) = (ValueId((a % n) as u32), ValueId((b % n) as u32));
        let eq = g.values_equivalent(va, vb).expect("known");
        prop_assert_eq!(eq, g.value_hash(va) == g.value_hash(vb));
    }
}
