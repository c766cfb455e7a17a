//! `tracegraph compare`: two traces side by side — time and memory deltas per span path and op
//! name with their spread over steps, graph fingerprint equality per step, ops in one only.

use std::fmt::Write as _;
use std::path::PathBuf;

use trace_analyze::new_step_cache;
use trace_analyze::{Delta, compare};

use trace_analyze::{format_bytes, format_ns, format_pct};

use super::{Status, Table, load, print_json, timing_text, write_stdout};

/// Arguments of `tracegraph compare`.
#[derive(clap::Args, Debug)]
pub(crate) struct CompareArgs {
    /// The base trace.
    pub(crate) base: PathBuf,
    /// The candidate trace.
    pub(crate) candidate: PathBuf,
    /// Show at most N rows per table.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub(crate) limit: usize,
    /// Print JSON (schema `tracegraph.compare/1`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

fn cell(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map_or("-".into(), f)
}

fn delta_cells(d: &Delta, f: fn(f64) -> String) -> [String; 4] {
    [
        cell(d.base, f),
        cell(d.candidate, f),
        d.delta.map_or("-".into(), |x| {
            let s = f(x);
            if x > 0.0 { format!("+{s}") } else { s }
        }),
        d.ratio.map_or("-".into(), format_pct),
    ]
}

/// Runs `tracegraph compare`.
pub(crate) fn run(args: &CompareArgs) -> anyhow::Result<Status> {
    let base = load(&args.base, false)?;
    let cand = load(&args.candidate, false)?;
    let cache = new_step_cache();
    let c = compare(&base, &cand, &cache)?;
    if args.json {
        print_json("compare", &c)?;
        return Ok(Status::Ok);
    }
    let mut o = String::new();
    let _ = writeln!(
        o,
        "base       {} ({}, {} steps)",
        c.base,
        timing_text(c.timing.0),
        c.steps.0
    );
    let _ = writeln!(
        o,
        "candidate  {} ({}, {} steps)",
        c.candidate,
        timing_text(c.timing.1),
        c.steps.1
    );
    for w in &c.warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    let [b, k, d, r] = delta_cells(&c.step_time_ns, format_ns);
    let _ = writeln!(
        o,
        "step time  {b} -> {k} ({d}, {r}); spread ± {} -> ± {}",
        c.base_step_spread
            .map_or("-".into(), |s| format_ns(s.stddev)),
        c.candidate_step_spread
            .map_or("-".into(), |s| format_ns(s.stddev))
    );
    let _ = writeln!(o);
    let _ = writeln!(o, "span paths (time per step, largest change first)");
    let mut t = Table::new(&[
        "span",
        ">base",
        ">candidate",
        ">delta",
        ">change",
        ">± base",
        ">± cand",
        ">alloc delta",
    ]);
    for s in c.spans.iter().take(args.limit) {
        let [b, k, d, r] = delta_cells(&s.time_per_step_ns, format_ns);
        t.row(vec![
            s.path.clone(),
            b,
            k,
            d,
            r,
            s.base_spread.map_or("-".into(), |x| format_ns(x.stddev)),
            s.candidate_spread
                .map_or("-".into(), |x| format_ns(x.stddev)),
            s.alloc_bytes.delta.map_or("-".into(), format_bytes),
        ]);
    }
    let _ = writeln!(
        o,
        "{}",
        if t.is_empty() {
            "(no spans)".into()
        } else {
            t.render()
        }
    );
    let _ = writeln!(o);
    let _ = writeln!(o, "ops (time per step, largest change first)");
    let mut t = Table::new(&[
        "op",
        ">base",
        ">candidate",
        ">delta",
        ">change",
        ">calls",
        ">out bytes delta",
    ]);
    for op in c.ops.iter().take(args.limit) {
        let [b, k, d, r] = delta_cells(&op.time_per_step_ns, format_ns);
        t.row(vec![
            op.name.clone(),
            b,
            k,
            d,
            r,
            format!(
                "{} -> {}",
                op.count.base.unwrap_or(0.0),
                op.count.candidate.unwrap_or(0.0)
            ),
            op.output_bytes.delta.map_or("-".into(), format_bytes),
        ]);
    }
    let _ = writeln!(
        o,
        "{}",
        if t.is_empty() {
            "(no ops in both)".into()
        } else {
            t.render()
        }
    );
    if !c.ops_only_in_base.is_empty() {
        let _ = writeln!(o, "ops only in base: {}", c.ops_only_in_base.join(", "));
    }
    if !c.ops_only_in_candidate.is_empty() {
        let _ = writeln!(
            o,
            "ops only in candidate: {}",
            c.ops_only_in_candidate.join(", ")
        );
    }
    let _ = writeln!(o);
    match &c.memory {
        None => {
            let _ = writeln!(o, "memory: absent in both traces");
        }
        Some(m) => {
            let _ = writeln!(o, "memory peak (logical bytes)");
            let mut t = Table::new(&["device", ">base", ">candidate", ">delta", ">change"]);
            for d in m {
                let [b, k, dd, r] = delta_cells(&d.peak_bytes, format_bytes);
                t.row(vec![d.device.clone(), b, k, dd, r]);
            }
            let _ = writeln!(o, "{}", t.render());
        }
    }
    let _ = writeln!(o);
    // Steps present in one trace only are not "different graphs": say how many there are.
    let paired = c
        .graphs
        .iter()
        .filter(|g| g.base.is_some() && g.candidate.is_some())
        .count();
    let only_base = c.graphs.iter().filter(|g| g.candidate.is_none()).count();
    let only_cand = c.graphs.iter().filter(|g| g.base.is_none()).count();
    let mut unpaired = String::new();
    if only_base > 0 {
        let _ = write!(unpaired, "; {only_base} step(s) only in base");
    }
    if only_cand > 0 {
        let _ = write!(unpaired, "; {only_cand} step(s) only in candidate");
    }
    let _ = writeln!(
        o,
        "step graphs: {} of {} paired step(s) have equal fingerprints{}",
        c.graphs_equal, paired, unpaired
    );
    for g in c
        .graphs
        .iter()
        .filter(|g| !g.equal && g.base.is_some() && g.candidate.is_some())
        .take(args.limit)
    {
        let _ = writeln!(
            o,
            "  position {}: base {} vs candidate {}",
            g.position,
            g.base
                .as_ref()
                .map_or("(none)".into(), |(s, f)| format!("step {s} {f}")),
            g.candidate
                .as_ref()
                .map_or("(none)".into(), |(s, f)| format!("step {s} {f}")),
        );
    }
    write_stdout(o.trim_end())?;
    Ok(Status::Ok)
}
