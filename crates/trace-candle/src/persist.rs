//! What outlives a step: parameters from any `(name, &Tensor)` source, persistent buffers (a KV cache), gradients, the autograd graph at backward and physical memory samples.

use std::collections::HashMap;

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, TensorId};
use trace_record::TensorRecord;
use trace_record::schema::{ExecStep, GradientState, MemoryCategory};

use crate::meta::{DeviceLabel, dense_bytes, dtype_label, tensor_bytes, tensor_id};
use crate::{Capture, CaptureError};

/// The bit set in the ids of buffers declared by shape ([`Capture::buffer_shape`]): they
/// have no Candle tensor, so their ids come from a range Candle's counter does not reach
/// (below 2^53, so JSON readers using doubles keep them exact).
pub const DECLARED_BUFFER_BIT: u64 = 1 << 51;

/// The label of the `tensor` events [`Capture::autograd`] records for the tensors the
/// autograd graph keeps alive.
pub const AUTOGRAD_LABEL: &str = "autograd";

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

/// A declared persistent buffer: its current storage.
#[derive(Debug, Clone)]
struct Buffer {
    name: String,
    id: u64,
    shape: Vec<usize>,
    dtype: DType,
    device: DeviceLabel,
    bytes: u64,
    /// Whether its tensor event and allocation were written (the session was active).
    recorded: bool,
}

/// Parameters, buffers and sampling settings of a [`Capture`].
#[derive(Debug, Default)]
pub(crate) struct Persistent {
    params: Vec<Param>,
    /// Parameters not yet written (registered while the session was inactive).
    params_pending: bool,
    buffers: Vec<Buffer>,
    next_buffer: u64,
    /// Devices sampled at every step end and at finish.
    sampled: Vec<Device>,
    /// Spans the `tracing` layer attached to this capture saw (`None`: no layer).
    pub(crate) layer_spans: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

/// What [`Capture::autograd`] found: the tensors the autograd graph of a loss keeps alive
/// for backward (variables excluded: they are parameters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AutogradSummary {
    /// Tensors in the graph (every non-variable tensor the loss depends on through ops that
    /// track gradients), each recorded as a `tensor` event labelled [`AUTOGRAD_LABEL`].
    pub nodes: usize,
    /// Distinct storages behind them (views share their base's storage; views of
    /// parameters are not counted: they allocate nothing).
    pub storages: usize,
    /// Logical bytes of those storages, each counted once (the extent its views reach).
    pub bytes: u64,
    /// Storages newly allocated in the trace by this call (the others were already
    /// recorded, e.g. as a captured op's output).
    pub recorded_allocations: usize,
}

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

/// The process's resident set size in bytes (resident pages of `/proc/self/statm` times the
/// page size), where the OS says (Linux); `None` elsewhere or when it cannot be read.
///
/// `statm` is read rather than `status` because it is one short line of numbers: a sample
/// costs about 5 µs instead of 13 µs, which matters when a sample is taken every decode step.
#[cfg(target_os = "linux")]
pub fn process_resident_bytes() -> Option<u64> {
    use std::io::Read;
    // `size resident shared text lib data dt`, in pages; well under 128 bytes.
    let mut buf = [0u8; 128];
    let mut file = std::fs::File::open("/proc/self/statm").ok()?;
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    resident_bytes_from_statm(&buf[..len], rustix::param::page_size() as u64)
}

/// The process's resident set size in bytes; `None`: not known on this platform.
#[cfg(not(target_os = "linux"))]
pub fn process_resident_bytes() -> Option<u64> {
    None
}

/// Resident bytes from the text of `/proc/self/statm` (its second field, in pages).
fn resident_bytes_from_statm(statm: &[u8], page_size: u64) -> Option<u64> {
    let text = std::str::from_utf8(statm).ok()?;
    let pages: u64 = text.split_ascii_whitespace().nth(1)?.parse().ok()?;
    pages.checked_mul(page_size)
}

/// `(used, free)` bytes of a CUDA device as its driver reports them (`cuMemGetInfo`: free
/// and total of the device, so `used` counts every process on it).
#[cfg(feature = "cuda")]
fn cuda_used_free(device: &Device) -> Option<(u64, u64)> {
    let cuda = device.as_cuda_device().ok()?;
    let stream = cuda.cuda_stream();
    let (free, total) = stream.context().mem_get_info().ok()?;
    Some(((total.saturating_sub(free)) as u64, free as u64))
}

/// The logical extent of a view in its storage: elements from the storage's start to one
/// past the last element the view reaches.
fn view_extent(t: &Tensor) -> usize {
    let (_, layout) = t.storage_and_layout();
    if layout.dims().contains(&0) {
        return layout.start_offset();
    }
    let last: usize = layout
        .dims()
        .iter()
        .zip(layout.stride())
        .map(|(&d, &s)| (d - 1).saturating_mul(s))
        .fold(0usize, usize::saturating_add);
    layout.start_offset().saturating_add(last).saturating_add(1)
}

