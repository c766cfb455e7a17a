//! The rate achieved on two CPU-busy threads (one started mid-run), and the forced fallback.

#![cfg(all(feature = "enabled", target_os = "linux"))]

use std::collections::HashMap;
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
        for i in 0..10_000u64 {
            x = std::hint::black_box(
                x.wrapping_mul(6364136223846793005).wrapping_add(i) ^ (x >> 17),
            );
        }
    }
    std::hint::black_box(x)
}

/// The calling thread's CPU time in ns, where the kernel exposes it (`CONFIG_SCHED_DEBUG`'s
/// `/proc/thread-self/sched`).
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/sched").ok()?;
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("se.sum_exec_runtime"))?;
    let ms: f64 = line.split(':').nth(1)?.trim().parse().ok()?;
    Some((ms * 1e6) as u64)
}

/// A busy thread's account: its id and the CPU time it spent in the measured step.
struct Busy {
    tid: u64,
    cpu_ns: Option<u64>,
}

/// Spins for `for_` of the thread's CPU time where the kernel reports it (so that a loaded
/// machine does not shorten the measurement), else of wall time.
fn busy(tid_of: impl Fn() -> u64, for_: Duration) -> Busy {
    let c0 = thread_cpu_ns();
    let start = Instant::now();
    match c0 {
        Some(c0) => {
            let budget = for_.as_nanos() as u64;
            while thread_cpu_ns().is_some_and(|c| c - c0 < budget)
                && start.elapsed() < Duration::from_secs(10)
            {
                spin(Duration::from_millis(20));
            }
        }
        None => {
            spin(for_);
        }
    }
    let c1 = thread_cpu_ns();
    Busy {
        tid: tid_of(),
        cpu_ns: c0.zip(c1).map(|(a, b)| b.saturating_sub(a)),
    }
}

/// The operating system's id of the calling thread (`/proc/thread-self` names it).
fn tid() -> u64 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

