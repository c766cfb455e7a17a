//! Comparing two traces: deltas, ops in one trace only, fingerprint equality per step.

use testkit::SynthConfig;
use trace_analyze::compare;
use trace_analyze::new_step_cache;

use crate::common::{small, synthetic};

#[test]
fn compare_reports_changed_step_and_ops_in_one_only() {
    let base = synthetic(&SynthConfig::default());
    let cand = synthetic(&SynthConfig {
        changed_step: Some(3),
        seed: 9,
        ..Default::default()
    });
    let cache = new_step_cache();
    let c = compare(&base, &cand, &cache).unwrap();
    assert_eq!(c.steps, (10, 10));
    assert_eq!(c.graphs_equal, 9);
    assert!(!c.graphs[3].equal);
    assert!(c.ops_only_in_base.is_empty());
    assert_eq!(c.ops_only_in_candidate, ["gelu"]);
    // Ops are compared per graph: relu in graph A's steps (10 in the base, 9 in the
    // candidate); graph B ran in the candidate only, so its relu has no row.
    let relu: Vec<_> = c.ops.iter().filter(|o| o.name == "relu").collect();
    assert_eq!(relu.len(), 1, "{relu:?}");
    assert_eq!(relu[0].graph.as_deref(), Some("A"));
    let per_step = relu[0].count.base.unwrap() / 10.0;
    assert_eq!(relu[0].count.candidate, Some(per_step * 9.0));
    assert!(relu[0].base_spread.is_some() && relu[0].candidate_spread.is_some());
    assert!(relu[0].change.is_some());
    let mem = c.memory.as_ref().unwrap();
    assert_eq!(mem[0].peak_bytes.delta, Some(0.0));
    // Like with like: the changed step's graph ran in the candidate only, so step times are
    // compared per graph, and that graph is reported as the candidate's own.
    let groups: Vec<(&str, (usize, usize), Option<&str>)> = c
        .graph_groups
        .iter()
        .map(|g| (g.label.as_str(), g.steps, g.only_in))
        .collect();
    assert_eq!(
        groups,
        [("A", (10, 9), None), ("B", (0, 1), Some("candidate"))]
    );
    assert!(c.step_time_change.is_none());
    assert!(c.graph_groups[0].change.is_some());
    assert!(c.graph_groups[1].change.is_none());
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    assert_eq!(c.interval, trace_analyze::IntervalBasis::Steps);
}

fn refs(v: &[trace_analyze::Trace]) -> Vec<&trace_analyze::Trace> {
    v.iter().collect()
}

/// Runs of one program whose speed differs from run to run by ±10 % (constructed, not
/// measured): several runs a side see that spread and call an equal pair within noise; one
/// run a side sees only the steps' spread and calls the same difference a regression; a side
/// 1.5× slower is a regression either way.
#[test]
fn several_runs_a_side_resample_runs_and_steps() {
    let run = |seed: u64, speed_pct: u64| {
        synthetic(&SynthConfig {
            seed,
            speed_pct,
            ..Default::default()
        })
    };
    let base: Vec<_> = [(1, 100), (2, 110), (3, 90)].map(|(s, p)| run(s, p)).into();
    let same: Vec<_> = [(4, 95), (5, 108), (6, 100)].map(|(s, p)| run(s, p)).into();
    let slow: Vec<_> = [(7, 150), (8, 165), (9, 135)]
        .map(|(s, p)| run(s, p))
        .into();
    let cache = new_step_cache();
    let c = trace_analyze::compare_runs(&refs(&base), &refs(&same), &cache).unwrap();
    assert_eq!(c.interval, trace_analyze::IntervalBasis::RunsThenSteps);
    assert_eq!(c.runs, (3, 3));
    let st = c.step_time_change.unwrap();
    assert_eq!(st.runs, Some((3, 3)));
    assert_eq!(st.verdict, trace_analyze::Verdict::WithinNoise, "{st:?}");
    assert!(c.regressions(5.0).is_empty(), "{:?}", c.regressions(5.0));
    // One run a side: the 8 % faster-machine run looks like a real change.
    let one = compare(&base[1], &same[2], &cache).unwrap();
    assert_eq!(one.interval, trace_analyze::IntervalBasis::Steps);
    assert_ne!(
        one.step_time_change.unwrap().verdict,
        trace_analyze::Verdict::WithinNoise
    );
    // 1.5x slower: a regression over runs too, for the step time and the ops.
    let c = trace_analyze::compare_runs(&refs(&base), &refs(&slow), &cache).unwrap();
    let st = c.step_time_change.unwrap();
    assert_eq!(st.verdict, trace_analyze::Verdict::Regression, "{st:?}");
    let regressed: Vec<String> = c.regressions(10.0).into_iter().map(|r| r.what).collect();
    assert!(
        regressed.contains(&"step time".to_string()),
        "{regressed:?}"
    );
    assert!(
        regressed.contains(&"op matmul".to_string()),
        "{regressed:?}"
    );
}

