//! Foreign graphs: `GraphView`, through which an engine's own graph type gets fingerprinted.
//!
//! It gets canonical fingerprints, per-value hashes and exact structural equality without
//! building a `Graph`.
//!
//! An engine implements [`GraphView`] on its graph type (inputs, nodes with operands and
//! results, outputs, parents, per-node payload hashing and equality) and wraps a finished
//! graph in a [`CanonicalGraph`], which walks it once: it validates the references, computes
//! the canonical numbering ([`Canonical`]) and the fingerprint. Nothing is copied: the
//! wrapper owns the engine's graph and a few `u32`s per node.
//!
//! The fingerprint is graph-core's version-1 encoding (`docs/fingerprint.md`, "Graph
//! views") with each input key written by [`GraphView::hash_input`]: a view whose inputs
//! write a `u64` key has exactly the fingerprint of the equal [`Graph`](crate::Graph).

use std::collections::HashSet;
use std::sync::OnceLock;

use crate::canon::{FINGERPRINT_DOMAIN, FINGERPRINT_VERSION, role_tag};
use crate::error::GraphError;
use crate::graph::Role;
use crate::hash::{Fingerprint, StableHasher};

/// A value of a graph view, named the way the engine names it: a graph input by position,
/// or a result slot of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeValue {
    /// The graph input at this position.
    Input(u32),
    /// Result `slot` of node `node` (nodes are numbered `0..num_nodes()`).
    Result {
        /// The producing node.
        node: u32,
        /// The result slot (0-based).
        slot: u32,
    },
}

/// An operand of a node: a value of the same graph or of one of its parents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operand {
    /// A value of this graph.
    Local(NodeValue),
    /// A value of parent `parent` ([`GraphView::parent`]), named in the parent; it must be
    /// live there.
    Parent {
        /// The parent's index.
        parent: u32,
        /// The value, named in the parent.
        value: NodeValue,
    },
}

