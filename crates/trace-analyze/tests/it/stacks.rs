//! Samples per distinct sampled stack and phase: counts by phase, most samples first, frames
//! named as `tracegraph hot` names them, totals that add up, absent without a sampler.

use proptest::prelude::*;
use trace_analyze::sampled::{STACK_PHASES, stack_samples};
use trace_analyze::{LoadOptions, Trace, load_str};
use trace_record::schema::{
    Event, ExecStep, FrameEvent, Phase, SamplerEvent, SamplesEvent, StackEvent,
};
use trace_record::{Run, TraceSession};

use crate::common::small;

/// A real sampled trace: `tracegraph demo --steps 10 --sample` (trace-export's fixture).
const DEMO: &str = include_str!("../../../trace-export/tests/data/sampled-demo.jsonl");

fn load(text: &str) -> Trace {
    load_str(text, "sampled.jsonl", LoadOptions::default()).expect("load")
}

fn frame(id: u64, func: &str, file: Option<&str>) -> Event {
    Event::Frame(FrameEvent {
        id,
        func: func.into(),
        file: file.map(str::to_string),
        inlined: false,
    })
}

fn samples(stack: u64, n: u64, phase: Option<ExecStep>) -> Event {
    Event::Samples(SamplesEvent {
        step: 0,
        thread: 7,
        stack,
        n,
        phase,
        span: None,
    })
}

/// Records `events` (frames, stacks, samples) and one sampler line in a session.
fn recorded(mut events: Vec<Event>) -> Trace {
    let (session, sink) = TraceSession::in_memory(Run::new("stacks", Phase::Train, "cpu"));
    events.push(Event::Sampler(SamplerEvent {
        step: 0,
        hz: 1000,
        taken: 1,
        lost: 0,
        cpu_ns: Some(1_000_000),
        sampler_cpu_ns: None,
        ts: 0,
        dur: 1,
        source: None,
    }));
    assert_eq!(session.record_sampled(&events), events.len());
    session.finish().expect("finish");
    load(std::str::from_utf8(&sink.bytes()).expect("utf-8"))
}

#[test]
fn stacks_count_their_samples_per_phase_most_first() {
    let t = recorded(vec![
        frame(1, "main", Some("src/main.rs")),
        frame(2, "gemm_common::gemm::gemm_basic_generic<f32>", None),
        frame(3, "malloc", None),
        Event::Stack(StackEvent {
            id: 1,
            frames: vec![1, 2],
        }),
        Event::Stack(StackEvent {
            id: 2,
            frames: vec![1, 3],
        }),
        samples(2, 3, Some(ExecStep::Backward)),
        samples(1, 6, Some(ExecStep::Backward)),
        samples(1, 2, Some(ExecStep::Forward)),
        samples(2, 1, None),
        // A stack the trace never defined: no frames, samples still counted.
        samples(9, 1, Some(ExecStep::Optimizer)),
    ]);
    let r = stack_samples(&t).expect("sampled");
    assert_eq!(r.total, 13);
    assert_eq!(r.by_phase, [2, 9, 1, 1]);
    assert_eq!(STACK_PHASES[3], None);
    let ids: Vec<u64> = r.stacks.iter().map(|s| s.stack).collect();
    assert_eq!(ids, [1, 2, 9]);
    assert_eq!(r.stacks[0].by_phase, [2, 6, 0, 0]);
    assert_eq!(r.stacks[1].by_phase, [0, 3, 0, 1]);
    assert_eq!(r.stacks[1].total(), 4);
    assert!(r.stacks[2].frames.is_empty());
    let funcs: Vec<&str> = r.stacks[1].frames.iter().map(|f| f.func).collect();
    assert_eq!(funcs, ["main", "malloc"]);
    assert_eq!(r.stacks[0].frames[0].name, "main (src/main.rs)");
}

#[test]
fn equal_counts_are_ordered_by_stack_id_and_huge_counts_saturate() {
    let t = recorded(vec![
        frame(1, "a", None),
        Event::Stack(StackEvent {
            id: 5,
            frames: vec![1],
        }),
        Event::Stack(StackEvent {
            id: 4,
            frames: vec![1],
        }),
        samples(5, u64::MAX, Some(ExecStep::Forward)),
        samples(5, 10, Some(ExecStep::Forward)),
        samples(4, u64::MAX, Some(ExecStep::Forward)),
    ]);
    let r = stack_samples(&t).expect("sampled");
    assert_eq!(r.stacks[0].stack, 4);
    assert_eq!(r.stacks[1].by_phase[0], u64::MAX);
    assert_eq!(r.total, u64::MAX);
}

#[test]
fn the_demo_trace_adds_up_and_a_trace_without_a_sampler_has_none() {
    let t = load(DEMO);
    let r = stack_samples(&t).expect("the demo samples");
    let rows: u64 = t.sampled.samples.iter().map(|s| s.n).sum();
    assert_eq!(r.total, rows);
    assert_eq!(r.by_phase.iter().sum::<u64>(), rows);
    assert!(r.by_phase[1] > 0, "backward samples in the demo");
    assert!(r.stacks.windows(2).all(|w| w[0].total() >= w[1].total()));
    assert!(r.stacks.iter().any(|s| !s.frames.is_empty()));
    assert!(stack_samples(&small()).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Whatever the sample rows, the per-stack counts add up to the rows, per phase.
    #[test]
    fn per_stack_counts_add_up_to_the_rows(rows in proptest::collection::vec((1u64..4, 1u64..100, 0usize..4), 1..40)) {
        let mut events = vec![frame(1, "f", None)];
        for id in 1..4 {
            events.push(Event::Stack(StackEvent { id, frames: vec![1] }));
        }
        let mut want = [0u64; 4];
        for (stack, n, p) in &rows {
            events.push(samples(*stack, *n, STACK_PHASES[*p]));
            want[*p] += n;
        }
        let t = recorded(events);
        let r = stack_samples(&t).expect("sampled");
        prop_assert_eq!(r.by_phase, want);
        let mut per_phase = [0u64; 4];
        for s in &r.stacks {
            for (a, b) in per_phase.iter_mut().zip(s.by_phase) {
                *a += b;
            }
        }
        prop_assert_eq!(per_phase, want);
    }
}
