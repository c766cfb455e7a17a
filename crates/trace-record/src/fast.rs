//! A fast parser for the exact line shapes this crate's encoder writes (the hot event types).
//!
//! It accepts only lines that follow the encoder's key order and formatting exactly, with
//! strings free of escapes and integers in range; anything else returns `None` and the
//! reader falls back to serde, which handles every valid line and produces typed errors.
//! For every line it accepts, the result equals what serde would produce (a property test
//! checks this against serde on encoded and on mutated lines).
//!
//! [`parse_into`] parses into an event that is already there, reusing its strings and lists
//! (and, when the line is of another type, events kept in a [`Spare`] pool), so a reader that
//! hands its events out by reference allocates nothing per line in steady state.

use crate::schema::{
    AllocKind, Event, ExecStep, MemoryCategory, MemoryEvent, OUT_BYTES_UNSET, OpEvent, SpanEnd,
    SpanKind, SpanStart, StepEvent, TensorEvent,
};

/// Events of each hot type, and lists, no longer in use: a parsing thread takes from here
/// before it allocates. Each pool holds at most [`SPARE_MAX`] items.
#[derive(Debug, Default)]
pub(crate) struct Spare {
    ops: Vec<OpEvent>,
    tensors: Vec<TensorEvent>,
    memory: Vec<MemoryEvent>,
    spans: Vec<SpanStart>,
    strings: Vec<String>,
    shapes: Vec<Vec<Vec<usize>>>,
    dtypes: Vec<Vec<String>>,
}

/// The most items one [`Spare`] pool keeps (more are freed).
const SPARE_MAX: usize = 8192;

/// The most bytes a reused string or list keeps between lines: a longer line's memory is
/// given back when the next line reuses it, so what a reader keeps stays a few KB per event
/// however long a hostile line was.
const RETAIN_BYTES: usize = 4096;

fn keep<T>(pool: &mut Vec<T>, item: T) {
    if pool.len() < SPARE_MAX {
        pool.push(item);
    }
}

impl Spare {
    /// Keeps the memory of an event that is being replaced.
    pub(crate) fn stash(&mut self, old: Event) {
        match old {
            Event::Op(o) => keep(&mut self.ops, o),
            Event::Tensor(t) => keep(&mut self.tensors, t),
            Event::Memory(m) => keep(&mut self.memory, m),
            Event::SpanStart(s) => keep(&mut self.spans, s),
            _ => {}
        }
    }

    /// A list of `n` copies of `dtype`, reusing a kept list and its strings.
    pub(crate) fn dtypes(&mut self, dtype: &str, n: usize) -> Vec<String> {
        let mut v = self.dtypes.pop().unwrap_or_default();
        v.truncate(n);
        v.shrink_to(RETAIN_BYTES / std::mem::size_of::<String>());
        for s in &mut v {
            s.clear();
            s.push_str(dtype);
        }
        while v.len() < n {
            v.push(dtype.to_string());
        }
        v
    }
}

/// The event a slot holds before anything is parsed into it (owns no memory).
pub(crate) const PLACEHOLDER: Event = Event::Step(StepEvent { index: 0, ts: 0 });

/// Puts `event` in `slot`, keeping the memory of what was there.
pub(crate) fn put(slot: &mut Event, event: Event, spare: &mut Spare) {
    spare.stash(std::mem::replace(slot, event));
}

/// Makes `slot` an event of the variant `is` accepts, taken from `spare` or `make` when it
/// is not one already.
#[inline]
fn ensure(
    slot: &mut Event,
    spare: &mut Spare,
    is: fn(&Event) -> bool,
    make: impl FnOnce(&mut Spare) -> Event,
) {
    if !is(slot) {
        let fresh = make(spare);
        put(slot, fresh, spare);
    }
}

fn empty_op() -> OpEvent {
    OpEvent {
        span: None,
        name: String::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        shape: Vec::new(),
        dtype: String::new(),
        device: String::new(),
        ts: 0,
        dur: 0,
        in_bytes: 0,
        out_bytes: OUT_BYTES_UNSET,
        category: None,
        flops: None,
        in_shapes: None,
        in_dtypes: None,
    }
}

fn empty_tensor() -> TensorEvent {
    TensorEvent {
        id: 0,
        label: None,
        shape: Vec::new(),
        dtype: String::new(),
        device: String::new(),
        requires_grad: false,
        bytes: 0,
        category: MemoryCategory::Other,
        span: None,
    }
}

