//! Reading a trace into the compact [`Trace`] model: one streaming pass through trace-record's
//! reader, interning names, devices and shapes as it goes.

use crate::model::intern::FastMap;
use std::io::BufRead;
use std::path::Path;

use trace_record::schema::{self as wire, Event};
use trace_record::{ReadMode, ReadOptions, TraceInput, TraceReader, Validator};

use crate::error::AnalyzeError;
use crate::model::intern::{Interner, ShapeInterner, Sym};
use crate::model::trace::{
    AUTOGRAD_LABEL, AutogradNode, CounterSample, GradEvent, GradientCounts, MemEvent, Op,
    PhysSample, ReadCounts, RunInfo, Span, Step, TensorInfo, TensorTable, Trace, TraceEnd,
    WorkCounter,
};

/// How to load a trace.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    /// Reject unknown event types instead of skipping and counting them.
    pub strict: bool,
}

/// Loads the trace at `path`, plain JSONL or zstd-compressed (see [`TraceInput`]).
///
/// # Errors
/// [`AnalyzeError::Io`] when the file cannot be opened, [`AnalyzeError::Read`] (naming the file,
/// line and field) when it is not a valid trace. A truncated trace is not an error: it loads
/// up to its last complete line with [`TraceEnd::Truncated`].
pub fn load_path(path: &Path, opts: LoadOptions) -> Result<Trace, AnalyzeError> {
    // Plain or zstd-compressed, decided by the file's first bytes.
    let input = TraceInput::open(path).map_err(|error| AnalyzeError::Io {
        file: path.display().to_string(),
        error,
    })?;
    load_reader(input, &path.display().to_string(), opts)
}

/// Loads a trace held in memory; `source` names it in errors.
///
/// ```
/// let text = concat!(
///     r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"r","#,
///     r#""entrypoint":"e","phase":"infer","device":"cpu","timing":"host","start_unix_ns":0,"pid":1}}"#,
///     "\n",
///     r#"{"type":"step","index":0,"ts":10}"#, "\n",
///     r#"{"type":"op","name":"relu","in":[1],"out":[2],"shape":[4],"dtype":"f32","ts":20,"dur":5}"#, "\n",
/// );
/// let trace = trace_analyze::load_str(text, "example.jsonl", Default::default())?;
/// assert_eq!(trace.ops.len(), 1);
/// assert!(trace.is_incomplete()); // no trailer
/// # Ok::<(), trace_analyze::AnalyzeError>(())
/// ```
pub fn load_str(text: &str, source: &str, opts: LoadOptions) -> Result<Trace, AnalyzeError> {
    load_reader(text.as_bytes(), source, opts)
}

/// Loads a trace from any buffered reader; `source` names it in errors.
///
/// Parsing (JSON) runs on a second thread (trace-record's batch pipeline,
/// [`TraceReader::for_each_batched_ref`], which reuses the events' memory), pipelined with building the model and validating the
/// structure on this one, so the two overlap on a multi-core machine.
pub fn load_reader<R: BufRead + Send>(
    src: R,
    source: &str,
    opts: LoadOptions,
) -> Result<Trace, AnalyzeError> {
    let err = |error| AnalyzeError::Read {
        file: source.to_string(),
        error,
    };
    let options = ReadOptions {
        mode: if opts.strict {
            ReadMode::Strict
        } else {
            ReadMode::Lenient
        },
    };
    let mut reader = TraceReader::new(src, options).map_err(err)?;
    let header = reader.header().clone();
    let mut b = Builder::new(source, &header);
    let result = reader.for_each_batched_ref(|le| {
        b.event(le.line, &le.event);
        Ok::<(), trace_record::ReadError>(())
    });
    result.map_err(err)?;
    let mut trace = b.finish();
    trace.lines = reader.lines_read();
    trace.partial_last_line = reader.partial_line().is_some();
    trace.counts.unknown = reader.skipped_unknown();
    trace.dump = reader.dump().cloned();
    match reader.trailer() {
        Some(t) => {
            trace.outcome = TraceEnd::Trailer(t.outcome.clone());
            trace.dropped = t.dropped;
            trace.trailer_counts = Some(t.counts);
            trace.end_ns = trace.end_ns.max(t.ts);
        }
        None => trace.outcome = TraceEnd::Truncated,
    }
    Ok(trace)
}

