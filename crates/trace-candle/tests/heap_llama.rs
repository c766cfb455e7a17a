//! Tracked heap through a capture of candle-transformers' Llama generating: every step's
//! allocations land in the forward's spans, and the tracked peak lies between the logical and
//! the resident one.
//!
//! A test binary of its own: it declares the tracking allocator, and its one `tracing`
//! subscriber is this capture's.

#![cfg(all(feature = "heap", feature = "nn", feature = "tracing"))]

#[global_allocator]
static ALLOC: trace_candle::TrackingAlloc = trace_candle::TrackingAlloc::system();

use std::collections::HashMap;

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

#[path = "../examples/profile_llama.rs"]
#[allow(dead_code, unreachable_pub)]
mod profile_llama;

/// Generation with candle-transformers' Llama (prefill, then decode with the KV cache), one
/// step per token, the tracker following the steps: every step's allocations are attributed
/// to spans inside the forward op, worker threads' included, and the tracked peak lies
/// between the logical one and the resident one.
#[test]
fn llama_generation_allocations_land_in_its_forward_spans_step_by_step() {
    use candle_nn::{VarBuilder, VarMap};
    use candle_transformers::models::llama::{Cache, Llama};
    let _turn = turn();
    let (capture, sink) = new_capture(Run::new("heap::llama", Phase::Infer, "cpu"));
    // The model's `tracing` spans become trace spans (before the model is built).
    capture.install_tracing().unwrap();
    let cfg = profile_llama::tiny_config();
    let varmap = VarMap::new();
    let llama = Llama::load(
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
        &cfg,
    )
    .unwrap();
    let mut cache = Cache::new(true, DType::F32, &cfg, &Device::Cpu).unwrap();
    capture.track_heap(HeapConfig::default()).unwrap();
    generate(&capture, "llama.forward", 6, |input, pos| {
        llama.forward(input, pos, &mut cache)
    });
    let stats = capture.stop_heap().unwrap();
    capture.finish().unwrap();
    assert_eq!(stats.lost, 0, "{stats:?}");
    let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "{issues:?}");
    let paths = span_paths(&trace);
    // Step of each span (the step whose `step` line precedes it), and the forwards' times.
    let mut step = 0;
    let mut span_step = HashMap::new();
    let mut forwards: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut first_child: HashMap<u64, u64> = HashMap::new();
    for e in &trace.events {
        match &e.event {
            Event::Step(s) => step = s.index,
            Event::SpanStart(s) => {
                span_step.insert(s.id, step);
                if s.name.starts_with("llama.forward") {
                    forwards.insert(s.id, (s.ts, u64::MAX));
                }
                if let Some(p) = s.parent {
                    first_child.entry(p).or_insert(s.ts);
                }
            }
            Event::SpanEnd(s) => {
                if let Some(f) = forwards.get_mut(&s.id) {
                    f.1 = s.ts;
                }
            }
            _ => {}
        }
    }
    assert_eq!(forwards.len(), 6);
    let mut per_step: HashMap<u64, u64> = HashMap::new();
    for e in &trace.events {
        if let Event::HeapAlloc(a) = &e.event {
            match a.span {
                Some(span) => {
                    let path = &paths[&span];
                    assert!(path.starts_with("llama.forward"), "{path}");
                    *per_step.entry(span_step[&span]).or_default() += a.bytes;
                }
                // Outside every forward: the recorder's own between steps (here the
                // in-memory sink growing), honestly in no span. Inside one only before its
                // first inner span: the op becomes a span (and its scope is published) when
                // the first span opens inside it.
                None => assert!(
                    forwards.iter().all(|(id, &(s, e))| {
                        a.ts < s || a.ts > e || first_child.get(id).is_some_and(|&c| a.ts <= c)
                    }),
                    "{a:?} inside a forward but in no span"
                ),
            }
        }
    }
    // Every step allocated (the prefill most), and the heap accounts name the six steps.
    assert_eq!(per_step.len(), 6, "{per_step:?}");
    assert!(per_step[&0] > per_step[&5], "{per_step:?}");
    let accounts: Vec<u64> = trace
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::HeapAccount(a) => Some(a.step),
            _ => None,
        })
        .collect();
    // Six steps, and the one the last `step()` opened, tracked until `stop_heap`.
    assert_eq!(accounts, (0..=6).collect::<Vec<_>>());
    let (peak, _) = live_at_peak(&trace);
    assert_between("llama", &trace, peak);
}
