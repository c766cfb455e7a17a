//! The borrowed records a session writes: ops, tensors, memory events, and span ids.

use crate::schema::{AllocKind, MemoryCategory};

/// A span id (as written in `span_start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanId(pub u64);

/// An executed op, borrowed from the caller. The span is the thread's current span.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpRecord<'a> {
    /// The op's name.
    pub name: &'a str,
    /// Input tensor ids.
    pub inputs: &'a [u64],
    /// Output tensor ids.
    pub outputs: &'a [u64],
    /// The output's shape.
    pub shape: &'a [usize],
    /// The output's dtype.
    pub dtype: &'a str,
    /// The device (omitted on the wire when it is the run's device).
    pub device: &'a str,
    /// Start, from [`TraceSession::now_ns`](crate::TraceSession::now_ns).
    pub start_ns: u64,
    /// Duration in ns.
    pub dur_ns: u64,
    /// Logical input bytes.
    pub in_bytes: u64,
    /// Logical output bytes.
    pub out_bytes: u64,
    /// What the output holds, when known.
    pub category: Option<MemoryCategory>,
    /// Estimated FLOPs, when known.
    pub flops: Option<u64>,
}

/// A tensor's metadata, borrowed from the caller. The span is the thread's current span.
#[derive(Debug, Clone, Copy)]
pub struct TensorRecord<'a> {
    /// The tensor id.
    pub id: u64,
    /// An optional label (parameter name, ...).
    pub label: Option<&'a str>,
    /// The shape.
    pub shape: &'a [usize],
    /// The dtype.
    pub dtype: &'a str,
    /// The device.
    pub device: &'a str,
    /// Whether it tracks gradients.
    pub requires_grad: bool,
    /// Logical bytes.
    pub bytes: u64,
    /// What it holds.
    pub category: MemoryCategory,
}

/// An allocation or free, borrowed from the caller. Time and span are taken by the session.
#[derive(Debug, Clone, Copy)]
pub struct MemoryRecord<'a> {
    /// Alloc or free.
    pub kind: AllocKind,
    /// The storage id.
    pub storage: u64,
    /// The owning tensor id.
    pub tensor: u64,
    /// Bytes.
    pub bytes: u64,
    /// The device.
    pub device: &'a str,
    /// What it holds.
    pub category: MemoryCategory,
}
