//! Per-step execution graphs: each step's ops and tensors as a graph-core graph with canonical
//! ids, step fingerprints, "stable from step k", the first differing op of a changed step, and
//! per-fingerprint step analyses memoized in an ad-cache `Cache` (identical steps are analysed
//! once).
//!
//! ## Canonical form of a step
//! Ops are taken in the order they were recorded. A tensor produced by an op of the step is that
//! op's output (by slot); any other tensor the step reads (parameters, inputs, values from an
//! earlier step) becomes a graph input whose key is its position in the order of first use
//! (0, 1, 2, ...). An op without outputs gets one (so it is part of the graph), and the graph's
//! outputs are every value no op of the step reads, in op order. Trace ids therefore never reach
//! the fingerprint: two steps that do the same thing have equal fingerprints, in one trace or
//! across traces. An op's payload is its name, output shape and dtype, and every input's shape
//! and dtype when the trace recorded them (`in_shapes`): so a step that runs the same ops on
//! inputs of other shapes (a prefill `[1,16]` and a decode `[1,1]` step of a language model)
//! has another fingerprint, and the first difference names the input that changed.

use crate::model::intern::FastMap;
use std::num::NonZeroUsize;
use std::sync::Arc;

use ad_cache::{Cache, CacheKey, CacheLimits, CacheStats, HeapMeter, RetainedBytes};
use graph_core::{Graph, GraphBuilder, Role, StableHash, StableHasher, ValueId, ValueRef};
use serde::Serialize;

use crate::error::AnalyzeError;
use crate::model::intern::{ShapeId, Sym};
use crate::model::trace::{Op, Trace};

/// Every input's shape and dtype of a step-graph op, in input order (shared between ops).
type InputMetaList = Arc<[(Arc<[u64]>, Arc<str>)]>;

/// The payload of an operation in a step graph: op name, output shape and dtype, and the
/// inputs' shapes and dtypes when recorded.
///
/// One pointer to data shared by the ops with the same payload, so that a step graph of a
/// million ops spends 8 bytes an op on payloads.
#[derive(Clone)]
pub struct StepOp(Arc<StepOpData>);

/// What a [`StepOp`] holds.
#[derive(Debug, PartialEq, Eq)]
struct StepOpData {
    name: Arc<str>,
    shape: Arc<[u64]>,
    dtype: Arc<str>,
    inputs: InputMetaList,
}

impl StepOp {
    /// The payload of an op named `name` with output `shape` and `dtype`, and every input's
    /// shape and dtype in input order (empty when the trace did not record them).
    pub fn new(name: Arc<str>, shape: Arc<[u64]>, dtype: Arc<str>, inputs: InputMetaList) -> Self {
        StepOp(Arc::new(StepOpData {
            name,
            shape,
            dtype,
            inputs,
        }))
    }

    /// The op name.
    pub fn name(&self) -> &Arc<str> {
        &self.0.name
    }

    /// The output shape.
    pub fn shape(&self) -> &Arc<[u64]> {
        &self.0.shape
    }

    /// The output dtype.
    pub fn dtype(&self) -> &Arc<str> {
        &self.0.dtype
    }

    /// Every input's shape and dtype, in input order; empty when the trace did not record
    /// them.
    pub fn inputs(&self) -> &[(Arc<[u64]>, Arc<str>)] {
        &self.0.inputs
    }
}

/// As the data's (`StepOp { name: .., shape: .., .. }`): what cache explanations print.
impl std::fmt::Debug for StepOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepOp")
            .field("name", &self.0.name)
            .field("shape", &self.0.shape)
            .field("dtype", &self.0.dtype)
            .field("inputs", &self.0.inputs)
            .finish()
    }
}

impl PartialEq for StepOp {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl Eq for StepOp {}

impl StableHash for StepOp {
    fn stable_hash(&self, h: &mut StableHasher) {
        self.0.stable_hash(h);
    }
}

impl StableHash for StepOpData {
    fn stable_hash(&self, h: &mut StableHasher) {
        h.write_str(&self.name);
        h.write_len(self.shape.len());
        for &d in self.shape.iter() {
            h.write_u64(d);
        }
        h.write_str(&self.dtype);
        // Only when recorded, so traces without `in_shapes` keep their fingerprints; a hit
        // is confirmed by structural equality (which compares `inputs`) in any case.
        if self.inputs.is_empty() {
            return;
        }
        h.write_len(self.inputs.len());
        for (shape, dtype) in self.inputs.iter() {
            h.write_len(shape.len());
            for &d in shape.iter() {
                h.write_u64(d);
            }
            h.write_str(dtype);
        }
    }
}

/// An input of an op in canonical form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CanonInput {
    /// The `n`-th distinct tensor the step read from outside (first-use order).
    External(u32),
    /// Output `slot` of the step's `op`-th op.
    Produced {
        /// The producing op's position in the step.
        op: u32,
        /// The output slot.
        slot: u32,
    },
}

