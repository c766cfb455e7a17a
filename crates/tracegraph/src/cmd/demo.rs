//! `tracegraph demo`: trains a small Candle MLP on CPU with capture and a schedule, writes the
//! trace, then prints its summary.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use trace_analyze::new_step_cache;
use trace_analyze::summarize;

use super::{Status, bytesu, load, write_stdout};
use crate::demo::{MlpDemoConfig, run_mlp_demo};

/// The trace's file name inside `--out`.
pub(crate) const TRACE_FILE: &str = "trace.jsonl";

/// The MLP demo's training steps when `--steps` is not given.
const DEFAULT_STEPS: u64 = 50;

/// The model the demo profiles.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum DemoModel {
    /// A 3-layer MLP trained with candle-nn under a PyTorch-style schedule.
    #[default]
    Mlp,
    /// A tiny random-weight candle-transformers Llama: prefill, 20 decode steps with the KV
    /// cache, 4 AdamW training steps (trace-candle's profile_llama example).
    Llama,
}

/// Arguments of `tracegraph demo`.
#[derive(clap::Args, Debug)]
pub(crate) struct DemoArgs {
    /// The model to profile.
    #[arg(long, value_enum, default_value_t = DemoModel::Mlp)]
    pub(crate) model: DemoModel,
    /// The directory the trace is written to (created when missing), as `trace.jsonl`, or
    /// `rank-R.jsonl` with `--rank R`. A path ending in `.jsonl` is the trace file itself, and
    /// one ending in `.jsonl.zst` a zstd-compressed trace file.
    #[arg(long, default_value = "tracegraph-demo", value_name = "DIR|FILE")]
    pub(crate) out: PathBuf,
    /// Record the MLP's trace as rank R of a distributed run of `--world-size` ranks (every
    /// rank trains the same model on the same data). N demos with one `--out DIR` make a rank
    /// directory that `summary DIR`, `spans DIR` and the other rank views read:
    /// `for r in 0 1 2 3; do tracegraph demo --rank $r --world-size 4 --out ranks & done; wait`.
    #[arg(long, value_name = "R", requires = "world_size")]
    pub(crate) rank: Option<u32>,
    /// The number of ranks of the run `--rank` names (R is below it).
    #[arg(long, value_name = "N", requires = "rank", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) world_size: Option<u32>,
    /// The run id the trace names; ranks of one run share it (default with `--rank`:
    /// `tracegraph-demo`, else one of the session's own).
    #[arg(long, value_name = "ID")]
    pub(crate) run_id: Option<String>,
    /// Training steps of the MLP, 50 when not given (the schedule records steps 7-9 and
    /// 12-14 when there are enough).
    /// N is from 1 to 1000000.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) steps: Option<u64>,
    /// Sample call stacks of every thread in the MLP's recorded steps (CPU sampler, about
    /// 1 kHz of CPU time; `--sample=HZ` for another rate); see them with `tracegraph hot`.
    /// HZ is from 1 to 10000.
    #[arg(
        long,
        value_name = "HZ",
        num_args = 0..=1,
        default_missing_value = "1000",
        value_parser = clap::value_parser!(u32).range(1..=10_000)
    )]
    pub(crate) sample: Option<u32>,
}

/// Where the demo writes: the trace file and the directory other outputs go to (the
/// exports its hints suggest).
fn out_paths(args: &DemoArgs) -> (PathBuf, PathBuf) {
    let name = args.out.file_name().unwrap_or_default().to_string_lossy();
    if name.ends_with(".jsonl") || name.ends_with(".jsonl.zst") {
        let dir = args
            .out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), std::path::Path::to_path_buf);
        return (args.out.clone(), dir);
    }
    let file = args
        .rank
        .map_or_else(|| TRACE_FILE.to_string(), |r| format!("rank-{r}.jsonl"));
    (args.out.join(file), args.out.clone())
}

/// Runs `tracegraph demo`.
pub(crate) fn run(args: &DemoArgs) -> anyhow::Result<Status> {
    if let (Some(rank), Some(world)) = (args.rank, args.world_size)
        && rank >= world
    {
        return Err(super::output::UsageError(format!(
            "--rank {rank} is not below --world-size {world} (ranks are 0 to {})",
            world - 1
        ))
        .into());
    }
    let (path, dir) = out_paths(args);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    if args.model == DemoModel::Llama {
        return run_llama(args, &path);
    }
    let mut config = MlpDemoConfig::new(&path);
    config.steps = args.steps.unwrap_or(DEFAULT_STEPS);
    config.sample = args.sample.map(trace_candle::SamplerConfig::hz);
    config.rank = args.rank.zip(args.world_size);
    config.run_id = args
        .run_id
        .clone()
        .or_else(|| args.rank.map(|_| "tracegraph-demo".to_string()));
    let started = Instant::now();
    let report = run_mlp_demo(&config).context("the demo training run failed")?;
    let took = started.elapsed();
    let recorded: Vec<String> = report.recorded_steps.iter().map(u64::to_string).collect();
    write_stdout(&format!(
        "trained a 3-layer MLP (candle-nn, CPU) for {} steps in {:.1} s: loss {:.4} -> {:.4}, accuracy {:.1}%\n\
         recorded steps [{}] (schedule: skip 5, warmup 2, active 3, repeat 2)\n\
         wrote {} ({} events, {})\n",
        config.steps,
        took.as_secs_f64(),
        report.first_loss,
        report.last_loss,
        report.accuracy * 100.0,
        recorded.join(", "),
        path.display(),
        report.summary.counts.total(),
        bytesu(report.summary.bytes),
    ))?;
    let trace = load(&path, false)?;
    let cache = new_step_cache();
    let s = summarize(&trace, &cache)?;
    write_stdout(&super::summary::render(&s))?;
    let p = path.display();
    // Only the commands that have data in this trace: `hot` needs sampled stacks (`--sample`),
    // `gradients` gradient facts.
    let mut next = vec![
        format!("tracegraph ops {p} --sort self --limit 10"),
        format!("tracegraph spans {p}"),
        format!("tracegraph memory {p}"),
        format!("tracegraph graph {p}"),
    ];
    if s.gradients.is_some() {
        next.push(format!("tracegraph gradients {p}"));
    }
    if !trace.sampled.is_empty() {
        next.push(format!("tracegraph hot {p} --by phase"));
    }
    next.push(format!("tracegraph validate --strict {p}"));
    next.push(format!(
        "tracegraph export {p} --format chrome -o {}",
        dir.join("demo.trace.json").display()
    ));
    next.push(format!(
        "tracegraph report {p} -o {}",
        dir.join("report.html").display()
    ));
    write_stdout(&format!(
        "\nnext (prefix with `cargo run --release -p tracegraph --` when tracegraph is not installed):\n  {}",
        next.join("\n  ")
    ))?;
    Ok(Status::Ok)
}

/// `tracegraph demo --model llama`: the profile_llama example into `path`, then the summary.
fn run_llama(args: &DemoArgs, path: &std::path::Path) -> anyhow::Result<Status> {
    if args.sample.is_some() || args.steps.is_some() || args.rank.is_some() || args.run_id.is_some()
    {
        return Err(super::output::UsageError(
            "--steps, --sample, --rank and --run-id apply to the MLP demo; `--model llama` runs \
             a fixed generation (prefill + 20 decode steps) and 4 training steps"
                .to_string(),
        )
        .into());
    }
    crate::demo::llama::run(path)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("the Llama demo run failed")?;
    let trace = load(path, false)?;
    let s = summarize(&trace, &new_step_cache())?;
    write_stdout(&super::summary::render(&s))?;
    Ok(Status::Ok)
}
