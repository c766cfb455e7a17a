//! The error type of trace-analyze.

use trace_record::ReadError;

/// Errors from loading or analysing a trace.
#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    /// The trace could not be read: I/O, invalid JSON, a schema violation or an unsupported
    /// version. The message names the file and, for syntax and schema errors, the line and
    /// field.
    ///
    /// The message already contains the reader's error, so it is not repeated as a source.
    /// An unsupported version is reported at line 1, field `version` (the header), like every
    /// other schema error.
    #[error("{file}: {}", located(error))]
    Read {
        /// The trace file (as given).
        file: String,
        /// What the reader reported.
        error: ReadError,
    },
    /// A file could not be opened.
    #[error("{file}: {error}")]
    Io {
        /// The file (as given).
        file: String,
        /// The I/O error.
        error: std::io::Error,
    },
    /// A torch.profiler Chrome trace could not be read: a JSON syntax error or a cut file, a
    /// field of the wrong type, a missing field, a negative or too large time, no
    /// `traceEvents`. serde_json's message carries the line and column.
    ///
    /// Shown as `llama.trace.json: event 12: field "dur": invalid type: string "x", expected a
    /// number of microseconds at line 80 column 14`.
    #[error("{file}: {}{error}", torch_location(*event, *field))]
    Torch {
        /// The trace file (as given).
        file: String,
        /// The event's index in `traceEvents` (0-based); `None` outside it.
        event: Option<u64>,
        /// The field (`dur`, `args.Input Dims`, `traceEvents`); `None` when not in one.
        field: Option<&'static str>,
        /// What serde_json reported, with its line and column.
        error: serde_json::Error,
    },
    /// A gzip-compressed trace's stream is corrupt or cut short.
    #[error("{file}: not a valid gzip stream: {error}")]
    Gzip {
        /// The trace file (as given).
        file: String,
        /// The decoder's error.
        error: std::io::Error,
    },
    /// A comparison was asked for with no trace on a side.
    #[error("a comparison needs at least one trace on each side")]
    NoRuns,
    /// A step graph could not be built (the trace's ops do not form a valid graph).
    #[error("building a step graph")]
    Graph(#[from] graph_core::GraphError),
}

/// `event 12: field "dur": ` for a torch trace error's location (each part where known).
fn torch_location(event: Option<u64>, field: Option<&str>) -> String {
    let mut s = String::new();
    if let Some(e) = event {
        s.push_str(&format!("event {e}: "));
    }
    if let Some(f) = field {
        s.push_str(&format!("field \"{f}\": "));
    }
    s
}

/// The reader's message, prefixed with the header's line and field where the reader's own
/// message has no location (an unsupported version).
fn located(error: &ReadError) -> String {
    match error {
        ReadError::UnsupportedVersion { .. } => format!("line 1, field `version`: {error}"),
        _ => error.to_string(),
    }
}

impl AnalyzeError {
    /// True when the error is about the trace's content (syntax, schema, version, a graph its
    /// ops cannot form) rather than I/O.
    pub fn is_bad_trace(&self) -> bool {
        matches!(
            self,
            AnalyzeError::Read {
                error: ReadError::Syntax { .. }
                    | ReadError::Schema { .. }
                    | ReadError::UnsupportedVersion { .. },
                ..
            } | AnalyzeError::Graph(_)
                | AnalyzeError::Torch { .. }
                | AnalyzeError::Gzip { .. }
        )
    }
}
