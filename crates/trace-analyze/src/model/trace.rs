//! The loaded trace: compact, interned records of spans, ops, tensors, memory and steps.
//!
//! [`Trace`] is what every analysis reads. It is built once by the loader
//! ([`load_path`](crate::load_path) and its siblings) from a JSONL trace, keeps per-event
//! state small (names, devices and shapes are interned; ids are integers) and records where
//! each step begins so analyses can group by step without searching.

use crate::model::intern::FastMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use trace_record::schema::{
    ExecStep, GradientState, MemoryCategory, Outcome, SpanKind, TimingMode,
};

use crate::model::intern::{Interner, ShapeId, ShapeInterner, Sym};

/// Run metadata from the trace header.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    /// The schema name from the header.
    pub schema: String,
    /// The schema version from the header.
    pub version: u32,
    /// The run id.
    pub run_id: String,
    /// What was run (e.g. `train_mlp`).
    pub entrypoint: String,
    /// `train` or `infer`.
    pub phase: String,
    /// The device the run asked for (`cpu`, `cuda:0`, ...).
    pub device: String,
    /// How durations were measured.
    pub timing: TimingMode,
    /// Wall-clock start of the session, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// This process's rank in a distributed run, when the header names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The number of processes of the distributed run, when the header names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    /// User tags, sorted by key.
    pub tags: Vec<(String, String)>,
}

/// How a loaded trace ends: the outcome its trailer states, or truncated when it has no
/// trailer. The outcome itself is trace-record's wire type; only "no trailer" is the
/// reader's own finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceEnd {
    /// The trailer's outcome (complete, failed with a reason, or dropped without finish).
    Trailer(Outcome),
    /// There is no trailer: the file was truncated (crash, kill -9) and was read up to its
    /// last complete line.
    Truncated,
}

impl TraceEnd {
    /// `complete`, `failed`, `incomplete` or `truncated`.
    pub fn kind_str(&self) -> &'static str {
        match self {
            TraceEnd::Trailer(o) => o.kind().as_str(),
            TraceEnd::Truncated => "truncated",
        }
    }

    /// The ending in words, for people: `complete`, `failed: REASON`,
    /// `incomplete: session dropped without finish`, `incomplete: truncated, no trailer`.
    pub fn describe(&self) -> String {
        match self {
            TraceEnd::Trailer(Outcome::Complete) => "complete".into(),
            TraceEnd::Trailer(Outcome::Failed { reason }) => format!("failed: {reason}"),
            TraceEnd::Trailer(Outcome::Incomplete) => {
                "incomplete: session dropped without finish".into()
            }
            TraceEnd::Truncated => "incomplete: truncated, no trailer".into(),
        }
    }
}

/// Serialized as `{"kind":"complete"}`, `{"kind":"failed","reason":"..."}`, ... (the
/// `outcome` object of the CLI's JSON).
impl Serialize for TraceEnd {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let reason = match self {
            TraceEnd::Trailer(Outcome::Failed { reason }) => Some(reason),
            _ => None,
        };
        let mut m = s.serialize_map(Some(1 + usize::from(reason.is_some())))?;
        m.serialize_entry("kind", self.kind_str())?;
        if let Some(r) = reason {
            m.serialize_entry("reason", r)?;
        }
        m.end()
    }
}

/// A span as loaded: one timed region with a parent.
#[derive(Debug, Clone)]
pub struct Span {
    /// The id written in the trace.
    pub id: u64,
    /// The index (in [`Trace::spans`]) of the parent span, when it is known.
    pub parent: Option<u32>,
    /// The span's name.
    pub name: Sym,
    /// What kind of region.
    pub kind: SpanKind,
    /// The training phase, as recorded on this span or inherited from its nearest ancestor
    /// that has one.
    pub exec_step: Option<ExecStep>,
    /// The recording thread.
    pub thread: u64,
    /// Start, ns since session start.
    pub start_ns: u64,
    /// End, ns since session start; `None` when the span was never closed.
    pub end_ns: Option<u64>,
    /// The index (in [`Trace::steps`]) of the step the span started in.
    pub step: Option<u32>,
    /// The line of its `span_start`.
    pub line: u64,
}

impl Span {
    /// The duration, when the span was closed.
    pub fn duration_ns(&self) -> Option<u64> {
        self.end_ns.map(|e| e.saturating_sub(self.start_ns))
    }
}

