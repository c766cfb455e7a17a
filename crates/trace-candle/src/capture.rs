//! [`Capture`]: the one recording handle (timed ops, spans, execution steps, step allocations).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use candle_core::Tensor;
use trace_record::schema::{
    AllocKind, ExecStep, MODULE_INPUT, MODULE_OUTPUT, MemoryCategory, SpanKind,
    TRACING_SPANS_COUNTER, TimingMode,
};
use trace_record::{MemoryRecord, OpRecord, TensorRecord, TraceSession};

use crate::exec_scope::{
    CaptureSpan, current_exec_step, publish, replace_exec_step, set_exec_step,
};
use crate::meta::{DeviceLabel, dtype_label, tensor_bytes, tensor_id};
use crate::op_spans;
use crate::persistent::Persistent;

/// The memory category of tensors produced in an execution step: forward → activation,
/// backward → gradient, optimizer → optimizer_state; outside any step (inference) →
/// activation.
pub(crate) fn category_for(step: Option<ExecStep>) -> MemoryCategory {
    match step {
        None | Some(ExecStep::Forward) => MemoryCategory::Activation,
        Some(ExecStep::Backward) => MemoryCategory::Gradient,
        Some(ExecStep::Optimizer) => MemoryCategory::OptimizerState,
    }
}

/// An allocation recorded during the current step, freed by [`Capture::step`].
#[derive(Debug)]
struct LiveAlloc {
    storage: u64,
    tensor: u64,
    bytes: u64,
    device: DeviceLabel,
    category: MemoryCategory,
}

/// Sets of storage ids: foldhash (the workspace's one hasher: fast, and well mixed in the low
/// bits, so structured ids such as estimated optimizer state's `1 << 52 | id << 2 | k` spread
/// over the buckets).
type IdSet = HashSet<u64, foldhash::fast::FixedState>;

#[derive(Debug, Default)]
struct Allocations {
    /// Step allocations in the order they were recorded (freed in that order).
    step: Vec<LiveAlloc>,
    /// Storage ids of `step`, for O(1) duplicate checks.
    step_ids: IdSet,
    /// Storage ids of persistent allocations (parameters, optimizer state): never freed.
    persistent: IdSet,
    /// When this step's latest forward phase opened (session ns), if one did: where the
    /// autograd walk places the activations it finds that no captured op recorded.
    forward_start_ns: Option<u64>,
    /// When this step began (its boundary, session ns), when a boundary began it: where the
    /// walk places them in a step with no forward phase.
    step_start_ns: Option<u64>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) session: Arc<TraceSession>,
    sync: bool,
    allocations: Mutex<Allocations>,
    /// Parameters, buffers, memory sampling and the `tracing` layer's count (see
    /// `persistent.rs`).
    pub(crate) persist: Mutex<Persistent>,
    /// The CPU sampler, when started (`Capture::sample_stacks`, feature `sampler`).
    pub(crate) sampler: trace_sampler::Sampler,
}

impl Inner {
    pub(crate) fn persist(&self) -> MutexGuard<'_, Persistent> {
        self.persist
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn allocations(&self) -> MutexGuard<'_, Allocations> {
        // A panic while holding the lock leaves consistent data (plain pushes): keep going.
        self.allocations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn alloc_step_id(
        &self,
        storage: u64,
        tensor: u64,
        bytes: u64,
        device: DeviceLabel,
        category: MemoryCategory,
        at_ns: Option<u64>,
    ) -> bool {
        let mut a = self.allocations();
        if !a.claim_step(storage) {
            return false;
        }
        let record = MemoryRecord {
            kind: AllocKind::Alloc,
            storage,
            tensor,
            bytes,
            device: device.as_str(),
            category,
        };
        match at_ns {
            Some(ts) => self.session.record_memory_at(&record, ts),
            None => self.session.record_memory(&record),
        }
        a.push_step(storage, tensor, bytes, device, category);
        true
    }

