//! The hand-written JSON Lines encoder shared by the session's hot path and [`encode_event`].
//!
//! Every line is written without allocation into a caller's reused `Vec<u8>`: integers with
//! `itoa`, floats with `ryu` (shortest round-trip form; non-finite as `null`), strings escaped
//! per RFC 8259 (quote, backslash and every control character; other unicode passes through as
//! UTF-8). The key order is fixed: `type` first, which lets the reader dispatch on a prefix.

use crate::schema::logical_bytes;
use crate::schema::{
    AllocKind, Event, ExecStep, Frame, GradientState, Header, MemoryCategory, MemoryEvent, OpEvent,
    SpanKind, TensorEvent, Trailer,
};
use crate::session::{MemoryRecord, OpRecord, TensorRecord};

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
    match event {
        Event::SpanStart(e) => {
            span_start(out, e.id, e.parent, &e.name, e.kind, e.step, e.thread, e.ts)
        }
        Event::SpanEnd(e) => span_end(out, e.id, e.ts),
        Event::Op(e) => op_event(out, e, default_device),
        Event::Tensor(e) => tensor_event(out, e, default_device),
        Event::Memory(e) => memory_event(out, e, default_device),
        Event::DeviceMemory(e) => device_memory(out, &e.device, e.used, e.free, e.reserved, e.ts),
        Event::Gradient(e) => gradient(out, &e.param, e.state, e.norm, e.ts),
        Event::Step(e) => step(out, e.index, e.ts),
        Event::Marker(e) => marker(out, &e.name, e.span, e.ts),
        Event::Counter(e) => counter(out, &e.name, e.value, e.ts),
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

fn op_event(out: &mut Vec<u8>, e: &OpEvent, default_device: &str) {
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
    op(out, e.span, &r, default_device);
}

fn tensor_event(out: &mut Vec<u8>, e: &TensorEvent, default_device: &str) {
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

fn memory_event(out: &mut Vec<u8>, e: &MemoryEvent, default_device: &str) {
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

// ---- primitives -------------------------------------------------------------------------

#[inline]
fn raw(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(s);
}

#[inline]
pub(crate) fn uint(out: &mut Vec<u8>, v: u64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(v).as_bytes());
}

#[inline]
fn float(out: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        let mut b = ryu::Buffer::new();
        out.extend_from_slice(b.format_finite(v).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

/// Whether byte `b` needs escaping inside a JSON string.
#[inline]
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Appends `s` as a JSON string literal, quotes included.
#[inline]
pub(crate) fn string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    if !bytes.iter().any(|&b| needs_escape(b)) {
        out.extend_from_slice(bytes);
    } else {
        escaped(out, bytes);
    }
    out.push(b'"');
}

#[cold]
fn escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !needs_escape(b) {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            }
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

#[inline]
fn uint_list(out: &mut Vec<u8>, vs: impl Iterator<Item = u64>) {
    out.push(b'[');
    let mut first = true;
    for v in vs {
        if !first {
            out.push(b',');
        }
        first = false;
        uint(out, v);
    }
    out.push(b']');
}

#[inline]
fn device_field(out: &mut Vec<u8>, device: &str, default_device: &str) {
    if !device.is_empty() && device != default_device {
        raw(out, b",\"dev\":");
        string(out, device);
    }
}

#[inline]
fn opt_span(out: &mut Vec<u8>, span: Option<u64>) {
    if let Some(s) = span {
        raw(out, b",\"span\":");
        uint(out, s);
    }
}

#[inline]
fn ts_end(out: &mut Vec<u8>, ts: u64) {
    raw(out, b",\"ts\":");
    uint(out, ts);
    raw(out, b"}\n");
}

fn kind_str(k: SpanKind) -> &'static [u8] {
    match k {
        SpanKind::Function => b"function",
        SpanKind::Module => b"module",
        SpanKind::Op => b"op",
    }
}

fn step_str(s: ExecStep) -> &'static [u8] {
    match s {
        ExecStep::Forward => b"forward",
        ExecStep::Backward => b"backward",
        ExecStep::Optimizer => b"optimizer",
    }
}

fn cat(out: &mut Vec<u8>, c: MemoryCategory) {
    out.push(b'"');
    raw(out, c.as_str().as_bytes());
    out.push(b'"');
}

// ---- event lines ------------------------------------------------------------------------

#[allow(clippy::too_many_arguments)]
pub(crate) fn span_start(
    out: &mut Vec<u8>,
    id: u64,
    parent: Option<u64>,
    name: &str,
    kind: SpanKind,
    step: Option<ExecStep>,
    thread: u64,
    ts: u64,
) {
    raw(out, b"{\"type\":\"span_start\",\"id\":");
    uint(out, id);
    if let Some(p) = parent {
        raw(out, b",\"parent\":");
        uint(out, p);
    }
    raw(out, b",\"name\":");
    string(out, name);
    raw(out, b",\"kind\":\"");
    raw(out, kind_str(kind));
    out.push(b'"');
    if let Some(s) = step {
        raw(out, b",\"step\":\"");
        raw(out, step_str(s));
        out.push(b'"');
    }
    raw(out, b",\"thread\":");
    uint(out, thread);
    ts_end(out, ts);
}

pub(crate) fn span_end(out: &mut Vec<u8>, id: u64, ts: u64) {
    raw(out, b"{\"type\":\"span_end\",\"id\":");
    uint(out, id);
    ts_end(out, ts);
}

pub(crate) fn op(out: &mut Vec<u8>, span: Option<u64>, r: &OpRecord<'_>, default_device: &str) {
    raw(out, b"{\"type\":\"op\"");
    opt_span(out, span);
    raw(out, b",\"name\":");
    string(out, r.name);
    raw(out, b",\"in\":");
    uint_list(out, r.inputs.iter().copied());
    raw(out, b",\"out\":");
    uint_list(out, r.outputs.iter().copied());
    raw(out, b",\"shape\":");
    uint_list(out, r.shape.iter().map(|&d| d as u64));
    raw(out, b",\"dtype\":");
    string(out, r.dtype);
    device_field(out, r.device, default_device);
    raw(out, b",\"ts\":");
    uint(out, r.start_ns);
    raw(out, b",\"dur\":");
    uint(out, r.dur_ns);
    raw(out, b",\"in_b\":");
    uint(out, r.in_bytes);
    if logical_bytes(r.shape, r.dtype) != Some(r.out_bytes) {
        raw(out, b",\"out_b\":");
        uint(out, r.out_bytes);
    }
    if let Some(c) = r.category {
        raw(out, b",\"cat\":");
        cat(out, c);
    }
    if let Some(f) = r.flops {
        raw(out, b",\"flops\":");
        uint(out, f);
    }
    raw(out, b"}\n");
}

pub(crate) fn tensor(
    out: &mut Vec<u8>,
    span: Option<u64>,
    r: &TensorRecord<'_>,
    default_device: &str,
) {
    raw(out, b"{\"type\":\"tensor\",\"id\":");
    uint(out, r.id);
    if let Some(l) = r.label {
        raw(out, b",\"label\":");
        string(out, l);
    }
    raw(out, b",\"shape\":");
    uint_list(out, r.shape.iter().map(|&d| d as u64));
    raw(out, b",\"dtype\":");
    string(out, r.dtype);
    device_field(out, r.device, default_device);
    raw(out, b",\"grad\":");
    raw(out, if r.requires_grad { b"true" } else { b"false" });
    raw(out, b",\"bytes\":");
    uint(out, r.bytes);
    raw(out, b",\"cat\":");
    cat(out, r.category);
    opt_span(out, span);
    raw(out, b"}\n");
}

pub(crate) fn memory(
    out: &mut Vec<u8>,
    span: Option<u64>,
    r: &MemoryRecord<'_>,
    default_device: &str,
    ts: u64,
) {
    raw(
        out,
        match r.kind {
            AllocKind::Alloc => b"{\"type\":\"memory\",\"action\":\"alloc\",\"storage\":",
            AllocKind::Free => b"{\"type\":\"memory\",\"action\":\"free\",\"storage\":",
        },
    );
    uint(out, r.storage);
    raw(out, b",\"tensor\":");
    uint(out, r.tensor);
    raw(out, b",\"bytes\":");
    uint(out, r.bytes);
    device_field(out, r.device, default_device);
    raw(out, b",\"cat\":");
    cat(out, r.category);
    opt_span(out, span);
    ts_end(out, ts);
}

pub(crate) fn device_memory(
    out: &mut Vec<u8>,
    device: &str,
    used: Option<u64>,
    free: Option<u64>,
    reserved: Option<u64>,
    ts: u64,
) {
    raw(out, b"{\"type\":\"device_memory\",\"dev\":");
    string(out, device);
    for (key, v) in [
        (&b",\"used\":"[..], used),
        (&b",\"free\":"[..], free),
        (&b",\"reserved\":"[..], reserved),
    ] {
        if let Some(v) = v {
            raw(out, key);
            uint(out, v);
        }
    }
    ts_end(out, ts);
}

fn gradient_state(s: GradientState) -> &'static [u8] {
    match s {
        GradientState::Present => b"present",
        GradientState::Missing => b"missing",
        GradientState::Zero => b"zero",
        GradientState::NonFinite => b"non_finite",
    }
}