/// One op of a step in canonical form (what steps are diffed on; the step graph is built
/// from the same canonical inputs, without keeping them per op).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonOp {
    /// The op name.
    pub name: Sym,
    /// The output shape.
    pub shape: ShapeId,
    /// The output dtype.
    pub dtype: Sym,
    /// Number of outputs (at least 1).
    pub outputs: u32,
    /// The inputs.
    pub inputs: Vec<CanonInput>,
    /// Every input's `(shape, dtype)`, when recorded (see [`Trace::op_input_meta`]).
    pub input_meta: Vec<(ShapeId, Sym)>,
}

/// The canonical ops of a step (`ops`: the step's ops in recorded order).
pub fn canonical_ops(trace: &Trace, ops: &[Op]) -> Vec<CanonOp> {
    let mut canon = Canonical::default();
    let mut out = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let inputs = trace
            .op_inputs(op)
            .iter()
            .map(|&t| canon.input(t))
            .collect();
        let outs = trace.op_outputs(op);
        canon.outputs(i, outs);
        out.push(CanonOp {
            name: op.name,
            shape: op.shape,
            dtype: op.dtype,
            outputs: outs.len().max(1) as u32,
            inputs,
            input_meta: trace.op_input_meta(op).to_vec(),
        });
    }
    trace.work.add(ops.len() as u64);
    out
}

/// The canonical form of a step's tensors, op after op: which op's output each tensor is,
/// and the first-use position of each tensor the step read from outside.
#[derive(Default)]
struct Canonical {
    produced: FastMap<u64, CanonInput>,
    external: FastMap<u64, u32>,
}

impl Canonical {
    /// The canonical form of input tensor `t` of the next op.
    fn input(&mut self, t: u64) -> CanonInput {
        if let Some(&c) = self.produced.get(&t) {
            c
        } else {
            let n = self.external.len() as u32;
            CanonInput::External(*self.external.entry(t).or_insert(n))
        }
    }

    /// Records the output tensors `outs` of the step's `i`-th op (after its inputs).
    fn outputs(&mut self, i: usize, outs: &[u64]) {
        for (slot, t) in outs.iter().enumerate() {
            self.produced.insert(
                *t,
                CanonInput::Produced {
                    op: i as u32,
                    slot: slot as u32,
                },
            );
        }
    }
}

/// Shared payloads so that building a graph allocates nothing per op: one [`StepOp`] per
/// distinct (name, shape, dtype, input shapes and dtypes), its strings shared too.
#[derive(Debug, Default)]
pub(crate) struct PayloadPool {
    names: FastMap<Sym, Arc<str>>,
    shapes: FastMap<ShapeId, Arc<[u64]>>,
    input_lists: FastMap<Vec<(ShapeId, Sym)>, (u32, InputMetaList)>,
    ops: FastMap<(Sym, ShapeId, Sym, u32), StepOp>,
}

impl PayloadPool {
    fn name(&mut self, trace: &Trace, s: Sym) -> Arc<str> {
        self.names
            .entry(s)
            .or_insert_with(|| Arc::from(trace.str(s)))
            .clone()
    }

    fn shape(&mut self, trace: &Trace, sh: ShapeId) -> Arc<[u64]> {
        self.shapes
            .entry(sh)
            .or_insert_with(|| Arc::from(trace.shapes.resolve(sh)))
            .clone()
    }

    fn op(&mut self, trace: &Trace, op: &Op) -> StepOp {
        let input_meta = trace.op_input_meta(op);
        let (list, inputs) = if let Some((k, l)) = self.input_lists.get(input_meta) {
            (*k, Arc::clone(l))
        } else {
            let l: InputMetaList = input_meta
                .iter()
                .map(|&(sh, dt)| (self.shape(trace, sh), self.name(trace, dt)))
                .collect();
            // Fewer lists than ops, and ops are counted in `u32`s.
            let k = self.input_lists.len() as u32;
            self.input_lists
                .insert(input_meta.to_vec(), (k, Arc::clone(&l)));
            (k, l)
        };
        if let Some(p) = self.ops.get(&(op.name, op.shape, op.dtype, list)) {
            return p.clone();
        }
        let p = StepOp::new(
            self.name(trace, op.name),
            self.shape(trace, op.shape),
            self.name(trace, op.dtype),
            inputs,
        );
        self.ops
            .insert((op.name, op.shape, op.dtype, list), p.clone());
        p
    }
}

