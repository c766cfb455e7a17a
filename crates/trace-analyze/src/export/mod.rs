//! Exports of a read trace: Chrome trace JSON, folded stacks and the HTML report.
//!
//! - [`chrome::write_chrome`]: Chrome Trace Event Format JSON for Perfetto UI,
//!   chrome://tracing and speedscope (spans and ops as nested complete events, memory as
//!   stacked counters, steps, markers), streamed event by event.
//! - [`folded::folded_stacks`]: `span;span;op self_ns` lines for flamegraph.pl, inferno and
//!   speedscope.
//! - [`html`]: one self-contained HTML page summarising a trace (and a comparison).
//!
//! Spans and ops are made to nest per thread by [`nest::Nester`], which counts what it had
//! to adjust; the Chrome export and the folded stacks share it, so their times agree.

pub mod chrome;
pub mod folded;
pub mod html;

pub mod nest;

pub use chrome::{ChromeOptions, ChromeSummary, write_chrome};
pub use folded::{FoldedStacks, folded_stacks};
pub use html::{ReportData, ReportOptions, build_report, write_html};
pub use nest::Adjustments;

/// Errors of the exports.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Reading the trace failed.
    #[error("reading the trace: {0}")]
    Read(#[from] trace_record::ReadError),
    /// Writing the output failed.
    #[error("writing the export: {0}")]
    Write(#[source] std::io::Error),
    /// `--step N` named a step that the trace does not have.
    #[error("step {0} is not in the trace (no `step` event with that index)")]
    StepNotFound(u64),
}
