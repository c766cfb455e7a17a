//! The demo's trainer: a 3-layer MLP on seeded synthetic data, with or without capture.
//!
//! Everything is deterministic given the seed: the data (Gaussian blobs) and the initial
//! weights come from the workspace's seeded SplitMix64 generator (`rand_xoshiro`), not from
//! Candle's unseedable CPU random generator, and training is full-batch. `tracegraph demo`
//! runs it (see the parent module) and the `capture` benchmark includes this file (`#[path]`)
//! to time the same step with and without capture, so it depends on trace-candle, Candle and
//! that generator only.

use candle_core::{DType, Device, Module, Tensor, Var};
use candle_nn::{AdamW, Linear, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use rand_xoshiro::SplitMix64;
use rand_xoshiro::rand_core::{Rng, SeedableRng};
use trace_candle::{Capture, CaptureError, ExecStep, OptimizerKind, ProfiledSequence};

/// Samples in the synthetic data set (one full batch per step).
pub(crate) const SAMPLES: usize = 1024;
/// Input features.
pub(crate) const FEATURES: usize = 32;
/// Hidden width of the two hidden layers.
pub(crate) const HIDDEN: usize = 128;
/// Classes.
pub(crate) const CLASSES: usize = 4;

/// Uniform in [0, 1) with 53 bits.
fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Standard normal (Box–Muller).
fn normal(rng: &mut SplitMix64) -> f64 {
    let u1 = 1.0 - uniform(rng); // (0, 1]
    let u2 = uniform(rng);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Spread of the class centres relative to the unit noise: overlapping blobs, so the loss
/// falls over the whole run rather than in a few steps.
const CENTER_SCALE: f64 = 0.25;

/// The synthetic data set: `SAMPLES` points in `CLASSES` Gaussian blobs.
fn synthetic_data(seed: u64, device: &Device) -> candle_core::Result<(Tensor, Tensor)> {
    let mut rng = SplitMix64::seed_from_u64(seed ^ 0xDA7A_DA7A_DA7A_DA7A);
    let centers: Vec<f64> = (0..CLASSES * FEATURES)
        .map(|_| CENTER_SCALE * normal(&mut rng))
        .collect();
    let mut xs = Vec::with_capacity(SAMPLES * FEATURES);
    let mut ys = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let class = i % CLASSES;
        for f in 0..FEATURES {
            xs.push((centers[class * FEATURES + f] + normal(&mut rng)) as f32);
        }
        ys.push(class as u32);
    }
    Ok((
        Tensor::from_vec(xs, (SAMPLES, FEATURES), device)?,
        Tensor::from_vec(ys, SAMPLES, device)?,
    ))
}

/// Inserts seeded initial weights into `varmap` (uniform ±1/√fan_in, PyTorch's default).
fn seed_parameters(varmap: &VarMap, seed: u64, device: &Device) -> candle_core::Result<()> {
    let mut rng = SplitMix64::seed_from_u64(seed ^ 0x5EED_5EED_5EED_5EED);
    let dims = layer_dims();
    let mut data = varmap
        .data()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (i, (fan_in, fan_out)) in dims.iter().copied().enumerate() {
        let bound = 1.0 / (fan_in as f64).sqrt();
        let w: Vec<f32> = (0..fan_in * fan_out)
            .map(|_| ((uniform(&mut rng) * 2.0 - 1.0) * bound) as f32)
            .collect();
        let b: Vec<f32> = (0..fan_out)
            .map(|_| ((uniform(&mut rng) * 2.0 - 1.0) * bound) as f32)
            .collect();
        data.insert(
            format!("layers.{i}.weight"),
            Var::from_tensor(&Tensor::from_vec(w, (fan_out, fan_in), device)?)?,
        );
        data.insert(
            format!("layers.{i}.bias"),
            Var::from_tensor(&Tensor::from_vec(b, fan_out, device)?)?,
        );
    }
    Ok(())
}

fn layer_dims() -> [(usize, usize); 3] {
    [(FEATURES, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, CLASSES)]
}

/// Runs `f`, through the capture when there is one.
fn op(
    capture: Option<&Capture>,
    name: &str,
    inputs: &[&Tensor],
    f: impl FnOnce() -> candle_core::Result<Tensor>,
) -> candle_core::Result<Tensor> {
    match capture {
        Some(c) => c.op(name, inputs, f),
        None => f(),
    }
}

/// One layer of the MLP: a candle-nn `Linear` computed as captured `matmul` + `add`, then
/// `relu` for hidden layers.
#[derive(Debug, Clone)]
pub(crate) struct DemoLayer {
    linear: Linear,
    relu: bool,
    capture: Option<Capture>,
}

impl Module for DemoLayer {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let p = self.capture.as_ref();
        let w = self.linear.weight();
        // [batch, in] × [in, out]: 2·batch·in·out floating-point operations.
        let flops = 2 * (xs.elem_count() as u64) * (w.dim(0)? as u64);
        let y = match p {
            Some(p) => p.op_with_flops("matmul", &[xs, w], flops, || xs.matmul(&w.t()?))?,
            None => xs.matmul(&w.t()?)?,
        };
        let y = match self.linear.bias() {
            Some(b) => op(p, "add", &[&y, b], || y.broadcast_add(b))?,
            None => y,
        };
        if self.relu {
            op(p, "relu", &[&y], || y.relu())
        } else {
            Ok(y)
        }
    }
}