/// Span id → index in [`Trace::spans`] of its latest `span_start`, holding nothing per span
/// while the spans arrive in increasing id order (as a recorder numbers them).
///
/// A span whose id is above every id before it is *in order*: found by binary search over
/// the in-order spans' ids, which [`Trace::spans`] already holds (their indices are kept
/// only once some span came out of order: 4 bytes a span). Any other span (an id started
/// again, ids interleaved by threads) goes to a hash map, looked up first, so an id
/// started again resolves to its latest start. A million nested spans keep 0 to 4 bytes
/// each here instead of a hash map's 16 to 35. O(log n) a lookup, behind the builder's cache
/// of the last span resolved.
#[derive(Default)]
struct SpanIndex {
    /// The indices of the in-order spans, ascending by id; `None` while every span so far
    /// is in order (then they are `0..spans.len()`).
    ordered: Option<Vec<u32>>,
    /// The largest id in order so far.
    max_id: Option<u64>,
    /// The spans out of order, by id (latest start).
    others: FastMap<u64, u32>,
}

impl SpanIndex {
    /// Records that span `id` starts at index `idx` (`spans` holds the spans before it).
    fn insert(&mut self, spans: &[Span], id: u64, idx: u32) {
        if self.max_id.is_none_or(|m| id > m) {
            self.max_id = Some(id);
            if let Some(ordered) = &mut self.ordered {
                ordered.push(idx);
            }
            return;
        }
        if self.ordered.is_none() {
            let n = u32::try_from(spans.len()).unwrap_or(u32::MAX);
            self.ordered = Some((0..n).collect());
        }
        self.others.insert(id, idx);
    }

    /// The index of the latest start of span `id`, when it started.
    fn get(&self, spans: &[Span], id: u64) -> Option<u32> {
        if !self.others.is_empty()
            && let Some(&i) = self.others.get(&id)
        {
            return Some(i);
        }
        let id_at = |i: u32| spans.get(i as usize).map_or(u64::MAX, |s| s.id);
        match &self.ordered {
            None => {
                let k = spans.partition_point(|s| s.id < id);
                (spans.get(k)?.id == id).then_some(k as u32)
            }
            Some(ordered) => {
                let k = ordered.partition_point(|&i| id_at(i) < id);
                let &i = ordered.get(k)?;
                (id_at(i) == id).then_some(i)
            }
        }
    }
}

struct Builder {
    t: Trace,
    span_index: SpanIndex,
    /// Spans of kind `op` whose own op has been read (at most one op is a span's own op).
    owned_spans: FastMap<u32, ()>,
    dims: Vec<u64>,
    /// The step rule every reader shares (trace-record's): bounds and which steps count.
    step_rule: trace_record::StepTracker,
    /// Per step in `t.steps`, whether the rule counts it as a step (decided when it ends).
    is_step: Vec<bool>,
    validator: Validator,
    /// Strings interned lately, by [`recent_slot`]: a trace repeats a few op names, dtypes
    /// and devices millions of times, and comparing with the last one is cheaper than hashing.
    recent_syms: [Option<Sym>; RECENT],
    /// Shapes interned lately, by [`recent_slot`] of their dimensions.
    recent_shapes: [Option<crate::model::intern::ShapeId>; RECENT],
    /// The span id last resolved to an index, and that index (cleared when a span starts, as
    /// a span id started again is resolved to its latest start).
    recent_span: Option<(u64, u32)>,
}

/// Entries of the builder's caches of recent strings and shapes.
const RECENT: usize = 64;

/// A cache slot for `key`'s length, first, middle and last values (no hashing of the whole).
#[inline]
fn recent_slot(len: usize, first: usize, mid: usize, last: usize) -> usize {
    (len.wrapping_mul(0x9e37)
        ^ first.wrapping_mul(0x2f)
        ^ mid.wrapping_mul(0x83)
        ^ last.wrapping_mul(0x1f1))
        % RECENT
}

