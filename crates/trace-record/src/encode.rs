//! The hand-written JSON Lines encoder shared by the session's hot path and [`encode_event`].
//!
//! Every line is written without allocation into a reused, already initialised buffer
//! ([`LineBuf`]) through a cursor: each line first makes room for its worst case, then writes
//! with plain stores (integers with SWAR arithmetic and fixed 8-byte stores, floats with `ryu`
//! in shortest round-trip form and non-finite as `null`). Strings are escaped per RFC 8259
//! (quote, backslash and every control character; other unicode passes through as UTF-8). The
//! key order is fixed: `type` first, which lets the reader dispatch on a prefix.

use crate::schema::logical_bytes;
use crate::schema::{
    Event, ExecStep, Frame, GradientState, Header, MemoryCategory, MemoryEvent, OpEvent, SpanKind,
    TensorEvent, Trailer,
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
    let mut lb = LineBuf::from_vec(std::mem::take(out));
    encode_into(event, default_device, &mut lb);
    *out = lb.into_vec();
}

fn encode_into(event: &Event, default_device: &str, out: &mut LineBuf) {
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
    op(out, e.span, &r, default_device);
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

// ---- the buffer and its cursor ------------------------------------------------------------

/// A reused output buffer: `buf` is fully initialised and `pos` bytes of it are used.
#[derive(Debug, Default)]
pub(crate) struct LineBuf {
    buf: Vec<u8>,
    pos: usize,
}

impl LineBuf {
    /// An empty buffer with `capacity` initialised bytes.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        LineBuf {
            buf: vec![0; capacity],
            pos: 0,
        }
    }

    fn from_vec(v: Vec<u8>) -> Self {
        let pos = v.len();
        LineBuf { buf: v, pos }
    }

    fn into_vec(mut self) -> Vec<u8> {
        self.buf.truncate(self.pos);
        self.buf
    }

    /// The bytes written.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[..self.pos]
    }

    /// Bytes written.
    pub(crate) fn len(&self) -> usize {
        self.pos
    }

    /// Forgets the bytes written (keeps the memory).
    pub(crate) fn clear(&mut self) {
        self.pos = 0;
    }

    /// Appends raw bytes (a whole line, e.g. the header).
    pub(crate) fn extend(&mut self, bytes: &[u8]) {
        let mut c = self.cursor(bytes.len());
        c.raw(bytes);
        let pos = c.pos;
        self.pos = pos;
    }

    /// A cursor with room for at least `bound` more bytes.
    #[inline]
    fn cursor(&mut self, bound: usize) -> Cur<'_> {
        let need = self.pos + bound;
        if need > self.buf.len() {
            self.buf.resize(need.max(2 * self.buf.len()), 0);
        }
        Cur {
            buf: &mut self.buf[..],
            pos: self.pos,
        }
    }
}

/// Writes into an initialised slice that has room for the line (see [`LineBuf::cursor`]).
struct Cur<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

/// Worst-case bytes of a string literal: quotes plus `\u00XX` for every byte.
#[inline]
fn str_bound(s: &str) -> usize {
    2 + 6 * s.len()
}

/// Worst-case bytes of an integer (20 digits) plus the slack of the 8-byte stores.
const INT: usize = 24;

