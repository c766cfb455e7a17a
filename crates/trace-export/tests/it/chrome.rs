//! Chrome trace export: structure, adjustments, step filter, escaping, streaming, errors.

use std::io::Write;

use proptest::prelude::*;
use trace_export::{ChromeOptions, ExportError, write_chrome};
use trace_record::schema::{Phase, SpanKind};
use trace_record::{OpRecord, ReadOptions, Run, TraceReader, TraceSession};

use crate::common::{check_nesting, check_structure, chrome};
use testkit::{SynthConfig, XEvent, hand_trace, write_synthetic};

#[test]
fn a_synthetic_trace_exports_every_op_and_span() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 2000,
            ops_per_step: 100,
            ..Default::default()
        },
    )
    .expect("synthetic");
    let (v, summary) = chrome(&bytes, None);
    let xs = check_structure(&v);
    assert_eq!(summary.ops, 2000);
    assert_eq!(summary.spans, 20 * 4);
    assert_eq!(summary.adjustments.total(), 0);
    assert_eq!(xs.iter().filter(|x| x.cat == "op").count(), 2000);
    assert_eq!(
        summary.events_written as usize,
        v["traceEvents"].as_array().map_or(0, Vec::len)
    );
}

/// Each problem of host clocks gets the documented local fix, and is counted once.
#[test]
fn overlapping_times_are_adjusted_counted_and_then_nest() {
    let bytes = hand_trace(&[
        r#"{"type":"span_start","id":1,"name":"root","kind":"function","thread":0,"ts":100}"#,
        // Starts before its parent: moved to 100.
        r#"{"type":"span_start","id":2,"parent":1,"name":"child","kind":"module","thread":0,"ts":90}"#,
        // Starts before its span: moved to 100.
        r#"{"type":"op","span":2,"name":"early","dtype":"f32","ts":95,"dur":10}"#,
        // Recorded in the outer span while the inner one is open; overlaps `early`: moved.
        r#"{"type":"op","span":1,"name":"misplaced","dtype":"f32","ts":101,"dur":1}"#,
        // Ends after its span: cut at 150.
        r#"{"type":"op","span":2,"name":"late","dtype":"f32","ts":110,"dur":100}"#,
        r#"{"type":"span_end","id":2,"ts":150}"#,
        // Its span is unknown: drawn on the outside track.
        r#"{"type":"op","span":99,"name":"orphan","dtype":"f32","ts":120,"dur":5}"#,
        // Starts before its previous sibling ended: moved to 150.
        r#"{"type":"span_start","id":3,"parent":1,"name":"sibling","kind":"function","thread":0,"ts":140}"#,
        // The parent ends while `sibling` is open (closing it) and before `sibling` started.
        r#"{"type":"span_end","id":1,"ts":145}"#,
        r#"{"type":"span_end","id":42,"ts":200}"#,
        r#"{"type":"span_start","id":4,"name":"never closed","kind":"function","thread":1,"ts":300}"#,
        r#"{"type":"span_start","id":5,"name":"dup","kind":"function","thread":0,"ts":400}"#,
        r#"{"type":"span_start","id":5,"name":"dup again","kind":"function","thread":0,"ts":401}"#,
        r#"{"type":"span_end","id":5,"ts":410}"#,
    ]);
    let (v, summary) = chrome(&bytes, None);
    let xs = check_structure(&v);
    let a = summary.adjustments;
    assert_eq!(a.starts_clamped, 4, "{a:?}");
    assert_eq!(a.op_ends_clamped, 1, "{a:?}");
    assert_eq!(a.span_ends_extended, 1, "{a:?}");
    assert_eq!(a.spans_closed_by_parent, 1, "{a:?}");
    assert_eq!(a.spans_left_open, 1, "{a:?}");
    assert_eq!(a.ops_moved_to_innermost_span, 1, "{a:?}");
    assert_eq!(a.ops_outside_spans, 1, "{a:?}");
    assert_eq!(a.duplicate_span_starts, 1, "{a:?}");
    assert_eq!(a.unknown_span_ends, 1, "{a:?}");
    assert_eq!(a.total(), 12);
    assert_eq!(
        v["otherData"]["summary"]["adjustments"]["op_ends_clamped"],
        1
    );

    let get = |name: &str| {
        xs.iter()
            .find(|x| x.name == name)
            .map(|x| (x.tid, x.start, x.end))
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert_eq!(get("root"), (0, 100, 150));
    assert_eq!(get("child"), (0, 100, 150));
    assert_eq!(get("early"), (0, 100, 105));
    assert_eq!(get("misplaced"), (0, 105, 105));
    assert_eq!(get("late"), (0, 110, 150));
    assert_eq!(get("sibling"), (0, 150, 150));
    assert_eq!(get("orphan").0, trace_export::OUTSIDE_SPANS_TID);
    assert_eq!(get("never closed"), (1, 300, 410));
    assert_eq!(get("dup"), (0, 400, 410));
    assert!(xs.iter().all(|x| x.name != "dup again"));
    // The cut op says what was recorded.
    let late = xs.iter().find(|x| x.name == "late").expect("late");
    assert_eq!(late.args["recorded_dur_ns"], 100);
}

#[test]
fn memory_counters_never_go_negative() {
    let bytes = hand_trace(&[
        r#"{"type":"memory","action":"free","storage":5,"tensor":5,"bytes":64,"cat":"activation","ts":1}"#,
        r#"{"type":"memory","action":"alloc","storage":6,"tensor":6,"bytes":100,"cat":"activation","ts":2}"#,
        r#"{"type":"memory","action":"alloc","storage":6,"tensor":6,"bytes":40,"cat":"gradient","ts":3}"#,
        r#"{"type":"memory","action":"alloc","storage":7,"tensor":7,"bytes":10,"dev":"cuda:0","cat":"parameter","ts":4}"#,
        r#"{"type":"memory","action":"free","storage":6,"tensor":6,"bytes":99,"cat":"gradient","ts":5}"#,
        r#"{"type":"device_memory","dev":"cuda:0","used":1000,"reserved":2000,"ts":6}"#,
    ]);
    let (v, summary) = chrome(&bytes, None);
    check_structure(&v);
    assert_eq!(summary.memory.frees_without_alloc, 1);
    assert_eq!(summary.memory.duplicate_allocs, 1);
    assert_eq!(summary.memory.free_size_mismatches, 1);
    let counters: Vec<(String, u64, serde_json::Value)> = v["traceEvents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["ph"] == "C")
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_string(),
                crate::common::ns(&e["ts"]),
                e["args"].clone(),
            )
        })
        .collect();
    let cpu: Vec<&serde_json::Value> = counters
        .iter()
        .filter(|c| c.0 == "logical memory cpu")
        .map(|c| &c.2)
        .collect();
    assert_eq!(
        cpu,
        vec![
            &serde_json::json!({"activation": 100}),
            &serde_json::json!({"activation": 0, "gradient": 40}),
            &serde_json::json!({"activation": 0, "gradient": 0}),
        ]
    );
    assert!(counters.iter().any(|c| c.0 == "logical memory cuda:0"));
    // Physical samples are separate counters, never added to the logical ones.
    assert!(
        counters
            .iter()
            .any(|c| c.0 == "physical memory used cuda:0" && c.2["used"] == 1000)
    );
    assert!(
        !counters
            .iter()
            .any(|c| c.0.contains("physical") && c.2.get("parameter").is_some())
    );
}

