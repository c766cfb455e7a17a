//! The profiled Llama of the `llama` and `flight` suites: [`Model`] (a candle-transformers
//! Llama with `profile_llama`'s capture lines, or none), [`Omit`] (which of those lines
//! the profiled model leaves out) and the example's [`prompt`].
//!
//! Included by path (`#[path = "shared/tiny_llama.rs"] mod tiny_llama;`; a subfolder, since
//! `cargo xtask bench` runs every top-level `benches/benches/*.rs` as a suite) into suites
//! that also include `crates/trace-candle/examples/profile_llama.rs` as `mod profile_llama`
//! at their root, whose [`DECODE`] and [`PROMPT`] it uses.
//!
//! The profiled model carries exactly the example's capture lines: its `tracing` spans go to
//! the capture's subscriber (`Capture::tracing_subscriber`, as a scoped default while the
//! model is built; with `TRACEGRAPH_LLAMA_TRACING=layer`, the `llama` suite's diagnosis,
//! which any suite building this model follows, a registry with `TraceLayer::for_capture`
//! instead), parameters are registered, resident memory is sampled
//! at step ends, each forward is `capture.op("llama.forward", ..)`, the KV cache is declared
//! per decode step (`buffer_shape`) and each forward ends with `step()`.

use std::error::Error;

use candle_core::{DType, Device, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use candle_transformers::models::llama::{Cache, Config, Llama};
use trace_candle::{Capture, TraceLayer};
use tracing_subscriber::layer::SubscriberExt;

use super::profile_llama::{DECODE, PROMPT};

type Res<T> = Result<T, Box<dyn Error>>;

/// Capture lines left out of the profiled model (`TRACEGRAPH_LLAMA_OMIT`, see the `llama`
/// suite's doc); all false in the suites' rows.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Omit {
    /// The model is built without the capture's subscriber: its `tracing` spans are disabled.
    pub(crate) spans: bool,
    /// The forward is not wrapped in `capture.op`.
    pub(crate) op: bool,
    /// No `step()` per forward.
    pub(crate) step: bool,
    /// No `buffer_shape` of the KV cache.
    pub(crate) buffer: bool,
    /// No resident-memory samples.
    pub(crate) memory: bool,
}

#[allow(
    dead_code,
    reason = "the diagnosis TRACEGRAPH_LLAMA_OMIT is the llama suite's; flight uses Omit::default()"
)]
impl Omit {
    /// Names the diagnostic variable that sets [`Omit`].
    pub(crate) const VAR: &'static str = "TRACEGRAPH_LLAMA_OMIT";

    /// From [`Omit::VAR`]; an unknown name is an error.
    pub(crate) fn from_env() -> Res<Omit> {
        let mut omit = Omit::default();
        let Ok(list) = std::env::var(Self::VAR) else {
            return Ok(omit);
        };
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "spans" => omit.spans = true,
                "op" => omit.op = true,
                "step" => omit.step = true,
                "buffer" => omit.buffer = true,
                "memory" => omit.memory = true,
                other => {
                    return Err(format!(
                        "{}: unknown part {other:?} (spans, op, step, buffer, memory)",
                        Self::VAR
                    )
                    .into());
                }
            }
        }
        Ok(omit)
    }

    /// Whether anything is left out.
    pub(crate) fn any(self) -> bool {
        self.spans || self.op || self.step || self.buffer || self.memory
    }

    /// What is left out, joined by `+` ("" when nothing is).
    pub(crate) fn names(self) -> String {
        let parts = [
            (self.spans, "spans"),
            (self.op, "op"),
            (self.step, "step"),
            (self.buffer, "buffer"),
            (self.memory, "memory"),
        ];
        let names: Vec<&str> = parts.iter().filter(|(o, _)| *o).map(|(_, n)| *n).collect();
        names.join("+")
    }
}

/// One tiny Llama, profiled (`capture` set) or not, with an AdamW optimizer when built
/// [`Model::trainable`].
pub(crate) struct Model {
    cfg: Config,
    device: Device,
    llama: Llama,
    varmap: VarMap,
    optimizer: Option<AdamW>,
    /// The capture the model records into; `None` for the unprofiled model.
    pub(crate) capture: Option<Capture>,
    /// Capture lines the profiled model leaves out.
    pub(crate) omit: Omit,
}