/// What one run measured in its busy step.
struct Outcome {
    stats: SamplerStats,
    /// The sampler's account once the warm-up step was written (before the busy step).
    before: SamplerStats,
    /// The busy step's `sampler` line: taken, lost, process CPU ns.
    taken: u64,
    lost: u64,
    cpu_ns: u64,
    /// Samples of the busy step per thread.
    per_thread: HashMap<u64, u64>,
    early: Busy,
    late: Busy,
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

/// Samples at `config` while two threads spin: one started before the sampler, one after.
/// Step 0 warms up (the symbolizer loads the debug information when it writes step 0), step
/// 1 waits for that write, step 2 is the busy step measured.
fn two_busy_threads(config: SamplerConfig, for_: Duration) -> Option<Outcome> {
    let (session, sink) = recorded_steps("trace-sampler::rate", 4);
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let early = std::thread::spawn(move || {
        let _ = go_rx.recv();
        busy(tid, for_)
    });
    let sampler = Sampler::new();
    match sampler.start(&session, config) {
        Ok(()) => {}
        Err(SamplerError::PerfEventRefused(e)) => {
            eprintln!("perf events were asked for and refused here ({e}): nothing to measure");
            drop(go_tx);
            let _ = early.join();
            return None;
        }
        Err(e) => panic!("{e}"),
    }
    // Long enough that most addresses of `spin` are sampled, and so resolved, before the
    // busy step (a debug build's loop has many): resolving one is the sampler thread's CPU
    // time, which counts in the process's.
    spin(Duration::from_millis(400));
    session.step();
    sampler.on_step(&session);
    let waited = Instant::now();
    let before = loop {
        let s = sampler.stats().unwrap();
        if s.steps >= 1 || waited.elapsed() > Duration::from_secs(30) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    session.step();
    sampler.on_step(&session);
    go_tx.send(()).unwrap();
    let late = std::thread::spawn(move || busy(tid, for_));
    let early = early.join().unwrap();
    let late = late.join().unwrap();
    session.step();
    sampler.on_step(&session);
    sampler.stop(&session);
    session.finish().unwrap();
    let stats = sampler.stats().unwrap();

    let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "{issues:?}");
    let mut per_thread = HashMap::new();
    let (mut taken, mut lost, mut cpu_ns) = (0, 0, 0);
    for e in &trace.events {
        match &e.event {
            Event::Samples(s) if s.step == 2 => *per_thread.entry(s.thread).or_default() += s.n,
            Event::Sampler(s) if s.step == 2 => {
                (taken, lost) = (s.taken, s.lost);
                cpu_ns = s.cpu_ns.unwrap();
            }
            _ => {}
        }
    }
    Some(Outcome {
        stats,
        before,
        taken,
        lost,
        cpu_ns,
        per_thread,
        early,
        late,
    })
}

/// At `config`'s rate through its source (the ticker when chosen automatically, perf events
/// when asked for and allowed), or, where the kernel refuses both, through the recorded
/// fallback.
fn rate_is_the_requested_one(config: SamplerConfig) {
    let _turn = turn();
    let hz = config.hz;
    let Some(o) = two_busy_threads(config, Duration::from_millis(400)) else {
        return;
    };
    let early = o.per_thread.get(&o.early.tid).copied().unwrap_or(0);
    let late = o.per_thread.get(&o.late.tid).copied().unwrap_or(0);
    assert!(early > 0 && late > 0, "{:?}", o.per_thread);
    assert_eq!(
        o.stats.taken,
        o.per_thread.values().sum::<u64>() + warmup(&o)
    );
    if o.stats.source == Some(SamplerSource::Itimer) {
        // perf_event_open was refused here (or the environment chose the timer): the
        // fallback ran, sampled both threads and says so.
        eprintln!(
            "the process CPU-time timer sampled (perf events refused, or {SOURCE_ENV} said so)"
        );
        return;
    }
    let want = config.source.unwrap_or(SamplerSource::Ticker);
    assert_eq!(o.stats.source, Some(want));
    let hz = f64::from(hz);
    // Over the process's CPU time less the sampler thread's own (the steps after the
    // warm-up: the busy one, and two with next to no CPU time).
    let taken = o.stats.taken - o.before.taken;
    let cpu = o.stats.cpu_ns.unwrap() - o.before.cpu_ns.unwrap();
    let own = o.stats.sampler_cpu_ns.unwrap() - o.before.sampler_cpu_ns.unwrap();
    let sampled = taken as f64 / ((cpu - own) as f64 / 1e9);
    // The ticker wakes once a period and signals each thread at most once per tick, so at
    // 4 kHz (a tick every 250 µs) a late wake-up, in an unoptimised build on a loaded
    // machine, costs it samples the kernel's timers would not: its band starts lower there
    // (0.72-0.99 of the rate over the sampled threads measured on a 2-core machine), and at
    // 1 kHz it is 0.88-1.0 where another machine's load steals CPU from the ticker.
    let ticker = want == SamplerSource::Ticker;
    let ticker_4k = ticker && hz > 2000.0;
    let low = if ticker_4k {
        0.6
    } else if ticker {
        0.8
    } else if hz > 2000.0 {
        // Perf events at 4 kHz: 0.87-1.0 measured here (user space only under
        // perf_event_paranoid 2, and the sampled threads read their CPU time from procfs).
        0.85
    } else {
        0.9
    };
    assert!(
        (low..=1.1).contains(&(sampled / hz)),
        "{sampled:.0} Hz of {hz} over {} ms of CPU, {} ms of it the sampler's ({taken} taken)",
        cpu / 1_000_000,
        own / 1_000_000
    );
    // Over all of the process's CPU time, the sampler thread's too: that thread's cost per
    // sample (draining, interning; most in an unoptimised build) is all that is missing.
    let achieved = o.taken as f64 / (o.cpu_ns as f64 / 1e9);
    let low = if ticker_4k { 0.5 } else { 0.7 };
    assert!(
        (low..=1.1).contains(&(achieved / hz)),
        "{achieved:.0} Hz of {hz} over {} ms of process CPU ({} taken)",
        o.cpu_ns / 1_000_000,
        o.taken
    );
    eprintln!(
        "{hz} Hz requested: {sampled:.0} Hz of the sampled threads' CPU, {achieved:.0} Hz of \
         the process's; threads {:?}, early {early} over {:?} ns, late {late} over {:?} ns",
        o.per_thread, o.early.cpu_ns, o.late.cpu_ns
    );
    assert!(o.lost * 100 <= o.taken, "{} lost of {}", o.lost, o.taken);
    // Each thread on its own clock, where the kernel reports a thread's CPU time. The late
    // thread is sampled from the sampler thread's first scan after it started (5 ms, more
    // when a loaded machine delays the sampler thread), so its band starts lower.
    let (early_low, late_low) = if ticker_4k {
        (0.6, 0.55)
    } else if ticker {
        (0.8, 0.75)
    } else if hz > 2000.0 {
        (0.85, 0.8)
    } else {
        (0.9, 0.85)
    };
    for (name, b, n, low) in [
        ("early", &o.early, early, early_low),
        ("late", &o.late, late, late_low),
    ] {
        if let Some(ns) = b.cpu_ns.filter(|&ns| ns > 50_000_000) {
            let per_thread = n as f64 / (ns as f64 / 1e9);
            assert!(
                (low..=1.1).contains(&(per_thread / hz)),
                "{name} thread: {per_thread:.0} Hz of {hz} over {} ms of its CPU",
                ns / 1_000_000
            );
        }
    }
}

/// Samples of the steps before the busy one (the warm-up's).
fn warmup(o: &Outcome) -> u64 {
    o.stats.taken - o.taken
}

#[test]
fn two_busy_threads_at_1000_hz_get_the_requested_rate() {
    rate_is_the_requested_one(SamplerConfig::hz(1000));
}

#[test]
fn two_busy_threads_at_4000_hz_get_the_requested_rate() {
    rate_is_the_requested_one(SamplerConfig::hz(4000));
}

#[test]
fn perf_events_asked_for_give_the_requested_rate_too() {
    for hz in [1000, 4000] {
        rate_is_the_requested_one(SamplerConfig::hz(hz).with_source(SamplerSource::PerfEvent));
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
    // The tick caps the timer, but it cannot exceed the requested rate by much.
    let achieved = o.taken as f64 / (o.cpu_ns as f64 / 1e9);
    assert!(achieved > 10.0 && achieved < 1100.0, "{achieved:.0} Hz");
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
    let for_ = Duration::from_millis(300);
    let deliver = two_busy_threads(ticker.with_diagnostic(SamplerDiagnostic::DeliverOnly), for_)
        .expect("no perf events asked for");
    assert_eq!(
        deliver.stats.diagnostic,
        Some(SamplerDiagnostic::DeliverOnly)
    );
    assert_eq!((deliver.stats.taken, deliver.taken), (0, 0));
    assert!(deliver.per_thread.is_empty(), "{:?}", deliver.per_thread);
    // Two threads busy for 300 ms of CPU time each at 1 kHz, after 400 ms of warm-up on the
    // test's thread: about 1,000 periods of CPU time in all.
    assert!(
        deliver.stats.interrupts >= 300,
        "{} signals handled",
        deliver.stats.interrupts
    );

    let tick = two_busy_threads(ticker.with_diagnostic(SamplerDiagnostic::TickOnly), for_)
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

/// A thread that works in bursts and sleeps between them (a thread-pool worker's life) is
/// sampled in its work and otherwise only in its sleeping call (which the analysis counts as
/// waiting): with the ticker, a signal that finds a thread blocked takes no sample, and a
/// thread that did not run is not signalled at all.
#[test]
fn a_thread_that_sleeps_between_bursts_is_sampled_in_its_work_or_its_sleep_call() {
    let _turn = turn();
    let (session, sink) = recorded_steps("trace-sampler::bursts", 2);
    let sampler = Sampler::new();
    sampler.start(&session, SamplerConfig::hz(1000)).unwrap();
    let (tid_tx, tid_rx) = mpsc::channel();
    let bursts = std::thread::spawn(move || {
        tid_tx.send(tid()).unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(600) {
            spin(Duration::from_micros(700));
            std::thread::sleep(Duration::from_micros(1300));
        }
    });
    let bursty = tid_rx.recv().unwrap();
    bursts.join().unwrap();
    session.step();
    sampler.on_step(&session);
    session.step();
    sampler.on_step(&session);
    sampler.stop(&session);
    session.finish().unwrap();
    let stats = sampler.stats().unwrap();
    let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    let mut funcs = HashMap::new();
    let mut stacks = HashMap::new();
    let mut samples = Vec::new();
    for e in &trace.events {
        match &e.event {
            Event::Frame(f) => {
                funcs.insert(f.id, f.func.clone());
            }
            Event::Stack(s) => {
                stacks.insert(s.id, s.frames.clone());
            }
            Event::Samples(s) if s.thread == bursty => samples.push((s.stack, s.n)),
            _ => {}
        }
    }
    let n: u64 = samples.iter().map(|&(_, n)| n).sum();
    // About 0.42 s of CPU at 1 kHz; a loaded machine stretches the bursts, not the count.
    // It is sampled less than a thread that never sleeps (the kernel updates another
    // thread's CPU time only at its ticks and switches, so the ticker learns of a burst
    // when it has ended and its first signal often finds the thread asleep), but it is
    // sampled.
    assert!(n >= 20, "{n} samples of the bursty thread ({stats:?})");
    let (mut in_spin, mut in_sleep, mut in_own) = (0, 0, 0);
    let mut elsewhere = Vec::new();
    for (stack, k) in samples {
        let names: Vec<&str> = stacks[&stack].iter().map(|f| funcs[f].as_str()).collect();
        if names
            .iter()
            .any(|f| f.contains("nanosleep") || f.ends_with("::sleep"))
        {
            in_sleep += k;
        } else if names.iter().any(|f| f.contains("rate::spin")) {
            in_spin += k;
        } else if names
            .iter()
            .any(|f| f.contains("a_thread_that_sleeps_between_bursts") || *f == "start_thread")
        {
            // The thread's own code around the work: the loop's clock check between a burst
            // and a sleep, and its exit (std dropping its stack-overflow handler, glibc's
            // per-thread cleanup), sampled while the thread ends: work too, and brief.
            in_own += k;
        } else {
            elsewhere.push((names.join(" > "), k));
        }
    }
    eprintln!(
        "bursty thread: {n} samples, {in_spin} in the work, {in_sleep} in the sleep call, \
         {in_own} in its own code around them"
    );
    // Every sample is in the work, in the sleep call (which the analysis counts as waiting:
    // a signal that arrived as a sleep ran out on its own, while the thread waited for a
    // CPU, 20-51 of 71-101 samples here) or, rarely, in the thread's own brief code around
    // them (0-2 of 203-208 samples in 50 runs); none outside the thread's own frames — not
    // in the signal's trampoline, the handler or the sampler — and the work is sampled.
    // Waiting shown as work would land in neither the work nor the sleep and break the
    // bound on the rest.
    assert!(elsewhere.is_empty(), "samples elsewhere: {elsewhere:?}");
    assert!(
        in_own <= 3.max(n / 50),
        "{in_own} of {n} samples in the thread's own code outside the work and the sleep"
    );
    assert!(in_spin >= 15, "{in_spin} of {n} samples in the work");
}
