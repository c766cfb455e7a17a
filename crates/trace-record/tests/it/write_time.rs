//! `TraceSession::recording_write_ns`: the time recording threads spend writing blocks out
//! (a full block, a step boundary's write-out) is counted; the flusher's writes are not.

use std::path::Path;
use std::time::Duration;

use trace_record::schema::SpanKind;
use trace_record::{BLOCK_BYTES, TraceSession};

use crate::common::run;

/// Span lines written into `session` until more than `bytes` of them were recorded (a
/// span's two lines are at least 40 bytes).
fn spans(session: &TraceSession, bytes: usize) {
    for _ in 0..=(bytes / 40) {
        drop(session.span("block", SpanKind::Function, None));
    }
}

/// Asserts that at least one full block of `path` is on disk.
fn a_block_on_disk(path: &Path) {
    let on_disk = std::fs::metadata(path).unwrap().len();
    assert!(on_disk >= BLOCK_BYTES as u64, "{on_disk} bytes on disk");
}

#[test]
fn a_full_block_is_timed_on_the_thread_that_filled_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let session = TraceSession::open(&path, run().flush_interval(None)).unwrap();
    // The header, written at open, is not the program's work.
    assert_eq!(session.recording_write_ns(), 0);
    spans(&session, 2 * BLOCK_BYTES);
    a_block_on_disk(&path);
    assert!(session.recording_write_ns() > 0);
    session.finish().unwrap();
}

#[test]
fn a_step_write_out_is_timed_and_the_flusher_is_not() {
    let dir = tempfile::tempdir().unwrap();
    // With no flusher, every step boundary writes the block out.
    let path = dir.path().join("steps.jsonl");
    let session = TraceSession::open(&path, run().flush_interval(None)).unwrap();
    spans(&session, 100);
    assert_eq!(session.recording_write_ns(), 0, "nothing written yet");
    session.step();
    assert!(session.recording_write_ns() > 0);
    session.finish().unwrap();

    // The flusher writes the same lines out within its interval, off the program's threads.
    let path = dir.path().join("flusher.jsonl");
    let interval = Duration::from_millis(5);
    let session = TraceSession::open(&path, run().flush_interval(Some(interval))).unwrap();
    spans(&session, 100);
    let written = |path: &Path| {
        let text = std::fs::read_to_string(path).unwrap();
        text.matches("\"span_end\"").count()
    };
    // The limit only keeps a regression from hanging the test: a busy machine delays the
    // flusher, not the outcome.
    let mut waited = Duration::ZERO;
    while written(&path) == 0 && waited < Duration::from_mins(5) {
        std::thread::sleep(interval);
        waited += interval;
    }
    assert!(
        written(&path) > 0,
        "the flusher wrote nothing in {waited:?}"
    );
    assert_eq!(session.recording_write_ns(), 0);
    session.finish().unwrap();
}

#[test]
fn blocks_written_beside_the_program_are_not_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("beside.jsonl");
    let session = TraceSession::open(&path, run().flush_interval(None)).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            trace_record::record_beside_the_program();
            spans(&session, 2 * BLOCK_BYTES);
        });
    });
    a_block_on_disk(&path);
    assert_eq!(session.recording_write_ns(), 0);
    // The program's own thread is still counted.
    spans(&session, BLOCK_BYTES);
    assert!(session.recording_write_ns() > 0);
    session.finish().unwrap();
}
