//! The step breakdown: each whole step's index, wall time, ops and time by phase (the outermost
//! span of each phase counts, the rest of the step is `other`); hostile times saturate instead
//! of overflowing.

use proptest::prelude::*;
use trace_analyze::summary::PhaseTimes;
use trace_analyze::{Trace, new_step_cache, step_breakdown, summarize};
use trace_record::schema::ExecStep;

use crate::common::{from_lines, small, synthetic};

/// The time by phase of every whole step.
fn step_phases(t: &Trace) -> Vec<PhaseTimes> {
    step_breakdown(t).iter().map(|s| s.phases).collect()
}

#[test]
fn outermost_phase_spans_count_and_the_rest_is_other() {
    let t = from_lines(&[
        r#"{"type":"step","index":0,"ts":0}"#,
        r#"{"type":"span_start","id":1,"name":"train_step","kind":"function","thread":0,"ts":0}"#,
        r#"{"type":"span_start","id":2,"parent":1,"name":"forward","kind":"function","step":"forward","thread":0,"ts":10}"#,
        // Inherits forward from its parent: not counted again.
        r#"{"type":"span_start","id":3,"parent":2,"name":"layer","kind":"module","thread":0,"ts":12}"#,
        r#"{"type":"span_end","id":3,"ts":20}"#,
        r#"{"type":"span_end","id":2,"ts":40}"#,
        r#"{"type":"span_start","id":4,"parent":1,"name":"backward","kind":"function","step":"backward","thread":0,"ts":40}"#,
        r#"{"type":"span_end","id":4,"ts":90}"#,
        r#"{"type":"span_start","id":5,"parent":1,"name":"opt","kind":"function","step":"optimizer","thread":0,"ts":90}"#,
        r#"{"type":"span_end","id":5,"ts":95}"#,
        r#"{"type":"span_end","id":1,"ts":100}"#,
        r#"{"type":"step","index":1,"ts":100}"#,
        r#"{"type":"span_start","id":6,"name":"eval","kind":"function","thread":0,"ts":100}"#,
        r#"{"type":"span_end","id":6,"ts":130}"#,
        r#"{"type":"trailer","outcome":"complete","counts":{"span_start":6,"span_end":6,"op":0,"tensor":0,"memory":0,"device_memory":0,"gradient":0,"step":2,"marker":0,"counter":0},"dropped":0,"ts":130}"#,
    ]);
    let p = step_phases(&t);
    assert_eq!(
        p,
        [
            PhaseTimes {
                forward_ns: 30,
                backward_ns: 50,
                optimizer_ns: 5,
                other_ns: 15,
            },
            PhaseTimes {
                other_ns: 30,
                ..PhaseTimes::default()
            },
        ]
    );
    assert_eq!(p[0].get(ExecStep::Backward), 50);
    let b = step_breakdown(&t);
    assert_eq!((b[0].index, b[0].duration_ns, b[0].ops), (0, 100, 0));
    assert_eq!((b[1].index, b[1].duration_ns), (1, 30));
    let s = summarize(&t, &new_step_cache()).unwrap();
    assert_eq!(
        s.steps.phases,
        Some(PhaseTimes {
            forward_ns: 30,
            backward_ns: 50,
            optimizer_ns: 5,
            other_ns: 45,
        })
    );
}

#[test]
fn the_step_a_truncated_trace_ends_in_has_no_phases() {
    let t = from_lines(&[
        r#"{"type":"step","index":0,"ts":0}"#,
        r#"{"type":"span_start","id":1,"name":"forward","kind":"function","step":"forward","thread":0,"ts":0}"#,
        r#"{"type":"span_end","id":1,"ts":10}"#,
        r#"{"type":"step","index":1,"ts":10}"#,
        r#"{"type":"span_start","id":2,"name":"forward","kind":"function","step":"forward","thread":0,"ts":10}"#,
        r#"{"type":"span_end","id":2,"ts":15}"#,
    ]);
    assert!(t.partial_step().is_some());
    let p = step_phases(&t);
    assert_eq!(p.len(), t.complete_steps().len());
    assert_eq!(p[0].forward_ns, 10);
}

