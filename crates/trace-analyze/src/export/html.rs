//! The self-contained HTML report: analyses summarised into [`ReportData`], drawn by one page.
//!
//! [`build_report`] runs the analyses (summary, op table, span tree, memory report, step
//! graphs, and with a baseline the comparison) and keeps what a person reads, capped for
//! size ([`ReportOptions`]; every cap that cut something is listed on the page).
//! [`write_html`] writes one HTML file: inline CSS, the data as JSON in a
//! `<script type="application/json">` element (with `<`, `>` and `&` escaped, so no string in
//! a trace can close the element), and a small inline script that draws tables and SVG
//! charts. A Content-Security-Policy forbids every network load; the page works opened from
//! disk. The script marks `<html data-tg-status="ok">` when it has drawn everything and
//! writes any error into `#tg-errors` (what `cargo xtask browser-check` reads).

use std::io::Write;

use serde::Serialize;
use serde_json::{Value, json};

use super::ExportError;
use crate::compare::{Comparison, Delta, compare};
use crate::error::AnalyzeError;
use crate::memory::{Allocation, ByCategory, DeviceMemory, memory_report};
use crate::model::{Category, Outcome, Trace};
use crate::ops::{OpColumn, OpTableOptions, op_table};
use crate::spans::span_tree;
use crate::steps::{graph_report, new_step_cache};
use crate::summary::{Summary, summarize};

const CSS: &str = include_str!("report.css");
const HOOKS_JS: &str = include_str!("hooks.js");
const REPORT_JS: &str = include_str!("report.js");

/// How much detail the page keeps.
#[derive(Debug, Clone, Copy)]
pub struct ReportOptions {
    /// Op table rows (by total time).
    pub max_op_rows: usize,
    /// Span tree rows (depth-first, children by total time).
    pub max_span_rows: usize,
    /// Bars of the step-time chart (more steps are grouped, each bar the slowest of its group).
    pub max_step_bars: usize,
    /// Rows of the step-graph table (changed steps first).
    pub max_graph_rows: usize,
    /// Rows of each comparison table.
    pub max_comparison_rows: usize,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            max_op_rows: 300,
            max_span_rows: 1500,
            max_step_bars: 600,
            max_graph_rows: 400,
            max_comparison_rows: 200,
        }
    }
}

/// A column of a [`TableData`].
#[derive(Debug, Clone, Serialize)]
pub struct Column {
    /// The header text.
    pub label: String,
    /// How the page formats the cells: `text`, `name` (monospace), `int`, `ns`, `bytes`,
    /// `pct` (a fraction), `float`, `delta_ns`, `delta_bytes`, `delta_pct`.
    pub kind: &'static str,
    /// Draw a bar proportional to the column's largest value.
    pub bar: bool,
}

fn col(label: &str, kind: &'static str) -> Column {
    Column {
        label: label.to_string(),
        kind,
        bar: false,
    }
}

fn bar(label: &str, kind: &'static str) -> Column {
    Column {
        label: label.to_string(),
        kind,
        bar: true,
    }
}

/// A table drawn by the page.
#[derive(Debug, Clone, Serialize)]
pub struct TableData {
    /// A title (shown above comparison tables).
    pub title: String,
    /// The columns.
    pub columns: Vec<Column>,
    /// The rows: one JSON value per column (number, string or null = absent).
    pub rows: Vec<Vec<Value>>,
    /// For a tree: the depth of each row (rows in depth-first order).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<Vec<u32>>,
    /// For a tree: the tooltip of each row's first cell (the full path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub titles: Option<Vec<String>>,
    /// Rows before capping.
    pub total_rows: usize,
    /// Sortable by clicking a header.
    pub sortable: bool,
    /// Has a filter box on the first column.
    pub filter: bool,
    /// A note shown above the table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What to show when there are no rows.
    pub empty: String,
}

impl TableData {
    fn new(columns: Vec<Column>) -> Self {
        TableData {
            title: String::new(),
            columns,
            rows: Vec::new(),
            depth: None,
            titles: None,
            total_rows: 0,
            sortable: false,
            filter: false,
            note: None,
            empty: "None.".to_string(),
        }
    }
}

/// A health badge.
#[derive(Debug, Clone, Serialize)]
pub struct Badge {
    /// `ok`, `warn` or `bad`.
    pub level: &'static str,
    /// The text.
    pub text: String,
}

