//! Shared helpers: runs, headers, small trace builders, the ops tests record, what a read
//! trace holds, and this test binary re-run as a child process.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command};

use trace_record::schema::{
    Event, Header, Phase, RunMeta, SCHEMA_NAME, SCHEMA_VERSION, TimingMode,
};
use trace_record::{OpRecord, ParsedTrace, Run, TraceSession, Validator};

/// A run for tests.
pub(crate) fn run() -> Run {
    Run::new("tests::it", Phase::Train, "cpu")
}

/// A fixed header (deterministic, for golden lines).
pub(crate) fn header(device: &str) -> Header {
    Header {
        schema: SCHEMA_NAME.to_string(),
        version: SCHEMA_VERSION,
        run: RunMeta {
            run_id: "run-1".to_string(),
            entrypoint: "examples/mlp::train".to_string(),
            phase: Phase::Train,
            device: device.to_string(),
            timing: TimingMode::Host,
            start_unix_ns: 1_700_000_000_000_000_000,
            pid: 4242,
            rank: None,
            world_size: None,
            schedule: None,
            tags: Default::default(),
            versions: Default::default(),
        },
    }
}

/// A trace text: the fixed header line, then `lines` each followed by a newline.
pub(crate) fn trace_text(lines: &[&str]) -> String {
    let mut out = Vec::new();
    trace_record::encode_header(&header("cpu"), &mut out);
    let mut s = String::from_utf8(out).unwrap();
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// Validates a read trace.
pub(crate) fn issues(trace: &ParsedTrace) -> Vec<trace_record::Issue> {
    let mut v = Validator::new();
    for e in &trace.events {
        v.check(e.line, &e.event);
    }
    v.finish()
}

/// Records a small op: a 4×4 `matmul` reading tensor `i` into tensor `i + 1`.
pub(crate) fn small_op(session: &TraceSession, i: u64) {
    let t = session.now_ns();
    session.record_op(&OpRecord {
        name: "matmul",
        inputs: &[i],
        outputs: &[i + 1],
        shape: &[4, 4],
        dtype: "f32",
        device: "cpu",
        start_ns: t,
        dur_ns: 1,
        in_bytes: 64,
        out_bytes: 64,
        category: None,
        flops: None,
    });
}

/// Records a large op: a 64×64 `matmul` reading tensors `i` and `i + 1` into `i + 2`, with
/// its bytes and flops.
pub(crate) fn large_op(session: &TraceSession, i: u64) {
    let t = session.now_ns();
    session.record_op(&OpRecord {
        name: "matmul",
        inputs: &[i, i + 1],
        outputs: &[i + 2],
        shape: &[64, 64],
        dtype: "f32",
        device: "cpu",
        start_ns: t,
        dur_ns: 1,
        in_bytes: 32768,
        out_bytes: 16384,
        category: None,
        flops: Some(524_288),
    });
}

/// The indices of a read trace's `step` lines, in file order.
pub(crate) fn step_indices(trace: &ParsedTrace) -> Vec<u64> {
    trace
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Step(s) => Some(s.index),
            _ => None,
        })
        .collect()
}

/// The number of `op` lines of a read trace.
pub(crate) fn op_count(trace: &ParsedTrace) -> usize {
    trace
        .events
        .iter()
        .filter(|e| matches!(e.event, Event::Op(_)))
        .count()
}

/// This test binary, to be run as a child running exactly `test` on one thread with its
/// output shown; the caller sets its environment and standard streams.
pub(crate) fn rerun(test: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([test, "--exact", "--nocapture", "--test-threads=1"]);
    c
}

/// Reads `child`'s standard output (piped) up to the first line holding `needle` and returns
/// that line from `needle` on (the harness may print the test's name before it on the same
/// line); a thread then keeps draining the output so that the child never blocks on it. If
/// the output ends or fails first, kills the child and panics, naming `context`.
pub(crate) fn wait_for_line(child: &mut Child, needle: &str, context: &str) -> String {
    let out = child.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) => {
                if let Some(at) = l.find(needle) {
                    std::thread::spawn(move || for _ in lines {});
                    return l[at..].trim_end().to_string();
                }
            }
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{context}: the child's output ended before {needle:?}: {other:?}");
            }
        }
    }
}
