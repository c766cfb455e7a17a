//! The sampler's sources on busy threads (one started mid-run), the forced fallback, the
//! diagnostics and a thread that sleeps between bursts.
//!
//! What these tests assert holds for any timing: on an idle and on a saturated machine alike
//! (`cargo xtask load-check`). A source samples each thread at most once per period of that
//! thread's own CPU time, so the samples are bounded above by the CPU time the threads ran,
//! whatever the scheduler did; every thread that ran is sampled; the accounts add up; and a
//! thread that sleeps between bursts is sampled in its work or its sleep call and nowhere
//! else, run until its work has been sampled enough. How close a source comes to the rate
//! asked for is a timing figure, which a loaded machine lowers (the ticker wakes late, a
//! thread's credit is learnt after its burst): the `sampler` bench reports it
//! (`sampler/rate achieved_hz`, `sampled_threads_hz`, `lost_per_1000`, at 1 and 4 kHz).

#![cfg(all(feature = "enabled", target_os = "linux"))]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use trace_record::schema::{Event, Phase, Schedule};
use trace_record::{MemorySink, Run, TraceSession};
use trace_sampler::{
    SOURCE_ENV, Sampler, SamplerConfig, SamplerDiagnostic, SamplerError, SamplerSource,
    SamplerStats,
};

/// One sampler per process: the tests take turns.
static TURN: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    TURN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Real arithmetic on the calling thread for `for_` of wall time.
fn spin(for_: Duration) -> u64 {
    let start = Instant::now();
    let mut x = 1u64;
    while start.elapsed() < for_ {
        x = burn(x, 1);
    }
    std::hint::black_box(x)
}

/// A fixed amount of real arithmetic: `chunks` × 10,000 steps of a generator (its duration is
/// the machine's business, its amount is not).
#[inline(never)]
fn burn(mut x: u64, chunks: u32) -> u64 {
    for _ in 0..chunks {
        for i in 0..10_000u64 {
            x = std::hint::black_box(
                x.wrapping_mul(6364136223846793005).wrapping_add(i) ^ (x >> 17),
            );
        }
    }
    x
}

/// CPU time thread `tid` of this process has run, ns: the first field of its
/// `/proc/self/task/<tid>/schedstat`. Exact for a thread that is not running (the kernel
/// brings a running thread's figure up to date at its ticks and switches).
fn task_cpu_ns(tid: u64) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .expect("the kernel reports a thread's CPU time (schedstat)");
    stat.split_whitespace()
        .next()
        .and_then(|ns| ns.parse().ok())
        .expect("schedstat's first field")
}

/// The scheduler state of thread `tid` of this process (`R` running, `S` sleeping, ...), from
/// its `/proc/self/task/<tid>/stat` (the field after the parenthesised name).
fn task_state(tid: u64) -> char {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').expect("stat names the thread") + 1..];
    after_name.trim_start().chars().next().expect("a state")
}

/// The operating system's id of the calling thread (`/proc/thread-self` names it).
fn tid() -> u64 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

/// A thread that, once told, spins until it has run `budget` of its own CPU time (a loaded
/// machine stretches the wall time, not the work), then waits to be told to end; its CPU time
/// over the work is read while it waits, so exactly.
struct Busy {
    tid: u64,
    go: mpsc::Sender<()>,
    done: mpsc::Receiver<()>,
    end: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Busy {
    fn spawn(budget: Duration) -> Busy {
        let (tid_tx, tid_rx) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let (done_tx, done) = mpsc::channel();
        let (end, end_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let me = tid();
            tid_tx.send(me).unwrap();
            if go_rx.recv().is_err() {
                return;
            }
            let c0 = task_cpu_ns(me);
            while task_cpu_ns(me) - c0 < budget.as_nanos() as u64 {
                spin(Duration::from_millis(20));
            }
            let _ = done_tx.send(());
            let _ = end_rx.recv();
        });
        Busy {
            tid: tid_rx.recv().unwrap(),
            go,
            done,
            end,
            thread,
        }
    }

    /// Starts the work; returns the thread's CPU time so far.
    fn start(&self) -> u64 {
        let c0 = task_cpu_ns(self.tid);
        self.go.send(()).unwrap();
        c0
    }

    /// Waits for the work to end; returns the thread's CPU time since `c0`, read once the
    /// thread is blocked waiting to end (so exactly: read while it runs, the figure can lag
    /// by a scheduler tick), then lets it end.
    fn finish(self, c0: u64) -> BusyAccount {
        self.done.recv().unwrap();
        while task_state(self.tid) != 'S' {
            std::thread::sleep(Duration::from_millis(1));
        }
        let cpu_ns = task_cpu_ns(self.tid) - c0;
        self.end.send(()).unwrap();
        self.thread.join().unwrap();
        BusyAccount {
            tid: self.tid,
            cpu_ns,
        }
    }
}

