//! The sampler's thread: drains the buffer, aggregates per step, writes the lines; symbolizes
//! the stacks once sampling stopped.
//!
//! While steps are recorded it only interns raw stacks (addresses) and writes each step's
//! `samples` lines (naming stacks by id) and `sampler` line, after the `module` and `raw_stack`
//! lines of the stacks first seen (module and file address per frame: a reader symbolizes
//! them from the files when the run is killed before sampling stops): no debug information is
//! loaded then. When sampling stops it symbolizes every stack seen and writes the `frame` and `stack`
//! lines (before the session's trailer: a sampler stops before its session finishes), then
//! gives the symbolizer's memory back and ends.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use trace_record::TraceSession;
use trace_record::schema::{Event, SamplerEvent, SamplesEvent};

use crate::ring::{RawSample, ring};
use crate::scope_cell::unpack;
use crate::symbols::RawStacks;
use crate::threads::Threads;
use crate::{FastMap, SamplerStats};

/// How often the ring is drained (and, with perf events, the process's threads listed again)
/// between step boundaries.
const DRAIN_EVERY: Duration = Duration::from_millis(5);
/// How long a step's flush waits for samples still being written.
const SETTLE: Duration = Duration::from_millis(5);

/// One recorded step, ended.
#[derive(Debug, Clone, Copy)]
pub(super) struct StepEnd {
    pub(super) step: u64,
    pub(super) ts: u64,
    pub(super) dur: u64,
    pub(super) cpu_ns: Option<u64>,
    /// The sampler thread's own CPU time during the step, ns.
    pub(super) sampler_cpu_ns: Option<u64>,
    /// Signals received without a sample so far (`SamplerStats::interrupts`).
    pub(super) interrupts: u64,
}

/// Messages from the capture (training thread) to the sampler thread.
#[derive(Debug)]
pub(super) enum Msg {
    /// A recorded step ended: write its lines.
    StepEnd(StepEnd),
    /// Sampling stopped (after the last step's end, if any): write and exit.
    Stop,
}

pub(super) struct Worker {
    pub(super) session: Arc<TraceSession>,
    pub(super) hz: u64,
    pub(super) stats: Arc<Mutex<SamplerStats>>,
    /// With perf events: the per-thread events to keep in step with the threads.
    threads: Option<Arc<Threads>>,
    /// The raw stacks seen, by id (symbolized when sampling stops).
    stacks: RawStacks,
    /// (step, thread, stack, scope) → samples.
    counts: FastMap<(u64, u64, u64, u64), u64>,
    /// Samples of steps already written (arrived too late): counted as lost.
    late: u64,
}

impl Worker {
    pub(super) fn new(
        session: Arc<TraceSession>,
        hz: u64,
        stats: Arc<Mutex<SamplerStats>>,
        threads: Option<Arc<Threads>>,
    ) -> Worker {
        Worker {
            session,
            hz,
            stats,
            threads,
            stacks: RawStacks::default(),
            counts: FastMap::default(),
            late: 0,
        }
    }

    pub(super) fn run(mut self, rx: &Receiver<Msg>) {
        let mut written: Option<u64> = None;
        let mut scanned = Instant::now();
        loop {
            match rx.recv_timeout(DRAIN_EVERY) {
                Ok(Msg::StepEnd(end)) => {
                    self.drain_settled(written);
                    self.flush(end);
                    written = Some(written.map_or(end.step, |w| w.max(end.step)));
                }
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => {
                    self.drain_settled(written);
                    let raw = self.stacks.take_raw();
                    self.session.record_sampled(&raw);
                    self.define_stacks();
                    break;
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.drain(written);
                }
            }
            // Steps shorter than the period never time out: rescan by the clock.
            if let Some(t) = &self.threads
                && scanned.elapsed() >= DRAIN_EVERY
            {
                t.rescan();
                scanned = Instant::now();
            }
        }
    }

    fn add(&mut self, s: &RawSample, written: Option<u64>) {
        if written.is_some_and(|w| s.step <= w) {
            self.late += 1;
            return;
        }
        let stack = self.stacks.intern(&s.ips);
        *self
            .counts
            .entry((s.step, s.tid, stack, s.scope))
            .or_default() += 1;
    }

    fn drain(&mut self, written: Option<u64>) -> bool {
        ring().drain(|s| self.add(s, written))
    }

    /// Drains until no sample is being written (or [`SETTLE`] passed).
    fn drain_settled(&mut self, written: Option<u64>) {
        let start = Instant::now();
        while self.drain(written) && start.elapsed() < SETTLE {
            std::thread::yield_now();
        }
    }

    /// After sampling stopped: symbolizes every stack the `samples` lines name and writes
    /// their `frame` and `stack` lines (nothing once the session finished).
    fn define_stacks(&mut self) {
        let stacks = std::mem::take(&mut self.stacks);
        if stacks.is_empty() {
            return;
        }
        let events = stacks.resolve();
        self.session.record_sampled(&events);
    }

    /// Writes a step's `samples` lines and `sampler` line (the stacks they name are defined
    /// when sampling stops).
    fn flush(&mut self, end: StepEnd) {
        let mut rows: Vec<((u64, u64, u64), u64)> = Vec::new();
        self.counts.retain(|&(step, tid, stack, scope), &mut n| {
            if step == end.step {
                rows.push(((tid, stack, scope), n));
                false
            } else {
                true
            }
        });
        rows.sort_unstable();
        // This step's losses only (a lagging sampler thread may flush it while later steps
        // lose samples), and the samples that arrived after their own step was written.
        let lost = ring().take_lost(end.step) + std::mem::take(&mut self.late);
        // The raw stacks first seen (and their modules) before the lines naming them.
        let mut events = self.stacks.take_raw();
        events.reserve(rows.len() + 1);
        let mut taken = 0u64;
        for ((tid, stack, scope), n) in rows {
            let (phase, span) = unpack(scope);
            taken += n;
            events.push(Event::Samples(SamplesEvent {
                step: end.step,
                thread: tid,
                stack,
                n,
                phase,
                span,
            }));
        }
        let mut account = SamplerEvent {
            step: end.step,
            hz: self.hz,
            taken,
            lost,
            cpu_ns: end.cpu_ns,
            sampler_cpu_ns: end.sampler_cpu_ns,
            ts: end.ts,
            dur: end.dur,
            source: self
                .stats
                .lock()
                .ok()
                .and_then(|s| s.source)
                .map(crate::SamplerSource::wire),
        };
        // The two clocks are read one after the other: written within the whole, by the
        // readers' own rule, and counted so in the stats too.
        let own = account.own_cpu_ns();
        account.sampler_cpu_ns = own;
        events.push(Event::Sampler(account));
        let written = self.session.record_sampled(&events) > 0;
        if let Ok(mut st) = self.stats.lock() {
            st.steps += 1;
            st.taken += taken;
            st.lost += lost;
            st.wall_ns += end.dur;
            st.interrupts = end.interrupts;
            st.cpu_ns = match (st.cpu_ns, end.cpu_ns) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            st.sampler_cpu_ns = match (st.sampler_cpu_ns, own) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            if !written {
                st.unwritten_steps += 1;
            }
        }
    }
}
