//! When a finished step reaches the sink: at the flusher's next tick (within
//! `Run::step_write_bound`), never written by the `step()` call itself while a flusher runs;
//! at every `step()` without one.

use std::time::{Duration, Instant};

use trace_record::{DEFAULT_FLUSH_INTERVAL, MemorySink, TraceSession};

use crate::common::run;

/// The step lines the sink holds (written out so far).
fn step_lines(sink: &MemorySink) -> usize {
    sink.bytes()
        .split(|&b| b == b'\n')
        .filter(|l| l.windows(13).any(|w| w == b"\"type\":\"step\""))
        .count()
}

#[test]
fn the_step_write_bound_is_a_quarter_of_the_flush_interval() {
    assert_eq!(DEFAULT_FLUSH_INTERVAL, Duration::from_millis(200));
    assert_eq!(run().step_write_bound(), Some(Duration::from_millis(50)));
    let hour = run().flush_interval(Some(Duration::from_hours(1)));
    assert_eq!(hour.step_write_bound(), Some(Duration::from_mins(15)));
    // A tiny interval still gives the thread a period it can keep.
    let tiny = run().flush_interval(Some(Duration::from_micros(10)));
    assert_eq!(tiny.step_write_bound(), Some(Duration::from_millis(1)));
    assert_eq!(run().flush_interval(None).step_write_bound(), None);
}

#[test]
fn a_step_boundary_does_not_write_while_a_flusher_runs() {
    // An hour's interval: the flusher wakes every 15 min, so within this test nothing but the
    // header reaches the sink before the finish, whatever the machine's load.
    let (session, sink) =
        TraceSession::in_memory(run().flush_interval(Some(Duration::from_hours(1))));
    session.step();
    assert_eq!(step_lines(&sink), 0, "the step only marks the block");
    session.step();
    assert_eq!(step_lines(&sink), 0, "and so does the next one");
    assert_eq!(
        session.recording_write_ns(),
        0,
        "no write on the program's thread"
    );
    session.finish().unwrap();
    assert_eq!(step_lines(&sink), 2);
}

#[test]
fn the_flusher_writes_a_finished_step_out_without_another_call() {
    // A 40 ms interval (a 10 ms bound). The outcome does not depend on timing: with no further
    // call the step line must appear; the deadline only keeps a regression from hanging.
    let (session, sink) =
        TraceSession::in_memory(run().flush_interval(Some(Duration::from_millis(40))));
    session.step();
    let deadline = Instant::now() + Duration::from_mins(1);
    while step_lines(&sink) == 0 {
        assert!(
            Instant::now() < deadline,
            "the finished step did not reach the sink in 60 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Written by the flusher, not by the program's thread.
    assert_eq!(session.recording_write_ns(), 0);
    session.finish().unwrap();
    assert_eq!(step_lines(&sink), 1);
}

#[test]
fn without_a_flusher_every_step_writes_out() {
    let (session, sink) = TraceSession::in_memory(run().flush_interval(None));
    for k in 1..=3 {
        session.step();
        assert_eq!(step_lines(&sink), k);
    }
    assert!(session.recording_write_ns() > 0, "written by the steps");
    session.finish().unwrap();
}