/// A forward span ending at u64::MAX ns (as a fuzz input once had it) makes the phase sums
/// saturate instead of overflowing; the step's other time is 0, never negative.
#[test]
fn a_span_ending_at_u64_max_saturates_the_phase_times() {
    let t = from_lines(&[
        r#"{"type":"step","index":0,"ts":0}"#,
        r#"{"type":"span_start","id":1,"name":"train_step","kind":"function","thread":0,"ts":0}"#,
        r#"{"type":"span_start","id":2,"parent":1,"name":"forward","kind":"function","step":"forward","thread":0,"ts":10}"#,
        r#"{"type":"span_end","id":2,"ts":18446744073709551615}"#,
        r#"{"type":"span_start","id":3,"parent":1,"name":"backward","kind":"function","step":"backward","thread":0,"ts":150}"#,
        r#"{"type":"span_end","id":3,"ts":280}"#,
        r#"{"type":"span_end","id":1,"ts":300}"#,
        r#"{"type":"step","index":1,"ts":300}"#,
        r#"{"type":"span_start","id":4,"name":"forward","kind":"function","step":"forward","thread":0,"ts":300}"#,
        r#"{"type":"span_start","id":5,"parent":4,"name":"forward2","kind":"function","step":"backward","thread":0,"ts":300}"#,
        r#"{"type":"span_end","id":5,"ts":18446744073709551615}"#,
        r#"{"type":"span_end","id":4,"ts":18446744073709551615}"#,
        r#"{"type":"trailer","outcome":"complete","counts":{"span_start":5,"span_end":5,"op":0,"tensor":0,"memory":0,"device_memory":0,"gradient":0,"step":2,"marker":0,"counter":0},"dropped":0,"ts":510}"#,
    ]);
    let p = step_phases(&t);
    assert_eq!(p[0].forward_ns, u64::MAX - 10);
    assert_eq!(p[0].backward_ns, 130);
    assert_eq!(p[0].in_phases_ns(), u64::MAX);
    assert_eq!(p[0].other_ns, 0);
    let s = summarize(&t, &new_step_cache()).unwrap();
    let sum = s.steps.phases.expect("whole steps");
    assert_eq!(sum.forward_ns, u64::MAX);
}

#[test]
fn phases_of_real_traces_fit_in_their_steps() {
    for t in [small(), synthetic(&testkit::SynthConfig::default())] {
        let b = step_breakdown(&t);
        let ops: u64 = b.iter().map(|s| s.ops).sum();
        let whole: usize = (0..t.complete_steps().len())
            .map(|i| t.step_ops(i).len())
            .sum();
        assert_eq!(ops, whole as u64, "{}", t.source);
        let p = step_phases(&t);
        assert_eq!(p.len(), t.complete_steps().len());
        assert!(p.iter().any(|x| x.in_phases_ns() > 0), "{}", t.source);
        for (x, s) in p.iter().zip(t.complete_steps()) {
            // Properly nested spans: phases plus other are the step's wall time.
            assert_eq!(
                x.in_phases_ns() + x.other_ns,
                s.duration_ns(),
                "{}",
                t.source
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any span times, however large: no panic, and a step's phases plus other are its wall
    /// time whenever the phases fit in it (other is the remainder, 0 when they do not).
    #[test]
    fn phase_times_never_overflow(spans in proptest::collection::vec((0u64..3, any::<u64>(), any::<u64>()), 1..20)) {
        let phases = ["forward", "backward", "optimizer"];
        let mut lines = vec![r#"{"type":"step","index":0,"ts":0}"#.to_string()];
        for (i, (ph, a, b)) in spans.iter().enumerate() {
            let (start, end) = (*a.min(b), *a.max(b));
            let id = i + 1;
            lines.push(format!(r#"{{"type":"span_start","id":{id},"name":"s","kind":"function","step":"{}","thread":0,"ts":{start}}}"#, phases[*ph as usize]));
            lines.push(format!(r#"{{"type":"span_end","id":{id},"ts":{end}}}"#));
        }
        let t = from_lines(&lines);
        let p = step_phases(&t);
        for (x, s) in p.iter().zip(t.complete_steps()) {
            let dur = s.duration_ns();
            prop_assert_eq!(x.other_ns, dur - x.in_phases_ns().min(dur));
        }
    }
}
