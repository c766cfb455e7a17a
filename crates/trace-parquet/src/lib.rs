//! trace-parquet: a trace as Parquet tables (ops, spans, steps, memory, sampled stacks,
//! gradients, tracked heap), and the Hive-partitioned dataset they are written into.
//!
//! [`write_tables`] streams one trace from a [`trace_record::TraceReader`] into one Parquet
//! file per [`Table`], writing a row group every [`ExportOptions::row_group_rows`] rows, so a
//! trace of any length is exported in bounded memory (what is held: one row group per table,
//! the spans still open, the live allocations and the tracked-heap ids) and linear time.
//! Every row carries the run id, the rank and the step it belongs to; [`partition_dir`]
//! names the Hive-style directory (`run=<value>/rank=<rank>`, the value bounded by
//! [`partition_value`]) that makes many exports one dataset for DuckDB, Polars and Spark.
//! The columns are raw trace facts, never analysis results: the engines compute.
//!
//! [`Dataset`] writes a run at a time: [`Dataset::begin_run`] builds the run's partition
//! aside in the dataset's root, [`RunBuild::rank_outputs`] gives each rank's table files
//! (created new, never through a symbolic link), and [`RunBuild::commit`] swaps the whole
//! partition in (or leaves the old one as it was), so a reader never sees the ranks of two
//! exports under one run id. Of the workspace's crates it depends on trace-record only (its
//! reader and step rule), never on the analyses. The tables ([`Table::ALL`]: ops, spans,
//! steps, memory, samples, frames, stacks, gradients, heap) and their columns are documented
//! in `docs/exports.md`.

mod dataset;
mod error;
mod partition;
mod tables;
mod writer;

pub use dataset::{Dataset, RunBuild};
pub use error::ParquetError;
pub use partition::{
    MAX_PARTITION_VALUE, escape_partition_value, partition_dir, partition_value, run_partition_name,
};
pub use tables::Table;
pub use writer::{ExportOptions, ExportSummary, MAX_RANK, write_tables};