/// An op as loaded.
#[derive(Debug, Clone)]
pub struct Op {
    /// The op name (`matmul`, `relu`, ...).
    pub name: Sym,
    /// The index (in [`Trace::spans`]) of the enclosing span, when known.
    pub span: Option<u32>,
    /// The recording thread (the span's thread, else 0).
    pub thread: u64,
    /// Start, ns since session start.
    pub start_ns: u64,
    /// Duration in ns (host or device time, see [`RunInfo::timing`]).
    pub dur_ns: u64,
    /// The output shape.
    pub shape: ShapeId,
    /// The output dtype label.
    pub dtype: Sym,
    /// The device label.
    pub device: Sym,
    /// Logical bytes of the inputs.
    pub input_bytes: u64,
    /// Logical bytes of the outputs.
    pub output_bytes: u64,
    /// The input tensor ids, a range of [`Trace::tensor_refs`].
    pub inputs: (u32, u32),
    /// The output tensor ids, a range of [`Trace::tensor_refs`].
    pub outputs: (u32, u32),
    /// The index (in [`Trace::steps`]) of the step this op ran in.
    pub step: Option<u32>,
    /// The training phase of the enclosing span.
    pub exec_step: Option<ExecStep>,
    /// Floating-point operations, when the recorder reported them.
    pub flops: Option<u64>,
    /// Every input's shape and dtype when the op line recorded them (`in_shapes`), a range
    /// of [`Trace::input_meta`]; empty when unknown.
    pub input_meta: (u32, u32),
    /// The op is its span's own op: an op that became a span ([`Op::span`] is a span of kind
    /// `op` with the op's name and start, and the op line is recorded inside it). Such an op
    /// and its span are one region: its self time is the span's (time not covered by child
    /// spans or by the other ops in it), and exports draw it once, as the span.
    pub is_span: bool,
}

/// One `gradient` fact as loaded.
#[derive(Debug, Clone, Copy)]
pub struct GradEvent {
    /// The parameter's name.
    pub param: Sym,
    /// Present, missing, zero or non_finite.
    pub state: GradientState,
    /// The L2 norm, when recorded.
    pub norm: Option<f64>,
    /// When, ns since session start.
    pub t_ns: u64,
    /// The index (in [`Trace::steps`]) of the step it was recorded in.
    pub step: Option<u32>,
}

/// One `counter` value as loaded.
#[derive(Debug, Clone, Copy)]
pub struct CounterSample {
    /// The counter's name.
    pub name: Sym,
    /// The value (NaN when written as `null`).
    pub value: f64,
    /// When, ns since session start.
    pub t_ns: u64,
    /// The index (in [`Trace::steps`]) of the step it was recorded in, as for ops.
    pub step: Option<u32>,
}

/// A tensor the autograd graph kept alive at backward, as recorded by trace-candle
/// (`tensor` events labelled [`AUTOGRAD_LABEL`]), in record (execution) order.
#[derive(Debug, Clone, Copy)]
pub struct AutogradNode {
    /// The index (in [`Trace::steps`]) of the step it was recorded in.
    pub step: Option<u32>,
    /// Its shape.
    pub shape: ShapeId,
    /// Its dtype.
    pub dtype: Sym,
    /// Its logical bytes.
    pub bytes: u64,
}

/// The label trace-candle gives the `tensor` events of the autograd graph's tensors.
pub use trace_record::schema::AUTOGRAD_LABEL;

/// A memory event as loaded (logical bytes).
#[derive(Debug, Clone, Copy)]
pub struct MemEvent {
    /// Time, ns since session start.
    pub t_ns: u64,
    /// The storage id (the allocation's identity).
    pub storage: u64,
    /// The tensor id, when recorded.
    pub tensor: Option<u64>,
    /// Logical bytes.
    pub bytes: u64,
    /// The device label.
    pub device: Sym,
    /// The category.
    pub category: MemoryCategory,
    /// True for an allocation, false for a free.
    pub alloc: bool,
    /// The index (in [`Trace::spans`]) of the span it happened in, when known.
    pub span: Option<u32>,
}

/// A physical device memory sample (as reported by the device, never mixed with logical bytes).
#[derive(Debug, Clone, Copy)]
pub struct PhysSample {
    /// Time, ns since session start.
    pub t_ns: u64,
    /// The device label.
    pub device: Sym,
    /// Bytes in use, when reported.
    pub used: Option<u64>,
    /// Bytes free, when reported.
    pub free: Option<u64>,
    /// Bytes reserved by a caching allocator, when reported.
    pub reserved: Option<u64>,
}

/// A step boundary: step `index` begins at `start_ns`.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// The step index as recorded.
    pub index: u64,
    /// When the step began, ns since session start.
    pub start_ns: u64,
    /// When the step ended: the next boundary, or the last event time seen in it.
    pub end_ns: u64,
    /// The ops of this step: a range of [`Trace::ops`] in load order.
    pub ops: (u32, u32),
}

