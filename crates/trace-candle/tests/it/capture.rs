//! The capture: op records, categories by execution step, step frees, schedule.

use candle_core::{DType, Device, Tensor};
use trace_candle::tensor_id;
use trace_record::Run;
use trace_record::schema::{
    AllocKind, Event, ExecStep, MemoryCategory, Phase, Schedule, TimingMode,
};

use super::{capture, capture_with, events, finish_and_read, synchronized_capture};

fn ones(shape: (usize, usize)) -> Tensor {
    Tensor::ones(shape, DType::F32, &Device::Cpu).unwrap()
}

#[test]
fn an_op_records_op_output_tensor_and_activation_alloc() {
    let (capture, sink) = capture(Phase::Infer);
    let x = ones((2, 3));
    let w = ones((3, 4));
    let y = {
        let _span = capture.span("block", trace_record::schema::SpanKind::Function);
        capture.op("matmul", &[&x, &w], || x.matmul(&w)).unwrap()
    };
    assert_eq!(y.to_vec2::<f32>().unwrap(), vec![vec![3.0f32; 4]; 2]);
    assert_eq!(capture.step(), 1);
    let trace = finish_and_read(&capture, &sink);
    let span_id = events(&trace)
        .find_map(|e| match e {
            Event::SpanStart(s) if s.name == "block" => Some(s.id),
            _ => None,
        })
        .unwrap();
    let op = events(&trace)
        .find_map(|e| match e {
            Event::Op(op) => Some(op.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(op.name, "matmul");
    assert_eq!(op.span, Some(span_id));
    assert_eq!(op.inputs, vec![tensor_id(&x), tensor_id(&w)]);
    assert_eq!(op.outputs, vec![tensor_id(&y)]);
    assert_eq!(op.shape, vec![2, 4]);
    assert_eq!(op.dtype, "f32");
    assert_eq!(op.device, "cpu");
    assert_eq!(op.in_bytes, 24 + 48);
    assert_eq!(op.out_bytes, 32);
    assert_eq!(op.category, Some(MemoryCategory::Activation));
    assert_eq!(op.flops, None);
    let tensor = events(&trace)
        .find_map(|e| match e {
            Event::Tensor(t) => Some(t.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        (tensor.id, tensor.shape.clone(), tensor.bytes, tensor.span),
        (tensor_id(&y), vec![2, 4], 32, Some(span_id))
    );
    let memory: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::Memory(m) => Some((m.kind, m.storage, m.bytes, m.category)),
            _ => None,
        })
        .collect();
    let id = tensor_id(&y);
    assert_eq!(
        memory,
        vec![
            (AllocKind::Alloc, id, 32, MemoryCategory::Activation),
            (AllocKind::Free, id, 32, MemoryCategory::Activation),
        ]
    );
}

#[test]
fn op_lines_are_adjacent_and_the_alloc_is_stamped_at_the_op_end() {
    let (capture, sink) = capture(Phase::Infer);
    let x = ones((2, 2));
    let mut ys = Vec::new();
    for _ in 0..3 {
        ys.push(capture.op("exp", &[&x], || x.exp()).unwrap());
    }
    // An op returning its input: op and tensor lines, no allocation.
    let same = capture.op("identity", &[&x], || Ok(x.clone())).unwrap();
    assert_eq!(tensor_id(&same), tensor_id(&x));
    capture.step();
    let trace = finish_and_read(&capture, &sink);
    let evs: Vec<&Event> = events(&trace).collect();
    let mut ops = 0;
    for (i, e) in evs.iter().enumerate() {
        let Event::Op(op) = e else { continue };
        ops += 1;
        let out = op.outputs[0];
        match evs.get(i + 1) {
            Some(Event::Tensor(t)) => assert_eq!(t.id, out),
            other => panic!("op {out} followed by {other:?}"),
        }
        match (op.name.as_str(), evs.get(i + 2)) {
            ("identity", Some(Event::Memory(m))) => {
                assert_ne!((m.kind, m.storage), (AllocKind::Alloc, out));
            }
            ("identity", _) => {}
            (_, Some(Event::Memory(m))) => {
                assert_eq!((m.kind, m.storage, m.tensor), (AllocKind::Alloc, out, out));
                assert_eq!(m.ts, op.ts + op.dur);
            }
            (_, other) => panic!("op {out}: no allocation after its tensor: {other:?}"),
        }
    }
    assert_eq!(ops, 4);
    let allocs = events(&trace)
        .filter(|e| matches!(e, Event::Memory(m) if m.kind == AllocKind::Alloc))
        .count();
    assert_eq!(allocs, 3);
}

#[test]
fn categories_follow_the_execution_step() {
    let (capture, sink) = capture(Phase::Train);
    let x = ones((2, 2));
    let mut outputs = Vec::new();
    outputs.push(capture.op("outside", &[&x], || x.exp()).unwrap());
    for step in [ExecStep::Forward, ExecStep::Backward, ExecStep::Optimizer] {
        let _phase = capture.phase("phase", step);
        outputs.push(capture.op("exp", &[&x], || x.exp()).unwrap());
    }
    capture.step();
    let trace = finish_and_read(&capture, &sink);
    let cats: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::Op(op) => op.category,
            _ => None,
        })
        .collect();
    assert_eq!(
        cats,
        vec![
            MemoryCategory::Activation,
            MemoryCategory::Activation,
            MemoryCategory::Gradient,
            MemoryCategory::OptimizerState,
        ]
    );
    let steps: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::SpanStart(s) => s.step,
            _ => None,
        })
        .collect();
    assert_eq!(
        steps,
        vec![ExecStep::Forward, ExecStep::Backward, ExecStep::Optimizer]
    );
    // Four step allocations, four frees.
    let frees = events(&trace)
        .filter(|e| matches!(e, Event::Memory(m) if m.kind == AllocKind::Free))
        .count();
    assert_eq!(frees, 4);
}

