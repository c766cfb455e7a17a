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
    let relu = c.ops.iter().find(|o| o.name == "relu").unwrap();
    // One relu fewer in the candidate.
    assert_eq!(relu.count.delta, Some(-1.0));
    assert!(relu.base_spread.is_some() && relu.candidate_spread.is_some());
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
    let fwd = c
        .spans
        .iter()
        .find(|s| s.path == "train_step/forward")
        .unwrap();
    assert_eq!(fwd.time_per_step_ns.base, Some(115.0));
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
    got.sort();
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