/// Read access to an engine's own graph representation: what graph-core needs to number it
/// canonically, fingerprint it, hash its values and compare it exactly.
///
/// Nodes are numbered `0..num_nodes()` in any order (the numbering does not reach the
/// fingerprint); each has operands, a number of results, a payload and a [`Role`]. The
/// payload's bytes ([`hash_payload`](Self::hash_payload)) and each input's key bytes
/// ([`hash_input`](Self::hash_input)) follow the [`StableHash`](crate::StableHash) rules:
/// stable, self-delimiting, and equal for equal payloads; `payload_eq` / `input_eq` must be
/// the exact equalities those bytes stand for.
///
/// ```
/// use graph_core::{CanonicalGraph, GraphView, NodeValue, Operand, StableHasher};
///
/// /// An engine's graph: nodes hold a name and their operands, one result each.
/// struct Tape {
///     inputs: Vec<&'static str>,
///     nodes: Vec<(&'static str, Vec<Operand>)>,
///     outputs: Vec<NodeValue>,
/// }
///
/// impl GraphView for Tape {
///     fn num_inputs(&self) -> usize { self.inputs.len() }
///     fn hash_input(&self, i: u32, h: &mut StableHasher) { h.write_str(self.inputs[i as usize]) }
///     fn input_eq(&self, i: u32, other: &Self, j: u32) -> bool {
///         self.inputs[i as usize] == other.inputs[j as usize]
///     }
///     fn num_nodes(&self) -> usize { self.nodes.len() }
///     fn num_operands(&self, n: u32) -> usize { self.nodes[n as usize].1.len() }
///     fn operand(&self, n: u32, i: usize) -> Operand { self.nodes[n as usize].1[i] }
///     fn num_results(&self, _: u32) -> u32 { 1 }
///     fn hash_payload(&self, n: u32, h: &mut StableHasher) { h.write_str(self.nodes[n as usize].0) }
///     fn payload_eq(&self, n: u32, other: &Self, m: u32) -> bool {
///         self.nodes[n as usize].0 == other.nodes[m as usize].0
///     }
///     fn num_outputs(&self) -> usize { self.outputs.len() }
///     fn output(&self, i: usize) -> NodeValue { self.outputs[i] }
/// }
///
/// let x = Operand::Local(NodeValue::Input(0));
/// let sin = |n| Operand::Local(NodeValue::Result { node: n, slot: 0 });
/// // sin(x) then exp, recorded in two different node orders.
/// let a = Tape { inputs: vec!["x"], nodes: vec![("sin", vec![x]), ("exp", vec![sin(0)])],
///                outputs: vec![NodeValue::Result { node: 1, slot: 0 }] };
/// let b = Tape { inputs: vec!["x"], nodes: vec![("exp", vec![sin(1)]), ("sin", vec![x])],
///                outputs: vec![NodeValue::Result { node: 0, slot: 0 }] };
/// let (a, b) = (CanonicalGraph::new(a)?, CanonicalGraph::new(b)?);
/// assert_eq!(a.fingerprint(), b.fingerprint());
/// assert!(a.structurally_eq(&b));
/// # Ok::<(), graph_core::GraphError>(())
/// ```
pub trait GraphView: Sized {
    /// Number of graph inputs.
    fn num_inputs(&self) -> usize;
    /// Writes the key of input `position` (stable, self-delimiting bytes).
    fn hash_input(&self, position: u32, h: &mut StableHasher);
    /// Whether input `position` here has the same key as input `other_position` of `other`.
    fn input_eq(&self, position: u32, other: &Self, other_position: u32) -> bool;
    /// Number of nodes (live or dead).
    fn num_nodes(&self) -> usize;
    /// Number of operands of `node`.
    fn num_operands(&self, node: u32) -> usize;
    /// Operand `i` of `node` (`i < num_operands(node)`).
    fn operand(&self, node: u32, i: usize) -> Operand;
    /// Number of results (output slots) of `node`.
    fn num_results(&self, node: u32) -> u32;
    /// The role of `node`; [`Role::Primary`] unless overridden. A `Linearized` mask must
    /// have one entry per operand.
    fn role(&self, node: u32) -> &Role {
        let _ = node;
        &PRIMARY
    }
    /// Writes the payload of `node` (stable, self-delimiting bytes).
    fn hash_payload(&self, node: u32, h: &mut StableHasher);
    /// Whether the payload of `node` equals the payload of `other_node` in `other`.
    fn payload_eq(&self, node: u32, other: &Self, other_node: u32) -> bool;
    /// Number of graph outputs.
    fn num_outputs(&self) -> usize;
    /// Graph output `i` (a value may be an output more than once).
    fn output(&self, i: usize) -> NodeValue;
    /// Parent graph `parent`, whose values [`Operand::Parent`] reads; `None` when there is
    /// no such parent (the default: no parents).
    fn parent(&self, parent: u32) -> Option<&CanonicalGraph<Self>> {
        let _ = parent;
        None
    }
}

static PRIMARY: Role = Role::Primary;

const WHITE: u8 = 0;
const GRAY: u8 = 1;
const BLACK: u8 = 2;
const OPERAND_PARENT: u64 = 1 << 32;
const TAG_INPUT: u8 = 0;
const TAG_OP: u8 = 1;
const TAG_SLOT: u8 = 2;

/// The canonical numbering of a graph view (see `docs/fingerprint.md`): live nodes in
/// canonical order, each value's canonical index, and the fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    n_inputs: u32,
    order: Vec<u32>,
    /// Canonical index of result slot 0 of each node, `u32::MAX` for dead nodes.
    base: Vec<u32>,
    fingerprint: Fingerprint,
}

impl Canonical {
    /// The fingerprint (version-1 encoding).
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// Live nodes (some output depends on them) in canonical order.
    pub fn order(&self) -> &[u32] {
        &self.order
    }

    /// True when some graph output depends on `node`.
    pub fn is_live(&self, node: u32) -> bool {
        self.base.get(node as usize).is_some_and(|&b| b != u32::MAX)
    }

    /// The canonical index of `value`: inputs by position, then the results of the live
    /// nodes in canonical order. `None` for inputs past the end and results of dead or
    /// unknown nodes (the slot is not checked against the node's result count).
    pub fn index(&self, value: NodeValue) -> Option<u32> {
        match value {
            NodeValue::Input(i) => (i < self.n_inputs).then_some(i),
            NodeValue::Result { node, slot } => match self.base.get(node as usize) {
                Some(&b) if b != u32::MAX => b.checked_add(slot),
                _ => None,
            },
        }
    }

