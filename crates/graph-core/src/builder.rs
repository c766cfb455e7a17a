//! `GraphBuilder<Op>`: incremental construction of a graph.
//!
//! The graph is validated (and fingerprinted) by `build`.

use std::sync::{Arc, OnceLock};

use crate::error::GraphError;
use crate::graph::{Canon, Graph, OpNode, Role, ValueKey, ValueRef, Walk};
use crate::hash::{StableHash, StableHasher};
use crate::ids::{OpId, ParentId, ValueId};

/// Builds a [`Graph`]. Adding never fails; [`build`](Self::build) validates everything and
/// returns a [`GraphError`] naming the first offending id.
///
/// Each operation's payload is encoded ([`StableHash`]) as it is appended, so that `build`
/// fingerprints the graph by adding the canonical operand indices to bytes it already has.
///
/// Two styles can be mixed:
/// - **Forward**: [`add_input`](Self::add_input), then [`add_op`](Self::add_op) (which creates
///   the operation's output values), then [`set_outputs`](Self::set_outputs).
/// - **Explicit ids** (e.g. from a trace, where tensors are seen before their producer is
///   known): [`add_value`](Self::add_value) declares a value, [`set_input`](Self::set_input)
///   makes it an input, and [`add_op_with_outputs`](Self::add_op_with_outputs) names the
///   values an operation produces. Every declared value must end up an input or produced by
///   exactly one operation.
///
/// ```
/// use graph_core::{GraphBuilder, Role, ValueRef};
///
/// let mut b = GraphBuilder::<&'static str>::new();
/// let x = b.add_input(0);
/// let w = b.add_input(1);
/// let (_, y) = b.add_op("matmul", &[x.into(), w.into()], 1, Role::Primary);
/// let (_, z) = b.add_op("relu", &[y[0].into()], 1, Role::Primary);
/// b.set_outputs(&[z[0]]);
/// let g = b.build()?;
/// assert_eq!(g.num_ops(), 2);
/// println!("{}", g.fingerprint());
/// # Ok::<(), graph_core::GraphError>(())
/// ```
#[derive(Debug)]
pub struct GraphBuilder<Op> {
    n_values: usize,
    input_decls: Vec<(ValueId, u64)>,
    ops: Vec<OpNode<Op>>,
    op_inputs: Vec<ValueRef>,
    op_outputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
    parents: Vec<Arc<Graph<Op>>>,
    overflow: Option<&'static str>,
    /// Where each operation's kept bytes start in `tails` (and, last, where they end):
    /// `num_ops() + 1` entries while `tails_complete`.
    tail_start: Vec<u32>,
    /// False once the kept bytes outgrew `u32` offsets (4 GiB); the walk then encodes
    /// payloads itself.
    tails_complete: bool,
    /// The numbering-independent bytes of each operation's fingerprint record (active mask,
    /// then payload), one operation after another; copied into the graph's `Walk::words` at build.
    tails: StableHasher,
}

impl<Op> Default for GraphBuilder<Op> {
    fn default() -> Self {
        Self::new()
    }
}

impl<Op> GraphBuilder<Op> {
    /// An empty builder.
    pub fn new() -> Self {
        GraphBuilder {
            n_values: 0,
            input_decls: Vec::new(),
            ops: Vec::new(),
            op_inputs: Vec::new(),
            op_outputs: Vec::new(),
            outputs: Vec::new(),
            parents: Vec::new(),
            overflow: None,
            tail_start: vec![0],
            tails_complete: true,
            tails: StableHasher::encoder(),
        }
    }

    /// An empty builder with room for `ops` operations and `values` values.
    pub fn with_capacity(ops: usize, values: usize) -> Self {
        let mut b = Self::new();
        b.ops.reserve(ops);
        b.op_inputs.reserve(ops * 2);
        b.op_outputs.reserve(values);
        b.tail_start.reserve(ops);
        b
    }

    /// Adds a parent graph whose values operations may read through [`ValueRef::Parent`].
    pub fn add_parent(&mut self, parent: Arc<Graph<Op>>) -> ParentId {
        let id = self
            .next_id(self.parents.len(), "parents")
            .map_or(ParentId(u32::MAX), ParentId);
        self.parents.push(parent);
        id
    }

