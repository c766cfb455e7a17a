//! The two loop shapes of a captured run: a step per iteration, no phantom step, no false leak.
//!
//! `step()` at the end of each iteration or at its start, `finish()` after the loop.

use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use trace_analyze::{
    LoadOptions, graph_report, load_path, memory_report, new_step_cache, summarize,
};
use trace_candle::{Capture, Phase, Run};

use crate::{run_in, stdout};

/// Iterations of each loop.
const ITERS: usize = 5;

/// Where the loop calls `step()`.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// `for .. { work; capture.step(); }`: the README's shape.
    StepAtEnd,
    /// `for .. { capture.step(); work; }`.
    StepAtStart,
}

/// One training iteration: two captured ops, a loss, `capture.backward` (autograd memory,
/// the parameter's gradient), an SGD update.
fn iteration(capture: &Capture, w: &Var, x: &Tensor) {
    let h = capture
        .op("matmul", &[x, w.as_tensor()], || x.matmul(w.as_tensor()))
        .unwrap();
    let y = capture.op("relu", &[&h], || h.relu()).unwrap();
    let loss = y.sqr().unwrap().mean_all().unwrap();
    let grads = capture.backward(&loss).unwrap();
    let g = grads.get(w.as_tensor()).expect("w has a gradient");
    w.set(&(w.as_tensor() - (g * 0.01).unwrap()).unwrap())
        .unwrap();
}

/// Runs a captured loop of [`ITERS`] iterations of `shape` into `path`: a parameter, a
/// declared buffer (a KV cache's size), and `finish()` at the end.
fn run_loop(shape: Shape, path: &Path) {
    let device = Device::Cpu;
    let capture = Capture::open(path, Run::new("tests::loops", Phase::Train, "cpu")).unwrap();
    let w = Var::ones((8, 4), DType::F32, &device).unwrap();
    capture.parameters([("w", w.as_tensor())]);
    let x = Tensor::ones((2, 8), DType::F32, &device).unwrap();
    for i in 0..ITERS {
        if matches!(shape, Shape::StepAtStart) {
            capture.step();
        }
        capture.buffer_shape("kv_cache", &[2, i + 1, 4], DType::F32, &device);
        iteration(&capture, &w, &x);
        if matches!(shape, Shape::StepAtEnd) {
            capture.step();
        }
    }
    capture.finish().unwrap();
}

fn check(shape: Shape) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loop.jsonl");
    run_loop(shape, &path);
    let trace = load_path(&path, LoadOptions { strict: true }).unwrap();

    // One step per iteration, each with the iteration's ops: no phantom (empty) step after
    // the last `step()` or before the first. At the end of each iteration, the first
    // iteration is step 0. At the start, the first `step()` closes step 0 (setup only:
    // nothing ran in it, so it is not a step) and the iterations are the steps that
    // `step()` returned, 1 to ITERS.
    let first = match shape {
        Shape::StepAtEnd => 0,
        Shape::StepAtStart => 1,
    };
    let indices: Vec<u64> = trace.steps.iter().map(|s| s.index).collect();
    assert_eq!(
        indices,
        (first..first + ITERS as u64).collect::<Vec<_>>(),
        "{shape:?}: one step per iteration, no phantom step"
    );
    // The commands, the Chrome steps track and `export --step` number them alike.
    assert_eq!(
        crate::steps::assert_steps_agree(&path),
        indices,
        "{shape:?}"
    );
    for i in 0..ITERS {
        assert_eq!(trace.step_ops(i).len(), 2, "{shape:?}: step {i} ops");
        assert!(trace.steps[i].duration_ns() > 0, "{shape:?}: step {i} time");
    }
    let cache = new_step_cache();
    let graphs = graph_report(&trace, &cache).unwrap();
    assert_eq!(graphs.steps.len(), ITERS, "{shape:?}");
    assert_eq!(graphs.distinct_graphs, 1, "{shape:?}: every step alike");
    let summary = summarize(&trace, &cache).unwrap();
    assert_eq!(summary.steps.count, ITERS, "{shape:?}");
    assert!(
        summary.steps.spread.as_ref().is_some_and(|s| s.min > 0),
        "{shape:?}: no 0 ns step"
    );

    // Activations, autograd memory and the buffer are all freed: no false leak.
    let mem = memory_report(&trace).unwrap();
    assert_eq!(mem.devices.len(), 1);
    let cpu = &mem.devices[0];
    assert_eq!(
        cpu.possible_leak_count, 0,
        "{shape:?}: {:?}",
        cpu.possible_leaks
    );
    assert_eq!(cpu.unmatched_frees, 0, "{shape:?}");
    assert!(cpu.peak_by_category.parameter > 0, "{shape:?}");

    // The CLI agrees.
    let out = run_in(dir.path(), &["summary", "loop.jsonl"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("{ITERS} steps, mean")),
        "{shape:?}: {text}"
    );
}

#[test]
fn step_at_the_end_of_each_iteration_then_finish() {
    check(Shape::StepAtEnd);
}

#[test]
fn step_at_the_start_of_each_iteration_then_finish() {
    check(Shape::StepAtStart);
}
