//! The tracing layer: `tracing` spans become trace spans with the right nesting, alongside
//! tracing-chrome in one subscriber.

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use trace_candle::{Capture, TraceLayer};
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

/// What a span program recorded: the span tree (name, parent's name, kind), the span each op
/// landed in, and the `tracing` spans the capture counted.
type Recorded = (Vec<(String, Option<String>, SpanKind)>, Vec<String>, u64);

/// What a model-like program run under the subscriber `make` returns recorded.
fn span_program_tree(make: impl FnOnce(&Capture) -> tracing::Dispatch) -> Recorded {
    let (capture, sink) = capture(Phase::Infer);
    let dispatch = make(&capture);
    let x = Tensor::ones((2, 2), DType::F32, &Device::Cpu).unwrap();
    // Spans made once, as a candle-transformers model makes them at construction, and
    // entered on every forward; plus spans made per call.
    let (model, block, attn) = tracing::dispatcher::with_default(&dispatch, || {
        (
            tracing::trace_span!("model"),
            tracing::trace_span!("block"),
            tracing::trace_span!("attn"),
        )
    });
    for _ in 0..2 {
        let _m = model.enter();
        for _ in 0..2 {
            let _b = block.enter();
            {
                let _a = attn.enter();
                capture.op("matmul", &[&x, &x], || x.matmul(&x)).unwrap();
            }
            // A span nested in a captured op makes the op a span.
            capture
                .op("mlp", &[&x], || {
                    tracing::dispatcher::with_default(&dispatch, || {
                        let _l = tracing::info_span!("linear").entered();
                        capture.op("matmul", &[&x, &x], || x.matmul(&x))
                    })
                })
                .unwrap();
        }
        capture.step();
    }
    {
        // The capture's own finish writes the subscriber's span count.
        capture.finish().unwrap();
        let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
        assert!(trace_record::validate(&trace).is_empty());
        let mut names = HashMap::new();
        let mut tree = Vec::new();
        let mut ops = Vec::new();
        for e in events(&trace) {
            match e {
                Event::SpanStart(s) => {
                    names.insert(s.id, s.name.clone());
                    tree.push((s.name.clone(), s.parent.map(|p| names[&p].clone()), s.kind));
                }
                Event::Op(op) => ops.push(op.span.map_or("-".into(), |s| names[&s].clone())),
                _ => {}
            }
        }
        let spans = trace
            .events
            .iter()
            .filter_map(|e| match &e.event {
                Event::Counter(c) if c.name == trace_record::schema::TRACING_SPANS_COUNTER => {
                    Some(c.value as u64)
                }
                _ => None,
            })
            .sum();
        (tree, ops, spans)
    }
}

#[test]
fn the_capture_subscriber_records_what_the_registry_with_the_layer_records() {
    let by_layer = span_program_tree(|c| {
        tracing::Dispatch::new(tracing_subscriber::registry().with(TraceLayer::for_capture(c)))
    });
    let by_subscriber = span_program_tree(|c| tracing::Dispatch::new(c.tracing_subscriber()));
    assert_eq!(by_layer, by_subscriber);
    let (tree, ops, seen) = by_subscriber;
    let s = |x: &str| x.to_string();
    // Per step: the model, 2 blocks, and in each an attention, an op scope and a linear.
    assert_eq!(tree.len(), 18, "{tree:?}");
    assert_eq!(
        tree[..7],
        [
            (s("model#0"), None, SpanKind::Module),
            (s("block#0"), Some(s("model#0")), SpanKind::Module),
            (s("attn#0"), Some(s("block#0")), SpanKind::Module),
            (s("mlp"), Some(s("block#0")), SpanKind::Op),
            (s("linear#0"), Some(s("mlp")), SpanKind::Module),
            (s("block#1"), Some(s("model#0")), SpanKind::Module),
            (s("attn#0"), Some(s("block#1")), SpanKind::Module),
        ]
    );
    assert_eq!(ops[..3], [s("attn#0"), s("linear#0"), s("mlp")]);
    // Every enter counted: per step model, 2 blocks, 2 attns, 2 linears.
    assert_eq!(seen, 14);
}

