//! The AD key family over any `KeyGraph`: `EagerKey`, `EngineTracedKey` and `TransformKey`.
//!
//! `KeyGraph` covers graph-core graphs and engine graphs wrapped in `CanonicalGraph`;
//! traced keys take engine-defined input, output and alias entries ([`EngineKeyPart`]).
//! The graph-core keys [`LinearizeKey`] and [`TracedKey`] (from [`TracedKeyParts`]) are
//! these keys over `Graph<Op>`.
//!
//! An engine with its own graph representation implements graph-core's
//! [`GraphView`] and wraps its finished graphs in a [`CanonicalGraph`]: the graphs then have
//! graph-core's renumbering-invariant fingerprints and exact structural equality, and these
//! keys hold them as `Arc<CanonicalGraph<EngineGraph>>` (graph-core [`Graph`]s work too).
//! As for the graph-core keys, a hit means the key's graphs are structurally equal, so a
//! cached value must name key-graph values canonically ([`CanonicalGraph::index`]).

use std::sync::Arc;

use graph_core::{
    CanonicalGraph, Fingerprint, Graph, GraphView, NodeValue, StableHash, StableHasher,
    UnorderedFingerprint, ValueId, structural_eq,
};

use crate::bytes::{HeapMeter, RetainedBytes};
use crate::cache::CacheKey;
use crate::explain::{KeyDifference, graph_difference, view_difference};
use crate::keys::{KEY_VERSION, KeyError, LINEARIZE_KEY_DOMAIN, TRACED_KEY_DOMAIN, TransformKind};

/// A graph a key can hold: an O(1) fingerprint and an exact structural equality that agrees
/// with it (equal graphs have equal fingerprints), and its canonical value numbering.
///
/// Implemented for graph-core [`Graph`]s and for engine graphs wrapped in a
/// [`CanonicalGraph`].
pub trait KeyGraph: Send + Sync + 'static {
    /// How the graph's own numbering names a value ([`ValueId`] for graph-core graphs,
    /// [`NodeValue`] for engine graphs).
    type Value: Copy;
    /// Domain tag of [`EagerKey`] fingerprints over this graph type.
    const EAGER_DOMAIN: &'static str = EAGER_KEY_DOMAIN;
    /// Domain tag of [`EngineTracedKey`] fingerprints over this graph type.
    const TRACED_DOMAIN: &'static str = ENGINE_TRACED_KEY_DOMAIN;
    /// The graph's fingerprint (cached by the graph; O(1)).
    fn key_fingerprint(&self) -> Fingerprint;
    /// Exact structural equality up to renumbering.
    fn same_structure(&self, other: &Self) -> bool;
    /// Number of graph outputs (for checking output slots).
    fn output_count(&self) -> usize;
    /// The canonical index of a live value (equal for renumbered, structurally equal
    /// graphs), `None` for dead or unknown values.
    fn canonical_index_of(&self, value: Self::Value) -> Option<u32>;
    /// How many canonical indices there are: the inputs, then the results of the live
    /// operations (O(1)).
    fn canonical_count(&self) -> u32;
    /// The first difference from `other` in canonical order, for miss explanations (one
    /// linear walk); `None` when none is found. The default compares the output and value
    /// counts only.
    fn first_difference(&self, other: &Self) -> Option<KeyDifference> {
        if self.output_count() != other.output_count() {
            return Some(KeyDifference::new(
                0,
                format!(
                    "output count {} vs {}",
                    self.output_count(),
                    other.output_count()
                ),
            ));
        }
        let (a, b) = (self.canonical_count(), other.canonical_count());
        (a != b).then(|| KeyDifference::new(0, format!("value count {a} vs {b}")))
    }
}

