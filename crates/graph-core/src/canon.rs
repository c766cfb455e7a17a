//! Canonical numbering, the version-1 fingerprint encoding, and linear-time `structural_eq`.

use std::collections::HashSet;
use std::sync::Arc;

use crate::error::GraphError;
use crate::graph::{Canon, Graph, ValueKey, ValueRef};
use crate::hash::{Fingerprint, StableHash, StableHasher};
use crate::ids::OpId;

/// Domain tag at the start of every graph fingerprint encoding.
pub const FINGERPRINT_DOMAIN: &str = "tracegraph.graph-core.fingerprint";
/// Version of the graph fingerprint encoding (see `docs/fingerprint.md`).
pub const FINGERPRINT_VERSION: u32 = 1;

/// Tag before each operation record.
const TAG_OP: u8 = 1;
/// Tag after the last operation record.
const TAG_END_OPS: u8 = 2;
/// Operand tags.
const TAG_LOCAL: u8 = 0;
const TAG_PARENT: u8 = 1;

const WHITE: u8 = 0;
const GRAY: u8 = 1;
const BLACK: u8 = 2;

impl<Op: StableHash> Graph<Op> {
    /// Recomputes the fingerprint from scratch (canonical walk and hashing), ignoring the
    /// cached value. Always equal to [`fingerprint`](Graph::fingerprint); exists to measure
    /// and verify the computation.
    pub fn compute_fingerprint(&self) -> Fingerprint {
        match self.canonicalize(false) {
            Ok((_, fp)) => fp,
            // A built graph is acyclic; the walk over live operations cannot fail.
            Err(_) => self.fingerprint,
        }
    }

    /// The canonical walk: depth-first post-order from the outputs in order (inputs of each
    /// operation in order), numbering values and hashing each operation as it finishes.
    /// With `check_all`, also walks the dead operations to detect cycles among them.
    pub(crate) fn canonicalize(&self, check_all: bool) -> Result<(Canon, Fingerprint), GraphError> {
        let n_ops = self.ops.len();
        let mut state = vec![WHITE; n_ops];
        let mut value_index = vec![u32::MAX; self.keys.len()];
        let mut canon_ops = Vec::with_capacity(n_ops);
        let mut next = 0u32;

        let mut h = StableHasher::with_domain(FINGERPRINT_DOMAIN, FINGERPRINT_VERSION);
        h.write_len(self.inputs.len());
        for &v in &self.inputs {
            value_index[v.index()] = next;
            next += 1;
            if let ValueKey::Input(key) = self.keys[v.index()] {
                h.write_u64(key);
            }
        }

        let mut stack: Vec<(u32, u32)> = Vec::new();
        for &out in &self.outputs {
            if let ValueKey::Output { op, .. } = self.keys[out.index()]
                && state[op.index()] == WHITE
            {
                self.dfs(op, &mut state, &mut stack, |g, op| {
                    g.hash_op(op, &mut h, &mut value_index, &mut next);
                    canon_ops.push(op);
                })?;
            }
        }
        h.write_tag(TAG_END_OPS);
        h.write_len(canon_ops.len());
        h.write_len(self.outputs.len());
        for &out in &self.outputs {
            h.write_u32(value_index[out.index()]);
        }
        let fp = h.finish();

        if check_all {
            for i in 0..n_ops {
                if state[i] == WHITE {
                    self.dfs(OpId(i as u32), &mut state, &mut stack, |_, _| {})?;
                }
            }
        }
        Ok((
            Canon {
                ops: canon_ops,
                value_index,
            },
            fp,
        ))
    }

    fn hash_op(&self, op: OpId, h: &mut StableHasher, value_index: &mut [u32], next: &mut u32) {
        let node = &self.ops[op.index()];
        h.write_tag(TAG_OP);
        node.payload.stable_hash(h);
        node.role.stable_hash(h);
        let ins = self.op_inputs_of(node);
        h.write_len(ins.len());
        for r in ins {
            match *r {
                ValueRef::Local(v) => {
                    h.write_tag(TAG_LOCAL);
                    h.write_u32(value_index[v.index()]);
                }
                ValueRef::Parent { parent, value } => {
                    let p = &self.parents[parent.index()];
                    h.write_tag(TAG_PARENT);
                    h.write_fingerprint(p.fingerprint);
                    h.write_u32(p.canon.value_index[value.index()]);
                }
            }
        }
        let outs = self.op_outputs_of(op);
        h.write_len(outs.len());
        for &v in outs {
            value_index[v.index()] = *next;
            *next += 1;
        }
    }
}

