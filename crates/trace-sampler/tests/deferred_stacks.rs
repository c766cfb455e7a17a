//! Symbolization after sampling: no `frame` or `stack` line while steps are recorded, every
//! stack the `samples` lines name defined (symbolized) once sampling stops.

#![cfg(all(feature = "enabled", target_os = "linux"))]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use trace_record::schema::{Event, Phase, Schedule};
use trace_record::{MemorySink, ParsedTrace, Run, TraceSession};
use trace_sampler::{Sampler, SamplerConfig};

/// One sampler per process: the tests that start one take turns.
static TURN: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    TURN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// CPU time the calling thread has run, ns (`/proc/thread-self/schedstat`'s first field).
fn thread_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    stat.split_whitespace().next().unwrap().parse().unwrap()
}

/// Burns `cpu` of the calling thread's own CPU time in a function of its own, so that the
/// samples name it (the sampler samples per period of CPU time: the count does not depend on
/// how loaded the machine is).
#[inline(never)]
fn deferred_spin_here(cpu: Duration) -> u64 {
    let c0 = thread_cpu_ns();
    let mut x = 1u64;
    while thread_cpu_ns() - c0 < cpu.as_nanos() as u64 {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    x
}

/// The trace so far (a trace without its trailer reads up to its last complete line).
fn read_so_far(sink: &MemorySink) -> ParsedTrace {
    trace_record::read_trace_bytes(&sink.bytes()).unwrap()
}

fn count(trace: &ParsedTrace, f: impl Fn(&Event) -> bool) -> usize {
    trace.events.iter().filter(|e| f(&e.event)).count()
}

/// Waits until `f` holds of the trace written so far. The deadline only keeps a regression
/// from hanging the test; the outcome does not depend on how fast the machine is.
fn wait_for(sink: &MemorySink, what: &str, f: impl Fn(&ParsedTrace) -> bool) -> ParsedTrace {
    let deadline = Instant::now() + Duration::from_mins(5);
    loop {
        let trace = read_so_far(sink);
        if f(&trace) {
            return trace;
        }
        assert!(Instant::now() < deadline, "never written: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn stacks_are_symbolized_after_sampling_stops_not_during_the_steps() {
    let _turn = turn();
    // Three recorded steps, then none.
    let run = Run::new("trace-sampler::deferred", Phase::Train, "cpu").schedule(Schedule {
        skip_first: 0,
        wait: 0,
        warmup: 0,
        active: 3,
        repeat: 1,
    });
    let (session, sink) = TraceSession::in_memory(run);
    let session = Arc::new(session);
    let sampler = Sampler::new();
    sampler.start(&session, SamplerConfig::hz(1000)).unwrap();
    for _ in 0..3 {
        std::hint::black_box(deferred_spin_here(Duration::from_millis(150)));
        session.step();
        sampler.on_step(&session);
    }
    // Every recorded step's account is written (its samples lines with it) ...
    let during = wait_for(&sink, "three sampler accounts", |t| {
        count(t, |e| matches!(e, Event::Sampler(_))) >= 3
    });
    let taken: u64 = during
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Samples(s) => Some(s.n),
            _ => None,
        })
        .sum();
    // 450 ms of CPU at 1 kHz: far more than one sample, whatever the machine's load.
    assert!(taken > 10, "{taken} samples");
    // ... and no stack was symbolized: no frame, no stack line yet.
    assert_eq!(count(&during, |e| matches!(e, Event::Frame(_))), 0);
    assert_eq!(count(&during, |e| matches!(e, Event::Stack(_))), 0);

    sampler.stop(&session);
    session.finish().unwrap();
    let trace = read_so_far(&sink);
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "{issues:?}");
    // After the stop: every stack named by a samples line is defined, once, after the last
    // samples line of the steps, its frames before it.
    let mut frames: HashMap<u64, String> = HashMap::new();
    let mut stacks: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut named = HashSet::new();
    let mut last_samples_line = 0;
    let mut first_definition = u64::MAX;
    for e in &trace.events {
        match &e.event {
            Event::Frame(f) => {
                first_definition = first_definition.min(e.line);
                assert!(frames.insert(f.id, f.func.clone()).is_none());
            }
            Event::Stack(st) => {
                first_definition = first_definition.min(e.line);
                assert!(st.frames.iter().all(|f| frames.contains_key(f)), "{st:?}");
                assert!(stacks.insert(st.id, st.frames.clone()).is_none());
            }
            Event::Samples(s) => {
                named.insert(s.stack);
                last_samples_line = last_samples_line.max(e.line);
            }
            _ => {}
        }
    }
    assert!(first_definition > last_samples_line);
    assert!(named.iter().all(|s| stacks.contains_key(s)), "{named:?}");
    // Symbolized as before: demangled names, the sampled function among them, and the
    // handler's own frames cut (each stack ends in the interrupted code).
    let funcs = |id: &u64| -> Vec<&str> { stacks[id].iter().map(|f| frames[f].as_str()).collect() };
    assert!(
        named
            .iter()
            .any(|s| funcs(s).iter().any(|f| f.ends_with("deferred_spin_here"))),
        "{:?}",
        named.iter().map(funcs).collect::<Vec<_>>()
    );
    for s in &named {
        assert!(
            funcs(s)
                .iter()
                .all(|f| !f.contains("on_sigprof") && !f.starts_with("backtrace::")),
            "{:?}",
            funcs(s)
        );
    }
    assert_eq!(sampler.stats().unwrap().taken, taken);
}

