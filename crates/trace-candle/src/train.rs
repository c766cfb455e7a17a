//! Training-loop capture (feature `nn`): [`TrainingCapture`] records the parameters of a
//! `VarMap`, the gradients of a `GradStore`, optimizer state and forward / backward / optimizer
//! spans.

use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor, Var};
use candle_nn::VarMap;
use trace_record::TensorRecord;
use trace_record::schema::{ExecStep, MemoryCategory};

use crate::exec_scope::CaptureSpan;
use crate::gradients::GradientFact;
use crate::meta::{DeviceLabel, dtype_label, tensor_bytes, tensor_id};
use crate::{Capture, CaptureError, PhaseGuard};

/// The bit set in the ids of estimated optimizer state (see [`TrainingCapture`]).
pub const ESTIMATED_STATE_BIT: u64 = 1 << 52;

/// Which optimizer's state to estimate.
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

/// Owned metadata of an optimizer-state tensor (declared or estimated).
#[derive(Debug, Clone)]
struct Persistent {
    label: String,
    id: u64,
    shape: Vec<usize>,
    dtype: DType,
    device: DeviceLabel,
    bytes: u64,
    requires_grad: bool,
}

impl Persistent {
    fn of(label: &str, t: &Tensor) -> Self {
        Persistent {
            label: label.to_string(),
            id: tensor_id(t),
            shape: t.dims().to_vec(),
            dtype: t.dtype(),
            device: DeviceLabel::of(t.device()),
            bytes: tensor_bytes(t),
            requires_grad: t.track_op(),
        }
    }
}

/// Capture of a training loop: parameters, gradients, optimizer state and step spans.
///
/// Holds owned metadata only (names, ids, shapes), never a variable or tensor. A step:
///
/// ```
/// # fn main() -> Result<(), trace_candle::CaptureError> {
/// use std::sync::Arc;
/// use candle_core::{DType, Device, Module, Tensor};
/// use candle_nn::{Optimizer, VarBuilder, VarMap};
/// use trace_candle::{Capture, OptimizerKind, Phase, Run, TraceSession, TrainingCapture};
///
/// let (session, _sink) = TraceSession::in_memory(Run::new("doc", Phase::Train, "cpu"));
/// let capture = Capture::new(Arc::new(session));
/// let varmap = VarMap::new();
/// let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
/// let model = capture.profile("model", candle_nn::linear(3, 2, vb.pp("fc"))?);
/// let mut opt = candle_nn::SGD::new(varmap.all_vars(), 0.1)?;
/// let mut training = TrainingCapture::new(&capture);
/// training.watch_varmap(&varmap);
/// training.estimate_optimizer_state(OptimizerKind::Sgd { momentum: false });
///
/// let x = Tensor::ones((4, 3), DType::F32, &Device::Cpu)?;
/// let loss = {
///     let _forward = training.forward();
///     model.forward(&x)?.sqr()?.mean_all()?
/// };
/// // Backward, its autograd graph and the watched parameters' gradients, in one call.
/// let grads = capture.backward(&loss)?;
/// {
///     let _optimizer = training.optimizer();
///     opt.step(&grads)?;
/// }
/// training.end_step();
/// capture.session().finish()?;
/// # Ok(())
/// # }
/// ```
///
/// # What is and is not captured
///
/// `loss.backward()` is recorded as **one** `backward` span: Candle computes every gradient
/// inside that call and exposes no per-op hook, so there is no per-op backward data and none
/// is invented. What is recorded after it is real: one `gradient` allocation per variable
/// that received a gradient, and one `gradient` fact per watched parameter (present, missing,
/// zero or non_finite, with its L2 norm when finite).
///
/// Parameters and optimizer state are persistent: their allocations (storage id = the
/// variable's tensor id; see [`crate::tensor_id`]) are recorded once, at the first active step,
/// and never freed. Candle's optimizers keep their state private, so it is either declared by
/// the caller ([`TrainingCapture::declare_optimizer_state`], real tensors and ids) or
/// estimated ([`TrainingCapture::estimate_optimizer_state`]: AdamW keeps two moments per
/// float parameter, SGD keeps a momentum buffer only with momentum, and candle-nn's SGD has
/// none). Estimated state has no Candle tensor: its ids have bit 52 set
/// (`1 << 52 | parameter id << 2 | moment`, parameter id taken mod 2^50), a range Candle's
/// counter does not reach in practice (2^52 tensor creations) and below 2^53, so the ids
/// survive JSON readers that use doubles; its
/// tensor events are labelled `<param>.exp_avg`, `<param>.exp_avg_sq` or
/// `<param>.momentum_buffer`.
#[derive(Debug)]
pub struct TrainingCapture {
    capture: Capture,
    optimizer_state: Vec<Persistent>,
    /// Set once every watched tensor's allocation is recorded: later steps skip the check.
    persistent_done: AtomicBool,
}

