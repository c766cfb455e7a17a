//! Tests of the demo run: the loss falls, runs are deterministic, the trace validates.

use trace_record::schema::Event;
use trace_record::{ReadOptions, validate_file};

use super::mlp::{CLASSES, FEATURES, HIDDEN, SAMPLES};
use super::{MlpDemoConfig, run_mlp_demo};

#[test]
fn demo_loss_goes_down_and_the_trace_validates_strictly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/demo.trace.jsonl");
    let report = run_mlp_demo(&MlpDemoConfig::new(&path)).unwrap();
    assert_eq!(report.trace_path, path);
    assert_eq!(report.losses.len(), 50);
    assert_eq!(report.first_loss, report.losses[0]);
    assert_eq!(report.last_loss, report.losses[49]);
    assert!(report.losses.iter().all(|l| l.is_finite()));
    assert!(
        report.last_loss < 0.5 * report.first_loss,
        "loss did not go down: {:?}",
        report.losses
    );
    // Over the run, the loss mostly falls: every 10-step window ends below where it began.
    for w in report.losses.chunks(10) {
        assert!(w[w.len() - 1] < w[0], "{:?}", report.losses);
    }
    assert!(report.accuracy > 0.9, "{}", report.accuracy);
    // skip 5, warmup 2, active 3, repeat 2.
    assert_eq!(report.recorded_steps, vec![7, 8, 9, 12, 13, 14]);
    let v = validate_file(&path, ReadOptions::strict()).unwrap();
    assert!(v.issues.is_empty(), "{:?}", v.issues);
    assert!(!v.incomplete);
    assert_eq!(v.counts, report.summary.counts);
    assert_eq!(v.counts.step, 6);
    assert_eq!(v.counts.gradient, 6 * 6);
    assert!(v.counts.op > 0 && v.counts.memory > 0);
    // Matmuls carry their FLOP count: 2 · batch · in · out for each of the three layers.
    let trace = trace_record::read_trace(&path).unwrap();
    let mut flops: Vec<u64> = trace
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Op(op) if op.name == "matmul" => op.flops,
            _ => None,
        })
        .take(3)
        .collect();
    flops.sort_unstable();
    let (b, f, h, c) = (
        SAMPLES as u64,
        FEATURES as u64,
        HIDDEN as u64,
        CLASSES as u64,
    );
    assert_eq!(flops, vec![2 * b * h * c, 2 * b * f * h, 2 * b * h * h]);
}

#[test]
fn demo_is_deterministic_given_the_seed() {
    let dir = tempfile::tempdir().unwrap();
    let run = |seed, name: &str| {
        let mut config = MlpDemoConfig::new(dir.path().join(name));
        config.steps = 6;
        config.seed = seed;
        run_mlp_demo(&config).unwrap().losses
    };
    let a = run(7, "a.jsonl");
    assert_eq!(a, run(7, "b.jsonl"));
    assert_ne!(a, run(8, "c.jsonl"));
}

#[test]
fn demo_rejects_bad_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unused.jsonl");
    let mut config = MlpDemoConfig::new(&path);
    config.steps = 0;
    let e = run_mlp_demo(&config).unwrap_err();
    assert!(e.to_string().contains("steps must be at least 1"), "{e:#}");
    config.steps = 1;
    config.learning_rate = f64::NAN;
    let e = run_mlp_demo(&config).unwrap_err();
    assert!(e.to_string().contains("learning rate"), "{e:#}");
    // Rejected before anything is written.
    assert!(!path.exists());
}

/// `tracegraph demo --sample`: sampled stacks break backward into kernels.
#[test]
fn the_sampled_demo_breaks_backward_into_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sampled.trace.jsonl");
    let mut config = MlpDemoConfig::new(&path);
    config.sample = Some(trace_candle::SamplerConfig::default());
    let report = run_mlp_demo(&config).unwrap();
    let v = validate_file(&path, ReadOptions::strict()).unwrap();
    assert!(v.issues.is_empty(), "{:?}", v.issues);
    assert_eq!(v.counts, report.summary.counts);
    // One `sampler` line per recorded step, samples only in recorded steps.
    assert_eq!(v.counts.sampler, 6);
    let trace = trace_analyze::load_path(&path, Default::default()).unwrap();
    let recorded = [7, 8, 9, 12, 13, 14];
    assert!(
        trace
            .sampled
            .samples
            .iter()
            .all(|s| recorded.contains(&s.step))
    );
    let hot = trace_analyze::hot_report(
        &trace,
        &trace_analyze::HotOptions {
            by: trace_analyze::HotBy::Phase,
            ..Default::default()
        },
    );
    assert_eq!(hot.samples, hot.sampler.taken);
    let backward = hot
        .phases
        .iter()
        .find(|p| p.phase == "backward")
        .expect("backward samples");
    assert!(
        backward.top.len() >= 3,
        "backward broken into {} function(s): {:?}",
        backward.top.len(),
        backward.top
    );
}
