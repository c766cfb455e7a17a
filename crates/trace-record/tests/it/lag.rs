//! The trace on disk starts with its header at `open` and lags the program by a bounded time.
//!
//! Real child processes killed with SIGKILL at several moments, and SIGINT/SIGTERM writing the
//! `incomplete` trailer.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use trace_record::schema::{Outcome, SpanKind};
use trace_record::{AfterSignal, TraceSession, read_trace};

use crate::common::{op_count, rerun, run, small_op, wait_for_line};

const CHILD_ENV: &str = "TRACE_RECORD_TEST_LAG_CHILD";
const MODE_ENV: &str = "TRACE_RECORD_TEST_LAG_MODE";
const CHILD_TEST: &str = "lag::child_recorder";

/// In the child (`CHILD_ENV` set): records slowly (one op a millisecond, far below a block,
/// a step every 100 ops) until killed, or, in mode `continue`, until a signal closed the
/// session, then exits 0 by itself.
#[test]
fn child_recorder() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mode = std::env::var(MODE_ENV).unwrap_or_default();
    let session = Arc::new(TraceSession::open(&path, run()).unwrap());
    match mode.as_str() {
        "terminate" => session.close_on_signals(AfterSignal::Terminate).unwrap(),
        "continue" => session.close_on_signals(AfterSignal::Continue).unwrap(),
        _ => {}
    }
    println!("opened");
    let mut i = 0u64;
    loop {
        let span = session.span("step", SpanKind::Function, None);
        for _ in 0..100 {
            small_op(&session, i);
            i += 1;
            std::thread::sleep(Duration::from_millis(1));
            if !session.is_active() && mode == "continue" {
                // The program's own handling: a clean exit once the trailer is written
                // (`finish` waits for the closing thread).
                drop(span);
                assert!(matches!(
                    session.finish(),
                    Err(trace_record::TraceError::AlreadyFinished)
                ));
                std::process::exit(0);
            }
        }
        drop(span);
        session.step();
    }
}

fn spawn_child(path: &std::path::Path, mode: &str) -> Child {
    let mut child = rerun(CHILD_TEST)
        .env(CHILD_ENV, path)
        .env(MODE_ENV, mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until `open` has returned in the child.
    wait_for_line(&mut child, "opened", "the child did not open its session");
    child
}

/// Op lines on disk in `path` so far.
fn ops_on_disk(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.matches("\"type\":\"op\"").count())
}

/// Waits until `path` holds at least `ops` op lines (the child writes them out at its step
/// boundaries and every flush interval). The deadline only keeps a regression from hanging
/// the test: the child records one op a millisecond, and a busy machine only makes the wait
/// longer.
fn wait_for_ops_on_disk(path: &std::path::Path, ops: usize) {
    let deadline = Instant::now() + Duration::from_mins(5);
    while ops_on_disk(path) < ops {
        assert!(
            Instant::now() < deadline,
            "only {} of {ops} ops reached the file",
            ops_on_disk(path)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sigkill_at_any_moment_after_open_leaves_a_readable_trace() {
    let dir = tempfile::tempdir().unwrap();
    // At open and a little after (wherever the child is then), and once 50 and 250 ops are
    // on disk: the kill moments that need events on disk wait for them to be there, instead
    // of guessing how far the child got in a given time (a busy machine slows it down).
    for (i, (after_ms, on_disk)) in [(0u64, 0), (20, 0), (120, 0), (0, 50), (0, 250)]
        .into_iter()
        .enumerate()
    {
        let path = dir.path().join(format!("killed-{i}.jsonl"));
        let mut child = spawn_child(&path, "none");
        std::thread::sleep(Duration::from_millis(after_ms));
        wait_for_ops_on_disk(&path, on_disk);
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        let moment = format!("{after_ms} ms, {on_disk} ops on disk");
        assert_eq!(status.signal(), Some(9), "{moment}");
        let trace = read_trace(&path).unwrap_or_else(|e| panic!("killed at {moment}: {e}"));
        assert!(trace.incomplete && trace.trailer.is_none(), "{moment}");
        // What was on disk before the kill is read back: events reach the file although the
        // 256 KiB block never filled (one op a millisecond, a step every 100).
        let ops = op_count(&trace);
        assert!(ops >= on_disk, "{moment}: only {ops} ops read back");
    }
}

fn send(child: &Child, signal: &str) {
    let ok = Command::new("kill")
        .args(["-s", signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn sigint_and_sigterm_write_the_incomplete_trailer_then_the_default_action_follows() {
    let dir = tempfile::tempdir().unwrap();
    for (signal, number) in [("TERM", 15), ("INT", 2)] {
        let path = dir.path().join(format!("{signal}.jsonl"));
        let mut child = spawn_child(&path, "terminate");
        std::thread::sleep(Duration::from_millis(150));
        send(&child, signal);
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(number), "{signal}: {status}");
        let trace = read_trace(&path).unwrap();
        let trailer = trace.trailer.as_ref().expect("a trailer");
        assert_eq!(trailer.outcome, Outcome::Incomplete, "{signal}");
        assert!(trace.incomplete);
        assert_eq!(trailer.counts.total(), trace.events.len() as u64);
    }
}

#[test]
fn with_continue_the_program_handles_the_signal_itself() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("continue.jsonl");
    let mut child = spawn_child(&path, "continue");
    std::thread::sleep(Duration::from_millis(100));
    send(&child, "TERM");
    // A hang guard only: the child exits within a millisecond of the trailer.
    let deadline = Instant::now() + Duration::from_mins(5);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the child did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(0), "{status}");
    let trace = read_trace(&path).unwrap();
    assert_eq!(trace.trailer.map(|t| t.outcome), Some(Outcome::Incomplete));
}

#[test]
fn the_header_is_on_disk_when_open_returns_and_lines_follow_within_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let session =
        TraceSession::open(&path, run().flush_interval(Some(Duration::from_millis(20)))).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("{\"type\":\"header\""), "{text}");
    assert_eq!(text.lines().count(), 1);
    assert!(read_trace(&path).unwrap().events.is_empty());
    small_op(&session, 1);
    // A hang guard only (the interval is 20 ms; a busy machine delays the flusher, not the
    // outcome).
    let deadline = Instant::now() + Duration::from_mins(5);
    while std::fs::read_to_string(&path).unwrap().lines().count() < 2 {
        assert!(Instant::now() < deadline, "the op never reached the file");
        std::thread::sleep(Duration::from_millis(5));
    }
    session.finish().unwrap();

    // Without an interval: nothing until a step boundary, which writes everything out.
    let path = dir.path().join("steps.jsonl");
    let session = TraceSession::open(&path, run().flush_interval(None)).unwrap();
    small_op(&session, 1);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    session.step();
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
    session.finish().unwrap();
}
