//! The CPU sampler: call stacks of every thread, sampled while the schedule records, attributed to step, thread, phase and span.
//!
//! Candle has no per-op hooks, so backward is one opaque span and a library model's layers
//! show only their `tracing` spans. The call stacks of a Rust program name all of it: the
//! model's code, Candle's ops and kernels (`candle_core::cpu_backend::…`, `gemm…`) and
//! backward (`candle_core::backprop::…::backward`). Turn sampling on with one line,
//! [`Capture::sample_stacks`]:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use trace_candle::{Capture, Phase, Run, SamplerConfig, TraceSession};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let capture = Capture::open("train.trace.jsonl", Run::new("train", Phase::Train, "cpu"))?;
//! capture.sample_stacks(SamplerConfig::default())?; // about 1 kHz of CPU time
//! // ... the training loop, with `capture.step()` per step ...
//! capture.finish()?;
//! # Ok(())
//! # }
//! ```
//!
//! How it works (Linux): the process CPU-time timer (`ITIMER_PROF`) sends `SIGPROF` to the
//! thread that is running, once per period of CPU time used by any thread, so every busy
//! thread is sampled (Candle's and gemm's worker threads included) and idle ones cost nothing.
//! The handler ([`signal`], the crate's one unsafe module) reads the stack with the
//! `backtrace` crate's unwinder into a preallocated lock-free buffer ([`ring`]), with the
//! step, the thread and the capture's scope (phase and innermost phase or module span,
//! [`scope`]). A sampler thread drains the buffer, symbolizes and demangles the frames
//! (inlined functions too, from the line tables that the release profile keeps), interns
//! frames and stacks, and when a recorded step ends writes its `samples` lines and a
//! `sampler` line with the samples taken and lost and the process CPU time (schema version 2).
//!
//! - Only inside the schedule's active windows: the timer is armed when a recorded step
//!   begins and disarmed when recording stops; outside, no signal, no sample.
//! - Off unless asked for: without `sample_stacks` there is no handler, no timer and no
//!   thread; without the `sampler` feature the hooks in the capture compile to nothing.
//! - Honest numbers: a step's `taken` is the sum of its `samples` lines; samples that found
//!   the buffer full, or arrived after their step was written, are counted as `lost`; the
//!   effective rate is `taken` ÷ process CPU time ([`SamplerStats::effective_hz`]).
//! - One sampler per process (the timer and the signal are process-wide): a second
//!   `sample_stacks` anywhere in the process gets [`SamplerError::Busy`].
//! - End the run with [`Capture::finish`], which writes the last step's samples before the
//!   trailer (a session finished directly loses them, reported in
//!   [`SamplerStats::unwritten_steps`]).
//!
//! On other platforms the feature compiles and `sample_stacks` returns
//! [`SamplerError::Unavailable`].

use std::sync::Arc;

use crate::Capture;

#[cfg(all(feature = "sampler", target_os = "linux"))]
mod ring;
#[cfg(all(feature = "sampler", target_os = "linux"))]
mod scope;
#[cfg(all(feature = "sampler", target_os = "linux"))]
mod signal;
#[cfg(all(feature = "sampler", target_os = "linux"))]
mod symbols;
#[cfg(all(feature = "sampler", target_os = "linux"))]
mod worker;

#[cfg(all(test, feature = "sampler", target_os = "linux"))]
mod tests;

/// The default sampling rate: samples per second of process CPU time.
pub const DEFAULT_HZ: u32 = 1000;

/// How to sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerConfig {
    /// Samples per second of process CPU time (all threads together), 1 to 10,000. The
    /// kernel's timer tick may cap what is achieved: see [`SamplerStats::effective_hz`].
    pub hz: u32,
}

impl Default for SamplerConfig {
    /// [`DEFAULT_HZ`] (about 1 kHz).
    fn default() -> Self {
        SamplerConfig { hz: DEFAULT_HZ }
    }
}

