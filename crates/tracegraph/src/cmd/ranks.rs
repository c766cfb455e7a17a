//! The ranks of one distributed run side by side (`tracegraph summary` of several traces), and
//! what the per-rank views of `ops`, `spans` and `memory` share: loading, rank labels, notes.

use std::fmt::Write as _;
use std::path::PathBuf;

use trace_analyze::{RankColumn, Slowest, Trace, format_ns, rank_report};

use super::{Status, Table, bytesu, load, nsu, print_json, write_stdout};

/// At most this many steps of the straggler table are printed (the slowest first).
const STRAGGLER_ROWS: usize = 20;

/// Text tables of the per-rank views show a column per rank up to this many ranks; beyond,
/// the slowest rank and the median only (`--json` has every rank).
pub(crate) const MAX_RANK_COLUMNS: usize = 16;

/// Loads every trace of a run given as several traces.
pub(crate) fn load_all(paths: &[PathBuf]) -> anyhow::Result<Vec<Trace>> {
    paths.iter().map(|p| load(p, false)).collect()
}

/// A rank's column label: `r3`, or `r3?` when the rank is the trace's position (its header
/// names none).
pub(crate) fn label(c: &RankColumn) -> String {
    format!("r{}{}", c.rank, if c.rank_from_header { "" } else { "?" })
}

/// Whether the text tables get a column per rank.
pub(crate) fn per_rank_columns(ranks: &[RankColumn]) -> bool {
    ranks.len() <= MAX_RANK_COLUMNS
}

/// The lines every per-rank view starts with after its own first line: the notes on the
/// set, what a `?` rank is, and why the per-rank columns are left out when they are.
pub(crate) fn preamble(o: &mut String, ranks: &[RankColumn], notes: &[String]) {
    for n in notes {
        let _ = writeln!(o, "note: {n}");
    }
    if ranks.iter().any(|k| !k.rank_from_header) {
        let _ = writeln!(
            o,
            "(a `?` rank is the trace's position: its header names none; record it with Run::rank)"
        );
    }
    if !per_rank_columns(ranks) {
        let _ = writeln!(
            o,
            "({} ranks: per-rank columns are shown up to {MAX_RANK_COLUMNS}; --json has every rank)",
            ranks.len()
        );
    }
}

/// The cells of a row's slowest rank: the rank, its total, the median rank's total, the
/// excess.
pub(crate) fn slowest_cells(s: &Slowest, ranks: &[RankColumn]) -> [String; 4] {
    [
        ranks
            .get(s.column)
            .map_or_else(|| s.rank.to_string(), label),
        nsu(s.total_ns),
        format_ns(s.median_ns),
        format!("+{}", format_ns(s.excess_ns)),
    ]
}

/// Loads every trace and prints the rank report (text, or JSON `tracegraph.ranks/1`).
pub(crate) fn run(paths: &[PathBuf], json: bool) -> anyhow::Result<Status> {
    let traces = load_all(paths)?;
    let r = rank_report(&traces);
    if json {
        print_json("ranks", &r)?;
        return Ok(Status::Ok);
    }
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} rank(s), {} step(s) recorded by every rank; clocks aligned on the headers' wall-clock starts",
        r.ranks.len(),
        r.steps.len()
    );
    match (&r.alignment.reason, r.alignment.start_spread_ns) {
        (Some(why), _) => {
            let _ = writeln!(o, "alignment doubtful: {why}");
        }
        (None, Some(spread)) => {
            let _ = writeln!(
                o,
                "alignment: the ranks began step {} within {} of each other",
                r.alignment.first_common_step.unwrap_or(0),
                format_ns(spread as f64)
            );
        }
        (None, None) => {}
    }
    for n in &r.notes {
        let _ = writeln!(o, "note: {n}");
    }
    let _ = writeln!(o);
    let mut t = Table::new(&[
        ">rank",
        ">steps",
        ">median step",
        ">mean ± stddev",
        ">slowest in",
        ">memory peak",
        ">clock offset",
        "trace",
    ]);
    for k in &r.ranks {
        t.row(vec![
            format!("{}{}", k.rank, if k.rank_from_header { "" } else { "?" }),
            k.steps.to_string(),
            k.median_step_ns.map_or("-".into(), format_ns),
            k.step_time.as_ref().map_or("-".into(), |s| {
                format!("{} ± {}", format_ns(s.mean), format_ns(s.stddev))
            }),
            format!("{} step(s)", k.slowest_in),
            k.peak_bytes.map_or("-".into(), bytesu),
            nsu(k.clock_offset_ns),
            k.source.clone(),
        ]);
    }
    let _ = writeln!(o, "{}", t.render());
    if r.ranks.iter().any(|k| !k.rank_from_header) {
        let _ = writeln!(
            o,
            "(a `?` rank is the trace's position: its header names none; record it with Run::rank)"
        );
    }
    if !r.steps.is_empty() {
        let _ = writeln!(o);
        let mut rows: Vec<_> = r.steps.iter().collect();
        // The steps where the slowest rank held the others up most come first.
        rows.sort_by(|a, b| {
            let ka = a.slowest_ns as f64 - a.median_ns;
            let kb = b.slowest_ns as f64 - b.median_ns;
            kb.total_cmp(&ka).then(a.step.cmp(&b.step))
        });
        let _ = writeln!(
            o,
            "stragglers: per step, the slowest rank, its step time against the median rank's, and how much later it finished than the first rank{}",
            if rows.len() > STRAGGLER_ROWS {
                format!(
                    " (the {STRAGGLER_ROWS} steps it lost most in, of {})",
                    rows.len()
                )
            } else {
                String::new()
            }
        );
        let mut t = Table::new(&[
            ">step",
            ">slowest rank",
            ">its step",
            ">median step",
            ">finished later by",
        ]);
        for s in rows.into_iter().take(STRAGGLER_ROWS) {
            t.row(vec![
                s.step.to_string(),
                s.slowest_rank.to_string(),
                nsu(s.slowest_ns),
                format_ns(s.median_ns),
                nsu(s.finished_later_ns),
            ]);
        }
        let _ = writeln!(o, "{}", t.render());
    }
    write_stdout(o.trim_end())?;
    Ok(Status::Ok)
}