/// Two-digit-per-lane SWAR: the 8 decimal digits of `v` (< 10^8), leading zeros included,
/// one per byte (values 0-9), in reading order when stored little-endian.
#[inline(always)]
fn digits8(v: u64) -> u64 {
    let x = (v / 10_000) | ((v % 10_000) << 32);
    let hi = ((x * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let y = hi | ((x - hi * 100) << 16);
    let hi = ((y * 103) >> 10) & 0x000f_000f_000f_000f;
    hi | ((y - hi * 10) << 8)
}

const ASCII_ZEROS: u64 = 0x3030_3030_3030_3030;
const E8: u64 = 100_000_000;

impl Cur<'_> {
    #[inline(always)]
    fn raw(&mut self, s: &[u8]) {
        self.buf[self.pos..self.pos + s.len()].copy_from_slice(s);
        self.pos += s.len();
    }

    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.buf[self.pos] = b;
        self.pos += 1;
    }

    #[inline(always)]
    fn word(&mut self, w: u64, len: usize) {
        self.buf[self.pos..self.pos + 8].copy_from_slice(&w.to_le_bytes());
        self.pos += len;
    }

    /// `v` (< 10^8) without leading zeros.
    #[inline(always)]
    fn var8(&mut self, v: u64) {
        if v == 0 {
            self.byte(b'0');
            return;
        }
        if v < 10_000 {
            // Shape dimensions and small ids: the same SWAR on one 4-digit lane.
            let hi = (v * 10_486) >> 20;
            let y = hi | ((v - hi * 100) << 16);
            let hi = ((y * 103) >> 10) & 0x000f_000f;
            let z = hi | ((y - hi * 10) << 8);
            let lead = (z.trailing_zeros() / 8) as usize;
            self.word((z >> (8 * lead)) | ASCII_ZEROS, 4 - lead);
            return;
        }
        let z = digits8(v);
        let lead = (z.trailing_zeros() / 8) as usize;
        self.word((z >> (8 * lead)) | ASCII_ZEROS, 8 - lead);
    }

    /// `v` in decimal: no call, no per-digit loop, 8-byte stores (needs [`INT`] bytes of room).
    #[inline(always)]
    fn uint(&mut self, v: u64) {
        if v < E8 {
            self.var8(v);
        } else if v < E8 * E8 {
            self.var8(v / E8);
            self.word(digits8(v % E8) | ASCII_ZEROS, 8);
        } else {
            self.var8(v / (E8 * E8));
            self.word(digits8((v / E8) % E8) | ASCII_ZEROS, 8);
            self.word(digits8(v % E8) | ASCII_ZEROS, 8);
        }
    }

    #[inline]
    fn float(&mut self, v: f64) {
        if v.is_finite() {
            let mut b = ryu::Buffer::new();
            self.raw(b.format_finite(v).as_bytes());
        } else {
            self.raw(b"null");
        }
    }

    /// `s` as a JSON string literal, quotes included (needs [`str_bound`] bytes of room).
    #[inline]
    fn string(&mut self, s: &str) {
        self.byte(b'"');
        let bytes = s.as_bytes();
        if !bytes.iter().any(|&b| needs_escape(b)) {
            self.raw(bytes);
        } else {
            self.escaped(bytes);
        }
        self.byte(b'"');
    }

    #[cold]
    fn escaped(&mut self, bytes: &[u8]) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            if !needs_escape(b) {
                continue;
            }
            self.raw(&bytes[start..i]);
            match b {
                b'"' => self.raw(b"\\\""),
                b'\\' => self.raw(b"\\\\"),
                b'\n' => self.raw(b"\\n"),
                b'\r' => self.raw(b"\\r"),
                b'\t' => self.raw(b"\\t"),
                0x08 => self.raw(b"\\b"),
                0x0c => self.raw(b"\\f"),
                _ => {
                    self.raw(b"\\u00");
                    self.byte(HEX[usize::from(b >> 4)]);
                    self.byte(HEX[usize::from(b & 0xf)]);
                }
            }
            start = i + 1;
        }
        self.raw(&bytes[start..]);
    }

    /// `s` as a JSON string literal when the caller already knows whether it needs escaping
    /// (`clean`: it does not).
    #[inline(always)]
    fn string_known(&mut self, s: &str, clean: bool) {
        if clean {
            self.byte(b'"');
            self.raw(s.as_bytes());
            self.byte(b'"');
        } else {
            self.string(s);
        }
    }

    /// An integer formatted once by [`Digits::of`] (needs [`INT`] bytes of room).
    #[inline(always)]
    fn digits(&mut self, d: &Digits) {
        self.word(d.words[0], d.first);
        if d.n > 1 {
            self.word(d.words[1], 8);
            if d.n > 2 {
                self.word(d.words[2], 8);
            }
        }
    }

    #[inline]
    fn uint_list(&mut self, vs: impl Iterator<Item = u64>) {
        self.byte(b'[');
        let mut first = true;
        for v in vs {
            if !first {
                self.byte(b',');
            }
            first = false;
            self.uint(v);
        }
        self.byte(b']');
    }

    #[inline]
    fn device_field(&mut self, device: &str, default_device: &str) {
        if !device.is_empty() && device != default_device {
            self.raw(b",\"dev\":");
            self.string(device);
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

/// A decimal integer formatted once, held in registers (up to three 8-byte words of ASCII
/// digits) and written into several lines with plain stores.
#[derive(Clone, Copy)]
struct Digits {
    words: [u64; 3],
    /// Digits in the first word (1-8).
    first: usize,
    /// Words used (1-3); the words after the first hold 8 digits each.
    n: usize,
}

/// The ASCII digits of `v` (< 10^8) without leading zeros, as a little-endian word, and
/// their count.
#[inline(always)]
fn var8_word(v: u64) -> (u64, usize) {
    if v == 0 {
        return (u64::from(b'0'), 1);
    }
    let (z, width) = if v < 10_000 {
        let hi = (v * 10_486) >> 20;
        let y = hi | ((v - hi * 100) << 16);
        let hi = ((y * 103) >> 10) & 0x000f_000f;
        (hi | ((y - hi * 10) << 8), 4)
    } else {
        (digits8(v), 8)
    };
    let lead = (z.trailing_zeros() / 8) as usize;
    ((z >> (8 * lead)) | ASCII_ZEROS, width - lead)
}

impl Digits {
    #[inline(always)]
    fn of(v: u64) -> Self {
        if v < E8 {
            let (w, first) = var8_word(v);
            Digits {
                words: [w, 0, 0],
                first,
                n: 1,
            }
        } else if v < E8 * E8 {
            let (w, first) = var8_word(v / E8);
            Digits {
                words: [w, digits8(v % E8) | ASCII_ZEROS, 0],
                first,
                n: 2,
            }
        } else {
            let (w, first) = var8_word(v / (E8 * E8));
            Digits {
                words: [
                    w,
                    digits8((v / E8) % E8) | ASCII_ZEROS,
                    digits8(v % E8) | ASCII_ZEROS,
                ],
                first,
                n: 3,
            }
        }
    }
}

/// Whether `s` is written without escapes.
#[inline(always)]
fn is_clean(s: &str) -> bool {
    !s.as_bytes().iter().any(|&b| needs_escape(b))
}

/// Equal strings, with a pointer check first (callers usually pass the same label thrice).
#[inline(always)]
fn same_str(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// Bytes that need escaping inside a JSON string: control characters, quote, backslash.
const ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Whether byte `b` needs escaping inside a JSON string.
#[inline(always)]
fn needs_escape(b: u8) -> bool {
    ESCAPE[usize::from(b)]
}

/// Runs `f` on a cursor with room for `bound` bytes and records what it wrote.
#[inline(always)]
fn line(out: &mut LineBuf, bound: usize, f: impl FnOnce(&mut Cur<'_>)) {
    let mut c = out.cursor(bound);
    f(&mut c);
    let pos = c.pos;
    out.pos = pos;
}

// ---- event lines ------------------------------------------------------------------------

#[allow(clippy::too_many_arguments)]
pub(crate) fn span_start(
    out: &mut LineBuf,
    id: u64,
    parent: Option<u64>,
    name: &str,
    kind: SpanKind,
    step: Option<ExecStep>,
    thread: u64,
    ts: u64,
) {
    line(out, 128 + 4 * INT + str_bound(name), |c| {
        c.raw(b"{\"type\":\"span_start\",\"id\":");
        c.uint(id);
        if let Some(p) = parent {
            c.raw(b",\"parent\":");
            c.uint(p);
        }
        c.raw(b",\"name\":");
        c.string(name);
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
    line(out, 64 + 2 * INT, |c| {
        c.raw(b"{\"type\":\"span_end\",\"id\":");
        c.uint(id);
        c.ts_end(ts);
    });
}

/// The end of an op line, from `ts` to the newline: shared by [`op`] and [`op_with_output`].
/// `out_b` is written only when it is not derivable (`derived` = shape × dtype size matches).
fn op_tail(c: &mut Cur<'_>, r: &OpRecord<'_>, derived: bool) {
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
    c.raw(b"}\n");
}

pub(crate) fn op(out: &mut LineBuf, span: Option<u64>, r: &OpRecord<'_>, default_device: &str) {
    let ints = r.inputs.len() + r.outputs.len() + r.shape.len() + 7;
    let bound = 192 + INT * ints + str_bound(r.name) + str_bound(r.dtype) + str_bound(r.device);
    let derived = logical_bytes(r.shape, r.dtype) == Some(r.out_bytes);
    line(out, bound, |c| {
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
        op_tail(c, r, derived);
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
        op(out, span, r, default_device);
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
        + str_bound(t.device);
    let derived = logical_bytes(r.shape, r.dtype) == Some(r.out_bytes);
    line(out, bound, |c| {
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
        op_tail(c, r, derived);
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
    line(out, bound, |c| {
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
    line(out, 192 + 5 * INT + str_bound(r.device), |c| {
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
    line(out, 128 + 4 * INT + str_bound(device), |c| {
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
    line(out, 128 + 64 + INT + str_bound(param), |c| {
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
    line(out, 64 + 2 * INT, |c| {
        c.raw(b"{\"type\":\"step\",\"index\":");
        c.uint(index);
        c.ts_end(ts);
    });
}

pub(crate) fn marker(out: &mut LineBuf, name: &str, span: Option<u64>, ts: u64) {
    line(out, 64 + 2 * INT + str_bound(name), |c| {
        c.raw(b"{\"type\":\"marker\",\"name\":");
        c.string(name);
        c.opt_span(span);
        c.ts_end(ts);
    });
}

pub(crate) fn counter(out: &mut LineBuf, name: &str, value: f64, ts: u64) {
    line(out, 64 + 64 + INT + str_bound(name), |c| {
        c.raw(b"{\"type\":\"counter\",\"name\":");
        c.string(name);
        c.raw(b",\"value\":");
        c.float(value);
        c.ts_end(ts);
    });
}

#[cfg(test)]
mod tests {
    use super::LineBuf;

    #[test]
    fn integers_match_display() {
        let mut vals: Vec<u64> = (0..20_000).collect();
        vals.extend([99_999_999, 100_000_000, u64::MAX]);
        let mut x = 1u64;
        for _ in 0..20 {
            vals.extend([x - 1, x, x + 1]);
            x = x.saturating_mul(10);
        }
        let mut r = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            vals.push(r >> (r % 64));
        }
        for v in vals {
            let mut lb = LineBuf::default();
            super::line(&mut lb, super::INT, |c| c.uint(v));
            assert_eq!(lb.bytes(), v.to_string().as_bytes(), "{v}");
            let mut lb = LineBuf::default();
            super::line(&mut lb, super::INT, |c| c.digits(&super::Digits::of(v)));
            assert_eq!(lb.bytes(), v.to_string().as_bytes(), "digits {v}");
        }
    }
}
