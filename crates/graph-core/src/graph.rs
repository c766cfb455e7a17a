//! `Graph<Op>`: arena storage of values and operations.
//!
//! Also the value/operation vocabulary (`ValueKey`, `Role`, `ValueRef`) and read accessors.

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::hash::{Fingerprint, StableHash, StableHasher};
use crate::ids::{OpId, ParentId, ValueId};

/// What identifies a value: the key of a graph input, or the producing operation and output slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueKey {
    /// A graph input with a caller-chosen key (e.g. a parameter id). Input keys are part of
    /// the fingerprint: use stable keys (positions, parameter ids), never addresses.
    Input(u64),
    /// Output number `slot` of operation `op`.
    Output {
        /// The producing operation.
        op: OpId,
        /// The output slot (0-based).
        slot: u32,
    },
}

impl ValueKey {
    /// The producing operation and slot, or `None` for a graph input.
    pub fn producer(self) -> Option<(OpId, u32)> {
        match self {
            ValueKey::Input(_) => None,
            ValueKey::Output { op, slot } => Some((op, slot)),
        }
    }
}

/// The role an operation plays in a derived program (extensible).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Role {
    /// An operation of the original (primal) program.
    #[default]
    Primary,
    /// The linearization (JVP) of an operation; `active[i]` tells whether input `i` carries
    /// a tangent. Has one entry per input.
    Linearized {
        /// One flag per input.
        active: Vec<bool>,
    },
    /// The transpose (VJP) of a linear operation.
    Transposed,
}

impl StableHash for Role {
    fn stable_hash(&self, h: &mut StableHasher) {
        match self {
            Role::Primary => h.write_tag(0),
            Role::Linearized { active } => {
                h.write_tag(1);
                active.stable_hash(h);
            }
            Role::Transposed => h.write_tag(2),
        }
    }
}

/// An operation input: a value of this graph or a value of one of its parent graphs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueRef {
    /// A value of this graph.
    Local(ValueId),
    /// Value `value` of parent graph `parent`. The parent value must be live there (a parent
    /// input, or computed by an operation that a parent output depends on).
    Parent {
        /// The parent graph.
        parent: ParentId,
        /// The value, numbered in the parent's arena.
        value: ValueId,
    },
}

impl From<ValueId> for ValueRef {
    fn from(v: ValueId) -> Self {
        ValueRef::Local(v)
    }
}

/// The role every operation has unless told otherwise.
pub(crate) static PRIMARY: Role = Role::Primary;

/// [`OpNode::role`] of a [`Role::Primary`] operation (the others index `Graph::roles`).
pub(crate) const PRIMARY_ROLE: u32 = u32::MAX;

/// One operation in the arena.
#[derive(Debug, Clone)]
pub(crate) struct OpNode<Op> {
    pub(crate) payload: Op,
    /// [`PRIMARY_ROLE`], or the index of the operation's role in `Graph::roles` (only
    /// operations of another role pay for a [`Role`]).
    pub(crate) role: u32,
    /// Range into `Graph::op_inputs`.
    pub(crate) inputs: (u32, u32),
    /// Range into `Graph::op_outputs`.
    pub(crate) outputs: (u32, u32),
}

/// The key of a value in 8 bytes: output `slot` of operation `op`, or, with `op` equal to
/// [`Key::INPUT`], the graph input at position `slot` (whose [`ValueKey::Input`] key is
/// `Graph::input_keys[slot]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) op: u32,
    pub(crate) slot: u32,
}

impl Key {
    /// The `op` of a graph input (never an operation id: ids stop below `u32::MAX`).
    pub(crate) const INPUT: u32 = u32::MAX;
    /// A value with neither producer nor input declaration yet (while building).
    pub(crate) const UNSET: Key = Key {
        op: u32::MAX,
        slot: u32::MAX,
    };

    /// The producing operation and slot, or `None` for a graph input.
    #[inline]
    pub(crate) fn producer(self) -> Option<(OpId, u32)> {
        (self.op != Key::INPUT).then_some((OpId(self.op), self.slot))
    }
}

/// Canonical numbering, computed once at build.
#[derive(Debug, Clone, Default)]
pub(crate) struct Canon {
    /// Live operations in canonical order.
    pub(crate) ops: Vec<OpId>,
    /// Canonical index of each value (arena order), `u32::MAX` for dead values.
    pub(crate) value_index: Vec<u32>,
}