/// The step-time chart.
#[derive(Debug, Clone, Serialize)]
pub struct StepsData {
    /// The (first) step index of each bar.
    pub index: Vec<u64>,
    /// The bar's duration (the slowest step of its group).
    pub duration_ns: Vec<Option<u64>>,
    /// Whether the step graph changed in the bar's group.
    pub changed: Vec<bool>,
    /// Ops in the bar's group.
    pub ops: Vec<u64>,
    /// A note (grouping, timing).
    pub note: String,
}

/// The memory chart and tables of one device.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryDevice {
    /// The device label.
    pub device: String,
    /// The categories drawn, bottom first.
    pub categories: Vec<&'static str>,
    /// Timeline times.
    pub t_ns: Vec<u64>,
    /// Per category (as `categories`), live bytes at each time.
    pub series: Vec<Vec<u64>>,
    /// The peak: time, bytes and bytes per category (as `categories`).
    pub peak: Value,
    /// Figures shown beside the chart.
    pub stats: Vec<(String, String)>,
    /// The peak by category.
    pub peak_breakdown: TableData,
    /// The largest allocations live at the peak.
    pub peak_allocations: TableData,
    /// Possible leaks.
    pub leaks: TableData,
    /// Physical figures, when the device reported any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical: Option<Vec<(String, String)>>,
}

/// The memory section.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryData {
    /// Always `logical`.
    pub bytes_kind: &'static str,
    /// A note about the numbers.
    pub note: String,
    /// Per device.
    pub devices: Vec<MemoryDevice>,
}

/// The step-graph section.
#[derive(Debug, Clone, Serialize)]
pub struct GraphsData {
    /// Key figures.
    pub summary: Vec<(String, String)>,
    /// Per step.
    pub table: TableData,
}

/// The comparison section.
#[derive(Debug, Clone, Serialize)]
pub struct ComparisonData {
    /// Key figures.
    pub summary: Vec<(String, String)>,
    /// Span, op, memory and graph tables.
    pub tables: Vec<TableData>,
}

/// Everything the page shows (embedded in it as JSON).
#[derive(Debug, Clone, Serialize)]
pub struct ReportData {
    /// The page title.
    pub title: String,
    /// The line under the title.
    pub subtitle: String,
    /// Run header figures.
    pub run: Vec<(String, String)>,
    /// Health badges.
    pub health: Vec<Badge>,
    /// What was capped for size.
    pub caps: Vec<String>,
    /// The step-time chart; absent when the trace has no steps.
    pub steps: Option<StepsData>,
    /// The op table.
    pub ops: TableData,
    /// The span tree.
    pub spans: TableData,
    /// Memory; absent when the trace has no memory events.
    pub memory: Option<MemoryData>,
    /// Step graphs; absent when no step has ops.
    pub graphs: Option<GraphsData>,
    /// The comparison with a baseline, when one was given.
    pub comparison: Option<ComparisonData>,
}

fn n(v: u64) -> Value {
    json!(v)
}

fn opt_f(v: Option<f64>) -> Value {
    match v {
        Some(x) if x.is_finite() => json!(x),
        _ => Value::Null,
    }
}

/// `1.23 ms` (for the figures shown as text).
fn fmt_ns(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2} s", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2} ms", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1} µs", v / 1e3)
    } else {
        format!("{v:.0} ns")
    }
}

/// `1.50 MiB`.
fn fmt_bytes(v: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = v as f64;
    let mut i = 0;
    while x >= 1024.0 && i < units.len() - 1 {
        x /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v} B")
    } else {
        format!("{x:.2} {}", units[i])
    }
}

fn outcome_text(o: &Outcome) -> String {
    match o {
        Outcome::Complete => "complete".to_string(),
        Outcome::Failed { reason } => format!("failed: {reason}"),
        Outcome::Incomplete => "incomplete (session dropped without finish)".to_string(),
        Outcome::Truncated => "truncated (no trailer; read to the last complete line)".to_string(),
    }
}

