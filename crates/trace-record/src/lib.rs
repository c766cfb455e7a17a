//! trace-record: trace sessions, the JSONL trace schema and the validating reader.
//!
//! - [`schema`]: the wire types ([`schema::Header`], [`schema::Event`], [`schema::Trailer`]).
//! - [`TraceSession`]: records spans, ops, tensors, memory, gradients, steps into a JSONL
//!   trace with a PyTorch-style [`schema::Schedule`]; cheap when on, free when off.
//! - [`TraceSession::flight`] ([`FlightConfig`]): a flight recorder, recording into a bounded
//!   in-memory ring of whole steps and writing a dump (a complete trace whose line 2 is a
//!   [`schema::DumpRecord`]) when a trigger fires: a call, a slow step, a non-finite loss or
//!   gradient, SIGUSR2, a trigger file, an exit without `finish`.
//! - [`Compression`]: zstd-compressed traces, written by a session's writer thread (feature
//!   `zstd`) and, with `read` too, read transparently by every reader (detected by their magic
//!   bytes, [`is_zstd`]).
//! - [`encode_event`] / [`encode_header`] / [`encode_trailer`]: the lines a session writes.
//! - [`json`]: the JSON writer the encoder is built on, for exporters and generators.
#![cfg_attr(
    feature = "read",
    doc = r"
- [`TraceReader`] / [`read_trace`] ([`ParsedTrace`]): a streaming reader with typed errors
  ([`ReadError`]); [`TraceReader::for_each_batched`] parses on a second thread, and
  [`TraceReader::for_each_batched_ref`] too, into reused events it lends the caller (no
  allocation per event: what the loader uses).
- [`TraceInput`]: a trace's bytes, plain or decompressed, for every reader.
- [`Validator`] / [`validate()`] / [`validate_file`]: structural checks with line numbers.
- [`StepTracker`]: the rule that numbers and bounds a trace's steps, for every reader.
- [`SamplerAccount`]: the sampler's account over a set of steps, the one rule by which every
  reader (analyses, exports, report) sums `sampler` lines."
)]
//!
//! Every item has one path: the wire types under [`schema`], the JSON writer under [`json`],
//! everything else at the crate root.
//!
//! # Features
//!
//! None is on by default: a program that records compiles the writer alone.
//!
//! - `read`: the reading side: the streaming reader, its fast parser and batch pipeline, the
//!   validator, the step rule, the sampler account, `TraceInput`, and `Deserialize` on the
//!   schema's types.
//! - `zstd`: zstd-compressed traces (the C library, through the `zstd` crate). Without it a
//!   session asked for zstd (a `.zst` path, or [`Run::compression`]) is
//!   [`TraceError::ZstdUnavailable`], and a reader given a compressed trace says that it
//!   needs this feature.
//!
//! # What holds
//!
//! - The recording hot path allocates nothing per event in steady state; lines are written in
//!   blocks, and a background writer bounds how long they wait, so the file starts with its
//!   header and lags the program by a bounded time.
//! - A session takes its path exclusively (exclusive create, an advisory lock held while it
//!   records, replacement only by rename and only with [`Run::overwrite`]), so two writers
//!   never share a trace file; [`writer_of`] names the live writer of one.
//! - [`schema`] is the one vocabulary of the wire: every other crate uses its enums
//!   ([`schema::SpanKind`], [`schema::ExecStep`], [`schema::MemoryCategory`], ...) rather than
//!   mirrors, and their `as_str` / `FromStr` are the only enum↔string tables. Labels and
//!   counter names that a writer and a reader must agree on ([`schema::AUTOGRAD_LABEL`],
//!   [`schema::TRACING_SPANS_COUNTER`], ...) are declared once, in the schema.
//! - One JSON writer ([`json`]) serves the encoder (and through it the trace generators) and
//!   the Chrome exporter.
//! - Span ids are unique in a trace, taken by each thread from its session in blocks
//!   (increasing on each thread, not in time order across threads), so opening a span touches
//!   no counter shared between threads.
//! - [`TraceSession::recording_write_ns`] counts only the program's own threads' block
//!   writes: the sampler's and the heap tracker's threads call [`record_beside_the_program`].
//!
//! It knows nothing of Candle or of analysis. The format is documented in
//! `docs/trace-schema.md`.

#[cfg(feature = "read")]
mod account;
mod compression;
mod encode;
#[cfg(feature = "read")]
mod fast;
mod flight;
#[cfg(feature = "read")]
mod input;
pub mod json;
#[cfg(feature = "read")]
mod pipeline;
#[cfg(feature = "read")]
mod reader;
mod records;
pub mod schema;
mod session;
#[cfg(feature = "read")]
mod steps;
#[cfg(feature = "read")]
mod validate;

#[cfg(feature = "read")]
pub use account::SamplerAccount;
pub use compression::{
    Compression, DEFAULT_ZSTD_LEVEL, MAX_WINDOW_LOG, WRITE_WINDOW_LOG, ZSTD_MAGIC, is_zstd,
};
pub use encode::{encode_event, encode_header, encode_trailer};
pub use flight::{FlightConfig, FlightStats, SlowStep};
#[cfg(feature = "read")]
pub use input::{TraceInput, ZstdStats};
#[cfg(feature = "read")]
pub use reader::{
    LineEvent, MAX_LINE_BYTES, ParsedTrace, ReadError, ReadMode, ReadOptions, TraceReader,
    read_trace, read_trace_bytes,
};
pub use records::{MemoryRecord, OpRecord, SpanId, TensorRecord};
pub use session::{
    AfterSignal, BLOCK_BYTES, DEFAULT_FLUSH_INTERVAL, MemorySink, Run, SpanGuard, StepAction,
    Summary, TraceError, TraceSession, Writer, record_beside_the_program, writer_of,
};
#[cfg(feature = "read")]
pub use steps::{ClosedStep, StepTracker, is_step_work, step_time_ns};
#[cfg(feature = "read")]
pub use validate::{
    Issue, IssueKind, Validation, Validator, validate, validate_file, validate_reader,
};
