//! trace-sampler: sampled CPU call stacks of every thread, attributed to step, phase and span.
//!
//! Candle has no per-op hooks, so backward is one opaque span and a library model's layers
//! show only their `tracing` spans. The call stacks of a Rust program name all of it: the
//! model's code, Candle's ops and kernels (`candle_core::cpu_backend::…`, `gemm…`) and
//! backward (`candle_core::backprop::…::backward`). A [`Sampler`] samples them into a
//! [`TraceSession`]; trace-candle's `Capture::sample_stacks` (its feature `sampler`) drives
//! one per capture, so a training loop turns sampling on with one line.
//!
//! How it works (Linux, feature `enabled`): by default a thread of the sampler's own (the
//! `ticker` module) wakes every period (1 s ÷ the rate) while sampling is armed, reads the
//! CPU-time clock of every thread of the process, and signals (`SIGPROF`, queued to that
//! thread alone) each thread that has used a period of CPU time since its last sample and
//! ran lately: each thread is sampled once per period of its own CPU time, from 1 to
//! 10,000 Hz, and a signal that finds its thread blocked in a system call takes no sample
//! ([`SamplerSource::Ticker`]). While a thread is owed more than one period the next tick
//! comes after half a period, to catch up, and the ticker asks the scheduler for a short time
//! slice so that it wakes on time. Threads are listed from `/proc/self/task` when sampling is
//! armed, and while it stays armed whenever their count (one `fstat`, every 5 ms) moves and
//! every 100 ms (Candle's, gemm's and rayon's workers, whenever they start).
//!
//! The kernel's own per-thread clock is the other source ([`SamplerSource::PerfEvent`], by
//! [`SamplerConfig::with_source`] or [`SOURCE_ENV`]): every thread of the process but the
//! sampler's own gets a software task-clock perf event (`perf_event_open`, user space only,
//! which `perf_event_paranoid` 2 allows a process on itself) that overflows after every
//! period of that thread's own CPU time and sends `SIGPROF` to that thread alone
//! (`F_SETOWN_EX` with `F_OWNER_TID`). Its rate is exact, but each such event keeps a
//! high-resolution timer that the kernel restarts at every context switch of its thread, and
//! where reprogramming the CPU's timer is expensive (a virtual machine) that makes every
//! switch dearer: a channel round trip between two threads measured 10 µs unsampled and
//! 44 µs with the events armed at 1 kHz, and a tiny Llama's generation, whose thread pools
//! switch at every op, ran 1.2–1.8× slower. Hence the ticker by default. Under
//! `perf_event_paranoid` 2 the perf events count user-space time only, so time in system
//! calls and page faults is not sampled. The `perf_sys` module (unsafe: `struct
//! perf_event_attr` and the `fcntl` numbers are declared there from the kernel's headers)
//! opens them, the `threads` module keeps them.
//!
//! Where a thread's CPU-time clock cannot be read and the kernel refuses perf events
//! (`perf_event_paranoid` 3, seccomp, containers without them: `EACCES`, `EPERM`, `ENOSYS`,
//! …) the sampler falls back to the process CPU-time timer
//! (`ITIMER_PROF`), which sends `SIGPROF` to the thread that is running once per period of
//! CPU time used by any thread; the kernel checks it on its scheduler tick, so it achieves
//! about the tick rate (often 200–250 Hz) whatever is asked. [`SamplerConfig::with_source`]
//! or the environment variable [`SOURCE_ENV`] (`ticker`, `perf_event`, `itimer`, `auto`)
//! forces a source; [`SamplerStats::source`] says which one ran.
//!
//! Either way, the handler (the `signal` module, unsafe) reads the stack with the
//! `backtrace` crate's unwinder into a preallocated lock-free buffer (the `ring` module, safe
//! code over atomics), with the step, the thread and the current scope (phase and innermost
//! open span of any kind, see [`set_scope`]). Nothing on the signal path allocates or locks.
//! The sampler thread drains the buffer, interns each raw address sequence as a stack (its
//! `raw_stack` line: per frame, the mapped file from `/proc/self/maps`, whose `module` line
//! gives its path, GNU build id and load bias, and the file address), and
//! when a recorded step ends writes its `samples` lines and a `sampler` line with the samples
//! taken and lost and the process CPU time (schema version 2). Nothing is symbolized while
//! steps are recorded: when sampling stops, the same thread symbolizes and demangles every
//! stack once (the interrupted instruction looked up exactly, every caller at its call;
//! inlined functions too, from the line tables that the release profile keeps), writes the
//! `frame` and `stack` lines, and frees the symbolizer's caches.
//!
//! All of the crate's `unsafe` is in two modules, each block with its reason beside it:
//! `signal` (the handler, the process CPU-time timer, the ticker's clock reads and queued
//! signals) and `perf_sys` (the `perf_event_open` and `fcntl` calls of the per-thread
//! events). The ticker, the ring and everything else are safe code over them.
//!
//! - Only inside the schedule's active windows: the ticker (or the events, or the timer) is
//!   armed when a recorded step begins and disarmed when recording stops; outside, no
//!   signal, no sample.
//! - Off unless asked for: before [`Sampler::start`] there is no handler, no event, no timer
//!   and no thread; without the `enabled` feature there is no handler and no unwinder at all.
//! - Honest numbers: a step's `taken` is the sum of its `samples` lines; samples that found
//!   the buffer full, or arrived after their step was written, are counted as `lost`, each
//!   step's apart from other steps'; the effective rate is `taken` ÷ process CPU time
//!   ([`SamplerStats::effective_hz`]), which counts the sampler thread's own CPU time too;
//!   [`SamplerStats::sampled_hz`] leaves that out ([`SamplerStats::sampler_cpu_ns`]): the
//!   rate the source delivered. Each step's `sampler` line says the same: the source
//!   (`source`), the rate requested (`hz`), the samples taken over the sampled threads' CPU
//!   time (`cpu_ns` less `sampler_cpu_ns`: the rate achieved) and the sampler's own CPU time.
//! - One sampler per process (the signal, the timer and the thread set are process-wide): a
//!   second start anywhere in the process gets [`SamplerError::Busy`].
//! - [`Sampler::stop`] before the session finishes writes the last step's samples (a session
//!   finished first loses them, reported in [`SamplerStats::unwritten_steps`]).
//! - What sampling costs a program is mostly interrupting its threads, not reading their
//!   stacks: [`SamplerConfig::with_diagnostic`] runs the machinery without taking samples
//!   ([`SamplerDiagnostic::DeliverOnly`]: the signals are delivered and the handler returns
//!   at once; [`SamplerDiagnostic::TickOnly`]: the ticker ticks and sends nothing), so that
//!   the parts can be timed apart (the `sampler` bench suite does, under
//!   `TRACEGRAPH_SAMPLER_DIAGNOSE`).
//!
//! The current scope ([`set_scope`], [`enter_scope`], [`current_scope`]) is plain safe code and
//! always compiled: the recorder publishes the phase and innermost span of each thread there,
//! and whatever attributes work to them reads it (the signal handler, and trace-heap's
//! tracking allocator, which holds a [`ScopeDemand`] so that the recorder publishes while no
//! sampler runs; [`is_sampling`] says whether anyone wants the scope). A thread that has
//! published no scope of its own (a thread-pool worker) is attributed to the last scope any
//! thread published: the driving thread's.
//!
//! On other platforms, or without the `enabled` feature, the crate compiles and
//! [`Sampler::start`] returns [`SamplerError::Unavailable`].
//!
//! ```
//! use std::sync::Arc;
//! use trace_record::schema::Phase;
//! use trace_record::{Run, TraceSession};
//! use trace_sampler::{Sampler, SamplerConfig, SamplerError};
//!
//! let (session, _sink) = TraceSession::in_memory(Run::new("doc", Phase::Infer, "cpu"));
//! let session = Arc::new(session);
//! let sampler = Sampler::new();
//! match sampler.start(&session, SamplerConfig::default()) {
//!     Ok(()) | Err(SamplerError::Unavailable { .. }) => {}
//!     Err(e) => panic!("{e}"),
//! }
//! // ... the program's steps: `session.step()` then `sampler.on_step(&session)` ...
//! sampler.stop(&session); // writes the last step's samples
//! session.finish().unwrap();
//! ```

