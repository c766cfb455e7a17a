//! The autograd graph a loss keeps alive for backward: its tensors and the storages behind them.

use std::collections::HashMap;

use candle_core::{DType, Tensor};
use trace_record::schema::{
    AUTOGRAD_AT_FORWARD_START_COUNTER, AUTOGRAD_AT_STEP_START_COUNTER, AUTOGRAD_AT_WALK_COUNTER,
    AUTOGRAD_LABEL, AUTOGRAD_STORAGE_BYTES_COUNTER, AUTOGRAD_STORAGES_COUNTER, MemoryCategory,
};

use crate::Capture;
use crate::meta::{DeviceLabel, dense_bytes, tensor_id};

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
    /// Of those, the ones placed at the start of the step's latest forward phase.
    pub placed_at_forward_start: usize,
    /// Of those, the ones placed at the step's start (no forward phase had opened in the
    /// step); the rest were placed at this call (no forward phase, and the run's first
    /// step, whose start no boundary marks).
    pub placed_at_step_start: usize,
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
    /// Records the tensors the autograd graph of `loss` keeps alive for backward, found with
    /// Candle's public `Tensor::sorted_nodes` (what `backward` itself walks): every tensor
    /// the loss depends on through ops that track gradients, variables excluded. Each gets a
    /// `tensor` event labelled [`AUTOGRAD_LABEL`] (category `activation`), in execution
    /// order (inputs before the ops that read them); each distinct storage gets one
    /// `activation` allocation (storage id: the first of its tensors' ids; bytes: the
    /// extent its views reach), freed at the end of the step, unless one of its tensors was
    /// already allocated in this step (a captured op's output, recorded when it was
    /// created). Such a storage's creation time is unknown: its allocation is stamped at the
    /// start of the step's latest forward phase ([`Capture::phase`] with
    /// [`ExecStep::Forward`](trace_record::schema::ExecStep::Forward)), when one opened in
    /// the step, else at the step's start ([`Capture::step`]), else now. Then the counters
    /// [`AUTOGRAD_STORAGE_BYTES_COUNTER`] and [`AUTOGRAD_STORAGES_COUNTER`] give the
    /// distinct storages' bytes and number, the figures [`AutogradSummary`] returns, and
    /// [`AUTOGRAD_AT_FORWARD_START_COUNTER`], [`AUTOGRAD_AT_STEP_START_COUNTER`] and
    /// [`AUTOGRAD_AT_WALK_COUNTER`] how many of them were placed each way. Call it before
    /// `loss.backward()` (see [`Capture::backward`]). Nothing outside an active window.
    ///
    /// Candle exposes no edges (`Tensor::op` is private), so the structure recorded is the
    /// nodes' shapes and dtypes in topological order; the analysis fingerprints that.
    pub fn autograd(&self, loss: &Tensor) -> AutogradSummary {
        self.measured(|| self.autograd_walk(loss))
    }

    fn autograd_walk(&self, loss: &Tensor) -> AutogradSummary {
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
            if let Some(&i) = by_storage.get(&key) {
                let s = &mut storages[i];
                s.1 = s.1.max(extent);
                s.4.push(id);
            } else {
                by_storage.insert(key, storages.len());
                storages.push((id, extent, t.dtype(), DeviceLabel::of(t.device()), vec![id]));
            }
        }
        summary.storages = storages.len();
        let placement = self.autograd_placement_ns();
        for (id, extent, dtype, device, members) in &storages {
            let bytes = dense_bytes(*dtype, *extent);
            summary.bytes = summary.bytes.saturating_add(bytes);
            if members
                .iter()
                .any(|m| self.has_step_alloc(*m) || self.has_persistent(*m))
            {
                continue;
            }
            if self.alloc_step_storage(
                *id,
                *id,
                bytes,
                device.clone(),
                MemoryCategory::Activation,
                placement.map(|p| p.0),
            ) {
                summary.recorded_allocations += 1;
                match placement {
                    Some((_, true)) => summary.placed_at_forward_start += 1,
                    Some((_, false)) => summary.placed_at_step_start += 1,
                    None => {}
                }
            }
        }
        // The graph's bytes as the memory timeline counts them, for the gradients report.
        let session = self.session();
        session.record_counter(AUTOGRAD_STORAGE_BYTES_COUNTER, summary.bytes as f64);
        session.record_counter(AUTOGRAD_STORAGES_COUNTER, summary.storages as f64);
        session.record_counter(
            AUTOGRAD_AT_FORWARD_START_COUNTER,
            summary.placed_at_forward_start as f64,
        );
        session.record_counter(
            AUTOGRAD_AT_STEP_START_COUNTER,
            summary.placed_at_step_start as f64,
        );
        session.record_counter(
            AUTOGRAD_AT_WALK_COUNTER,
            (summary.recorded_allocations
                - summary.placed_at_forward_start
                - summary.placed_at_step_start) as f64,
        );
        summary
    }
}
