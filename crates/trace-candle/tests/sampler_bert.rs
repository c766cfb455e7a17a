//! Sampled stacks of candle-transformers' BERT (the profile_bert_batches example) name its spans.
//!
//! BERT's own `tracing` spans cover every layer, so nearly every sample of a forward lands in
//! one of them, below the forward op. A test binary of its own: the capture installs the
//! process's one global `tracing` subscriber, and the sampler samples every thread.

#![cfg(all(
    feature = "sampler",
    feature = "nn",
    feature = "tracing",
    target_os = "linux"
))]

use std::time::Duration;

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::bert::BertModel;
use trace_candle::SamplerConfig;
use trace_record::Run;
use trace_record::schema::Phase;

#[path = "../examples/profile_bert_batches.rs"]
#[allow(dead_code, unreachable_pub)]
mod profile_bert_batches;

#[path = "sampler_common/mod.rs"]
#[allow(dead_code, unreachable_pub)]
mod common;

use profile_bert_batches::FORWARD;

/// Which of candle-transformers' BERT functions opens which `tracing` span (entered in the
/// function's first line, left at its end). BERT's embeddings are candle-nn's, without a span.
const BERT_SPANS: common::SpanTable = &[
    (
        "candle_transformers::models::bert::BertModel::forward",
        "model",
    ),
    (
        "candle_transformers::models::bert::BertEmbeddings::forward",
        "embeddings",
    ),
    (
        "candle_transformers::models::bert::BertEncoder::forward",
        "encoder",
    ),
    (
        "candle_transformers::models::bert::BertLayer::forward",
        "layer",
    ),
    (
        "candle_transformers::models::bert::BertAttention::forward",
        "attn",
    ),
    (
        "candle_transformers::models::bert::BertSelfAttention::forward",
        "self-attn",
    ),
    (
        "candle_transformers::models::bert::BertSelfOutput::forward",
        "self-out",
    ),
    (
        "bert::BertIntermediate as candle_core::Module>::forward",
        "inter",
    ),
    (
        "candle_transformers::models::bert::HiddenActLayer::forward",
        "hidden-act",
    ),
    (
        "candle_transformers::models::bert::BertOutput::forward",
        "out",
    ),
    // Self-attention enters its `softmax` span around this one call.
    ("candle_nn::ops::softmax", "softmax"),
    (
        "with_tracing::Linear as candle_core::Module>::forward",
        "linear",
    ),
    (
        "with_tracing::LayerNorm as candle_core::Module>::forward",
        "layer-norm",
    ),
];

/// Self-attention's `softmax` span is a block in its body, entered just before the call.
const BERT_BLOCKS: common::SpanTable = &[("self-attn", "softmax")];

#[test]
fn samples_in_bert_batches_name_the_innermost_span_open_on_the_driving_thread() {
    let (capture, sink) = common::new_capture(Run::new("sampler::bert", Phase::Infer, "cpu"));
    // The one global subscriber of this binary: before the model is built.
    capture.install_tracing().unwrap();
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let bert = BertModel::load(vb, &profile_bert_batches::tiny_config()).unwrap();
    // Sampling from the first forward on (building the model is no forward), at 1 kHz: at
    // 0.8 s of the driving thread's CPU, several hundred samples of forwards are expected (a
    // few hundred on a loaded machine; 150 are required). Not faster: at 4 kHz, in this
    // unoptimised test build on a heavily loaded machine, the sampler's step accounts have
    // failed validation (more samples lost than the step's CPU time allows).
    capture.sample_stacks(SamplerConfig::hz(1000)).unwrap();
    // The example's own loop, a short and a long batch per round; on a machine that gives
    // fewer samples per CPU second, until 600 are taken (softmax is a few % of them).
    let rounds = common::run_for_samples(&capture, Duration::from_millis(800), 600, || {
        profile_bert_batches::encode(&capture, &bert, 2).unwrap();
    });
    capture.finish().unwrap();
    eprintln!("{rounds} rounds: {:?}", capture.sampler_stats());
    let trace = common::read_valid(&sink);

    let driver = common::gettid();
    let a = common::attribute(&trace, driver, BERT_SPANS, BERT_BLOCKS, FORWARD, "layer");
    eprintln!(
        "{} forward samples: {} agree, {} at the op, {} below; by span {:?}",
        a.forward, a.agree, a.at_forward, a.below, a.by_span
    );
    a.assert_innermost(150, 98);
    assert!(
        a.below * 10 >= a.forward * 9,
        "{} of {} samples below the forward op",
        a.below,
        a.forward
    );
    // Most of the time is in the encoder's layers, and the spans that do the work are seen.
    assert!(
        a.share(a.under) >= 0.6,
        "{} of {} samples in an encoder layer",
        a.under,
        a.forward
    );
    for span in ["self-attn", "softmax", "linear", "layer-norm"] {
        assert!(
            a.by_span.get(span).copied().unwrap_or(0) > 0,
            "no sample in {span}: {:?}",
            a.by_span
        );
    }
    // The sampled op table (`tracegraph ops --sampled`) names the attention's Candle ops.
    let table = common::sampled_ops(&sink);
    eprintln!("named ops: {:?}", common::named_ops(&table));
    common::assert_names_matmul_and_softmax(&table);
}
