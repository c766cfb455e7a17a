//! Benchmark suite `flight`.
//!
//! The flight recorder (`TraceSession::flight`, `Capture::flight`: a bounded in-memory ring
//! of whole steps) against a session writing a file and against no recording at all, in three
//! workloads. In each, the three modes are timed in the same run, round by round, the order of
//! the modes rotating so that drift hits all alike; rows are medians with the median of the
//! per-round ratios (`median_paired_ratio_vs_…`). The machine's other vCPUs are left idle (no
//! spinner): compare the ratios, not the absolute times. The rings' triggers never fire here
//! (no explicit dump, finite losses and gradients, the other triggers off): each checks at
//! the end that it wrote no dump and evicted steps, so the rows measure the ring's steady
//! state.
//!
//! - `flight/step_loop_{ring,file}`: a decode-like loop of [`STEP_OPS`] ops inside a span per
//!   step, with [`pace`]'s busy work (about a microsecond) between two ops, then `step()`,
//!   recorded through `TraceSession` directly. Each round times [`STEPS`] steps of each mode
//!   (wall time, `finish` included). The ring holds 2 MiB (about 250 of these steps).
//! - `flight/train_step_{ring,file}`: one step of `tracegraph demo`'s trainer (full batch of
//!   1024 × 32, MLP 32-128-128-4, AdamW, CPU; `crates/tracegraph/src/demo/mlp.rs`, included
//!   below) through a `Capture` recording everything (schedule always active, as the
//!   `capture` suite's row), with `Capture::open` (file) or `Capture::flight` (ring of
//!   [`TRAIN_RING_BYTES`]), against the same step uninstrumented (`plain`). Three sets of
//!   three trainers, each set created in another order (creation order alone biased an A/A
//!   run by up to ~8% in the `capture` suite), take turns.
//! - `flight/decode_{ring,file}`: one generation of the tiny candle-transformers Llama of
//!   `profile_llama` (`crates/trace-candle/examples/profile_llama.rs`, included below for its
//!   configuration and sizes; the model is the `llama` suite's, `shared/tiny_llama.rs`,
//!   with no capture line left out): prefill of the 16-token prompt then 20 greedy decode steps with
//!   the example's capture lines (its `tracing` spans, parameters, `op("llama.forward")`, the
//!   KV cache's `buffer_shape`, resident memory sampled at step ends, `step()` per forward),
//!   reported per step (a generation's time over its 21 forwards). Three sets of three models
//!   as above; the ring holds [`DECODE_RING_BYTES`].
//!
//! Each `*_ring` row is reported against `file` (target: the ring costs no more than the file,
//! ratio ≤ 1) and against `plain`; each `*_file` row against `plain`.
//!
//! Set `RAYON_NUM_THREADS` for Candle's fast path (`cargo xtask bench` does): without it
//! candle-core reads /proc on every matmul, which inflates the plain work the rows compare
//! against.

use std::error::Error;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use trace_candle::Capture;
use trace_record::schema::{Phase, Schedule, SpanKind};
use trace_record::{FlightConfig, OpRecord, Run, TraceSession};
use tracegraph_benches::{Row, emit, median, quick};

// The trainer `tracegraph demo` runs: one home (the CLI), measured here as is.
#[path = "../../crates/tracegraph/src/demo/mlp.rs"]
#[allow(dead_code, unreachable_pub)]
mod mlp;

// The model `profile_llama` profiles: one home (the example), measured here as is.
#[path = "../../crates/trace-candle/examples/profile_llama.rs"]
#[allow(dead_code, unreachable_pub)]
mod profile_llama;

// The profiled model, shared with the `llama` suite.
#[path = "shared/tiny_llama.rs"]
mod tiny_llama;

use mlp::MlpTrainer;
use profile_llama::{DECODE, tiny_config};
use tiny_llama::{Model, Omit, prompt};

type Res<T> = Result<T, Box<dyn Error>>;

/// Ops per step of the step loop.
const STEP_OPS: u64 = 32;
/// Steps per timed round of the step loop.
const STEPS: u64 = 2_000;
/// The train-step rings' bound: about 40 of the demo's steps (24 KiB each).
const TRAIN_RING_BYTES: usize = 1 << 20;
/// The decode rings' bound: about 90 decode steps (22 KiB each).
const DECODE_RING_BYTES: usize = 2 << 20;

/// The three modes, in the order of the arrays below.
const MODES: [&str; 3] = ["plain", "file", "ring"];
const PLAIN: usize = 0;
const FILE: usize = 1;
const RING: usize = 2;

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

