//! Benchmark suite `sampler`.
//!
//! The CPU sampler's cost on the demo's training step, and the sampling rate achieved.
//!
//! Rows:
//! - `sampler/train_step ns_per_step (median)`: one step of `tracegraph demo`'s trainer
//!   (`crates/tracegraph/src/demo/mlp.rs`, uninstrumented) while the CPU sampler runs at the
//!   default rate (about 1 kHz of CPU time), against the same step with the sampler's timer
//!   disarmed. One capture drives the sampler with a schedule that alternates recorded and
//!   idle steps (wait 1, active 1, forever): a recorded step samples, an idle one does not,
//!   so the same trainer alternates on and off step by step, the order flipping every round,
//!   for a time budget (10 s quick, 40 s full). Medians. Target: ratio ≤ 1.03.
//!   `sampler/train_step median_paired_ratio` is the median of the per-round ratios.
//! - `sampler/rate achieved_hz`: samples taken per second of process CPU time over the
//!   sampled steps, against the requested rate: per-thread perf events deliver it (less the
//!   sampler thread's own CPU time, and time in the kernel where only user space may be
//!   sampled); the process CPU-time timer, where perf events are refused, is capped by the
//!   kernel's tick. The source and the rate over the sampled threads' CPU time go to stderr.
//! - `sampler/rate lost_per_1000`: samples lost per 1000 taken.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use trace_candle::{Capture, SamplerConfig};
use trace_record::schema::{Phase, Schedule};
use trace_record::{Run, TraceSession};
use tracegraph_benches::{Rounds, Row, alternate, emit, emit_paired, quick};

// The trainer `tracegraph demo` runs: one home (the CLI), measured here as is.
#[path = "../../crates/tracegraph/src/demo/mlp.rs"]
mod mlp;

use mlp::MlpTrainer;

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = Run::new("benches::sampler", Phase::Train, "cpu").schedule(Schedule {
        skip_first: 0,
        wait: 1,
        warmup: 0,
        active: 1,
        repeat: 0,
    });
    let session =
        Arc::new(TraceSession::open(dir.path().join("sampler.jsonl"), run).expect("trace file"));
    let capture = Capture::new(Arc::clone(&session));
    let config = SamplerConfig::default();
    capture.sample_stacks(config).expect("sampler");
    let mut trainer = MlpTrainer::new(None, 42, 0.01).expect("trainer");
    let (warmup, rounds) = if quick() {
        (5, (10, 20, 400))
    } else {
        (20, (40, 100, 4000))
    };
    let rounds = Rounds {
        budget: Duration::from_secs(rounds.0),
        min_rounds: rounds.1,
        max_rounds: rounds.2,
    };
    for _ in 0..warmup {
        black_box(trainer.step().expect("step"));
    }
    // Steps the capture (and so the sampler's timer) to the wanted state, then times one
    // training step in it.
    let time = |on: bool| {
        while capture.is_active() != on {
            capture.step();
        }
        let start = Instant::now();
        black_box(trainer.step().expect("step"));
        let ns = start.elapsed().as_nanos() as f64;
        capture.step();
        ns
    };
    let (t_on, t_off) = alternate(rounds, 1, time);
    let round = t_on.len();
    capture.finish().expect("finish");
    let stats = capture.sampler_stats().expect("sampler stats");
    eprintln!(
        "sampler/train_step: {round} alternating rounds; {} samples taken, {} lost over {} sampled steps; training accuracy {:.3}",
        stats.taken,
        stats.lost,
        stats.steps,
        trainer.accuracy().expect("accuracy")
    );
    // Which source sampled (perf events, or the timer where the kernel refuses them), and the
    // rate over the sampled threads' CPU time (the process's less the sampler thread's own).
    eprintln!(
        "sampler/rate: source {}; {:.0} Hz of the sampled threads' CPU time, the sampler thread used {:.1} ms of {:.1} ms",
        stats.source.map_or("none", |s| s.as_str()),
        stats.sampled_hz().unwrap_or(f64::NAN),
        stats.sampler_cpu_ns.unwrap_or(0) as f64 / 1e6,
        stats.cpu_ns.unwrap_or(0) as f64 / 1e6,
    );
    emit_paired(
        "sampler/train_step",
        "ns_per_step (median)",
        "same step, sampler timer disarmed (alternating)",
        t_on,
        t_off,
    );
    emit(
        Row::new(
            "sampler/rate",
            "achieved_hz",
            stats.effective_hz().unwrap_or(f64::NAN),
            "Hz",
        )
        .vs("requested", f64::from(config.hz)),
    );
    emit(Row::new(
        "sampler/rate",
        "lost_per_1000",
        if stats.taken > 0 {
            stats.lost as f64 * 1000.0 / stats.taken as f64
        } else {
            f64::NAN
        },
        "samples",
    ));
}