    /// Records op `name` (inputs, output, times), the output's `tensor` event and its step
    /// allocation, in the thread's current span, through one
    /// [`TraceSession::record_op_with_output`] call (one session lock, one span lookup; the
    /// allocation is stamped at the op's end). The caller checked the session is active.
    fn record_op_output(
        &self,
        name: &str,
        inputs: &[&Tensor],
        output: &Tensor,
        start: u64,
        end: u64,
        flops: Option<u64>,
    ) {
        let mut inline = [0u64; INLINE_INPUTS];
        let mut inline_shapes: [&[usize]; INLINE_INPUTS] = [&[]; INLINE_INPUTS];
        let mut inline_dtypes: [&str; INLINE_INPUTS] = [""; INLINE_INPUTS];
        let spilled: (Vec<u64>, Vec<&[usize]>, Vec<&str>);
        let mut in_bytes = 0u64;
        let (input_ids, in_shapes, in_dtypes): (&[u64], &[&[usize]], &[&str]) =
            if inputs.len() <= INLINE_INPUTS {
                for (i, t) in inputs.iter().enumerate() {
                    inline[i] = tensor_id(t);
                    inline_shapes[i] = t.dims();
                    inline_dtypes[i] = dtype_label(t.dtype());
                    in_bytes = in_bytes.saturating_add(tensor_bytes(t));
                }
                let n = inputs.len();
                (&inline[..n], &inline_shapes[..n], &inline_dtypes[..n])
            } else {
                spilled = (
                    inputs.iter().map(|t| tensor_id(t)).collect(),
                    inputs.iter().map(|t| t.dims()).collect(),
                    inputs.iter().map(|t| dtype_label(t.dtype())).collect(),
                );
                in_bytes = inputs
                    .iter()
                    .fold(0u64, |n, t| n.saturating_add(tensor_bytes(t)));
                (&spilled.0, &spilled.1, &spilled.2)
            };
        let out_id = tensor_id(output);
        let out_bytes = tensor_bytes(output);
        let category = category_for(current_exec_step());
        let device = DeviceLabel::of(output.device());
        let dtype = dtype_label(output.dtype());
        let shape = output.dims();
        let op = OpRecord {
            name,
            inputs: input_ids,
            outputs: &[out_id],
            shape,
            dtype,
            device: device.as_str(),
            start_ns: start,
            dur_ns: end.saturating_sub(start),
            in_bytes,
            out_bytes,
            category: Some(category),
            flops,
        };
        let tensor = TensorRecord {
            id: out_id,
            label: None,
            shape,
            dtype,
            device: device.as_str(),
            requires_grad: output.track_op(),
            bytes: out_bytes,
            category,
        };
        let alloc = MemoryRecord {
            kind: AllocKind::Alloc,
            storage: out_id,
            tensor: out_id,
            bytes: out_bytes,
            device: device.as_str(),
            category,
        };
        // An op that returns one of its inputs (or a parameter, or a storage already live in
        // this step) allocates nothing new. The allocation is claimed and written under the
        // allocations lock, so a step end on another thread cannot free it before it exists.
        let s = &self.session;
        if input_ids.contains(&out_id) {
            s.record_op_with_inputs(&op, in_shapes, in_dtypes, &tensor, None);
            return;
        }
        let mut a = self.allocations();
        if a.claim_step(out_id) {
            s.record_op_with_inputs(&op, in_shapes, in_dtypes, &tensor, Some(&alloc));
            a.push_step(out_id, out_id, out_bytes, device, category);
        } else {
            drop(a);
            s.record_op_with_inputs(&op, in_shapes, in_dtypes, &tensor, None);
        }
    }
}

impl Allocations {
    /// Marks `storage` as allocated in this step; false when it is persistent or already
    /// live in this step (then nothing is to be recorded).
    #[inline]
    fn claim_step(&mut self, storage: u64) -> bool {
        (self.persistent.is_empty() || !self.persistent.contains(&storage))
            && self.step_ids.insert(storage)
    }

    /// Remembers a claimed step allocation until the step's end frees it.
    #[inline]
    fn push_step(
        &mut self,
        storage: u64,
        tensor: u64,
        bytes: u64,
        device: DeviceLabel,
        category: MemoryCategory,
    ) {
        self.step.push(LiveAlloc {
            storage,
            tensor,
            bytes,
            device,
            category,
        });
    }
}

