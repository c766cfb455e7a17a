//! The names every analysis shows (`#0` dropped on a span alone among its siblings) in every
//! export, ops outside every span on the driving thread, and the tracked heap as a counter.

use std::collections::BTreeSet;

use serde_json::Value;
use trace_export::{
    ArgsMode, ChromeOptions, ChromeSummary, HEAP_COUNTER, OUTSIDE_SPANS_TID, folded_samples,
    folded_stacks, outline, write_chrome, write_chrome_outlined,
};
use trace_record::{ReadOptions, TraceReader};

use crate::common::{check_nesting, check_structure, ns};

/// The ops of [`generation_trace`]: every folded frame with one of these names is an op leaf.
const OPS: [&str; 4] = ["embed", "matmul", "rms", "argmax"];

/// The span paths of [`generation_trace`] as the analyses name them: `model#0`, `layer#0`
/// and `norm#0` are alone among their siblings, the two `linear`s are not.
const PATHS: [&str; 5] = [
    "model",
    "model/layer",
    "model/layer/linear#0",
    "model/layer/linear#1",
    "model/layer/norm",
];

/// A generation loop recorded by a real `TraceSession`, as trace-candle's tracing layer names
/// spans: `steps` iterations of `model#0 { layer#0 { linear#0, linear#1, norm#0 } }` with an
/// op in each leaf, then a top-level `argmax` outside every span (and, before the first span
/// of all, an `embed` op outside every span too), then `step()`. Step 0's `norm#0` carries
/// one sampled stack. Op times come from the session's one clock.
fn generation_trace(steps: u64) -> Vec<u8> {
    testkit::generation_trace(&testkit::Generation {
        entrypoint: "test::generate",
        steps,
        norm_op: "rms",
        embed: true,
        sampled: true,
    })
}

fn reader(trace: &[u8]) -> TraceReader<&[u8]> {
    TraceReader::new(trace, ReadOptions::default()).expect("header")
}

/// The Chrome export after a first pass ([`outline`]), parsed back.
fn outlined(trace: &[u8], args: ArgsMode) -> (Value, ChromeSummary) {
    let first = outline(&mut reader(trace)).expect("outline");
    let mut out = Vec::new();
    let opts = ChromeOptions {
        args,
        ..ChromeOptions::default()
    };
    let summary =
        write_chrome_outlined(&mut reader(trace), &mut out, &opts, &first).expect("export");
    (serde_json::from_slice(&out).expect("JSON"), summary)
}

/// The span paths a folded export's lines name: every prefix of span frames (op leaves,
/// named in [`OPS`], and the frames after a span part that are no spans are left out),
/// frames joined by `/`.
fn folded_span_paths<'a>(
    stacks: impl Iterator<Item = &'a str>,
    span_frames: usize,
) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for stack in stacks {
        let frames: Vec<&str> = stack.split(';').collect();
        let spans = frames
            .iter()
            .take(span_frames)
            .take_while(|f| !OPS.contains(f))
            .count();
        for k in 1..=spans {
            paths.insert(frames[..k].join("/"));
        }
    }
    paths
}

fn expected_paths() -> BTreeSet<String> {
    PATHS.iter().map(|p| (*p).to_string()).collect()
}

