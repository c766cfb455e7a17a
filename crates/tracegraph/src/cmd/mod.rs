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
/// `*.jsonl.zst` files (the extension in any case, names need not be UTF-8; sorted by name;
/// subdirectories are not entered). The other entries of a directory are named in a note on
/// stderr, so no member is left out silently. A directory without any trace is an error
/// naming it.
pub(crate) fn trace_paths(
    inputs: &[std::path::PathBuf],
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    for p in inputs {
        if !p.is_dir() {
            out.push(p.clone());
            continue;
        }
        let (mut found, skipped) = directory_traces(p)?;
        if found.is_empty() {
            anyhow::bail!("{} holds no trace (*.jsonl or *.jsonl.zst)", p.display());
        }
        if !skipped.is_empty() {
            eprintln!("tracegraph: note: {}", skipped_note(p, &skipped));
        }
        found.sort();
        out.extend(found);
    }
    Ok(out)
}

/// The most entries a skipped-files note names; the rest are counted.
const SKIPPED_NAMED: usize = 5;

/// A directory's trace files (`*.jsonl`, `*.jsonl.zst`, the extension in any case) and the
/// names of its other entries (not subdirectories), each list in `read_dir` order.
fn directory_traces(
    dir: &Path,
) -> anyhow::Result<(Vec<std::path::PathBuf>, Vec<std::path::PathBuf>)> {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path();
        if path.is_dir() {
            continue;
        }
        if path.is_file() && is_trace_name(path.file_name().unwrap_or_default()) {
            found.push(path);
        } else {
            skipped.push(path);
        }
    }
    Ok((found, skipped))
}

/// Whether a file name ends in `.jsonl` or `.jsonl.zst`, in any case, compared on the name's
/// bytes (a name that is not UTF-8 is still a trace when its extension says so).
fn is_trace_name(name: &std::ffi::OsStr) -> bool {
    let bytes = name.as_encoded_bytes();
    [&b".jsonl"[..], b".jsonl.zst"].iter().any(|ext| {
        bytes.len() > ext.len() && bytes[bytes.len() - ext.len()..].eq_ignore_ascii_case(ext)
    })
}

/// The note naming the entries of `dir` that were not read as traces.
fn skipped_note(dir: &Path, skipped: &[std::path::PathBuf]) -> String {
    let mut names: Vec<String> = skipped
        .iter()
        .take(SKIPPED_NAMED)
        .map(|p| {
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .escape_debug()
                .to_string()
        })
        .collect();
    if skipped.len() > SKIPPED_NAMED {
        names.push(format!("and {} more", skipped.len() - SKIPPED_NAMED));
    }
    format!(
        "{} entr{} of {} not read (not a *.jsonl or *.jsonl.zst file): {}",
        skipped.len(),
        if skipped.len() == 1 { "y" } else { "ies" },
        dir.display(),
        names.join(", ")
    )
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
    if let Some(note) = stored
        .as_ref()
        .filter(|z| z.trailing_bytes > 0)
        .and_then(trace_record::ZstdStats::note)
    {
        eprintln!("tracegraph: note: {}: {note}", path.display());
    }
    if let Some(rt) = &trace.sampled.read_time {
        eprintln!("tracegraph: note: {}: {}", path.display(), rt.note());
    }
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

#[cfg(test)]
mod trace_paths_tests {
    use super::*;

    #[test]
    fn trace_names_match_in_any_case_and_on_bytes() {
        use std::os::unix::ffi::OsStrExt;
        for yes in ["a.jsonl", "B.JSONL", "c.Jsonl.ZST", "rank-0.jsonl.zst"] {
            assert!(is_trace_name(std::ffi::OsStr::new(yes)), "{yes}");
        }
        for no in [".jsonl", "a.json", "a.jsonl.gz", "a.jsonl.zst.tmp", "jsonl"] {
            assert!(!is_trace_name(std::ffi::OsStr::new(no)), "{no}");
        }
        assert!(is_trace_name(std::ffi::OsStr::from_bytes(
            b"r\xff\xfe.jsonl"
        )));
    }

    #[test]
    fn a_directory_keeps_every_trace_and_names_the_rest() -> anyhow::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir()?;
        let odd = std::ffi::OsStr::from_bytes(b"rank-\xff.jsonl");
        for name in [
            std::ffi::OsStr::new("rank-0.JSONL"),
            odd,
            std::ffi::OsStr::new("notes.txt"),
        ] {
            std::fs::write(dir.path().join(name), b"")?;
        }
        std::fs::create_dir(dir.path().join("sub.jsonl"))?;
        let got = trace_paths(&[dir.path().to_path_buf()])?;
        let names: Vec<_> = got
            .iter()
            .map(|p| p.file_name().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(names, [std::ffi::OsStr::new("rank-0.JSONL"), odd]);
        let (_, skipped) = directory_traces(dir.path())?;
        let note = skipped_note(dir.path(), &skipped);
        assert!(note.starts_with("1 entry of "), "{note}");
        assert!(note.ends_with(": notes.txt"), "{note}");
        Ok(())
    }
}
