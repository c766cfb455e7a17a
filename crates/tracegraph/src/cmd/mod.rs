//! The subcommands (one file each) and what they share: loading with a progress bar, tables,
//! number formatting and JSON output.

pub(crate) mod compare;
pub(crate) mod compare_torch;
#[cfg(feature = "demo")]
pub(crate) mod demo;
pub(crate) mod export;
pub(crate) mod gradients;
pub(crate) mod graph;
pub(crate) mod hot;
pub(crate) mod memory;
pub(crate) mod ops;
pub(crate) mod output;
pub(crate) mod ranks;
pub(crate) mod report;
pub(crate) mod spans;
pub(crate) mod summary;
pub(crate) mod validate;

mod progress;
mod table;
mod temps;

use std::fs::File;
use std::io::{BufReader, IsTerminal, Write};
use std::path::Path;

use anyhow::Context;
use serde::Serialize;
use trace_analyze::{AnalyzeError, LoadOptions, Trace};

pub(crate) use table::Table;

/// How a command ended when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Exit 0.
    Ok,
    /// Exit 4: `validate` found problems.
    Problems,
    /// Exit 5: `compare --fail-on-regression` found a regression outside the noise.
    Regressed,
}

/// The exit code for an error: 2 for a usage error found after parsing the arguments, 3 for
/// an invalid trace, 1 otherwise.
pub(crate) fn exit_code(e: &anyhow::Error) -> u8 {
    if e.chain()
        .any(<dyn std::error::Error + 'static>::is::<output::UsageError>)
    {
        return 2;
    }
    let bad = e.chain().any(|c| {
        c.downcast_ref::<AnalyzeError>()
            .is_some_and(AnalyzeError::is_bad_trace)
    });
    if bad { 3 } else { 1 }
}

/// The trace files named by `inputs`: a file as given, a directory as its `*.jsonl` and
/// `*.jsonl.zst` files (sorted by name; subdirectories are not entered). A directory without
/// any is an error naming it.
pub(crate) fn trace_paths(
    inputs: &[std::path::PathBuf],
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    for p in inputs {
        if !p.is_dir() {
            out.push(p.clone());
            continue;
        }
        let mut found: Vec<std::path::PathBuf> = std::fs::read_dir(p)
            .with_context(|| format!("cannot list {}", p.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| {
                f.is_file()
                    && f.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.ends_with(".jsonl") || n.ends_with(".jsonl.zst"))
            })
            .collect();
        if found.is_empty() {
            anyhow::bail!("{} holds no trace (*.jsonl or *.jsonl.zst)", p.display());
        }
        found.sort();
        out.extend(found);
    }
    Ok(out)
}

/// Loads a trace, with a progress bar on stderr when it is a terminal and the file is large.
/// Plain and zstd-compressed traces load alike (decided by the file's first bytes).
pub(crate) fn load(path: &Path, strict: bool) -> anyhow::Result<Trace> {
    load_stored(path, strict).map(|(trace, _)| trace)
}

/// Like [`load`], also saying how the file was stored: `Some` with what was decoded for a
/// zstd-compressed trace, `None` for plain JSONL.
pub(crate) fn load_stored(
    path: &Path,
    strict: bool,
) -> anyhow::Result<(Trace, Option<trace_record::ZstdStats>)> {
    let file = File::open(path).with_context(|| format!("cannot open trace {}", path.display()))?;
    // Asked before reading: a writer that finishes meanwhile leaves a whole trace.
    let writer = trace_record::writer_of(path);
    let len = file.metadata().map_or(0, |m| m.len());
    let show = std::io::stderr().is_terminal() && len >= progress::MIN_BYTES;
    let reader = progress::ProgressReader::new(file, len, show, &path.display().to_string());
    // Plain or zstd-compressed, decided by the first bytes; the bar counts bytes of the file.
    let mut stored = None;
    let loaded = trace_record::TraceInput::new(BufReader::with_capacity(256 * 1024, reader))
        .with_context(|| format!("cannot read trace {}", path.display()))
        .and_then(|mut input| {
            let t = trace_analyze::load_reader(
                &mut input,
                &path.display().to_string(),
                LoadOptions { strict },
            );
            stored = input.zstd();
            t.map_err(anyhow::Error::from)
        });
    // Erase the bar before anything else is printed, error or not.
    progress::clear(show);
    let trace = loaded?;
    if let trace_record::Writer::Live { pid } = writer {
        let who = pid.map_or_else(|| "another session".to_string(), |p| format!("pid {p}"));
        eprintln!(
            "tracegraph: note: {} is being written by {who}; analysed up to its last complete \
             line",
            path.display()
        );
    } else if trace.is_incomplete() {
        eprintln!(
            "tracegraph: warning: {} is incomplete ({}); analysed up to its last complete line",
            path.display(),
            trace.outcome.describe()
        );
    }
    Ok((trace, stored))
}

/// Parses a range of step indices as every command takes it: `A..B` (inclusive), `N`, `A..`
/// (to the last step), `..B` (from step 0). The error says what was expected.
pub(crate) fn parse_step_range(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("{s}: expected A..B or N (step indices)");
    let (a, b) = match s.split_once("..") {
        Some((a, b)) => (a.trim(), b.trim()),
        None => (s.trim(), s.trim()),
    };
    // `..B` starts at step 0, `A..` runs to the last step.
    let a: u64 = if a.is_empty() && s.contains("..") {
        0
    } else {
        a.parse().map_err(|_| bad())?
    };
    let b: u64 = if b.is_empty() {
        u64::MAX
    } else {
        b.parse().map_err(|_| bad())?
    };
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

/// Prints `value` (a struct or map) as pretty JSON with a `schema` field first
/// (`tracegraph.<what>/1`), then `value`'s own fields in their declared order, streamed
/// straight to stdout: a large result (200,000 span rows) is never held as a JSON tree, which
/// took about 13 times the size of the text.
pub(crate) fn print_json<T: Serialize>(what: &str, value: &T) -> anyhow::Result<()> {
    #[derive(Serialize)]
    struct Tagged<'a, T> {
        schema: String,
        #[serde(flatten)]
        value: &'a T,
    }
    let tagged = Tagged {
        schema: format!("tracegraph.{what}/1"),
        value,
    };
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let written = serde_json::to_writer_pretty(&mut out, &tagged)
        .map_err(std::io::Error::from)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("writing the JSON result to stdout"),
    }
}

/// Writes `text` and a newline to stdout; a closed pipe (`| head`) is not an error.
pub(crate) fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out
        .write_all(text.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("writing to stdout"),
    }
}

/// [`trace_analyze::format_ns`] for integer nanoseconds.
pub(crate) fn nsu(v: u64) -> String {
    trace_analyze::format_ns(v as f64)
}

/// [`trace_analyze::format_bytes`] for integer bytes.
pub(crate) fn bytesu(v: u64) -> String {
    trace_analyze::format_bytes(v as f64)
}

/// The label after durations: `host time` or `device time (synchronized)`.
pub(crate) fn timing_text(t: trace_record::schema::TimingMode) -> &'static str {
    match t {
        trace_record::schema::TimingMode::Host => "host time",
        trace_record::schema::TimingMode::DeviceSynchronized => "device time (synchronized)",
    }
}
