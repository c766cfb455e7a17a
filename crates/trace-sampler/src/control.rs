//! Starting, stepping and stopping the process's one sampler: its source per step, the thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use trace_record::TraceSession;

use crate::{SamplerConfig, SamplerError, SamplerStats};

/// A sampler of the process's call stacks into one session (a capture holds one). It does
/// nothing until [`Sampler::start`]; its hooks are called at step boundaries
/// ([`Sampler::on_step`]) and before the session finishes ([`Sampler::stop`]). Dropping a
/// sampling `Sampler` stops it (without writing the current step's samples).
#[derive(Debug, Default)]
pub struct Sampler {
    #[cfg(all(feature = "enabled", target_os = "linux"))]
    imp: linux::Slot,
}

/// How many consumers of the current scope are on: a running sampler counts one, and each
/// live [`ScopeDemand`] (a heap tracker's) one more.
static SCOPE_DEMAND: AtomicUsize = AtomicUsize::new(0);

/// Whether the recorder should publish its scopes ([`crate::set_scope`]): a sampler runs
/// anywhere in the process, or another consumer of the scope (a heap tracker) holds a
/// [`ScopeDemand`]. One relaxed load. Without the `enabled` feature or off Linux no sampler
/// runs, so only a demand makes it `true`.
#[inline]
pub fn is_sampling() -> bool {
    SCOPE_DEMAND.load(Ordering::Relaxed) != 0
}

/// A request that the recorder publish its scopes while this value lives (see
/// [`is_sampling`]): what a consumer of the current scope other than the sampler (a heap
/// tracker attributing allocations) holds while it needs the scope.
#[derive(Debug)]
#[must_use = "scopes are published only while the demand lives"]
pub struct ScopeDemand(());

impl ScopeDemand {
    /// Asks for scopes until the returned value is dropped.
    pub fn new() -> ScopeDemand {
        SCOPE_DEMAND.fetch_add(1, Ordering::AcqRel);
        ScopeDemand(())
    }
}

impl Default for ScopeDemand {
    fn default() -> Self {
        ScopeDemand::new()
    }
}

