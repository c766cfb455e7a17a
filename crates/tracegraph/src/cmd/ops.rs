//! `tracegraph ops`: the op table, sortable by any column, optionally per input shapes; with
//! `--sampled`, the Candle ops that CPU samples ran inside, per span path.

use std::fmt::Write as _;
use std::path::PathBuf;

use trace_analyze::{
    OpColumn, OpTableOptions, SampledOpOptions, SampledOpTable, Trace, op_table, sampled_op_table,
    short_func,
};

use trace_analyze::format_ns;

use super::{Status, Table, bytesu, load, nsu, print_json, timing_text, write_stdout};

/// Arguments of `tracegraph ops`.
#[derive(clap::Args, Debug)]
pub(crate) struct OpsArgs {
    /// The trace file (JSON Lines).
    pub(crate) trace: PathBuf,
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
    /// Print JSON (schema `tracegraph.ops/1`; with `--sampled`, `tracegraph.sampled_ops/1`)
    /// instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `tracegraph ops`.
pub(crate) fn run(args: &OpsArgs) -> anyhow::Result<Status> {
    let sort = args.sort;
    let trace = load(&args.trace, false)?;
    if args.sampled {
        return run_sampled(args, &trace);
    }
    let table = op_table(
        &trace,
        &OpTableOptions {
            by_shape: args.by_shape,
            sort,
            limit: args.limit,
        },
    );
    if args.json {
        print_json("ops", &table)?;
        return Ok(Status::Ok);
    }
    let mut cols = vec!["op"];
    if args.by_shape {
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
        if args.by_shape {
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
    write_stdout(&out)?;
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
