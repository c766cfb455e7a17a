//! The Parquet export's error type.

use std::io;
use std::path::PathBuf;

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
    /// A rank beyond [`MAX_RANK`](crate::MAX_RANK): the `rank` column is a signed 32-bit
    /// integer (Int32), as Hive-partitioned readers infer `rank=N`.
    #[error(
        "rank {rank} does not fit the `rank` column, a signed 32-bit integer (Int32, at most 2147483647)"
    )]
    RankOutOfRange {
        /// The rank.
        rank: u32,
    },
    /// A symbolic link inside the dataset where an export writes: never followed (a link
    /// there could send the tables, or the removal of replaced ones, anywhere).
    #[error(
        "{} is a symbolic link: an export never writes through a link inside the dataset (only the output directory itself may be one); remove the link or choose another output directory",
        path.display()
    )]
    Symlink {
        /// The link.
        path: PathBuf,
    },
    /// Something in a run's old partition that no export wrote: the partition is replaced
    /// whole, and a file the program did not create is never removed.
    #[error(
        "{} is not a table an export wrote ({what}): the run's partition is replaced whole, so move it out of the dataset first",
        path.display()
    )]
    Foreign {
        /// The file or directory.
        path: PathBuf,
        /// What it is.
        what: &'static str,
    },
    /// Creating, reading or renaming a path of the dataset failed.
    #[error("{}: {source}", path.display())]
    Dataset {
        /// The path.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
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
