//! Sampled CPU: hot spots with their hints, the sampled op table, flame stacks, frame names.
//!
//! Over the sampler's stacks as loaded ([`SampledStacks`](crate::model::SampledStacks): interned
//! frames, rows, the waiting patterns): where samples landed by function, crate group, phase or span ([`hot_report`]),
//! each busy sample named by the Candle op it ran inside ([`sampled_op_table`]) and samples per
//! stack for flame graphs ([`stack_counts`]). How a frame is
//! shortened and grouped by crate ([`short_func`], [`function_groups`]) lives in one place for
//! the CLI and the report; the hint rules and their thresholds in another ([`HINT_RULES`]).
//! Reads the model only.

pub(crate) mod hints;
pub(crate) mod hot;
pub(crate) mod names;
pub(crate) mod sampled_ops;
pub(crate) mod stacks;

pub use hints::{
    ALLOCATOR_MIN_SHARE, HINT_RULES, HotHint, POOL_WAITING_MIN_SHARE, PROC_READ_MIN_SHARE,
    SAMPLES_FOR_5_POINTS,
};
pub use hot::{
    HotBy, HotOptions, HotReport, HotRow, PhaseHot, backward_kernels, hot_report, sampler_totals,
};
pub use names::{CrateGroup, function_groups, short_func};
pub use sampled_ops::{
    CANDLE_OP_FRAMES, FrameOp, NO_CANDLE_OP, NO_SPAN_PATH, OTHER_OPS, OpKind, OpModule,
    PASS_THROUGH, PROFILER_CRATES, PROFILER_ROW, SampledOpOptions, SampledOpRow, SampledOpTable,
    SpanOps, WAITING_ROW, WORKER_KERNELS, WorkerKernel, frame_op, sampled_op_table, wilson_95,
    worker_kernel,
};
pub use stacks::{
    STACK_PHASES, SampledStackCounts, SampledStackReport, StackCounts, StackFrame, StackSamples,
    frame_label, is_entry_frame, stack_counts, stack_samples,
};
