//! `tracegraph export`: a trace as Chrome trace JSON or folded stacks.
//!
//! Chrome trace JSON opens in Perfetto, chrome://tracing and speedscope.

use std::fs::File;
use std::io::{BufReader, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use trace_analyze::AnalyzeError;
use trace_export::{
    Adjustments, ArgsMode, ChromeOptions, ExportError, folded_samples, folded_stacks, write_chrome,
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
}

/// Arguments of `tracegraph export`.
#[derive(clap::Args, Debug)]
pub(crate) struct ExportArgs {
    /// The trace file (JSON Lines) to export.
    pub(crate) trace: PathBuf,
    /// The output format. `folded` weighs each stack by measured self time in ns;
    /// `folded-samples` by the number of CPU samples (estimates; one sample's CPU time is
    /// printed on stderr). The two units are never mixed in one file.
    #[arg(long, value_enum, default_value = "chrome")]
    pub(crate) format: ExportFormat,
    /// Where to write the export (`-` for standard output).
    #[arg(short, long)]
    pub(crate) output: PathBuf,
    /// Export one step only, numbered as `graph` lists them (0: what ran before the first
    /// `step()`).
    #[arg(long, value_name = "N")]
    pub(crate) step: Option<u64>,
    /// Args of spans and ops in the Chrome export: `compact` (what ran: span kind and path,
    /// op shape, dtype, device; speedscope aggregates calls), `full` (plus per-call ids,
    /// bytes and step; speedscope then shows one frame per call), `none` (names only).
    #[arg(long, value_enum, default_value = "compact")]
    pub(crate) args: ChromeArgs,
}

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
    let mut out = Output::create(&args.output, &[&args.trace])?;
    let file = File::open(&args.trace)
        .with_context(|| format!("cannot open trace {}", args.trace.display()))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let show = std::io::stderr().is_terminal() && len >= progress::MIN_BYTES;
    let name = args.trace.display().to_string();
    let src = progress::ProgressReader::new(file, len, show, &name);
    // Plain or zstd-compressed, decided by the first bytes.
    let input = trace_record::TraceInput::new(BufReader::with_capacity(256 * 1024, src))
        .with_context(|| format!("cannot read trace {name}"))?;
    let mut reader =
        TraceReader::new(input, ReadOptions::default()).map_err(|error| AnalyzeError::Read {
            file: name.clone(),
            error,
        })?;
    let result = export(args, &mut reader, &mut out);
    progress::clear(show);
    let to_stdout = out.is_stdout();
    let (adjustments, what) = match result {
        Ok(r) => r,
        // `export -o - | head`: the reader of stdout has what it wanted.
        Err(e) if to_stdout && super::output::is_broken_pipe(&e) => return Ok(()),
        // The temporary file is removed when `out` drops; the target is untouched.
        Err(e) => return Err(located(e, &name, &args.trace)),
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

fn export<R: std::io::BufRead + Send, W: Write>(
    args: &ExportArgs,
    reader: &mut TraceReader<R>,
    out: W,
) -> anyhow::Result<(Adjustments, String)> {
    match args.format {
        ExportFormat::Chrome => {
            let opts = ChromeOptions {
                step: args.step,
                args: args.args.into(),
            };
            let s = write_chrome(reader, out, &opts)?;
            let m = s.memory;
            if m.frees_without_alloc + m.duplicate_allocs + m.free_size_mismatches > 0 {
                eprintln!(
                    "tracegraph: note: memory events not applied to the counters: {} frees without allocation, {} duplicate allocations, {} frees with another size",
                    m.frees_without_alloc, m.duplicate_allocs, m.free_size_mismatches
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
                    "Chrome trace JSON ({} events: {} spans, {} ops, {} memory counters, {} instants; {} args; open in https://ui.perfetto.dev, chrome://tracing or https://www.speedscope.app, named *.trace.json)",
                    s.events_written,
                    s.spans,
                    s.ops,
                    s.memory_counters,
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
        ExportFormat::FoldedSamples => {
            let f = folded_samples(reader, args.step)?;
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
            let s = f.sampler;
            let rate = match s.effective_hz() {
                Some(hz) => format!(
                    "requested {} Hz, achieved {hz:.0} Hz of process CPU time",
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
