//! `tracegraph export`: a trace as Chrome trace JSON or folded stacks; traces as Parquet tables.
//!
//! Chrome trace JSON opens in Perfetto, chrome://tracing and speedscope; the Parquet tables
//! (`DIR/run=<run id>/rank=<rank>/<table>.parquet`) are read by DuckDB, Polars and Spark.

use std::fs::File;
use std::io::{BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::ValueEnum as _;
use trace_analyze::AnalyzeError;
use trace_export::{
    Adjustments, ArgsMode, ChromeOptions, ExportError, TraceOutline, folded_samples_classified,
    folded_stacks, write_chrome_outlined,
};
use trace_record::{ClosedStep, ReadOptions, StepTracker, TraceReader};

use super::output::{Output, UsageError};
use super::progress;

/// The export formats.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExportFormat {
    /// Chrome Trace Event Format JSON (object form) for Perfetto UI, chrome://tracing, speedscope.
    Chrome,
    /// Folded stacks (`span;span;op self_ns`) for flamegraph.pl, inferno and speedscope.
    Folded,
    /// Sampled call stacks under the span they were taken in (`span;span;frame;frame N`),
    /// weighted by sample COUNT, not ns (a trace recorded with the CPU sampler:
    /// `tracegraph demo --sample`, trace-candle's `Capture::sample_stacks`).
    FoldedSamples,
    /// Parquet tables (ops, spans, steps, memory, samples, frames, stacks, gradients, heap)
    /// under the directory `-o DIR`, partitioned `run=<run id>/rank=<rank>` (Hive style), for
    /// DuckDB, Polars and Spark; takes several traces (the ranks of a run, or many runs).
    Parquet,
}

/// Arguments of `tracegraph export`.
#[derive(clap::Args, Debug)]
pub(crate) struct ExportArgs {
    /// The trace file (JSON Lines) to export; with `--format parquet`, one or more traces or
    /// directories of traces (their `*.jsonl` and `*.jsonl.zst` files).
    #[arg(required = true, value_name = "TRACE")]
    pub(crate) traces: Vec<PathBuf>,
    /// The output format. `folded` weighs each stack by measured self time in ns;
    /// `folded-samples` by the number of CPU samples (estimates; one sample's CPU time is
    /// printed on stderr). The two units are never mixed in one file.
    #[arg(long, value_enum, default_value = "chrome")]
    pub(crate) format: ExportFormat,
    /// Where to write the export (`-` for standard output); with `--format parquet`, the
    /// dataset's root directory (created when missing; the partition `run=<id>` of each run
    /// exported is replaced whole, with the ranks given, nothing else in it is touched).
    #[arg(short, long)]
    pub(crate) output: PathBuf,
    /// With `--format parquet`: the run id the rows and the partition carry instead of each
    /// header's (give one to export traces of one job recorded without a shared
    /// `Run::run_id` as the ranks of one run).
    #[arg(long, value_name = "ID")]
    pub(crate) run: Option<String>,
    /// Export one step only, numbered as `graph` lists them (0: what ran before the first
    /// `step()`).
    #[arg(long, value_name = "N")]
    pub(crate) step: Option<u64>,
    /// Args of spans and ops in the Chrome export: `compact` (what ran: span kind and path,
    /// op shape, dtype, device; speedscope aggregates calls), `full` (plus per-call ids,
    /// bytes and step; speedscope then shows one frame per call), `none` (names only).
    #[arg(long, value_enum, default_value = "compact")]
    pub(crate) args: ChromeArgs,
    /// Time resolution of the Chrome export's logical memory counters, in ns (default 1000,
    /// one µs): per device, the changes within one window of N ns are written as the
    /// window's peaks and its end, so every peak and the bytes after each window are exact;
    /// 0 writes every change.
    /// N is from 0 to 1000000000 (one second).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=MAX_MEMORY_RESOLUTION_NS))]
    pub(crate) memory_resolution_ns: Option<u64>,
}

/// The coarsest `--memory-resolution-ns`: one second, already far coarser than a step.
const MAX_MEMORY_RESOLUTION_NS: u64 = 1_000_000_000;

/// `--args`: which args spans and ops carry in the Chrome export.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChromeArgs {
    /// Span kind, execution step and path; op shape, dtype, device, category, FLOPs.
    Compact,
    /// Compact plus span id, step index, tensor ids and bytes of every call.
    Full,
    /// No args (frames keyed by name alone).
    None,
}

