//! AD transform keys (eager linearize, traced JVP/VJP, plain graph) and cached transform values.
//!
//! Every key holds the graphs it was built from (shared through `Arc`) next to its
//! fingerprint, so the cache confirms a fingerprint match exactly: pointer equality first,
//! graph-core's [`structural_eq`] otherwise. Key fingerprints use their own domain tags (see
//! each constructor) and graph-core's stable encoding, never `std`'s hashers.
//!
//! What a hit means: the key's graphs are *structurally* equal to the ones the value was
//! built for ([`structural_eq`]: same inputs, live operations and outputs up to
//! renumbering). So a cached value must not depend on what equality ignores: arena ids
//! ([`ValueId`], `OpId`) of the key's graphs — name values of a key graph by
//! [`Graph::canonical_index`] instead, as the reference engine `vecad` reads parent values —
//! and operations no output depends on (dead code), which neither the fingerprint
//! nor the comparison sees.

use std::sync::Arc;

use graph_core::{
    Fingerprint, Graph, StableHash, StableHasher, UnorderedFingerprint, ValueId, structural_eq,
};

use crate::bytes::{HeapMeter, RetainedBytes};
use crate::cache::CacheKey;

/// Why a key could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// An output slot past the graph's outputs.
    #[error("output slot {slot} does not exist (the graph has {outputs} outputs)")]
    OutputSlot {
        /// The slot asked for.
        slot: u32,
        /// How many outputs the graph has.
        outputs: usize,
    },
    /// A root index past the roots given.
    #[error("root {root} does not exist ({roots} roots)")]
    NoSuchRoot {
        /// The root asked for.
        root: u32,
        /// How many roots there are.
        roots: usize,
    },
    /// The output value is not live in its root (no output depends on it) or does not exist.
    #[error("value {value} of root {root} is not live there")]
    DeadOutput {
        /// The root graph.
        root: u32,
        /// The value.
        value: ValueId,
    },
}

/// Pointer equality, else structural equality.
fn same_graph<Op: PartialEq>(a: &Arc<Graph<Op>>, b: &Arc<Graph<Op>>) -> bool {
    Arc::ptr_eq(a, b) || structural_eq(a, b)
}

/// Domain tag of [`GraphKey`] fingerprints.
pub const GRAPH_KEY_DOMAIN: &str = "tracegraph.ad-cache.graph-key";
/// Domain tag of [`LinearizeKey`] fingerprints.
pub const LINEARIZE_KEY_DOMAIN: &str = "tracegraph.ad-cache.linearize-key";
/// Domain tag of [`TracedKey`] fingerprints.
pub const TRACED_KEY_DOMAIN: &str = "tracegraph.ad-cache.traced-key";
/// Version of the key encodings.
pub const KEY_VERSION: u32 = 1;

/// A key that is one graph: for memoizing anything derived from a whole graph (an analysis,
/// a plan). Its fingerprint is the graph's own (O(1)).
pub struct GraphKey<Op> {
    graph: Arc<Graph<Op>>,
    fingerprint: Fingerprint,
}

impl<Op> GraphKey<Op> {
    /// The key of `graph`.
    pub fn new(graph: Arc<Graph<Op>>) -> Self {
        let fingerprint = graph.fingerprint();
        GraphKey { graph, fingerprint }
    }

    /// The same key claiming `fingerprint` instead of its own, for fingerprints computed
    /// elsewhere (read back from a trace, say) or forced in tests. Every key type has this
    /// method with this meaning. A wrong fingerprint cannot make the cache return another
    /// key's value (hits are confirmed by exact equality); it only causes misses.
    #[must_use]
    pub fn with_fingerprint(mut self, fingerprint: Fingerprint) -> Self {
        self.fingerprint = fingerprint;
        self
    }

    /// The graph.
    pub fn graph(&self) -> &Arc<Graph<Op>> {
        &self.graph
    }
}

impl<Op> Clone for GraphKey<Op> {
    fn clone(&self) -> Self {
        GraphKey {
            graph: Arc::clone(&self.graph),
            fingerprint: self.fingerprint,
        }
    }
}

impl<Op> std::fmt::Debug for GraphKey<Op> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphKey")
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

impl<Op: PartialEq + Send + Sync + 'static> CacheKey for GraphKey<Op> {
    fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
    fn same_key(&self, other: &Self) -> bool {
        same_graph(&self.graph, &other.graph)
    }
    fn quick_eq(&self, other: &Self) -> Option<bool> {
        Arc::ptr_eq(&self.graph, &other.graph).then_some(true)
    }
}

/// The key owns its graph ([`HeapMeter::owned_arc`]): charged in full, once.
impl<Op: RetainedBytes> RetainedBytes for GraphKey<Op> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        meter.owned_arc(&self.graph);
    }
}

