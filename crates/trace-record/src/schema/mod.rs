//! The trace wire schema: header, events and trailer as serde types (JSON Lines, version 2).
//!
//! A trace is a UTF-8 JSON Lines file. Line 1 is a [`Header`], the last line (when the
//! session finished or was dropped) is a [`Trailer`], and every line in between is one
//! [`Event`]. Every line is an object internally tagged by `"type"` (snake_case). Optional
//! fields are omitted when absent; ids are integers; times are integer nanoseconds since the
//! session's start (`ts`), with one wall-clock start time in the header
//! ([`RunMeta::start_unix_ns`]).
//!
//! The device of `op`, `tensor` and `memory` events is omitted on the wire when it equals the
//! header's [`RunMeta::device`]; the reader (`TraceReader`, feature `read`) fills it back in, so
//! a read event always carries its device. See `docs/trace-schema.md` for an example of every line.

use std::collections::BTreeMap;

use serde::Serialize;
#[cfg(feature = "read")]
use serde::{Deserialize, Deserializer};

mod dump;
mod vocab;
mod words;

pub use dump::{DumpEvidence, DumpRecord};
#[cfg(feature = "read")]
pub(crate) use vocab::shown;
pub use vocab::shown_up_to;
pub use vocab::{
    AllocKind, DumpTrigger, EventType, ExecStep, GradientState, MemoryCategory, OutcomeKind,
    ParseEnumError, Phase, SamplingSource, SpanKind, TimingMode,
};
pub use words::{
    AUTOGRAD_AT_FORWARD_START_COUNTER, AUTOGRAD_AT_STEP_START_COUNTER, AUTOGRAD_AT_WALK_COUNTER,
    AUTOGRAD_LABEL, AUTOGRAD_STORAGE_BYTES_COUNTER, AUTOGRAD_STORAGES_COUNTER,
    BACKWARD_WITHOUT_PARAMETERS_COUNTER, DECLARED_BUFFER_BIT, LOSS_COUNTER, MODULE_INPUT,
    MODULE_OUTPUT, OVERHEAD_COUNTER, TRACING_SPANS_COUNTER, short_source_path,
};

/// The schema name written in every header.
pub const SCHEMA_NAME: &str = "tracegraph-trace";
/// The schema version this crate writes. Readers accept this version and the one before.
///
/// Version 2 added the sampled-stack events (`frame`, `stack`, `samples`, `sampler`) and the
/// tracked-heap events (`heap_alloc`, `heap_free`, `heap_small`, `heap_account`), and later,
/// without a version change, the raw sampled stacks (`module`, `raw_stack`); a version 1
/// trace is a version 2 trace without them.
pub const SCHEMA_VERSION: u32 = 2;
/// The oldest schema version the reader accepts (`SCHEMA_VERSION - 1`).
pub const MIN_SCHEMA_VERSION: u32 = SCHEMA_VERSION.saturating_sub(1);

/// A PyTorch-style profiling schedule, advanced by `TraceSession::step`.
///
/// Steps count from 0. The first `skip_first` steps are skipped; then cycles of `wait`
/// idle steps, `warmup` steps (not written) and `active` recorded steps repeat `repeat`
/// times (`0` = forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct Schedule {
    /// Steps skipped once at the very start.
    #[serde(default)]
    pub skip_first: u64,
    /// Idle steps at the start of each cycle.
    #[serde(default)]
    pub wait: u64,
    /// Warm-up steps after `wait` (instrumentation runs, nothing is written).
    #[serde(default)]
    pub warmup: u64,
    /// Recorded steps at the end of each cycle.
    pub active: u64,
    /// Number of cycles; `0` repeats forever.
    #[serde(default)]
    pub repeat: u64,
}

/// Run metadata written in the header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct RunMeta {
    /// A unique id for this run.
    pub run_id: String,
    /// The program entry point being profiled (e.g. `examples/mlp::train`).
    pub entrypoint: String,
    /// Training or inference.
    pub phase: Phase,
    /// The run's device (e.g. `cpu`, `cuda:0`); the default device of events.
    pub device: String,
    /// How durations were measured.
    pub timing: TimingMode,
    /// Wall-clock start time, nanoseconds since the Unix epoch (the origin of every `ts`).
    pub start_unix_ns: u64,
    /// The recording process id.
    pub pid: u32,
    /// This process's rank in a distributed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The number of processes in a distributed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    /// The schedule deciding which steps are recorded; absent means every step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// User tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Library versions (`trace-record`, `candle-core`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versions: BTreeMap<String, String>,
}

