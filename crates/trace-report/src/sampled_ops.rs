//! The report's sampled op table: trace-analyze's `sampled_op_table` as a table of the page.
//!
//! The same table `tracegraph ops --sampled` prints, drawn beside the flame graph: per span
//! path (the samples' innermost span) a row with its samples and measured self time, then
//! one row per Candle op its samples ran inside, with the share of the span's samples, the
//! Wilson 95 % interval on it and the two time estimates. Nothing is recomputed here.

use serde_json::{Value, json};
use trace_analyze::{OTHER_OPS, OpKind, SampledOpOptions, SampledOpTable, Trace, sampled_op_table};

use crate::model::{TableData, bar, col};

/// Op rows kept per span path (those with the most samples); the analysis sums the rest
/// into one [`OTHER_OPS`] row, so every span's shares still sum to 100 %.
pub(crate) const MAX_SAMPLED_OPS_PER_SPAN: usize = 40;

/// The row class of a span path's row (its op rows are `op`).
pub(crate) const SPAN_ROW: &str = "span";

fn kind_text(kind: Option<OpKind>) -> Value {
    match kind {
        Some(OpKind::Tensor) => json!("tensor"),
        Some(OpKind::Nn) => json!("candle_nn"),
        Some(OpKind::Layer) => json!("layer"),
        Some(OpKind::Backward) => json!("backward"),
        Some(OpKind::Optimizer) => json!("optimizer"),
        None => Value::Null,
    }
}

fn opt_n(v: Option<u64>) -> Value {
    v.map_or(Value::Null, |v| json!(v))
}

/// The note above the table: the trace's totals and what the columns are, as the text
/// table's header says them.
fn note(t: &SampledOpTable) -> String {
    let per_sample = t.ns_per_sample.map_or_else(
        || "the requested period".to_string(),
        trace_analyze::format_ns,
    );
    let warning = if t.saturated {
        " Warning: sample counts passed 2^64 - 1 and stopped there (the trace's counts are hostile or corrupt): shares are unreliable."
    } else {
        ""
    };
    format!(
        "{}; {} durations. \
         Per span path (the samples' innermost span), the Candle op each busy sample ran inside: the outermost \
         Candle API frame (Tensor method, candle_nn function or layer, backward) below the span. Shares are of \
         the span's samples, with a 95 % (Wilson) interval; est. self = share × the span's measured self time \
         (not covered by child spans); est. CPU = samples × {per_sample} of CPU time (every thread). The same \
         table as `tracegraph ops --sampled`; estimates, not measured durations.{warning}",
        t.totals(),
        t.timing.as_str(),
    )
}

/// The sampled op table of `trace` as a page table; absent when the trace has no samples.
/// At most `max_spans` span paths are kept; caps that cut something are added to `caps`.
pub(crate) fn sampled_ops_table(
    trace: &Trace,
    max_spans: usize,
    caps: &mut Vec<String>,
) -> Option<TableData> {
    let table = sampled_op_table(
        trace,
        &SampledOpOptions {
            limit: Some(MAX_SAMPLED_OPS_PER_SPAN),
        },
    )?;
    let mut t = TableData::new(vec![
        col("span path / op", "name"),
        col("kind", "text").explained(
            "the op's part of Candle's API: tensor (a Tensor method), candle_nn (a function), \
             layer (a candle_nn layer's forward), backward, optimizer; empty for rows that are no op",
        ),
        bar("samples", "int").explained(
            "on a span path's row, the samples whose innermost span has this path; on an op's \
             row, those of them inside the op",
        ),
        bar("share", "pct").explained("the op's samples / the span path's samples"),
        col("95% low", "pct").explained("low end of the Wilson 95 % interval on the share"),
        col("95% high", "pct").explained("high end of the Wilson 95 % interval on the share"),
        col("self / est. self", "ns").explained(
            "on a span path's row, its measured self time (its spans' durations less their \
             child spans', every step); on an op's row, share × that self time (an estimate)",
        ),
        col("est. CPU", "ns").explained(
            "samples × the CPU time of one sample (every thread, so more than the wall time \
             where a thread pool runs the op in parallel)",
        ),
    ]);
    t.empty = "No sampled ops.".to_string();
    t.note = Some(note(&table));
    t.total_rows = table.spans.iter().map(|s| 1 + s.rows.len()).sum();
    let (mut depth, mut titles, mut class) = (Vec::new(), Vec::new(), Vec::new());
    let mut cut_ops = 0usize;
    for sp in table.spans.iter().take(max_spans) {
        depth.push(0);
        titles.push(format!(
            "{}: {} samples ({} in ops, {} profiler, {} waiting)",
            sp.path, sp.samples, sp.in_ops, sp.profiler, sp.waiting
        ));
        class.push(SPAN_ROW);
        t.rows.push(vec![
            json!(sp.path),
            Value::Null,
            json!(sp.samples),
            Value::Null,
            Value::Null,
            Value::Null,
            opt_n(sp.self_ns),
            Value::Null,
        ]);
        for r in &sp.rows {
            if r.op == OTHER_OPS {
                cut_ops += 1;
            }
            depth.push(1);
            titles.push(format!("{} in {}", r.op, sp.path));
            class.push("op");
            t.rows.push(vec![
                json!(r.op),
                kind_text(r.kind),
                json!(r.samples),
                json!(r.share),
                json!(r.share_low),
                json!(r.share_high),
                opt_n(r.est_self_ns),
                opt_n(r.est_cpu_ns),
            ]);
        }
    }
    if cut_ops > 0 {
        caps.push(format!(
            "sampled op table: the {MAX_SAMPLED_OPS_PER_SPAN} ops with the most samples per span path; \
             the rest of {cut_ops} span path(s) are one \"{OTHER_OPS}\" row"
        ));
    }
    if table.spans.len() > max_spans {
        caps.push(format!(
            "sampled op table: the first {max_spans} of {} span paths with samples",
            table.spans.len()
        ));
    }
    t.depth = Some(depth);
    t.titles = Some(titles);
    t.row_class = Some(class);
    Some(t)
}
