//! `tracegraph compare`: two traces side by side.
//!
//! Median time per step per span path and op with a bootstrap interval (within noise or not),
//! per step graph when the steps ran several; a minimum effect below which nothing is a
//! regression; runs compared pair by pair (`--paired`); memory, graph equality,
//! `--fail-on-regression`.

use std::fmt::Write as _;
use std::path::PathBuf;

use trace_analyze::new_step_cache;
use trace_analyze::{
    CONFIDENCE, Change, Comparison, Delta, Verdict, compare_runs, significance_order,
};

use trace_analyze::{format_bytes, format_ns, format_pct};

use super::{Status, Table, load, print_json, timing_text, write_stdout};

/// Arguments of `tracegraph compare`.
#[derive(clap::Args, Debug)]
pub(crate) struct CompareArgs {
    /// The base trace and the candidate trace (`compare BASE CANDIDATE`); with `--against`,
    /// every trace given here is a base run (`compare A1 A2 A3 --against B1 B2 B3`). A
    /// directory stands for its `*.jsonl` and `*.jsonl.zst` files.
    #[arg(required = true, num_args = 1..)]
    pub(crate) traces: Vec<PathBuf>,
    /// The candidate runs (traces or directories), compared with the runs given first. With
    /// two or more runs a side the intervals resample runs, then steps within them, so that
    /// run-to-run variation counts as noise; with one run a side they cover the steps'
    /// spread only.
    #[arg(long, num_args = 1.., value_name = "TRACE", conflicts_with = "against_torch")]
    pub(crate) against: Vec<PathBuf>,
    /// The runs were recorded in pairs, alternating: base run 1 and candidate run 1 one right
    /// after the other, then candidate 2 and base 2, then base 3 and candidate 3, ... (A B,
    /// B A, A B, ...; give the traces of each side in that pair order, as many a side). The
    /// intervals then resample pairs, so that a machine that gets busier or cooler while the
    /// runs are recorded slows both runs of a pair alike and the drift cancels. Runs recorded
    /// side by side (all A, then all B) on a busy machine can differ by more than a
    /// regression gate although the program is the same.
    #[arg(long, requires = "against")]
    pub(crate) paired: bool,
    /// A comparison of one Candle trace with a torch.profiler run instead.
    #[command(flatten)]
    pub(crate) torch: super::compare_torch::TorchFlags,
    /// Show at most N rows per table.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub(crate) limit: usize,
    /// Print JSON (schema `tracegraph.compare/1`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Exit with code 5 when the step time (per step graph when the steps ran several), an
    /// op or a span is slower by more than PCT percent (median per step) *and* the whole 95%
    /// bootstrap interval of the change lies above 0 (outside the noise: the steps' spread
    /// with one run a side, the runs' and the steps' with several; the output says which).
    /// Changes within noise never fail, and neither does a change of a median below the
    /// minimum effect: 1 µs per step, or 1% of the base's median, whichever is larger (such a
    /// change reads "below min effect" in the tables).
    /// PCT is a finite number from 0 to 10000; anything else (NaN, inf, negative, 1e400) is a
    /// usage error, so no value can switch the gate off.
    #[arg(long, value_name = "PCT", value_parser = parse_threshold_pct, conflicts_with = "against_torch")]
    pub(crate) fail_on_regression: Option<f64>,
}

/// The largest `--fail-on-regression` threshold: 100× slower. A larger one would be a gate
/// that no real regression can trip.
const MAX_THRESHOLD_PCT: f64 = 10_000.0;

/// Parses `--fail-on-regression PCT`: finite and in `0..=MAX_THRESHOLD_PCT`.
fn parse_threshold_pct(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number (a percentage such as 10 or 2.5)"))?;
    if !v.is_finite() {
        return Err(format!(
            "`{s}` is not a finite percentage; a NaN or infinite threshold would disable the gate"
        ));
    }
    if !(0.0..=MAX_THRESHOLD_PCT).contains(&v) {
        return Err(format!(
            "{s}% is outside 0..={MAX_THRESHOLD_PCT}: a negative or larger threshold is no gate"
        ));
    }
    Ok(v)
}

