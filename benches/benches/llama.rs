//! Benchmark suite `llama`.
//!
//! trace-candle's cost on a real candle-transformers model (tiny Llama generation and training
//! step).
//!
//! The model is the one `cargo run -p trace-candle --example profile_llama` profiles
//! (candle-transformers' `Llama`, hidden 128, 2 layers, 4 heads / 2 KV heads, vocabulary
//! 1000, random weights from a `VarMap`; `crates/trace-candle/examples/profile_llama.rs`,
//! included below for its configuration and sizes; the model, shared with the `flight` suite,
//! is `shared/tiny_llama.rs`). The profiled model carries exactly the
//! example's capture lines: its `tracing` spans go to the capture's subscriber
//! (`Capture::tracing_subscriber`, what `Capture::install_tracing` installs, here as a scoped
//! default while the model is built, so the unprofiled model has no subscriber at all; with
//! `TRACEGRAPH_LLAMA_TRACING=layer` a registry with `TraceLayer::for_capture` instead, to
//! compare the two),
//! parameters are registered, each forward is `capture.op("llama.forward", ..)`, the KV
//! cache is declared per step (`buffer_shape`), training runs `capture.backward(&loss)`
//! (autograd memory, every parameter's gradient state and norm), the process's resident
//! memory is sampled at step ends (at most once a millisecond), and the trace is written to a
//! file.
//!
//! With `TRACEGRAPH_LLAMA_SCHED` set, each row also prints (to stderr) the main thread's run
//! time and run-queue wait and every thread's run time per call, profiled and plain
//! (`/proc/thread-self/schedstat`), telling the capture's own CPU time from scheduling.
//!
//! **Which capture line costs what.** `TRACEGRAPH_LLAMA_OMIT`, a comma-separated list of
//! `spans` (the model is built without the capture's subscriber, so its `tracing` spans are
//! disabled), `op` (the forward is not wrapped in `capture.op`), `step`, `buffer` (no
//! `buffer_shape` of the KV cache) and `memory` (no resident-memory samples), leaves those
//! capture lines out of the profiled model, and the fast path then runs only the tiny
//! generation, as the row `llama/fast/generate_omitting_<parts>` (e.g.
//! `TRACEGRAPH_LLAMA_OMIT=spans cargo xtask bench --quick llama` gives
//! `llama/fast/generate_omitting_spans`): the difference from `llama/fast/generate` is what
//! the omitted lines cost a decode step. A diagnosis, not a row with a target.
//!
//! **Two paths.** candle-core reads `RAYON_NUM_THREADS` for the thread count of every matmul
//! and, when it is unset, reads /proc on each call (about 8× slower for a decode step here),
//! which hides our cost. Users who care set it, so the headline rows (`llama/fast/…`) run
//! Candle's fast path: the suite re-runs itself as a child process with
//! `RAYON_NUM_THREADS` set (to its value in the environment, else the machine's available
//! parallelism; the metric names the figure). The older rows (`llama/generate`,
//! `llama/train_step`) are kept for continuity from a second child with the variable
//! removed, labelled `slow path`.
//!
//! Rows (each against the same work with no instrumentation at all):
//! - `llama/fast/generate ns_per_generation (median, RAYON_NUM_THREADS=n)`: one generation,
//!   prefill of the 16-token prompt then 20 greedy decode steps with a fresh KV cache (21
//!   forwards, one `step()` each), `median_paired_ratio` (the median of the per-round
//!   ratios), and `overhead_ns_per_forward` (profiled minus plain medians over the 21
//!   forwards: what one decode step, with all of `profile_llama`'s capture lines, pays), and
//!   `estimated_overhead_ns_per_forward`, the captures' own estimate (the counter
//!   `trace_candle.overhead_ns` they write at finish, over their forwards) against that
//!   measured figure: the estimate is a floor (it times the capture's own calls, not what
//!   they do to the model's caches); target ratio 0.5–2.
//! - `llama/fast/train_step ns_per_step (median, …)`: one training step (forward over 16
//!   tokens, cross-entropy, backward, AdamW), and its `median_paired_ratio`.
//! - `llama/fast/medium_generate …`: the same generation on a medium Llama (hidden 512,
//!   4 layers, 8 heads / 4 KV heads, vocabulary 8000), whose ratio is nearer what most users
//!   see.
//! - `llama/generate`, `llama/train_step` (`slow path: RAYON_NUM_THREADS unset`): the tiny
//!   model's generation and training step as before.
//!
//! As in the `capture` suite, profiled and unprofiled runs alternate round by round in one
//! run (the order flipping every other round, so drift hits both alike) for a time budget,
//! with two pairs of models created in opposite orders so that creation order cannot favour
//! one side; the figures are medians, robust to a shared machine's preemptions. Targets
//! (fast path): ratio ≤ 1.05 for the tiny generation and training step, ≤ 1.02 for the
//! medium generation.

