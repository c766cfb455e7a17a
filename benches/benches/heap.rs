//! Benchmark suite `heap`: what trace-candle's tracking allocator (`TrackingAlloc`) costs.
//!
//! This binary declares the tracking allocator as its global allocator, as a user's program
//! does. Rows:
//! - `heap/alloc_untracked ns_per_pair`: a `Vec` allocated and freed (64 B and 64 KiB)
//!   through the tracking allocator with no tracker running: one relaxed load over the
//!   system allocator (the system allocator alone cannot be timed in the same binary without
//!   unsafe code; `cargo run --release -p trace-heap --example alloc_cost_system` prints it).
//! - `heap/alloc_tracked ns_per_pair`: the same inside a recorded window with a tracker
//!   running: a 64 B allocation is counted per scope, a 64 KiB one is written to the
//!   tracker's buffer (its `heap_alloc` / `heap_free` lines), against the untracked pair.
//! - `heap/train_step ns_per_step (median)`: one step of `tracegraph demo`'s trainer with every
//!   capture on and heap tracking on, against the same profiled step with no tracker (the
//!   tracker is started before and stopped after each tracked step, outside the timed region,
//!   since one tracker records every thread's allocations). Target: ratio ≤ 1.05.

#[global_allocator]
static ALLOC: trace_candle::TrackingAlloc = trace_candle::TrackingAlloc::system();

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use trace_candle::{Capture, HeapConfig};
use trace_record::schema::{Phase, Schedule, SpanKind};
use trace_record::{Run, TraceSession};
use tracegraph_benches::{Row, criterion_mean_ns, emit, median, quick};

// The trainer `tracegraph demo` runs: one home (the CLI), measured here as is.
#[path = "../../crates/tracegraph/src/demo/mlp.rs"]
#[allow(dead_code)]
mod mlp;

use mlp::MlpTrainer;

const SIZES: [usize; 2] = [64, 65_536];

fn pair(bytes: usize) {
    let v: Vec<u8> = black_box(Vec::with_capacity(bytes));
    drop(black_box(v));
}

fn alloc_groups(c: &mut Criterion) {
    let mut g = c.benchmark_group("heap_alloc");
    for bytes in SIZES {
        g.bench_function(format!("untracked_{bytes}"), |b| b.iter(|| pair(bytes)));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let run = Run::new("benches::heap::alloc", Phase::Infer, "cpu");
    let capture = Capture::open(dir.path().join("alloc.jsonl"), run).expect("trace file");
    capture
        .track_heap(HeapConfig::default())
        .expect("the tracking allocator is this binary's global allocator");
    {
        let _span = capture.span("loop", SpanKind::Function);
        for bytes in SIZES {
            g.bench_function(format!("tracked_{bytes}"), |b| b.iter(|| pair(bytes)));
        }
    }
    g.finish();
    let stats = capture.stop_heap().expect("tracking");
    capture.finish().expect("finish");
    assert!(stats.allocs > 0, "nothing tracked: {stats:?}");
    eprintln!("heap/alloc: {stats:?}");
}

fn alloc_rows() {
    for bytes in SIZES {
        let (Some(off), Some(on)) = (
            criterion_mean_ns(&format!("heap_alloc/untracked_{bytes}")),
            criterion_mean_ns(&format!("heap_alloc/tracked_{bytes}")),
        ) else {
            eprintln!("bench-row: heap/alloc_* skipped (a benchmark did not run)");
            return;
        };
        let what = if bytes >= trace_candle::DEFAULT_THRESHOLD {
            "tracked one by one"
        } else {
            "counted per scope"
        };
        emit(Row::new(
            &format!("heap/alloc_untracked_{bytes}B"),
            "ns_per_pair",
            off,
            "ns",
        ));
        emit(
            Row::new(
                &format!("heap/alloc_tracked_{bytes}B"),
                "ns_per_pair",
                on,
                "ns",
            )
            .vs(&format!("untracked ({what} when tracking)"), off),
        );
    }
}

fn train_step_rows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = Run::new("benches::heap", Phase::Train, "cpu").schedule(Schedule::always());
    let session =
        Arc::new(TraceSession::open(dir.path().join("heap.jsonl"), run).expect("trace file"));
    let capture = Capture::new(Arc::clone(&session));
    let mut trainer = MlpTrainer::new(Some(&capture), 42, 0.01).expect("trainer");
    let (warmup, budget, min_rounds, max_rounds) = if quick() {
        (5, Duration::from_secs(12), 20, 400)
    } else {
        (20, Duration::from_secs(60), 100, 4000)
    };
    for _ in 0..warmup {
        black_box(trainer.step().expect("step"));
    }
    let time = |trainer: &mut MlpTrainer, tracked: bool| {
        if tracked {
            capture.track_heap(HeapConfig::default()).expect("tracker");
        }
        let start = Instant::now();
        black_box(trainer.step().expect("step"));
        let ns = start.elapsed().as_nanos() as f64;
        if tracked {
            capture.stop_heap().expect("tracking");
        }
        ns
    };
    let (mut t_on, mut t_off) = (Vec::new(), Vec::new());
    let started = Instant::now();
    let mut round = 0usize;
    while round < max_rounds && (round < min_rounds || started.elapsed() < budget) {
        if (round / 2).is_multiple_of(2) {
            t_off.push(time(&mut trainer, false));
            t_on.push(time(&mut trainer, true));
        } else {
            t_on.push(time(&mut trainer, true));
            t_off.push(time(&mut trainer, false));
        }
        round += 1;
    }
    let summary = session.finish().expect("finish");
    assert!(summary.counts.op > 0, "capture recorded nothing");
    let mut paired: Vec<f64> = t_on.iter().zip(&t_off).map(|(a, b)| a / b).collect();
    eprintln!("heap/train_step: {round} alternating rounds");
    emit(
        Row::new(
            "heap/train_step",
            "ns_per_step (median)",
            median(&mut t_on),
            "ns",
        )
        .vs(
            "the same profiled step, no heap tracker (alternating)",
            median(&mut t_off),
        ),
    );
    emit(Row::new(
        "heap/train_step",
        "median_paired_ratio",
        median(&mut paired),
        "x",
    ));
}

fn main() {
    let mut c = tracegraph_benches::criterion();
    alloc_groups(&mut c);
    c.final_summary();
    alloc_rows();
    train_step_rows();
}
