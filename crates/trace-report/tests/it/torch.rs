//! The torch section: the comparison's rows in its order, with trace-analyze's figures.
//!
//! Real pairs (the small trace and a sampled demo trace beside a real torch.profiler Llama
//! run), a cap that is stated, and a torch op name that cannot break the page.

use serde_json::{Value, json};
use trace_analyze::runs::{
    CandleSource, TorchCompareOptions, TorchComparison, compare_with_torch, load_torch_path,
    load_torch_reader,
};
use trace_analyze::{LoadOptions, Trace, format_ns, format_share, load_path, load_str};
use trace_report::{ReportData, ReportOptions, TorchData, build_report, write_html};

/// A real sampled trace: `tracegraph demo --steps 10 --sample` (trace-export's fixture).
const DEMO: &str = include_str!("../../../trace-export/tests/data/sampled-demo.jsonl");

fn small() -> Trace {
    load_path(&testkit::small_jsonl(), LoadOptions::default()).expect("the small trace")
}

fn torch_llama() -> trace_analyze::runs::TorchRun {
    load_torch_path(&testkit::data_dir().join("torch/llama.trace.json.gz"))
        .expect("the torch Llama fixture")
}

fn report(trace: &Trace, c: &TorchComparison, opts: &ReportOptions) -> ReportData {
    build_report(trace, None, opts)
        .expect("report")
        .with_torch(c, opts)
}

/// What the CLI writes for a signed loss.
fn signed(v: f64) -> String {
    if v >= 0.0 {
        format!("+{}", format_ns(v))
    } else {
        format!("-{}", format_ns(-v))
    }
}

/// What the CLI writes for a ratio (absent: null).
fn ratio(r: Option<f64>) -> Value {
    match r {
        Some(r) if r >= 1.0 => json!(format!("{r:.2}× slower")),
        Some(r) if r > 0.0 => json!(format!("{:.2}× faster", 1.0 / r)),
        _ => Value::Null,
    }
}

fn or_null(v: Option<String>) -> Value {
    v.map_or(Value::Null, Value::String)
}

fn labels(t: &trace_report::TableData) -> Vec<&str> {
    t.columns.iter().map(|c| c.label.as_str()).collect()
}

