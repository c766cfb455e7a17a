//! The HTML report: self-contained, escaped, the embedded data round-trips, caps are stated.

use testkit::{SynthConfig, session_trace, write_synthetic};
use trace_analyze::{LoadOptions, Trace, load_str};
use trace_record::schema::{AllocKind, MemoryCategory, Phase, SpanKind};
use trace_record::{MemoryRecord, OpRecord, Run, TensorRecord, TraceSession};
use trace_report::{ReportOptions, build_report, embedded_json, write_html};

fn load(bytes: &[u8], name: &str) -> Trace {
    load_str(
        std::str::from_utf8(bytes).expect("utf-8"),
        name,
        LoadOptions::default(),
    )
    .expect("load")
}

fn page(trace: &Trace, baseline: Option<&Trace>, opts: &ReportOptions) -> String {
    let data = build_report(trace, baseline, opts).expect("report");
    let mut out = Vec::new();
    write_html(&data, &mut out).expect("write");
    String::from_utf8(out).expect("utf-8")
}

/// The JSON inside `<script type="application/json" id="tg-data">`.
fn embedded(html: &str) -> serde_json::Value {
    let open = r#"<script type="application/json" id="tg-data">"#;
    let start = html.find(open).expect("data element") + open.len();
    let end = start + html[start..].find("</script>").expect("end of data");
    serde_json::from_str(&html[start..end]).expect("embedded JSON parses")
}

#[test]
fn the_page_is_self_contained() {
    let trace = load(&session_trace(3), "session.jsonl");
    let html = page(&trace, None, &ReportOptions::default());
    assert!(html.starts_with("<!doctype html>"));
    assert!(html.contains("Content-Security-Policy"));
    assert!(html.contains("default-src 'none'"));
    let lower = html.to_ascii_lowercase();
    for needle in [
        "src=\"http",
        "href=\"http",
        "<link",
        "@import",
        "url(",
        "fetch(",
    ] {
        assert!(!lower.contains(needle), "the page references `{needle}`");
    }
    // One hooks script, the data, the drawing script: nothing else.
    assert_eq!(html.matches("<script").count(), 3);
    assert_eq!(html.matches("</script>").count(), 3);
    for id in [
        "op-table",
        "span-tree",
        "memory-chart",
        "step-chart",
        "graphs",
        "tg-errors",
    ] {
        assert!(html.contains(&format!("id=\"{id}\"")), "no #{id}");
    }
}

