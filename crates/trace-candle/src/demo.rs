//! The demo training run (feature `nn`): a 3-layer MLP on synthetic classification data,
//! captured with a schedule. Used by the `train_mlp` example and `tracegraph demo`.
//!
//! Everything is deterministic given the seed: the data (Gaussian blobs) and the initial
//! weights come from a seeded SplitMix64 generator in this module, not from Candle's
//! unseedable CPU random generator, and training is full-batch.
//!
//! ```no_run
//! use trace_candle::demo::{MlpDemoConfig, run_mlp_demo};
//! # fn main() -> Result<(), trace_candle::Error> {
//! let report = run_mlp_demo(&MlpDemoConfig::new("demo.trace.jsonl"))?;
//! println!("trace: {}, loss {} -> {}", report.trace_path.display(), report.first_loss,
//!     report.last_loss);
//! # Ok(())
//! # }
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use candle_core::{DType, Device, Module, Tensor, Var};
use candle_nn::{AdamW, Linear, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use trace_record::schema::{Phase, Schedule};
use trace_record::{Run, Summary, TraceSession};

use crate::train::{OptimizerKind, TrainingCapture};
use crate::{Capture, Error, Probe, ProfiledSequence};

/// Samples in the synthetic data set (one full batch per step).
pub const SAMPLES: usize = 1024;
/// Input features.
pub const FEATURES: usize = 32;
/// Hidden width of the two hidden layers.
pub const HIDDEN: usize = 128;
/// Classes.
pub const CLASSES: usize = 4;

/// The demo's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct MlpDemoConfig {
    /// Where the trace is written (parent directories are created).
    pub trace_path: PathBuf,
    /// Training steps (default 50).
    pub steps: u64,
    /// Which steps are recorded (default skip 5, warmup 2, active 3, repeat 2).
    pub schedule: Schedule,
    /// Seed of the data and the initial weights (default 42).
    pub seed: u64,
    /// AdamW learning rate (default 0.01).
    pub learning_rate: f64,
}

impl MlpDemoConfig {
    /// The default demo writing its trace to `trace_path`.
    pub fn new(trace_path: impl Into<PathBuf>) -> Self {
        MlpDemoConfig {
            trace_path: trace_path.into(),
            steps: 50,
            schedule: default_schedule(),
            seed: 42,
            learning_rate: 0.01,
        }
    }
}

impl Default for MlpDemoConfig {
    /// The default demo writing to `<temp dir>/tracegraph-demo.trace.jsonl`.
    fn default() -> Self {
        Self::new(std::env::temp_dir().join("tracegraph-demo.trace.jsonl"))
    }
}

/// The demo's schedule: skip 5, wait 0, warmup 2, active 3, repeat 2 (records steps 7–9 and
/// 12–14).
pub fn default_schedule() -> Schedule {
    Schedule {
        skip_first: 5,
        wait: 0,
        warmup: 2,
        active: 3,
        repeat: 2,
    }
}

/// What a demo run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct MlpDemoReport {
    /// Where the trace was written.
    pub trace_path: PathBuf,
    /// The loss of every step, in order.
    pub losses: Vec<f32>,
    /// The loss of the first step.
    pub first_loss: f32,
    /// The loss of the last step.
    pub last_loss: f32,
    /// Training accuracy after the last step, in `[0, 1]`.
    pub accuracy: f32,
    /// The steps the schedule recorded (0-based).
    pub recorded_steps: Vec<u64>,
    /// The session's summary (events by type, bytes, outcome).
    pub summary: Summary,
}

