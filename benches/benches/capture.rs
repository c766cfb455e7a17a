//! Benchmark suite `capture`.
//!
//! trace-candle's cost on a real Candle training step and around a tiny op.
//!
//! Rows:
//! - `capture/train_step ns_per_step (median)`: one step of `tracegraph demo`'s trainer (full
//!   batch of 1024 × 32, MLP 32-128-128-4, AdamW, CPU; `crates/tracegraph/src/demo/mlp.rs`,
//!   included below) with every capture on (schedule always active: module spans, ops, inputs, parameters, gradient facts and norms, optimizer state,
//!   step frees; the trace is written to a file), against the same step with no
//!   instrumentation at all. The two trainers alternate step by step in one run (the order
//!   flips, so drift hits both alike) for a time budget (12 s quick, 60 s full), with two
//!   pairs of trainers created in opposite orders (creation order alone biased an A/A run
//!   by up to ~8% here); the figures are medians, robust to the preemptions of a shared
//!   machine. Target: ratio ≤ 1.05. `capture/train_step median_paired_ratio` is the median of the
//!   per-round ratios (on / off of the same round).
//! - `capture/probe_tiny_op ns_per_call`: `capture.op("affine", &[&x], || x.affine(2.0, 1.0))`
//!   on a 4-element tensor inside an active window (two clock reads, op + tensor + alloc
//!   events encoded; the session writes to `io::sink`, so disk speed is not measured),
//!   against the bare op. The overhead row (`overhead_ns`) is the difference. Target:
//!   ≤ 200 ns. Its baseline is the floor trace-record sets: the same op, tensor and alloc
//!   records plus two clock reads made directly on the session (no Candle op, no capture
//!   logic), so the ratio shows how much of the overhead is this crate's own. The op
//!   itself records through `TraceSession::record_op_with_output` (one lock, one span
//!   lookup, no clock read of its own; the allocation is stamped at the op's end).
//! - `capture/record_floor combined_ns`: those three events through that one combined call
//!   plus two clock reads, against the three separate calls (the floor above).
//! - `capture/step_end_free ns_per_alloc`: the step end (`Capture::step`) that frees those
//!   allocations (run every 256 calls, outside the calls' timed region), per free.
//! - `capture/probe_inactive overhead_ns`: the same call outside the active window (one
//!   relaxed atomic load) minus the bare op; `capture/probe_inactive_clone` does the same
//!   around a near-free op (`Tensor::clone`, an `Arc` increment) where a few ns show.
//! - `capture/step_boundary ns_per_step`: `Capture::step()` on a capture writing a file and
//!   sampling resident memory, as a decode loop pays it (the sample is taken at the first
//!   boundary a millisecond after the last), against the same boundary without sampling;
//!   `capture/memory_sample ns_per_sample`: one resident-memory sample (a procfs read). Target:
//!   a boundary with a sample ≤ 5 µs.
//! - `capture/tracing_span ns_per_span`: a model's `tracing` span entered and exited through the
//!   layer `Capture::install_tracing` installs (global subscriber, active session), against
//!   the same span with no subscriber (disabled, as in an unprofiled model). Target: ≤ 250 ns.
//!   It runs last, since it installs the process's global subscriber
//!   (`TRACEGRAPH_CAPTURE_TRACING=layer`: a registry with `TraceLayer::for_capture` instead,
//!   to compare).
//! - `capture/tracing_span_cold ns_per_span`: the same, but each timed enter/exit pair follows
//!   a 4 MiB write that evicts the capture's data from the core's caches, as a model's work
//!   between two of its spans does (the hot row's figure is what a tight loop pays; a decode
//!   step pays this one), against the same cold pair with no subscriber (medians of pairs,
//!   five rounds alternating).
//!
//! Set `RAYON_NUM_THREADS` for Candle's fast path (`cargo xtask bench` does): without it
//! candle-core reads /proc on every matmul, which inflates the bare op these rows compare
//! against.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::{Device, Tensor};
use criterion::Criterion;
use trace_candle::Capture;
use trace_record::schema::{AllocKind, MemoryCategory, Phase, Schedule};
use trace_record::{MemoryRecord, OpRecord, Run, TensorRecord, TraceSession};
use tracegraph_benches::{Row, criterion_mean_ns, emit, median, quick};

