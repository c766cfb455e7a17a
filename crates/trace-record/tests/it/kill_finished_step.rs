//! A finished step reaches the file within the step-write bound with no further recording
//! call, and a SIGKILL after that keeps it: plain and compressed.
//!
//! The test re-executes its own test binary, filtered to the child test, with `CHILD_ENV`
//! naming the trace path. The child records [`STEPS`] steps, says so on stdout, then makes no
//! recording call at all. The parent waits (polling the file, with a generous deadline that
//! only keeps a regression from hanging the run) until the last step is readable, then kills
//! the child and reads the trace again.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use trace_record::schema::SpanKind;
use trace_record::{ParsedTrace, TraceSession, read_trace};

use crate::common::{op_count, rerun, run, small_op, step_indices, wait_for_line};

const CHILD_ENV: &str = "TRACE_RECORD_TEST_KILL_STEP_CHILD";
const CHILD_TEST: &str = "kill_finished_step::child_finishes_steps_then_idles";
/// Steps the child finishes (`step()` calls).
const STEPS: u64 = 3;
/// Ops in each step.
const OPS_PER_STEP: u64 = 5;

/// In the child (`CHILD_ENV` set): [`STEPS`] steps of [`OPS_PER_STEP`] ops, a line on stdout,
/// then no recording call until killed.
#[test]
fn child_finishes_steps_then_idles() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let session = TraceSession::open(&path, run()).unwrap();
    let mut id = 0u64;
    for _ in 0..STEPS {
        let span = session.span("step", SpanKind::Function, None);
        for _ in 0..OPS_PER_STEP {
            small_op(&session, id);
            id += 1;
        }
        drop(span);
        session.step();
    }
    println!("finished {STEPS} steps");
    // No recording call from here on: only the session's own thread can write the last
    // step out. `park` may return spuriously; keep parking.
    loop {
        std::thread::park();
    }
}

/// The last step index and the op count of a read trace.
fn steps_and_ops(trace: &ParsedTrace) -> (Option<u64>, u64) {
    (step_indices(trace).last().copied(), op_count(trace) as u64)
}

/// Whether `path` reads (as far as it is written) with the child's last step and every op.
fn last_step_readable(path: &Path) -> bool {
    read_trace(path).is_ok_and(|t| steps_and_ops(&t) == (Some(STEPS), STEPS * OPS_PER_STEP))
}

fn finished_step_survives_sigkill(file: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    let mut child = rerun(CHILD_TEST)
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the child's last `step()` has returned.
    wait_for_line(
        &mut child,
        "finished",
        &format!("{file}: the child did not finish its steps"),
    );
    // The child makes no further recording call: the last step must reach the file anyway.
    let deadline = Instant::now() + Duration::from_mins(1);
    while !last_step_readable(&path) {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{file}: step {STEPS} was not readable 60 s after its step() returned, with no \
                 further recording call"
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "{file}");
    let trace = read_trace(&path).unwrap_or_else(|e| panic!("{file} after SIGKILL: {e}"));
    assert!(trace.incomplete && trace.trailer.is_none(), "{file}");
    assert_eq!(
        steps_and_ops(&trace),
        (Some(STEPS), STEPS * OPS_PER_STEP),
        "{file}: the finished step after SIGKILL"
    );
}

#[test]
fn a_finished_step_reaches_the_file_and_survives_sigkill_plain() {
    finished_step_survives_sigkill("killed.jsonl");
}

#[test]
fn a_finished_step_reaches_the_file_and_survives_sigkill_compressed() {
    finished_step_survives_sigkill("killed.jsonl.zst");
}
