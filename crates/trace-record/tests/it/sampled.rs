//! Schema version 2: sampled-stack events round-trip through the session.
//!
//! Also the reader and validation.

use trace_record::schema::Schedule;
use trace_record::schema::{
    Event, ExecStep, FrameEvent, Phase, SCHEMA_VERSION, SamplerEvent, SamplesEvent, SpanKind,
    StackEvent,
};
use trace_record::{IssueKind, ReadOptions, Run, TraceReader, TraceSession};

use crate::common::{issues, trace_text};

fn frame(id: u64, func: &str, inlined: bool) -> Event {
    Event::Frame(FrameEvent {
        id,
        func: func.into(),
        file: id.is_multiple_of(2).then(|| format!("src/{id}.rs")),
        inlined,
    })
}

fn samples(step: u64, stack: u64, n: u64, span: Option<u64>) -> Event {
    Event::Samples(SamplesEvent {
        step,
        thread: 99,
        stack,
        n,
        phase: Some(ExecStep::Backward),
        span,
    })
}

fn sampler(step: u64, taken: u64) -> Event {
    Event::Sampler(SamplerEvent {
        step,
        hz: 997,
        taken,
        lost: 2,
        cpu_ns: Some(5_000_000),
        sampler_cpu_ns: None,
        ts: 10,
        dur: 6_000_000,
        source: None,
    })
}

#[test]
fn version_2_round_trips_through_session_reader_and_validation() {
    let (session, sink) = TraceSession::in_memory(Run::new("it::sampled", Phase::Train, "cpu"));
    let span = {
        let g = session.span("backward", SpanKind::Function, Some(ExecStep::Backward));
        g.id().map(|s| s.0)
    };
    let events = vec![
        frame(1, "main", false),
        frame(
            2,
            "candle_core::backprop::<impl candle_core::tensor::Tensor>::backward",
            false,
        ),
        frame(3, "gemm::gemm \"quoted\" \\ name", true),
        Event::Stack(StackEvent {
            id: 1,
            frames: vec![1, 2, 3],
        }),
        samples(0, 1, 4, span),
        samples(0, 1, 3, None),
        sampler(0, 7),
    ];
    assert_eq!(session.record_sampled(&events), events.len());
    // Anything that is not a sampled-stack event is ignored.
    assert_eq!(
        session.record_sampled(&[Event::Step(trace_record::schema::StepEvent {
            index: 1,
            ts: 0
        })]),
        0
    );
    let summary = session.finish().unwrap();
    assert_eq!(
        (
            summary.counts.frame,
            summary.counts.stack,
            summary.counts.samples,
            summary.counts.sampler
        ),
        (3, 1, 2, 1)
    );
    // Nothing after finish.
    assert_eq!(session.record_sampled(&events), 0);
    let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    assert_eq!(trace.header.version, SCHEMA_VERSION);
    assert_eq!(SCHEMA_VERSION, 2);
    let read: Vec<Event> = trace
        .events
        .iter()
        .map(|e| e.event.clone())
        .filter(|e| !matches!(e, Event::SpanStart(_) | Event::SpanEnd(_)))
        .collect();
    assert_eq!(read, events);
    assert!(trace_record::validate(&trace).is_empty());
    // Strict mode knows the new types.
    let bytes = sink.bytes();
    let strict = TraceReader::new(&bytes[..], ReadOptions::strict()).unwrap();
    assert_eq!(
        trace_record::ParsedTrace::from_reader(strict)
            .unwrap()
            .skipped_unknown,
        0
    );
}

#[test]
fn sampled_lines_are_written_outside_an_active_window() {
    // A sampler accounts for a recorded step after it ended, when recording may be off.
    let run = Run::new("it::window", Phase::Train, "cpu").schedule(Schedule {
        skip_first: 0,
        wait: 0,
        warmup: 0,
        active: 1,
        repeat: 1,
    });
    let (session, sink) = TraceSession::in_memory(run);
    session.step();
    assert!(!session.is_active());
    let written = session.record_sampled(&[
        frame(1, "f", false),
        Event::Stack(StackEvent {
            id: 1,
            frames: vec![1],
        }),
        samples(0, 1, 1, None),
        sampler(0, 1),
    ]);
    assert_eq!(written, 4);
    session.finish().unwrap();
    let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    assert_eq!(trace.events.len(), 4);
}