/// Every row, figure and diagnosis of `t` is `c`'s, in `c`'s order.
fn check(t: &TorchData, c: &TorchComparison) {
    let sampled = matches!(c.candle_source, CandleSource::Sampled { .. });
    // The two sides and the step ratio.
    assert_eq!(t.summary[0].0, "Candle");
    assert!(
        t.summary[0].1.starts_with(&format!(
            "{}: {} per step over ",
            c.candle.source,
            format_ns(c.candle.step_ns)
        )),
        "{:?}",
        t.summary[0]
    );
    assert_eq!(t.summary[1].0, "torch");
    assert!(
        t.summary[1].1.starts_with(&format!(
            "{}: {} per step over {} steps",
            c.torch.source,
            format_ns(c.torch.step_ns),
            c.torch.steps.len()
        )),
        "{:?}",
        t.summary[1]
    );
    assert_eq!(
        t.summary.get(2).map(|(k, v)| (k.as_str(), json!(v))),
        c.step_ratio.map(|r| ("Candle's step", ratio(Some(r))))
    );
    assert_eq!(t.warnings, c.warnings);

    // Op kinds: the comparison's rows, in its order.
    let mut want_cols = vec!["kind", "Candle"];
    if sampled {
        want_cols.push("95% interval");
    }
    want_cols.extend([
        "torch",
        "Candle - torch",
        "ratio",
        "Candle's top ops",
        "torch's top ops",
    ]);
    assert_eq!(labels(&t.kinds), want_cols);
    assert!(
        t.kinds
            .note
            .as_deref()
            .unwrap_or_default()
            .contains(&c.candle_source.describe())
    );
    assert_eq!(t.kinds.rows.len(), c.kinds.len());
    assert_eq!(t.kinds.total_rows, c.kinds.len());
    let top = |ops: &[(String, f64)]| {
        if ops.is_empty() {
            Value::Null
        } else {
            json!(
                ops.iter()
                    .map(|(n, ns)| format!("{n} ({})", format_ns(*ns)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    };
    for (row, r) in t.kinds.rows.iter().zip(&c.kinds) {
        let mut want = vec![json!(r.kind.label()), or_null(r.candle_ns.map(format_ns))];
        if sampled {
            want.push(or_null(
                r.candle_interval
                    .map(|(lo, hi)| format!("{} - {}", format_ns(lo), format_ns(hi))),
            ));
        }
        want.extend([
            json!(format_ns(r.torch_ns)),
            or_null(r.loss_ns.map(signed)),
            ratio(r.ratio),
            top(&r.candle_ops),
            top(&r.torch_ops),
        ]);
        assert_eq!(row, &want);
    }
    assert_eq!(
        t.copy_layout,
        format!(
            "copy / layout: {} of Candle's step, {} of torch's",
            c.candle_copy_share.map_or("-".into(), format_share),
            format_share(c.torch_copy_share)
        )
    );

    // Layers.
    assert_eq!(
        labels(&t.layers),
        ["layer", "Candle", "torch", "Candle - torch", "ratio"]
    );
    assert_eq!(t.layers.rows.len(), c.layers.len());
    for (row, r) in t.layers.rows.iter().zip(&c.layers) {
        assert_eq!(
            row,
            &vec![
                json!(r.path),
                json!(format_ns(r.candle_ns)),
                json!(format_ns(r.torch_ns)),
                json!(signed(r.loss_ns)),
                ratio(r.ratio),
            ]
        );
    }
    assert!(t.layers.empty.contains("--layer-map"));
    match &t.unmatched {
        Some(u) => assert!(
            u.contains(&format!(
                "{} Candle span path(s), {} torch range path(s)",
                c.candle_only_layers.len(),
                c.torch_only_layers.len()
            )),
            "{u}"
        ),
        None => assert!(c.candle_only_layers.is_empty() && c.torch_only_layers.is_empty()),
    }

    // Diagnoses, with their evidence.
    assert_eq!(t.diagnoses.len(), c.diagnoses.len());
    for (d, want) in t.diagnoses.iter().zip(&c.diagnoses) {
        assert_eq!(d.rule, want.rule);
        assert_eq!(d.text, want.text);
        assert_eq!(d.evidence, want.evidence);
        assert_eq!(d.loss, signed(want.loss_ns));
    }
    assert!(t.no_diagnosis.contains("1.5× slower and 5%"));
}

#[test]
fn the_small_trace_beside_torch_s_llama_gives_the_comparison_s_rows_and_figures() {
    let trace = small();
    let torch = torch_llama();
    let opts = ReportOptions::default();
    for map in [
        Vec::new(),
        vec![("llama.forward".to_string(), "train_step".to_string())],
    ] {
        let c = compare_with_torch(
            &trace,
            &torch,
            &TorchCompareOptions {
                layer_map: map.clone(),
                ..Default::default()
            },
        );
        assert_eq!(c.candle_source, CandleSource::CapturedOps);
        assert!(!c.kinds.is_empty());
        assert_eq!(c.layers.is_empty(), map.is_empty(), "{:?}", c.layers);
        let data = report(&trace, &c, &opts);
        assert!(
            data.subtitle
                .ends_with(&format!("beside torch {}", c.torch.source))
        );
        check(data.torch.as_ref().expect("a torch section"), &c);
    }
}

#[test]
fn a_sampled_trace_beside_torch_shows_the_interval_and_the_diagnoses() {
    let trace = load_str(DEMO, "sampled-demo.jsonl", LoadOptions::default()).expect("load");
    let c = compare_with_torch(&trace, &torch_llama(), &TorchCompareOptions::default());
    assert!(
        matches!(c.candle_source, CandleSource::Sampled { .. }),
        "{:?}",
        c.candle_source
    );
    assert!(!c.diagnoses.is_empty());
    let data = report(&trace, &c, &ReportOptions::default());
    check(data.torch.as_ref().expect("a torch section"), &c);
}

#[test]
fn a_cut_torch_table_is_stated_and_keeps_the_first_rows() {
    let trace = small();
    let c = compare_with_torch(&trace, &torch_llama(), &TorchCompareOptions::default());
    assert!(c.kinds.len() > 3);
    let opts = ReportOptions {
        max_comparison_rows: 3,
        ..ReportOptions::default()
    };
    let data = report(&trace, &c, &opts);
    let t = data.torch.as_ref().unwrap();
    assert_eq!(t.kinds.rows.len(), 3);
    assert_eq!(t.kinds.total_rows, c.kinds.len());
    assert_eq!(t.kinds.rows[0][0], json!(c.kinds[0].kind.label()));
    assert!(
        data.caps
            .iter()
            .any(|cap| cap.starts_with("torch comparison op kinds: the 3 of")),
        "{:?}",
        data.caps
    );
}

#[test]
fn the_page_draws_the_torch_section_and_escapes_torch_s_names() {
    let trace = small();
    let hostile = "aten::</script><img src=x onerror=alert(1)>";
    let torch_json = format!(
        r#"{{"traceEvents":[
        {{"ph":"X","cat":"user_annotation","name":"ProfilerStep#0","pid":1,"tid":1,"ts":0.0,"dur":100.0}},
        {{"ph":"X","cat":"cpu_op","name":"{hostile}","pid":1,"tid":1,"ts":1.0,"dur":50.0}}]}}"#
    );
    let torch = load_torch_reader(torch_json.as_bytes(), "hostile.json").expect("torch trace");
    let c = compare_with_torch(&trace, &torch, &TorchCompareOptions::default());
    assert!(
        c.kinds
            .iter()
            .any(|k| k.torch_ops.iter().any(|(n, _)| n == hostile))
    );
    let data = report(&trace, &c, &ReportOptions::default());
    let mut out = Vec::new();
    write_html(&data, &mut out).expect("write");
    let html = String::from_utf8(out).unwrap();
    assert!(html.contains(r#"id="torch-section""#));
    assert!(!html.contains("<img src=x"));
    assert_eq!(html.matches("</script>").count(), 3);
    let open = r#"<script type="application/json" id="tg-data">"#;
    let start = html.find(open).unwrap() + open.len();
    let end = start + html[start..].find("</script>").unwrap();
    let v: Value = serde_json::from_str(&html[start..end]).unwrap();
    let rows = v["torch"]["kinds"]["rows"].as_array().unwrap();
    assert!(rows.iter().any(|r| {
        r.as_array()
            .unwrap()
            .iter()
            .any(|cell| cell.as_str().is_some_and(|s| s.contains(hostile)))
    }));

    // Without a torch run the page's data has no torch section at all.
    let plain = build_report(&trace, None, &ReportOptions::default()).unwrap();
    assert!(plain.torch.is_none());
    let v: Value = serde_json::from_str(&trace_report::embedded_json(&plain).unwrap()).unwrap();
    assert!(v.get("torch").is_none());
}
