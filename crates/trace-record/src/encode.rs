//! The event-line encoder shared by the session's hot path and [`encode_event`].
//!
//! Every line is written without allocation into a reused, already initialised buffer
//! ([`LineBuf`]) through the JSON writer's cursor ([`crate::json`]): each line first makes
//! room for its worst case, then writes with plain stores. The key order is fixed: `type`
//! first, which lets the reader dispatch on a prefix; optional fields are omitted when absent,
//! the run's device and derivable output bytes too.

use crate::json::{Cur, Digits, INT, LineBuf, is_clean, str_bound};
use crate::records::{MemoryRecord, OpRecord, TensorRecord};
use crate::schema::logical_bytes;
use crate::schema::{
    Event, ExecStep, Frame, GradientState, Header, MemoryCategory, MemoryEvent, OpEvent, SpanKind,
    TensorEvent, Trailer,
};

/// Appends one event line (with its trailing `\n`) to `out`, exactly as a session writes it.
///
/// `default_device` is the header's device: a device equal to it is omitted from the line
/// (and filled back in by the reader).
///
/// ```
/// use trace_record::schema::{Event, StepEvent};
/// let mut out = Vec::new();
/// trace_record::encode_event(&Event::Step(StepEvent { index: 3, ts: 1500 }), "cpu", &mut out);
/// assert_eq!(out, b"{\"type\":\"step\",\"index\":3,\"ts\":1500}\n");
/// ```
pub fn encode_event(event: &Event, default_device: &str, out: &mut Vec<u8>) {
    let mut lb = LineBuf::from_vec(std::mem::take(out));
    encode_into(event, default_device, &mut lb);
    *out = lb.into_vec();
}

fn encode_into(event: &Event, default_device: &str, out: &mut LineBuf) {
    match event {
        Event::SpanStart(e) => span_start(
            out,
            e.id,
            e.parent,
            (&e.name, None),
            e.kind,
            e.step,
            e.thread,
            e.ts,
        ),
        Event::SpanEnd(e) => span_end(out, e.id, e.ts),
        Event::Op(e) => op_event(out, e, default_device),
        Event::Tensor(e) => tensor_event(out, e, default_device),
        Event::Memory(e) => memory_event(out, e, default_device),
        Event::DeviceMemory(e) => device_memory(out, &e.device, e.used, e.free, e.reserved, e.ts),
        Event::Gradient(e) => gradient(out, &e.param, e.state, e.norm, e.ts),
        Event::Step(e) => step(out, e.index, e.ts),
        Event::Marker(e) => marker(out, &e.name, e.span, e.ts),
        Event::Counter(e) => counter(out, &e.name, e.value, e.ts),
        Event::Frame(_)
        | Event::Stack(_)
        | Event::Samples(_)
        | Event::Sampler(_)
        | Event::Module(_)
        | Event::RawStack(_) => {
            sampled(out, event);
        }
        Event::HeapAlloc(_) | Event::HeapFree(_) | Event::HeapSmall(_) | Event::HeapAccount(_) => {
            heap(out, event);
        }
    }
}

/// A sampled-stack line (`frame`, `stack`, `samples`, `sampler`, `module`, `raw_stack`; version 2). These are written
/// by a sampler's own thread, a few per step, never on a recording hot path, so serde writes
/// them (`type` first, optional fields omitted, like every other line).
pub(crate) fn sampled(out: &mut LineBuf, event: &Event) {
    // Serializing plain structs of strings and integers into a Vec cannot fail.
    if let Ok(mut line) = serde_json::to_vec(event) {
        line.push(b'\n');
        out.extend(&line);
    }
}