impl Drop for ScopeDemand {
    fn drop(&mut self) {
        SCOPE_DEMAND.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Sampler {
    /// A sampler that has not started.
    pub fn new() -> Sampler {
        Sampler::default()
    }

    /// Starts sampling the process's call stacks at `config.hz` per CPU second into
    /// `session`, inside the session's active windows only, until [`Sampler::stop`].
    ///
    /// A step has one account (`sampler` line): started again in the step that a stop
    /// ended (stop and start with no `session.step()` between), a sampler waits for the
    /// next step, and the rest of that step is not sampled.
    pub fn start(
        &self,
        session: &Arc<TraceSession>,
        config: SamplerConfig,
    ) -> Result<(), SamplerError> {
        if !(1..=10_000).contains(&config.hz) {
            return Err(SamplerError::InvalidRate { hz: config.hz });
        }
        #[cfg(all(feature = "enabled", target_os = "linux"))]
        {
            self.imp.start(session, config)
        }
        #[cfg(not(all(feature = "enabled", target_os = "linux")))]
        {
            let _ = session;
            Err(SamplerError::Unavailable {
                reason: if cfg!(target_os = "linux") {
                    "trace-sampler was built without its `enabled` feature \
                     (trace-candle's `sampler`)"
                } else {
                    "the sampler supports Linux only"
                },
            })
        }
    }

    /// What this sampler has accounted for so far; `None` when it never started.
    pub fn stats(&self) -> Option<SamplerStats> {
        #[cfg(all(feature = "enabled", target_os = "linux"))]
        {
            self.imp.stats()
        }
        #[cfg(not(all(feature = "enabled", target_os = "linux")))]
        {
            None
        }
    }

    /// Call after each `session.step()`: ends the sampled window of the step that ended,
    /// opens one for a recorded step, arms or disarms the source. One relaxed load when this
    /// sampler is not sampling.
    #[inline]
    pub fn on_step(&self, session: &TraceSession) {
        #[cfg(all(feature = "enabled", target_os = "linux"))]
        self.imp.on_step(session);
        #[cfg(not(all(feature = "enabled", target_os = "linux")))]
        let _ = session;
    }

    /// Call before the session finishes: writes the current recorded step's samples (when
    /// one is open), restores the signal action and ends the sampler thread. Nothing
    /// happens when this sampler is not sampling. When SIGPROF had its default action
    /// (which ends the process), the sampler's handler stays installed instead, recording
    /// nothing: a signal queued before the stop and delivered after it is then harmless.
    pub fn stop(&self, session: &TraceSession) {
        #[cfg(all(feature = "enabled", target_os = "linux"))]
        self.imp.stop(session);
        #[cfg(not(all(feature = "enabled", target_os = "linux")))]
        let _ = session;
    }
}

#[cfg(all(feature = "enabled", target_os = "linux"))]
mod linux {
    use std::os::unix::thread::JoinHandleExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc::{self, Sender};
    use std::sync::{Arc, Mutex, MutexGuard, Weak};
    use std::thread::JoinHandle;

    use trace_record::TraceSession;

    use crate::signal::{self, DELIVER_ONLY, Handler, INTERRUPTS, RECORDING, SELF_TID, STEP};
    use crate::threads::Threads;
    use crate::ticker::Ticker;
    use crate::worker::{Msg, StepEnd, Worker};
    use crate::{
        SOURCE_ENV, SamplerConfig, SamplerDiagnostic, SamplerError, SamplerSource, SamplerStats,
    };

    /// A sampler runs somewhere in the process.
    static RUNNING: AtomicBool = AtomicBool::new(false);

    #[derive(Debug, Default)]
    pub(super) struct Slot {
        /// Set while this capture samples (one relaxed load per step otherwise).
        on: AtomicBool,
        running: Mutex<Option<Running>>,
        stats: Mutex<Option<Arc<Mutex<SamplerStats>>>>,
    }

    /// The source [`SOURCE_ENV`]'s value asks for (`None`: automatic).
    fn source_named(value: String) -> Result<Option<SamplerSource>, SamplerError> {
        match value.trim() {
            "perf_event" => Ok(Some(SamplerSource::PerfEvent)),
            "ticker" => Ok(Some(SamplerSource::Ticker)),
            "itimer" => Ok(Some(SamplerSource::Itimer)),
            "auto" | "" => Ok(None),
            _ => Err(SamplerError::UnknownSource { value }),
        }
    }

    #[cfg(test)]
    #[test]
    fn the_source_variable_takes_three_words() {
        let named = |v: &str| source_named(v.to_string());
        assert_eq!(named("itimer").unwrap(), Some(SamplerSource::Itimer));
        assert_eq!(
            named(" perf_event\n").unwrap(),
            Some(SamplerSource::PerfEvent)
        );
        assert_eq!(named("auto").unwrap(), None);
        assert_eq!(named("").unwrap(), None);
        assert!(matches!(
            named("perf"),
            Err(SamplerError::UnknownSource { value }) if value == "perf"
        ));
    }

    /// What interrupts the threads: each thread's perf event, or the process's timer.
    #[derive(Debug)]
    enum Source {
        Ticker(Ticker),
        PerfEvent(Arc<Threads>),
        Itimer { period_us: u64 },
    }

    impl Source {
        /// Chooses and prepares the source: the configuration's, else the environment's,
        /// else perf events where the kernel opens one (the timer where it refuses).
        fn choose(config: SamplerConfig) -> Result<Source, SamplerError> {
            let forced = match config.source {
                Some(s) => Some(s),
                None => match std::env::var(SOURCE_ENV) {
                    Ok(v) => source_named(v)?,
                    Err(_) => None,
                },
            };
            let hz = u64::from(config.hz);
            let itimer = Source::Itimer {
                period_us: (1_000_000 / hz).max(1),
            };
            let period_ns = 1_000_000_000 / hz;
            let tick_only = config.diagnostic == Some(SamplerDiagnostic::TickOnly);
            let source = match forced {
                Some(SamplerSource::Itimer) => itimer,
                Some(SamplerSource::Ticker) => {
                    Source::Ticker(Ticker::start(period_ns, tick_only).map_err(SamplerError::Io)?)
                }
                Some(SamplerSource::PerfEvent) => Threads::probe(1_000_000_000 / hz)
                    .map(|t| Source::PerfEvent(Arc::new(t)))
                    .map_err(SamplerError::PerfEventRefused)?,
                None => match Ticker::start(period_ns, tick_only) {
                    Ok(t) => Source::Ticker(t),
                    Err(_) => {
                        Threads::probe(period_ns).map_or(itimer, |t| Source::PerfEvent(Arc::new(t)))
                    }
                },
            };
            if tick_only && !matches!(source, Source::Ticker(_)) {
                return Err(SamplerError::TickOnlyNeedsTicker {
                    chosen: source.kind(),
                });
            }
            Ok(source)
        }

        fn kind(&self) -> SamplerSource {
            match self {
                Source::Ticker(_) => SamplerSource::Ticker,
                Source::PerfEvent(_) => SamplerSource::PerfEvent,
                Source::Itimer { .. } => SamplerSource::Itimer,
            }
        }

        fn arm(&self) -> std::io::Result<()> {
            match self {
                Source::Ticker(t) => {
                    t.arm();
                    Ok(())
                }
                Source::PerfEvent(t) => t.arm(),
                Source::Itimer { period_us } => signal::arm(*period_us),
            }
        }

        fn disarm(&self) {
            match self {
                Source::Ticker(t) => t.disarm(),
                Source::PerfEvent(t) => t.disarm(),
                Source::Itimer { .. } => signal::disarm(),
            }
        }
    }

    /// The last step whose account a sampler of this process sent, and its session. A
    /// sampler started again within that step (stopped and started in one step) waits for
    /// the next one: a step has one account, and the first one's samples are written.
    /// (`Weak`: the session's address is not reused while it is held.)
    static ACCOUNTED: Mutex<Option<(Weak<TraceSession>, u64)>> = Mutex::new(None);

    /// Whether a sampler of this process already accounted for `step` of `session`.
    fn accounted(session: &Weak<TraceSession>, step: u64) -> bool {
        lock(&ACCOUNTED)
            .as_ref()
            .is_some_and(|(s, last)| *last == step && Weak::ptr_eq(s, session))
    }

    struct Running {
        /// The session sampled (see [`ACCOUNTED`]).
        session: Weak<TraceSession>,
        tx: Sender<Msg>,
        thread: Option<JoinHandle<()>>,
        handler: Option<Handler>,
        source: Source,
        armed: bool,
        /// The sampler thread's CPU-time clock.
        own_clock: Option<libc::clockid_t>,
        /// The recorded step being sampled: (step, start ns, process CPU ns at start, the
        /// sampler thread's CPU ns at start).
        window: Option<(u64, u64, Option<u64>, Option<u64>)>,
    }

    impl std::fmt::Debug for Running {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Running")
                .field("source", &self.source)
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
        /// the source.
        fn advance(&mut self, session: &TraceSession, stopping: bool) {
            let now = session.now_ns();
            let cpu = signal::process_cpu_ns();
            let own = self.own_clock.and_then(signal::clock_ns).map(|w| {
                w + match &self.source {
                    Source::Ticker(t) => t.cpu_ns().unwrap_or(0),
                    _ => 0,
                }
            });
            let step = session.current_step();
            // A step a sampler stopped in has its account: one started again in it waits.
            let active = !stopping && session.is_active() && !accounted(&self.session, step);
            STEP.store(step, Ordering::Relaxed);
            RECORDING.store(active, Ordering::Relaxed);
            if !active && self.armed {
                self.source.disarm();
                self.armed = false;
            }
            if let Some((s, ts, cpu0, own0)) = self.window.take() {
                let since = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
                let _ = self.tx.send(Msg::StepEnd(StepEnd {
                    step: s,
                    ts,
                    dur: now.saturating_sub(ts),
                    cpu_ns: since(cpu0, cpu),
                    sampler_cpu_ns: since(own0, own),
                    interrupts: INTERRUPTS.load(Ordering::Relaxed),
                }));
                *lock(&ACCOUNTED) = Some((self.session.clone(), s));
            }
            if active {
                self.window = Some((step, now, cpu, own));
                if !self.armed && self.source.arm().is_ok() {
                    self.armed = true;
                }
            }
        }

        /// After the source is disarmed: ends the sampler thread, closes the events, then
        /// restores the previous SIGPROF action (unless it was the default, see `Handler`). In
        /// that order, a signal raised just before the disarm and not yet delivered has the
        /// sampler thread's last drain and join to reach the handler (which records nothing
        /// once `RECORDING` is off) instead of the default action, which would end the
        /// process.
        fn shut_down(mut self) {
            let _ = self.tx.send(Msg::Stop);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
            drop(self.source);
            drop(self.handler.take());
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
            let source = match Source::choose(config) {
                Ok(s) => s,
                Err(e) => {
                    RUNNING.store(false, Ordering::Release);
                    return Err(e);
                }
            };
            let ring = crate::ring::ring();
            // Samples left from an earlier sampler in this process are not this one's.
            ring.drain(|_| {});
            ring.take_all_lost();
            DELIVER_ONLY.store(
                config.diagnostic == Some(SamplerDiagnostic::DeliverOnly),
                Ordering::Relaxed,
            );
            INTERRUPTS.store(0, Ordering::Relaxed);
            let stats = Arc::new(Mutex::new(SamplerStats {
                hz: config.hz,
                source: Some(source.kind()),
                diagnostic: config.diagnostic,
                cpu_ns: Some(0),
                sampler_cpu_ns: Some(0),
                ..SamplerStats::default()
            }));
            let (tx, rx) = mpsc::channel();
            let (tid_tx, tid_rx) = mpsc::channel();
            let threads = match &source {
                Source::PerfEvent(t) => Some(Arc::clone(t)),
                Source::Itimer { .. } | Source::Ticker(_) => None,
            };
            let worker = Worker::new(
                Arc::clone(session),
                u64::from(config.hz),
                Arc::clone(&stats),
                threads,
            );
            let thread = std::thread::Builder::new()
                .name("tg-sampler".into())
                .spawn(move || {
                    let _ = tid_tx.send(signal::gettid());
                    trace_record::record_beside_the_program();
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
            let own_clock = signal::thread_cpu_clock(thread.as_pthread_t());
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
                session: Arc::downgrade(session),
                tx,
                thread: Some(thread),
                handler: Some(handler),
                source,
                armed: false,
                own_clock,
                window: None,
            };
            r.advance(session, false);
            *running = Some(r);
            *lock(&self.stats) = Some(stats);
            self.on.store(true, Ordering::Release);
            // The recorder publishes its scopes from now on (see `is_sampling`).
            super::SCOPE_DEMAND.fetch_add(1, Ordering::AcqRel);
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
            r.shut_down();
            super::SCOPE_DEMAND.fetch_sub(1, Ordering::AcqRel);
            RUNNING.store(false, Ordering::Release);
        }
    }

    impl Drop for Slot {
        fn drop(&mut self) {
            if self.on.swap(false, Ordering::AcqRel)
                && let Some(r) = lock(&self.running).take()
            {
                RECORDING.store(false, Ordering::Relaxed);
                r.source.disarm();
                r.shut_down();
                super::SCOPE_DEMAND.fetch_sub(1, Ordering::AcqRel);
                RUNNING.store(false, Ordering::Release);
            }
        }
    }
}

#[cfg(all(test, not(all(feature = "enabled", target_os = "linux"))))]
mod tests {
    use super::*;
    use trace_record::Run;
    use trace_record::schema::Phase;

    #[test]
    fn without_the_machinery_a_start_is_unavailable_and_rates_are_still_checked() {
        let (session, _sink) = TraceSession::in_memory(Run::new("off", Phase::Infer, "cpu"));
        let session = Arc::new(session);
        let sampler = Sampler::new();
        assert!(matches!(
            sampler.start(&session, SamplerConfig::hz(0)),
            Err(SamplerError::InvalidRate { hz: 0 })
        ));
        assert!(matches!(
            sampler.start(&session, SamplerConfig::default()),
            Err(SamplerError::Unavailable { .. })
        ));
        assert!(!is_sampling());
        assert!(sampler.stats().is_none());
        // Another consumer of the scope turns publishing on while its demand lives.
        let demand = ScopeDemand::new();
        assert!(is_sampling());
        drop(demand);
        assert!(!is_sampling());
        sampler.on_step(&session);
        sampler.stop(&session);
    }
}