impl Builder {
    fn new(source: &str, h: &wire::Header) -> Self {
        let mut tags: Vec<(String, String)> = h
            .run
            .tags
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        tags.sort();
        let run = RunInfo {
            schema: h.schema.clone(),
            version: h.version,
            run_id: h.run.run_id.clone(),
            entrypoint: h.run.entrypoint.clone(),
            phase: h.run.phase.as_str().into(),
            device: h.run.device.clone(),
            timing: h.run.timing,
            start_unix_ns: h.run.start_unix_ns,
            rank: h.run.rank,
            world_size: h.run.world_size,
            tags,
        };
        Builder {
            t: Trace {
                source: source.to_string(),
                run,
                outcome: TraceEnd::Truncated,
                trailer_counts: None,
                dropped: 0,
                counts: ReadCounts::default(),
                gradients: GradientCounts::default(),
                lines: 0,
                partial_last_line: false,
                dump: None,
                issues: Vec::new(),
                strings: Interner::new(),
                shapes: ShapeInterner::new(),
                spans: Vec::new(),
                ops: Vec::new(),
                tensor_refs: Vec::new(),
                tensors: TensorTable::default(),
                memory: Vec::new(),
                physical: Vec::new(),
                steps: Vec::new(),
                input_meta: Vec::new(),
                gradient_facts: Vec::new(),
                counters: Vec::new(),
                autograd: Vec::new(),
                module_inputs: Vec::new(),
                sampled: Default::default(),
                heap: Default::default(),
                end_ns: 0,
                work: WorkCounter::default(),
            },
            span_index: SpanIndex::default(),
            owned_spans: FastMap::default(),
            dims: Vec::new(),
            step_rule: trace_record::StepTracker::new(),
            is_step: Vec::new(),
            validator: Validator::new(),
            recent_syms: [None; RECENT],
            recent_shapes: [None; RECENT],
            recent_span: None,
        }
    }

    /// Interns `s` (through the cache of recent strings).
    #[inline]
    fn sym(&mut self, s: &str) -> Sym {
        let b = s.as_bytes();
        let at = |i: usize| b.get(i).map_or(0, |&c| usize::from(c));
        let slot = recent_slot(b.len(), at(0), at(b.len() / 2), at(b.len().wrapping_sub(1)));
        if let Some(sym) = self.recent_syms[slot]
            && self.t.strings.resolve(sym) == s
        {
            return sym;
        }
        let sym = self.t.strings.intern(s);
        self.recent_syms[slot] = Some(sym);
        sym
    }

    /// The index of span `id` when it has started (through the last one resolved).
    #[inline]
    fn span_at(&mut self, id: u64) -> Option<u32> {
        if let Some((last, i)) = self.recent_span
            && last == id
        {
            return Some(i);
        }
        let i = self.span_index.get(&self.t.spans, id)?;
        self.recent_span = Some((id, i));
        Some(i)
    }

    fn seen(&mut self, t: u64) {
        self.t.end_ns = self.t.end_ns.max(t);
    }

    fn shape(&mut self, s: &[usize]) -> crate::model::intern::ShapeId {
        let at = |i: usize| s.get(i).copied().unwrap_or(0);
        let slot = recent_slot(s.len(), at(0), at(s.len() / 2), at(s.len().wrapping_sub(1)));
        if let Some(id) = self.recent_shapes[slot] {
            let dims = self.t.shapes.resolve(id);
            if dims.len() == s.len() && dims.iter().zip(s).all(|(&a, &b)| a == b as u64) {
                return id;
            }
        }
        self.dims.clear();
        self.dims.extend(s.iter().map(|&d| d as u64));
        let id = self.t.shapes.intern(&self.dims);
        self.recent_shapes[slot] = Some(id);
        id
    }

    fn current_step(&self) -> Option<u32> {
        self.t.steps.len().checked_sub(1).map(|i| i as u32)
    }

    /// Events before the first `step` event belong to step 0: it begins at the first such
    /// event.
    fn ensure_step0(&mut self, ts: u64) {
        if self.t.steps.is_empty() {
            self.t.steps.push(Step {
                index: 0,
                start_ns: ts,
                end_ns: ts,
                ops: (0, 0),
            });
        }
    }