/// Builds the graph of a step from its ops (in recorded order), in canonical form.
///
/// One pass over the ops resolves every input tensor to its value (the output of the last
/// op of the step that wrote it before, else a graph input numbered in first-use order),
/// through one map of the step's tensors that is freed before the graph is built; a second
/// adds the ops from the resolved values. Between them nothing is kept but one value per
/// operand and a flag per op output, so building a step's graph holds little more than the
/// graph.
pub(crate) fn build_step_graph(
    trace: &Trace,
    ops: &[Op],
    pool: &mut PayloadPool,
) -> Result<Graph<StepOp>, AnalyzeError> {
    let too_many = || AnalyzeError::Graph(graph_core::GraphError::TooMany { what: "values" });
    // Values: every op's outputs (at least one each) in op order, then the graph inputs.
    let n_out: u64 = ops
        .iter()
        .map(|op| trace.op_outputs(op).len().max(1) as u64)
        .sum();
    let n_out32 = u32::try_from(n_out).map_err(|_| too_many())?;
    // The step's tensors: the value each one is now (the latest output that wrote it, or
    // the graph input it was read as).
    let mut tensors: FastMap<u64, u32> = FastMap::default();
    let mut operands: Vec<u32> = Vec::new();
    // Whether each op output is read by an op of the step.
    let mut used: Vec<bool> = vec![false; n_out as usize];
    let mut n_ext: u32 = 0;
    let mut next_out: u32 = 0;
    for op in ops {
        for &t in trace.op_inputs(op) {
            let v = match tensors.get(&t) {
                Some(&v) => v,
                None => {
                    let v = n_out32.checked_add(n_ext).ok_or_else(too_many)?;
                    n_ext += 1;
                    tensors.insert(t, v);
                    v
                }
            };
            if let Some(u) = used.get_mut(v as usize) {
                *u = true;
            }
            operands.push(v);
        }
        for (slot, &t) in trace.op_outputs(op).iter().enumerate() {
            tensors.insert(t, next_out + slot as u32);
        }
        next_out += trace.op_outputs(op).len().max(1) as u32;
    }
    drop(tensors);
    trace.work.add(ops.len() as u64);
    let n_values = n_out32.checked_add(n_ext).ok_or_else(too_many)?;
    let mut b = GraphBuilder::with_capacity(ops.len(), n_values as usize);
    for _ in 0..n_values {
        b.add_value();
    }
    let mut refs: Vec<ValueRef> = Vec::new();
    let mut vs: Vec<ValueId> = Vec::new();
    let (mut at, mut first) = (0usize, 0u32);
    for op in ops {
        let n_in = trace.op_inputs(op).len();
        refs.clear();
        refs.extend(
            operands[at..at + n_in]
                .iter()
                .map(|&v| ValueRef::Local(ValueId(v))),
        );
        at += n_in;
        let n = trace.op_outputs(op).len().max(1) as u32;
        vs.clear();
        vs.extend((first..first + n).map(ValueId));
        first += n;
        b.add_op_with_outputs(pool.op(trace, op), &refs, &vs, Role::Primary);
    }
    drop(operands);
    // The graph inputs in first-use order, keyed by that order.
    for k in 0..n_ext {
        b.set_input(ValueId(n_out32 + k), u64::from(k));
    }
    // The graph outputs: every op output no op of the step reads, in op order.
    let sinks: Vec<ValueId> = (0..n_out32)
        .filter(|&v| !used[v as usize])
        .map(ValueId)
        .collect();
    drop(used);
    b.set_outputs(&sinks);
    drop(sinks);
    trace.work.add(2 * ops.len() as u64);
    b.build().map_err(AnalyzeError::Graph)
}

/// What is computed once per distinct step graph.
#[derive(Debug, Clone, Serialize)]
pub struct StepGraphAnalysis {
    /// Operations in the graph.
    pub ops: usize,
    /// Values (tensors) in the graph.
    pub values: usize,
    /// Graph inputs (tensors the step read from outside).
    pub inputs: usize,
    /// Graph outputs (values no op of the step read).
    pub outputs: usize,
    /// The longest chain of dependent ops.
    pub depth: usize,
    /// Ops per name, sorted by name.
    pub op_counts: Vec<OpCount>,
}

/// How many ops of one name a step graph has.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct OpCount {
    /// The op name.
    pub name: String,
    /// How many.
    pub count: u64,
}

impl RetainedBytes for StepGraphAnalysis {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        meter.add(
            (self.op_counts.capacity() * std::mem::size_of::<OpCount>()
                + self
                    .op_counts
                    .iter()
                    .map(|c| c.name.capacity())
                    .sum::<usize>()) as u64,
        );
    }
}

