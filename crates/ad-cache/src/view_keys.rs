//! Keys over any graph type: `KeyGraph` (graph-core graphs and engine graphs wrapped in `CanonicalGraph`), `EagerKey`, and `EngineTracedKey` with engine-defined input, output and alias entries.
//!
//! An engine with its own graph representation implements graph-core's
//! [`GraphView`] and wraps its finished graphs in a [`CanonicalGraph`]: the graphs then have
//! graph-core's renumbering-invariant fingerprints and exact structural equality, and these
//! keys hold them as `Arc<CanonicalGraph<EngineGraph>>` (graph-core [`Graph`]s work too).
//! As for the graph-core keys, a hit means the key's graphs are structurally equal, so a
//! cached value must name key-graph values canonically ([`CanonicalGraph::index`]).

use std::sync::Arc;

use graph_core::{
    CanonicalGraph, Fingerprint, Graph, GraphView, StableHash, StableHasher, UnorderedFingerprint,
    structural_eq,
};

use crate::bytes::{HeapMeter, RetainedBytes};
use crate::cache::CacheKey;
use crate::keys::{KEY_VERSION, KeyError, TransformKind};

/// A graph a key can hold: an O(1) fingerprint and an exact structural equality that agrees
/// with it (equal graphs have equal fingerprints).
///
/// Implemented for graph-core [`Graph`]s and for engine graphs wrapped in a
/// [`CanonicalGraph`].
pub trait KeyGraph: Send + Sync + 'static {
    /// The graph's fingerprint (cached by the graph; O(1)).
    fn key_fingerprint(&self) -> Fingerprint;
    /// Exact structural equality up to renumbering.
    fn same_structure(&self, other: &Self) -> bool;
    /// Number of graph outputs (for checking output slots).
    fn output_count(&self) -> usize;
}

impl<Op: PartialEq + Send + Sync + 'static> KeyGraph for Graph<Op> {
    fn key_fingerprint(&self) -> Fingerprint {
        self.fingerprint()
    }
    fn same_structure(&self, other: &Self) -> bool {
        structural_eq(self, other)
    }
    fn output_count(&self) -> usize {
        self.outputs().len()
    }
}

impl<G: GraphView + Send + Sync + 'static> KeyGraph for CanonicalGraph<G> {
    fn key_fingerprint(&self) -> Fingerprint {
        self.fingerprint()
    }
    fn same_structure(&self, other: &Self) -> bool {
        self.structurally_eq(other)
    }
    fn output_count(&self) -> usize {
        self.graph().num_outputs()
    }
}

/// An engine graph keeps alive its own heap ([`RetainedBytes`] of the engine's type) and the
/// canonical numbering (and value hashes, once computed) graph-core keeps next to it.
impl<G: RetainedBytes> RetainedBytes for CanonicalGraph<G> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        self.graph().visit_heap(meter);
        meter.add(u64::try_from(self.canonical_heap_bytes()).unwrap_or(u64::MAX));
    }
}

fn same_arc<G: KeyGraph>(a: &Arc<G>, b: &Arc<G>) -> bool {
    Arc::ptr_eq(a, b) || a.same_structure(b)
}

/// Domain tag of [`EagerKey`] fingerprints.
pub const EAGER_KEY_DOMAIN: &str = "tracegraph.ad-cache.eager-key";
/// Domain tag of [`EngineTracedKey`] fingerprints.
pub const ENGINE_TRACED_KEY_DOMAIN: &str = "tracegraph.ad-cache.engine-traced-key";

/// The key of an eager transform of a recorded graph of any [`KeyGraph`] type: the graph
/// and the output slots (positions among its outputs) the transform is for.
///
/// Fingerprint: `StableHasher::with_domain(EAGER_KEY_DOMAIN, KEY_VERSION)`, the graph's
/// fingerprint, the slot count and each slot as `u32`. Equality: slots `==`, then the graphs
/// by pointer, else [`KeyGraph::same_structure`] (outside the cache's lock).
pub struct EagerKey<G> {
    graph: Arc<G>,
    outputs: Box<[u32]>,
    fingerprint: Fingerprint,
}

