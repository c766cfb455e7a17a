//! Canonical numbering, the version-1 fingerprint encoding, and linear-time `structural_eq`.

use std::collections::HashSet;
use std::sync::Arc;

use crate::error::GraphError;
use crate::graph::{Canon, Graph, Role, ValueKey, ValueRef};
use crate::hash::{Fingerprint, StableHash, StableHasher};
use crate::ids::OpId;

/// Domain tag at the start of every graph fingerprint encoding.
pub const FINGERPRINT_DOMAIN: &str = "tracegraph.graph-core.fingerprint";
/// Version of the graph fingerprint encoding (see `docs/fingerprint.md`).
pub const FINGERPRINT_VERSION: u32 = 1;

/// Low byte of the 16-byte header of each operation record.
const TAG_OP: u128 = 1;
/// Low byte of the 16-byte record after the last operation record.
const TAG_END_OPS: u128 = 2;
/// Spare bytes after the last tail of a graph's kept records (see `write_record`).
pub(crate) const TAIL_PAD: usize = 16;
/// Operand tag (bit 32 of an operand word) of a parent value.
const OPERAND_PARENT: u64 = 1 << 32;

const WHITE: u8 = 0;
const GRAY: u8 = 1;
const BLACK: u8 = 2;

/// Role tags, shared with `Role`'s `StableHash`.
pub(crate) fn role_tag(role: &Role) -> u8 {
    match role {
        Role::Primary => 0,
        Role::Linearized { .. } => 1,
        Role::Transposed => 2,
    }
}

/// Walk state for `n_ops` operations: all `WHITE`, plus the `BLACK` sentinel.
pub(crate) fn walk_state(n_ops: usize) -> Vec<u8> {
    let mut state = vec![WHITE; n_ops + 1];
    state[n_ops] = BLACK;
    state
}

/// One frame of the iterative depth-first walk: an operation and its next operand.
#[derive(Clone, Copy)]
pub(crate) struct Frame {
    op: u32,
    cur: u32,
    end: u32,
}

impl<Op: StableHash> Graph<Op> {
    /// Recomputes the fingerprint (canonical walk and hashing, as `build` does), ignoring
    /// the cached value. Like `build`, it uses the payload and mask bytes the builder encoded
    /// when each operation was appended. Always equal to [`fingerprint`](Graph::fingerprint);
    /// exists to measure and verify the computation.
    pub fn compute_fingerprint(&self) -> Fingerprint {
        match self.canonicalize(false) {
            Ok((_, fp)) => fp,
            // A built graph is acyclic; the walk over live operations cannot fail.
            Err(_) => self.fingerprint,
        }
    }

