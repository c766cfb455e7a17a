//! Shared helpers: traces recorded with a real `TraceSession`, and structural checks of a Chrome export.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use trace_analyze::export::{ChromeOptions, ChromeSummary, write_chrome};
use trace_record::schema::{AllocKind, ExecStep, GradientState, MemoryCategory, Phase, SpanKind};
use trace_record::{
    MemoryRecord, OpRecord, ReadOptions, Run, TensorRecord, TraceReader, TraceSession,
};

/// Header line of a hand-written trace.
pub(crate) const HEADER: &str = r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"t","entrypoint":"test","phase":"train","device":"cpu","timing":"host","start_unix_ns":0,"pid":7}}"#;

/// A hand-written trace: the header then `lines`.
pub(crate) fn hand_trace(lines: &[&str]) -> Vec<u8> {
    let mut s = String::from(HEADER);
    s.push('\n');
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    s.into_bytes()
}

fn op(session: &TraceSession, name: &str, inputs: &[u64], out: u64, cat: MemoryCategory) {
    let start = session.now_ns();
    // A little real work so durations are not all zero.
    let mut acc = 0u64;
    for i in 0..200u64 {
        acc = acc.wrapping_mul(31).wrapping_add(i);
    }
    std::hint::black_box(acc);
    let dur = session.now_ns().saturating_sub(start).max(1);
    let shape = [8usize, 16];
    session.record_tensor(&TensorRecord {
        id: out,
        label: None,
        shape: &shape,
        dtype: "f32",
        device: "cpu",
        requires_grad: false,
        bytes: 512,
        category: cat,
    });
    session.record_op(&OpRecord {
        name,
        inputs,
        outputs: &[out],
        shape: &shape,
        dtype: "f32",
        device: "cpu",
        start_ns: start,
        dur_ns: dur,
        in_bytes: 512 * inputs.len() as u64,
        out_bytes: 512,
        category: Some(cat),
        flops: Some(2048),
    });
    session.record_memory(&MemoryRecord {
        kind: AllocKind::Alloc,
        storage: out,
        tensor: out,
        bytes: 512,
        device: "cpu",
        category: cat,
    });
}

fn free(session: &TraceSession, id: u64, cat: MemoryCategory) {
    session.record_memory(&MemoryRecord {
        kind: AllocKind::Free,
        storage: id,
        tensor: id,
        bytes: 512,
        device: "cpu",
        category: cat,
    });
}

/// A trace recorded by a real `TraceSession`: `steps` training steps (forward with nested
/// module spans, backward, optimizer), ops with memory, a parameter, markers, counters,
/// gradient facts, a device memory sample, and a second thread with its own spans and ops.
pub(crate) fn session_trace(steps: u64) -> Vec<u8> {
    let run = Run::new("export-test", Phase::Train, "cpu");
    let (session, sink) = TraceSession::in_memory(run);
    let session = Arc::new(session);
    session.record_tensor(&TensorRecord {
        id: 1,
        label: Some("w"),
        shape: &[16, 16],
        dtype: "f32",
        device: "cpu",
        requires_grad: true,
        bytes: 1024,
        category: MemoryCategory::Parameter,
    });
    session.record_memory(&MemoryRecord {
        kind: AllocKind::Alloc,
        storage: 1,
        tensor: 1,
        bytes: 1024,
        device: "cpu",
        category: MemoryCategory::Parameter,
    });
    let mut next = 100u64;
    for _ in 0..steps {
        session.step();
        let _step = session.span("train_step", SpanKind::Function, None);
        {
            let _fwd = session.span("forward", SpanKind::Function, Some(ExecStep::Forward));
            for layer in 0..2 {
                let name = if layer == 0 { "model/l0" } else { "model/l1" };
                let _m = session.span(name, SpanKind::Module, Some(ExecStep::Forward));
                op(&session, "matmul", &[1], next, MemoryCategory::Activation);
                op(
                    &session,
                    "relu",
                    &[next],
                    next + 1,
                    MemoryCategory::Activation,
                );
                next += 2;
            }
            session.record_marker("forward done");
        }
        {
            let _bwd = session.span("backward", SpanKind::Function, Some(ExecStep::Backward));
            op(
                &session,
                "matmul_grad",
                &[next - 1],
                next,
                MemoryCategory::Gradient,
            );
            next += 1;
            session.record_gradient("w", GradientState::Present, Some(0.5));
        }
        {
            let _opt = session.span("optimizer", SpanKind::Function, Some(ExecStep::Optimizer));
            op(
                &session,
                "adamw",
                &[1, next - 1],
                next,
                MemoryCategory::Temporary,
            );
            free(&session, next, MemoryCategory::Temporary);
            next += 1;
        }
        // Free the step's activations and gradient.
        for id in (next - 6)..(next - 1) {
            let cat = if id == next - 2 {
                MemoryCategory::Gradient
            } else {
                MemoryCategory::Activation
            };
            free(&session, id, cat);
        }
        session.record_counter("loss", 1.0 / (next as f64));
        session.record_device_memory("cpu", Some(1 << 20), None, Some(2 << 20));
        // A worker thread with its own span and ops, concurrent with nothing on thread 1.
        let s2 = Arc::clone(&session);
        let base = next;
        std::thread::scope(|scope| {
            scope.spawn(move || {
                let _w = s2.span("loader", SpanKind::Function, None);
                op(&s2, "decode", &[], base, MemoryCategory::Input);
                free(&s2, base, MemoryCategory::Input);
            });
        });
        next += 1;
    }
    let summary = session.finish();
    assert!(summary.is_ok(), "{summary:?}");
    sink.bytes()
}