/// graph-core graphs keep the domain tags their keys always had ([`LINEARIZE_KEY_DOMAIN`],
/// [`TRACED_KEY_DOMAIN`]): a graph-core key and an engine key never share a key type.
impl<Op: PartialEq + std::fmt::Debug + Send + Sync + 'static> KeyGraph for Graph<Op> {
    type Value = ValueId;
    const EAGER_DOMAIN: &'static str = LINEARIZE_KEY_DOMAIN;
    const TRACED_DOMAIN: &'static str = TRACED_KEY_DOMAIN;
    fn key_fingerprint(&self) -> Fingerprint {
        self.fingerprint()
    }
    fn same_structure(&self, other: &Self) -> bool {
        structural_eq(self, other)
    }
    fn output_count(&self) -> usize {
        self.outputs().len()
    }
    fn canonical_index_of(&self, value: ValueId) -> Option<u32> {
        self.canonical_index(value)
    }
    fn canonical_count(&self) -> u32 {
        let inputs = u32::try_from(self.inputs().len()).unwrap_or(u32::MAX);
        // The last live operation's last result has the last index.
        self.canonical_ops()
            .last()
            .and_then(|&op| self.op(op))
            .and_then(|op| op.outputs().last().copied())
            .and_then(|v| self.canonical_index(v))
            .map_or(inputs, |i| i.saturating_add(1))
    }
    fn first_difference(&self, other: &Self) -> Option<KeyDifference> {
        graph_difference(self, other)
    }
}

impl<G: GraphView + Send + Sync + 'static> KeyGraph for CanonicalGraph<G> {
    type Value = NodeValue;
    fn key_fingerprint(&self) -> Fingerprint {
        self.fingerprint()
    }
    fn same_structure(&self, other: &Self) -> bool {
        self.structurally_eq(other)
    }
    fn output_count(&self) -> usize {
        self.graph().num_outputs()
    }
    fn canonical_index_of(&self, value: NodeValue) -> Option<u32> {
        self.index(value)
    }
    fn canonical_count(&self) -> u32 {
        let inputs = u32::try_from(self.graph().num_inputs()).unwrap_or(u32::MAX);
        // The last live node's results end the numbering.
        self.canonical()
            .order()
            .last()
            .and_then(|&node| {
                let first = self.index(NodeValue::Result { node, slot: 0 })?;
                first.checked_add(self.graph().num_results(node))
            })
            .unwrap_or(inputs)
    }
    fn first_difference(&self, other: &Self) -> Option<KeyDifference> {
        view_difference(self, other)
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
/// [`LinearizeKey`] is this key over graph-core graphs.
///
/// Fingerprint: `StableHasher::with_domain(G::EAGER_DOMAIN, KEY_VERSION)` (the
/// [`EAGER_KEY_DOMAIN`], or [`LINEARIZE_KEY_DOMAIN`] for graph-core graphs), the graph's
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
        Ok(EagerKey {
            fingerprint: eager_fingerprint::<G>(graph.key_fingerprint(), outputs),
            graph,
            outputs: outputs.into(),
        })
    }

    /// The key for all of `graph`'s outputs.
    pub fn all_outputs(graph: Arc<G>) -> Self {
        let n = u32::try_from(graph.output_count()).unwrap_or(u32::MAX);
        let slots: Box<[u32]> = (0..n).collect();
        EagerKey {
            fingerprint: eager_fingerprint::<G>(graph.key_fingerprint(), &slots),
            graph,
            outputs: slots,
        }
    }
}

fn eager_fingerprint<G: KeyGraph>(graph: Fingerprint, outputs: &[u32]) -> Fingerprint {
    let mut h = StableHasher::with_domain(G::EAGER_DOMAIN, KEY_VERSION);
    h.write_fingerprint(graph);
    h.write_len(outputs.len());
    for &s in outputs {
        h.write_u32(s);
    }
    h.finish()
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
    fn kind_label(&self) -> &'static str {
        "eager"
    }
    fn difference(&self, other: &Self) -> Option<KeyDifference> {
        if let Some(d) = self.graph.first_difference(&other.graph) {
            return Some(d.within(0, "graph "));
        }
        (self.outputs != other.outputs).then(|| {
            KeyDifference::new(
                u64::from(self.graph.canonical_count()),
                format!("output slots {:?} vs {:?}", self.outputs, other.outputs),
            )
        })
    }
}

/// The key owns its recorded graph ([`HeapMeter::owned_arc`]) and its slot list.
impl<G: RetainedBytes> RetainedBytes for EagerKey<G> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        self.outputs.visit_heap(meter);
        meter.owned_arc(&self.graph);
    }
}

