//! Shared test vocabulary: a test payload type, a graph spec buildable with any arena
//! numbering, and a seeded shuffle.

use std::sync::Arc;

use graph_core::{Graph, GraphBuilder, Role, StableHash, StableHasher, ValueId, ValueRef};
use rand_xoshiro::SplitMix64;
use rand_xoshiro::rand_core::{Rng, SeedableRng};

/// A payload with the kinds of fields real operations carry.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TOp {
    Add,
    Mul,
    Const(i64),
    Named(String),
    Shape(Vec<usize>),
    Scale(f64),
}

impl StableHash for TOp {
    fn stable_hash(&self, h: &mut StableHasher) {
        match self {
            TOp::Add => h.write_tag(0),
            TOp::Mul => h.write_tag(1),
            TOp::Const(c) => {
                h.write_tag(2);
                c.stable_hash(h);
            }
            TOp::Named(n) => {
                h.write_tag(3);
                n.stable_hash(h);
            }
            TOp::Shape(s) => {
                h.write_tag(4);
                s.stable_hash(h);
            }
            TOp::Scale(x) => {
                h.write_tag(5);
                x.stable_hash(h);
            }
        }
    }
}

/// One operation of a [`Spec`]: inputs are spec value indices (inputs first, then each
/// operation's outputs in order), all smaller than the operation's first output.
#[derive(Clone, Debug)]
pub(crate) struct OpSpec {
    pub(crate) payload: TOp,
    pub(crate) inputs: Vec<usize>,
    pub(crate) n_out: usize,
    pub(crate) role: Role,
}

/// A graph described independently of arena numbering.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    pub(crate) keys: Vec<u64>,
    pub(crate) ops: Vec<OpSpec>,
    pub(crate) outputs: Vec<usize>,
}

impl Spec {
    pub(crate) fn n_values(&self) -> usize {
        self.keys.len() + self.ops.iter().map(|o| o.n_out).sum::<usize>()
    }

    /// Spec index of each op's first output.
    pub(crate) fn first_outputs(&self) -> Vec<usize> {
        let mut next = self.keys.len();
        self.ops
            .iter()
            .map(|o| {
                let f = next;
                next += o.n_out;
                f
            })
            .collect()
    }

    /// Builds in spec order (values and ops numbered as in the spec).
    pub(crate) fn build(&self) -> Graph<TOp> {
        self.build_shuffled(None, &[])
    }

    /// Builds with values declared and operations added in an order shuffled by `seed`
    /// (ops need not be added topologically), with `parents` available.
    pub(crate) fn build_shuffled(
        &self,
        seed: Option<u64>,
        parents: &[Arc<Graph<TOp>>],
    ) -> Graph<TOp> {
        self.try_build(seed, parents, &[]).expect("spec builds")
    }

    /// As [`build_shuffled`], with extra parent operands appended to op `i` for each
    /// `(i, parent, parent_value)` in `parent_refs`.
    pub(crate) fn try_build(
        &self,
        seed: Option<u64>,
        parents: &[Arc<Graph<TOp>>],
        parent_refs: &[(usize, usize, ValueId)],
    ) -> Result<Graph<TOp>, graph_core::GraphError> {
        let n = self.n_values();
        let mut b = GraphBuilder::<TOp>::new();
        let pids: Vec<_> = parents.iter().map(|p| b.add_parent(p.clone())).collect();
        let mut value_order: Vec<usize> = (0..n).collect();
        let mut op_order: Vec<usize> = (0..self.ops.len()).collect();
        if let Some(seed) = seed {
            let mut rng = seeded(seed);
            shuffle(&mut rng, &mut value_order);
            shuffle(&mut rng, &mut op_order);
        }
        let mut ids = vec![ValueId(0); n];
        for &i in &value_order {
            ids[i] = b.add_value();
        }
        for (i, &k) in self.keys.iter().enumerate() {
            b.set_input(ids[i], k);
        }
        let firsts = self.first_outputs();
        for &oi in &op_order {
            let o = &self.ops[oi];
            let mut ins: Vec<ValueRef> =
                o.inputs.iter().map(|&i| ValueRef::Local(ids[i])).collect();
            for &(op, p, v) in parent_refs {
                if op == oi {
                    ins.push(ValueRef::Parent {
                        parent: pids[p],
                        value: v,
                    });
                }
            }
            let outs: Vec<ValueId> = (0..o.n_out).map(|s| ids[firsts[oi] + s]).collect();
            b.add_op_with_outputs(o.payload.clone(), &ins, &outs, o.role.clone());
        }
        let outs: Vec<ValueId> = self.outputs.iter().map(|&i| ids[i]).collect();
        b.set_outputs(&outs);
        b.build()
    }
}

/// The workspace's seeded generator (SplitMix64) for `seed`: distinct seeds, distinct streams.
pub(crate) fn seeded(seed: u64) -> SplitMix64 {
    SplitMix64::seed_from_u64(seed)
}

/// Shuffles `xs` in place (Fisher–Yates) with draws from `rng`.
pub(crate) fn shuffle<T>(rng: &mut SplitMix64, xs: &mut [T]) {
    for i in (1..xs.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        xs.swap(i, j);
    }
}

/// x -> matmul(x, w) -> relu, twice with the same weights: a small fixed graph.
pub(crate) fn mlp() -> Graph<TOp> {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let w = b.add_input(1);
    let (_, h) = b.add_op1(
        TOp::Named("matmul".into()),
        &[x.into(), w.into()],
        Role::Primary,
    );
    let (_, r) = b.add_op1(TOp::Named("relu".into()), &[h.into()], Role::Primary);
    let (_, h2) = b.add_op1(
        TOp::Named("matmul".into()),
        &[r.into(), w.into()],
        Role::Primary,
    );
    let (_, r2) = b.add_op1(TOp::Named("relu".into()), &[h2.into()], Role::Primary);
    b.set_outputs(&[r2]);
    b.build().expect("valid")
}
