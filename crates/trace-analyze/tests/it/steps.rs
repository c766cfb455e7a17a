//! Per-step graphs: identical steps analysed once (cache hits), a changed step reported with its
//! first differing op, canonical fingerprints independent of trace ids.

use testkit::SynthConfig;
use trace_analyze::{graph_report, new_step_cache};

use crate::common::{small, synthetic};

#[test]
fn identical_steps_are_analysed_once() {
    let t = synthetic(&SynthConfig {
        ops: 2000,
        ops_per_step: 100,
        ..Default::default()
    });
    let cache = new_step_cache();
    let r = graph_report(&t, &cache).unwrap();
    assert_eq!(r.steps.len(), 20);
    assert_eq!(r.distinct_graphs, 1);
    assert_eq!(r.stable_from_step, Some(0));
    // One analysis computed, 19 reused.
    assert_eq!((r.cache.misses, r.cache.hits), (1, 19));
    assert_eq!(r.cache.collisions, 0);
    assert!(r.steps.iter().all(|s| !s.changed));
    assert_eq!(r.steps[0].analysis.ops, 100);
    // Every op depends on the previous one: a chain of 100.
    assert_eq!(r.steps[0].analysis.depth, 100);
}

#[test]
fn a_changed_step_reports_its_first_differing_op() {
    let t = synthetic(&SynthConfig {
        ops: 1000,
        ops_per_step: 100,
        changed_step: Some(4),
        ..Default::default()
    });
    let cache = new_step_cache();
    let r = graph_report(&t, &cache).unwrap();
    assert_eq!(r.distinct_graphs, 2);
    let changed: Vec<u64> = r
        .steps
        .iter()
        .filter(|s| s.changed)
        .map(|s| s.step)
        .collect();
    // Step 4 differs from 3, and step 5 differs from 4 again.
    assert_eq!(changed, [4, 5]);
    let d = r.steps[4].diff.as_ref().unwrap();
    assert_eq!(
        (d.against_step, d.op_index, d.what.as_str()),
        (3, 2, "name")
    );
    assert!(d.before.as_deref().unwrap().starts_with("relu "));
    assert!(d.after.as_deref().unwrap().starts_with("gelu "));
    assert_eq!(r.stable_from_step, Some(5));
    assert_eq!((r.cache.misses, r.cache.hits), (2, 8));
    assert_eq!(r.steps[3].fingerprint, r.steps[5].fingerprint);
}

#[test]
fn fingerprints_do_not_depend_on_trace_ids() {
    // Two runs with different seeds: other durations and the same structure.
    let a = synthetic(&SynthConfig {
        seed: 1,
        ..Default::default()
    });
    let b = synthetic(&SynthConfig {
        seed: 2,
        ..Default::default()
    });
    let cache = new_step_cache();
    let ra = graph_report(&a, &cache).unwrap();
    let rb = graph_report(&b, &cache).unwrap();
    assert_eq!(ra.steps[0].fingerprint, rb.steps[0].fingerprint);
    // Within one trace, each step uses fresh tensor ids and still fingerprints equal.
    assert_eq!(ra.steps[0].fingerprint, ra.steps[9].fingerprint);
    // The second trace's steps were all hits.
    assert_eq!(rb.cache.misses, 1);
}

#[test]
fn small_trace_step_diff() {
    let t = small();
    let cache = new_step_cache();
    let r = graph_report(&t, &cache).unwrap();
    assert_eq!(r.steps.len(), 2);
    let d = r.steps[1].diff.as_ref().unwrap();
    // Step 0: matmul [8, 8], add, linear, matmul_bwd; step 1: matmul [16, 16], linear.
    assert_eq!((d.op_index, d.what.as_str()), (0, "shape"));
    assert!(
        d.before
            .as_deref()
            .unwrap()
            .starts_with("matmul [8, 8] f32")
    );
    // The graph changed at the last step: nothing is stable yet.
    assert_eq!(r.stable_from_step, None);
    assert_eq!(r.pattern, trace_analyze::GraphPattern::Phases);
    assert_eq!(r.groups.len(), 2);
}