// The trainer `tracegraph demo` runs: one home (the CLI), measured here as is.
#[path = "../../crates/tracegraph/src/demo/mlp.rs"]
mod mlp;

use mlp::MlpTrainer;

const SEED: u64 = 42;
const LR: f64 = 0.01;

fn train_step_rows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = Run::new("benches::capture", Phase::Train, "cpu").schedule(Schedule::always());
    let session =
        Arc::new(TraceSession::open(dir.path().join("capture.jsonl"), run).expect("trace file"));
    let capture = Capture::new(Arc::clone(&session));
    // Two pairs of trainers, created in opposite orders: an A/A run of two uninstrumented
    // trainers showed the first-created one up to ~8% faster on this machine (allocation
    // placement), so each pair's bias cancels the other's.
    let mut pairs = Vec::new();
    for on_first in [true, false] {
        let (on, off) = if on_first {
            let on = MlpTrainer::new(Some(&capture), SEED, LR).expect("trainer");
            (on, MlpTrainer::new(None, SEED, LR).expect("trainer"))
        } else {
            let off = MlpTrainer::new(None, SEED, LR).expect("trainer");
            (
                MlpTrainer::new(Some(&capture), SEED, LR).expect("trainer"),
                off,
            )
        };
        pairs.push((on, off));
    }
    // Rounds run until the time budget is spent (bounded both ways): one round times one
    // step of each trainer of one pair, pairs taking turns and the order within a pair
    // flipping every other round.
    let (warmup, budget, min_rounds, max_rounds) = if quick() {
        (5, Duration::from_secs(12), 20, 400)
    } else {
        (20, Duration::from_mins(1), 100, 4000)
    };
    for (on, off) in &mut pairs {
        for _ in 0..warmup {
            black_box(on.step().expect("step"));
            black_box(off.step().expect("step"));
        }
    }
    let time = |trainer: &mut MlpTrainer| {
        let start = Instant::now();
        black_box(trainer.step().expect("step"));
        start.elapsed().as_nanos() as f64
    };
    let mut t_on = Vec::new();
    let mut t_off = Vec::new();
    let started = Instant::now();
    let mut round = 0usize;
    while round < max_rounds && (round < min_rounds || started.elapsed() < budget) {
        let (on, off) = &mut pairs[round % 2];
        if (round / 2).is_multiple_of(2) {
            t_off.push(time(off));
            t_on.push(time(on));
        } else {
            t_on.push(time(on));
            t_off.push(time(off));
        }
        round += 1;
    }
    let summary = session.finish().expect("finish");
    assert!(summary.counts.op > 0, "capture recorded nothing");
    let mut paired: Vec<f64> = t_on.iter().zip(&t_off).map(|(a, b)| a / b).collect();
    let (on_ns, off_ns) = (median(&mut t_on), median(&mut t_off));
    // Capture must not change what is computed: both trainers of a pair took the same steps.
    let (on, off) = &pairs[0];
    let (acc_on, acc_off) = (
        on.accuracy().expect("accuracy"),
        off.accuracy().expect("accuracy"),
    );
    eprintln!(
        "capture/train_step: {round} alternating rounds; training accuracy with / without \
         capture: {acc_on:.3} / {acc_off:.3}"
    );
    emit(
        Row::new("capture/train_step", "ns_per_step (median)", on_ns, "ns")
            .vs("same step, no instrumentation (alternating)", off_ns),
    );
    emit(Row::new(
        "capture/train_step",
        "median_paired_ratio",
        median(&mut paired),
        "x",
    ));
}

