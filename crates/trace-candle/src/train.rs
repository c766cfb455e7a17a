//! The deprecated training-loop wrapper (feature `nn`): [`TrainingCapture`], every method a
//! one-line call of a [`Capture`] method, kept so that programs written against it compile.
#![allow(deprecated)]

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use candle_nn::VarMap;
use trace_record::schema::{ExecStep, SpanKind};

use crate::exec_scope::CaptureSpan;
use crate::gradients::GradientFact;
use crate::{Capture, CaptureError, OptimizerKind, PhaseGuard};

/// The old training-loop handle, now a thin wrapper: every method calls the [`Capture`]
/// method named in its documentation, and all state (parameters, optimizer state) lives in
/// the capture, shared by every wrapper of it.
///
/// Write a training loop with the capture alone:
///
/// | `TrainingCapture` | `Capture` |
/// |---|---|
/// | `watch_varmap(&varmap)` | [`Capture::parameters_varmap`] |
/// | `watch_var(name, &var)` | [`Capture::parameters`] with `[(name, var.as_tensor())]` |
/// | `estimate_optimizer_state(kind)` | [`Capture::estimate_optimizer_state`] |
/// | `declare_optimizer_state(label, &t)` | [`Capture::declare_optimizer_state`] |
/// | `forward()` | [`Capture::phase`] with `("forward", ExecStep::Forward)` |
/// | `backward_phase()` + `loss.backward()` + `record_gradients(&g)` | [`Capture::backward`] |
/// | `optimizer()` | [`Capture::phase`] with `("optimizer", ExecStep::Optimizer)` |
/// | `step_span()` | [`Capture::span`] with `("train_step", SpanKind::Function)` |
/// | `end_step()` | [`Capture::step`] |
///
/// ```
/// # fn main() -> Result<(), trace_candle::CaptureError> {
/// use std::sync::Arc;
/// use candle_core::{DType, Device, Module, Tensor};
/// use candle_nn::{Optimizer, VarBuilder, VarMap};
/// use trace_candle::{Capture, ExecStep, OptimizerKind, Phase, Run, TraceSession};
///
/// let (session, _sink) = TraceSession::in_memory(Run::new("doc", Phase::Train, "cpu"));
/// let capture = Capture::new(Arc::new(session));
/// let varmap = VarMap::new();
/// let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
/// let model = capture.profile("model", candle_nn::linear(3, 2, vb.pp("fc"))?);
/// let mut opt = candle_nn::SGD::new(varmap.all_vars(), 0.1)?;
/// capture.parameters_varmap(&varmap);
/// capture.estimate_optimizer_state(OptimizerKind::Sgd { momentum: false });
///
/// let x = Tensor::ones((4, 3), DType::F32, &Device::Cpu)?;
/// let loss = {
///     let _forward = capture.phase("forward", ExecStep::Forward);
///     model.forward(&x)?.sqr()?.mean_all()?
/// };
/// // Backward, its autograd graph and the parameters' gradients, in one call.
/// let grads = capture.backward(&loss)?;
/// {
///     let _optimizer = capture.phase("optimizer", ExecStep::Optimizer);
///     opt.step(&grads)?;
/// }
/// capture.step();
/// capture.finish()?;
/// # Ok(())
/// # }
/// ```
#[deprecated(
    since = "0.1.0",
    note = "use the Capture methods: parameters_varmap, estimate_optimizer_state, \
            declare_optimizer_state, phase, backward, step (see TrainingCapture's docs)"
)]
#[derive(Debug, Clone)]
pub struct TrainingCapture {
    capture: Capture,
}

impl TrainingCapture {
    /// A wrapper of `capture` (a clone of the handle: the state is the capture's).
    pub fn new(capture: &Capture) -> Self {
        TrainingCapture {
            capture: capture.clone(),
        }
    }

    /// The capture recorded through.
    pub fn capture(&self) -> &Capture {
        &self.capture
    }

    /// [`Capture::parameters_varmap`].
    pub fn watch_varmap(&mut self, varmap: &VarMap) -> usize {
        self.capture.parameters_varmap(varmap)
    }

    /// [`Capture::parameters`] with one `(name, var)` pair.
    pub fn watch_var(&mut self, name: &str, var: &Var) {
        self.capture.parameters([(name, var.as_tensor())]);
    }

    /// [`Capture::parameter_names`].
    pub fn parameter_names(&self) -> Vec<String> {
        self.capture.parameter_names()
    }

    /// [`Capture::declare_optimizer_state`].
    pub fn declare_optimizer_state(&mut self, label: &str, tensor: &Tensor) {
        self.capture.declare_optimizer_state(label, tensor);
    }

    /// [`Capture::estimate_optimizer_state`].
    pub fn estimate_optimizer_state(&mut self, kind: OptimizerKind) -> usize {
        self.capture.estimate_optimizer_state(kind)
    }

    /// [`Capture::span`] named `train_step`.
    pub fn step_span(&self) -> CaptureSpan<'_> {
        self.capture.span("train_step", SpanKind::Function)
    }

    /// [`Capture::phase`] named `forward`.
    pub fn forward(&self) -> PhaseGuard<'_> {
        self.capture.phase("forward", ExecStep::Forward)
    }

    /// [`Capture::phase`] named `backward`, around the caller's own `loss.backward()`
    /// ([`Capture::backward`] runs it and records the autograd graph and gradients).
    pub fn backward_phase(&self) -> PhaseGuard<'_> {
        self.capture.phase("backward", ExecStep::Backward)
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

    /// [`Capture::phase`] named `optimizer`.
    pub fn optimizer(&self) -> PhaseGuard<'_> {
        self.capture.phase("optimizer", ExecStep::Optimizer)
    }

    /// [`Capture::gradient_facts`].
    pub fn gradient_facts(&self, grads: &GradStore) -> Result<Vec<GradientFact>, CaptureError> {
        self.capture.gradient_facts(grads)
    }

    /// [`Capture::record_gradients`].
    pub fn record_gradients(&self, grads: &GradStore) -> Result<usize, CaptureError> {
        self.capture.record_gradients(grads)
    }

    /// [`Capture::step`].
    pub fn end_step(&self) -> u64 {
        self.capture.step()
    }
}