/// Runs the analyses of `trace` (and the comparison `baseline` → `trace`, when given) and
/// keeps what the page shows.
pub fn build_report(
    trace: &Trace,
    baseline: Option<&Trace>,
    opts: &ReportOptions,
) -> Result<ReportData, AnalyzeError> {
    let cache = new_step_cache();
    let summary = summarize(trace, &cache)?;
    let timing = trace.run.timing.as_str();
    let mut caps = Vec::new();

    let title = format!("tracegraph report: {}", trace.run.entrypoint);
    let subtitle = format!(
        "{} · run {} · {} durations{}",
        trace.source,
        trace.run.run_id,
        timing,
        baseline
            .map(|b| format!(" · compared with baseline {}", b.source))
            .unwrap_or_default()
    );

    let run = run_rows(trace, &summary);
    let health = health_badges(trace, &summary);
    let graphs = graph_report(trace, &cache)?;
    let steps = steps_data(trace, &graphs, opts, &mut caps);
    let ops = ops_table(trace, opts, &mut caps);
    let spans = spans_table(trace, opts, &mut caps);
    let memory = memory_data(trace);
    let graphs = graphs_data(&graphs, opts, &mut caps);
    let comparison = match baseline {
        Some(b) => Some(comparison_data(
            &compare(b, trace, &cache)?,
            opts,
            &mut caps,
        )),
        None => None,
    };
    Ok(ReportData {
        title,
        subtitle,
        run,
        health,
        caps,
        steps,
        ops,
        spans,
        memory,
        graphs,
        comparison,
    })
}

fn run_rows(trace: &Trace, s: &Summary) -> Vec<(String, String)> {
    let r = &trace.run;
    let mut rows = vec![
        ("trace".to_string(), trace.source.clone()),
        ("run id".to_string(), r.run_id.clone()),
        ("entrypoint".to_string(), r.entrypoint.clone()),
        ("phase".to_string(), r.phase.clone()),
        ("device".to_string(), r.device.clone()),
        ("timing".to_string(), r.timing.as_str().to_string()),
        ("schema".to_string(), format!("{} v{}", r.schema, r.version)),
        ("started (unix ns)".to_string(), r.start_unix_ns.to_string()),
        ("outcome".to_string(), outcome_text(&trace.outcome)),
        ("lines".to_string(), s.health.lines.to_string()),
        ("events".to_string(), s.health.events.total().to_string()),
        ("ops".to_string(), s.op_count.to_string()),
        ("spans".to_string(), s.span_count.to_string()),
        ("steps".to_string(), s.steps.count.to_string()),
    ];
    if let Some(sp) = &s.steps.spread {
        rows.push((
            format!("step time ({})", r.timing.as_str()),
            format!(
                "mean {} ± {} (min {}, max {})",
                fmt_ns(sp.mean),
                fmt_ns(sp.stddev),
                fmt_ns(sp.min as f64),
                fmt_ns(sp.max as f64)
            ),
        ));
    }
    if let Some(p95) = s.steps.p95_ns {
        rows.push(("step time p95".to_string(), fmt_ns(p95 as f64)));
    }
    for (k, v) in &r.tags {
        rows.push((format!("tag {k}"), v.clone()));
    }
    rows
}

fn health_badges(trace: &Trace, s: &Summary) -> Vec<Badge> {
    let mut b = Vec::new();
    let h = &s.health;
    b.push(Badge {
        level: match &trace.outcome {
            Outcome::Complete => "ok",
            Outcome::Failed { .. } => "bad",
            Outcome::Incomplete | Outcome::Truncated => "warn",
        },
        text: format!("outcome: {}", outcome_text(&trace.outcome)),
    });
    b.push(if h.issue_count == 0 {
        Badge {
            level: "ok",
            text: "no structural issues".to_string(),
        }
    } else {
        Badge {
            level: "warn",
            text: format!(
                "{} structural issues (first: {})",
                h.issue_count,
                h.issues
                    .first()
                    .map(|i| format!("line {}: {}", i.line, i.message))
                    .unwrap_or_default()
            ),
        }
    });
    if h.dropped > 0 {
        b.push(Badge {
            level: "bad",
            text: format!("{} events dropped by the recorder", h.dropped),
        });
    }
    if h.partial_last_line {
        b.push(Badge {
            level: "warn",
            text: "a partial last line was ignored".to_string(),
        });
    }
    match h.counts_match_trailer {
        Some(true) => b.push(Badge {
            level: "ok",
            text: "event counts match the trailer".to_string(),
        }),
        Some(false) => b.push(Badge {
            level: "bad",
            text: "event counts differ from the trailer".to_string(),
        }),
        None => {}
    }
    b.push(Badge {
        level: if trace.run.timing == crate::model::Timing::Host {
            "warn"
        } else {
            "ok"
        },
        text: match trace.run.timing {
            crate::model::Timing::Host => {
                "host durations (device work may still run when an op ends)".to_string()
            }
            crate::model::Timing::DeviceSynchronized => "device-synchronized durations".to_string(),
        },
    });
    if let Some(g) = &s.gradients {
        let level = if g.non_finite > 0 {
            "bad"
        } else if g.missing > 0 || g.zero > 0 {
            "warn"
        } else {
            "ok"
        };
        b.push(Badge {
            level,
            text: format!(
                "gradients: {} present, {} missing, {} zero, {} non-finite",
                g.present, g.missing, g.zero, g.non_finite
            ),
        });
    }
    b.push(Badge {
        level: if s.graph.distinct_graphs <= 1 {
            "ok"
        } else {
            "warn"
        },
        text: match s.graph.stable_from_step {
            Some(k) if s.graph.steps > 0 => format!(
                "{} distinct step graph(s), stable from step {k}",
                s.graph.distinct_graphs
            ),
            _ => "no step graphs".to_string(),
        },
    });
    b
}

