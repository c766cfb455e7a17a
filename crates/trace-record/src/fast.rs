//! A fast parser for the exact line shapes this crate's encoder writes (the hot event types).
//!
//! It accepts only lines that follow the encoder's key order and formatting exactly, with
//! strings free of escapes and integers in range; anything else returns `None` and the
//! reader falls back to serde, which handles every valid line and produces typed errors.
//! For every line it accepts, the result equals what serde would produce (a property test
//! checks this against serde on encoded and on mutated lines).

use crate::schema::{
    Event, MemoryEvent, OUT_BYTES_UNSET, OpEvent, SpanEnd, SpanStart, StepEvent, TensorEvent,
};

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
        while let Some(&c) = self.b.get(self.i) {
            if !c.is_ascii_digit() {
                break;
            }
            v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
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

    #[inline]
    fn list(&mut self) -> Option<Vec<u64>> {
        self.list_of(Some)
    }

    fn usize_list(&mut self) -> Option<Vec<usize>> {
        self.list_of(|d| usize::try_from(d).ok())
    }

    #[inline]
    fn list_of<T>(&mut self, conv: impl Fn(u64) -> Option<T>) -> Option<Vec<T>> {
        self.lit(b"[")?;
        if self.opt(b"]") {
            return Some(Vec::new());
        }
        let mut v = Vec::with_capacity(4);
        loop {
            v.push(conv(self.u64()?)?);
            if self.opt(b"]") {
                return Some(v);
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

    /// A schema enum by its wire name.
    #[inline]
    fn name<T: std::str::FromStr>(&mut self) -> Option<T> {
        self.str()?.parse().ok()
    }

    fn opt_u64(&mut self, key: &[u8]) -> Option<Option<u64>> {
        if self.opt(key) {
            self.u64().map(Some)
        } else {
            Some(None)
        }
    }

    fn device(&mut self) -> Option<String> {
        if self.opt(b",\"dev\":") {
            Some(self.str()?.to_string())
        } else {
            Some(String::new())
        }
    }
}

/// Parses `line` if it has exactly the encoder's shape; `None` means "use serde".
pub(crate) fn parse(line: &[u8]) -> Option<Event> {
    let mut c = Cur { b: line, i: 0 };
    c.lit(b"{\"type\":\"")?;
    match line.get(9)? {
        b'o' => op(&mut c),
        b's' => {
            if c.opt(b"span_start\"") {
                span_start(&mut c)
            } else if c.opt(b"span_end\",\"id\":") {
                let id = c.u64()?;
                c.lit(b",\"ts\":")?;
                let ts = c.u64()?;
                c.end()?;
                Some(Event::SpanEnd(SpanEnd { id, ts }))
            } else {
                c.lit(b"step\",\"index\":")?;
                let index = c.u64()?;
                c.lit(b",\"ts\":")?;
                let ts = c.u64()?;
                c.end()?;
                Some(Event::Step(StepEvent { index, ts }))
            }
        }
        b'm' => memory(&mut c),
        b't' => tensor(&mut c),
        _ => None,
    }
}

fn op(c: &mut Cur<'_>) -> Option<Event> {
    c.lit(b"op\"")?;
    let span = c.opt_u64(b",\"span\":")?;
    c.lit(b",\"name\":")?;
    let name = c.str()?.to_string();
    c.lit(b",\"in\":")?;
    let inputs = c.list()?;
    c.lit(b",\"out\":")?;
    let outputs = c.list()?;
    c.lit(b",\"shape\":")?;
    let shape = c.usize_list()?;
    c.lit(b",\"dtype\":")?;
    let dtype = c.str()?.to_string();
    let device = c.device()?;
    c.lit(b",\"ts\":")?;
    let ts = c.u64()?;
    c.lit(b",\"dur\":")?;
    let dur = c.u64()?;
    c.lit(b",\"in_b\":")?;
    let in_bytes = c.u64()?;
    let out_bytes = c.opt_u64(b",\"out_b\":")?.unwrap_or(OUT_BYTES_UNSET);
    let category = if c.opt(b",\"cat\":") {
        Some(c.name()?)
    } else {
        None
    };
    let flops = c.opt_u64(b",\"flops\":")?;
    let in_shapes = if c.opt(b",\"in_shapes\":[") {
        let mut shapes = Vec::with_capacity(inputs.len());
        if !c.opt(b"]") {
            loop {
                shapes.push(c.usize_list()?);
                if c.opt(b"]") {
                    break;
                }
                c.lit(b",")?;
            }
        }
        Some(shapes)
    } else {
        None
    };
    let in_dtypes = if c.opt(b",\"in_dtypes\":[") {
        let mut dtypes = Vec::with_capacity(inputs.len());
        if !c.opt(b"]") {
            loop {
                dtypes.push(c.str()?.to_string());
                if c.opt(b"]") {
                    break;
                }
                c.lit(b",")?;
            }
        }
        Some(dtypes)
    } else {
        None
    };
    c.end()?;
    Some(Event::Op(OpEvent {
        span,
        name,
        inputs,
        outputs,
        shape,
        dtype,
        device,
        ts,
        dur,
        in_bytes,
        out_bytes,
        category,
        flops,
        in_shapes,
        in_dtypes,
    }))
}

fn span_start(c: &mut Cur<'_>) -> Option<Event> {
    c.lit(b",\"id\":")?;
    let id = c.u64()?;
    let parent = c.opt_u64(b",\"parent\":")?;
    c.lit(b",\"name\":")?;
    let name = c.str()?.to_string();
    c.lit(b",\"kind\":")?;
    let kind = c.name()?;
    let step = if c.opt(b",\"step\":") {
        Some(c.name()?)
    } else {
        None
    };
    c.lit(b",\"thread\":")?;
    let thread = c.u64()?;
    c.lit(b",\"ts\":")?;
    let ts = c.u64()?;
    c.end()?;
    Some(Event::SpanStart(SpanStart {
        id,
        parent,
        name,
        kind,
        step,
        thread,
        ts,
    }))
}

fn memory(c: &mut Cur<'_>) -> Option<Event> {
    c.lit(b"memory\",\"action\":")?;
    let kind = c.name()?;
    c.lit(b",\"storage\":")?;
    let storage = c.u64()?;
    c.lit(b",\"tensor\":")?;
    let tensor = c.u64()?;
    c.lit(b",\"bytes\":")?;
    let bytes = c.u64()?;
    let device = c.device()?;
    c.lit(b",\"cat\":")?;
    let category = c.name()?;
    let span = c.opt_u64(b",\"span\":")?;
    c.lit(b",\"ts\":")?;
    let ts = c.u64()?;
    c.end()?;
    Some(Event::Memory(MemoryEvent {
        kind,
        storage,
        tensor,
        bytes,
        device,
        category,
        span,
        ts,
    }))
}

fn tensor(c: &mut Cur<'_>) -> Option<Event> {
    c.lit(b"tensor\",\"id\":")?;
    let id = c.u64()?;
    let label = if c.opt(b",\"label\":") {
        Some(c.str()?.to_string())
    } else {
        None
    };
    c.lit(b",\"shape\":")?;
    let shape = c.usize_list()?;
    c.lit(b",\"dtype\":")?;
    let dtype = c.str()?.to_string();
    let device = c.device()?;
    c.lit(b",\"grad\":")?;
    let requires_grad = if c.opt(b"true") {
        true
    } else {
        c.lit(b"false")?;
        false
    };
    c.lit(b",\"bytes\":")?;
    let bytes = c.u64()?;
    c.lit(b",\"cat\":")?;
    let category = c.name()?;
    let span = c.opt_u64(b",\"span\":")?;
    c.end()?;
    Some(Event::Tensor(TensorEvent {
        id,
        label,
        shape,
        dtype,
        device,
        requires_grad,
        bytes,
        category,
        span,
    }))
}

#[cfg(test)]
mod tests {
    use super::parse;

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
}
