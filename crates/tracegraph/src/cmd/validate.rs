//! `tracegraph validate`: schema, structure and completeness of a trace.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;
use trace_analyze::ReadCounts;
use trace_record::Issue;

use super::{Status, load, print_json, write_stdout};

/// Arguments of `tracegraph validate`.
#[derive(clap::Args, Debug)]
pub(crate) struct ValidateArgs {
    /// The trace file (JSON Lines).
    pub(crate) trace: PathBuf,
    /// Also reject unknown event types (exit 3), and treat an incomplete trace, a partial last
    /// line, dropped events or trailer counts that differ from the events read as problems
    /// (exit 4).
    #[arg(long)]
    pub(crate) strict: bool,
    /// Print JSON (schema `tracegraph.validate/1`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Serialize)]
struct Report {
    trace: String,
    strict: bool,
    valid: bool,
    outcome: trace_analyze::TraceEnd,
    incomplete: bool,
    partial_last_line: bool,
    lines: u64,
    events: ReadCounts,
    dropped: u64,
    counts_match_trailer: Option<bool>,
    problems: Vec<String>,
    issues: Vec<Issue>,
}

/// Runs `tracegraph validate`.
pub(crate) fn run(args: &ValidateArgs) -> anyhow::Result<Status> {
    let trace = load(&args.trace, args.strict)?;
    let cache = trace_analyze::new_step_cache();
    // The summary computes the trailer check the same way for every command.
    let s = trace_analyze::summarize(&trace, &cache)?;
    let mut problems = Vec::new();
    if !trace.issues.is_empty() {
        problems.push(format!("{} structural issue(s)", trace.issues.len()));
    }
    if args.strict {
        if trace.is_incomplete() {
            problems.push(format!("incomplete: {}", trace.outcome.describe()));
        }
        if let trace_analyze::TraceEnd::Trailer(trace_record::schema::Outcome::Failed { reason }) =
            &trace.outcome
        {
            problems.push(format!("the run failed: {reason}"));
        }
        if trace.partial_last_line {
            problems.push("a partial last line".into());
        }
        if trace.dropped > 0 {
            problems.push(format!(
                "{} event(s) dropped by the recorder",
                trace.dropped
            ));
        }
        if s.health.counts_match_trailer == Some(false) {
            problems.push("the trailer's counts differ from the events read".into());
        }
    }
    let report = Report {
        trace: args.trace.display().to_string(),
        strict: args.strict,
        valid: problems.is_empty(),
        outcome: trace.outcome.clone(),
        incomplete: trace.is_incomplete(),
        partial_last_line: trace.partial_last_line,
        lines: trace.lines,
        events: trace.counts.clone(),
        dropped: trace.dropped,
        counts_match_trailer: s.health.counts_match_trailer,
        problems: problems.clone(),
        issues: trace.issues.clone(),
    };
    if args.json {
        print_json("validate", &report)?;
    } else {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "{}: {} lines, {} events, {}{}",
            report.trace,
            report.lines,
            report.events.total(),
            report.outcome.describe(),
            if args.strict { " (strict)" } else { "" }
        );
        for i in trace.issues.iter().take(50) {
            let _ = writeln!(o, "  {i}");
        }
        if trace.issues.len() > 50 {
            let _ = writeln!(o, "  ... {} more issue(s)", trace.issues.len() - 50);
        }
        if problems.is_empty() {
            let _ = writeln!(o, "valid");
        } else {
            let _ = writeln!(o, "invalid: {}", problems.join("; "));
        }
        write_stdout(o.trim_end())?;
    }
    Ok(if problems.is_empty() {
        Status::Ok
    } else {
        Status::Problems
    })
}
