//! trace-analyze: analyses and exports over a read trace.
//!
//! Load a trace once with [`load_path`] (or [`load_str`], [`load_reader`]) into a compact
//! [`Trace`] (names, devices and shapes interned; one streaming pass), then ask for:
//!
//! - the op table ([`ops::op_table`]): per op name, or per name and input shapes, count,
//!   total, self, mean, min, max and p95 duration, output bytes and share of step time;
//! - the span tree ([`spans::span_tree`]): total and self time per span path with its spread
//!   over steps and its execution step;
//! - the memory report ([`memory::memory_report`]): live logical bytes over time per device and
//!   category, the peak and what was live there, possible leaks, physical samples beside
//!   (`None` when the trace has no memory events: absent, not zero);
//! - per-step execution graphs ([`steps::graph_report`]): graph-core graphs with canonical ids,
//!   their fingerprints, "stable from step k", the first differing op of a changed step;
//!   identical steps analysed once through an ad-cache [`steps::StepCache`];
//! - the comparison of two traces ([`compare::compare`]);
//! - the summary that `tracegraph summary` prints ([`summary::summarize`]).
//!
//! Every analysis is iterative and O(n log n) at worst; [`Trace::work`] counts the work done so
//! tests can assert linear growth. Durations are labelled with [`Timing`]: host time unless the
//! header says the device was synchronized.
//!
//! ```
//! use trace_analyze::{load_str, ops, synth};
//! let mut buf = Vec::new();
//! synth::write_synthetic(&mut buf, &synth::SynthConfig { ops: 200, ops_per_step: 50, ..Default::default() })?;
//! let trace = load_str(std::str::from_utf8(&buf)?, "synthetic.jsonl", Default::default())?;
//! let table = ops::op_table(&trace, &ops::OpTableOptions::default());
//! assert_eq!(table.op_count, 200);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod compare;
pub mod error;
pub mod export;
pub mod intern;
pub mod load;
pub mod memory;
pub mod model;
pub mod ops;
pub mod spans;
pub mod stats;
pub mod steps;
pub mod summary;
pub mod synth;

pub use error::AnalyzeError;
pub use load::{LoadOptions, load_path, load_reader, load_str};
pub use model::{Category, ExecStep, Outcome, SpanKind, Timing, Trace};
