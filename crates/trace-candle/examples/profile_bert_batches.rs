//! Profiles a tiny random-weight candle-transformers BERT encoding batches of two lengths.
//!
//! `cargo run --release -p trace-candle --example profile_bert_batches [TRACE_PATH]`, then
//! `tracegraph summary|spans|graph TRACE_PATH` (default `profile_bert_batches.trace.jsonl`
//! in the temporary directory).
//!
//! The model is candle-transformers' own `BertModel` (hidden 128, 2 layers, 8 heads,
//! intermediate 512, vocabulary 1000), built from a `VarMap` with random weights. It encodes
//! eight batches of 4 sequences whose length alternates between 16 and 48 tokens, the way a
//! server sees short and long requests. The six lines marked `// capture` are all the
//! instrumentation; without them this is a plain candle program. What they give:
//!
//! - `Capture::open(..)?.sampling_memory(..)`: the trace file, and the process's resident
//!   memory sampled at step ends;
//! - `install_tracing()`, before the model is built: BERT's own `tracing` spans, which cover
//!   every layer (`model/encoder/layer#1/attn/self-attn/softmax`, `inter`, `out`, ...), nest
//!   under the op that runs them;
//! - `parameters_varmap(&varmap)`: every weight, by name, as persistent parameter memory;
//! - `op("bert.forward", ..)`: one op per batch with its input shape (`[4,16]` or `[4,48]`),
//!   so `tracegraph graph` sees two graphs that alternate, not one that keeps changing;
//! - `step()` at the end of each batch and `finish()` at the end of the run.
//!
//! With `PROFILE_BERT_SAMPLE=HZ` and `--features sampler`, `sample_stacks(..)` also samples
//! the call stacks of every thread at HZ per CPU second (`=1`, or any value that is not a
//! rate, samples at the default 1,000 Hz), each sample attributed to the innermost of those
//! spans open at its time (`tracegraph hot --by span`). The variable is read at run time
//! because this file is also compiled by tests that start the sampler themselves.

use std::error::Error;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::bert::{BertModel, Config};
use trace_candle::{Capture, Phase, Run, SamplerConfig};

/// Sequences per batch.
pub const BATCH: usize = 4;
/// The two sequence lengths, alternating from batch to batch.
pub const SEQ_LENS: [usize; 2] = [16, 48];
/// Batches the example encodes, one step each.
pub const BATCHES: usize = 8;
/// The forward op's name.
pub const FORWARD: &str = "bert.forward";

/// The tiny BERT: hidden 128, 2 layers, 8 heads, intermediate 512, vocabulary 1000.
pub fn tiny_config() -> Config {
    Config {
        vocab_size: 1000,
        hidden_size: 128,
        num_hidden_layers: 2,
        num_attention_heads: 8,
        intermediate_size: 512,
        max_position_embeddings: 64,
        ..Config::default()
    }
}

/// The sampler configuration `var` asks for: `None` when unset, its value as the rate when it
/// is one (above 1 per second), the default rate otherwise.
pub fn sampler_from_env(var: &str) -> Option<SamplerConfig> {
    let value = std::env::var(var).ok()?;
    Some(match value.trim().parse::<u32>() {
        Ok(hz) if hz > 1 => SamplerConfig::hz(hz),
        _ => SamplerConfig::default(),
    })
}

/// The token ids of batch `index` (its length from [`SEQ_LENS`]) and their token types.
pub fn batch(index: usize, device: &Device) -> candle_core::Result<(Tensor, Tensor)> {
    let len = SEQ_LENS[index % SEQ_LENS.len()];
    let ids: Vec<u32> = (0..BATCH * len)
        .map(|i| ((i + index) * 37 % 1000) as u32)
        .collect();
    let ids = Tensor::from_vec(ids, (BATCH, len), device)?;
    let types = ids.zeros_like()?;
    Ok((ids, types))
}

/// Encodes `batches` batches of alternating lengths through `bert`, each forward the captured
/// op [`FORWARD`] and a step of its own.
pub fn encode(capture: &Capture, bert: &BertModel, batches: usize) -> candle_core::Result<()> {
    for index in 0..batches {
        let (ids, types) = batch(index, &bert.device)?;
        let forward = || bert.forward(&ids, &types, None);
        let out = capture.op(FORWARD, &[&ids], forward)?; // capture
        if out.dims() != [BATCH, ids.dim(1)?, tiny_config().hidden_size] {
            candle_core::bail!("unexpected BERT output shape {:?}", out.shape());
        }
        capture.step(); // capture: at the end of each batch
    }
    Ok(())
}

/// Builds the tiny BERT and encodes [`BATCHES`] batches with capture into `path`.
pub fn run(path: &Path) -> Result<(), Box<dyn Error>> {
    let device = Device::Cpu;
    // A rerun replaces the trace.
    let run = Run::new("examples/profile_bert_batches", Phase::Infer, "cpu").overwrite(true);
    let capture = Capture::open(path, run)?.sampling_memory(&device); // capture
    capture.install_tracing()?; // capture: before the model is built (its spans are made there)

    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &device);
    let bert = BertModel::load(vb, &tiny_config())?;
    capture.parameters_varmap(&varmap); // capture: every weight, by name
    if let Some(config) = sampler_from_env("PROFILE_BERT_SAMPLE") {
        // Optional: the CPU sampler (trace-candle feature `sampler`; see `tracegraph hot`),
        // from here: the weights' random initialisation is no part of the profile.
        capture.sample_stacks(config)?;
    }

    encode(&capture, &bert, BATCHES)?;
    let summary = capture.finish()?; // capture
    println!(
        "encoded {BATCHES} batches of {BATCH} x {SEQ_LENS:?} tokens\ntrace: {} ({} events)\n\
         next:\n  tracegraph summary {p}\n  tracegraph spans {p}\n  tracegraph graph {p}\n  \
         tracegraph hot --by span {p}",
        path.display(),
        summary.counts.total(),
        p = path.display()
    );
    Ok(())
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args_os().nth(1).map_or_else(
        || std::env::temp_dir().join("profile_bert_batches.trace.jsonl"),
        PathBuf::from,
    );
    run(&path)
}
