//! `tracegraph spans`: the span tree with total and self time per path and spread over steps;
//! of several traces (the ranks of one run), per path the ranks' totals side by side.
//!
//! With tracked-heap lines, an `allocated (heap)` column (heap bytes, tracked and counted,
//! per path) stands beside the logical `allocated (logical)` one; the two are never summed.

use std::path::PathBuf;

use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::Context as _;
use trace_analyze::{FastMap, PathNode, RankSpans, heap_report, rank_span_trees};

use trace_analyze::format_ns;

use super::{Status, Table, bytesu, load, nsu, print_json, timing_text};

/// Arguments of `tracegraph spans`.
#[derive(clap::Args, Debug)]
pub(crate) struct SpansArgs {
    /// The trace file (JSON Lines, or zstd-compressed). Several traces, or a directory of
    /// them (its `*.jsonl` and `*.jsonl.zst` files), are the ranks of one distributed run:
    /// then one tree of every rank's paths, per path its total time on each rank side by side,
    /// the slowest rank, its mean per step against the median rank's and the difference
    /// (`--depth` and `--sort` apply; not with `--by-shape`).
    #[arg(required = true, num_args = 1..)]
    pub(crate) trace: Vec<PathBuf>,
    /// Show paths at most this deep (0 = roots only).
    #[arg(long, value_name = "N")]
    pub(crate) depth: Option<u32>,
    /// Print JSON (schema `tracegraph.spans/1`; each node with `heap_alloc_bytes` when the
    /// trace has tracked-heap lines; `tracegraph.span_shapes/1` with `--by-shape`;
    /// `tracegraph.spans_ranks/1` for several traces) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// One row per span path and module input shape (profiled modules record their input's
    /// shape), like `ops --by-shape`: a module called on two sequence lengths is two rows.
    #[arg(long, conflicts_with = "depth")]
    pub(crate) by_shape: bool,
    /// The order of each path's children: `call` (the order they first ran: the model's own
    /// order) or `total` (largest total time first).
    #[arg(long, value_name = "ORDER", default_value = "call")]
    pub(crate) sort: trace_analyze::SpanOrder,
}

/// `spans --by-shape`: the span tree split by module input shape.
fn by_shape(trace: &trace_analyze::Trace, json: bool) -> anyhow::Result<Status> {
    let table = trace_analyze::span_shape_table(trace);
    if json {
        print_json("span_shapes", &table)?;
        return Ok(Status::Ok);
    }
    let mut t = Table::new(&["span", "input shape", ">count", ">total", ">self", ">mean"]);
    for r in &table.rows {
        t.row(vec![
            format!(
                "{}{}",
                "  ".repeat(r.depth.min(32) as usize),
                r.path.rsplit('/').next().unwrap_or(&r.path)
            ),
            r.input_shape.clone().unwrap_or_else(|| "-".into()),
            r.count.to_string(),
            nsu(r.total_ns),
            nsu(r.self_ns),
            format_ns(r.mean_ns),
        ]);
    }
    let mut out = format!(
        "{} span path(s) by module input shape ({} with a recorded input shape), {}\n",
        table.rows.len(),
        table.shaped_rows,
        timing_text(trace.run.timing)
    );
    out.push_str(&if t.is_empty() {
        "(no spans)".to_string()
    } else {
        t.render()
    });
    super::write_stdout(&out)?;
    Ok(Status::Ok)
}