#[test]
fn one_step_only() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 40,
            ops_per_step: 8,
            ..Default::default()
        },
    )
    .expect("synthetic");
    let (v, summary) = chrome(&bytes, Some(2));
    let xs = check_structure(&v);
    assert!(summary.step_found);
    assert_eq!(summary.ops, 8);
    assert_eq!(summary.spans, 4);
    let ops: Vec<&XEvent> = xs.iter().filter(|x| x.cat == "op").collect();
    assert_eq!(ops.len(), 8);
    assert!(ops.iter().all(|x| x.args["step"] == 2));
    assert_eq!(xs.iter().filter(|x| x.cat == "step").count(), 1);
    assert_eq!(v["otherData"]["step"], 2);

    let mut reader = TraceReader::new(&bytes[..], ReadOptions::default()).expect("header");
    let err = write_chrome(
        &mut reader,
        std::io::sink(),
        &ChromeOptions { step: Some(9) },
    );
    assert!(matches!(err, Err(ExportError::StepNotFound(9))), "{err:?}");
}

#[test]
fn odd_names_stay_valid_json_and_round_trip() {
    let names = [
        "quote \" and back\\slash",
        "new\nline\ttab\r",
        "control \u{1} \u{1f}",
        "ünïcödé ✓ 漢字 🚀",
        "</script><script>alert(1)</script>",
    ];
    let (session, sink) = TraceSession::in_memory(Run::new("odd", Phase::Infer, "cpu"));
    for name in names {
        let _s = session.span(name, SpanKind::Function, None);
        let t = session.now_ns();
        session.record_op(&OpRecord {
            name,
            inputs: &[],
            outputs: &[],
            shape: &[1],
            dtype: "f32",
            device: "cpu",
            start_ns: t,
            dur_ns: 0,
            in_bytes: 0,
            out_bytes: 4,
            category: None,
            flops: None,
        });
    }
    session.finish().expect("finish");
    let (v, _) = chrome(&sink.bytes(), None);
    let xs = check_structure(&v);
    for name in names {
        assert_eq!(
            xs.iter().filter(|x| x.name == name).count(),
            2,
            "{name:?} (span and op)"
        );
    }
}