    fn event(&mut self, line: u64, e: &Event) {
        self.t.work.add(1);
        self.validator.check(line, e);
        self.t.counts.by_type.add(e.event_type(), 1);
        if let Some(closed) = self.step_rule.event(e) {
            self.close_step(closed);
        }
        if !matches!(e, Event::Step(_))
            && let Some(ts) = e.ts()
        {
            self.ensure_step0(ts);
        }
        match e {
            Event::SpanStart(s) => {
                let parent = s.parent.and_then(|p| self.span_at(p));
                let exec_step = s
                    .step
                    .or_else(|| parent.and_then(|p| self.t.spans[p as usize].exec_step));
                let idx = self.t.spans.len() as u32;
                self.span_index.insert(&self.t.spans, s.id, idx);
                self.recent_span = None;
                let name = self.sym(&s.name);
                self.t.spans.push(Span {
                    id: s.id,
                    parent,
                    name,
                    kind: s.kind,
                    exec_step,
                    thread: s.thread,
                    start_ns: s.ts,
                    end_ns: None,
                    step: self.current_step(),
                    line,
                });
                self.seen(s.ts);
            }
            Event::SpanEnd(s) => {
                if let Some(i) = self.span_at(s.id) {
                    let span = &mut self.t.spans[i as usize];
                    if span.end_ns.is_none() {
                        span.end_ns = Some(s.ts.max(span.start_ns));
                    }
                }
                self.seen(s.ts);
            }
            Event::Op(o) => {
                let span = o.span.and_then(|s| self.span_at(s));
                let name = self.sym(&o.name);
                let (thread, exec_step, own) = span.map_or((0, None, false), |s| {
                    let sp = &self.t.spans[s as usize];
                    let own = o.is_own_op_of(sp.kind, self.t.strings.resolve(sp.name), sp.start_ns);
                    (sp.thread, sp.exec_step, own)
                });
                // The first such op claims the span; another one is an op inside it.
                let is_span = own && span.is_some_and(|s| self.owned_spans.insert(s, ()).is_none());
                let i0 = self.t.tensor_refs.len() as u32;
                self.t.tensor_refs.extend_from_slice(&o.inputs);
                let i1 = self.t.tensor_refs.len() as u32;
                self.t.tensor_refs.extend_from_slice(&o.outputs);
                let o1 = self.t.tensor_refs.len() as u32;
                let dtype = self.sym(&o.dtype);
                let device = self.sym(&o.device);
                let shape = self.shape(&o.shape);
                let m0 = self.t.input_meta.len() as u32;
                if let Some(shapes) = &o.in_shapes {
                    for (k, dims) in shapes.iter().enumerate() {
                        let sid = self.shape(dims);
                        let dt = o
                            .in_dtypes
                            .as_ref()
                            .and_then(|d| d.get(k))
                            .unwrap_or(&o.dtype);
                        let dt = self.sym(dt);
                        self.t.input_meta.push((sid, dt));
                        // Inputs no `tensor` event described get their shape from here.
                        if let Some(&id) = o.inputs.get(k) {
                            self.t.tensors.insert_if_absent(
                                id,
                                TensorInfo {
                                    shape: sid,
                                    label: None,
                                },
                            );
                        }
                    }
                }
                let m1 = self.t.input_meta.len() as u32;
                self.t.ops.push(Op {
                    name,
                    span,
                    thread,
                    start_ns: o.ts,
                    dur_ns: o.dur,
                    shape,
                    dtype,
                    device,
                    input_bytes: o.in_bytes,
                    output_bytes: o.out_bytes,
                    inputs: (i0, i1),
                    outputs: (i1, o1),
                    step: self.current_step(),
                    exec_step,
                    flops: o.flops,
                    input_meta: (m0, m1),
                    is_span,
                });
                self.seen(o.ts.saturating_add(o.dur));
            }
            Event::Tensor(t) => {
                let shape = self.shape(&t.shape);
                if t.label.as_deref() == Some(AUTOGRAD_LABEL) {
                    let dtype = self.sym(&t.dtype);
                    self.t.autograd.push(AutogradNode {
                        step: self.current_step(),
                        shape,
                        dtype,
                        bytes: t.bytes,
                    });
                }
                if t.label.as_deref() == Some(trace_record::schema::MODULE_INPUT)
                    && let Some(span) = t.span.and_then(|s| self.span_index.get(&self.t.spans, s))
                    && self
                        .t
                        .module_inputs
                        .last()
                        .is_none_or(|&(last, _)| last != span)
                {
                    self.t.module_inputs.push((span, shape));
                }
                let label = t.label.as_deref().map(|l| self.sym(l));
                self.t.tensors.insert(t.id, TensorInfo { shape, label });
            }
            Event::Memory(m) => {
                let device = self.sym(&m.device);
                let span = m.span.and_then(|s| self.span_at(s));
                self.t.memory.push(MemEvent {
                    t_ns: m.ts,
                    storage: m.storage,
                    tensor: Some(m.tensor),
                    bytes: m.bytes,
                    device,
                    category: m.category,
                    alloc: matches!(m.kind, wire::AllocKind::Alloc),
                    span,
                });
                self.seen(m.ts);
            }
            Event::DeviceMemory(d) => {
                let device = self.sym(&d.device);
                self.t.physical.push(PhysSample {
                    t_ns: d.ts,
                    device,
                    used: d.used,
                    free: d.free,
                    reserved: d.reserved,
                });
                self.seen(d.ts);
            }
            Event::Gradient(g) => {
                let c = &mut self.t.gradients;
                match g.state {
                    wire::GradientState::Present => c.present += 1,
                    wire::GradientState::Missing => c.missing += 1,
                    wire::GradientState::Zero => c.zero += 1,
                    wire::GradientState::NonFinite => c.non_finite += 1,
                }
                let param = self.sym(&g.param);
                self.t.gradient_facts.push(GradEvent {
                    param,
                    state: g.state,
                    norm: g.norm,
                    t_ns: g.ts,
                    step: self.current_step(),
                });
                self.seen(g.ts);
            }
            Event::Step(s) => {
                let n = self.t.ops.len() as u32;
                self.t.steps.push(Step {
                    index: s.index,
                    start_ns: s.ts,
                    end_ns: s.ts,
                    ops: (n, n),
                });
                self.seen(s.ts);
            }
            Event::Marker(m) => {
                self.seen(m.ts);
            }
            Event::Counter(c) => {
                let name = self.sym(&c.name);
                self.t.counters.push(CounterSample {
                    name,
                    value: c.value,
                    t_ns: c.ts,
                    step: self.current_step(),
                });
                self.seen(c.ts);
            }
            Event::Frame(_)
            | Event::Stack(_)
            | Event::Samples(_)
            | Event::Sampler(_)
            | Event::Module(_)
            | Event::RawStack(_) => {
                self.t.sampled.add(e);
            }
            Event::HeapAlloc(_)
            | Event::HeapFree(_)
            | Event::HeapSmall(_)
            | Event::HeapAccount(_) => {
                self.t.heap.add(e);
            }
        }
    }