    /// Heap bytes this numbering owns.
    pub fn heap_bytes(&self) -> usize {
        (self.order.capacity() + self.base.capacity()).saturating_mul(4)
    }
}

/// Checks that `value` names a value of `g` (input in range, node and slot in range).
fn value_exists<G: GraphView>(g: &G, value: NodeValue) -> bool {
    match value {
        NodeValue::Input(i) => (i as usize) < g.num_inputs(),
        NodeValue::Result { node, slot } => {
            (node as usize) < g.num_nodes() && slot < g.num_results(node)
        }
    }
}

/// The local producer of operand `i` of `node`, if it is a node's result.
#[inline]
fn local_producer<G: GraphView>(g: &G, node: u32, i: usize) -> Option<u32> {
    match g.operand(node, i) {
        Operand::Local(NodeValue::Result { node, .. }) => Some(node),
        _ => None,
    }
}

/// Iterative depth-first post-order from `root` over local producers, calling `post` on
/// each finished node. A gray producer is a cycle.
fn dfs<G: GraphView>(
    g: &G,
    root: u32,
    state: &mut [u8],
    stack: &mut Vec<(u32, usize)>,
    mut post: impl FnMut(u32),
) -> Result<(), GraphError> {
    stack.clear();
    state[root as usize] = GRAY;
    let (mut node, mut next) = (root, 0usize);
    'walk: loop {
        let n = g.num_operands(node);
        while next < n {
            let i = next;
            next += 1;
            if let Some(q) = local_producer(g, node, i) {
                match state[q as usize] {
                    WHITE => {
                        stack.push((node, next));
                        state[q as usize] = GRAY;
                        (node, next) = (q, 0);
                        continue 'walk;
                    }
                    GRAY => return Err(GraphError::ViewCycle { node: q }),
                    _ => {}
                }
            }
        }
        state[node as usize] = BLACK;
        post(node);
        match stack.pop() {
            Some(f) => (node, next) = f,
            None => return Ok(()),
        }
    }
}

/// Validates every reference of `g`: operands, parents, masks and outputs.
fn validate<G: GraphView>(g: &G) -> Result<(), GraphError> {
    let n_nodes = g.num_nodes();
    let too_many = |what| GraphError::TooMany { what };
    let n_nodes32 = u32::try_from(n_nodes).map_err(|_| too_many("nodes"))?;
    u32::try_from(g.num_inputs()).map_err(|_| too_many("values"))?;
    let mut n_values = g.num_inputs() as u64;
    for node in 0..n_nodes32 {
        n_values += u64::from(g.num_results(node));
        let n_ops = g.num_operands(node);
        for i in 0..n_ops {
            let operand = i as u32;
            match g.operand(node, i) {
                Operand::Local(v) => {
                    if !value_exists(g, v) {
                        return Err(GraphError::ViewOperand { node, operand });
                    }
                }
                Operand::Parent { parent, value } => {
                    let live = g
                        .parent(parent)
                        .is_some_and(|p| value_exists(&p.graph, value) && p.index(value).is_some());
                    if !live {
                        return Err(GraphError::ViewParentValue { node, operand });
                    }
                }
            }
        }
        if let Role::Linearized { active } = g.role(node)
            && active.len() != n_ops
        {
            return Err(GraphError::ViewMaskArity {
                node,
                operands: n_ops,
                mask: active.len(),
            });
        }
    }
    if n_values >= u64::from(u32::MAX) {
        return Err(too_many("values"));
    }
    for position in 0..g.num_outputs() {
        if !value_exists(g, g.output(position)) {
            return Err(GraphError::ViewOutput { position });
        }
    }
    Ok(())
}