#[test]
fn outside_an_active_window_an_op_only_runs_the_closure() {
    let schedule = Schedule {
        skip_first: 1,
        wait: 0,
        warmup: 0,
        active: 1,
        repeat: 1,
    };
    let (capture, sink) = capture_with(Run::new("tests", Phase::Infer, "cpu").schedule(schedule));
    let x = ones((2, 2));
    let mut ran = 0;
    for _ in 0..3 {
        let y = capture
            .op("exp", &[&x], || {
                ran += 1;
                x.exp()
            })
            .unwrap();
        assert_eq!(y.dims(), &[2, 2]);
        capture.step();
    }
    assert_eq!(ran, 3);
    let trace = finish_and_read(&capture, &sink);
    // Only step 1 was active.
    assert_eq!(trace.trailer.as_ref().unwrap().counts.op, 1);
    assert_eq!(trace.trailer.as_ref().unwrap().counts.memory, 2);
}

#[test]
fn device_synchronized_runs_time_device_work() {
    let (capture, sink) = synchronized_capture();
    assert!(capture.synchronizes());
    let x = ones((8, 8));
    let y = capture.op("matmul", &[&x, &x], || x.matmul(&x)).unwrap();
    assert_eq!(y.dims(), &[8, 8]);
    capture.step();
    let trace = finish_and_read(&capture, &sink);
    assert_eq!(trace.header.run.timing, TimingMode::DeviceSynchronized);
    assert_eq!(trace.trailer.as_ref().unwrap().counts.op, 1);
}

#[test]
fn an_op_returning_its_input_allocates_nothing_and_errors_record_nothing() {
    let (capture, sink) = capture(Phase::Infer);
    let x = ones((2, 2));
    let same = capture.op("identity", &[&x], || Ok(x.clone())).unwrap();
    assert_eq!(tensor_id(&same), tensor_id(&x));
    let err = capture.op("bad", &[&x], || x.matmul(&ones((3, 3))));
    assert!(err.is_err());
    capture.step();
    let trace = finish_and_read(&capture, &sink);
    let counts = trace.trailer.as_ref().unwrap().counts;
    assert_eq!((counts.op, counts.memory), (1, 0));
}

