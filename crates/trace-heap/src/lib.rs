//! trace-heap: an opt-in tracking global allocator attributing heap allocations to spans.
//!
//! On CPU every Candle storage is a `Vec` allocated through Rust's global allocator, so the
//! buffers behind a library model's intermediates (attention scores, MLP activations) can be
//! seen without any hook in Candle. A program declares [`TrackingAlloc`] as its global
//! allocator (one line in its binary) and starts a tracker for its trace session ([`start`];
//! trace-candle's `Capture::track_heap`, feature `heap`, does it for a capture):
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOC: trace_heap::TrackingAlloc = trace_heap::TrackingAlloc::system();
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use trace_record::{Run, TraceSession};
//! use trace_record::schema::Phase;
//! let run = Run::new("run", Phase::Infer, "cpu");
//! let session = Arc::new(TraceSession::open("run.trace.jsonl", run)?);
//! trace_heap::start(&session, trace_heap::HeapConfig::default())?;
//! // ... the program, its spans opened through trace-candle ...
//! trace_heap::stop(&session);
//! session.finish()?;
//! # Ok(())
//! # }
//! ```
//!
//! How it works:
//!
//! - **Off, one load.** Every allocator call reads one state word (a relaxed atomic load)
//!   over the inner allocator. It is zero until a tracker starts, outside the session's
//!   recorded windows (once the blocks tracked inside them are freed) and after [`stop`].
//! - **On, no allocation.** Inside a recorded window each allocation of at least
//!   [`HeapConfig::threshold`] bytes (default 4 KiB) is pushed into a fixed lock-free buffer
//!   with its address, size, time (the invariant TSC through `quanta`, like the session's
//!   clock), thread and scope; each free of that size likewise, before the block goes back
//!   to the allocator. Smaller allocations are only counted, with their bytes, per scope in
//!   a fixed table of atomics; the thread that ends the steps sums its own per scope in a
//!   thread-local cell and adds each sum when its scope changes, at each step boundary and
//!   at [`stop`]. A thread-local guard with a constant initializer keeps the hook from
//!   re-entering itself; a full buffer drops the entry and counts it (`heap_account`'s
//!   `lost`).
//! - **Attribution.** The scope is trace-sampler's current scope: the phase and innermost
//!   open span of the allocating thread, or for a thread with none of its own (Candle's and
//!   gemm's workers) the driving thread's. The tracker holds a
//!   [`trace_sampler::ScopeDemand`] so that the recorder publishes scopes while no sampler
//!   runs.
//! - **Step boundaries, handed over.** A step boundary should call [`on_step`] (trace-candle's
//!   `Capture::step` does). It does no tracking work on the calling thread: it switches the
//!   small-allocation table to the next step's (a table per step, at most eight in flight,
//!   each reused only once the tracker has taken it, so a long run never fills them), puts a
//!   step marker into the buffer in its place among the allocations, and wakes the tracker
//!   every few steps. It waits only when the tracker is eight steps behind or the buffer is
//!   full, so every step has one account of its own, no two steps are merged and every
//!   allocation lands in the step it was made in. A
//!   boundary nobody hands over is handed over by the tracker itself, 10 to 20 ms late.
//! - **Drain.** The tracker's thread drains the buffer when woken and at least every 10 ms,
//!   keeps the live blocks by address, gives each tracked allocation an id (a never-reused
//!   number, never an address), matches frees by address, closes each step at its marker,
//!   and writes `heap_alloc`, `heap_free`, and per step `heap_small` and `heap_account` lines
//!   (schema version 2, documented in `docs/trace-schema.md`) through the session. Its own
//!   allocations are not tracked. It wakes rarely on purpose: on a machine with few cores, a
//!   thread waking every millisecond slowed a tiny Llama's generation by a fifth. [`stop`]
//!   drains what is left, every step closed in its place, before the session's trailer.
//!
//! Bytes are the sizes asked of the allocator (**heap bytes**), not logical bytes: analyses
//! label the two and never sum them. All of the crate's `unsafe` is the `GlobalAlloc`
//! implementation in one module (`alloc`), each block with its reason; nothing on the recording
//! path it calls allocates, locks or panics.

mod alloc;
mod boundary;
mod hook;
mod ring;
mod small;
mod tracker;

pub use alloc::TrackingAlloc;
pub use tracker::{is_tracking, on_step, start, stats, stop};

#[cfg(doc)]
use trace_record::TraceSession;

/// The default threshold: allocations of at least 4 KiB are tracked one by one.
pub const DEFAULT_THRESHOLD: usize = 4096;

/// How to track.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapConfig {
    /// Allocations of at least this many bytes (at least 1) are tracked one by one, with
    /// their frees; smaller ones are counted per scope and step.
    pub threshold: usize,
}

impl Default for HeapConfig {
    /// [`DEFAULT_THRESHOLD`].
    fn default() -> Self {
        HeapConfig {
            threshold: DEFAULT_THRESHOLD,
        }
    }
}

impl HeapConfig {
    /// A configuration tracking allocations of at least `bytes` one by one.
    pub fn threshold(bytes: usize) -> Self {
        HeapConfig { threshold: bytes }
    }
}

/// Why heap tracking could not start.
#[derive(Debug, thiserror::Error)]
pub enum HeapError {
    /// The program's global allocator is not a [`TrackingAlloc`].
    #[error(
        "heap tracking needs the tracking allocator: add `#[global_allocator] static ALLOC: \
         trace_heap::TrackingAlloc = trace_heap::TrackingAlloc::system();` to the program's binary"
    )]
    NotInstalled,
    /// A tracker already runs in this process (there is one global allocator).
    #[error("a heap tracker is already running in this process")]
    Busy,
    /// The threshold is zero.
    #[error("the heap tracking threshold must be at least 1 byte")]
    InvalidThreshold,
    /// Starting the tracker's thread failed.
    #[error("starting the heap tracker: {0}")]
    Io(#[from] std::io::Error),
}

/// What a tracker has accounted for so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// The threshold in bytes.
    pub threshold: u64,
    /// Recorded steps accounted for (`heap_account` lines).
    pub steps: u64,
    /// Tracked allocations (`heap_alloc` lines).
    pub allocs: u64,
    /// Their bytes (saturating).
    pub alloc_bytes: u64,
    /// Matched frees (`heap_free` lines).
    pub frees: u64,
    /// Allocations below the threshold, counted per scope.
    pub small_allocs: u64,
    /// Their bytes (saturating).
    pub small_bytes: u64,
    /// Entries lost (the buffer was full).
    pub lost: u64,
    /// Frees of tracked size whose allocation was not tracked.
    pub unmatched_frees: u64,
    /// Lines written.
    pub written: u64,
    /// Lines that could not be written (the session had finished).
    pub unwritten: u64,
}