/// A tracked-heap line (version 2), written by the encoder: `heap_alloc` and `heap_free`, one
/// per tracked allocation and free (the tracker's thread writes thousands per step), and a
/// step's `heap_small` (one per span that made small allocations: most of a decode step's heap
/// lines) and `heap_account` lines. The bytes are serde's (the same keys in the same order).
pub(crate) fn heap(out: &mut LineBuf, event: &Event) {
    match event {
        Event::HeapAlloc(e) => out.write(96 + 5 * INT, |c| {
            c.raw(b"{\"type\":\"heap_alloc\",\"id\":");
            c.uint(e.id);
            c.raw(b",\"bytes\":");
            c.uint(e.bytes);
            c.raw(b",\"thread\":");
            c.uint(e.thread);
            c.raw(b",\"ts\":");
            c.uint(e.ts);
            c.opt_phase(e.phase);
            c.opt_span(e.span);
            c.raw(b"}\n");
        }),
        Event::HeapFree(e) => out.write(64 + 2 * INT, |c| {
            c.raw(b"{\"type\":\"heap_free\",\"id\":");
            c.uint(e.id);
            c.ts_end(e.ts);
        }),
        Event::HeapSmall(e) => out.write(96 + 4 * INT, |c| {
            c.raw(b"{\"type\":\"heap_small\",\"step\":");
            c.uint(e.step);
            c.opt_phase(e.phase);
            c.opt_span(e.span);
            c.raw(b",\"count\":");
            c.uint(e.count);
            c.raw(b",\"bytes\":");
            c.uint(e.bytes);
            c.raw(b"}\n");
        }),
        Event::HeapAccount(e) => out.write(128 + 6 * INT, |c| {
            c.raw(b"{\"type\":\"heap_account\",\"step\":");
            c.uint(e.step);
            c.raw(b",\"threshold\":");
            c.uint(e.threshold);
            c.raw(b",\"lost\":");
            c.uint(e.lost);
            c.raw(b",\"unmatched_frees\":");
            c.uint(e.unmatched_frees);
            c.raw(b",\"ts\":");
            c.uint(e.ts);
            c.raw(b",\"dur\":");
            c.uint(e.dur);
            c.raw(b"}\n");
        }),
        _ => sampled(out, event),
    }
}

/// Appends the header line (with its trailing `\n`) to `out`.
pub fn encode_header(header: &Header, out: &mut Vec<u8>) {
    frame(out, &Frame::Header(header));
}

/// Appends the trailer line (with its trailing `\n`) to `out`.
pub fn encode_trailer(trailer: &Trailer, out: &mut Vec<u8>) {
    frame(out, &Frame::Trailer(trailer));
}

fn frame(out: &mut Vec<u8>, f: &Frame<'_>) {
    // Serializing plain structs of strings, integers and maps into a Vec cannot fail.
    if serde_json::to_writer(&mut *out, f).is_ok() {
        out.push(b'\n');
    }
}

fn op_event(out: &mut LineBuf, e: &OpEvent, default_device: &str) {
    let r = OpRecord {
        name: &e.name,
        inputs: &e.inputs,
        outputs: &e.outputs,
        shape: &e.shape,
        dtype: &e.dtype,
        device: &e.device,
        start_ns: e.ts,
        dur_ns: e.dur,
        in_bytes: e.in_bytes,
        out_bytes: e.out_bytes,
        category: e.category,
        flops: e.flops,
    };
    match &e.in_shapes {
        Some(shapes) => {
            let shapes: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            let dtypes: Vec<&str> = match &e.in_dtypes {
                Some(d) => d.iter().map(String::as_str).collect(),
                None => vec![e.dtype.as_str(); shapes.len()],
            };
            let inputs = InputMeta {
                shapes: &shapes,
                dtypes: &dtypes,
            };
            op_inputs(out, e.span, &r, Some(&inputs), default_device);
        }
        None => op(out, e.span, &r, default_device),
    }
}

fn tensor_event(out: &mut LineBuf, e: &TensorEvent, default_device: &str) {
    let r = TensorRecord {
        id: e.id,
        label: e.label.as_deref(),
        shape: &e.shape,
        dtype: &e.dtype,
        device: &e.device,
        requires_grad: e.requires_grad,
        bytes: e.bytes,
        category: e.category,
    };
    tensor(out, e.span, &r, default_device);
}