/// Line 1 of every trace: `{"type":"header","schema":...,"version":1,"run":{...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct Header {
    /// Always [`SCHEMA_NAME`].
    pub schema: String,
    /// The schema version ([`SCHEMA_VERSION`] when written by this crate).
    pub version: u32,
    /// The run's metadata.
    pub run: RunMeta,
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// `finish()` was called and every event was written.
    Complete,
    /// The session failed (e.g. an I/O error); events after the failure were dropped.
    Failed {
        /// What went wrong.
        reason: String,
    },
    /// The session was dropped without `finish()`.
    Incomplete,
}

impl Outcome {
    /// The outcome without its reason.
    pub const fn kind(&self) -> OutcomeKind {
        match self {
            Outcome::Complete => OutcomeKind::Complete,
            Outcome::Failed { .. } => OutcomeKind::Failed,
            Outcome::Incomplete => OutcomeKind::Incomplete,
        }
    }

    /// The wire name of the outcome (`complete`, `failed`, `incomplete`).
    pub const fn as_str(&self) -> &'static str {
        self.kind().as_str()
    }
}

/// Number of events, by type: the trailer's counts, and a counter usable by any reader.
///
/// ```
/// use trace_record::schema::{EventCounts, EventType};
/// let mut counts = EventCounts::default();
/// counts[EventType::Op] += 2;
/// counts.add(EventType::Step, 1);
/// counts += EventCounts { op: 1, ..EventCounts::default() };
/// assert_eq!((counts.op, counts[EventType::Step], counts.total()), (3, 1, 4));
/// assert_eq!(counts.iter().filter(|&(_, n)| n > 0).count(), 2);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
#[serde(default)]
pub struct EventCounts {
    /// `span_start` events.
    pub span_start: u64,
    /// `span_end` events.
    pub span_end: u64,
    /// `op` events.
    pub op: u64,
    /// `tensor` events.
    pub tensor: u64,
    /// `memory` events.
    pub memory: u64,
    /// `device_memory` events.
    pub device_memory: u64,
    /// `gradient` events.
    pub gradient: u64,
    /// `step` events.
    pub step: u64,
    /// `marker` events.
    pub marker: u64,
    /// `counter` events.
    pub counter: u64,
    /// `frame` events (version 2; omitted from a trailer when zero).
    #[serde(skip_serializing_if = "is_zero")]
    pub frame: u64,
    /// `stack` events (version 2; omitted from a trailer when zero).
    #[serde(skip_serializing_if = "is_zero")]
    pub stack: u64,
    /// `samples` events (version 2; omitted from a trailer when zero).
    #[serde(skip_serializing_if = "is_zero")]
    pub samples: u64,
    /// `sampler` events (version 2; omitted from a trailer when zero).
    #[serde(skip_serializing_if = "is_zero")]
    pub sampler: u64,
    /// `heap_alloc` events (version 2; omitted from a trailer when zero).
    #[serde(skip_serializing_if = "is_zero")]
    pub heap_alloc: u64,
    /// `heap_free` events (version 2; omitted from a trailer when zero).
    #[serde(skip_serializing_if = "is_zero")]
    pub heap_free: u64,
    /// `heap_small` events (version 2; omitted from a trailer when zero).
    #[serde(skip_serializing_if = "is_zero")]
    pub heap_small: u64,
    /// `heap_account` events (version 2; omitted from a trailer when zero).
    #[serde(skip_serializing_if = "is_zero")]
    pub heap_account: u64,
    /// `module` events (version 2; omitted from a trailer when zero).
    #[serde(skip_serializing_if = "is_zero")]
    pub module: u64,
    /// `raw_stack` events (version 2; omitted from a trailer when zero).
    #[serde(skip_serializing_if = "is_zero")]
    pub raw_stack: u64,
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl EventCounts {
    /// The sum over every type (saturating: a trailer read from a file may hold any counts).
    pub fn total(&self) -> u64 {
        self.iter().fold(0, |sum, (_, n)| sum.saturating_add(n))
    }

    /// Adds `n` events of type `ty`.
    #[inline]
    pub fn add(&mut self, ty: EventType, n: u64) {
        self[ty] += n;
    }

    /// The count for one type.
    #[inline]
    pub fn get(&self, ty: EventType) -> u64 {
        self[ty]
    }

    /// Every type with its count, in [`EventType::ALL`] order (zeros included).
    pub fn iter(&self) -> impl Iterator<Item = (EventType, u64)> + '_ {
        EventType::ALL.into_iter().map(|ty| (ty, self[ty]))
    }
}