impl<Op> Graph<Op> {
    /// Iterative depth-first walk from `root` over local producers, calling `post` on each
    /// newly finished operation. A gray producer means a cycle.
    pub(crate) fn dfs(
        &self,
        root: OpId,
        state: &mut [u8],
        stack: &mut Vec<(u32, u32)>,
        mut post: impl FnMut(&Self, OpId),
    ) -> Result<(), GraphError> {
        state[root.index()] = GRAY;
        stack.clear();
        stack.push((root.0, 0));
        while let Some(top) = stack.last_mut() {
            let (op, pos) = *top;
            let node = &self.ops[op as usize];
            let (s, e) = node.inputs;
            if s + pos < e {
                top.1 += 1;
                if let ValueRef::Local(v) = self.op_inputs[(s + pos) as usize]
                    && let ValueKey::Output { op: q, .. } = self.keys[v.index()]
                {
                    match state[q.index()] {
                        WHITE => {
                            state[q.index()] = GRAY;
                            stack.push((q.0, 0));
                        }
                        GRAY => return Err(GraphError::Cycle { op: q }),
                        _ => {}
                    }
                }
            } else {
                stack.pop();
                state[op as usize] = BLACK;
                post(self, OpId(op));
            }
        }
        Ok(())
    }
}

/// Exact structural equality up to renumbering, in one linear pass.
///
/// True iff both graphs have the same ordered input keys, the same live operations in
/// canonical order with equal payloads (`==`), roles and operands, the same ordered outputs,
/// and structurally equal parents wherever they read parent values. Dead operations are
/// ignored, exactly as for the fingerprint. Fingerprints are compared first, so unequal
/// graphs are almost always rejected in O(1); parents shared by pointer are not walked.
/// Iterative: deep parent chains do not recurse.
///
/// ```
/// use graph_core::{structural_eq, GraphBuilder, Role};
/// let build = |payload: u32| {
///     let mut b = GraphBuilder::new();
///     let x = b.add_input(0);
///     let (_, y) = b.add_op1(payload, &[x.into()], Role::Primary);
///     b.set_outputs(&[y]);
///     b.build()
/// };
/// assert!(structural_eq(&build(1)?, &build(1)?));
/// assert!(!structural_eq(&build(1)?, &build(2)?));
/// # Ok::<(), graph_core::GraphError>(())
/// ```
pub fn structural_eq<Op: PartialEq>(a: &Graph<Op>, b: &Graph<Op>) -> bool {
    let mut pending: Vec<(&Graph<Op>, &Graph<Op>)> = vec![(a, b)];
    let mut seen: HashSet<(usize, usize)> = HashSet::new();
    while let Some((a, b)) = pending.pop() {
        if !eq_one(a, b, &mut pending, &mut seen) {
            return false;
        }
    }
    true
}

impl<Op: PartialEq> Graph<Op> {
    /// Same as [`structural_eq(self, other)`](structural_eq).
    pub fn structurally_eq(&self, other: &Graph<Op>) -> bool {
        structural_eq(self, other)
    }
}

fn eq_one<'a, Op: PartialEq>(
    a: &'a Graph<Op>,
    b: &'a Graph<Op>,
    pending: &mut Vec<(&'a Graph<Op>, &'a Graph<Op>)>,
    seen: &mut HashSet<(usize, usize)>,
) -> bool {
    if a.fingerprint != b.fingerprint {
        return false;
    }
    if std::ptr::eq(a, b) {
        return true;
    }
    if a.inputs.len() != b.inputs.len()
        || a.canon.ops.len() != b.canon.ops.len()
        || a.outputs.len() != b.outputs.len()
    {
        return false;
    }
    for (&va, &vb) in a.inputs.iter().zip(&b.inputs) {
        if a.keys[va.index()] != b.keys[vb.index()] {
            return false;
        }
    }
    for (&oa, &ob) in a.canon.ops.iter().zip(&b.canon.ops) {
        let na = &a.ops[oa.index()];
        let nb = &b.ops[ob.index()];
        if na.payload != nb.payload
            || na.role != nb.role
            || (na.outputs.1 - na.outputs.0) != (nb.outputs.1 - nb.outputs.0)
        {
            return false;
        }
        let ia = a.op_inputs_of(na);
        let ib = b.op_inputs_of(nb);
        if ia.len() != ib.len() {
            return false;
        }
        for (ra, rb) in ia.iter().zip(ib) {
            match (*ra, *rb) {
                (ValueRef::Local(x), ValueRef::Local(y)) => {
                    if a.canon.value_index[x.index()] != b.canon.value_index[y.index()] {
                        return false;
                    }
                }
                (
                    ValueRef::Parent {
                        parent: pa,
                        value: xa,
                    },
                    ValueRef::Parent {
                        parent: pb,
                        value: xb,
                    },
                ) => {
                    let ga: &Arc<Graph<Op>> = &a.parents[pa.index()];
                    let gb: &Arc<Graph<Op>> = &b.parents[pb.index()];
                    if ga.canon.value_index[xa.index()] != gb.canon.value_index[xb.index()] {
                        return false;
                    }
                    if !Arc::ptr_eq(ga, gb) {
                        let key = (Arc::as_ptr(ga) as usize, Arc::as_ptr(gb) as usize);
                        if seen.insert(key) {
                            pending.push((ga, gb));
                        }
                    }
                }
                _ => return false,
            }
        }
    }
    for (&va, &vb) in a.outputs.iter().zip(&b.outputs) {
        if a.canon.value_index[va.index()] != b.canon.value_index[vb.index()] {
            return false;
        }
    }
    true
}