mod control;
mod scope_cell;

#[cfg(all(feature = "enabled", target_os = "linux"))]
mod modules;
#[cfg(all(feature = "enabled", target_os = "linux"))]
mod perf_sys;
#[cfg(all(feature = "enabled", target_os = "linux"))]
mod ring;
#[cfg(all(feature = "enabled", target_os = "linux"))]
mod signal;
#[cfg(all(feature = "enabled", target_os = "linux"))]
mod symbols;
#[cfg(all(feature = "enabled", target_os = "linux"))]
mod tasks;
#[cfg(all(feature = "enabled", target_os = "linux"))]
mod threads;
#[cfg(all(feature = "enabled", target_os = "linux"))]
mod ticker;
#[cfg(all(feature = "enabled", target_os = "linux"))]
mod worker;

/// The sampler's maps (threads by id, samples by stack and scope, interned frames and
/// stacks): foldhash, the workspace's one hasher, for keys looked up at every tick and sample.
#[cfg(all(feature = "enabled", target_os = "linux"))]
type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;

pub use control::{Sampler, ScopeDemand, is_sampling};
pub use scope_cell::{
    Scope, ScopeGuard, current_packed, current_scope, enter_scope, pack as pack_scope, set_scope,
    unpack as unpack_scope,
};

#[cfg(doc)]
use trace_record::TraceSession;