    /// Declares a new value with no producer yet (see [`set_input`](Self::set_input) and
    /// [`add_op_with_outputs`](Self::add_op_with_outputs)).
    pub fn add_value(&mut self) -> ValueId {
        let id = self
            .next_id(self.n_values, "values")
            .map_or(ValueId(u32::MAX), ValueId);
        self.n_values += 1;
        id
    }

    /// Adds a new graph input with key `key`, after the inputs added so far.
    pub fn add_input(&mut self, key: u64) -> ValueId {
        let v = self.add_value();
        self.input_decls.push((v, key));
        v
    }

    /// Makes the declared value `value` the next graph input, with key `key`.
    pub fn set_input(&mut self, value: ValueId, key: u64) {
        self.input_decls.push((value, key));
    }

    /// Sets the ordered graph outputs (a value may appear more than once).
    pub fn set_outputs(&mut self, outputs: &[ValueId]) {
        self.outputs.clear();
        self.outputs.extend_from_slice(outputs);
    }

    /// Number of values declared so far.
    pub fn num_values(&self) -> usize {
        self.n_values
    }

    /// Number of operations added so far.
    pub fn num_ops(&self) -> usize {
        self.ops.len()
    }

    fn next_id(&mut self, len: usize, what: &'static str) -> Option<u32> {
        match u32::try_from(len) {
            Ok(i) if i != u32::MAX => Some(i),
            _ => {
                self.overflow.get_or_insert(what);
                None
            }
        }
    }
}

impl<Op: StableHash> GraphBuilder<Op> {
    /// Adds an operation reading `inputs` and producing `n_outputs` new values; returns its
    /// id and its output values by slot.
    pub fn add_op(
        &mut self,
        payload: Op,
        inputs: &[ValueRef],
        n_outputs: usize,
        role: Role,
    ) -> (OpId, Vec<ValueId>) {
        let outputs: Vec<ValueId> = (0..n_outputs).map(|_| self.add_value()).collect();
        let op = self.add_op_with_outputs(payload, inputs, &outputs, role);
        (op, outputs)
    }

    /// Adds an operation with one output; returns the operation and its output value.
    pub fn add_op1(&mut self, payload: Op, inputs: &[ValueRef], role: Role) -> (OpId, ValueId) {
        let v = self.add_value();
        let op = self.add_op_with_outputs(payload, inputs, &[v], role);
        (op, v)
    }

    /// Adds an operation reading `inputs` and producing the already declared values
    /// `outputs` (slot `i` is `outputs[i]`).
    pub fn add_op_with_outputs(
        &mut self,
        payload: Op,
        inputs: &[ValueRef],
        outputs: &[ValueId],
        role: Role,
    ) -> OpId {
        let id = self
            .next_id(self.ops.len(), "operations")
            .map_or(OpId(u32::MAX), OpId);
        let i0 = self.op_inputs.len();
        self.op_inputs.extend_from_slice(inputs);
        let o0 = self.op_outputs.len();
        self.op_outputs.extend_from_slice(outputs);
        let range = |a: usize, b: usize| {
            (
                a.min(u32::MAX as usize) as u32,
                b.min(u32::MAX as usize) as u32,
            )
        };
        if self.op_inputs.len() > u32::MAX as usize {
            self.overflow.get_or_insert("operation inputs");
        }
        if self.op_outputs.len() > u32::MAX as usize {
            self.overflow.get_or_insert("operation outputs");
        }
        self.record(&payload, &role);
        self.ops.push(OpNode {
            payload,
            role,
            inputs: range(i0, self.op_inputs.len()),
            outputs: range(o0, self.op_outputs.len()),
        });
        id
    }

    /// Encodes the numbering-independent bytes of the operation's fingerprint record that
    /// follow its operands (active mask, payload bytes); see `docs/fingerprint.md`.
    fn record(&mut self, payload: &Op, role: &Role) {
        if !self.tails_complete {
            return;
        }
        if let Role::Linearized { active } = role {
            for &a in active {
                self.tails.write_bool(a);
            }
        }
        payload.stable_hash(&mut self.tails);
        match u32::try_from(self.tails.len()) {
            Ok(end) => self.tail_start.push(end),
            Err(_) => self.tails_complete = false,
        }
    }

