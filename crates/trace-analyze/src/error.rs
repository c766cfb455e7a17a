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
    /// A comparison was asked for with no trace on a side.
    #[error("a comparison needs at least one trace on each side")]
    NoRuns,
    /// A step graph could not be built (the trace's ops do not form a valid graph).
    #[error("building a step graph")]
    Graph(#[from] graph_core::GraphError),
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
        )
    }
}