/// The handle everything records through: a shared [`TraceSession`] plus the allocations of
/// the current step. Cheap to clone (an `Arc`); `Send + Sync`.
///
/// - [`Capture::op`] times and records one op:
///   `capture.op("matmul", &[&x, &w], || x.matmul(&w))?`.
/// - [`Capture::profile`], [`Capture::profile_sequence`] wrap modules so every forward is a
///   module span; [`Capture::span`] and [`Capture::phase`] open spans by hand.
/// - [`Capture::record_input`], [`Capture::record_tensor`] record tensors that no op made.
/// - [`Capture::step`] ends a step: frees the step's allocations, advances the schedule.
/// - A training loop: [`Capture::parameters`] (or `parameters_varmap`, feature `nn`) registers
///   the weights, [`Capture::estimate_optimizer_state`] or
///   [`Capture::declare_optimizer_state`] the optimizer's state, [`Capture::backward`] runs
///   backward and records its autograd graph and gradients.
///
/// Inside an active window an op records an `op` event (inputs, output, shape, dtype, device,
/// start, duration, input and output bytes, category), a `tensor` event for the output and the
/// output's allocation (stamped at the op's end, freed at the end of the step), all in the
/// thread's current span, as three adjacent lines written by one
/// [`TraceSession::record_op_with_output`] call. The category comes from the thread's
/// execution step ([`Capture::phase`]: forward → activation, backward → gradient, optimizer →
/// optimizer_state; outside any phase → activation). When the run's timing mode is
/// `device_synchronized`, the device is synchronized before the closure (the first input's
/// device) and after it (the output's device), so the duration is device time; otherwise it
/// is host time (as the trace header says). An op without inputs gets no synchronization
/// before it, so device work queued earlier may be charged to it. Outside an active window a
/// call costs one relaxed atomic load and runs the closure.
///
/// Storage ids are tensor ids (see [`crate::tensor_id`]): unique in the process, never
/// reused. Allocations recorded while the session is active are remembered until
/// [`Capture::step`] records their frees, so every step allocation is paired with a free
/// inside the step it was recorded in. Persistent allocations (parameters,
/// [`Capture::parameters`]; optimizer state, [`Capture::estimate_optimizer_state`] and
/// [`Capture::declare_optimizer_state`]) are recorded once and never freed.
#[derive(Debug, Clone)]
pub struct Capture {
    inner: Arc<Inner>,
}

impl Capture {
    /// A capture recording into `session`. When the session's timing mode is
    /// `device_synchronized`, [`Capture::op`] calls `Device::synchronize` around every timed op.
    pub fn new(session: Arc<TraceSession>) -> Self {
        let sync = session.timing_mode() == TimingMode::DeviceSynchronized;
        Capture {
            inner: Arc::new(Inner {
                session,
                sync,
                allocations: Mutex::new(Allocations::default()),
                persist: Mutex::new(Persistent::default()),
                sampler: Default::default(),
            }),
        }
    }

    /// A capture recording into a new trace file at `path` (created or truncated; see
    /// [`TraceSession::open`]): `Capture::open(path, Run::new("train", Phase::Train, "cpu"))?`.
    pub fn open(
        path: impl AsRef<std::path::Path>,
        run: trace_record::Run,
    ) -> Result<Self, crate::CaptureError> {
        Ok(Self::new(Arc::new(TraceSession::open(path, run)?)))
    }

    /// A capture in flight-recorder mode ([`TraceSession::flight`]): everything it records
    /// goes into a bounded in-memory ring of whole steps instead of a file (or beside one:
    /// [`FlightConfig::beside_file`](trace_record::FlightConfig::beside_file)), and a dump (a
    /// complete trace of the steps around the moment, in `config`'s directory) is written
    /// when a trigger fires: [`Capture::dump`], a non-finite [`Capture::loss`], a non-finite
    /// gradient the capture records, a step slower than the running median allows, SIGUSR2
    /// or a trigger file, as `config` enables them.
    ///
    /// ```no_run
    /// use trace_candle::{Capture, FlightConfig, Phase, Run};
    /// let capture = Capture::flight(
    ///     Run::new("train", Phase::Train, "cpu"),
    ///     FlightConfig::new("dumps").before(8).after(2).slow_step(3.0, 32),
    /// )?;
    /// for step in 0..1_000_000u64 {
    ///     // ... forward, backward, optimizer ...
    ///     let loss = 0.5_f64; // the step's loss
    ///     capture.loss(loss); // NaN or infinity: a dump of the steps before
    ///     capture.step();
    /// #   if step == 3 { break; }
    /// }
    /// capture.finish()?;
    /// # Ok::<(), trace_candle::CaptureError>(())
    /// ```
    pub fn flight(
        run: trace_record::Run,
        config: trace_record::FlightConfig,
    ) -> Result<Self, crate::CaptureError> {
        Ok(Self::new(Arc::new(TraceSession::flight(run, config)?)))
    }