/// The key of an eager linearization: the recorded graph and the output slots (positions in
/// [`Graph::outputs`]) whose tangents are asked for.
///
/// Fingerprint: `StableHasher::with_domain(LINEARIZE_KEY_DOMAIN, KEY_VERSION)`, then the
/// graph's fingerprint, then the slot count and each slot as `u32`.
pub struct LinearizeKey<Op> {
    graph: Arc<Graph<Op>>,
    outputs: Box<[u32]>,
    fingerprint: Fingerprint,
}

impl<Op> LinearizeKey<Op> {
    /// The key for linearizing `graph` at output slots `outputs`.
    ///
    /// # Errors
    /// [`KeyError::OutputSlot`] for a slot past the graph's outputs.
    pub fn new(graph: Arc<Graph<Op>>, outputs: &[u32]) -> Result<Self, KeyError> {
        let n = graph.outputs().len();
        if let Some(&slot) = outputs.iter().find(|&&s| s as usize >= n) {
            return Err(KeyError::OutputSlot { slot, outputs: n });
        }
        Ok(LinearizeKey {
            fingerprint: linearize_fingerprint(graph.fingerprint(), outputs),
            graph,
            outputs: outputs.into(),
        })
    }

    /// The key for all of `graph`'s outputs.
    pub fn all_outputs(graph: Arc<Graph<Op>>) -> Self {
        let n = u32::try_from(graph.outputs().len()).unwrap_or(u32::MAX);
        let slots: Vec<u32> = (0..n).collect();
        LinearizeKey {
            fingerprint: linearize_fingerprint(graph.fingerprint(), &slots),
            graph,
            outputs: slots.into_boxed_slice(),
        }
    }

    /// The same key claiming `fingerprint` instead of its own (see
    /// [`GraphKey::with_fingerprint`]: a wrong one only causes misses, never a wrong hit).
    #[must_use]
    pub fn with_fingerprint(mut self, fingerprint: Fingerprint) -> Self {
        self.fingerprint = fingerprint;
        self
    }

    /// The recorded graph.
    pub fn graph(&self) -> &Arc<Graph<Op>> {
        &self.graph
    }

    /// The output slots asked for.
    pub fn outputs(&self) -> &[u32] {
        &self.outputs
    }
}

impl<Op> Clone for LinearizeKey<Op> {
    fn clone(&self) -> Self {
        LinearizeKey {
            graph: Arc::clone(&self.graph),
            outputs: self.outputs.clone(),
            fingerprint: self.fingerprint,
        }
    }
}

impl<Op> std::fmt::Debug for LinearizeKey<Op> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinearizeKey")
            .field("fingerprint", &self.fingerprint)
            .field("outputs", &self.outputs)
            .finish()
    }
}

impl<Op: PartialEq + Send + Sync + 'static> CacheKey for LinearizeKey<Op> {
    fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
    fn same_key(&self, other: &Self) -> bool {
        self.outputs == other.outputs && same_graph(&self.graph, &other.graph)
    }
    fn quick_eq(&self, other: &Self) -> Option<bool> {
        if self.outputs != other.outputs {
            Some(false)
        } else if Arc::ptr_eq(&self.graph, &other.graph) {
            Some(true)
        } else {
            None
        }
    }
}

/// The key owns its recorded graph ([`HeapMeter::owned_arc`]) and its slot list.
impl<Op: RetainedBytes> RetainedBytes for LinearizeKey<Op> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        self.outputs.visit_heap(meter);
        meter.owned_arc(&self.graph);
    }
}

fn linearize_fingerprint(graph: Fingerprint, outputs: &[u32]) -> Fingerprint {
    let mut h = StableHasher::with_domain(LINEARIZE_KEY_DOMAIN, KEY_VERSION);
    h.write_fingerprint(graph);
    h.write_len(outputs.len());
    for &s in outputs {
        h.write_u32(s);
    }
    h.finish()
}

/// Which derivative a traced key asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransformKind {
    /// Forward mode (Jacobian-vector product).
    Jvp,
    /// Reverse mode (vector-Jacobian product).
    Vjp,
}

impl StableHash for TransformKind {
    fn stable_hash(&self, h: &mut StableHasher) {
        h.write_tag(match self {
            TransformKind::Jvp => 0,
            TransformKind::Vjp => 1,
        });
    }
}

