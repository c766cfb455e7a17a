//! Event analyses of one trace: ops, spans, memory, steps and graphs, gradients, tracked heap.
//!
//! Each function takes a loaded [`Trace`](crate::model::Trace) and returns a report: the op
//! table ([`op_table`]), the span tree ([`span_tree`]) and its split by input shape
//! ([`span_shape_table`]), self times, the memory timeline ([`memory_report`]), per-step
//! execution graphs ([`graph_report`]), gradient facts ([`gradient_report`]), the tracked heap
//! ([`heap_report`]). This folder reads the model only; sampled CPU lives in
//! [`sampled`](crate::sampled), several runs in [`runs`](crate::runs) and the summary, which
//! draws on all of them, in [`summary`](crate::summary).

pub(crate) mod gradients;
pub(crate) mod heap;
pub(crate) mod memory;
pub(crate) mod op_class;
pub(crate) mod ops;
pub(crate) mod path_table;
pub(crate) mod self_time;
pub(crate) mod span_shapes;
pub(crate) mod spans;
pub(crate) mod steps;

pub use gradients::{
    AutogradStep, GradientPoint, GradientReport, GradientVerdict, ParamGradients, gradient_report,
    no_gradient_facts_reason,
};
pub use heap::{
    HEAP_TIMELINE_POINTS, HeapPoint, HeapReport, HeapSpanRow, HeapStepRow, NO_SPAN, PeakAllocation,
    PeakSpan, heap_report,
};
pub use memory::{
    Allocation, AutogradPlacement, BAND_POINTS, ByCategory, DeviceMemory, MemoryBand, MemoryReport,
    PhysicalSummary, TIMELINE_POINTS, TOP_ALLOCATIONS, TimelinePoint, memory_report,
};
pub use op_class::{ATEN_OP_CLASSES, CANDLE_LAYER_CLASSES, CANDLE_OP_CLASSES, OpClass};
pub use ops::{OpColumn, OpRow, OpTable, OpTableOptions, op_table};
pub use self_time::{op_self_times, span_self_times};
pub use span_shapes::{SpanShapeRow, SpanShapeTable, span_shape_table};
pub use spans::{
    DisplayPaths, MAX_PATH_NAMES, PathNode, PathTree, SpanNode, SpanOrder, SpanTree, pair_nodes,
    pair_paths, path_tree, path_tree_ordered, span_paths, span_tree, span_tree_ordered,
};
pub use steps::{
    CacheReport, CanonInput, CanonOp, ChangedStep, GraphGroup, GraphPattern, GraphReport, OpCount,
    StepCache, StepDiff, StepGraph, StepGraphAnalysis, StepKey, StepOp, canonical_ops,
    graph_report, new_step_cache,
};