    /// Validates the graph, computes its canonical numbering and fingerprint, and returns it.
    ///
    /// Errors, checked in this order: too many ids ([`GraphError::TooMany`]); per operation
    /// in id order, its inputs ([`GraphError::DanglingInput`], [`GraphError::DanglingParent`],
    /// [`GraphError::DanglingParentValue`], [`GraphError::ParentValueNotLive`]) and its
    /// active mask ([`GraphError::MaskArity`]); input declarations
    /// ([`GraphError::DanglingInputDecl`], [`GraphError::DuplicateInput`]); producers
    /// ([`GraphError::DanglingOpOutput`], [`GraphError::InputProduced`],
    /// [`GraphError::ProducedTwice`]); values without producer ([`GraphError::Unproduced`]);
    /// outputs ([`GraphError::DanglingOutput`]); cycles ([`GraphError::Cycle`]).
    pub fn build(mut self) -> Result<Graph<Op>, GraphError> {
        if let Some(what) = self.overflow {
            return Err(GraphError::TooMany { what });
        }
        let n_values = self.n_values;
        for (i, node) in self.ops.iter().enumerate() {
            let op = OpId(i as u32);
            let inputs = &self.op_inputs[node.inputs.0 as usize..node.inputs.1 as usize];
            for r in inputs {
                match *r {
                    ValueRef::Local(value) => {
                        if value.index() >= n_values {
                            return Err(GraphError::DanglingInput { op, value });
                        }
                    }
                    ValueRef::Parent { parent, value } => {
                        let Some(p) = self.parents.get(parent.index()) else {
                            return Err(GraphError::DanglingParent { op, parent });
                        };
                        match p.canon.value_index.get(value.index()) {
                            None => {
                                return Err(GraphError::DanglingParentValue { op, parent, value });
                            }
                            Some(&u32::MAX) => {
                                return Err(GraphError::ParentValueNotLive { op, parent, value });
                            }
                            Some(_) => {}
                        }
                    }
                }
            }
            if let Role::Linearized { active } = &node.role
                && active.len() != inputs.len()
            {
                return Err(GraphError::MaskArity {
                    op,
                    inputs: inputs.len(),
                    mask: active.len(),
                });
            }
        }

        let mut keys: Vec<Option<ValueKey>> = vec![None; n_values];
        let mut inputs = Vec::with_capacity(self.input_decls.len());
        for &(value, key) in &self.input_decls {
            match keys.get_mut(value.index()) {
                None => return Err(GraphError::DanglingInputDecl { value }),
                Some(Some(_)) => return Err(GraphError::DuplicateInput { value }),
                Some(slot) => *slot = Some(ValueKey::Input(key)),
            }
            inputs.push(value);
        }
        for (i, node) in self.ops.iter().enumerate() {
            let op = OpId(i as u32);
            let outs = &self.op_outputs[node.outputs.0 as usize..node.outputs.1 as usize];
            for (slot, &value) in outs.iter().enumerate() {
                match keys.get_mut(value.index()) {
                    None => return Err(GraphError::DanglingOpOutput { op, value }),
                    Some(Some(ValueKey::Input(_))) => {
                        return Err(GraphError::InputProduced { value, op });
                    }
                    Some(Some(ValueKey::Output { op: first, .. })) => {
                        return Err(GraphError::ProducedTwice {
                            value,
                            first: *first,
                            second: op,
                        });
                    }
                    Some(k) => {
                        *k = Some(ValueKey::Output {
                            op,
                            slot: slot as u32,
                        })
                    }
                }
            }
        }
        let mut resolved = Vec::with_capacity(n_values);
        for (i, k) in keys.into_iter().enumerate() {
            match k {
                Some(k) => resolved.push(k),
                None => {
                    return Err(GraphError::Unproduced {
                        value: ValueId(i as u32),
                    });
                }
            }
        }
        for &value in &self.outputs {
            if value.index() >= n_values {
                return Err(GraphError::DanglingOutput { value });
            }
        }

        let tails = if self.tails_complete {
            Some(std::mem::take(&mut self.tails).into_padded_bytes(0))
        } else {
            None
        };
        let walk = walk_tables(
            &self.ops,
            &self.op_inputs,
            &resolved,
            &inputs,
            &self.outputs,
            &self.tail_start,
            tails,
        );
        let mut g = Graph {
            keys: resolved,
            walk,
            ops: self.ops,
            op_inputs: self.op_inputs,
            op_outputs: self.op_outputs,
            inputs,
            outputs: self.outputs,
            parents: self.parents,
            canon: Canon::default(),
            fingerprint: crate::Fingerprint(0),
            identity: OnceLock::new(),
        };
        let (canon, fp) = g.canonicalize(true)?;
        g.canon = canon;
        g.fingerprint = fp;
        Ok(g)
    }
}

