//! The ticked source: a thread that signals each thread per period of CPU time it has used.
//!
//! Why not the kernel's per-thread perf events: a task-clock event that samples keeps a
//! high-resolution timer per thread, started when the thread is scheduled in and cancelled
//! when it is scheduled out. Each of those reprograms the CPU's timer when the sampling timer
//! is the next to expire, which it is at 1 kHz; in a virtual machine every reprogramming is a
//! trap to the hypervisor. Candle's thread pools switch threads at every op, so a decode step
//! pays it thousands of times: a channel round trip between two threads measured 10 µs with
//! sampling disarmed and 44 µs with the events armed at 1 kHz (69 µs at 4 kHz), on the
//! machine this was written on, whatever the handler did.
//!
//! The ticker pays per period instead of per switch. One thread (`tg-sampler-tick`, never
//! sampled) wakes every period (1 s ÷ the rate) while sampling is armed, reads the CPU-time
//! clock of every thread of the process (`clock_gettime` on the thread's clock), adds what
//! each used since the last reading to its credit, and queues `SIGPROF` to each thread owed
//! a period (`rt_tgsigqueueinfo`, the value naming the thread's slot), taking one period off
//! its credit. So each thread is sampled once per period of its own CPU time, as with the
//! perf events, at most once per tick.
//!
//! - **Only threads that ran lately are signalled**: a thread whose clock has not moved for
//!   [`RECENT`] is parked, and is not woken to be told so. The kernel brings another thread's
//!   CPU time up to date only at that thread's scheduler tick or switch (every 4 ms at
//!   250 Hz, measured here), not when it is read, so credit arrives in chunks and "lately"
//!   spans a few ticks.
//! - **Only threads running now are signalled**: before it signals a thread, the ticker reads
//!   its state (`R` or not) from its `/proc/self/task/<tid>/stat`, kept open (one `pread`,
//!   about 2 µs); a thread waiting keeps its credit for a tick that finds it running, and
//!   does not make the next tick come early (see the catch-up below). The model's threads
//!   hand work to each other every few tens of microseconds (a Llama decode with
//!   `RAYON_NUM_THREADS=1`: the main thread and the pool's one thread, one running while
//!   the other waits), so a thread that ran lately is often waiting when its tick comes:
//!   without the check, 10,199 signals were sent for 2,527 samples over 300 generations at
//!   4 kHz, each of the others waking a blocked thread to find it blocked (a remote wake-up
//!   for the ticker, a wake-up, handler and return to its wait for the thread).
//! - **A signal that finds its thread blocked takes no sample** (it was blocked after the
//!   state was read): the handler sees the system
//!   call's instruction (see `signal`: a call blocked and to be restarted, or one ended
//!   with `EINTR` by the signal), counts it in the slot's `BLOCKED` counter, and the ticker
//!   credits the period back and waits for the thread's clock to move again before asking
//!   again. A signal that arrives as a call ends on its own (a sleep that ran out while the
//!   thread waited for a CPU) is sampled in that call, which the analysis counts as waiting
//!   (sleeping, parking, yielding); so no sample of waiting is shown as work.
//! - **One signal in flight per thread**: a standard signal queued while the same one is
//!   pending is merged into it, so a thread is sent the next signal only once the handler
//!   has counted the last one (`HANDLED`); a thread kept off the CPU is not charged samples
//!   it never received.
//! - **Credit is bounded** ([`MAX_CREDIT_PERIODS`], [`MAX_CREDIT_NS`]): what late ticks
//!   leave is delivered later, one sample per tick, never in a burst.
//! - **A backlog is caught up**: while a thread that ran lately is owed more than a period
//!   after a tick, the next tick comes after half a period. One signal per thread per tick
//!   could otherwise never make up for ticks that woke late or found the last signal still
//!   pending, and the rate achieved stayed below the one asked for (0.82–0.85 of 1 kHz and
//!   0.54–0.59 of 4 kHz on the VM this was measured on; 0.95 and 0.70 with the catch-up).
//!   Each sample costs what it did; more of them cost more in all.
//! - Threads are listed from `/proc/self/task` whenever the thread count (checked with one
//!   `fstat` when sampling is armed and every 5 ms while it stays armed) has changed, and at
//!   least every 100 ms while armed; a new thread's credit starts when it is first seen.
//! - **Woken on time**: the ticker asks for a short time slice (`sched_setattr`, allowed
//!   without privileges since Linux 6.12; older kernels refuse it and nothing else changes),
//!   so that its wake-up preempts a running thread instead of queueing behind its slice; and
//!   for a timer slack of 1 ns.
//!
//! Arming and disarming read every known thread's clock on the calling (driving) thread, so
//! that the CPU time of an armed window is credited from its first instant to its last,
//! however late the ticker wakes, and nothing used while disarmed is; credit left at the end
//! of a window carries over to the next. That costs about half a microsecond per thread, at
//! the steps where sampling turns on or off only.
//!
//! What it costs and achieves, measured on the machine it was written on (`cargo xtask
//! bench` suite `sampler`): one tick is about 20–40 µs of the ticker's CPU (its wake-up, a
//! clock reading per thread, the signals), so the process's CPU grows by 2–4 % at 1 kHz; a
//! thread that works in short bursts between sleeps is sampled less than one that never
//! sleeps, since its credit is often learnt after the burst ended.