/// The compact tables the canonical walk and the fingerprint read, built once at build (see
/// `canon.rs` for how they are read). Everything one operation needs, the walk's operand
/// producers and the fingerprint record's parts, lies in one run of `words`, so the walk
/// touches each operation's data once, in a few contiguous arrays.
///
/// `words` holds one run per operation, in arena order: `[head_lo, n_outputs, n_operands,
/// tail_len]` (`head_lo` is the low half of the record header: tag and role tag), then per
/// operand a triple `[producer, slot, run]`: the producing operation, its output slot and
/// where the producer's run starts (so that the walk steps from an operand to its
/// producer's run with one load), or [`Walk::input`], the input's position and 0 for a
/// graph input, or [`Walk::parent`], the operand's index in `Graph::op_inputs` and 0 for a
/// parent value; then the record's `tail_len` bytes after the operands (the active mask,
/// then the payload's `StableHash` bytes), little-endian in whole words, the last one
/// zero-padded. `words` ends with [`Walk::PAD`] spare words, so that tails can be read in
/// 16-byte chunks. `run_at` holds where each operation's run starts, from which a graph
/// output's triple is made (see `Graph::output_triple`).
///
/// `packed` is false when the graph is too large for these `u32` tables (offsets or the
/// kept bytes past 4 Gi, or ids that could collide with the walk's markers): the tables
/// are empty and the walks read the operation nodes instead.
#[derive(Debug, Clone, Default)]
pub(crate) struct Walk {
    pub(crate) words: Vec<u32>,
    /// Where each operation's run starts in `words` (for the graph outputs' producers).
    pub(crate) run_at: Vec<u32>,
    pub(crate) packed: bool,
}

impl Walk {
    /// Words before the operand triples in each operation's run.
    pub(crate) const HEAD: usize = 4;
    /// Words per operand.
    pub(crate) const OPERAND: usize = 3;
    /// Spare words at the end of `words` (16 bytes: one chunk of a tail copy).
    pub(crate) const PAD: usize = 4;

    /// The producer word of a graph-input operand (one past the last operation).
    pub(crate) fn input(n_ops: usize) -> u32 {
        n_ops as u32
    }

    /// The producer word of a parent-value operand (two past the last operation).
    pub(crate) fn parent(n_ops: usize) -> u32 {
        n_ops as u32 + 1
    }

    fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.words
            .capacity()
            .saturating_add(self.run_at.capacity())
            .saturating_mul(size_of::<u32>())
    }
}

/// Per-value and per-operation structural hashes, computed on first use.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub(crate) values: Vec<Fingerprint>,
    pub(crate) ops: Vec<Fingerprint>,
}

/// A validated computation graph of values and operations with payload type `Op`.
///
/// Built with [`GraphBuilder`](crate::GraphBuilder). Values and operations live in arenas
/// indexed by [`ValueId`] and [`OpId`]; the graph has ordered inputs and outputs and may read
/// values of parent graphs shared through `Arc`.
///
/// The [`fingerprint`](Graph::fingerprint) is computed once at build time from the canonical
/// encoding in `docs/fingerprint.md` and then returned in O(1). It identifies the graph as a
/// function: the ordered inputs (with their keys), every operation that some output depends
/// on, the ordered outputs, and the parents those operations read (through the parents'
/// fingerprints). Operations that no output depends on (dead code) do not contribute, so
/// `g.prune_to(g.outputs())` has the same fingerprint as `g`.
pub struct Graph<Op> {
    /// Each value's key (inputs by position, see [`Key`]).
    pub(crate) keys: Vec<Key>,
    /// The key of each graph input, by position (parallel to `inputs`).
    pub(crate) input_keys: Vec<u64>,
    /// The roles of the operations that are not [`Role::Primary`] (see [`OpNode::role`]).
    pub(crate) roles: Vec<Role>,
    /// The compact walk tables, with the parts of each operation's fingerprint record that
    /// do not depend on numbering (encoded when the operation was appended; see [`Walk`]).
    pub(crate) walk: Walk,
    pub(crate) ops: Vec<OpNode<Op>>,
    pub(crate) op_inputs: Vec<ValueRef>,
    pub(crate) op_outputs: Vec<ValueId>,
    pub(crate) inputs: Vec<ValueId>,
    pub(crate) outputs: Vec<ValueId>,
    pub(crate) parents: Vec<Arc<Graph<Op>>>,
    pub(crate) canon: Canon,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) identity: OnceLock<Identity>,
}