impl Step {
    /// The step's wall duration.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// Tensor metadata from `tensor` events.
#[derive(Debug, Clone, Copy)]
pub struct TensorInfo {
    /// The shape.
    pub shape: ShapeId,
    /// The user label, when recorded.
    pub label: Option<Sym>,
}

/// Tensor metadata by tensor id ([`Trace::tensors`]).
///
/// Recorders number tensors 1, 2, 3, ...: ids below a bound held in a vector (no hashing,
/// 12 bytes a tensor), the others (sparse or structured ids such as `i << 40`) in a hash map.
/// The vector only grows to cover an id when that keeps it within twice the number of
/// tensors held (plus a constant), so memory stays linear in the tensors whatever the ids.
#[derive(Debug, Clone, Default)]
pub struct TensorTable {
    dense: Vec<Option<TensorInfo>>,
    /// Never holds `None` once a call returns (every slot handed out is filled).
    sparse: FastMap<u64, Option<TensorInfo>>,
    len: usize,
}

/// Ids the dense part of a [`TensorTable`] may cover beyond twice its tensors.
const DENSE_SLACK: u64 = 4096;

impl TensorTable {
    /// The metadata of tensor `id`, when a `tensor` event (or an op's `in_shapes`) gave it.
    pub fn get(&self, id: &u64) -> Option<&TensorInfo> {
        match usize::try_from(*id).ok().and_then(|i| self.dense.get(i)) {
            Some(slot) => slot.as_ref(),
            None => self.sparse.get(id).and_then(Option::as_ref),
        }
    }

    /// Tensors held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No tensor is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the metadata of tensor `id` (replacing what was there).
    pub(crate) fn insert(&mut self, id: u64, info: TensorInfo) {
        *self.slot(id) = Some(info);
    }

    /// Sets the metadata of tensor `id` unless it has some.
    pub(crate) fn insert_if_absent(&mut self, id: u64, info: TensorInfo) {
        let slot = self.slot(id);
        if slot.is_none() {
            *slot = Some(info);
        }
    }

    /// The place of tensor `id`: in the vector when it covers `id` (grown to when that keeps
    /// it linear), else in the map (then a `None` entry is made, and filled by the caller).
    fn slot(&mut self, id: u64) -> &mut Option<TensorInfo> {
        let covered = self.dense.len() as u64;
        let bound = 2 * self.len as u64 + DENSE_SLACK;
        if id >= covered && id < bound {
            self.grow_dense(id);
        }
        if let Some(i) = usize::try_from(id).ok().filter(|&i| i < self.dense.len()) {
            let slot = &mut self.dense[i];
            if slot.is_none() {
                self.len += 1;
            }
            return slot;
        }
        let slot = self.sparse.entry(id).or_insert(None);
        if slot.is_none() {
            self.len += 1;
        }
        slot
    }

    /// Makes the vector cover `id` (at least doubling it), moving the map's entries it now
    /// covers into it.
    fn grow_dense(&mut self, id: u64) {
        let Ok(want) = usize::try_from(id.saturating_add(1)) else {
            return;
        };
        let new_len = want.max(2 * self.dense.len()).max(64);
        self.dense.resize(new_len, None);
        if !self.sparse.is_empty() {
            let dense = &mut self.dense;
            self.sparse.retain(|&k, v| match usize::try_from(k) {
                Ok(i) if i < dense.len() => {
                    dense[i] = *v;
                    false
                }
                _ => true,
            });
        }
    }
}

/// Event counts by type, as read, plus the lines of unknown type that were skipped.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReadCounts {
    /// Events read, by type (serialized flat: `span_start`, `span_end`, `op`, ...).
    #[serde(flatten)]
    pub by_type: trace_record::schema::EventCounts,
    /// Lines of an unknown event type that were skipped (lenient reading).
    pub unknown: u64,
}

impl ReadCounts {
    /// All events counted, unknown lines included.
    pub fn total(&self) -> u64 {
        self.by_type.total() + self.unknown
    }
}

/// Gradient facts by state.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct GradientCounts {
    /// Finite, non-zero gradients.
    pub present: u64,
    /// Parameters without a gradient.
    pub missing: u64,
    /// Gradients that are exactly zero.
    pub zero: u64,
    /// Gradients with NaN or infinite entries.
    pub non_finite: u64,
}

/// A counter of the work done: events read plus the iterations of every analysis loop (a sort
/// of `n` items counts `n·⌈log2 n⌉`). A test can assert that the work grows linearly with
/// the trace without timing anything.
#[derive(Debug, Default)]
pub struct WorkCounter(AtomicU64);