/// Runs `tracegraph spans`.
pub(crate) fn run(args: &SpansArgs) -> anyhow::Result<Status> {
    let paths = super::trace_paths(&args.trace)?;
    if paths.len() > 1 {
        if args.by_shape {
            return Err(super::output::UsageError(
                "spans --by-shape reads one trace; give one rank's trace".to_string(),
            )
            .into());
        }
        let traces = super::ranks::load_all(&paths)?;
        return run_ranks(&rank_span_trees(&traces, args.sort), args);
    }
    let Some(path) = paths.first() else {
        anyhow::bail!("no trace given");
    };
    let trace = load(path, false)?;
    if args.by_shape {
        return by_shape(&trace, args.json);
    }
    // Heap bytes (tracked and counted) per span path, when the trace has heap lines: a
    // column of its own beside the logical one, never added to it.
    let heap: Option<FastMap<u32, u64>> = heap_report(&trace).map(|h| {
        h.spans
            .iter()
            .filter_map(|r| Some((r.path_id?, r.alloc_bytes.saturating_add(r.small_bytes))))
            .collect()
    });
    if args.json {
        let mut tree = trace_analyze::span_tree_ordered(&trace, args.sort);
        if let Some(d) = args.depth {
            tree.nodes.retain(|n| n.depth <= d);
        }
        let json = TreeJson {
            timing: tree.timing,
            steps: tree.steps,
            span_count: tree.span_count,
            nodes: NodesJson {
                nodes: &tree.nodes,
                heap: heap.as_ref(),
            },
        };
        print_json("spans", &json)?;
        return Ok(Status::Ok);
    }
    // Text: the compact tree (no path strings) and rows written as they are made, so that a
    // trace of a million paths is not held as a table of strings.
    let tree = trace_analyze::path_tree_ordered(&trace, args.sort);
    let shown = |n: &&PathNode| args.depth.is_none_or(|d| n.depth <= d);
    let mut columns = vec![
        "span",
        "step",
        ">count",
        ">total",
        ">self",
        ">mean/step",
        ">± stddev",
        ">allocated",
    ];
    if heap.is_some() {
        columns.pop();
        columns.extend([">allocated (logical)", ">allocated (heap)"]);
    }
    let t = Table::new(&columns);
    let rows = |emit: &mut dyn FnMut(&[String])| {
        for (i, n) in tree.nodes.iter().enumerate().filter(|(_, n)| shown(n)) {
            let open = if n.open > 0 {
                format!(" ({} open)", n.open)
            } else {
                String::new()
            };
            let per_step = n.per_step();
            let mut row = vec![
                indented(n.depth, tree.name(i), &open),
                n.exec_step.map_or("-".into(), |e| e.as_str().to_string()),
                n.count.to_string(),
                nsu(n.total_ns),
                nsu(n.self_ns),
                per_step.map_or("-".into(), |s| format_ns(s.mean)),
                per_step.map_or("-".into(), |s| format_ns(s.stddev)),
                bytesu(n.alloc_bytes),
            ];
            if let Some(heap) = &heap {
                row.push(bytesu(heap.get(&n.path_id).copied().unwrap_or(0)));
            }
            emit(&row);
        }
    };
    let paths = tree.nodes.iter().filter(shown).count();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut result = writeln!(
        out,
        "{} spans in {paths} path(s) over {} step(s), {}; mean/step over the steps where the path occurs",
        trace.spans.len(),
        trace.steps.len(),
        timing_text(trace.run.timing)
    );
    if result.is_ok() && trace_analyze::tracing_layer_saw_no_spans(&trace) {
        result = writeln!(
            out,
            "warning: {}",
            trace_analyze::TRACING_LAYER_SAW_NO_SPANS
        );
    }
    // Steps of several graphs: the per-step columns pool them; each graph's step times apart.
    // Fewer than two whole steps make at most one group: no step graph is built for them.
    if result.is_ok()
        && trace.complete_steps().len() >= 2
        && let Ok(g) = trace_analyze::graph_report(&trace, &trace_analyze::new_step_cache())
        && g.groups.len() > 1
    {
        result = writeln!(out, "graphs: {}; step times per graph:", g.verdict);
        for gr in &g.groups {
            let t = &gr.step_time;
            if result.is_ok() {
                result = writeln!(
                    out,
                    "  {} {}: {} step(s), step time {} ± {}",
                    gr.label,
                    gr.signature,
                    t.count,
                    format_ns(t.mean),
                    format_ns(t.stddev)
                );
            }
        }
    }
    if paths == 0 {
        result = result.and_then(|()| writeln!(out, "(no spans)"));
    } else {
        t.write_rows(rows, |l| {
            if result.is_ok() {
                result = writeln!(out, "{l}");
            }
        });
    }
    match result.and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Status::Ok),
        r => r.context("writing to stdout").map(|()| Status::Ok),
    }
}