impl<Op: Clone> Clone for Graph<Op> {
    fn clone(&self) -> Self {
        Graph {
            keys: self.keys.clone(),
            input_keys: self.input_keys.clone(),
            roles: self.roles.clone(),
            walk: self.walk.clone(),
            ops: self.ops.clone(),
            op_inputs: self.op_inputs.clone(),
            op_outputs: self.op_outputs.clone(),
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
            parents: self.parents.clone(),
            canon: self.canon.clone(),
            fingerprint: self.fingerprint,
            identity: self.identity.clone(),
        }
    }
}

impl<Op> fmt::Debug for Graph<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("fingerprint", &self.fingerprint)
            .field("values", &self.keys.len())
            .field("ops", &self.ops.len())
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("parents", &self.parents.len())
            .finish()
    }
}

/// Drops chains of parent graphs iteratively, so a graph with a very deep ancestry (each
/// graph the only owner of its parent) does not overflow the stack when dropped.
impl<Op> Drop for Graph<Op> {
    fn drop(&mut self) {
        if self.parents.is_empty() {
            return;
        }
        let mut stack = std::mem::take(&mut self.parents);
        while let Some(parent) = stack.pop() {
            if let Some(mut g) = Arc::into_inner(parent) {
                stack.append(&mut g.parents);
                // `g` drops here with no parents left: no recursion.
            }
        }
    }
}

/// A read-only view of one operation of a graph.
#[derive(Debug)]
pub struct OpView<'g, Op> {
    graph: &'g Graph<Op>,
    id: OpId,
    node: &'g OpNode<Op>,
}

impl<Op> Clone for OpView<'_, Op> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Op> Copy for OpView<'_, Op> {}

impl<'g, Op> OpView<'g, Op> {
    /// The operation's id.
    pub fn id(&self) -> OpId {
        self.id
    }

    /// The operation payload.
    pub fn payload(&self) -> &'g Op {
        &self.node.payload
    }

    /// The operation's role.
    pub fn role(&self) -> &'g Role {
        self.graph.role_of(self.node)
    }

    /// The operation's inputs, in order.
    pub fn inputs(&self) -> &'g [ValueRef] {
        let (s, e) = self.node.inputs;
        &self.graph.op_inputs[s as usize..e as usize]
    }

    /// The values the operation produces, by output slot.
    pub fn outputs(&self) -> &'g [ValueId] {
        let (s, e) = self.node.outputs;
        &self.graph.op_outputs[s as usize..e as usize]
    }

    /// True when some graph output depends on this operation.
    pub fn is_live(&self) -> bool {
        self.graph.is_live_op(self.id)
    }
}

impl<Op> Graph<Op> {
    /// Number of values (inputs and operation outputs, live or dead).
    pub fn num_values(&self) -> usize {
        self.keys.len()
    }

    /// Number of operations (live or dead).
    pub fn num_ops(&self) -> usize {
        self.ops.len()
    }

