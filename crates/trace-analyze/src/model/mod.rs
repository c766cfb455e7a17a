//! The loaded model: a trace read once into compact, interned records that every analysis reads.
//!
//! [`load_path`], [`load_reader`] and [`load_str`] read a trace (plain or zstd, our JSONL schema)
//! in one streaming pass through trace-record's reader into a [`Trace`]: op, span, tensor and
//! step records with names, devices and shapes interned ([`Sym`], [`ShapeId`]), memory and
//! physical samples, gradient facts, the sampler's stacks ([`SampledStacks`]: frames, stacks,
//! sample rows, `sampler` lines, which stacks are waiting) and the tracked heap's lines
//! ([`HeapLog`]). Nothing here analyses: the other folders do, and this one imports none of them.
//!
//! Two decisions are taken here, once, so that every analysis agrees on them:
//!
//! - each sampled stack is classified *waiting* (a thread pool spinning or parked) or *work*
//!   when loaded, by the documented frame patterns of [`WAITING_FRAMES`];
//! - samples whose step is no step of the trace (the empty boundary a loop's last `step()`
//!   opens, an empty step 0) are left out at load and counted
//!   ([`SampledStacks::outside_steps`]).
//!
//! The `heap_*` lines are kept as read in the [`HeapLog`]; heap bytes are the tracked-heap
//! report's ([`heap_report`](crate::events::heap_report)), never summed with logical bytes.

pub(crate) mod heap_log;
pub(crate) mod intern;
pub(crate) mod load;
pub(crate) mod resolve;
pub(crate) mod samples;
pub(crate) mod trace;

pub use heap_log::{HeapEntry, HeapLog};
pub use intern::{FastMap, ShapeId, Sym};
pub use load::{LoadOptions, load_path, load_reader, load_str};
pub use samples::{
    ReadTimeSymbols, SampleRow, SampledFrame, SampledStacks, UnresolvedModule, WAITING_FRAMES,
    WaitPattern, waiting_pattern,
};
pub use trace::{
    AUTOGRAD_LABEL, AutogradNode, CounterSample, GradEvent, GradientCounts, MemEvent, Op,
    PhysSample, ReadCounts, RunInfo, Span, Step, TensorInfo, TensorTable, Trace, TraceEnd,
    WorkCounter,
};
