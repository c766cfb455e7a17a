//! Trains a 3-layer MLP on synthetic data with capture on: the whole training loop and its
//! capture lines in one file.
//!
//! `cargo run --release -p trace-candle --example train_mlp [TRACE_PATH]`
//!
//! The lines marked `// capture` are the instrumentation; without them this is a plain
//! candle-nn training loop. A rerun replaces the trace it wrote before (`Run::overwrite`;
//! without it, opening an existing trace is an error). Then analyse the trace:
//! `cargo run --release -p tracegraph -- summary TRACE_PATH`.

use std::path::PathBuf;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{AdamW, Linear, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use trace_candle::{Capture, ExecStep, OptimizerKind, Phase, Run, Schedule};

const SAMPLES: usize = 1024;
const FEATURES: usize = 32;
const HIDDEN: usize = 128;
const CLASSES: usize = 4;
const STEPS: u64 = 50;

/// A linear layer (optionally followed by `relu`) whose ops are timed and recorded.
struct Layer {
    linear: Linear,
    relu: bool,
    capture: Capture,
}

impl Module for Layer {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let (w, c) = (self.linear.weight(), &self.capture);
        // [batch, in] × [in, out]: 2·batch·in·out floating-point operations.
        let flops = 2 * (xs.elem_count() as u64) * (w.dim(0)? as u64);
        let y = c.op_with_flops("matmul", &[xs, w], flops, || xs.matmul(&w.t()?))?; // capture
        let y = match self.linear.bias() {
            Some(b) => c.op("add", &[&y, b], || y.broadcast_add(b))?, // capture
            None => y,
        };
        if self.relu {
            c.op("relu", &[&y], || y.relu()) // capture
        } else {
            Ok(y)
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os().nth(1).map_or_else(
        || std::env::temp_dir().join("train_mlp.trace.jsonl"),
        PathBuf::from,
    );
    let device = Device::Cpu;

    // Data: CLASSES overlapping Gaussian blobs in FEATURES dimensions; one full batch.
    let labels: Vec<u32> = (0..SAMPLES).map(|i| (i % CLASSES) as u32).collect();
    let y = Tensor::from_vec(labels, SAMPLES, &device)?;
    let centers = (Tensor::randn(0f32, 1.0, (CLASSES, FEATURES), &device)? * 0.25)?;
    let noise = Tensor::randn(0f32, 1.0, (SAMPLES, FEATURES), &device)?;
    let x = (centers.index_select(&y, 0)? + noise)?;

    // The trace: record steps 7-9 and 12-14 (skip 5, warm up 2, record 3, twice).
    let schedule = Schedule {
        skip_first: 5,
        wait: 0,
        warmup: 2,
        active: 3,
        repeat: 2,
    };
    let run = Run::new("train_mlp", Phase::Train, "cpu")
        .schedule(schedule)
        .overwrite(true); // capture
    let capture = Capture::open(&path, run)?; // capture

    // The model: spans `model` and `model/layers.{i}` around each forward.
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &device);
    let dims = [(FEATURES, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, CLASSES)];
    let mut layers = Vec::new();
    for (i, (fan_in, fan_out)) in dims.into_iter().enumerate() {
        layers.push(Layer {
            linear: candle_nn::linear(fan_in, fan_out, vb.pp(format!("layers.{i}")))?,
            relu: i + 1 < dims.len(),
            capture: capture.clone(),
        });
    }
    let model = capture.profile_sequence("model", layers); // capture
    let params = ParamsAdamW {
        lr: 0.01,
        ..ParamsAdamW::default()
    };
    let mut optimizer = AdamW::new(varmap.all_vars(), params)?;

    // Parameters and AdamW's two moments per parameter (Candle keeps the optimizer's state
    // private, so its size is estimated from the parameters).
    capture.parameters_varmap(&varmap); // capture
    capture.estimate_optimizer_state(OptimizerKind::AdamW); // capture

    println!(
        "training a {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES} MLP (candle-nn, AdamW) for {STEPS} \
         steps on the CPU"
    );
    for step in 0..STEPS {
        let recorded = capture.is_active();
        let loss = {
            let _forward = capture.phase("forward", ExecStep::Forward); // capture
            capture.record_input(&x, "x"); // capture
            capture.record_input(&y, "y"); // capture
            let logits = model.forward(&x)?;
            let lsm = capture.op("log_softmax", &[&logits], || {
                candle_nn::ops::log_softmax(&logits, 1)
            })?;
            capture.op("nll", &[&lsm, &y], || candle_nn::loss::nll(&lsm, &y))?
        };
        // The backward phase: Candle's backward, the autograd graph it kept alive and every
        // registered parameter's gradient, in one call.
        let grads = capture.backward(&loss)?; // capture (in place of `loss.backward()?`)
        {
            let _optimizer = capture.phase("optimizer", ExecStep::Optimizer); // capture
            optimizer.step(&grads)?;
        }
        capture.step(); // capture: frees the step's allocations, advances the schedule
        let mark = if recorded { "  (recorded)" } else { "" };
        println!("step {step:>3}  loss {:.4}{mark}", loss.to_scalar::<f32>()?);
    }
    let summary = capture.finish()?; // capture

    let predicted = model.forward(&x)?.argmax(1)?;
    let accuracy = predicted.eq(&y)?.to_dtype(DType::F32)?.mean_all()?;
    println!(
        "training accuracy {:.1}%",
        100.0 * accuracy.to_scalar::<f32>()?
    );
    println!(
        "trace: {} ({} events, {} bytes)\nnext: cargo run --release -p tracegraph -- summary {}",
        path.display(),
        summary.counts.total(),
        summary.bytes,
        path.display()
    );
    Ok(())
}
