//! `summary` prints the capture's estimate of its own recording time, per step.

use candle_core::{Device, Tensor};
use trace_candle::{Capture, Phase, Run};
use trace_record::schema::{Schedule, SpanKind};

use crate::{run_in, stdout};

/// A capture of `steps` steps of a span and an op each, under `schedule`.
fn record(path: &std::path::Path, steps: usize, schedule: Option<Schedule>) {
    let mut run = Run::new("tests::overhead", Phase::Infer, "cpu");
    if let Some(s) = schedule {
        run = run.schedule(s);
    }
    let capture = Capture::open(path, run).unwrap();
    let x = Tensor::new(&[1f32, 2.0, 3.0, 4.0], &Device::Cpu).unwrap();
    for _ in 0..steps {
        let _span = capture.span("work", SpanKind::Function);
        let y = capture.op("affine", &[&x], || x.affine(2.0, 1.0)).unwrap();
        drop(y);
        drop(_span);
        capture.step();
    }
    capture.finish().unwrap();
}

#[test]
fn summary_prints_the_profilers_own_cost_per_step() {
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    record(&dir.path().join("o.jsonl"), 3, None);
    let recording_ns = started.elapsed().as_nanos() as u64;
    let out = run_in(dir.path(), &["summary", "o.jsonl"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains("profiler  its own recording took about"),
        "{text}"
    );
    let out = run_in(dir.path(), &["summary", "--json", "o.jsonl"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let o = &v["overhead"];
    let total = o["total_ns"].as_u64().unwrap();
    // Three spans, three ops, three boundaries: real work, and no more than the whole
    // recording took. Every part of the estimate is time spent inside `record` (the block
    // writes as they ran; each kind's median cold cost, timed at the finish over 16 to 64
    // calls, times the 3 of that kind the trace holds: at most the time of the calls timed),
    // so this bound holds however loaded the machine; what the estimate comes to on a
    // quiet one is the `capture` bench's concern, not a test's.
    assert!(
        (1..=recording_ns).contains(&total),
        "{o}: {recording_ns} ns recording"
    );
    let steps = v["steps"]["count"].as_u64().unwrap();
    assert_eq!(o["per_step_ns"].as_u64(), Some(total / steps), "{v}");
}

#[test]
fn a_run_that_ends_outside_its_windows_has_no_estimate() {
    let dir = tempfile::tempdir().unwrap();
    let schedule = Schedule {
        skip_first: 0,
        wait: 0,
        warmup: 0,
        active: 2,
        repeat: 1,
    };
    record(&dir.path().join("s.jsonl"), 6, Some(schedule));
    let out = run_in(dir.path(), &["summary", "--json", "s.jsonl"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.get("overhead").is_none(), "{v}");
}