fn steps_data(
    trace: &Trace,
    graphs: &crate::steps::GraphReport,
    opts: &ReportOptions,
    caps: &mut Vec<String>,
) -> Option<StepsData> {
    // Whole steps only: the step an incomplete trace ends in is a prefix of a step.
    let steps = trace.complete_steps();
    if steps.is_empty() {
        return None;
    }
    let changed: std::collections::HashMap<u64, bool> =
        graphs.steps.iter().map(|g| (g.step, g.changed)).collect();
    let total = steps.len();
    let group = total.div_ceil(opts.max_step_bars.max(1)).max(1);
    let mut d = StepsData {
        index: Vec::new(),
        duration_ns: Vec::new(),
        changed: Vec::new(),
        ops: Vec::new(),
        note: format!(
            "Wall time of each step ({} time), from one step boundary to the next.",
            trace.run.timing.as_str()
        ),
    };
    if let Some(p) = trace.partial_step() {
        d.note.push_str(&format!(
            " Step {} is left out: the trace ends inside it (incomplete).",
            p.index
        ));
    }
    for chunk in steps.chunks(group) {
        let Some(first) = chunk.first() else { continue };
        d.index.push(first.index);
        d.duration_ns
            .push(chunk.iter().map(|s| s.duration_ns()).max());
        d.changed.push(
            chunk
                .iter()
                .any(|s| changed.get(&s.index).copied().unwrap_or(false)),
        );
        d.ops.push(
            chunk
                .iter()
                .map(|s| u64::from(s.ops.1.saturating_sub(s.ops.0)))
                .sum(),
        );
    }
    if group > 1 {
        let msg = format!(
            "step chart: {total} steps grouped by {group}; each bar is the slowest step of its group"
        );
        d.note.push(' ');
        d.note.push_str(&msg);
        caps.push(msg);
    }
    Some(d)
}

fn ops_table(trace: &Trace, opts: &ReportOptions, caps: &mut Vec<String>) -> TableData {
    let table = op_table(
        trace,
        &OpTableOptions {
            by_shape: false,
            sort: OpColumn::Total,
            limit: Some(opts.max_op_rows),
        },
    );
    let mut t = TableData::new(vec![
        col("op", "name"),
        col("count", "int"),
        bar("total", "ns"),
        bar("self", "ns"),
        col("mean", "ns"),
        col("min", "ns"),
        col("max", "ns"),
        col("p95", "ns"),
        col("output bytes", "bytes"),
        bar("share of step time", "pct"),
    ]);
    t.sortable = true;
    t.filter = true;
    t.total_rows = table.groups;
    t.empty = "No ops in this trace.".to_string();
    t.note = Some(format!(
        "{} ops in {} groups by name; {} durations; click a header to sort. Self = total minus ops nested inside on the same thread.",
        table.op_count,
        table.groups,
        table.timing.as_str()
    ));
    for r in &table.rows {
        t.rows.push(vec![
            json!(r.name),
            n(r.count),
            n(r.total_ns),
            n(r.self_ns),
            opt_f(Some(r.mean_ns)),
            n(r.min_ns),
            n(r.max_ns),
            n(r.p95_ns),
            n(r.output_bytes),
            opt_f(r.share_of_step),
        ]);
    }
    if table.groups > table.rows.len() {
        caps.push(format!(
            "op table: the {} op names with the most total time of {}",
            table.rows.len(),
            table.groups
        ));
    }
    t
}

