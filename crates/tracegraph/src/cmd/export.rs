//! `tracegraph export`: a trace as Chrome trace JSON (Perfetto, chrome://tracing, speedscope) or folded stacks.

use std::fs::File;
use std::io::{BufReader, BufWriter, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use trace_analyze::AnalyzeError;
use trace_export::{Adjustments, ChromeOptions, ExportError, folded_stacks, write_chrome};
use trace_record::{ReadOptions, TraceReader};

use super::progress;

/// The export formats.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExportFormat {
    /// Chrome Trace Event Format JSON (object form) for Perfetto UI, chrome://tracing, speedscope.
    Chrome,
    /// Folded stacks (`span;span;op self_ns`) for flamegraph.pl, inferno and speedscope.
    Folded,
}

/// Arguments of `tracegraph export`.
#[derive(clap::Args, Debug)]
pub(crate) struct ExportArgs {
    /// The trace file (JSON Lines) to export.
    pub(crate) trace: PathBuf,
    /// The output format.
    #[arg(long, value_enum, default_value = "chrome")]
    pub(crate) format: ExportFormat,
    /// Where to write the export (`-` for standard output).
    #[arg(short, long)]
    pub(crate) output: PathBuf,
    /// Export one step only (the step index as recorded by `step` events).
    #[arg(long, value_name = "N")]
    pub(crate) step: Option<u64>,
}

/// Runs `tracegraph export`: streams the trace into the chosen format.
pub(crate) fn run(args: &ExportArgs) -> anyhow::Result<()> {
    let file = File::open(&args.trace)
        .with_context(|| format!("cannot open trace {}", args.trace.display()))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let show = std::io::stderr().is_terminal() && len >= progress::MIN_BYTES;
    let name = args.trace.display().to_string();
    let src = progress::ProgressReader::new(file, len, show, &name);
    let mut reader = TraceReader::new(
        BufReader::with_capacity(256 * 1024, src),
        ReadOptions::default(),
    )
    .map_err(|error| AnalyzeError::Read {
        file: name.clone(),
        error,
    })?;
    let to_stdout = args.output.as_os_str() == "-";
    let result = if to_stdout {
        let out = std::io::stdout().lock();
        export(args, &mut reader, BufWriter::with_capacity(1 << 20, out))
    } else {
        let out = File::create(&args.output)
            .with_context(|| format!("cannot create {}", args.output.display()))?;
        export(args, &mut reader, BufWriter::with_capacity(1 << 20, out))
    };
    progress::clear(show);
    if result.is_err() && !to_stdout {
        // Leave no half-written or empty export behind.
        let _ = std::fs::remove_file(&args.output);
    }
    let (adjustments, what) = result.map_err(|e| located(e, &name))?;
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

/// A read error in the middle of the trace becomes the loader's error (file, line, field;
/// exit code 3 for an invalid trace, like every other command); anything else says it
/// happened while exporting `name`.
fn located(e: anyhow::Error, name: &str) -> anyhow::Error {
    match e.downcast::<ExportError>() {
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
            let s = write_chrome(reader, out, &ChromeOptions { step: args.step })?;
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
                    "Chrome trace JSON ({} events: {} spans, {} ops, {} memory counters, {} instants; open in https://ui.perfetto.dev, chrome://tracing or https://www.speedscope.app)",
                    s.events_written, s.spans, s.ops, s.memory_counters, s.instants
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
            Ok((
                f.adjustments,
                format!(
                    "folded stacks ({} stacks, {} ns of self time; for flamegraph.pl, inferno or speedscope)",
                    f.lines.len(),
                    f.total_self_ns
                ),
            ))
        }
    }
}