impl Canonical {
    /// Validates `graph` and computes its canonical numbering and fingerprint: one
    /// iterative walk, linear in nodes and operands.
    ///
    /// # Errors
    /// [`GraphError::TooMany`] past `u32` ids; [`GraphError::ViewOperand`],
    /// [`GraphError::ViewParentValue`], [`GraphError::ViewMaskArity`] and
    /// [`GraphError::ViewOutput`] for references to values that do not exist (or parent
    /// values that are not live); [`GraphError::ViewCycle`] when nodes form a cycle.
    pub fn of<G: GraphView>(graph: &G) -> Result<Canonical, GraphError> {
        validate(graph)?;
        let g = graph;
        let n_nodes = g.num_nodes();
        let n_inputs = g.num_inputs() as u32;
        let mut state = vec![WHITE; n_nodes];
        let mut base = vec![u32::MAX; n_nodes];
        let mut order = Vec::new();
        let mut stack = Vec::new();

        let mut h = StableHasher::with_domain(FINGERPRINT_DOMAIN, FINGERPRINT_VERSION);
        h.write_len(g.num_inputs());
        for i in 0..n_inputs {
            g.hash_input(i, &mut h);
        }
        let mut next = n_inputs;
        for o in 0..g.num_outputs() {
            if let NodeValue::Result { node: root, .. } = g.output(o)
                && state[root as usize] == WHITE
            {
                dfs(g, root, &mut state, &mut stack, |node| {
                    base[node as usize] = next;
                    next += g.num_results(node);
                    order.push(node);
                })?;
            }
        }
        for node in 0..n_nodes as u32 {
            if state[node as usize] == WHITE {
                dfs(g, node, &mut state, &mut stack, |_| {})?;
            }
        }
        let mut canon = Canonical {
            n_inputs,
            order,
            base,
            fingerprint: Fingerprint(0),
        };
        for &node in &canon.order {
            let role = g.role(node);
            let n_ops = g.num_operands(node);
            h.write_u64(
                1 | (u64::from(role_tag(role)) << 8) | (u64::from(g.num_results(node)) << 32),
            );
            h.write_len(n_ops);
            for i in 0..n_ops {
                match g.operand(node, i) {
                    Operand::Local(v) => h.write_u64(u64::from(canon.index(v).unwrap_or(0))),
                    Operand::Parent { parent, value } => {
                        let (fp, idx) = parent_value(g, parent, value);
                        h.write_u64(u64::from(idx) | OPERAND_PARENT);
                        h.write_fingerprint(fp);
                    }
                }
            }
            if let Role::Linearized { active } = role {
                for &a in active {
                    h.write_bool(a);
                }
            }
            g.hash_payload(node, &mut h);
        }
        h.write_u64(2);
        h.write_len(canon.order.len());
        h.write_len(g.num_outputs());
        for o in 0..g.num_outputs() {
            h.write_u32(canon.index(g.output(o)).unwrap_or(0));
        }
        canon.fingerprint = h.finish();
        Ok(canon)
    }
}

/// The fingerprint of parent `parent` and the canonical index of `value` there (validated
/// beforehand; zeros otherwise).
fn parent_value<G: GraphView>(g: &G, parent: u32, value: NodeValue) -> (Fingerprint, u32) {
    g.parent(parent).map_or((Fingerprint(0), 0), |p| {
        (p.fingerprint(), p.index(value).unwrap_or(0))
    })
}

/// Per-value structural hashes of a graph view (the Merkle hashes of
/// `docs/fingerprint.md`, "Per-value structural hashes"), over every value, dead ones too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueHashes {
    inputs: Vec<Fingerprint>,
    nodes: Vec<Fingerprint>,
    /// `results[first[n] + slot]` is result `slot` of node `n`.
    first: Vec<u32>,
    results: Vec<Fingerprint>,
}

impl ValueHashes {
    /// The hash of `value`; `None` when it does not exist.
    pub fn value(&self, value: NodeValue) -> Option<Fingerprint> {
        match value {
            NodeValue::Input(i) => self.inputs.get(i as usize).copied(),
            NodeValue::Result { node, slot } => {
                let n = node as usize;
                let (start, end) = (*self.first.get(n)?, *self.first.get(n + 1)?);
                let at = start.checked_add(slot).filter(|&i| i < end)?;
                self.results.get(at as usize).copied()
            }
        }
    }

    /// The hash of `node` (its payload, role, operands and result count).
    pub fn node(&self, node: u32) -> Option<Fingerprint> {
        self.nodes.get(node as usize).copied()
    }