fn probe_groups(c: &mut Criterion) {
    let x = Tensor::new(&[1f32, 2.0, 3.0, 4.0], &Device::Cpu).expect("tensor");
    let active = TraceSession::from_writer(
        std::io::sink(),
        Run::new("benches::capture", Phase::Infer, "cpu"),
    );
    let active = Capture::new(Arc::new(active));
    let never = Schedule {
        skip_first: u64::MAX,
        wait: 0,
        warmup: 0,
        active: 1,
        repeat: 1,
    };
    let inactive = TraceSession::from_writer(
        std::io::sink(),
        Run::new("benches::capture", Phase::Infer, "cpu").schedule(never),
    );
    let inactive = Capture::new(Arc::new(inactive));
    let mut g = c.benchmark_group("capture_probe");
    g.bench_function("bare", |b| {
        b.iter(|| black_box(black_box(&x).affine(2.0, 1.0).expect("op")));
    });
    let mut frees = Duration::ZERO;
    let mut freed = 0u64;
    g.bench_function("active", |b| {
        b.iter_custom(|iters| {
            // Time the calls only; the step end (one free per allocation, timed apart below)
            // runs every 256 calls so the step's allocation list stays small.
            let mut timed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(256);
                let start = Instant::now();
                for _ in 0..n {
                    let y = active
                        .op("affine", &[&x], || black_box(&x).affine(2.0, 1.0))
                        .expect("op");
                    black_box(y);
                }
                timed += start.elapsed();
                // Each call allocated one fresh output: the step end frees `n`.
                let start = Instant::now();
                active.step();
                frees += start.elapsed();
                freed += n;
                left -= n;
            }
            timed
        });
    });
    // The floor under `Capture::op`: the same three trace-record calls (op, tensor, alloc) and
    // two clock reads made directly on the session, with no Candle op and no capture logic.
    let session = Arc::clone(active.session());
    let mut id = 1u64 << 40;
    g.bench_function("record_floor", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(256);
                let start = Instant::now();
                for _ in 0..n {
                    id += 1;
                    let t0 = session.now_ns();
                    let t1 = session.now_ns();
                    record_three(&session, id, t0, t1);
                }
                timed += start.elapsed();
                left -= n;
            }
            timed
        });
    });
    // The same three events through trace-record's combined call (one lock, one span
    // lookup, the allocation stamped at the op's end), as `Capture::op` records them.
    g.bench_function("record_floor_combined", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(256);
                let start = Instant::now();
                for _ in 0..n {
                    id += 1;
                    let t0 = session.now_ns();
                    let t1 = session.now_ns();
                    record_combined(&session, id, t0, t1);
                }
                timed += start.elapsed();
                left -= n;
            }
            timed
        });
    });
    g.bench_function("inactive", |b| {
        b.iter(|| {
            black_box(
                inactive
                    .op("affine", &[&x], || black_box(&x).affine(2.0, 1.0))
                    .expect("op"),
            )
        });
    });
    // Outside the window around a near-free op (an `Arc` clone), where a few ns show.
    g.bench_function("bare_clone", |b| {
        b.iter(|| black_box(black_box(&x).clone()));
    });
    g.bench_function("inactive_clone", |b| {
        b.iter(|| {
            black_box(
                inactive
                    .op("clone", &[&x], || Ok(black_box(&x).clone()))
                    .expect("op"),
            )
        });
    });
    g.finish();
    assert!(!inactive.is_active());
    if freed > 0 {
        emit(Row::new(
            "capture/step_end_free",
            "ns_per_alloc",
            frees.as_nanos() as f64 / freed as f64,
            "ns",
        ));
    }
}

/// The three records `Capture::op` writes for output `id` of an op timed from `t0` to `t1`.
fn probe_records(
    id: u64,
    ids: &[u64; 2],
    t0: u64,
    t1: u64,
) -> (OpRecord<'_>, TensorRecord<'static>, MemoryRecord<'static>) {
    let cat = MemoryCategory::Activation;
    (
        OpRecord {
            name: "affine",
            inputs: &ids[..1],
            outputs: &ids[1..],
            shape: &[4],
            dtype: "f32",
            device: "cpu",
            start_ns: t0,
            dur_ns: t1 - t0,
            in_bytes: 16,
            out_bytes: 16,
            category: Some(cat),
            flops: None,
        },
        TensorRecord {
            id,
            label: None,
            shape: &[4],
            dtype: "f32",
            device: "cpu",
            requires_grad: false,
            bytes: 16,
            category: cat,
        },
        MemoryRecord {
            kind: AllocKind::Alloc,
            storage: id,
            tensor: id,
            bytes: 16,
            device: "cpu",
            category: cat,
        },
    )
}