/// The named parts of a traced derivative request, from which [`TracedKey::new`] builds its
/// key.
///
/// ```
/// use std::sync::Arc;
/// use ad_cache::{TracedKey, TracedKeyParts, TransformKind};
/// use graph_core::{GraphBuilder, Role};
///
/// let mut b = GraphBuilder::<u32>::new();
/// let x = b.add_input(7);
/// let (_, y) = b.add_op1(1, &[x.into()], Role::Primary);
/// b.set_outputs(&[y]);
/// let g = Arc::new(b.build()?);
///
/// let key = TracedKey::new(TracedKeyParts {
///     kind: TransformKind::Vjp,
///     roots: vec![Arc::clone(&g)],
///     output_root: 0,
///     output: y,
///     wrt: 7,
///     aliases: vec![],
/// })?;
/// assert_eq!(key.output().root, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TracedKeyParts<Op> {
    /// Which derivative.
    pub kind: TransformKind,
    /// The root graphs (their order matters).
    pub roots: Vec<Arc<Graph<Op>>>,
    /// The root (index into `roots`) the output value lives in.
    pub output_root: u32,
    /// The output value, numbered in that root; it must be live there.
    pub output: ValueId,
    /// The graph-input key differentiated with respect to (the
    /// [`ValueKey::Input`](graph_core::ValueKey::Input) key).
    pub wrt: u64,
    /// The alias map: pairs (input key, the input key whose storage it shares), in any
    /// order; duplicates are ignored.
    pub aliases: Vec<(u64, u64)>,
}

/// The output a traced key names: a root and the value's canonical index there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TracedOutput {
    /// The root (index into [`TracedKey::roots`]).
    pub root: u32,
    /// The value's [`Graph::canonical_index`] in that root (equal for differently numbered,
    /// structurally equal roots).
    pub canonical: u32,
}

/// The key of a traced derivative request: the kind, the root graphs, the output value, the
/// input differentiated with respect to, and the alias map, built from [`TracedKeyParts`].
///
/// * Roots are hashed through their cached fingerprints, each of which already covers the
///   root's parents (graph-core hashes a parent through its own cached fingerprint): parents
///   several roots share are hashed once, when built, and never walked again here.
/// * The output is a value of one root, named by its canonical index there (so two
///   differently numbered but equal graphs give equal keys).
/// * `wrt` is a graph-input key (the [`ValueKey::Input`](graph_core::ValueKey::Input) key).
/// * The alias map (input key → the input key whose storage it shares) enters through an
///   order-independent fingerprint: the same pairs in any order give the same key.
///
/// Fingerprint: `StableHasher::with_domain(TRACED_KEY_DOMAIN, KEY_VERSION)`, the kind tag,
/// the root count and each root's fingerprint, the output's root (`u32`) and canonical
/// index (`u32`), `wrt` (`u64`), and the alias map's [`UnorderedFingerprint`] of `(u64, u64)`
/// pairs.
pub struct TracedKey<Op> {
    kind: TransformKind,
    roots: Box<[Arc<Graph<Op>>]>,
    output: TracedOutput,
    wrt: u64,
    aliases: Box<[(u64, u64)]>,
    fingerprint: Fingerprint,
}

impl<Op> TracedKey<Op> {
    /// The key of the request `parts`.
    ///
    /// # Errors
    /// [`KeyError::NoSuchRoot`] or [`KeyError::DeadOutput`] when the output is not a live
    /// value of an existing root.
    pub fn new(parts: TracedKeyParts<Op>) -> Result<Self, KeyError> {
        let TracedKeyParts {
            kind,
            roots,
            output_root,
            output,
            wrt,
            aliases,
        } = parts;
        let root = roots
            .get(output_root as usize)
            .ok_or(KeyError::NoSuchRoot {
                root: output_root,
                roots: roots.len(),
            })?;
        let canonical = root.canonical_index(output).ok_or(KeyError::DeadOutput {
            root: output_root,
            value: output,
        })?;
        let mut aliases = aliases;
        aliases.sort_unstable();
        aliases.dedup();
        let mut alias_fp = UnorderedFingerprint::new();
        for pair in &aliases {
            alias_fp.add(pair);
        }
        let mut h = StableHasher::with_domain(TRACED_KEY_DOMAIN, KEY_VERSION);
        kind.stable_hash(&mut h);
        h.write_len(roots.len());
        for r in &roots {
            h.write_fingerprint(r.fingerprint());
        }
        h.write_u32(output_root);
        h.write_u32(canonical);
        h.write_u64(wrt);
        h.write_fingerprint(alias_fp.finish());
        Ok(TracedKey {
            kind,
            roots: roots.into_boxed_slice(),
            output: TracedOutput {
                root: output_root,
                canonical,
            },
            wrt,
            aliases: aliases.into_boxed_slice(),
            fingerprint: h.finish(),
        })
    }