fn spans_table(trace: &Trace, opts: &ReportOptions, caps: &mut Vec<String>) -> TableData {
    let tree = span_tree(trace);
    let mut t = TableData::new(vec![
        col("span", "text"),
        col("kind", "text"),
        col("phase", "text"),
        col("count", "int"),
        bar("total", "ns"),
        bar("self", "ns"),
        col("per step (mean)", "ns"),
        col("per step (sd)", "ns"),
        col("allocated", "bytes"),
    ]);
    t.total_rows = tree.nodes.len();
    t.empty = "No spans in this trace.".to_string();
    t.note = Some(format!(
        "{} spans aggregated into {} paths; {} durations; self = total minus child spans and the span's own ops. Click ▾ to fold a subtree.",
        tree.span_count,
        tree.nodes.len(),
        tree.timing.as_str()
    ));
    let mut depth = Vec::new();
    let mut titles = Vec::new();
    for node in tree.nodes.iter().take(opts.max_span_rows) {
        depth.push(node.depth);
        titles.push(node.path.clone());
        t.rows.push(vec![
            json!(node.name),
            json!(format!("{:?}", node.kind).to_lowercase()),
            node.exec_step.map_or(Value::Null, |e| json!(e.as_str())),
            n(node.count),
            n(node.total_ns),
            n(node.self_ns),
            opt_f(node.per_step.map(|s| s.mean)),
            opt_f(node.per_step.map(|s| s.stddev)),
            n(node.alloc_bytes),
        ]);
    }
    if tree.nodes.len() > t.rows.len() {
        caps.push(format!(
            "span tree: the first {} of {} paths (depth first, largest first)",
            t.rows.len(),
            tree.nodes.len()
        ));
    }
    t.depth = Some(depth);
    t.titles = Some(titles);
    t
}

fn alloc_table(list: &[Allocation], total: u64, what: &str) -> TableData {
    let mut t = TableData::new(vec![
        col("tensor", "name"),
        col("shape", "text"),
        col("category", "text"),
        bar("bytes", "bytes"),
        col("allocated at", "ns"),
    ]);
    t.total_rows = usize::try_from(total).unwrap_or(usize::MAX);
    t.empty = format!("No {what}.");
    if total > list.len() as u64 {
        t.note = Some(format!("The largest {} of {total}.", list.len()));
    }
    for a in list {
        let name = match (&a.label, a.tensor) {
            (Some(l), _) => l.clone(),
            (None, Some(id)) => format!("tensor {id}"),
            (None, None) => format!("storage {}", a.storage),
        };
        t.rows.push(vec![
            json!(name),
            a.shape.as_ref().map_or(Value::Null, |s| json!(s)),
            json!(a.category.as_str()),
            n(a.bytes),
            n(a.allocated_at_ns),
        ]);
    }
    t
}