impl From<ChromeArgs> for ArgsMode {
    fn from(a: ChromeArgs) -> ArgsMode {
        match a {
            ChromeArgs::Compact => ArgsMode::Compact,
            ChromeArgs::Full => ArgsMode::Full,
            ChromeArgs::None => ArgsMode::None,
        }
    }
}

/// Runs `tracegraph export`: streams the trace into the chosen format, into a temporary
/// file renamed onto `--output` on success (see [`Output`]).
pub(crate) fn run(args: &ExportArgs) -> anyhow::Result<()> {
    if args.format == ExportFormat::Parquet {
        return run_parquet(args);
    }
    if args.run.is_some() {
        return Err(UsageError("--run is an option of --format parquet".into()).into());
    }
    if args.memory_resolution_ns.is_some() && args.format != ExportFormat::Chrome {
        return Err(
            UsageError("--memory-resolution-ns is an option of --format chrome".into()).into(),
        );
    }
    let [trace] = args.traces.as_slice() else {
        return Err(UsageError(format!(
            "--format {} exports one trace ({} given); --format parquet takes several",
            args.format
                .to_possible_value()
                .map_or_else(String::new, |v| v.get_name().to_string()),
            args.traces.len()
        ))
        .into());
    };
    let mut out = Output::create(&args.output, &[trace])?;
    let (mut reader, name, show) = open_trace(trace)?;
    let result = export(args, trace, &mut reader, &mut out);
    progress::clear(show);
    let to_stdout = out.is_stdout();
    let (adjustments, what) = match result {
        Ok(r) => r,
        // `export -o - | head`: the reader of stdout has what it wanted.
        Err(e) if to_stdout && super::output::is_broken_pipe(&e) => return Ok(()),
        // The temporary file is removed when `out` drops; the target is untouched.
        Err(e) => return Err(located(e, &name, trace)),
    };
    out.commit()?;
    if reader.is_incomplete() {
        eprintln!(
            "tracegraph: warning: {name} is incomplete (no complete trailer); exported up to its last complete line"
        );
    }
    if adjustments.total() > 0 {
        eprintln!(
            "tracegraph: note: {} span/op times adjusted so they nest per thread ({})",
            adjustments.total(),
            adjustments.describe()
        );
    }
    if !to_stdout {
        eprintln!("tracegraph: wrote {what} to {}", args.output.display());
    }
    Ok(())
}

/// A trace reader on `path` (plain or zstd-compressed, decided by the first bytes), its
/// name for messages, and whether a progress bar is shown.
type Opened = (
    TraceReader<trace_record::TraceInput<BufReader<progress::ProgressReader<File>>>>,
    String,
    bool,
);

fn open_trace(path: &Path) -> anyhow::Result<Opened> {
    let file = File::open(path).with_context(|| format!("cannot open trace {}", path.display()))?;
    let len = file.metadata().map_or(0, |m| m.len());
    let show = std::io::stderr().is_terminal() && len >= progress::MIN_BYTES;
    let name = path.display().to_string();
    let src = progress::ProgressReader::new(file, len, show, &name);
    let input = trace_record::TraceInput::new(BufReader::with_capacity(256 * 1024, src))
        .with_context(|| format!("cannot read trace {name}"))?;
    let reader =
        TraceReader::new(input, ReadOptions::default()).map_err(|error| AnalyzeError::Read {
            file: name.clone(),
            error,
        })?;
    Ok((reader, name, show))
}