    /// Asks a flight recorder ([`Capture::flight`]) for a dump of the current step (and the
    /// configured steps around it), naming `reason`. False when this capture is not a flight
    /// recorder; a dump the recorder's bounds refuse is counted in [`Capture::flight_stats`].
    pub fn dump(&self, reason: &str) -> bool {
        self.inner.session.dump(reason)
    }

    /// Records the step's loss (a `loss` counter); in a flight recorder a NaN or infinite
    /// loss fires a dump.
    pub fn loss(&self, value: f64) {
        self.inner.session.record_loss(value);
    }

    /// What a flight recorder did so far (dumps written, triggers refused, the ring's size);
    /// `None` when this capture is not one.
    pub fn flight_stats(&self) -> Option<trace_record::FlightStats> {
        self.inner.session.flight_stats()
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// The session recorded into (clone the `Arc` to keep it past this capture); `finish` it
    /// when the run ends.
    pub fn session(&self) -> &Arc<TraceSession> {
        &self.inner.session
    }

    /// Whether records are written now (one relaxed atomic load).
    #[inline(always)]
    pub fn is_active(&self) -> bool {
        self.inner.session.is_active()
    }

    /// Whether durations are device time (the device is synchronized around timed regions).
    pub fn synchronizes(&self) -> bool {
        self.inner.sync
    }

    /// Runs `f`, timing and recording it as op `name` with `inputs` (see the type docs for
    /// what is recorded); returns `f`'s result. A failed `f` records nothing.
    #[inline]
    pub fn op<F>(&self, name: &str, inputs: &[&Tensor], f: F) -> candle_core::Result<Tensor>
    where
        F: FnOnce() -> candle_core::Result<Tensor>,
    {
        if !self.inner.session.is_active() {
            return f();
        }
        self.op_active(name, inputs, None, f)
    }

    /// Like [`Capture::op`], with the op's floating-point operation count (e.g. `2·m·n·k` for a
    /// matmul) written in the `op` event's `flops` field.
    #[inline]
    pub fn op_with_flops<F>(
        &self,
        name: &str,
        inputs: &[&Tensor],
        flops: u64,
        f: F,
    ) -> candle_core::Result<Tensor>
    where
        F: FnOnce() -> candle_core::Result<Tensor>,
    {
        if !self.inner.session.is_active() {
            return f();
        }
        self.op_active(name, inputs, Some(flops), f)
    }

    #[inline(never)]
    fn op_active<F>(
        &self,
        name: &str,
        inputs: &[&Tensor],
        flops: Option<u64>,
        f: F,
    ) -> candle_core::Result<Tensor>
    where
        F: FnOnce() -> candle_core::Result<Tensor>,
    {
        let session = &self.inner.session;
        // An enclosing op whose closure runs this one becomes a span first.
        op_spans::materialize(session);
        if self.inner.sync
            && let Some(first) = inputs.first()
        {
            first.device().synchronize()?;
        }
        let start = session.now_ns();
        let depth = op_spans::push(session, name, start, current_exec_step());
        let mut unwind = op_spans::Unwind {
            session,
            depth,
            armed: true,
        };
        let out = f();
        unwind.armed = false;
        let span = op_spans::pop(depth);
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                if let Some(span) = span {
                    session.end_span_id(span);
                    publish(session);
                }
                return Err(e);
            }
        };
        if self.inner.sync
            && let Err(e) = out.device().synchronize()
        {
            if let Some(span) = span {
                session.end_span_id(span);
                publish(session);
            }
            return Err(e);
        }
        let end = session.now_ns();
        // Inside the op's own span when something nested made it one; that span ends where
        // the op ended, so the two are one interval (readers take the op as the span's own).
        self.inner
            .record_op_output(name, inputs, &out, start, end, flops);
        if let Some(span) = span {
            session.end_span_id_at(span, end);
            publish(session);
        }
        Ok(out)
    }

    fn allocations(&self) -> MutexGuard<'_, Allocations> {
        self.inner.allocations()
    }

    /// Opens a span for an execution step on this thread: tensors captured inside it get the
    /// step's memory category (forward → activation, backward → gradient, optimizer →
    /// optimizer_state) until the guard drops.
    ///
    /// A forward phase also marks where the step's forward began: activations that
    /// [`Capture::autograd`] later finds only in the autograd graph are placed there.
    pub fn phase(&self, name: &str, step: ExecStep) -> PhaseGuard<'_> {
        op_spans::materialize(&self.inner.session);
        let session = &self.inner.session;
        let span = session.span(name, SpanKind::Function, Some(step));
        if step == ExecStep::Forward && self.is_active() {
            // Read after the span opened: the placement lies inside the phase's span.
            self.allocations().forward_start_ns = Some(session.now_ns());
        }
        let prev = replace_exec_step(Some(step));
        PhaseGuard {
            prev,
            _span: CaptureSpan::opened(session, span),
        }
    }

    /// Opens a span of `kind` tagged with this thread's execution step; while a sampler runs,
    /// samples taken inside it are attributed to it.
    pub fn span(&self, name: &str, kind: SpanKind) -> CaptureSpan<'_> {
        let session = &self.inner.session;
        op_spans::materialize(session);
        CaptureSpan::opened(session, session.span(name, kind, current_exec_step()))
    }

    /// Records `tensor`'s metadata (`tensor` event) in the current span. `category` defaults
    /// to the category of the thread's execution step.
    pub fn record_tensor(
        &self,
        tensor: &Tensor,
        label: Option<&str>,
        category: Option<MemoryCategory>,
    ) {
        if !self.is_active() {
            return;
        }
        let device = DeviceLabel::of(tensor.device());
        self.inner.session.record_tensor(&TensorRecord {
            id: tensor_id(tensor),
            label,
            shape: tensor.dims(),
            dtype: dtype_label(tensor.dtype()),
            device: device.as_str(),
            requires_grad: tensor.track_op(),
            bytes: tensor_bytes(tensor),
            category: category.unwrap_or_else(|| category_for(current_exec_step())),
        });
    }

    /// Records the allocation of `tensor`'s storage for the current step; its free is
    /// recorded by [`Capture::step`]. Returns false (and records nothing) when inactive or
    /// when the storage is already live (a view returned as is, a parameter).
    pub(crate) fn record_step_alloc(&self, tensor: &Tensor, category: MemoryCategory) -> bool {
        if !self.is_active() {
            return false;
        }
        let id = tensor_id(tensor);
        self.inner.alloc_step_id(
            id,
            id,
            tensor_bytes(tensor),
            DeviceLabel::of(tensor.device()),
            category,
            None,
        )
    }

    /// Records a persistent allocation (a parameter or optimizer state) that is never freed
    /// by [`Capture::step`]. Returns false when inactive or already recorded.
    pub(crate) fn record_persistent_alloc(
        &self,
        storage: u64,
        tensor: u64,
        bytes: u64,
        device: &str,
        category: MemoryCategory,
    ) -> bool {
        if !self.is_active() {
            return false;
        }
        let mut a = self.allocations();
        if a.step_ids.contains(&storage) || !a.persistent.insert(storage) {
            return false;
        }
        self.inner.session.record_memory(&MemoryRecord {
            kind: AllocKind::Alloc,
            storage,
            tensor,
            bytes,
            device,
            category,
        });
        true
    }

    /// Whether storage `storage` is allocated in the current step.
    pub(crate) fn has_step_alloc(&self, storage: u64) -> bool {
        self.allocations().step_ids.contains(&storage)
    }

    /// Records a step allocation of `storage` (freed at the step's end), stamped `at_ns`
    /// (session ns) when given, else now; false when it is already live or inactive.
    pub(crate) fn alloc_step_storage(
        &self,
        storage: u64,
        tensor: u64,
        bytes: u64,
        device: DeviceLabel,
        category: MemoryCategory,
        at_ns: Option<u64>,
    ) -> bool {
        self.is_active()
            && self
                .inner
                .alloc_step_id(storage, tensor, bytes, device, category, at_ns)
    }

    /// Where the autograd walk places the activations it finds that no captured op
    /// recorded: when this step's latest forward phase opened, if one did (see
    /// [`Capture::phase`]), else when the step began, if a boundary began it.
    pub(crate) fn autograd_placement_ns(&self) -> Option<(u64, bool)> {
        let a = self.allocations();
        a.forward_start_ns
            .map(|t| (t, true))
            .or(a.step_start_ns.map(|t| (t, false)))
    }

    /// Records the free of a persistent allocation (a released buffer) and forgets it.
    pub(crate) fn free_persistent(
        &self,
        storage: u64,
        bytes: u64,
        device: &str,
        category: MemoryCategory,
    ) {
        let mut a = self.allocations();
        if !a.persistent.remove(&storage) {
            return;
        }
        self.inner.session.record_memory(&MemoryRecord {
            kind: AllocKind::Free,
            storage,
            tensor: storage,
            bytes,
            device,
            category,
        });
    }

    /// Whether persistent storage `storage` was recorded.
    pub(crate) fn has_persistent(&self, storage: u64) -> bool {
        self.allocations().persistent.contains(&storage)
    }

    /// Records an op the caller ran and timed itself (`start_ns`/`end_ns` from
    /// `session().now_ns()`): the `op` event, the output's `tensor` event and its step
    /// allocation, as [`Capture::op`] does. Nothing outside an active window.
    pub fn record_op(
        &self,
        name: &str,
        inputs: &[&Tensor],
        output: &Tensor,
        start_ns: u64,
        end_ns: u64,
    ) {
        if self.is_active() {
            op_spans::materialize(&self.inner.session);
            self.inner
                .record_op_output(name, inputs, output, start_ns, end_ns, None);
        }
    }

    /// Records the input of a step (a data batch): a tensor event and a step allocation in
    /// category `input`.
    pub fn record_input(&self, tensor: &Tensor, label: &str) {
        if !self.is_active() {
            return;
        }
        self.record_tensor(tensor, Some(label), Some(MemoryCategory::Input));
        self.record_step_alloc(tensor, MemoryCategory::Input);
    }

    /// Records the frees of every step allocation (in allocation order) and forgets them.
    /// Returns how many were freed.
    pub(crate) fn free_step_allocations(&self) -> usize {
        let mut a = self.allocations();
        let n = a.step.len();
        for l in &a.step {
            self.inner.session.record_memory(&MemoryRecord {
                kind: AllocKind::Free,
                storage: l.storage,
                tensor: l.tensor,
                bytes: l.bytes,
                device: l.device.as_str(),
                category: l.category,
            });
        }
        a.step.clear();
        a.step_ids.clear();
        a.forward_start_ns = None;
        a.step_start_ns = None;
        n
    }

    /// Ends the step: frees the step's allocations, then advances the session's schedule.
    /// Returns the new step's index. Use this rather than `TraceSession::step` so that no
    /// allocation recorded in an active step is left without its free.
    ///
    /// Either loop shape works: `step()` at the end of each iteration, or at the start of
    /// each iteration; end the run with [`Capture::finish`] in both cases. A step in which
    /// nothing was recorded is not reported as a step by the analyses, so the boundary that
    /// the last `step()` (or the first, at the start of a loop) opens costs nothing.
    pub fn step(&self) -> u64 {
        self.end_step_records(false);
        let index = self.inner.session.step();
        self.allocations().step_start_ns = Some(self.inner.session.now_ns());
        self.inner.sampler.on_step(&self.inner.session);
        // The step boundary is handed to the heap tracker at once: a marker in its buffer,
        // and the tracker closes the step's account in its place, on its own thread.
        #[cfg(feature = "heap")]
        trace_heap::on_step(&self.inner.session);
        self.begin_step_records();
        index
    }

    /// Ends the run: frees the current step's allocations and the declared buffers (so
    /// nothing the run freed looks leaked), records a last physical-memory sample when
    /// sampling is on and what the `tracing` layer saw, then finishes the session (trailer,
    /// flush). No step boundary is written: the last step ends here.
    pub fn finish(&self) -> Result<trace_record::Summary, crate::CaptureError> {
        self.end_step_records(true);
        self.release_buffers();
        self.record_layer_count();
        self.inner.sampler.stop(&self.inner.session);
        // The heap tracker's last lines and account are written before the trailer.
        #[cfg(feature = "heap")]
        trace_heap::stop(&self.inner.session);
        // After the sampler and the heap tracker stopped: timing the capture's own work
        // allocates a few megabytes and opens scratch spans, which neither may see as the
        // program's.
        self.record_overhead();
        Ok(self.inner.session.finish()?)
    }

    /// What a step's end records before its boundary: the frees of its allocations, the
    /// physical-memory samples (`last`: the run's end, always sampled).
    fn end_step_records(&self, last: bool) {
        self.free_step_allocations();
        self.sample_step_memory(last);
    }

    /// What a new step records first when it is active: parameters, optimizer state and
    /// buffers registered while the session was inactive.
    fn begin_step_records(&self) {
        if self.is_active() {
            self.record_pending_persistent();
            self.record_pending_buffers();
        }
    }

    /// Records, at finish, how many spans the `tracing` layer attached to this capture saw
    /// (counter `trace_candle.tracing_spans`), so a trace whose layer saw none says so.
    fn record_layer_count(&self) {
        let seen = self.inner.persist().layer_span_count();
        if let Some(n) = seen {
            self.inner
                .session
                .record_counter(TRACING_SPANS_COUNTER, n as f64);
        }
    }

    /// Records a module call: a module span named `path` with the input and output tensors
    /// (shapes) and the output's activation allocation. Outside an active window only `f`
    /// runs.
    pub(crate) fn module_call(
        &self,
        path: &str,
        xs: &Tensor,
        f: impl FnOnce(&Tensor) -> candle_core::Result<Tensor>,
    ) -> candle_core::Result<Tensor> {
        if !self.is_active() {
            return f(xs);
        }
        op_spans::materialize(&self.inner.session);
        // Named relative to the enclosing profiled module, so paths are not doubled.
        let (_module, at) = crate::module_path::enter_module(path);
        let _span = self.span(path.get(at..).unwrap_or(path), SpanKind::Module);
        let category = category_for(current_exec_step());
        self.record_tensor(xs, Some(MODULE_INPUT), Some(category));
        let out = f(xs)?;
        self.record_tensor(&out, Some(MODULE_OUTPUT), Some(category));
        // A module returning its input (identity, dropout in eval) allocates nothing.
        if tensor_id(&out) != tensor_id(xs) {
            self.record_step_alloc(&out, category);
        }
        Ok(out)
    }
}