fn empty_memory() -> MemoryEvent {
    MemoryEvent {
        kind: AllocKind::Alloc,
        storage: 0,
        tensor: 0,
        bytes: 0,
        device: String::new(),
        category: MemoryCategory::Other,
        span: None,
        ts: 0,
    }
}

fn empty_span() -> SpanStart {
    SpanStart {
        id: 0,
        parent: None,
        name: String::new(),
        kind: SpanKind::Function,
        step: None,
        thread: 0,
        ts: 0,
    }
}

struct Cur<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cur<'a> {
    #[inline]
    fn lit(&mut self, s: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + s.len())? == s {
            self.i += s.len();
            Some(())
        } else {
            None
        }
    }

    /// Consumes `s` if it comes next.
    #[inline]
    fn opt(&mut self, s: &[u8]) -> bool {
        self.lit(s).is_some()
    }

    /// A JSON non-negative integer (no sign, no leading zeros, no fraction), in range.
    #[inline]
    fn u64(&mut self) -> Option<u64> {
        let start = self.i;
        let mut v: u64 = 0;
        // Up to 19 digits cannot overflow; only longer numbers need checked arithmetic.
        while let Some(&c) = self.b.get(self.i) {
            if !c.is_ascii_digit() {
                break;
            }
            if self.i - start < 19 {
                v = v * 10 + u64::from(c - b'0');
            } else {
                v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            }
            self.i += 1;
        }
        let n = self.i - start;
        if n == 0 || (n > 1 && self.b[start] == b'0') {
            return None;
        }
        Some(v)
    }

    /// A string without escapes or control characters, valid UTF-8.
    #[inline]
    fn str(&mut self) -> Option<&'a str> {
        self.lit(b"\"")?;
        let start = self.i;
        let rest = self.b.get(start..)?;
        let len = rest
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        if rest[len] != b'"' {
            return None;
        }
        self.i = start + len + 1;
        std::str::from_utf8(&rest[..len]).ok()
    }

    /// [`str`](Self::str) into `out` (its memory reused).
    #[inline]
    fn str_into(&mut self, out: &mut String) -> Option<()> {
        let s = self.str()?;
        out.clear();
        out.shrink_to(RETAIN_BYTES);
        out.push_str(s);
        Some(())
    }

    #[inline]
    fn list_into(&mut self, out: &mut Vec<u64>) -> Option<()> {
        self.list_of_into(out, Some)
    }

    #[inline]
    fn usize_list_into(&mut self, out: &mut Vec<usize>) -> Option<()> {
        self.list_of_into(out, |d| usize::try_from(d).ok())
    }

    /// A list of integers into `out` (cleared first, its memory reused).
    #[inline]
    fn list_of_into<T>(&mut self, out: &mut Vec<T>, conv: impl Fn(u64) -> Option<T>) -> Option<()> {
        self.lit(b"[")?;
        out.clear();
        out.shrink_to(RETAIN_BYTES / std::mem::size_of::<T>().max(1));
        if self.opt(b"]") {
            return Some(());
        }
        loop {
            out.push(conv(self.u64()?)?);
            if self.opt(b"]") {
                return Some(());
            }
            self.lit(b",")?;
        }
    }

    /// The line ends here.
    #[inline]
    fn end(&mut self) -> Option<()> {
        self.lit(b"}")?;
        (self.i == self.b.len()).then_some(())
    }

    /// A schema enum by its wire name, one of `all` (named by `wire`): the bytes between
    /// the quotes are compared with each name (a name with escapes is left to serde).
    #[inline]
    fn name<T: Copy>(&mut self, all: &[T], wire: fn(T) -> &'static str) -> Option<T> {
        self.lit(b"\"")?;
        let rest = self.b.get(self.i..)?;
        let len = rest.iter().position(|&c| c == b'"')?;
        let found = all
            .iter()
            .copied()
            .find(|&v| wire(v).as_bytes() == &rest[..len])?;
        self.i += len + 1;
        Some(found)
    }

    #[allow(
        clippy::option_option,
        reason = "not the fast form (None), the field absent (Some(None)) or present (Some(Some(n)))"
    )]
    fn opt_u64(&mut self, key: &[u8]) -> Option<Option<u64>> {
        if self.opt(key) {
            self.u64().map(Some)
        } else {
            Some(None)
        }
    }

    /// The device when written (else left empty: the reader fills in the header's).
    fn device_into(&mut self, out: &mut String) -> Option<()> {
        if self.opt(b",\"dev\":") {
            self.str_into(out)
        } else {
            out.clear();
            Some(())
        }
    }
}

