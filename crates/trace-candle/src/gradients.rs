//! Gradients: each parameter's state (present, missing, zero, non-finite) and norm, at backward.

use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor};
use trace_record::schema::{
    BACKWARD_WITHOUT_PARAMETERS_COUNTER, ExecStep, GradientState, MemoryCategory,
};

use crate::{Capture, CaptureError};

/// What was found for one parameter's gradient.
#[derive(Debug, Clone, PartialEq)]
pub struct GradientFact {
    /// The parameter's name.
    pub param: String,
    /// Present, missing, zero or non_finite.
    pub state: GradientState,
    /// The L2 norm, when there is a gradient and it is finite.
    pub norm: Option<f64>,
}

/// The state and L2 norm of one gradient tensor: `non_finite` (no norm) when any entry is NaN
/// or infinite, `zero` when every entry is zero, `present` otherwise. The sum of squares is
/// accumulated in `f64`; when it underflows to zero or overflows while the entries are finite
/// (tiny or huge `f64` gradients) the norm is recomputed with scaling, so such a gradient is
/// still `present` (its norm omitted only if the norm itself exceeds `f64::MAX`).
pub fn gradient_state(grad: &Tensor) -> candle_core::Result<(GradientState, Option<f64>)> {
    let flat = grad.flatten_all()?;
    Ok(match grad.dtype() {
        DType::F32 => state_of(&flat.to_vec1::<f32>()?, |&v| f64::from(v)),
        DType::F64 => state_of(&flat.to_vec1::<f64>()?, |&v| v),
        _ => state_of(&flat.to_dtype(DType::F64)?.to_vec1::<f64>()?, |&v| v),
    })
}

fn state_of<T>(values: &[T], to_f64: impl Fn(&T) -> f64) -> (GradientState, Option<f64>) {
    let mut sum = 0.0;
    let mut finite = true;
    let mut nonzero = false;
    for v in values {
        let v = to_f64(v);
        finite &= v.is_finite();
        nonzero |= v != 0.0;
        sum += v * v;
    }
    if !finite {
        return (GradientState::NonFinite, None);
    }
    if !nonzero {
        return (GradientState::Zero, Some(0.0));
    }
    let norm = if sum.is_finite() && sum > 0.0 {
        sum.sqrt()
    } else {
        scaled_norm(values.iter().map(to_f64))
    };
    (GradientState::Present, norm.is_finite().then_some(norm))
}

/// The L2 norm of finite values without overflow or underflow of the squares (the scaled
/// sum of LAPACK's `dnrm2`).
fn scaled_norm(values: impl Iterator<Item = f64>) -> f64 {
    let mut scale = 0.0f64;
    let mut ssq = 1.0f64;
    for v in values {
        let a = v.abs();
        if a == 0.0 {
            continue;
        }
        if scale < a {
            ssq = 1.0 + ssq * (scale / a) * (scale / a);
            scale = a;
        } else {
            ssq += (a / scale) * (a / scale);
        }
    }
    scale * ssq.sqrt()
}

impl Capture {
    /// The gradient facts of the registered parameters, without recording anything.
    pub fn gradient_facts(&self, grads: &GradStore) -> Result<Vec<GradientFact>, CaptureError> {
        let params = self.inner().persist().params.clone();
        let mut out = Vec::with_capacity(params.len());
        for p in &params {
            let (state, norm) = match grads.get_id(p.tensor_id) {
                None => (GradientState::Missing, None),
                Some(g) => gradient_state(g)?,
            };
            out.push(GradientFact {
                param: p.name.clone(),
                state,
                norm,
            });
        }
        Ok(out)
    }

    /// Records, for every registered parameter, its gradient's allocation (category
    /// `gradient`, freed at the end of the step) and a `gradient` fact (present, missing,
    /// zero or non_finite, with the L2 norm when finite). Nothing outside an active window.
    /// Returns how many facts were recorded.
    pub fn record_gradients(&self, grads: &GradStore) -> Result<usize, CaptureError> {
        self.measured(|| self.record_gradient_facts(grads))
    }

    fn record_gradient_facts(&self, grads: &GradStore) -> Result<usize, CaptureError> {
        if !self.is_active() {
            return Ok(0);
        }
        self.record_pending_parameters();
        let params = self.inner().persist().params.clone();
        if params.is_empty() {
            self.warn_no_parameters();
        }
        for p in &params {
            let (state, norm) = match grads.get_id(p.tensor_id) {
                None => (GradientState::Missing, None),
                Some(g) => {
                    self.record_tensor(g, Some(&p.name), Some(MemoryCategory::Gradient));
                    self.record_step_alloc(g, MemoryCategory::Gradient);
                    gradient_state(g)?
                }
            };
            self.session().record_gradient(&p.name, state, norm);
        }
        Ok(params.len())
    }

    /// Says once per capture, on stderr and in the trace (counter
    /// [`BACKWARD_WITHOUT_PARAMETERS_COUNTER`]), that a backward was recorded with no
    /// registered parameter, so no gradient fact can be recorded.
    fn warn_no_parameters(&self) {
        {
            let mut p = self.inner().persist();
            if p.warned_no_parameters {
                return;
            }
            p.warned_no_parameters = true;
        }
        self.session()
            .record_counter(BACKWARD_WITHOUT_PARAMETERS_COUNTER, 1.0);
        eprintln!(
            "trace-candle: warning: backward recorded with no registered parameters, so no \
             gradient facts; register them with capture.parameters_varmap(&varmap), \
             capture.parameters(..) or TrainingCapture::watch_varmap"
        );
    }

    /// Runs `loss.backward()` as the `backward` phase: records the autograd graph it walks
    /// ([`Capture::autograd`]), then the registered parameters' gradients
    /// ([`Capture::record_gradients`]). Returns the gradients.
    pub fn backward(&self, loss: &Tensor) -> Result<GradStore, CaptureError> {
        let _phase = self.phase("backward", ExecStep::Backward);
        self.record_pending_parameters();
        self.autograd(loss);
        let grads = loss.backward()?;
        self.record_gradients(&grads)?;
        Ok(grads)
    }
}
