//! Canonical numbering, the version-1 fingerprint encoding, and linear-time `structural_eq`.

use std::collections::HashSet;
use std::sync::Arc;

use crate::error::GraphError;
use crate::graph::{Canon, Graph, Role, ValueRef, Walk};
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
/// Operand tag (bit 32 of an operand word) of a parent value.
const OPERAND_PARENT: u64 = 1 << 32;

/// Walk state of an operation not reached yet.
pub(crate) const WHITE: u32 = u32::MAX;
/// Walk state of an operation on the walk's path (reached, not finished).
const GRAY: u32 = u32::MAX - 1;
// A finished operation's state is any value below `GRAY`: the fingerprint walk keeps the
// canonical index of the operation's first output there, the other walks 0.

/// Role tags, shared with `Role`'s `StableHash`.
pub(crate) fn role_tag(role: &Role) -> u8 {
    match role {
        Role::Primary => 0,
        Role::Linearized { .. } => 1,
        Role::Transposed => 2,
    }
}

/// Walk state for `n_ops` operations: all `WHITE`, plus the two operand markers (graph
/// inputs and parent values, see [`Walk`]) finished with first index 0, so that a graph
/// input's canonical index is that 0 plus its position.
pub(crate) fn walk_state(n_ops: usize) -> Vec<u32> {
    let mut state = vec![WHITE; n_ops + 2];
    state[n_ops] = 0;
    state[n_ops + 1] = 0;
    state
}

/// One frame of the iterative depth-first walk: an operation (and where its operands are
/// listed) and its next operand.
#[derive(Clone, Copy)]
pub(crate) struct Frame {
    op: u32,
    list: u32,
    cur: u32,
    end: u32,
}

/// Where a walk finds each operation's operand producers: an operation's list (named by a
/// handle) holds positions `range(list)`, stepping by `STEP`, each naming a producer (or
/// one of the finished markers) and the producer's list.
pub(crate) trait Operands {
    /// Distance between two operands' positions.
    const STEP: u32;
    /// The positions of the operands in the list `list`.
    fn range(&self, list: u32) -> (u32, u32);
    /// The producer at position `at` and its list.
    fn producer(&self, at: u32) -> (u32, u32);
}

/// The packed walk tables: an operation's list is its run of words.
struct Packed<'g> {
    words: &'g [u32],
}

impl Operands for Packed<'_> {
    const STEP: u32 = Walk::OPERAND as u32;
    #[inline(always)]
    fn range(&self, run: u32) -> (u32, u32) {
        let start = run + Walk::HEAD as u32;
        let n = self.words[run as usize + 2];
        (start, start + Walk::OPERAND as u32 * n)
    }
    #[inline(always)]
    fn producer(&self, at: u32) -> (u32, u32) {
        (self.words[at as usize], self.words[at as usize + 2])
    }
}

/// The operation nodes themselves (graphs too large for the packed tables); an
/// operation's list is its id.
struct Nodes<'g, Op> {
    g: &'g Graph<Op>,
    marker: u32,
}

impl<Op> Operands for Nodes<'_, Op> {
    const STEP: u32 = 1;
    #[inline]
    fn range(&self, op: u32) -> (u32, u32) {
        self.g.ops[op as usize].inputs
    }
    #[inline]
    fn producer(&self, at: u32) -> (u32, u32) {
        let q = match self.g.op_inputs[at as usize] {
            ValueRef::Local(v) => match self.g.keys[v.index()].producer() {
                Some((op, _)) => op.0,
                None => self.marker,
            },
            ValueRef::Parent { .. } => self.marker,
        };
        (q, q)
    }
}

