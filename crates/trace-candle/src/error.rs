//! The crate's error type.

/// Errors of trace-candle.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Candle operation failed.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// The trace session failed (I/O).
    #[error(transparent)]
    Trace(#[from] trace_record::TraceError),
    /// A file or directory could not be created.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: std::path::PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
}