/// A busy thread's account: its id and the CPU time its work took.
struct BusyAccount {
    tid: u64,
    cpu_ns: u64,
}

/// What one run measured in its busy step.
struct Outcome {
    stats: SamplerStats,
    /// The busy step's `sampler` line: taken, lost, process CPU ns, the sampler's own.
    taken: u64,
    lost: u64,
    cpu_ns: u64,
    sampler_cpu_ns: u64,
    /// Samples of the busy step per thread.
    per_thread: HashMap<u64, u64>,
    early: BusyAccount,
    late: BusyAccount,
}

/// An in-memory session whose first `active` steps are recorded, then none.
fn recorded_steps(name: &str, active: u64) -> (Arc<TraceSession>, MemorySink) {
    let run = Run::new(name, Phase::Train, "cpu").schedule(Schedule {
        skip_first: 0,
        wait: 0,
        warmup: 0,
        active,
        repeat: 1,
    });
    let (session, sink) = TraceSession::in_memory(run);
    (Arc::new(session), sink)
}

/// Waits until the sampler has written `steps` steps (its thread writes them after the
/// boundary). The deadline only keeps a regression from hanging the test.
fn wait_written(sampler: &Sampler, steps: u64) -> SamplerStats {
    let deadline = Instant::now() + Duration::from_mins(5);
    loop {
        let s = sampler.stats().unwrap();
        if s.steps >= steps {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "step {steps} never written: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Samples at `config` while two threads spin for `budget` of their CPU time each: one
/// started before the sampler, one after. Step 0 warms up (the symbolizer loads the debug
/// information when it writes step 0), step 1 waits for that write, step 2 is the busy step
/// measured.
fn two_busy_threads(config: SamplerConfig, budget: Duration) -> Option<Outcome> {
    let (session, sink) = recorded_steps("trace-sampler::rate", 4);
    let early = Busy::spawn(budget);
    let sampler = Sampler::new();
    match sampler.start(&session, config) {
        Ok(()) => {}
        Err(SamplerError::PerfEventRefused(e)) => {
            eprintln!("perf events were asked for and refused here ({e}): nothing to measure");
            drop(early.go);
            let _ = early.thread.join();
            return None;
        }
        Err(e) => panic!("{e}"),
    }
    // Most addresses of `spin` are sampled, and so resolved, before the busy step (a debug
    // build's loop has many): resolving one is the sampler thread's work.
    spin(Duration::from_millis(400));
    session.step();
    sampler.on_step(&session);
    wait_written(&sampler, 1);
    session.step();
    sampler.on_step(&session);
    let early_c0 = early.start();
    let late = Busy::spawn(budget);
    let late_c0 = late.start();
    let early = early.finish(early_c0);
    let late = late.finish(late_c0);
    session.step();
    sampler.on_step(&session);
    sampler.stop(&session);
    session.finish().unwrap();
    let stats = sampler.stats().unwrap();

    let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "{issues:?}");
    let mut per_thread = HashMap::new();
    let (mut taken, mut lost, mut cpu_ns, mut sampler_cpu_ns) = (0, 0, 0, 0);
    for e in &trace.events {
        match &e.event {
            Event::Samples(s) if s.step == 2 => *per_thread.entry(s.thread).or_default() += s.n,
            Event::Sampler(s) if s.step == 2 => {
                (taken, lost) = (s.taken, s.lost);
                cpu_ns = s.cpu_ns.unwrap();
                sampler_cpu_ns = s.sampler_cpu_ns.unwrap_or(0);
            }
            _ => {}
        }
    }
    Some(Outcome {
        stats,
        taken,
        lost,
        cpu_ns,
        sampler_cpu_ns,
        per_thread,
        early,
        late,
    })
}

/// Periods of `hz` in `ns` of CPU time.
fn periods(ns: u64, hz: u32) -> u64 {
    ns * u64::from(hz) / 1_000_000_000
}

/// The credit a thread may carry into a step, in periods: the ticker keeps at most 16 periods
/// or 16 ms (what late ticks and signals that found their thread blocked may still deliver).
fn carried(hz: u32) -> u64 {
    16.max(periods(16_000_000, hz))
}

/// Through `config`'s source (the ticker when chosen automatically, perf events when asked
/// for and allowed), or, where the kernel refuses both, through the recorded fallback: both
/// threads are sampled, never more than once per period of their own CPU time, and the
/// accounts add up.
fn both_threads_are_sampled_within_their_cpu_time(config: SamplerConfig) {
    let _turn = turn();
    let hz = config.hz;
    let Some(o) = two_busy_threads(config, Duration::from_millis(300)) else {
        return;
    };
    let early = o.per_thread.get(&o.early.tid).copied().unwrap_or(0);
    let late = o.per_thread.get(&o.late.tid).copied().unwrap_or(0);
    // Both sampled: the one that was there before the sampler and the one it found mid-run.
    assert!(early > 0 && late > 0, "{:?}", o.per_thread);
    // The step's account is the sum of its lines, and the run's the sum of its steps'.
    assert_eq!(o.taken, o.per_thread.values().sum::<u64>());
    assert!(o.stats.taken >= o.taken && o.stats.lost >= o.lost);
    assert_eq!(o.stats.steps, 4);
    assert!(o.lost * 100 <= o.taken, "{} lost of {}", o.lost, o.taken);
    eprintln!(
        "{hz} Hz requested through {:?}: {} taken over {} ms of process CPU ({} ms the \
         sampler's); early {early} over {} ms, late {late} over {} ms of their CPU (the \
         rate achieved is the bench's figure)",
        o.stats.source,
        o.taken,
        o.cpu_ns / 1_000_000,
        o.sampler_cpu_ns / 1_000_000,
        o.early.cpu_ns / 1_000_000,
        o.late.cpu_ns / 1_000_000,
    );
    if o.stats.source == Some(SamplerSource::Itimer) {
        // perf_event_open was refused here (or the environment chose the timer): the
        // fallback ran and says so; it interrupts whichever thread runs once per period of
        // the process's CPU time, the sampler's threads' included.
        eprintln!(
            "the process CPU-time timer sampled (perf events refused, or {SOURCE_ENV} said so)"
        );
        assert!(o.taken <= periods(o.cpu_ns, hz) + 2, "{} taken", o.taken);
        return;
    }
    let want = config.source.unwrap_or(SamplerSource::Ticker);
    assert_eq!(o.stats.source, Some(want));
    // Once per period of a thread's own CPU time at most: each busy thread's samples are
    // bounded by the CPU time its work took (and the moments around it: its start, its end).
    for (name, b, n) in [("early", &o.early, early), ("late", &o.late, late)] {
        let most = periods(b.cpu_ns + 2_000_000, hz) + 2;
        assert!(
            n <= most,
            "{name} thread: {n} samples over {} µs of its CPU at {hz} Hz (at most {most})",
            b.cpu_ns / 1000
        );
    }
    // And the step's: the sampled threads' CPU time (the process's less the sampler's own),
    // plus what the driving thread may carry over from its busy warm-up.
    let most = periods(o.cpu_ns - o.sampler_cpu_ns, hz) + carried(hz) + 4;
    assert!(
        o.taken <= most,
        "{} taken over {} µs of the sampled threads' CPU at {hz} Hz (at most {most})",
        o.taken,
        (o.cpu_ns - o.sampler_cpu_ns) / 1000
    );
}

#[test]
fn two_busy_threads_at_1000_hz_are_sampled_within_their_cpu_time() {
    both_threads_are_sampled_within_their_cpu_time(SamplerConfig::hz(1000));
}

#[test]
fn two_busy_threads_at_4000_hz_are_sampled_within_their_cpu_time() {
    both_threads_are_sampled_within_their_cpu_time(SamplerConfig::hz(4000));
}

#[test]
fn perf_events_asked_for_sample_within_the_cpu_time_too() {
    for hz in [1000, 4000] {
        both_threads_are_sampled_within_their_cpu_time(
            SamplerConfig::hz(hz).with_source(SamplerSource::PerfEvent),
        );
    }
}

#[test]
fn the_forced_timer_fallback_samples_both_threads_and_says_so() {
    let _turn = turn();
    let config = SamplerConfig::hz(1000).with_source(SamplerSource::Itimer);
    let o = two_busy_threads(config, Duration::from_millis(300)).expect("the timer is allowed");
    assert_eq!(o.stats.source, Some(SamplerSource::Itimer));
    let early = o.per_thread.get(&o.early.tid).copied().unwrap_or(0);
    let late = o.per_thread.get(&o.late.tid).copied().unwrap_or(0);
    assert!(early > 0 && late > 0, "{:?}", o.per_thread);
    assert_eq!(o.taken, o.per_thread.values().sum::<u64>());
    // The kernel's tick caps the timer (often near 250 Hz), and it never exceeds the
    // requested rate over the process's CPU time.
    assert!(
        o.taken <= periods(o.cpu_ns, 1000) + 2,
        "{} taken over {} ms of process CPU",
        o.taken,
        o.cpu_ns / 1_000_000
    );
    assert!(
        o.lost * 100 <= o.taken.max(100),
        "{} lost of {}",
        o.lost,
        o.taken
    );
}

/// The diagnostics take no sample: `deliver_only` interrupts the busy threads as sampling
/// does (the handler receives and counts the signals), `tick_only` sends none, and
/// `tick_only` is refused with a source other than the ticker.
#[test]
fn the_diagnostics_interrupt_the_threads_without_sampling() {
    let _turn = turn();
    let ticker = SamplerConfig::hz(1000).with_source(SamplerSource::Ticker);
    let budget = Duration::from_millis(300);
    let deliver = two_busy_threads(
        ticker.with_diagnostic(SamplerDiagnostic::DeliverOnly),
        budget,
    )
    .expect("no perf events asked for");
    assert_eq!(
        deliver.stats.diagnostic,
        Some(SamplerDiagnostic::DeliverOnly)
    );
    assert_eq!((deliver.stats.taken, deliver.taken), (0, 0));
    assert!(deliver.per_thread.is_empty(), "{:?}", deliver.per_thread);
    // Two threads busy for 300 ms of their CPU time each at 1 kHz, after 400 ms of warm-up
    // on the test's thread: signals were delivered and handled (how many per CPU second is
    // the bench's figure: `TRACEGRAPH_SAMPLER_DIAGNOSE`).
    assert!(
        deliver.stats.interrupts > 0,
        "{} signals handled",
        deliver.stats.interrupts
    );

    let tick = two_busy_threads(ticker.with_diagnostic(SamplerDiagnostic::TickOnly), budget)
        .expect("no perf events asked for");
    assert_eq!(tick.stats.diagnostic, Some(SamplerDiagnostic::TickOnly));
    assert_eq!((tick.stats.taken, tick.stats.interrupts), (0, 0));
    assert!(tick.per_thread.is_empty(), "{:?}", tick.per_thread);

    let (session, _sink) = recorded_steps("trace-sampler::diagnostic", 1);
    let refused = Sampler::new().start(
        &session,
        SamplerConfig::hz(1000)
            .with_source(SamplerSource::Itimer)
            .with_diagnostic(SamplerDiagnostic::TickOnly),
    );
    assert!(
        matches!(
            refused,
            Err(SamplerError::TickOnlyNeedsTicker {
                chosen: SamplerSource::Itimer
            })
        ),
        "{refused:?}"
    );
}

/// Where the bursty thread's samples fell, by their stacks.
#[derive(Debug, Default)]
struct Bursty {
    /// Samples of the thread.
    n: u64,
    /// In the work (`burn`).
    in_work: u64,
    /// In the sleep call.
    in_sleep: u64,
    /// In the thread's own code around them (its loop, its start and end).
    in_own: u64,
    /// Anywhere else: stacks and counts.
    elsewhere: Vec<(String, u64)>,
    /// In stacks not defined (yet: a stop's `stack` lines may not be on the sink yet while
    /// the session runs; none once it finished).
    undefined: u64,
}

impl Bursty {
    /// The samples of thread `tid` in the trace written so far (complete or not).
    fn of(sink: &MemorySink, tid: u64) -> Bursty {
        let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
        let mut funcs = HashMap::new();
        let mut stacks = HashMap::new();
        let mut b = Bursty::default();
        // Stacks are defined when sampling stops, after the samples naming them: the
        // definitions first, then the samples.
        for e in &trace.events {
            match &e.event {
                Event::Frame(f) => {
                    funcs.insert(f.id, f.func.clone());
                }
                Event::Stack(s) => {
                    stacks.insert(s.id, s.frames.clone());
                }
                _ => {}
            }
        }
        for e in &trace.events {
            match &e.event {
                Event::Samples(s) if s.thread == tid => {
                    let Some(frames) = stacks.get(&s.stack) else {
                        b.undefined += s.n;
                        continue;
                    };
                    let names: Vec<&str> = frames.iter().map(|f: &u64| funcs[f].as_str()).collect();
                    b.n += s.n;
                    if names
                        .iter()
                        .any(|f| f.contains("nanosleep") || f.ends_with("::sleep"))
                    {
                        b.in_sleep += s.n;
                    } else if names.iter().any(|f| f.contains("rate::burn")) {
                        b.in_work += s.n;
                    } else if names.iter().any(|f| {
                        f.contains("a_thread_that_sleeps_between_bursts") || *f == "start_thread"
                    }) {
                        // The thread's own code around the work: its loop between a burst
                        // and a sleep, and its exit (std dropping its stack-overflow
                        // handler, glibc's per-thread cleanup): work too, and brief.
                        b.in_own += s.n;
                    } else {
                        b.elsewhere.push((names.join(" > "), s.n));
                    }
                }
                _ => {}
            }
        }
        b
    }
}

/// Bursts the bursty thread works between two looks at its samples.
const BURSTS_PER_ROUND: u64 = 150;
/// Rounds at most: far more than an idle or a loaded machine needs (one to a few), so that
/// only a sampler that never samples the work gets there.
const MAX_ROUNDS: u64 = 60;

/// A thread that works in bursts and sleeps between them (a thread-pool worker's life) is
/// sampled in its work and otherwise only in its sleeping call (which the analysis counts as
/// waiting): with the ticker, a signal that finds a thread blocked takes no sample, and a
/// thread that did not run is not signalled at all.
///
/// Each burst is a fixed amount of work, and the thread works on, round after round, until
/// its work has been sampled 15 times: a loaded machine samples it less in its work and more
/// in its sleep call (a signal that arrives as a sleep ran out while the thread waited for a
/// CPU; 11 of 54 samples were in the work in one run at load 10-13), which makes the test
/// longer, not red. Where each sample falls is the property, and it holds for any timing.
#[test]
fn a_thread_that_sleeps_between_bursts_is_sampled_in_its_work_or_its_sleep_call() {
    let _turn = turn();
    // Two steps per round (see below).
    let (session, sink) = recorded_steps("trace-sampler::bursts", 2 * MAX_ROUNDS + 2);
    let sampler = Sampler::new();
    let (tid_tx, tid_rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let bursts = Arc::new(AtomicU64::new(0));
    let worker = {
        let (stop, bursts) = (Arc::clone(&stop), Arc::clone(&bursts));
        std::thread::spawn(move || {
            tid_tx.send(tid()).unwrap();
            let mut x = 1u64;
            while !stop.load(Ordering::Relaxed) {
                x = burn(x, 16);
                bursts.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(1300));
            }
            std::hint::black_box(x);
        })
    };
    let bursty = tid_rx.recv().unwrap();
    let mut rounds = 0;
    loop {
        // Each round samples between a start and a stop of its own: stacks are symbolized
        // (their `frame` and `stack` lines written) when sampling stops, never during the
        // recorded steps, so the round's samples can be classified only after its stop.
        sampler.start(&session, SamplerConfig::hz(1000)).unwrap();
        let target = bursts.load(Ordering::Relaxed) + BURSTS_PER_ROUND;
        while bursts.load(Ordering::Relaxed) < target {
            std::thread::sleep(Duration::from_millis(10));
        }
        session.step();
        sampler.on_step(&session);
        sampler.stop(&session);
        // The next round starts in a step of its own (the stop accounted for this one).
        session.step();
        rounds += 1;
        let so_far = Bursty::of(&sink, bursty);
        if (so_far.in_work >= 15 && so_far.n >= 20) || rounds == MAX_ROUNDS {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    session.finish().unwrap();
    let stats = sampler.stats().unwrap();
    let b = Bursty::of(&sink, bursty);
    eprintln!(
        "bursty thread, {rounds} round(s) of {BURSTS_PER_ROUND} bursts: {} samples, {} in the \
         work, {} in the sleep call, {} in its own code around them (last round: {stats:?})",
        b.n, b.in_work, b.in_sleep, b.in_own
    );
    // Every sample is in the work, in the sleep call (which the analysis counts as waiting:
    // a signal that arrived as a sleep ran out on its own, while the thread waited for a
    // CPU) or, rarely, in the thread's own brief code around them (0-2 of 203-208 samples in
    // 50 runs); none outside the thread's own frames — not in the signal's trampoline, the
    // handler or the sampler. Waiting shown as work would land in neither the work nor the
    // sleep and break the bound on the rest.
    assert!(
        b.elsewhere.is_empty(),
        "samples elsewhere: {:?}",
        b.elsewhere
    );
    // The finished trace defines every stack its samples name.
    assert_eq!(b.undefined, 0);
    assert!(
        b.in_own <= 3.max(b.n / 50),
        "{} of {} samples in the thread's own code outside the work and the sleep",
        b.in_own,
        b.n
    );
    // And the work is sampled: the rounds went on until it was, enough.
    assert!(
        b.in_work >= 15 && b.n >= 20,
        "{} of {} samples in the work after {rounds} rounds of {BURSTS_PER_ROUND} bursts",
        b.in_work,
        b.n
    );
}
