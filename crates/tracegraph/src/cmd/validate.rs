//! `tracegraph validate`: schema, structure and completeness of a trace.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;
use trace_analyze::{AnalyzeError, ReadCounts};
use trace_record::{Issue, IssueKind, ReadError};

use super::{Status, load_stored, print_json, write_stdout};

/// Arguments of `tracegraph validate`.
#[derive(clap::Args, Debug)]
pub(crate) struct ValidateArgs {
    /// The trace file (JSON Lines, or zstd-compressed JSON Lines).
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
    /// How the file is stored, for a compressed trace (absent for plain JSONL).
    #[serde(skip_serializing_if = "Option::is_none")]
    compression: Option<Stored>,
    problems: Vec<String>,
    issues: Vec<Issue>,
}

/// What a compressed trace's file holds.
#[derive(Serialize)]
struct Stored {
    /// `zstd`.
    format: &'static str,
    /// Frames decoded to their end.
    frames: u64,
    /// Bytes of the file read.
    compressed_bytes: u64,
    /// Bytes of JSONL they decompressed to.
    bytes: u64,
    /// The file ends inside a frame (a recording killed while writing it).
    truncated_last_frame: bool,
}

/// The JSON verdict on a trace that could not be read at all.
#[derive(Serialize)]
struct Rejected {
    trace: String,
    strict: bool,
    valid: bool,
    /// `invalid_trace` (exit 3) or `unreadable` (exit 1).
    rejected: &'static str,
    error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    column: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
}

impl Rejected {
    fn of(args: &ValidateArgs, e: &anyhow::Error) -> Rejected {
        let read = e
            .chain()
            .find_map(|c| match c.downcast_ref::<AnalyzeError>() {
                Some(AnalyzeError::Read { error, .. }) => Some(error),
                _ => None,
            });
        let (line, column, field) = match read {
            Some(ReadError::Syntax { line, column, .. }) => (Some(*line), Some(*column), None),
            Some(ReadError::Schema { line, field, .. }) => (Some(*line), None, Some(field.clone())),
            Some(ReadError::UnsupportedVersion { .. }) => (Some(1), None, Some("version".into())),
            _ => (None, None, None),
        };
        Rejected {
            trace: args.trace.display().to_string(),
            strict: args.strict,
            valid: false,
            rejected: if super::exit_code(e) == 3 {
                "invalid_trace"
            } else {
                "unreadable"
            },
            error: crate::error_text(e),
            line,
            column,
            field,
        }
    }
}

/// Runs `tracegraph validate`.
pub(crate) fn run(args: &ValidateArgs) -> anyhow::Result<Status> {
    let (trace, stored) = match load_stored(&args.trace, args.strict) {
        Ok(t) => t,
        Err(e) => {
            if args.json {
                // A rejected trace still gets its JSON verdict; the error goes to stderr and
                // sets the exit code as usual.
                print_json("validate", &Rejected::of(args, &e))?;
            }
            return Err(e);
        }
    };
    let cache = trace_analyze::new_step_cache();
    // The summary computes the trailer check the same way for every command.
    let s = trace_analyze::summarize(&trace, &cache)?;
    let mut problems = Vec::new();
    // Spans open at the cut of a truncated trace are what truncation means, not structural
    // problems: only --strict fails an incomplete trace.
    let counted = trace
        .issues
        .iter()
        .filter(|i| {
            args.strict
                || !trace.is_incomplete()
                || !matches!(i.kind, IssueKind::SpanLeftOpen { .. })
        })
        .count();
    if counted > 0 {
        problems.push(format!("{counted} structural issue(s)"));
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
        compression: stored.map(|z| Stored {
            format: trace_record::Compression::zstd().name(),
            frames: z.frames,
            compressed_bytes: z.compressed_bytes,
            bytes: z.bytes,
            truncated_last_frame: z.truncated,
        }),
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
        if let Some(z) = &report.compression {
            let ratio = z.bytes as f64 / z.compressed_bytes.max(1) as f64;
            let _ = writeln!(
                o,
                "  compression: {}, {} frame(s), {} compressed bytes for {} bytes of JSONL \
                 ({ratio:.1}x)",
                z.format, z.frames, z.compressed_bytes, z.bytes
            );
            if z.truncated_last_frame {
                let _ = writeln!(
                    o,
                    "  the last zstd frame is cut short (read up to where it ends)"
                );
            }
        }
        // Not a problem of the file (it is valid), but the spans a user expects are missing.
        if trace_analyze::tracing_layer_saw_no_spans(&trace) {
            let _ = writeln!(o, "  note: {}", trace_analyze::TRACING_LAYER_SAW_NO_SPANS);
        }
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
