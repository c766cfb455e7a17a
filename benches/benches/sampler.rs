//! Benchmark suite `sampler`.
//!
//! The CPU sampler's cost at 1 and 4 kHz on the demo's training step and on a tiny Llama's
//! generation, and the sampling rate achieved at each rate.
//!
//! Each rate is one capture whose sampler runs at that rate, with a schedule that alternates
//! recorded and idle steps (wait 1, active 1, forever): a recorded step samples, an idle one
//! does not, so the same work alternates on and off step by step, the order flipping every
//! round, for a time budget per workload (10 s quick, 40 s full). Medians. The 1 kHz rows
//! keep their names; the 4 kHz rows end in `_4k`.
//!
//! Rows:
//! - `sampler/train_step ns_per_step (median)` (`sampler/train_step_4k` at 4 kHz): one step
//!   of `tracegraph demo`'s trainer (`crates/tracegraph/src/demo/mlp.rs`, uninstrumented)
//!   while the CPU sampler runs, against the same step with the sampler disarmed. Targets:
//!   ratio ≤ 1.03 at 1 kHz, ≤ 1.06 at 4 kHz. `median_paired_ratio` is the median of the
//!   per-round ratios.
//! - `sampler/llama_generate ns_per_generation (median, RAYON_NUM_THREADS=n)`
//!   (`sampler/llama_generate_4k`): one generation of the tiny candle-transformers Llama that
//!   `profile_llama` profiles (prefill of its 16-token prompt, then 20 greedy decode steps
//!   with a fresh KV cache; the model itself uninstrumented), on against off as above; same
//!   targets. Run it with `RAYON_NUM_THREADS` set (`cargo xtask bench` does): unset, Candle
//!   reads /proc on every matmul, which hides the sampler's cost. The metric names the value.
//! - `sampler/rate achieved_hz` (`sampler/rate_4k`): samples taken per second of process CPU
//!   time over the capture's sampled steps (both workloads), against the requested rate
//!   (the ratio is achieved / requested; target ≥ 0.9 at both rates): the ticker (the
//!   default source) delivers it less the sampler's own threads' CPU time and the samples
//!   of threads found asleep that it did not catch running again; perf events
//!   (`TRACEGRAPH_SAMPLER_SOURCE=perf_event`) less time in the kernel where only user space
//!   may be sampled; the process CPU-time timer, where neither works, is capped by the
//!   kernel's tick. The source and the rate over the sampled threads' CPU time go to stderr.
//! - `sampler/rate sampled_threads_hz` (`sampler/rate_4k`): the same samples per second of
//!   the sampled threads' CPU time (the process's less the sampler's own threads'), against
//!   the requested rate: the rate as `tracegraph hot` and `summary` report it, and as
//!   `SamplerConfig`'s `hz` defines it (the sampler's threads are never sampled). The row above
//!   keeps the process's CPU time for continuity; it also charges the sampler's own work.
//! - `sampler/rate lost_per_1000` (`sampler/rate_4k`): samples lost per 1000 taken
//!   (target ≤ 10).
//!
//! `TRACEGRAPH_SAMPLER_DIAGNOSE=deliver_only` or `tick_only` runs the same rounds with a
//! [`SamplerDiagnostic`] instead of sampling (the threads are interrupted as when sampling
//! but no stack is read; or the ticker ticks and sends nothing), to split the on/off cost
//! into its parts. Those runs emit only the on/off rows, named
//! `sampler/<row>_<diagnostic>` (e.g. `sampler/train_step_4k_deliver_only`), so a
//! diagnosis never stands in for the real rows; any other value is an error.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::llama::{Cache, Config, Llama};
use trace_candle::{Capture, SamplerConfig, SamplerDiagnostic};
use trace_record::schema::{Phase, Schedule};
use trace_record::{Run, TraceSession};
use tracegraph_benches::{Rounds, Row, alternate, emit, emit_paired, quick};