use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::signal::{self, BLOCKED, HANDLED, SELF_TID, TICK_SLOTS};
use crate::tasks;

/// How often the process's thread count is checked while armed; the threads are listed
/// again when it changed (see [`tasks::Listing`]).
const RESCAN_EVERY: Duration = Duration::from_millis(5);
/// The ticker thread's time slice (the fair scheduler's per-task slice, Linux 6.12 and later;
/// 100 µs is the least the kernel takes). With the default slice (a few ms) a tick that
/// wakes while both CPUs run the model waited for a running thread's slice to end: on the
/// 2-vCPU VM this was measured on, 4 kHz ticks (250 µs apart) were over a millisecond late
/// 971–1,012 times in the bench's 4 kHz phase (533–564 at 1 kHz) against 371–529 (68–84)
/// with this slice, and `sampler/rate_4k` went from 0.74–0.80 to 0.90 of the requested rate
/// (1 kHz unchanged, 0.96).
const TICK_SLICE_NS: u64 = 100_000;
/// How long after its CPU time last moved a thread is still signalled.
const RECENT: Duration = Duration::from_millis(10);
/// Credit kept at most, in periods, and at least [`MAX_CREDIT_NS`]: what late ticks and
/// signals that found their thread blocked may still deliver later (one sample per tick).
/// The kernel brings another thread's CPU time up to date at that thread's scheduler tick
/// (every 4 ms at 250 Hz) or switch, so credit arrives in chunks of up to a tick.
const MAX_CREDIT_PERIODS: u64 = 16;
/// See [`MAX_CREDIT_PERIODS`]: four ticks at 250 Hz.
const MAX_CREDIT_NS: u64 = 16_000_000;

/// What the capture's thread and the ticker share.
#[derive(Debug)]
struct Shared {
    period_ns: u64,
    /// `SamplerDiagnostic::TickOnly`: credit as when sampling, send nothing.
    tick_only: bool,
    state: Mutex<State>,
    wake: Condvar,
    stop: AtomicBool,
}

/// The threads sampled and whether sampling is armed.
#[derive(Debug)]
struct State {
    armed: bool,
    threads: crate::FastMap<u64, Tracked>,
    /// Slots not in use (the last one is shared by threads past [`TICK_SLOTS`]).
    free: Vec<usize>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The ticked source: its thread, and the switch the capture arms and disarms.
#[derive(Debug)]
pub(super) struct Ticker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The ticker thread's CPU-time clock (its cost is reported with the sampler's).
    clock: Option<libc::clockid_t>,
}

/// One thread the ticker samples.
#[derive(Debug)]
struct Tracked {
    clock: libc::clockid_t,
    slot: usize,
    /// Its CPU time when last credited, ns.
    last: u64,
    /// CPU time used and not yet sampled, ns.
    credit: u64,
    /// When its CPU time was last seen to move (`None` after a signal found it asleep,
    /// until it moves again).
    moved: Option<Instant>,
    /// Signals sent to its slot (see `HANDLED`).
    sent: u64,
    /// Its scheduling state, read before it is signalled (`None`: not open, signalled
    /// unchecked).
    state: Option<tasks::RunState>,
}

impl Tracked {
    /// Credits the CPU time used since the last reading; returns it (0 when the thread's
    /// clock cannot be read: it exited).
    fn credit_since_last(&mut self) -> u64 {
        let Some(now) = signal::clock_ns(self.clock) else {
            return 0;
        };
        let used = now.saturating_sub(self.last);
        self.last = now;
        self.credit = self.credit.saturating_add(used);
        used
    }
}

