//! Tracked heap through a capture of candle-transformers' Mistral generating: the attention
//! math that Mistral's own spans do not cover (its `tracing` spans are only its linear and
//! norm layers) is still seen, attributed to the forward op, and the tracked peak lies
//! between the logical and the resident one.
//!
//! A test binary of its own: it declares the tracking allocator, and its one `tracing`
//! subscriber is this capture's.

#![cfg(all(feature = "heap", feature = "nn", feature = "tracing"))]

#[global_allocator]
static ALLOC: trace_candle::TrackingAlloc = trace_candle::TrackingAlloc::system();

use candle_core::{DType, Device};
use trace_record::Run;
use trace_record::schema::{Event, Phase};

use trace_candle::HeapConfig;

#[path = "heap/common.rs"]
mod common;
#[path = "heap/generate.rs"]
mod generate;

use common::{assert_between, live_at_peak, new_capture, span_paths, turn};
use generate::generate;

/// The tiny random-weight Mistral of the profile_mistral example (hidden 128, 2 layers, 4
/// heads / 2 KV heads, vocabulary 1000).
#[path = "../examples/profile_mistral.rs"]
#[allow(dead_code, unreachable_pub)]
mod profile_mistral;

#[test]
fn mistral_generation_is_tracked_inside_its_forward_between_logical_and_resident() {
    use candle_nn::{VarBuilder, VarMap};
    use candle_transformers::models::mistral::Model;
    let _turn = turn();
    let (capture, sink) = new_capture(Run::new("heap::mistral", Phase::Infer, "cpu"));
    capture.install_tracing().unwrap();
    let cfg = profile_mistral::tiny_config();
    let varmap = VarMap::new();
    let mut model = Model::new(
        &cfg,
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
    )
    .unwrap();
    capture.track_heap(HeapConfig::default()).unwrap();
    generate(&capture, "mistral.forward", 6, |input, pos| {
        model.forward(input, pos)
    });
    let stats = capture.stop_heap().unwrap();
    capture.finish().unwrap();
    assert_eq!(stats.lost, 0, "{stats:?}");
    let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "{issues:?}");
    let paths = span_paths(&trace);
    // Bytes attributed to the forward op itself (the attention math, the KV cache's growth:
    // no span of Mistral's own) and to the spans below it.
    let (mut at_forward, mut below) = (0u64, 0u64);
    for e in &trace.events {
        if let Event::HeapAlloc(a) = &e.event
            && let Some(span) = a.span
        {
            let path = &paths[&span];
            assert!(path.starts_with("mistral.forward"), "{path}");
            if path.contains('/') {
                below += a.bytes;
            } else {
                at_forward += a.bytes;
            }
        }
    }
    assert!(at_forward > 0, "nothing tracked at the forward op itself");
    assert!(
        below > 0,
        "nothing tracked in Mistral's linear and norm spans"
    );
    let (peak, _) = live_at_peak(&trace);
    assert_between("mistral", &trace, peak);
}
