//! trace-analyze: linear-time analyses over a read trace (ops, spans, memory, steps, comparison).
//!
//! Load a trace once with [`load_path`] (or [`load_str`], [`load_reader`]) into a compact
//! [`Trace`] (names, devices and shapes interned; one streaming pass), then ask for:
//!
//! - the op table ([`op_table`]): per op name, or per name and input shapes, count, total,
//!   self, mean, min, max and p95 duration, output bytes and share of step time;
//! - the span tree ([`span_tree`]): total and self time per span path with its spread over
//!   steps and its execution step;
//! - the memory report ([`memory_report`]): live logical bytes over time per device and
//!   category, the peak and what was live there, possible leaks, physical samples beside
//!   (`None` when the trace has no memory events: absent, not zero);
//! - per-step execution graphs ([`graph_report`]): graph-core graphs with canonical ids, their
//!   fingerprints, "stable from step k", the first differing op of a changed step; identical
//!   steps analysed once through an ad-cache [`StepCache`](events::StepCache);
//! - the comparison of two traces ([`compare()`]);
//! - the tracked heap ([`heap_report`], from a tracking allocator's `heap_*` lines): live heap
//!   bytes over time with the true peak, what was live there by span path, allocated and
//!   freed per span path and per step, temporaries told from activations (heap bytes, never
//!   summed with the memory report's logical bytes; `None` without heap lines);
//! - sampled hot spots ([`hot_report`]): where CPU samples landed by function, crate group,
//!   phase or span, with estimated CPU time labelled with its sample count;
//! - the summary that `tracegraph summary` prints ([`summarize`]);
//! - one formatter of durations, sizes, percentages and shares for people ([`format_ns`],
//!   [`format_bytes`], [`format_pct`], [`format_share`]).
//!
//! # Folders
//!
//! Four public modules by concern, each with a page of its own, and a root:
//!
//! - [`model`]: the loaded trace ([`Trace`], the loader, interned names, the sampled stacks,
//!   the tracked heap's lines); it analyses nothing.
//! - [`events`]: analyses of one trace's events: op table, span tree and its split by input
//!   shape, self times, memory timeline, step graphs, gradients, tracked heap.
//! - [`sampled`]: sampled CPU: hot spots and their hints, the sampled op table, flame stacks,
//!   frame names.
//! - [`runs`]: several runs: the comparison of two traces or two sets of runs, with bootstrap
//!   intervals, and the ranks of one distributed run side by side; foreign traces
//!   (torch.profiler's Chrome JSON, `runs/torch`) are being added here.
//! - The root: [`AnalyzeError`], the formatters and the order statistics ([`stats`]), shared
//!   by all, and the [`summary`], which draws on every folder.
//!
//! Folders import only downwards, model ← events ← sampled ← runs; `error`, `format` and
//! `stats` import no folder, and no folder imports `summary` (test modules aside). The root
//! re-exports at most 120 names, those the CLI, the report and the exports use; the rest is
//! reached through its folder (`trace_analyze::events::span_shape_table`), and a root name is
//! the same item as its folder's (`trace_analyze::op_table` is
//! `trace_analyze::events::op_table`). Tidy tests in `xtask/src/tidy.rs` hold the layers, the
//! budget of 120, and that no two modules import each other.
//!
//! # One owner per figure
//!
//! - Live logical bytes, the per-bucket min/max band a chart draws ([`events::MemoryBand`])
//!   and each allocation's producer: the memory report ([`memory_report`]).
//! - FLOPs and GFLOP/s: the op table ([`op_table`]).
//! - Time by phase of each whole step: [`step_breakdown`], in the summary.
//! - Self time of spans and ops (time not covered by children; an op that became a span has
//!   its span's figure): [`events::span_self_times`] and [`events::op_self_times`].
//! - Heap bytes: the tracked heap ([`heap_report`], over the `heap_*` lines the loader keeps in
//!   a [`model::HeapLog`]), never summed with logical bytes.
//! - Sampled CPU: whether a stack is waiting or work is decided once, at load
//!   ([`SampledStacks`]); rankings are the hot-spot report's ([`hot_report`]), the samples per
//!   stack and phase a flame graph draws are [`stack_counts`]'s, and the Candle op a busy
//!   sample ran inside is the sampled op table's ([`sampled_op_table`]); see [`sampled`].
//! - The sampler's account (samples taken and lost, rates, time per sample): trace-record's
//!   [`SamplerAccount`](trace_record::SamplerAccount), by which every reader sums `sampler`
//!   lines.
//! - Per-rank step times, memory peaks and the straggler of each step: [`rank_report`] (clocks
//!   aligned on the headers' wall-clock starts, judged on the first common step); each rank's
//!   op table, span tree and memory report lined up by op, path or rank, with the slowest rank
//!   and its excess over the median rank: [`rank_op_tables`], [`rank_span_trees`],
//!   [`rank_memory`].
//! - The span tree split by input shape (a module's recorded input, an op span's inputs,
//!   inherited by the spans below): [`span_shape_table`].
//!
//! Every analysis is iterative and O(n log n) at worst; [`Trace::work`] counts the work done so
//! tests can assert linear growth. Durations are labelled with their
//! [`TimingMode`](trace_record::schema::TimingMode): host time unless the
//! header says the device was synchronized. Exports (Chrome JSON, folded stacks) live in
//! trace-export and the HTML report in trace-report: this crate computes, it does not draw.
//!
//! ```
//! use trace_analyze::{OpTableOptions, load_str, op_table};
//! use trace_record::schema::Phase;
//! use trace_record::{OpRecord, Run, TraceSession};
//!
//! // Record two steps of one op each, in memory.
//! let (session, sink) = TraceSession::in_memory(Run::new("doc", Phase::Infer, "cpu"));
//! for _ in 0..2 {
//!     session.step();
//!     let start = session.now_ns();
//!     session.record_op(&OpRecord {
//!         name: "matmul", inputs: &[1, 2], outputs: &[3], shape: &[2, 4], dtype: "f32",
//!         device: "cpu", start_ns: start, dur_ns: 1_000, in_bytes: 64, out_bytes: 32,
//!         category: None, flops: None,
//!     });
//! }
//! session.finish()?;
//! let text = String::from_utf8(sink.bytes())?;
//! let trace = load_str(&text, "doc.jsonl", Default::default())?;
//! let table = op_table(&trace, &OpTableOptions::default());
//! assert_eq!(table.op_count, 2);
//! assert_eq!(table.rows[0].name, "matmul");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod format;

