//! `tracegraph spans`: the span tree with total and self time per path and spread over steps.

use std::path::PathBuf;

use trace_analyze::span_tree;

use trace_analyze::format_ns;

use super::{Status, Table, bytesu, load, nsu, print_json, timing_text, write_stdout};

/// Arguments of `tracegraph spans`.
#[derive(clap::Args, Debug)]
pub(crate) struct SpansArgs {
    /// The trace file (JSON Lines).
    pub(crate) trace: PathBuf,
    /// Show paths at most this deep (0 = roots only).
    #[arg(long, value_name = "N")]
    pub(crate) depth: Option<u32>,
    /// Print JSON (schema `tracegraph.spans/1`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `tracegraph spans`.
pub(crate) fn run(args: &SpansArgs) -> anyhow::Result<Status> {
    let trace = load(&args.trace, false)?;
    let mut tree = span_tree(&trace);
    if let Some(d) = args.depth {
        tree.nodes.retain(|n| n.depth <= d);
    }
    if args.json {
        print_json("spans", &tree)?;
        return Ok(Status::Ok);
    }
    let mut t = Table::new(&[
        "span",
        "step",
        ">count",
        ">total",
        ">self",
        ">mean/step",
        ">± stddev",
        ">allocated",
    ]);
    for n in &tree.nodes {
        let open = if n.open > 0 {
            format!(" ({} open)", n.open)
        } else {
            String::new()
        };
        t.row(vec![
            indented(n.depth, &n.name, &open),
            n.exec_step.map_or("-".into(), |e| e.as_str().to_string()),
            n.count.to_string(),
            nsu(n.total_ns),
            nsu(n.self_ns),
            n.per_step.map_or("-".into(), |s| format_ns(s.mean)),
            n.per_step.map_or("-".into(), |s| format_ns(s.stddev)),
            bytesu(n.alloc_bytes),
        ]);
    }
    let mut out = format!(
        "{} spans in {} path(s) over {} step(s), {}; mean/step over the steps where the path occurs\n",
        tree.span_count,
        tree.nodes.len(),
        tree.steps,
        timing_text(tree.timing)
    );
    if t.is_empty() {
        out.push_str("(no spans)");
    } else {
        out.push_str(&t.render());
    }
    write_stdout(&out)?;
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
