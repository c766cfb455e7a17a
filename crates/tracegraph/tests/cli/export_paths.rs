//! Export paths = `spans` paths: every export names spans as `tracegraph spans` does (`#0`
//! dropped on a span alone among its siblings, `#k` kept where siblings exist), and an op
//! outside every span is drawn on the driving thread with no adjustment.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::{run_in, stderr, stdout};

/// The span paths `tracegraph spans --json` lists.
fn spans_paths(dir: &Path, trace: &str) -> BTreeSet<String> {
    let o = run_in(dir, &["spans", "--json", trace]);
    assert!(o.status.success(), "spans: {}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("spans JSON");
    v["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["path"].as_str().expect("path").to_string())
        .collect()
}

/// `tracegraph export TRACE --format chrome`, parsed, with its stderr.
fn chrome(dir: &Path, trace: &str) -> (Value, String) {
    let o = run_in(
        dir,
        &[
            "export",
            trace,
            "--format",
            "chrome",
            "-o",
            "out.trace.json",
        ],
    );
    assert!(o.status.success(), "export chrome: {}", stderr(&o));
    let text = std::fs::read(dir.join("out.trace.json")).expect("export written");
    (serde_json::from_slice(&text).expect("JSON"), stderr(&o))
}

/// The complete events of a Chrome export.
fn complete(v: &Value) -> Vec<&Value> {
    v["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect()
}

/// The `path` args of the Chrome export's spans (each span's name is its path's last name).
fn chrome_paths(v: &Value) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for e in complete(v) {
        let cat = e["cat"].as_str().unwrap_or("");
        if !cat.starts_with("span") {
            continue;
        }
        let path = e["args"]["path"].as_str().expect("path arg");
        let name = e["name"].as_str().expect("name");
        assert!(
            path == name || path.ends_with(&format!("/{name}")),
            "{name} at {path}"
        );
        paths.insert(path.to_string());
    }
    paths
}

/// The names of the ops of a Chrome export (`op` events).
fn op_names(v: &Value) -> BTreeSet<String> {
    complete(v)
        .into_iter()
        .filter(|e| e["cat"] == "op")
        .map(|e| e["name"].as_str().expect("name").to_string())
        .collect()
}

/// Checks the folded lines of `format` against `spans`: the frames from the root are span
/// paths as far as they go, every span path is a prefix of some line (`folded`) or at least
/// named as `spans` names it (`folded-samples`, whose lines hold only sampled spans), and the
/// first frame that is no span path is not a span's recorded `NAME#0` (the name `spans`
/// shows as NAME) and is, for `folded`, the line's op leaf (`is_op`).
fn check_folded(
    dir: &Path,
    trace: &str,
    format: &str,
    spans: &BTreeSet<String>,
    is_op: &dyn Fn(&str) -> bool,
) {
    let o = run_in(dir, &["export", trace, "--format", format, "-o", "-"]);
    assert!(o.status.success(), "export {format}: {}", stderr(&o));
    let recorded_zero: BTreeSet<String> = spans
        .iter()
        .map(|p| format!("{}#0", p.rsplit('/').next().unwrap_or(p)))
        .collect();
    let text = stdout(&o);
    let mut seen = BTreeSet::new();
    for line in text.lines() {
        let (stack, _) = line.rsplit_once(' ').expect("stack weight");
        let frames: Vec<&str> = stack.split(';').collect();
        let mut span_frames = 0;
        while span_frames < frames.len() {
            let path = frames[..=span_frames].join("/");
            if !spans.contains(&path) {
                break;
            }
            seen.insert(path);
            span_frames += 1;
        }
        if let Some(next) = frames.get(span_frames) {
            assert!(
                !recorded_zero.contains(*next),
                "{format}: `{next}` keeps a `#0` that `spans` drops: {line}"
            );
            if format == "folded" {
                assert!(
                    span_frames + 1 == frames.len() && is_op(next),
                    "{format}: `{next}` is neither a `spans` path nor an op below one: {line}"
                );
            }
        }
    }
    if format == "folded" {
        assert_eq!(&seen, spans, "{format}: the span paths of the lines");
    } else {
        assert!(seen.is_subset(spans), "{format}");
    }
}

/// A generation loop by a real `TraceSession` with trace-candle's sibling numbering: three
/// iterations of `model#0 { layer#0 { linear#0, linear#1, norm#0 } }`, an op in each, then a
/// top-level `argmax` outside every span.
fn write_generation(path: &Path) {
    let trace = testkit::generation_trace(&testkit::Generation {
        entrypoint: "tests::export",
        steps: 3,
        norm_op: "matmul",
        embed: false,
        sampled: false,
    });
    std::fs::write(path, trace).expect("write trace");
}

/// Export paths = `spans` paths on `trace` (in `dir`), for the Chrome export and both folded
/// exports; returns the Chrome export and its stderr.
fn exports_name_paths_as_spans(dir: &Path, trace: &str) -> (Value, String) {
    let spans = spans_paths(dir, trace);
    assert!(!spans.is_empty());
    let (v, err) = chrome(dir, trace);
    assert_eq!(chrome_paths(&v), spans, "Chrome paths = spans paths");
    let ops = op_names(&v);
    check_folded(dir, trace, "folded", &spans, &|f| ops.contains(f));
    check_folded(dir, trace, "folded-samples", &spans, &|_| false);
    (v, err)
}

#[test]
fn export_paths_are_spans_paths_on_a_session_trace() {
    let dir = tempfile::tempdir().unwrap();
    write_generation(&dir.path().join("gen.jsonl"));
    let spans = spans_paths(dir.path(), "gen.jsonl");
    let want: BTreeSet<String> = [
        "model",
        "model/layer",
        "model/layer/linear#0",
        "model/layer/linear#1",
        "model/layer/norm",
    ]
    .iter()
    .map(|s| (*s).to_string())
    .collect();
    assert_eq!(spans, want, "the rule of `spans`");
    let (v, err) = exports_name_paths_as_spans(dir.path(), "gen.jsonl");
    // The top-level op: on the thread of the spans, no adjustment, no made-up thread.
    assert!(!err.contains("adjusted"), "{err}");
    assert_eq!(
        v["otherData"]["summary"]["adjustments"]["ops_outside_spans"],
        0
    );
    let events = complete(&v);
    let tid_of = |name: &str| -> BTreeSet<u64> {
        events
            .iter()
            .filter(|e| e["name"] == name)
            .map(|e| e["tid"].as_u64().expect("tid"))
            .collect()
    };
    let driver = tid_of("model");
    assert_eq!(driver.len(), 1);
    assert_eq!(tid_of("argmax"), driver);
}

#[test]
fn export_paths_are_spans_paths_on_generated_and_checked_in_traces() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut bytes = Vec::new();
    testkit::write_synthetic(&mut bytes, &testkit::SynthConfig::default()).expect("synthetic");
    std::fs::write(d.join("synth.jsonl"), bytes).expect("write");
    exports_name_paths_as_spans(d, "synth.jsonl");
    // A demo trace recorded with the CPU sampler, and the small checked-in trace.
    let sampled =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../trace-export/tests/data/sampled-demo.jsonl");
    std::fs::copy(sampled, d.join("sampled.jsonl")).expect("copy");
    exports_name_paths_as_spans(d, "sampled.jsonl");
    std::fs::copy(testkit::small_jsonl(), d.join("small.jsonl")).expect("copy");
    exports_name_paths_as_spans(d, "small.jsonl");
}

/// The tiny Llama of trace-candle's profile_llama example (the `demo --model llama` trace):
/// `block#0/attn#0/linear#0..#3`-style names, 24 paths or more of them numbered.
#[cfg(feature = "demo")]
#[test]
fn export_paths_are_spans_paths_on_the_llama_demo() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = run_in(d, &["demo", "--model", "llama", "--out", "out"]);
    assert!(o.status.success(), "demo --model llama: {}", stderr(&o));
    let spans = spans_paths(d, "out/trace.jsonl");
    assert!(
        spans.iter().any(|p| p.contains("#1")) && spans.iter().any(|p| !p.contains('#')),
        "{spans:?}"
    );
    let (_, err) = exports_name_paths_as_spans(d, "out/trace.jsonl");
    assert!(!err.contains("ops_outside_spans"), "{err}");
}
