//! [`CaptureError`]: the crate's one error type.

/// Errors of trace-candle: a Candle operation, the trace session or installing the `tracing`
/// subscriber failed.
///
/// `Debug` prints the same words as `Display` (with the path and the OS reason), because a
/// program's `main` that returns `Result<(), CaptureError>` shows its error through `Debug`:
/// `Error: trace runs/t.jsonl: No such file or directory (os error 2)`, not the struct dump.
#[derive(thiserror::Error)]
pub enum CaptureError {
    /// A Candle operation failed (reading a gradient, an op run under capture).
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// The trace session failed (I/O while writing or finishing the trace).
    #[error(transparent)]
    Trace(#[from] trace_record::TraceError),
    /// A global `tracing` subscriber was already set (see `Capture::install_tracing`).
    #[cfg(feature = "tracing")]
    #[error("cannot install the tracing layer: {0}")]
    Tracing(#[from] tracing::subscriber::SetGlobalDefaultError),
}

impl std::fmt::Debug for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}
