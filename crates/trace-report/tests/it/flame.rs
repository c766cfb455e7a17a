//! The report's sampled flame graph: stacks with sample counts per phase in the view model.
//!
//! Estimates are labelled, caps stated, and the section is absent without a sampler.

use std::collections::HashSet;

use testkit::session_trace;
use trace_analyze::{LoadOptions, Trace, load_str};
use trace_record::schema::{
    Event, ExecStep, FrameEvent, Phase, SamplerEvent, SamplesEvent, SpanKind, StackEvent,
};
use trace_record::{Run, TraceSession};
use trace_report::{FlameData, ReportOptions, build_report, write_html};

/// A real sampled trace: `tracegraph demo --steps 10 --sample` (trace-export's fixture).
const DEMO: &str = include_str!("../../../trace-export/tests/data/sampled-demo.jsonl");

fn load(text: &str) -> Trace {
    load_str(text, "sampled.jsonl", LoadOptions::default()).expect("load")
}

fn flame(trace: &Trace) -> FlameData {
    build_report(trace, None, &ReportOptions::default())
        .expect("report")
        .flame
        .expect("a flame graph for a sampled trace")
}

fn frame(id: u64, func: &str, file: Option<&str>) -> Event {
    Event::Frame(FrameEvent {
        id,
        func: func.into(),
        file: file.map(str::to_string),
        inlined: false,
    })
}

fn samples(stack: u64, n: u64, phase: Option<ExecStep>, span: Option<u64>) -> Event {
    Event::Samples(SamplesEvent {
        step: 0,
        thread: 7,
        stack,
        n,
        phase,
        span,
    })
}

/// One step with a backward span; stacks `main → backward → gemm` (forward and backward
/// samples), `main → backward → malloc` (backward) and one sample without a phase.
fn sampled_trace(extra_stacks: u64) -> Trace {
    let (session, sink) = TraceSession::in_memory(Run::new("flame", Phase::Train, "cpu"));
    let span = {
        let g = session.span("backward", SpanKind::Function, Some(ExecStep::Backward));
        g.id().map(|s| s.0)
    };
    let mut events = vec![
        frame(1, "main", Some("src/main.rs")),
        frame(
            2,
            "candle_core::backprop::<impl candle_core::tensor::Tensor>::backward",
            None,
        ),
        frame(3, "gemm_common::gemm::gemm_basic_generic<f32>", None),
        frame(4, "malloc", None),
        Event::Stack(StackEvent {
            id: 1,
            frames: vec![1, 2, 3],
        }),
        Event::Stack(StackEvent {
            id: 2,
            frames: vec![1, 2, 4],
        }),
        samples(1, 6, Some(ExecStep::Backward), span),
        samples(1, 2, Some(ExecStep::Forward), None),
        samples(2, 3, Some(ExecStep::Backward), span),
        samples(2, 1, None, None),
    ];
    let mut taken = 12;
    for i in 0..extra_stacks {
        let (f, st) = (100 + i, 100 + i);
        events.push(frame(f, &format!("other::f{i}"), None));
        events.push(Event::Stack(StackEvent {
            id: st,
            frames: vec![1, f],
        }));
        events.push(samples(st, 1, None, None));
        taken += 1;
    }
    events.push(Event::Sampler(SamplerEvent {
        step: 0,
        hz: 1000,
        taken,
        lost: 1,
        // Half of the process's CPU time the sampler's own threads': 1 ms a sample is left.
        cpu_ns: Some(taken * 2_000_000),
        sampler_cpu_ns: Some(taken * 1_000_000),
        ts: 0,
        dur: 1,
        source: None,
    }));
    assert_eq!(session.record_sampled(&events), events.len());
    session.finish().expect("finish");
    load(std::str::from_utf8(&sink.bytes()).expect("utf-8"))
}

/// The frames of stack `i` by name.
fn names(f: &FlameData, i: usize) -> Vec<&str> {
    f.stacks[i]
        .iter()
        .map(|&n| f.names[n as usize].as_str())
        .collect()
}