/// The default sampling rate: samples per second of process CPU time.
pub const DEFAULT_HZ: u32 = 1000;

/// What interrupts a thread to take a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SamplerSource {
    /// A thread of the sampler's own that, every period, reads each thread's CPU-time clock
    /// and signals (`rt_tgsigqueueinfo`) each thread that has used a period of CPU time since
    /// its last sample and ran lately: the rate is the requested one for busy threads, and a
    /// context switch costs nothing extra (the perf events' per-thread timers are restarted
    /// at every switch). A signal that finds its thread blocked in a system call takes no
    /// sample and is asked again while the thread runs. A thread that works in
    /// short bursts between sleeps is sampled less than its CPU time asks for.
    Ticker,
    /// One software task-clock perf event per thread (`perf_event_open`): each thread is
    /// interrupted after every period of its own CPU time by a high-resolution timer, so the
    /// rate is the requested one; the kernel restarts that timer at every context switch,
    /// which is dear in a virtual machine.
    PerfEvent,
    /// The process CPU-time timer (`setitimer(ITIMER_PROF)`): checked on the kernel's
    /// scheduler tick, so the achieved rate is capped near the tick rate (often 200–250 Hz).
    Itimer,
}

impl SamplerSource {
    /// The source's name: `ticker`, `perf_event` or `itimer` (what [`SOURCE_ENV`] takes).
    pub fn as_str(self) -> &'static str {
        match self {
            SamplerSource::Ticker => "ticker",
            SamplerSource::PerfEvent => "perf_event",
            SamplerSource::Itimer => "itimer",
        }
    }
}

impl SamplerSource {
    /// The source as a trace's `sampler` line names it (its `source` field, the same word as
    /// [`as_str`](Self::as_str)).
    pub fn wire(self) -> trace_record::schema::SamplingSource {
        match self {
            SamplerSource::Ticker => trace_record::schema::SamplingSource::Ticker,
            SamplerSource::PerfEvent => trace_record::schema::SamplingSource::PerfEvent,
            SamplerSource::Itimer => trace_record::schema::SamplingSource::Itimer,
        }
    }
}

impl std::fmt::Display for SamplerSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The environment variable that picks the source when the configuration does not:
/// `ticker` requires the ticker, `perf_event` requires perf events, `itimer` forces the
/// process CPU-time timer, `auto` (or unset) takes the ticker where a thread's CPU-time
/// clock can be read, else perf events where the kernel opens them, else the timer.
pub const SOURCE_ENV: &str = "TRACEGRAPH_SAMPLER_SOURCE";

/// How to sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerConfig {
    /// Samples per second of CPU time of the sampled threads (all threads of the process but
    /// the sampler's own, together), 1 to 10,000. With
    /// [`SamplerSource::Itimer`] the kernel's timer tick caps what is achieved: see
    /// [`SamplerStats::effective_hz`].
    pub hz: u32,
    /// The source to use; `None` (the default) lets [`SOURCE_ENV`] choose, else the ticker,
    /// else perf events where the kernel allows them, else the process CPU-time timer.
    pub source: Option<SamplerSource>,
    /// A diagnostic that takes no samples (see [`SamplerDiagnostic`]); `None`, the default,
    /// samples.
    pub diagnostic: Option<SamplerDiagnostic>,
}

impl Default for SamplerConfig {
    /// [`DEFAULT_HZ`] (about 1 kHz), source chosen automatically.
    fn default() -> Self {
        SamplerConfig::hz(DEFAULT_HZ)
    }
}

impl SamplerConfig {
    /// A configuration sampling at `hz` per CPU second, source chosen automatically.
    pub fn hz(hz: u32) -> Self {
        SamplerConfig {
            hz,
            source: None,
            diagnostic: None,
        }
    }

    /// The same configuration with its source forced to `source`.
    pub fn with_source(self, source: SamplerSource) -> Self {
        SamplerConfig {
            source: Some(source),
            ..self
        }
    }

    /// The same configuration running `diagnostic` instead of sampling.
    pub fn with_diagnostic(self, diagnostic: SamplerDiagnostic) -> Self {
        SamplerConfig {
            diagnostic: Some(diagnostic),
            ..self
        }
    }
}