/// `--format parquet`: every trace into `DIR/run=<run id>/rank=<rank>/<table>.parquet`,
/// streamed (a row group per table every 65,536 rows). Each run is built aside in `DIR`
/// (`.tmp-run=...`) and swapped in whole once every trace of every run exported (see
/// [`trace_parquet::Dataset`]): a failure leaves every old partition as it was, and no link
/// inside `DIR` is followed.
fn run_parquet(args: &ExportArgs) -> anyhow::Result<()> {
    if args.step.is_some() {
        return Err(UsageError(
            "--step is not an option of --format parquet: every row has its step (filter on the `step` column)".into(),
        )
        .into());
    }
    if args.args != ChromeArgs::Compact {
        return Err(UsageError("--args is an option of --format chrome".into()).into());
    }
    if args.memory_resolution_ns.is_some() {
        return Err(
            UsageError("--memory-resolution-ns is an option of --format chrome".into()).into(),
        );
    }
    let root = &args.output;
    if root.as_os_str() == "-" {
        return Err(UsageError(
            "--format parquet writes a directory of tables: give -o DIR, not -".into(),
        )
        .into());
    }
    if root.exists() && !root.is_dir() {
        return Err(UsageError(format!(
            "--format parquet writes a directory of tables, and {} is not a directory",
            root.display()
        ))
        .into());
    }
    let paths = super::trace_paths(&args.traces)?;
    let opts = trace_parquet::ExportOptions::default();
    // Where each trace goes, decided from the headers before anything is written: the runs
    // in order of first appearance, each with its traces and ranks.
    let mut seen: std::collections::HashMap<(String, u32), &Path> = Default::default();
    let mut run_index: std::collections::HashMap<String, usize> = Default::default();
    let mut runs: Vec<(String, Vec<(&Path, u32)>)> = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let (reader, name, show) = open_trace(path)?;
        progress::clear(show);
        let run = &reader.header().run;
        let run_id = args.run.clone().unwrap_or_else(|| run.run_id.clone());
        // As the rank report numbers them: the header's rank, else the trace's position.
        let rank = match run.rank {
            Some(r) => r,
            None => u32::try_from(i).unwrap_or(u32::MAX),
        };
        if rank > trace_parquet::MAX_RANK {
            anyhow::bail!(
                "{name}: {}",
                trace_parquet::ParquetError::RankOutOfRange { rank }
            );
        }
        if let Some(first) = seen.insert((run_id.clone(), rank), path) {
            return Err(UsageError(format!(
                "{} and {} are both rank {rank} of run {run_id}: export them apart, or give --run",
                first.display(),
                path.display()
            ))
            .into());
        }
        let at = *run_index.entry(run_id.clone()).or_insert_with(|| {
            runs.push((run_id, Vec::new()));
            runs.len() - 1
        });
        runs[at].1.push((path, rank));
    }
    let dataset = trace_parquet::Dataset::open(root)?;
    let (mut rows, mut bytes) = ([0u64; trace_parquet::Table::COUNT], 0u64);
    // Every run built before any is swapped in: a failure anywhere leaves the dataset as it
    // was (each build dropped removes its own directory).
    let mut builds = Vec::with_capacity(runs.len());
    for (run_id, traces) in &runs {
        let mut build = dataset.begin_run(run_id)?;
        for &(path, rank) in traces {
            let (mut reader, name, show) = open_trace(path)?;
            let outs = build
                .rank_outputs(rank)?
                .map(|f| std::io::BufWriter::with_capacity(256 * 1024, f));
            let result = trace_parquet::write_tables(&mut reader, run_id, rank, &opts, outs);
            progress::clear(show);
            let (_, summary) = match result {
                Ok(r) => r,
                Err(trace_parquet::ParquetError::Read(error)) => {
                    return Err(AnalyzeError::Read { file: name, error }.into());
                }
                Err(e @ trace_parquet::ParquetError::OutOfRange { .. }) => {
                    anyhow::bail!("{name}: {e}");
                }
                Err(e) => return Err(anyhow::Error::new(e).context(format!("exporting {name}"))),
            };
            parquet_notes(&name, &summary);
            for (r, n) in rows.iter_mut().zip(summary.rows) {
                *r += n;
            }
            bytes += summary.total_bytes();
        }
        builds.push(build);
    }
    for build in builds {
        build.commit()?;
    }
    if paths.len() > 1 && runs.len() > 1 && args.run.is_none() {
        eprintln!(
            "tracegraph: note: the traces name {} different run ids, so they are {} runs in the dataset; give --run ID to export them as the ranks of one run",
            runs.len(),
            runs.len()
        );
    }
    let counts: Vec<String> = trace_parquet::Table::ALL
        .iter()
        .zip(rows)
        .map(|(t, n)| format!("{n} {}", t.name()))
        .collect();
    // One table per glob: the tables' schemas differ, so a glob over all of them fails
    // ("schema mismatch in glob").
    eprintln!(
        "tracegraph: wrote Parquet tables of {} trace(s) to {} ({}; {bytes} bytes); each run's partition replaced whole; read one table per glob: DuckDB read_parquet('{}/**/ops.parquet', hive_partitioning = true), Polars pl.scan_parquet('{}/**/ops.parquet', hive_partitioning=True) (any table name for ops)",
        paths.len(),
        root.display(),
        counts.join(", "),
        root.display(),
        root.display()
    );
    Ok(())
}

/// The notes of one trace's Parquet export: incomplete, memory and heap lines not applied.
fn parquet_notes(name: &str, summary: &trace_parquet::ExportSummary) {
    if summary.incomplete {
        eprintln!(
            "tracegraph: warning: {name} is incomplete (no complete trailer); exported up to its last complete line, its last step marked complete = false"
        );
    }
    if summary.frees_without_alloc + summary.duplicate_allocs > 0 {
        eprintln!(
            "tracegraph: note: {name}: {} frees without allocation (delta_bytes 0), {} duplicate allocations (replacing the live one)",
            summary.frees_without_alloc, summary.duplicate_allocs
        );
    }
    if summary.heap_ignored > 0 {
        eprintln!(
            "tracegraph: note: {name}: {} tracked-heap lines ignored by the heap replay (delta_bytes 0: an id allocated again, or a free of an id not live)",
            summary.heap_ignored
        );
    }
}

