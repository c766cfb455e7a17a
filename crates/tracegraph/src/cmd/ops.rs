//! `tracegraph ops`: the op table, sortable by any column, optionally per input shapes.

use std::path::PathBuf;

use trace_analyze::{OpColumn, OpTableOptions, op_table};

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
    /// Show at most N rows.
    #[arg(long, value_name = "N")]
    pub(crate) limit: Option<usize>,
    /// Print JSON (schema `tracegraph.ops/1`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `tracegraph ops`.
pub(crate) fn run(args: &OpsArgs) -> anyhow::Result<Status> {
    let sort = args.sort;
    let trace = load(&args.trace, false)?;
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
