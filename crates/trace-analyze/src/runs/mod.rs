//! Several runs: comparison of two traces or two sets of runs, ranks of one distributed run.
//!
//! [`compare`] and [`compare_runs`] put time, memory and graphs of a base and a candidate side
//! by side with bootstrap intervals ([`compare_samples`], [`compare_run_samples`]);
//! [`rank_report`] and the rank views ([`rank_op_tables`], [`rank_span_trees`],
//! [`rank_memory`]) read one trace per rank of a run; [`load_torch_path`] reads a
//! torch.profiler run ([`TorchRun`]) and [`compare_with_torch`] sets it beside a Candle run of
//! the same model, op kind by op kind and layer by layer, with diagnoses. Builds on the event analyses.

pub(crate) mod beside_torch;
pub(crate) mod compare;
pub(crate) mod rank_views;
pub(crate) mod ranks;
pub(crate) mod significance;
pub(crate) mod torch;

pub use beside_torch::{
    CAPTURED_OPS_MIN_SHARE, COPY_MIN_RATIO, COPY_MIN_SHARE, CandleSource, Diagnosis, KindRow,
    LOSS_MIN_SHARE, LayerRow, MAX_LAYER_DEPTH, MAX_LAYER_DIAGNOSES, SLOWER_MIN_RATIO, SideFacts,
    TorchCompareOptions, TorchComparison, compare_with_torch,
};
pub use compare::{
    Comparison, Delta, GraphGroupDelta, IntervalBasis, MemoryDelta, OpDelta, Regression, SpanDelta,
    SpanDeltas, StepGraphPair, compare, compare_runs, significance_order,
};
pub use rank_views::{
    HighestPeak, RankColumn, RankDevicePeak, RankMemory, RankMemoryRow, RankOpCell, RankOpRow,
    RankOpTotals, RankOps, RankSpanCell, RankSpanRow, RankSpans, Slowest, rank_memory,
    rank_op_tables, rank_span_trees,
};
pub use ranks::{Alignment, RankReport, RankRow, StragglerRow, rank_report};
pub use significance::{
    BOOTSTRAP_SEED, CONFIDENCE, Change, MIN_SAMPLES, Verdict, compare_run_samples, compare_samples,
};
pub use torch::{
    PROFILER_STEP_ROW, TORCH_MAX_TIME_NS, TorchClassRow, TorchCounts, TorchDevice, TorchDims,
    TorchDtype, TorchId, TorchOp, TorchRange, TorchRun, TorchSelfRow, TorchStep, TorchStepMemory,
    TorchThread, load_torch_path, load_torch_reader,
};
