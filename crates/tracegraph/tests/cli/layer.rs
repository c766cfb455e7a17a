//! Every view that shows spans says when trace-candle's `tracing` layer saw no spans.
//!
//! It was installed after the model made its spans, or filtered out.

use trace_candle::{Capture, Phase, Run, TraceLayer};

use crate::{run_in, stdout};

#[test]
fn summary_says_when_the_tracing_layer_saw_no_spans() {
    let dir = tempfile::tempdir().unwrap();
    let capture = Capture::open(
        dir.path().join("layer.jsonl"),
        Run::new("tests::layer", Phase::Infer, "cpu"),
    )
    .unwrap();
    // A layer made for the capture that never sees a span (never installed here).
    drop(TraceLayer::for_capture(&capture));
    let _ = capture.span("work", trace_record::schema::SpanKind::Function);
    capture.finish().unwrap();

    let out = run_in(dir.path(), &["summary", "layer.jsonl"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains("tracing   the tracing layer saw no spans"),
        "{text}"
    );
    let out = run_in(dir.path(), &["summary", "--json", "layer.jsonl"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tracing_spans"], 0, "{v}");
    // `spans` and `validate` say it too, and the report carries it as a badge.
    for cmd in ["spans", "validate"] {
        let out = run_in(dir.path(), &[cmd, "layer.jsonl"]);
        assert_eq!(out.status.code(), Some(0), "{cmd}");
        assert!(
            stdout(&out).contains(trace_analyze::TRACING_LAYER_SAW_NO_SPANS),
            "{cmd}: {}",
            stdout(&out)
        );
    }
    let out = run_in(dir.path(), &["report", "layer.jsonl", "-o", "layer.html"]);
    assert_eq!(out.status.code(), Some(0));
    let html = std::fs::read_to_string(dir.path().join("layer.html")).unwrap();
    assert!(html.contains("the tracing layer saw no spans"));
}

#[test]
fn summary_is_silent_about_tracing_without_a_layer() {
    let dir = tempfile::tempdir().unwrap();
    let capture = Capture::open(
        dir.path().join("plain.jsonl"),
        Run::new("tests::layer", Phase::Infer, "cpu"),
    )
    .unwrap();
    let _ = capture.span("work", trace_record::schema::SpanKind::Function);
    capture.finish().unwrap();
    for cmd in ["summary", "spans", "validate"] {
        let out = run_in(dir.path(), &[cmd, "plain.jsonl"]);
        assert!(!stdout(&out).contains("tracing layer"), "{}", stdout(&out));
    }
    let out = run_in(dir.path(), &["summary", "--json", "plain.jsonl"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.get("tracing_spans").is_none(), "{v}");
}
