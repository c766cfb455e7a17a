//! Per-value structural hashes.
//!
//! They tell which values (and operations) compute the same thing, e.g. repeated layers.

use std::collections::{HashMap, HashSet};

use crate::error::GraphError;
use crate::graph::{Graph, Identity, ValueKey, ValueRef};
use crate::hash::{Fingerprint, StableHash, StableHasher};
use crate::ids::{OpId, ValueId};

const TAG_INPUT: u8 = 0;
const TAG_OP: u8 = 1;
const TAG_SLOT: u8 = 2;

impl<Op: StableHash> Graph<Op> {
    fn identity(&self) -> &Identity {
        self.identity.get_or_init(|| self.compute_identity())
    }

    fn compute_identity(&self) -> Identity {
        let mut values = vec![Fingerprint(0); self.keys.len()];
        let mut ops = vec![Fingerprint(0); self.ops.len()];
        let mut h = StableHasher::new();
        for (pos, &v) in self.inputs.iter().enumerate() {
            if let ValueKey::Input(key) = self.key(v) {
                h.reset();
                h.write_tag(TAG_INPUT);
                h.write_usize(pos);
                h.write_u64(key);
                values[v.index()] = h.finish();
            }
        }
        for op in self.topo_order() {
            let node = &self.ops[op.index()];
            h.reset();
            h.write_tag(TAG_OP);
            node.payload.stable_hash(&mut h);
            self.role_of(node).stable_hash(&mut h);
            let ins = self.op_inputs_of(node);
            h.write_len(ins.len());
            for r in ins {
                match *r {
                    ValueRef::Local(v) => {
                        h.write_tag(0);
                        h.write_fingerprint(values[v.index()]);
                    }
                    ValueRef::Parent { parent, value } => {
                        let p = &self.parents[parent.index()];
                        h.write_tag(1);
                        h.write_fingerprint(p.fingerprint);
                        h.write_u32(p.canon.value_index[value.index()]);
                    }
                }
            }
            let outs = self.op_outputs_of(op);
            h.write_len(outs.len());
            let op_hash = h.finish();
            ops[op.index()] = op_hash;
            for (slot, &v) in outs.iter().enumerate() {
                h.reset();
                h.write_tag(TAG_SLOT);
                h.write_fingerprint(op_hash);
                h.write_usize(slot);
                values[v.index()] = h.finish();
            }
        }
        Identity { values, ops }
    }

    /// The structural hash of every value, by [`ValueId`] index, computed on first use
    /// (linear time) and cached.
    ///
    /// An input's hash covers its position and key; an operation output's hash covers the
    /// operation's payload, role, the hashes of its operands (a parent value by the parent's
    /// fingerprint and the value's canonical index there), its number of outputs, and the
    /// slot. Two values with equal hashes compute the same function of the graph inputs
    /// (up to a 128-bit collision; [`values_equivalent`](Graph::values_equivalent) confirms
    /// exactly). Dead values have hashes too.
    pub fn value_hashes(&self) -> &[Fingerprint] {
        &self.identity().values
    }

    /// The structural hash of every operation, by [`OpId`] index (see
    /// [`value_hashes`](Graph::value_hashes)).
    pub fn op_hashes(&self) -> &[Fingerprint] {
        &self.identity().ops
    }

    /// The structural hash of `value`.
    pub fn value_hash(&self, value: ValueId) -> Option<Fingerprint> {
        self.value_hashes().get(value.index()).copied()
    }

    /// Groups of two or more values with equal structural hashes (each group in arena order,
    /// groups ordered by their first value).
    pub fn group_identical_values(&self) -> Vec<Vec<ValueId>> {
        group(self.value_hashes(), ValueId)
    }

    /// Groups of two or more operations with equal structural hashes, e.g. the same layer
    /// applied twice to the same input (each group in arena order, groups ordered by their
    /// first operation).
    pub fn group_identical_ops(&self) -> Vec<Vec<OpId>> {
        group(self.op_hashes(), OpId)
    }
}

impl<Op: StableHash + PartialEq> Graph<Op> {
    /// Whether values `a` and `b` compute the same thing, exactly: equal structural hashes,
    /// then an iterative comparison of their producing operations (payloads `==`, roles,
    /// operands pairwise), each pair of values compared at most once.
    pub fn values_equivalent(&self, a: ValueId, b: ValueId) -> Result<bool, GraphError> {
        for v in [a, b] {
            if v.index() >= self.keys.len() {
                return Err(GraphError::UnknownValue { value: v });
            }
        }
        let hashes = self.value_hashes();
        if hashes[a.index()] != hashes[b.index()] {
            return Ok(false);
        }
        let mut seen: HashSet<(ValueId, ValueId)> = HashSet::new();
        let mut stack = vec![(a, b)];
        while let Some((x, y)) = stack.pop() {
            if x == y || !seen.insert((x, y)) {
                continue;
            }
            let (ValueKey::Output { op: ox, slot: sx }, ValueKey::Output { op: oy, slot: sy }) =
                (self.key(x), self.key(y))
            else {
                // Two distinct inputs are different values; an input never equals an output.
                return Ok(false);
            };
            let nx = &self.ops[ox.index()];
            let ny = &self.ops[oy.index()];
            if sx != sy
                || nx.payload != ny.payload
                || self.role_of(nx) != self.role_of(ny)
                || self.op_outputs_of(ox).len() != self.op_outputs_of(oy).len()
            {
                return Ok(false);
            }
            let (ix, iy) = (self.op_inputs_of(nx), self.op_inputs_of(ny));
            if ix.len() != iy.len() {
                return Ok(false);
            }
            for (rx, ry) in ix.iter().zip(iy) {
                match (*rx, *ry) {
                    (ValueRef::Local(u), ValueRef::Local(w)) => stack.push((u, w)),
                    (
                        ValueRef::Parent {
                            parent: pu,
                            value: u,
                        },
                        ValueRef::Parent {
                            parent: pw,
                            value: w,
                        },
                    ) => {
                        let (gu, gw) = (&self.parents[pu.index()], &self.parents[pw.index()]);
                        if gu.canon.value_index[u.index()] != gw.canon.value_index[w.index()]
                            || !crate::structural_eq(gu, gw)
                        {
                            return Ok(false);
                        }
                    }
                    _ => return Ok(false),
                }
            }
        }
        Ok(true)
    }
}

fn group<I: Copy>(hashes: &[Fingerprint], id: impl Fn(u32) -> I) -> Vec<Vec<I>> {
    let mut by_hash: HashMap<Fingerprint, usize> = HashMap::with_capacity(hashes.len());
    let mut groups: Vec<Vec<I>> = Vec::new();
    for (i, h) in hashes.iter().enumerate() {
        let g = *by_hash.entry(*h).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(id(i as u32));
    }
    groups.retain(|g| g.len() > 1);
    groups
}