/// Parses `line` if it has exactly the encoder's shape; `None` means "use serde".
#[cfg(test)]
pub(crate) fn parse(line: &[u8]) -> Option<Event> {
    let mut slot = PLACEHOLDER;
    parse_into(line, &mut slot, &mut Spare::default())?;
    Some(slot)
}

/// Parses `line` into `slot` if it has exactly the encoder's shape, reusing the memory of
/// what `slot` holds (and of `spare`'s pools when the line is of another type); `None`
/// means "use serde", and then `slot` holds an unspecified event of a hot type.
pub(crate) fn parse_into(line: &[u8], slot: &mut Event, spare: &mut Spare) -> Option<()> {
    let mut c = Cur { b: line, i: 0 };
    c.lit(b"{\"type\":\"")?;
    match line.get(9)? {
        b'o' => {
            ensure(
                slot,
                spare,
                |e| matches!(e, Event::Op(_)),
                |s| Event::Op(s.ops.pop().unwrap_or_else(empty_op)),
            );
            match slot {
                Event::Op(o) => op(&mut c, o, spare),
                _ => None,
            }
        }
        b's' => {
            if c.opt(b"span_start\"") {
                ensure(
                    slot,
                    spare,
                    |e| matches!(e, Event::SpanStart(_)),
                    |s| Event::SpanStart(s.spans.pop().unwrap_or_else(empty_span)),
                );
                match slot {
                    Event::SpanStart(s) => span_start(&mut c, s),
                    _ => None,
                }
            } else if c.opt(b"span_end\",\"id\":") {
                let id = c.u64()?;
                c.lit(b",\"ts\":")?;
                let ts = c.u64()?;
                c.end()?;
                put(slot, Event::SpanEnd(SpanEnd { id, ts }), spare);
                Some(())
            } else {
                c.lit(b"step\",\"index\":")?;
                let index = c.u64()?;
                c.lit(b",\"ts\":")?;
                let ts = c.u64()?;
                c.end()?;
                put(slot, Event::Step(StepEvent { index, ts }), spare);
                Some(())
            }
        }
        b'm' => {
            ensure(
                slot,
                spare,
                |e| matches!(e, Event::Memory(_)),
                |s| Event::Memory(s.memory.pop().unwrap_or_else(empty_memory)),
            );
            match slot {
                Event::Memory(m) => memory(&mut c, m),
                _ => None,
            }
        }
        b't' => {
            ensure(
                slot,
                spare,
                |e| matches!(e, Event::Tensor(_)),
                |s| Event::Tensor(s.tensors.pop().unwrap_or_else(empty_tensor)),
            );
            match slot {
                Event::Tensor(t) => tensor(&mut c, t, spare),
                _ => None,
            }
        }
        _ => None,
    }
}

fn op(c: &mut Cur<'_>, o: &mut OpEvent, spare: &mut Spare) -> Option<()> {
    c.lit(b"op\"")?;
    o.span = c.opt_u64(b",\"span\":")?;
    c.lit(b",\"name\":")?;
    c.str_into(&mut o.name)?;
    c.lit(b",\"in\":")?;
    c.list_into(&mut o.inputs)?;
    c.lit(b",\"out\":")?;
    c.list_into(&mut o.outputs)?;
    c.lit(b",\"shape\":")?;
    c.usize_list_into(&mut o.shape)?;
    c.lit(b",\"dtype\":")?;
    c.str_into(&mut o.dtype)?;
    c.device_into(&mut o.device)?;
    c.lit(b",\"ts\":")?;
    o.ts = c.u64()?;
    c.lit(b",\"dur\":")?;
    o.dur = c.u64()?;
    c.lit(b",\"in_b\":")?;
    o.in_bytes = c.u64()?;
    o.out_bytes = c.opt_u64(b",\"out_b\":")?.unwrap_or(OUT_BYTES_UNSET);
    o.category = if c.opt(b",\"cat\":") {
        Some(c.name(&MemoryCategory::ALL, MemoryCategory::as_str)?)
    } else {
        None
    };
    o.flops = c.opt_u64(b",\"flops\":")?;
    if c.opt(b",\"in_shapes\":[") {
        let mut shapes = o
            .in_shapes
            .take()
            .or_else(|| spare.shapes.pop())
            .unwrap_or_default();
        let mut n = 0;
        if !c.opt(b"]") {
            loop {
                if n == shapes.len() {
                    shapes.push(Vec::new());
                }
                c.usize_list_into(&mut shapes[n])?;
                n += 1;
                if c.opt(b"]") {
                    break;
                }
                c.lit(b",")?;
            }
        }
        shapes.truncate(n);
        shapes.shrink_to(RETAIN_BYTES / std::mem::size_of::<Vec<usize>>());
        o.in_shapes = Some(shapes);
    } else if let Some(v) = o.in_shapes.take() {
        keep(&mut spare.shapes, v);
    }
    if c.opt(b",\"in_dtypes\":[") {
        let mut dtypes = o
            .in_dtypes
            .take()
            .or_else(|| spare.dtypes.pop())
            .unwrap_or_default();
        let mut n = 0;
        if !c.opt(b"]") {
            loop {
                if n == dtypes.len() {
                    dtypes.push(String::new());
                }
                c.str_into(&mut dtypes[n])?;
                n += 1;
                if c.opt(b"]") {
                    break;
                }
                c.lit(b",")?;
            }
        }
        dtypes.truncate(n);
        dtypes.shrink_to(RETAIN_BYTES / std::mem::size_of::<String>());
        o.in_dtypes = Some(dtypes);
    } else if let Some(v) = o.in_dtypes.take() {
        keep(&mut spare.dtypes, v);
    }
    c.end()
}