/// The steps of the trace at `path`, as `0-5, 8` (`none` when there are none), for the
/// message of an unknown `--step`: numbered as every command numbers them (trace-record's
/// `StepTracker`). Reads the trace again (an error path).
fn recorded_steps(path: &std::path::Path) -> String {
    let Ok(reader) = TraceReader::open(path, ReadOptions::default()) else {
        return "unknown (the trace cannot be read again)".into();
    };
    let mut tracker = StepTracker::new();
    let mut steps: Vec<u64> = Vec::new();
    let mut keep = |ended: Option<ClosedStep>| {
        if let Some(s) = ended.filter(|s| s.is_step) {
            steps.push(s.index);
        }
    };
    for line in reader.filter_map(Result::ok) {
        keep(tracker.event(&line.event));
    }
    keep(tracker.finish());
    steps.sort_unstable();
    steps.dedup();
    if steps.is_empty() {
        return "none".into();
    }
    let mut parts = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        let mut j = i;
        while j + 1 < steps.len() && steps[j + 1] == steps[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            steps[i].to_string()
        } else {
            format!("{}-{}", steps[i], steps[j])
        });
        i = j + 1;
    }
    parts.join(", ")
}

/// A read error in the middle of the trace becomes the loader's error (file, line, field;
/// exit code 3 for an invalid trace, like every other command); anything else says it
/// happened while exporting `name`.
fn located(e: anyhow::Error, name: &str, path: &std::path::Path) -> anyhow::Error {
    match e.downcast::<ExportError>() {
        Ok(ExportError::StepNotFound(step)) => UsageError(format!(
            "--step {step}: the trace {name} has no step {step} (recorded steps: {})",
            recorded_steps(path)
        ))
        .into(),
        Ok(ExportError::Read(error)) => AnalyzeError::Read {
            file: name.to_string(),
            error,
        }
        .into(),
        Ok(other) => anyhow::Error::new(other).context(format!("exporting {name}")),
        Err(e) => e.context(format!("exporting {name}")),
    }
}

/// The Chrome export's first pass over the trace at `path`: the span names every analysis
/// shows (`#0` dropped where a span has no numbered sibling) and the thread that drives the
/// first step, so that ops outside every span are drawn on it (see `trace_export::outline`).
fn chrome_outline(path: &Path) -> anyhow::Result<TraceOutline> {
    let (mut reader, _, show) = open_trace(path)?;
    let outline = trace_export::outline(&mut reader);
    progress::clear(show);
    Ok(outline?)
}

