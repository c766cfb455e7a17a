//! `GraphBuilder<Op>`: incremental construction of a graph.
//!
//! The graph is validated (and fingerprinted) by `build`.

use std::sync::{Arc, OnceLock};

use crate::error::GraphError;
use crate::graph::{Canon, Graph, Key, OpNode, PRIMARY_ROLE, Role, ValueRef, Walk};
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
    /// The declared inputs in order, and their keys (parallel).
    input_values: Vec<ValueId>,
    input_keys: Vec<u64>,
    ops: Vec<OpNode<Op>>,
    /// The roles of the operations that are not [`Role::Primary`].
    roles: Vec<Role>,
    op_inputs: Vec<ValueRef>,
    op_outputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
    parents: Vec<Arc<Graph<Op>>>,
    overflow: Option<&'static str>,
    /// The operations announced by [`with_capacity`](Self::with_capacity): when a table
    /// outgrows its room, it is sized for that many operations at the rate seen so far
    /// instead of doubled.
    expect_ops: usize,
    /// The graph's packed walk table (see [`Walk`]), written as operations are appended,
    /// while their data is at hand: each operation's run, with each local operand's value id
    /// (or [`PARENT_OPERAND`] and its index in `op_inputs`) where `build` puts the producer,
    /// slot and producer's run.
    runs: Vec<u32>,
    /// Where each operation's run starts in `runs`.
    run_at: Vec<u32>,
    /// False once `runs` outgrew `u32` offsets; the graph then walks its operation nodes
    /// and encodes payloads itself.
    runs_complete: bool,
    /// Encodes one operation's kept bytes (active mask, then payload) before they are
    /// copied into its run.
    scratch: StableHasher,
}

/// Makes room in `v` for `add` more items when it has none left. With `expect` operations
/// announced and `done` appended so far (fewer), the table is sized for `expect`
/// operations at the rate so far (plus 1/16), so that a large graph of even operations is
/// not left with a table doubled past its size; never more than doubled (an early
/// operation with many operands does not size the table for a million like it), and never
/// grown by less than 1/8, so that growth stays amortized O(1). Otherwise as
/// `Vec::reserve`.
fn make_room<T>(v: &mut Vec<T>, add: usize, done: usize, expect: usize) {
    if v.capacity() - v.len() >= add {
        return;
    }
    let need = v.len().saturating_add(add);
    if done == 0 || done >= expect {
        v.reserve(add);
        return;
    }
    let estimate = need as u128 * expect as u128 / (done as u128 + 1);
    let estimate = usize::try_from(estimate + estimate / 16).unwrap_or(usize::MAX);
    let cap = v.capacity();
    let floor = cap.saturating_add(cap / 8).saturating_add(16);
    let new_cap = estimate.min(cap.saturating_mul(2)).max(floor).max(need);
    v.reserve_exact(new_cap - v.len());
}

