//! `tracegraph hot`: where the sampled CPU time went, by function, crate group, phase, span or
//! Candle op.
//!
//! Every CPU time shown is an estimate, printed with the sample count it comes from. Samples
//! of a thread pool spinning or parked are *waiting* (trace-analyze's `WAITING_FRAMES`): each
//! span and phase shows its waiting on a line of its own, and the function rankings leave them
//! out unless `--include-waiting`.

use std::fmt::Write as _;
use std::path::PathBuf;

use trace_analyze::{HotBy, HotHint, HotOptions, HotReport, HotRow, Trace, hot_report, short_func};
use trace_record::schema::ExecStep;

use super::output::UsageError;
use super::{Status, Table, load, nsu, print_json, write_stdout};

/// Arguments of `tracegraph hot`.
#[derive(clap::Args, Debug)]
pub(crate) struct HotArgs {
    /// The trace file (JSON Lines), recorded with the CPU sampler on
    /// (`tracegraph demo --sample`, or `Capture::sample_stacks`).
    pub(crate) trace: PathBuf,
    /// What rows are: `function`, `crate` (candle_core, gemm, candle_nn, model, allocator,
    /// other), `phase` (forward, backward, optimizer), `span` or `op` (the Candle op each
    /// sample ran inside, as `ops --sampled` attributes them).
    #[arg(long, value_name = "BY", default_value = "function")]
    pub(crate) by: HotBy,
    /// Only samples of recorded steps A to B (inclusive), e.g. `3..8`, `5`, `3..` or `..8`.
    #[arg(long, value_name = "A..B")]
    pub(crate) steps: Option<String>,
    /// Only samples of one phase: `forward`, `backward` or `optimizer`.
    #[arg(long, value_name = "PHASE")]
    pub(crate) phase: Option<ExecStep>,
    /// Rows shown (and functions per phase).
    #[arg(long, value_name = "N", default_value_t = 15)]
    pub(crate) top: usize,
    /// The model's crates for the `model` group (repeatable); default: the program's own
    /// crate, found from the stacks, and `candle_transformers`.
    #[arg(long = "model-crate", value_name = "CRATE")]
    pub(crate) model_crates: Vec<String>,
    /// Keep waiting samples (thread pools spinning or parked) in the function rankings; by
    /// default they are left out and counted on their own lines.
    #[arg(long)]
    pub(crate) include_waiting: bool,
    /// Print JSON (schema `tracegraph.hot/1`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

fn parse_steps(s: &str) -> anyhow::Result<(u64, u64)> {
    super::parse_step_range(s).map_err(|e| UsageError(format!("--steps {e}")).into())
}

/// Runs `tracegraph hot`.
pub(crate) fn run(args: &HotArgs) -> anyhow::Result<Status> {
    let steps = args.steps.as_deref().map(parse_steps).transpose()?;
    let trace = load(&args.trace, false)?;
    let report = hot_report(
        &trace,
        &HotOptions {
            by: args.by,
            steps,
            phase: args.phase,
            limit: Some(args.top),
            model_crates: args.model_crates.clone(),
            exclude_waiting: !args.include_waiting,
        },
    );
    if args.json {
        print_json("hot", &report)?;
        return Ok(Status::Ok);
    }
    let version = trace.run.version;
    write_stdout(&render(&report, version))?;
    Ok(Status::Ok)
}

/// The hints lines (`hints     …`, one per recognised cost, with its evidence); empty when
/// there is none.
fn hints_lines(hints: &[HotHint]) -> String {
    let mut o = String::new();
    for (i, h) in hints.iter().enumerate() {
        let _ = writeln!(
            o,
            "{}{} [{}; {} samples]",
            if i == 0 { "hints     " } else { "          " },
            h.hint,
            h.rule,
            h.samples
        );
    }
    o
}

/// The hints of a trace's sampled stacks for `tracegraph summary` (waiting left out of the
/// rankings, as `hot` does by default): a blank line and the hints lines, or nothing.
pub(crate) fn summary_hints(trace: &Trace) -> String {
    if trace.sampled.steps.is_empty() {
        return String::new();
    }
    let report = hot_report(
        trace,
        &HotOptions {
            exclude_waiting: true,
            ..HotOptions::default()
        },
    );
    let lines = hints_lines(&report.hints);
    if lines.is_empty() {
        lines
    } else {
        format!("\n\nsampled CPU (`tracegraph hot`)\n{}", lines.trim_end())
    }
}

/// A share as `12.3%`.
fn pct(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// `≈ 12.3 ms` (an estimate from samples), or `-` without a rate.
fn est(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |n| format!("≈{}", nsu(n)))
}

/// A table of rows; with `waiting_lines`, each row with waiting samples is followed by a
/// `waiting` line of its own (its self samples that were waiting).
fn rows_table(first: &str, rows: &[HotRow], with_group: bool, waiting_lines: bool) -> Table {
    let mut cols = vec![first];
    if with_group {
        cols.push("group");
    }
    cols.extend([">self", ">self %", ">total", ">total %", ">est. CPU (self)"]);
    let mut t = Table::new(&cols);
    for r in rows {
        let mut row = vec![short_func(&r.name, 90)];
        if with_group {
            row.push(r.group.map_or("-".into(), |g| g.as_str().to_string()));
        }
        row.extend([
            r.self_samples.to_string(),
            pct(r.self_share),
            r.total_samples.to_string(),
            pct(r.total_share),
            est(r.self_est_ns),
        ]);
        t.row(row);
        if waiting_lines && r.waiting_samples > 0 {
            let share = if r.self_samples > 0 {
                r.self_share * r.waiting_samples as f64 / r.self_samples as f64
            } else {
                0.0
            };
            let est_ns = r.self_est_ns.map(|ns| {
                (ns as f64 * r.waiting_samples as f64 / r.self_samples.max(1) as f64).round() as u64
            });
            let mut line = vec!["  └ waiting".to_string()];
            if with_group {
                line.push("-".into());
            }
            line.extend([
                r.waiting_samples.to_string(),
                pct(share),
                "-".into(),
                "-".into(),
                est(est_ns),
            ]);
            t.row(line);
        }
    }
    t
}

/// The report as text.
pub(crate) fn render(r: &HotReport, version: u32) -> String {
    let mut o = String::new();
    let a = &r.sampler;
    if r.samples == 0 {
        let why = if a.steps > 0 {
            "the sampler took no sample in the selected steps and phase"
        } else if version < 2 {
            "the trace is schema version 1, which has no sampled stacks; record it with the \
             sampler on (`tracegraph demo --sample`, `Capture::sample_stacks`)"
        } else {
            "the trace has no sampled stacks in the selection; record it with the sampler on \
             (`tracegraph demo --sample`, `Capture::sample_stacks`)"
        };
        let _ = writeln!(o, "no samples: {why}");
        o.push_str(&hints_lines(&r.hints));
        return o.trim_end().to_string();
    }
    let range = a.step_range.map_or("-".into(), |(x, y)| {
        if x == y {
            format!("step {x}")
        } else {
            format!("steps {x}..{y}")
        }
    });
    let _ = writeln!(
        o,
        "sampled   {} samples in {} recorded step(s) ({range}); requested {} Hz of CPU time, achieved {}; {} lost",
        r.samples,
        a.steps,
        a.requested_hz,
        a.effective_hz
            .map_or("unknown (no CPU time)".into(), |h| format!(
                "{h:.0} Hz of the sampled threads' CPU time"
            )),
        a.lost,
    );
    if let Some((own, share)) = a.sampler_share() {
        let _ = writeln!(
            o,
            "          the sampler's own threads used {} of CPU time in these steps ({:.1}% of the process's; never sampled, and not in the rate)",
            nsu(own),
            100.0 * share
        );
    }
    let _ = writeln!(
        o,
        "          sample counts are estimates of where CPU time went (all sampled threads), not measured durations; est. CPU = samples x {}",
        match (a.effective_hz, a.ns_per_sample()) {
            (Some(hz), Some(ns)) if hz > 0.0 => format!(
                "{} (the sampled threads' CPU time / samples taken)",
                nsu(ns.round() as u64)
            ),
            _ => "the requested period".into(),
        }
    );
    if r.outside_steps > 0 {
        let _ = writeln!(
            o,
            "note      {} samples of the boundary after the last step (no step: nothing was captured in it) are left out, as every command leaves that boundary out",
            r.outside_steps
        );
    }
    if r.saturated {
        let _ = writeln!(
            o,
            "warning   sample counts passed 2^64 - 1 and stopped there: the trace's counts are hostile or corrupt (`tracegraph validate` names the lines); shares are unreliable"
        );
    }
    let _ = writeln!(o, "model     crate(s) {}", r.model_crates.join(", "));
    let _ = writeln!(
        o,
        "waiting   {} samples ({}) in thread pools spinning or parked (Candle's barrier, rayon's idle loop, futex waits); {}",
        r.waiting,
        pct(if r.samples > 0 {
            r.waiting as f64 / r.samples as f64
        } else {
            0.0
        }),
        if r.waiting_excluded {
            "left out of the function and crate rankings (--include-waiting keeps them)"
        } else {
            "kept in the rankings"
        }
    );
    o.push_str(&hints_lines(&r.hints));
    let _ = writeln!(o);
    let title = match r.by {
        HotBy::Function => "hottest functions (self: the sample landed in it; total: on the stack)",
        HotBy::Crate => {
            "by crate group (self: innermost frame outside core/std/alloc; total: on the stack)"
        }
        HotBy::Phase => "by phase",
        HotBy::Span => "by innermost open span (self) and its ancestors (total)",
        HotBy::Op => {
            "by Candle op (the outermost Candle API frame below the innermost span; `ops --sampled` splits it per span)"
        }
    };
    let _ = writeln!(o, "{title}");
    let first = match r.by {
        HotBy::Function => "function",
        HotBy::Crate => "group",
        HotBy::Phase => "phase",
        HotBy::Span => "span",
        HotBy::Op => "op",
    };
    let per_scope = matches!(r.by, HotBy::Span | HotBy::Phase | HotBy::Op);
    let _ = writeln!(
        o,
        "{}",
        rows_table(first, &r.rows, r.by == HotBy::Function, per_scope).render()
    );
    if r.by != HotBy::Crate {
        let _ = writeln!(o);
        let _ = writeln!(o, "by crate group");
        let _ = writeln!(
            o,
            "{}",
            rows_table("group", &r.groups, false, false).render()
        );
    }
    for p in &r.phases {
        let _ = writeln!(o);
        let waiting_share = if p.samples > 0 {
            p.share * p.waiting as f64 / p.samples as f64
        } else {
            0.0
        };
        let _ = writeln!(
            o,
            "{} — {} samples ({}); hottest functions (innermost frame outside core/std/alloc)",
            p.phase,
            p.samples,
            pct(p.share)
        );
        let _ = writeln!(
            o,
            "  waiting {} samples ({}){}",
            p.waiting,
            pct(waiting_share),
            if r.waiting_excluded {
                ", not ranked below"
            } else {
                ""
            }
        );
        let _ = writeln!(
            o,
            "{}",
            rows_table("function", &p.top, true, false).render()
        );
    }
    o.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::parse_steps;

    #[test]
    fn step_ranges() {
        assert_eq!(parse_steps("3..8").unwrap(), (3, 8));
        assert_eq!(parse_steps("5").unwrap(), (5, 5));
        assert_eq!(parse_steps("2..").unwrap(), (2, u64::MAX));
        assert_eq!(parse_steps("..3").unwrap(), (0, 3));
        assert_eq!(parse_steps(" .. 3 ").unwrap(), (0, 3));
        assert_eq!(parse_steps("..").unwrap(), (0, u64::MAX));
        assert!(parse_steps("").is_err());
        assert!(parse_steps("..x").is_err());
        assert!(parse_steps("8..3").is_err());
        assert!(parse_steps("x").is_err());
    }
}
