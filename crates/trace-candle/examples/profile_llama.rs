//! Profiles a tiny random-weight candle-transformers Llama: generation, then AdamW training.
//!
//! Generation uses a KV cache; a few AdamW training steps follow; twelve lines are the capture.
//!
//! `cargo run --release -p trace-candle --example profile_llama [TRACE_PATH]`
//!
//! The model is candle-transformers' own `Llama` (hidden 128, 2 layers, 4 heads / 2 KV
//! heads, vocabulary 1000), built from a `VarMap` with random weights: a 16-token prompt is
//! prefilled, 20 tokens are decoded greedily with the KV cache, then the model trains for 4
//! steps. The twelve lines marked `// capture` are all the instrumentation; without them this
//! is a plain candle program. A rerun replaces the trace it wrote before (`Run::overwrite`).
//! What they give:
//!
//! - `Capture::open(..)?.sampling_memory(..)`: the trace file, and the process's resident
//!   memory sampled at step ends (at most once a millisecond);
//! - `install_tracing()`, before the model is built: the model's own `tracing` spans
//!   (`block#0/attn#0/linear#0`, `mlp#0`, ...) nest under the op that runs them;
//! - `parameters_varmap(&varmap)`: every weight, by name, as persistent parameter memory;
//! - `op("llama.forward", ..)`: one op per forward with its input shapes (prefill `[1,16]`,
//!   decode `[1,1]`), the model's spans inside it;
//! - `buffer_shape("kv_cache", ..)`: the KV cache's size per step (declared: Candle keeps the
//!   cache's tensors private);
//! - `estimate_optimizer_state(OptimizerKind::AdamW)`: AdamW's two moments per parameter as
//!   persistent optimizer-state memory (estimated: candle-nn keeps them private);
//! - `backward(&loss)`: `loss.backward()` as the backward phase, the tensors its autograd
//!   graph keeps alive, and every parameter's gradient (present, missing, zero, non-finite);
//! - `phase("optimizer", ..)`: the AdamW update as the optimizer phase;
//! - `step()` at the end of each iteration and `finish()` at the end of the run.
//!
//! With `PROFILE_LLAMA_SAMPLE=1` and `--features sampler`, `sample_stacks(..)` also samples
//! the call stacks of every thread in the recorded steps (`tracegraph hot --by phase`); the
//! variable is read at run time because this file is also compiled by tests and benches that
//! have no `sampler` feature of their own.

use std::error::Error;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use candle_transformers::models::llama::{Cache, Config, Llama};
use trace_candle::{Capture, ExecStep, OptimizerKind, Phase, Run};

/// Prompt length (prefill).
pub const PROMPT: usize = 16;
/// Tokens decoded after the prompt, one step each.
pub const DECODE: usize = 20;
/// Training steps after generation.
pub const TRAIN_STEPS: usize = 4;

/// The tiny Llama: hidden 128, 2 layers, 4 heads / 2 KV heads, vocabulary 1000.
pub fn tiny_config() -> Config {
    Config {
        hidden_size: 128,
        intermediate_size: 256,
        vocab_size: 1000,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        use_flash_attn: false,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        bos_token_id: None,
        eos_token_id: None,
        rope_scaling: None,
        max_position_embeddings: 64,
        tie_word_embeddings: false,
    }
}

/// Runs generation and training with capture into `path`.
pub fn run(path: &std::path::Path) -> Result<(), Box<dyn Error>> {
    let device = Device::Cpu;
    let run = Run::new("examples/profile_llama", Phase::Train, "cpu").overwrite(true); // rerun: replace
    let capture = Capture::open(path, run)?.sampling_memory(&device); // capture
    capture.install_tracing()?; // capture: before the model is built (its spans are made there)
    if std::env::var_os("PROFILE_LLAMA_SAMPLE").is_some() {
        // Optional: the CPU sampler (trace-candle feature `sampler`; see `tracegraph hot`).
        capture.sample_stacks(trace_candle::SamplerConfig::default())?;
    }

    let cfg = tiny_config();
    let varmap = VarMap::new();
    let llama = Llama::load(VarBuilder::from_varmap(&varmap, DType::F32, &device), &cfg)?;
    capture.parameters_varmap(&varmap); // capture: every weight, by name

    // Generation: prefill the prompt, then decode greedily with the KV cache.
    let head_dim = cfg.hidden_size / cfg.num_attention_heads;
    let mut cache = Cache::new(true, DType::F32, &cfg, &device)?;
    let mut tokens: Vec<u32> = (0..PROMPT as u32).map(|i| (i * 37 + 11) % 1000).collect();
    let mut pos = 0;
    for step in 0..=DECODE {
        let context = if step == 0 {
            &tokens[..]
        } else {
            &tokens[tokens.len() - 1..]
        };
        let input = Tensor::new(context, &device)?.unsqueeze(0)?;
        let forward = || llama.forward(&input, pos, &mut cache);
        let logits = capture.op("llama.forward", &[&input], forward)?; // capture
        pos += context.len();
        let kv_shape = [
            cfg.num_hidden_layers,
            2,
            1,
            cfg.num_key_value_heads,
            pos,
            head_dim,
        ];
        capture.buffer_shape("kv_cache", &kv_shape, DType::F32, &device); // capture
        tokens.push(logits.squeeze(0)?.argmax(0)?.to_scalar::<u32>()?);
        capture.step(); // capture: at the end of each iteration
    }
    println!(
        "generated {} tokens: {:?}",
        tokens.len() - PROMPT,
        &tokens[PROMPT..]
    );

    // Training: next-token prediction on the generated sequence.
    let params = ParamsAdamW {
        lr: 1e-3,
        ..ParamsAdamW::default()
    };
    let mut optimizer = AdamW::new(varmap.all_vars(), params)?;
    capture.estimate_optimizer_state(OptimizerKind::AdamW); // capture: its moments, estimated
    let mut no_kv = Cache::new(false, DType::F32, &cfg, &device)?;
    for step in 0..TRAIN_STEPS {
        let input = Tensor::new(&tokens[step..step + PROMPT], &device)?.unsqueeze(0)?;
        let target = Tensor::new(&tokens[(step + PROMPT)..=(step + PROMPT)], &device)?;
        let forward = || llama.forward(&input, 0, &mut no_kv);
        let logits = capture.op("llama.forward", &[&input], forward)?; // capture
        let loss = candle_nn::loss::cross_entropy(&logits, &target)?;
        let grads = capture.backward(&loss)?; // capture: loss.backward(), autograd memory, gradients
        {
            let _optimizer = capture.phase("optimizer", ExecStep::Optimizer); // capture
            optimizer.step(&grads)?;
        }
        println!("train step {step}: loss {:.4}", loss.to_scalar::<f32>()?);
        capture.step(); // capture
    }
    let summary = capture.finish()?; // capture
    drop(cache);
    println!(
        "trace: {} ({} events)\nnext:\n  tracegraph summary {p}\n  tracegraph spans {p}\n  \
         tracegraph memory {p}\n  tracegraph graph {p}\n  tracegraph gradients {p}",
        path.display(),
        summary.counts.total(),
        p = path.display()
    );
    Ok(())
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args_os().nth(1).map_or_else(
        || std::env::temp_dir().join("profile_llama.trace.jsonl"),
        PathBuf::from,
    );
    run(&path)
}
