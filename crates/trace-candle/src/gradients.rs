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
    if grad.dtype() == DType::F32
        && let Some(found) = with_cpu_f32(grad, state_of_f32)
    {
        return Ok(found);
    }
    let flat = grad.flatten_all()?;
    Ok(match grad.dtype() {
        DType::F32 => state_of_f32(&flat.to_vec1::<f32>()?),
        DType::F64 => state_of(&flat.to_vec1::<f64>()?, |&v| v),
        _ => state_of(&flat.to_dtype(DType::F64)?.to_vec1::<f64>()?, |&v| v),
    })
}

/// `f` of a contiguous f32 CPU tensor's elements, read in place (no copy: at every backward
/// the gradients of all parameters are read, as many bytes as the model has); `None` for a
/// tensor on another device or a strided view.
fn with_cpu_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Option<R> {
    let (storage, layout) = t.storage_and_layout();
    let candle_core::Storage::Cpu(cpu) = &*storage else {
        return None;
    };
    let (start, end) = layout.contiguous_offsets()?;
    let values = cpu.as_slice::<f32>().ok()?.get(start..end)?;
    Some(f(values))
}

/// [`state_of`] for f32 entries, without the per-entry tests and with independent partial
/// sums (the sum of squares of a model's gradients is one long add chain otherwise). Squared
/// in `f64`, an f32 entry can neither overflow (the largest squares to about 1.2e77, and no
/// count of them reaches `f64::MAX`) nor underflow (the smallest subnormal squares to about
/// 2e-90), and squares never cancel: the sum is finite exactly when every entry is, and zero
/// exactly when every entry is.
fn state_of_f32(values: &[f32]) -> (GradientState, Option<f64>) {
    const LANES: usize = 8;
    let mut lanes = [0.0f64; LANES];
    let chunks = values.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (acc, &v) in lanes.iter_mut().zip(chunk) {
            let v = f64::from(v);
            *acc += v * v;
        }
    }
    let mut sum: f64 = lanes.iter().sum();
    for &v in rest {
        let v = f64::from(v);
        sum += v * v;
    }
    if !sum.is_finite() {
        (GradientState::NonFinite, None)
    } else if sum == 0.0 {
        (GradientState::Zero, Some(0.0))
    } else {
        (GradientState::Present, Some(sum.sqrt()))
    }
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
        self.record_pending_persistent();
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
             gradient facts; register them with capture.parameters_varmap(&varmap) or \
             capture.parameters(..)"
        );
    }

    /// Runs `loss.backward()` as the `backward` phase: records the autograd graph it walks
    /// ([`Capture::autograd`]), then the registered parameters' gradients
    /// ([`Capture::record_gradients`]). Returns the gradients.
    pub fn backward(&self, loss: &Tensor) -> Result<GradStore, CaptureError> {
        let _phase = self.phase("backward", ExecStep::Backward);
        self.record_pending_persistent();
        self.autograd(loss);
        let grads = loss.backward()?;
        self.record_gradients(&grads)?;
        Ok(grads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use proptest::prelude::*;

    /// Any f32, the special values often.
    fn entry() -> impl Strategy<Value = f32> {
        prop_oneof![
            4 => any::<f32>(),
            1 => Just(0.0f32),
            1 => Just(-0.0f32),
            1 => Just(f32::MIN_POSITIVE / 8.0),
            1 => Just(f32::MAX),
            1 => Just(f32::NAN),
            1 => Just(f32::NEG_INFINITY),
        ]
    }

    proptest! {
        /// The f32 path (in place, partial sums) says what the general per-entry path says,
        /// with the same norm up to rounding.
        #[test]
        fn the_f32_path_agrees_with_the_general_one(values in prop::collection::vec(entry(), 0..200)) {
            let (state, norm) = state_of_f32(&values);
            let (want_state, want_norm) = state_of(&values, |&v| f64::from(v));
            prop_assert_eq!(state, want_state);
            match (norm, want_norm) {
                (Some(n), Some(w)) => prop_assert!((n - w).abs() <= 1e-12 * w, "{} vs {}", n, w),
                (n, w) => prop_assert_eq!(n, w),
            }
            // The tensor path reads the same entries, in place or copied.
            if !values.is_empty() {
                let t = Tensor::from_vec(values.clone(), values.len(), &Device::Cpu).unwrap();
                prop_assert_eq!(gradient_state(&t).unwrap(), (state, norm));
            }
        }
    }

    #[test]
    fn views_are_read_at_their_own_elements() {
        let all = Tensor::arange(0f32, 12.0, &Device::Cpu)
            .unwrap()
            .reshape((3, 4))
            .unwrap();
        let norm = |xs: &[f32]| xs.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt();
        // A contiguous view at an offset in its storage: rows 1 and 2, read in place.
        let rows = all.narrow(0, 1, 2).unwrap();
        assert!(with_cpu_f32(&rows, <[f32]>::len) == Some(8));
        let want = norm(&[4., 5., 6., 7., 8., 9., 10., 11.]);
        assert_eq!(gradient_state(&rows).unwrap().1, Some(want));
        // A strided view (one column) is copied instead: same answer.
        let column = all.narrow(1, 2, 1).unwrap();
        assert!(with_cpu_f32(&column, <[f32]>::len).is_none());
        let (state, got) = gradient_state(&column).unwrap();
        assert_eq!(state, GradientState::Present);
        let want = norm(&[2., 6., 10.]);
        assert!((got.unwrap() - want).abs() < 1e-12 * want);
    }
}
