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
//!   steps analysed once through an ad-cache [`StepCache`];
//! - the comparison of two traces ([`compare()`]);
//! - the tracked heap ([`heap_report`], from a tracking allocator's `heap_*` lines): live heap
//!   bytes over time with the true peak, what was live there by span path, allocated and
//!   freed per span path and per step, temporaries told from activations (heap bytes, never
//!   summed with the memory report's logical bytes; `None` without heap lines);
//! - sampled hot spots ([`hot_report`]): where CPU samples landed by function, crate group,
//!   phase or span, with estimated CPU time labelled with its sample count;
//! - the summary that `tracegraph summary` prints ([`summarize`]);
//! - one formatter of durations and sizes for people ([`format_ns`], [`format_bytes`]).
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

mod compare;
mod error;
mod format;
mod gradients;
mod heap;
mod heap_log;
mod hot;
mod intern;
mod load;
mod memory;
mod model;
mod ops;
mod path_table;
mod rank_views;
mod ranks;
mod sampled_ops;
mod samples;
mod self_time;
mod span_shapes;
mod spans;
mod stacks;
mod stats;
mod steps;
mod summary;

pub use compare::{
    Comparison, Delta, GraphGroupDelta, IntervalBasis, MemoryDelta, OpDelta, Regression, SpanDelta,
    SpanDeltas, StepGraphPair, compare, compare_runs, significance_order,
};
pub use error::AnalyzeError;
pub use format::{format_bytes, format_ns, format_pct};
pub use gradients::{
    AutogradStep, GradientPoint, GradientReport, GradientVerdict, ParamGradients, gradient_report,
    no_gradient_facts_reason,
};
pub use heap::{
    HEAP_TIMELINE_POINTS, HeapPoint, HeapReport, HeapSpanRow, HeapStepRow, NO_SPAN, PeakAllocation,
    PeakSpan, heap_report,
};
pub use heap_log::{HeapEntry, HeapLog};
pub use hot::{
    ALLOCATOR_MIN_SHARE, CrateGroup, HINT_RULES, HotBy, HotHint, HotOptions, HotReport, HotRow,
    POOL_WAITING_MIN_SHARE, PROC_READ_MIN_SHARE, PhaseHot, SAMPLES_FOR_5_POINTS, SamplerAccount,
    backward_kernels, function_groups, hot_report, sampler_totals, short_func,
};
pub use intern::{FastMap, ShapeId, Sym};
pub use load::{LoadOptions, load_path, load_reader, load_str};
pub use memory::{
    Allocation, AutogradPlacement, BAND_POINTS, ByCategory, DeviceMemory, MemoryBand, MemoryReport,
    PhysicalSummary, TIMELINE_POINTS, TOP_ALLOCATIONS, TimelinePoint, memory_report,
};
pub use model::{
    AUTOGRAD_LABEL, AutogradNode, CounterSample, GradEvent, GradientCounts, MemEvent, Op,
    PhysSample, ReadCounts, RunInfo, Span, Step, TensorInfo, TensorTable, Trace, TraceEnd,
    WorkCounter,
};
pub use ops::{OpColumn, OpRow, OpTable, OpTableOptions, op_table};
pub use rank_views::{
    HighestPeak, RankColumn, RankDevicePeak, RankMemory, RankMemoryRow, RankOpCell, RankOpRow,
    RankOpTotals, RankOps, RankSpanCell, RankSpanRow, RankSpans, Slowest, rank_memory,
    rank_op_tables, rank_span_trees,
};
pub use ranks::{Alignment, RankReport, RankRow, StragglerRow, rank_report};
pub use sampled_ops::{
    CANDLE_OP_FRAMES, FrameOp, NO_CANDLE_OP, NO_SPAN_PATH, OTHER_OPS, OpKind, OpModule,
    PASS_THROUGH, PROFILER_CRATES, PROFILER_ROW, SampledOpOptions, SampledOpRow, SampledOpTable,
    SpanOps, WAITING_ROW, WORKER_KERNELS, WorkerKernel, frame_op, sampled_op_table, wilson_95,
    worker_kernel,
};
pub use samples::{
    SampleRow, SampledFrame, SampledStacks, SamplerStep, WAITING_FRAMES, WaitPattern,
    waiting_pattern,
};
pub use self_time::{op_self_times, span_self_times};
pub use span_shapes::{SpanShapeRow, SpanShapeTable, span_shape_table};
pub use spans::{
    DisplayPaths, MAX_PATH_NAMES, PathNode, PathTree, SpanNode, SpanOrder, SpanTree, pair_nodes,
    pair_paths, path_tree, path_tree_ordered, span_paths, span_tree, span_tree_ordered,
};
pub use stacks::{
    STACK_PHASES, SampledStackCounts, SampledStackReport, StackCounts, StackFrame, StackSamples,
    frame_label, is_entry_frame, stack_counts, stack_samples,
};
pub use stats::{
    BOOTSTRAP_SEED, CONFIDENCE, Change, MIN_SAMPLES, Spread, Verdict, compare_run_samples,
    compare_samples, median, percentile,
};
pub use steps::{
    CacheReport, CanonInput, CanonOp, GraphGroup, GraphPattern, GraphReport, OpCount, StepCache,
    StepDiff, StepGraph, StepGraphAnalysis, StepKey, StepOp, canonical_ops, graph_report,
    new_step_cache,
};
pub use summary::{
    ChangedStep, DevicePeak, GraphStability, Health, LISTED, Overhead, PhaseTimes, StepBreakdown,
    StepTimes, Summary, TOP_BACKWARD_KERNELS, TOP_OPS, TRACING_LAYER_SAW_NO_SPANS, step_breakdown,
    summarize, tracing_layer_saw_no_spans,
};
