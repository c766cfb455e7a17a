//! The report's gradients section: parameters without a gradient first, non-finite ones flagged.
//!
//! Also each parameter's gradient norm per step, and the autograd graph per step.

use serde_json::{Value, json};
use trace_analyze::{GradientVerdict, Trace, format_bytes, gradient_report};
use trace_record::schema::GradientState;

use crate::model::{GradientsData, TableData, col};

/// Parameter rows kept (worst first, so the cut ones are the fine ones).
const MAX_PARAM_ROWS: usize = 1000;
/// Norm columns: the last this many steps that hold gradient facts.
const MAX_STEP_COLUMNS: usize = 24;
/// Autograd rows kept (the first ones, in step order).
const MAX_AUTOGRAD_ROWS: usize = 400;

/// What a verdict means, as the page says it.
fn verdict_text(v: GradientVerdict) -> &'static str {
    match v {
        GradientVerdict::Never => "never received a gradient",
        GradientVerdict::NonFinite => "non-finite gradient",
        GradientVerdict::Sometimes => "gradient sometimes missing",
        GradientVerdict::AlwaysZero => "always zero",
        GradientVerdict::Ok => "ok",
    }
}

/// A norm cell: the norm when recorded (finite), else the fact's state (`missing`,
/// `non-finite`, `zero`, `present` when no norm was computed).
fn norm_cell(state: GradientState, norm: Option<f64>) -> Value {
    match norm {
        Some(x) if x.is_finite() => json!(x),
        _ => json!(match state {
            GradientState::NonFinite => "non-finite",
            other => other.as_str(),
        }),
    }
}