use std::error::Error;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use candle_transformers::models::llama::Config;
use trace_candle::{Capture, Phase, Run};
use trace_record::schema::{Event, OVERHEAD_COUNTER};
use tracegraph_benches::{Row, emit, emit_paired, quick, run_self_as_child};

// The model `profile_llama` profiles: one home (the example), measured here as is.
#[path = "../../crates/trace-candle/examples/profile_llama.rs"]
#[allow(dead_code, unreachable_pub)]
mod profile_llama;

// The profiled model, shared with the `flight` suite.
#[path = "shared/tiny_llama.rs"]
mod tiny_llama;

use profile_llama::{DECODE, PROMPT, tiny_config};
use tiny_llama::{Model, Omit, prompt};

type Res<T> = Result<T, Box<dyn Error>>;

/// Two (profiled, unprofiled) pairs, created in opposite orders, each profiled model with
/// its own capture writing `<dir>/<name>-<k>.jsonl` (less the lines `omit` names).
fn pairs(dir: &Path, name: &str, cfg: &Config, omit: Omit) -> Res<Vec<(Model, Model)>> {
    let mut pairs = Vec::new();
    for (k, on_first) in [true, false].into_iter().enumerate() {
        let run = Run::new(format!("benches::llama::{name}"), Phase::Train, "cpu");
        let capture = Capture::open(dir.join(format!("{name}-{k}.jsonl")), run)?;
        let model = |c| Model::new(c, cfg, omit)?.trainable();
        let pair = if on_first {
            let on = model(Some(capture))?;
            (on, model(None)?)
        } else {
            let off = model(None)?;
            (model(Some(capture))?, off)
        };
        pairs.push(pair);
    }
    Ok(pairs)
}

/// Times `work` on both models of the pairs alternately until the budget is spent (bounded
/// both ways): one round times one call on each model of one pair, pairs taking turns and
/// the order within a pair flipping every other round. Returns the profiled and unprofiled
/// times in nanoseconds, round by round.
fn alternate(
    pairs: &mut [(Model, Model)],
    mut work: impl FnMut(&mut Model) -> Res<()>,
) -> Res<(Vec<f64>, Vec<f64>)> {
    let (warmup, budget, min_rounds, max_rounds) = if quick() {
        (3, Duration::from_secs(10), 20, 2000)
    } else {
        (10, Duration::from_secs(45), 100, 20000)
    };
    for (on, off) in pairs.iter_mut() {
        for _ in 0..warmup {
            work(on)?;
            work(off)?;
        }
    }
    let sched = std::env::var("TRACEGRAPH_LLAMA_SCHED").is_ok();
    let mut acc = [[0u64; 4]; 2];
    let mut time = |m: &mut Model| -> Res<f64> {
        let before = if sched { sched_now() } else { [0; 3] };
        let start = Instant::now();
        work(m)?;
        let t = start.elapsed().as_nanos() as f64;
        if sched {
            let after = sched_now();
            let a = &mut acc[usize::from(m.capture.is_some())];
            for i in 0..3 {
                a[i] += after[i] - before[i];
            }
            a[3] += 1;
        }
        Ok(t)
    };
    let (mut t_on, mut t_off) = (Vec::new(), Vec::new());
    let started = Instant::now();
    let mut round = 0usize;
    while round < max_rounds && (round < min_rounds || started.elapsed() < budget) {
        let (on, off) = &mut pairs[round % pairs.len()];
        if (round / 2).is_multiple_of(2) {
            t_off.push(time(off)?);
            t_on.push(time(on)?);
        } else {
            t_on.push(time(on)?);
            t_off.push(time(off)?);
        }
        round += 1;
    }
    if sched {
        for (k, a) in acc.iter().enumerate() {
            let n = a[3].max(1);
            eprintln!(
                "sched {}: main run {} ns, main wait {} ns, all threads run {} ns per call",
                if k == 1 { "profiled" } else { "plain" },
                a[0] / n,
                a[1] / n,
                a[2] / n
            );
        }
    }
    Ok((t_on, t_off))
}