impl std::ops::Index<EventType> for EventCounts {
    type Output = u64;

    #[inline]
    fn index(&self, ty: EventType) -> &u64 {
        match ty {
            EventType::SpanStart => &self.span_start,
            EventType::SpanEnd => &self.span_end,
            EventType::Op => &self.op,
            EventType::Tensor => &self.tensor,
            EventType::Memory => &self.memory,
            EventType::DeviceMemory => &self.device_memory,
            EventType::Gradient => &self.gradient,
            EventType::Step => &self.step,
            EventType::Marker => &self.marker,
            EventType::Counter => &self.counter,
            EventType::Frame => &self.frame,
            EventType::Stack => &self.stack,
            EventType::Samples => &self.samples,
            EventType::Sampler => &self.sampler,
            EventType::HeapAlloc => &self.heap_alloc,
            EventType::HeapFree => &self.heap_free,
            EventType::HeapSmall => &self.heap_small,
            EventType::HeapAccount => &self.heap_account,
            EventType::Module => &self.module,
            EventType::RawStack => &self.raw_stack,
        }
    }
}

impl std::ops::IndexMut<EventType> for EventCounts {
    #[inline]
    fn index_mut(&mut self, ty: EventType) -> &mut u64 {
        match ty {
            EventType::SpanStart => &mut self.span_start,
            EventType::SpanEnd => &mut self.span_end,
            EventType::Op => &mut self.op,
            EventType::Tensor => &mut self.tensor,
            EventType::Memory => &mut self.memory,
            EventType::DeviceMemory => &mut self.device_memory,
            EventType::Gradient => &mut self.gradient,
            EventType::Step => &mut self.step,
            EventType::Marker => &mut self.marker,
            EventType::Counter => &mut self.counter,
            EventType::Frame => &mut self.frame,
            EventType::Stack => &mut self.stack,
            EventType::Samples => &mut self.samples,
            EventType::Sampler => &mut self.sampler,
            EventType::HeapAlloc => &mut self.heap_alloc,
            EventType::HeapFree => &mut self.heap_free,
            EventType::HeapSmall => &mut self.heap_small,
            EventType::HeapAccount => &mut self.heap_account,
            EventType::Module => &mut self.module,
            EventType::RawStack => &mut self.raw_stack,
        }
    }
}

impl std::ops::AddAssign for EventCounts {
    /// Adds every type's count.
    fn add_assign(&mut self, other: EventCounts) {
        for ty in EventType::ALL {
            self[ty] += other[ty];
        }
    }
}

/// The last line of a finished (or dropped) session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct Trailer {
    /// How the session ended (flattened: `"outcome":"failed","reason":"..."`).
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Events written, by type.
    pub counts: EventCounts,
    /// Events recorded but not written (after an I/O error).
    pub dropped: u64,
    /// When the session ended, ns since its start.
    pub ts: u64,
}

/// `span_start`: a span opened on a thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct SpanStart {
    /// The span's id, unique in the trace.
    pub id: u64,
    /// The enclosing span on the same thread, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
    /// The span's name.
    pub name: String,
    /// What the span stands for.
    pub kind: SpanKind,
    /// The training step the span belongs to, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<ExecStep>,
    /// A small integer identifying the recording thread.
    pub thread: u64,
    /// Start time, ns since the session's start.
    pub ts: u64,
}

/// `span_end`: a span closed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct SpanEnd {
    /// The span's id.
    pub id: u64,
    /// End time, ns since the session's start.
    pub ts: u64,
}

