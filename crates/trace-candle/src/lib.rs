//! trace-candle: capture Candle tensors, ops, modules and training steps into a trace.
//!
//! Candle has no profiler and no per-op hooks (`Tensor::op()` is private), so capture happens
//! at call sites, around modules and from the public objects of a training loop. Everything
//! is recorded through a [`TraceSession`] (from trace-record, re-exported here with the other
//! types a capture needs: [`Run`], [`Phase`], [`Schedule`], …); this crate adds the Candle side:
//!
//! - [`Capture`]: the one handle everything records through.
//!   `capture.op("matmul", &[&x, &w], || x.matmul(&w))?` times and records one op;
//!   [`Capture::phase`] opens a forward / backward / optimizer span (captured tensors get
//!   that step's memory category); [`Capture::step`] ends a step (frees its allocations,
//!   advances the schedule).
//! - A training loop through the same handle: [`Capture::parameters_varmap`] (feature `nn`)
//!   or [`Capture::parameters`] registers the weights; [`Capture::estimate_optimizer_state`]
//!   ([`OptimizerKind`]: AdamW's two moments, SGD's momentum) or
//!   [`Capture::declare_optimizer_state`] records the optimizer's state;
//!   [`Capture::backward`] runs `loss.backward()` and records the autograd graph and every
//!   parameter's gradient.
//! - [`Profiled`], [`ProfiledT`], [`ProfiledSequence`] (made by [`Capture::profile`],
//!   [`Capture::profile_t`], [`Capture::profile_sequence`]): wrappers implementing
//!   [`candle_core::Module`] / [`candle_core::ModuleT`] that record one module span per
//!   forward for the module path (`model/layers.3/mlp`), named relative to its enclosing module.
//! - `TrainingCapture` (feature `nn`, deprecated): the old training-loop handle, a thin
//!   wrapper whose every method calls the `Capture` method its docs name.
//! - [`TraceLayer`] (feature `tracing`): a `tracing_subscriber::Layer` turning `tracing`
//!   spans into trace spans; [`CaptureSubscriber`], the subscriber of its own that
//!   [`Capture::install_tracing`] installs, does the same without a registry: a span's id
//!   names its callsite's slot, so entering one takes no lock and no reference count.
//! - [`Capture::sample_stacks`] (feature `sampler`, Linux): sampled call stacks of every
//!   thread inside the schedule's windows, attributed to step, phase and span (trace-sampler).
//!   The sampler's [`SamplerConfig`], [`SamplerDiagnostic`], [`SamplerError`] and
//!   [`SamplerStats`] are re-exported here with or without the feature (without it the call
//!   reports that sampling is unavailable).
//! - `Capture::track_heap` / `stop_heap` / `heap_stats` (feature `heap`), with trace-heap's
//!   `TrackingAlloc`, `HeapConfig`, `HeapError` and `HeapStats` re-exported likewise.
//! - [`Capture::finish`]: ends the run (the last step's frees, the declared buffers, the
//!   trailer) and writes the capture's estimate of its own recording time: each kind of work
//!   timed at finish on scratch sessions, times its count in the trace, plus the autograd
//!   walk, the gradient facts and the recording threads' block writes (trace-record's
//!   `TraceSession::recording_write_ns`), timed as they ran.
//! - Owned tensor metadata: [`tensor_id`] (process-unique, never a raw address),
//!   [`dtype_label`] (`f32`, `bf16`, …), [`DeviceLabel`] (`cpu`, `cuda:N`, `metal:N`),
//!   [`dense_bytes`] for every Candle dtype, [`TensorMeta`].
//!
//! `examples/train_mlp.rs` is a whole training loop with its capture lines in one file:
//! `cargo run --release -p trace-candle --example train_mlp`.
//!
//! # Features
//!
//! - `nn` (default): [`Capture::parameters_varmap`] and the deprecated `TrainingCapture`,
//!   on candle-nn.
//! - `tracing` (default): [`TraceLayer`] and [`CaptureSubscriber`], on tracing and
//!   tracing-subscriber.
//! - `sampler` (off): the CPU sampler behind [`Capture::sample_stacks`] (trace-sampler's
//!   `enabled`; Linux, elsewhere it reports [`SamplerError::Unavailable`]); off, the capture
//!   has no signal handler, no unwinder dependency and no sampler thread, and
//!   `sample_stacks` reports `Unavailable`.
//! - `heap` (off): `Capture::track_heap` and the tracking global allocator
//!   (`TrackingAlloc`, trace-heap's): every heap allocation of at least a threshold, with its
//!   free, attributed to the phase and innermost span of the driving thread, once the program's
//!   binary declares `#[global_allocator] static ALLOC: trace_candle::TrackingAlloc =
//!   trace_candle::TrackingAlloc::system();`.
//! - `zstd` (off): zstd-compressed traces (a `.jsonl.zst` path, or `Run::compression`),
//!   trace-record's `zstd`; off, such a run is trace-record's `TraceError::ZstdUnavailable`
//!   and no compressor is linked. The capture never compiles trace-record's reader.
//! - `cuda`, `metal` (off): forwarded to candle-core (and candle-nn); no backend is forced.
//!   Device labels (`cuda:N`, `metal:N`) and `Device::synchronize` work without them.
//!
//! # Storage identity
//!
//! Tensor and storage ids are Candle's process-wide, never-reused `TensorId` counter values
//! (see [`tensor_id`]); estimated optimizer state uses a separate id range (see
//! [`Capture::estimate_optimizer_state`]). No id is ever a raw address.
//!
//! ```
//! use std::sync::Arc;
//! use candle_core::{DType, Device, Tensor};
//! use trace_candle::{Capture, Phase, Run, TraceSession};
//!
//! # fn main() -> Result<(), trace_candle::CaptureError> {
//! let (session, _sink) = TraceSession::in_memory(Run::new("doc", Phase::Infer, "cpu"));
//! let capture = Capture::new(Arc::new(session));
//! let x = Tensor::ones((2, 3), DType::F32, &Device::Cpu)?;
//! let w = Tensor::ones((3, 4), DType::F32, &Device::Cpu)?;
//! let y = capture.op("matmul", &[&x, &w], || x.matmul(&w))?;
//! assert_eq!(y.dims(), &[2, 4]);
//! capture.step();
//! let summary = capture.session().finish()?;
//! assert_eq!(summary.counts.op, 1);
//! # Ok(())
//! # }
//! ```

