//! The tracing layer: `tracing` spans become trace spans with the right nesting, alongside
//! tracing-chrome in one subscriber.

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use trace_candle::TraceLayer;
use trace_record::schema::{Event, Phase, SpanKind};
use tracing_subscriber::layer::SubscriberExt;

use super::{capture, events, finish_and_read};

#[test]
fn tracing_spans_nest_and_compose_with_tracing_chrome() {
    let (capture, sink) = capture(Phase::Infer);
    let dir = tempfile::tempdir().unwrap();
    let chrome_path = dir.path().join("chrome.json");
    let (chrome, flush) = tracing_chrome::ChromeLayerBuilder::new()
        .file(&chrome_path)
        .build();
    let layer = TraceLayer::from_arc(Arc::clone(capture.session())).with_kind(SpanKind::Module);
    let subscriber = tracing_subscriber::registry().with(layer).with(chrome);
    let x = Tensor::ones((2, 2), DType::F32, &Device::Cpu).unwrap();
    tracing::subscriber::with_default(subscriber, || {
        let model = tracing::info_span!("model");
        let _m = model.enter();
        for _ in 0..2 {
            let _attn = tracing::info_span!("attention").entered();
            {
                let _lin = tracing::info_span!("linear").entered();
                capture.op("matmul", &[&x, &x], || x.matmul(&x)).unwrap();
            }
        }
        let _emb = tracing::info_span!("embedding").entered();
    });
    drop(flush);
    capture.step();
    let trace = finish_and_read(&capture, &sink);
    let mut names = HashMap::new();
    let mut tree = Vec::new();
    for e in events(&trace) {
        if let Event::SpanStart(s) = e {
            assert_eq!(s.kind, SpanKind::Module);
            names.insert(s.id, s.name.clone());
            tree.push((s.name.clone(), s.parent.map(|p| names[&p].clone())));
        }
    }
    let s = |x: &str| x.to_string();
    assert_eq!(
        tree,
        vec![
            // Repeated siblings are told apart by their position under their parent.
            (s("model#0"), None),
            (s("attention#0"), Some(s("model#0"))),
            (s("linear#0"), Some(s("attention#0"))),
            (s("attention#1"), Some(s("model#0"))),
            (s("linear#0"), Some(s("attention#1"))),
            (s("embedding#0"), Some(s("model#0"))),
        ]
    );
    // Ops recorded inside a tracing span land in its trace span.
    let linear_spans: Vec<_> = names
        .iter()
        .filter(|(_, n)| n.as_str() == "linear#0")
        .map(|(id, _)| *id)
        .collect();
    for e in events(&trace) {
        if let Event::Op(op) = e {
            assert!(linear_spans.contains(&op.span.unwrap()));
        }
    }
    // tracing-chrome saw the same spans.
    let chrome = std::fs::read_to_string(&chrome_path).unwrap();
    for name in ["model", "attention", "linear", "embedding"] {
        assert!(
            chrome.contains(&format!("\"{name}\"")),
            "{name} missing from {chrome}"
        );
    }
}