fn span_start(c: &mut Cur<'_>, s: &mut SpanStart) -> Option<()> {
    c.lit(b",\"id\":")?;
    s.id = c.u64()?;
    s.parent = c.opt_u64(b",\"parent\":")?;
    c.lit(b",\"name\":")?;
    c.str_into(&mut s.name)?;
    c.lit(b",\"kind\":")?;
    s.kind = c.name(&SpanKind::ALL, SpanKind::as_str)?;
    s.step = if c.opt(b",\"step\":") {
        Some(c.name(&ExecStep::ALL, ExecStep::as_str)?)
    } else {
        None
    };
    c.lit(b",\"thread\":")?;
    s.thread = c.u64()?;
    c.lit(b",\"ts\":")?;
    s.ts = c.u64()?;
    c.end()
}

fn memory(c: &mut Cur<'_>, m: &mut MemoryEvent) -> Option<()> {
    c.lit(b"memory\",\"action\":")?;
    m.kind = c.name(&AllocKind::ALL, AllocKind::as_str)?;
    c.lit(b",\"storage\":")?;
    m.storage = c.u64()?;
    c.lit(b",\"tensor\":")?;
    m.tensor = c.u64()?;
    c.lit(b",\"bytes\":")?;
    m.bytes = c.u64()?;
    c.device_into(&mut m.device)?;
    c.lit(b",\"cat\":")?;
    m.category = c.name(&MemoryCategory::ALL, MemoryCategory::as_str)?;
    m.span = c.opt_u64(b",\"span\":")?;
    c.lit(b",\"ts\":")?;
    m.ts = c.u64()?;
    c.end()
}

fn tensor(c: &mut Cur<'_>, t: &mut TensorEvent, spare: &mut Spare) -> Option<()> {
    c.lit(b"tensor\",\"id\":")?;
    t.id = c.u64()?;
    if c.opt(b",\"label\":") {
        let mut label = t
            .label
            .take()
            .or_else(|| spare.strings.pop())
            .unwrap_or_default();
        c.str_into(&mut label)?;
        t.label = Some(label);
    } else if let Some(l) = t.label.take() {
        keep(&mut spare.strings, l);
    }
    c.lit(b",\"shape\":")?;
    c.usize_list_into(&mut t.shape)?;
    c.lit(b",\"dtype\":")?;
    c.str_into(&mut t.dtype)?;
    c.device_into(&mut t.device)?;
    c.lit(b",\"grad\":")?;
    t.requires_grad = if c.opt(b"true") {
        true
    } else {
        c.lit(b"false")?;
        false
    };
    c.lit(b",\"bytes\":")?;
    t.bytes = c.u64()?;
    c.lit(b",\"cat\":")?;
    t.category = c.name(&MemoryCategory::ALL, MemoryCategory::as_str)?;
    t.span = c.opt_u64(b",\"span\":")?;
    c.end()
}

#[cfg(test)]
mod tests {
    use super::{PLACEHOLDER, Spare, parse, parse_into};

