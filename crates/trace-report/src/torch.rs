//! The report's torch section: a Candle run beside a torch.profiler run of the same model.
//!
//! From trace-analyze's [`TorchComparison`] only, in its order, every figure written by
//! trace-analyze's formatters as `tracegraph compare --against-torch` writes it: nothing is
//! recomputed here.

use serde_json::{Value, json};
use trace_analyze::runs::{CandleSource, LOSS_MIN_SHARE, SLOWER_MIN_RATIO, TorchComparison};
use trace_analyze::{format_ns, format_share, format_signed_ns, format_times};

use crate::model::{Column, ReportData, ReportOptions, TableData, TorchData, TorchDiagnosis, col};

/// A ratio cell: `2.50× slower` / `2.00× faster`, or absent.
fn ratio_cell(r: Option<f64>) -> Value {
    r.and_then(format_times).map_or(Value::Null, Value::String)
}

/// A figure, or absent.
fn figure(v: Option<String>) -> Value {
    v.map_or(Value::Null, Value::String)
}

/// A kind's top ops with their time per step: `matmul 1.2 ms, ...`; absent when none.
fn top_ops(ops: &[(String, f64)]) -> Value {
    if ops.is_empty() {
        return Value::Null;
    }
    let parts: Vec<String> = ops
        .iter()
        .map(|(name, ns)| format!("{name} ({})", format_ns(*ns)))
        .collect();
    json!(parts.join(", "))
}

/// States a cut table among the caps and above the table.
fn cap(t: &mut TableData, total: usize, what: &str, caps: &mut Vec<String>) {
    t.total_rows = total;
    if total > t.rows.len() {
        caps.push(format!(
            "torch comparison {what}: the {} of {total} on which Candle loses most",
            t.rows.len()
        ));
        let note = format!(
            "The first {} of {total} (most lost by Candle first).",
            t.rows.len()
        );
        t.note = Some(match t.note.take() {
            Some(n) => format!("{n} {note}"),
            None => note,
        });
    }
}

fn kinds_table(c: &TorchComparison, limit: usize, caps: &mut Vec<String>) -> TableData {
    let sampled = matches!(c.candle_source, CandleSource::Sampled { .. });
    let mut cols: Vec<Column> = vec![
        col("kind", "text"),
        col("Candle", "figure").explained(&format!(
            "Candle's time on the kind per step: {}",
            c.candle_source.describe()
        )),
    ];
    if sampled {
        cols.push(
            col("95% interval", "figure")
                .explained("the 95% Wilson interval of the sampled estimate, per step"),
        );
    }
    cols.extend([
        col("torch", "figure").explained("torch's ops' self time on the kind per step"),
        col("Candle - torch", "delta_figure")
            .explained("what Candle loses per step (negative: Candle is faster)"),
        col("ratio", "figure").explained("Candle's time over torch's"),
        col("Candle's top ops", "text").explained("Candle's ops of the kind, most time first"),
        col("torch's top ops", "text").explained("torch's ops of the kind, most self time first"),
    ]);
    let mut t = TableData::new(cols);
    t.title = "By op kind, per step, by what Candle loses".to_string();
    t.note = Some(format!(
        "Candle: {}; torch: ops' self time.",
        c.candle_source.describe()
    ));
    t.empty = "Neither side ran an op.".to_string();
    for r in c.kinds.iter().take(limit) {
        let mut row = vec![json!(r.kind.label()), figure(r.candle_ns.map(format_ns))];
        if sampled {
            row.push(figure(r.candle_interval.map(|(lo, hi)| {
                format!("{} - {}", format_ns(lo), format_ns(hi))
            })));
        }
        row.extend([
            json!(format_ns(r.torch_ns)),
            figure(r.loss_ns.map(format_signed_ns)),
            ratio_cell(r.ratio),
            top_ops(&r.candle_ops),
            top_ops(&r.torch_ops),
        ]);
        t.rows.push(row);
    }
    cap(&mut t, c.kinds.len(), "op kinds", caps);
    t
}