impl<G: KeyGraph> EagerKey<G> {
    /// The key for output slots `outputs` of `graph`.
    ///
    /// # Errors
    /// [`KeyError::OutputSlot`] for a slot past the graph's outputs.
    pub fn new(graph: Arc<G>, outputs: &[u32]) -> Result<Self, KeyError> {
        let n = graph.output_count();
        if let Some(&slot) = outputs.iter().find(|&&s| s as usize >= n) {
            return Err(KeyError::OutputSlot { slot, outputs: n });
        }
        let mut h = StableHasher::with_domain(EAGER_KEY_DOMAIN, KEY_VERSION);
        h.write_fingerprint(graph.key_fingerprint());
        h.write_len(outputs.len());
        for &s in outputs {
            h.write_u32(s);
        }
        Ok(EagerKey {
            fingerprint: h.finish(),
            graph,
            outputs: outputs.into(),
        })
    }
}

impl<G> EagerKey<G> {
    /// The same key claiming `fingerprint` instead of its own (see
    /// [`GraphKey::with_fingerprint`](crate::GraphKey::with_fingerprint): a wrong one only
    /// causes misses, never a wrong hit).
    #[must_use]
    pub fn with_fingerprint(mut self, fingerprint: Fingerprint) -> Self {
        self.fingerprint = fingerprint;
        self
    }

    /// The recorded graph.
    pub fn graph(&self) -> &Arc<G> {
        &self.graph
    }

    /// The output slots.
    pub fn outputs(&self) -> &[u32] {
        &self.outputs
    }
}

impl<G> Clone for EagerKey<G> {
    fn clone(&self) -> Self {
        EagerKey {
            graph: Arc::clone(&self.graph),
            outputs: self.outputs.clone(),
            fingerprint: self.fingerprint,
        }
    }
}

impl<G> std::fmt::Debug for EagerKey<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EagerKey")
            .field("fingerprint", &self.fingerprint)
            .field("outputs", &self.outputs)
            .finish()
    }
}

impl<G: KeyGraph> CacheKey for EagerKey<G> {
    fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
    fn same_key(&self, other: &Self) -> bool {
        self.outputs == other.outputs && same_arc(&self.graph, &other.graph)
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
impl<G: RetainedBytes> RetainedBytes for EagerKey<G> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        self.outputs.visit_heap(meter);
        meter.owned_arc(&self.graph);
    }
}

/// What a key entry of an engine's own type must offer: stable bytes for the fingerprint,
/// exact equality, and sharing across threads. Implemented for every such type.
pub trait EngineKeyPart: StableHash + PartialEq + Clone + Send + Sync + 'static {}
impl<T: StableHash + PartialEq + Clone + Send + Sync + 'static> EngineKeyPart for T {}

/// The named parts of a traced derivative request with engine-defined entries, from which
/// [`EngineTracedKey::new`] builds its key.
///
/// * `I`: the engine's key of a differentiation input (`wrt`);
/// * `O`: the engine's key of the output value: name it independently of node numbering,
///   e.g. a root index and the value's [`CanonicalGraph::index`];
/// * `A`: one entry of the alias map (say, an input and the input or value whose storage it
///   shares); the map is given in any order.
#[derive(Debug, Clone)]
pub struct EngineTracedParts<G, I, O, A> {
    /// Which derivative.
    pub kind: TransformKind,
    /// The root graphs (their order matters).
    pub roots: Vec<Arc<G>>,
    /// The output value.
    pub output: O,
    /// The input differentiated with respect to.
    pub wrt: I,
    /// The alias map's entries, in any order; duplicates are ignored.
    pub aliases: Vec<A>,
}

/// The key of a traced derivative request whose differentiation input, output and alias
/// entries are an engine's own key types, hashed with [`StableHash`] and compared exactly
/// (`==`), over root graphs of any [`KeyGraph`] type.
///
/// Fingerprint: `StableHasher::with_domain(ENGINE_TRACED_KEY_DOMAIN, KEY_VERSION)`, the kind
/// tag, the root count and each root's fingerprint, the output's bytes, `wrt`'s bytes, then
/// the [`UnorderedFingerprint`] of the alias entries (the same entries in any order give the
/// same key). The entries are kept sorted by their own fingerprints, so that two keys with
/// the same entries compare equal entry by entry (were two different entries' 128-bit hashes
/// to collide, equal maps could compare unequal: a miss, never a wrong hit).
pub struct EngineTracedKey<G, I, O, A> {
    kind: TransformKind,
    roots: Box<[Arc<G>]>,
    output: O,
    wrt: I,
    aliases: Box<[A]>,
    fingerprint: Fingerprint,
}

