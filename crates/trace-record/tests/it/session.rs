//! Session behaviour: span nesting, out-of-order guards, windows, trailers, one clock.

use std::sync::Arc;

use trace_record::schema::{
    AllocKind, Event, ExecStep, GradientState, MemoryCategory, Outcome, Schedule, SpanKind,
    TimingMode,
};
use trace_record::{
    IssueKind, MemoryRecord, OpRecord, SpanId, TensorRecord, TraceError, TraceSession,
    read_trace_bytes,
};

use crate::common::{issues, run};

fn op(name: &str, start_ns: u64) -> OpRecord<'_> {
    OpRecord {
        name,
        inputs: &[1, 2],
        outputs: &[3],
        shape: &[4, 8],
        dtype: "f32",
        device: "cpu",
        start_ns,
        dur_ns: 7,
        in_bytes: 256,
        out_bytes: 128,
        category: Some(MemoryCategory::Activation),
        flops: None,
    }
}

#[test]
fn session_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<TraceSession>();
    check::<Arc<TraceSession>>();
}

#[test]
fn spans_nest_and_records_attach_to_the_current_span() {
    let (session, sink) = TraceSession::in_memory(run().timing(TimingMode::DeviceSynchronized));
    assert_eq!(session.timing_mode(), TimingMode::DeviceSynchronized);
    assert_eq!(session.current_span(), None);
    let (outer_id, inner_id);
    {
        let outer = session.span("model", SpanKind::Module, Some(ExecStep::Forward));
        outer_id = outer.id().unwrap();
        assert_eq!(session.current_span(), Some(outer_id));
        {
            let inner = session.span("linear", SpanKind::Op, None);
            inner_id = inner.id().unwrap();
            assert_eq!(session.current_span(), Some(inner_id));
            let t = session.now_ns();
            session.record_op(&op("matmul", t));
            session.record_tensor(&TensorRecord {
                id: 3,
                label: Some("out"),
                shape: &[4, 8],
                dtype: "f32",
                device: "cuda:1",
                requires_grad: true,
                bytes: 128,
                category: MemoryCategory::Activation,
            });
            session.record_memory(&MemoryRecord {
                kind: AllocKind::Alloc,
                storage: 9,
                tensor: 3,
                bytes: 128,
                device: "cpu",
                category: MemoryCategory::Activation,
            });
            session.record_memory(&MemoryRecord {
                kind: AllocKind::Free,
                storage: 9,
                tensor: 3,
                bytes: 128,
                device: "cpu",
                category: MemoryCategory::Activation,
            });
        }
        session.record_marker("between");
        session.record_gradient("w", GradientState::Present, Some(0.5));
        session.record_gradient("b", GradientState::NonFinite, Some(f64::NAN));
        session.record_device_memory("cuda:0", Some(10), None, Some(30));
        session.record_counter("loss", f64::INFINITY);
    }
    assert_eq!(session.current_span(), None);
    let summary = session.finish().unwrap();
    assert_eq!(summary.outcome, Outcome::Complete);
    assert_eq!(summary.counts.span_start, 2);
    assert_eq!(summary.counts.op, 1);
    assert_eq!(summary.counts.memory, 2);
    assert_eq!(summary.counts.total(), 13);
    let bytes = sink.bytes();
    assert_eq!(summary.bytes, bytes.len() as u64);
    let trace = read_trace_bytes(&bytes).unwrap();
    assert!(!trace.incomplete);
    assert_eq!(trace.trailer.as_ref().unwrap().counts, summary.counts);
    assert!(issues(&trace).is_empty(), "{:?}", issues(&trace));
    let ev: Vec<&Event> = trace.events.iter().map(|e| &e.event).collect();
    let Event::SpanStart(s) = ev[0] else {
        panic!("{:?}", ev[0])
    };
    assert_eq!(
        (s.id, s.parent, s.step),
        (outer_id.0, None, Some(ExecStep::Forward))
    );
    let Event::SpanStart(s) = ev[1] else { panic!() };
    assert_eq!(
        (s.id, s.parent, s.kind),
        (inner_id.0, Some(outer_id.0), SpanKind::Op)
    );
    let Event::Op(o) = ev[2] else { panic!() };
    assert_eq!(
        (o.span, o.device.as_str(), o.flops),
        (Some(inner_id.0), "cpu", None)
    );
    let Event::Tensor(t) = ev[3] else { panic!() };
    assert_eq!(
        (t.device.as_str(), t.span, t.label.as_deref()),
        ("cuda:1", Some(inner_id.0), Some("out"))
    );
    let Event::SpanEnd(e) = ev[6] else { panic!() };
    assert_eq!(e.id, inner_id.0);
    let Event::Marker(m) = ev[7] else { panic!() };
    assert_eq!(m.span, Some(outer_id.0));
    let Event::Gradient(g) = ev[9] else { panic!() };
    assert_eq!((g.state, g.norm), (GradientState::NonFinite, None));
    let Event::DeviceMemory(d) = ev[10] else {
        panic!()
    };
    assert_eq!((d.used, d.free, d.reserved), (Some(10), None, Some(30)));
    let Event::Counter(c) = ev[11] else { panic!() };
    assert!(c.value.is_nan());
}

