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
    assert_eq!(r.stable_from_step, Some(1));
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
