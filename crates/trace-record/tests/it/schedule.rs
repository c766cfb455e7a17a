//! Schedule semantics (PyTorch's `torch.profiler.schedule`) against tables of active steps.

use trace_record::schema::{Event, Schedule};
use trace_record::{StepAction, TraceSession, read_trace_bytes};

use crate::common::{run, step_indices};

fn sched(skip_first: u64, wait: u64, warmup: u64, active: u64, repeat: u64) -> Schedule {
    Schedule {
        skip_first,
        wait,
        warmup,
        active,
        repeat,
    }
}

/// `(schedule, steps 0..20 rendered as . = none, w = warmup, R = record)`.
fn table() -> Vec<(Schedule, &'static str)> {
    vec![
        (Schedule::always(), "RRRRRRRRRRRRRRRRRRRR"),
        (sched(0, 1, 1, 2, 0), ".wRR.wRR.wRR.wRR.wRR"),
        (sched(0, 1, 1, 2, 2), ".wRR.wRR............"),
        (sched(3, 1, 1, 2, 1), "....wRR............."),
        (sched(2, 0, 0, 1, 3), "..RRR..............."),
        (sched(0, 2, 0, 3, 0), "..RRR..RRR..RRR..RRR"),
        (sched(1, 0, 2, 1, 0), ".wwRwwRwwRwwRwwRwwRw"),
        (sched(0, 5, 0, 0, 0), "...................."),
        (sched(0, 0, 0, 0, 0), "...................."),
        (sched(25, 0, 0, 1, 0), "...................."),
    ]
}

fn render(s: &Schedule) -> String {
    (0..20)
        .map(|i| match s.action(i) {
            StepAction::None => '.',
            StepAction::Warmup => 'w',
            StepAction::Record => 'R',
        })
        .collect()
}

#[test]
fn actions_match_the_table() {
    for (s, expected) in table() {
        assert_eq!(render(&s), expected, "{s:?}");
    }
}

#[test]
fn session_writes_only_active_steps() {
    for (s, expected) in table() {
        let (session, sink) = TraceSession::in_memory(run().schedule(s));
        for i in 0..20u64 {
            assert_eq!(session.current_step(), i);
            assert_eq!(
                session.is_active(),
                expected.as_bytes()[i as usize] == b'R',
                "{s:?} {i}"
            );
            session.record_counter("step", i as f64);
            if i < 19 {
                session.step();
            }
        }
        session.finish().unwrap();
        let trace = read_trace_bytes(&sink.bytes()).unwrap();
        assert_eq!(trace.header.run.schedule, Some(s));
        let counted: Vec<u64> = trace
            .events
            .iter()
            .filter_map(|e| match &e.event {
                Event::Counter(c) => Some(c.value as u64),
                _ => None,
            })
            .collect();
        let steps = step_indices(&trace);
        let active: Vec<u64> = (0..20)
            .filter(|&i| expected.as_bytes()[i as usize] == b'R')
            .collect();
        assert_eq!(counted, active, "{s:?}");
        // A step event marks every recorded step except step 0 (the session's start).
        let marked: Vec<u64> = active.iter().copied().filter(|&i| i > 0).collect();
        assert_eq!(steps, marked, "{s:?}");
    }
}

#[test]
fn huge_phase_lengths_do_not_overflow() {
    // `wait + warmup` past u64::MAX (a schedule read from user configuration) must not panic
    // in debug builds; the cycle saturates, so such a schedule records nothing reachable.
    let s = sched(0, u64::MAX - 1, 5, 1, 0);
    assert_eq!(s.action(u64::MAX - 1), StepAction::Warmup);
    assert_eq!(s.action(0), StepAction::None);
    let s = sched(3, 2, u64::MAX, u64::MAX, 0);
    assert_eq!(s.action(4), StepAction::None);
    assert_eq!(s.action(5), StepAction::Warmup);
    assert_eq!(s.action(u64::MAX), StepAction::Warmup);
}