    /// The same key claiming `fingerprint` instead of its own (see
    /// [`GraphKey::with_fingerprint`]: a wrong one only causes misses, never a wrong hit).
    #[must_use]
    pub fn with_fingerprint(mut self, fingerprint: Fingerprint) -> Self {
        self.fingerprint = fingerprint;
        self
    }

    /// The derivative asked for.
    pub fn kind(&self) -> TransformKind {
        self.kind
    }

    /// The root graphs.
    pub fn roots(&self) -> &[Arc<Graph<Op>>] {
        &self.roots
    }

    /// The output: its root and its canonical index there.
    pub fn output(&self) -> TracedOutput {
        self.output
    }

    /// The input key differentiated with respect to.
    pub fn wrt(&self) -> u64 {
        self.wrt
    }

    /// The alias map, sorted, without duplicates.
    pub fn aliases(&self) -> &[(u64, u64)] {
        &self.aliases
    }
}

impl<Op> Clone for TracedKey<Op> {
    fn clone(&self) -> Self {
        TracedKey {
            kind: self.kind,
            roots: self.roots.clone(),
            output: self.output,
            wrt: self.wrt,
            aliases: self.aliases.clone(),
            fingerprint: self.fingerprint,
        }
    }
}

impl<Op> std::fmt::Debug for TracedKey<Op> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracedKey")
            .field("fingerprint", &self.fingerprint)
            .field("kind", &self.kind)
            .field("roots", &self.roots.len())
            .field("output", &self.output)
            .field("wrt", &self.wrt)
            .field("aliases", &self.aliases)
            .finish()
    }
}

impl<Op: PartialEq + Send + Sync + 'static> CacheKey for TracedKey<Op> {
    fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
    fn same_key(&self, other: &Self) -> bool {
        self.kind == other.kind
            && self.output == other.output
            && self.wrt == other.wrt
            && self.aliases == other.aliases
            && self.roots.len() == other.roots.len()
            && self
                .roots
                .iter()
                .zip(other.roots.iter())
                .all(|(a, b)| same_graph(a, b))
    }
    fn quick_eq(&self, other: &Self) -> Option<bool> {
        if self.kind != other.kind
            || self.output != other.output
            || self.wrt != other.wrt
            || self.roots.len() != other.roots.len()
            || self.aliases != other.aliases
        {
            Some(false)
        } else if self
            .roots
            .iter()
            .zip(other.roots.iter())
            .all(|(a, b)| Arc::ptr_eq(a, b))
        {
            Some(true)
        } else {
            None
        }
    }
}

/// The key owns its root graphs ([`HeapMeter::owned_arc`]), their list and the alias map;
/// the roots' parents are shared allocations.
impl<Op: RetainedBytes> RetainedBytes for TracedKey<Op> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        meter.add(
            (self.roots.len() as u64).saturating_mul(std::mem::size_of::<Arc<Graph<Op>>>() as u64),
        );
        for r in &self.roots {
            meter.owned_arc(r);
        }
        self.aliases.visit_heap(meter);
    }
}

/// A linearized (JVP) graph: `graph` maps tangents of the primal inputs to tangents of the
/// chosen outputs. `tangent_inputs[i]` is the graph value holding the tangent of primal input
/// `i`; `tangent_outputs[j]` the tangent of the `j`-th output asked for.
#[derive(Debug)]
pub struct LinearizedGraph<Op> {
    /// The linear graph (its parents hold the primal and residual values it reads).
    pub graph: Graph<Op>,
    /// Tangent input values, by primal input position.
    pub tangent_inputs: Vec<ValueId>,
    /// Tangent output values, by requested output.
    pub tangent_outputs: Vec<ValueId>,
}

impl<Op: RetainedBytes> RetainedBytes for LinearizedGraph<Op> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        self.graph.visit_heap(meter);
        meter.add((self.tangent_inputs.capacity() as u64).saturating_mul(4));
        meter.add((self.tangent_outputs.capacity() as u64).saturating_mul(4));
    }
}

/// A VJP transform: the residual graph computes, from the primal values, the coefficients
/// the backward pass needs; the transposed linear graph maps output cotangents (its inputs)
/// to input cotangents (its outputs), reading residuals through its parents.
#[derive(Debug)]
pub struct VjpTransform<Op> {
    /// The residual graph (a parent of `transposed`).
    pub residual: Arc<Graph<Op>>,
    /// The transposed linear graph.
    pub transposed: Graph<Op>,
}

/// The residual graph is reached twice (this field and the transposed graph's parent):
/// charged once, when nothing outside holds it.
impl<Op: RetainedBytes> RetainedBytes for VjpTransform<Op> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        meter.arc(&self.residual);
        self.transposed.visit_heap(meter);
    }
}
