//! The demo end to end: train, write the trace, then every command on it exits 0 and
//! `validate --strict` passes; a build without the `demo` feature says it has no demo.

use crate::{run_in, stderr, stdout};

#[cfg(feature = "demo")]
#[test]
fn the_llama_demo_profiles_a_real_model_and_takes_no_mlp_options() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = run_in(d, &["demo", "--model", "llama", "--out", "out"]);
    assert!(o.status.success(), "demo --model llama: {}", stderr(&o));
    let text = stdout(&o);
    // Prefill + 20 decode steps + 4 training steps, and the graph sees the prefill/decode
    // shapes.
    assert!(text.contains("25 steps"), "{text}");
    assert!(text.contains("input 0 shape [1, 16] → [1, 1]"), "{text}");
    let v = run_in(d, &["validate", "--strict", "out/trace.jsonl"]);
    assert!(v.status.success(), "validate: {}", stdout(&v));
    for extra in [
        &["--steps", "3"][..],
        &["--sample"][..],
        &["--rank", "0", "--world-size", "2"][..],
    ] {
        let mut args = vec!["demo", "--model", "llama", "--out", "out2"];
        args.extend_from_slice(extra);
        let o = run_in(d, &args);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("apply to the MLP demo"),
            "{}",
            stderr(&o)
        );
    }
}

#[cfg(feature = "demo")]
#[test]
fn demo_trace_through_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = run_in(d, &["demo", "--out", "out", "--steps", "15"]);
    assert!(o.status.success(), "demo: {}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("top ops by self time"), "{text}");
    assert!(text.contains("memory peak"), "{text}");
    assert!(text.contains("stable from step"), "{text}");
    // The hints name only commands with data: no sampled stacks without --sample, so no
    // `hot`; gradient facts, so `gradients`.
    let next = &text[text.find("\nnext").expect("the hints")..];
    assert!(!next.contains("tracegraph hot"), "{next}");
    assert!(next.contains("tracegraph gradients"), "{next}");
    let trace = "out/trace.jsonl";
    assert!(d.join(trace).exists());
    let commands: Vec<Vec<&str>> = vec![
        vec!["summary", trace],
        vec!["ops", trace, "--sort", "p95", "--by-shape", "--limit", "5"],
        vec!["spans", trace],
        vec!["memory", trace],
        vec!["graph", trace],
        vec!["compare", trace, trace],
        vec!["validate", "--strict", trace],
        vec![
            "export",
            trace,
            "--format",
            "chrome",
            "-o",
            "out/trace.trace.json",
        ],
        vec![
            "export",
            trace,
            "--format",
            "folded",
            "-o",
            "out/trace.folded",
        ],
        vec!["report", trace, "-o", "out/report.html"],
    ];
    for args in &commands {
        let o = run_in(d, args);
        assert!(
            o.status.success(),
            "{args:?} exited {:?}: {}",
            o.status.code(),
            stderr(&o)
        );
        if matches!(
            args[0],
            "summary" | "ops" | "spans" | "memory" | "graph" | "compare" | "validate"
        ) {
            let mut j = args.clone();
            j.push("--json");
            let o = run_in(d, &j);
            assert!(o.status.success(), "{j:?}: {}", stderr(&o));
            let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
            assert_eq!(v["schema"], format!("tracegraph.{}/1", args[0]));
        }
    }
    let o = run_in(d, &["validate", "--strict", trace, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["valid"], true, "{v}");
    assert_eq!(v["issues"].as_array().unwrap().len(), 0);
    let o = run_in(d, &["graph", trace, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    // 15 steps record 7-9 and 12-14; every recorded step has the same graph.
    assert_eq!(v["steps"].as_array().unwrap().len(), 6);
    assert_eq!(v["distinct_graphs"], 1);
    assert_eq!(v["cache"]["hits"], 5);
    // Graph, spans, the Chrome steps track and `export --step` number them alike.
    assert_eq!(
        crate::steps::assert_steps_agree(&d.join(trace)),
        [7, 8, 9, 12, 13, 14]
    );
}

/// `demo --out FILE.jsonl.zst` writes a zstd-compressed trace that every command reads, and
/// `demo --rank R --world-size N` into one directory makes the ranks of one run.
#[cfg(feature = "demo")]
#[test]
fn demo_writes_compressed_and_ranked_traces() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = run_in(d, &["demo", "--out", "z/run.jsonl.zst", "--steps", "8"]);
    assert!(o.status.success(), "demo .zst: {}", stderr(&o));
    let bytes = std::fs::read(d.join("z/run.jsonl.zst")).unwrap();
    assert_eq!(bytes[..4], [0x28, 0xb5, 0x2f, 0xfd], "a zstd frame first");
    assert!(stdout(&o).contains("z/report.html"), "{}", stdout(&o));
    let v = run_in(d, &["validate", "--strict", "z/run.jsonl.zst"]);
    assert!(v.status.success(), "validate: {}", stdout(&v));

    for r in ["0", "1"] {
        let args = [
            "demo",
            "--rank",
            r,
            "--world-size",
            "2",
            "--out",
            "ranks",
            "--steps",
            "8",
        ];
        let o = run_in(d, &args);
        assert!(o.status.success(), "demo --rank {r}: {}", stderr(&o));
    }
    let o = run_in(d, &["summary", "ranks", "--json"]);
    assert!(o.status.success(), "summary ranks: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["schema"], "tracegraph.ranks/1");
    let ranks: Vec<u64> = v["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks, [0, 1]);

    let o = run_in(
        d,
        &["demo", "--rank", "2", "--world-size", "2", "--out", "ranks"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not below --world-size 2"),
        "{}",
        stderr(&o)
    );
    let o = run_in(d, &["demo", "--rank", "0", "--out", "ranks"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "--rank without --world-size: {}",
        stderr(&o)
    );
}

#[cfg(not(feature = "demo"))]
#[test]
fn without_the_demo_feature_demo_says_so_and_is_not_offered() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(dir.path(), &["demo", "--out", "out", "--steps", "15"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("built without the `demo` feature"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.path().join("out").exists());
    let help = stdout(&run_in(dir.path(), &["--help"]));
    let commands: Vec<&str> = help
        .lines()
        .filter_map(|l| l.strip_prefix("  ")?.split_whitespace().next())
        .collect();
    assert!(commands.contains(&"summary"), "{help}");
    assert!(!commands.contains(&"demo"), "{help}");
}
