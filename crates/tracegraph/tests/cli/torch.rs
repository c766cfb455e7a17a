//! `compare CANDLE --against-torch TORCH`: the comparison end to end, and bad torch traces.

use std::path::PathBuf;

use crate::{run_in, stderr, stdout};

fn torch_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testkit/data/torch")
        .join(name)
}

#[test]
fn a_candle_trace_beside_a_real_torch_llama_prints_kinds_layers_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let small = testkit::small_jsonl();
    let torch = torch_fixture("llama.trace.json.gz");
    let args = |json: bool| {
        let mut v = vec![
            "compare".to_string(),
            small.display().to_string(),
            "--against-torch".to_string(),
            torch.display().to_string(),
        ];
        if json {
            v.push("--json".into());
        }
        v
    };
    let text_args = args(false);
    let o = run_in(
        dir.path(),
        &text_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for want in ["by op kind", "aten::mm", "by layer", "diagnoses"] {
        assert!(out.contains(want), "{want}: {out}");
    }
    let json_args = args(true);
    let o = run_in(
        dir.path(),
        &json_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "tracegraph.compare_torch/1");
    assert_eq!(v["torch"]["steps"].as_array().unwrap().len(), 4);
    assert!(
        v["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["kind"] == "matmul")
    );
}

#[test]
fn a_bad_torch_trace_names_file_event_and_field_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.json"),
        r#"{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1.0,"dur":2.0},{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1.0,"dur":"x"}]}"#,
    )
    .unwrap();
    let small = testkit::small_jsonl().display().to_string();
    let o = run_in(
        dir.path(),
        &["compare", &small, "--against-torch", "bad.json"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("bad.json") && e.contains("event 1") && e.contains("dur"),
        "{e}"
    );
    // Usage: one Candle trace; the torch options need --against-torch.
    let o = run_in(
        dir.path(),
        &["compare", &small, &small, "--against-torch", "bad.json"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = run_in(
        dir.path(),
        &["compare", &small, &small, "--torch-steps", "2..3"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