impl SamplerConfig {
    /// A configuration sampling at `hz` per CPU second.
    pub fn hz(hz: u32) -> Self {
        SamplerConfig { hz }
    }
}

/// Why sampling could not start.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    /// Sampling is not available on this platform or build.
    #[error("CPU sampling is unavailable: {reason}")]
    Unavailable {
        /// Why.
        reason: &'static str,
    },
    /// Another sampler is running in this process (the timer and signal are process-wide).
    #[error("another CPU sampler is already running in this process")]
    Busy,
    /// This capture is already sampling.
    #[error("this capture is already sampling")]
    AlreadySampling,
    /// The rate is outside 1 to 10,000 samples per second.
    #[error("sampling rate {hz} Hz is outside 1..=10000")]
    InvalidRate {
        /// The rate asked for.
        hz: u32,
    },
    /// Installing the signal handler, arming the timer or starting the thread failed.
    #[error("starting the CPU sampler: {0}")]
    Io(#[from] std::io::Error),
}

/// What a sampler has accounted for so far (steps whose lines were written).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SamplerStats {
    /// The requested rate.
    pub hz: u32,
    /// Recorded steps accounted for.
    pub steps: u64,
    /// Samples taken (written in `samples` lines).
    pub taken: u64,
    /// Samples lost (buffer full, or arrived after their step was written).
    pub lost: u64,
    /// Process CPU time over those steps, when the platform reports it.
    pub cpu_ns: Option<u64>,
    /// Wall time sampled.
    pub wall_ns: u64,
    /// Steps whose lines could not be written (the session was already finished).
    pub unwritten_steps: u64,
}

impl SamplerStats {
    /// Samples per second of process CPU time achieved (`taken` ÷ `cpu_ns`).
    pub fn effective_hz(&self) -> Option<f64> {
        self.cpu_ns
            .filter(|&ns| ns > 0)
            .map(|ns| self.taken as f64 / (ns as f64 / 1e9))
    }
}