    /// The input hashes by position, then every node's result hashes by node and slot.
    pub fn all_values(&self) -> impl Iterator<Item = Fingerprint> + '_ {
        self.inputs.iter().chain(&self.results).copied()
    }

    /// Heap bytes these hashes own.
    pub fn heap_bytes(&self) -> usize {
        (self.inputs.capacity() + self.nodes.capacity() + self.results.capacity())
            .saturating_mul(16)
            .saturating_add(self.first.capacity().saturating_mul(4))
    }

    fn compute<G: GraphView>(g: &G) -> Result<ValueHashes, GraphError> {
        let n_nodes = g.num_nodes();
        let mut h = StableHasher::new();
        let mut inputs = Vec::with_capacity(g.num_inputs());
        for i in 0..g.num_inputs() as u32 {
            h.reset();
            h.write_tag(TAG_INPUT);
            h.write_u64(u64::from(i));
            g.hash_input(i, &mut h);
            inputs.push(h.finish());
        }
        let mut first = Vec::with_capacity(n_nodes + 1);
        let mut total = 0u32;
        for node in 0..n_nodes as u32 {
            first.push(total);
            total = total.saturating_add(g.num_results(node));
        }
        first.push(total);
        let mut nodes = vec![Fingerprint(0); n_nodes];
        let mut results = vec![Fingerprint(0); total as usize];
        let mut state = vec![WHITE; n_nodes];
        let mut stack = Vec::new();
        for root in 0..n_nodes as u32 {
            if state[root as usize] != WHITE {
                continue;
            }
            dfs(g, root, &mut state, &mut stack, |node| {
                h.reset();
                h.write_tag(TAG_OP);
                g.hash_payload(node, &mut h);
                crate::StableHash::stable_hash(g.role(node), &mut h);
                let n_ops = g.num_operands(node);
                h.write_len(n_ops);
                for i in 0..n_ops {
                    match g.operand(node, i) {
                        Operand::Local(NodeValue::Input(p)) => {
                            h.write_tag(0);
                            h.write_fingerprint(inputs[p as usize]);
                        }
                        Operand::Local(NodeValue::Result { node: q, slot }) => {
                            h.write_tag(0);
                            h.write_fingerprint(results[(first[q as usize] + slot) as usize]);
                        }
                        Operand::Parent { parent, value } => {
                            let (fp, idx) = parent_value(g, parent, value);
                            h.write_tag(1);
                            h.write_fingerprint(fp);
                            h.write_u32(idx);
                        }
                    }
                }
                let n_res = g.num_results(node);
                h.write_len(n_res as usize);
                let op_hash = h.finish();
                nodes[node as usize] = op_hash;
                for slot in 0..n_res {
                    h.reset();
                    h.write_tag(TAG_SLOT);
                    h.write_fingerprint(op_hash);
                    h.write_u64(u64::from(slot));
                    results[(first[node as usize] + slot) as usize] = h.finish();
                }
            })?;
        }
        Ok(ValueHashes {
            inputs,
            nodes,
            first,
            results,
        })
    }
}

/// An engine's graph with its canonical numbering and fingerprint: what a
/// [`Graph`](crate::Graph) is to graph-core's own graphs, for any [`GraphView`], without copying it.
///
/// Built once ([`new`](Self::new) validates and walks the graph); the fingerprint is then
/// O(1), per-value hashes are computed on first use, and
/// [`structurally_eq`](Self::structurally_eq) compares two graphs exactly in one linear
/// pass. Parents are `Arc<CanonicalGraph<G>>`s the engine's graph holds and returns from
/// [`GraphView::parent`].
#[derive(Debug)]
pub struct CanonicalGraph<G> {
    graph: G,
    canon: Canonical,
    hashes: OnceLock<ValueHashes>,
}

impl<G: GraphView> CanonicalGraph<G> {
    /// Validates `graph` and numbers it canonically ([`Canonical::of`]).
    ///
    /// # Errors
    /// As [`Canonical::of`].
    pub fn new(graph: G) -> Result<Self, GraphError> {
        let canon = Canonical::of(&graph)?;
        Ok(CanonicalGraph {
            graph,
            canon,
            hashes: OnceLock::new(),
        })
    }

    /// The per-value structural hashes, computed on first use (linear time) and kept.
    pub fn value_hashes(&self) -> &ValueHashes {
        self.hashes.get_or_init(|| {
            // The graph was validated (acyclic) by `new`, so this cannot fail; an empty
            // table is the answer for an impossible error.
            ValueHashes::compute(&self.graph).unwrap_or(ValueHashes {
                inputs: Vec::new(),
                nodes: Vec::new(),
                first: Vec::new(),
                results: Vec::new(),
            })
        })
    }