/// Both sides ran the same two graphs: each graph's steps are compared with their own.
#[test]
fn steps_of_two_graphs_are_compared_per_graph() {
    let t = |seed: u64| {
        synthetic(&SynthConfig {
            changed_step: Some(3),
            seed,
            ..Default::default()
        })
    };
    let (a, b) = (t(1), t(2));
    let c = compare(&a, &b, &new_step_cache()).unwrap();
    let groups: Vec<(usize, usize)> = c.graph_groups.iter().map(|g| g.steps).collect();
    assert_eq!(groups, [(9, 9), (1, 1)]);
    assert!(c.graph_groups.iter().all(|g| g.only_in.is_none()));
    assert!(c.step_time_change.is_none());
    assert!(c.graph_groups[0].change.is_some());
}

#[test]
fn compare_with_itself_has_zero_deltas() {
    let (a, b) = (small(), small());
    let cache = new_step_cache();
    let c = compare(&a, &b, &cache).unwrap();
    assert!(
        c.spans
            .iter()
            .all(|s| s.time_per_step_ns.delta == Some(0.0))
    );
    assert!(c.ops.iter().all(|o| o.time_per_step_ns.delta == Some(0.0)));
    assert_eq!(c.graphs_equal, 2);
    // The two steps ran two graphs: a forward row per graph, each its own step's time.
    let mut fwd: Vec<(Option<String>, Option<f64>)> = c
        .spans
        .iter()
        .filter(|s| s.path == "train_step/forward")
        .map(|s| (s.graph, s.time_per_step_ns.base))
        .collect();
    fwd.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        fwd,
        [
            (Some("A".to_string()), Some(140.0)),
            (Some("B".to_string()), Some(90.0))
        ]
    );
}