/// `op`: one executed tensor operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct OpEvent {
    /// The span the op ran in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<u64>,
    /// The op's name (`matmul`, `add`, ...).
    pub name: String,
    /// Input tensor ids.
    #[serde(rename = "in", default)]
    pub inputs: Vec<u64>,
    /// Output tensor ids.
    #[serde(rename = "out", default)]
    pub outputs: Vec<u64>,
    /// The (first) output's shape.
    #[serde(default)]
    pub shape: Vec<usize>,
    /// The output's dtype (`f32`, ...).
    pub dtype: String,
    /// The device (wire key `dev`; omitted when it is the header's device).
    #[serde(rename = "dev", default, skip_serializing_if = "String::is_empty")]
    pub device: String,
    /// Start time, ns since the session's start.
    pub ts: u64,
    /// Duration in ns (see the header's timing mode).
    pub dur: u64,
    /// Logical bytes of the inputs (shape × dtype size).
    #[serde(rename = "in_b", default)]
    pub in_bytes: u64,
    /// Logical bytes of the outputs. Omitted on the wire when it equals
    /// `shape` × [`dtype_size`]`(dtype)`; the reader (`TraceReader`) fills it back in (plain serde
    /// leaves [`OUT_BYTES_UNSET`] there).
    #[serde(rename = "out_b", default = "out_bytes_unset")]
    pub out_bytes: u64,
    /// What the output memory holds, when known.
    #[serde(rename = "cat", default, skip_serializing_if = "Option::is_none")]
    pub category: Option<MemoryCategory>,
    /// Estimated floating-point operations, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops: Option<u64>,
    /// Every input's shape, in the order of `inputs`, when recorded (absent: unknown; an
    /// optional field added in version 1, so older traces of that version lack it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_shapes: Option<Vec<Vec<usize>>>,
    /// Every input's dtype, in the order of `inputs`. Omitted on the wire when every input
    /// has the op's `dtype`; the reader (`TraceReader`) fills it back in whenever `in_shapes` is
    /// present (plain serde leaves it `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_dtypes: Option<Vec<String>>,
}

impl OpEvent {
    /// Whether this op line is the own op of the span it was recorded in, given that span's
    /// kind, name and start: an op that became a span (trace-candle's `Capture::op` around a
    /// closure that recorded something nested) is written inside a span of kind `op` with its
    /// name and its start. Op and span are then one region, read and drawn once; readers let
    /// the first such line of a span claim it (another is an op inside it).
    pub fn is_own_op_of(&self, span_kind: SpanKind, span_name: &str, span_start: u64) -> bool {
        span_kind == SpanKind::Op && self.ts == span_start && self.name == span_name
    }
}

/// `tensor`: a tensor's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct TensorEvent {
    /// The tensor's id (never a reused address).
    pub id: u64,
    /// A label (parameter name, `input`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The shape.
    #[serde(default)]
    pub shape: Vec<usize>,
    /// The dtype.
    pub dtype: String,
    /// The device (wire key `dev`; omitted when it is the header's device).
    #[serde(rename = "dev", default, skip_serializing_if = "String::is_empty")]
    pub device: String,
    /// Whether the tensor tracks gradients (wire key `grad`).
    #[serde(rename = "grad", default)]
    pub requires_grad: bool,
    /// Logical bytes (shape × dtype size).
    pub bytes: u64,
    /// What the tensor holds.
    #[serde(rename = "cat")]
    pub category: MemoryCategory,
    /// The span it was recorded in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<u64>,
}

/// `memory`: a storage allocation or free.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct MemoryEvent {
    /// Allocation or free (wire key `action`).
    #[serde(rename = "action")]
    pub kind: AllocKind,
    /// The storage's id (never a reused address).
    pub storage: u64,
    /// The tensor owning the storage.
    pub tensor: u64,
    /// Bytes allocated or freed.
    pub bytes: u64,
    /// The device (wire key `dev`; omitted when it is the header's device).
    #[serde(rename = "dev", default, skip_serializing_if = "String::is_empty")]
    pub device: String,
    /// What the memory holds.
    #[serde(rename = "cat")]
    pub category: MemoryCategory,
    /// The span it happened in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<u64>,
    /// When, ns since the session's start.
    pub ts: u64,
}