#[test]
fn the_embedded_data_round_trips_and_holds_the_analyses() {
    let trace = load(&session_trace(3), "session.jsonl");
    let data = build_report(&trace, None, &ReportOptions::default()).expect("report");
    let mut out = Vec::new();
    write_html(&data, &mut out).expect("write");
    let html = String::from_utf8(out).expect("utf-8");
    let v = embedded(&html);
    assert_eq!(v, serde_json::to_value(&data).expect("to value"));

    // The op table has every op name with its count; the span tree has every path.
    let ops = v["ops"]["rows"].as_array().expect("rows");
    let names: Vec<&str> = ops.iter().filter_map(|r| r[0].as_str()).collect();
    for n in ["matmul", "relu", "matmul_grad", "adamw", "decode"] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    let matmul = ops.iter().find(|r| r[0] == "matmul").expect("matmul");
    assert_eq!(matmul[1], 6, "3 steps x 2 layers");
    assert!(
        v["spans"]["titles"]
            .as_array()
            .expect("titles")
            .iter()
            .any(|t| t == "train_step/forward/model/l1")
    );
    // Memory: one device with a peak and its breakdown; steps and graphs present.
    let dev = &v["memory"]["devices"][0];
    assert_eq!(dev["device"], "cpu");
    assert!(dev["peak"]["bytes"].as_u64().is_some_and(|b| b >= 1024));
    assert!(
        !dev["peak_breakdown"]["rows"]
            .as_array()
            .expect("rows")
            .is_empty()
    );
    assert_eq!(v["steps"]["index"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        v["graphs"]["table"]["rows"].as_array().map(Vec::len),
        Some(3)
    );
    assert!(v["comparison"].is_null());
    assert!(v["caps"].as_array().is_some_and(Vec::is_empty));
}

#[test]
fn no_string_in_a_trace_can_close_the_script_element() {
    let evil = "</script><script>alert(1)</script><!-- & \u{2028}";
    let (session, sink) = TraceSession::in_memory(Run::new(evil, Phase::Infer, "cpu"));
    {
        let _s = session.span(evil, SpanKind::Function, None);
        let t = session.now_ns();
        session.record_op(&OpRecord {
            name: evil,
            inputs: &[],
            outputs: &[],
            shape: &[1],
            dtype: "f32",
            device: "cpu",
            start_ns: t,
            dur_ns: 5,
            in_bytes: 0,
            out_bytes: 4,
            category: None,
            flops: None,
        });
    }
    session.finish().expect("finish");
    let trace = load(&sink.bytes(), "evil.jsonl");
    let html = page(&trace, None, &ReportOptions::default());
    assert_eq!(html.matches("</script>").count(), 3);
    assert!(!html.contains("<script>alert"));
    assert!(!html.contains("<!--"));
    let v = embedded(&html);
    assert!(v["ops"]["rows"][0][0] == evil);
    // The title is escaped as HTML.
    assert!(html.contains("&lt;/script&gt;"));
    let data = build_report(&trace, None, &ReportOptions::default()).expect("report");
    let json = embedded_json(&data).expect("json");
    assert!(!json.contains('<') && !json.contains('>') && !json.contains('&'));
}

#[test]
fn a_baseline_adds_the_comparison() {
    let base = load(&session_trace(2), "base.jsonl");
    let cand = load(&session_trace(3), "candidate.jsonl");
    let html = page(&cand, Some(&base), &ReportOptions::default());
    let v = embedded(&html);
    let cmp = &v["comparison"];
    assert!(cmp.is_object());
    let summary: Vec<(String, String)> =
        serde_json::from_value(cmp["summary"].clone()).expect("pairs");
    assert!(summary.contains(&("baseline".to_string(), "base.jsonl".to_string())));
    assert!(summary.contains(&("this trace".to_string(), "candidate.jsonl".to_string())));
    assert!(summary.contains(&("steps".to_string(), "2 → 3".to_string())));
    let titles: Vec<&str> = cmp["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .filter_map(|t| t["title"].as_str())
        .collect();
    assert_eq!(
        titles,
        [
            "Span time per step (median over steps)",
            "Op time per step (median over steps)",
            "Ops in one trace only",
            "Peak logical memory",
            "Step graph fingerprints, paired by position"
        ]
    );
    let ops = &cmp["tables"][1]["rows"];
    assert!(
        ops.as_array()
            .is_some_and(|r| r.iter().any(|row| row[0] == "matmul"))
    );
}

#[test]
fn a_large_trace_is_capped_and_the_caps_are_stated() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 20_000,
            ops_per_step: 100,
            changed_step: Some(150),
            ..Default::default()
        },
    )
    .expect("synthetic");
    let trace = load(&bytes, "big.jsonl");
    let opts = ReportOptions {
        max_op_rows: 3,
        max_span_rows: 2,
        max_step_bars: 50,
        max_graph_rows: 10,
        max_comparison_rows: 5,
    };
    let data = build_report(&trace, None, &opts).expect("report");
    assert_eq!(data.ops.rows.len(), 3);
    assert_eq!(data.spans.rows.len(), 2);
    let steps = data.steps.as_ref().expect("steps");
    assert_eq!(steps.index.len(), 50);
    assert_eq!(steps.index[1], 4, "200 steps in groups of 4");
    // The changed step (and the step after it, which differs from it) stay listed.
    let graphs = data.graphs.as_ref().expect("graphs");
    assert_eq!(graphs.table.rows.len(), 10);
    assert!(
        graphs
            .table
            .rows
            .iter()
            .any(|r| r[0] == 150 && r[4] == "changed")
    );
    assert_eq!(data.caps.len(), 4, "{:?}", data.caps);
    for what in ["op table", "span tree", "step chart", "step graphs"] {
        assert!(
            data.caps.iter().any(|c| c.starts_with(what)),
            "no cap for {what}: {:?}",
            data.caps
        );
    }
    let mut out = Vec::new();
    write_html(&data, &mut out).expect("write");
    // The capped data plus the page's own CSS and scripts (about 45 KB).
    assert!(out.len() < 220_000, "{} bytes", out.len());
}