#[test]
fn dropping_a_parent_guard_first_closes_its_children_at_the_same_instant() {
    let (session, sink) = TraceSession::in_memory(run());
    let parent = session.span("parent", SpanKind::Function, None);
    let child = session.span("child", SpanKind::Function, None);
    let grandchild = session.span("grandchild", SpanKind::Function, None);
    drop(parent);
    assert_eq!(session.current_span(), None);
    drop(grandchild);
    drop(child);
    session.finish().unwrap();
    let trace = read_trace_bytes(&sink.bytes()).unwrap();
    assert!(issues(&trace).is_empty(), "{:?}", issues(&trace));
    let ends: Vec<(u64, u64)> = trace
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::SpanEnd(e) => Some((e.id, e.ts)),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 3);
    assert!(ends.windows(2).all(|w| w[0].1 == w[1].1));
    assert!(
        ends[0].0 > ends[1].0 && ends[1].0 > ends[2].0,
        "children first: {ends:?}"
    );
}

#[test]
fn two_sessions_on_one_thread_keep_separate_span_stacks() {
    let (a, sink_a) = TraceSession::in_memory(run());
    let (b, sink_b) = TraceSession::in_memory(run());
    let ga = a.span("a", SpanKind::Function, None);
    let gb = b.span("b", SpanKind::Function, None);
    assert_eq!(a.current_span(), ga.id());
    assert_eq!(b.current_span(), gb.id());
    drop(ga);
    assert_eq!(b.current_span(), gb.id());
    let inner = a.span("a2", SpanKind::Function, None);
    drop(gb);
    drop(inner);
    a.finish().unwrap();
    b.finish().unwrap();
    for sink in [sink_a, sink_b] {
        let trace = read_trace_bytes(&sink.bytes()).unwrap();
        assert!(issues(&trace).is_empty());
        let parents: Vec<Option<u64>> = trace
            .events
            .iter()
            .filter_map(|e| match &e.event {
                Event::SpanStart(s) => Some(s.parent),
                _ => None,
            })
            .collect();
        assert!(parents.iter().all(Option::is_none), "{parents:?}");
    }
}

#[test]
fn spans_across_window_boundaries_stay_valid() {
    // Steps: 0 recorded, 1 not, 2 recorded, then nothing.
    let s = Schedule {
        skip_first: 0,
        wait: 0,
        warmup: 0,
        active: 1,
        repeat: 1,
    };
    let alt = Schedule {
        skip_first: 0,
        wait: 1,
        warmup: 0,
        active: 1,
        repeat: 0,
    };
    for schedule in [s, alt] {
        let (session, sink) = TraceSession::in_memory(run().schedule(schedule));
        let outer = session.span("outer", SpanKind::Function, None);
        session.step();
        let unwritten = session.span("unwritten", SpanKind::Function, None);
        assert_eq!(unwritten.id().is_some(), session.is_active());
        session.step();
        let inner = session.span("inner", SpanKind::Function, None);
        session.record_op(&op("add", session.now_ns()));
        drop(inner);
        drop(unwritten);
        session.step();
        drop(outer);
        session.finish().unwrap();
        let trace = read_trace_bytes(&sink.bytes()).unwrap();
        assert!(
            issues(&trace).is_empty(),
            "{schedule:?} {:?}",
            issues(&trace)
        );
    }
}

#[test]
fn drop_without_finish_writes_an_incomplete_trailer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    {
        let session = TraceSession::open(&path, run()).unwrap();
        assert_eq!(session.path(), Some(path.as_path()));
        let _g = session.span("left open", SpanKind::Function, None);
        session.record_marker("m");
        std::mem::forget(_g); // the guard never ends: the span stays open
    }
    let trace = trace_record::read_trace(&path).unwrap();
    let trailer = trace.trailer.clone().unwrap();
    assert_eq!(trailer.outcome, Outcome::Incomplete);
    assert_eq!(trailer.counts.marker, 1);
    assert!(trace.incomplete);
    let found = issues(&trace);
    assert_eq!(found.len(), 1);
    assert!(matches!(found[0].kind, IssueKind::SpanLeftOpen { .. }));
}