/// A part of a traced key (its differentiation input, output, or an alias entry): stable
/// bytes for the fingerprint, exact equality, sharing across threads, and a check against
/// the key's roots when the key is built.
///
/// A part that names values of the roots must name them canonically, or a re-recorded
/// (renumbered) graph misses: use [`TracedOutput`] (made from the engine's own value by
/// [`TracedOutput::of`]) and check anything else in [`check`](EngineKeyPart::check). Parts
/// that name no values (input keys, names) keep the default check, which accepts them.
/// Implemented for `u64` and `String` (input keys), [`TracedOutput`], and pairs of parts.
pub trait EngineKeyPart: StableHash + PartialEq + Clone + Send + Sync + 'static {
    /// Checks that what the part names exists in `roots`.
    ///
    /// # Errors
    /// A [`KeyError`] saying what is missing; the key is not built.
    fn check<G: KeyGraph>(&self, roots: &[Arc<G>]) -> Result<(), KeyError> {
        let _ = roots;
        Ok(())
    }
}

/// An input key (graph-core's [`ValueKey::Input`](graph_core::ValueKey::Input) keys).
impl EngineKeyPart for u64 {}
/// A name.
impl EngineKeyPart for String {}
/// Both parts are checked.
impl<A: EngineKeyPart, B: EngineKeyPart> EngineKeyPart for (A, B) {
    fn check<G: KeyGraph>(&self, roots: &[Arc<G>]) -> Result<(), KeyError> {
        self.0.check(roots)?;
        self.1.check(roots)
    }
}

/// A value of one of a traced key's roots, named canonically: the root (index into the
/// roots) and the value's canonical index there, equal for differently numbered,
/// structurally equal roots.
///
/// Its fields are private: the only way to make one is [`TracedOutput::of`], which maps a
/// value *in the graph's own numbering* to its canonical index, so an engine cannot put a
/// raw node id where a canonical index belongs (a tape recorded twice with its nodes in
/// another order would then name another output and be served that output's transform).
/// It also remembers the fingerprint of the root it was made for: a key built with it over
/// other roots is refused ([`KeyError::ForeignValue`]).
///
/// Fingerprint bytes: the root (`u32`), then the canonical index (`u32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TracedOutput {
    root: u32,
    canonical: u32,
    /// Fingerprint of the root graph the index was taken in.
    graph: Fingerprint,
}

impl TracedOutput {
    /// Names `value` (in the engine's own numbering) of root `root` of `roots` canonically.
    ///
    /// # Errors
    /// [`KeyError::NoSuchRoot`] for a root past `roots`; [`KeyError::NotLive`] when the
    /// value is dead (no output depends on it) or unknown there.
    pub fn of<G: KeyGraph>(roots: &[Arc<G>], root: u32, value: G::Value) -> Result<Self, KeyError> {
        let graph = root_of(roots, root)?;
        let canonical = graph
            .canonical_index_of(value)
            .ok_or(KeyError::NotLive { root })?;
        Ok(TracedOutput {
            root,
            canonical,
            graph: graph.key_fingerprint(),
        })
    }

    /// The root (index into the key's roots).
    pub fn root(&self) -> u32 {
        self.root
    }

    /// The value's canonical index in that root ([`KeyGraph::canonical_index_of`]).
    pub fn canonical(&self) -> u32 {
        self.canonical
    }
}

fn root_of<G>(roots: &[Arc<G>], root: u32) -> Result<&Arc<G>, KeyError> {
    roots.get(root as usize).ok_or(KeyError::NoSuchRoot {
        root,
        roots: roots.len(),
    })
}

impl StableHash for TracedOutput {
    fn stable_hash(&self, h: &mut StableHasher) {
        h.write_u32(self.root);
        h.write_u32(self.canonical);
    }
}

impl RetainedBytes for TracedOutput {
    const HEAP_FREE: bool = true;
    fn visit_heap<'a>(&'a self, _: &mut HeapMeter<'a>) {}
}