#[test]
fn stacks_carry_their_samples_per_phase() {
    let f = flame(&sampled_trace(0));
    assert_eq!(f.samples, 12);
    assert_eq!(
        f.phases,
        [
            ("forward".to_string(), 2),
            ("backward".to_string(), 9),
            ("optimizer".to_string(), 0),
            ("unknown".to_string(), 1)
        ]
    );
    // Stacks by samples, most first; counts per phase in the order of `phases`.
    assert_eq!(f.stacks.len(), 2);
    assert_eq!(
        names(&f, 0),
        [
            "main (src/main.rs)",
            "candle_core::backprop::<impl candle_core::tensor::Tensor>::backward",
            "gemm_common::gemm::gemm_basic_generic<f32>"
        ]
    );
    assert_eq!(f.counts[0], [2, 6, 0, 0]);
    assert_eq!(f.counts[1], [0, 3, 0, 1]);
    assert_eq!(names(&f, 1)[2], "malloc");
    let total: u64 = f.counts.iter().flatten().sum();
    assert_eq!(total, f.samples);
    // Colours are `tracegraph hot`'s crate groups; labels elide generic arguments.
    let group = |name: &str| f.groups[f.names.iter().position(|n| n == name).expect(name)];
    assert_eq!(group("malloc"), "allocator");
    assert_eq!(group("gemm_common::gemm::gemm_basic_generic<f32>"), "gemm");
    assert_eq!(
        group("candle_core::backprop::<impl candle_core::tensor::Tensor>::backward"),
        "candle_core"
    );
    assert!(
        f.labels
            .iter()
            .any(|l| l == "gemm_common::gemm::gemm_basic_generic<…>")
    );
    // Estimates are labelled as such, with the sampler's account: a sample stands for the
    // sampled threads' CPU time, the sampler's own threads' being shown apart.
    assert_eq!(f.ns_per_sample, Some(1_000_000.0));
    assert!(f.note.contains("estimates") && f.note.contains("not measured durations"));
    let summary: Vec<&str> = f.summary.iter().map(|(k, _)| k.as_str()).collect();
    assert!(summary.contains(&"samples lost") && summary.contains(&"one sample ≈"));
    assert!(f.summary.iter().any(|(_, v)| v.contains("an estimate")));
    let own = f
        .summary
        .iter()
        .find(|(k, _)| k == "the sampler's own threads");
    assert!(
        own.is_some_and(|(_, v)| v.contains("50.0%")),
        "{:?}",
        f.summary
    );
    let rate = f.summary.iter().find(|(k, _)| k == "rate");
    assert!(
        rate.is_some_and(|(_, v)| v.contains("achieved 1000 Hz of the sampled threads")),
        "{:?}",
        f.summary
    );
}