    #[test]
    fn rejects_what_serde_rejects_or_reads_differently() {
        for line in [
            &br#"{"type":"step","index":01,"ts":1}"#[..],
            br#"{"type":"step","index":1,"ts":1} "#,
            br#"{"type":"step","index":18446744073709551616,"ts":1}"#,
            br#"{"type":"step","index":1.0,"ts":1}"#,
            br#"{"type":"op","name":"a\"b","in":[],"out":[],"shape":[],"dtype":"f32","ts":0,"dur":0,"in_b":0}"#,
            br#"{"type":"span_end","id":1,"ts":1,"extra":2}"#,
        ] {
            assert_eq!(parse(line), None, "{}", String::from_utf8_lossy(line));
        }
        assert!(parse(br#"{"type":"step","index":0,"ts":18446744073709551615}"#).is_some());
    }

    /// Parsing into a slot that held other events (of the same type with more fields, of
    /// other types, half-parsed lines) gives what parsing into a fresh one gives.
    #[test]
    fn a_reused_slot_reads_like_a_fresh_one() {
        let lines: [&[u8]; 12] = [
            br#"{"type":"op","span":3,"name":"matmul","in":[1,2,3],"out":[4,5],"shape":[2,3,4],"dtype":"f32","dev":"cuda:0","ts":1,"dur":2,"in_b":3,"out_b":4,"cat":"activation","flops":9,"in_shapes":[[1,2],[3],[4,5,6]],"in_dtypes":["f16","f32","bf16"]}"#,
            br#"{"type":"op","name":"relu","in":[],"out":[7],"shape":[],"dtype":"f32","ts":5,"dur":6,"in_b":0}"#,
            br#"{"type":"op","name":"add","in":[1],"out":[2],"shape":[8],"dtype":"f16","ts":5,"dur":6,"in_b":0,"in_shapes":[[8]]}"#,
            br#"{"type":"tensor","id":9,"label":"w","shape":[64,64],"dtype":"f32","dev":"cpu","grad":true,"bytes":16384,"cat":"parameter","span":2}"#,
            br#"{"type":"tensor","id":10,"shape":[1],"dtype":"u8","grad":false,"bytes":1,"cat":"input"}"#,
            br#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":16384,"dev":"cuda:1","cat":"parameter","span":4,"ts":0}"#,
            br#"{"type":"memory","action":"free","storage":1,"tensor":1,"bytes":16,"cat":"activation","ts":7}"#,
            br#"{"type":"span_start","id":2,"parent":1,"name":"forward","kind":"function","step":"forward","thread":0,"ts":110}"#,
            br#"{"type":"span_start","id":3,"name":"x","kind":"module","thread":1,"ts":111}"#,
            br#"{"type":"span_end","id":3,"ts":120}"#,
            br#"{"type":"step","index":4,"ts":130}"#,
            br#"{"type":"op","span":3,"name":"matmul","in":[1,2,3],"out":[4,5],"shape":[2,3,4],"dtype":"f32","ts":1,"dur":2,"in_b":3,"out_b":4,"cat":"activ"#,
        ];
        let mut spare = Spare::default();
        for (i, &first) in lines.iter().enumerate() {
            for (j, &second) in lines.iter().enumerate() {
                let mut slot = PLACEHOLDER;
                let _ = parse_into(first, &mut slot, &mut spare);
                let got = parse_into(second, &mut slot, &mut spare).map(|()| slot);
                assert_eq!(got, parse(second), "line {j} after line {i}");
            }
        }
    }

    /// A long line's memory is not kept once the next line reuses its event.
    #[test]
    fn a_long_lines_memory_is_given_back() {
        let name = "n".repeat(1 << 20);
        let ids = vec!["7"; 100_000].join(",");
        let long = format!(
            r#"{{"type":"op","name":"{name}","in":[{ids}],"out":[],"shape":[],"dtype":"f32","ts":0,"dur":0,"in_b":0}}"#
        );
        let short = br#"{"type":"op","name":"relu","in":[1],"out":[2],"shape":[4],"dtype":"f32","ts":0,"dur":0,"in_b":0}"#;
        let mut slot = PLACEHOLDER;
        let mut spare = Spare::default();
        assert!(parse_into(long.as_bytes(), &mut slot, &mut spare).is_some());
        assert!(parse_into(short, &mut slot, &mut spare).is_some());
        match &slot {
            crate::schema::Event::Op(o) => {
                assert_eq!((o.name.as_str(), o.inputs.as_slice()), ("relu", &[1][..]));
                assert!(
                    o.name.capacity() <= super::RETAIN_BYTES,
                    "{}",
                    o.name.capacity()
                );
                assert!(o.inputs.capacity() * 8 <= super::RETAIN_BYTES);
            }
            other => panic!("{other:?}"),
        }
    }
}