impl Capture {
    /// Starts sampling the process's call stacks at `config.hz` per CPU second, inside the
    /// session's active windows only, until [`Capture::finish`] (see the [module
    /// docs](crate::sampler)). One line turns it on:
    /// `capture.sample_stacks(SamplerConfig::default())?`.
    pub fn sample_stacks(&self, config: SamplerConfig) -> Result<(), SamplerError> {
        if !(1..=10_000).contains(&config.hz) {
            return Err(SamplerError::InvalidRate { hz: config.hz });
        }
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

/// The capture's sampler, if one was started (a field of the capture; its hooks are called
/// at step boundaries and at finish).
#[derive(Debug, Default)]
pub(crate) struct SamplerSlot {
    #[cfg(all(feature = "sampler", target_os = "linux"))]
    imp: linux::Slot,
}

/// The guard of a sampler scope (restores the previous one when dropped).
#[cfg(all(feature = "sampler", target_os = "linux"))]
pub(crate) type Scoped = Option<scope::Scope>;
/// The guard of a sampler scope (nothing without the feature).
#[cfg(not(all(feature = "sampler", target_os = "linux")))]
pub(crate) type Scoped = Option<std::convert::Infallible>;

/// Enters a phase or span scope for the sampler (no-op without a running sampler's feature).
#[cfg(all(feature = "sampler", target_os = "linux"))]
pub(crate) fn enter(
    phase: Option<trace_record::schema::ExecStep>,
    span: Option<trace_record::SpanId>,
) -> Scoped {
    linux::is_on().then(|| scope::enter(phase, span))
}

/// Enters a phase or span scope for the sampler (no-op without a running sampler's feature).
#[cfg(not(all(feature = "sampler", target_os = "linux")))]
pub(crate) fn enter(
    _phase: Option<trace_record::schema::ExecStep>,
    _span: Option<trace_record::SpanId>,
) -> Scoped {
    None
}

#[cfg(not(all(feature = "sampler", target_os = "linux")))]
impl SamplerSlot {
    fn start(
        &self,
        _session: &Arc<trace_record::TraceSession>,
        _config: SamplerConfig,
    ) -> Result<(), SamplerError> {
        Err(SamplerError::Unavailable {
            reason: if cfg!(target_os = "linux") {
                "trace-candle was built without its `sampler` feature"
            } else {
                "the sampler supports Linux only"
            },
        })
    }

    fn stats(&self) -> Option<SamplerStats> {
        None
    }

    /// Called after each `session.step()`.
    #[inline(always)]
    pub(crate) fn on_step(&self, _session: &trace_record::TraceSession) {}

    /// Called before the session finishes.
    #[inline(always)]
    pub(crate) fn stop(&self, _session: &trace_record::TraceSession) {}
}

#[cfg(all(feature = "sampler", target_os = "linux"))]
mod linux {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc::{self, Sender};
    use std::sync::{Arc, Mutex, MutexGuard};
    use std::thread::JoinHandle;

    use trace_record::TraceSession;

    use super::signal::{self, Handler, RECORDING, SELF_TID, STEP};
    use super::worker::{Msg, StepEnd, Worker};
    use super::{SamplerConfig, SamplerError, SamplerStats};

    /// A sampler runs somewhere in the process.
    static RUNNING: AtomicBool = AtomicBool::new(false);

    /// Whether a sampler runs (scope hooks do nothing otherwise).
    #[inline]
    pub(super) fn is_on() -> bool {
        RUNNING.load(Ordering::Relaxed)
    }

    #[derive(Debug, Default)]
    pub(super) struct Slot {
        /// Set while this capture samples (one relaxed load per step otherwise).
        on: AtomicBool,
        running: Mutex<Option<Running>>,
        stats: Mutex<Option<Arc<Mutex<SamplerStats>>>>,
    }

    struct Running {
        tx: Sender<Msg>,
        thread: Option<JoinHandle<()>>,
        handler: Option<Handler>,
        period_us: u64,
        armed: bool,
        /// The recorded step being sampled: (step, start ns, process CPU ns at start).
        window: Option<(u64, u64, Option<u64>)>,
    }

    impl std::fmt::Debug for Running {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Running")
                .field("period_us", &self.period_us)
                .field("armed", &self.armed)
                .field("window", &self.window)
                .finish_non_exhaustive()
        }
    }

    fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    impl Running {
        /// Moves to the session's current step: ends the window of the step that ended
        /// (sending its account), opens one when the new step is recorded, arms or disarms
        /// the timer.
        fn advance(&mut self, session: &TraceSession, stopping: bool) {
            let now = session.now_ns();
            let cpu = signal::process_cpu_ns();
            let step = session.current_step();
            let active = !stopping && session.is_active();
            STEP.store(step, Ordering::Relaxed);
            RECORDING.store(active, Ordering::Relaxed);
            if !active && self.armed {
                signal::disarm();
                self.armed = false;
            }
            if let Some((s, ts, cpu0)) = self.window.take() {
                let cpu_ns = match (cpu0, cpu) {
                    (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                    _ => None,
                };
                let _ = self.tx.send(Msg::StepEnd(StepEnd {
                    step: s,
                    ts,
                    dur: now.saturating_sub(ts),
                    cpu_ns,
                }));
            }
            if active {
                self.window = Some((step, now, cpu));
                if !self.armed && signal::arm(self.period_us).is_ok() {
                    self.armed = true;
                }
            }
        }
    }

    impl Slot {
        pub(super) fn start(
            &self,
            session: &Arc<TraceSession>,
            config: SamplerConfig,
        ) -> Result<(), SamplerError> {
            let mut running = lock(&self.running);
            if running.is_some() {
                return Err(SamplerError::AlreadySampling);
            }
            if RUNNING
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                return Err(SamplerError::Busy);
            }
            let ring = super::ring::ring();
            // Samples left from an earlier sampler in this process are not this one's.
            ring.drain(|_| {});
            ring.take_lost();
            let stats = Arc::new(Mutex::new(SamplerStats {
                hz: config.hz,
                cpu_ns: Some(0),
                ..SamplerStats::default()
            }));
            let (tx, rx) = mpsc::channel();
            let (tid_tx, tid_rx) = mpsc::channel();
            let worker = Worker::new(
                Arc::clone(session),
                u64::from(config.hz),
                Arc::clone(&stats),
            );
            let thread = std::thread::Builder::new()
                .name("tg-sampler".into())
                .spawn(move || {
                    let _ = tid_tx.send(signal::gettid());
                    worker.run(&rx);
                });
            let thread = match thread {
                Ok(t) => t,
                Err(e) => {
                    RUNNING.store(false, Ordering::Release);
                    return Err(e.into());
                }
            };
            SELF_TID.store(tid_rx.recv().unwrap_or(0), Ordering::Relaxed);
            let handler = match Handler::install(ring) {
                Ok(h) => h,
                Err(e) => {
                    drop(tx);
                    let _ = thread.join();
                    RUNNING.store(false, Ordering::Release);
                    return Err(e.into());
                }
            };
            let mut r = Running {
                tx,
                thread: Some(thread),
                handler: Some(handler),
                period_us: (1_000_000 / u64::from(config.hz)).max(1),
                armed: false,
                window: None,
            };
            r.advance(session, false);
            *running = Some(r);
            *lock(&self.stats) = Some(stats);
            self.on.store(true, Ordering::Release);
            Ok(())
        }

        pub(super) fn stats(&self) -> Option<SamplerStats> {
            lock(&self.stats).as_ref().map(|s| *lock(s))
        }

        pub(super) fn on_step(&self, session: &TraceSession) {
            if !self.on.load(Ordering::Relaxed) {
                return;
            }
            if let Some(r) = lock(&self.running).as_mut() {
                r.advance(session, false);
            }
        }

        pub(super) fn stop(&self, session: &TraceSession) {
            if !self.on.swap(false, Ordering::AcqRel) {
                return;
            }
            let Some(mut r) = lock(&self.running).take() else {
                return;
            };
            r.advance(session, true);
            // Restore the previous SIGPROF action (the timer is already disarmed).
            drop(r.handler.take());
            let _ = r.tx.send(Msg::Stop);
            if let Some(t) = r.thread.take() {
                let _ = t.join();
            }
            RUNNING.store(false, Ordering::Release);
        }
    }

    impl Drop for Slot {
        fn drop(&mut self) {
            if self.on.swap(false, Ordering::AcqRel)
                && let Some(mut r) = lock(&self.running).take()
            {
                RECORDING.store(false, Ordering::Relaxed);
                signal::disarm();
                drop(r.handler.take());
                let _ = r.tx.send(Msg::Stop);
                if let Some(t) = r.thread.take() {
                    let _ = t.join();
                }
                RUNNING.store(false, Ordering::Release);
            }
        }
    }
}

#[cfg(all(feature = "sampler", target_os = "linux"))]
impl SamplerSlot {
    fn start(
        &self,
        session: &Arc<trace_record::TraceSession>,
        config: SamplerConfig,
    ) -> Result<(), SamplerError> {
        self.imp.start(session, config)
    }

    fn stats(&self) -> Option<SamplerStats> {
        self.imp.stats()
    }

    /// Called after each `session.step()`: ends the sampled window of the step that ended,
    /// opens one for a recorded step, arms or disarms the timer.
    #[inline]
    pub(crate) fn on_step(&self, session: &trace_record::TraceSession) {
        self.imp.on_step(session);
    }

    /// Called before the session finishes: writes the last step's samples, stops sampling.
    pub(crate) fn stop(&self, session: &trace_record::TraceSession) {
        self.imp.stop(session);
    }
}