mod autograd;
mod buffers;
mod capture;
mod error;
mod exec_scope;
mod gradients;
mod meta;
mod module;
mod module_path;
mod op_spans;
mod optimizer;
mod overhead;
mod params;
mod persistent;
mod resident;
mod sampling;

#[cfg(feature = "heap")]
mod heap;
#[cfg(feature = "tracing")]
mod layer;
#[cfg(feature = "tracing")]
mod subscriber;
#[cfg(feature = "nn")]
mod train;

pub use autograd::AutogradSummary;
pub use buffers::DECLARED_BUFFER_BIT;
pub use capture::{Capture, PhaseGuard};
pub use error::CaptureError;
pub use exec_scope::CaptureSpan;
pub use gradients::{GradientFact, gradient_state};
#[cfg(feature = "tracing")]
pub use layer::TraceLayer;
pub use meta::{
    ALL_DTYPES, DeviceLabel, TensorMeta, dense_bytes, dtype_bits, dtype_label, tensor_id,
};
pub use module::{Profiled, ProfiledSequence, ProfiledT};
pub use optimizer::ESTIMATED_STATE_BIT;
pub use persistent::OptimizerKind;
pub use resident::{MEMORY_SAMPLE_EVERY_NS, process_resident_bytes};
#[cfg(feature = "tracing")]
pub use subscriber::{CaptureSubscriber, MAX_CALLSITES};
#[cfg(feature = "heap")]
pub use trace_heap::{DEFAULT_THRESHOLD, HeapConfig, HeapError, HeapStats, TrackingAlloc};
pub use trace_sampler::{
    DEFAULT_HZ, SOURCE_ENV, SamplerConfig, SamplerDiagnostic, SamplerError, SamplerSource,
    SamplerStats,
};
#[cfg(feature = "nn")]
#[allow(deprecated)]
pub use train::TrainingCapture;

// The trace-record types a capture is set up and driven with, so an instrumented program
// imports from this crate alone. Reading and validating traces stays in trace-record.
pub use trace_record::schema::{
    DumpTrigger, ExecStep, GradientState, MemoryCategory, Phase, Schedule, SpanKind, TimingMode,
};
pub use trace_record::{
    FlightConfig, FlightStats, Run, SlowStep, SpanGuard, Summary, TraceError, TraceSession,
};