fn memory_device(d: &DeviceMemory) -> MemoryDevice {
    let cats: Vec<Category> = Category::ALL
        .iter()
        .copied()
        .filter(|c| {
            d.timeline.iter().any(|p| p.by_category.get(*c) > 0) || d.peak_by_category.get(*c) > 0
        })
        .collect();
    let series = cats
        .iter()
        .map(|c| d.timeline.iter().map(|p| p.by_category.get(*c)).collect())
        .collect();
    let peak = json!({
        "t_ns": d.peak_at_ns,
        "bytes": d.peak_bytes,
        "by_category": cats.iter().map(|c| d.peak_by_category.get(*c)).collect::<Vec<_>>(),
    });
    let mut breakdown = TableData::new(vec![
        col("category", "text"),
        bar("bytes at peak", "bytes"),
        col("share", "pct"),
        col("at the end", "bytes"),
    ]);
    let by: &ByCategory = &d.peak_by_category;
    for c in Category::ALL {
        let v = by.get(c);
        let end = d.end_by_category.get(c);
        if v == 0 && end == 0 {
            continue;
        }
        breakdown.rows.push(vec![
            json!(c.as_str()),
            n(v),
            opt_f((d.peak_bytes > 0).then(|| v as f64 / d.peak_bytes as f64)),
            n(end),
        ]);
    }
    breakdown.total_rows = breakdown.rows.len();
    let stats = vec![
        ("peak".to_string(), fmt_bytes(d.peak_bytes)),
        ("peak at".to_string(), fmt_ns(d.peak_at_ns as f64)),
        (
            "live allocations at peak".to_string(),
            d.peak_live_allocations.to_string(),
        ),
        ("allocations".to_string(), d.allocs.to_string()),
        ("frees".to_string(), d.frees.to_string()),
        (
            "frees without allocation".to_string(),
            d.unmatched_frees.to_string(),
        ),
        ("live at end".to_string(), fmt_bytes(d.end_bytes)),
        (
            "possible leaks".to_string(),
            format!(
                "{} ({})",
                d.possible_leak_count,
                fmt_bytes(d.possible_leak_bytes)
            ),
        ),
    ];
    let physical = d.physical.as_ref().map(|p| {
        let o = |v: Option<u64>| v.map_or("absent".to_string(), fmt_bytes);
        vec![
            ("samples".to_string(), p.samples.to_string()),
            ("max used".to_string(), o(p.max_used_bytes)),
            ("max reserved".to_string(), o(p.max_reserved_bytes)),
            ("min free".to_string(), o(p.min_free_bytes)),
        ]
    });
    MemoryDevice {
        device: d.device.clone(),
        categories: cats.iter().map(|c| c.as_str()).collect(),
        t_ns: d.timeline.iter().map(|p| p.t_ns).collect(),
        series,
        peak,
        stats,
        peak_breakdown: breakdown,
        peak_allocations: alloc_table(
            &d.peak_allocations,
            d.peak_live_allocations,
            "allocations live at the peak",
        ),
        leaks: alloc_table(
            &d.possible_leaks,
            d.possible_leak_count,
            "possible leaks: everything but parameters and optimizer state was freed",
        ),
        physical,
    }
}

fn memory_data(trace: &Trace) -> Option<MemoryData> {
    let report = memory_report(trace)?;
    Some(MemoryData {
        bytes_kind: report.bytes_kind,
        note: format!(
            "Live {} bytes (shape × dtype size, not allocator or device figures) from the trace's allocation and free events. The timeline keeps the largest value of each of at most {} time buckets, so the peak is always drawn.",
            report.bytes_kind,
            crate::memory::TIMELINE_POINTS
        ),
        devices: report.devices.iter().map(memory_device).collect(),
    })
}

fn graphs_data(
    g: &crate::steps::GraphReport,
    opts: &ReportOptions,
    caps: &mut Vec<String>,
) -> Option<GraphsData> {
    if g.steps.is_empty() {
        return None;
    }
    let summary = vec![
        ("steps".to_string(), g.steps.len().to_string()),
        ("distinct graphs".to_string(), g.distinct_graphs.to_string()),
        (
            "stable from step".to_string(),
            g.stable_from_step
                .map_or("never".to_string(), |s| s.to_string()),
        ),
        (
            "analysis cache".to_string(),
            format!(
                "{} hits, {} misses (identical steps analysed once)",
                g.cache.hits, g.cache.misses
            ),
        ),
    ];
    let mut t = TableData::new(vec![
        col("step", "int"),
        col("fingerprint", "name"),
        col("ops", "int"),
        col("duration", "ns"),
        col("graph", "text"),
        col("first difference", "name"),
    ]);
    t.total_rows = g.steps.len();
    t.sortable = true;
    // Changed steps first (they matter), then the rest in order, up to the cap.
    let mut order: Vec<usize> = (0..g.steps.len()).filter(|&i| g.steps[i].changed).collect();
    order.extend((0..g.steps.len()).filter(|&i| !g.steps[i].changed));
    order.truncate(opts.max_graph_rows);
    order.sort_unstable();
    for i in order {
        let s = &g.steps[i];
        let status = if i == 0 {
            "first"
        } else if s.changed {
            "changed"
        } else {
            "same as previous"
        };
        let diff = s.diff.as_ref().map_or(Value::Null, |d| {
            json!(format!(
                "vs step {}: op #{} {} ({} → {})",
                d.against_step,
                d.op_index,
                d.what,
                d.before.as_deref().unwrap_or("none"),
                d.after.as_deref().unwrap_or("none")
            ))
        });
        t.rows.push(vec![
            n(s.step),
            json!(s.fingerprint),
            n(s.ops as u64),
            n(s.duration_ns),
            json!(status),
            diff,
        ]);
    }
    if g.steps.len() > t.rows.len() {
        caps.push(format!(
            "step graphs: {} of {} steps listed (every changed step first)",
            t.rows.len(),
            g.steps.len()
        ));
    }
    Some(GraphsData { summary, table: t })
}

