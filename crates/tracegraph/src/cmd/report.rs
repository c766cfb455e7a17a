//! `tracegraph report`: one self-contained HTML page summarising a trace.

use std::path::PathBuf;

use anyhow::Context;
use trace_analyze::runs::{TorchCompareOptions, compare_with_torch, load_torch_path};
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
    /// A torch.profiler trace of the same model (`prof.export_chrome_trace`, `.json` or
    /// `.json.gz`): the report adds what `tracegraph compare TRACE --against-torch` prints,
    /// op kind by op kind and layer by layer, with diagnoses.
    #[arg(long, value_name = "TORCH_TRACE")]
    pub(crate) against_torch: Option<PathBuf>,
    /// With `--against-torch`: the Candle steps to compare (`A..B` or `N`, as `tracegraph`
    /// numbers them); default: the numbers of torch's `ProfilerStep#N` where the trace has
    /// them, else every step.
    #[arg(long, value_name = "A..B", value_parser = super::parse_step_range, requires = "against_torch")]
    pub(crate) candle_steps: Option<(u64, u64)>,
    /// With `--against-torch`: torch's steps (`ProfilerStep#N` numbers, `A..B` or `N`);
    /// default: every recorded step.
    #[arg(long, value_name = "A..B", value_parser = super::parse_step_range, requires = "against_torch")]
    pub(crate) torch_steps: Option<(u64, u64)>,
    /// With `--against-torch`: a file mapping torch's range paths to Candle's span paths, one
    /// `TORCH_PATH => CANDLE_PATH` a line (whole leading names; `#` starts a comment line).
    #[arg(long, value_name = "FILE", requires = "against_torch")]
    pub(crate) layer_map: Option<PathBuf>,
}

/// Runs `tracegraph report`: loads the trace (and the baseline, and the torch run), runs the
/// analyses and writes one self-contained HTML page.
pub(crate) fn run(args: &ReportArgs) -> anyhow::Result<()> {
    let mut inputs = vec![args.trace.as_path()];
    inputs.extend(args.baseline.as_deref());
    inputs.extend(args.against_torch.as_deref());
    inputs.extend(args.layer_map.as_deref());
    // Before reading anything: an output that is an input is refused (exit 2).
    let mut out = Output::create(&args.output, &inputs)?;
    let trace = super::load(&args.trace, false)?;
    let baseline = match &args.baseline {
        Some(b) => Some(super::load(b, false)?),
        None => None,
    };
    // The torch run and the layer map are read before the analyses: bad input fails fast.
    let torch = match &args.against_torch {
        Some(t) => Some((
            load_torch_path(t)?,
            TorchCompareOptions {
                candle_steps: args.candle_steps,
                torch_steps: args.torch_steps,
                layer_map: match &args.layer_map {
                    Some(p) => super::compare_torch::read_layer_map(p)?,
                    None => Vec::new(),
                },
            },
        )),
        None => None,
    };
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
