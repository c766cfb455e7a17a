//! Sampled CPU: hot spots with their hints, the sampled op table, flame stacks, frame names.
//!
//! Over the sampler's stacks as loaded ([`SampledStacks`](crate::model::SampledStacks):
//! interned frames, rows, each stack already classified busy, waiting or the profiler's own
//! work), each figure has one owner here:
//!
//! - [`hot_report`]: where samples landed by function, crate group, phase, span path, span
//!   name or op ([`HotBy`]), waiting and the profiler's own samples apart, with an estimated
//!   CPU time labelled with its sample count; its hints on known costs are [`HINT_RULES`],
//!   their thresholds in one table, over the program's samples (never the profiler's).
//! - [`sampled_op_table`]: which Candle op a busy sample ran inside: the outermost frame of
//!   Candle's public API below the innermost span, by a documented, tested list of Candle
//!   modules ([`CANDLE_OP_FRAMES`]); a worker thread's kernel where no such frame is on its
//!   stack ([`WORKER_KERNELS`]); tensor drops and the capture's own work
//!   ([`PROFILER_CRATES`]) named apart. Per span path it gives each op's samples, their share
//!   with a Wilson 95 % interval ([`wilson_95`]) and two estimates: share × the span's self
//!   time, and samples × the sampler's period as CPU time. `tracegraph ops --sampled` prints
//!   it; `hot --by op` ([`HotBy::Op`]) ranks the same attribution.
//! - [`stack_counts`]: samples per stack and phase, what a flame graph draws.
//! - [`short_func`], [`function_groups`]: how a frame is shortened and grouped by crate, in one
//!   place for the CLI and the report.
//!
//! Time per sample comes from the sampler's account, trace-record's
//! [`SamplerAccount`](trace_record::SamplerAccount) ([`sampler_totals`]), the one rule every
//! reader sums `sampler` lines by. Shares read `12.3%` through the one share formatter,
//! [`format_share`](crate::format_share). Reads the model only (and the event analyses' span
//! paths).

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