impl Capture {
    fn persist(&self) -> std::sync::MutexGuard<'_, Persistent> {
        self.inner().persist()
    }

    /// Registers model weights from any source as parameters: a `VarMap`'s data, a
    /// safetensors map loaded with `candle_core::safetensors::load`, a list of
    /// `(name, &tensor)` pairs. Their tensor events and persistent allocations (category
    /// `parameter`, never freed, each storage once) are written now when the session is
    /// active, else at the first active step. Gradients are looked up for them by
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
            let mut p = self.persist();
            let before = p.params.len();
            for a in added {
                if !p.params.iter().any(|q| q.id == a.id) {
                    p.params.push(a);
                }
            }
            p.params_pending = true;
            p.params.len() - before
        };
        self.record_pending_parameters();
        n
    }

    /// The registered parameters' names, in registration order (sorted within each call).
    pub fn parameter_names(&self) -> Vec<String> {
        self.persist()
            .params
            .iter()
            .map(|p| p.name.clone())
            .collect()
    }

    /// Writes the registered parameters not yet written, when active.
    pub(crate) fn record_pending_parameters(&self) {
        if !self.is_active() {
            return;
        }
        let params = {
            let mut p = self.persist();
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

    /// The gradient facts of the registered parameters, without recording anything.
    pub fn gradient_facts(&self, grads: &GradStore) -> Result<Vec<GradientFact>, CaptureError> {
        let params = self.persist().params.clone();
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
        if !self.is_active() {
            return Ok(0);
        }
        self.record_pending_parameters();
        let params = self.persist().params.clone();
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

    /// Records the tensors the autograd graph of `loss` keeps alive for backward, found with
    /// Candle's public `Tensor::sorted_nodes` (what `backward` itself walks): every tensor
    /// the loss depends on through ops that track gradients, variables excluded. Each gets a
    /// `tensor` event labelled [`AUTOGRAD_LABEL`] (category `activation`), in execution
    /// order (inputs before the ops that read them); each distinct storage gets one
    /// `activation` allocation (storage id: the first of its tensors' ids; bytes: the
    /// extent its views reach), freed at the end of the step, unless one of its tensors was
    /// already allocated in this step (a captured op's output). Call it before
    /// `loss.backward()` (see [`Capture::backward`]). Nothing outside an active window.
    ///
    /// Candle exposes no edges (`Tensor::op` is private), so the structure recorded is the
    /// nodes' shapes and dtypes in topological order; the analysis fingerprints that.
    pub fn autograd(&self, loss: &Tensor) -> AutogradSummary {
        if !self.is_active() {
            return AutogradSummary::default();
        }
        let nodes = loss.sorted_nodes();
        let mut summary = AutogradSummary::default();
        // Storage identity: the address of the storage, valid while `nodes` keeps every
        // tensor alive (only used to group views here; never written).
        let mut by_storage: HashMap<usize, usize> = HashMap::new();
        // (first tensor id, extent in elements, dtype, device, member tensor ids)
        let mut storages: Vec<(u64, usize, DType, DeviceLabel, Vec<u64>)> = Vec::new();
        let storage_key = |t: &Tensor| {
            let (storage, _) = t.storage_and_layout();
            std::ptr::from_ref(&*storage) as usize
        };
        // Variables are parameters: views of them (`w.t()`) allocate nothing.
        let parameter_storages: std::collections::HashSet<usize> = nodes
            .iter()
            .filter(|t| t.is_variable())
            .map(|t| storage_key(t))
            .collect();
        for t in nodes.iter().rev().filter(|t| !t.is_variable()) {
            summary.nodes += 1;
            self.record_tensor(t, Some(AUTOGRAD_LABEL), Some(MemoryCategory::Activation));
            let key = storage_key(t);
            if parameter_storages.contains(&key) {
                continue;
            }
            let extent = view_extent(t);
            let id = tensor_id(t);
            match by_storage.get(&key) {
                Some(&i) => {
                    let s = &mut storages[i];
                    s.1 = s.1.max(extent);
                    s.4.push(id);
                }
                None => {
                    by_storage.insert(key, storages.len());
                    storages.push((id, extent, t.dtype(), DeviceLabel::of(t.device()), vec![id]));
                }
            }
        }
        summary.storages = storages.len();
        for (id, extent, dtype, device, members) in &storages {
            let bytes = dense_bytes(*dtype, *extent);
            summary.bytes = summary.bytes.saturating_add(bytes);
            if members
                .iter()
                .any(|m| self.has_step_alloc(*m) || self.has_persistent(*m))
            {
                continue;
            }
            if self.alloc_step_storage(*id, *id, bytes, device.clone(), MemoryCategory::Activation)
            {
                summary.recorded_allocations += 1;
            }
        }
        summary
    }

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
    /// per step; the bytes are what the caller declares, not observed.
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
        let mut p = self.persist();
        let pos = p.buffers.iter().position(|b| b.name == name);
        if let Some(i) = pos {
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
        let mut p = self.persist();
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
        let buffers = std::mem::take(&mut self.persist().buffers);
        for b in buffers.iter().filter(|b| b.recorded) {
            self.free_persistent(b.id, b.bytes, b.device.as_str(), MemoryCategory::Other);
        }
    }

    /// Writes buffers declared while the session was inactive (at a step that starts active).
    fn record_pending_buffers(&self) {
        if !self.is_active() {
            return;
        }
        let mut p = self.persist();
        for b in p.buffers.iter_mut().filter(|b| !b.recorded) {
            self.write_buffer(b);
            b.recorded = true;
        }
    }

    /// Records one physical-memory sample of `device` (`device_memory` event): on the CPU,
    /// the process's resident set size as `used` ([`process_resident_bytes`]; Linux); on a
    /// CUDA device (feature `cuda`), the driver's used and free bytes of the device. A figure
    /// the platform cannot give is left absent, never zero; returns whether a sample was
    /// written.
    pub fn sample_memory(&self, device: &Device) -> bool {
        if !self.is_active() {
            return false;
        }
        let label = DeviceLabel::of(device);
        let (used, free) = match device {
            Device::Cpu => (process_resident_bytes(), None),
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => match cuda_used_free(device) {
                Some((u, f)) => (Some(u), Some(f)),
                None => (None, None),
            },
            _ => (None, None),
        };
        if used.is_none() && free.is_none() {
            return false;
        }
        self.session()
            .record_device_memory(label.as_str(), used, free, None);
        true
    }

    /// Samples `device`'s physical memory ([`Capture::sample_memory`]) at the end of every
    /// step and at [`Capture::finish`]. Chains after [`Capture::open`] / [`Capture::new`].
    pub fn sampling_memory(self, device: &Device) -> Self {
        self.persist().sampled.push(device.clone());
        self
    }

    /// What a step's end records before its boundary: the frees of its allocations, the
    /// physical-memory samples.
    pub(crate) fn end_step_records(&self) {
        self.free_step_allocations();
        let sampled = self.persist().sampled.clone();
        for d in &sampled {
            self.sample_memory(d);
        }
    }

    /// What a new step records first when it is active: parameters and buffers registered
    /// while the session was inactive.
    pub(crate) fn begin_step_records(&self) {
        if self.is_active() {
            self.record_pending_parameters();
            self.record_pending_buffers();
        }
    }

    /// Records, at finish, how many spans the `tracing` layer attached to this capture saw
    /// (counter `trace_candle.tracing_spans`), so a trace whose layer saw none says so.
    pub(crate) fn record_layer_count(&self) {
        let counter = self.persist().layer_spans.clone();
        if let Some(c) = counter {
            let n = c.load(std::sync::atomic::Ordering::Relaxed);
            self.session()
                .record_counter(TRACING_SPANS_COUNTER, n as f64);
        }
    }
}

/// The counter [`Capture::finish`] writes with the number of spans the `tracing` layer of
/// [`Capture::install_tracing`] saw (absent when no layer was installed).
pub const TRACING_SPANS_COUNTER: &str = "trace_candle.tracing_spans";

#[cfg(test)]
mod statm_tests {
    use super::resident_bytes_from_statm;

    #[test]
    fn resident_pages_times_page_size() {
        let cases: [(&[u8], u64, Option<u64>); 5] = [
            (b"5374 2011 1342 342 0 1097 0\n", 4096, Some(2011 * 4096)),
            (b"5374 2011 1342 342 0 1097 0", 65536, Some(2011 * 65536)),
            (b"5374", 4096, None),
            (b"5374 x 1", 4096, None),
            (b"1 18446744073709551615 0", 4096, None),
        ];
        for (text, page, want) in cases {
            assert_eq!(resident_bytes_from_statm(text, page), want, "{text:?}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_a_plausible_resident_size() {
        let bytes = super::process_resident_bytes().expect("statm is readable on Linux");
        // A test binary holds at least a megabyte and far less than a terabyte.
        assert!((1 << 20..1 << 40).contains(&bytes), "{bytes}");
        // And it agrees with the kernel's own VmRSS (kB) read right after (pages may come and
        // go in between, so within 25%).
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        let vm = kib * 1024;
        assert!(
            bytes.abs_diff(vm) * 4 <= vm,
            "statm {bytes} B vs VmRSS {vm} B"
        );
    }
}