fn memory_event(out: &mut LineBuf, e: &MemoryEvent, default_device: &str) {
    let r = MemoryRecord {
        kind: e.kind,
        storage: e.storage,
        tensor: e.tensor,
        bytes: e.bytes,
        device: &e.device,
        category: e.category,
    };
    memory(out, e.span, &r, default_device, e.ts);
}

/// Equal strings, with a pointer check first (callers usually pass the same label thrice).
#[inline(always)]
fn same_str(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// Pieces of event lines shared by several encoders.
impl Cur<'_> {
    #[inline]
    fn device_field(&mut self, device: &str, default_device: &str) {
        if !device.is_empty() && device != default_device {
            self.raw(b",\"dev\":");
            self.string(device);
        }
    }

    #[inline]
    fn opt_phase(&mut self, phase: Option<crate::schema::ExecStep>) {
        if let Some(p) = phase {
            self.raw(b",\"phase\":");
            p.with_str(|s| self.name(s.as_bytes()));
        }
    }

    #[inline]
    fn opt_span(&mut self, span: Option<u64>) {
        if let Some(s) = span {
            self.raw(b",\"span\":");
            self.uint(s);
        }
    }

    #[inline]
    fn ts_end(&mut self, ts: u64) {
        self.raw(b",\"ts\":");
        self.uint(ts);
        self.raw(b"}\n");
    }

    #[inline(always)]
    fn cat(&mut self, c: MemoryCategory) {
        c.with_str(|s| self.name(s.as_bytes()));
    }

    /// A wire name (known to need no escaping) as a string literal.
    #[inline(always)]
    fn name(&mut self, s: &[u8]) {
        self.byte(b'"');
        self.raw(s);
        self.byte(b'"');
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn span_start(
    out: &mut LineBuf,
    id: u64,
    parent: Option<u64>,
    (name, index): (&str, Option<u32>),
    kind: SpanKind,
    step: Option<ExecStep>,
    thread: u64,
    ts: u64,
) {
    out.write(128 + 5 * INT + str_bound(name), |c| {
        c.raw(b"{\"type\":\"span_start\",\"id\":");
        c.uint(id);
        if let Some(p) = parent {
            c.raw(b",\"parent\":");
            c.uint(p);
        }
        c.raw(b",\"name\":");
        match index {
            None => c.string(name),
            Some(k) => c.string_numbered(name, k),
        }
        c.raw(b",\"kind\":");
        kind.with_str(|s| c.name(s.as_bytes()));
        if let Some(s) = step {
            c.raw(b",\"step\":");
            s.with_str(|s| c.name(s.as_bytes()));
        }
        c.raw(b",\"thread\":");
        c.uint(thread);
        c.ts_end(ts);
    });
}

pub(crate) fn span_end(out: &mut LineBuf, id: u64, ts: u64) {
    out.write(64 + 2 * INT, |c| {
        c.raw(b"{\"type\":\"span_end\",\"id\":");
        c.uint(id);
        c.ts_end(ts);
    });
}

/// The end of an op line, from `ts` to the newline: shared by [`op`] and [`op_with_output`].
/// `out_b` is written only when it is not derivable (`derived` = shape × dtype size matches).
/// Every input's shape and dtype (in the order of the op's `in` ids): the optional
/// `in_shapes` and `in_dtypes` fields of an `op` line. `in_dtypes` is omitted when every input
/// has the op's output dtype.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InputMeta<'a> {
    /// One shape per input.
    pub(crate) shapes: &'a [&'a [usize]],
    /// One dtype label per input.
    pub(crate) dtypes: &'a [&'a str],
}

impl InputMeta<'_> {
    /// Integers and string bytes the fields may take (for the line's worst-case bound).
    fn bound(&self) -> usize {
        let dims: usize = self.shapes.iter().map(|s| s.len() + 1).sum();
        let strs: usize = self.dtypes.iter().map(|d| str_bound(d) + 1).sum();
        32 + INT * dims + strs
    }
}