impl Ticker {
    /// Starts the (disarmed) ticker thread for a period of `period_ns` of each thread's CPU
    /// time, after checking that a thread's CPU-time clock can be read by its id. With
    /// `tick_only` it ticks and credits as usual and sends no signal (a diagnostic).
    pub(super) fn start(period_ns: u64, tick_only: bool) -> std::io::Result<Ticker> {
        let me = signal::gettid();
        signal::tid_cpu_clock(me)
            .and_then(signal::clock_ns)
            .ok_or_else(|| std::io::Error::other("a thread's CPU-time clock cannot be read"))?;
        let shared = Arc::new(Shared {
            period_ns: period_ns.max(10_000),
            tick_only,
            state: Mutex::new(State {
                armed: false,
                threads: crate::FastMap::default(),
                free: (0..TICK_SLOTS).rev().collect(),
            }),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let run = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("tg-sampler-tick".into())
            .spawn(move || tick_loop(&run))?;
        // The same clock the sampler thread's own cost is read from (its join handle is held).
        let clock = signal::thread_cpu_clock(thread.as_pthread_t());
        Ok(Ticker {
            shared,
            thread: Some(thread),
            clock,
        })
    }

    /// Starts signalling: every known thread's CPU time counts from now.
    pub(super) fn arm(&self) {
        let mut st = lock(&self.shared.state);
        for t in st.threads.values_mut() {
            t.last = signal::clock_ns(t.clock).unwrap_or(t.last);
        }
        st.armed = true;
        drop(st);
        self.shared.wake.notify_all();
    }

    /// Stops signalling: every known thread is credited with what it used up to now (for
    /// the next window), and the ticker sleeps until the next arm.
    pub(super) fn disarm(&self) {
        let mut st = lock(&self.shared.state);
        if st.armed {
            for t in st.threads.values_mut() {
                t.credit_since_last();
            }
        }
        st.armed = false;
    }

    /// The ticker thread's CPU time so far, ns.
    pub(super) fn cpu_ns(&self) -> Option<u64> {
        self.clock.and_then(signal::clock_ns)
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        lock(&self.shared.state).armed = false;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The live threads of the process, but the sampler's two.
fn without_sampler(mut tids: Vec<u64>, me: u64) -> Vec<u64> {
    let skip = SELF_TID.load(Ordering::Relaxed);
    tids.retain(|&t| t != me && t != skip);
    tids
}

/// The ticker thread: sleeps while disarmed, ticks every period while armed.
fn tick_loop(sh: &Shared) {
    let me = signal::gettid();
    // Woken on time: the default slack (50 µs) is a fifth of a period at 4 kHz.
    signal::tight_timer_slack();
    // Woken without waiting for the running thread's slice to end (see `TICK_SLICE_NS`).
    signal::short_time_slice(TICK_SLICE_NS);
    let period = Duration::from_nanos(sh.period_ns);
    let sender = signal::Sender::current();
    // Kept across windows, so that arming lists the threads again only when their count
    // moved or the last listing is old (the bench's schedule arms at every other step).
    let mut listing = tasks::Listing::new();
    loop {
        {
            let mut st = lock(&sh.state);
            while !st.armed && !sh.stop.load(Ordering::Acquire) {
                st = sh
                    .wake
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        }
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let mut next = Instant::now();
        let mut scanned: Option<Instant> = None;
        loop {
            // The listing is read outside the lock: arming and disarming never wait for it.
            let mut live = None;
            if scanned.is_none_or(|s| s.elapsed() >= RESCAN_EVERY) {
                scanned = Some(Instant::now());
                live = listing.if_due();
            }
            let behind = {
                let mut st = lock(&sh.state);
                if !st.armed || sh.stop.load(Ordering::Acquire) {
                    break;
                }
                if let Some((tids, n)) = live {
                    rescan(&mut st, &without_sampler(tids, me));
                    listing.applied(n);
                }
                tick(sh, &mut st, sender)
            };
            next += if behind { period / 2 } else { period };
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else {
                // Late (not scheduled for a while): the next tick is a period from now.
                next = now;
            }
        }
    }
}

/// Opens slots for threads started since the last listing, frees those of threads gone.
fn rescan(st: &mut State, live: &[u64]) {
    let State { threads, free, .. } = st;
    threads.retain(|tid, t| {
        let keep = live.contains(tid);
        if !keep && t.slot < TICK_SLOTS - 1 {
            free.push(t.slot);
        }
        keep
    });
    for &tid in live {
        if threads.contains_key(&tid) {
            continue;
        }
        let Some(clock) = signal::tid_cpu_clock(tid) else {
            continue;
        };
        // A thread that exited since the listing has no clock: tried at the next listing.
        let Some(now) = signal::clock_ns(clock) else {
            continue;
        };
        let slot = free.pop().unwrap_or(TICK_SLOTS - 1);
        BLOCKED[slot].store(0, Ordering::Relaxed);
        let sent = HANDLED[slot].load(Ordering::Acquire);
        threads.insert(
            tid,
            Tracked {
                clock,
                slot,
                last: now,
                credit: 0,
                moved: Some(Instant::now()),
                sent,
                state: tasks::RunState::open(tid),
            },
        );
    }
}

/// One tick: credit every thread with the CPU time it used, signal those owed a sample that
/// ran lately. Returns whether a thread that ran lately is still owed more than a period
/// after it (the next tick then comes after half a period, so that a backlog is caught up).
fn tick(sh: &Shared, st: &mut State, sender: signal::Sender) -> bool {
    let p = sh.period_ns;
    let now = Instant::now();
    let mut behind = false;
    for (&tid, t) in &mut st.threads {
        let used = t.credit_since_last();
        let refunds = BLOCKED[t.slot].swap(0, Ordering::Relaxed);
        t.credit = t
            .credit
            .saturating_add(refunds.saturating_mul(p))
            .min((MAX_CREDIT_PERIODS * p).max(MAX_CREDIT_NS));
        // Only a thread whose clock moved lately: a parked one is not woken to be told it is
        // waiting. (The kernel brings another thread's CPU time up to date only at its own
        // tick or when the thread is switched, every few milliseconds, so "lately" spans a
        // few ticks; a signal that finds the thread asleep anyway takes no sample and is
        // credited back above.)
        if used > 0 {
            t.moved = Some(now);
        } else if refunds > 0 {
            // Found asleep: asked again once its clock has moved since.
            t.moved = None;
        }
        let recent = t
            .moved
            .is_some_and(|m| now.saturating_duration_since(m) <= RECENT);
        // The last signal handled (none pending, which the kernel would merge this one into).
        let idle = HANDLED[t.slot].load(Ordering::Acquire) >= t.sent;
        if recent && idle && t.credit >= p {
            // Waiting now (the model's threads hand work to each other every few tens of
            // microseconds): not signalled, its credit kept for a tick that finds it running.
            if t.state.as_ref().and_then(tasks::RunState::runnable) == Some(false) {
                continue;
            }
            if sh.tick_only {
                // What a delivered signal takes off, without the signal.
                t.credit -= p;
            } else if signal::queue_sigprof(sender, tid, t.slot).is_ok() {
                t.credit -= p;
                t.sent += 1;
            }
        }
        behind |= recent && t.credit >= p;
    }
    behind
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A thread the ticker tracks, owed `credit` and seen moving just now; `last` past any
    /// clock reading, so that a tick credits it nothing more. Slots far from the ones a
    /// sampler hands out first.
    fn owed(tid: u64, slot: usize, credit: u64) -> Tracked {
        Tracked {
            clock: signal::tid_cpu_clock(tid).expect("a clock id"),
            slot,
            last: u64::MAX,
            credit,
            moved: Some(Instant::now()),
            sent: HANDLED[slot].load(Ordering::Acquire),
            state: tasks::RunState::open(tid),
        }
    }

    #[test]
    fn a_tick_skips_a_waiting_thread_and_keeps_its_credit() {
        let p = 1_000_000;
        // `tick_only`: a thread that would be signalled has a period taken off instead.
        let sh = Shared {
            period_ns: p,
            tick_only: true,
            state: Mutex::new(State {
                armed: true,
                threads: crate::FastMap::default(),
                free: Vec::new(),
            }),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        };
        let (tid_tx, tid_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let waiter = std::thread::spawn(move || {
            tid_tx.send(signal::gettid()).unwrap();
            let _ = go_rx.recv();
        });
        let other = tid_rx.recv().unwrap();
        let seen = tasks::RunState::open(other).expect("the waiter's state");
        while seen.runnable() != Some(false) {
            std::thread::yield_now();
        }
        let me = signal::gettid();
        let (mine, theirs) = (TICK_SLOTS - 3, TICK_SLOTS - 2);
        let mut st = lock(&sh.state);
        st.threads.insert(me, owed(me, mine, 5 * p));
        st.threads.insert(other, owed(other, theirs, 5 * p));
        let behind = tick(&sh, &mut st, signal::Sender::current());
        // This thread runs (it is ticking): one period taken, and it is still owed more, so
        // the next tick comes early. The waiter keeps all its credit and asks for nothing.
        assert_eq!(st.threads[&me].credit, 4 * p);
        assert_eq!(st.threads[&other].credit, 5 * p);
        assert!(behind);
        st.threads.remove(&me);
        assert!(!tick(&sh, &mut st, signal::Sender::current()));
        assert_eq!(st.threads[&other].credit, 5 * p);
        drop(st);
        drop(go_tx);
        waiter.join().unwrap();
    }
}