/// Analyses a step graph (iteratively, in canonical = topological order).
pub(crate) fn analyse_step_graph(g: &Graph<StepOp>) -> StepGraphAnalysis {
    // The depth of each op (its outputs'), 4 bytes an op.
    let mut depth_of_op = vec![0u32; g.num_ops()];
    let mut depth = 0u32;
    let mut counts: FastMap<&str, u64> = FastMap::default();
    for &id in g.canonical_ops() {
        let Some(op) = g.op(id) else { continue };
        let d = op
            .inputs()
            .iter()
            .map(|r| match r {
                ValueRef::Local(v) => g
                    .producer(*v)
                    .and_then(|(p, _)| depth_of_op.get(p.index()).copied())
                    .unwrap_or(0),
                ValueRef::Parent { .. } => 0,
            })
            .max()
            .unwrap_or(0)
            .saturating_add(1);
        if let Some(slot) = depth_of_op.get_mut(id.index()) {
            *slot = d;
        }
        depth = depth.max(d);
        *counts.entry(op.payload().name().as_ref()).or_insert(0) += 1;
    }
    let mut op_counts: Vec<OpCount> = counts
        .into_iter()
        .map(|(k, v)| OpCount {
            name: k.to_string(),
            count: v,
        })
        .collect();
    op_counts.sort();
    StepGraphAnalysis {
        ops: g.num_ops(),
        values: g.num_values(),
        inputs: g.inputs().len(),
        outputs: g.outputs().len(),
        depth: depth as usize,
        op_counts,
    }
}

/// A cache key: a step graph, found by fingerprint and confirmed by structural equality.
#[derive(Debug, Clone)]
pub struct StepKey(pub Arc<Graph<StepOp>>);

/// Bytes charged per op of a step graph kept as a cache key: the figure the cache has always
/// charged (an op node with a four-handle payload and its role), which errs high now that a
/// payload is one handle and an op node 32 bytes; the reports' `retained_bytes` stay as
/// they were.
const STEP_OP_CHARGE: usize = 112;

/// The key keeps its graph alive: charged as an estimate of its arenas (ops, values,
/// edges); payload strings are shared with the trace's pool and not charged.
impl RetainedBytes for StepKey {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        let g = &self.0;
        let edges: usize = g.ops().map(|o| o.inputs().len() + o.outputs().len()).sum();
        meter.add((g.num_ops() * STEP_OP_CHARGE + g.num_values() * 24 + edges * 12) as u64);
    }
}

impl CacheKey for StepKey {
    fn fingerprint(&self) -> ad_cache::Fingerprint {
        ad_cache::Fingerprint(self.0.fingerprint().0)
    }

    fn same_key(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || graph_core::structural_eq(&self.0, &other.0)
    }

    fn kind_label(&self) -> &'static str {
        "step-graph"
    }

    /// The first difference between two step graphs in canonical order (an input, an
    /// operation's name, shape, dtype or input shapes, an operand, an output), as
    /// ad-cache's graph keys describe theirs: what [`Cache::explain`] and the explain mode
    /// report for a step graph that missed ("step k differs from step k-1 at ...").
    fn difference(&self, other: &Self) -> Option<ad_cache::KeyDifference> {
        ad_cache::graph_difference(&self.0, &other.0)
    }
}

/// The cache of step analyses by step graph.
pub type StepCache = Cache<StepKey, StepGraphAnalysis>;

/// A new step cache (256 entries, 16 MiB of retained analyses).
pub fn new_step_cache() -> StepCache {
    Cache::with_limits(CacheLimits {
        max_entries: NonZeroUsize::new(256).unwrap_or(NonZeroUsize::MIN),
        max_retained_bytes: Some(16 << 20),
    })
}

/// Cache statistics, as reported (a serializable copy of ad-cache's snapshot).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct CacheReport {
    /// Lookups that found an analysis.
    pub hits: u64,
    /// Lookups that computed one.
    pub misses: u64,
    /// Entries held at the end.
    pub entries: u64,
    /// Retained bytes at the end.
    pub retained_bytes: u64,
    /// Entries evicted to keep the limits.
    pub evictions: u64,
    /// Fingerprint matches whose graphs differed.
    pub collisions: u64,
}

impl From<CacheStats> for CacheReport {
    fn from(s: CacheStats) -> Self {
        CacheReport {
            hits: s.hits,
            misses: s.misses,
            entries: s.entries,
            retained_bytes: s.retained_bytes,
            evictions: s.evictions,
            collisions: s.collisions,
        }
    }
}

/// Where a changed step first differs from the step before it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StepDiff {
    /// The step compared against (its recorded index).
    pub against_step: u64,
    /// The position (0-based, recorded order) of the first op that differs.
    pub op_index: usize,
    /// That op in the earlier step (`None` when the earlier step has fewer ops).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// That op in this step (`None` when this step has fewer ops).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// What differs: `name`, `shape`, `dtype`, `inputs`, `outputs`, `missing` or `extra`, or
    /// for a recorded input's shape or dtype the change itself:
    /// `input 0 shape [1, 16] → [1, 1]`, `input 1 dtype f32 → f16`.
    pub what: String,
}

