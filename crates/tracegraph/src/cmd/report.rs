//! `tracegraph report`: one self-contained HTML page summarising a trace.

use std::path::PathBuf;

/// Arguments of `tracegraph report`.
#[derive(clap::Args, Debug)]
pub(crate) struct ReportArgs {
    /// The trace file (JSON Lines) to report on.
    pub(crate) trace: PathBuf,
    /// Where to write the HTML page.
    #[arg(short, long, default_value = "report.html")]
    pub(crate) output: PathBuf,
    /// A second trace to compare with: the report adds the comparison of the two runs.
    #[arg(long, value_name = "CANDIDATE")]
    pub(crate) baseline: Option<PathBuf>,
}

/// Runs `tracegraph report`.
pub(crate) fn run(args: &ReportArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "report of {} is not available in this build yet",
        args.trace.display()
    )
}
