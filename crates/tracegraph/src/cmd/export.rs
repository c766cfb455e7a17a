//! `tracegraph export`: a trace as Chrome trace JSON (Perfetto, chrome://tracing, speedscope) or folded stacks.

use std::path::PathBuf;

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

/// Runs `tracegraph export`.
pub(crate) fn run(args: &ExportArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "export of {} is not available in this build yet",
        args.trace.display()
    )
}