fn op_tail_inputs(
    c: &mut Cur<'_>,
    r: &OpRecord<'_>,
    derived: bool,
    inputs: Option<&InputMeta<'_>>,
) {
    c.raw(b",\"ts\":");
    c.uint(r.start_ns);
    c.raw(b",\"dur\":");
    c.uint(r.dur_ns);
    c.raw(b",\"in_b\":");
    c.uint(r.in_bytes);
    if !derived {
        c.raw(b",\"out_b\":");
        c.uint(r.out_bytes);
    }
    if let Some(cat) = r.category {
        c.raw(b",\"cat\":");
        c.cat(cat);
    }
    if let Some(f) = r.flops {
        c.raw(b",\"flops\":");
        c.uint(f);
    }
    if let Some(m) = inputs {
        c.raw(b",\"in_shapes\":[");
        for (i, shape) in m.shapes.iter().enumerate() {
            if i > 0 {
                c.byte(b',');
            }
            c.uint_list(shape.iter().map(|&d| d as u64));
        }
        c.byte(b']');
        if m.dtypes.iter().any(|d| *d != r.dtype) {
            c.raw(b",\"in_dtypes\":[");
            for (i, d) in m.dtypes.iter().enumerate() {
                if i > 0 {
                    c.byte(b',');
                }
                c.string(d);
            }
            c.byte(b']');
        }
    }
    c.raw(b"}\n");
}

pub(crate) fn op(out: &mut LineBuf, span: Option<u64>, r: &OpRecord<'_>, default_device: &str) {
    op_inputs(out, span, r, None, default_device);
}

/// [`op`] with every input's shape and dtype (`in_shapes`, `in_dtypes`) when `inputs` is given.
pub(crate) fn op_inputs(
    out: &mut LineBuf,
    span: Option<u64>,
    r: &OpRecord<'_>,
    inputs: Option<&InputMeta<'_>>,
    default_device: &str,
) {
    let ints = r.inputs.len() + r.outputs.len() + r.shape.len() + 7;
    let bound = 192
        + INT * ints
        + str_bound(r.name)
        + str_bound(r.dtype)
        + str_bound(r.device)
        + inputs.map_or(0, InputMeta::bound);
    let derived = logical_bytes(r.shape, r.dtype) == Some(r.out_bytes);
    out.write(bound, |c| {
        c.raw(b"{\"type\":\"op\"");
        c.opt_span(span);
        c.raw(b",\"name\":");
        c.string(r.name);
        c.raw(b",\"in\":");
        c.uint_list(r.inputs.iter().copied());
        c.raw(b",\"out\":");
        c.uint_list(r.outputs.iter().copied());
        c.raw(b",\"shape\":");
        c.uint_list(r.shape.iter().map(|&d| d as u64));
        c.raw(b",\"dtype\":");
        c.string(r.dtype);
        c.device_field(r.device, default_device);
        op_tail_inputs(c, r, derived, inputs);
    });
}