impl Model {
    /// A model with random weights. Profiled: its `tracing` spans are made under `capture`'s
    /// layer, its weights are registered as parameters and resident memory is sampled at
    /// every step. Unprofiled: built under no subscriber, so its spans are disabled.
    pub(crate) fn new(capture: Option<Capture>, cfg: &Config, omit: Omit) -> Res<Self> {
        let device = Device::Cpu;
        let cfg = cfg.clone();
        let varmap = VarMap::new();
        let load = || Llama::load(VarBuilder::from_varmap(&varmap, DType::F32, &device), &cfg);
        let llama = match &capture {
            Some(_) if omit.spans => load()?,
            Some(c) => {
                if std::env::var("TRACEGRAPH_LLAMA_TRACING").as_deref() == Ok("layer") {
                    let subscriber =
                        tracing_subscriber::registry().with(TraceLayer::for_capture(c));
                    tracing::subscriber::with_default(subscriber, load)?
                } else {
                    tracing::subscriber::with_default(c.tracing_subscriber(), load)?
                }
            }
            None => load()?,
        };
        let capture = capture.map(|c| {
            if omit.memory {
                c
            } else {
                c.sampling_memory(&device)
            }
        });
        if let Some(c) = &capture {
            c.parameters_varmap(&varmap);
        }
        Ok(Model {
            cfg,
            device,
            llama,
            varmap,
            optimizer: None,
            capture,
            omit,
        })
    }

    /// One forward, as `capture.op("llama.forward", ..)` when profiled.
    fn forward(&self, input: &Tensor, pos: usize, cache: &mut Cache) -> Res<Tensor> {
        let mut forward = || self.llama.forward(input, pos, cache);
        Ok(match &self.capture {
            Some(c) if !self.omit.op => c.op("llama.forward", &[input], forward)?,
            _ => forward()?,
        })
    }

    /// Prefill of `prompt`, then [`DECODE`] greedy decode steps with a fresh KV cache; one
    /// step per forward. Returns the generated tokens.
    pub(crate) fn generate(&self, prompt: &[u32]) -> Res<Vec<u32>> {
        let cfg = &self.cfg;
        let head_dim = cfg.hidden_size / cfg.num_attention_heads;
        let mut cache = Cache::new(true, DType::F32, cfg, &self.device)?;
        let mut tokens = prompt.to_vec();
        let mut pos = 0;
        for step in 0..=DECODE {
            let context = if step == 0 {
                &tokens[..]
            } else {
                &tokens[tokens.len() - 1..]
            };
            let input = Tensor::new(context, &self.device)?.unsqueeze(0)?;
            let logits = self.forward(&input, pos, &mut cache)?;
            pos += context.len();
            if let Some(c) = self.capture.as_ref().filter(|_| !self.omit.buffer) {
                let kv_shape = [
                    cfg.num_hidden_layers,
                    2,
                    1,
                    cfg.num_key_value_heads,
                    pos,
                    head_dim,
                ];
                c.buffer_shape("kv_cache", &kv_shape, DType::F32, &self.device);
            }
            tokens.push(logits.squeeze(0)?.argmax(0)?.to_scalar::<u32>()?);
            if let Some(c) = self.capture.as_ref().filter(|_| !self.omit.step) {
                c.step();
            }
        }
        Ok(tokens.split_off(prompt.len()))
    }
}

#[allow(
    dead_code,
    reason = "training is the llama suite's (its train_step rows); flight only generates"
)]
impl Model {
    /// The model with its AdamW optimizer (learning rate 1e-3) over all its weights, which
    /// [`Model::train_step`] needs.
    pub(crate) fn trainable(mut self) -> Res<Self> {
        let params = ParamsAdamW {
            lr: 1e-3,
            ..ParamsAdamW::default()
        };
        self.optimizer = Some(AdamW::new(self.varmap.all_vars(), params)?);
        Ok(self)
    }

    /// One training step: next-token prediction of `sequence[PROMPT]` from the first
    /// [`PROMPT`] tokens (forward without KV cache, cross-entropy, backward, AdamW). Returns
    /// the loss; an error when the model is not [`Model::trainable`].
    pub(crate) fn train_step(&mut self, sequence: &[u32]) -> Res<f32> {
        let input = Tensor::new(&sequence[..PROMPT], &self.device)?.unsqueeze(0)?;
        let target = Tensor::new(&sequence[PROMPT..=PROMPT], &self.device)?;
        let mut no_kv = Cache::new(false, DType::F32, &self.cfg, &self.device)?;
        let logits = self.forward(&input, 0, &mut no_kv)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &target)?;
        let grads = match &self.capture {
            Some(c) => c.backward(&loss)?,
            None => loss.backward()?,
        };
        let optimizer = self
            .optimizer
            .as_mut()
            .ok_or("train_step: the model was not built trainable")?;
        optimizer.step(&grads)?;
        if let Some(c) = &self.capture {
            c.step();
        }
        Ok(loss.to_scalar::<f32>()?)
    }
}

/// The prompt `profile_llama` generates from: [`PROMPT`] tokens.
pub(crate) fn prompt() -> Vec<u32> {
    (0..PROMPT as u32).map(|i| (i * 37 + 11) % 1000).collect()
}
