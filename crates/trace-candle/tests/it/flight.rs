//! A capture in flight-recorder mode on real Candle ops: the ring holds the steps, a NaN loss
//! computed by Candle and a call each make one dump, a strictly valid trace of the steps
//! before it with their ops.

use candle_core::{DType, Device, Tensor};
use trace_candle::{Capture, DumpTrigger, FlightConfig, Phase, Run};
use trace_record::schema::Event;
use trace_record::{ReadOptions, read_trace, validate_file};

/// One step of real work: a matmul and a mean, recorded as ops; the loss is NaN when
/// `poison` (a NaN input, as a diverged run's would be).
fn step(capture: &Capture, poison: bool) -> f64 {
    let fill = if poison { f32::NAN } else { 0.5 };
    let x = Tensor::full(fill, (4, 8), &Device::Cpu).unwrap();
    let w = Tensor::ones((8, 2), DType::F32, &Device::Cpu).unwrap();
    let y = capture.op("matmul", &[&x, &w], || x.matmul(&w)).unwrap();
    let loss = capture.op("mean", &[&y], || y.mean_all()).unwrap();
    f64::from(loss.to_scalar::<f32>().unwrap())
}

#[test]
fn a_nan_loss_and_a_call_each_make_one_dump_of_real_ops() {
    let dir = tempfile::tempdir().unwrap();
    let capture = Capture::flight(
        Run::new("tests::flight", Phase::Train, "cpu").run_id("flight-test"),
        // No minimum interval between dumps: the default (10 s) refuses the second one here.
        FlightConfig::new(dir.path())
            .before(3)
            .min_interval(std::time::Duration::ZERO),
    )
    .unwrap();
    for i in 0..40 {
        let loss = step(&capture, i == 25);
        capture.loss(loss);
        if i == 33 {
            assert!(capture.dump("looked at it"));
        }
        capture.step();
    }
    capture.finish().unwrap();
    let stats = capture.flight_stats().expect("a flight recorder");
    assert_eq!(stats.dumps.len(), 2, "{stats:?}");
    let mut triggers = Vec::new();
    for path in &stats.dumps {
        let v = validate_file(path, ReadOptions::strict()).unwrap();
        assert!(v.issues.is_empty(), "{}: {:?}", path.display(), v.issues);
        assert!(!v.incomplete, "{}", path.display());
        let trace = read_trace(path).unwrap();
        let dump = trace.dump.clone().unwrap();
        let ops = trace
            .events
            .iter()
            .filter(|e| matches!(&e.event, Event::Op(op) if op.name == "matmul"))
            .count();
        // The triggering step and the 3 before it, one matmul each.
        assert_eq!(ops, 4, "{}", path.display());
        assert_eq!(dump.last_step - dump.first_step, 3, "{dump:?}");
        triggers.push((dump.trigger, dump.trigger_step));
    }
    triggers.sort_by_key(|t| t.1);
    assert_eq!(
        triggers,
        [(DumpTrigger::NonFiniteLoss, 25), (DumpTrigger::Call, 33)]
    );
    // A capture that is no flight recorder has nothing to dump.
    let plain = Capture::open(
        dir.path().join("plain.jsonl"),
        Run::new("t", Phase::Train, "cpu"),
    )
    .unwrap();
    assert!(!plain.dump("no ring"));
    assert!(plain.flight_stats().is_none());
    plain.finish().unwrap();
}
