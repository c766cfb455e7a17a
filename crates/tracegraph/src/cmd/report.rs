//! `tracegraph report`: one self-contained HTML page summarising a trace.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

use anyhow::Context;
use trace_report::{ReportOptions, build_report, write_html};

/// Arguments of `tracegraph report`.
#[derive(clap::Args, Debug)]
pub(crate) struct ReportArgs {
    /// The trace file (JSON Lines) to report on.
    pub(crate) trace: PathBuf,
    /// Where to write the HTML page.
    #[arg(short, long, default_value = "report.html")]
    pub(crate) output: PathBuf,
    /// A baseline trace to compare with: the report adds the comparison of the baseline
    /// (before) with TRACE (after).
    #[arg(long, value_name = "BASELINE")]
    pub(crate) baseline: Option<PathBuf>,
}

/// Runs `tracegraph report`: loads the trace (and the baseline), runs the analyses and
/// writes one self-contained HTML page.
pub(crate) fn run(args: &ReportArgs) -> anyhow::Result<()> {
    let trace = super::load(&args.trace, false)?;
    let baseline = match &args.baseline {
        Some(b) => Some(super::load(b, false)?),
        None => None,
    };
    let data = build_report(&trace, baseline.as_ref(), &ReportOptions::default())
        .with_context(|| format!("analysing {}", args.trace.display()))?;
    let file = File::create(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    if let Err(e) = write_html(&data, BufWriter::new(file)) {
        let _ = std::fs::remove_file(&args.output);
        return Err(e).with_context(|| format!("writing {}", args.output.display()));
    }
    for cap in &data.caps {
        eprintln!("tracegraph: note: capped for size: {cap}");
    }
    eprintln!(
        "tracegraph: wrote {} (self-contained; open it in a browser)",
        args.output.display()
    );
    Ok(())
}
