//! The demo training run behind `tracegraph demo`: the MLP trainer of [`mlp`], captured with a
//! schedule into a trace file.

pub(crate) mod mlp;

/// trace-candle's profile_llama example (a tiny random-weight candle-transformers Llama:
/// generation with a KV cache, then training, ten capture lines), run by
/// `tracegraph demo --model llama`: one file, shared with tests/llama and the llama bench.
#[path = "../../../trace-candle/examples/profile_llama.rs"]
#[allow(dead_code, unreachable_pub)]
pub(crate) mod llama;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, ensure};
use trace_candle::{Capture, Phase, Run, Schedule, Summary, TraceSession};

use mlp::{CLASSES, FEATURES, HIDDEN, MlpTrainer};

/// The demo's settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MlpDemoConfig {
    /// Where the trace is written (parent directories are created).
    pub(crate) trace_path: PathBuf,
    /// Training steps (default 50).
    pub(crate) steps: u64,
    /// Which steps are recorded (default: [`default_schedule`]).
    pub(crate) schedule: Schedule,
    /// Seed of the data and the initial weights (default 42).
    pub(crate) seed: u64,
    /// AdamW learning rate (default 0.01).
    pub(crate) learning_rate: f64,
    /// Sample call stacks in the recorded steps (`tracegraph demo --sample`; default off).
    pub(crate) sample: Option<trace_candle::SamplerConfig>,
    /// The rank and world size the trace names (`tracegraph demo --rank`; default none).
    pub(crate) rank: Option<(u32, u32)>,
    /// The run id the trace names (ranks of one run share it; default: the session's own).
    pub(crate) run_id: Option<String>,
}

impl MlpDemoConfig {
    /// The default demo writing its trace to `trace_path`.
    pub(crate) fn new(trace_path: impl Into<PathBuf>) -> Self {
        MlpDemoConfig {
            trace_path: trace_path.into(),
            steps: 50,
            schedule: default_schedule(),
            seed: 42,
            learning_rate: 0.01,
            sample: None,
            rank: None,
            run_id: None,
        }
    }
}

/// The demo's schedule: skip 5, wait 0, warmup 2, active 3, repeat 2 (records steps 7–9 and
/// 12–14).
pub(crate) fn default_schedule() -> Schedule {
    Schedule {
        skip_first: 5,
        wait: 0,
        warmup: 2,
        active: 3,
        repeat: 2,
    }
}

/// What a demo run produced.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MlpDemoReport {
    /// Where the trace was written.
    pub(crate) trace_path: PathBuf,
    /// The loss of every step, in order.
    pub(crate) losses: Vec<f32>,
    /// The loss of the first step.
    pub(crate) first_loss: f32,
    /// The loss of the last step.
    pub(crate) last_loss: f32,
    /// Training accuracy after the last step, in `[0, 1]`.
    pub(crate) accuracy: f32,
    /// The steps the schedule recorded (0-based).
    pub(crate) recorded_steps: Vec<u64>,
    /// The session's summary (events by type, bytes, outcome).
    pub(crate) summary: Summary,
}

/// Runs the demo: trains the MLP for `config.steps` steps with capture on and writes the
/// trace to `config.trace_path`. A failed step ends the trace as failed (still readable) and
/// is returned as the error.
pub(crate) fn run_mlp_demo(config: &MlpDemoConfig) -> anyhow::Result<MlpDemoReport> {
    ensure!(config.steps > 0, "steps must be at least 1");
    ensure!(
        config.learning_rate.is_finite() && config.learning_rate > 0.0,
        "learning rate must be positive and finite, got {}",
        config.learning_rate
    );
    if let Some(parent) = config.trace_path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    // The run's name and version tag are those the demo has always written (the workspace's
    // crates share one version), so demo traces stay comparable across releases.
    let mut run = Run::new("trace-candle::demo::run_mlp_demo", Phase::Train, "cpu")
        .schedule(config.schedule)
        .tag(
            "model",
            format!("mlp {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}"),
        )
        .tag("optimizer", "adamw")
        .tag("seed", config.seed.to_string())
        .version("trace-candle", env!("CARGO_PKG_VERSION"))
        // The demo writes the same path every time it runs: the last run replaces the one
        // before (by rename, so a symlink there is replaced, not followed), and a demo still
        // running there makes this one refuse.
        .overwrite(true);
    if let Some((rank, world_size)) = config.rank {
        run = run.rank(rank, world_size);
    }
    if let Some(id) = &config.run_id {
        run = run.run_id(id.clone());
    }
    let session = Arc::new(
        TraceSession::open(&config.trace_path, run)
            .with_context(|| format!("cannot write {}", config.trace_path.display()))?,
    );
    // Ctrl-C or a SIGTERM ends the demo as usual, with the `incomplete` trailer written.
    session
        .close_on_signals(trace_record::AfterSignal::Terminate)
        .context("installing the SIGINT/SIGTERM handler")?;
    let capture = Capture::new(Arc::clone(&session));
    if let Some(sampler) = config.sample {
        capture
            .sample_stacks(sampler)
            .context("starting the CPU sampler")?;
    }
    let mut trainer = MlpTrainer::new(Some(&capture), config.seed, config.learning_rate)
        .context("building the model")?;
    let mut losses = Vec::with_capacity(usize::try_from(config.steps).unwrap_or(0));
    let mut recorded_steps = Vec::new();
    for step in 0..config.steps {
        if session.is_active() {
            recorded_steps.push(step);
        }
        match trainer.step() {
            Ok(loss) => losses.push(loss),
            Err(e) => {
                // Keep what was recorded readable and say why it stopped.
                let _ = session.fail(&e.to_string());
                return Err(e).with_context(|| format!("training step {step}"));
            }
        }
    }
    let accuracy = trainer.accuracy().context("measuring the accuracy")?;
    // The capture's finish: the sampler's last recorded step and the capture's estimate of
    // its own cost, then the trailer.
    let summary = capture
        .finish()
        .with_context(|| format!("cannot finish {}", config.trace_path.display()))?;
    let first_loss = losses.first().copied().unwrap_or(f32::NAN);
    let last_loss = losses.last().copied().unwrap_or(f32::NAN);
    Ok(MlpDemoReport {
        trace_path: config.trace_path.clone(),
        losses,
        first_loss,
        last_loss,
        accuracy,
        recorded_steps,
        summary,
    })
}
