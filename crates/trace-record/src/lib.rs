//! trace-record: trace sessions, the JSONL trace schema and the validating reader.
//!
//! - [`schema`]: the wire types ([`schema::Header`], [`schema::Event`], [`schema::Trailer`]).
//! - [`TraceSession`]: records spans, ops, tensors, memory, gradients, steps into a JSONL
//!   trace with a PyTorch-style [`schema::Schedule`]; cheap when on, free when off.
//! - [`TraceReader`] / [`read_trace`]: a streaming reader with typed errors ([`ReadError`]).
//! - [`Validator`] / [`validate()`] / [`validate_file`]: structural checks with line numbers.
//!
//! It knows nothing of Candle or of analysis. The format is documented in
//! `docs/trace-schema.md`.

mod encode;
mod fast;
pub mod json;
mod pipeline;
pub mod reader;
pub mod schema;
pub mod session;
pub mod validate;

pub use encode::{encode_event, encode_header, encode_trailer};
pub use reader::{
    LineEvent, MAX_LINE_BYTES, ParsedTrace, ReadError, ReadMode, ReadOptions, TraceReader,
    read_trace, read_trace_bytes,
};
pub use session::{
    BLOCK_BYTES, MemoryRecord, MemorySink, OpRecord, Run, SpanGuard, SpanId, StepAction, Summary,
    TensorRecord, TraceError, TraceSession,
};
pub use validate::{
    Issue, IssueKind, Validation, Validator, validate, validate_file, validate_reader,
};