/// A run of the sampling machinery that takes no samples, to measure what a part of it costs
/// the program (run the same work with it and without a sampler, and compare): what is left
/// of sampling's cost when the stacks are not read is the cost of interrupting the threads,
/// which no unwinder can lower. The trace gets its `sampler` lines as usual, with no samples;
/// [`SamplerStats::interrupts`] counts the signals the handler received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplerDiagnostic {
    /// The source interrupts each thread exactly as when sampling (the ticker's ticks and
    /// signals, the perf events or the timer), and the signal handler returns at once: no
    /// stack is read and nothing is recorded or symbolized.
    DeliverOnly,
    /// The ticker ([`SamplerSource::Ticker`] only) wakes and credits each thread's CPU time
    /// as when sampling, and sends no signal: the cost of the ticks alone.
    TickOnly,
}

impl SamplerDiagnostic {
    /// `deliver_only` or `tick_only`.
    pub fn as_str(self) -> &'static str {
        match self {
            SamplerDiagnostic::DeliverOnly => "deliver_only",
            SamplerDiagnostic::TickOnly => "tick_only",
        }
    }
}

impl std::fmt::Display for SamplerDiagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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
    /// This sampler (a capture's own) is already sampling.
    #[error("this capture is already sampling")]
    AlreadySampling,
    /// The rate is outside 1 to 10,000 samples per second.
    #[error("sampling rate {hz} Hz is outside 1..=10000")]
    InvalidRate {
        /// The rate asked for.
        hz: u32,
    },
    /// Perf events were required ([`SamplerSource::PerfEvent`] in the configuration or in
    /// [`SOURCE_ENV`]) and the kernel refused them.
    #[error("CPU sampling through perf_event_open was required and refused: {0}")]
    PerfEventRefused(#[source] std::io::Error),
    /// [`SamplerDiagnostic::TickOnly`] was asked for with a source other than the ticker.
    #[error("the tick_only diagnostic needs the ticker source, and {chosen} was chosen")]
    TickOnlyNeedsTicker {
        /// The source chosen.
        chosen: SamplerSource,
    },
    /// [`SOURCE_ENV`] holds a value other than `ticker`, `perf_event`, `itimer` or `auto`.
    #[error("{SOURCE_ENV}={value:?} is none of ticker, perf_event, itimer, auto")]
    UnknownSource {
        /// The variable's value.
        value: String,
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
    /// What took the samples (`None` only in a default-constructed value).
    pub source: Option<SamplerSource>,
    /// Recorded steps accounted for.
    pub steps: u64,
    /// Samples taken (written in `samples` lines).
    pub taken: u64,
    /// Samples lost (buffer full, or arrived after their step was written).
    pub lost: u64,
    /// Process CPU time over those steps, when the platform reports it.
    pub cpu_ns: Option<u64>,
    /// The part of `cpu_ns` that the sampler's own threads used (draining, listing threads;
    /// the ticker's ticks; symbolizing happens once sampling stops), when the platform reports
    /// it; those threads are never sampled.
    pub sampler_cpu_ns: Option<u64>,
    /// Wall time sampled.
    pub wall_ns: u64,
    /// Steps whose lines could not be written (the session was already finished).
    pub unwritten_steps: u64,
    /// The diagnostic that ran instead of sampling, if any.
    pub diagnostic: Option<SamplerDiagnostic>,
    /// Under [`SamplerDiagnostic::DeliverOnly`], the signals the handler received (and
    /// returned from at once) up to the last step accounted for; 0 otherwise.
    pub interrupts: u64,
}

impl SamplerStats {
    /// Samples per second of process CPU time achieved (`taken` ÷ `cpu_ns`).
    pub fn effective_hz(&self) -> Option<f64> {
        self.cpu_ns
            .filter(|&ns| ns > 0)
            .map(|ns| self.taken as f64 / (ns as f64 / 1e9))
    }

    /// Samples per second of the sampled threads' CPU time: `taken` ÷ (`cpu_ns` −
    /// `sampler_cpu_ns`), the process's CPU time less the sampler thread's own. This is the
    /// rate the source delivers; [`SamplerStats::effective_hz`] also counts the sampler's
    /// cost.
    pub fn sampled_hz(&self) -> Option<f64> {
        let ns = self.cpu_ns?.checked_sub(self.sampler_cpu_ns?)?;
        (ns > 0).then(|| self.taken as f64 / (ns as f64 / 1e9))
    }
}

#[cfg(test)]
mod source_word_tests {
    use super::SamplerSource;

    #[test]
    fn the_trace_names_each_source_as_the_environment_variable_does() {
        for s in [
            SamplerSource::Ticker,
            SamplerSource::PerfEvent,
            SamplerSource::Itimer,
        ] {
            assert_eq!(s.wire().as_str(), s.as_str());
        }
    }
}