#[test]
fn the_step_chart_leaves_out_the_step_a_truncated_trace_ends_in() {
    let bytes = session_trace(3);
    let text = std::str::from_utf8(&bytes).expect("utf-8");
    // Cut just after the last step's boundary and a few lines into it.
    let last = text.rfind(r#"{"type":"step""#).expect("a step line");
    let cut = last + text[last..].find('\n').expect("line end") + 1;
    let trace = load(&bytes[..cut], "cut.jsonl");
    let partial = trace.partial_step().expect("partial step").index;
    let data = build_report(&trace, None, &ReportOptions::default()).expect("report");
    let steps = data.steps.expect("steps");
    assert!(!steps.index.contains(&partial), "{:?}", steps.index);
    assert_eq!(steps.index.len(), trace.steps.len() - 1);
    assert!(steps.note.contains("is left out"), "{}", steps.note);
}

/// Fuzz finding (`cargo xtask fuzz --seed 31337`, input 4284): a forward span ending at
/// u64::MAX ns made the step chart's phase sum overflow (a panic in debug builds). The phase
/// times saturate and the page is still written.
#[test]
fn a_span_ending_at_u64_max_does_not_overflow_the_step_chart() {
    let bytes = include_bytes!("../data/hostile-phase-times.jsonl");
    let trace = load(bytes, "hostile-phase-times.jsonl");
    let html = page(&trace, None, &ReportOptions::default());
    let data = embedded(&html);
    let phases = data["steps"]["phases_ns"].as_array().expect("step phases");
    assert!(!phases.is_empty());
    for bar in phases {
        let parts: Vec<u64> = bar
            .as_array()
            .expect("4 parts")
            .iter()
            .map(|v| v.as_u64().expect("ns"))
            .collect();
        assert_eq!(parts.len(), 4);
    }
}

/// Every table's key columns (those a reader needs to tell rows apart, kept on screen by the
/// page and measured by `cargo xtask browser-check`) come before its other columns.
fn assert_key_columns_first(v: &serde_json::Value, at: &str) {
    match v {
        serde_json::Value::Object(m) => {
            if let Some(cols) = m.get("columns").and_then(|c| c.as_array()) {
                let keys: Vec<bool> = cols.iter().map(|c| c["key"] == true).collect();
                let first_plain = keys.iter().position(|k| !k).unwrap_or(keys.len());
                assert!(
                    keys[first_plain..].iter().all(|k| !k),
                    "{at}: a key column after a plain one: {cols:?}"
                );
            }
            for (k, x) in m {
                assert_key_columns_first(x, &format!("{at}.{k}"));
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                assert_key_columns_first(x, &format!("{at}[{i}]"));
            }
        }
        _ => {}
    }
}

/// A parameter and its gradient share a label and a shape: the allocation table puts the
/// category and bytes first (key columns), so the two rows differ where a reader looks.
#[test]
fn a_parameter_and_its_gradient_differ_in_the_allocation_tables_key_columns() {
    let (session, sink) = TraceSession::in_memory(Run::new("alloc", Phase::Train, "cpu"));
    for (id, category) in [
        (1, MemoryCategory::Parameter),
        (2, MemoryCategory::Gradient),
    ] {
        session.record_tensor(&TensorRecord {
            id,
            label: Some("lm_head.weight"),
            shape: &[1000, 128],
            dtype: "f32",
            device: "cpu",
            requires_grad: true,
            bytes: 512_000,
            category,
        });
        session.record_memory(&MemoryRecord {
            kind: AllocKind::Alloc,
            storage: id,
            tensor: id,
            bytes: 512_000,
            device: "cpu",
            category,
        });
    }
    session.step();
    session.finish().expect("finish");
    let trace = load(&sink.bytes(), "alloc.jsonl");
    let v = serde_json::to_value(
        build_report(&trace, None, &ReportOptions::default()).expect("report"),
    )
    .expect("json");
    assert_key_columns_first(&v, "report");
    let t = &v["memory"]["devices"][0]["peak_allocations"];
    let cols: Vec<(&str, bool)> = t["columns"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| (c["label"].as_str().unwrap_or(""), c["key"] == true))
        .collect();
    assert_eq!(
        cols[..3],
        [("category", true), ("bytes", true), ("tensor", true)]
    );
    assert!(cols[3..].iter().all(|c| !c.1), "{cols:?}");
    let mut rows: Vec<(String, u64, String)> = t["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap_or("").to_string(),
                r[1].as_u64().unwrap_or(0),
                r[2].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        [
            (
                "gradient".to_string(),
                512_000,
                "lm_head.weight".to_string()
            ),
            (
                "parameter".to_string(),
                512_000,
                "lm_head.weight".to_string()
            )
        ]
    );
}

/// The comparison carries `tracegraph compare`'s caveat for one run a side and its verdicts:
/// each span and op row's verdict is the one trace-analyze's `compare` gives the row.
#[test]
fn the_comparison_carries_compares_caveat_and_verdicts() {
    let base = load(&session_trace(4), "base.jsonl");
    let cand = load(&session_trace(5), "candidate.jsonl");
    let data = build_report(&cand, Some(&base), &ReportOptions::default()).expect("report");
    let v = serde_json::to_value(&data).expect("json");
    assert_key_columns_first(&v, "report");
    let cmp = data.comparison.expect("a comparison");
    assert!(
        cmp.caveat
            .starts_with("one run a side: the intervals cover the step-to-step spread only"),
        "{}",
        cmp.caveat
    );
    assert!(
        cmp.summary
            .iter()
            .any(|(k, x)| k == "intervals" && *x == cmp.caveat)
    );
    assert!(cmp.legend.contains("within noise"), "{}", cmp.legend);
    let c =
        trace_analyze::compare(&base, &cand, &trace_analyze::new_step_cache()).expect("compare");
    let verdict_col = |t: &trace_report::TableData| {
        t.columns
            .iter()
            .position(|c| c.label == "verdict")
            .expect("a verdict column")
    };
    let spans = &cmp.tables[0];
    let j = verdict_col(spans);
    let mut checked = 0;
    for s in c.spans.iter() {
        let Some(ch) = &s.change else { continue };
        let row = spans
            .rows
            .iter()
            .find(|r| r[0] == s.path.as_str())
            .expect("every span path has a row");
        assert_eq!(row[j], ch.verdict.label(), "{}", s.path);
        checked += 1;
    }
    let ops = &cmp.tables[1];
    let j = verdict_col(ops);
    for o in &c.ops {
        let Some(ch) = &o.change else { continue };
        let row = ops
            .rows
            .iter()
            .find(|r| r[0] == o.name.as_str())
            .expect("every op has a row");
        assert_eq!(row[j], ch.verdict.label(), "{}", o.name);
        checked += 1;
    }
    assert!(checked > 0, "no row had a verdict to compare");
}