/// The gradients section of `trace`; absent when the trace has no gradient facts and no
/// autograd graph. Caps that cut something are added to `caps`.
pub(crate) fn gradients_data(trace: &Trace, caps: &mut Vec<String>) -> Option<GradientsData> {
    let report = gradient_report(trace);
    if report.params.is_empty() && report.autograd.is_empty() {
        return None;
    }
    let count = |v: GradientVerdict| report.params.iter().filter(|p| p.verdict == v).count();
    let mut summary = vec![
        (
            "parameters with gradient facts".to_string(),
            report.params.len().to_string(),
        ),
        (
            "never received a gradient".to_string(),
            if report.never == 0 {
                "none".to_string()
            } else {
                format!(
                    "{} (not trained: no gradient reached them in any step, e.g. through an op without backward)",
                    report.never
                )
            },
        ),
        (
            "non-finite".to_string(),
            if report.non_finite == 0 {
                "none".to_string()
            } else {
                format!(
                    "{} (NaN or infinite entries in some step)",
                    report.non_finite
                )
            },
        ),
        (
            "sometimes missing".to_string(),
            count(GradientVerdict::Sometimes).to_string(),
        ),
        (
            "always zero".to_string(),
            count(GradientVerdict::AlwaysZero).to_string(),
        ),
        ("ok".to_string(), count(GradientVerdict::Ok).to_string()),
        (
            "steps with gradient facts".to_string(),
            report.steps.len().to_string(),
        ),
    ];
    if !report.autograd.is_empty() {
        summary.push((
            "steps with an autograd graph".to_string(),
            report.autograd.len().to_string(),
        ));
    }

    // The norm columns: the last steps that hold facts.
    let shown: &[u64] = &report.steps[report.steps.len().saturating_sub(MAX_STEP_COLUMNS)..];
    let column_of: std::collections::HashMap<u64, usize> =
        shown.iter().enumerate().map(|(j, &s)| (s, j)).collect();
    // The parameter and its verdict, facts and norms are key columns (on screen at any
    // width); the norm of each step shown may scroll sideways.
    let mut columns = vec![
        col("parameter", "name").keyed(),
        col("verdict", "text").explained(
            "over the run, worst first: never received a gradient, non-finite, sometimes missing, always zero, ok",
        ).keyed(),
        col("present", "int").explained("steps with a finite, non-zero gradient").keyed(),
        col("missing", "int").explained("steps in which no gradient reached the parameter").keyed(),
        col("zero", "int").explained("steps with a gradient that is exactly zero").keyed(),
        col("non-finite", "int").explained("steps with NaN or infinite entries").keyed(),
        col("last norm", "norm").explained("L2 norm of the last recorded gradient").keyed(),
        col("max norm", "norm").explained("largest recorded L2 norm").keyed(),
    ];
    for s in shown {
        columns.push(col(&format!("step {s}"), "norm").explained(
            "L2 norm of the gradient in this step, or its state when there is no norm (missing, non-finite); – when the step recorded nothing for the parameter",
        ));
    }
    let mut params = TableData::new(columns);
    params.title = "Gradient per parameter".to_string();
    params.sortable = true;
    params.filter = true;
    params.total_rows = report.params.len();
    params.empty = format!(
        "{}.",
        trace_analyze::no_gradient_facts_reason(report.backward_without_parameters)
    );
    params.note = Some(
        "Parameters that never received a gradient first, then non-finite ones, then by name. The \"step N\" columns show that step's gradient L2 norm (its last fact when a step recorded several).".to_string(),
    );
    let mut row_class = Vec::new();
    for p in report.params.iter().take(MAX_PARAM_ROWS) {
        let mut row = vec![
            json!(p.param),
            json!(verdict_text(p.verdict)),
            json!(p.present),
            json!(p.missing),
            json!(p.zero),
            json!(p.non_finite),
            p.last_norm
                .filter(|x| x.is_finite())
                .map_or(Value::Null, |x| json!(x)),
            p.max_norm
                .filter(|x| x.is_finite())
                .map_or(Value::Null, |x| json!(x)),
        ];
        let mut cells = vec![Value::Null; shown.len()];
        for point in &p.per_step {
            if let Some(j) = point.step.and_then(|s| column_of.get(&s)) {
                cells[*j] = norm_cell(point.state, point.norm);
            }
        }
        row.extend(cells);
        params.rows.push(row);
        row_class.push(p.verdict.as_str());
    }
    params.row_class = Some(row_class);
    if report.params.len() > params.rows.len() {
        caps.push(format!(
            "gradients: {} of {} parameters listed (worst first)",
            params.rows.len(),
            report.params.len()
        ));
    }
    if report.steps.len() > shown.len() {
        caps.push(format!(
            "gradients: norms of the last {} of {} steps with gradient facts",
            shown.len(),
            report.steps.len()
        ));
    }

    let mut autograd = TableData::new(vec![
        col("step", "int"),
        col("nodes", "int").explained("tensors the autograd graph kept alive for backward (variables excluded)"),
        col("storage bytes", "bytes").explained(
            "the logical bytes of the distinct storages they keep alive, each once (views of parameters excluded), as the memory section counts them",
        ),
        col("tensor bytes", "bytes").explained(
            "their logical bytes, each tensor in full (views counted again)",
        ),
        col("fingerprint", "name").explained(
            "over the nodes' shapes and dtypes in execution order: equal when backward keeps the same structure alive",
        ),
        col("graph", "text"),
    ]);
    autograd.title = "Autograd graph per step".to_string();
    autograd.total_rows = report.autograd.len();
    autograd.empty = "No autograd graph was recorded (trace-candle's Capture::backward or Capture::autograd records one).".to_string();
    let mut previous: Option<&str> = None;
    for a in report.autograd.iter().take(MAX_AUTOGRAD_ROWS) {
        let status = match previous {
            None => "first",
            Some(p) if p == a.fingerprint => "same as previous",
            Some(_) => "changed",
        };
        previous = Some(&a.fingerprint);
        autograd.rows.push(vec![
            a.step.map_or(Value::Null, |s| json!(s)),
            json!(a.nodes),
            a.storage_bytes.map_or(Value::Null, |b| json!(b)),
            json!(a.tensor_bytes),
            json!(a.fingerprint),
            json!(status),
        ]);
    }
    // The distinct storages' bytes where recorded (what the graph really keeps alive).
    if let Some(peak) = report
        .autograd
        .iter()
        .map(|a| a.storage_bytes.unwrap_or(a.tensor_bytes))
        .max()
    {
        summary.push((
            "largest autograd graph".to_string(),
            format_bytes(peak as f64),
        ));
    }
    if report.autograd.len() > autograd.rows.len() {
        caps.push(format!(
            "gradients: autograd graphs of the first {} of {} steps",
            autograd.rows.len(),
            report.autograd.len()
        ));
    }
    Some(GradientsData {
        summary,
        params,
        autograd,
    })
}
