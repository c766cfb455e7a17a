//! The report's sampled op table beside the flame graph: the analysis's numbers, in the page.
//!
//! On a real sampled trace (`tracegraph demo --steps 10 --sample`), every span path and op row
//! of `sampled_op_table` (what `tracegraph ops --sampled` prints) is in the page's embedded
//! data with the same samples, shares, intervals and estimates.

use serde_json::Value;
use trace_analyze::{LoadOptions, SampledOpOptions, Trace, load_str, sampled_op_table};
use trace_report::{ReportOptions, build_report, write_html};

/// A real sampled trace: `tracegraph demo --steps 10 --sample` (trace-export's fixture).
const DEMO: &str = include_str!("../../../trace-export/tests/data/sampled-demo.jsonl");

fn load(text: &str) -> Trace {
    load_str(text, "sampled.jsonl", LoadOptions::default()).expect("load")
}

fn page(trace: &Trace) -> String {
    let data = build_report(trace, None, &ReportOptions::default()).expect("report");
    let mut out = Vec::new();
    write_html(&data, &mut out).expect("write");
    String::from_utf8(out).expect("utf-8")
}

/// The JSON inside `<script type="application/json" id="tg-data">`.
fn embedded(html: &str) -> Value {
    let open = r#"<script type="application/json" id="tg-data">"#;
    let start = html.find(open).expect("data element") + open.len();
    let end = start + html[start..].find("</script>").expect("end of data");
    serde_json::from_str(&html[start..end]).expect("embedded JSON parses")
}

/// A cell as a number (`None` for null).
fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn close(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * a.abs().max(1.0),
        (None, None) => true,
        _ => false,
    }
}