    /// Ends the current step as the step rule closed it (its end: the next boundary when the
    /// next step follows directly, else the last time seen in it).
    fn close_step(&mut self, closed: trace_record::ClosedStep) {
        let n = self.t.ops.len() as u32;
        if let Some(cur) = self.t.steps.last_mut() {
            debug_assert_eq!(cur.index, closed.index);
            cur.ops.1 = n;
            cur.end_ns = closed.end_ns;
        }
        self.is_step.push(closed.is_step);
    }

    fn finish(mut self) -> Trace {
        // The span ids are resolved: their index goes before the validator's last pass
        // (the largest thing held while it lists what it found).
        self.span_index = SpanIndex::default();
        self.owned_spans = FastMap::default();
        // Issues are sorted by line by the validator.
        if let Some(closed) = self.step_rule.finish() {
            self.close_step(closed);
        }
        self.drop_empty_edge_steps();
        self.drop_singleton_indices();
        // Stacks only raw (a run killed before its sampler stopped): symbolized now.
        self.t.sampled.resolve_read_time();
        // Samples of a boundary that is no step are left out here, once, for every analysis
        // (the hot spots, the flame graph, the summary). A trace with no step of work at all
        // (samples only) keeps them: it has no step structure to agree with.
        if let (Some(first), Some(last)) = (self.t.steps.first(), self.t.steps.last()) {
            let (first, last) = (first.index, last.index);
            self.t.work.add(self.t.sampled.samples.len() as u64);
            self.t.sampled.keep_steps(first, last);
        }
        self.order_memory_by_time();
        self.shrink();
        self.t.issues = self.validator.finish();
        self.t.issues.shrink_to_fit();
        self.t
    }