    /// The canonical walk: depth-first post-order from the outputs in order (operands of each
    /// operation in order), numbering values and hashing each operation as it finishes.
    /// With `check_all` (at build time), also records the canonical order and walks the dead
    /// operations to detect cycles among them.
    pub(crate) fn canonicalize(&self, check_all: bool) -> Result<(Canon, Fingerprint), GraphError> {
        let n_ops = self.ops.len();
        let mut state = walk_state(n_ops);
        let mut value_index = vec![u32::MAX; self.keys.len()];
        let mut canon_ops = Vec::with_capacity(if check_all { n_ops } else { 0 });
        let mut n_live: usize = 0;
        let mut next = 0u32;

        let mut h = StableHasher::for_long_input();
        h.write_str(FINGERPRINT_DOMAIN);
        h.write_u32(FINGERPRINT_VERSION);
        h.write_len(self.inputs.len());
        for &v in &self.inputs {
            value_index[v.index()] = next;
            next += 1;
            if let ValueKey::Input(key) = self.keys[v.index()] {
                h.write_u64(key);
            }
        }

        let mut stack: Vec<Frame> = Vec::new();
        if self.records.complete {
            // Two tight passes: the canonical order (the walk touches only the compact walk
            // tables), then the records and the numbering in that order.
            let mut order: Vec<OpId> = Vec::with_capacity(n_ops);
            for &out in &self.outputs {
                let root = self.producers[out.index()];
                if root != u32::MAX && state[root as usize] == WHITE {
                    self.dfs(OpId(root), &mut state, &mut stack, |_, op| order.push(op))?;
                }
            }
            for &op in &order {
                // Operands are numbered already: their producers finished earlier.
                self.write_record(op, &mut h, &value_index);
                let i = op.index();
                let outs =
                    &self.op_outputs[self.out_start[i] as usize..self.out_start[i + 1] as usize];
                for (k, &v) in outs.iter().enumerate() {
                    value_index[v.index()] = next + k as u32;
                }
                next += outs.len() as u32;
            }
            n_live = order.len();
            if check_all {
                canon_ops = order;
            }
        } else {
            for &out in &self.outputs {
                let root = self.producers[out.index()];
                if root != u32::MAX && state[root as usize] == WHITE {
                    self.dfs(OpId(root), &mut state, &mut stack, |g, op| {
                        g.hash_op(op, &mut h, &mut value_index, &mut next);
                        n_live += 1;
                        if check_all {
                            canon_ops.push(op);
                        }
                    })?;
                }
            }
        }
        h.write_u128(TAG_END_OPS | ((n_live as u128) << 64));
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

    /// Writes one operation record (see docs/fingerprint.md) from the parts the builder
    /// encoded when the operation was appended (role tag, mask and payload bytes),
    /// adding the operand indices (numbered already). Touches only the compact walk tables,
    /// never the operation nodes.
    #[inline(always)]
    fn write_record(&self, op: OpId, h: &mut StableHasher, value_index: &[u32]) {
        let i = op.index();
        let ins = &self.op_inputs[self.in_start[i] as usize..self.in_start[i + 1] as usize];
        let r = &self.records;
        let tail = &r.tails[r.tail_start[i] as usize..r.tail_start[i + 1] as usize];
        let (o0, o1) = (self.out_start[i], self.out_start[i + 1]);
        let head = 1 | (u64::from(r.roles[i]) << 8) | (u64::from(o1 - o0) << 32);
        // `tails` ends with `TAIL_PAD` spare bytes, so the tail is copied in whole 16-byte
        // chunks (the reserved room has as many spare bytes; only `tail.len()` count).
        if let Some(mut w) = h.reserve(16 + 24 * ins.len() + tail.len() + TAIL_PAD) {
            w.write_u64(head);
            w.write_u64(ins.len() as u64);
            for r in ins {
                match *r {
                    ValueRef::Local(v) => w.write_u64(u64::from(value_index[v.index()])),
                    ValueRef::Parent { parent, value } => {
                        let p = &self.parents[parent.index()];
                        w.write_u64(u64::from(p.canon.value_index[value.index()]) | OPERAND_PARENT);
                        w.write_u64(p.fingerprint.0 as u64);
                        w.write_u64((p.fingerprint.0 >> 64) as u64);
                    }
                }
            }
            w.write_padded(&r.tails[r.tail_start[i] as usize..], tail.len());
        } else {
            h.write_u64(head);
            h.write_u64(ins.len() as u64);
            for r in ins {
                match *r {
                    ValueRef::Local(v) => h.write_u64(u64::from(value_index[v.index()])),
                    ValueRef::Parent { parent, value } => {
                        let p = &self.parents[parent.index()];
                        h.write_u64(u64::from(p.canon.value_index[value.index()]) | OPERAND_PARENT);
                        h.write_fingerprint(p.fingerprint);
                    }
                }
            }
            h.write_bytes(tail);
        }
    }

    /// Writes one operation record (see docs/fingerprint.md), encoding the payload itself,
    /// and numbers its outputs (for graphs whose builder could not keep every payload's
    /// bytes).
    #[inline(always)]
    fn hash_op(&self, op: OpId, h: &mut StableHasher, value_index: &mut [u32], next: &mut u32) {
        let node = &self.ops[op.index()];
        let ins = self.op_inputs_of(node);
        let n_out = node.outputs.1 - node.outputs.0;
        let head = TAG_OP
            | (u128::from(role_tag(&node.role)) << 8)
            | (u128::from(n_out) << 32)
            | ((ins.len() as u128) << 64);
        // Header and operands: at most 16 + 24 bytes per operand, written through one
        // reserved region when it fits (the common case), else through plain writes.
        if let Some(mut w) = h.reserve(16 + 24 * ins.len()) {
            {
                w.write_u64(head as u64);
                w.write_u64((head >> 64) as u64);
                for r in ins {
                    match *r {
                        ValueRef::Local(v) => w.write_u64(u64::from(value_index[v.index()])),
                        ValueRef::Parent { parent, value } => {
                            let p = &self.parents[parent.index()];
                            w.write_u64(
                                u64::from(p.canon.value_index[value.index()]) | OPERAND_PARENT,
                            );
                            w.write_u64(p.fingerprint.0 as u64);
                            w.write_u64((p.fingerprint.0 >> 64) as u64);
                        }
                    }
                }
            }
        } else {
            {
                h.write_u128(head);
                for r in ins {
                    match *r {
                        ValueRef::Local(v) => h.write_u64(u64::from(value_index[v.index()])),
                        ValueRef::Parent { parent, value } => {
                            let p = &self.parents[parent.index()];
                            h.write_u64(
                                u64::from(p.canon.value_index[value.index()]) | OPERAND_PARENT,
                            );
                            h.write_fingerprint(p.fingerprint);
                        }
                    }
                }
            }
        }
        if let Role::Linearized { active } = &node.role {
            for &a in active {
                h.write_bool(a);
            }
        }
        node.payload.stable_hash(h);
        let base = *next;
        let outs = &self.op_outputs[node.outputs.0 as usize..node.outputs.1 as usize];
        for (i, &v) in outs.iter().enumerate() {
            value_index[v.index()] = base + i as u32;
        }
        *next = base + n_out;
    }
}

impl<Op> Graph<Op> {
    /// Iterative depth-first walk from `root` over local producers, calling `post` on each
    /// newly finished operation (post-order; operands visited in order). A gray producer
    /// means a cycle. `state` has `num_ops() + 1` entries, the last one (the sentinel of
    /// inputs and parent values) `BLACK`.
    #[inline(always)]
    pub(crate) fn dfs(
        &self,
        root: OpId,
        state: &mut [u8],
        stack: &mut Vec<Frame>,
        mut post: impl FnMut(&Self, OpId),
    ) -> Result<(), GraphError> {
        // The current frame lives in locals; `stack` holds the suspended ones. The tables
        // are read through local slices, so their bounds stay in registers.
        let in_start = self.in_start.as_slice();
        let operand_ops = self.operand_ops.as_slice();
        let mut op = root.0;
        let mut cur = in_start[op as usize];
        let mut end = in_start[op as usize + 1];
        state[op as usize] = GRAY;
        stack.clear();
        'walk: loop {
            while cur < end {
                let q = operand_ops[cur as usize];
                cur += 1;
                let s = state[q as usize];
                if s != BLACK {
                    if s != WHITE {
                        return Err(GraphError::Cycle { op: OpId(q) });
                    }
                    stack.push(Frame { op, cur, end });
                    op = q;
                    cur = in_start[op as usize];
                    end = in_start[op as usize + 1];
                    state[op as usize] = GRAY;
                    continue 'walk;
                }
            }
            state[op as usize] = BLACK;
            post(self, OpId(op));
            match stack.pop() {
                Some(f) => (op, cur, end) = (f.op, f.cur, f.end),
                None => break,
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