/// One step's graph facts.
#[derive(Debug, Clone, Serialize)]
pub struct StepGraph {
    /// The recorded step index.
    pub step: u64,
    /// The step graph's fingerprint (32 hex digits).
    pub fingerprint: String,
    /// Ops in the step.
    pub ops: usize,
    /// Wall time of the step.
    pub duration_ns: u64,
    /// True when the fingerprint differs from the previous step's (never for a partial step).
    pub changed: bool,
    /// True for the last step of an incomplete trace ([`Trace::partial_step`]): its graph is
    /// a prefix, so it is neither compared with the step before nor counted in
    /// `distinct_graphs` and `stable_from_step`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    /// For a changed step (not the first), where it first differs from the previous step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<StepDiff>,
    /// The memoized analysis of this step's graph.
    #[serde(serialize_with = "serialize_arc")]
    pub analysis: Arc<StepGraphAnalysis>,
}

fn serialize_arc<S: serde::Serializer>(
    a: &Arc<StepGraphAnalysis>,
    s: S,
) -> Result<S::Ok, S::Error> {
    a.as_ref().serialize(s)
}

/// The graph report: every step's fingerprint, stability and what changed.
#[derive(Debug, Clone, Serialize)]
pub struct GraphReport {
    /// Per step, in recorded order.
    pub steps: Vec<StepGraph>,
    /// How many distinct graphs among the whole steps with ops.
    pub distinct_graphs: usize,
    /// The first step of the last run of steps with one graph, when, with more than one graph,
    /// that run held for more than one step (recorded index); absent otherwise (a change at
    /// the last step, as when graphs alternate step by step; no graphs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stable_from_step: Option<u64>,
    /// Statistics of the analysis cache: identical steps are hits.
    pub cache: CacheReport,
    /// The whole steps grouped by graph (steps with no ops left out), in order of first
    /// appearance, labelled `A`, `B`, ...
    pub groups: Vec<GraphGroup>,
    /// Whole steps with no captured op: no graph, not counted in `distinct_graphs`.
    pub no_op_steps: usize,
    /// How the groups follow each other.
    pub pattern: GraphPattern,
    /// The verdict in words, e.g. `2 distinct graphs, alternating: A bert.forward([4, 16]) × 4,
    /// B bert.forward([4, 48]) × 4` (what `summary`, `graph` and the report print).
    pub verdict: String,
}

/// The whole steps that share one graph.
#[derive(Debug, Clone, Serialize)]
pub struct GraphGroup {
    /// `A`, `B`, ... in order of first appearance (`Z` is followed by `AA`).
    pub label: String,
    /// The graph's fingerprint.
    pub fingerprint: String,
    /// What tells the graph apart, in a user's words: its first op and that op's input
    /// shapes (`llama.forward([1, 16])`), or its output shape (`matmul → [32, 128]`) when
    /// inputs were not recorded.
    pub signature: String,
    /// Ops in the graph.
    pub ops: usize,
    /// The first step with this graph (recorded index).
    pub first_step: u64,
    /// The step times of the group's steps (count = its number of steps).
    pub step_time: crate::stats::Spread,
}

/// How the step graphs of a run follow each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GraphPattern {
    /// No whole step.
    NoSteps,
    /// Whole steps, none with a captured op.
    NoOps,
    /// One graph.
    Stable,
    /// Several graphs, each in one run of consecutive steps (e.g. prefill, decode, training).
    Phases,
    /// Some graph comes back after another one (e.g. batches of two sequence lengths).
    Alternating,
}

