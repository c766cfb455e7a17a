//! Key basics (errors, kinds, domain tags), the plain `GraphKey`, and the cached AD values.
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

use graph_core::{Fingerprint, Graph, StableHash, StableHasher, ValueId, structural_eq};

use crate::bytes::{HeapMeter, RetainedBytes};
use crate::cache::CacheKey;
use crate::explain::{KeyDifference, graph_difference};

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
    /// A value named in the engine's own numbering is not live in its root (no output
    /// depends on it) or does not exist.
    #[error("the value of root {root} asked for is not live there")]
    NotLive {
        /// The root graph.
        root: u32,
    },
    /// A canonical index past the root's values: a key part does not name a value of the
    /// canonical graph (say, a raw engine node id given where a canonical index belongs).
    #[error("root {root} has no value with canonical index {canonical} ({values} values)")]
    NoSuchValue {
        /// The root graph.
        root: u32,
        /// The index given.
        canonical: u32,
        /// How many canonical indices the root has.
        values: u32,
    },
    /// A [`TracedOutput`](crate::TracedOutput) named in another graph than the root it is
    /// used with (one that is not structurally equal to it): its canonical index would name
    /// an unrelated value there.
    #[error("the output value was named in a graph that is not root {root}")]
    ForeignValue {
        /// The root graph.
        root: u32,
    },
}

/// Pointer equality, else structural equality.
fn same_graph<Op: PartialEq>(a: &Arc<Graph<Op>>, b: &Arc<Graph<Op>>) -> bool {
    Arc::ptr_eq(a, b) || structural_eq(a, b)
}

/// Domain tag of [`GraphKey`] fingerprints.
pub const GRAPH_KEY_DOMAIN: &str = "tracegraph.ad-cache.graph-key";
/// Domain tag of [`LinearizeKey`](crate::LinearizeKey) fingerprints.
pub const LINEARIZE_KEY_DOMAIN: &str = "tracegraph.ad-cache.linearize-key";
/// Domain tag of [`TracedKey`](crate::TracedKey) fingerprints.
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

impl<Op: PartialEq + std::fmt::Debug + Send + Sync + 'static> CacheKey for GraphKey<Op> {
    fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
    fn same_key(&self, other: &Self) -> bool {
        same_graph(&self.graph, &other.graph)
    }
    fn quick_eq(&self, other: &Self) -> Option<bool> {
        Arc::ptr_eq(&self.graph, &other.graph).then_some(true)
    }
    fn kind_label(&self) -> &'static str {
        "graph"
    }
    fn difference(&self, other: &Self) -> Option<KeyDifference> {
        graph_difference(&self.graph, &other.graph)
    }
}

/// The key owns its graph ([`HeapMeter::owned_arc`]): charged in full, once.
impl<Op: RetainedBytes> RetainedBytes for GraphKey<Op> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        meter.owned_arc(&self.graph);
    }
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
