//! `report TRACE --against-torch TORCH`: the page shows the table `compare --against-torch` prints.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{run_in, stderr, stdout};

fn torch_llama() -> String {
    testkit::data_dir()
        .join("torch/llama.trace.json.gz")
        .display()
        .to_string()
}

/// A real sampled demo trace (trace-export's fixture): Candle's side is the sampled estimate
/// and the diagnoses are not empty.
fn sampled_demo() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../trace-export/tests/data/sampled-demo.jsonl")
        .display()
        .to_string()
}

/// Runs `tracegraph args...` in `dir`, wanting exit 0; its stdout.
fn ok(dir: &Path, args: &[&str]) -> String {
    let o = run_in(dir, args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

/// The page's embedded data.
fn embedded(page: &Path) -> Value {
    let html = std::fs::read_to_string(page).expect("the page");
    assert!(html.contains(r#"id="torch-section""#));
    let open = r#"<script type="application/json" id="tg-data">"#;
    let start = html.find(open).expect("data element") + open.len();
    let end = start + html[start..].find("</script>").expect("end of data");
    serde_json::from_str(&html[start..end]).expect("embedded JSON parses")
}

/// The line of the CLI's table whose first cell is `first`.
fn line<'a>(text: &'a str, first: &str) -> &'a str {
    text.lines()
        .find(|l| {
            l.strip_prefix(first)
                .is_some_and(|rest| rest.starts_with("  "))
        })
        .unwrap_or_else(|| panic!("no row `{first}` in\n{text}"))
}

/// Each cell of the page's `table` is in the CLI's row of the same name, in order (absent
/// cells are `-` there; a top-ops cell's first op is the CLI's top op, by `--json`'s name);
/// the rows come in the same order.
fn same_rows(text: &str, table: &Value, top_ops: &[Option<String>]) {
    let labels: Vec<&str> = table["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["label"].as_str().unwrap())
        .collect();
    let mut last = 0;
    for (i, row) in table["rows"].as_array().unwrap().iter().enumerate() {
        let row = row.as_array().unwrap();
        let first = row[0].as_str().unwrap();
        let l = line(text, first);
        let at = text.find(l).unwrap();
        assert!(at > last, "row `{first}` is out of the CLI's order");
        last = at;
        let mut rest = &l[first.len()..];
        for (label, cell) in labels.iter().zip(row).skip(1) {
            let want = match (label.ends_with("top ops"), cell.as_str()) {
                (true, Some(ops)) => {
                    let name = top_ops[i].clone().expect("a top op in --json");
                    assert!(ops.starts_with(&format!("{name} (")), "{ops} / {name}");
                    name
                }
                (true, None) => "-".to_string(),
                (false, Some(s)) => s.to_string(),
                (false, None) if *label == "95% interval" => continue,
                (false, None) => "-".to_string(),
            };
            // Top-op columns come last; the page lists both, the CLI Candle's then torch's.
            let pos = rest
                .find(&want)
                .unwrap_or_else(|| panic!("`{want}` ({label}) not in `{l}`"));
            rest = &rest[pos + want.len()..];
        }
    }
}

#[test]
fn the_report_shows_the_kind_table_layers_and_diagnoses_of_compare_against_torch() {
    let dir = tempfile::tempdir().unwrap();
    let (demo, torch) = (sampled_demo(), torch_llama());
    ok(
        dir.path(),
        &[
            "report",
            &demo,
            "--against-torch",
            &torch,
            "-o",
            "page.html",
        ],
    );
    let v = embedded(&dir.path().join("page.html"));
    let t = &v["torch"];
    let text = ok(dir.path(), &["compare", &demo, "--against-torch", &torch]);
    let json: Value = serde_json::from_str(&ok(
        dir.path(),
        &["compare", &demo, "--against-torch", &torch, "--json"],
    ))
    .unwrap();
    let first_op = |side: &str| -> Vec<Option<String>> {
        json["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k[side][0][0].as_str().map(str::to_string))
            .collect()
    };

    // The kind table: the CLI's rows, figures and order; the interval of a sampled estimate.
    let kinds = &t["kinds"];
    assert_eq!(
        kinds["rows"].as_array().unwrap().len(),
        json["kinds"].as_array().unwrap().len()
    );
    assert!(
        kinds["columns"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["label"] == "95% interval")
    );
    // Candle's top op, then torch's: checked one side at a time.
    let (candle_ops, torch_ops) = (first_op("candle_ops"), first_op("torch_ops"));
    let mut one_side = kinds.clone();
    for row in one_side["rows"].as_array_mut().unwrap() {
        row.as_array_mut().unwrap().pop();
    }
    one_side["columns"].as_array_mut().unwrap().pop();
    same_rows(&text, &one_side, &candle_ops);
    let mut other = kinds.clone();
    for row in other["rows"].as_array_mut().unwrap() {
        let cells = row.as_array_mut().unwrap();
        cells.remove(cells.len() - 2);
    }
    let n = other["columns"].as_array().unwrap().len();
    other["columns"].as_array_mut().unwrap().remove(n - 2);
    same_rows(&text, &other, &torch_ops);
    assert!(text.contains(t["copy_layout"].as_str().unwrap()));
    // Each side's line and Candle's step against torch's.
    for p in t["summary"].as_array().unwrap() {
        let v = p[1].as_str().unwrap();
        assert!(text.contains(v), "{v}");
    }
    for w in t["warnings"].as_array().unwrap() {
        assert!(text.contains(&format!("warning: {}", w.as_str().unwrap())));
    }

    // The diagnoses: the CLI's, in its order, with their evidence.
    let diagnoses = t["diagnoses"].as_array().unwrap();
    assert!(!diagnoses.is_empty());
    assert!(text.contains("diagnoses, by what Candle loses"));
    for (i, d) in diagnoses.iter().enumerate() {
        let head = format!("{}. {}", i + 1, d["text"].as_str().unwrap());
        assert!(text.contains(&head), "{head}");
        for e in d["evidence"].as_array().unwrap() {
            assert!(text.contains(&format!("   - {}", e.as_str().unwrap())));
        }
    }
}

#[test]
fn a_layer_map_gives_the_layer_table_and_steps_choose_like_with_like() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("map.txt"),
        "# torch => Candle\nllama.forward => train_step\n",
    )
    .unwrap();
    let small = testkit::small_jsonl().display().to_string();
    let torch = torch_llama();
    let args = [
        "--against-torch",
        &torch,
        "--layer-map",
        "map.txt",
        "--candle-steps",
        "0..1",
        "--torch-steps",
        "2..3",
    ];
    let mut report = vec!["report", &small, "-o", "page.html"];
    report.extend(args);
    ok(dir.path(), &report);
    let v = embedded(&dir.path().join("page.html"));
    let t = &v["torch"];
    let mut compare = vec!["compare", &small];
    compare.extend(args);
    let text = ok(dir.path(), &compare);
    assert!(text.contains("over 2 steps (2..3)"), "{text}");
    assert!(
        t["summary"][1][1]
            .as_str()
            .unwrap()
            .contains("over 2 steps (2..3)")
    );
    let layers = &t["layers"];
    assert_eq!(layers["rows"][0][0], "train_step");
    same_rows(&text, layers, &[]);
    let unmatched = t["unmatched"].as_str().unwrap();
    let cli = text.lines().find(|l| l.starts_with("unmatched: ")).unwrap();
    assert!(
        unmatched.starts_with(cli.trim_end_matches(" (--json lists them)")),
        "{unmatched} / {cli}"
    );
    // Without a torch run the page has no torch section.
    ok(dir.path(), &["report", &small, "-o", "plain.html"]);
    let html = std::fs::read_to_string(dir.path().join("plain.html")).unwrap();
    let open = r#"<script type="application/json" id="tg-data">"#;
    let start = html.find(open).unwrap() + open.len();
    assert!(!html[start..].contains(r#""torch":"#));
}

#[test]
fn bad_torch_input_fails_before_writing_and_the_torch_options_need_against_torch() {
    let dir = tempfile::tempdir().unwrap();
    let small = testkit::small_jsonl().display().to_string();
    std::fs::write(dir.path().join("bad.json"), r#"{"traceEvents":[{"ph":"X"#).unwrap();
    std::fs::write(dir.path().join("map.txt"), "nonsense\n").unwrap();
    let torch = torch_llama();
    for (args, code, says) in [
        (
            vec!["report", &small, "--against-torch", "bad.json"],
            3,
            "bad.json",
        ),
        (
            vec![
                "report",
                &small,
                "--against-torch",
                &torch,
                "--layer-map",
                "map.txt",
            ],
            2,
            "map.txt:1",
        ),
        (
            vec!["report", &small, "--torch-steps", "2..3"],
            2,
            "--against-torch",
        ),
        (
            vec![
                "report",
                &small,
                "--against-torch",
                &torch,
                "--candle-steps",
                "5..2",
            ],
            2,
            "5..2",
        ),
    ] {
        let mut args = args.clone();
        args.extend(["-o", "page.html"]);
        let o = run_in(dir.path(), &args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(!dir.path().join("page.html").exists(), "{args:?}");
    }
}
