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
    assert!(c.warnings.is_empty());
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