#[test]
fn validation_checks_interned_ids_and_sample_sums() {
    let lines = [
        r#"{"type":"frame","id":1,"func":"a"}"#,
        r#"{"type":"frame","id":1,"func":"b"}"#,
        r#"{"type":"stack","id":1,"frames":[1,2]}"#,
        r#"{"type":"stack","id":1,"frames":[1]}"#,
        r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":2}"#,
        r#"{"type":"samples","step":0,"thread":1,"stack":5,"n":1,"span":77}"#,
        r#"{"type":"sampler","step":0,"hz":1000,"taken":4,"lost":0,"ts":0,"dur":1}"#,
        r#"{"type":"frame","id":2,"func":"late but defined"}"#,
    ];
    let text = trace_text(&lines);
    let trace = trace_record::read_trace_bytes(text.as_bytes()).unwrap();
    let found: Vec<(u64, IssueKind)> = issues(&trace)
        .into_iter()
        .map(|i| (i.line, i.kind))
        .collect();
    assert_eq!(
        found,
        vec![
            (
                3,
                IssueKind::DuplicateInterned {
                    what: "frame",
                    id: 1
                }
            ),
            (
                5,
                IssueKind::DuplicateInterned {
                    what: "stack",
                    id: 1
                }
            ),
            (7, IssueKind::UnknownSpan { id: 77 }),
            (
                7,
                IssueKind::UnknownInterned {
                    what: "stack",
                    id: 5
                }
            ),
            (
                8,
                IssueKind::SampleCountMismatch {
                    step: 0,
                    taken: 4,
                    counted: 3
                }
            ),
        ]
    );
    assert_eq!(
        found[4].1.to_string(),
        "step 0: the sampler took 4 samples but the samples lines count 3"
    );
}

#[test]
fn a_version_1_header_is_still_read() {
    let text = trace_text(&[r#"{"type":"step","index":1,"ts":5}"#]).replacen(
        "\"version\":2",
        "\"version\":1",
        1,
    );
    let trace = trace_record::read_trace_bytes(text.as_bytes()).unwrap();
    assert_eq!(trace.header.version, 1);
    assert_eq!(trace.events.len(), 1);
    // Version 0 is now two versions old.
    let old = text.replacen("\"version\":1", "\"version\":0", 1);
    assert!(matches!(
        trace_record::read_trace_bytes(old.as_bytes()),
        Err(trace_record::ReadError::UnsupportedVersion { found: 0, .. })
    ));
}

#[test]
fn validation_rejects_impossible_sampler_accounts_and_gradient_norms() {
    let lines = [
        r#"{"type":"frame","id":1,"func":"a"}"#,
        r#"{"type":"stack","id":1,"frames":[1]}"#,
        r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":10}"#,
        // 10 ms of CPU at 1 kHz: about 10 samples; 10 taken + 0 lost is fine.
        r#"{"type":"sampler","step":0,"hz":1000,"taken":10,"lost":0,"cpu_ns":10000000,"ts":0,"dur":1}"#,
        // A second account for step 0.
        r#"{"type":"sampler","step":0,"hz":1000,"taken":10,"lost":0,"cpu_ns":10000000,"ts":0,"dur":1}"#,
        // 5 lost of 10 ms at 1 kHz: within twice the rate plus 64.
        r#"{"type":"samples","step":1,"thread":1,"stack":1,"n":3}"#,
        r#"{"type":"sampler","step":1,"hz":1000,"taken":3,"lost":5,"cpu_ns":10000000,"ts":0,"dur":1}"#,
        // Far more lost than 10 ms of CPU at 1 kHz can give.
        r#"{"type":"samples","step":2,"thread":1,"stack":1,"n":3}"#,
        r#"{"type":"sampler","step":2,"hz":1000,"taken":3,"lost":1000000,"cpu_ns":10000000,"ts":0,"dur":1}"#,
        // taken + lost overflows.
        r#"{"type":"samples","step":3,"thread":1,"stack":1,"n":1}"#,
        r#"{"type":"sampler","step":3,"hz":1000,"taken":1,"lost":18446744073709551615,"ts":0,"dur":1}"#,
        // No CPU time: 1 ms of wall time on 4,096 CPUs bounds it (8,256 at 1 kHz).
        r#"{"type":"sampler","step":4,"hz":1000,"taken":0,"lost":9000,"ts":0,"dur":1000000}"#,
        r#"{"type":"gradient","param":"w","state":"present","norm":-3.0,"ts":1}"#,
        r#"{"type":"gradient","param":"b","state":"present","norm":0.0,"ts":1}"#,
    ];
    let text = trace_text(&lines);
    let trace = trace_record::read_trace_bytes(text.as_bytes()).unwrap();
    let found: Vec<(u64, String)> = issues(&trace)
        .into_iter()
        .map(|i| (i.line, i.kind.to_string()))
        .collect();
    assert_eq!(
        found,
        vec![
            (
                6,
                "step 0: a second sampler account (the first is at line 5)".to_string()
            ),
            (
                10,
                "step 2: 3 taken + 1000000 lost samples exceed the 84 the rate allows in the \
                 step's CPU time"
                    .to_string()
            ),
            (
                12,
                "step 3: 1 taken + 18446744073709551615 lost samples overflow a 64-bit count"
                    .to_string()
            ),
            (
                13,
                "step 4: 0 taken + 9000 lost samples exceed the 8256 the rate allows in the \
                 step's CPU time"
                    .to_string()
            ),
            (
                14,
                "gradient of w: norm -3 is impossible (a norm is finite and >= 0)".to_string()
            ),
        ]
    );
}