fn layers_table(c: &TorchComparison, limit: usize, caps: &mut Vec<String>) -> TableData {
    let mut t = TableData::new(vec![
        col("layer", "name").explained("the path as Candle names it; `#0` is the same as none"),
        col("Candle", "figure").explained("Candle's span time in the layer per step (measured)"),
        col("torch", "figure")
            .explained("torch's record_function range time in the layer per step (measured)"),
        col("Candle - torch", "delta_figure")
            .explained("what Candle loses per step (negative: Candle is faster)"),
        col("ratio", "figure").explained("Candle's time over torch's"),
    ]);
    t.title = "By layer, per step, by what Candle loses".to_string();
    t.note = Some(
        "Both names (`#0` = none); span time against record_function range time, both measured."
            .to_string(),
    );
    t.filter = true;
    t.empty = "No layer named on both sides: name torch's record_function ranges as Candle's \
               spans, or map them with --layer-map (`TORCH_PATH => CANDLE_PATH` a line)."
        .to_string();
    for r in c.layers.iter().take(limit) {
        t.rows.push(vec![
            json!(r.path),
            json!(format_ns(r.candle_ns)),
            json!(format_ns(r.torch_ns)),
            json!(format_signed_ns(r.loss_ns)),
            ratio_cell(r.ratio),
        ]);
    }
    cap(&mut t, c.layers.len(), "layers", caps);
    t
}

/// The torch section of `c`, each table capped at `opts.max_comparison_rows` rows (stated
/// in `caps`).
fn torch_data(c: &TorchComparison, opts: &ReportOptions, caps: &mut Vec<String>) -> TorchData {
    let mut summary = vec![
        ("Candle".to_string(), c.candle.describe()),
        ("torch".to_string(), c.torch.describe()),
    ];
    if let Some(Value::String(r)) = c.step_ratio.map(|r| ratio_cell(Some(r))) {
        summary.push(("Candle's step".to_string(), r));
    }
    let unmatched =
        (!c.candle_only_layers.is_empty() || !c.torch_only_layers.is_empty()).then(|| {
            format!(
                "unmatched: {} Candle span path(s), {} torch range path(s) \
                 (`tracegraph compare --against-torch --json` lists them)",
                c.candle_only_layers.len(),
                c.torch_only_layers.len()
            )
        });
    TorchData {
        summary,
        warnings: c.warnings.clone(),
        kinds: kinds_table(c, opts.max_comparison_rows, caps),
        copy_layout: format!(
            "copy / layout: {} of Candle's step, {} of torch's",
            c.candle_copy_share.map_or("-".into(), format_share),
            format_share(c.torch_copy_share)
        ),
        layers: layers_table(c, opts.max_comparison_rows, caps),
        unmatched,
        diagnoses: c
            .diagnoses
            .iter()
            .map(|d| TorchDiagnosis {
                rule: d.rule,
                loss: format_signed_ns(d.loss_ns),
                text: d.text.clone(),
                evidence: d.evidence.clone(),
            })
            .collect(),
        no_diagnosis: format!(
            "None: no kind or layer is {SLOWER_MIN_RATIO}× slower and {:.0}% of Candle's step.",
            LOSS_MIN_SHARE * 100.0
        ),
    }
}

impl ReportData {
    /// The report with the torch section: `c`, the comparison of this report's trace with a
    /// torch.profiler run of the same model (trace-analyze's `compare_with_torch`), drawn as
    /// `tracegraph compare --against-torch` prints it. Tables are capped at
    /// `opts.max_comparison_rows` rows; a cut is listed among the caps.
    pub fn with_torch(mut self, c: &TorchComparison, opts: &ReportOptions) -> ReportData {
        self.subtitle
            .push_str(&format!(" · beside torch {}", c.torch.source));
        self.torch = Some(torch_data(c, opts, &mut self.caps));
        self
    }
}