/// Main thread's run and run-queue wait time, and all threads' run time (schedstat, ns).
fn sched_now() -> [u64; 3] {
    let read = |p: &str| -> (u64, u64) {
        let s = std::fs::read_to_string(p).unwrap_or_default();
        let mut it = s.split_whitespace().map(|x| x.parse::<u64>().unwrap_or(0));
        (it.next().unwrap_or(0), it.next().unwrap_or(0))
    };
    let (run, wait) = read("/proc/thread-self/schedstat");
    let mut all = 0;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for e in dir.flatten() {
            all += read(&format!("{}/schedstat", e.path().display())).0;
        }
    }
    [run, wait, all]
}

/// Ends both captures and checks that they recorded the model: ops, the model's own spans,
/// and (for training) gradients, each unless left out.
fn finish(pairs: &[(Model, Model)], what: &str, gradients: bool) -> Res<()> {
    for (on, _) in pairs {
        let Some(c) = &on.capture else { continue };
        let counts = c.finish()?.counts;
        let omit = on.omit;
        let too_little = (!omit.op && counts.op == 0)
            || (!omit.spans && counts.span_start <= counts.op)
            || (gradients && counts.gradient == 0);
        if too_little {
            return Err(format!("{what}: the capture recorded too little: {counts:?}").into());
        }
    }
    Ok(())
}

/// Emits the median row (profiled against unprofiled) and the median of paired ratios;
/// returns the two medians.
fn emit_pair(bench: &str, metric: &str, t_on: Vec<f64>, t_off: Vec<f64>) -> (f64, f64) {
    eprintln!("{bench}: {} alternating rounds", t_on.len());
    let baseline = "same work, no instrumentation (alternating)";
    emit_paired(bench, metric, baseline, t_on, t_off)
}

/// A medium Llama: hidden 512, 4 layers, 8 heads / 4 KV heads, vocabulary 8000.
fn medium_config() -> Config {
    Config {
        hidden_size: 512,
        intermediate_size: 1376,
        vocab_size: 8000,
        num_hidden_layers: 4,
        num_attention_heads: 8,
        num_key_value_heads: 4,
        ..tiny_config()
    }
}

/// Generation rows of the model `cfg` under `bench`; with `per_forward`, also the profiled
/// minus plain median per forward.
fn generate_rows(
    dir: &Path,
    bench: &str,
    cfg: &Config,
    path: &str,
    per_forward: bool,
    omit: Omit,
) -> Res<()> {
    let name = bench.replace('/', "-");
    let mut pairs = pairs(dir, &name, cfg, omit)?;
    let prompt = prompt();
    let (t_on, t_off) = alternate(&mut pairs, |m| {
        let tokens = m.generate(&prompt)?;
        if tokens.len() != DECODE + 1 {
            return Err(format!("generated {} tokens", tokens.len()).into());
        }
        black_box(tokens);
        Ok(())
    })?;
    finish(&pairs, bench, false)?;
    let metric = format!("ns_per_generation (median, {path})");
    let (on, off) = emit_pair(bench, &metric, t_on, t_off);
    if per_forward {
        let forwards = (DECODE + 1) as f64;
        let measured = (on - off) / forwards;
        emit(Row::new(bench, "overhead_ns_per_forward", measured, "ns"));
        if let Some(estimate) = estimated_ns_per_forward(dir, &name)?.filter(|_| !omit.any()) {
            emit(
                Row::new(bench, "estimated_overhead_ns_per_forward", estimate, "ns").vs(
                    "measured: profiled minus plain median, per forward",
                    measured,
                ),
            );
        }
    }
    Ok(())
}

