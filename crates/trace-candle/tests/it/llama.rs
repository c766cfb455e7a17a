//! A real model trained through the one handle: candle-transformers' tiny Llama with AdamW.

use candle_core::{DType, Device, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use candle_transformers::models::llama::{Cache, Llama};
use trace_candle::{ExecStep, OptimizerKind};
use trace_record::schema::{MemoryCategory, Phase};

use super::capture;

#[path = "../../examples/profile_llama.rs"]
#[allow(dead_code, unreachable_pub)]
mod profile_llama;

/// Two AdamW steps of the tiny Llama with a forward phase and `Capture::backward`: the
/// storages the autograd walk finds (the forward's, kept alive for backward) are placed at
/// the forward phase's start on the memory timeline and charged to the forward phase by the
/// span tree; the backward span is charged with the gradients alone; AdamW's estimated
/// moments are two per parameter, each its parameter's size, outside every span.
#[test]
fn llama_autograd_storages_belong_to_the_forward_and_adamw_state_is_recorded() {
    let dev = Device::Cpu;
    let (capture, sink) = capture(Phase::Train);
    let cfg = profile_llama::tiny_config();
    let varmap = VarMap::new();
    let llama = Llama::load(VarBuilder::from_varmap(&varmap, DType::F32, &dev), &cfg).unwrap();
    let params = capture.parameters_varmap(&varmap);
    assert!(params > 10, "{params}");
    let mut optimizer = AdamW::new(varmap.all_vars(), ParamsAdamW::default()).unwrap();
    assert_eq!(
        capture.estimate_optimizer_state(OptimizerKind::AdamW),
        2 * params
    );
    let mut cache = Cache::new(false, DType::F32, &cfg, &dev).unwrap();
    let tokens: Vec<u32> = (0..20u32).map(|i| (i * 37 + 11) % 1000).collect();
    for step in 0..2 {
        let input = Tensor::new(&tokens[step..step + 16], &dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let target = Tensor::new(&tokens[step + 16..=step + 16], &dev).unwrap();
        let loss = {
            let _forward = capture.phase("forward", ExecStep::Forward);
            let logits = capture
                .op("llama.forward", &[&input], || {
                    llama.forward(&input, 0, &mut cache)
                })
                .unwrap();
            candle_nn::loss::cross_entropy(&logits, &target).unwrap()
        };
        let grads = capture.backward(&loss).unwrap();
        {
            let _optimizer = capture.phase("optimizer", ExecStep::Optimizer);
            optimizer.step(&grads).unwrap();
        }
        capture.step();
    }
    capture.finish().unwrap();
    let text = String::from_utf8(sink.bytes()).unwrap();
    let trace = trace_analyze::load_str(
        &text,
        "llama.jsonl",
        trace_analyze::LoadOptions { strict: true },
    )
    .unwrap();

    let report = trace_analyze::memory_report(&trace).unwrap();
    let placed = report.autograd.unwrap();
    assert!(placed.at_forward_start > 0, "{placed:?}");
    assert_eq!((placed.at_step_start, placed.at_walk), (0, 0), "{placed:?}");
    let sum = |keep: &dyn Fn(&trace_analyze::MemEvent) -> bool| -> u64 {
        trace
            .memory
            .iter()
            .filter(|e| e.alloc && keep(e))
            .map(|e| e.bytes)
            .sum()
    };
    // The walk's allocations: activations written in the backward span (stamped earlier).
    let span_name = |e: &trace_analyze::MemEvent| {
        e.span
            .and_then(|s| trace.spans.get(s as usize))
            .map(|s| trace.str(s.name))
    };
    let walked = |e: &trace_analyze::MemEvent| {
        e.category == MemoryCategory::Activation && span_name(e) == Some("backward")
    };
    let autograd = sum(&walked);
    let gradients = sum(&|e| e.category == MemoryCategory::Gradient);
    let activations = sum(&|e| e.category == MemoryCategory::Activation);
    // candle-nn's fused rms_norm, softmax and rope have no backward, so the graph is the
    // part above the last of them: a few storages, still far more than none.
    assert!(autograd > 0 && placed.at_forward_start >= 2, "{placed:?}");

    // Where the timeline holds them: inside the forward phases.
    let forwards: Vec<(u64, u64)> = trace
        .spans
        .iter()
        .filter(|s| trace.str(s.name) == "forward")
        .map(|s| (s.start_ns, s.end_ns.unwrap()))
        .collect();
    assert_eq!(forwards.len(), 2);
    let mut walked_allocs = 0;
    for e in trace.memory.iter().filter(|e| e.alloc && walked(e)) {
        walked_allocs += 1;
        assert!(forwards.iter().any(|&(a, b)| (a..=b).contains(&e.t_ns)));
    }
    assert_eq!(walked_allocs, placed.at_forward_start);
    // Where the span tree charges them: the same forward phases. The forward (no model span
    // inside: no `tracing` layer here) holds every activation, autograd storages included;
    // the backward only the gradients it allocated.
    let tree = trace_analyze::span_tree(&trace);
    let charged = |path: &str| tree.node(path).map(|n| n.alloc_bytes);
    assert_eq!(charged("forward"), Some(activations));
    assert_eq!(charged("backward"), Some(gradients));
    assert_eq!(charged("optimizer"), Some(0));

    // AdamW: two moments per float parameter, each its size, never freed, in no span.
    let state: Vec<_> = trace
        .memory
        .iter()
        .filter(|e| e.category == MemoryCategory::OptimizerState)
        .collect();
    assert!(state.iter().all(|e| e.alloc && e.span.is_none()));
    assert_eq!(state.len(), 2 * params);
    let parameters = sum(&|e| e.category == MemoryCategory::Parameter);
    assert_eq!(state.iter().map(|e| e.bytes).sum::<u64>(), 2 * parameters);
    let cpu = &report.devices[0];
    assert_eq!(cpu.peak_by_category.optimizer_state, 2 * parameters);
    assert_eq!(cpu.possible_leak_count, 0, "{:?}", cpu.possible_leaks);
}