/// Iterative depth-first walk from operation `root` (with list `list`) over local
/// producers, calling `post` on each newly finished operation (post-order; operands visited
/// in order) with the states so far, the operation and its list; the operation's state
/// becomes what `post` returns (below `GRAY`). A gray producer means a cycle. `state`
/// comes from [`walk_state`].
#[inline(always)]
fn dfs_over<A: Operands>(
    adj: &A,
    (root, list): (u32, u32),
    state: &mut [u32],
    stack: &mut Vec<Frame>,
    mut post: impl FnMut(&[u32], u32, u32) -> u32,
) -> Result<(), GraphError> {
    // The current frame lives in locals; `stack` holds the suspended ones.
    let (mut op, mut list) = (root, list);
    let (mut cur, mut end) = adj.range(list);
    state[op as usize] = GRAY;
    stack.clear();
    'walk: loop {
        while cur < end {
            let (q, q_list) = adj.producer(cur);
            cur += A::STEP;
            let s = state[q as usize];
            if s >= GRAY {
                if s == GRAY {
                    return Err(GraphError::Cycle { op: OpId(q) });
                }
                stack.push(Frame { op, list, cur, end });
                (op, list) = (q, q_list);
                (cur, end) = adj.range(list);
                state[op as usize] = GRAY;
                continue 'walk;
            }
        }
        let done = post(state, op, list);
        state[op as usize] = done;
        match stack.pop() {
            Some(f) => (op, list, cur, end) = (f.op, f.list, f.cur, f.end),
            None => break,
        }
    }
    Ok(())
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
    /// With `check_all` (at build time), also records the canonical order and numbering and
    /// walks the dead operations to detect cycles among them.
    pub(crate) fn canonicalize(&self, check_all: bool) -> Result<(Canon, Fingerprint), GraphError> {
        let n_ops = self.ops.len();
        let mut state = walk_state(n_ops);
        let mut stack: Vec<Frame> = Vec::new();
        let mut canon_ops = Vec::with_capacity(if check_all { n_ops } else { 0 });

        let mut h = StableHasher::for_long_input();
        h.write_str(FINGERPRINT_DOMAIN);
        h.write_u32(FINGERPRINT_VERSION);
        h.write_len(self.inputs.len());
        for &key in &self.input_keys {
            h.write_u64(key);
        }

        let value_index = if self.walk.packed {
            // One pass over the packed tables: each operation's record is written as it
            // finishes, from its run of words (header, operands and kept bytes, just read
            // by the walk); an operand's canonical index is its producer's state plus its
            // slot.
            let w = &self.walk;
            let adj = Packed { words: &w.words };
            let mut next = self.inputs.len() as u32;
            let mut n_live: usize = 0;
            for &v in &self.outputs {
                let [root, _, run] = self.output_triple(v);
                if state[root as usize] == WHITE {
                    dfs_over(
                        &adj,
                        (root, run),
                        &mut state,
                        &mut stack,
                        |state, op, run| {
                            let n_out = self.write_record(run, &mut h, state);
                            n_live += 1;
                            if check_all {
                                canon_ops.push(OpId(op));
                            }
                            let first = next;
                            next += n_out;
                            first
                        },
                    )?;
                }
            }
            h.write_u128(TAG_END_OPS | ((n_live as u128) << 64));
            h.write_len(self.outputs.len());
            for &v in &self.outputs {
                let [q, slot, _] = self.output_triple(v);
                h.write_u32(state[q as usize] + slot);
            }
            // The numbering is made from the canonical order once the walk state is freed.
            Vec::new()
        } else {
            let mut value_index = vec![u32::MAX; self.keys.len()];
            let mut next = 0u32;
            for &v in &self.inputs {
                value_index[v.index()] = next;
                next += 1;
            }
            let adj = Nodes {
                g: self,
                marker: Walk::input(n_ops),
            };
            let mut n_live: usize = 0;
            for &out in &self.outputs {
                if let Some((root, _)) = self.keys[out.index()].producer()
                    && state[root.index()] == WHITE
                {
                    dfs_over(
                        &adj,
                        (root.0, root.0),
                        &mut state,
                        &mut stack,
                        |_, op, _| {
                            self.hash_op(OpId(op), &mut h, &mut value_index, &mut next);
                            n_live += 1;
                            if check_all {
                                canon_ops.push(OpId(op));
                            }
                            0
                        },
                    )?;
                }
            }
            h.write_u128(TAG_END_OPS | ((n_live as u128) << 64));
            h.write_len(self.outputs.len());
            for &out in &self.outputs {
                h.write_u32(value_index[out.index()]);
            }
            value_index
        };
        let fp = h.finish();

        if check_all {
            self.walk_rest(&mut state, &mut stack, |_| {})?;
        }
        drop(state);
        let value_index = if check_all && self.walk.packed {
            self.number_values(&canon_ops)
        } else {
            value_index
        };
        Ok((
            Canon {
                ops: canon_ops,
                value_index,
            },
            fp,
        ))
    }

    /// The walk's triple of graph output `v`: its producer (or [`Walk::input`]), slot (or
    /// input position) and the producer's run. Packed tables only.
    #[inline]
    fn output_triple(&self, v: crate::ids::ValueId) -> [u32; 3] {
        let k = self.keys[v.index()];
        match k.producer() {
            None => [Walk::input(self.ops.len()), k.slot, 0],
            Some((op, slot)) => [op.0, slot, self.walk.run_at[op.index()]],
        }
    }

    /// The canonical index of every value (`u32::MAX` for dead ones): inputs by position,
    /// then the outputs of `canon_ops` (the live operations in canonical order) by operation
    /// and slot, as the walk numbered them.
    fn number_values(&self, canon_ops: &[OpId]) -> Vec<u32> {
        let mut value_index = vec![u32::MAX; self.keys.len()];
        for (k, &v) in self.inputs.iter().enumerate() {
            value_index[v.index()] = k as u32;
        }
        let mut next = self.inputs.len() as u32;
        for &op in canon_ops {
            for &v in self.op_outputs_of(op) {
                value_index[v.index()] = next;
                next += 1;
            }
        }
        value_index
    }

    /// Writes the record (see docs/fingerprint.md) of the operation whose run of the packed
    /// tables starts at `run`: the header, the operand indices (each producer finished
    /// already, so its state is its first output's canonical index) and the kept bytes,
    /// copied in 16-byte chunks. Returns the operation's number of outputs.
    #[inline(always)]
    fn write_record(&self, run: u32, h: &mut StableHasher, state: &[u32]) -> u32 {
        let w = &self.walk;
        let o = run as usize;
        let &[head_lo, n_out, n_in, tail_len] = &w.words[o..o + Walk::HEAD] else {
            return 0;
        };
        let tail_at = o + Walk::HEAD + Walk::OPERAND * n_in as usize;
        let operands = &w.words[o + Walk::HEAD..tail_at];
        let head = u64::from(head_lo) | (u64::from(n_out) << 32);
        let parent = Walk::parent(self.ops.len());
        // The usual record, one or two operands none of which is a parent value and a tail of
        // at most 32 bytes, is written without a branch on its shape: both operand words are
        // read (the second stands in for the first when there is one), and the tail is copied
        // as 32 bytes whatever its length (`words` has the spare words, or the general path
        // below runs).
        let tail_len = tail_len as usize;
        if (1..=2).contains(&n_in)
            && tail_len <= 32
            && let Some(win) = w.words.get(o + Walk::HEAD..o + Walk::HEAD + 14)
        {
            let two = n_in == 2;
            let (q0, s0) = (win[0], win[1]);
            let (q1, s1) = if two { (win[3], win[4]) } else { (q0, s0) };
            let tail_in_win = 3 * n_in as usize;
            if q0 != parent
                && q1 != parent
                && let (Some(&a), Some(&b)) = (state.get(q0 as usize), state.get(q1 as usize))
                && let Some(tail) = win
                    .get(tail_in_win..tail_in_win + 8)
                    .and_then(|t| <&[u32; 8]>::try_from(t).ok())
                && let Some(mut r) = h.reserve(64)
                && r.write_short_record(
                    [head, u64::from(n_in), u64::from(a + s0), u64::from(b + s1)],
                    tail,
                    tail_len,
                )
            {
                return n_out;
            }
        }
        // `words` ends with `Walk::PAD` spare words, so the tail is copied in whole 16-byte
        // chunks (the reserved room has as many spare bytes; only `tail_len` count).
        let room = (n_in as usize)
            .saturating_mul(24)
            .saturating_add(16 + 4 * Walk::PAD)
            .saturating_add(tail_len);
        if let Some(mut r) = h.reserve(room) {
            r.write_u64(head);
            r.write_u64(u64::from(n_in));
            for p in operands.chunks_exact(Walk::OPERAND) {
                let (q, slot) = (p[0], p[1]);
                if q != parent {
                    r.write_u64(u64::from(state[q as usize] + slot));
                } else if let Some(&ValueRef::Parent { parent, value }) =
                    self.op_inputs.get(slot as usize)
                {
                    let p = &self.parents[parent.index()];
                    r.write_u64(u64::from(p.canon.value_index[value.index()]) | OPERAND_PARENT);
                    r.write_u64(p.fingerprint.0 as u64);
                    r.write_u64((p.fingerprint.0 >> 64) as u64);
                }
            }
            r.write_padded_words(&w.words[tail_at..], tail_len);
        } else {
            h.write_u64(head);
            h.write_u64(u64::from(n_in));
            for p in operands.chunks_exact(Walk::OPERAND) {
                let (q, slot) = (p[0], p[1]);
                if q != parent {
                    h.write_u64(u64::from(state[q as usize] + slot));
                } else if let Some(&ValueRef::Parent { parent, value }) =
                    self.op_inputs.get(slot as usize)
                {
                    let p = &self.parents[parent.index()];
                    h.write_u64(u64::from(p.canon.value_index[value.index()]) | OPERAND_PARENT);
                    h.write_fingerprint(p.fingerprint);
                }
            }
            let tail = &w.words[tail_at..tail_at + tail_len.div_ceil(4)];
            for (k, word) in tail.iter().enumerate() {
                let n = (tail_len - 4 * k).min(4);
                h.write_bytes(&word.to_le_bytes()[..n]);
            }
        }
        n_out
    }
    /// Writes one operation record (see docs/fingerprint.md), encoding the payload itself,
    /// and numbers its outputs (for graphs whose builder could not keep every payload's
    /// bytes).
    #[inline(always)]
    fn hash_op(&self, op: OpId, h: &mut StableHasher, value_index: &mut [u32], next: &mut u32) {
        let node = &self.ops[op.index()];
        let ins = self.op_inputs_of(node);
        let n_out = node.outputs.1 - node.outputs.0;
        let role = self.role_of(node);
        let head = TAG_OP
            | (u128::from(role_tag(role)) << 8)
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
        if let Role::Linearized { active } = role {
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
    /// Walks from every operation not reached yet, in arena order (see [`dfs_over`]),
    /// calling `post` on each as it finishes (post-order), over whichever tables the
    /// graph has. Finished operations get state 0.
    pub(crate) fn walk_rest(
        &self,
        state: &mut [u32],
        stack: &mut Vec<Frame>,
        mut post: impl FnMut(u32),
    ) -> Result<(), GraphError> {
        let mut post = |_: &[u32], op: u32, _: u32| {
            post(op);
            0
        };
        let Some(first) = state[..self.ops.len()].iter().position(|&s| s == WHITE) else {
            return Ok(());
        };
        if self.walk.packed {
            let adj = Packed {
                words: &self.walk.words,
            };
            // Runs follow one another in arena order.
            let mut run = 0u32;
            for i in 0..self.ops.len() {
                if i >= first && state[i] == WHITE {
                    dfs_over(&adj, (i as u32, run), state, stack, &mut post)?;
                }
                let (_, end) = adj.range(run);
                run = end + adj.words[run as usize + 3].div_ceil(4);
            }
        } else {
            let adj = Nodes {
                g: self,
                marker: Walk::input(self.ops.len()),
            };
            for i in first..self.ops.len() {
                if state[i] == WHITE {
                    dfs_over(&adj, (i as u32, i as u32), state, stack, &mut post)?;
                }
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
    if a.input_keys != b.input_keys {
        return false;
    }
    for (&oa, &ob) in a.canon.ops.iter().zip(&b.canon.ops) {
        let na = &a.ops[oa.index()];
        let nb = &b.ops[ob.index()];
        if na.payload != nb.payload
            || a.role_of(na) != b.role_of(nb)
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rand_xoshiro::SplitMix64;
    use rand_xoshiro::rand_core::{Rng, SeedableRng};

    use crate::builder::GraphBuilder;
    use crate::graph::{Graph, Role, ValueRef, Walk};
    use crate::ids::ValueId;

    /// A parent graph with two outputs.
    fn parent() -> Arc<Graph<String>> {
        let mut b = GraphBuilder::new();
        let x = b.add_input(7);
        let (_, y) = b.add_op1("p.neg".to_string(), &[x.into()], Role::Primary);
        let (_, z) = b.add_op1("p.exp".to_string(), &[y.into()], Role::Primary);
        b.set_outputs(&[y, z]);
        Arc::new(b.build().expect("valid parent"))
    }

    /// A seeded graph with every kind of operand and record: graph inputs, parent values,
    /// one to three outputs per operation, all three roles, dead operations, a payload over
    /// the hasher's chunk, and outputs that repeat or are inputs.
    fn mixed(seed: u64, n: usize) -> Graph<String> {
        let mut rng = SplitMix64::seed_from_u64(seed);
        let p = parent();
        let mut b = GraphBuilder::new();
        let pid = b.add_parent(p.clone());
        let (py, pz) = (p.outputs()[0], p.outputs()[1]);
        let mut values: Vec<ValueId> = (0..4).map(|k| b.add_input(k)).collect();
        for i in 0..n {
            let r = rng.next_u64();
            let n_in = (r % 3) as usize + 1;
            let inputs: Vec<ValueRef> = (0..n_in)
                .map(|k| {
                    let pick = (r >> (8 + 8 * k)) as usize;
                    match pick % 11 {
                        0 => ValueRef::Parent {
                            parent: pid,
                            value: if pick & 16 == 0 { py } else { pz },
                        },
                        _ => ValueRef::Local(values[values.len() - 1 - pick % values.len().min(9)]),
                    }
                })
                .collect();
            let role = match (r >> 40) % 5 {
                0 => Role::Transposed,
                1 => Role::Linearized {
                    active: (0..n_in).map(|k| (r >> (48 + k)) & 1 == 1).collect(),
                },
                _ => Role::Primary,
            };
            let payload = if i == n / 2 {
                "x".repeat(20_000)
            } else {
                format!("op{}", r % 17)
            };
            let (_, outs) = b.add_op(payload, &inputs, (r >> 56) as usize % 3 + 1, role);
            values.extend(outs);
        }
        let k = values.len();
        let outputs = [
            values[k - 1],
            values[k / 2],
            values[1],
            values[k - 1],
            values[k / 3],
        ];
        b.set_outputs(&outputs);
        b.build().expect("valid")
    }

    #[test]
    fn the_node_walk_of_graphs_too_large_for_the_packed_tables_agrees_with_the_packed_walk() {
        for seed in 0..20 {
            let g = mixed(seed, 300);
            assert!(g.walk.packed);
            let mut nodes = g.clone();
            nodes.walk = Walk::default();
            assert!(!nodes.walk.packed);
            assert_eq!(nodes.compute_fingerprint(), g.fingerprint(), "seed {seed}");
            let (canon, fp) = nodes.canonicalize(true).expect("acyclic");
            assert_eq!(fp, g.fingerprint());
            assert_eq!(canon.ops, g.canon.ops);
            assert_eq!(canon.value_index, g.canon.value_index);
            assert_eq!(nodes.topo_order(), g.topo_order());
            assert!(
                g.canon.ops.len() < g.num_ops(),
                "seed {seed}: some dead code"
            );
        }
    }
}