    /// Gives back what the model's vectors hold beyond their records (a vector grown by
    /// doubling holds up to twice them): the model is kept while every analysis runs.
    fn shrink(&mut self) {
        let t = &mut self.t;
        t.spans.shrink_to_fit();
        t.ops.shrink_to_fit();
        t.tensor_refs.shrink_to_fit();
        t.memory.shrink_to_fit();
        t.physical.shrink_to_fit();
        t.steps.shrink_to_fit();
        t.input_meta.shrink_to_fit();
        t.gradient_facts.shrink_to_fit();
        t.counters.shrink_to_fit();
        t.autograd.shrink_to_fit();
        t.module_inputs.shrink_to_fit();
    }

    /// Puts the memory events in time order (stable: events stamped alike keep their file
    /// order). A recorder may stamp an event earlier than lines it wrote before: a captured
    /// op's output at the op's end, after what ran inside the op; an activation found only in
    /// the autograd graph at the start of its step's forward phase, when backward begins.
    /// Every memory analysis walks the events in this order. O(n) when already ordered, else
    /// O(n log n).
    fn order_memory_by_time(&mut self) {
        let memory = &mut self.t.memory;
        self.t.work.add(memory.len() as u64);
        if !memory.is_sorted_by_key(|e| e.t_ns) {
            memory.sort_by_key(|e| e.t_ns);
            self.t.work.add_sort(memory.len());
        }
    }