fn record_three(session: &TraceSession, id: u64, t0: u64, t1: u64) {
    let ids = [id - 1, id];
    let (op, tensor, mem) = probe_records(id, &ids, t0, t1);
    session.record_op(&op);
    session.record_tensor(&tensor);
    session.record_memory(&mem);
}

fn record_combined(session: &TraceSession, id: u64, t0: u64, t1: u64) {
    let ids = [id - 1, id];
    let (op, tensor, mem) = probe_records(id, &ids, t0, t1);
    session.record_op_with_output(&op, &tensor, Some(&mem));
}

fn probe_rows() {
    let bare = criterion_mean_ns("capture_probe/bare");
    let on = criterion_mean_ns("capture_probe/active");
    let off = criterion_mean_ns("capture_probe/inactive");
    match (bare, on, off) {
        (Some(bare), Some(on), Some(off)) => {
            emit(Row::new("capture/probe_tiny_op", "ns_per_call", on, "ns").vs("bare op", bare));
            let overhead = Row::new("capture/probe_tiny_op", "overhead_ns", on - bare, "ns");
            match criterion_mean_ns("capture_probe/record_floor") {
                Some(floor) => {
                    emit(overhead.vs("trace-record op+tensor+alloc+2 clock reads", floor));
                }
                None => emit(overhead),
            }
            if let (Some(three), Some(one)) = (
                criterion_mean_ns("capture_probe/record_floor"),
                criterion_mean_ns("capture_probe/record_floor_combined"),
            ) {
                emit(
                    Row::new("capture/record_floor", "combined_ns", one, "ns").vs(
                        "three separate calls (op, tensor, alloc) + 2 clock reads",
                        three,
                    ),
                );
            }
            emit(Row::new(
                "capture/probe_inactive",
                "overhead_ns",
                off - bare,
                "ns",
            ));
        }
        _ => eprintln!("bench-row: capture/probe_* skipped (a benchmark did not run)"),
    }
    match (
        criterion_mean_ns("capture_probe/bare_clone"),
        criterion_mean_ns("capture_probe/inactive_clone"),
    ) {
        (Some(bare), Some(off)) => {
            emit(
                Row::new("capture/probe_inactive_clone", "ns_per_call", off, "ns")
                    .vs("bare Tensor::clone", bare),
            );
            emit(Row::new(
                "capture/probe_inactive_clone",
                "overhead_ns",
                off - bare,
                "ns",
            ));
        }
        _ => eprintln!("bench-row: capture/probe_* skipped (a benchmark did not run)"),
    }
}

/// The step boundary as a decode loop pays it: `Capture::step()` on a capture writing a file,
/// sampling the process's resident memory (`sampling_memory`; the first boundary after a
/// millisecond samples, so criterion's tight loop measures about one sample a millisecond) and
/// without.
fn step_groups(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let open = |name: &str| {
        let run = Run::new("benches::capture::step", Phase::Infer, "cpu");
        Capture::open(dir.path().join(name), run).expect("trace file")
    };
    let sampled = open("sampled.jsonl").sampling_memory(&Device::Cpu);
    let plain = open("plain.jsonl");
    let mut g = c.benchmark_group("capture_step");
    g.bench_function("with_memory_sample", |b| {
        b.iter(|| black_box(sampled.step()));
    });
    g.bench_function("no_memory_sample", |b| b.iter(|| black_box(plain.step())));
    g.bench_function("memory_sample", |b| {
        b.iter(|| black_box(plain.sample_memory(&Device::Cpu)));
    });
    g.finish();
    sampled.finish().expect("finish");
    plain.finish().expect("finish");
}

fn step_rows() {
    match (
        criterion_mean_ns("capture_step/with_memory_sample"),
        criterion_mean_ns("capture_step/no_memory_sample"),
    ) {
        (Some(with), Some(without)) => emit(
            Row::new("capture/step_boundary", "ns_per_step", with, "ns").vs(
                "the same boundary without the resident-memory sample",
                without,
            ),
        ),
        _ => eprintln!("bench-row: capture/step_boundary skipped (a benchmark did not run)"),
    }
    if let Some(one) = criterion_mean_ns("capture_step/memory_sample") {
        emit(Row::new(
            "capture/memory_sample",
            "ns_per_sample",
            one,
            "ns",
        ));
    }
}