#[test]
fn the_capture_subscriber_knows_the_current_span_and_ignores_ids_it_never_made() {
    let (capture, sink) = capture(Phase::Infer);
    let dispatch = tracing::Dispatch::new(capture.tracing_subscriber());
    tracing::dispatcher::with_default(&dispatch, || {
        assert!(tracing::Span::current().is_none());
        let outer = tracing::info_span!("outer");
        let inner = tracing::info_span!("inner");
        assert_ne!(outer.id(), inner.id());
        let _o = outer.enter();
        {
            let _i = inner.enter();
            assert_eq!(
                tracing::Span::current()
                    .metadata()
                    .map(tracing::Metadata::name),
                Some("inner")
            );
        }
        assert_eq!(tracing::Span::current().id(), outer.id());
        // Ids the subscriber never made: entering and exiting them records nothing and
        // disturbs nothing.
        for raw in [1, 7, u64::MAX, 0x7fff_ffff_0000_0001] {
            let id = tracing::span::Id::from_u64(raw);
            dispatch.enter(&id);
            dispatch.exit(&id);
        }
        assert_eq!(tracing::Span::current().id(), outer.id());
    });
    let trace = finish_and_read(&capture, &sink);
    let names: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::SpanStart(s) => Some(s.name.clone()),
            _ => None,
        })
        .collect();
    // Ids with no callsite slot are recorded under the overflow name, nested where entered.
    assert_eq!(names.len(), 6, "{names:?}");
    assert_eq!(names[..2], ["outer#0".to_string(), "inner#0".to_string()]);
}

/// The span names and parents' names of a finished capture.
fn tree_of(capture: &Capture, sink: &trace_record::MemorySink) -> Vec<(String, Option<String>)> {
    let trace = finish_and_read(capture, sink);
    let mut names = HashMap::new();
    let mut tree = Vec::new();
    for e in events(&trace) {
        if let Event::SpanStart(s) = e {
            names.insert(s.id, s.name.clone());
            tree.push((s.name.clone(), s.parent.map(|p| names[&p].clone())));
        }
    }
    tree
}

#[test]
fn two_layers_on_one_thread_number_their_siblings_apart_and_alike() {
    // Each layer's per-thread sibling counts interleave with the other's: entering a span
    // pushes one open entry per layer, so each layer's counts sit between the other's.
    let (a, sink_a) = capture(Phase::Infer);
    let (b, sink_b) = capture(Phase::Infer);
    let subscriber = tracing_subscriber::registry()
        .with(TraceLayer::from_arc(Arc::clone(a.session())))
        .with(TraceLayer::from_arc(Arc::clone(b.session())));
    tracing::subscriber::with_default(subscriber, || {
        let _m = tracing::info_span!("model").entered();
        for _ in 0..3 {
            let block = tracing::info_span!("block").entered();
            for name in ["q", "k", "q", "mlp", "k"] {
                let _s = match name {
                    "q" => tracing::info_span!("q"),
                    "k" => tracing::info_span!("k"),
                    _ => tracing::info_span!("mlp"),
                }
                .entered();
                let _inner = tracing::info_span!("linear").entered();
            }
            // Exited out of order: a span of the block outlives it.
            let late = tracing::info_span!("late").entered();
            drop(block);
            drop(late);
        }
    });
    let tree_a = tree_of(&a, &sink_a);
    let tree_b = tree_of(&b, &sink_b);
    assert_eq!(tree_a, tree_b);
    let s = |x: &str| x.to_string();
    let first_block: Vec<_> = tree_a[1..13].to_vec();
    assert_eq!(
        first_block,
        [
            (s("block#0"), Some(s("model#0"))),
            (s("q#0"), Some(s("block#0"))),
            (s("linear#0"), Some(s("q#0"))),
            (s("k#0"), Some(s("block#0"))),
            (s("linear#0"), Some(s("k#0"))),
            (s("q#1"), Some(s("block#0"))),
            (s("linear#0"), Some(s("q#1"))),
            (s("mlp#0"), Some(s("block#0"))),
            (s("linear#0"), Some(s("mlp#0"))),
            (s("k#1"), Some(s("block#0"))),
            (s("linear#0"), Some(s("k#1"))),
            (s("late#0"), Some(s("block#0"))),
        ]
    );
    // The next blocks count on under the model, and their children from 0 again.
    assert_eq!(tree_a[13], (s("block#1"), Some(s("model#0"))));
    assert_eq!(tree_a[14], (s("q#0"), Some(s("block#1"))));
    assert_eq!(tree_a.last(), Some(&(s("late#0"), Some(s("block#2")))));
}