impl WorkCounter {
    /// Adds `n` units.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds the cost of sorting `n` items.
    pub fn add_sort(&self, n: usize) {
        let n = n as u64;
        let log = 64 - u64::from(n.max(1).leading_zeros());
        self.add(n * log.max(1));
    }

    /// The units counted so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Clone for WorkCounter {
    fn clone(&self) -> Self {
        WorkCounter(AtomicU64::new(self.get()))
    }
}

/// A loaded trace: the model every analysis reads.
#[derive(Debug, Clone)]
pub struct Trace {
    /// Where the trace came from (the path as given, or a name for in-memory input).
    pub source: String,
    /// Header metadata.
    pub run: RunInfo,
    /// How the run ended.
    pub outcome: TraceEnd,
    /// Counts per event type from the trailer, when there is one.
    pub trailer_counts: Option<trace_record::schema::EventCounts>,
    /// Events the recorder said it dropped (from the trailer; 0 without one).
    pub dropped: u64,
    /// Event counts as read.
    pub counts: ReadCounts,
    /// Gradient facts by state.
    pub gradients: GradientCounts,
    /// Lines read (including header and trailer).
    pub lines: u64,
    /// A partial last line was found and ignored.
    pub partial_last_line: bool,
    /// The `dump` line when the trace is a flight-recorder dump: its trigger, evidence and
    /// steps.
    pub dump: Option<trace_record::schema::DumpRecord>,
    /// Structural issues from validation.
    pub issues: Vec<trace_record::Issue>,
    /// Interned strings (names, devices, dtypes, labels).
    pub(crate) strings: Interner,
    /// Interned shapes.
    pub(crate) shapes: ShapeInterner,
    /// Spans in the order their `span_start` was read.
    pub spans: Vec<Span>,
    /// Ops in the order they were read.
    pub ops: Vec<Op>,
    /// Flat storage of op input and output tensor ids.
    pub tensor_refs: Vec<u64>,
    /// Tensor metadata by tensor id.
    pub tensors: TensorTable,
    /// Memory events in time order (stable: events stamped alike in the order they were
    /// read).
    pub memory: Vec<MemEvent>,
    /// Physical device memory samples.
    pub physical: Vec<PhysSample>,
    /// Steps in the order they were read, numbered and bounded by the rule every reader of a
    /// trace shares ([`trace_record::StepTracker`]; the exports draw and filter by it): events
    /// before the first `step` event form step 0 (the schema says they belong to it); a step
    /// in which nothing ran (no op, no span) at the start or the end of the trace is not a
    /// step (the boundary a loop's last `step()` opens, or its first at the top of a loop).
    /// Step `index`es are what every command shows and `export --step` takes.
    pub steps: Vec<Step>,
    /// Every input's shape and dtype of ops that recorded them (see [`Op::input_meta`]).
    pub input_meta: Vec<(ShapeId, Sym)>,
    /// `gradient` facts in the order they were read.
    pub gradient_facts: Vec<GradEvent>,
    /// `counter` values in the order they were read.
    pub counters: Vec<CounterSample>,
    /// The autograd graph's tensors per step (see [`AutogradNode`]).
    pub autograd: Vec<AutogradNode>,
    /// The input shape of each module span that recorded one (trace-candle's profiled
    /// modules write a `tensor` event labelled [`MODULE_INPUT`](trace_record::schema::MODULE_INPUT)
    /// in their span): `(span index in [`Trace::spans`], shape)`, the first input per span.
    pub module_inputs: Vec<(u32, ShapeId)>,
    /// Sampled stacks (schema version 2; empty without a sampler).
    pub sampled: crate::model::samples::SampledStacks,
    /// Tracked heap allocations (schema version 2; empty without a tracking allocator).
    pub heap: crate::model::heap_log::HeapLog,
    /// The latest time seen on any event.
    pub end_ns: u64,
    /// Work done so far (see [`WorkCounter`]).
    pub work: WorkCounter,
}

impl Trace {
    /// True when the trace has no complete trailer (truncated, or dropped without finishing).
    pub fn is_incomplete(&self) -> bool {
        matches!(
            self.outcome,
            TraceEnd::Truncated | TraceEnd::Trailer(Outcome::Incomplete)
        )
    }

    /// The last step when the trace is incomplete: the run stopped somewhere inside it, so
    /// its time and its graph are only a prefix and are not compared with whole steps.
    pub fn partial_step(&self) -> Option<&Step> {
        self.steps.last().filter(|_| self.is_incomplete())
    }

