//! trace-candle: capture Candle tensors, ops, modules and training steps into a trace.
//!
//! Candle has no profiler and no per-op hooks (`Tensor::op()` is private), so capture happens
//! at call sites, around modules and from the public objects of a training loop. Everything
//! is recorded through a [`trace_record::TraceSession`]; this crate adds the Candle side:
//!
//! - [`meta`]: owned tensor metadata — process-unique ids (never raw addresses), dtype labels
//!   (`f32`, `bf16`, …), device labels (`cpu`, `cuda:N`, `metal:N`), dense bytes for every
//!   Candle dtype.
//! - [`Capture`]: the handle everything records through. It tracks the allocations of the
//!   current step and frees them at [`Capture::step`], and knows the thread's execution step
//!   (forward / backward / optimizer) so captured tensors get the right memory category.
//! - [`Probe`]: `probe.op("matmul", &[&x, &w], || x.matmul(&w))?` times and records one op.
//! - [`Profiled`], [`ProfiledT`], [`ProfiledSequence`]: wrappers implementing
//!   [`candle_core::Module`] / [`candle_core::ModuleT`] that record one module span per
//!   forward, named by the module's path (`model/layers.3/mlp`).
//! - `train` (feature `nn`): parameters of a `VarMap`, gradients of a `GradStore`, optimizer
//!   state, forward / backward / optimizer spans.
//! - `layer` (feature `tracing`): a `tracing_subscriber::Layer` turning `tracing` spans into
//!   trace spans.
//! - `demo` (feature `nn`): the deterministic MLP training run behind the `train_mlp`
//!   example and `tracegraph demo`.
//!
//! # Features
//!
//! - `nn` (default): `train` and `demo`, on candle-nn.
//! - `tracing` (default): the `layer` module, on tracing and tracing-subscriber.
//! - `cuda`, `metal` (off): forwarded to candle-core (and candle-nn); no backend is forced.
//!   Device labels (`cuda:N`, `metal:N`) and `Device::synchronize` work without them.
//!
//! # Storage identity
//!
//! Tensor and storage ids are Candle's process-wide, never-reused `TensorId` counter values
//! (see [`meta`]); estimated optimizer state uses a separate id range (see `train`). No id is
//! ever a raw address.
//!
//! ```
//! use std::sync::Arc;
//! use candle_core::{Device, Tensor};
//! use trace_candle::Capture;
//! use trace_record::{Run, TraceSession};
//! use trace_record::schema::Phase;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (session, sink) = TraceSession::in_memory(Run::new("doc", Phase::Infer, "cpu"));
//! let capture = Capture::new(Arc::new(session));
//! let probe = capture.probe();
//! let x = Tensor::ones((2, 3), candle_core::DType::F32, &Device::Cpu)?;
//! let w = Tensor::ones((3, 4), candle_core::DType::F32, &Device::Cpu)?;
//! let y = probe.op("matmul", &[&x, &w], || x.matmul(&w))?;
//! assert_eq!(y.dims(), &[2, 4]);
//! capture.step();
//! let summary = capture.session().finish()?;
//! assert_eq!(summary.counts.op, 1);
//! # let _ = sink;
//! # Ok(())
//! # }
//! ```

mod capture;
mod error;
pub mod meta;
mod module;

#[cfg(feature = "nn")]
pub mod demo;
#[cfg(feature = "tracing")]
pub mod layer;
#[cfg(feature = "nn")]
pub mod train;

pub use capture::{
    Capture, MODULE_INPUT, MODULE_OUTPUT, PhaseGuard, Probe, category_for, current_exec_step,
};
pub use error::Error;
pub use meta::{DeviceLabel, TensorMeta, dense_bytes, dtype_label, tensor_id};
pub use module::{Profiled, ProfiledSequence, ProfiledT};

/// Re-exported so users need not depend on trace-record for the common types.
pub use trace_record;
