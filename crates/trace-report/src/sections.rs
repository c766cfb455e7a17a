//! The report's sections: [`build_report`] runs the analyses and keeps what a person reads.
//!
//! What it keeps is capped for size ([`ReportOptions`]); every cap that cut something is stated.

use serde_json::{Value, json};
use trace_analyze::{
    Allocation, AnalyzeError, BAND_POINTS, ByCategory, CONFIDENCE, Change, Comparison, Delta,
    DeviceMemory, MIN_SAMPLES, OpColumn, OpTableOptions, Summary, Trace, TraceEnd, Verdict,
    compare, format_bytes, format_ns, graph_report, memory_report, new_step_cache, op_table,
    path_tree, significance_order, step_breakdown, summarize,
};

use trace_record::schema::{MemoryCategory, Outcome, TimingMode};

use crate::model::{
    Badge, ComparisonData, GraphsData, MemoryData, MemoryDevice, ReportData, ReportOptions,
    StepsData, TableData, bar, col,
};

fn n(v: u64) -> Value {
    json!(v)
}

fn opt_f(v: Option<f64>) -> Value {
    match v {
        Some(x) if x.is_finite() => json!(x),
        _ => Value::Null,
    }
}

fn fmt_bytes(v: u64) -> String {
    format_bytes(v as f64)
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
    let steps = steps_data(trace, baseline, &summary, &graphs, opts, &mut caps);
    let ops = ops_table(trace, opts, &mut caps);
    let spans = spans_table(trace, opts, &mut caps);
    let memory = memory_data(trace);
    let graphs = graphs_data(&graphs, opts, &mut caps);
    let gradients = crate::gradients::gradients_data(trace, &mut caps);
    let flame = crate::flame::flame_data(trace, opts.max_span_rows, &mut caps);
    let heap = crate::heap::heap_data(trace, &mut caps);
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
        gradients,
        flame,
        heap,
        torch: None,
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
        ("outcome".to_string(), trace.outcome.describe()),
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
                "mean {} ± {} sd (min {}, max {})",
                format_ns(sp.mean),
                format_ns(sp.stddev),
                format_ns(sp.min as f64),
                format_ns(sp.max as f64)
            ),
        ));
    }
    if let Some(p95) = s.steps.p95_ns {
        rows.push(("step time p95".to_string(), format_ns(p95 as f64)));
    }
    // Steps of different graphs pooled mean little: each graph's own step times.
    if s.graph.groups.len() > 1 {
        for g in &s.graph.groups {
            let t = &g.step_time;
            rows.push((
                format!("step time, graph {}", g.label),
                format!(
                    "{}: {} step(s), mean {} ± {} sd (min {}, max {})",
                    g.signature,
                    t.count,
                    format_ns(t.mean),
                    format_ns(t.stddev),
                    format_ns(t.min as f64),
                    format_ns(t.max as f64)
                ),
            ));
        }
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
            TraceEnd::Trailer(Outcome::Complete) => "ok",
            TraceEnd::Trailer(Outcome::Failed { .. }) => "bad",
            TraceEnd::Trailer(Outcome::Incomplete) | TraceEnd::Truncated => "warn",
        },
        text: format!("outcome: {}", trace.outcome.describe()),
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
                    .map(ToString::to_string)
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
    if trace_analyze::tracing_layer_saw_no_spans(trace) {
        b.push(Badge {
            level: "warn",
            text: trace_analyze::TRACING_LAYER_SAW_NO_SPANS.to_string(),
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
        level: if trace.run.timing == TimingMode::Host {
            "warn"
        } else {
            "ok"
        },
        text: match trace.run.timing {
            TimingMode::Host => {
                "host durations (device work may still run when an op ends)".to_string()
            }
            TimingMode::DeviceSynchronized => "device-synchronized durations".to_string(),
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
        text: s.graph.verdict.clone(),
    });
    b
}

fn steps_data(
    trace: &Trace,
    baseline: Option<&Trace>,
    summary: &Summary,
    graphs: &trace_analyze::GraphReport,
    opts: &ReportOptions,
    caps: &mut Vec<String>,
) -> Option<StepsData> {
    // Whole steps only: the step an incomplete trace ends in is a prefix of a step.
    let steps = step_breakdown(trace);
    if steps.is_empty() {
        return None;
    }
    let changed: std::collections::HashMap<u64, bool> =
        graphs.steps.iter().map(|g| (g.step, g.changed)).collect();
    let total = steps.len();
    let group = total.div_ceil(opts.max_step_bars.max(1)).max(1);
    let mut d = StepsData {
        index: Vec::new(),
        last_index: Vec::new(),
        duration_ns: Vec::new(),
        phases_ns: Vec::new(),
        unrecorded: Vec::new(),
        baseline: baseline.map(|b| {
            step_breakdown(b)
                .iter()
                .map(|s| [s.index, s.duration_ns])
                .collect()
        }),
        changed: Vec::new(),
        ops: Vec::new(),
        note: format!(
            "Wall time of each step ({} time), split by phase (the outermost forward, backward and optimizer spans; \"other\" is the rest of the step). A step ends where the next recorded step begins, or at its last event when the next steps were not recorded (dashed gaps).",
            trace.run.timing.as_str()
        ),
    };
    for w in steps.windows(2) {
        if w[1].index > w[0].index.saturating_add(1) {
            d.unrecorded.push([w[0].index + 1, w[1].index - 1]);
        }
    }
    if let Some(p) = summary.steps.partial_step {
        d.note.push_str(&format!(
            " Step {p} is left out: the trace ends inside it (incomplete)."
        ));
    }
    if d.baseline.is_some() {
        d.note
            .push_str(" The baseline's step times are drawn as a line (same step indices).");
    }
    for chunk in steps.chunks(group) {
        let (Some(first), Some(last)) = (chunk.first(), chunk.last()) else {
            continue;
        };
        // The slowest step of the group is drawn (its phases too).
        let Some(slow) = chunk.iter().max_by_key(|s| s.duration_ns) else {
            continue;
        };
        let (dur, ph) = (slow.duration_ns, slow.phases);
        d.index.push(first.index);
        d.last_index.push(last.index);
        d.duration_ns.push(Some(dur));
        d.phases_ns
            .push([ph.forward_ns, ph.backward_ns, ph.optimizer_ns, ph.other_ns]);
        d.changed.push(
            chunk
                .iter()
                .any(|s| changed.get(&s.index).copied().unwrap_or(false)),
        );
        d.ops.push(chunk.iter().map(|s| s.ops).sum());
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
        col("count", "int").explained("calls of this op in the whole trace"),
        bar("total", "ns").explained("summed duration of every call"),
        bar("self", "ns").explained("total minus ops nested inside it on the same thread"),
        col("mean", "ns").explained("mean duration of one call"),
        col("min", "ns").explained("shortest call"),
        col("max", "ns").explained("longest call"),
        col("p95", "ns").explained("95th percentile of one call's duration (nearest rank)"),
        col("output bytes", "bytes")
            .explained("logical bytes (shape × dtype size) of all outputs, summed over calls"),
        bar("share of step time", "pct")
            .explained("total time of this op inside steps / the summed step time"),
        col("GFLOP/s", "float").explained(
            "recorded FLOPs / time of the calls that recorded them (absent when none did)",
        ),
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
            opt_f(r.gflop_per_s),
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
    // The compact tree: display paths are made for the rows shown only.
    let tree = path_tree(trace);
    let mut t = TableData::new(vec![
        col("span", "text"),
        col("kind", "text").explained("module, function, tracing span, ..."),
        col("phase", "text").explained("forward, backward or optimizer (recorded or inherited)"),
        col("count", "int").explained("closed spans with this path in the whole trace"),
        bar("total", "ns").explained("summed duration over the whole trace"),
        bar("self", "ns")
            .explained("total minus child spans and the span's own ops, over the whole trace"),
        col("per step (mean)", "ns")
            .explained("mean time per step, over the steps where the path occurs"),
        col("per step (sd)", "ns").explained("standard deviation of the time per step"),
        col("allocated (all steps)", "bytes").explained(
            "logical bytes allocated directly in this path, summed over the whole trace (not per step)",
        ),
    ]);
    t.total_rows = tree.nodes.len();
    t.empty = "No spans in this trace.".to_string();
    t.note = Some(format!(
        "{} spans aggregated into {} paths; {} durations. total, self and allocated sum the whole trace; per step columns are per step. Hover a header for its meaning; click ▾ to fold a subtree.",
        tree.span_count(),
        tree.nodes.len(),
        trace.run.timing.as_str()
    ));
    let mut depth = Vec::new();
    let mut titles = Vec::new();
    for ((i, node), path) in tree
        .nodes
        .iter()
        .enumerate()
        .zip(tree.display_paths())
        .take(opts.max_span_rows)
    {
        depth.push(node.depth);
        titles.push(path);
        let per_step = node.per_step();
        t.rows.push(vec![
            json!(tree.name(i)),
            json!(format!("{:?}", node.kind).to_lowercase()),
            node.exec_step.map_or(Value::Null, |e| json!(e.as_str())),
            n(node.count),
            n(node.total_ns),
            n(node.self_ns),
            opt_f(per_step.map(|s| s.mean)),
            opt_f(per_step.map(|s| s.stddev)),
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

/// A table of allocations. The key columns come first (category, bytes, tensor): a parameter
/// and its gradient share a label and a shape, and only the category tells them apart.
fn alloc_table(list: &[Allocation], total: u64, what: &str) -> TableData {
    let mut t = TableData::new(vec![
        col("category", "text")
            .explained("parameter, gradient, activation, optimizer state, ...")
            .keyed(),
        bar("bytes", "bytes")
            .explained("logical bytes (shape × dtype size)")
            .keyed(),
        col("tensor", "name")
            .explained("the tensor's label when recorded, else its id")
            .keyed(),
        col("shape", "text"),
        col("produced by", "name").explained("the op that recorded this tensor as an output"),
        col("span path", "name").explained("the span path that op ran in"),
        col("allocated at", "ns").explained("time since the session started"),
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
            json!(a.category.as_str()),
            n(a.bytes),
            json!(name),
            a.shape.as_ref().map_or(Value::Null, |s| json!(s)),
            a.produced_by
                .as_ref()
                .map_or(json!("(not produced by a recorded op)"), |p| json!(p)),
            a.span_path.as_ref().map_or(Value::Null, |p| json!(p)),
            n(a.allocated_at_ns),
        ]);
    }
    t
}

fn memory_device(d: &DeviceMemory) -> MemoryDevice {
    let band = &d.band;
    let cats: Vec<MemoryCategory> = MemoryCategory::ALL
        .iter()
        .copied()
        .filter(|c| {
            band.by_category_at_lo
                .get(c.index())
                .is_some_and(|v| v.iter().any(|x| *x > 0))
                || d.peak_by_category.get(*c) > 0
        })
        .collect();
    let series = cats
        .iter()
        .map(|c| {
            band.by_category_at_lo
                .get(c.index())
                .cloned()
                .unwrap_or_default()
        })
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
    for c in MemoryCategory::ALL {
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
        ("peak at".to_string(), format_ns(d.peak_at_ns as f64)),
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
        t_ns: band.t_ns.clone(),
        end_ns: band.end_ns.max(d.peak_at_ns),
        lo: band.lo.clone(),
        hi: band.hi.clone(),
        exact: band.exact,
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

/// `text` with its first letter in upper case (a sentence from a clause).
fn upper_first(text: &str) -> String {
    let mut c = text.chars();
    c.next()
        .map_or_else(String::new, |f| f.to_uppercase().chain(c).collect())
}

fn memory_data(trace: &Trace) -> Option<MemoryData> {
    let report = memory_report(trace)?;
    Some(MemoryData {
        bytes_kind: report.bytes_kind,
        note: format!(
            "Live {} bytes (shape × dtype size, not allocator or device figures) from the trace's allocation and free events. Up to {BAND_POINTS} events are drawn exactly; more are grouped into {BAND_POINTS} time buckets drawn as a band from the smallest to the largest live total in the bucket (categories stacked at the smallest), so drops between steps and the peak both show. Drag across the chart to zoom in on a time range; double-click or \"reset zoom\" to zoom out.",
            report.bytes_kind,
        ) + &report
            .autograd
            .map(|a| format!(" {}.", upper_first(&a.describe())))
            .unwrap_or_default(),
        devices: report.devices.iter().map(memory_device).collect(),
    })
}

fn graphs_data(
    g: &trace_analyze::GraphReport,
    opts: &ReportOptions,
    caps: &mut Vec<String>,
) -> Option<GraphsData> {
    if g.steps.is_empty() {
        return None;
    }
    let summary = vec![
        ("steps".to_string(), g.steps.len().to_string()),
        ("distinct graphs".to_string(), g.distinct_graphs.to_string()),
        ("verdict".to_string(), g.verdict.clone()),
        (
            "stable from step".to_string(),
            g.stable_from_step.map_or("never".to_string(), |s| {
                format!("{s} (the graph of every whole step from step {s} on is the same)")
            }),
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

/// `regression: +12.3 % [+8.1 %, +16.0 %]` / `within noise (...)` / `too few steps`.
fn verdict_text(c: &Change) -> String {
    match (c.ci_low, c.ci_high) {
        (Some(l), Some(h)) => format!(
            "{} ({}% interval {:+.1} % to {:+.1} %)",
            c.label(),
            (CONFIDENCE * 100.0).round(),
            l * 100.0,
            h * 100.0
        ),
        _ => c.label().to_string(),
    }
}

fn change_cols(what: &str) -> Vec<crate::model::Column> {
    vec![
        col(what, "name"),
        col("baseline", "ns").explained("median time per step in the baseline (steps where it occurs)"),
        col("this trace", "ns").explained("median time per step in this trace"),
        col("change %", "delta_pct").explained("relative change of the medians"),
        col("interval low", "delta_pct").explained(
            "lower bound of the 95% bootstrap confidence interval of the change (steps resampled, fixed seed)",
        ),
        col("interval high", "delta_pct").explained("upper bound of that interval"),
        col("verdict", "text").explained(&format!(
            "the verdict `tracegraph compare` gives the row (trace-analyze decides it; the page does not re-judge): regression / improvement when the change is outside the noise and at least the minimum effect, below min effect when it is smaller (never a regression), within noise otherwise, too few steps with fewer than {MIN_SAMPLES} on a side"
        )),
    ]
}

/// A change's class on the page: significant changes marked, noise dimmed.
fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Regression => "regression",
        Verdict::Improvement => "improvement",
        Verdict::WithinNoise => "noise",
        Verdict::TooFewSamples => "",
    }
}

/// One comparison row; its class marks significant changes (and noise, dimmed).
fn change_row(t: &mut TableData, name: &str, c: Option<&Change>, d: &Delta) {
    let (row, class) = match c {
        Some(c) => (
            vec![
                json!(name),
                opt_f(Some(c.base_median.round())),
                opt_f(Some(c.candidate_median.round())),
                opt_f(c.ratio),
                opt_f(c.ci_low),
                opt_f(c.ci_high),
                json!(c.label()),
            ],
            verdict_class(c.verdict),
        ),
        None => (
            vec![
                json!(name),
                opt_f(d.base.map(f64::round)),
                opt_f(d.candidate.map(f64::round)),
                opt_f(d.ratio),
                Value::Null,
                Value::Null,
                json!(if d.base.is_none() || d.candidate.is_none() {
                    "in one trace only"
                } else {
                    "no whole steps"
                }),
            ],
            "",
        ),
    };
    t.rows.push(row);
    t.row_class.get_or_insert_with(Vec::new).push(class);
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
            "step time (median)".to_string(),
            match &c.step_time_change {
                None if c.graph_groups.len() > 1 => {
                    "compared per step graph below (like with like)".to_string()
                }
                Some(ch) => format!(
                    "{} → {}{} — {}",
                    format_ns(ch.base_median),
                    format_ns(ch.candidate_median),
                    ch.ratio
                        .map(|r| format!(" ({:+.1} %)", r * 100.0))
                        .unwrap_or_default(),
                    verdict_text(ch)
                ),
                None => "absent in one trace".to_string(),
            },
        ),
        (
            "equal step graphs".to_string(),
            format!("{} of {} paired steps", c.graphs_equal, c.graphs.len()),
        ),
    ];
    summary.push(("intervals".to_string(), c.interval.describe().to_string()));
    for w in &c.warnings {
        summary.push(("warning".to_string(), w.clone()));
    }
    let mut tables = Vec::new();
    if c.graph_groups.len() > 1 {
        tables.push(graph_group_table(c));
    }
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
            t.note = Some(format!(
                "The first {} of {total} (significant changes first).",
                t.rows.len()
            ));
        }
    };

    let mut spans = TableData::new(change_cols("span path"));
    spans.title = "Span time per step (median over steps)".to_string();
    spans.empty = "No spans in either trace.".to_string();
    let span_rows = c.spans.significance_order();
    for s in span_rows
        .into_iter()
        .take(opts.max_comparison_rows)
        .filter_map(|i| c.spans.get(i))
    {
        change_row(&mut spans, &s.path, s.change.as_ref(), &s.time_per_step_ns);
    }
    capped(&mut spans, c.spans.len(), "spans");
    tables.push(spans);

    let mut ops = TableData::new(change_cols("op"));
    ops.title = "Op time per step (median over steps)".to_string();
    ops.empty = "No op name is in both traces.".to_string();
    let op_rows = significance_order(&c.ops, |o| o.change.as_ref());
    for o in op_rows.iter().take(opts.max_comparison_rows) {
        change_row(&mut ops, &o.name, o.change.as_ref(), &o.time_per_step_ns);
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
    ComparisonData {
        summary,
        caveat: c.interval.describe().to_string(),
        legend: c.legend(),
        tables,
    }
}

/// Step time per step graph, like with like: `tracegraph compare`'s table when the steps ran
/// several graphs (a graph one side only ran is not compared).
fn graph_group_table(c: &Comparison) -> TableData {
    let mut cols = change_cols("step graph");
    cols.insert(
        1,
        col("steps", "text").explained("whole steps with this graph: baseline / this trace"),
    );
    let mut t = TableData::new(cols);
    t.title = "Step time per step graph (like with like)".to_string();
    t.total_rows = c.graph_groups.len();
    for g in &c.graph_groups {
        let name = format!("{} {}", g.label, g.signature);
        let mut row = Vec::with_capacity(8);
        row.push(json!(name));
        row.push(json!(format!("{} / {}", g.steps.0, g.steps.1)));
        let class = match (&g.change, g.only_in) {
            (Some(ch), None) => {
                row.extend([
                    opt_f(Some(ch.base_median.round())),
                    opt_f(Some(ch.candidate_median.round())),
                    opt_f(ch.ratio),
                    opt_f(ch.ci_low),
                    opt_f(ch.ci_high),
                    json!(ch.label()),
                ]);
                verdict_class(ch.verdict)
            }
            // Not compared: the step times each side has, and why.
            (_, only_in) => {
                let why = match only_in {
                    Some(side) => format!("{side} only: not compared"),
                    None => "no whole steps".to_string(),
                };
                row.extend([
                    opt_f(g.step_time_ns.base.map(f64::round)),
                    opt_f(g.step_time_ns.candidate.map(f64::round)),
                    Value::Null,
                    Value::Null,
                    Value::Null,
                    json!(why),
                ]);
                ""
            }
        };
        t.rows.push(row);
        t.row_class.get_or_insert_with(Vec::new).push(class);
    }
    t
}
