//! Tracked heap through a capture: a real candle-transformers BERT's attention scores are
//! heap allocations of exactly batch × heads × seq² × 4 bytes, attributed to the span that
//! made them and live at the peak; tensors of chosen sizes land in their spans.
//!
//! A test binary of its own (as is the Llama one): it declares the tracking allocator as its
//! global allocator, its one tracker tracks the whole process, and its one `tracing`
//! subscriber is this capture's.

#![cfg(all(feature = "heap", feature = "nn", feature = "tracing"))]

#[global_allocator]
static ALLOC: trace_candle::TrackingAlloc = trace_candle::TrackingAlloc::system();

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use trace_record::Run;
use trace_record::schema::{Event, ExecStep, Phase, SpanKind};

use trace_candle::{HeapConfig, HeapError};

mod common;

use common::{assert_between, live_at_peak, new_capture, span_paths, turn};

#[test]
fn bert_attention_scores_are_live_at_the_peak_at_their_exact_size_in_self_attn() {
    use candle_nn::{VarBuilder, VarMap};
    use candle_transformers::models::bert::{BertModel, Config};
    let _turn = turn();
    let (capture, sink) = new_capture(Run::new("heap::bert", Phase::Infer, "cpu"));
    capture.install_tracing().unwrap();
    // seq = 120, not a power of two: the scores (batch × heads × seq² × 4 B) must not share
    // their size with gemm's per-thread packing slab (`gemm_common::gemm::L2_SLAB`, one L2
    // cache's bytes, allocated on a thread's first matmul and live until the thread ends). On
    // a CPU with 2 MiB of L2 a 128-token batch's scores are 2 MiB too, and the slabs of the
    // first matmuls were counted as scores (live at the peak, in the wrong spans, never freed).
    let (batch, heads, seq) = (4usize, 8usize, 120usize);
    let cfg = Config {
        vocab_size: 1000,
        hidden_size: 128,
        num_hidden_layers: 2,
        num_attention_heads: heads,
        intermediate_size: 512,
        max_position_embeddings: 256,
        ..Config::default()
    };
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let bert = BertModel::load(vb, &cfg).unwrap();
    let ids: Vec<u32> = (0..batch * seq).map(|i| (i * 37 % 1000) as u32).collect();
    let input = Tensor::from_vec(ids, (batch, seq), &Device::Cpu).unwrap();
    let types = input.zeros_like().unwrap();
    capture.track_heap(HeapConfig::default()).unwrap();
    assert!(matches!(
        capture.track_heap(HeapConfig::default()),
        Err(HeapError::Busy)
    ));
    {
        let _fwd = capture.phase("forward", ExecStep::Forward);
        let out = capture
            .op("bert.forward", &[&input], || {
                bert.forward(&input, &types, None)
            })
            .unwrap();
        assert_eq!(out.dims(), &[batch, seq, 128]);
    }
    capture.step();
    let stats = capture.stop_heap().expect("tracking");
    assert!(capture.heap_stats().is_none());
    capture.finish().unwrap();
    assert_eq!((stats.lost, stats.unwritten), (0, 0), "{stats:?}");

    let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "{issues:?}");
    let scores = (batch * heads * seq * seq * 4) as u64;
    let (peak, live) = live_at_peak(&trace);
    assert_between("bert", &trace, peak);
    // The scores live at the peak, each at its exact size, by span path.
    let mut by_path: HashMap<&str, usize> = HashMap::new();
    for (bytes, path) in &live {
        if *bytes == scores {
            *by_path.entry(path.as_str()).or_default() += 1;
        }
    }
    let last = |p: &str| p.rsplit('/').next().unwrap_or_default().to_string();
    let attn: Vec<(&str, usize)> = by_path
        .iter()
        .filter(|(p, _)| last(p).starts_with("self-attn"))
        .map(|(p, n)| (*p, *n))
        .collect();
    // The peak is inside one layer's attention: its self-attention span holds the product,
    // the scaled and the masked scores (`attention_scores` is shadowed, not dropped), each
    // of exactly batch × heads × seq² × 4 bytes, and the softmax inside it holds its own.
    assert_eq!(attn.len(), 1, "{peak} B peak: {by_path:?}");
    let (path, n) = attn[0];
    assert_eq!(n, 3, "{path}: {by_path:?}");
    assert!(path.contains("bert.forward"), "{path}");
    let softmax = by_path
        .iter()
        .find(|(p, _)| p.starts_with(path) && last(p).starts_with("softmax"))
        .map(|(_, n)| *n);
    assert!(softmax.is_some_and(|n| n >= 1), "{by_path:?}");
    // Every score-sized allocation anywhere is attributed to an attention span, and all are
    // freed by the end.
    let paths = span_paths(&trace);
    let mut freed = std::collections::HashSet::new();
    for e in &trace.events {
        if let Event::HeapFree(f) = &e.event {
            freed.insert(f.id);
        }
    }
    let mut made = 0;
    for e in &trace.events {
        if let Event::HeapAlloc(a) = &e.event
            && a.bytes == scores
        {
            made += 1;
            let p = a.span.and_then(|s| paths.get(&s)).expect("in a span");
            assert!(p.contains("self-attn"), "{p}");
            assert_eq!(a.phase, Some(ExecStep::Forward));
            assert!(freed.contains(&a.id), "{p}: freed");
        }
    }
    // At least the three scores tensors of each of the two layers.
    assert!(made >= 6, "{made}");
}

#[test]
fn tensors_of_chosen_sizes_land_in_their_capture_spans() {
    let _turn = turn();
    let (capture, sink) = new_capture(Run::new("heap::known", Phase::Train, "cpu"));
    capture.track_heap(HeapConfig::threshold(1024)).unwrap();
    let (a_id, b_id);
    {
        let _p = capture.phase("backward", ExecStep::Backward);
        let a = capture.span("a", SpanKind::Function);
        a_id = a.id().unwrap().0;
        let x = Tensor::zeros((3, 1000), DType::F32, &Device::Cpu).unwrap();
        {
            let b = capture.span("b", SpanKind::Function);
            b_id = b.id().unwrap().0;
            let y = Tensor::zeros((7, 1000), DType::F64, &Device::Cpu).unwrap();
            drop(y);
        }
        drop(x);
    }
    capture.step();
    capture.stop_heap().unwrap();
    capture.finish().unwrap();
    let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    assert!(trace_record::validate(&trace).is_empty());
    let mut found = HashMap::new();
    for e in &trace.events {
        if let Event::HeapAlloc(h) = &e.event
            && (h.bytes == 12_000 || h.bytes == 56_000)
        {
            assert!(found.insert(h.bytes, (h.span, h.phase)).is_none(), "{h:?}");
        }
    }
    assert_eq!(
        found[&12_000],
        (Some(a_id), Some(ExecStep::Backward)),
        "f32 3×1000 in a"
    );
    assert_eq!(
        found[&56_000],
        (Some(b_id), Some(ExecStep::Backward)),
        "f64 7×1000 in b"
    );
}
