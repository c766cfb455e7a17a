//! trace-parquet: a trace as Parquet tables (ops, spans, steps, memory, sampled stacks, gradients).
//!
//! [`write_tables`] streams one trace from a [`trace_record::TraceReader`] into one Parquet
//! file per [`Table`], writing a row group every [`ExportOptions::row_group_rows`] rows, so a
//! trace of any length is exported in bounded memory (what is held: one row group per table,
//! the spans still open and the live allocations) and linear time. Every row carries the run
//! id, the rank and the step it belongs to; [`partition_dir`] names the Hive-style directory
//! (`run=<run id>/rank=<rank>`) that makes many exports one dataset for DuckDB, Polars and
//! Spark. The columns are raw trace facts, never analysis results: the engines compute.
//!
//! Of the workspace's crates it depends on trace-record only (its reader and step rule), never
//! on the analyses. It does not write files itself but into the writers it is given (the
//! caller decides where they go and how they are committed). The tables ([`Table::ALL`]: ops,
//! spans, steps, memory, samples, frames, stacks, gradients) and their columns are documented
//! in `docs/exports.md`.

mod error;
mod partition;
mod tables;
mod writer;

pub use error::ParquetError;
pub use partition::{escape_partition_value, partition_dir};
pub use tables::Table;
pub use writer::{ExportOptions, ExportSummary, write_tables};