/// The root must exist, be (structurally) the graph the value was named in, and the index
/// must be one of its canonical indices.
impl EngineKeyPart for TracedOutput {
    fn check<G: KeyGraph>(&self, roots: &[Arc<G>]) -> Result<(), KeyError> {
        let graph = root_of(roots, self.root)?;
        if graph.key_fingerprint() != self.graph {
            return Err(KeyError::ForeignValue { root: self.root });
        }
        let values = graph.canonical_count();
        if self.canonical < values {
            Ok(())
        } else {
            Err(KeyError::NoSuchValue {
                root: self.root,
                canonical: self.canonical,
                values,
            })
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::TracedOutput {}
    impl Sealed for Vec<super::TracedOutput> {}
}

/// What can name the output of an [`EngineTracedKey`]: a [`TracedOutput`] or a list of
/// them. Sealed: an output is always named through [`TracedOutput::of`], never by an
/// engine's raw node id.
pub trait OutputPart: EngineKeyPart + sealed::Sealed {}
impl OutputPart for TracedOutput {}
impl OutputPart for Vec<TracedOutput> {}

/// Every output is checked.
impl EngineKeyPart for Vec<TracedOutput> {
    fn check<G: KeyGraph>(&self, roots: &[Arc<G>]) -> Result<(), KeyError> {
        self.iter().try_for_each(|o| o.check(roots))
    }
}

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

/// What [`EngineTracedKey::new`] builds a key from: [`EngineTracedParts`] as they are, or
/// graph-core's [`TracedKeyParts`] (an output named by its [`ValueId`]).
pub trait IntoTracedParts<G, I, O, A> {
    /// The parts, with the output named as the key names it.
    ///
    /// # Errors
    /// A [`KeyError`] when the output cannot be named.
    fn into_parts(self) -> Result<EngineTracedParts<G, I, O, A>, KeyError>;
}

impl<G, I, O, A> IntoTracedParts<G, I, O, A> for EngineTracedParts<G, I, O, A> {
    fn into_parts(self) -> Result<Self, KeyError> {
        Ok(self)
    }
}

/// The output value is named canonically ([`TracedOutput::of`]); a dead or unknown one is
/// [`KeyError::DeadOutput`].
impl<Op: PartialEq + std::fmt::Debug + Send + Sync + 'static>
    IntoTracedParts<Graph<Op>, u64, TracedOutput, (u64, u64)> for TracedKeyParts<Op>
{
    fn into_parts(
        self,
    ) -> Result<EngineTracedParts<Graph<Op>, u64, TracedOutput, (u64, u64)>, KeyError> {
        let TracedKeyParts {
            kind,
            roots,
            output_root,
            output,
            wrt,
            aliases,
        } = self;
        let output = TracedOutput::of(&roots, output_root, output).map_err(|e| match e {
            KeyError::NotLive { root } => KeyError::DeadOutput {
                root,
                value: output,
            },
            e => e,
        })?;
        Ok(EngineTracedParts {
            kind,
            roots,
            output,
            wrt,
            aliases,
        })
    }
}

/// The key of a traced derivative request whose differentiation input, output and alias
/// entries are an engine's own key types ([`EngineKeyPart`]: hashed with [`StableHash`],
/// compared exactly, checked against the roots), over root graphs of any [`KeyGraph`]
/// type. [`TracedKey`] is this key over graph-core graphs, with `u64`
/// input keys, a [`TracedOutput`] and `(u64, u64)` alias pairs.
///
/// Fingerprint: `StableHasher::with_domain(G::TRACED_DOMAIN, KEY_VERSION)` (the
/// [`ENGINE_TRACED_KEY_DOMAIN`], or [`TRACED_KEY_DOMAIN`] for graph-core graphs), the kind
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

impl<G: KeyGraph, I: EngineKeyPart, O: OutputPart, A: EngineKeyPart> EngineTracedKey<G, I, O, A> {
    /// The key of the request `parts` ([`EngineTracedParts`], or graph-core's
    /// [`TracedKeyParts`]).
    ///
    /// # Errors
    /// [`KeyError::NoSuchRoot`] when there are no roots (root 0 is missing); the error of
    /// the output's, `wrt`'s or an alias entry's [`check`](EngineKeyPart::check) (for a
    /// [`TracedOutput`]: [`KeyError::NoSuchRoot`] or [`KeyError::NoSuchValue`]); for
    /// [`TracedKeyParts`], [`KeyError::DeadOutput`] when the output is not a live value.
    pub fn new(parts: impl IntoTracedParts<G, I, O, A>) -> Result<Self, KeyError> {
        let EngineTracedParts {
            kind,
            roots,
            output,
            wrt,
            aliases,
        } = parts.into_parts()?;
        if roots.is_empty() {
            return Err(KeyError::NoSuchRoot { root: 0, roots: 0 });
        }
        output.check(&roots)?;
        wrt.check(&roots)?;
        for a in &aliases {
            a.check(&roots)?;
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
        let mut h = StableHasher::with_domain(G::TRACED_DOMAIN, KEY_VERSION);
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

impl<G: KeyGraph, I: EngineKeyPart, O: OutputPart, A: EngineKeyPart> CacheKey
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
    fn kind_label(&self) -> &'static str {
        match self.kind {
            TransformKind::Jvp => "traced-jvp",
            TransformKind::Vjp => "traced-vjp",
        }
    }
    fn difference(&self, other: &Self) -> Option<KeyDifference> {
        if self.kind != other.kind {
            return Some(KeyDifference::new(
                0,
                format!("kind {:?} vs {:?}", self.kind, other.kind),
            ));
        }
        if self.roots.len() != other.roots.len() {
            return Some(KeyDifference::new(
                0,
                format!("root count {} vs {}", self.roots.len(), other.roots.len()),
            ));
        }
        let mut agree = 0u64;
        for (i, (a, b)) in self.roots.iter().zip(other.roots.iter()).enumerate() {
            if let Some(d) = a.first_difference(b) {
                return Some(d.within(agree, &format!("root {i} ")));
            }
            agree = agree.saturating_add(u64::from(a.canonical_count()));
        }
        if self.output != other.output {
            return Some(KeyDifference::new(agree, "the output value"));
        }
        if self.wrt != other.wrt {
            return Some(KeyDifference::new(
                agree + 1,
                "the input differentiated (wrt)",
            ));
        }
        (self.aliases != other.aliases).then(|| {
            KeyDifference::new(
                agree + 2,
                format!(
                    "the alias map ({} vs {} entries)",
                    self.aliases.len(),
                    other.aliases.len()
                ),
            )
        })
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

/// The one cache key of an engine that caches eager and traced transforms in one cache:
/// everything forwards to the key inside (fingerprint, equality, [`quick_eq`](CacheKey::quick_eq),
/// pricing, miss explanations). Every variant carries its [`TransformKind`]: an eager JVP
/// and an eager VJP of the same recording are different keys (a traced key has its kind
/// inside). An eager and a traced key never compare equal; their domain tags differ, so
/// they share a fingerprint only by a 128-bit collision (a miss, never a wrong hit).
///
/// Fingerprint of `Eager(kind, key)`: the eager key's fingerprint XOR a constant per kind
/// ([`TransformKey::EAGER_JVP_MASK`], [`TransformKey::EAGER_VJP_MASK`]), so the two kinds of
/// one recording have different fingerprints at no hashing cost.
#[derive(Debug)]
pub enum TransformKey<G, I, O, A> {
    /// An eager transform of the given kind (build it with [`TransformKey::eager`]).
    Eager(TransformKind, EagerKey<G>),
    /// A traced JVP or VJP.
    Traced(EngineTracedKey<G, I, O, A>),
}

impl<G, I, O, A> TransformKey<G, I, O, A> {
    /// XORed into an eager key's fingerprint for an eager JVP.
    pub const EAGER_JVP_MASK: u128 = 0x6a09_e667_f3bc_c908_b2fb_1366_ea95_7d3e;
    /// XORed into an eager key's fingerprint for an eager VJP.
    pub const EAGER_VJP_MASK: u128 = 0x3c6e_f372_fe94_f82b_a54f_f53a_5f1d_36f1;

    /// The key of an eager transform of kind `kind`.
    pub fn eager(kind: TransformKind, key: EagerKey<G>) -> Self {
        TransformKey::Eager(kind, key)
    }

    /// The transform kind asked for.
    pub fn kind(&self) -> TransformKind {
        match self {
            TransformKey::Eager(kind, _) => *kind,
            TransformKey::Traced(k) => k.kind(),
        }
    }

    fn mask(kind: TransformKind) -> u128 {
        match kind {
            TransformKind::Jvp => Self::EAGER_JVP_MASK,
            TransformKind::Vjp => Self::EAGER_VJP_MASK,
        }
    }

    /// The same key claiming `fingerprint` instead of its own (see
    /// [`GraphKey::with_fingerprint`](crate::GraphKey::with_fingerprint): a wrong one only
    /// causes misses, never a wrong hit).
    #[must_use]
    pub fn with_fingerprint(self, fingerprint: Fingerprint) -> Self {
        match self {
            TransformKey::Eager(kind, k) => TransformKey::Eager(
                kind,
                k.with_fingerprint(Fingerprint(fingerprint.0 ^ Self::mask(kind))),
            ),
            TransformKey::Traced(k) => TransformKey::Traced(k.with_fingerprint(fingerprint)),
        }
    }
}

impl<G, I: Clone, O: Clone, A: Clone> Clone for TransformKey<G, I, O, A> {
    fn clone(&self) -> Self {
        match self {
            TransformKey::Eager(kind, k) => TransformKey::Eager(*kind, k.clone()),
            TransformKey::Traced(k) => TransformKey::Traced(k.clone()),
        }
    }
}

impl<G, I, O, A> From<EngineTracedKey<G, I, O, A>> for TransformKey<G, I, O, A> {
    fn from(k: EngineTracedKey<G, I, O, A>) -> Self {
        TransformKey::Traced(k)
    }
}

impl<G: KeyGraph, I: EngineKeyPart, O: OutputPart, A: EngineKeyPart> CacheKey
    for TransformKey<G, I, O, A>
{
    #[inline]
    fn fingerprint(&self) -> Fingerprint {
        match self {
            TransformKey::Eager(kind, k) => Fingerprint(k.fingerprint().0 ^ Self::mask(*kind)),
            TransformKey::Traced(k) => k.fingerprint(),
        }
    }
    fn same_key(&self, other: &Self) -> bool {
        match (self, other) {
            (TransformKey::Eager(ka, a), TransformKey::Eager(kb, b)) => ka == kb && a.same_key(b),
            (TransformKey::Traced(a), TransformKey::Traced(b)) => a.same_key(b),
            _ => false,
        }
    }
    #[inline]
    fn quick_eq(&self, other: &Self) -> Option<bool> {
        match (self, other) {
            (TransformKey::Eager(ka, a), TransformKey::Eager(kb, b)) => {
                if ka == kb {
                    a.quick_eq(b)
                } else {
                    Some(false)
                }
            }
            (TransformKey::Traced(a), TransformKey::Traced(b)) => a.quick_eq(b),
            _ => Some(false),
        }
    }
    fn kind_label(&self) -> &'static str {
        match self {
            TransformKey::Eager(TransformKind::Jvp, _) => "eager-jvp",
            TransformKey::Eager(TransformKind::Vjp, _) => "eager-vjp",
            TransformKey::Traced(k) => k.kind_label(),
        }
    }
    fn difference(&self, other: &Self) -> Option<KeyDifference> {
        match (self, other) {
            (TransformKey::Eager(ka, a), TransformKey::Eager(kb, b)) if ka == kb => a.difference(b),
            (TransformKey::Traced(a), TransformKey::Traced(b)) => a.difference(b),
            _ => Some(KeyDifference::new(
                0,
                format!("transform {} vs {}", self.kind_label(), other.kind_label()),
            )),
        }
    }
}

impl<G: RetainedBytes, I: RetainedBytes, O: RetainedBytes, A: RetainedBytes> RetainedBytes
    for TransformKey<G, I, O, A>
{
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        match self {
            TransformKey::Eager(_, k) => k.visit_heap(meter),
            TransformKey::Traced(k) => k.visit_heap(meter),
        }
    }
}

/// The key of an eager linearization of a graph-core graph: the recorded graph and the
/// output slots (positions in [`Graph::outputs`]) whose tangents are asked for. It is the
/// generic [`EagerKey`] over [`Graph`] (one equality and pricing path; `new`,
/// `all_outputs`, `graph`, `outputs`, `with_fingerprint`).
///
/// Fingerprint: `StableHasher::with_domain(LINEARIZE_KEY_DOMAIN, KEY_VERSION)`, then the
/// graph's fingerprint, then the slot count and each slot as `u32`.
pub type LinearizeKey<Op> = EagerKey<Graph<Op>>;

/// The named parts of a traced derivative request over graph-core graphs, the output named
/// by its [`ValueId`], from which `TracedKey::new` builds its key.
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
/// assert_eq!(key.output().root(), 0);
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

/// The key of a traced derivative request over graph-core graphs: the kind, the root
/// graphs, the output value, the input differentiated with respect to, and the alias map,
/// built from [`TracedKeyParts`] by `TracedKey::new`. It is the generic [`EngineTracedKey`]
/// over [`Graph`] with `u64` input keys, a [`TracedOutput`] and `(u64, u64)` alias pairs
/// (one equality and pricing path).
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
pub type TracedKey<Op> = EngineTracedKey<Graph<Op>, u64, TracedOutput, (u64, u64)>;