#[test]
fn the_page_shows_the_sampled_op_table_with_the_analysis_numbers() {
    let trace = load(DEMO);
    // The demo has few ops per span: the page's per-span cap cuts nothing.
    let want = sampled_op_table(&trace, &SampledOpOptions { limit: None }).expect("samples");
    assert!(want.in_ops > 0, "the demo's samples name Candle ops");
    let html = page(&trace);
    // The page draws it beside the flame graph.
    assert!(html.contains(r#"el("div", { id: "flame-ops" })"#));
    assert!(html.contains("Sampled op table"));
    let data = embedded(&html);
    let table = &data["flame"]["ops"];
    let rows = table["rows"].as_array().expect("sampled op rows");
    let depth = table["depth"].as_array().expect("a tree");
    let class = table["row_class"].as_array().expect("row classes");
    let labels: Vec<&str> = table["columns"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| c["label"].as_str().expect("label"))
        .collect();
    assert_eq!(
        labels,
        [
            "span path / op",
            "kind",
            "samples",
            "share",
            "95% low",
            "95% high",
            "self / est. self",
            "est. CPU"
        ]
    );
    let note = table["note"].as_str().expect("note");
    assert!(
        note.starts_with(&format!("{} samples: {} (", want.samples, want.in_ops)),
        "{note}"
    );
    // Row by row: a span path, then its ops, with the analysis's numbers.
    let mut i = 0;
    for sp in &want.spans {
        let r = &rows[i];
        assert_eq!(r[0], sp.path.as_str());
        assert_eq!(
            (depth[i].as_u64(), class[i].as_str()),
            (Some(0), Some("span"))
        );
        assert_eq!(r[2].as_u64(), Some(sp.samples));
        assert_eq!(r[6].as_u64(), sp.self_ns);
        i += 1;
        for op in &sp.rows {
            let r = &rows[i];
            assert_eq!(r[0], op.op.as_str(), "in {}", sp.path);
            assert_eq!(
                (depth[i].as_u64(), class[i].as_str()),
                (Some(1), Some("op"))
            );
            assert_eq!(r[2].as_u64(), Some(op.samples));
            assert!(close(num(&r[3]), Some(op.share)), "{r:?} vs {op:?}");
            assert!(close(num(&r[4]), Some(op.share_low)), "{r:?} vs {op:?}");
            assert!(close(num(&r[5]), Some(op.share_high)), "{r:?} vs {op:?}");
            assert_eq!(r[6].as_u64(), op.est_self_ns);
            assert_eq!(r[7].as_u64(), op.est_cpu_ns);
            assert_eq!(r[1].is_null(), op.kind.is_none());
            i += 1;
        }
    }
    assert_eq!(i, rows.len(), "no rows beyond the analysis's");
    // The demo's training step is matmuls: a tensor op row names it.
    assert!(
        rows.iter()
            .any(|r| r[0].as_str().is_some_and(|o| o.contains("matmul")) && r[1] == "tensor"),
        "{rows:?}"
    );
}

/// One span path whose samples ran in `ops` distinct Tensor methods, one stack each.
fn many_ops_trace(ops: u64) -> Trace {
    use trace_record::schema::{
        Event, ExecStep, FrameEvent, Phase, SamplerEvent, SamplesEvent, SpanKind, StackEvent,
    };
    use trace_record::{Run, TraceSession};
    let (session, sink) = TraceSession::in_memory(Run::new("ops", Phase::Infer, "cpu"));
    let span = {
        let g = session.span("forward", SpanKind::Function, Some(ExecStep::Forward));
        g.id().map(|s| s.0)
    };
    let mut events = vec![Event::Frame(FrameEvent {
        id: 1,
        func: "main".into(),
        file: Some("src/main.rs".into()),
        inlined: false,
    })];
    for i in 0..ops {
        let (f, st) = (100 + i, 100 + i);
        events.push(Event::Frame(FrameEvent {
            id: f,
            func: format!("candle_core::tensor::Tensor::op{i}"),
            file: None,
            inlined: false,
        }));
        events.push(Event::Stack(StackEvent {
            id: st,
            frames: vec![1, f],
        }));
        // More samples for the first ops, so the kept ones are known.
        events.push(Event::Samples(SamplesEvent {
            step: 0,
            thread: 7,
            stack: st,
            n: 2 * ops - i,
            phase: Some(ExecStep::Forward),
            span,
        }));
    }
    let taken = (0..ops).map(|i| 2 * ops - i).sum();
    events.push(Event::Sampler(SamplerEvent {
        step: 0,
        hz: 1000,
        taken,
        lost: 0,
        cpu_ns: Some(taken * 1_000_000),
        sampler_cpu_ns: None,
        ts: 0,
        dur: 1,
        source: None,
    }));
    assert_eq!(session.record_sampled(&events), events.len());
    session.finish().expect("finish");
    load(std::str::from_utf8(&sink.bytes()).expect("utf-8"))
}

#[test]
fn many_ops_per_span_are_cut_into_other_ops_and_the_cut_is_stated() {
    let data = build_report(&many_ops_trace(50), None, &ReportOptions::default()).expect("report");
    let table = data
        .flame
        .as_ref()
        .and_then(|f| f.ops.as_ref())
        .expect("op table");
    let ops: Vec<&Value> = table
        .rows
        .iter()
        .zip(table.depth.as_ref().expect("a tree"))
        .filter(|(_, d)| **d == 1)
        .map(|(r, _)| &r[0])
        .collect();
    // 40 ops by samples, then the other ten in one row: every sample still counted.
    assert_eq!(ops.len(), 41, "{ops:?}");
    assert_eq!(ops[0], "op0");
    assert_eq!(ops[40], trace_analyze::OTHER_OPS);
    let samples: u64 = table
        .rows
        .iter()
        .zip(table.depth.as_ref().expect("a tree"))
        .filter(|(_, d)| **d == 1)
        .map(|(r, _)| r[2].as_u64().expect("samples"))
        .sum();
    assert_eq!(samples, (0..50).map(|i| 100 - i).sum::<u64>());
    assert!(
        data.caps
            .iter()
            .any(|c| c.starts_with("sampled op table: the 40 ops")),
        "{:?}",
        data.caps
    );
    // Without the cut, no cap is stated.
    let data = build_report(&many_ops_trace(5), None, &ReportOptions::default()).expect("report");
    assert!(!data.caps.iter().any(|c| c.starts_with("sampled op table")));
}