#[test]
fn the_page_embeds_and_draws_the_flame_graph() {
    let data = build_report(&sampled_trace(0), None, &ReportOptions::default()).expect("report");
    let mut out = Vec::new();
    write_html(&data, &mut out).expect("write");
    let html = String::from_utf8(out).expect("utf-8");
    assert!(html.contains(r##"<a href="#flame-section">"##));
    assert!(html.contains(r#"<div id="flame"></div>"#));
    assert!(html.contains("function renderFlame()"));
    assert!(html.contains(r#""flame":{"summary""#));
}

#[test]
fn the_demo_breaks_backward_down() {
    let trace = load(DEMO);
    let f = flame(&trace);
    let taken: u64 = trace.sampled.steps.iter().map(|s| s.taken).sum();
    assert_eq!(f.samples, taken);
    assert_eq!(f.counts.iter().flatten().sum::<u64>(), taken);
    // Backward's samples end in at least three distinct functions.
    let leaves: HashSet<&str> = f
        .stacks
        .iter()
        .zip(&f.counts)
        .filter(|(_, c)| c[1] > 0)
        .filter_map(|(s, _)| s.last().map(|&n| f.names[n as usize].as_str()))
        .collect();
    assert!(leaves.len() >= 3, "{leaves:?}");
    assert!(f.phases[1].1 > 0);
}

#[test]
fn many_stacks_are_capped_and_every_sample_stays_counted() {
    let trace = sampled_trace(4100);
    let data = build_report(&trace, None, &ReportOptions::default()).expect("report");
    let f = data.flame.expect("flame");
    assert_eq!(f.stacks.len(), 4001);
    assert_eq!(f.counts.iter().flatten().sum::<u64>(), f.samples);
    assert_eq!(f.samples, 12 + 4100);
    let last = f.stacks.last().expect("the cut stacks");
    assert_eq!(f.names[last[0] as usize], "[102 stacks cut for size]");
    assert!(data.caps.iter().any(|c| c.contains("sampled flame graph")));
}

#[test]
fn a_trace_without_samples_has_no_flame_graph() {
    let text = String::from_utf8(session_trace(3)).expect("utf-8");
    let data = build_report(&load(&text), None, &ReportOptions::default()).expect("report");
    assert!(data.flame.is_none());
}

/// A stack starts at its thread's entry (the runtime's start frames cut), and a stack that
/// waits (Candle's barrier spin) ends in a `[waiting]` bar of the `waiting` colour group.
#[test]
fn stacks_start_at_the_thread_entry_and_waiting_is_drawn_apart() {
    let (session, sink) = TraceSession::in_memory(Run::new("flame", Phase::Train, "cpu"));
    let events = vec![
        frame(1, "_start", None),
        frame(
            2,
            "__libc_start_main_impl",
            Some("./csu/../csu/libc-start.c"),
        ),
        frame(3, "main", None),
        frame(
            4,
            "std::rt::lang_start_internal",
            Some("library/std/src/rt.rs"),
        ),
        frame(5, "main", Some("src/main.rs")),
        frame(6, "candle_core::tensor::Tensor::matmul", None),
        frame(7, "_mm_pause", None),
        Event::Stack(StackEvent {
            id: 1,
            frames: vec![1, 2, 3, 4, 5, 6],
        }),
        Event::Stack(StackEvent {
            id: 2,
            frames: vec![1, 2, 3, 4, 5, 6, 7],
        }),
        samples(1, 5, None, None),
        samples(2, 3, None, None),
        Event::Sampler(SamplerEvent {
            step: 0,
            hz: 1000,
            taken: 8,
            lost: 0,
            cpu_ns: Some(16_000_000),
            sampler_cpu_ns: None,
            ts: 0,
            dur: 1,
            source: None,
        }),
    ];
    assert_eq!(session.record_sampled(&events), events.len());
    session.finish().expect("finish");
    let f = flame(&load(std::str::from_utf8(&sink.bytes()).expect("utf-8")));
    assert_eq!(
        names(&f, 0),
        ["main (src/main.rs)", "candle_core::tensor::Tensor::matmul"]
    );
    let waiting = names(&f, 1);
    assert_eq!(waiting.first(), Some(&"main (src/main.rs)"), "{waiting:?}");
    assert_eq!(waiting.last(), Some(&"[waiting]"), "{waiting:?}");
    let at = f
        .names
        .iter()
        .position(|n| n == "[waiting]")
        .expect("[waiting]");
    assert_eq!(f.groups[at], "waiting");
    assert!(
        !f.names
            .iter()
            .any(|n| n.contains("lang_start") || n.starts_with("_start"))
    );
}

/// The flame section shows `tracegraph hot`'s hints (as `hot` and `summary` compute them:
/// waiting left out of the rankings) with their rule and evidence, and `hot`'s waiting count.
#[test]
fn the_flame_section_shows_hots_hints_and_waiting() {
    let trace = sampled_trace(0);
    let f = flame(&trace);
    let hot = trace_analyze::hot_report(
        &trace,
        &trace_analyze::HotOptions {
            exclude_waiting: true,
            ..trace_analyze::HotOptions::default()
        },
    );
    let want: Vec<(&str, &str, u64)> = hot
        .hints
        .iter()
        .map(|h| (h.rule, h.hint.as_str(), h.samples))
        .collect();
    let got: Vec<(&str, &str, u64)> = f
        .hints
        .iter()
        .map(|h| (h.rule, h.hint.as_str(), h.samples))
        .collect();
    assert_eq!(got, want);
    // 12 samples: too few for shares within ±5 points, as `hot` says.
    assert!(got.iter().any(|h| h.0 == "too_few_samples"), "{got:?}");
    let waiting = f
        .summary
        .iter()
        .find(|(k, _)| k == "waiting")
        .map(|(_, v)| v.as_str());
    assert!(
        waiting.is_some_and(|v| v.starts_with(&format!("{} samples", hot.waiting))),
        "{:?}",
        f.summary
    );
    // The page carries them and draws them (#flame-hints).
    let data = build_report(&trace, None, &ReportOptions::default()).expect("report");
    let mut out = Vec::new();
    write_html(&data, &mut out).expect("write");
    let html = String::from_utf8(out).expect("utf-8");
    assert!(html.contains(r#""rule":"too_few_samples""#));
    assert!(html.contains("flame-hints"));
}
