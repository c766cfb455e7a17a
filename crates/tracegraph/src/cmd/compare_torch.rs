//! `tracegraph compare CANDLE --against-torch TORCH`: a Candle run beside PyTorch's.
//!
//! Op kind by op kind and layer by layer, time per step on each side, what Candle loses,
//! and the diagnoses; `--json` prints `tracegraph.compare_torch/1`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use trace_analyze::runs::{
    CandleSource, TorchCompareOptions, TorchComparison, TorchRun, compare_with_torch,
    load_torch_path,
};
use trace_analyze::{format_ns, format_share, format_signed_ns, format_times};

use super::{Status, Table, load, print_json, write_stdout};

/// The options of a comparison with a torch.profiler run, one set for `compare` and `report`.
#[derive(clap::Args, Debug)]
pub(crate) struct TorchFlags {
    /// A torch.profiler trace of the same model (`prof.export_chrome_trace`, `.json` or
    /// `.json.gz`): set the Candle trace beside it, op kind by op kind and layer by layer,
    /// with diagnoses (`compare --json`: schema `tracegraph.compare_torch/1`; `report`: a
    /// section of the page).
    #[arg(long, value_name = "TORCH_TRACE")]
    pub(crate) against_torch: Option<PathBuf>,
    /// With `--against-torch`: the Candle steps to compare (`A..B` or `N`, as `tracegraph`
    /// numbers them); default: the numbers of torch's `ProfilerStep#N` where the Candle trace
    /// has them, else every step.
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

impl TorchFlags {
    /// The files these options read (for the output-is-an-input guard).
    pub(crate) fn inputs(&self) -> impl Iterator<Item = &Path> {
        self.against_torch
            .iter()
            .chain(&self.layer_map)
            .map(PathBuf::as_path)
    }

