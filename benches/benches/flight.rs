//! Benchmark suite `flight`.
//!
//! The flight recorder (`TraceSession::flight`: a bounded in-memory ring of whole steps)
//! against a session writing a file and against no recording at all, on one decode-like loop:
//! steps of [`STEP_OPS`] ops inside a span, with [`pace`]'s busy work (about a microsecond)
//! between two ops, then `step()`. Each round times [`STEPS`] steps of each mode (wall time,
//! `finish` included), the order of the modes rotating round by round so that drift hits all
//! alike; rows are medians per step with the median of the per-round ratios. The machine's
//! other vCPUs are left idle (no spinner): compare the ratios, not the absolute times.
//!
//! The ring holds 2 MiB (about 250 of these steps), so most of a round runs in the ring's
//! steady state, evicting a step for each one recorded.
//!
//! - `flight/step_loop_ring ns_per_step` against `file`: what the ring costs beside writing
//!   the same lines to a file (target: no more).
//! - `flight/step_loop_ring ns_per_step` against `plain`, and `flight/step_loop_file` against
//!   `plain`: each against the loop without recording.
//!
//! Not here yet: the demo training step and the tiny-Llama decode through trace-candle's
//! `Capture` (the capture has no flight constructor yet).

use std::hint::black_box;
use std::time::{Duration, Instant};

use trace_record::schema::{Phase, SpanKind};
use trace_record::{FlightConfig, OpRecord, Run, TraceSession};
use tracegraph_benches::{Row, emit, median, quick};

/// Ops per step.
const STEP_OPS: u64 = 32;
/// Steps per timed round.
const STEPS: u64 = 2_000;

/// About a microsecond of a program's work between two ops.
fn pace(seed: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..300 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

fn run() -> Run {
    Run::new("benches::flight", Phase::Infer, "cpu")
}

/// The loop, recording into `session` when there is one; wall ns per step.
fn step_loop(session: Option<&TraceSession>) -> f64 {
    let start = Instant::now();
    let mut x = 0u64;
    for step in 0..STEPS {
        let _span = session.map(|s| s.span("decode", SpanKind::Module, None));
        for i in 0..STEP_OPS {
            let t = session.map_or(0, TraceSession::now_ns);
            x = pace(x ^ i);
            if let Some(s) = session {
                let id = step * STEP_OPS + i;
                s.record_op(&OpRecord {
                    name: "matmul",
                    inputs: &[id, id + 1],
                    outputs: &[id + 2],
                    shape: &[64, 128],
                    dtype: "f32",
                    device: "cpu",
                    start_ns: t,
                    dur_ns: s.now_ns() - t,
                    in_bytes: 65_536,
                    out_bytes: 32_768,
                    category: None,
                    flops: Some(1 << 20),
                });
            }
        }
        drop(_span);
        if let Some(s) = session {
            s.step();
        }
    }
    if let Some(s) = session {
        let _ = s.finish();
    }
    black_box(x);
    start.elapsed().as_nanos() as f64 / STEPS as f64
}

fn time(mode: usize, dir: &std::path::Path, round: usize) -> f64 {
    match mode {
        0 => step_loop(None),
        1 => {
            let path = dir.join(format!("file-{round}.jsonl"));
            let s = TraceSession::open(&path, run()).expect("a temp file");
            let t = step_loop(Some(&s));
            let _ = std::fs::remove_file(&path);
            t
        }
        _ => {
            let s = TraceSession::flight(
                run(),
                FlightConfig::new(dir.join("dumps")).ring_bytes(2 << 20),
            )
            .expect("a flight recorder");
            step_loop(Some(&s))
        }
    }
}

fn main() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let budget = if quick() {
        Duration::from_secs(3)
    } else {
        Duration::from_secs(15)
    };
    let mut t: [Vec<f64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let started = Instant::now();
    let mut round = 0usize;
    while round < 5 || (started.elapsed() < budget && round < 200) {
        for k in 0..3 {
            let mode = (round + k) % 3;
            t[mode].push(time(mode, dir.path(), round));
        }
        round += 1;
    }
    let paired = |a: usize, b: usize| -> f64 {
        let mut r: Vec<f64> = t[a].iter().zip(&t[b]).map(|(x, y)| x / y).collect();
        median(&mut r)
    };
    let (mut plain, mut file, mut ring) = (t[0].clone(), t[1].clone(), t[2].clone());
    let (plain, file, ring) = (median(&mut plain), median(&mut file), median(&mut ring));
    emit(Row::new("flight/step_loop_ring", "ns_per_step", ring, "ns").vs("file", file));
    emit(Row::new(
        "flight/step_loop_ring",
        "median_paired_ratio_vs_file",
        paired(2, 1),
        "x",
    ));
    emit(Row::new("flight/step_loop_ring", "ns_per_step", ring, "ns").vs("plain", plain));
    emit(Row::new(
        "flight/step_loop_ring",
        "median_paired_ratio_vs_plain",
        paired(2, 0),
        "x",
    ));
    emit(Row::new("flight/step_loop_file", "ns_per_step", file, "ns").vs("plain", plain));
    emit(Row::new(
        "flight/step_loop_file",
        "median_paired_ratio_vs_plain",
        paired(1, 0),
        "x",
    ));
}