/// The compact walk tables of a validated graph (layout in [`Walk`]); not packed (empty)
/// when the graph is too large for them or its kept bytes are incomplete (`tails` is
/// `None`).
fn walk_tables<Op>(
    ops: &[OpNode<Op>],
    op_inputs: &[ValueRef],
    keys: &[ValueKey],
    inputs: &[ValueId],
    outputs: &[ValueId],
    tail_start: &[u32],
    tails: Option<Vec<u8>>,
) -> Walk {
    let n_ops = ops.len();
    let tail_words = |i: usize| (tail_start[i + 1] - tail_start[i]).div_ceil(4) as u64;
    let n_words = if tail_start.len() == n_ops + 1 {
        (0..n_ops).fold(Walk::PAD as u64, |n, i| n.saturating_add(tail_words(i)))
    } else {
        u64::MAX
    }
    .saturating_add((Walk::HEAD as u64).saturating_mul(n_ops as u64))
    .saturating_add((Walk::OPERAND as u64).saturating_mul(op_inputs.len() as u64));
    // Operation ids and the two operand markers stay below the walk's two state markers,
    // and so do the canonical value indices the walk stores per finished operation.
    let limit = u64::from(u32::MAX - 3);
    let fits =
        n_words <= u64::from(u32::MAX) && (n_ops as u64) < limit && (keys.len() as u64) < limit;
    let Some(tails) = tails.filter(|_| fits) else {
        return Walk::default();
    };
    let (input, parent) = (Walk::input(n_ops), Walk::parent(n_ops));
    let mut input_pos = vec![0u32; keys.len()];
    for (k, &v) in inputs.iter().enumerate() {
        input_pos[v.index()] = k as u32;
    }
    // Where each operation's run starts: runs follow one another in arena order.
    let mut at = Vec::with_capacity(n_ops);
    let mut o = 0u64;
    for (i, node) in ops.iter().enumerate() {
        at.push(o as u32);
        o += (Walk::HEAD + Walk::OPERAND * (node.inputs.1 - node.inputs.0) as usize) as u64
            + tail_words(i);
    }
    let local = |v: ValueId| match keys[v.index()] {
        ValueKey::Input(_) => [input, input_pos[v.index()], 0],
        ValueKey::Output { op, slot } => [op.0, slot, at[op.index()]],
    };
    // The runs and the spare words after them, written in place.
    let mut words = vec![0u32; n_words as usize];
    for (i, node) in ops.iter().enumerate() {
        let (i0, i1) = node.inputs;
        let tail = &tails[tail_start[i] as usize..tail_start[i + 1] as usize];
        let o = at[i] as usize;
        let operands_at = o + Walk::HEAD;
        let tail_at = operands_at + Walk::OPERAND * (i1 - i0) as usize;
        words[o..operands_at].copy_from_slice(&[
            1 | (u32::from(crate::canon::role_tag(&node.role)) << 8),
            node.outputs.1 - node.outputs.0,
            i1 - i0,
            tail.len() as u32,
        ]);
        let operands = words[operands_at..tail_at].chunks_exact_mut(Walk::OPERAND);
        for (k, (d, r)) in operands
            .zip(&op_inputs[i0 as usize..i1 as usize])
            .enumerate()
        {
            d.copy_from_slice(&match *r {
                ValueRef::Local(v) => local(v),
                ValueRef::Parent { .. } => [parent, i0 + k as u32, 0],
            });
        }
        let chunks = tail.chunks_exact(4);
        let rest = chunks.remainder();
        let dst = &mut words[tail_at..];
        for (d, c) in dst.iter_mut().zip(chunks) {
            *d = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        if let (false, Some(d)) = (rest.is_empty(), dst.get_mut(tail.len() / 4)) {
            // The last, partial word: its bytes, then zeros.
            *d = rest.iter().rev().fold(0, |w, &b| (w << 8) | u32::from(b));
        }
    }
    Walk {
        words,
        outputs: outputs.iter().map(|&v| local(v)).collect(),
        packed: true,
    }
}