/// The captures' own estimate of their recording time per forward: the counter
/// `trace_candle.overhead_ns` written at finish over the `llama.forward` ops, in the traces
/// [`pairs`] wrote (warm-up forwards included).
fn estimated_ns_per_forward(dir: &Path, name: &str) -> Res<Option<f64>> {
    let (mut ns, mut forwards) = (0.0, 0u64);
    for k in 0..2 {
        let trace = trace_record::read_trace(dir.join(format!("{name}-{k}.jsonl")))?;
        for e in &trace.events {
            match &e.event {
                Event::Counter(c) if c.name == OVERHEAD_COUNTER => ns += c.value,
                Event::Op(op) if op.name == "llama.forward" => forwards += 1,
                _ => {}
            }
        }
    }
    Ok((forwards > 0).then(|| ns / forwards as f64))
}

fn train_rows(dir: &Path, bench: &str, path: &str) -> Res<()> {
    let name = bench.replace('/', "-");
    let mut pairs = pairs(dir, &name, &tiny_config(), Omit::default())?;
    let sequence: Vec<u32> = (0..=PROMPT as u32).map(|i| (i * 53 + 7) % 1000).collect();
    let mut losses = (f32::NAN, f32::NAN);
    let (t_on, t_off) = alternate(&mut pairs, |m| {
        let loss = m.train_step(&sequence)?;
        if !loss.is_finite() {
            return Err(format!("non-finite loss {loss}").into());
        }
        if m.capture.is_some() {
            losses.0 = loss;
        } else {
            losses.1 = loss;
        }
        Ok(())
    })?;
    finish(&pairs, bench, true)?;
    eprintln!(
        "{bench}: last loss with / without capture: {:.4} / {:.4}",
        losses.0, losses.1
    );
    emit_pair(bench, &format!("ns_per_step (median, {path})"), t_on, t_off);
    Ok(())
}

/// Which of Candle's paths a child runs (`TRACEGRAPH_LLAMA_PATH`), set by [`main`].
const PATH_VAR: &str = "TRACEGRAPH_LLAMA_PATH";

fn main() -> Res<()> {
    let dir = tempfile::tempdir()?;
    match std::env::var(PATH_VAR).as_deref() {
        Ok("fast") => {
            let threads = std::env::var("RAYON_NUM_THREADS")?;
            let path = format!("fast path: RAYON_NUM_THREADS={threads}");
            let omit = Omit::from_env()?;
            if omit.any() {
                // A diagnosis of the decode row, under a name of its own: no other row runs.
                let bench = format!("llama/fast/generate_omitting_{}", omit.names());
                return generate_rows(dir.path(), &bench, &tiny_config(), &path, true, omit);
            }
            let (tiny, bench) = (tiny_config(), "llama/fast/generate");
            generate_rows(dir.path(), bench, &tiny, &path, true, omit)?;
            train_rows(dir.path(), "llama/fast/train_step", &path)?;
            let medium = medium_config();
            let bench = "llama/fast/medium_generate";
            generate_rows(dir.path(), bench, &medium, &path, true, omit)?;
        }
        Ok("slow") => {
            let path = "slow path: RAYON_NUM_THREADS unset";
            let (tiny, omit) = (tiny_config(), Omit::default());
            generate_rows(dir.path(), "llama/generate", &tiny, path, false, omit)?;
            train_rows(dir.path(), "llama/train_step", path)?;
        }
        _ => {
            let threads = match std::env::var("RAYON_NUM_THREADS") {
                Ok(n) if n.parse::<usize>().is_ok_and(|n| n > 0) => n,
                _ => std::thread::available_parallelism()
                    .map_or(1, std::num::NonZero::get)
                    .to_string(),
            };
            run_self_as_child("the fast-path child", (PATH_VAR, "fast"), Some(&threads))?;
            if std::env::var_os(Omit::VAR).is_none() {
                run_self_as_child("the slow-path child", (PATH_VAR, "slow"), None)?;
            }
        }
    }
    Ok(())
}