fn delta_row(name: &str, d: &Delta, kind_is_time: bool) -> Vec<Value> {
    let round = |v: Option<f64>| opt_f(v.map(|x| if kind_is_time { x.round() } else { x }));
    vec![
        json!(name),
        round(d.base),
        round(d.candidate),
        round(d.delta),
        opt_f(d.ratio),
    ]
}

fn comparison_data(c: &Comparison, opts: &ReportOptions, caps: &mut Vec<String>) -> ComparisonData {
    let mut summary = vec![
        ("baseline".to_string(), c.base.clone()),
        ("this trace".to_string(), c.candidate.clone()),
        (
            "steps".to_string(),
            format!("{} → {}", c.steps.0, c.steps.1),
        ),
        (
            "step time".to_string(),
            match (c.step_time_ns.base, c.step_time_ns.candidate) {
                (Some(b), Some(x)) => format!(
                    "{} → {}{}",
                    fmt_ns(b),
                    fmt_ns(x),
                    c.step_time_ns
                        .ratio
                        .map(|r| format!(" ({:+.1} %)", r * 100.0))
                        .unwrap_or_default()
                ),
                _ => "absent in one trace".to_string(),
            },
        ),
        (
            "equal step graphs".to_string(),
            format!("{} of {} paired steps", c.graphs_equal, c.graphs.len()),
        ),
    ];
    for w in &c.warnings {
        summary.push(("warning".to_string(), w.clone()));
    }
    let mut tables = Vec::new();
    let delta_cols = |what: &str, kind: &'static str, dkind: &'static str| {
        vec![
            col(what, "name"),
            col("baseline", kind),
            col("this trace", kind),
            col("change", dkind),
            col("change %", "delta_pct"),
        ]
    };
    let mut capped = |t: &mut TableData, total: usize, what: &str| {
        t.total_rows = total;
        t.sortable = true;
        if total > t.rows.len() {
            caps.push(format!(
                "comparison {what}: the {} largest changes of {total}",
                t.rows.len()
            ));
            t.note = Some(format!("The {} largest changes of {total}.", t.rows.len()));
        }
    };

    let mut spans = TableData::new(delta_cols("span path", "ns", "delta_ns"));
    spans.title = "Span time per step".to_string();
    spans.empty = "No spans in either trace.".to_string();
    for s in c.spans.iter().take(opts.max_comparison_rows) {
        spans
            .rows
            .push(delta_row(&s.path, &s.time_per_step_ns, true));
    }
    capped(&mut spans, c.spans.len(), "spans");
    tables.push(spans);

    let mut ops = TableData::new(delta_cols("op", "ns", "delta_ns"));
    ops.title = "Op time per step".to_string();
    ops.empty = "No op name is in both traces.".to_string();
    for o in c.ops.iter().take(opts.max_comparison_rows) {
        ops.rows.push(delta_row(&o.name, &o.time_per_step_ns, true));
    }
    capped(&mut ops, c.ops.len(), "ops");
    tables.push(ops);

    let mut only = TableData::new(vec![col("op", "name"), col("only in", "text")]);
    only.title = "Ops in one trace only".to_string();
    only.empty = "Every op name is in both traces.".to_string();
    let only_rows: Vec<(&String, &str)> = c
        .ops_only_in_base
        .iter()
        .map(|o| (o, "baseline"))
        .chain(c.ops_only_in_candidate.iter().map(|o| (o, "this trace")))
        .collect();
    for (o, w) in only_rows.iter().take(opts.max_comparison_rows) {
        only.rows.push(vec![json!(o), json!(w)]);
    }
    capped(&mut only, only_rows.len(), "ops in one trace only");
    tables.push(only);

    let mut mem = TableData::new(delta_cols("device", "bytes", "delta_bytes"));
    mem.title = "Peak logical memory".to_string();
    mem.empty = "Neither trace has memory events (absent, not zero).".to_string();
    if let Some(m) = &c.memory {
        for d in m {
            mem.rows.push(delta_row(&d.device, &d.peak_bytes, false));
        }
    }
    mem.total_rows = mem.rows.len();
    tables.push(mem);

    let mut graphs = TableData::new(vec![
        col("position", "int"),
        col("baseline step", "int"),
        col("baseline fingerprint", "name"),
        col("this step", "int"),
        col("this fingerprint", "name"),
        col("equal", "text"),
    ]);
    graphs.title = "Step graph fingerprints, paired by position".to_string();
    graphs.empty = "No steps in either trace.".to_string();
    for p in c.graphs.iter().take(opts.max_comparison_rows) {
        let (bs, bf) = p
            .base
            .as_ref()
            .map_or((Value::Null, Value::Null), |(s, f)| (n(*s), json!(f)));
        let (cs, cf) = p
            .candidate
            .as_ref()
            .map_or((Value::Null, Value::Null), |(s, f)| (n(*s), json!(f)));
        graphs.rows.push(vec![
            n(p.position as u64),
            bs,
            bf,
            cs,
            cf,
            json!(if p.equal { "yes" } else { "no" }),
        ]);
    }
    capped(&mut graphs, c.graphs.len(), "step graphs");
    tables.push(graphs);
    ComparisonData { summary, tables }
}

