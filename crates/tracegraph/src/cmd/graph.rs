//! `tracegraph graph`: per-step execution graph fingerprints, stability and diffs.

use std::fmt::Write as _;
use std::path::PathBuf;

use trace_analyze::{graph_report, new_step_cache};

use super::{Status, Table, load, nsu, print_json, write_stdout};

/// Arguments of `tracegraph graph`.
#[derive(clap::Args, Debug)]
pub(crate) struct GraphArgs {
    /// The trace file (JSON Lines).
    pub(crate) trace: PathBuf,
    /// Print JSON (schema `tracegraph.graph/1`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `tracegraph graph`.
pub(crate) fn run(args: &GraphArgs) -> anyhow::Result<Status> {
    let trace = load(&args.trace, false)?;
    let cache = new_step_cache();
    let r = graph_report(&trace, &cache)?;
    if args.json {
        print_json("graph", &r)?;
        return Ok(Status::Ok);
    }
    let mut o = String::new();
    if r.steps.is_empty() {
        write_stdout("no steps recorded: no step graphs")?;
        return Ok(Status::Ok);
    }
    let _ = writeln!(o, "{} step(s): {}", r.steps.len(), r.verdict);
    let mut t = Table::new(&[
        "step",
        "fingerprint",
        ">ops",
        ">values",
        ">depth",
        ">time",
        "changed",
    ]);
    for s in &r.steps {
        t.row(vec![
            s.step.to_string(),
            s.fingerprint.clone(),
            s.ops.to_string(),
            s.analysis.values.to_string(),
            s.analysis.depth.to_string(),
            nsu(s.duration_ns),
            if s.partial {
                "partial (trace ends in it)".into()
            } else if s.changed {
                "yes".into()
            } else {
                String::new()
            },
        ]);
    }
    let _ = writeln!(o, "{}", t.render());
    // Each distinct change once (an alternating run makes the same change at many steps).
    for c in r.distinct_changes() {
        let Some(d) = &c.diff else { continue };
        let times = match c.times {
            1 => String::new(),
            n => format!(" (and {} later step(s) made the same change)", n - 1),
        };
        let _ = writeln!(
            o,
            "step {} differs from step {} at op #{} ({}){times}:\n  before: {}\n  after:  {}",
            c.step,
            d.against_step,
            d.op_index,
            d.what,
            d.before.as_deref().unwrap_or("(none)"),
            d.after.as_deref().unwrap_or("(none)")
        );
    }
    let _ = writeln!(
        o,
        "step analyses: {} computed, {} reused from the cache (identical steps are analysed once)",
        r.cache.misses, r.cache.hits
    );
    write_stdout(o.trim_end())?;
    Ok(Status::Ok)
}