fn export<R: std::io::BufRead + Send, W: Write>(
    args: &ExportArgs,
    trace: &Path,
    reader: &mut TraceReader<R>,
    out: W,
) -> anyhow::Result<(Adjustments, String)> {
    match args.format {
        ExportFormat::Chrome => {
            let opts = ChromeOptions {
                step: args.step,
                args: args.args.into(),
                memory_resolution_ns: args
                    .memory_resolution_ns
                    .unwrap_or(trace_export::DEFAULT_MEMORY_RESOLUTION_NS),
            };
            let outline = chrome_outline(trace)?;
            let s = write_chrome_outlined(reader, out, &opts, &outline)?;
            let m = s.memory;
            if m.frees_without_alloc + m.duplicate_allocs + m.free_size_mismatches > 0 {
                eprintln!(
                    "tracegraph: note: memory events not applied to the counters: {} frees without allocation, {} duplicate allocations, {} frees with another size",
                    m.frees_without_alloc, m.duplicate_allocs, m.free_size_mismatches
                );
            }
            if s.heap.frees_without_alloc + s.heap.duplicate_allocs > 0 {
                eprintln!(
                    "tracegraph: note: heap events not applied to the `{}` counter: {} frees of an allocation not live, {} allocations of an id already live",
                    trace_export::HEAP_COUNTER,
                    s.heap.frees_without_alloc,
                    s.heap.duplicate_allocs
                );
            }
            if s.non_finite_counters > 0 {
                eprintln!(
                    "tracegraph: note: {} non-finite counter values left out (JSON has no NaN)",
                    s.non_finite_counters
                );
            }
            Ok((
                s.adjustments,
                format!(
                    "Chrome trace JSON ({} events: {} spans, {} ops, {} memory counters, {} tracked heap samples, {} instants; {} args; open in https://ui.perfetto.dev, chrome://tracing or https://www.speedscope.app, named *.trace.json)",
                    s.events_written,
                    s.spans,
                    s.ops,
                    s.memory_counters,
                    s.heap_counters,
                    s.instants,
                    opts.args.as_str()
                ),
            ))
        }
        ExportFormat::Folded => {
            let f = folded_stacks(reader, args.step)?;
            if let Some(step) = args.step
                && !f.step_found
            {
                return Err(ExportError::StepNotFound(step).into());
            }
            f.write(out)?;
            if f.truncated > 0 {
                eprintln!(
                    "tracegraph: note: {} spans/ops deeper than {} frames folded into a `{}` frame",
                    f.truncated,
                    trace_export::MAX_FOLDED_FRAMES,
                    trace_export::DEEPER_FRAMES
                );
            }
            Ok((
                f.adjustments,
                format!(
                    "folded stacks ({} stacks, {} ns of self time; for flamegraph.pl, inferno or speedscope)",
                    f.lines.len(),
                    f.total_self_ns
                ),
            ))
        }
        // Written by `run_parquet`, never through one output.
        ExportFormat::Parquet => {
            Err(UsageError("--format parquet writes a directory".into()).into())
        }
        ExportFormat::FoldedSamples => {
            // Waiting and the profiler's own stacks marked as `tracegraph hot` classifies them.
            let mut classes = super::hot::StackClasses::default();
            let f = folded_samples_classified(reader, args.step, &mut classes)?;
            if let Some(rt) = classes.read_time() {
                eprintln!("tracegraph: note: {}", rt.note());
            }
            if let Some(step) = args.step
                && !f.step_found
            {
                return Err(ExportError::StepNotFound(step).into());
            }
            if f.total_samples == 0 {
                let what = match args.step {
                    Some(step) => format!("step {step} of the trace has no sampled stacks"),
                    None => "the trace has no sampled stacks".to_string(),
                };
                // The same answer as `tracegraph hot` gives (exit 0): an empty folded file is
                // a valid one, and a trace without samples is not a usage error.
                eprintln!(
                    "tracegraph: no samples: {what}; record it with the CPU sampler (`tracegraph demo --sample`, trace-candle's Capture::sample_stacks with feature `sampler`)"
                );
                return Ok((
                    f.adjustments,
                    "folded sampled stacks (no samples: an empty file)".to_string(),
                ));
            }
            f.write(out)?;
            let s = &f.sampler;
            let rate = match s.effective_hz {
                Some(hz) => format!(
                    "requested {} Hz, achieved {hz:.0} Hz of the sampled threads' CPU time",
                    s.requested_hz
                ),
                None => format!("requested {} Hz", s.requested_hz),
            };
            let per = s
                .ns_per_sample()
                .map_or_else(|| "unknown".to_string(), trace_analyze::format_ns);
            eprintln!(
                "tracegraph: note: weights are sample counts, not ns: {} samples in {} step(s) ({rate}; {} lost); one sample ≈ {per} of CPU time (an estimate)",
                f.total_samples, s.steps, s.lost
            );
            eprintln!(
                "tracegraph: note: {} samples of threads waiting end in a [waiting] frame and {} of the profiler's own work in a [profiler] frame, as `tracegraph hot` counts them",
                f.waiting, f.profiler
            );
            if f.outside_steps > 0 {
                eprintln!(
                    "tracegraph: note: {} samples taken outside the trace's steps (in the empty boundary after the last step() or an empty step 0 before the first) are left out, as every command counts steps",
                    f.outside_steps
                );
            }
            if f.without_span + f.unknown_stacks + f.truncated > 0 {
                eprintln!(
                    "tracegraph: note: {} samples without a known span (under [phase] or {}), {} naming an undefined stack ({}), {} lines cut at {} span / {} stack frames ({})",
                    f.without_span,
                    trace_export::NO_SPAN,
                    f.unknown_stacks,
                    trace_export::UNKNOWN_STACK,
                    f.truncated,
                    trace_export::MAX_FOLDED_FRAMES,
                    trace_export::MAX_SAMPLED_FRAMES,
                    trace_export::DEEPER_FRAMES
                );
            }
            Ok((
                f.adjustments,
                format!(
                    "folded sampled stacks ({} stacks, {} samples; weights are sample counts; for flamegraph.pl --countname=samples, inferno or speedscope)",
                    f.lines.len(),
                    f.total_samples
                ),
            ))
        }
    }
}