/// `s` with `&`, `<`, `>`, `"` and `'` escaped for HTML text and attributes.
fn html_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// `data` as JSON safe inside a `<script>` element: `<`, `>` and `&` (which can only occur
/// inside JSON strings) become `\u003c`, `\u003e` and `\u0026`, so no string can close the
/// element or open a comment.
pub fn embedded_json(data: &ReportData) -> Result<String, ExportError> {
    let text = serde_json::to_string(data).map_err(|e| ExportError::Write(e.into()))?;
    let mut o = String::with_capacity(text.len() + 64);
    for c in text.chars() {
        match c {
            '<' => o.push_str("\\u003c"),
            '>' => o.push_str("\\u003e"),
            '&' => o.push_str("\\u0026"),
            c => o.push(c),
        }
    }
    Ok(o)
}

/// Writes the self-contained page for `data` to `out`.
pub fn write_html<W: Write>(data: &ReportData, mut out: W) -> Result<(), ExportError> {
    let json = embedded_json(data)?;
    let title = html_escape(&data.title);
    let page = format!(
        r##"<!doctype html>
<html lang="en" data-tg-status="loading">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="tracegraph {version}">
<title>{title}</title>
<style>
{CSS}</style>
<script>
{HOOKS_JS}</script>
</head>
<body>
<pre id="tg-errors" hidden></pre>
<header class="top"><h1>{title}</h1><div class="sub" id="subtitle"></div></header>
<nav class="toc"><a href="#run-section">Run</a><a href="#steps-section">Step times</a><a href="#ops-section">Ops</a><a href="#spans-section">Spans</a><a href="#memory-section">Memory</a><a href="#graphs-section">Step graphs</a><a href="#comparison-section">Comparison</a></nav>
<noscript><p style="margin:20px">This report draws its tables and charts with an inline script; enable JavaScript for this file. The data is in the page source (element <code>tg-data</code>).</p></noscript>
<main>
<section class="card" id="run-section"><h2>Run and health</h2><div id="run"></div></section>
<section class="card" id="steps-section"><h2>Step times</h2><div id="step-chart"></div></section>
<section class="card" id="ops-section"><h2>Op table</h2><div id="op-table"></div></section>
<section class="card" id="spans-section"><h2>Span tree</h2><div id="span-tree"></div></section>
<section class="card" id="memory-section"><h2>Memory timeline</h2><div id="memory-chart"></div><div id="memory-detail"></div></section>
<section class="card" id="graphs-section"><h2>Step graphs</h2><div id="graphs"></div></section>
<section class="card" id="comparison-section" hidden><h2>Comparison with the baseline</h2><div id="comparison"></div></section>
</main>
<footer>Written by tracegraph {version}. Self-contained: nothing is loaded from the network.</footer>
<script type="application/json" id="tg-data">{json}</script>
<script>
{REPORT_JS}</script>
</body>
</html>
"##,
        version = env!("CARGO_PKG_VERSION"),
    );
    out.write_all(page.as_bytes()).map_err(ExportError::Write)?;
    out.flush().map_err(ExportError::Write)
}