    /// All value ids, in arena order.
    pub fn value_ids(&self) -> impl ExactSizeIterator<Item = ValueId> + '_ {
        (0..self.keys.len() as u32).map(ValueId)
    }

    /// All operation ids, in arena order.
    pub fn op_ids(&self) -> impl ExactSizeIterator<Item = OpId> + '_ {
        (0..self.ops.len() as u32).map(OpId)
    }

    /// All operations, in arena order.
    pub fn ops(&self) -> impl ExactSizeIterator<Item = OpView<'_, Op>> + '_ {
        self.ops.iter().enumerate().map(move |(i, node)| OpView {
            graph: self,
            id: OpId(i as u32),
            node,
        })
    }

    /// The operation `id`, or `None` when it does not exist.
    pub fn op(&self, id: OpId) -> Option<OpView<'_, Op>> {
        self.ops.get(id.index()).map(|node| OpView {
            graph: self,
            id,
            node,
        })
    }

    /// The payload of operation `id`.
    pub fn payload(&self, id: OpId) -> Option<&Op> {
        self.ops.get(id.index()).map(|n| &n.payload)
    }

    /// The key of value `id` (its input key, or its producer and slot).
    pub fn value_key(&self, id: ValueId) -> Option<ValueKey> {
        self.keys.get(id.index()).map(|&k| self.key_of(k))
    }

    /// The producing operation and output slot of value `id`; `None` for inputs and
    /// unknown ids.
    pub fn producer(&self, id: ValueId) -> Option<(OpId, u32)> {
        self.value_key(id).and_then(ValueKey::producer)
    }

    /// The graph inputs, in order.
    pub fn inputs(&self) -> &[ValueId] {
        &self.inputs
    }

    /// The graph outputs, in order (a value may appear more than once).
    pub fn outputs(&self) -> &[ValueId] {
        &self.outputs
    }

    /// The parent graphs, indexed by [`ParentId`].
    pub fn parents(&self) -> &[Arc<Graph<Op>>] {
        &self.parents
    }

    /// Parent graph `id`.
    pub fn parent(&self, id: ParentId) -> Option<&Arc<Graph<Op>>> {
        self.parents.get(id.index())
    }

    /// Heap bytes owned by this graph's own arenas, walk tables and caches (capacity ×
    /// element size of each, plus linearized masks), not counting heap memory owned by the
    /// payloads themselves or by parent graphs (which are shared). For memory accounting,
    /// e.g. a cache's retained-byte limit; grows once when
    /// [`value_hashes`](Graph::value_hashes) are first computed.
    pub fn arena_heap_bytes(&self) -> usize {
        use std::mem::size_of;
        fn vec_bytes<T>(v: &Vec<T>) -> usize {
            v.capacity().saturating_mul(size_of::<T>())
        }
        let masks: usize = self
            .roles
            .iter()
            .map(|r| match r {
                Role::Linearized { active } => active.capacity(),
                _ => 0,
            })
            .sum();
        let identity = self
            .identity
            .get()
            .map_or(0, |i| vec_bytes(&i.values) + vec_bytes(&i.ops));
        [
            vec_bytes(&self.keys),
            vec_bytes(&self.input_keys),
            vec_bytes(&self.roles),
            self.walk.heap_bytes(),
            vec_bytes(&self.ops),
            vec_bytes(&self.op_inputs),
            vec_bytes(&self.op_outputs),
            vec_bytes(&self.inputs),
            vec_bytes(&self.outputs),
            vec_bytes(&self.parents),
            vec_bytes(&self.canon.ops),
            vec_bytes(&self.canon.value_index),
            masks,
            identity,
        ]
        .iter()
        .fold(0usize, |a, b| a.saturating_add(*b))
    }

    /// The graph's fingerprint, computed at build time (O(1)).
    #[inline]
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// Live operations (those some output depends on) in canonical order: a topological
    /// order, the post-order of a depth-first walk from the outputs in order, each
    /// operation's inputs visited in order. This is the order the fingerprint hashes.
    pub fn canonical_ops(&self) -> &[OpId] {
        &self.canon.ops
    }

    /// The canonical index of value `id`: inputs are `0..inputs().len()` by position, then
    /// the outputs of [`canonical_ops`](Self::canonical_ops) by operation and slot. `None`
    /// for dead values and unknown ids.
    pub fn canonical_index(&self, id: ValueId) -> Option<u32> {
        self.canon
            .value_index
            .get(id.index())
            .copied()
            .filter(|&i| i != u32::MAX)
    }

    /// True when some graph output depends on operation `id` (an operation without outputs
    /// is never live).
    pub fn is_live_op(&self, id: OpId) -> bool {
        self.op_outputs_of(id)
            .first()
            .is_some_and(|&v| self.canon.value_index[v.index()] != u32::MAX)
    }

    pub(crate) fn op_outputs_of(&self, id: OpId) -> &[ValueId] {
        match self.ops.get(id.index()) {
            Some(n) => &self.op_outputs[n.outputs.0 as usize..n.outputs.1 as usize],
            None => &[],
        }
    }

    /// The role of `node`, an operation of this graph.
    #[inline]
    pub(crate) fn role_of(&self, node: &OpNode<Op>) -> &Role {
        if node.role == PRIMARY_ROLE {
            &PRIMARY
        } else {
            self.roles.get(node.role as usize).unwrap_or(&PRIMARY)
        }
    }

    /// The public form of a value's key.
    #[inline]
    pub(crate) fn key_of(&self, k: Key) -> ValueKey {
        match k.producer() {
            Some((op, slot)) => ValueKey::Output { op, slot },
            None => ValueKey::Input(self.input_keys.get(k.slot as usize).copied().unwrap_or(0)),
        }
    }

    /// The key of value `v`, which must be a value of this graph.
    #[inline]
    pub(crate) fn key(&self, v: ValueId) -> ValueKey {
        self.key_of(self.keys[v.index()])
    }

    pub(crate) fn op_inputs_of(&self, node: &OpNode<Op>) -> &[ValueRef] {
        &self.op_inputs[node.inputs.0 as usize..node.inputs.1 as usize]
    }
}