/// `device_memory`: a physical device-memory sample (each figure optional: absent = unknown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct DeviceMemoryEvent {
    /// The device sampled.
    #[serde(rename = "dev")]
    pub device: String,
    /// Bytes in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<u64>,
    /// Bytes free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free: Option<u64>,
    /// Bytes reserved by a caching allocator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<u64>,
    /// When, ns since the session's start.
    pub ts: u64,
}

/// `gradient`: what was found for one parameter's gradient.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct GradientEvent {
    /// The parameter's name.
    pub param: String,
    /// Present, missing, zero or non-finite.
    pub state: GradientState,
    /// The gradient's L2 norm, when computed and finite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub norm: Option<f64>,
    /// When, ns since the session's start.
    pub ts: u64,
}

/// `step`: a step boundary; events after it belong to step `index`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct StepEvent {
    /// The step now starting (0-based).
    pub index: u64,
    /// When, ns since the session's start.
    pub ts: u64,
}

/// `marker`: a user-defined instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct MarkerEvent {
    /// The marker's name.
    pub name: String,
    /// The span it was recorded in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<u64>,
    /// When, ns since the session's start.
    pub ts: u64,
}

/// `counter`: a user-defined value at an instant.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct CounterEvent {
    /// The counter's name.
    pub name: String,
    /// The value; a non-finite value is written as `null` and read back as NaN.
    #[serde(deserialize_with = "f64_or_null")]
    pub value: f64,
    /// When, ns since the session's start.
    pub ts: u64,
}

/// `frame` (version 2): one interned frame of sampled call stacks, symbolized and demangled.
///
/// A frame is a function at a place in the code; a function inlined into its caller is a
/// frame of its own (`inlined`), so a stack names every function the debug information knows
/// of, not only those with a machine frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct FrameEvent {
    /// The frame's id, unique in the trace; `stack` events name it.
    pub id: u64,
    /// The demangled function name without its hash (`candle_core::tensor::Tensor::matmul`);
    /// `[unknown]` when the address could not be symbolized.
    pub func: String,
    /// The source file, when the debug information has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Whether this function was inlined into the next frame out (its caller).
    #[serde(default, skip_serializing_if = "is_false")]
    pub inlined: bool,
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_false(b: &bool) -> bool {
    !*b
}

/// `stack` (version 2): one interned call stack of `frame` ids, outermost (the thread's
/// entry) first, innermost (where the sample landed) last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct StackEvent {
    /// The stack's id, unique in the trace; `samples` events name it.
    pub id: u64,
    /// Frame ids, outermost first.
    pub frames: Vec<u64>,
}

/// `module` (version 2): one executable or shared object that raw sampled stacks
/// (`raw_stack`) point into, as it was loaded in the recording process: what a reader needs to
/// symbolize their addresses from the file on disk when the trace has no `stack` line for them
/// (a run killed before its sampler stopped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct ModuleEvent {
    /// The module's id, unique in the trace; `raw_stack` frames name it.
    pub id: u64,
    /// The file's path as the process mapped it (`/proc/self/maps`).
    pub path: String,
    /// The file's GNU build id (the `NT_GNU_BUILD_ID` note), lowercase hex, when it has one: a
    /// reader symbolizes from the file at `path` only when its build id is this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
    /// The load bias: what was added to the file's virtual addresses when it was loaded (0 for
    /// a non-relocatable executable). A sampled address less the bias is the file address a
    /// `raw_stack` frame records.
    pub base: u64,
    /// Bytes of address space the module's mappings span, from its lowest mapping.
    pub size: u64,
}

/// `raw_stack` (version 2): one sampled call stack as addresses, before symbolization: written
/// by the sampler while it samples (when it first sees the stack), under the id its `samples`
/// lines name and its `stack` line (written when sampling stops, if it does) defines too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct RawStackEvent {
    /// The stack's id: a `samples` line's `stack`; the `stack` line resolved from it, if any,
    /// has the same id.
    pub id: u64,
    /// The frames, innermost (where the sample landed) first, as the sampler's unwinder read
    /// them, beginning inside the sampler's signal handler: each `[module, address]`, the
    /// `module` line's id and the file address (the sampled address less the module's
    /// `base`; module 0 with the raw address when no module holds it). Every address but the
    /// one the signal interrupted is a return address.
    pub frames: Vec<[u64; 2]>,
}