/// Runs the demo: trains the MLP for `config.steps` steps with capture on and writes the
/// trace to `config.trace_path`.
pub fn run_mlp_demo(config: &MlpDemoConfig) -> Result<MlpDemoReport, Error> {
    if config.steps == 0 {
        return Err(Error::Config("steps must be at least 1".to_string()));
    }
    if !(config.learning_rate.is_finite() && config.learning_rate > 0.0) {
        return Err(Error::Config(format!(
            "learning rate must be positive and finite, got {}",
            config.learning_rate
        )));
    }
    if let Some(parent) = config.trace_path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(|source| Error::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let run = Run::new("trace-candle::demo::run_mlp_demo", Phase::Train, "cpu")
        .schedule(config.schedule)
        .tag(
            "model",
            format!("mlp {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}"),
        )
        .tag("optimizer", "adamw")
        .tag("seed", config.seed.to_string())
        .version("trace-candle", env!("CARGO_PKG_VERSION"));
    let session = Arc::new(TraceSession::open(&config.trace_path, run)?);
    let capture = Capture::new(Arc::clone(&session));
    let mut trainer = MlpTrainer::new(Some(&capture), config.seed, config.learning_rate)?;
    let mut losses = Vec::with_capacity(usize::try_from(config.steps).unwrap_or(0));
    let mut recorded_steps = Vec::new();
    for step in 0..config.steps {
        if session.is_active() {
            recorded_steps.push(step);
        }
        match trainer.step() {
            Ok(loss) => losses.push(loss),
            Err(e) => {
                // Keep what was recorded readable and say why it stopped.
                let _ = session.fail(&e.to_string());
                return Err(e);
            }
        }
    }
    let accuracy = trainer.accuracy()?;
    let summary = session.finish()?;
    let first_loss = losses.first().copied().unwrap_or(f32::NAN);
    let last_loss = losses.last().copied().unwrap_or(f32::NAN);
    Ok(MlpDemoReport {
        trace_path: config.trace_path.clone(),
        losses,
        first_loss,
        last_loss,
        accuracy,
        recorded_steps,
        summary,
    })
}

/// SplitMix64: a tiny, seedable, portable generator (same stream on every platform).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 bits.
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// Spread of the class centres relative to the unit noise: overlapping blobs, so the loss
/// falls over the whole run rather than in a few steps.
const CENTER_SCALE: f64 = 0.25;

/// The synthetic data set: `SAMPLES` points in `CLASSES` Gaussian blobs.
fn synthetic_data(seed: u64, device: &Device) -> candle_core::Result<(Tensor, Tensor)> {
    let mut rng = SplitMix64(seed ^ 0xDA7A_DA7A_DA7A_DA7A);
    let centers: Vec<f64> = (0..CLASSES * FEATURES)
        .map(|_| CENTER_SCALE * rng.normal())
        .collect();
    let mut xs = Vec::with_capacity(SAMPLES * FEATURES);
    let mut ys = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let class = i % CLASSES;
        for f in 0..FEATURES {
            xs.push((centers[class * FEATURES + f] + rng.normal()) as f32);
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
    let mut rng = SplitMix64(seed ^ 0x5EED_5EED_5EED_5EED);
    let dims = layer_dims();
    let mut data = varmap.data().lock().unwrap_or_else(|e| e.into_inner());
    for (i, (fan_in, fan_out)) in dims.iter().copied().enumerate() {
        let bound = 1.0 / (fan_in as f64).sqrt();
        let w: Vec<f32> = (0..fan_in * fan_out)
            .map(|_| ((rng.uniform() * 2.0 - 1.0) * bound) as f32)
            .collect();
        let b: Vec<f32> = (0..fan_out)
            .map(|_| ((rng.uniform() * 2.0 - 1.0) * bound) as f32)
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

/// Runs `f`, through the probe when capturing.
fn op(
    probe: Option<&Probe>,
    name: &str,
    inputs: &[&Tensor],
    f: impl FnOnce() -> candle_core::Result<Tensor>,
) -> candle_core::Result<Tensor> {
    match probe {
        Some(p) => p.op(name, inputs, f),
        None => f(),
    }
}

/// One layer of the MLP: a candle-nn `Linear` computed as probed `matmul` + `add`, then
/// `relu` for hidden layers.
#[derive(Debug, Clone)]
pub struct DemoLayer {
    linear: Linear,
    relu: bool,
    probe: Option<Probe>,
}

impl Module for DemoLayer {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let p = self.probe.as_ref();
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
/// of probed layers, and each step records inputs, parameters, gradients, AdamW state and
/// forward / backward / optimizer spans, then ends the step ([`Capture::step`]). Without
/// one, the same computation runs with no instrumentation at all (the benchmark's baseline).
pub struct MlpTrainer {
    model: Model,
    varmap: VarMap,
    optimizer: AdamW,
    x: Tensor,
    y: Tensor,
    training: Option<TrainingCapture>,
    probe: Option<Probe>,
}

impl std::fmt::Debug for MlpTrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MlpTrainer")
            .field("model", &self.model)
            .field("capturing", &self.training.is_some())
            .finish_non_exhaustive()
    }
}

impl MlpTrainer {
    /// Builds the data, the model and the optimizer from `seed`.
    pub fn new(capture: Option<&Capture>, seed: u64, learning_rate: f64) -> Result<Self, Error> {
        let device = Device::Cpu;
        let (x, y) = synthetic_data(seed, &device)?;
        let varmap = VarMap::new();
        seed_parameters(&varmap, seed, &device)?;
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &device);
        let probe = capture.map(Capture::probe);
        let dims = layer_dims();
        let mut layers = Vec::with_capacity(dims.len());
        for (i, (fan_in, fan_out)) in dims.iter().copied().enumerate() {
            layers.push(DemoLayer {
                linear: candle_nn::linear(fan_in, fan_out, vb.pp(format!("layers.{i}")))?,
                relu: i + 1 < dims.len(),
                probe: probe.clone(),
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
        let training = capture.map(|c| {
            let mut t = TrainingCapture::new(c);
            t.watch_varmap(&varmap);
            t.estimate_optimizer_state(OptimizerKind::AdamW);
            t
        });
        Ok(MlpTrainer {
            model,
            varmap,
            optimizer,
            x,
            y,
            training,
            probe,
        })
    }

    /// The model's parameters.
    pub fn varmap(&self) -> &VarMap {
        &self.varmap
    }

    /// One full-batch training step; returns the loss before the update.
    pub fn step(&mut self) -> Result<f32, Error> {
        let training = self.training.as_ref();
        let probe = self.probe.as_ref();
        let loss = {
            let _forward = training.map(TrainingCapture::forward);
            if let Some(t) = training {
                t.capture().record_input(&self.x, "x");
                t.capture().record_input(&self.y, "y");
            }
            let logits = self.model.forward(&self.x)?;
            let lsm = op(probe, "log_softmax", &[&logits], || {
                candle_nn::ops::log_softmax(&logits, 1)
            })?;
            op(probe, "nll", &[&lsm, &self.y], || {
                candle_nn::loss::nll(&lsm, &self.y)
            })?
        };
        let grads = {
            let _backward = training.map(TrainingCapture::backward);
            let grads = loss.backward()?;
            if let Some(t) = training {
                t.record_gradients(&grads)?;
            }
            grads
        };
        {
            let _optimizer = training.map(TrainingCapture::optimizer);
            self.optimizer.step(&grads)?;
        }
        let value = loss.to_scalar::<f32>()?;
        if let Some(t) = training {
            t.end_step();
        }
        Ok(value)
    }

    /// The fraction of training samples classified correctly (not captured).
    pub fn accuracy(&self) -> Result<f32, Error> {
        let layers: Vec<&DemoLayer> = match &self.model {
            Model::Plain(l) => l.iter().collect(),
            Model::Profiled(seq) => seq.layers().iter().map(|p| p.inner()).collect(),
        };
        let mut logits = self.x.clone();
        for l in layers {
            // The same computation as `DemoLayer::forward`, without probes.
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