/// Exports `trace` as Chrome JSON and parses it back.
pub(crate) fn chrome(trace: &[u8], step: Option<u64>) -> (Value, ChromeSummary) {
    let mut reader = TraceReader::new(trace, ReadOptions::default()).expect("header");
    let mut out = Vec::new();
    let summary = write_chrome(&mut reader, &mut out, &ChromeOptions { step }).expect("export");
    let v: Value = serde_json::from_slice(&out).expect("the export is valid JSON");
    (v, summary)
}

/// `ts` or `dur` (µs with three decimals) as integer ns.
pub(crate) fn ns(v: &Value) -> u64 {
    let x = v.as_f64().expect("a number");
    assert!(x >= 0.0, "negative time {x}");
    (x * 1000.0).round() as u64
}

/// One complete event.
#[derive(Debug, Clone)]
pub(crate) struct XEvent {
    pub(crate) name: String,
    pub(crate) cat: String,
    pub(crate) tid: u64,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) args: Value,
}

/// Checks every event's required fields, that complete events nest per (pid, tid), and that
/// counters are never negative. Returns the complete events.
pub(crate) fn check_structure(v: &Value) -> Vec<XEvent> {
    assert_eq!(v["displayTimeUnit"], "ns");
    let events = v["traceEvents"].as_array().expect("traceEvents array");
    assert!(!events.is_empty());
    let mut xs = Vec::new();
    for e in events {
        let ph = e["ph"].as_str().expect("ph");
        assert!(e["name"].is_string(), "name: {e}");
        assert!(e["pid"].is_u64(), "pid: {e}");
        assert!(e["tid"].is_u64(), "tid: {e}");
        match ph {
            "X" => {
                let start = ns(&e["ts"]);
                let dur = ns(&e["dur"]);
                xs.push(XEvent {
                    name: e["name"].as_str().unwrap_or_default().to_string(),
                    cat: e["cat"].as_str().expect("cat").to_string(),
                    tid: e["tid"].as_u64().unwrap_or_default(),
                    start,
                    end: start + dur,
                    args: e["args"].clone(),
                });
            }
            "C" => {
                ns(&e["ts"]);
                let args = e["args"].as_object().expect("counter args");
                assert!(!args.is_empty(), "empty counter: {e}");
                for (k, val) in args {
                    let x = val.as_f64().unwrap_or(f64::NAN);
                    assert!(x.is_finite(), "counter {k} not a number: {e}");
                    if e["name"].as_str().is_some_and(|n| n.contains("memory")) {
                        assert!(x >= 0.0, "negative memory counter: {e}");
                    }
                }
            }
            "i" => {
                ns(&e["ts"]);
                assert!(matches!(e["s"].as_str(), Some("g" | "p" | "t")), "{e}");
            }
            "M" => assert!(e["args"]["name"].is_string() || e["args"]["sort_index"].is_u64()),
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    check_nesting(&xs);
    xs
}

/// Complete events on one thread must nest: sorted by start (longer first), each event lies
/// within the innermost enclosing one that has not ended.
pub(crate) fn check_nesting(xs: &[XEvent]) {
    let mut by_tid: HashMap<u64, Vec<&XEvent>> = HashMap::new();
    for x in xs {
        by_tid.entry(x.tid).or_default().push(x);
    }
    for (tid, mut list) in by_tid {
        list.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
        let mut stack: Vec<&XEvent> = Vec::new();
        for x in list {
            assert!(x.end >= x.start);
            // Anything that ended by x's start is not an ancestor of x (a zero-length event at
            // a boundary is inside either way).
            while stack.last().is_some_and(|top| top.end <= x.start) {
                stack.pop();
            }
            if let Some(top) = stack.last() {
                assert!(
                    x.start >= top.start && x.end <= top.end,
                    "thread {tid}: {} [{}, {}] sticks out of {} [{}, {}]",
                    x.name,
                    x.start,
                    x.end,
                    top.name,
                    top.start,
                    top.end
                );
            }
            stack.push(x);
        }
    }
}
