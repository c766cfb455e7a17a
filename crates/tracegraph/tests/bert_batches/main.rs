//! The profile_bert_batches example run and checked through the analyses and the CLI.
//!
//! A tiny random-weight candle-transformers BERT encoding batches whose sequence length
//! alternates: two graphs that alternate, and BERT's own spans under the forward op.
//!
//! Its own test binary: the example installs a global `tracing` subscriber, once per process.
//! Candle comes through the `demo` feature's dependencies (on by default).

#![cfg(feature = "demo")]

#[path = "../../../trace-candle/examples/profile_bert_batches.rs"]
#[allow(dead_code, unreachable_pub)]
mod profile_bert_batches;

#[path = "../common/cli.rs"]
mod cli;
use cli::cli;

use trace_analyze::{
    GraphPattern, LoadOptions, graph_report, load_path, new_step_cache, span_tree,
};

#[test]
fn bert_batches_of_two_lengths_are_two_alternating_graphs_with_berts_spans() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile_bert_batches.trace.jsonl");
    profile_bert_batches::run(&path).unwrap();
    let trace = load_path(&path, LoadOptions { strict: true }).unwrap();
    let batches = profile_bert_batches::BATCHES;
    assert_eq!(trace.steps.len(), batches, "{:?}", trace.steps);

    // Two graphs, told apart by the input's shape, alternating step by step.
    let graphs = graph_report(&trace, &new_step_cache()).unwrap();
    assert_eq!(graphs.distinct_graphs, 2);
    assert_eq!(graphs.pattern, GraphPattern::Alternating);
    assert_eq!(graphs.stable_from_step, None, "never stable: it alternates");
    let groups: Vec<(&str, &str, u64)> = graphs
        .groups
        .iter()
        .map(|g| (g.label.as_str(), g.signature.as_str(), g.step_time.count))
        .collect();
    let half = (batches / 2) as u64;
    assert_eq!(
        groups,
        [
            ("A", "bert.forward([4, 16])", half),
            ("B", "bert.forward([4, 48])", half)
        ]
    );
    for (i, step) in graphs.steps.iter().enumerate() {
        assert_eq!(
            step.fingerprint,
            graphs.groups[i % 2].fingerprint,
            "step {i}"
        );
        assert_eq!(step.changed, i > 0, "step {i}");
    }
    let diff = graphs.steps[1].diff.as_ref().unwrap();
    assert_eq!(diff.what, "input 0 shape [4, 16] → [4, 48]");
    let verdict = "2 distinct graphs, alternating: A bert.forward([4, 16]) × 4, \
                   B bert.forward([4, 48]) × 4";
    assert_eq!(graphs.verdict, verdict);

    // BERT's spans cover every layer, each under the forward op.
    let tree = span_tree(&trace);
    let paths: Vec<&str> = tree.nodes.iter().map(|n| n.path.as_str()).collect();
    for layer in 0..2 {
        // Singletons without `#0` (model, encoder, attn, ...), numbered siblings with it.
        let at = format!("bert.forward/model/encoder/layer#{layer}");
        for part in [
            "attn/self-attn/softmax",
            "attn/self-out/layer-norm",
            "inter/hidden-act",
            "out/linear",
        ] {
            let want = format!("{at}/{part}");
            assert!(
                paths.contains(&want.as_str()),
                "{want} missing from {paths:?}"
            );
        }
    }
    assert!(
        paths.iter().all(|p| p.starts_with("bert.forward")),
        "{paths:?}"
    );

    // The CLI says the same.
    let p = path.to_str().unwrap();
    for cmd in ["graph", "summary"] {
        let (code, out) = cli(&[cmd, p]);
        assert_eq!(code, 0, "{cmd}: {out}");
        assert!(out.contains(verdict), "{cmd}: {out}");
    }

    // By input shape: the forward op and every BERT span below it split by batch shape
    // (the op's input shape, inherited by the model's spans), each shape half the batches.
    let shapes = trace_analyze::span_shape_table(&trace);
    let rows = |path: &str| -> Vec<(String, u64)> {
        shapes
            .rows
            .iter()
            .filter(|r| r.path == path)
            .map(|r| (r.input_shape.clone().unwrap_or_default(), r.count))
            .collect()
    };
    let half = (batches / 2) as u64;
    let want = vec![("[4, 16]".to_string(), half), ("[4, 48]".to_string(), half)];
    assert_eq!(rows("bert.forward"), want);
    assert_eq!(
        rows("bert.forward/model/encoder/layer#1/attn/self-attn"),
        want
    );
    assert_eq!(shapes.shaped_rows, shapes.rows.len());
    // Step statistics per graph where spans are shown (the page's summary has them too).
    let (code, out) = cli(&["spans", p]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("A bert.forward([4, 16]): 4 step(s), step time"),
        "{out}"
    );
    assert!(
        out.contains("B bert.forward([4, 48]): 4 step(s), step time"),
        "{out}"
    );
    let data = trace_report::build_report(&trace, None, &Default::default()).unwrap();
    let html = {
        let mut page = Vec::new();
        trace_report::write_html(&data, &mut page).unwrap();
        String::from_utf8(page).unwrap()
    };
    assert!(html.contains("step time, graph B"), "the report's summary");
    let (code, out) = cli(&["spans", "--by-shape", p]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("[4, 48]"), "{out}");
}
