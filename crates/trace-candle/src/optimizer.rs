//! Optimizer state: declared (real tensors) or estimated from the parameters, as persistent memory.

use candle_core::Tensor;
use trace_record::TensorRecord;
use trace_record::schema::MemoryCategory;

use crate::Capture;
use crate::meta::{DeviceLabel, dtype_label, tensor_bytes, tensor_id};
use crate::persistent::{OptimizerKind, Param, Persistent, StateTensor};

/// The bit set in the ids of estimated optimizer state (see
/// [`Capture::estimate_optimizer_state`]).
pub const ESTIMATED_STATE_BIT: u64 = 1 << 52;

/// The id of moment `slot` of the parameter with tensor id `param`: bit 52 set, the parameter
/// id (mod 2^50) above two slot bits.
fn estimated_id(param: u64, slot: u64) -> u64 {
    ESTIMATED_STATE_BIT | ((param & ((1u64 << 50) - 1)) << 2) | slot
}

impl Persistent {
    /// Adds the estimated state of every estimated kind for `params` (float parameters only),
    /// skipping ids already held. Returns how many were added.
    pub(crate) fn estimate_state(&mut self, kinds: &[OptimizerKind], params: &[Param]) -> usize {
        let mut added = 0;
        for p in params.iter().filter(|p| p.dtype.is_float()) {
            for &kind in kinds {
                for &(moment, slot) in kind.moments() {
                    let id = estimated_id(p.id, slot);
                    if self.optimizer_state.iter().any(|s| s.id == id) {
                        continue;
                    }
                    self.optimizer_state.push(StateTensor {
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
        }
        if added > 0 {
            self.state_pending = true;
        }
        added
    }
}

impl Capture {
    /// Estimates the optimizer state of `kind` and records it as persistent memory (category
    /// `optimizer_state`, never freed): Candle's optimizers keep their state private, so its
    /// size is derived from the registered parameters. AdamW keeps two moments per float
    /// parameter (`<param>.exp_avg`, `<param>.exp_avg_sq`), SGD with momentum one
    /// (`<param>.momentum_buffer`), candle-nn's SGD none; each has its parameter's shape,
    /// dtype and device. Parameters registered later ([`Capture::parameters`],
    /// [`Capture::parameters_varmap`]) get their state too, so the order of the two calls
    /// does not matter. Written now when the session is active, else at the first active
    /// step. Returns how many state tensors were added now (a kind estimated twice adds
    /// nothing the second time).
    ///
    /// Estimated state has no Candle tensor: its ids have bit 52 set ([`ESTIMATED_STATE_BIT`]:
    /// `1 << 52 | parameter id << 2 | slot`, the parameter id taken mod 2^50, slot 0
    /// `exp_avg`, 1 `exp_avg_sq`, 2 `momentum_buffer`), a range Candle's counter does not reach
    /// in practice (2^52 tensor creations) and below 2^53, so the ids survive JSON readers that
    /// use doubles.
    ///
    /// ```
    /// # fn main() -> Result<(), trace_candle::CaptureError> {
    /// use std::sync::Arc;
    /// use candle_core::{DType, Device, Var};
    /// use trace_candle::{Capture, OptimizerKind, Phase, Run, TraceSession};
    ///
    /// let (session, _sink) = TraceSession::in_memory(Run::new("doc", Phase::Train, "cpu"));
    /// let capture = Capture::new(Arc::new(session));
    /// let w = Var::ones((3, 2), DType::F32, &Device::Cpu)?;
    /// let b = Var::ones(2, DType::F32, &Device::Cpu)?;
    /// // With candle-nn (feature `nn`): `capture.parameters_varmap(&varmap)`.
    /// assert_eq!(capture.parameters([("fc.weight", w.as_tensor()), ("fc.bias", b.as_tensor())]), 2);
    /// // fc.bias.exp_avg, fc.bias.exp_avg_sq, fc.weight.exp_avg, fc.weight.exp_avg_sq
    /// assert_eq!(capture.estimate_optimizer_state(OptimizerKind::AdamW), 4);
    /// capture.finish()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn estimate_optimizer_state(&self, kind: OptimizerKind) -> usize {
        let added = {
            let mut p = self.inner().persist();
            if !p.estimated.contains(&kind) {
                p.estimated.push(kind);
            }
            let params = p.params.clone();
            p.estimate_state(&[kind], &params)
        };
        self.record_pending_persistent();
        added
    }

    /// Declares a real optimizer-state tensor the caller owns (a momentum buffer of its own
    /// optimizer): recorded as persistent memory (category `optimizer_state`, labelled
    /// `label`, storage id its tensor id, never freed), now when the session is active, else
    /// at the first active step. Returns false when that tensor was already declared. Holds
    /// metadata only, never the tensor.
    pub fn declare_optimizer_state(&self, label: &str, tensor: &Tensor) -> bool {
        let id = tensor_id(tensor);
        {
            let mut p = self.inner().persist();
            if p.optimizer_state.iter().any(|s| s.id == id) {
                return false;
            }
            p.optimizer_state.push(StateTensor {
                label: label.to_string(),
                id,
                shape: tensor.dims().to_vec(),
                dtype: tensor.dtype(),
                device: DeviceLabel::of(tensor.device()),
                bytes: tensor_bytes(tensor),
                requires_grad: tensor.track_op(),
            });
            p.state_pending = true;
        }
        self.record_pending_persistent();
        true
    }

    /// The labels of the declared and estimated optimizer-state tensors, in the order they
    /// were added.
    pub fn optimizer_state_labels(&self) -> Vec<String> {
        self.inner()
            .persist()
            .optimizer_state
            .iter()
            .map(|s| s.label.clone())
            .collect()
    }

    /// Writes the parameters and optimizer state not yet written, when active: parameters
    /// first.
    pub(crate) fn record_pending_persistent(&self) {
        if !self.is_active() {
            return;
        }
        self.record_pending_parameters();
        let state = {
            let mut p = self.inner().persist();
            if !p.state_pending {
                return;
            }
            p.state_pending = false;
            p.optimizer_state.clone()
        };
        for s in &state {
            if self.has_persistent(s.id) {
                continue;
            }
            self.session().record_tensor(&TensorRecord {
                id: s.id,
                label: Some(&s.label),
                shape: &s.shape,
                dtype: dtype_label(s.dtype),
                device: s.device.as_str(),
                requires_grad: s.requires_grad,
                bytes: s.bytes,
                category: MemoryCategory::OptimizerState,
            });
            self.record_persistent_alloc(
                s.id,
                s.id,
                s.bytes,
                s.device.as_str(),
                MemoryCategory::OptimizerState,
            );
        }
    }
}
