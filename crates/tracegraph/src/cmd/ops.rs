//! `tracegraph ops`: the op table, sortable by any column, optionally per input shapes; with
//! `--sampled`, the Candle ops that CPU samples ran inside, per span path; of several traces
//! (the ranks of one run), the ranks' op tables side by side and merged.

use std::fmt::Write as _;
use std::path::PathBuf;

use trace_analyze::{
    OpColumn, OpTable, OpTableOptions, RankOps, SampledOpOptions, SampledOpTable, Trace, op_table,
    rank_op_tables, sampled_op_table, short_func,
};

use trace_analyze::format_ns;

use super::{Status, Table, bytesu, load, nsu, print_json, timing_text, write_stdout};

/// Arguments of `tracegraph ops`.
#[derive(clap::Args, Debug)]
pub(crate) struct OpsArgs {
    /// The trace file (JSON Lines, or zstd-compressed). Several traces, or a directory of
    /// them (its `*.jsonl` and `*.jsonl.zst` files), are the ranks of one distributed run:
    /// then, per op, its total time on each rank side by side, the slowest rank and how much
    /// longer it took than the median rank, and the op table merged over the ranks (sort,
    /// `--by-shape` and `--limit` apply to it; not with `--sampled`).
    #[arg(required = true, num_args = 1..)]
    pub(crate) trace: Vec<PathBuf>,
    /// Sort column (descending; `name` ascending): name, count, total, self, mean, min, max,
    /// p95, bytes, share.
    #[arg(long, default_value = "total", value_name = "COL")]
    pub(crate) sort: OpColumn,
    /// One row per op name and input shapes.
    #[arg(long)]
    pub(crate) by_shape: bool,
    /// Show at most N rows (with `--sampled`: N ops per span path, the rest in one
    /// `(other ops)` row).
    #[arg(long, value_name = "N")]
    pub(crate) limit: Option<usize>,
    /// The sampled op table instead: per span path, the Candle ops (Tensor methods, candle_nn
    /// functions and layers, backward) that CPU samples ran inside, with sample counts, a
    /// 95 % interval on each share and the part of the span's self time each explains (a
    /// trace recorded with the sampler on: `tracegraph demo --sample`,
    /// `Capture::sample_stacks`).
    #[arg(long, conflicts_with_all = ["sort", "by_shape"])]
    pub(crate) sampled: bool,
    /// Print JSON (schema `tracegraph.ops/1`; with `--sampled`, `tracegraph.sampled_ops/1`;
    /// for several traces, `tracegraph.ops_ranks/1`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `tracegraph ops`.
pub(crate) fn run(args: &OpsArgs) -> anyhow::Result<Status> {
    let sort = args.sort;
    let paths = super::trace_paths(&args.trace)?;
    let opts = OpTableOptions {
        by_shape: args.by_shape,
        sort,
        limit: args.limit,
    };
    if paths.len() > 1 {
        if args.sampled {
            return Err(super::output::UsageError(
                "ops --sampled reads one trace; give one rank's trace".to_string(),
            )
            .into());
        }
        let traces = super::ranks::load_all(&paths)?;
        return run_ranks(&rank_op_tables(&traces, &opts), args);
    }
    let Some(path) = paths.first() else {
        anyhow::bail!("no trace given");
    };
    let trace = load(path, false)?;
    if args.sampled {
        return run_sampled(args, &trace);
    }
    let table = op_table(&trace, &opts);
    if args.json {
        print_json("ops", &table)?;
        return Ok(Status::Ok);
    }
    write_stdout(&render_table(&table))?;
    Ok(Status::Ok)
}

/// The op table as text: its header line, a note when sums saturated, the rows, and how
/// many groups the limit left out.
fn render_table(table: &OpTable) -> String {
    let by_shape = table.by_shape;
    let mut cols = vec!["op"];
    if by_shape {
        cols.push("input shapes");
    }
    cols.extend([
        ">calls",
        ">total",
        ">self",
        ">mean",
        ">min",
        ">max",
        ">p95",
        ">out bytes",
        ">share",
    ]);
    let mut t = Table::new(&cols);
    for r in &table.rows {
        let mut row = vec![r.name.clone()];
        if by_shape {
            row.push(r.input_shapes.clone().unwrap_or_default());
        }
        row.extend([
            r.count.to_string(),
            nsu(r.total_ns),
            nsu(r.self_ns),
            format_ns(r.mean_ns),
            nsu(r.min_ns),
            nsu(r.max_ns),
            nsu(r.p95_ns),
            bytesu(r.output_bytes),
            r.share_of_step
                .map_or("-".into(), |x| format!("{:.1}%", x * 100.0)),
        ]);
        t.row(row);
    }
    let mut out = format!(
        "{} ops in {} group(s), {}; share = self time / step time{}\n",
        table.op_count,
        table.groups,
        timing_text(table.timing),
        match table.step_time_ns {
            Some(s) => format!(" ({} in whole steps)", nsu(s)),
            None => " (no whole step recorded)".into(),
        }
    );
    if table.saturated {
        out.push_str(
            "note: some sums exceeded 2^64 - 1 ns or bytes and are shown capped at that value\n",
        );
    }
    out.push_str(&t.render());
    if table.rows.len() < table.groups {
        out.push_str(&format!(
            "\n({} more group(s) not shown)",
            table.groups - table.rows.len()
        ));
    }
    out
}

/// `tracegraph ops` of several ranks: per op its total per rank, the slowest rank and its
/// excess over the median rank; then the merged op table.
fn run_ranks(v: &RankOps, args: &OpsArgs) -> anyhow::Result<Status> {
    if args.json {
        print_json("ops_ranks", v)?;
        return Ok(Status::Ok);
    }
    use super::ranks::{label, per_rank_columns, preamble, slowest_cells};
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} rank(s): per op, its total time on each rank, the slowest rank, its total against the median rank's (a rank without the op counts as 0) and the difference; {}",
        v.ranks.len(),
        timing_text(v.merged.timing)
    );
    preamble(&mut o, &v.ranks, &v.notes);
    let wide = per_rank_columns(&v.ranks);
    if let Some(s) = &v.slowest {
        let [rank, total, median, excess] = slowest_cells(s, &v.ranks);
        let _ = writeln!(
            o,
            "most time in ops: rank {rank}, {total} of op self time against the median rank's {median} ({excess})"
        );
    }
    let _ = writeln!(o);
    let labels: Vec<String> = v.ranks.iter().map(|c| format!(">{}", label(c))).collect();
    let mut cols = vec!["op"];
    if v.merged.by_shape {
        cols.push("input shapes");
    }
    if wide {
        cols.extend(labels.iter().map(String::as_str));
    }
    cols.extend([">slowest", ">its total", ">median rank", ">excess"]);
    let mut t = Table::new(&cols);
    for r in &v.rows {
        let mut row = vec![r.name.clone()];
        if v.merged.by_shape {
            row.push(r.input_shapes.clone().unwrap_or_default());
        }
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
        t.row(row);
    }
    if t.is_empty() {
        let _ = writeln!(o, "(no ops)");
    } else {
        let _ = writeln!(o, "{}", t.render());
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "merged over the {} rank(s): calls, times and bytes summed, min and max over every call, p95 the highest rank's, share of all ranks' whole steps",
        v.ranks.len()
    );
    o.push_str(&render_table(&v.merged));
    write_stdout(&o)?;
    Ok(Status::Ok)
}

