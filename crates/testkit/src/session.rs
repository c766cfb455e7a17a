//! Small traces recorded by a real `TraceSession`, and hand-written traces for edge cases.

use std::sync::Arc;

use trace_record::schema::{
    AllocKind, Event, ExecStep, FrameEvent, GradientState, MemoryCategory, Phase, SamplerEvent,
    SamplesEvent, SpanKind, StackEvent,
};
use trace_record::{MemoryRecord, OpRecord, Run, TensorRecord, TraceSession};

/// Header line of a hand-written trace.
pub const HEADER: &str = r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"t","entrypoint":"test","phase":"train","device":"cpu","timing":"host","start_unix_ns":0,"pid":7}}"#;

/// Waits until `session`'s clock has passed `ns` (ns since the session's start).
///
/// For traces recorded by a real session with chosen times: a test gives a step's spans and
/// ops explicit starts and ends (`start_span_at`, `end_span_id_at`, `OpRecord::dur_ns`,
/// `record_memory_at`) from an instant it read, then waits here before the next boundary, so
/// that the step boundaries (stamped by the clock) come after everything the step holds.
/// The durations a test asserts on are then the chosen ones, whatever the machine's speed or
/// load; only the waiting here gets longer on a busy machine.
pub fn wait_past(session: &TraceSession, ns: u64) {
    loop {
        let now = session.now_ns();
        if now > ns {
            return;
        }
        std::thread::sleep(std::time::Duration::from_nanos(
            (ns - now + 1).min(1_000_000),
        ));
    }
}

/// A hand-written trace: the header then `lines`.
pub fn hand_trace(lines: &[&str]) -> Vec<u8> {
    let mut s = String::from(HEADER);
    s.push('\n');
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    s.into_bytes()
}

/// A hand trace of an op that became a span, as trace-candle records one whose closure ran
/// something nested: span 1 of kind `op` named `outer` (100..400 ns) holding a child span
/// `inner` (150..250) with a leaf op `mm` (160..200) in it, a leaf op `add` (300..340) in the
/// op's span itself, then the `outer` op line (recorded last, inside its span, with the
/// span's start and duration). `outer`'s self time is 300 − 100 (`inner`) − 40 (`add`) = 160.
/// A second span of kind `op` named `lone` (500..600) holds an op line `lone` that started
/// later (510): not its own op, drawn inside it.
pub fn op_span_trace() -> Vec<u8> {
    hand_trace(&[
        r#"{"type":"span_start","id":1,"name":"outer","kind":"op","thread":0,"ts":100}"#,
        r#"{"type":"span_start","id":2,"parent":1,"name":"inner","kind":"module","thread":0,"ts":150}"#,
        r#"{"type":"op","span":2,"name":"mm","dtype":"f32","ts":160,"dur":40}"#,
        r#"{"type":"span_end","id":2,"ts":250}"#,
        r#"{"type":"op","span":1,"name":"add","dtype":"f32","ts":300,"dur":40}"#,
        r#"{"type":"op","span":1,"name":"outer","shape":[2,3],"dtype":"f32","ts":100,"dur":300,"flops":12}"#,
        r#"{"type":"span_end","id":1,"ts":400}"#,
        r#"{"type":"span_start","id":3,"name":"lone","kind":"op","thread":0,"ts":500}"#,
        r#"{"type":"op","span":3,"name":"lone","dtype":"f32","ts":510,"dur":50}"#,
        r#"{"type":"span_end","id":3,"ts":600}"#,
    ])
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
///
/// # Panics
///
/// When the in-memory session fails to finish (it writes to memory, so it does not).
pub fn session_trace(steps: u64) -> Vec<u8> {
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

/// What [`generation_trace`] records around its loop.
#[derive(Debug, Clone, Copy)]
pub struct Generation<'a> {
    /// The run's entrypoint (in the header).
    pub entrypoint: &'a str,
    /// Iterations of the loop; each ends with `step()`.
    pub steps: u64,
    /// The op in each `norm#0` (each `linear` holds a `matmul`).
    pub norm_op: &'a str,
    /// An `embed` op outside every span before the first span of all.
    pub embed: bool,
    /// Step 0's `norm#0` carries one sampled stack: frames `main` (1) and `rms_norm` (2),
    /// stack 1, two samples on thread 7, and the sampler's line for step 0.
    pub sampled: bool,
}

/// A `frame` event of a sampled stack: function `func`, no file, not inlined.
pub fn frame_event(id: u64, func: &str) -> Event {
    Event::Frame(FrameEvent {
        id,
        func: func.into(),
        file: None,
        inlined: false,
    })
}

/// A generation loop recorded by a real `TraceSession`, as trace-candle's tracing layer names
/// spans (phase `infer`, device `cpu`): `steps` iterations of
/// `model#0 { layer#0 { linear#0, linear#1, norm#0 } }` with an op in each leaf, then a
/// top-level `argmax` op outside every span, then `step()`; the [`Generation`] options add
/// an `embed` op before it all and a sampled stack. Every op is `[1, 8]` `f32` on `cpu`,
/// tensor 1 in and 2 out, 32 bytes each way, its time from the session's one clock.
///
/// # Panics
///
/// When the in-memory session fails to finish (it writes to memory, so it does not).
pub fn generation_trace(g: &Generation<'_>) -> Vec<u8> {
    let (session, sink) = TraceSession::in_memory(Run::new(g.entrypoint, Phase::Infer, "cpu"));
    let op = |name: &str| {
        let start = session.now_ns();
        let dur = session.now_ns() - start;
        session.record_op(&OpRecord {
            name,
            inputs: &[1],
            outputs: &[2],
            shape: &[1, 8],
            dtype: "f32",
            device: "cpu",
            start_ns: start,
            dur_ns: dur,
            in_bytes: 32,
            out_bytes: 32,
            category: None,
            flops: None,
        });
    };
    let mut sampled_span = None;
    for step in 0..g.steps {
        if g.embed && step == 0 {
            op("embed");
        }
        {
            let _model = session.span("model#0", SpanKind::Module, None);
            let _layer = session.span("layer#0", SpanKind::Module, None);
            for name in ["linear#0", "linear#1", "norm#0"] {
                let leaf = session.span(name, SpanKind::Module, None);
                if name == "norm#0" {
                    if g.sampled && step == 0 {
                        sampled_span = leaf.id().map(|s| s.0);
                    }
                    op(g.norm_op);
                } else {
                    op("matmul");
                }
            }
        }
        op("argmax");
        session.step();
    }
    if g.sampled {
        session.record_sampled(&[
            frame_event(1, "main"),
            frame_event(2, "rms_norm"),
            Event::Stack(StackEvent {
                id: 1,
                frames: vec![1, 2],
            }),
            Event::Samples(SamplesEvent {
                step: 0,
                thread: 7,
                stack: 1,
                n: 2,
                phase: None,
                span: sampled_span,
            }),
            Event::Sampler(SamplerEvent {
                step: 0,
                hz: 1000,
                taken: 2,
                lost: 0,
                cpu_ns: Some(2_000_000),
                sampler_cpu_ns: None,
                ts: 0,
                dur: 2_000_000,
                source: None,
            }),
        ]);
    }
    session.finish().expect("finish");
    sink.bytes()
}
