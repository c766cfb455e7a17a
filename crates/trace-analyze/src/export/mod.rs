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

use std::io::BufRead;

use trace_record::schema::Event;
use trace_record::{ReadError, TraceReader};

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
    /// `--step N` named a step that the trace does not have.
    #[error("step {0} is not in the trace (no `step` event with that index)")]
    StepNotFound(u64),
}

impl From<ReadError> for ExportError {
    fn from(e: ReadError) -> Self {
        ExportError::Read(e)
    }
}

/// Events handed from the parsing thread to the exporter at a time.
const BATCH: usize = 4096;
/// Batches in flight between the threads (bounds the memory held to a few MB).
const BATCHES_IN_FLIGHT: usize = 4;

/// Calls `f` on every remaining event of `reader`, in order, stopping at the first error.
///
/// Parsing JSON is about half the cost of an export, so it runs on a scoped second thread
/// that sends batches of 4,096 events through a bounded channel (at most 4 batches in
/// flight), while `f` formats and writes on the calling thread. Memory stays bounded by the
/// batches in flight; when `f` fails the parser stops at its next send.
pub fn for_each_event<R, F>(reader: &mut TraceReader<R>, mut f: F) -> Result<(), ExportError>
where
    R: BufRead + Send,
    F: FnMut(Event) -> Result<(), ExportError>,
{
    std::thread::scope(|scope| {
        let (tx, rx) =
            std::sync::mpsc::sync_channel::<Result<Vec<Event>, ReadError>>(BATCHES_IN_FLIGHT);
        scope.spawn(move || {
            let mut batch = Vec::with_capacity(BATCH);
            for item in reader.by_ref() {
                match item {
                    Ok(line) => {
                        batch.push(line.event);
                        if batch.len() == BATCH {
                            let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                            if tx.send(Ok(full)).is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            }
            if !batch.is_empty() {
                let _ = tx.send(Ok(batch));
            }
        });
        for msg in rx {
            for event in msg? {
                f(event)?;
            }
        }
        Ok(())
    })
}