/// The lines of [`op`], [`tensor`] and (with `mem`, stamped at its time) [`memory`] in that
/// order, byte for byte. When the three describe one output (the usual case: one output id
/// equal to the tensor's and the storage's, the same shape, dtype, device and bytes, no
/// label) the shared pieces are formatted once; otherwise the three encoders run in turn.
pub(crate) fn op_with_output(
    out: &mut LineBuf,
    span: Option<u64>,
    r: &OpRecord<'_>,
    t: &TensorRecord<'_>,
    mem: Option<(&MemoryRecord<'_>, u64)>,
    default_device: &str,
) {
    op_with_output_inputs(out, span, r, None, t, mem, default_device);
}

/// [`op_with_output`] with every input's shape and dtype on the `op` line when `inputs` is
/// given.
pub(crate) fn op_with_output_inputs(
    out: &mut LineBuf,
    span: Option<u64>,
    r: &OpRecord<'_>,
    inputs: Option<&InputMeta<'_>>,
    t: &TensorRecord<'_>,
    mem: Option<(&MemoryRecord<'_>, u64)>,
    default_device: &str,
) {
    let shared = matches!(r.outputs, [o] if *o == t.id)
        && t.label.is_none()
        && (std::ptr::eq(r.shape, t.shape) || r.shape == t.shape)
        && same_str(r.dtype, t.dtype)
        && same_str(r.device, t.device)
        && mem.is_none_or(|(m, _)| {
            m.storage == t.id
                && m.tensor == t.id
                && m.bytes == t.bytes
                && same_str(m.device, t.device)
        });
    if !shared {
        op_inputs(out, span, r, inputs, default_device);
        tensor(out, span, t, default_device);
        if let Some((m, ts)) = mem {
            memory(out, span, m, default_device, ts);
        }
        return;
    }
    let id = Digits::of(t.id);
    let bytes = Digits::of(t.bytes);
    let span = span.map(Digits::of);
    let dtype_clean = is_clean(r.dtype);
    let show_dev = !r.device.is_empty() && r.device != default_device;
    let dev_clean = !show_dev || is_clean(r.device);
    let ints = r.inputs.len() + 2 * r.shape.len() + 20;
    let bound = 3 * 192
        + INT * ints
        + str_bound(r.name)
        + 2 * (str_bound(r.dtype) + str_bound(r.device))
        + str_bound(t.device)
        + inputs.map_or(0, InputMeta::bound);
    let derived = logical_bytes(r.shape, r.dtype) == Some(r.out_bytes);
    out.write(bound, |c| {
        // op
        c.raw(b"{\"type\":\"op\"");
        if let Some(s) = &span {
            c.raw(b",\"span\":");
            c.digits(s);
        }
        c.raw(b",\"name\":");
        c.string(r.name);
        c.raw(b",\"in\":");
        c.uint_list(r.inputs.iter().copied());
        c.raw(b",\"out\":[");
        c.digits(&id);
        c.raw(b"],\"shape\":");
        c.uint_list(r.shape.iter().map(|&d| d as u64));
        c.raw(b",\"dtype\":");
        c.string_known(r.dtype, dtype_clean);
        if show_dev {
            c.raw(b",\"dev\":");
            c.string_known(r.device, dev_clean);
        }
        op_tail_inputs(c, r, derived, inputs);
        // tensor
        c.raw(b"{\"type\":\"tensor\",\"id\":");
        c.digits(&id);
        c.raw(b",\"shape\":");
        c.uint_list(t.shape.iter().map(|&d| d as u64));
        c.raw(b",\"dtype\":");
        c.string_known(t.dtype, dtype_clean);
        if show_dev {
            c.raw(b",\"dev\":");
            c.string_known(t.device, dev_clean);
        }
        c.raw(b",\"grad\":");
        c.raw(if t.requires_grad { b"true" } else { b"false" });
        c.raw(b",\"bytes\":");
        c.digits(&bytes);
        c.raw(b",\"cat\":");
        c.cat(t.category);
        if let Some(s) = &span {
            c.raw(b",\"span\":");
            c.digits(s);
        }
        c.raw(b"}\n");
        // memory
        if let Some((m, ts)) = mem {
            c.raw(b"{\"type\":\"memory\",\"action\":");
            m.kind.with_str(|s| c.name(s.as_bytes()));
            c.raw(b",\"storage\":");
            c.digits(&id);
            c.raw(b",\"tensor\":");
            c.digits(&id);
            c.raw(b",\"bytes\":");
            c.digits(&bytes);
            if show_dev {
                c.raw(b",\"dev\":");
                c.string_known(m.device, dev_clean);
            }
            c.raw(b",\"cat\":");
            c.cat(m.category);
            if let Some(s) = &span {
                c.raw(b",\"span\":");
                c.digits(s);
            }
            c.ts_end(ts);
        }
    });
}

pub(crate) fn tensor(
    out: &mut LineBuf,
    span: Option<u64>,
    r: &TensorRecord<'_>,
    default_device: &str,
) {
    let label = r.label.map_or(0, str_bound);
    let bound = 192 + INT * (r.shape.len() + 3) + label + str_bound(r.dtype) + str_bound(r.device);
    out.write(bound, |c| {
        c.raw(b"{\"type\":\"tensor\",\"id\":");
        c.uint(r.id);
        if let Some(l) = r.label {
            c.raw(b",\"label\":");
            c.string(l);
        }
        c.raw(b",\"shape\":");
        c.uint_list(r.shape.iter().map(|&d| d as u64));
        c.raw(b",\"dtype\":");
        c.string(r.dtype);
        c.device_field(r.device, default_device);
        c.raw(b",\"grad\":");
        c.raw(if r.requires_grad { b"true" } else { b"false" });
        c.raw(b",\"bytes\":");
        c.uint(r.bytes);
        c.raw(b",\"cat\":");
        c.cat(r.category);
        c.opt_span(span);
        c.raw(b"}\n");
    });
}

pub(crate) fn memory(
    out: &mut LineBuf,
    span: Option<u64>,
    r: &MemoryRecord<'_>,
    default_device: &str,
    ts: u64,
) {
    out.write(192 + 5 * INT + str_bound(r.device), |c| {
        c.raw(b"{\"type\":\"memory\",\"action\":");
        r.kind.with_str(|s| c.name(s.as_bytes()));
        c.raw(b",\"storage\":");
        c.uint(r.storage);
        c.raw(b",\"tensor\":");
        c.uint(r.tensor);
        c.raw(b",\"bytes\":");
        c.uint(r.bytes);
        c.device_field(r.device, default_device);
        c.raw(b",\"cat\":");
        c.cat(r.category);
        c.opt_span(span);
        c.ts_end(ts);
    });
}

pub(crate) fn device_memory(
    out: &mut LineBuf,
    device: &str,
    used: Option<u64>,
    free: Option<u64>,
    reserved: Option<u64>,
    ts: u64,
) {
    out.write(128 + 4 * INT + str_bound(device), |c| {
        c.raw(b"{\"type\":\"device_memory\",\"dev\":");
        c.string(device);
        for (key, v) in [
            (&b",\"used\":"[..], used),
            (&b",\"free\":"[..], free),
            (&b",\"reserved\":"[..], reserved),
        ] {
            if let Some(v) = v {
                c.raw(key);
                c.uint(v);
            }
        }
        c.ts_end(ts);
    });
}

pub(crate) fn gradient(
    out: &mut LineBuf,
    param: &str,
    state: GradientState,
    norm: Option<f64>,
    ts: u64,
) {
    out.write(128 + 64 + INT + str_bound(param), |c| {
        c.raw(b"{\"type\":\"gradient\",\"param\":");
        c.string(param);
        c.raw(b",\"state\":");
        state.with_str(|s| c.name(s.as_bytes()));
        if let Some(n) = norm.filter(|n| n.is_finite()) {
            c.raw(b",\"norm\":");
            c.float(n);
        }
        c.ts_end(ts);
    });
}

pub(crate) fn step(out: &mut LineBuf, index: u64, ts: u64) {
    out.write(64 + 2 * INT, |c| {
        c.raw(b"{\"type\":\"step\",\"index\":");
        c.uint(index);
        c.ts_end(ts);
    });
}

pub(crate) fn marker(out: &mut LineBuf, name: &str, span: Option<u64>, ts: u64) {
    out.write(64 + 2 * INT + str_bound(name), |c| {
        c.raw(b"{\"type\":\"marker\",\"name\":");
        c.string(name);
        c.opt_span(span);
        c.ts_end(ts);
    });
}

pub(crate) fn counter(out: &mut LineBuf, name: &str, value: f64, ts: u64) {
    out.write(64 + 64 + INT + str_bound(name), |c| {
        c.raw(b"{\"type\":\"counter\",\"name\":");
        c.string(name);
        c.raw(b",\"value\":");
        c.float(value);
        c.ts_end(ts);
    });
}