// The trainer `tracegraph demo` runs: one home (the CLI), measured here as is.
#[path = "../../crates/tracegraph/src/demo/mlp.rs"]
mod mlp;

// The model `profile_llama` profiles: one home (the example), its configuration and sizes.
#[path = "../../crates/trace-candle/examples/profile_llama.rs"]
#[allow(dead_code, unreachable_pub)]
mod profile_llama;

use mlp::MlpTrainer;
use profile_llama::{DECODE, PROMPT, tiny_config};

/// The tiny Llama, uninstrumented (built under no `tracing` subscriber).
struct TinyLlama {
    cfg: Config,
    device: Device,
    llama: Llama,
    prompt: Vec<u32>,
}

impl TinyLlama {
    fn new() -> Self {
        let (cfg, device) = (tiny_config(), Device::Cpu);
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &device);
        let llama = Llama::load(vb, &cfg).expect("tiny Llama");
        let prompt = (0..PROMPT)
            .map(|i| ((i * 37 + 11) % cfg.vocab_size) as u32)
            .collect();
        TinyLlama {
            cfg,
            device,
            llama,
            prompt,
        }
    }

    /// Prefill of the prompt, then [`DECODE`] greedy decode steps with a fresh KV cache.
    fn generate(&self) -> Vec<u32> {
        let mut cache = Cache::new(true, DType::F32, &self.cfg, &self.device).expect("cache");
        let mut tokens = self.prompt.clone();
        let mut pos = 0;
        for step in 0..=DECODE {
            let context = if step == 0 {
                &tokens[..]
            } else {
                &tokens[tokens.len() - 1..]
            };
            let input = Tensor::new(context, &self.device)
                .and_then(|t| t.unsqueeze(0))
                .expect("input");
            let logits = self
                .llama
                .forward(&input, pos, &mut cache)
                .expect("forward");
            pos += context.len();
            let next = logits
                .squeeze(0)
                .and_then(|l| l.argmax(0))
                .and_then(|t| t.to_scalar::<u32>())
                .expect("next token");
            tokens.push(next);
        }
        tokens.split_off(self.prompt.len())
    }
}

/// The workloads measured at each rate.
struct Work {
    trainer: MlpTrainer,
    llama: TinyLlama,
    rounds: Rounds,
}

/// The diagnostic `TRACEGRAPH_SAMPLER_DIAGNOSE` asks for (see the module docs).
fn diagnostic_from_env() -> Option<SamplerDiagnostic> {
    let value = std::env::var("TRACEGRAPH_SAMPLER_DIAGNOSE").ok()?;
    let all = [SamplerDiagnostic::DeliverOnly, SamplerDiagnostic::TickOnly];
    let found = all.into_iter().find(|d| d.as_str() == value);
    assert!(
        found.is_some(),
        "TRACEGRAPH_SAMPLER_DIAGNOSE={value:?}: expected deliver_only or tick_only"
    );
    found
}

