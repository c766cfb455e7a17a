//! Profiled modules: [`Profiled`], [`ProfiledT`] and [`ProfiledSequence`] record one module
//! span per forward, named by the module's path.
//!
//! Candle implements [`ModuleT`] for every [`Module`] (`impl<M: Module> ModuleT for M`), so
//! [`Profiled`] (for modules implementing `Module`) is both a `Module` and a `ModuleT`, and
//! [`ProfiledT`] covers modules that implement only `ModuleT` (dropout, batch norm), passing
//! the `train` flag through. Wrappers nest: a profiled module called inside another's forward
//! opens its span inside the outer span, so the trace holds the module tree
//! (`model` → `layers.0` → …, the paths `model`, `model/layers.0`, …).
//!
//! A wrapper's span is named by its path relative to the innermost profiled module open on
//! the same thread when its path extends that one (`layers.0` inside `model`, for
//! `model/layers.0`), else by its whole path, so the span tree's paths are the module paths
//! (`forward/model/layers.0`, not `forward/model/model/layers.0`).
//!
//! Each span carries a `tensor` event for the input (label `module_input`) and for the output
//! (label `module_output`) with their shapes, and the output's allocation (activation bytes in the
//! forward step), freed at the end of the step.

use candle_core::{Module, ModuleT, Tensor};

use crate::Capture;

impl Capture {
    /// Wraps `module` so every forward is a module span named `path`.
    pub fn profile<M>(&self, path: impl Into<String>, module: M) -> Profiled<M> {
        Profiled::new(self, path, module)
    }

    /// Wraps `module` (a [`candle_core::ModuleT`]) so every forward is a module span.
    pub fn profile_t<M>(&self, path: impl Into<String>, module: M) -> ProfiledT<M> {
        ProfiledT::new(self, path, module)
    }

    /// Wraps each layer of a sequence: the sequence is a module span named `path`, layer `i`
    /// a child span named `{path}/layers.{i}`.
    pub fn profile_sequence<M>(
        &self,
        path: impl Into<String>,
        layers: impl IntoIterator<Item = M>,
    ) -> ProfiledSequence<M> {
        ProfiledSequence::new(self, path, layers)
    }
}

/// A module whose every forward is a module span named by its path.
#[derive(Debug, Clone)]
pub struct Profiled<M> {
    capture: Capture,
    path: String,
    inner: M,
}

impl<M> Profiled<M> {
    /// Wraps `inner`; its spans are named `path` (e.g. `model/layers.3/mlp`).
    pub fn new(capture: &Capture, path: impl Into<String>, inner: M) -> Self {
        Profiled {
            capture: capture.clone(),
            path: path.into(),
            inner,
        }
    }

    /// The span name.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The wrapped module.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Unwraps the module.
    pub fn into_inner(self) -> M {
        self.inner
    }

    /// Wraps `child` as `{path}/{name}`: a submodule of this one.
    pub fn child<N>(&self, name: &str, child: N) -> Profiled<N> {
        Profiled::new(&self.capture, format!("{}/{name}", self.path), child)
    }
}

impl<M: Module> Module for Profiled<M> {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        self.capture
            .module_call(&self.path, xs, |xs| self.inner.forward(xs))
    }
}

/// A [`ModuleT`]-only module whose every `forward_t` is a module span named by its path.
#[derive(Debug, Clone)]
pub struct ProfiledT<M> {
    capture: Capture,
    path: String,
    inner: M,
}

impl<M> ProfiledT<M> {
    /// Wraps `inner`; its spans are named `path`.
    pub fn new(capture: &Capture, path: impl Into<String>, inner: M) -> Self {
        ProfiledT {
            capture: capture.clone(),
            path: path.into(),
            inner,
        }
    }

    /// The span name.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The wrapped module.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Unwraps the module.
    pub fn into_inner(self) -> M {
        self.inner
    }
}

impl<M: ModuleT> ModuleT for ProfiledT<M> {
    fn forward_t(&self, xs: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        self.capture
            .module_call(&self.path, xs, |xs| self.inner.forward_t(xs, train))
    }
}

/// A sequence of layers applied in order: a module span `path` around child spans
/// `{path}/layers.{i}`, one per layer.
#[derive(Debug, Clone)]
pub struct ProfiledSequence<M> {
    capture: Capture,
    path: String,
    layers: Vec<Profiled<M>>,
}

impl<M> ProfiledSequence<M> {
    /// Wraps each of `layers`.
    pub fn new(
        capture: &Capture,
        path: impl Into<String>,
        layers: impl IntoIterator<Item = M>,
    ) -> Self {
        let path = path.into();
        let layers = layers
            .into_iter()
            .enumerate()
            .map(|(i, m)| Profiled::new(capture, format!("{path}/layers.{i}"), m))
            .collect();
        ProfiledSequence {
            capture: capture.clone(),
            path,
            layers,
        }
    }

    /// The span name of the whole sequence.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The wrapped layers.
    pub fn layers(&self) -> &[Profiled<M>] {
        &self.layers
    }

    /// The number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl<M: Module> Module for ProfiledSequence<M> {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        self.capture.module_call(&self.path, xs, |xs| {
            let mut cur = xs.clone();
            for layer in &self.layers {
                cur = layer.forward(&cur)?;
            }
            Ok(cur)
        })
    }
}