#[test]
fn inputs_are_recorded_as_input_allocations() {
    let (capture, sink) = capture(Phase::Train);
    let x = ones((4, 2));
    capture.record_input(&x, "x");
    capture.record_input(&x, "x again");
    capture.step();
    let trace = finish_and_read(&capture, &sink);
    let mem: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::Memory(m) => Some((m.kind, m.category, m.bytes)),
            _ => None,
        })
        .collect();
    // A live storage is not allocated twice.
    assert_eq!(
        mem,
        vec![
            (AllocKind::Alloc, MemoryCategory::Input, 32),
            (AllocKind::Free, MemoryCategory::Input, 32),
        ]
    );
}

#[test]
fn ops_timed_by_the_caller_are_recorded_with_their_times() {
    let (capture, sink) = capture(Phase::Infer);
    let x = ones((3, 3));
    let start = capture.session().now_ns();
    let y = x.sqr().unwrap();
    let end = capture.session().now_ns();
    capture.record_op("sqr", &[&x], &y, start, end);
    capture.step();
    let trace = finish_and_read(&capture, &sink);
    let op = events(&trace)
        .find_map(|e| match e {
            Event::Op(op) => Some(op.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!((op.ts, op.dur), (start, end - start));
    assert_eq!((op.in_bytes, op.out_bytes), (36, 36));
    assert_eq!(op.outputs, vec![tensor_id(&y)]);
    let kinds: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::Memory(m) => Some(m.kind),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, vec![AllocKind::Alloc, AllocKind::Free]);
}

#[test]
fn a_flops_count_is_written_when_given() {
    let (capture, sink) = capture(Phase::Infer);
    let x = ones((2, 3));
    let w = ones((3, 4));
    capture
        .op_with_flops("matmul", &[&x, &w], 2 * 2 * 3 * 4, || x.matmul(&w))
        .unwrap();
    capture.step();
    let trace = finish_and_read(&capture, &sink);
    let flops: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::Op(op) => Some(op.flops),
            _ => None,
        })
        .collect();
    assert_eq!(flops, vec![Some(48)]);
}

/// Without the `sampler` feature the capture still has `sample_stacks`: it checks the rate,
/// reports that sampling is unavailable and writes no sampled line.
#[cfg(not(feature = "sampler"))]
#[test]
fn without_the_sampler_feature_sampling_is_unavailable() {
    use trace_candle::{SamplerConfig, SamplerError};
    let (capture, sink) = capture(Phase::Infer);
    assert!(matches!(
        capture.sample_stacks(SamplerConfig::hz(0)),
        Err(SamplerError::InvalidRate { hz: 0 })
    ));
    assert!(matches!(
        capture.sample_stacks(SamplerConfig::default()),
        Err(SamplerError::Unavailable { .. })
    ));
    assert!(capture.sampler_stats().is_none());
    let _phase = capture.phase("forward", ExecStep::Forward);
    drop(_phase);
    capture.step();
    let trace = finish_and_read(&capture, &sink);
    assert!(!events(&trace).any(|e| matches!(
        e,
        Event::Frame(_) | Event::Stack(_) | Event::Samples(_) | Event::Sampler(_)
    )));
}

#[test]
fn an_error_reads_in_words_through_debug_too() {
    // What `fn main() -> Result<(), CaptureError>` prints: `Debug`.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing/dir/t.jsonl");
    let err = trace_candle::Capture::open(
        &path,
        Run::new("tests", trace_record::schema::Phase::Train, "cpu"),
    )
    .expect_err("the directory does not exist");
    let shown = format!("{err:?}");
    assert_eq!(shown, err.to_string());
    assert!(shown.contains("missing/dir/t.jsonl"), "{shown}");
    assert!(shown.contains("No such file or directory"), "{shown}");
    assert!(
        !shown.contains("Io {") && !shown.contains("Os {"),
        "{shown}"
    );
}