/// `+12.3% [+8.1%, +16.0%]`: the relative change of the medians and its interval.
fn change_cells(c: Option<&Change>) -> [String; 3] {
    // format_pct signs its value already (`+26.8%`, `-3.0%`): no second `+`.
    let pct = format_pct;
    match c {
        Some(c) if c.negligible => [
            c.ratio.map_or("-".into(), pct),
            match (c.ci_low, c.ci_high) {
                (Some(l), Some(h)) => format!("[{}, {}]", pct(l), pct(h)),
                _ => "-".into(),
            },
            "below min effect".into(),
        ],
        None => ["-".into(), "-".into(), "-".into()],
        Some(c) => [
            c.ratio.map_or("-".into(), pct),
            match (c.ci_low, c.ci_high) {
                (Some(l), Some(h)) => format!("[{}, {}]", pct(l), pct(h)),
                _ => "-".into(),
            },
            match c.verdict {
                Verdict::Regression => "REGRESSION".into(),
                Verdict::Improvement => "improvement".into(),
                v => v.label().into(),
            },
        ],
    }
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
    if args.torch.against_torch.is_some() {
        let [candle] = args.traces.as_slice() else {
            return Err(super::output::UsageError(
                "compare --against-torch takes one Candle trace".to_string(),
            )
            .into());
        };
        if let Some(torch) = args.torch.load()? {
            return super::compare_torch::run(candle, torch, args.limit, args.json);
        }
    }
    if args.paired && args.against.is_empty() {
        return Err(super::output::UsageError(
            "--paired compares base runs with `--against` candidate runs".to_string(),
        )
        .into());
    }
    let (base_paths, cand_paths) = if args.against.is_empty() {
        match args.traces.as_slice() {
            [b, c] if !b.is_dir() && !c.is_dir() => (vec![b.clone()], vec![c.clone()]),
            _ => {
                return Err(super::output::UsageError(
                    "compare takes a base and a candidate trace, or base runs and `--against` candidate runs"
                        .to_string(),
                )
                .into());
            }
        }
    } else {
        (
            super::trace_paths(&args.traces)?,
            super::trace_paths(&args.against)?,
        )
    };
    let load_all = |paths: &[PathBuf]| {
        paths
            .iter()
            .map(|p| load(p, false))
            .collect::<anyhow::Result<Vec<_>>>()
    };
    if args.paired && base_paths.len() != cand_paths.len() {
        return Err(super::output::UsageError(format!(
            "--paired needs as many base as candidate runs (pairs recorded one right after the other); got {} and {}",
            base_paths.len(),
            cand_paths.len()
        ))
        .into());
    }
    let (base, cand) = (load_all(&base_paths)?, load_all(&cand_paths)?);
    let cache = new_step_cache();
    let (base, cand) = (
        base.iter().collect::<Vec<_>>(),
        cand.iter().collect::<Vec<_>>(),
    );
    let c = if args.paired {
        Comparison::of_paired_runs(&base, &cand, &cache)?
    } else {
        compare_runs(&base, &cand, &cache)?
    };
    let status = match args.fail_on_regression {
        Some(pct) => {
            let regressions = c.regressions(pct);
            for r in &regressions {
                eprintln!(
                    "tracegraph: regression beyond {pct}%: {} {} (95% interval {} to {})",
                    r.what,
                    // format_pct signs its value: no second `+`.
                    r.change.ratio.map_or("-".into(), format_pct),
                    r.change.ci_low.map_or("-".into(), format_pct),
                    r.change.ci_high.map_or("-".into(), format_pct),
                );
            }
            if regressions.is_empty() {
                Status::Ok
            } else {
                Status::Regressed
            }
        }
        None => Status::Ok,
    };
    if args.json {
        print_json("compare", &c)?;
        return Ok(status);
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
    if c.runs != (1, 1) {
        let _ = writeln!(
            o,
            "runs       {} base, {} candidate: {}",
            c.runs.0,
            c.runs.1,
            c.base_runs
                .iter()
                .chain(&c.candidate_runs)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = writeln!(o, "intervals  {}", c.interval.describe());
    for w in &c.warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    let median = |c: Option<&Change>, base: bool| {
        c.map_or("-".into(), |c| {
            format_ns(if base {
                c.base_median
            } else {
                c.candidate_median
            })
        })
    };
    let sc = c.step_time_change.as_ref();
    let [chg, ci, verdict] = change_cells(sc);
    let medians = if sc.is_none() && c.graph_groups.len() > 1 {
        "compared per step graph below".to_string()
    } else {
        format!(
            "median {} -> {} ({chg}, {}% interval {ci}: {verdict})",
            median(sc, true),
            median(sc, false),
            (CONFIDENCE * 100.0).round(),
        )
    };
    let _ = writeln!(
        o,
        "step time  {medians}; mean ± sd {} ± {} -> {} ± {}",
        cell(c.step_time_ns.base, format_ns),
        c.base_step_spread
            .map_or("-".into(), |s| format_ns(s.stddev)),
        cell(c.step_time_ns.candidate, format_ns),
        c.candidate_step_spread
            .map_or("-".into(), |s| format_ns(s.stddev))
    );
    if c.graph_groups.len() > 1 {
        let _ = writeln!(o, "step time per step graph (like with like):");
        let mut t = Table::new(&[
            "graph",
            ">steps",
            ">base",
            ">candidate",
            ">change",
            ">95% interval",
            "verdict",
        ]);
        for g in &c.graph_groups {
            let ch = g.change.as_ref();
            let [r, ci, v] = change_cells(ch);
            t.row(vec![
                format!("{} {}", g.label, g.signature),
                format!("{} / {}", g.steps.0, g.steps.1),
                cell(g.step_time_ns.base, format_ns),
                cell(g.step_time_ns.candidate, format_ns),
                r,
                ci,
                g.only_in
                    .map_or(v, |side| format!("{side} only: not compared")),
            ]);
        }
        let _ = writeln!(o, "{}", t.render());
    }
    let _ = writeln!(o);
    // With several step graphs every span and op row is one graph's (the `graph` column).
    let grouped = c.graph_groups.len() > 1;
    let with_graph = |cols: &[&'static str]| -> Vec<&'static str> {
        if grouped {
            std::iter::once("graph")
                .chain(cols.iter().copied())
                .collect()
        } else {
            cols.to_vec()
        }
    };
    let graph_cell = |row: &mut Vec<String>, g: Option<&String>| {
        if grouped {
            row.insert(0, g.map_or_else(|| "-".to_string(), Clone::clone));
        }
    };
    let _ = writeln!(
        o,
        "span paths (median time per step over the steps where the path occurs{}; significant changes first)",
        if grouped { ", per step graph" } else { "" }
    );
    let mut t = Table::new(&with_graph(&[
        "span",
        ">base",
        ">candidate",
        ">change",
        ">95% interval",
        "verdict",
        ">alloc delta",
    ]));
    for s in c
        .spans
        .significance_order()
        .into_iter()
        .take(args.limit)
        .filter_map(|i| c.spans.get(i))
    {
        let ch = s.change.as_ref();
        let [r, ci, v] = change_cells(ch);
        let mut row = vec![
            s.path.clone(),
            ch.map_or_else(
                || cell(s.time_per_step_ns.base, format_ns),
                |_| median(ch, true),
            ),
            ch.map_or_else(
                || cell(s.time_per_step_ns.candidate, format_ns),
                |_| median(ch, false),
            ),
            r,
            ci,
            v,
            s.alloc_bytes.delta.map_or("-".into(), format_bytes),
        ];
        graph_cell(&mut row, s.graph.as_ref());
        t.row(row);
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
    let _ = writeln!(
        o,
        "ops (median time per step over the steps where the op runs{}; significant changes first)",
        if grouped { ", per step graph" } else { "" }
    );
    let mut t = Table::new(&with_graph(&[
        "op",
        ">base",
        ">candidate",
        ">change",
        ">95% interval",
        "verdict",
        ">calls",
        ">out bytes delta",
    ]));
    for op in significance_order(&c.ops, |o| o.change.as_ref())
        .into_iter()
        .take(args.limit)
    {
        let ch = op.change.as_ref();
        let [r, ci, v] = change_cells(ch);
        let mut row = vec![
            op.name.clone(),
            ch.map_or_else(
                || cell(op.time_per_step_ns.base, format_ns),
                |_| median(ch, true),
            ),
            ch.map_or_else(
                || cell(op.time_per_step_ns.candidate, format_ns),
                |_| median(ch, false),
            ),
            r,
            ci,
            v,
            format!(
                "{} -> {}",
                op.count.base.unwrap_or(0.0),
                op.count.candidate.unwrap_or(0.0)
            ),
            op.output_bytes.delta.map_or("-".into(), format_bytes),
        ];
        graph_cell(&mut row, op.graph.as_ref());
        t.row(row);
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
    let _ = writeln!(o, "\n{}", c.legend());
    write_stdout(o.trim_end())?;
    Ok(status)
}