/// A flight recorder's configuration for the bench: dumps under `dir`, a ring of `bytes`,
/// only the default triggers (explicit dumps, which nobody asks for, and non-finite values,
/// which do not occur).
fn ring_config(dir: &Path, bytes: usize) -> FlightConfig {
    FlightConfig::new(dir).ring_bytes(bytes)
}

/// Checks that a ring wrote no dump (no trigger fired) and evicted steps (it ran in its
/// steady state); prints its figures.
fn check_ring(what: &str, stats: Option<trace_record::FlightStats>) -> Res<()> {
    let stats = stats.ok_or_else(|| format!("{what}: not a flight recorder"))?;
    eprintln!(
        "{what}: ring of {} steps, {} bytes; {} steps evicted; {} dumps",
        stats.ring_steps,
        stats.ring_bytes,
        stats.evicted_steps,
        stats.dumps.len()
    );
    if !stats.dumps.is_empty() || stats.pending > 0 || stats.suppressed > 0 {
        return Err(format!("{what}: a trigger fired: {stats:?}").into());
    }
    if stats.evicted_steps == 0 {
        return Err(format!("{what}: the ring never filled: {stats:?}").into());
    }
    Ok(())
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

fn time_step_loop(mode: usize, dir: &Path, round: usize) -> Res<f64> {
    Ok(match mode {
        PLAIN => step_loop(None),
        FILE => {
            let path = dir.join(format!("file-{round}.jsonl"));
            let s = TraceSession::open(&path, run())?;
            let t = step_loop(Some(&s));
            std::fs::remove_file(&path)?;
            t
        }
        _ => {
            let s = TraceSession::flight(run(), ring_config(&dir.join("dumps"), 2 << 20))?;
            let t = step_loop(Some(&s));
            if round == 0 {
                check_ring("flight/step_loop_ring", s.flight_stats())?;
            }
            t
        }
    })
}

/// Emits the rows of one workload from its times per mode (`t[PLAIN]`, `t[FILE]`, `t[RING]`,
/// round by round): `<prefix>_ring` against `file` and `plain`, `<prefix>_file` against
/// `plain`, each with the median of the per-round ratios.
fn emit_modes(prefix: &str, metric: &str, t: &[Vec<f64>; 3]) {
    let paired = |a: usize, b: usize| -> f64 {
        let mut r: Vec<f64> = t[a].iter().zip(&t[b]).map(|(x, y)| x / y).collect();
        median(&mut r)
    };
    let med = |m: usize| median(&mut t[m].clone());
    eprintln!("{prefix}: {} rounds", t[PLAIN].len());
    let ring = format!("{prefix}_ring");
    let file = format!("{prefix}_file");
    for (bench, mode, baseline) in [
        (&ring, RING, FILE),
        (&ring, RING, PLAIN),
        (&file, FILE, PLAIN),
    ] {
        let name = MODES[baseline];
        emit(Row::new(bench, metric, med(mode), "ns").vs(name, med(baseline)));
        emit(Row::new(
            bench,
            &format!("median_paired_ratio_vs_{name}"),
            paired(mode, baseline),
            "x",
        ));
    }
}

/// Rounds until the budget is spent (bounded both ways): each times one call of `work` on
/// each mode of one set, sets taking turns, the order of the modes rotating. Returns the
/// times per mode, round by round.
fn rotate<M>(
    sets: &mut [[M; 3]],
    (warmup, budget, min_rounds, max_rounds): (usize, Duration, usize, usize),
    mut work: impl FnMut(&mut M) -> Res<()>,
) -> Res<[Vec<f64>; 3]> {
    for set in sets.iter_mut() {
        for m in set.iter_mut() {
            for _ in 0..warmup {
                work(m)?;
            }
        }
    }
    let mut t: [Vec<f64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let started = Instant::now();
    let mut round = 0usize;
    while round < max_rounds && (round < min_rounds || started.elapsed() < budget) {
        let n = sets.len();
        let set = &mut sets[round % n];
        for k in 0..3 {
            let mode = (round / n + k) % 3;
            let start = Instant::now();
            work(&mut set[mode])?;
            t[mode].push(start.elapsed().as_nanos() as f64);
        }
        round += 1;
    }
    Ok(t)
}

/// The capture of one mode: `None` for plain.
fn capture(
    mode: usize,
    dir: &Path,
    name: &str,
    ring_bytes: usize,
    run: Run,
) -> Res<Option<Capture>> {
    Ok(match mode {
        PLAIN => None,
        FILE => Some(Capture::open(dir.join(format!("{name}.jsonl")), run)?),
        _ => Some(Capture::flight(
            run,
            ring_config(&dir.join(name), ring_bytes),
        )?),
    })
}

/// Three sets of one thing per mode, each set created in another order of the modes.
fn sets<M>(mut make: impl FnMut(usize, usize) -> Res<M>) -> Res<Vec<[M; 3]>> {
    let mut sets = Vec::new();
    for s in 0..3 {
        let mut made: [Option<M>; 3] = [None, None, None];
        for k in 0..3 {
            let mode = (s + k) % 3;
            made[mode] = Some(make(s, mode)?);
        }
        let [a, b, c] = made;
        sets.push([a.ok_or("unmade")?, b.ok_or("unmade")?, c.ok_or("unmade")?]);
    }
    Ok(sets)
}

/// Finishes each set's captures; the rings must have stayed quiet.
fn finish_all(what: &str, captures: impl Iterator<Item = (usize, Capture)>) -> Res<()> {
    for (mode, c) in captures {
        if mode == RING {
            check_ring(what, c.flight_stats())?;
        }
        let summary = c.finish()?;
        if summary.counts.op == 0 {
            return Err(format!("{what}: the {} capture recorded no op", MODES[mode]).into());
        }
    }
    Ok(())
}

fn train_rows(dir: &Path) -> Res<()> {
    const SEED: u64 = 42;
    const LR: f64 = 0.01;
    let mut captures = Vec::new();
    let mut sets = sets(|s, mode| {
        let run =
            Run::new("benches::flight::train", Phase::Train, "cpu").schedule(Schedule::always());
        let c = capture(
            mode,
            dir,
            &format!("train-{s}-{mode}"),
            TRAIN_RING_BYTES,
            run,
        )?;
        let trainer = MlpTrainer::new(c.as_ref(), SEED, LR)?;
        if let Some(c) = c {
            captures.push((mode, c));
        }
        Ok(trainer)
    })?;
    let limits = if quick() {
        (5, Duration::from_secs(12), 30, 3000)
    } else {
        (20, Duration::from_secs(45), 150, 30000)
    };
    let t = rotate(&mut sets, limits, |m| {
        black_box(m.step()?);
        Ok(())
    })?;
    finish_all("flight/train_step_ring", captures.into_iter())?;
    emit_modes("flight/train_step", "ns_per_step (median)", &t);
    Ok(())
}

fn decode_rows(dir: &Path) -> Res<()> {
    let cfg = tiny_config();
    let mut captures = Vec::new();
    let mut sets = sets(|s, mode| {
        let run = Run::new("benches::flight::decode", Phase::Infer, "cpu");
        let c = capture(
            mode,
            dir,
            &format!("decode-{s}-{mode}"),
            DECODE_RING_BYTES,
            run,
        )?;
        if let Some(c) = &c {
            captures.push((mode, c.clone()));
        }
        Model::new(c, &cfg, Omit::default())
    })?;
    let prompt = prompt();
    let limits = if quick() {
        (3, Duration::from_secs(12), 30, 3000)
    } else {
        (10, Duration::from_secs(45), 150, 30000)
    };
    let mut t = rotate(&mut sets, limits, |m| {
        let tokens = m.generate(&prompt)?;
        if tokens.len() != DECODE + 1 {
            return Err(format!("generated {} tokens", tokens.len()).into());
        }
        black_box(tokens);
        Ok(())
    })?;
    finish_all("flight/decode_ring", captures.into_iter())?;
    let forwards = (DECODE + 1) as f64;
    for mode in &mut t {
        for x in mode.iter_mut() {
            *x /= forwards;
        }
    }
    emit_modes(
        "flight/decode",
        "ns_per_step (median, generation / 21 forwards)",
        &t,
    );
    Ok(())
}

fn step_loop_rows(dir: &Path) -> Res<()> {
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
            t[mode].push(time_step_loop(mode, dir, round)?);
        }
        round += 1;
    }
    emit_modes("flight/step_loop", "ns_per_step", &t);
    Ok(())
}

fn main() -> Res<()> {
    let dir = tempfile::tempdir()?;
    step_loop_rows(dir.path())?;
    train_rows(dir.path())?;
    decode_rows(dir.path())?;
    Ok(())
}