#[test]
fn top_level_ops_sit_at_the_root_of_the_driving_thread_with_no_adjustment() {
    let trace = generation_trace(3);
    let (v, summary) = outlined(&trace, ArgsMode::Compact);
    assert_eq!(summary.adjustments.total(), 0, "{:?}", summary.adjustments);
    let xs = check_structure(&v);
    check_nesting(&xs);
    let driver = xs
        .iter()
        .find(|x| x.name == "model")
        .map(|x| x.tid)
        .expect("a model span");
    let top: Vec<_> = xs
        .iter()
        .filter(|x| x.name == "argmax" || x.name == "embed")
        .collect();
    assert_eq!(top.len(), 4, "3 argmax and 1 embed");
    for op in &top {
        assert_eq!(op.tid, driver, "{} on the driving thread", op.name);
        // At the root: inside no span of its thread.
        let inside = xs
            .iter()
            .filter(|x| x.tid == driver && x.cat.starts_with("span"))
            .find(|s| {
                s.start <= op.start && op.end <= s.end && (s.start, s.end) != (op.start, op.end)
            });
        assert!(inside.is_none(), "{} inside {:?}", op.name, inside);
    }
    // No made-up thread, named or drawn.
    assert!(xs.iter().all(|x| x.tid != OUTSIDE_SPANS_TID));
    let names: Vec<&Value> = v["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| &e["args"]["name"])
        .collect();
    assert!(names.iter().all(|n| *n != "ops outside spans"), "{names:?}");
    assert_eq!(
        v["otherData"]["summary"]["adjustments"]["ops_outside_spans"],
        0
    );

    // The folded stacks nest them alike: a root frame of their own, nothing adjusted.
    let folded = folded_stacks(&mut reader(&trace), None).expect("fold");
    assert_eq!(folded.adjustments.total(), 0, "{:?}", folded.adjustments);
    assert!(
        folded.lines.iter().any(|(s, _)| s == "argmax"),
        "{:?}",
        folded.lines
    );
}

#[test]
fn an_op_outside_spans_while_the_driving_thread_is_in_one_is_drawn_apart_and_counted() {
    // The driving thread (1) is inside `a` when an op with no span arrives: it cannot be
    // drawn at that thread's root without overlapping `a`.
    let trace = testkit::hand_trace(&[
        r#"{"type":"span_start","id":1,"name":"a","kind":"function","thread":1,"ts":10}"#,
        r#"{"type":"op","name":"elsewhere","dtype":"f32","ts":20,"dur":5}"#,
        r#"{"type":"span_end","id":1,"ts":40}"#,
        r#"{"type":"op","name":"after","dtype":"f32","ts":50,"dur":5}"#,
    ]);
    let (v, summary) = outlined(&trace, ArgsMode::None);
    let xs = check_structure(&v);
    check_nesting(&xs);
    assert_eq!(summary.adjustments.ops_outside_spans, 1);
    let tid = |name: &str| xs.iter().find(|x| x.name == name).map(|x| x.tid);
    assert_eq!(tid("elsewhere"), Some(OUTSIDE_SPANS_TID));
    assert_eq!(tid("after"), Some(1));
}

#[test]
fn every_export_names_span_paths_as_the_analyses_do() {
    let trace = generation_trace(2);
    let want = expected_paths();

    // Chrome: each span's event name is its path's last name, its `path` arg the path.
    let (v, _) = outlined(&trace, ArgsMode::Compact);
    let xs = check_structure(&v);
    let spans: Vec<_> = xs.iter().filter(|x| x.cat.starts_with("span")).collect();
    let chrome_paths: BTreeSet<String> = spans
        .iter()
        .map(|x| x.args["path"].as_str().expect("path").to_string())
        .collect();
    assert_eq!(chrome_paths, want);
    for x in &spans {
        let path = x.args["path"].as_str().expect("path");
        assert_eq!(path.rsplit('/').next(), Some(x.name.as_str()), "{path}");
    }

    // Folded stacks: the span frames of every line.
    let folded = folded_stacks(&mut reader(&trace), None).expect("fold");
    let lines = folded.lines.iter().map(|(s, _)| s.as_str());
    assert_eq!(folded_span_paths(lines, usize::MAX), want);

    // Folded samples: the span part of the sampled line (then `main;rms_norm`).
    let samples = folded_samples(&mut reader(&trace), None).expect("fold samples");
    assert_eq!(
        samples.lines,
        [("model;layer;norm;main;rms_norm".to_string(), 2)]
    );
}

#[test]
fn without_an_outline_the_chrome_export_keeps_recorded_names() {
    let trace = generation_trace(1);
    let mut out = Vec::new();
    let opts = ChromeOptions {
        args: ArgsMode::Compact,
        ..ChromeOptions::default()
    };
    write_chrome(&mut reader(&trace), &mut out, &opts).expect("export");
    let v: Value = serde_json::from_slice(&out).expect("JSON");
    let xs = check_structure(&v);
    assert!(xs.iter().any(|x| x.name == "model#0"));
    assert!(xs.iter().all(|x| x.name != "model"));
}

/// A version-2 hand trace (tracked heap lines need it).
fn heap_trace(lines: &[&str]) -> Vec<u8> {
    let header = testkit::HEADER.replacen(r#""version":1"#, r#""version":2"#, 1);
    let mut s = header;
    s.push('\n');
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    s.into_bytes()
}

/// The samples of the tracked heap counter: (ts ns, bytes).
fn heap_samples(v: &Value) -> Vec<(u64, u64)> {
    v["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == HEAP_COUNTER)
        .map(|e| (ns(&e["ts"]), e["args"]["bytes"].as_u64().expect("bytes")))
        .collect()
}

const HEAP_LINES: [&str; 12] = [
    r#"{"type":"span_start","id":1,"name":"a","kind":"function","thread":1,"ts":5}"#,
    r#"{"type":"heap_alloc","id":1,"bytes":100,"thread":1,"ts":10}"#,
    r#"{"type":"heap_alloc","id":2,"bytes":50,"thread":1,"ts":20}"#,
    r#"{"type":"heap_free","id":1,"ts":20}"#,
    r#"{"type":"heap_free","id":9,"ts":30}"#,
    r#"{"type":"heap_alloc","id":2,"bytes":8,"thread":1,"ts":35}"#,
    r#"{"type":"span_end","id":1,"ts":38}"#,
    r#"{"type":"step","index":1,"ts":40}"#,
    r#"{"type":"span_start","id":2,"name":"b","kind":"function","thread":1,"ts":45}"#,
    r#"{"type":"heap_alloc","id":3,"bytes":7,"thread":1,"ts":50}"#,
    r#"{"type":"span_end","id":2,"ts":55}"#,
    r#"{"type":"heap_free","id":2,"ts":56}"#,
];

#[test]
fn tracked_heap_is_a_counter_of_live_bytes() {
    let trace = heap_trace(&HEAP_LINES);
    let (v, summary) = crate::common::chrome(&trace, None);
    check_structure(&v);
    // One sample per time (the free at 20 and the allocation at 20 are one), none when the
    // bytes do not change (the free of 9 never allocated, the second allocation of 2).
    assert_eq!(heap_samples(&v), [(10, 100), (20, 50), (50, 57), (56, 7)]);
    assert_eq!(summary.heap_counters, 4);
    assert_eq!(summary.heap.frees_without_alloc, 1);
    assert_eq!(summary.heap.duplicate_allocs, 1);
    assert_eq!(v["otherData"]["summary"]["heap_counters"], 4);
    // Never mixed into the logical memory counters.
    assert_eq!(summary.memory_counters, 0);
}

#[test]
fn one_step_starts_its_heap_counter_at_the_live_bytes_then() {
    let trace = heap_trace(&HEAP_LINES);
    let (v, summary) = crate::common::chrome(&trace, Some(1));
    check_structure(&v);
    assert!(summary.step_found);
    assert_eq!(heap_samples(&v), [(40, 50), (50, 57), (56, 7)]);
}