    /// The torch run and the comparison's options, when `--against-torch` was given: the
    /// trace and the layer map are read here, so bad input fails before any analysis.
    pub(crate) fn load(&self) -> anyhow::Result<Option<(TorchRun, TorchCompareOptions)>> {
        let Some(torch) = &self.against_torch else {
            return Ok(None);
        };
        let run = load_torch_path(torch)?;
        let opts = TorchCompareOptions {
            candle_steps: self.candle_steps,
            torch_steps: self.torch_steps,
            layer_map: match &self.layer_map {
                Some(p) => read_layer_map(p)?,
                None => Vec::new(),
            },
        };
        Ok(Some((run, opts)))
    }
}

/// Reads a layer map: one `TORCH_PATH => CANDLE_PATH` a line; blank lines and lines starting
/// with `#` are skipped. An unreadable line is an error naming the file and line.
fn read_layer_map(path: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the layer map {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((from, to)) = line.split_once("=>") else {
            return Err(super::output::UsageError(format!(
                "{}:{}: expected `TORCH_PATH => CANDLE_PATH`, found `{line}`",
                path.display(),
                i + 1
            ))
            .into());
        };
        let (from, to) = (from.trim(), to.trim());
        if from.is_empty() || to.is_empty() {
            return Err(super::output::UsageError(format!(
                "{}:{}: a path on each side of `=>`",
                path.display(),
                i + 1
            ))
            .into());
        }
        out.push((from.to_string(), to.to_string()));
    }
    Ok(out)
}

/// Runs `compare CANDLE --against-torch TORCH` and prints it (`limit` rows a table).
pub(crate) fn run(
    candle: &Path,
    torch: (TorchRun, TorchCompareOptions),
    limit: usize,
    json: bool,
) -> anyhow::Result<Status> {
    let trace = load(candle, false)?;
    let (torch, opts) = torch;
    let c = compare_with_torch(&trace, &torch, &opts);
    if json {
        print_json("compare_torch", &c)?;
    } else {
        write_stdout(&text(&c, limit))?;
    }
    Ok(Status::Ok)
}

/// `1.23× slower` / `2.00× faster` / `-`.
fn ratio_cell(r: Option<f64>) -> String {
    r.and_then(format_times).unwrap_or_else(|| "-".to_string())
}

/// The comparison as text.
fn text(c: &TorchComparison, limit: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Candle {}", c.candle.describe());
    let _ = writeln!(out, "torch  {}", c.torch.describe());
    if let Some(r) = c.step_ratio {
        let _ = writeln!(out, "Candle's step: {}", ratio_cell(Some(r)));
    }
    for w in &c.warnings {
        let _ = writeln!(out, "warning: {w}");
    }

    let _ = writeln!(
        out,
        "\nby op kind, per step, by what Candle loses (Candle: {}; torch: ops' self time)",
        c.candle_source.describe()
    );
    let sampled = matches!(c.candle_source, CandleSource::Sampled { .. });
    let mut t = Table::new(&[
        "kind",
        ">Candle",
        if sampled { ">95% interval" } else { ">" },
        ">torch",
        ">Candle - torch",
        ">ratio",
        "Candle's top op",
        "torch's top op",
    ]);
    for r in c.kinds.iter().take(limit) {
        t.row(vec![
            r.kind.label().to_string(),
            r.candle_ns.map_or("-".into(), format_ns),
            r.candle_interval.map_or(String::new(), |(lo, hi)| {
                format!("{} - {}", format_ns(lo), format_ns(hi))
            }),
            format_ns(r.torch_ns),
            r.loss_ns.map_or("-".into(), format_signed_ns),
            ratio_cell(r.ratio),
            r.candle_ops.first().map_or("-".into(), |(n, _)| n.clone()),
            r.torch_ops.first().map_or("-".into(), |(n, _)| n.clone()),
        ]);
    }
    out.push_str(&t.render());
    out.push('\n');
    let _ = writeln!(
        out,
        "copy / layout: {} of Candle's step, {} of torch's",
        c.candle_copy_share.map_or("-".into(), format_share),
        format_share(c.torch_copy_share)
    );

    let _ = writeln!(
        out,
        "\nby layer (both names; `#0` = none), per step, by what Candle loses (span time \
         against record_function range time, both measured)"
    );
    if c.layers.is_empty() {
        let _ = writeln!(
            out,
            "no layer named on both sides: name torch's record_function ranges as Candle's \
             spans, or map them with --layer-map (`TORCH_PATH => CANDLE_PATH` a line)"
        );
    } else {
        let mut t = Table::new(&["layer", ">Candle", ">torch", ">Candle - torch", ">ratio"]);
        for r in c.layers.iter().take(limit) {
            t.row(vec![
                r.path.clone(),
                format_ns(r.candle_ns),
                format_ns(r.torch_ns),
                format_signed_ns(r.loss_ns),
                ratio_cell(r.ratio),
            ]);
        }
        out.push_str(&t.render());
        out.push('\n');
    }
    if !c.candle_only_layers.is_empty() || !c.torch_only_layers.is_empty() {
        let _ = writeln!(
            out,
            "unmatched: {} Candle span path(s), {} torch range path(s) (--json lists them)",
            c.candle_only_layers.len(),
            c.torch_only_layers.len()
        );
    }

    out.push_str("\ndiagnoses, by what Candle loses\n");
    if c.diagnoses.is_empty() {
        out.push_str("none: no kind or layer is 1.5× slower and 5% of Candle's step\n");
    }
    for (i, d) in c.diagnoses.iter().enumerate() {
        let _ = writeln!(out, "{}. {}", i + 1, d.text);
        for e in &d.evidence {
            let _ = writeln!(out, "   - {e}");
        }
    }
    out.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_map_names_the_bad_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("map.txt");
        std::fs::write(&p, "# comment\nmodel.layers.0 => block#0\n\nnonsense\n").unwrap();
        let err = read_layer_map(&p).unwrap_err().to_string();
        assert!(err.contains("map.txt:4"), "{err}");
        std::fs::write(&p, "model.layers.0 => block#0\n").unwrap();
        assert_eq!(
            read_layer_map(&p).unwrap(),
            [("model.layers.0".to_string(), "block#0".to_string())]
        );
    }
}
