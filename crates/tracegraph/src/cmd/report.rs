//! `tracegraph report`: one self-contained HTML page summarising a trace.

use std::path::PathBuf;

use anyhow::Context;
use trace_analyze::runs::compare_with_torch;
use trace_report::{ReportOptions, build_report, write_html};

use super::output::{Output, is_broken_pipe};

/// Arguments of `tracegraph report`.
#[derive(clap::Args, Debug)]
pub(crate) struct ReportArgs {
    /// The trace file (JSON Lines) to report on.
    pub(crate) trace: PathBuf,
    /// Where to write the HTML page (`-` for standard output).
    #[arg(short, long, default_value = "report.html")]
    pub(crate) output: PathBuf,
    /// A baseline trace to compare with: the report adds the comparison of the baseline
    /// (before) with TRACE (after).
    #[arg(long, value_name = "BASELINE")]
    pub(crate) baseline: Option<PathBuf>,
    /// A comparison with a torch.profiler run (a section of the page).
    #[command(flatten)]
    pub(crate) torch: super::compare_torch::TorchFlags,
}

/// Runs `tracegraph report`: loads the trace (and the baseline, and the torch run), runs the
/// analyses and writes one self-contained HTML page.
pub(crate) fn run(args: &ReportArgs) -> anyhow::Result<()> {
    let mut inputs = vec![args.trace.as_path()];
    inputs.extend(args.baseline.as_deref());
    inputs.extend(args.torch.inputs());
    // Before reading anything: an output that is an input is refused (exit 2).
    let mut out = Output::create(&args.output, &inputs)?;
    let trace = super::load(&args.trace, false)?;
    let baseline = match &args.baseline {
        Some(b) => Some(super::load(b, false)?),
        None => None,
    };
    // The torch run and the layer map are read before the analyses: bad input fails fast.
    let torch = args.torch.load()?;
    let opts = ReportOptions::default();
    let mut data = build_report(&trace, baseline.as_ref(), &opts)
        .with_context(|| format!("analysing {}", args.trace.display()))?;
    if let Some((run, compare)) = &torch {
        data = data.with_torch(&compare_with_torch(&trace, run, compare), &opts);
    }
    // On failure the temporary file is removed when `out` drops; the target is untouched.
    if let Err(e) = write_html(&data, &mut out) {
        let e = anyhow::Error::new(e).context(format!("writing {}", out.shown().display()));
        // `report -o - | head`: the reader of stdout has what it wanted.
        return if out.is_stdout() && is_broken_pipe(&e) {
            Ok(())
        } else {
            Err(e)
        };
    }
    let to_stdout = out.is_stdout();
    out.commit()?;
    for cap in &data.caps {
        eprintln!("tracegraph: note: capped for size: {cap}");
    }
    if !to_stdout {
        eprintln!(
            "tracegraph: wrote {} (self-contained; open it in a browser)",
            args.output.display()
        );
    }
    Ok(())
}