    /// Names `name#0` back to `name` where no sibling is numbered beyond 0: trace-candle's
    /// `tracing` layer numbers spans by their position among same-named siblings (`linear#0`
    /// .. `linear#3`), which tells siblings apart but is noise on a span that is alone
    /// (`model#0/encoder#0`). Siblings are decided by the parent's name and the base name over
    /// the whole trace, so a path is named alike in every step. O(n).
    fn drop_singleton_indices(&mut self) {
        let split = |name: &str| -> Option<(usize, u32)> {
            let (base, k) = name.rsplit_once('#')?;
            (!base.is_empty() && !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
                .then(|| k.parse().ok().map(|k| (base.len(), k)))
                .flatten()
        };
        // (parent's name, base name) → the largest index seen.
        let mut max: FastMap<(Option<Sym>, String), u32> = FastMap::default();
        let parent_name = |t: &Trace, i: usize| {
            t.spans[i]
                .parent
                .and_then(|p| t.spans.get(p as usize))
                .map(|p| p.name)
        };
        for i in 0..self.t.spans.len() {
            let name = self.t.str(self.t.spans[i].name);
            if let Some((at, k)) = split(name) {
                let key = (parent_name(&self.t, i), name[..at].to_string());
                let m = max.entry(key).or_insert(0);
                *m = (*m).max(k);
            }
        }
        if max.values().all(|&m| m > 0) {
            return;
        }
        let mut renamed: Vec<(usize, Sym)> = Vec::new();
        for i in 0..self.t.spans.len() {
            let name = self.t.str(self.t.spans[i].name);
            if let Some((at, 0)) = split(name) {
                let base = name[..at].to_string();
                if max.get(&(parent_name(&self.t, i), base.clone())) == Some(&0) {
                    renamed.push((i, self.t.strings.intern(&base)));
                }
            }
        }
        for (i, sym) in renamed {
            self.t.spans[i].name = sym;
        }
        self.t.work.add(2 * self.t.spans.len() as u64);
    }

    /// A first or last step in which nothing ran (no op, no span started in it) is not a
    /// step: the boundary that a loop's last `step()` opens (step at the end of an
    /// iteration) or its first closes (step at the start). Its events (frees at finish,
    /// samples, setup allocations) stay in the trace, outside any step.
    fn drop_empty_edge_steps(&mut self) {
        let n = self.t.steps.len();
        if n == 0 {
            return;
        }
        // The rule decided each step as it ended (only a first or last step can fail it).
        let counts = |i: usize, b: &Self| b.is_step.get(i).copied().unwrap_or(true);
        let first_counts = counts(0, self);
        if !counts(n - 1, self) {
            self.t.steps.pop();
        }
        if !self.t.steps.is_empty() && !first_counts {
            self.t.steps.remove(0);
            let shift = |s: &mut Option<u32>| {
                *s = match *s {
                    Some(0) | None => None,
                    Some(i) => Some(i - 1),
                }
            };
            for sp in &mut self.t.spans {
                shift(&mut sp.step);
            }
            for op in &mut self.t.ops {
                shift(&mut op.step);
            }
            for g in &mut self.t.gradient_facts {
                shift(&mut g.step);
            }
            for a in &mut self.t.autograd {
                shift(&mut a.step);
            }
            for c in &mut self.t.counters {
                shift(&mut c.step);
            }
            self.t
                .work
                .add((self.t.spans.len() + self.t.ops.len()) as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use trace_record::schema::{Phase, SpanKind};
    use trace_record::{OpRecord, Run, TraceSession};

    use super::{LoadOptions, load_path};

    fn record(path: &Path) {
        let s = TraceSession::open(path, Run::new("load::tests", Phase::Infer, "cpu")).unwrap();
        for step in 0..3u64 {
            let _span = s.span("forward", SpanKind::Module, None);
            for i in 0..500u64 {
                s.record_op(&OpRecord {
                    name: if i % 2 == 0 { "matmul" } else { "relu" },
                    inputs: &[i],
                    outputs: &[i + 1],
                    shape: &[8, 8],
                    dtype: "f32",
                    device: "cpu",
                    start_ns: step * 1_000_000 + i * 100,
                    dur_ns: 50,
                    in_bytes: 256,
                    out_bytes: 256,
                    category: None,
                    flops: None,
                });
            }
            drop(_span);
            s.step();
        }
        s.finish().unwrap();
    }

    /// Spans are found by id whatever their order: ids in order, out of order, and started
    /// again (then the latest start), for parents and for ops.
    #[test]
    fn spans_resolve_by_id_in_any_order() {
        let h = testkit::HEADER;
        let span = |id: u64, parent: Option<u64>, name: &str, ts: u64| {
            let parent = parent.map_or(String::new(), |p| format!(r#""parent":{p},"#));
            format!(
                r#"{{"type":"span_start","id":{id},{parent}"name":"{name}","kind":"module","thread":1,"ts":{ts}}}"#
            )
        };
        let op = |span: u64, ts: u64| {
            format!(
                r#"{{"type":"op","span":{span},"name":"relu","in":[1],"out":[2],"shape":[4],"dtype":"f32","ts":{ts},"dur":1}}"#
            )
        };
        let lines = [
            h.to_string(),
            span(10, None, "a", 1),
            span(20, Some(10), "b", 2),
            op(10, 3),
            span(15, Some(20), "c", 4),
            op(20, 5),
            span(30, Some(15), "d", 6),
            op(15, 7),
            span(20, Some(30), "e", 8),
            op(20, 9),
            op(30, 10),
            op(99, 11),
        ];
        let t = super::load_str(&(lines.join("\n") + "\n"), "t", LoadOptions::default()).unwrap();
        let parents: Vec<Option<u32>> = t.spans.iter().map(|s| s.parent).collect();
        assert_eq!(parents, [None, Some(0), Some(1), Some(2), Some(3)]);
        let spans: Vec<Option<u32>> = t.ops.iter().map(|o| o.span).collect();
        assert_eq!(spans, [Some(0), Some(1), Some(2), Some(4), Some(3), None]);
    }

    /// A `.jsonl.zst` trace loads into the same model as a plain one.
    #[test]
    fn a_compressed_trace_loads_like_a_plain_one() {
        let dir = tempfile::tempdir().unwrap();
        let (plain, packed) = (dir.path().join("t.jsonl"), dir.path().join("t.jsonl.zst"));
        record(&plain);
        record(&packed);
        assert!(trace_record::is_zstd(&std::fs::read(&packed).unwrap()));
        let a = load_path(&plain, LoadOptions::default()).unwrap();
        let b = load_path(&packed, LoadOptions::default()).unwrap();
        assert_eq!(b.ops.len(), 1500);
        assert_eq!(
            (
                a.ops.len(),
                a.spans.len(),
                a.steps.len(),
                a.lines,
                a.is_incomplete()
            ),
            (
                b.ops.len(),
                b.spans.len(),
                b.steps.len(),
                b.lines,
                b.is_incomplete()
            )
        );
        assert!(b.issues.is_empty());
    }
}
