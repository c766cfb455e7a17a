//! Helpers: synthetic traces in memory and the checked-in small trace.

use std::path::PathBuf;

use testkit::{SynthConfig, write_synthetic};
use trace_analyze::{LoadOptions, Trace, load_str};

/// Loads a synthetic trace.
pub(crate) fn synthetic(cfg: &SynthConfig) -> Trace {
    let mut buf = Vec::new();
    write_synthetic(&mut buf, cfg).expect("write to a Vec");
    let text = String::from_utf8(buf).expect("utf8");
    load_str(&text, "synthetic.jsonl", LoadOptions::default()).expect("synthetic trace loads")
}

/// The path of a file under `tests/data/`.
pub(crate) fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The small hand-made trace (testkit's `small.jsonl`), named `small.jsonl` in outputs.
pub(crate) fn small() -> Trace {
    let text = std::fs::read_to_string(testkit::small_jsonl()).expect("small.jsonl");
    load_str(&text, "small.jsonl", LoadOptions::default()).expect("small trace loads")
}

/// A trace of `lines` (event lines, no trailer) after a fixed training-run header.
pub(crate) fn from_lines<S: AsRef<str>>(lines: &[S]) -> Trace {
    let mut text = String::from(
        r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"t","entrypoint":"test","phase":"train","device":"cpu","timing":"host","start_unix_ns":0,"pid":7}}"#,
    );
    for l in lines {
        text.push('\n');
        text.push_str(l.as_ref());
    }
    text.push('\n');
    load_str(&text, "t.jsonl", LoadOptions::default()).expect("trace loads")
}
