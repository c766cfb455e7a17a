//! Persistent buffers (a KV cache, running statistics), declared by tensor or by shape.

use candle_core::{DType, Device, Tensor};
use trace_record::TensorRecord;
use trace_record::schema::MemoryCategory;

use crate::Capture;
use crate::meta::{DeviceLabel, dense_bytes, dtype_label, tensor_id};
use crate::persistent::Buffer;

pub use trace_record::schema::DECLARED_BUFFER_BIT;

impl Capture {
    /// Declares a persistent buffer held in a tensor (a KV cache, running statistics):
    /// recorded as allocated (category `other`, labelled `name`) until it is redeclared
    /// with another tensor, released ([`Capture::release_buffer`]) or the run finishes.
    /// Call it whenever the buffer may have changed (e.g. once per step): a new storage
    /// frees the old one.
    pub fn buffer(&self, name: &str, tensor: &Tensor) {
        let id = tensor_id(tensor);
        self.set_buffer(
            name,
            Some(id),
            tensor.dims(),
            tensor.dtype(),
            DeviceLabel::of(tensor.device()),
        );
    }

    /// Declares a persistent buffer by shape, for buffers a library keeps private (the KV
    /// cache of a candle-transformers model): `shape` × `dtype` logical bytes on `device`.
    /// Like [`Capture::buffer`], a changed shape frees the old allocation and records a new
    /// one (ids from [`DECLARED_BUFFER_BIT`]'s range), so the trace shows the buffer's size
    /// per step; the bytes are what the caller declares, not observed. Under a schedule, a
    /// buffer declared once while inactive is recorded at the first recorded step; one
    /// declared step after step (a growing cache) is recorded when a recorded step declares
    /// it, never with a size from an unrecorded step.
    pub fn buffer_shape(&self, name: &str, shape: &[usize], dtype: DType, device: &Device) {
        self.set_buffer(name, None, shape, dtype, DeviceLabel::of(device));
    }

    fn set_buffer(
        &self,
        name: &str,
        id: Option<u64>,
        shape: &[usize],
        dtype: DType,
        device: DeviceLabel,
    ) {
        let active = self.is_active();
        let step = self.session().current_step();
        let mut p = self.inner().persist();
        let pos = p.buffers.iter().position(|b| b.name == name);
        // Declared in another step before: it changes per step.
        let per_step =
            pos.is_some_and(|i| p.buffers[i].per_step || p.buffers[i].declared_step != step);
        if let Some(i) = pos {
            p.buffers[i].per_step = per_step;
            let b = &p.buffers[i];
            let same = match id {
                Some(id) => b.id == id,
                None => b.shape == shape && b.dtype == dtype && b.device == device,
            };
            if same && (b.recorded || !active) {
                return;
            }
            let old = p.buffers.remove(i);
            if old.recorded {
                self.free_persistent(
                    old.id,
                    old.bytes,
                    old.device.as_str(),
                    MemoryCategory::Other,
                );
            }
        }
        let id = id.unwrap_or_else(|| {
            p.next_buffer += 1;
            DECLARED_BUFFER_BIT | p.next_buffer
        });
        let mut b = Buffer {
            name: name.to_string(),
            id,
            shape: shape.to_vec(),
            dtype,
            device,
            bytes: dense_bytes(dtype, shape.iter().product()),
            recorded: false,
            declared_step: step,
            per_step,
        };
        if active {
            self.write_buffer(&b);
            b.recorded = true;
        }
        p.buffers.push(b);
    }

    fn write_buffer(&self, b: &Buffer) {
        self.session().record_tensor(&TensorRecord {
            id: b.id,
            label: Some(&b.name),
            shape: &b.shape,
            dtype: dtype_label(b.dtype),
            device: b.device.as_str(),
            requires_grad: false,
            bytes: b.bytes,
            category: MemoryCategory::Other,
        });
        self.record_persistent_alloc(
            b.id,
            b.id,
            b.bytes,
            b.device.as_str(),
            MemoryCategory::Other,
        );
    }

    /// Releases buffer `name`: records its free. Returns whether it was declared.
    pub fn release_buffer(&self, name: &str) -> bool {
        let mut p = self.inner().persist();
        let Some(i) = p.buffers.iter().position(|b| b.name == name) else {
            return false;
        };
        let b = p.buffers.remove(i);
        if b.recorded {
            self.free_persistent(b.id, b.bytes, b.device.as_str(), MemoryCategory::Other);
        }
        true
    }

    /// Frees every declared buffer (at finish).
    pub(crate) fn release_buffers(&self) {
        let buffers = std::mem::take(&mut self.inner().persist().buffers);
        for b in buffers.iter().filter(|b| b.recorded) {
            self.free_persistent(b.id, b.bytes, b.device.as_str(), MemoryCategory::Other);
        }
    }

    /// Writes buffers declared while the session was inactive (at a step that starts active),
    /// except those declared in more than one step: their last inactive declaration describes
    /// a step that is over (a KV cache's size during warm-up), and the recorded step declares
    /// its own size, so nothing stale leaks into it.
    pub(crate) fn record_pending_buffers(&self) {
        if !self.is_active() {
            return;
        }
        let mut p = self.inner().persist();
        for b in p.buffers.iter_mut().filter(|b| !b.recorded && !b.per_step) {
            self.write_buffer(b);
            b.recorded = true;
        }
    }
}
