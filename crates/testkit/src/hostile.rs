//! Hostile traces: deep nesting, never-ended spans, structured ids, sums that overflow u64.
//!
//! The inputs of the linear-time tests, the hostile benches and `cargo xtask fuzz`.

use std::fmt::Write as _;
use std::io;

use crate::session::HEADER;

/// The trailer of a complete trace with no counts checked (all zero: readers accept it).
const TRAILER: &str = r#"{"type":"trailer","outcome":"complete","counts":{"span_start":0,"span_end":0,"op":0,"tensor":0,"memory":0,"device_memory":0,"gradient":0,"step":0,"marker":0,"counter":0},"dropped":0,"ts":0}"#;

fn start() -> String {
    let mut s = String::with_capacity(1 << 16);
    s.push_str(HEADER);
    s.push('\n');
    s
}

/// `depth` spans nested in one another on one thread in one step (span `i + 1` is the child
/// of span `i`), an op in the innermost, then every span ends, innermost first; complete.
pub fn deep_nesting(depth: u64) -> Vec<u8> {
    let mut s = start();
    s.push_str("{\"type\":\"step\",\"index\":0,\"ts\":0}\n");
    for i in 1..=depth {
        let _ = write!(s, "{{\"type\":\"span_start\",\"id\":{i},");
        if i > 1 {
            let _ = write!(s, "\"parent\":{},", i - 1);
        }
        let _ = writeln!(
            s,
            "\"name\":\"layer{}\",\"kind\":\"module\",\"thread\":1,\"ts\":{i}}}",
            i % 7
        );
    }
    let t = depth + 1;
    let _ = writeln!(
        s,
        "{{\"type\":\"op\",\"span\":{depth},\"name\":\"matmul\",\"in\":[1],\"out\":[2],\"shape\":[2,2],\"dtype\":\"f32\",\"ts\":{t},\"dur\":5,\"in_b\":16,\"out_b\":16}}"
    );
    for i in (1..=depth).rev() {
        let _ = writeln!(
            s,
            "{{\"type\":\"span_end\",\"id\":{i},\"ts\":{}}}",
            t + 10 + (depth - i)
        );
    }
    s.push_str(TRAILER);
    s.push('\n');
    s.into_bytes()
}

/// `n` root spans (no parent) on one thread that never end, one op in each; no trailer.
pub fn unended_roots(n: u64) -> Vec<u8> {
    let mut s = start();
    for i in 1..=n {
        let ts = i * 10;
        let _ = writeln!(
            s,
            "{{\"type\":\"span_start\",\"id\":{i},\"name\":\"root{}\",\"kind\":\"function\",\"thread\":1,\"ts\":{ts}}}",
            i % 3
        );
        let _ = writeln!(
            s,
            "{{\"type\":\"op\",\"span\":{i},\"name\":\"add\",\"in\":[1],\"out\":[2],\"shape\":[2],\"dtype\":\"f32\",\"ts\":{},\"dur\":2,\"in_b\":8,\"out_b\":8}}",
            ts + 1
        );
    }
    s.into_bytes()
}

/// `n` allocations of 64 bytes then their frees, storage ids `i << 40` when `structured`
/// (the ids a hand-written multiplicative hash puts in one bucket) or `1..=n`; complete.
pub fn allocations(n: u64, structured: bool) -> Vec<u8> {
    let id = |i: u64| if structured { i << 40 } else { i };
    let mut s = start();
    s.push_str("{\"type\":\"step\",\"index\":0,\"ts\":0}\n");
    for i in 1..=n {
        let _ = writeln!(
            s,
            "{{\"type\":\"memory\",\"action\":\"alloc\",\"storage\":{},\"tensor\":{i},\"bytes\":64,\"cat\":\"activation\",\"ts\":{i}}}",
            id(i)
        );
    }
    for i in 1..=n {
        let _ = writeln!(
            s,
            "{{\"type\":\"memory\",\"action\":\"free\",\"storage\":{},\"tensor\":{i},\"bytes\":64,\"cat\":\"activation\",\"ts\":{}}}",
            id(i),
            n + i
        );
    }
    s.push_str(TRAILER);
    s.push('\n');
    s.into_bytes()
}

/// Sums that overflow u64: allocations of 2^63, 2^63 and 100 bytes live together, two ops
/// of about 2^64 ns, and steps of about 2^64 ns each (from ts 1 to u64::MAX, then from 5 to
/// u64::MAX again); complete.
pub fn overflowing_sums() -> Vec<u8> {
    let half = 1u64 << 63;
    let mut s = start();
    s.push_str("{\"type\":\"step\",\"index\":0,\"ts\":1}\n");
    for (i, bytes) in [half, half, 100].into_iter().enumerate() {
        let _ = writeln!(
            s,
            "{{\"type\":\"memory\",\"action\":\"alloc\",\"storage\":{},\"tensor\":{},\"bytes\":{bytes},\"cat\":\"activation\",\"ts\":{}}}",
            i + 1,
            i + 1,
            i + 2
        );
    }
    let _ = writeln!(
        s,
        "{{\"type\":\"op\",\"name\":\"huge\",\"in\":[1],\"out\":[2],\"shape\":[2],\"dtype\":\"f32\",\"ts\":5,\"dur\":{},\"in_b\":{half},\"out_b\":{half}}}",
        u64::MAX - 10
    );
    let _ = writeln!(
        s,
        "{{\"type\":\"op\",\"name\":\"huge\",\"in\":[1],\"out\":[2],\"shape\":[2],\"dtype\":\"f32\",\"ts\":6,\"dur\":{},\"in_b\":{half},\"out_b\":{half}}}",
        u64::MAX - 10
    );
    // Steps of about 2^64 ns each (the clock going back between them): their sum overflows.
    let _ = writeln!(s, "{{\"type\":\"step\",\"index\":1,\"ts\":{}}}", u64::MAX);
    s.push_str("{\"type\":\"step\",\"index\":2,\"ts\":5}\n");
    let _ = writeln!(s, "{{\"type\":\"step\",\"index\":3,\"ts\":{}}}", u64::MAX);
    s.push_str(TRAILER);
    s.push('\n');
    s.into_bytes()
}

/// `n` spans on one thread, each the child of the one before, never closed; no step, no
/// trailer. Ids and times are `1_000_000 + k`, names `d0`..`d4`, so every line but the first
/// is 104 bytes (the first one's parent, 999999, is no span of the trace). Written after
/// [`HEADER`] to `w` line by line: a memory test writes a million of them to a file without
/// holding the trace.
///
/// # Errors
///
/// When writing to `w` fails.
pub fn write_nested_open_spans<W: io::Write>(w: &mut W, n: u64) -> io::Result<()> {
    /// A fixed offset that gives every id and time the same number of digits (7).
    const BASE: u64 = 1_000_000;
    writeln!(w, "{HEADER}")?;
    for k in 0..n {
        let i = BASE + k;
        writeln!(
            w,
            r#"{{"type":"span_start","id":{i},"parent":{},"name":"d{}","kind":"module","thread":1,"ts":{i}}}"#,
            i - 1,
            k % 5
        )?;
    }
    Ok(())
}