    /// Exact structural equality up to renumbering (as [`structural_eq`](crate::structural_eq)
    /// for [`Graph`](crate::Graph)s): same input keys in order, same live nodes in canonical
    /// order with equal payloads, roles, result counts and operands, same outputs, and
    /// structurally equal parents wherever parent values are read. Fingerprints are
    /// compared first; pointer-equal parents are not walked; iterative over parent chains.
    pub fn structurally_eq(&self, other: &Self) -> bool {
        let mut pending: Vec<(&CanonicalGraph<G>, &CanonicalGraph<G>)> = vec![(self, other)];
        let mut seen: HashSet<(usize, usize)> = HashSet::new();
        while let Some((a, b)) = pending.pop() {
            if !eq_one(a, b, &mut pending, &mut seen) {
                return false;
            }
        }
        true
    }
}

impl<G> CanonicalGraph<G> {
    /// The engine's graph.
    pub fn graph(&self) -> &G {
        &self.graph
    }

    /// The engine's graph, giving up the numbering.
    pub fn into_inner(self) -> G {
        self.graph
    }

    /// The canonical numbering.
    pub fn canonical(&self) -> &Canonical {
        &self.canon
    }

    /// The fingerprint, computed by [`new`](Self::new) (O(1)).
    #[inline]
    pub fn fingerprint(&self) -> Fingerprint {
        self.canon.fingerprint
    }

    /// The canonical index of `value` ([`Canonical::index`]).
    pub fn index(&self, value: NodeValue) -> Option<u32> {
        self.canon.index(value)
    }

    /// Heap bytes of the numbering and of the value hashes (once computed), not counting
    /// the engine's graph.
    pub fn canonical_heap_bytes(&self) -> usize {
        self.canon
            .heap_bytes()
            .saturating_add(self.hashes.get().map_or(0, ValueHashes::heap_bytes))
    }
}

fn eq_one<'a, G: GraphView>(
    a: &'a CanonicalGraph<G>,
    b: &'a CanonicalGraph<G>,
    pending: &mut Vec<(&'a CanonicalGraph<G>, &'a CanonicalGraph<G>)>,
    seen: &mut HashSet<(usize, usize)>,
) -> bool {
    if a.fingerprint() != b.fingerprint() {
        return false;
    }
    if std::ptr::eq(a, b) {
        return true;
    }
    let (ga, gb) = (&a.graph, &b.graph);
    let (ca, cb) = (&a.canon, &b.canon);
    if ga.num_inputs() != gb.num_inputs()
        || ca.order.len() != cb.order.len()
        || ga.num_outputs() != gb.num_outputs()
    {
        return false;
    }
    if !(0..ga.num_inputs() as u32).all(|i| ga.input_eq(i, gb, i)) {
        return false;
    }
    for (&na, &nb) in ca.order.iter().zip(&cb.order) {
        let n_ops = ga.num_operands(na);
        if n_ops != gb.num_operands(nb)
            || ga.num_results(na) != gb.num_results(nb)
            || ga.role(na) != gb.role(nb)
            || !ga.payload_eq(na, gb, nb)
        {
            return false;
        }
        for i in 0..n_ops {
            match (ga.operand(na, i), gb.operand(nb, i)) {
                (Operand::Local(x), Operand::Local(y)) => {
                    if ca.index(x) != cb.index(y) {
                        return false;
                    }
                }
                (
                    Operand::Parent {
                        parent: pa,
                        value: xa,
                    },
                    Operand::Parent {
                        parent: pb,
                        value: xb,
                    },
                ) => {
                    let (Some(qa), Some(qb)) = (ga.parent(pa), gb.parent(pb)) else {
                        return false;
                    };
                    if qa.index(xa) != qb.index(xb) {
                        return false;
                    }
                    if !std::ptr::eq(qa, qb) {
                        let key = (
                            std::ptr::from_ref(qa) as usize,
                            std::ptr::from_ref(qb) as usize,
                        );
                        if seen.insert(key) {
                            pending.push((qa, qb));
                        }
                    }
                }
                _ => return false,
            }
        }
    }
    (0..ga.num_outputs()).all(|o| ca.index(ga.output(o)) == cb.index(gb.output(o)))
}