#[test]
fn finish_twice_and_records_after_finish() {
    let (session, sink) = TraceSession::in_memory(run());
    session.finish().unwrap();
    assert!(!session.is_active());
    session.record_marker("late");
    assert_eq!(session.step(), 1);
    assert!(matches!(session.finish(), Err(TraceError::AlreadyFinished)));
    assert!(matches!(
        session.fail("x"),
        Err(TraceError::AlreadyFinished)
    ));
    let trace = read_trace_bytes(&sink.bytes()).unwrap();
    assert!(trace.events.is_empty());
    assert_eq!(trace.trailer.unwrap().outcome, Outcome::Complete);
}

#[test]
fn fail_records_the_reason() {
    let (session, sink) = TraceSession::in_memory(run());
    let summary = session.fail("loss became NaN").unwrap();
    assert_eq!(
        summary.outcome,
        Outcome::Failed {
            reason: "loss became NaN".into()
        }
    );
    let trace = read_trace_bytes(&sink.bytes()).unwrap();
    assert_eq!(trace.trailer.unwrap().outcome, summary.outcome);
    assert!(!trace.incomplete);
}

#[test]
fn header_carries_the_run_metadata() {
    let (session, sink) = TraceSession::in_memory(
        run()
            .run_id("abc")
            .rank(1, 4)
            .tag("model", "mlp")
            .version("candle-core", "0.11.1"),
    );
    assert_eq!(session.device(), "cpu");
    session.finish().unwrap();
    let h = read_trace_bytes(&sink.bytes()).unwrap().header;
    assert_eq!(h.version, trace_record::schema::SCHEMA_VERSION);
    assert_eq!(h.run.run_id, "abc");
    assert_eq!((h.run.rank, h.run.world_size), (Some(1), Some(4)));
    assert_eq!(h.run.pid, std::process::id());
    assert!(h.run.start_unix_ns > 1_600_000_000_000_000_000);
    assert_eq!(h.run.tags["model"], "mlp");
    assert_eq!(h.run.versions["candle-core"], "0.11.1");
    assert_eq!(h.run.versions["trace-record"], env!("CARGO_PKG_VERSION"));
}

/// 10,000 tight sessions, each with nested spans opened and closed as fast as possible:
/// one clock read per instant means not one violation.
#[test]
fn ten_thousand_tight_sessions_validate() {
    let mut violations = Vec::new();
    for i in 0..10_000u32 {
        let (session, sink) = TraceSession::in_memory(run());
        {
            let _a = session.span("a", SpanKind::Function, None);
            {
                let _b = session.span("b", SpanKind::Module, None);
                let _c = session.span("c", SpanKind::Op, None);
                session.record_op(&op("x", session.now_ns()));
            }
            let _d = session.span("d", SpanKind::Op, None);
        }
        session.finish().unwrap();
        let trace = read_trace_bytes(&sink.bytes()).unwrap();
        let found = issues(&trace);
        if !found.is_empty() {
            violations.push((i, found));
        }
    }
    assert!(
        violations.is_empty(),
        "{} sessions with violations: {:?}",
        violations.len(),
        &violations[..1]
    );
}

#[test]
fn span_ids_are_unique_per_session() {
    let (session, _sink) = TraceSession::in_memory(run());
    let a = session.span("a", SpanKind::Function, None).id();
    let b = session.span("b", SpanKind::Function, None).id();
    assert_ne!(a, b);
    assert!(a.zip(b).is_some_and(|(a, b): (SpanId, SpanId)| a.0 < b.0));
}

#[test]
fn a_numbered_span_is_named_name_hash_index() {
    let (session, sink) = TraceSession::in_memory(run());
    {
        let a = session.span_numbered_by("linear", SpanKind::Module, None, |parent| {
            assert_eq!(parent, None, "at the root");
            Some(3)
        });
        let outer = a.id();
        let _b = session.span_numbered_by("quote \" in", SpanKind::Module, None, |parent| {
            assert_eq!(parent, outer, "its parent is the span open on this thread");
            Some(0)
        });
        let _c = session.span_numbered_by("plain", SpanKind::Module, None, |_| None);
    }
    session.finish().unwrap();
    let trace = read_trace_bytes(&sink.bytes()).unwrap();
    let names: Vec<&str> = trace
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::SpanStart(s) => Some(s.name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(names, ["linear#3", "quote \" in#0", "plain"]);
}