/// Placeholder producer word of a parent-value operand in the builder's runs.
const PARENT_OPERAND: u32 = u32::MAX;

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
            input_values: Vec::new(),
            input_keys: Vec::new(),
            ops: Vec::new(),
            roles: Vec::new(),
            op_inputs: Vec::new(),
            op_outputs: Vec::new(),
            outputs: Vec::new(),
            parents: Vec::new(),
            overflow: None,
            expect_ops: 0,
            runs: Vec::new(),
            run_at: Vec::new(),
            runs_complete: true,
            scratch: StableHasher::encoder(),
        }
    }

    /// An empty builder with room for `ops` operations and `values` values. The per-operation
    /// tables (operands, outputs, walk table) start with room for a small operation each and,
    /// when that is not enough, are sized for `ops` operations at the rate seen so far rather
    /// than doubled.
    pub fn with_capacity(ops: usize, values: usize) -> Self {
        let mut b = Self::new();
        b.expect_ops = ops;
        b.ops.reserve_exact(ops);
        b.op_inputs.reserve_exact(ops);
        b.op_outputs.reserve_exact(ops.min(values));
        b.run_at.reserve_exact(ops);
        b.runs.reserve_exact(ops.saturating_mul(12));
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
        self.set_input(v, key);
        v
    }

    /// Makes the declared value `value` the next graph input, with key `key`.
    pub fn set_input(&mut self, value: ValueId, key: u64) {
        self.input_values.push(value);
        self.input_keys.push(key);
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
        let (done, expect) = (self.ops.len(), self.expect_ops);
        make_room(&mut self.ops, 1, done, expect);
        make_room(&mut self.op_inputs, inputs.len(), done, expect);
        make_room(&mut self.op_outputs, outputs.len(), done, expect);
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
        self.record(&payload, &role, i0, inputs, outputs.len());
        let role = if matches!(role, Role::Primary) {
            PRIMARY_ROLE
        } else {
            // At most one per operation: fits whenever the operation ids do.
            let k = u32::try_from(self.roles.len()).unwrap_or(PRIMARY_ROLE);
            self.roles.push(role);
            k
        };
        self.ops.push(OpNode {
            payload,
            role,
            inputs: range(i0, self.op_inputs.len()),
            outputs: range(o0, self.op_outputs.len()),
        });
        id
    }

    /// Appends the operation's run to the packed walk table: the numbering-independent parts
    /// of its fingerprint record (role tag, output and operand counts, active mask and
    /// payload bytes; see `docs/fingerprint.md`) and its operands as value ids, resolved to
    /// producers by `build`. `i0` is the operation's first index in `op_inputs`.
    fn record(&mut self, payload: &Op, role: &Role, i0: usize, inputs: &[ValueRef], n_out: usize) {
        if !self.runs_complete {
            return;
        }
        self.scratch.reset();
        if let Role::Linearized { active } = role {
            for &a in active {
                self.scratch.write_bool(a);
            }
        }
        payload.stable_hash(&mut self.scratch);
        let tail = self.scratch.bytes();
        let o = self.runs.len();
        let len = Walk::HEAD + Walk::OPERAND * inputs.len() + tail.len().div_ceil(4);
        let (done, expect) = (self.run_at.len(), self.expect_ops);
        make_room(&mut self.runs, len, done, expect);
        make_room(&mut self.run_at, 1, done, expect);
        let (Ok(at), Ok(_), Ok(n_out), Ok(n_in), Ok(tail_len), Ok(i0)) = (
            u32::try_from(o),
            u32::try_from(o + len + Walk::PAD),
            u32::try_from(n_out),
            u32::try_from(inputs.len()),
            u32::try_from(tail.len()),
            u32::try_from(i0 + inputs.len()).map(|_| i0 as u32),
        ) else {
            self.runs_complete = false;
            self.runs = Vec::new();
            self.run_at = Vec::new();
            return;
        };
        self.run_at.push(at);
        self.runs.extend_from_slice(&[
            1 | (u32::from(crate::canon::role_tag(role)) << 8),
            n_out,
            n_in,
            tail_len,
        ]);
        for (k, r) in inputs.iter().enumerate() {
            self.runs.extend_from_slice(&match *r {
                ValueRef::Local(v) => [v.0, 0, 0],
                ValueRef::Parent { .. } => [PARENT_OPERAND, i0 + k as u32, 0],
            });
        }
        let chunks = tail.chunks_exact(4);
        let rest = chunks.remainder();
        self.runs
            .extend(chunks.map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
        if !rest.is_empty() {
            // The last, partial word: its bytes, then zeros.
            let w = rest.iter().rev().fold(0, |w, &b| (w << 8) | u32::from(b));
            self.runs.push(w);
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
            if node.role != PRIMARY_ROLE
                && let Some(Role::Linearized { active }) = self.roles.get(node.role as usize)
                && active.len() != inputs.len()
            {
                return Err(GraphError::MaskArity {
                    op,
                    inputs: inputs.len(),
                    mask: active.len(),
                });
            }
        }

        // Every value's key, 8 bytes each, in one table ([`Key::UNSET`] until set).
        let mut keys: Vec<Key> = vec![Key::UNSET; n_values];
        for (pos, &value) in self.input_values.iter().enumerate() {
            match keys.get_mut(value.index()) {
                None => return Err(GraphError::DanglingInputDecl { value }),
                Some(k) if *k != Key::UNSET => return Err(GraphError::DuplicateInput { value }),
                // Positions fit: each names a distinct value, and value ids are `u32`s.
                Some(k) => {
                    *k = Key {
                        op: Key::INPUT,
                        slot: pos as u32,
                    }
                }
            }
        }
        for (i, node) in self.ops.iter().enumerate() {
            let op = OpId(i as u32);
            let outs = &self.op_outputs[node.outputs.0 as usize..node.outputs.1 as usize];
            for (slot, &value) in outs.iter().enumerate() {
                match keys.get_mut(value.index()) {
                    None => return Err(GraphError::DanglingOpOutput { op, value }),
                    Some(k) if *k == Key::UNSET => {
                        *k = Key {
                            op: op.0,
                            slot: slot as u32,
                        };
                    }
                    Some(k) => match k.producer() {
                        None => return Err(GraphError::InputProduced { value, op }),
                        Some((first, _)) => {
                            return Err(GraphError::ProducedTwice {
                                value,
                                first,
                                second: op,
                            });
                        }
                    },
                }
            }
        }
        if let Some(i) = keys.iter().position(|&k| k == Key::UNSET) {
            return Err(GraphError::Unproduced {
                value: ValueId(i as u32),
            });
        }
        for &value in &self.outputs {
            if value.index() >= n_values {
                return Err(GraphError::DanglingOutput { value });
            }
        }

        // The tables the graph keeps, without spare room (a large graph's tables were sized
        // by estimate).
        self.ops.shrink_to_fit();
        self.roles.shrink_to_fit();
        self.op_inputs.shrink_to_fit();
        self.op_outputs.shrink_to_fit();
        self.input_values.shrink_to_fit();
        self.input_keys.shrink_to_fit();
        let runs = if self.runs_complete {
            Some(std::mem::take(&mut self.runs))
        } else {
            None
        };
        let walk = walk_tables(
            self.ops.len(),
            &keys,
            std::mem::take(&mut self.run_at),
            runs,
        );
        let mut g = Graph {
            keys,
            input_keys: self.input_keys,
            roles: self.roles,
            walk,
            ops: self.ops,
            op_inputs: self.op_inputs,
            op_outputs: self.op_outputs,
            inputs: self.input_values,
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

/// The packed walk table of a validated graph (layout in [`Walk`]) from the builder's runs:
/// each local operand's value id becomes its producer, slot and producer's run. Not packed
/// (empty) when the graph is too large for it or the runs are incomplete (`runs` is `None`).
fn walk_tables(n_ops: usize, keys: &[Key], mut run_at: Vec<u32>, runs: Option<Vec<u32>>) -> Walk {
    // Operation ids and the two operand markers stay below the walk's two state markers,
    // and so do the canonical value indices the walk stores per finished operation.
    let limit = u64::from(u32::MAX - 3);
    let fits = (n_ops as u64) < limit && (keys.len() as u64) < limit && run_at.len() == n_ops;
    let Some(mut words) = runs.filter(|_| fits) else {
        return Walk::default();
    };
    let (input, parent) = (Walk::input(n_ops), Walk::parent(n_ops));
    for &o in &run_at {
        let o = o as usize;
        let start = o + Walk::HEAD;
        let end = start + Walk::OPERAND * words[o + 2] as usize;
        for t in words[start..end].chunks_exact_mut(Walk::OPERAND) {
            let triple = match t[0] {
                PARENT_OPERAND => [parent, t[1], 0],
                v => {
                    let k = keys[v as usize];
                    match k.producer() {
                        None => [input, k.slot, 0],
                        Some((op, slot)) => [op.0, slot, run_at[op.index()]],
                    }
                }
            };
            t.copy_from_slice(&triple);
        }
    }
    // The spare words, without doubling a table sized to fit.
    words.reserve_exact(Walk::PAD);
    words.resize(words.len() + Walk::PAD, 0);
    words.shrink_to_fit();
    run_at.shrink_to_fit();
    Walk {
        words,
        run_at,
        packed: true,
    }
}
