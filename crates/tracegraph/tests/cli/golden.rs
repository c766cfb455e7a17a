//! Golden text and JSON output of every analysis command on testkit's `small.jsonl` (run in
//! that directory, so no absolute path appears). `UPDATE_GOLDENS=1` rewrites them.

use crate::{data_dir, run_in, stderr, stdout};

fn check(name: &str, args: &[&str]) {
    let o = run_in(&testkit::data_dir(), args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    let text = stdout(&o);
    testkit::assert_golden(&data_dir().join("golden").join(name), &text);
    if name.ends_with(".json") {
        let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert!(v["schema"].as_str().unwrap().starts_with("tracegraph."));
    }
}

#[test]
fn text_goldens() {
    check("summary.txt", &["summary", "small.jsonl"]);
    check("ops.txt", &["ops", "small.jsonl"]);
    check(
        "ops_by_shape.txt",
        &[
            "ops",
            "small.jsonl",
            "--by-shape",
            "--sort",
            "self",
            "--limit",
            "3",
        ],
    );
    check("spans.txt", &["spans", "small.jsonl"]);
    check("memory.txt", &["memory", "small.jsonl"]);
    check("graph.txt", &["graph", "small.jsonl"]);
    check("compare.txt", &["compare", "small.jsonl", "small.jsonl"]);
    check("validate.txt", &["validate", "--strict", "small.jsonl"]);
}

#[test]
fn json_goldens() {
    check("summary.json", &["summary", "small.jsonl", "--json"]);
    check("ops.json", &["ops", "small.jsonl", "--json", "--by-shape"]);
    check("spans.json", &["spans", "small.jsonl", "--json"]);
    check("memory.json", &["memory", "small.jsonl", "--json"]);
    check("graph.json", &["graph", "small.jsonl", "--json"]);
    check(
        "compare.json",
        &["compare", "small.jsonl", "small.jsonl", "--json"],
    );
    check("validate.json", &["validate", "small.jsonl", "--json"]);
}
