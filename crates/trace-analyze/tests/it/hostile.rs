//! Hostile traces: 20,000-deep nesting in linear memory (spans, compare).
//!
//! Sums past `u64::MAX` saturate with a flag, structured ids, and the partial step left out of
//! every step-time figure alike.

use testkit::SynthConfig;
use trace_analyze::events::{MAX_PATH_NAMES, pair_nodes};
use trace_analyze::{
    LoadOptions, OpTableOptions, Trace, compare, load_reader, memory_report, new_step_cache,
    op_table, span_tree, summarize,
};

fn load(bytes: &[u8]) -> Trace {
    load_reader(bytes, "hostile", LoadOptions::default()).unwrap()
}

#[test]
fn twenty_thousand_nested_spans_take_linear_memory_in_spans_and_compare() {
    let depth = 20_000usize;
    let t = load(&testkit::deep_nesting(depth as u64));
    let tree = span_tree(&t);
    assert_eq!(tree.nodes.len(), depth);
    let path_bytes: usize = tree.nodes.iter().map(|n| n.path.len()).sum();
    // Full paths would hold ~depth²/2 names (200 million); display paths are bounded.
    assert!(path_bytes < depth * 400, "{path_bytes} bytes of paths");
    let deepest = tree.nodes.iter().max_by_key(|n| n.depth).unwrap();
    assert_eq!(deepest.depth as usize, depth - 1);
    assert!(deepest.path.contains(" more…"), "{}", deepest.path);
    assert!(deepest.path.split('/').count() <= MAX_PATH_NAMES + 1);
    // The full path is still there on demand.
    let i = tree.nodes.len() - 1;
    assert_eq!(
        tree.full_path(i).split('/').count(),
        tree.nodes[i].depth as usize + 1
    );

    let cache = new_step_cache();
    let c = compare(&t, &t, &cache).unwrap();
    assert_eq!(c.spans.len(), depth);
    let delta_path_bytes: usize = c.spans.iter().map(|s| s.path.len()).sum();
    assert!(delta_path_bytes < depth * 400, "{delta_path_bytes}");
}

#[test]
fn deep_paths_that_differ_only_in_the_middle_are_not_paired() {
    // Two chains of 100 names equal but for name 50: their display paths are the same text
    // (the middle is elided) but they are different paths.
    let chain = |middle: &str| {
        let mut lines = Vec::new();
        for i in 1..=100u64 {
            let parent = if i > 1 {
                format!("\"parent\":{},", i - 1)
            } else {
                String::new()
            };
            let name = if i == 50 {
                middle.to_string()
            } else {
                format!("n{i}")
            };
            lines.push(format!(
                r#"{{"type":"span_start","id":{i},{parent}"name":"{name}","kind":"module","thread":1,"ts":{i}}}"#
            ));
        }
        for i in (1..=100u64).rev() {
            lines.push(format!(
                r#"{{"type":"span_end","id":{i},"ts":{}}}"#,
                300 - i
            ));
        }
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        load(&testkit::hand_trace(&refs))
    };
    let (a, b) = (chain("left"), chain("right"));
    let (ta, tb) = (span_tree(&a), span_tree(&b));
    assert_eq!(ta.nodes.last().unwrap().path, tb.nodes.last().unwrap().path);
    let pairs = pair_nodes(&ta, &tb);
    let paired = pairs
        .iter()
        .filter(|(x, y)| x.is_some() && y.is_some())
        .count();
    assert_eq!(paired, 49, "only the names above the difference pair");
    assert_eq!(pairs.len(), 49 + 51 + 51);
    let cache = new_step_cache();
    let c = compare(&a, &b, &cache).unwrap();
    assert_eq!(c.spans.len(), 49 + 51 + 51);
}

#[test]
fn sums_past_u64_max_saturate_with_a_flag_instead_of_wrapping() {
    let t = load(&testkit::overflowing_sums());
    let m = memory_report(&t).unwrap();
    let d = &m.devices[0];
    // 2^63 + 2^63 + 100 bytes live: not "100 B".
    assert_eq!(d.peak_bytes, u64::MAX);
    assert!(d.saturated);
    assert_eq!(d.peak_by_category.activation, u64::MAX);
    let json = serde_json::to_value(d).unwrap();
    assert_eq!(json["saturated"], true);

    let cache = new_step_cache();
    let s = summarize(&t, &cache).unwrap();
    // Steps of ~2^64 ns each: the total is capped and flagged, not 4.
    assert_eq!(s.steps.total_ns, u64::MAX);
    assert!(s.steps.saturated);
    let ops = op_table(&t, &OpTableOptions::default());
    assert!(ops.saturated);
    assert_eq!(ops.rows[0].total_ns, u64::MAX);
    assert_eq!(ops.step_time_ns, Some(u64::MAX));
    // And the comparison and span tree of such a trace do not overflow either.
    compare(&t, &t, &cache).unwrap();
    span_tree(&t);
}

#[test]
fn a_flag_only_when_a_sum_overflows() {
    let t = load(&testkit::allocations(1000, false));
    assert!(!memory_report(&t).unwrap().devices[0].saturated);
    let json = serde_json::to_value(memory_report(&t).unwrap()).unwrap();
    assert!(json["devices"][0].get("saturated").is_none());
}

#[test]
fn structured_ids_give_the_same_memory_figures_as_dense_ids() {
    let n = 250_000u64;
    let a = load(&testkit::allocations(n, true));
    let b = load(&testkit::allocations(n, false));
    let (ma, mb) = (memory_report(&a).unwrap(), memory_report(&b).unwrap());
    let (da, db) = (&ma.devices[0], &mb.devices[0]);
    assert_eq!(da.peak_bytes, 64 * n);
    assert_eq!(
        (da.peak_bytes, da.allocs, da.frees, da.end_bytes),
        (db.peak_bytes, db.allocs, db.frees, db.end_bytes)
    );
    // Work counted by the analysis is the same for both id layouts (no hash degradation is
    // visible in work units; the wall-time ratio is in the hostile bench).
    assert_eq!(a.work.get(), b.work.get());
}

#[test]
fn the_partial_step_is_left_out_of_every_step_time_alike() {
    let mut bytes = Vec::new();
    testkit::write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 1050,
            ops_per_step: 100,
            truncate: true,
            ..SynthConfig::default()
        },
    )
    .unwrap();
    let t = load(&bytes);
    assert!(t.is_incomplete());
    let partial = t.partial_step().expect("a partial step");
    assert!(partial.ops.1 > partial.ops.0, "the partial step has ops");
    let cache = new_step_cache();
    let s = summarize(&t, &cache).unwrap();
    let ops = op_table(&t, &OpTableOptions::default());
    assert_eq!(ops.step_time_ns, Some(s.steps.total_ns));
    // Shares are of whole steps only: they add up to at most 1.
    let shares: f64 = ops.rows.iter().filter_map(|r| r.share_of_step).sum();
    assert!(shares <= 1.0 + 1e-9, "{shares}");
}

#[test]
fn a_step_index_of_u64_max_loads() {
    // Fuzz: `index + 1` overflowed when closing a step whose index is u64::MAX.
    let text = testkit::hand_trace(&[
        &format!(r#"{{"type":"step","index":{},"ts":1}}"#, u64::MAX),
        r#"{"type":"op","name":"add","in":[1],"out":[2],"shape":[2],"dtype":"f32","ts":2,"dur":1,"out_b":8}"#,
        r#"{"type":"step","index":0,"ts":5}"#,
    ]);
    let t = load(&text);
    assert!(!t.steps.is_empty());
    summarize(&t, &new_step_cache()).unwrap();
}