/// Resident-memory samples (`device_memory`) at step ends: at most one a millisecond, and
/// always one at the run's end.
#[cfg(target_os = "linux")]
#[test]
fn memory_is_sampled_at_step_ends_at_most_once_a_millisecond() {
    let samples = |trace: &super::Trace| {
        events(trace)
            .filter(|e| matches!(e, Event::DeviceMemory(_)))
            .count()
    };
    // Slow steps: each step end samples.
    let (capture, sink) = super::capture(Phase::Infer);
    let capture = capture.sampling_memory(&Device::Cpu);
    for _ in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(2));
        capture.step();
    }
    capture.finish().unwrap();
    let trace = read_finished(&sink);
    assert_eq!(samples(&trace), 6, "five step ends and the finish");

    // Fast steps (a decode loop): no two samples less than 1 ms apart, the finish still sampled.
    let (capture, sink) = super::capture(Phase::Infer);
    let capture = capture.sampling_memory(&Device::Cpu);
    let start = std::time::Instant::now();
    for _ in 0..2000 {
        capture.step();
    }
    let elapsed_ms = start.elapsed().as_millis() as usize;
    capture.finish().unwrap();
    let trace = read_finished(&sink);
    let ts: Vec<u64> = events(&trace)
        .filter_map(|e| match e {
            Event::DeviceMemory(m) => Some(m.ts),
            _ => None,
        })
        .collect();
    assert!(ts.len() >= 2, "the first step end and the finish: {ts:?}");
    assert!(
        ts.len() <= elapsed_ms + 2,
        "{} samples in {elapsed_ms} ms",
        ts.len()
    );
    // The 1 ms is between the step ends' checks; each sample's own stamp comes after its
    // procfs read, so two stamps may be closer by that read's jitter (or a preemption in it).
    let gaps = ts.windows(2).take(ts.len().saturating_sub(2));
    assert!(gaps.into_iter().all(|w| w[1] - w[0] >= 500_000), "{ts:?}");
}

/// The trace of a capture already finished (`Capture::finish`), read back strictly; asserts it
/// validates.
fn read_finished(sink: &trace_record::MemorySink) -> super::Trace {
    let bytes = sink.bytes();
    let reader =
        trace_record::TraceReader::new(bytes.as_slice(), trace_record::ReadOptions::strict())
            .unwrap();
    let trace = super::Trace::from_reader(reader).unwrap();
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "validation issues: {issues:?}");
    trace
}

/// Under a schedule, a KV cache declared step after step while inactive does not leak its
/// warm-up size into the first recorded step: that step's own declaration is what is
/// recorded. A buffer declared once while inactive (static) is still recorded there.
#[test]
fn buffers_declared_while_inactive_do_not_leak_into_the_first_recorded_step() {
    let schedule = Schedule {
        skip_first: 0,
        wait: 0,
        warmup: 3,
        active: 1,
        repeat: 1,
    };
    let (capture, sink) = capture_with(Run::new("tests", Phase::Infer, "cpu").schedule(schedule));
    let dev = candle_core::Device::Cpu;
    capture.buffer_shape("static", &[8], candle_core::DType::F32, &dev);
    let x = ones((2, 2));
    for step in 0..4usize {
        // A new sequence starts in the recorded step: its cache restarts at one position.
        let positions = if step == 3 { 1 } else { step + 1 };
        let _ = capture.op("exp", &[&x], || x.exp()).unwrap();
        capture.buffer_shape("kv_cache", &[positions, 4], candle_core::DType::F32, &dev);
        capture.step();
    }
    let trace = finish_and_read(&capture, &sink);
    let buffers: Vec<(String, Vec<usize>)> = events(&trace)
        .filter_map(|e| match e {
            Event::Tensor(t) if t.category == MemoryCategory::Other => {
                Some((t.label.clone().unwrap_or_default(), t.shape.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        buffers,
        [
            ("static".to_string(), vec![8]),
            ("kv_cache".to_string(), vec![1, 4])
        ],
        "the warm-up size [3, 4] never reaches the trace"
    );
}
