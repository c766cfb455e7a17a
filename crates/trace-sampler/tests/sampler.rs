//! The sampler on a bare session (no Candle): windows, attribution to the entered scope, limits.

#![cfg(all(feature = "enabled", target_os = "linux"))]

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use trace_record::schema::{Event, ExecStep, Phase, Schedule, SpanKind};
use trace_record::{MemorySink, ParsedTrace, Run, TraceSession};
use trace_sampler::{
    Sampler, SamplerConfig, SamplerError, Scope, current_scope, enter_scope, is_sampling,
};

/// One sampler per process: the tests that start one take turns.
static TURN: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    TURN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn session(run: Run) -> (Arc<TraceSession>, MemorySink) {
    let (session, sink) = TraceSession::in_memory(run);
    (Arc::new(session), sink)
}

/// Burns CPU on the calling thread for `for_`.
fn spin(for_: Duration) {
    let start = Instant::now();
    let mut x = 1u64;
    while start.elapsed() < for_ {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    std::hint::black_box(x);
}

/// CPU time the calling thread has run, ns (`/proc/thread-self/schedstat`'s first field).
fn thread_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    stat.split_whitespace().next().unwrap().parse().unwrap()
}

/// Burns CPU on the calling thread until it has run `cpu` more of its own CPU time: the
/// sampler samples per period of CPU time, so the samples expected do not depend on how
/// loaded the machine is (only the wall time does).
fn spin_cpu(cpu: Duration) {
    let c0 = thread_cpu_ns();
    while thread_cpu_ns() - c0 < cpu.as_nanos() as u64 {
        spin(Duration::from_millis(10));
    }
}

fn step(session: &TraceSession, sampler: &Sampler) {
    session.step();
    sampler.on_step(session);
}

fn read(sink: &MemorySink) -> ParsedTrace {
    let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "{issues:?}");
    trace
}

#[test]
fn samples_land_in_recorded_steps_attributed_to_the_entered_scope() {
    let _turn = turn();
    // Step 0 skipped, step 1 recorded, then nothing more.
    let run = Run::new("trace-sampler::scope", Phase::Train, "cpu").schedule(Schedule {
        skip_first: 1,
        wait: 0,
        warmup: 0,
        active: 1,
        repeat: 1,
    });
    let (session, sink) = session(run);
    let sampler = Sampler::new();
    assert!(sampler.stats().is_none());
    sampler.start(&session, SamplerConfig::hz(997)).unwrap();
    assert!(is_sampling());
    spin(Duration::from_millis(150));
    step(&session, &sampler);
    let span_id = {
        let span = session.span("backward", SpanKind::Function, Some(ExecStep::Backward));
        let _scope = enter_scope(Some(ExecStep::Backward), span.id());
        assert_eq!(
            current_scope(),
            Scope {
                phase: Some(ExecStep::Backward),
                span: span.id()
            }
        );
        spin_cpu(Duration::from_millis(300));
        span.id().unwrap().0
    };
    step(&session, &sampler);
    spin(Duration::from_millis(150));
    sampler.stop(&session);
    assert!(!is_sampling());
    session.finish().unwrap();
    let stats = sampler.stats().unwrap();

    let trace = read(&sink);
    // The sampler's handler frames (its signal handler, the unwinder, the signal trampoline) are
    // cut from every stack, whatever the build's debug info names them (release builds here
    // have line tables only, with functions named without their path): each stack starts
    // at the thread's entry and ends in the interrupted code.
    let mut frames = std::collections::HashMap::new();
    let mut stacks = std::collections::HashMap::new();
    for e in &trace.events {
        match &e.event {
            Event::Frame(f) => {
                frames.insert(f.id, (f.func.clone(), f.file.clone().unwrap_or_default()));
            }
            Event::Stack(st) => {
                stacks.insert(st.id, st.frames.clone());
            }
            _ => {}
        }
    }
    let (mut sampled, mut in_spin, mut unknown_leaf) = (0u64, 0u64, 0u64);
    for e in &trace.events {
        if let Event::Samples(s) = &e.event {
            let stack = &stacks[&s.stack];
            for id in stack {
                let (func, file) = &frames[id];
                // The handler's own frames only: the driving thread legitimately runs the
                // sampler's other code (a step arms and disarms the ticker's clocks).
                let own = func.contains("on_sigprof")
                    || file.ends_with("trace-sampler/src/ring.rs")
                    || func.contains("trace_unsynchronized")
                    || func.starts_with("backtrace::")
                    || func == "__restore_rt";
                assert!(
                    !own,
                    "the sampler's own frame {func} ({file}) in a sampled stack"
                );
            }
            // An unnamed leaf is the vDSO's clock read (in `spin`'s `Instant::elapsed`), the
            // trampoline left on, or the interrupted instruction looked up as if it were a
            // return address (at a function's first instruction: the padding before it).
            if stack.last().is_some_and(|id| frames[id].0 == "[unknown]") {
                unknown_leaf += s.n;
            }
            sampled += s.n;
            if stack.iter().any(|id| frames[id].0.contains("spin")) {
                in_spin += s.n;
            }
        }
    }
    assert!(
        in_spin * 10 >= sampled * 9,
        "{in_spin} of {sampled} samples in spin"
    );
    assert!(
        unknown_leaf * 10 <= sampled,
        "{unknown_leaf} of {sampled} stacks end in an unnamed frame: the signal trampoline?"
    );
    let (mut total, mut in_scope, mut taken) = (0u64, 0u64, 0u64);
    for e in &trace.events {
        match &e.event {
            Event::Samples(s) => {
                assert_eq!(s.step, 1);
                total += s.n;
                if s.phase == Some(ExecStep::Backward) && s.span == Some(span_id) {
                    in_scope += s.n;
                }
            }
            Event::Sampler(s) => {
                assert_eq!((s.step, s.hz), (1, 997));
                taken += s.taken;
            }
            _ => {}
        }
    }
    // 300 ms of the thread's CPU at 997 Hz: about 300 samples due, 20 required (a loaded
    // machine delays the ticker, which can only lower the count; it never raises the CPU
    // time the work needs).
    assert!(total >= 20, "too few samples: {total}");
    assert!(in_scope * 10 >= total * 9, "{in_scope} of {total} in scope");
    assert_eq!((stats.steps, stats.taken), (1, total));
    assert_eq!(taken, total);
    assert!(stats.effective_hz().is_some_and(|hz| hz > 0.0));
}