/// `tracegraph spans` of several ranks: per path its total per rank, the slowest rank, its
/// mean per step against the median rank's total per step.
fn run_ranks(v: &RankSpans, args: &SpansArgs) -> anyhow::Result<Status> {
    use super::ranks::{label, per_rank_columns, preamble, slowest_cells};
    let shown = |r: &&trace_analyze::RankSpanRow| args.depth.is_none_or(|d| r.depth <= d);
    if args.json {
        let mut v = v.clone();
        v.rows.retain(|r| shown(&r));
        print_json("spans_ranks", &v)?;
        return Ok(Status::Ok);
    }
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} rank(s), {} span path(s): per path, its total time on each rank, the slowest rank, its total against the median rank's (a rank without the path counts as 0) and the difference, and the slowest rank's mean per step; {}",
        v.ranks.len(),
        v.rows.iter().filter(shown).count(),
        timing_text(v.timing)
    );
    preamble(&mut o, &v.ranks, &v.notes);
    let wide = per_rank_columns(&v.ranks);
    let labels: Vec<String> = v.ranks.iter().map(|c| format!(">{}", label(c))).collect();
    let mut cols = vec!["span"];
    if wide {
        cols.extend(labels.iter().map(String::as_str));
    }
    cols.extend([
        ">slowest",
        ">its total",
        ">median rank",
        ">excess",
        ">its mean/step",
    ]);
    let mut t = Table::new(&cols);
    for r in v.rows.iter().filter(shown) {
        let mut row = vec![indented(r.depth, &r.name, "")];
        if wide {
            let mut cells = vec!["-".to_string(); v.ranks.len()];
            for c in &r.ranks {
                if let Some(x) = cells.get_mut(c.column) {
                    *x = nsu(c.total_ns);
                }
            }
            row.extend(cells);
        }
        row.extend(slowest_cells(&r.slowest, &v.ranks));
        row.push(
            r.ranks
                .iter()
                .find(|c| c.column == r.slowest.column)
                .and_then(|c| c.mean_per_step_ns)
                .map_or("-".into(), format_ns),
        );
        t.row(row);
    }
    let _ = writeln!(o);
    if t.is_empty() {
        o.push_str("(no spans)");
    } else {
        o.push_str(&t.render());
    }
    super::write_stdout(&o)?;
    Ok(Status::Ok)
}

/// Indentation stops growing at this depth (deeper rows say their depth instead), so that the
/// table of a deeply nested trace stays linear in size.
const MAX_INDENT: u32 = 32;

/// The name indented by its depth: two spaces a level up to [`MAX_INDENT`], then `[depth N]`.
fn indented(depth: u32, name: &str, open: &str) -> String {
    if depth <= MAX_INDENT {
        format!("{}{name}{open}", "  ".repeat(depth as usize))
    } else {
        format!(
            "{}[depth {depth}] {name}{open}",
            "  ".repeat(MAX_INDENT as usize)
        )
    }
}

/// `spans --json`: the span tree, each node with its heap bytes when the trace has heap lines,
/// serialised as it is written (no JSON tree of every node held in memory).
#[derive(serde::Serialize)]
struct TreeJson<'a> {
    timing: trace_record::schema::TimingMode,
    steps: usize,
    span_count: usize,
    nodes: NodesJson<'a>,
}

/// The nodes of [`TreeJson`], each with `heap_alloc_bytes` (tracked plus counted heap bytes
/// of its path, 0 when none) when the trace has heap lines.
struct NodesJson<'a> {
    nodes: &'a [trace_analyze::SpanNode],
    heap: Option<&'a FastMap<u32, u64>>,
}

impl serde::Serialize for NodesJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Node<'a> {
            #[serde(flatten)]
            node: &'a trace_analyze::SpanNode,
            #[serde(skip_serializing_if = "Option::is_none")]
            heap_alloc_bytes: Option<u64>,
        }
        s.collect_seq(self.nodes.iter().map(|node| {
            Node {
                node,
                heap_alloc_bytes: self
                    .heap
                    .map(|h| h.get(&node.path_id).copied().unwrap_or(0)),
            }
        }))
    }
}