/// A model's `tracing` span entered and exited through the layer `Capture::install_tracing`
/// installs (the global subscriber, as a user has it; an active session writing to
/// `io::sink`), against the same spans made while no subscriber wanted them (disabled: what
/// an unprofiled model pays). Each iteration enters an outer span and one child, as a block
/// enters its linear layers; the figures are per span.
fn tracing_groups(c: &mut Criterion) {
    let bare_outer = tracing::info_span!("block");
    let bare_inner = tracing::info_span!("linear");
    let session = TraceSession::from_writer(
        std::io::sink(),
        Run::new("benches::capture::tracing", Phase::Infer, "cpu"),
    );
    let capture = Capture::new(Arc::new(session));
    if std::env::var("TRACEGRAPH_CAPTURE_TRACING").as_deref() == Ok("layer") {
        use tracing_subscriber::layer::SubscriberExt;
        let layer = trace_candle::TraceLayer::for_capture(&capture);
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .expect("the first global subscriber");
    } else {
        capture
            .install_tracing()
            .expect("the first global subscriber");
    }
    let outer = tracing::info_span!("block");
    let inner = tracing::info_span!("linear");
    let mut g = c.benchmark_group("capture_tracing");
    g.bench_function("no_subscriber", |b| {
        b.iter(|| {
            let _o = black_box(&bare_outer).enter();
            let _i = black_box(&bare_inner).enter();
        });
    });
    g.bench_function("layer", |b| {
        b.iter(|| {
            let _o = black_box(&outer).enter();
            let _i = black_box(&inner).enter();
        });
    });
    // Cold (timed by hand: criterion would size its runs by the timed part alone, and each
    // pair follows a 4 MiB write): the median of many pairs, each alone after the write.
    let rounds = if tracegraph_benches::quick() {
        300
    } else {
        2000
    };
    let mut evict = vec![0u8; 4 << 20];
    let mut cold = |outer: &tracing::Span, inner: &tracing::Span| {
        let mut took: Vec<f64> = (0..rounds)
            .map(|i| {
                evict.fill(i as u8);
                black_box(&evict);
                let t = Instant::now();
                {
                    let _o = black_box(outer).enter();
                    let _i = black_box(inner).enter();
                }
                t.elapsed().as_nanos() as f64
            })
            .collect();
        took.sort_by(f64::total_cmp);
        took[took.len() / 2]
    };
    // Alternating, so that both see the machine alike.
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        off.push(cold(&bare_outer, &bare_inner));
        on.push(cold(&outer, &inner));
    }
    on.sort_by(f64::total_cmp);
    off.sort_by(f64::total_cmp);
    emit(
        Row::new(
            "capture/tracing_span_cold",
            "ns_per_span",
            on[2] / 2.0,
            "ns",
        )
        .vs(
            "the same cold spans with no subscriber (disabled, as unprofiled)",
            off[2] / 2.0,
        ),
    );
    g.finish();
    let counts = capture.finish().expect("finish").counts;
    assert!(counts.span_start > 0, "the layer recorded no span");
}

fn tracing_rows() {
    match (
        criterion_mean_ns("capture_tracing/layer"),
        criterion_mean_ns("capture_tracing/no_subscriber"),
    ) {
        (Some(layer), Some(bare)) => emit(
            Row::new("capture/tracing_span", "ns_per_span", layer / 2.0, "ns").vs(
                "the same span with no subscriber (disabled, as unprofiled)",
                bare / 2.0,
            ),
        ),
        _ => eprintln!("bench-row: capture/tracing_span skipped (a benchmark did not run)"),
    }
}

fn main() {
    let mut c = tracegraph_benches::criterion();
    probe_groups(&mut c);
    step_groups(&mut c);
    c.final_summary();
    probe_rows();
    step_rows();
    train_step_rows();
    // Last: it installs the process's global `tracing` subscriber.
    let mut c = tracegraph_benches::criterion();
    tracing_groups(&mut c);
    c.final_summary();
    tracing_rows();
}