#[test]
fn a_truncated_trace_exports_what_it_has_and_says_so() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 30,
            ops_per_step: 10,
            truncate: true,
            ..Default::default()
        },
    )
    .expect("synthetic");
    bytes.extend_from_slice(br#"{"type":"op","span":1,"na"#);
    let (v, summary) = chrome(&bytes, None);
    check_structure(&v);
    assert_eq!(summary.ops, 30);
    assert_eq!(v["otherData"]["incomplete"], true);
    assert!(v["otherData"]["partial_last_line"].is_u64());
}

/// A writer that fails the test if the exporter hands it the whole output at once.
struct Chunks {
    writes: u64,
    largest: usize,
    total: usize,
}

impl Write for Chunks {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writes += 1;
        self.largest = self.largest.max(buf.len());
        self.total += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_export_streams_event_by_event() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 5000,
            ops_per_step: 500,
            ..Default::default()
        },
    )
    .expect("synthetic");
    let mut reader = TraceReader::new(&bytes[..], ReadOptions::default()).expect("header");
    let mut out = Chunks {
        writes: 0,
        largest: 0,
        total: 0,
    };
    let summary = write_chrome(&mut reader, &mut out, &ChromeOptions::default()).expect("export");
    assert!(
        out.writes >= summary.events_written,
        "{} writes",
        out.writes
    );
    assert!(out.largest < 4096, "largest write {} B", out.largest);
    assert!(out.total > 500_000);
}

/// A random thread of nested spans and ops with jittered (possibly inconsistent) times.
pub(crate) fn random_trace(items: &[(u8, u16, u16)]) -> Vec<u8> {
    let mut lines = Vec::new();
    let mut open: Vec<u64> = Vec::new();
    let mut next = 1u64;
    let mut ts = 1000i64;
    for &(kind, jitter, dur) in items {
        ts += 10;
        let t = (ts + i64::from(jitter % 64) - 32).max(0);
        let thread = u64::from(kind / 128);
        match kind % 4 {
            0 => {
                let parent = open
                    .last()
                    .map_or(String::new(), |p| format!(",\"parent\":{p}"));
                lines.push(format!(
                    r#"{{"type":"span_start","id":{next}{parent},"name":"s{}","kind":"function","thread":{thread},"ts":{t}}}"#,
                    next % 3
                ));
                open.push(next);
                next += 1;
            }
            1 => {
                if let Some(id) = open.pop() {
                    lines.push(format!(r#"{{"type":"span_end","id":{id},"ts":{t}}}"#));
                }
            }
            _ => {
                let span = open
                    .last()
                    .map_or(String::new(), |s| format!(",\"span\":{s}"));
                lines.push(format!(
                    r#"{{"type":"op"{span},"name":"op{}","dtype":"f32","ts":{t},"dur":{}}}"#,
                    kind % 5,
                    dur % 200
                ));
            }
        }
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    hand_trace(&refs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Whatever the recorded times, the exported complete events nest on every thread.
    #[test]
    fn exported_intervals_always_nest(items in proptest::collection::vec((any::<u8>(), any::<u16>(), any::<u16>()), 1..120)) {
        let bytes = random_trace(&items);
        let (v, _) = chrome(&bytes, None);
        let xs = check_structure(&v);
        check_nesting(&xs);
    }
}

/// A writer that fails once `limit` bytes were written.
struct FailAfter {
    left: usize,
}

impl Write for FailAfter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() > self.left {
            return Err(std::io::Error::other("disk full"));
        }
        self.left -= buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_write_error_stops_the_export_and_the_parser() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 20_000,
            ops_per_step: 1000,
            ..Default::default()
        },
    )
    .expect("synthetic");
    let mut reader = TraceReader::new(&bytes[..], ReadOptions::default()).expect("header");
    let r = write_chrome(
        &mut reader,
        FailAfter { left: 10_000 },
        &ChromeOptions::default(),
    );
    assert!(matches!(r, Err(ExportError::Write(_))), "{r:?}");
}

#[test]
fn a_bad_line_is_a_read_error_with_its_line_number() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 10_000,
            ops_per_step: 1000,
            ..Default::default()
        },
    )
    .expect("synthetic");
    // Corrupt line 30001 (well past the first batch handed between the threads).
    let mut text = String::from_utf8(bytes).expect("utf-8");
    let start = text
        .match_indices('\n')
        .nth(29_999)
        .map(|(i, _)| i + 1)
        .expect("enough lines");
    text.insert_str(start, "{not json}\n");
    let mut reader = TraceReader::new(text.as_bytes(), ReadOptions::default()).expect("header");
    let r = write_chrome(&mut reader, std::io::sink(), &ChromeOptions::default());
    match r {
        Err(ExportError::Read(e)) => assert!(e.to_string().contains("line 30001"), "{e}"),
        other => panic!("expected a read error, got {other:?}"),
    }
}
