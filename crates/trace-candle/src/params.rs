//! Parameters: model weights from any `(name, &Tensor)` source, as persistent parameter memory.

use candle_core::Tensor;
use trace_record::TensorRecord;
use trace_record::schema::MemoryCategory;

use crate::Capture;
use crate::meta::{DeviceLabel, dtype_label, tensor_bytes, tensor_id};
use crate::persistent::Param;

impl Capture {
    /// Registers model weights from any source as parameters: a `VarMap`'s data, a
    /// safetensors map loaded with `candle_core::safetensors::load`, a list of
    /// `(name, &tensor)` pairs. Their tensor events and persistent allocations (category
    /// `parameter`, never freed, each storage once) are written now when the session is
    /// active, else at the first active step; optimizer state estimated with
    /// [`Capture::estimate_optimizer_state`] is added for them. Gradients are looked up for them by
    /// [`Capture::record_gradients`]. Returns how many were newly registered (a tensor
    /// registered twice is kept once, under its first name). Holds metadata only, never a
    /// tensor.
    pub fn parameters<'t, N: AsRef<str>>(
        &self,
        params: impl IntoIterator<Item = (N, &'t Tensor)>,
    ) -> usize {
        let mut added: Vec<Param> = params
            .into_iter()
            .map(|(name, t)| Param {
                name: name.as_ref().to_string(),
                tensor_id: t.id(),
                id: tensor_id(t),
                shape: t.dims().to_vec(),
                dtype: t.dtype(),
                device: DeviceLabel::of(t.device()),
                bytes: tensor_bytes(t),
                requires_grad: t.track_op(),
            })
            .collect();
        // Sorted by name, so a HashMap source gives the same trace every run.
        added.sort_by(|a, b| a.name.cmp(&b.name));
        let n = {
            let mut p = self.inner().persist();
            let before = p.params.len();
            for a in added {
                if !p.params.iter().any(|q| q.id == a.id) {
                    p.params.push(a);
                }
            }
            p.params_pending = true;
            // Optimizer state estimated earlier covers these parameters too.
            if !p.estimated.is_empty() && p.params.len() > before {
                let (kinds, new) = (p.estimated.clone(), p.params[before..].to_vec());
                p.estimate_state(&kinds, &new);
            }
            p.params.len() - before
        };
        self.record_pending_persistent();
        n
    }

    /// Registers every variable of a candle-nn `VarMap` as a parameter under its name (one
    /// line for the usual case of [`Capture::parameters`]): sorted by name. Returns how many
    /// were newly registered.
    #[cfg(feature = "nn")]
    pub fn parameters_varmap(&self, varmap: &candle_nn::VarMap) -> usize {
        let data = varmap
            .data()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.parameters(
            data.iter()
                .map(|(name, var)| (name.as_str(), var.as_tensor())),
        )
    }

    /// The registered parameters' names, in registration order (sorted within each call).
    pub fn parameter_names(&self) -> Vec<String> {
        self.inner()
            .persist()
            .params
            .iter()
            .map(|p| p.name.clone())
            .collect()
    }

    /// Writes the registered parameters not yet written, when active (see
    /// `Capture::record_pending_persistent`, which writes the optimizer state after them).
    pub(crate) fn record_pending_parameters(&self) {
        if !self.is_active() {
            return;
        }
        let params = {
            let mut p = self.inner().persist();
            if !p.params_pending {
                return;
            }
            p.params_pending = false;
            p.params.clone()
        };
        for p in &params {
            if self.has_persistent(p.id) {
                continue;
            }
            self.session().record_tensor(&TensorRecord {
                id: p.id,
                label: Some(&p.name),
                shape: &p.shape,
                dtype: dtype_label(p.dtype),
                device: p.device.as_str(),
                requires_grad: p.requires_grad,
                bytes: p.bytes,
                category: MemoryCategory::Parameter,
            });
            self.record_persistent_alloc(
                p.id,
                p.id,
                p.bytes,
                p.device.as_str(),
                MemoryCategory::Parameter,
            );
        }
    }
}
