//! What a capture keeps across steps: parameters, optimizer state, buffers, sampled devices.
//!
//! The state alone, held by the capture behind one mutex; the methods that fill and record it
//! live by what they record (`params.rs`, `optimizer.rs`, `buffers.rs`, `resident.rs`,
//! `layer.rs`).

use candle_core::{DType, Device, TensorId};

use crate::meta::DeviceLabel;

/// Which optimizer's state to estimate ([`crate::Capture::estimate_optimizer_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptimizerKind {
    /// SGD: one momentum buffer per float parameter when `momentum`, else no state
    /// (candle-nn's `SGD` has no momentum).
    Sgd {
        /// Whether the optimizer keeps a momentum buffer.
        momentum: bool,
    },
    /// AdamW: first and second moments per float parameter (candle-nn's `AdamW`).
    AdamW,
}

impl OptimizerKind {
    /// The state tensors it keeps per float parameter: (label suffix, slot in the id).
    pub(crate) fn moments(self) -> &'static [(&'static str, u64)] {
        match self {
            OptimizerKind::AdamW => &[("exp_avg", 0), ("exp_avg_sq", 1)],
            OptimizerKind::Sgd { momentum: true } => &[("momentum_buffer", 2)],
            OptimizerKind::Sgd { momentum: false } => &[],
        }
    }
}

/// Owned metadata of a registered parameter.
#[derive(Debug, Clone)]
pub(crate) struct Param {
    pub(crate) name: String,
    pub(crate) tensor_id: TensorId,
    pub(crate) id: u64,
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: DType,
    pub(crate) device: DeviceLabel,
    pub(crate) bytes: u64,
    pub(crate) requires_grad: bool,
}

/// Owned metadata of an optimizer-state tensor (declared or estimated).
#[derive(Debug, Clone)]
pub(crate) struct StateTensor {
    pub(crate) label: String,
    pub(crate) id: u64,
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: DType,
    pub(crate) device: DeviceLabel,
    pub(crate) bytes: u64,
    pub(crate) requires_grad: bool,
}

/// A declared persistent buffer: its current storage.
#[derive(Debug, Clone)]
pub(crate) struct Buffer {
    pub(crate) name: String,
    pub(crate) id: u64,
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: DType,
    pub(crate) device: DeviceLabel,
    pub(crate) bytes: u64,
    /// Whether its tensor event and allocation were written (the session was active).
    pub(crate) recorded: bool,
    /// The step it was last declared in.
    pub(crate) declared_step: u64,
    /// Whether it was declared in more than one step (a buffer that changes per step, like a
    /// KV cache): a declaration from an inactive step is then stale by the time a step is
    /// recorded, and is not replayed there.
    pub(crate) per_step: bool,
}

/// Parameters, optimizer state, buffers and sampling settings of a [`crate::Capture`].
#[derive(Debug, Default)]
pub(crate) struct Persistent {
    pub(crate) params: Vec<Param>,
    /// Parameters not yet written (registered while the session was inactive).
    pub(crate) params_pending: bool,
    /// Optimizer state, declared or estimated, in the order it was added.
    pub(crate) optimizer_state: Vec<StateTensor>,
    /// Optimizer state not yet written (added while the session was inactive).
    pub(crate) state_pending: bool,
    /// The optimizers whose state is estimated, also for parameters registered later.
    pub(crate) estimated: Vec<OptimizerKind>,
    pub(crate) buffers: Vec<Buffer>,
    pub(crate) next_buffer: u64,
    /// Devices sampled at step ends and at finish.
    pub(crate) sampled: Vec<Device>,
    /// When they were last sampled (session nanoseconds).
    pub(crate) sampled_at: Option<u64>,
    /// Time the capture's heavier recording work took, timed as it ran (the autograd walk,
    /// gradient facts), and the lines it wrote meanwhile (see `overhead.rs`).
    pub(crate) measured_ns: u64,
    pub(crate) measured_lines: u64,
    /// Block writes (`TraceSession::recording_write_ns`) that happened inside measured work.
    pub(crate) measured_writes_ns: u64,
    /// Whether a backward with no registered parameter was already reported (once).
    pub(crate) warned_no_parameters: bool,
    /// Spans the `tracing` layer attached to this capture saw (`None`: no layer).
    pub(crate) layer_spans: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

impl Persistent {
    /// Spans the attached `tracing` layer saw so far; `None` when no layer was attached.
    pub(crate) fn layer_span_count(&self) -> Option<u64> {
        self.layer_spans
            .as_ref()
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
    }
}