#[test]
fn span_rows_carry_the_span_trees_display_paths() {
    // A chain deeper than MAX_PATH_NAMES (elided paths) only the candidate has, against a
    // branching trace only the base has: rows of both trees' paths.
    let deep = trace_analyze::load_reader(
        &testkit::deep_nesting(80)[..],
        "deep",
        trace_analyze::LoadOptions::default(),
    )
    .unwrap();
    let base = small();
    let c = compare(&base, &deep, &new_step_cache()).unwrap();
    let mut got: Vec<String> = c.spans.iter().map(|s| s.path).collect();
    let mut want: Vec<String> = trace_analyze::span_tree(&base)
        .nodes
        .into_iter()
        .chain(trace_analyze::span_tree(&deep).nodes)
        .map(|n| n.path)
        .collect();
    assert!(want.iter().any(|p| p.contains(" more…")));
    // The base's two steps ran two graphs: its paths have a row per graph.
    got.sort();
    got.dedup();
    want.sort();
    assert_eq!(got, want);
    // The JSON rows carry the same text, in row order.
    let v = serde_json::to_value(&c).unwrap();
    let json: Vec<&str> = v["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    let rows: Vec<String> = c.spans.iter().map(|s| s.path).collect();
    assert_eq!(json, rows);
}

#[test]
fn span_rows_of_equal_change_and_size_are_ordered_by_path() {
    // Roots named out of order, three of 10 ns and one of 30 ns: the longest first, then the
    // equal ones by path.
    let mut lines = Vec::new();
    for (id, (name, dur)) in [("c", 10), ("a", 10), ("long", 30), ("b", 10)]
        .into_iter()
        .enumerate()
    {
        let ts = id * 100;
        lines.push(format!(
            r#"{{"type":"span_start","id":{},"name":"{name}","kind":"module","thread":1,"ts":{ts}}}"#,
            id + 1
        ));
        lines.push(format!(
            r#"{{"type":"span_end","id":{},"ts":{}}}"#,
            id + 1,
            ts + dur
        ));
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let bytes = testkit::hand_trace(&refs);
    let t =
        trace_analyze::load_reader(&bytes[..], "t", trace_analyze::LoadOptions::default()).unwrap();
    let c = compare(&t, &t, &new_step_cache()).unwrap();
    let paths: Vec<String> = c.spans.iter().map(|s| s.path).collect();
    assert_eq!(paths, ["long", "a", "b", "c"]);
}

/// A complete hand trace: per step, a `layer` span holding one op whose name picks the step's
/// graph (`mm_long` or `mm_short`), then a 370-ish ns `tiny` span and a `big` span; `steps`
/// gives per step (long graph?, layer ns, tiny ns, big ns).
fn stepped(steps: &[(bool, u64, u64, u64)]) -> trace_analyze::Trace {
    let mut lines = Vec::new();
    let mut ts = 0u64;
    let mut id = 0u64;
    let mut span = |lines: &mut Vec<String>, name: &str, start: u64, dur: u64| -> u64 {
        id += 1;
        lines.push(format!(
            r#"{{"type":"span_start","id":{id},"name":"{name}","kind":"module","thread":0,"ts":{start}}}"#
        ));
        lines.push(format!(
            r#"{{"type":"span_end","id":{id},"ts":{}}}"#,
            start + dur
        ));
        id
    };
    for (k, &(long, layer, tiny, big)) in steps.iter().enumerate() {
        ts += 100;
        lines.push(format!(r#"{{"type":"step","index":{k},"ts":{ts}}}"#));
        let sid = span(&mut lines, "layer", ts + 10, layer);
        // The op inside the layer span (its end line was pushed last: insert before it).
        let end = lines.pop().expect("span end");
        let name = if long { "mm_long" } else { "mm_short" };
        lines.push(format!(
            r#"{{"type":"op","span":{sid},"name":"{name}","dtype":"f32","ts":{},"dur":{}}}"#,
            ts + 20,
            layer / 2
        ));
        lines.push(end);
        ts += 10 + layer + 10;
        span(&mut lines, "tiny", ts, tiny);
        ts += tiny + 10;
        span(&mut lines, "big", ts, big);
        ts += big + 10;
    }
    lines.push(format!(
        r#"{{"type":"trailer","outcome":"complete","counts":{{}},"dropped":0,"ts":{}}}"#,
        ts + 1
    ));
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let bytes = testkit::hand_trace(&refs);
    trace_analyze::load_reader(&bytes[..], "t", trace_analyze::LoadOptions::default())
        .expect("hand trace loads")
}

/// Small deterministic jitter: 0..=4 ns by position.
fn jitter(k: usize) -> u64 {
    (k as u64 * 7) % 5
}

/// Two graphs whose `layer` takes 10 µs in one and 1 ms in the other, mixed 5:5 in the base
/// and 7:3 in the candidate, each graph's times alike on both sides: pooled, the `layer`
/// span's median would halve; per graph, span and op rows are each within noise.
#[test]
fn span_and_op_rows_are_per_graph_group() {
    let side = |longs: &[bool]| {
        let mut counts = [0usize; 2];
        let steps: Vec<(bool, u64, u64, u64)> = longs
            .iter()
            .map(|&long| {
                let k = &mut counts[usize::from(long)];
                *k += 1;
                let layer = if long { 1_000_000 } else { 10_000 } + jitter(*k) * 100;
                (long, layer, 370 + jitter(*k), 50_000 + jitter(*k))
            })
            .collect();
        stepped(&steps)
    };
    let base = side(&[
        false, true, false, true, false, true, false, true, false, true,
    ]);
    let cand = side(&[
        false, false, true, false, false, true, false, false, true, false,
    ]);
    let c = compare(&base, &cand, &new_step_cache()).unwrap();
    assert_eq!(c.graph_groups.len(), 2, "{:?}", c.graph_groups);
    let labels: Vec<(&str, (usize, usize))> = c
        .graph_groups
        .iter()
        .map(|g| (g.label.as_str(), g.steps))
        .collect();
    assert_eq!(labels, [("A", (5, 7)), ("B", (5, 3))]);
    // One `layer` row per graph, each comparing its own graph's steps.
    let mut layer: Vec<(Option<String>, usize, usize, trace_analyze::Verdict)> = c
        .spans
        .iter()
        .filter(|s| s.path == "layer")
        .map(|s| {
            let ch = s.change.expect("a change");
            (s.graph, ch.base_n, ch.candidate_n, ch.verdict)
        })
        .collect();
    layer.sort_by(|a, b| a.0.cmp(&b.0));
    let within = trace_analyze::Verdict::WithinNoise;
    assert_eq!(
        layer,
        [
            (Some("A".to_string()), 5, 7, within),
            (Some("B".to_string()), 5, 3, within)
        ]
    );
    // The short graph's layer is 10 µs on both sides (not a pooled median of both graphs).
    let a = c
        .spans
        .iter()
        .find(|s| s.path == "layer" && s.graph.as_deref() == Some("A"))
        .unwrap();
    let ch = a.change.unwrap();
    assert!((10_000.0..10_500.0).contains(&ch.base_median), "{ch:?}");
    assert!(
        (10_000.0..10_500.0).contains(&ch.candidate_median),
        "{ch:?}"
    );
    // Ops: each op row is its graph's; no op is compared across graphs.
    let mut ops: Vec<(String, Option<String>, Option<f64>)> = c
        .ops
        .iter()
        .map(|o| (o.name.clone(), o.graph.clone(), o.count.candidate))
        .collect();
    ops.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        ops,
        [
            ("mm_long".to_string(), Some("B".to_string()), Some(3.0)),
            ("mm_short".to_string(), Some("A".to_string()), Some(7.0)),
        ]
    );
    assert!(c.regressions(0.0).is_empty(), "{:?}", c.regressions(0.0));
    // The JSON rows carry the graph.
    let v = serde_json::to_value(&c).unwrap();
    assert!(
        v["spans"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["graph"].is_string())
    );
    // One graph: no graph on any row.
    let one = compare(&base, &base, &new_step_cache()).unwrap();
    let single = side(&[false; 6]);
    let c1 = compare(&single, &single, &new_step_cache()).unwrap();
    assert!(c1.spans.iter().all(|s| s.graph.is_none()));
    assert!(c1.ops.iter().all(|o| o.graph.is_none()));
    assert!(one.spans.iter().all(|s| s.graph.is_some()));
}

/// A 370 ns span 3 % slower (+11 ns) in every step, with an interval well above 0, is below
/// the minimum effect (1 µs a step): within noise, flagged negligible, never a regression. A
/// 50 µs span 3 % slower (+1.5 µs) in the same traces clears both floors and is one.
#[test]
fn a_370_ns_span_three_percent_slower_is_below_the_minimum_effect() {
    let run = |tiny: u64, big: u64| {
        let steps: Vec<(bool, u64, u64, u64)> = (0..20)
            .map(|k| {
                (
                    false,
                    10_000 + jitter(k),
                    tiny + jitter(k),
                    big + jitter(k) * 10,
                )
            })
            .collect();
        stepped(&steps)
    };
    let (base, cand) = (run(370, 50_000), run(381, 51_500));
    let c = compare(&base, &cand, &new_step_cache()).unwrap();
    assert_eq!(c.min_effect_ns, trace_analyze::Change::MIN_EFFECT_NS);
    let row = |p: &str| {
        c.spans
            .iter()
            .find(|s| s.path == p)
            .unwrap()
            .change
            .unwrap()
    };
    let tiny = row("tiny");
    assert!((tiny.ratio.unwrap() - 0.03).abs() < 0.005, "{tiny:?}");
    assert!(tiny.ci_low.unwrap() > 0.0, "{tiny:?}");
    assert_eq!(
        tiny.verdict,
        trace_analyze::Verdict::WithinNoise,
        "{tiny:?}"
    );
    assert!(tiny.negligible);
    assert!(tiny.candidate_median - tiny.base_median < 1_000.0);
    let big = row("big");
    assert_eq!(big.verdict, trace_analyze::Verdict::Regression, "{big:?}");
    assert!(!big.negligible);
    let regressed: Vec<String> = c.regressions(1.0).into_iter().map(|r| r.what).collect();
    assert!(regressed.contains(&"span big".to_string()), "{regressed:?}");
    assert!(
        !regressed.iter().any(|r| r.contains("tiny")),
        "{regressed:?}"
    );
}

/// Eight runs of one program on a machine that slows by 3 % with every run (constructed
/// drift: each run's speed and header start follow its slot). Recorded side by side (A A A A
/// B B B B), the candidate looks 11 % slower and fails a 10 % gate, and the comparison says
/// how the runs were ordered; recorded alternately (A B B A A B B A) and compared pair by
/// pair, the drift cancels: within noise, nothing fails. The same alternating runs with a real
/// 15 % slowdown on top of the drift still fail the gate.
#[test]
fn alternating_pairs_cancel_machine_drift() {
    let at = |slot: u64, seed: u64, slower_pct: u64| {
        synthetic(&SynthConfig {
            seed,
            speed_pct: (100 + 3 * slot) * (100 + slower_pct) / 100,
            start_offset_ns: slot * 1_000_000_000,
            ..Default::default()
        })
    };
    let cache = new_step_cache();
    // Side by side.
    let a: Vec<_> = (0..4).map(|s| at(s, s + 1, 0)).collect();
    let b: Vec<_> = (4..8).map(|s| at(s, s + 1, 0)).collect();
    let seq = trace_analyze::compare_runs(&refs(&a), &refs(&b), &cache).unwrap();
    let st = seq.step_time_change.unwrap();
    assert_eq!(st.verdict, trace_analyze::Verdict::Regression, "{st:?}");
    let gate: Vec<String> = seq.regressions(10.0).into_iter().map(|r| r.what).collect();
    assert!(gate.contains(&"step time".to_string()), "{gate:?}");
    assert!(
        seq.warnings
            .iter()
            .any(|w| w.contains("every run of one side was recorded before")),
        "{:?}",
        seq.warnings
    );
    // Alternating: A B, B A, A B, B A.
    let (a_slots, b_slots) = ([0u64, 3, 4, 7], [1u64, 2, 5, 6]);
    let side = |slots: &[u64], slower: u64| -> Vec<_> {
        slots.iter().map(|&s| at(s, s + 1, slower)).collect()
    };
    let (a, b) = (side(&a_slots, 0), side(&b_slots, 0));
    let paired = trace_analyze::Comparison::of_paired_runs(&refs(&a), &refs(&b), &cache).unwrap();
    assert_eq!(paired.interval, trace_analyze::IntervalBasis::PairedRuns);
    let st = paired.step_time_change.unwrap();
    assert!(st.paired, "{st:?}");
    assert_eq!(st.verdict, trace_analyze::Verdict::WithinNoise, "{st:?}");
    assert!(st.ratio.unwrap().abs() < 0.02, "{st:?}");
    assert!(
        paired.regressions(10.0).is_empty(),
        "{:?}",
        paired.regressions(10.0)
    );
    assert!(paired.warnings.is_empty(), "{:?}", paired.warnings);
    // A real 15 % slowdown on top of the same drift.
    let slow = side(&b_slots, 15);
    let c = trace_analyze::Comparison::of_paired_runs(&refs(&a), &refs(&slow), &cache).unwrap();
    let gate: Vec<String> = c.regressions(10.0).into_iter().map(|r| r.what).collect();
    assert!(gate.contains(&"step time".to_string()), "{gate:?}");
    // Pairs given out of order (a pair's runs not one after the other): said so.
    let mut shuffled = refs(&b);
    shuffled.swap(0, 3);
    let c = trace_analyze::Comparison::of_paired_runs(&refs(&a), &shuffled, &cache).unwrap();
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("not recorded one run right after")),
        "{:?}",
        c.warnings
    );
    // Unequal sides cannot be paired: compared unpaired, and said so.
    let c = trace_analyze::Comparison::of_paired_runs(&refs(&a), &refs(&b[..3]), &cache).unwrap();
    assert_eq!(c.interval, trace_analyze::IntervalBasis::RunsThenSteps);
    assert!(c.warnings.iter().any(|w| w.contains("compared unpaired")));
}