/// `samples` (version 2): `n` CPU samples that landed in one stack, on one thread, in one
/// recorded step (and phase and span, when known). Sample counts are estimates of where CPU
/// time went, not measured durations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct SamplesEvent {
    /// The recorded step the samples were taken in.
    pub step: u64,
    /// The sampled thread (the operating system's thread id).
    pub thread: u64,
    /// The stack (a `stack` id).
    pub stack: u64,
    /// Number of samples.
    pub n: u64,
    /// The execution step the program was in, when the capture knew it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ExecStep>,
    /// The innermost open span the capture knew of, when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<u64>,
}

/// `sampler` (version 2): the sampler's account of one recorded step. `taken` equals the sum
/// of `n` over the step's `samples` lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct SamplerEvent {
    /// The recorded step.
    pub step: u64,
    /// The requested rate, samples per second of CPU time of the sampled threads.
    pub hz: u64,
    /// Samples taken (and written) in the step.
    pub taken: u64,
    /// Samples lost in the step (the sampler's buffer was full, or a stack could not be
    /// read); they are in no `samples` line.
    pub lost: u64,
    /// Process CPU time (all threads) during the step, ns, when the platform reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    /// The part of `cpu_ns` that the sampler's own threads used (ticking, draining,
    /// symbolizing), ns, when known. They are never sampled, so the sampled threads' CPU time
    /// is `cpu_ns - sampler_cpu_ns` ([`SamplerEvent::sampled_cpu_ns`]), and `taken` over it is
    /// the rate the program was sampled at; at most `cpu_ns` (readers clamp a larger value:
    /// [`SamplerEvent::own_cpu_ns`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler_cpu_ns: Option<u64>,
    /// When sampling of the step began, ns since the session's start.
    pub ts: u64,
    /// How long the step was sampled (wall time), ns.
    pub dur: u64,
    /// What took the samples (`ticker`, `perf_event`, `itimer`); absent in traces written
    /// before the field. With `hz` (requested), `taken` over
    /// [`sampled_cpu_ns`](SamplerEvent::sampled_cpu_ns) (achieved) and `sampler_cpu_ns` (the
    /// sampler's own CPU time), the line says what ran and at what rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SamplingSource>,
}

impl SamplerEvent {
    /// `sampler_cpu_ns` clamped to `cpu_ns` (the one rule every reader applies, so that a
    /// hostile line cannot make the sampled threads' CPU time negative).
    ///
    /// ```
    /// use trace_record::schema::SamplerEvent;
    /// let s = SamplerEvent { step: 0, hz: 1000, taken: 3, lost: 0, cpu_ns: Some(4_000_000),
    ///     sampler_cpu_ns: Some(9_000_000), ts: 0, dur: 1, source: None };
    /// assert_eq!(s.own_cpu_ns(), Some(4_000_000));
    /// assert_eq!(s.sampled_cpu_ns(), Some(0));
    /// ```
    pub fn own_cpu_ns(&self) -> Option<u64> {
        let own = self.sampler_cpu_ns?;
        Some(self.cpu_ns.map_or(own, |all| own.min(all)))
    }

    /// The CPU time of the threads the sampler sampled: `cpu_ns` less
    /// [`own_cpu_ns`](Self::own_cpu_ns) (all of `cpu_ns` when the line does not say, as in
    /// traces written before the field). Samples stand for this time.
    pub fn sampled_cpu_ns(&self) -> Option<u64> {
        let all = self.cpu_ns?;
        // `own_cpu_ns` is at most `cpu_ns`; saturating all the same.
        Some(all.saturating_sub(self.own_cpu_ns().unwrap_or(0)))
    }
}

/// `heap_alloc` (version 2): one heap allocation at or above the tracking threshold, made
/// through a tracking global allocator while a session recorded. Its bytes are what the
/// program asked the allocator for (the allocation's size), not logical tensor bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct HeapAllocEvent {
    /// The allocation's id, unique in the trace (never its address, which the allocator
    /// reuses after a free); `heap_free` names it.
    pub id: u64,
    /// Bytes allocated.
    pub bytes: u64,
    /// A small integer identifying the allocating thread (the tracker's own numbering).
    pub thread: u64,
    /// When, ns since the session's start.
    pub ts: u64,
    /// The execution step the driving thread was in, when the capture knew it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ExecStep>,
    /// The innermost open span of the allocating thread (for a worker thread with no scope of
    /// its own: of the driving thread), when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<u64>,
}