/// Restores the thread's previous execution step and ends the span when dropped.
#[must_use = "the execution step ends when the guard is dropped"]
#[derive(Debug)]
pub struct PhaseGuard<'a> {
    prev: Option<ExecStep>,
    /// Dropped after the execution step is restored: the scope it hands back to the sampler
    /// is the enclosing one, step included.
    _span: CaptureSpan<'a>,
}

impl Drop for PhaseGuard<'_> {
    fn drop(&mut self) {
        set_exec_step(self.prev);
    }
}

/// Most inputs an op records without allocating.
const INLINE_INPUTS: usize = 8;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use trace_record::schema::{ExecStep, MemoryCategory, Phase};
    use trace_record::{Run, TraceSession};

    use super::{Capture, category_for, current_exec_step};

    #[test]
    fn phases_set_and_restore_the_threads_execution_step() {
        let (session, _sink) = TraceSession::in_memory(Run::new("tests", Phase::Train, "cpu"));
        let capture = Capture::new(Arc::new(session));
        assert_eq!(current_exec_step(), None);
        for step in [ExecStep::Forward, ExecStep::Backward, ExecStep::Optimizer] {
            let _phase = capture.phase("phase", step);
            assert_eq!(current_exec_step(), Some(step));
            {
                let _inner = capture.phase("inner", ExecStep::Backward);
                assert_eq!(current_exec_step(), Some(ExecStep::Backward));
            }
            assert_eq!(current_exec_step(), Some(step));
        }
        assert_eq!(current_exec_step(), None);
        let categories = [
            None,
            Some(ExecStep::Forward),
            Some(ExecStep::Backward),
            Some(ExecStep::Optimizer),
        ]
        .map(category_for);
        assert_eq!(
            categories,
            [
                MemoryCategory::Activation,
                MemoryCategory::Activation,
                MemoryCategory::Gradient,
                MemoryCategory::OptimizerState,
            ]
        );
    }
}