/// `tracegraph ops --sampled`: the sampled op table; a trace without samples answers as `hot`
/// does (`no samples: ...`, success).
fn run_sampled(args: &OpsArgs, trace: &Trace) -> anyhow::Result<Status> {
    let table = sampled_op_table(trace, &SampledOpOptions { limit: args.limit });
    let Some(table) = table else {
        if args.json {
            print_json(
                "sampled_ops",
                &serde_json::json!({ "samples": 0, "spans": [] }),
            )?;
        } else {
            let why = if trace.run.version < 2 {
                "the trace is schema version 1, which has no sampled stacks; record it with the \
                 sampler on (`tracegraph demo --sample`, `Capture::sample_stacks`)"
            } else {
                "the trace has no sampled stacks; record it with the sampler on \
                 (`tracegraph demo --sample`, `Capture::sample_stacks`)"
            };
            write_stdout(&format!("no samples: {why}"))?;
        }
        return Ok(Status::Ok);
    };
    if args.json {
        print_json("sampled_ops", &table)?;
        return Ok(Status::Ok);
    }
    write_stdout(&render_sampled(&table))?;
    Ok(Status::Ok)
}

/// A share as `12.3%`.
fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// The sampled op table as text: a header, then per span path its line and its op rows.
pub(crate) fn render_sampled(t: &SampledOpTable) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "sampled   {}; {}", t.totals(), timing_text(t.timing));
    let _ = writeln!(
        o,
        "          op: the outermost Candle API frame (Tensor method, candle_nn function or layer, backward) below the innermost span; share: of the span's samples, 95% interval in brackets"
    );
    let _ = writeln!(
        o,
        "          est. self = share x the span's self time (measured, not covered by child spans); est. CPU = samples x {} (all threads)",
        t.ns_per_sample
            .map_or("the requested period".into(), |p| nsu(p.round() as u64))
    );
    if t.saturated {
        let _ = writeln!(
            o,
            "warning   sample counts passed 2^64 - 1 and stopped there: the trace's counts are hostile or corrupt; shares are unreliable"
        );
    }
    for sp in &t.spans {
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "{} — self {}, {} samples ({} in ops, {} profiler, {} waiting)",
            short_func(&sp.path, 120),
            sp.self_ns.map_or("-".into(), nsu),
            sp.samples,
            sp.in_ops,
            sp.profiler,
            sp.waiting
        );
        let mut table = Table::new(&[
            "op",
            ">samples",
            ">share",
            ">95% interval",
            ">est. self",
            ">est. CPU",
        ]);
        for r in &sp.rows {
            table.row(vec![
                format!("  {}", short_func(&r.op, 80)),
                r.samples.to_string(),
                pct(r.share),
                format!("[{} – {}]", pct(r.share_low), pct(r.share_high)),
                r.est_self_ns.map_or("-".into(), |n| format!("≈{}", nsu(n))),
                r.est_cpu_ns.map_or("-".into(), |n| format!("≈{}", nsu(n))),
            ]);
        }
        let _ = writeln!(o, "{}", table.render());
    }
    o.trim_end().to_string()
}