#[test]
fn the_step_a_truncated_trace_ends_in_is_partial_not_a_change_or_a_step_time() {
    // The demo-like trace cut inside step 1: only step 1's first op was written.
    let text = std::fs::read_to_string(testkit::small_jsonl()).unwrap();
    let cut = text
        .find(r#"{"type":"op","span":5,"name":"linear""#)
        .unwrap();
    let t = trace_analyze::load_str(&text[..cut], "cut.jsonl", Default::default()).unwrap();
    assert!(t.is_incomplete());
    assert_eq!(t.steps.len(), 2);
    assert_eq!(t.partial_step().map(|s| s.index), Some(1));
    assert_eq!(t.complete_steps().len(), 1);
    let r = graph_report(&t, &new_step_cache()).unwrap();
    assert_eq!(r.steps.len(), 2, "the partial step is still listed");
    assert!(r.steps[1].partial && !r.steps[1].changed && r.steps[1].diff.is_none());
    assert!(!r.steps[0].partial);
    assert_eq!((r.distinct_graphs, r.stable_from_step), (1, Some(0)));
    let s = trace_analyze::summarize(&t, &new_step_cache()).unwrap();
    assert_eq!((s.steps.count, s.steps.total_ns), (1, 300));
    assert_eq!(s.steps.partial_step, Some(1));
    assert_eq!(s.graph.changed_steps.len(), 0);
    assert_eq!(
        s.graph.last_fingerprint.as_deref(),
        Some(r.steps[0].fingerprint.as_str())
    );
    // Compared with the whole trace: step times and graphs of whole steps only.
    let c = trace_analyze::compare(&small(), &t, &new_step_cache()).unwrap();
    assert_eq!(c.graphs.len(), 2);
    assert!(c.graphs[0].equal && c.graphs[1].candidate.is_none());
    assert_eq!(c.graphs_equal, 1);
    // A complete trace has no partial step.
    let whole = small();
    assert!(whole.partial_step().is_none());
    assert_eq!(whole.complete_steps().len(), 2);
}

/// A trace of `n` steps whose one op `fwd` takes an input of `shapes[i % len]` (the step
/// lasting `1000 * (1 + i % len)` ns), or of steps with a span and no op when `shapes` is
/// empty.
fn shaped_steps(n: usize, shapes: &[&str]) -> trace_analyze::Trace {
    let mut lines = Vec::new();
    let mut next = 0u64;
    for i in 0..n {
        let t = next;
        next += 1000 * (1 + i % shapes.len().max(1)) as u64;
        lines.push(format!(r#"{{"type":"step","index":{i},"ts":{t}}}"#));
        let id = i + 1;
        lines.push(format!(
            r#"{{"type":"span_start","id":{id},"name":"forward","kind":"function","thread":0,"ts":{}}}"#,
            t + 1
        ));
        if !shapes.is_empty() {
            let k = i % shapes.len();
            lines.push(format!(
                r#"{{"type":"op","span":{id},"name":"fwd","in":[{}],"out":[{}],"shape":[4,8],"dtype":"f32","ts":{},"dur":{},"in_shapes":[{}]}}"#,
                10 * id,
                10 * id + 1,
                t + 2,
                100 * (1 + k),
                shapes[k]
            ));
        }
        lines.push(format!(
            r#"{{"type":"span_end","id":{id},"ts":{}}}"#,
            t + 200 * (1 + i % shapes.len().max(1)) as u64
        ));
    }
    lines.push(format!(r#"{{"type":"step","index":{n},"ts":{next}}}"#));
    let ops = if shapes.is_empty() { 0 } else { n };
    lines.push(format!(
        r#"{{"type":"trailer","outcome":"complete","counts":{{"span_start":{n},"span_end":{n},"op":{ops},"tensor":0,"memory":0,"device_memory":0,"gradient":0,"step":{},"marker":0,"counter":0}},"dropped":0,"ts":{}}}"#,
        n + 1,
        next
    ));
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let bytes = testkit::hand_trace(&refs);
    trace_analyze::load_str(
        std::str::from_utf8(&bytes).unwrap(),
        "shaped",
        Default::default(),
    )
    .unwrap()
}

/// Batches of two sequence lengths, one after the other: two graphs, alternating, never
/// "stable from the last step"; each group has its own step times; the summary lists each
/// distinct change once with how often it happened.
#[test]
fn alternating_graphs_are_named_as_such_and_timed_apart() {
    let t = shaped_steps(8, &["[4,16]", "[4,48]"]);
    let r = graph_report(&t, &new_step_cache()).unwrap();
    assert_eq!(r.pattern, trace_analyze::GraphPattern::Alternating);
    assert_eq!(r.distinct_graphs, 2);
    assert_eq!(r.stable_from_step, None);
    assert_eq!(
        r.verdict,
        "2 distinct graphs, alternating: A fwd([4, 16]) × 4, B fwd([4, 48]) × 4"
    );
    let counts: Vec<(String, u64, u64)> = r
        .groups
        .iter()
        .map(|g| (g.label.clone(), g.step_time.count, g.first_step))
        .collect();
    assert_eq!(counts, [("A".to_string(), 4, 0), ("B".to_string(), 4, 1)]);
    assert!(r.groups[0].step_time.mean < r.groups[1].step_time.mean);
    let s = trace_analyze::summarize(&t, &new_step_cache()).unwrap();
    let changes: Vec<(u64, Option<String>, Option<String>, u64)> = s
        .graph
        .changed_steps
        .iter()
        .map(|c| (c.step, c.from.clone(), c.to.clone(), c.times))
        .collect();
    let l = |x: &str| Some(x.to_string());
    assert_eq!(changes, [(1, l("A"), l("B"), 4), (2, l("B"), l("A"), 3)]);
    assert_eq!(s.graph.verdict, r.verdict);
}

/// Steps that capture no op (a model seen only through module wrappers) have no graph.
#[test]
fn steps_with_no_ops_are_no_graph() {
    let t = shaped_steps(3, &[]);
    let r = graph_report(&t, &new_step_cache()).unwrap();
    assert_eq!(r.pattern, trace_analyze::GraphPattern::NoOps);
    assert_eq!((r.distinct_graphs, r.no_op_steps), (0, 3));
    assert_eq!(r.stable_from_step, None);
    assert!(r.groups.is_empty());
    assert!(
        r.verdict.starts_with("no ops captured in 3 step(s)"),
        "{}",
        r.verdict
    );
}

/// One graph from the first step: stable from it, one group.
#[test]
fn one_graph_is_stable_from_its_first_step() {
    let t = shaped_steps(4, &["[2,3]"]);
    let r = graph_report(&t, &new_step_cache()).unwrap();
    assert_eq!(r.pattern, trace_analyze::GraphPattern::Stable);
    assert_eq!(r.stable_from_step, Some(0));
    assert_eq!(
        r.verdict,
        "1 distinct graph, stable from step 0: A fwd([2, 3]) × 4"
    );
}

/// A step with an op of two outputs, an op that records none (it gets one value) and a
/// tensor read from outside after the step's own outputs: its graph has the values, inputs,
/// outputs and depth the canonical form says, and a second step doing the same with other
/// tensor ids is the same graph (one analysis, reused).
#[test]
fn multi_output_and_output_less_ops_are_wired_by_slot() {
    let step = |k: u64, base: u64, t: u64| {
        let op = |name: &str, ins: &[u64], outs: &[u64], ts: u64| {
            let list = |v: &[u64]| {
                v.iter()
                    .map(|i| (base + i).to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            format!(
                r#"{{"type":"op","name":"{name}","in":[{}],"out":[{}],"shape":[2],"dtype":"f32","ts":{ts},"dur":1}}"#,
                list(ins),
                list(outs)
            )
        };
        vec![
            format!(r#"{{"type":"step","index":{k},"ts":{t}}}"#),
            // Reads two tensors from outside (the graph's values 0 and 1).
            op("add", &[1, 2], &[10], t + 1),
            // Two outputs: slot 0 read by `log`, slot 1 by `mul`.
            op("split", &[10], &[11, 12], t + 2),
            // A third outside tensor, read after the step's own outputs.
            op("mul", &[12, 3], &[13], t + 3),
            // No outputs recorded: one value, read by nothing (a graph output).
            op("log", &[11], &[], t + 4),
            op("relu", &[13], &[14], t + 5),
        ]
    };
    let mut lines = step(0, 0, 0);
    lines.extend(step(1, 100, 10));
    lines.push(r#"{"type":"step","index":2,"ts":20}"#.to_string());
    let t = crate::common::from_lines(&lines);
    let cache = new_step_cache();
    let r = graph_report(&t, &cache).unwrap();
    let a = &r.steps[0].analysis;
    // 3 outside tensors, then 1 + 2 + 1 + 1 + 1 op outputs.
    assert_eq!((a.ops, a.values, a.inputs), (5, 9, 3));
    // `log`'s value and `relu`'s output: `mul` reads the split's slot 1, so neither slot is
    // left unread.
    assert_eq!(a.outputs, 2);
    // add, split, mul, relu.
    assert_eq!(a.depth, 4);
    assert_eq!(r.steps[0].fingerprint, r.steps[1].fingerprint);
    assert!(!r.steps[1].changed);
    assert_eq!((r.cache.misses, r.cache.hits), (1, 1));
}