impl<G: KeyGraph, I: EngineKeyPart, O: EngineKeyPart, A: EngineKeyPart>
    EngineTracedKey<G, I, O, A>
{
    /// The key of the request `parts`.
    ///
    /// # Errors
    /// [`KeyError::NoSuchRoot`] when there are no roots (root 0 is missing).
    pub fn new(parts: EngineTracedParts<G, I, O, A>) -> Result<Self, KeyError> {
        let EngineTracedParts {
            kind,
            roots,
            output,
            wrt,
            aliases,
        } = parts;
        if roots.is_empty() {
            return Err(KeyError::NoSuchRoot { root: 0, roots: 0 });
        }
        let mut entries: Vec<(Fingerprint, A)> = aliases
            .into_iter()
            .map(|a| (Fingerprint::of(&a), a))
            .collect();
        entries.sort_by_key(|(fp, _)| *fp);
        entries.dedup_by(|x, y| x.0 == y.0 && x.1 == y.1);
        let mut alias_fp = UnorderedFingerprint::new();
        for (fp, _) in &entries {
            alias_fp.add_fingerprint(*fp);
        }
        let mut h = StableHasher::with_domain(ENGINE_TRACED_KEY_DOMAIN, KEY_VERSION);
        kind.stable_hash(&mut h);
        h.write_len(roots.len());
        for r in &roots {
            h.write_fingerprint(r.key_fingerprint());
        }
        output.stable_hash(&mut h);
        wrt.stable_hash(&mut h);
        h.write_fingerprint(alias_fp.finish());
        Ok(EngineTracedKey {
            kind,
            roots: roots.into_boxed_slice(),
            output,
            wrt,
            aliases: entries.into_iter().map(|(_, a)| a).collect(),
            fingerprint: h.finish(),
        })
    }
}

impl<G, I, O, A> EngineTracedKey<G, I, O, A> {
    /// The same key claiming `fingerprint` instead of its own (see
    /// [`GraphKey::with_fingerprint`](crate::GraphKey::with_fingerprint): a wrong one only
    /// causes misses, never a wrong hit).
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
    pub fn roots(&self) -> &[Arc<G>] {
        &self.roots
    }

    /// The output value's key.
    pub fn output(&self) -> &O {
        &self.output
    }

    /// The differentiation input's key.
    pub fn wrt(&self) -> &I {
        &self.wrt
    }

    /// The alias entries, without duplicates, in the key's canonical order.
    pub fn aliases(&self) -> &[A] {
        &self.aliases
    }
}

impl<G, I: Clone, O: Clone, A: Clone> Clone for EngineTracedKey<G, I, O, A> {
    fn clone(&self) -> Self {
        EngineTracedKey {
            kind: self.kind,
            roots: self.roots.clone(),
            output: self.output.clone(),
            wrt: self.wrt.clone(),
            aliases: self.aliases.clone(),
            fingerprint: self.fingerprint,
        }
    }
}

impl<G, I: std::fmt::Debug, O: std::fmt::Debug, A: std::fmt::Debug> std::fmt::Debug
    for EngineTracedKey<G, I, O, A>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineTracedKey")
            .field("fingerprint", &self.fingerprint)
            .field("kind", &self.kind)
            .field("roots", &self.roots.len())
            .field("output", &self.output)
            .field("wrt", &self.wrt)
            .field("aliases", &self.aliases)
            .finish()
    }
}

impl<G: KeyGraph, I: EngineKeyPart, O: EngineKeyPart, A: EngineKeyPart> CacheKey
    for EngineTracedKey<G, I, O, A>
{
    fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
    fn same_key(&self, other: &Self) -> bool {
        self.fields_eq(other)
            && self
                .roots
                .iter()
                .zip(other.roots.iter())
                .all(|(a, b)| same_arc(a, b))
    }
    fn quick_eq(&self, other: &Self) -> Option<bool> {
        if !self.fields_eq(other) {
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

impl<G, I: PartialEq, O: PartialEq, A: PartialEq> EngineTracedKey<G, I, O, A> {
    /// Everything but the roots' structure.
    fn fields_eq(&self, other: &Self) -> bool {
        self.kind == other.kind
            && self.roots.len() == other.roots.len()
            && self.output == other.output
            && self.wrt == other.wrt
            && self.aliases == other.aliases
    }
}

/// The key owns its root graphs ([`HeapMeter::owned_arc`]), their list, its entries and the
/// alias map.
impl<G: RetainedBytes, I: RetainedBytes, O: RetainedBytes, A: RetainedBytes> RetainedBytes
    for EngineTracedKey<G, I, O, A>
{
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        meter.add((self.roots.len() as u64).saturating_mul(std::mem::size_of::<Arc<G>>() as u64));
        for r in &self.roots {
            meter.owned_arc(r);
        }
        self.output.visit_heap(meter);
        self.wrt.visit_heap(meter);
        self.aliases.visit_heap(meter);
    }
}