impl Clone for TrainingCapture {
    fn clone(&self) -> Self {
        TrainingCapture {
            capture: self.capture.clone(),
            optimizer_state: self.optimizer_state.clone(),
            persistent_done: AtomicBool::new(self.persistent_done.load(Ordering::Relaxed)),
        }
    }
}

impl TrainingCapture {
    /// A training capture recording through `capture`.
    pub fn new(capture: &Capture) -> Self {
        TrainingCapture {
            capture: capture.clone(),
            optimizer_state: Vec::new(),
            persistent_done: AtomicBool::new(false),
        }
    }

    /// The capture recorded through.
    pub fn capture(&self) -> &Capture {
        &self.capture
    }

    /// Watches every variable of `varmap` as a named parameter (sorted by name): registers
    /// them with the capture ([`Capture::parameters_varmap`]), the one registry that
    /// [`Capture::backward`] and [`TrainingCapture::record_gradients`] both read. Returns how
    /// many were added.
    pub fn watch_varmap(&mut self, varmap: &VarMap) -> usize {
        *self.persistent_done.get_mut() = false;
        self.capture.parameters_varmap(varmap)
    }

    /// Watches one variable as parameter `name` (ignored if already registered), in the
    /// capture's registry.
    pub fn watch_var(&mut self, name: &str, var: &Var) {
        *self.persistent_done.get_mut() = false;
        self.capture.parameters([(name, var.as_tensor())]);
    }

    /// The registered parameters' names, in registration order (the capture's registry).
    pub fn parameter_names(&self) -> Vec<String> {
        self.capture.parameter_names()
    }

    /// Declares a real optimizer-state tensor (e.g. a momentum buffer the caller owns).
    pub fn declare_optimizer_state(&mut self, label: &str, tensor: &Tensor) {
        self.optimizer_state.push(Persistent::of(label, tensor));
        *self.persistent_done.get_mut() = false;
    }

    /// Estimates the optimizer state of `kind` for the watched float parameters (see
    /// [`TrainingCapture`] for the id scheme). Returns how many state tensors were added.
    pub fn estimate_optimizer_state(&mut self, kind: OptimizerKind) -> usize {
        let moments: &[&str] = match kind {
            OptimizerKind::AdamW => &["exp_avg", "exp_avg_sq"],
            OptimizerKind::Sgd { momentum: true } => &["momentum_buffer"],
            OptimizerKind::Sgd { momentum: false } => &[],
        };
        let mut added = 0;
        let params = self.capture.registered_params();
        for p in params.iter().filter(|p| p.dtype.is_float()) {
            for (k, moment) in moments.iter().enumerate() {
                let id = ESTIMATED_STATE_BIT | ((p.id & ((1u64 << 50) - 1)) << 2) | k as u64;
                self.optimizer_state.push(Persistent {
                    label: format!("{}.{moment}", p.name),
                    id,
                    shape: p.shape.clone(),
                    dtype: p.dtype,
                    device: p.device.clone(),
                    bytes: p.bytes,
                    requires_grad: false,
                });
                added += 1;
            }
        }
        *self.persistent_done.get_mut() = false;
        added
    }

