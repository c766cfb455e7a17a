//! A recording child process killed with SIGKILL: its trace reads back to the last complete line.
//!
//! The test re-executes its own test binary, filtered to itself, with `CHILD_ENV` naming the
//! trace path; in the child the same test records forever until the parent kills it.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use trace_record::schema::SpanKind;
use trace_record::{IssueKind, TraceSession, read_trace};

use crate::common::{issues, large_op, op_count, rerun, run};

const CHILD_ENV: &str = "TRACE_RECORD_TEST_CRASH_CHILD";
const TEST_NAME: &str = "crash::killed_child_trace_reads_to_its_last_complete_line";

/// The child's work: records ops in steps until it is killed (a `.zst` path records
/// compressed).
pub(crate) fn record_forever(path: &str) -> ! {
    let session = TraceSession::open(path, run()).unwrap_or_else(|e| panic!("child: {e}"));
    let mut i = 0u64;
    loop {
        let _step = session.span("step", SpanKind::Function, None);
        for _ in 0..1000 {
            large_op(&session, i);
            i += 1;
        }
        drop(_step);
        session.step();
    }
}

/// Re-runs this test binary filtered to `test` with `env` naming `path`, so that the child
/// runs [`record_forever`]; once more than `min_bytes` are on disk, SIGKILLs it (Child::kill
/// on Unix) and checks it did not exit cleanly.
pub(crate) fn kill_recorder_once_written(test: &str, env: &str, path: &Path, min_bytes: u64) {
    let mut child = rerun(test)
        .env(env, path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        if len > min_bytes {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("child exited early: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "child wrote only {len} bytes in 60 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    assert!(!child.wait().unwrap().success());
}

#[test]
fn killed_child_trace_reads_to_its_last_complete_line() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        record_forever(&path);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.jsonl");
    kill_recorder_once_written(
        TEST_NAME,
        CHILD_ENV,
        &path,
        3 * trace_record::BLOCK_BYTES as u64,
    );

    let bytes = std::fs::read(&path).unwrap();
    let last_newline = bytes.iter().rposition(|&b| b == b'\n').unwrap();
    let complete_lines = bytes[..=last_newline]
        .iter()
        .filter(|&&b| b == b'\n')
        .count() as u64;

    let trace = read_trace(&path).unwrap();
    assert!(trace.incomplete, "no trailer after SIGKILL");
    assert!(trace.trailer.is_none());
    assert_eq!(
        trace.partial_line.is_some(),
        last_newline + 1 != bytes.len()
    );
    assert_eq!(trace.events.last().unwrap().line, complete_lines);
    assert_eq!(trace.events.len() as u64, complete_lines - 1);
    let ops = op_count(&trace);
    assert!(ops > 1000, "{ops}");
    // The only structural issue a kill can leave: the span that was open.
    for issue in issues(&trace) {
        assert!(
            matches!(issue.kind, IssueKind::SpanLeftOpen { .. }),
            "{issue}"
        );
    }
}
