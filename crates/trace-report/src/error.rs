//! The report's error type.

/// Errors of building or writing the report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// An analysis of the trace (or of the baseline) failed.
    #[error(transparent)]
    Analyze(#[from] trace_analyze::AnalyzeError),
    /// The view model could not be serialized into the page.
    #[error("serializing the report data: {0}")]
    Json(#[source] serde_json::Error),
    /// Writing the page failed.
    #[error("writing the report: {0}")]
    Write(#[source] std::io::Error),
    /// The page template names a placeholder the writer does not know (a build defect).
    #[error("the report template has an unknown placeholder `{{{{{0}}}}}`")]
    Template(String),
}
