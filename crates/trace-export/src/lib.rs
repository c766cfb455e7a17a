//! trace-export: streaming Chrome Trace Event and folded-stack exports of a trace.
//!
//! It never sees analysis types.
//!
//! - [`write_chrome`]: Chrome Trace Event Format JSON for Perfetto UI, chrome://tracing and
//!   speedscope (spans and ops as nested complete events, memory as one counter per device
//!   and category at a time resolution that keeps every peak, steps, markers), streamed
//!   event by event.
//! - [`folded_stacks`]: `span;span;op self_ns` lines for flamegraph.pl, inferno and speedscope.
//! - [`folded_samples`]: a CPU sampler's call stacks under the span they were taken in,
//!   `span;span;frame;frame samples`, weighted by sample count (never mixed with the ns of
//!   [`folded_stacks`]).
//!
//! Span frames and paths carry the names every analysis shows ([`SpanNames`]: a `#0` sibling
//! index is dropped where the span has no numbered sibling). The folded exports apply that
//! rule themselves; the Chrome export, which writes as it reads, takes it from a first pass
//! ([`outline`], [`write_chrome_outlined`]).
//!
//! All read a trace through trace-record's [`TraceReader`](trace_record::TraceReader) and
//! nothing else: this crate depends on the trace format only, so a change to the analyses
//! cannot change an export. Spans and ops are made to nest per thread by one span nester,
//! which counts what it had to adjust ([`Adjustments`]); the Chrome export and the folded
//! stacks share it, so their times agree. Steps are numbered and bounded by trace-record's
//! [`StepTracker`](trace_record::StepTracker), the rule the analyses use, so `--step N` and
//! the Chrome steps track name the steps every command lists.

mod chrome;
mod folded;
mod folded_samples;
mod memory_window;
mod names;
mod nest;

pub use chrome::{
    ArgsMode, ChromeOptions, ChromeSummary, DEFAULT_MEMORY_RESOLUTION_NS, HEAP_COUNTER,
    MemoryAdjustments, step_bar_us, write_chrome, write_chrome_outlined,
};
pub use folded::{DEEPER_FRAMES, FoldedStacks, MAX_FOLDED_FRAMES, folded_stacks};
pub use folded_samples::{
    FoldedSamples, MAX_SAMPLED_FRAMES, NO_SPAN, SampleClass, SampleClasses, UNKNOWN_STACK,
    folded_samples, folded_samples_classified,
};
pub use names::{SpanNames, TraceOutline};
pub use nest::outline;
pub use nest::{Adjustments, OUTSIDE_SPANS_TID};

use trace_record::ReadError;

/// The hash map of the exporters: foldhash, well mixed in the low bits (ids such as `i << 40`
/// spread over the buckets), with a fixed seed so that nothing depends on a process's seed.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;

/// Errors of the exports.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Reading the trace failed. The message contains the reader's error (line and field),
    /// so it is not repeated as a source.
    #[error("reading the trace: {0}")]
    Read(trace_record::ReadError),
    /// Writing the output failed.
    #[error("writing the export: {0}")]
    Write(#[source] std::io::Error),
    /// `--step N` named a step that the trace does not have (numbered as trace-record's
    /// `StepTracker` numbers them: 0 before the first `step` event, an empty first or last
    /// boundary is not a step).
    #[error("step {0} is not a step of the trace")]
    StepNotFound(u64),
}

impl From<ReadError> for ExportError {
    fn from(e: ReadError) -> Self {
        ExportError::Read(e)
    }
}