pub(crate) fn gradient(
    out: &mut Vec<u8>,
    param: &str,
    state: GradientState,
    norm: Option<f64>,
    ts: u64,
) {
    raw(out, b"{\"type\":\"gradient\",\"param\":");
    string(out, param);
    raw(out, b",\"state\":\"");
    raw(out, gradient_state(state));
    out.push(b'"');
    if let Some(n) = norm.filter(|n| n.is_finite()) {
        raw(out, b",\"norm\":");
        float(out, n);
    }
    ts_end(out, ts);
}

pub(crate) fn step(out: &mut Vec<u8>, index: u64, ts: u64) {
    raw(out, b"{\"type\":\"step\",\"index\":");
    uint(out, index);
    ts_end(out, ts);
}

pub(crate) fn marker(out: &mut Vec<u8>, name: &str, span: Option<u64>, ts: u64) {
    raw(out, b"{\"type\":\"marker\",\"name\":");
    string(out, name);
    opt_span(out, span);
    ts_end(out, ts);
}

pub(crate) fn counter(out: &mut Vec<u8>, name: &str, value: f64, ts: u64) {
    raw(out, b"{\"type\":\"counter\",\"name\":");
    string(out, name);
    raw(out, b",\"value\":");
    float(out, value);
    ts_end(out, ts);
}
