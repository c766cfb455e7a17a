//! `tracegraph validate`: schema, structure and completeness of a trace.
//!
//! It streams: trace-record's reader and [`Validator`] see each event once and keep only what
//! the structural checks need (span, allocation and interned ids), never the analysis model,
//! so memory grows with the trace's ids, not its size, compressed or not.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufReader, IsTerminal};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use trace_analyze::{AnalyzeError, ReadCounts, TraceEnd};
use trace_record::schema::{Event, Outcome};
use trace_record::{Issue, IssueKind, ReadError, ReadMode, ReadOptions, TraceInput, TraceReader};
use trace_record::{Validator, ZstdStats};

use super::{Status, print_json, progress, write_stdout};

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
    /// Bytes after the last complete frame that are not zstd data (ignored).
    trailing_bytes: u64,
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

/// What one streaming pass over a trace found.
struct Streamed {
    outcome: TraceEnd,
    partial_last_line: bool,
    lines: u64,
    counts: ReadCounts,
    dropped: u64,
    counts_match_trailer: Option<bool>,
    issues: Vec<Issue>,
    /// The last `tracing_spans` counter is 0: trace-candle's layer saw no span.
    layer_saw_no_spans: bool,
    zstd: Option<ZstdStats>,
}

impl Streamed {
    fn is_incomplete(&self) -> bool {
        !matches!(self.outcome, TraceEnd::Trailer(Outcome::Complete))
    }
}

/// Reads and validates the trace at `path` in one streaming pass (parsing on a second thread,
/// events reused in place), with the notes every loading command prints.
fn stream(path: &Path, strict: bool) -> anyhow::Result<Streamed> {
    let name = path.display().to_string();
    let file = File::open(path).with_context(|| format!("cannot open trace {name}"))?;
    // Asked before reading: a writer that finishes meanwhile leaves a whole trace.
    let writer = trace_record::writer_of(path);
    let len = file.metadata().map_or(0, |m| m.len());
    let show = std::io::stderr().is_terminal() && len >= progress::MIN_BYTES;
    let src = progress::ProgressReader::new(file, len, show, &name);
    let streamed = stream_input(src, &name, strict);
    // Erase the bar before anything else is printed, error or not.
    progress::clear(show);
    let streamed = streamed?;
    if let trace_record::Writer::Live { pid } = writer {
        let who = pid.map_or_else(|| "another session".to_string(), |p| format!("pid {p}"));
        eprintln!(
            "tracegraph: note: {name} is being written by {who}; validated up to its last \
             complete line"
        );
    } else if streamed.is_incomplete() {
        eprintln!(
            "tracegraph: warning: {name} is incomplete ({}); validated up to its last complete \
             line",
            streamed.outcome.describe()
        );
    }
    Ok(streamed)
}

fn stream_input<R: std::io::Read + Send>(
    src: R,
    name: &str,
    strict: bool,
) -> anyhow::Result<Streamed> {
    let err = |error| AnalyzeError::Read {
        file: name.to_string(),
        error,
    };
    // Plain or zstd-compressed, decided by the first bytes.
    let mut input = TraceInput::new(BufReader::with_capacity(256 * 1024, src))
        .with_context(|| format!("cannot read trace {name}"))?;
    let options = ReadOptions {
        mode: if strict {
            ReadMode::Strict
        } else {
            ReadMode::Lenient
        },
    };
    let mut reader = TraceReader::new(&mut input, options).map_err(err)?;
    let mut validator = Validator::new();
    let mut by_type = trace_record::schema::EventCounts::default();
    let mut layer_spans = None;
    reader
        .for_each_batched_ref(|e| {
            by_type.add(e.event.event_type(), 1);
            validator.check(e.line, &e.event);
            if let Event::Counter(c) = &e.event
                && c.name == trace_record::schema::TRACING_SPANS_COUNTER
            {
                layer_spans = Some(c.value);
            }
            Ok::<(), ReadError>(())
        })
        .map_err(err)?;
    let counts = ReadCounts {
        by_type,
        unknown: reader.skipped_unknown(),
    };
    let (outcome, dropped, counts_match_trailer) = match reader.trailer() {
        Some(t) => (
            TraceEnd::Trailer(t.outcome.clone()),
            t.dropped,
            Some(t.counts == counts.by_type),
        ),
        None => (TraceEnd::Truncated, 0, None),
    };
    let lines = reader.lines_read();
    let partial_last_line = reader.partial_line().is_some();
    drop(reader);
    Ok(Streamed {
        outcome,
        partial_last_line,
        lines,
        counts,
        dropped,
        counts_match_trailer,
        issues: validator.finish(),
        layer_saw_no_spans: layer_spans == Some(0.0),
        zstd: input.zstd(),
    })
}

/// Runs `tracegraph validate`.
pub(crate) fn run(args: &ValidateArgs) -> anyhow::Result<Status> {
    let trace = match stream(&args.trace, args.strict) {
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
        if let TraceEnd::Trailer(Outcome::Failed { reason }) = &trace.outcome {
            problems.push(format!("the run failed: {reason}"));
        }
        if trace.partial_last_line {
            problems.push("a partial last line".into());
        }
        if let Some(z) = trace.zstd.filter(|z| z.trailing_bytes > 0) {
            problems.push(format!(
                "{} byte(s) after the last zstd frame",
                z.trailing_bytes
            ));
        }
        if trace.dropped > 0 {
            problems.push(format!(
                "{} event(s) dropped by the recorder",
                trace.dropped
            ));
        }
        if trace.counts_match_trailer == Some(false) {
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
        counts_match_trailer: trace.counts_match_trailer,
        compression: trace.zstd.map(|z| Stored {
            format: trace_record::Compression::zstd().name(),
            frames: z.frames,
            compressed_bytes: z.compressed_bytes,
            bytes: z.bytes,
            truncated_last_frame: z.truncated,
            trailing_bytes: z.trailing_bytes,
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
            if let Some(note) = trace.zstd.and_then(|z| z.note()) {
                let _ = writeln!(o, "  {note}");
            }
        }
        // Not a problem of the file (it is valid), but the spans a user expects are missing.
        if trace.layer_saw_no_spans {
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
