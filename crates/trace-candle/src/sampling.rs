//! The capture's CPU sampler: `sample_stacks`, `stop_sampling`, `sampler_stats`.
//!
//! The sampler itself is trace-sampler's (its `enabled` feature is this crate's `sampler`);
//! the capture holds one [`trace_sampler::Sampler`] and calls its hooks at step boundaries
//! and at finish. While a sampler runs, every span this crate opens or ends (phases, op scopes
//! that became spans, [`Capture::span`], module wrappers, the `tracing` layer's spans)
//! publishes the thread's innermost open span as the current scope
//! ([`trace_sampler::set_scope`]), so that samples are attributed to it; with no sampler
//! running, that costs one relaxed load.

use crate::{Capture, SamplerConfig, SamplerError, SamplerStats};

impl Capture {
    /// Starts sampling the process's call stacks at `config.hz` per CPU second, inside the
    /// session's active windows only, until [`Capture::finish`] (feature `sampler`, Linux;
    /// otherwise [`SamplerError::Unavailable`]). One line turns it on:
    ///
    /// ```no_run
    /// # use trace_candle::{Capture, Phase, Run, SamplerConfig};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let capture = Capture::open("train.trace.jsonl", Run::new("train", Phase::Train, "cpu"))?;
    /// capture.sample_stacks(SamplerConfig::default())?; // about 1 kHz of CPU time
    /// // ... the training loop, with `capture.step()` per step ...
    /// capture.finish()?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Samples are attributed to the step, the thread, the phase, and the innermost span open
    /// on the thread at the time, whatever its kind: a phase, an op that became a span, a
    /// [`Capture::span`], a module wrapper's or a `tracing` span (worker threads to the
    /// driving thread's). One sampler per
    /// process: a second `sample_stacks` anywhere in the process gets [`SamplerError::Busy`].
    /// End the run with [`Capture::finish`], which writes the last step's samples before the
    /// trailer (a session finished directly loses them, reported in
    /// [`SamplerStats::unwritten_steps`]). How sampling works is in trace-sampler's docs.
    pub fn sample_stacks(&self, config: SamplerConfig) -> Result<(), SamplerError> {
        self.inner().sampler.start(self.session(), config)
    }

    /// Stops sampling now: writes the current recorded step's samples (when one is open) and
    /// ends the sampler thread. [`Capture::finish`] does this; call it before finishing the
    /// session directly ([`TraceSession::finish`](trace_record::TraceSession::finish)).
    /// Nothing happens when this capture is not sampling.
    pub fn stop_sampling(&self) {
        self.inner().sampler.stop(self.session());
    }

    /// What the sampler has accounted for so far; `None` when this capture never sampled.
    pub fn sampler_stats(&self) -> Option<SamplerStats> {
        self.inner().sampler.stats()
    }
}