/// `heap_free` (version 2): the free of a `heap_alloc` allocation (a reallocation is a free
/// and an allocation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct HeapFreeEvent {
    /// The `heap_alloc` id freed.
    pub id: u64,
    /// When, ns since the session's start.
    pub ts: u64,
}

/// `heap_small` (version 2): the heap allocations below the tracking threshold made in one
/// scope (phase and span) during one recorded step: counted, not tracked one by one (their
/// frees are not seen).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct HeapSmallEvent {
    /// The recorded step.
    pub step: u64,
    /// The execution step, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ExecStep>,
    /// The innermost open span, when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<u64>,
    /// Allocations.
    pub count: u64,
    /// Bytes allocated.
    pub bytes: u64,
}

/// `heap_account` (version 2): the heap tracker's account of one recorded step. Consecutive
/// recorded steps that went by before the tracker saw the boundary share the account (and the
/// `heap_small` sums) of the first of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
pub struct HeapAccountEvent {
    /// The recorded step.
    pub step: u64,
    /// The tracking threshold in bytes: allocations at or above it are `heap_alloc` lines.
    pub threshold: u64,
    /// Tracked allocations or frees lost in the step (the tracker's buffer was full): a lost
    /// free leaves its allocation live in the trace, so live bytes are then an upper bound.
    pub lost: u64,
    /// Frees of tracked size whose allocation was not tracked (made before tracking began,
    /// outside a recorded window, or lost); they are in no `heap_free` line.
    pub unmatched_frees: u64,
    /// When tracking of the step began, ns since the session's start.
    pub ts: u64,
    /// How long the step was tracked (wall time), ns.
    pub dur: u64,
}

#[cfg(feature = "read")]
fn f64_or_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// The value plain serde gives [`OpEvent::out_bytes`] when `out_b` is absent from a line
/// (the reader replaces it with the logical bytes of `shape` × `dtype`).
pub const OUT_BYTES_UNSET: u64 = u64::MAX;

#[cfg(feature = "read")]
fn out_bytes_unset() -> u64 {
    OUT_BYTES_UNSET
}

/// Size in bytes of one element of a Candle dtype name (`f32` → 4), if known.
pub fn dtype_size(dtype: &str) -> Option<u64> {
    // Byte patterns compile to a few compares (no `memcmp` call): this runs per op event.
    Some(match dtype.as_bytes() {
        [b'u' | b'i', b'8'] | b"bool" | b"f8e4m3" | b"f8e5m2" => 1,
        [b'u' | b'i' | b'f', b'1', b'6'] | b"bf16" => 2,
        [b'u' | b'i' | b'f', b'3', b'2'] => 4,
        [b'u' | b'i' | b'f', b'6', b'4'] => 8,
        _ => return None,
    })
}

/// Logical bytes of a tensor: the product of `shape` times [`dtype_size`], if known and
/// representable.
pub fn logical_bytes(shape: &[usize], dtype: &str) -> Option<u64> {
    let mut n = dtype_size(dtype)?;
    for &d in shape {
        n = n.checked_mul(u64::try_from(d).ok()?)?;
    }
    Some(n)
}