/// Two sampling runs into one session, each of two recorded steps, each run's stacks defined
/// at its stop; with `new_step`, the second run starts in a step of its own, else in the step
/// the first stopped in. Checks that no id is defined twice and that every step has one
/// account with every sample in it.
fn sample_twice_into_one_session(new_step: bool) {
    let _turn = turn();
    let (session, sink) = TraceSession::in_memory(Run::new(
        "trace-sampler::deferred_restart",
        Phase::Train,
        "cpu",
    ));
    let session = Arc::new(session);
    let sampler = Sampler::new();
    let mut taken = 0;
    for _ in 0..2 {
        sampler.start(&session, SamplerConfig::hz(1000)).unwrap();
        for _ in 0..2 {
            std::hint::black_box(deferred_spin_here(Duration::from_millis(100)));
            session.step();
            sampler.on_step(&session);
        }
        sampler.stop(&session);
        taken += sampler.stats().unwrap().taken;
        if new_step {
            session.step();
        }
    }
    session.finish().unwrap();
    let trace = read_so_far(&sink);
    // No id defined twice, no step accounted twice, every stack named is defined, every
    // count accounted for.
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "{issues:?}");
    let stacks: HashSet<u64> = trace
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Stack(st) => Some(st.id),
            _ => None,
        })
        .collect();
    let mut counted = 0;
    for e in &trace.events {
        if let Event::Samples(s) = &e.event {
            assert!(stacks.contains(&s.stack), "stack {} undefined", s.stack);
            counted += s.n;
        }
    }
    assert_eq!(counted, taken);
    // Each run accounts for the step it starts in, the two it steps past and the one it
    // stops in (three steps); without a step between them, the second run waited for the
    // step after the one the first stopped in, which the first accounted for.
    let accounts: Vec<u64> = trace
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Sampler(sp) => Some(sp.step),
            _ => None,
        })
        .collect();
    let distinct: HashSet<u64> = accounts.iter().copied().collect();
    assert_eq!(distinct.len(), accounts.len(), "{accounts:?}");
    let expected = if new_step { 6 } else { 5 };
    assert_eq!(accounts.len(), expected, "{accounts:?}");
    // 400 ms of CPU at 1 kHz (300 ms sampled when the second run waited a step): far more
    // than one sample per run.
    assert!(taken > 10, "{taken} samples");
}

#[test]
fn sampling_stopped_and_started_again_into_one_session_defines_every_id_once() {
    sample_twice_into_one_session(true);
}

#[test]
fn sampling_started_again_in_the_step_it_stopped_in_waits_for_the_next_step() {
    sample_twice_into_one_session(false);
}
