//! Shared helpers: runs, headers and small trace builders.

use trace_record::schema::{Header, Phase, RunMeta, SCHEMA_NAME, SCHEMA_VERSION, TimingMode};
use trace_record::{ParsedTrace, Run, Validator};

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