/// One event line (everything between the header and the trailer).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "read", derive(Deserialize))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A span opened.
    SpanStart(SpanStart),
    /// A span closed.
    SpanEnd(SpanEnd),
    /// An executed op.
    Op(OpEvent),
    /// A tensor's metadata.
    Tensor(TensorEvent),
    /// An allocation or free.
    Memory(MemoryEvent),
    /// A device memory sample.
    DeviceMemory(DeviceMemoryEvent),
    /// A parameter's gradient state.
    Gradient(GradientEvent),
    /// A step boundary.
    Step(StepEvent),
    /// A user-defined instant.
    Marker(MarkerEvent),
    /// A user-defined value.
    Counter(CounterEvent),
    /// An interned frame of sampled stacks (version 2).
    Frame(FrameEvent),
    /// An interned sampled stack (version 2).
    Stack(StackEvent),
    /// Sample counts of one stack in one step (version 2).
    Samples(SamplesEvent),
    /// The sampler's account of one step (version 2).
    Sampler(SamplerEvent),
    /// A tracked heap allocation (version 2).
    HeapAlloc(HeapAllocEvent),
    /// The free of a tracked heap allocation (version 2).
    HeapFree(HeapFreeEvent),
    /// Counted small heap allocations of one scope in one step (version 2).
    HeapSmall(HeapSmallEvent),
    /// The heap tracker's account of one step (version 2).
    HeapAccount(HeapAccountEvent),
    /// A loaded executable or shared object that raw stacks point into (version 2).
    Module(ModuleEvent),
    /// A sampled stack as module addresses, before symbolization (version 2).
    RawStack(RawStackEvent),
}

impl Event {
    /// This event's type.
    pub fn event_type(&self) -> EventType {
        match self {
            Event::SpanStart(_) => EventType::SpanStart,
            Event::SpanEnd(_) => EventType::SpanEnd,
            Event::Op(_) => EventType::Op,
            Event::Tensor(_) => EventType::Tensor,
            Event::Memory(_) => EventType::Memory,
            Event::DeviceMemory(_) => EventType::DeviceMemory,
            Event::Gradient(_) => EventType::Gradient,
            Event::Step(_) => EventType::Step,
            Event::Marker(_) => EventType::Marker,
            Event::Counter(_) => EventType::Counter,
            Event::Frame(_) => EventType::Frame,
            Event::Stack(_) => EventType::Stack,
            Event::Samples(_) => EventType::Samples,
            Event::Sampler(_) => EventType::Sampler,
            Event::HeapAlloc(_) => EventType::HeapAlloc,
            Event::HeapFree(_) => EventType::HeapFree,
            Event::HeapSmall(_) => EventType::HeapSmall,
            Event::HeapAccount(_) => EventType::HeapAccount,
            Event::Module(_) => EventType::Module,
            Event::RawStack(_) => EventType::RawStack,
        }
    }

    /// The event's time (`ts`; an op's start), ns since the session's start, if it has one.
    pub fn ts(&self) -> Option<u64> {
        match self {
            Event::SpanStart(e) => Some(e.ts),
            Event::SpanEnd(e) => Some(e.ts),
            Event::Op(e) => Some(e.ts),
            Event::Tensor(_) => None,
            Event::Memory(e) => Some(e.ts),
            Event::DeviceMemory(e) => Some(e.ts),
            Event::Gradient(e) => Some(e.ts),
            Event::Step(e) => Some(e.ts),
            Event::Marker(e) => Some(e.ts),
            Event::Counter(e) => Some(e.ts),
            Event::Sampler(e) => Some(e.ts),
            Event::HeapAlloc(e) => Some(e.ts),
            Event::HeapFree(e) => Some(e.ts),
            Event::HeapAccount(e) => Some(e.ts),
            Event::Frame(_)
            | Event::Stack(_)
            | Event::Samples(_)
            | Event::HeapSmall(_)
            | Event::Module(_)
            | Event::RawStack(_) => None,
        }
    }

    /// The span this event refers to (its own id for `span_start`/`span_end`).
    pub fn span(&self) -> Option<u64> {
        match self {
            Event::SpanStart(e) => Some(e.id),
            Event::SpanEnd(e) => Some(e.id),
            Event::Op(e) => e.span,
            Event::Tensor(e) => e.span,
            Event::Memory(e) => e.span,
            Event::Marker(e) => e.span,
            Event::Samples(e) => e.span,
            Event::HeapAlloc(e) => e.span,
            Event::HeapSmall(e) => e.span,
            Event::DeviceMemory(_)
            | Event::HeapFree(_)
            | Event::HeapAccount(_)
            | Event::Gradient(_)
            | Event::Step(_)
            | Event::Counter(_)
            | Event::Frame(_)
            | Event::Stack(_)
            | Event::Sampler(_)
            | Event::Module(_)
            | Event::RawStack(_) => None,
        }
    }
}

/// Header and trailer lines tagged by `type` (used to write them).
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Frame<'a> {
    Header(&'a Header),
    Trailer(&'a Trailer),
}