    /// The steps that ran to their end: every step but a [`Trace::partial_step`].
    pub fn complete_steps(&self) -> &[Step] {
        let n = self.steps.len() - usize::from(self.partial_step().is_some());
        &self.steps[..n]
    }

    /// The string of an interned id.
    pub fn str(&self, sym: Sym) -> &str {
        self.strings.resolve(sym)
    }

    /// The input tensor ids of `op`.
    pub fn op_inputs(&self, op: &Op) -> &[u64] {
        self.tensor_refs
            .get(op.inputs.0 as usize..op.inputs.1 as usize)
            .unwrap_or(&[])
    }

    /// The output tensor ids of `op`.
    pub fn op_outputs(&self, op: &Op) -> &[u64] {
        self.tensor_refs
            .get(op.outputs.0 as usize..op.outputs.1 as usize)
            .unwrap_or(&[])
    }

    /// Every input's `(shape, dtype)` of `op`, when recorded (empty otherwise).
    pub fn op_input_meta(&self, op: &Op) -> &[(ShapeId, Sym)] {
        self.input_meta
            .get(op.input_meta.0 as usize..op.input_meta.1 as usize)
            .unwrap_or(&[])
    }

    /// The value of the last `counter` named `name`, if any.
    pub fn counter(&self, name: &str) -> Option<f64> {
        self.counters
            .iter()
            .rev()
            .find(|c| self.str(c.name) == name)
            .map(|c| c.value)
    }

    /// The sum of every `counter` named `name` that counts something (a finite, non-negative
    /// value, its fraction dropped), saturating; `None` when there is no such counter.
    pub fn counter_total(&self, name: &str) -> Option<u64> {
        self.work.add(self.counters.len() as u64);
        self.counters
            .iter()
            .filter(|c| self.str(c.name) == name && c.value.is_finite() && c.value >= 0.0)
            .map(|c| c.value as u64)
            .reduce(u64::saturating_add)
    }

    /// The ops of step `i` (an index into [`Trace::steps`]).
    pub fn step_ops(&self, i: usize) -> &[Op] {
        match self.steps.get(i) {
            Some(s) => self
                .ops
                .get(s.ops.0 as usize..s.ops.1 as usize)
                .unwrap_or(&[]),
            None => &[],
        }
    }

    /// The span path of span `i`: names from the root joined by `/`.
    pub fn span_path(&self, i: usize) -> String {
        let mut names = Vec::new();
        let mut cur = Some(i);
        let mut guard = 0usize;
        while let Some(c) = cur {
            let Some(s) = self.spans.get(c) else { break };
            names.push(self.str(s.name));
            cur = s.parent.map(|p| p as usize);
            guard += 1;
            if guard > self.spans.len() {
                break;
            }
        }
        names.reverse();
        names.join("/")
    }

    /// The total wall time of all steps, when the trace has steps.
    pub fn step_time_ns(&self) -> Option<u64> {
        (!self.steps.is_empty()).then(|| self.steps.iter().map(Step::duration_ns).sum())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rand_xoshiro::SplitMix64;
    use rand_xoshiro::rand_core::{Rng, SeedableRng};

    use super::{ShapeId, Sym, TensorInfo, TensorTable};

    /// The table answers as a hash map does, for dense, sparse, structured and repeated ids
    /// in any order, and its vector stays linear in the tensors held.
    #[test]
    fn the_tensor_table_is_a_map() {
        let mut rng = SplitMix64::seed_from_u64(7);
        let mut table = TensorTable::default();
        let mut map: HashMap<u64, TensorInfo> = HashMap::new();
        for k in 0..200_000u64 {
            let r = rng.next_u64();
            let id = match r % 5 {
                0 => k,
                1 => k << 40,
                2 => r >> 8,
                3 => k / 2,
                _ => (r >> 32) % 100_000,
            };
            let info = TensorInfo {
                shape: ShapeId(k as u32),
                label: (r % 3 == 0).then_some(Sym(7)),
            };
            if r % 7 == 0 {
                table.insert_if_absent(id, info);
                map.entry(id).or_insert(info);
            } else {
                table.insert(id, info);
                map.insert(id, info);
            }
        }
        assert_eq!(table.len(), map.len());
        for (id, info) in &map {
            let got = table.get(id).map(|i| (i.shape, i.label));
            assert_eq!(got, Some((info.shape, info.label)), "id {id}");
        }
        for id in [u64::MAX, 1 << 63, 3 << 40 | 1] {
            assert_eq!(table.get(&id).is_some(), map.contains_key(&id));
        }
        assert!(table.dense.len() <= 4 * table.len() + 2 * 4096);
    }
}