#[derive(Debug)]
enum Model {
    Plain(Vec<DemoLayer>),
    Profiled(ProfiledSequence<DemoLayer>),
}

impl Module for Model {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Model::Plain(layers) => {
                let mut cur = xs.clone();
                for l in layers {
                    cur = l.forward(&cur)?;
                }
                Ok(cur)
            }
            Model::Profiled(seq) => seq.forward(xs),
        }
    }
}

/// The demo's model, data and optimizer: one [`MlpTrainer::step`] is one full-batch training
/// step. With a capture, the model is a [`ProfiledSequence`] (`model`, `model/layers.{i}`)
/// of captured layers, and each step records inputs, parameters, gradients, AdamW state and
/// forward / backward / optimizer spans, then ends the step ([`Capture::step`]). Without
/// one, the same computation runs with no instrumentation at all (the benchmark's baseline).
pub(crate) struct MlpTrainer {
    model: Model,
    optimizer: AdamW,
    x: Tensor,
    y: Tensor,
    capture: Option<Capture>,
}

impl std::fmt::Debug for MlpTrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MlpTrainer")
            .field("model", &self.model)
            .field("capturing", &self.capture.is_some())
            .finish_non_exhaustive()
    }
}

impl MlpTrainer {
    /// Builds the data, the model and the optimizer from `seed`.
    pub(crate) fn new(
        capture: Option<&Capture>,
        seed: u64,
        learning_rate: f64,
    ) -> Result<Self, CaptureError> {
        let device = Device::Cpu;
        let (x, y) = synthetic_data(seed, &device)?;
        let varmap = VarMap::new();
        seed_parameters(&varmap, seed, &device)?;
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &device);
        let dims = layer_dims();
        let mut layers = Vec::with_capacity(dims.len());
        for (i, (fan_in, fan_out)) in dims.iter().copied().enumerate() {
            layers.push(DemoLayer {
                linear: candle_nn::linear(fan_in, fan_out, vb.pp(format!("layers.{i}")))?,
                relu: i + 1 < dims.len(),
                capture: capture.cloned(),
            });
        }
        let model = match capture {
            Some(c) => Model::Profiled(c.profile_sequence("model", layers)),
            None => Model::Plain(layers),
        };
        let optimizer = AdamW::new(
            varmap.all_vars(),
            ParamsAdamW {
                lr: learning_rate,
                ..ParamsAdamW::default()
            },
        )?;
        if let Some(c) = capture {
            c.parameters_varmap(&varmap);
            c.estimate_optimizer_state(OptimizerKind::AdamW);
        }
        Ok(MlpTrainer {
            model,
            optimizer,
            x,
            y,
            capture: capture.cloned(),
        })
    }

    /// One full-batch training step; returns the loss before the update.
    pub(crate) fn step(&mut self) -> Result<f32, CaptureError> {
        let capture = self.capture.as_ref();
        let loss = {
            let _forward = capture.map(|c| c.phase("forward", ExecStep::Forward));
            if let Some(c) = capture {
                c.record_input(&self.x, "x");
                c.record_input(&self.y, "y");
            }
            let logits = self.model.forward(&self.x)?;
            let lsm = op(capture, "log_softmax", &[&logits], || {
                candle_nn::ops::log_softmax(&logits, 1)
            })?;
            op(capture, "nll", &[&lsm, &self.y], || {
                candle_nn::loss::nll(&lsm, &self.y)
            })?
        };
        let grads = {
            let _backward = capture.map(|c| c.phase("backward", ExecStep::Backward));
            let grads = loss.backward()?;
            if let Some(c) = capture {
                c.record_gradients(&grads)?;
            }
            grads
        };
        {
            let _optimizer = capture.map(|c| c.phase("optimizer", ExecStep::Optimizer));
            self.optimizer.step(&grads)?;
        }
        let value = loss.to_scalar::<f32>()?;
        if let Some(c) = capture {
            c.step();
        }
        Ok(value)
    }

    /// The fraction of training samples classified correctly (not captured).
    pub(crate) fn accuracy(&self) -> Result<f32, CaptureError> {
        let layers: Vec<&DemoLayer> = match &self.model {
            Model::Plain(l) => l.iter().collect(),
            Model::Profiled(seq) => seq
                .layers()
                .iter()
                .map(trace_candle::Profiled::inner)
                .collect(),
        };
        let mut logits = self.x.clone();
        for l in layers {
            // The same computation as `DemoLayer::forward`, without capture.
            let w = l.linear.weight();
            logits = logits.matmul(&w.t()?)?;
            if let Some(b) = l.linear.bias() {
                logits = logits.broadcast_add(b)?;
            }
            if l.relu {
                logits = logits.relu()?;
            }
        }
        let pred = logits.argmax(1)?;
        let correct = pred
            .eq(&self.y)?
            .to_dtype(DType::F32)?
            .sum_all()?
            .to_scalar::<f32>()?;
        Ok(correct / SAMPLES as f32)
    }
}
