//! The Parquet export's error type.

use std::io;

/// Errors exporting a trace to Parquet.
#[derive(Debug, thiserror::Error)]
pub enum ParquetError {
    /// The trace could not be read (a syntax or schema error names its line and field).
    #[error(transparent)]
    Read(#[from] trace_record::ReadError),
    /// A value does not fit Parquet's signed 64-bit integers (Spark reads no unsigned ones).
    #[error("line {line}, field `{field}`: {value} does not fit a signed 64-bit Parquet column")]
    OutOfRange {
        /// 1-based line of the trace.
        line: u64,
        /// The field (column) holding it.
        field: &'static str,
        /// The value.
        value: u64,
    },
    /// Building a record batch failed.
    #[error("building a record batch: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// Encoding Parquet failed.
    #[error("writing Parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// Writing an output failed.
    #[error("writing a table: {0}")]
    Io(#[from] io::Error),
}