    /// Records the parameters and optimizer state (tensor events and allocations) if the
    /// session is active and they were not recorded yet. Called by the step guards.
    fn record_persistent(&self) {
        if !self.capture.is_active() || self.persistent_done.load(Ordering::Relaxed) {
            return;
        }
        // Parameters are the capture's (written once, by its registry).
        self.capture.record_pending_parameters();
        let groups = [(&self.optimizer_state, MemoryCategory::OptimizerState)];
        for (items, category) in groups {
            for p in items {
                if self.capture.has_persistent(p.id) {
                    continue;
                }
                self.capture.session().record_tensor(&TensorRecord {
                    id: p.id,
                    label: Some(&p.label),
                    shape: &p.shape,
                    dtype: dtype_label(p.dtype),
                    device: p.device.as_str(),
                    requires_grad: p.requires_grad,
                    bytes: p.bytes,
                    category,
                });
                self.capture.record_persistent_alloc(
                    p.id,
                    p.id,
                    p.bytes,
                    p.device.as_str(),
                    category,
                );
            }
        }
        self.persistent_done.store(true, Ordering::Relaxed);
    }

    /// A `train_step` span around a whole step (optional; spans nest inside it).
    pub fn step_span(&self) -> CaptureSpan<'_> {
        let session = self.capture.session();
        CaptureSpan::opened(
            session,
            session.span("train_step", trace_record::schema::SpanKind::Function, None),
        )
    }

    /// Opens the `forward` span (execution step forward: captures are activations).
    pub fn forward(&self) -> PhaseGuard<'_> {
        let guard = self.capture.phase("forward", ExecStep::Forward);
        self.record_persistent();
        guard
    }

    /// Opens the `backward` span around the caller's own `loss.backward()` (one span: see
    /// [`TrainingCapture`]). To run backward and record its autograd graph and gradients in
    /// one call, use [`Capture::backward`] instead.
    pub fn backward_phase(&self) -> PhaseGuard<'_> {
        let guard = self.capture.phase("backward", ExecStep::Backward);
        self.record_persistent();
        guard
    }

    /// The old name of [`TrainingCapture::backward_phase`]: it opens a span and does not run
    /// backward, unlike [`Capture::backward`], which shares the name.
    #[deprecated(
        since = "0.1.0",
        note = "renamed backward_phase: Capture::backward(&loss) runs backward, this only opens its span"
    )]
    pub fn backward(&self) -> PhaseGuard<'_> {
        self.backward_phase()
    }

    /// Opens the `optimizer` span around `optimizer.step(&grads)`.
    pub fn optimizer(&self) -> PhaseGuard<'_> {
        let guard = self.capture.phase("optimizer", ExecStep::Optimizer);
        self.record_persistent();
        guard
    }

    /// The gradient facts of the registered parameters, without recording anything (the
    /// capture's, [`Capture::gradient_facts`]).
    pub fn gradient_facts(&self, grads: &GradStore) -> Result<Vec<GradientFact>, CaptureError> {
        self.capture.gradient_facts(grads)
    }

    /// Records, for every registered parameter, its gradient's allocation (category gradient,
    /// freed at the end of the step) and a gradient fact, with the optimizer state first
    /// recorded if it was not yet ([`Capture::record_gradients`]). Does nothing outside an
    /// active window. Returns how many facts were recorded.
    pub fn record_gradients(&self, grads: &GradStore) -> Result<usize, CaptureError> {
        if !self.capture.is_active() {
            return Ok(0);
        }
        self.record_persistent();
        self.capture.record_gradients(grads)
    }

    /// Ends the step: records the frees of the step's allocations (activations, inputs,
    /// gradients) and advances the schedule. Returns the new step index.
    pub fn end_step(&self) -> u64 {
        self.capture.step()
    }
}