#[test]
fn one_sampler_per_process_and_rates_are_checked() {
    let _turn = turn();
    let (s1, _k1) = session(Run::new("trace-sampler::first", Phase::Infer, "cpu"));
    let (s2, _k2) = session(Run::new("trace-sampler::second", Phase::Infer, "cpu"));
    let first = Sampler::new();
    let second = Sampler::new();
    for hz in [0, 10_001] {
        assert!(matches!(
            first.start(&s1, SamplerConfig::hz(hz)),
            Err(SamplerError::InvalidRate { hz: h }) if h == hz
        ));
    }
    first.start(&s1, SamplerConfig::default()).unwrap();
    assert!(matches!(
        second.start(&s2, SamplerConfig::default()),
        Err(SamplerError::Busy)
    ));
    assert!(matches!(
        first.start(&s1, SamplerConfig::default()),
        Err(SamplerError::AlreadySampling)
    ));
    // Dropping a sampling sampler stops it: the next one may start.
    drop(first);
    assert!(!is_sampling());
    second.start(&s2, SamplerConfig::default()).unwrap();
    second.stop(&s2);
    assert!(!is_sampling());
}

#[test]
fn a_sigprof_arriving_after_stop_does_not_end_the_process() {
    // A signal the ticker queued just before `stop` can reach a thread that had not run since
    // after the handler is gone. SIGPROF's default action ends the process (a CI run under
    // load died of it: "signal: 27"), so the handler must outlive the sampler there.
    let _turn = turn();
    let (session, _sink) = session(Run::new("trace-sampler::late", Phase::Infer, "cpu"));
    let sampler = Sampler::new();
    sampler.start(&session, SamplerConfig::hz(997)).unwrap();
    step(&session, &sampler);
    spin(Duration::from_millis(20));
    sampler.stop(&session);
    assert!(!is_sampling());
    // The late signal, process-directed, as `kill` sends it.
    let status = std::process::Command::new("kill")
        .args(["-PROF", &std::process::id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    // Delivery happens within a moment; the process is still here to finish the test.
    spin(Duration::from_millis(50));
    session.finish().unwrap();
}
