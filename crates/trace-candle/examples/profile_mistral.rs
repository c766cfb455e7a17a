//! Profiles a tiny random-weight candle-transformers Mistral generating with its KV cache.
//!
//! `cargo run --release -p trace-candle --example profile_mistral [TRACE_PATH]`, then
//! `tracegraph summary|spans|memory TRACE_PATH` (default `profile_mistral.trace.jsonl` in the
//! temporary directory).
//!
//! The model is candle-transformers' own Mistral `Model` (hidden 128, 2 layers, 4 heads / 2 KV
//! heads, vocabulary 1000), built from a `VarMap` with random weights. It answers 8 requests
//! in turn: each 16-token prompt is prefilled, then 20 tokens are decoded greedily, the model
//! keeping its KV cache (cleared between requests). The seven lines marked `// capture` are
//! all the instrumentation; without them this is a plain candle program. What they give:
//!
//! - `Capture::open(..)?.sampling_memory(..)`: the trace file, and the process's resident
//!   memory sampled at step ends;
//! - `install_tracing()`, before the model is built: Mistral's own `tracing` spans nest under
//!   the op that runs them. They cover only its linear and RMS-norm layers
//!   (`mistral.forward/linear#3`, `rms-norm#1`): the attention math, RoPE and the KV cache's
//!   concatenation run in the forward op itself, where only sampled stacks say what they are;
//! - `parameters_varmap(&varmap)`: every weight, by name, as persistent parameter memory;
//! - `op("mistral.forward", ..)`: one op per forward with its input shape (prefill `[1,16]`,
//!   decode `[1,1]`);
//! - `buffer_shape("kv_cache", ..)`: the KV cache's size per step (declared: the model keeps
//!   its cache's tensors private);
//! - `step()` after each forward and `finish()` at the end of the run.
//!
//! With `PROFILE_MISTRAL_SAMPLE=HZ` and `--features sampler`, `sample_stacks(..)` also samples
//! the call stacks of every thread at HZ per CPU second (`=1`, or any value that is not a
//! rate, samples at the default 1,000 Hz; `tracegraph hot --by span`). The variable is read
//! at run time because this file is also compiled by tests that start the sampler themselves.

use std::error::Error;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::mistral::{Config, Model};
use trace_candle::{Capture, Phase, Run, SamplerConfig};

/// Prompt length (prefill).
pub const PROMPT: usize = 16;
/// Tokens decoded after the prompt, one step each.
pub const DECODE: usize = 20;
/// Requests answered in turn, each a prefill and [`DECODE`] decode steps.
pub const REQUESTS: usize = 8;
/// The forward op's name.
pub const FORWARD: &str = "mistral.forward";

/// The tiny Mistral: hidden 128, 2 layers, 4 heads / 2 KV heads, vocabulary 1000.
pub fn tiny_config() -> Config {
    Config {
        vocab_size: 1000,
        hidden_size: 128,
        intermediate_size: 256,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        head_dim: None,
        num_key_value_heads: 2,
        hidden_act: candle_nn::Activation::Silu,
        max_position_embeddings: 64,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        sliding_window: Some(64),
        use_flash_attn: false,
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

/// Answers request `request`: generates [`DECODE`] tokens after its [`PROMPT`]-token prompt
/// with `model` (built from `cfg`), its KV cache cleared first; each forward is the captured
/// op [`FORWARD`] and a step of its own. Returns the generated tokens (the prefill's first).
pub fn generate(
    capture: &Capture,
    model: &mut Model,
    cfg: &Config,
    request: usize,
) -> candle_core::Result<Vec<u32>> {
    let device = Device::Cpu;
    let head_dim = cfg
        .head_dim
        .unwrap_or(cfg.hidden_size / cfg.num_attention_heads);
    model.clear_kv_cache();
    let seed = request as u32;
    let mut tokens: Vec<u32> = (0..PROMPT as u32)
        .map(|i| (i * 37 + 11 + seed * 101) % 1000)
        .collect();
    let mut pos = 0;
    for step in 0..=DECODE {
        let from = if step == 0 { 0 } else { tokens.len() - 1 };
        let input = Tensor::new(&tokens[from..], &device)?.unsqueeze(0)?;
        let forward = || model.forward(&input, pos);
        let logits = capture.op(FORWARD, &[&input], forward)?; // capture
        pos += tokens.len() - from;
        let kv_shape = [
            cfg.num_hidden_layers,
            2,
            1,
            cfg.num_key_value_heads,
            pos,
            head_dim,
        ];
        capture.buffer_shape("kv_cache", &kv_shape, DType::F32, &device); // capture
        tokens.push(logits.flatten_all()?.argmax(0)?.to_scalar::<u32>()?);
        capture.step(); // capture: at the end of each forward
    }
    Ok(tokens.split_off(PROMPT))
}

/// Builds the tiny Mistral and answers [`REQUESTS`] requests with capture into `path`.
pub fn run(path: &Path) -> Result<(), Box<dyn Error>> {
    let device = Device::Cpu;
    // A rerun replaces the trace.
    let run = Run::new("examples/profile_mistral", Phase::Infer, "cpu").overwrite(true);
    let capture = Capture::open(path, run)?.sampling_memory(&device); // capture
    capture.install_tracing()?; // capture: before the model is built (its spans are made there)

    let cfg = tiny_config();
    let varmap = VarMap::new();
    let mut model = Model::new(&cfg, VarBuilder::from_varmap(&varmap, DType::F32, &device))?;
    capture.parameters_varmap(&varmap); // capture: every weight, by name
    if let Some(config) = sampler_from_env("PROFILE_MISTRAL_SAMPLE") {
        // Optional: the CPU sampler (trace-candle feature `sampler`; see `tracegraph hot`),
        // from here: the weights' random initialisation is no part of the profile.
        capture.sample_stacks(config)?;
    }

    let mut generated = Vec::new();
    for request in 0..REQUESTS {
        generated = generate(&capture, &mut model, &cfg, request)?;
    }
    let summary = capture.finish()?; // capture
    println!(
        "{REQUESTS} requests; the last generated {} tokens: {generated:?}\ntrace: {} ({} \
         events)\nnext:\n  tracegraph summary {p}\n  tracegraph spans {p}\n  tracegraph memory \
         {p}\n  tracegraph hot --by span {p}",
        generated.len(),
        path.display(),
        summary.counts.total(),
        p = path.display()
    );
    Ok(())
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args_os().nth(1).map_or_else(
        || std::env::temp_dir().join("profile_mistral.trace.jsonl"),
        PathBuf::from,
    );
    run(&path)
}
