//! Exports agree with the analyses.
//!
//! Op totals, span times and memory of the Chrome export and the folded stacks equal what
//! trace-analyze computes from the same trace.

use std::collections::BTreeMap;

use serde_json::Value;
use testkit::{SynthConfig, XEvent, check_chrome, session_trace, write_synthetic};
use trace_analyze::{LoadOptions, OpTableOptions, load_str, memory_report, op_table, span_tree};
use trace_export::{ChromeOptions, ChromeSummary, FoldedStacks, folded_stacks, write_chrome};
use trace_record::{ReadOptions, TraceReader};

fn chrome(trace: &[u8]) -> (Value, ChromeSummary) {
    let mut reader = TraceReader::new(trace, ReadOptions::default()).expect("header");
    let mut out = Vec::new();
    let summary = write_chrome(
        &mut reader,
        &mut out,
        &ChromeOptions {
            args: trace_export::ArgsMode::Full,
            ..ChromeOptions::default()
        },
    )
    .expect("export");
    let v: Value = serde_json::from_slice(&out).expect("the export is valid JSON");
    (v, summary)
}

fn check_structure(v: &Value) -> Vec<XEvent> {
    let check = check_chrome(v);
    assert!(check.failures.is_empty(), "{:#?}", check.failures);
    check.complete
}

fn fold(bytes: &[u8]) -> FoldedStacks {
    let mut reader = TraceReader::new(bytes, ReadOptions::default()).expect("header");
    folded_stacks(&mut reader, None).expect("fold")
}

#[test]
fn the_chrome_export_of_a_recorded_session_agrees_with_the_analyses() {
    let bytes = session_trace(4);
    let (v, summary) = chrome(&bytes);
    let xs = check_structure(&v);
    assert_eq!(summary.adjustments.total(), 0, "{:?}", summary.adjustments);
    assert_eq!(
        v["otherData"]["summary"]["adjustments"]["starts_clamped"],
        0
    );
    assert_eq!(v["otherData"]["incomplete"], false);
    assert_eq!(
        v["otherData"]["summary"]["events_written"].as_u64(),
        v["traceEvents"].as_array().map(|a| a.len() as u64)
    );

    let text = std::str::from_utf8(&bytes).expect("utf-8");
    let trace = load_str(text, "session", LoadOptions::default()).expect("load");

    // Op totals per name equal the op table's.
    let table = op_table(&trace, &OpTableOptions::default());
    let mut chrome_ops: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for x in xs.iter().filter(|x| x.cat == "op") {
        let e = chrome_ops.entry(x.name.clone()).or_default();
        e.0 += 1;
        e.1 += x.end - x.start;
    }
    assert_eq!(chrome_ops.len(), table.rows.len());
    for row in &table.rows {
        assert_eq!(
            chrome_ops.get(&row.name),
            Some(&(row.count, row.total_ns)),
            "op {}",
            row.name
        );
    }
    assert_eq!(summary.ops, table.op_count);

    // Every span is one complete event with its recorded duration.
    let spans: Vec<&XEvent> = xs.iter().filter(|x| x.cat.starts_with("span,")).collect();
    assert_eq!(spans.len(), trace.spans.len());
    let mut recorded: Vec<u64> = trace
        .spans
        .iter()
        .map(|s| s.duration_ns().expect("closed"))
        .collect();
    let mut exported: Vec<u64> = spans.iter().map(|x| x.end - x.start).collect();
    recorded.sort_unstable();
    exported.sort_unstable();
    assert_eq!(recorded, exported);
    // The worker thread's spans are on their own track.
    let tids: std::collections::BTreeSet<u64> = spans.iter().map(|x| x.tid).collect();
    assert!(tids.len() >= 2, "{tids:?}");

    // The memory counters reach exactly the analysed peak and end where the analysis ends.
    let mem = memory_report(&trace).expect("memory events");
    let cpu = mem.devices.iter().find(|d| d.device == "cpu").expect("cpu");
    // One counter per category, each holding its last sample, as a viewer shows them.
    let totals: Vec<u64> = check_chrome(&v)
        .logical_memory
        .iter()
        .filter(|(device, _, _)| device == "cpu")
        .map(|(_, _, bytes)| bytes.values().sum())
        .collect();
    assert_eq!(totals.iter().max().copied(), Some(cpu.peak_bytes));
    assert_eq!(totals.last().copied(), Some(cpu.end_bytes));

    // Steps: one instant and one bar on the steps track per step.
    let step_instants = v["traceEvents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["ph"] == "i" && e["name"].as_str().is_some_and(|n| n.starts_with("step ")))
        .count();
    assert_eq!(step_instants, trace.steps.len());
    assert_eq!(
        xs.iter().filter(|x| x.cat == "step").count(),
        trace.steps.len()
    );

    // Args carry shapes, dtypes, bytes and the step.
    let mm = xs.iter().find(|x| x.name == "matmul").expect("a matmul");
    assert_eq!(mm.args["shape"], serde_json::json!([8, 16]));
    assert_eq!(mm.args["dtype"], "f32");
    assert_eq!(mm.args["out_bytes"], 512);
    assert!(mm.args["step"].is_u64());

    // Metadata names the process and every thread that has events.
    let names: Vec<&str> = v["traceEvents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert!(names.contains(&"steps"));
    assert!(names.len() > tids.len());
    assert!(
        v["traceEvents"][0]["args"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("export-test"))
    );
}

#[test]
fn folded_weights_sum_to_the_root_span_times_of_a_recorded_session() {
    let bytes = session_trace(3);
    let f = fold(&bytes);
    let sum: u64 = f.lines.iter().map(|(_, w)| w).sum();
    assert_eq!(sum, f.total_self_ns);
    assert!(f.lines.iter().all(|(_, w)| *w > 0));
    assert!(
        f.lines
            .iter()
            .any(|(s, _)| s == "train_step;forward;model/l0;matmul")
    );
    assert!(f.lines.iter().any(|(s, _)| s == "loader;decode"));

    // The total self time is the time of the root spans, as the span tree measures it
    // (every op of this trace is inside a span).
    let trace = load_str(
        std::str::from_utf8(&bytes).expect("utf-8"),
        "session",
        LoadOptions::default(),
    )
    .expect("load");
    let tree = span_tree(&trace);
    let roots: u64 = tree
        .nodes
        .iter()
        .filter(|n| n.depth == 0)
        .map(|n| n.total_ns)
        .sum();
    assert_eq!(f.total_self_ns, roots);
}

#[test]
fn folded_weights_sum_to_the_root_span_times_of_a_synthetic_trace() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 3000,
            ops_per_step: 300,
            ..Default::default()
        },
    )
    .expect("synthetic");
    let f = fold(&bytes);
    let trace = load_str(
        std::str::from_utf8(&bytes).expect("utf-8"),
        "synthetic",
        LoadOptions::default(),
    )
    .expect("load");
    let steps: u64 = trace
        .spans
        .iter()
        .filter(|s| s.parent.is_none())
        .map(|s| s.duration_ns().unwrap_or(0))
        .sum();
    assert_eq!(f.total_self_ns, steps);
    let op_time: u64 = trace.ops.iter().map(|o| o.dur_ns).sum();
    let op_lines: u64 = f
        .lines
        .iter()
        .filter(|(s, _)| s.matches(';').count() == 2)
        .map(|(_, w)| w)
        .sum();
    assert_eq!(op_lines, op_time);
}

