//! testkit: trace generators and format checkers shared by tracegraph's tests, benches and xtask.
//!
//! - [`write_synthetic`] / [`SynthConfig`]: a deterministic synthetic training trace of any
//!   size, written by trace-record's encoder (benchmarks and linear-time tests), optionally one
//!   rank of a distributed run with chosen step times (straggler tests).
//! - [`session_trace`]: a small trace recorded by a real `TraceSession` (nested spans, ops,
//!   memory, markers, counters, gradients, a second thread); [`hand_trace`] for hand-written
//!   edge cases after a fixed [`HEADER`]; [`wait_past`] for traces a real session records
//!   with chosen times (durations that do not depend on the machine's speed or load);
//!   [`generation_trace`] / [`Generation`]: a generation loop with trace-candle's sibling
//!   numbering (`model#0 { layer#0 { linear#0, linear#1, norm#0 } }`, a top-level op),
//!   optionally with a sampled stack ([`frame_event`] builds its frames).
//! - [`deep_nesting`], [`unended_roots`], [`allocations`], [`overflowing_sums`]: hostile
//!   traces (linear-time tests, the hostile benches, `cargo xtask fuzz`);
//!   [`write_nested_open_spans`]: a million nested spans never closed (the memory tests).
//! - [`check_chrome`]: the structural checker of a Chrome Trace Event export (fields, per-thread
//!   nesting, counters), used by the export tests and `cargo xtask browser-check`.
//! - [`thread_cpu`]: the calling thread's CPU time, which tests bound their work by (not
//!   wall time: the outcome must not depend on the machine's load).
//! - [`PeakAlloc`] / [`peak_of`]: a counting global allocator for tests that bound peak heap
//!   memory by allocation sizes (no timing).
//! - [`assert_golden`]: golden-file checks, rewritten with [`UPDATE_GOLDENS`]; [`small_jsonl`]:
//!   the small hand-made trace the analysis and CLI goldens read.
//! - [`files_under`]: every file under a directory with its bytes (links listed, never
//!   followed), for tests that check what a write left on disk.
//!
//! Not published: it exists so each of these has one home.

mod chrome;
mod cpu;
mod files;
mod golden;
mod hostile;
mod peak;
mod session;
mod synth;

pub use chrome::{ChromeCheck, XEvent, check_chrome, nesting_failures, ns};
pub use cpu::thread_cpu;
pub use files::files_under;
pub use golden::{UPDATE_GOLDENS, assert_golden, data_dir, small_jsonl};
pub use hostile::{
    allocations, deep_nesting, overflowing_sums, unended_roots, write_nested_open_spans,
};
pub use peak::{PeakAlloc, peak_of};
pub use session::{
    Generation, HEADER, frame_event, generation_trace, hand_trace, op_span_trace, session_trace,
    wait_past,
};
pub use synth::{SynthConfig, write_synthetic};