pub mod events;
pub mod model;
pub mod runs;
pub mod sampled;
pub mod stats;
pub mod summary;

pub use error::AnalyzeError;
pub use events::{
    Allocation, AutogradPlacement, BAND_POINTS, ByCategory, DeviceMemory, GradientVerdict,
    GraphPattern, GraphReport, HeapReport, MemoryReport, NO_SPAN, OpColumn, OpTable,
    OpTableOptions, PathNode, PeakAllocation, SpanNode, SpanOrder, gradient_report, graph_report,
    heap_report, memory_report, new_step_cache, no_gradient_facts_reason, op_table, path_tree,
    path_tree_ordered, span_shape_table, span_tree, span_tree_ordered,
};
pub use format::{
    format_bytes, format_ns, format_pct, format_share, format_signed_ns, format_times,
};
pub use model::{
    AUTOGRAD_LABEL, FastMap, LoadOptions, MemEvent, Op, ReadCounts, SampledStacks, Span, Step,
    TensorInfo, TensorTable, Trace, TraceEnd, WAITING_FRAMES, load_path, load_reader, load_str,
};
pub use runs::{
    CONFIDENCE, Change, Comparison, Delta, IntervalBasis, MIN_SAMPLES, RankColumn, RankMemory,
    RankOps, RankSpanRow, RankSpans, Regression, Slowest, Verdict, compare, compare_runs,
    rank_memory, rank_op_tables, rank_report, rank_span_trees, significance_order,
};
pub use sampled::{
    HotBy, HotHint, HotOptions, HotReport, HotRow, NO_CANDLE_OP, OTHER_OPS, OpKind,
    POOL_WAITING_MIN_SHARE, SampledOpOptions, SampledOpTable, WAITING_ROW, backward_kernels,
    frame_label, function_groups, hot_report, sampled_op_table, sampler_totals, short_func,
    stack_counts,
};
pub use stats::{median, percentile};
pub use summary::{
    Summary, TRACING_LAYER_SAW_NO_SPANS, step_breakdown, summarize, tracing_layer_saw_no_spans,
};