/// Random traces of step boundaries (consecutive, skipped by a schedule, or out of order),
/// ops, spans, memory, markers and samples: the loader's steps are the shared rule's
/// (trace-record's `StepTracker`), and the Chrome steps track draws exactly them.
#[test]
fn loader_rule_and_chrome_steps_track_number_steps_alike() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    for case in 0..400 {
        let mut lines: Vec<String> = Vec::new();
        let mut ts = 1_000 + next(3) * 500;
        let mut index = 0u64;
        let mut span = 0u64;
        for _ in 0..next(24) {
            ts += 100 + next(2_000);
            match next(9) {
                0 | 1 => {
                    index = match next(6) {
                        0 => index + 2 + next(3),
                        1 => index.saturating_sub(1),
                        _ => index + 1,
                    };
                    lines.push(format!(r#"{{"type":"step","index":{index},"ts":{ts}}}"#));
                }
                2 | 3 => lines.push(format!(
                    r#"{{"type":"op","name":"a","dtype":"f32","ts":{ts},"dur":{}}}"#,
                    next(700)
                )),
                4 => {
                    span += 1;
                    lines.push(format!(
                        r#"{{"type":"span_start","id":{span},"name":"s","kind":"function","thread":0,"ts":{ts}}}"#
                    ));
                    ts += 50;
                    lines.push(format!(r#"{{"type":"span_end","id":{span},"ts":{ts}}}"#));
                }
                5 => lines.push(format!(
                    r#"{{"type":"memory","action":"alloc","storage":{ts},"tensor":1,"bytes":8,"cat":"activation","ts":{ts}}}"#
                )),
                6 => lines.push(format!(r#"{{"type":"marker","name":"m","ts":{ts}}}"#)),
                7 => lines.push(format!(
                    r#"{{"type":"device_memory","dev":"cpu","used":1,"ts":{ts}}}"#
                )),
                _ => lines.push(format!(
                    r#"{{"type":"sampler","step":{index},"hz":1000,"taken":0,"lost":0,"ts":{ts},"dur":10}}"#
                )),
            }
        }
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let bytes = testkit::hand_trace(&refs);
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        let trace = load_str(&text, "case", LoadOptions::default()).expect("load");
        let loaded: Vec<(u64, u64, u64)> = trace
            .steps
            .iter()
            .map(|s| (s.index, s.start_ns, s.end_ns))
            .collect();

        let mut reader = TraceReader::new(&bytes[..], ReadOptions::default()).expect("header");
        let mut tracker = trace_record::StepTracker::new();
        let mut ruled = Vec::new();
        for line in reader.by_ref() {
            ruled.extend(tracker.event(&line.expect("read").event));
        }
        ruled.extend(tracker.finish());
        let ruled: Vec<(u64, u64, u64)> = ruled
            .iter()
            .filter(|s| s.is_step)
            .map(|s| (s.index, s.start_ns, s.end_ns))
            .collect();
        assert_eq!(ruled, loaded, "case {case}:\n{text}");

        let (v, summary) = chrome(&bytes);
        let bars: Vec<String> = v["traceEvents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["cat"] == "step")
            .filter_map(|e| e["name"].as_str().map(str::to_string))
            .collect();
        let want: Vec<String> = loaded.iter().map(|s| format!("step {}", s.0)).collect();
        assert_eq!(bars, want, "case {case}:\n{text}");
        if summary.step_bars_clamped == 0 {
            let spans: Vec<(u64, u64)> = v["traceEvents"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["cat"] == "step")
                .map(|e| {
                    let ts = e["ts"].as_u64().unwrap_or(u64::MAX);
                    (ts, ts.saturating_add(e["dur"].as_u64().unwrap_or(u64::MAX)))
                })
                .collect();
            let want: Vec<(u64, u64)> = loaded
                .iter()
                .map(|&(_, a, b)| {
                    let (ts, dur) = trace_export::step_bar_us(a, b);
                    (ts, ts + dur)
                })
                .collect();
            assert_eq!(spans, want, "case {case}:\n{text}");
        }
    }
}