/// Runs both workloads on and off under one capture sampling at `hz` (or running
/// `diagnostic` instead) and emits the rows, their bench names ending in `suffix`.
fn measure(
    dir: &Path,
    hz: u32,
    suffix: &str,
    diagnostic: Option<SamplerDiagnostic>,
    work: &mut Work,
) {
    let run = Run::new("benches::sampler", Phase::Train, "cpu").schedule(Schedule {
        skip_first: 0,
        wait: 1,
        warmup: 0,
        active: 1,
        repeat: 0,
    });
    let path = dir.join(format!("sampler-{hz}.jsonl"));
    let session = Arc::new(TraceSession::open(path, run).expect("trace file"));
    let capture = Capture::new(Arc::clone(&session));
    let config = SamplerConfig {
        diagnostic,
        ..SamplerConfig::hz(hz)
    };
    capture.sample_stacks(config).expect("sampler");
    let suffix = match diagnostic {
        Some(d) => format!("{suffix}_{d}"),
        None => suffix.to_string(),
    };
    // Steps the capture (and so the sampler) to the wanted state, then times `f` in it.
    let timed = |on: bool, f: &mut dyn FnMut()| {
        while capture.is_active() != on {
            capture.step();
        }
        let start = Instant::now();
        f();
        let ns = start.elapsed().as_nanos() as f64;
        capture.step();
        ns
    };
    let trainer = &mut work.trainer;
    let (train_on, train_off) = alternate(work.rounds, 1, |on| {
        timed(on, &mut || {
            black_box(trainer.step().expect("step"));
        })
    });
    let llama = &work.llama;
    let (gen_on, gen_off) = alternate(work.rounds, 1, |on| {
        timed(on, &mut || {
            black_box(llama.generate());
        })
    });
    capture.finish().expect("finish");
    let stats = capture.sampler_stats().expect("sampler stats");
    eprintln!(
        "sampler at {hz} Hz: {} training and {} generation rounds; {} samples taken, {} lost over {} sampled steps; training accuracy {:.3}",
        train_on.len(),
        gen_on.len(),
        stats.taken,
        stats.lost,
        stats.steps,
        work.trainer.accuracy().expect("accuracy")
    );
    // Which source sampled (the ticker, perf events, or the timer), and the
    // rate over the sampled threads' CPU time (the process's less the sampler thread's own).
    eprintln!(
        "sampler/rate{suffix}: source {}; {:.0} Hz of the sampled threads' CPU time, the sampler thread used {:.1} ms of {:.1} ms",
        stats.source.map_or("none", |s| s.as_str()),
        stats.sampled_hz().unwrap_or(f64::NAN),
        stats.sampler_cpu_ns.unwrap_or(0) as f64 / 1e6,
        stats.cpu_ns.unwrap_or(0) as f64 / 1e6,
    );
    if let Some(d) = diagnostic {
        eprintln!(
            "sampler/rate{suffix}: diagnostic {d}: {} signals handled without a sample",
            stats.interrupts
        );
    }
    emit_paired(
        &format!("sampler/train_step{suffix}"),
        "ns_per_step (median)",
        "same step, sampler timer disarmed (alternating)",
        train_on,
        train_off,
    );
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "unset".to_string());
    emit_paired(
        &format!("sampler/llama_generate{suffix}"),
        &format!("ns_per_generation (median, RAYON_NUM_THREADS={threads})"),
        "same generation, sampler disarmed (alternating)",
        gen_on,
        gen_off,
    );
    if diagnostic.is_some() {
        return;
    }
    let rate = format!("sampler/rate{suffix}");
    // Over the process's CPU time, then over the sampled threads' (see the module docs).
    for (metric, hz) in [
        ("achieved_hz", stats.effective_hz()),
        ("sampled_threads_hz", stats.sampled_hz()),
    ] {
        let row = Row::new(&rate, metric, hz.unwrap_or(f64::NAN), "Hz");
        emit(row.vs("requested", f64::from(config.hz)));
    }
    emit(Row::new(
        &rate,
        "lost_per_1000",
        if stats.taken > 0 {
            stats.lost as f64 * 1000.0 / stats.taken as f64
        } else {
            f64::NAN
        },
        "samples",
    ));
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (warmup, rounds) = if quick() {
        (5, (10, 20, 400))
    } else {
        (20, (40, 100, 4000))
    };
    let mut work = Work {
        trainer: MlpTrainer::new(None, 42, 0.01).expect("trainer"),
        llama: TinyLlama::new(),
        rounds: Rounds {
            budget: Duration::from_secs(rounds.0),
            min_rounds: rounds.1,
            max_rounds: rounds.2,
        },
    };
    for _ in 0..warmup {
        black_box(work.trainer.step().expect("step"));
        black_box(work.llama.generate());
    }
    // The default rate (1 kHz), then 4 kHz.
    let diagnostic = diagnostic_from_env();
    measure(dir.path(), 1000, "", diagnostic, &mut work);
    measure(dir.path(), 4000, "_4k", diagnostic, &mut work);
}