/// Spreadsheet-style labels: 0 → `A`, 25 → `Z`, 26 → `AA`.
pub(crate) fn group_label(mut i: usize) -> String {
    let mut out = Vec::new();
    loop {
        out.push(b'A' + (i % 26) as u8);
        if i < 26 {
            break;
        }
        i = i / 26 - 1;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// The graph's first op and its input shapes, else its output shape.
fn signature(trace: &Trace, ops: &[Op]) -> String {
    let Some(first) = ops.first() else {
        return "no ops".to_string();
    };
    let name = trace.str(first.name);
    let input_meta = trace.op_input_meta(first);
    if input_meta.is_empty() {
        format!("{name} → {}", trace.shapes.display(first.shape))
    } else {
        let shapes: Vec<String> = input_meta
            .iter()
            .map(|&(sh, _)| trace.shapes.display(sh).clone())
            .collect();
        format!("{name}({})", shapes.join(", "))
    }
}

/// A distinct change of graph between consecutive steps: the first step that made it.
#[derive(Debug, Clone, Serialize)]
pub struct ChangedStep {
    /// The step index (the first step with this change).
    pub step: u64,
    /// Where it first differs from the step before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<StepDiff>,
    /// The label of the group changed from (see [`GraphGroup::label`]), when it has ops.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The label of the group changed to, when it has ops.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// How many steps made this same change (this one included).
    pub times: u64,
}

impl GraphReport {
    /// Each distinct change of graph (from one fingerprint to another) once, at its first step,
    /// with how many steps made it, in order of first step. O(n).
    pub fn distinct_changes(&self) -> Vec<ChangedStep> {
        let g = self;
        let label: FastMap<&str, &str> = g
            .groups
            .iter()
            .map(|gr| (gr.fingerprint.as_str(), gr.label.as_str()))
            .collect();
        let mut at: FastMap<(&str, &str), usize> = FastMap::default();
        let mut out: Vec<ChangedStep> = Vec::new();
        let mut prev: Option<&str> = None;
        for s in g.steps.iter().filter(|s| !s.partial) {
            let fp = s.fingerprint.as_str();
            if s.changed
                && let Some(p) = prev
            {
                if let Some(&i) = at.get(&(p, fp)) {
                    out[i].times += 1;
                } else {
                    at.insert((p, fp), out.len());
                    out.push(ChangedStep {
                        step: s.step,
                        diff: s.diff.clone(),
                        from: label.get(p).map(std::string::ToString::to_string),
                        to: label.get(fp).map(std::string::ToString::to_string),
                        times: 1,
                    });
                }
            }
            prev = Some(fp);
        }
        out
    }
}

/// Pattern, stable-from step and verdict of the whole steps (`group_of[i]`: the group of
/// `steps[i]`, `None` for a step with no ops). O(n).
fn verdict_of(
    steps: &[StepGraph],
    group_of: &[Option<usize>],
    mut groups: Vec<GraphGroup>,
) -> (Vec<GraphGroup>, GraphPattern, Option<u64>, String) {
    let whole = group_of.len();
    let no_ops = group_of.iter().filter(|g| g.is_none()).count();
    // Runs of consecutive steps with one graph (steps with no ops do not break a run).
    let seq: Vec<(usize, u64)> = group_of
        .iter()
        .zip(steps)
        .filter_map(|(g, s)| g.map(|g| (g, s.step)))
        .collect();
    let mut runs: Vec<(usize, u64, usize)> = Vec::new();
    for &(g, step) in &seq {
        match runs.last_mut() {
            Some(r) if r.0 == g => r.2 += 1,
            _ => runs.push((g, step, 1)),
        }
    }
    let mut runs_of = vec![0usize; groups.len()];
    for r in &runs {
        runs_of[r.0] += 1;
    }
    let pattern = if whole == 0 {
        GraphPattern::NoSteps
    } else if groups.is_empty() {
        GraphPattern::NoOps
    } else if groups.len() == 1 {
        GraphPattern::Stable
    } else if runs_of.iter().any(|&n| n > 1) {
        GraphPattern::Alternating
    } else {
        GraphPattern::Phases
    };
    // Stable from the last run's first step when, with more than one graph, that run held
    // for more than one step: a change at the last step is no stability.
    let stable = runs
        .last()
        .and_then(|&(_, step, len)| (groups.len() == 1 || len > 1).then_some(step));
    let list = |groups: &[GraphGroup]| {
        groups
            .iter()
            .map(|g| format!("{} {} × {}", g.label, g.signature, g.step_time.count))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let no_ops_note = match no_ops {
        0 => String::new(),
        1 => "; 1 step with no ops captured".to_string(),
        n => format!("; {n} steps with no ops captured"),
    };
    let verdict = match pattern {
        GraphPattern::NoSteps => "no whole steps, no step graphs".to_string(),
        GraphPattern::NoOps => format!(
            "no ops captured in {whole} step(s): no step graphs (record ops with Capture::op)"
        ),
        GraphPattern::Stable => format!(
            "1 distinct graph, stable from step {}: {}{no_ops_note}",
            stable.unwrap_or(0),
            list(&groups)
        ),
        GraphPattern::Phases => format!(
            "{} distinct graphs, one after another: {}{}{no_ops_note}",
            groups.len(),
            list(&groups),
            stable.map_or(String::new(), |k| format!("; stable from step {k}"))
        ),
        GraphPattern::Alternating => format!(
            "{} distinct graphs, alternating: {}{}{no_ops_note}",
            groups.len(),
            list(&groups),
            stable.map_or(String::new(), |k| format!("; stable from step {k}"))
        ),
    };
    groups.shrink_to_fit();
    (groups, pattern, stable, verdict)
}

fn describe(trace: &Trace, c: &CanonOp) -> String {
    let ins: Vec<String> = c
        .inputs
        .iter()
        .map(|i| match i {
            CanonInput::External(n) => format!("in{n}"),
            CanonInput::Produced { op, slot } => format!("op{op}.{slot}"),
        })
        .collect();
    let mut text = format!(
        "{} {} {} ({})",
        trace.str(c.name),
        trace.shapes.display(c.shape),
        trace.str(c.dtype),
        ins.join(", ")
    );
    if !c.input_meta.is_empty() {
        let metas: Vec<String> = c
            .input_meta
            .iter()
            .map(|&(sh, dt)| format!("{} {}", trace.shapes.display(sh), trace.str(dt)))
            .collect();
        text.push_str(&format!(" inputs [{}]", metas.join(", ")));
    }
    text
}

/// How the recorded input shapes or dtypes of two ops differ (the first input that does).
fn input_meta_difference(trace: &Trace, x: &CanonOp, y: &CanonOp) -> Option<String> {
    if x.input_meta.len() != y.input_meta.len() {
        return (!x.input_meta.is_empty() && !y.input_meta.is_empty()).then(|| {
            format!(
                "input count {} → {}",
                x.input_meta.len(),
                y.input_meta.len()
            )
        });
    }
    x.input_meta
        .iter()
        .zip(&y.input_meta)
        .enumerate()
        .find_map(|(k, (&(sa, da), &(sb, db)))| {
            if trace.shapes.resolve(sa) != trace.shapes.resolve(sb) {
                Some(format!(
                    "input {k} shape {} → {}",
                    trace.shapes.display(sa),
                    trace.shapes.display(sb)
                ))
            } else if trace.str(da) != trace.str(db) {
                Some(format!(
                    "input {k} dtype {} → {}",
                    trace.str(da),
                    trace.str(db)
                ))
            } else {
                None
            }
        })
}

/// The first op where `b` differs from `a`, if any.
pub(crate) fn first_difference(
    trace: &Trace,
    a: &[CanonOp],
    b: &[CanonOp],
) -> Option<(usize, String)> {
    let n = a.len().max(b.len());
    for i in 0..n {
        let what = match (a.get(i), b.get(i)) {
            (Some(x), Some(y)) => {
                if trace.str(x.name) != trace.str(y.name) {
                    "name"
                } else if let Some(d) = input_meta_difference(trace, x, y) {
                    return Some((i, d));
                } else if trace.shapes.resolve(x.shape) != trace.shapes.resolve(y.shape) {
                    "shape"
                } else if trace.str(x.dtype) != trace.str(y.dtype) {
                    "dtype"
                } else if x.inputs != y.inputs {
                    "inputs"
                } else if x.outputs != y.outputs {
                    "outputs"
                } else if x.input_meta.len() != y.input_meta.len() {
                    "input_meta"
                } else {
                    continue;
                }
            }
            (Some(_), None) => "missing",
            (None, Some(_)) => "extra",
            (None, None) => break,
        };
        return Some((i, what.to_string()));
    }
    None
}

/// Builds the graph report, analysing each distinct step graph once through `cache`.
/// O(n) graph building over all ops plus a linear diff of each changed step against the step
/// before it.
pub fn graph_report(trace: &Trace, cache: &StepCache) -> Result<GraphReport, AnalyzeError> {
    let mut pool = PayloadPool::default();
    let mut steps = Vec::with_capacity(trace.steps.len());
    // The step before: its index, fingerprint and position in `trace.steps`.
    let mut prev: Option<(u64, graph_core::Fingerprint, usize)> = None;
    // Fingerprint → group index, for whole steps with ops.
    let mut distinct: FastMap<u128, usize> = FastMap::default();
    let mut groups: Vec<GraphGroup> = Vec::new();
    let mut times: Vec<crate::stats::SpreadAcc> = Vec::new();
    let mut group_of: Vec<Option<usize>> = Vec::new();
    let whole = trace.complete_steps().len();
    for (i, st) in trace.steps.iter().enumerate() {
        let partial = i >= whole;
        let ops = trace.step_ops(i);
        let g = Arc::new(build_step_graph(trace, ops, &mut pool)?);
        let fp = g.fingerprint();
        if !partial {
            let group = (!ops.is_empty()).then(|| {
                *distinct.entry(fp.0).or_insert_with(|| {
                    groups.push(GraphGroup {
                        label: group_label(groups.len()),
                        fingerprint: fp.to_string(),
                        signature: signature(trace, ops),
                        ops: ops.len(),
                        first_step: st.index,
                        // Filled in from `times` once every step is seen.
                        step_time: crate::stats::Spread {
                            count: 0,
                            mean: 0.0,
                            stddev: 0.0,
                            min: 0,
                            max: 0,
                        },
                    });
                    times.push(crate::stats::SpreadAcc::default());
                    groups.len() - 1
                })
            });
            if let Some(k) = group {
                times[k].push(st.duration_ns());
            }
            group_of.push(group);
        }
        let analysis = match cache.get_or_insert_with(StepKey(Arc::clone(&g)), || {
            trace.work.add(g.num_ops() as u64);
            Ok::<_, std::convert::Infallible>(analyse_step_graph(&g))
        }) {
            Ok(a) => a,
            // Only a re-entrant request can fail here, and the computation above never asks
            // the cache: analyse without it should that ever change.
            Err(_) => Arc::new(analyse_step_graph(&g)),
        };
        drop(g);
        let (changed, diff) = match &prev {
            _ if partial => (false, None),
            None => (false, None),
            Some((pidx, pfp, pi)) => {
                if *pfp == fp {
                    (false, None)
                } else {
                    // Both steps in full canonical form only here, to name the difference.
                    let pcanon = canonical_ops(trace, trace.step_ops(*pi));
                    let canon = canonical_ops(trace, ops);
                    trace.work.add((pcanon.len() + canon.len()) as u64);
                    let d =
                        first_difference(trace, &pcanon, &canon).map(|(op_index, what)| StepDiff {
                            against_step: *pidx,
                            op_index,
                            before: pcanon.get(op_index).map(|c| describe(trace, c)),
                            after: canon.get(op_index).map(|c| describe(trace, c)),
                            what,
                        });
                    (true, d)
                }
            }
        };
        steps.push(StepGraph {
            step: st.index,
            fingerprint: fp.to_string(),
            ops: ops.len(),
            duration_ns: st.duration_ns(),
            changed,
            partial,
            diff,
            analysis,
        });
        prev = Some((st.index, fp, i));
    }
    for (g, t) in groups.iter_mut().zip(&times) {
        if let Some(sp) = t.finish() {
            g.step_time = sp;
        }
    }
    let (groups, pattern, stable_from_step, verdict) = verdict_of(&steps, &group_of, groups);
    Ok(GraphReport {
        distinct_graphs: distinct.len(),
        stable_from_step,
        cache: cache.stats().into(),
        no_op_steps: group_of.iter().filter(|g| g.is_none()).count(),
        groups,
        pattern,
        verdict,
        steps,
    })
}

#[cfg(test)]
mod step_key_tests {
    use std::sync::Arc;

    use ad_cache::{Cache, CacheKey};
    use graph_core::{Graph, GraphBuilder, Role};

    use super::{StepGraphAnalysis, StepKey, StepOp};

    /// A two-op step graph: a load of `shape`, then a relu of it.
    fn step(shape: &[u64]) -> StepKey {
        let op = |name: &str, input: Option<&[u64]>| {
            StepOp::new(
                name.into(),
                shape.into(),
                "f32".into(),
                input
                    .map(|s| vec![(Arc::<[u64]>::from(s), Arc::<str>::from("f32"))])
                    .unwrap_or_default()
                    .into(),
            )
        };
        let mut b = GraphBuilder::new();
        let x = b.add_input(0);
        let (_, y) = b.add_op1(op("load", None), &[x.into()], Role::Primary);
        let (_, z) = b.add_op1(op("relu", Some(shape)), &[y.into()], Role::Primary);
        b.set_outputs(&[z]);
        let g: Graph<StepOp> = b.build().expect("a valid step graph");
        StepKey(Arc::new(g))
    }

    fn analysis() -> StepGraphAnalysis {
        StepGraphAnalysis {
            ops: 2,
            values: 3,
            inputs: 1,
            outputs: 1,
            depth: 2,
            op_counts: Vec::new(),
        }
    }

    #[test]
    fn a_step_graph_that_differs_in_one_shape_is_explained_by_that_shape() {
        let (k1, k2) = (step(&[2, 3]), step(&[2, 4]));
        assert_eq!(k1.kind_label(), "step-graph");
        let d = k2.difference(&k1).expect("the shapes differ");
        assert_eq!(d.agree, 1, "the input agrees, operation 0 does not");
        assert!(d.what.starts_with("operation 0: "), "{}", d.what);
        assert!(
            d.what.contains("shape: [2, 4]") && d.what.contains("shape: [2, 3]"),
            "{}",
            d.what
        );
        assert_eq!(step(&[2, 3]).difference(&k1), None, "an equal step graph");

        // Through the cache: step 2 misses and is explained against step 1.
        let cache: Cache<StepKey, StepGraphAnalysis> = Cache::new();
        cache.insert(k1, analysis());
        let e = cache.explain(&k2).expect("a miss");
        assert_eq!(e.kind, "step-graph");
        assert_eq!(e.compared, 1);
        assert_eq!(e.closest, Some(d));
    }
}
