//! `graph` and `summary` on step graphs that alternate or have no ops: each distinct change is
//! listed once, with how many steps made it, and a run without ops names no fingerprint.

use crate::{run_in, stderr, stdout};

/// A trace of `steps` steps; step `i` holds one `matmul` of shape `shapes[i]`, or no op when
/// it is `None`.
fn trace(shapes: &[Option<u64>]) -> String {
    let mut lines = vec![
        r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"alt","entrypoint":"tests::graph_changes","phase":"infer","device":"cpu","timing":"host","start_unix_ns":1700000000000000000,"pid":7}}"#.to_string(),
        r#"{"type":"tensor","id":1,"label":"w","shape":[4,4],"dtype":"f32","bytes":64,"cat":"parameter"}"#.to_string(),
    ];
    let mut ops = 0;
    for (i, shape) in shapes.iter().enumerate() {
        let ts = i as u64 * 100;
        lines.push(format!(r#"{{"type":"step","index":{i},"ts":{ts}}}"#));
        if let Some(n) = shape {
            let id = 10 + i;
            lines.push(format!(
                r#"{{"type":"tensor","id":{id},"shape":[{n},{n}],"dtype":"f32","bytes":{},"cat":"activation"}}"#,
                n * n * 4
            ));
            lines.push(format!(
                r#"{{"type":"op","name":"matmul","in":[1,1],"out":[{id}],"shape":[{n},{n}],"dtype":"f32","ts":{},"dur":50}}"#,
                ts + 10
            ));
            ops += 1;
        }
    }
    let end = shapes.len() as u64 * 100;
    lines.push(format!(
        r#"{{"type":"trailer","outcome":"complete","counts":{{"span_start":0,"span_end":0,"op":{ops},"tensor":{},"memory":0,"device_memory":0,"gradient":0,"step":{},"marker":0,"counter":0}},"dropped":0,"ts":{end}}}"#,
        ops + 1,
        shapes.len()
    ));
    lines.join("\n") + "\n"
}

#[test]
fn an_alternating_run_lists_each_change_once() {
    let dir = tempfile::tempdir().unwrap();
    // A B A B A B A: six changes, two distinct ones (A → B three times, B → A three times).
    let shapes: Vec<Option<u64>> = (0..7)
        .map(|i| Some(if i % 2 == 0 { 8 } else { 16 }))
        .collect();
    std::fs::write(dir.path().join("alt.jsonl"), trace(&shapes)).unwrap();
    let o = run_in(dir.path(), &["graph", "alt.jsonl"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let blocks: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" differs from "))
        .collect();
    assert_eq!(blocks.len(), 2, "{text}");
    assert!(
        blocks[0].starts_with("step 1 differs from step 0"),
        "{text}"
    );
    assert!(
        blocks[1].starts_with("step 2 differs from step 1"),
        "{text}"
    );
    for b in &blocks {
        assert!(
            b.contains("(and 2 later step(s) made the same change)"),
            "{text}"
        );
    }
    // The table still marks every changed step.
    let changed = text
        .lines()
        .filter(|l| l.trim_end().ends_with(" yes"))
        .count();
    assert_eq!(changed, 6, "{text}");
}

#[test]
fn a_run_without_ops_names_no_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("none.jsonl"), trace(&[None, None, None])).unwrap();
    let o = run_in(dir.path(), &["summary", "none.jsonl", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let graph = &v["graph"];
    assert!(
        graph["verdict"]
            .as_str()
            .unwrap()
            .starts_with("no ops captured in "),
        "{graph}"
    );
    assert!(graph.get("last_fingerprint").is_none(), "{graph}");
    let o = run_in(dir.path(), &["summary", "none.jsonl"]);
    assert!(!stdout(&o).contains("fingerprint"), "{}", stdout(&o));
    // A run with ops still names its last step's fingerprint.
    std::fs::write(dir.path().join("one.jsonl"), trace(&[Some(8)])).unwrap();
    let o = run_in(dir.path(), &["summary", "one.jsonl", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v["graph"]["last_fingerprint"].as_str().map(str::len),
        Some(32),
        "{}",
        v["graph"]
    );
}
