//! Where a candle-transformers BERT's memory goes: its heap allocations, tracked, by span.
//!
//! `cargo run --release -p trace-candle --features heap --example profile_bert [TRACE_PATH]`,
//! then `tracegraph memory TRACE_PATH` (default `profile_bert.trace.jsonl`).
//!
//! The model is candle-transformers' own `BertModel` (hidden 128, 2 layers, 8 heads,
//! intermediate 512) with random weights, run forward on a batch of 4 sequences of 128
//! tokens. The lines marked `// capture` are all the instrumentation: the tracking allocator
//! declared as the global allocator, the capture with the model's `tracing` spans, and
//! `track_heap` around the forward passes. `tracegraph memory` then shows the "heap (tracked)"
//! view: the heap peak inside one layer's self-attention span, and there each
//! `[4, 8, 128, 128]` f32 attention-score buffer at its exact size (2 MiB), beside the logical
//! bytes the capture declared (only the forward's output). The scores outlive their span (the
//! `outlived` column): the weights are `Var`s, so every op's output keeps its inputs alive for
//! a backward pass until the forward's output is dropped.

#[global_allocator] // capture: the tracking allocator (feature `heap`)
static ALLOC: trace_candle::TrackingAlloc = trace_candle::TrackingAlloc::system();

use std::error::Error;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::bert::{BertModel, Config};
use trace_candle::{Capture, ExecStep, HeapConfig, Phase, Run};

/// Sequences per batch.
const BATCH: usize = 4;
/// Tokens per sequence.
const SEQ: usize = 128;
/// Forward passes, one step each.
const STEPS: usize = 3;

fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from("profile_bert.trace.jsonl"), PathBuf::from);
    let device = Device::Cpu;
    let run = Run::new("examples/profile_bert", Phase::Infer, "cpu").overwrite(true);
    let capture = Capture::open(&path, run)?; // capture
    capture.install_tracing()?; // capture: the model's spans (before it is built)
    let cfg = Config {
        vocab_size: 1000,
        hidden_size: 128,
        num_hidden_layers: 2,
        num_attention_heads: 8,
        intermediate_size: 512,
        max_position_embeddings: 256,
        ..Config::default()
    };
    let varmap = VarMap::new();
    let bert = BertModel::load(VarBuilder::from_varmap(&varmap, DType::F32, &device), &cfg)?;
    let ids: Vec<u32> = (0..BATCH * SEQ).map(|i| (i * 37 % 1000) as u32).collect();
    let input = Tensor::from_vec(ids, (BATCH, SEQ), &device)?;
    let types = input.zeros_like()?;
    capture.track_heap(HeapConfig::default())?; // capture: allocations of 4 KiB and more
    for _ in 0..STEPS {
        {
            let _forward = capture.phase("forward", ExecStep::Forward); // capture
            let forward = || bert.forward(&input, &types, None);
            let out = capture.op("bert.forward", &[&input], forward)?; // capture
            assert_eq!(out.dims(), &[BATCH, SEQ, 128]);
        }
        capture.step(); // capture
    }
    let stats = capture.stop_heap(); // capture: its last lines, before finishing
    capture.finish()?; // capture
    println!(
        "trace: {}\nheap tracked: {stats:?}\nnext:\n  tracegraph memory {p}\n  tracegraph spans {p}",
        path.display(),
        p = path.display()
    );
    Ok(())
}
