//! Tests of the hot-spot report: rows, phases, waiting, hints, on constructed and recorded traces.

use super::*;
use crate::model::samples::{crate_of, is_allocator};
use crate::sampled::hints::HINT_RULES;
use crate::sampled::names::{function_groups, group_of_crate, short_func};
use trace_record::schema::Event;

#[test]
fn crates_and_groups() {
    let model = vec!["tracegraph".to_string()];
    let check = |func: &str, krate: Option<&str>, group: CrateGroup| {
        assert_eq!(crate_of(func), krate, "{func}");
        let g = if is_allocator(func) {
            CrateGroup::Allocator
        } else {
            group_of_crate(crate_of(func), &model)
        };
        assert_eq!(g, group, "{func}");
    };
    check(
        "<candle_core::cpu_backend::MatMul as candle_core::cpu_backend::utils::Map2>::f",
        Some("candle_core"),
        CrateGroup::CandleCore,
    );
    check(
        "gemm_f32::microkernel::fma::f32::x3x4",
        Some("gemm_f32"),
        CrateGroup::Gemm,
    );
    check(
        "gemm_common::gemm::gemm_basic_generic",
        Some("gemm_common"),
        CrateGroup::Gemm,
    );
    check(
        "candle_nn::ops::softmax_last_dim",
        Some("candle_nn"),
        CrateGroup::CandleNn,
    );
    check(
        "tracegraph::demo::mlp::train",
        Some("tracegraph"),
        CrateGroup::Model,
    );
    check("malloc", None, CrateGroup::Allocator);
    check("__rust_dealloc", None, CrateGroup::Allocator);
    check("_int_free", None, CrateGroup::Allocator);
    check(
        "core::ptr::drop_in_place<alloc::vec::Vec<f32>>",
        Some("core"),
        CrateGroup::Other,
    );
    check("[unknown]", None, CrateGroup::Other);
}

/// A frame line: `func` without a source file, not inlined.
fn frame(id: u64, func: &str) -> Event {
    Event::Frame(trace_record::schema::FrameEvent {
        id,
        func: func.into(),
        file: None,
        inlined: false,
    })
}

/// A recorded session with a backward span in step 0 (its id is given to `sampled`) and
/// one in step 1, so both are steps, and the sampled lines `sampled` returns; loaded.
fn load_sampled(name: &str, sampled: impl FnOnce(Option<u64>) -> Vec<Event>) -> Trace {
    use trace_record::schema::{Phase, SpanKind};
    use trace_record::{Run, TraceSession};
    let (session, sink) = TraceSession::in_memory(Run::new(name, Phase::Train, "cpu"));
    let bw = {
        let g = session.span("backward", SpanKind::Function, Some(ExecStep::Backward));
        g.id().map(|s| s.0)
    };
    session.step();
    drop(session.span("backward", SpanKind::Function, Some(ExecStep::Backward)));
    session.record_sampled(&sampled(bw));
    session.finish().unwrap();
    let text = String::from_utf8(sink.bytes()).unwrap();
    crate::load_str(&text, &format!("{name}.jsonl"), Default::default()).unwrap()
}

/// A trace with two recorded steps of samples: backward in gemm and candle's backprop,
/// forward in the model's code, one allocator sample.
fn sampled_trace() -> Trace {
    use trace_record::schema::{SamplerEvent, SamplesEvent, StackEvent};
    load_sampled("hot", |bw| {
        let stack = |id: u64, frames: &[u64]| {
            Event::Stack(StackEvent {
                id,
                frames: frames.to_vec(),
            })
        };
        let samples = |step, stack, n, phase, span| {
            Event::Samples(SamplesEvent {
                step,
                thread: 1,
                stack,
                n,
                phase,
                span,
            })
        };
        let sampler = |step, taken| {
            Event::Sampler(SamplerEvent {
                step,
                hz: 1000,
                taken,
                lost: 1,
                cpu_ns: Some(taken * 2_000_000),
                sampler_cpu_ns: None,
                ts: 0,
                dur: 1,
                source: None,
            })
        };
        let bwd = Some(ExecStep::Backward);
        vec![
            frame(1, "tracegraph::main"),
            frame(
                2,
                "candle_core::backprop::<impl candle_core::tensor::Tensor>::backward",
            ),
            frame(3, "gemm_f32::microkernel::x3x4"),
            frame(4, "core::ptr::copy_nonoverlapping<f32>"),
            frame(5, "tracegraph::demo::Mlp::forward"),
            frame(6, "malloc"),
            stack(1, &[1, 2, 3]),
            stack(2, &[1, 2, 4]),
            stack(3, &[1, 5]),
            stack(4, &[1, 5, 6]),
            samples(0, 1, 6, bwd, bw),
            samples(0, 2, 2, bwd, bw),
            samples(0, 3, 1, Some(ExecStep::Forward), None),
            sampler(0, 9),
            // Step 1: no phase from the capture; the stack shows backprop.
            samples(1, 1, 3, None, None),
            samples(1, 4, 1, None, None),
            sampler(1, 4),
        ]
    })
}

#[test]
fn the_rate_and_a_sample_s_time_leave_out_the_sampler_s_own_threads() {
    use trace_record::schema::SamplerEvent;
    let account = |own: [Option<u64>; 2]| {
        let t = load_sampled("own", |_| {
            (0..2)
                .map(|step| {
                    Event::Sampler(SamplerEvent {
                        step,
                        hz: 1000,
                        taken: 0,
                        lost: 0,
                        cpu_ns: Some(20_000_000),
                        sampler_cpu_ns: own[step as usize],
                        ts: 0,
                        dur: 1,
                        source: None,
                    })
                })
                .collect()
        });
        sampler_totals(&t)
    };
    // No samples: the rate is 0 and a sample stands for the requested period.
    let a = account([Some(5_000_000), Some(15_000_000)]);
    assert_eq!(a.sampler_cpu_ns, Some(20_000_000));
    assert_eq!(a.effective_hz, Some(0.0));
    assert_eq!(a.ns_per_sample(), Some(1_000_000.0));
    let with_samples = |own: [Option<u64>; 2], taken: u64| {
        let t = load_sampled("own", |_| {
            use trace_record::schema::{SamplesEvent, StackEvent};
            let mut ev = vec![
                frame(1, "tracegraph::main"),
                Event::Stack(StackEvent {
                    id: 1,
                    frames: vec![1],
                }),
            ];
            for step in 0..2u64 {
                ev.push(Event::Samples(SamplesEvent {
                    step,
                    thread: 1,
                    stack: 1,
                    n: taken,
                    phase: None,
                    span: None,
                }));
                ev.push(Event::Sampler(SamplerEvent {
                    step,
                    hz: 1000,
                    taken,
                    lost: 0,
                    cpu_ns: Some(20_000_000),
                    sampler_cpu_ns: own[step as usize],
                    ts: 0,
                    dur: 1,
                    source: None,
                }));
            }
            ev
        });
        sampler_totals(&t)
    };
    // 40 ms of process CPU, 20 of them the sampler's own: 20 samples stand for 20 ms.
    let a = with_samples([Some(5_000_000), Some(15_000_000)], 10);
    assert_eq!((a.taken, a.cpu_ns), (20, Some(40_000_000)));
    assert_eq!(a.effective_hz, Some(1000.0));
    assert_eq!(a.ns_per_sample(), Some(1_000_000.0));
    // A step that does not say counts its whole CPU time (as traces before the field).
    let a = with_samples([Some(20_000_000), None], 10);
    assert_eq!(a.sampler_cpu_ns, None);
    assert_eq!(a.effective_hz, Some(1000.0));
    // More than the whole is clamped to it.
    let a = with_samples([Some(30_000_000), Some(0)], 10);
    assert_eq!(a.effective_hz, Some(1000.0));
    // None said: the process's CPU time, as before.
    let a = with_samples([None, None], 10);
    assert_eq!(a.effective_hz, Some(500.0));
    assert_eq!(a.ns_per_sample(), Some(2_000_000.0));
}

#[test]
fn hot_report_counts_self_total_groups_phases_and_spans() {
    let t = sampled_trace();
    assert!(t.issues.is_empty(), "{:?}", t.issues);
    let r = hot_report(&t, &HotOptions::default());
    assert_eq!(r.samples, 13);
    assert_eq!(r.model_crates, ["tracegraph", "candle_transformers"]);
    assert_eq!(
        (r.sampler.taken, r.sampler.lost, r.sampler.steps),
        (13, 2, 2)
    );
    assert_eq!(r.sampler.effective_hz, Some(500.0));
    let row = |rows: &[HotRow], name: &str| rows.iter().find(|x| x.name == name).cloned().unwrap();
    let g = row(&r.rows, "gemm_f32::microkernel::x3x4");
    assert_eq!(
        (g.self_samples, g.total_samples, g.group),
        (9, 9, Some(CrateGroup::Gemm))
    );
    // 2 ms of CPU per sample (measured CPU time over samples taken): an estimate.
    assert_eq!(g.self_est_ns, Some(18_000_000));
    let main = row(&r.rows, "tracegraph::main");
    assert_eq!((main.self_samples, main.total_samples), (0, 13));
    assert_eq!(r.rows[0].name, "gemm_f32::microkernel::x3x4");
    // Groups: core's copy inlined into backprop counts as candle_core.
    let by = hot_report(
        &t,
        &HotOptions {
            by: HotBy::Crate,
            ..HotOptions::default()
        },
    );
    assert_eq!(row(&by.rows, "gemm").self_samples, 9);
    assert_eq!(row(&by.rows, "candle_core").self_samples, 2);
    assert_eq!(row(&by.rows, "candle_core").total_samples, 11);
    assert_eq!(row(&by.rows, "model").self_samples, 1);
    assert_eq!(row(&by.rows, "allocator").self_samples, 1);
    // Phases: step 1's backprop stacks are backward from their frames.
    let ph = hot_report(
        &t,
        &HotOptions {
            by: HotBy::Phase,
            ..HotOptions::default()
        },
    );
    assert_eq!(row(&ph.rows, "backward").self_samples, 11);
    assert_eq!(row(&ph.rows, "unknown").self_samples, 1);
    assert_eq!(ph.phases[0].phase, "forward");
    assert_eq!(ph.phases[1].phase, "backward");
    let kernels: Vec<&str> = ph.phases[1].top.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(
        kernels,
        [
            "gemm_f32::microkernel::x3x4",
            "candle_core::backprop::<impl candle_core::tensor::Tensor>::backward"
        ]
    );
    // Spans: the phase span named by the capture.
    let sp = hot_report(
        &t,
        &HotOptions {
            by: HotBy::Span,
            ..HotOptions::default()
        },
    );
    assert_eq!(row(&sp.rows, "backward").self_samples, 8);
    assert_eq!(row(&sp.rows, "(no span)").self_samples, 5);
    // Step range and phase filters.
    let s1 = hot_report(
        &t,
        &HotOptions {
            steps: Some((1, 1)),
            ..HotOptions::default()
        },
    );
    assert_eq!((s1.samples, s1.sampler.steps, s1.sampler.taken), (4, 1, 4));
    let fwd = hot_report(
        &t,
        &HotOptions {
            phase: Some(ExecStep::Forward),
            ..HotOptions::default()
        },
    );
    assert_eq!(fwd.samples, 1);
    assert_eq!(
        backward_kernels(&t, 1)[0].name,
        "gemm_f32::microkernel::x3x4"
    );
    // The summary names them.
    let cache = crate::new_step_cache();
    let summary = crate::summarize(&t, &cache).unwrap();
    assert_eq!(summary.backward_kernels.len(), 2);
}

/// Backward: 6 samples of gemm work and 4 of the caller spinning at Candle's barrier, in
/// the backward span; 2 of a parked pool worker, in no span.
fn waiting_trace() -> Trace {
    use trace_record::schema::{SamplerEvent, SamplesEvent, StackEvent};
    load_sampled("wait", |bw| {
        let samples = |thread, stack, n, span| {
            Event::Samples(SamplesEvent {
                step: 0,
                thread,
                stack,
                n,
                phase: Some(ExecStep::Backward),
                span,
            })
        };
        vec![
            frame(1, "tracegraph::main"),
            frame(2, "candle_core::utils::BarrierPool::execute"),
            frame(3, "gemm_f32::microkernel::x3x4"),
            frame(
                4,
                "<candle_core::utils::BarrierGuard as core::ops::drop::Drop>::drop",
            ),
            frame(5, "core::hint::spin_loop"),
            frame(6, "rayon_core::registry::WorkerThread::wait_until_cold"),
            frame(7, "std::thread::park"),
            Event::Stack(StackEvent {
                id: 1,
                frames: vec![1, 2, 3],
            }),
            Event::Stack(StackEvent {
                id: 2,
                frames: vec![1, 2, 4, 5],
            }),
            Event::Stack(StackEvent {
                id: 3,
                frames: vec![6, 7],
            }),
            samples(1, 1, 6, bw),
            samples(1, 2, 4, bw),
            samples(2, 3, 2, None),
            Event::Sampler(SamplerEvent {
                step: 0,
                hz: 1000,
                taken: 12,
                lost: 0,
                cpu_ns: Some(12_000_000),
                sampler_cpu_ns: None,
                ts: 0,
                dur: 1,
                source: None,
            }),
        ]
    })
}

#[test]
fn waiting_is_counted_apart_and_left_out_of_function_rankings_when_asked() {
    let t = waiting_trace();
    assert!(t.issues.is_empty(), "{:?}", t.issues);
    let find = |rows: &[HotRow], name: &str| rows.iter().find(|r| r.name == name).cloned();
    let opts = |by, exclude_waiting| HotOptions {
        by,
        exclude_waiting,
        ..HotOptions::default()
    };
    // Kept: the spin is a function row, its samples marked waiting.
    let kept = hot_report(&t, &opts(HotBy::Function, false));
    assert_eq!(
        (kept.samples, kept.waiting, kept.waiting_excluded),
        (12, 6, false)
    );
    let spin = find(&kept.rows, "core::hint::spin_loop").unwrap();
    assert_eq!((spin.self_samples, spin.waiting_samples), (4, 4));
    assert_eq!(
        find(&kept.rows, "std::thread::park").unwrap().self_samples,
        2
    );
    // Left out: no waiting function, group or phase row; shares keep every sample.
    let out = hot_report(&t, &opts(HotBy::Function, true));
    assert_eq!(
        (out.samples, out.waiting, out.waiting_excluded),
        (12, 6, true)
    );
    let names: Vec<&str> = out.rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "gemm_f32::microkernel::x3x4",
            "candle_core::utils::BarrierPool::execute",
            "tracegraph::main"
        ]
    );
    assert_eq!(out.rows[0].self_share, 0.5);
    assert!(out.rows.iter().all(|r| r.waiting_samples == 0));
    let groups: u64 = out.groups.iter().map(|g| g.self_samples).sum();
    assert_eq!(groups, 6);
    let bw = &out.phases[0];
    assert_eq!(
        (bw.phase.as_str(), bw.samples, bw.waiting),
        ("backward", 12, 6)
    );
    assert_eq!(bw.top.len(), 1);
    assert_eq!(bw.top[0].name, "gemm_f32::microkernel::x3x4");
    // Spans and phases keep their waiting as part of their rows.
    let spans = hot_report(&t, &opts(HotBy::Span, true));
    let b = find(&spans.rows, "backward").unwrap();
    assert_eq!((b.self_samples, b.waiting_samples), (10, 4));
    let none = find(&spans.rows, "(no span)").unwrap();
    assert_eq!((none.self_samples, none.waiting_samples), (2, 2));
    let phases = hot_report(&t, &opts(HotBy::Phase, true));
    let b = find(&phases.rows, "backward").unwrap();
    assert_eq!((b.self_samples, b.waiting_samples), (12, 6));
    // The summary's backward kernels are work only.
    let kernels: Vec<String> = backward_kernels(&t, 5)
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(kernels, ["gemm_f32::microkernel::x3x4"]);
    // JSON carries the counts.
    let v = serde_json::to_value(&out).unwrap();
    assert_eq!(v["waiting"], 6);
    assert_eq!(v["phases"][0]["waiting"], 6);
    assert_eq!(v["rows"][0]["waiting_samples"], 0);
}

/// A trace of one recorded step at 1 kHz (1 ms of CPU per sample) with `stacks`: the
/// functions of each (outermost first) and its sample count.
fn trace_of(stacks: &[(&[&str], u64)]) -> Trace {
    use trace_record::schema::{FrameEvent, Phase, SamplerEvent, SamplesEvent, StackEvent};
    use trace_record::{Run, TraceSession};
    let (session, sink) = TraceSession::in_memory(Run::new("hints", Phase::Infer, "cpu"));
    let mut events = Vec::new();
    let mut ids: Vec<&str> = Vec::new();
    for (i, (funcs, n)) in stacks.iter().enumerate() {
        let mut frames = Vec::new();
        for f in *funcs {
            let id = if let Some(p) = ids.iter().position(|x| x == f) {
                p
            } else {
                ids.push(f);
                events.push(Event::Frame(FrameEvent {
                    id: ids.len() as u64 - 1,
                    func: (*f).into(),
                    file: None,
                    inlined: false,
                }));
                ids.len() - 1
            };
            frames.push(id as u64);
        }
        events.push(Event::Stack(StackEvent {
            id: i as u64,
            frames,
        }));
        events.push(Event::Samples(SamplesEvent {
            step: 0,
            thread: 1,
            stack: i as u64,
            n: *n,
            phase: None,
            span: None,
        }));
    }
    let taken: u64 = stacks.iter().map(|s| s.1).sum();
    events.push(Event::Sampler(SamplerEvent {
        step: 0,
        hz: 1000,
        taken,
        lost: 0,
        cpu_ns: Some(taken * 1_000_000),
        sampler_cpu_ns: None,
        ts: 0,
        dur: 1,
        source: None,
    }));
    session.record_sampled(&events);
    session.finish().unwrap();
    let text = String::from_utf8(sink.bytes()).unwrap();
    crate::load_str(&text, "hints.jsonl", Default::default()).unwrap()
}

fn rules(r: &HotReport) -> Vec<(&'static str, u64)> {
    r.hints.iter().map(|h| (h.rule, h.samples)).collect()
}

#[test]
fn known_costs_are_named_with_their_evidence() {
    let proc_read: &[&str] = &[
        "my::main",
        "candle_core::tensor::Tensor::matmul",
        "candle_core::utils::get_num_threads",
        "candle_core::utils::default_num_threads",
        "num_cpus::linux::get_num_physical_cpus",
        "std::fs::read_to_string",
        "read",
    ];
    // With RAYON_NUM_THREADS set, the lookup reads the variable only.
    let env_only: &[&str] = &[
        "my::main",
        "candle_core::utils::get_num_threads",
        "std::env::var",
        "getenv",
    ];
    let gemm: &[&str] = &["my::main", "gemm_f32::microkernel::x3x4"];
    let malloc: &[&str] = &["my::main", "alloc::raw_vec::RawVec::allocate", "malloc"];
    let munmap: &[&str] = &["my::main", "free", "__GI___munmap"];
    let spin: &[&str] = &["my::main", "core::hint::spin_loop"];
    let r = hot_report(
        &trace_of(&[
            (proc_read, 300),
            (env_only, 50),
            (gemm, 500),
            (malloc, 60),
            (munmap, 40),
        ]),
        &HotOptions::default(),
    );
    assert_eq!(r.samples, 950);
    assert_eq!(rules(&r), [("proc_read_per_op", 300), ("allocator", 100)]);
    let h = &r.hints[0];
    assert!((h.share - 300.0 / 950.0).abs() < 1e-12);
    assert!(
        h.hint.starts_with("31.6% of samples re-read /proc"),
        "{}",
        h.hint
    );
    assert!(h.hint.contains("RAYON_NUM_THREADS"), "{}", h.hint);
    assert!(
        r.hints[1]
            .hint
            .starts_with("10.5% of samples are in the allocator")
    );
    // Below the thresholds: no hint; waiting above its own.
    let r = hot_report(
        &trace_of(&[(proc_read, 1), (gemm, 500), (malloc, 10), (spin, 200)]),
        &HotOptions::default(),
    );
    assert_eq!(rules(&r), [("pool_waiting", 200)]);
    assert!(
        r.hints[0]
            .hint
            .starts_with("28.1% of samples are thread pools waiting")
    );
    // Every hint's rule is documented.
    assert!(
        r.hints
            .iter()
            .all(|h| HINT_RULES.iter().any(|(name, _)| *name == h.rule))
    );
    assert!(is_allocator_frame("mmap64") && is_allocator_frame("__madvise"));
    assert!(!is_allocator_frame("mmap_reader::open") && !is_allocator_frame("brkfoo"));
}

#[test]
fn a_run_too_short_for_its_rate_says_how_many_samples_it_needed() {
    let gemm: &[&str] = &["my::main", "gemm_f32::microkernel::x3x4"];
    let r = hot_report(&trace_of(&[(gemm, 100)]), &HotOptions::default());
    assert_eq!(rules(&r), [("too_few_samples", 100)]);
    // 1 kHz achieved: 285 more samples are 285 ms of CPU.
    assert_eq!(
        r.hints[0].hint,
        "100 samples: shares are within ±10 points (95%); 385 are needed for ±5 points, \
         285 more, about 285.000 ms of CPU at the achieved 1000 Hz: record more steps or \
         raise the rate"
    );
    let r = hot_report(&trace_of(&[(gemm, 385)]), &HotOptions::default());
    assert!(r.hints.is_empty(), "{:?}", r.hints);
    // A recorded step without samples: the requested rate.
    let r = hot_report(&trace_of(&[]), &HotOptions::default());
    assert_eq!(rules(&r), [("too_few_samples", 0)]);
    assert!(
        r.hints[0]
            .hint
            .starts_with("0 samples: no share can be told; 385 are needed")
    );
    assert!(
        r.hints[0].hint.contains("at the requested 1000 Hz"),
        "{}",
        r.hints[0].hint
    );
    // No sampler at all: nothing to say.
    let (session, sink) = trace_record::TraceSession::in_memory(trace_record::Run::new(
        "none",
        trace_record::schema::Phase::Infer,
        "cpu",
    ));
    session.finish().unwrap();
    let t = crate::load_str(
        &String::from_utf8(sink.bytes()).unwrap(),
        "none.jsonl",
        Default::default(),
    )
    .unwrap();
    assert!(hot_report(&t, &HotOptions::default()).hints.is_empty());
}

#[test]
fn a_trace_without_samples_has_an_empty_report() {
    let (session, sink) = trace_record::TraceSession::in_memory(trace_record::Run::new(
        "none",
        trace_record::schema::Phase::Infer,
        "cpu",
    ));
    session.finish().unwrap();
    let text = String::from_utf8(sink.bytes()).unwrap();
    let t = crate::load_str(&text, "none.jsonl", Default::default()).unwrap();
    let r = hot_report(&t, &HotOptions::default());
    assert_eq!((r.samples, r.rows.len(), r.sampler.steps), (0, 0, 0));
    assert_eq!(r.sampler.cpu_ns, None);
    assert!(backward_kernels(&t, 3).is_empty());
}

#[test]
fn groupings_parse_from_their_json_names_and_list_them_when_unknown() {
    for name in HotBy::NAMES {
        let by: HotBy = name.parse().unwrap();
        assert_eq!(serde_json::to_value(by).unwrap(), *name);
    }
    assert_eq!("span".parse::<HotBy>(), Ok(HotBy::Span));
    assert_eq!("op".parse::<HotBy>(), Ok(HotBy::Op));
    assert_eq!(
        "thread".parse::<HotBy>().unwrap_err().to_string(),
        "unknown grouping `thread` (expected one of: function, crate, phase, span, span-name, op)"
    );
}

#[test]
fn short_names_elide_generic_arguments() {
    assert_eq!(
        short_func("core::ptr::drop_in_place<alloc::vec::Vec<f32>>", 80),
        "core::ptr::drop_in_place<…>"
    );
    assert_eq!(
        short_func(
            "candle_core::backprop::<impl candle_core::tensor::Tensor>::backward",
            80
        ),
        "candle_core::backprop::<impl candle_core::tensor::Tensor>::backward"
    );
    assert_eq!(
        short_func("<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop", 80),
        "<alloc::vec::Vec<…> as core::ops::drop::Drop>::drop"
    );
    assert_eq!(short_func("abcdefghij", 5), "…ghij");
}

/// A trace of `lines` (each a JSON event) after a version 2 header with one span in step 0
/// and a step boundary to step 1 with a span in it.
fn trace_of_lines(lines: &[&str]) -> Trace {
    let mut text = String::from(
        r#"{"type":"header","schema":"tracegraph-trace","version":2,"run":{"run_id":"t","entrypoint":"test","phase":"train","device":"cpu","timing":"host","start_unix_ns":0,"pid":7}}"#,
    );
    text.push('\n');
    for l in [
        r#"{"type":"span_start","id":1,"name":"forward","kind":"function","step":"forward","thread":1,"ts":1}"#,
        r#"{"type":"span_end","id":1,"ts":2}"#,
        r#"{"type":"frame","id":1,"func":"main"}"#,
        r#"{"type":"stack","id":1,"frames":[1]}"#,
    ]
    .iter()
    .chain(lines)
    {
        text.push_str(l);
        text.push('\n');
    }
    crate::load_str(&text, "t.jsonl", Default::default()).unwrap()
}

#[test]
fn sample_sums_stop_at_u64_max_and_say_so() {
    let t = trace_of_lines(&[
        r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":9223372036854775808,"span":1}"#,
        r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":9223372036854775808,"span":1}"#,
        r#"{"type":"sampler","step":0,"hz":1000,"taken":3,"lost":18446744073709551615,"ts":0,"dur":5}"#,
        r#"{"type":"sampler","step":0,"hz":1000,"taken":3,"lost":5,"ts":0,"dur":5}"#,
    ]);
    for by in [HotBy::Function, HotBy::Span, HotBy::Phase, HotBy::Crate] {
        let r = hot_report(
            &t,
            &HotOptions {
                by,
                ..Default::default()
            },
        );
        // 2^63 + 2^63 wrapped to 0 before; now it stops at the top, flagged.
        assert_eq!(r.samples, u64::MAX, "{by:?}");
        assert!(r.saturated, "{by:?}");
        assert!(r.sampler.saturated && r.sampler.lost == u64::MAX, "{by:?}");
        assert!(r.rows.iter().all(|row| row.self_samples <= r.samples));
    }
    let fine = trace_of_lines(&[
        r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":4,"span":1}"#,
        r#"{"type":"sampler","step":0,"hz":1000,"taken":4,"lost":0,"ts":0,"dur":5}"#,
    ]);
    let r = hot_report(&fine, &HotOptions::default());
    assert!(!r.saturated && !r.sampler.saturated);
    assert_eq!(r.samples, 4);
}

#[test]
fn the_empty_boundary_after_the_last_step_is_no_sampled_step() {
    // Steps 0 and 1 hold work; the boundary to step 2 (a loop's last `step()`) holds only
    // the sampler's empty account, as a real run writes it.
    let t = trace_of_lines(&[
        r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":2,"span":1}"#,
        r#"{"type":"sampler","step":0,"hz":1000,"taken":2,"lost":0,"ts":0,"dur":5}"#,
        r#"{"type":"step","index":1,"ts":3}"#,
        r#"{"type":"span_start","id":2,"name":"forward","kind":"function","step":"forward","thread":1,"ts":4}"#,
        r#"{"type":"span_end","id":2,"ts":5}"#,
        r#"{"type":"samples","step":1,"thread":1,"stack":1,"n":3,"span":2}"#,
        r#"{"type":"sampler","step":1,"hz":1000,"taken":3,"lost":0,"ts":3,"dur":5}"#,
        r#"{"type":"step","index":2,"ts":9}"#,
        r#"{"type":"samples","step":2,"thread":1,"stack":1,"n":1,"span":2}"#,
        r#"{"type":"sampler","step":2,"hz":1000,"taken":1,"lost":0,"ts":9,"dur":1}"#,
    ]);
    assert_eq!(t.steps.len(), 2);
    // Left out once, at load, for every analysis.
    assert_eq!(t.sampled.outside_steps, 1);
    let flame = crate::sampled::stack_samples(&t).expect("samples");
    assert_eq!(flame.total, 5, "the flame graph counts the same samples");
    let r = hot_report(&t, &HotOptions::default());
    assert_eq!(r.sampler.steps, 2, "steps 0 and 1, not the boundary");
    assert_eq!(r.sampler.step_range, Some((0, 1)));
    assert_eq!(r.samples, 5);
}

#[test]
fn frames_of_one_name_make_one_row_and_the_flame_graph_gets_its_group() {
    // Frames 2 and 3 share a name (one function, two files of a qualified name); frame 4
    // is the allocator.
    let t = trace_of_lines(&[
        r#"{"type":"frame","id":2,"func":"gemm::run","file":"a.rs"}"#,
        r#"{"type":"frame","id":3,"func":"gemm::run","file":"b.rs"}"#,
        r#"{"type":"frame","id":4,"func":"malloc"}"#,
        r#"{"type":"stack","id":2,"frames":[1,2,3,4]}"#,
        r#"{"type":"stack","id":3,"frames":[1,3]}"#,
        r#"{"type":"samples","step":0,"thread":1,"stack":2,"n":2,"span":1}"#,
        r#"{"type":"samples","step":0,"thread":1,"stack":3,"n":5,"span":1}"#,
    ]);
    let r = hot_report(&t, &HotOptions::default());
    let rows: Vec<(&str, u64, u64)> = r
        .rows
        .iter()
        .map(|r| (r.name.as_str(), r.self_samples, r.total_samples))
        .collect();
    assert_eq!(
        rows,
        [("gemm::run", 5, 7), ("malloc", 2, 2), ("main", 0, 7)]
    );
    assert_eq!(name_leaders(&t.sampled), [0, 1, 1, 3]);
    let groups = function_groups(&t);
    assert_eq!(
        groups,
        [
            CrateGroup::Other,
            CrateGroup::Gemm,
            CrateGroup::Gemm,
            CrateGroup::Allocator
        ]
    );
    for row in &r.rows {
        let f = (0..4)
            .find(|&f| t.sampled.frame_name(f) == row.name)
            .unwrap();
        assert_eq!(Some(groups[f as usize]), row.group, "{}", row.name);
    }
    assert_eq!(sampler_totals(&t), r.sampler);
    // Cut to a limit: the same first rows.
    let one = hot_report(
        &t,
        &HotOptions {
            limit: Some(1),
            ..HotOptions::default()
        },
    );
    assert_eq!(one.rows, r.rows[..1]);
}

/// The sampled lines of a single-threaded decode (`RAYON_NUM_THREADS=1`): `work` samples
/// of a matmul, `wake` samples of the capture's step-boundary wake (`Capture::step` →
/// `Sampler::on_step` → `advance` → `unpark` → `futex_wake`, as the issue's Llama decode
/// recorded it) and `spin` samples of Candle's barrier spinning; all in step 0.
fn decode_lines(bw: Option<u64>, work: u64, wake: u64, spin: u64) -> Vec<Event> {
    use trace_record::schema::{SamplerEvent, SamplesEvent, StackEvent};
    let samples = |stack, n| {
        Event::Samples(SamplesEvent {
            step: 0,
            thread: 1,
            stack,
            n,
            phase: Some(ExecStep::Forward),
            span: bw,
        })
    };
    let mut lines = vec![
        frame(1, "tracegraph::main"),
        frame(2, "candle_core::tensor::Tensor::matmul"),
        frame(3, "gemm_f32::microkernel::x3x4"),
        frame(4, "trace_candle::capture::Capture::step"),
        frame(5, "trace_sampler::control::Sampler::on_step"),
        frame(6, "trace_sampler::control::imp::Running::advance"),
        frame(7, "std::thread::Thread::unpark"),
        frame(8, "std::sys::sync::thread_parking::futex::Parker::unpark"),
        frame(9, "std::sys::pal::unix::futex::futex_wake"),
        frame(10, "syscall"),
        frame(11, "candle_core::utils::BarrierPool::execute"),
        frame(
            12,
            "<candle_core::utils::BarrierGuard as core::ops::drop::Drop>::drop",
        ),
        frame(13, "core::hint::spin_loop"),
        Event::Stack(StackEvent {
            id: 1,
            frames: vec![1, 2, 3],
        }),
        Event::Stack(StackEvent {
            id: 2,
            frames: vec![1, 4, 5, 6, 7, 8, 9, 10],
        }),
        Event::Stack(StackEvent {
            id: 3,
            frames: vec![1, 11, 12, 13],
        }),
    ];
    for (stack, n) in [(1, work), (2, wake), (3, spin)] {
        if n > 0 {
            lines.push(samples(stack, n));
        }
    }
    lines.push(Event::Sampler(SamplerEvent {
        step: 0,
        hz: 1000,
        taken: work + wake + spin,
        lost: 0,
        cpu_ns: Some((work + wake + spin) * 1_000_000),
        sampler_cpu_ns: None,
        ts: 0,
        dur: 1,
        source: None,
    }));
    lines
}

#[test]
fn the_profilers_wake_is_never_waiting_and_no_hint_counts_it() {
    // 6 of 14 samples (42.9 %) in the step-boundary wake: before its class, the pool-waiting
    // hint fired on this single-threaded decode.
    let t = load_sampled("wake", |bw| decode_lines(bw, 8, 6, 0));
    assert!(t.issues.is_empty(), "{:?}", t.issues);
    let s = &t.sampled;
    assert!(s.stack_is_profiler(2) && !s.stack_is_waiting(2));
    let r = hot_report(
        &t,
        &HotOptions {
            exclude_waiting: true,
            ..HotOptions::default()
        },
    );
    assert_eq!((r.samples, r.waiting, r.profiler), (14, 0, 6));
    assert!(
        r.hints.iter().all(|h| h.rule != "pool_waiting"),
        "{:?}",
        r.hints
    );
    // The function rankings hold one `(profiler)` row, none of the wake's own frames.
    let names: Vec<&str> = r.rows.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "gemm_f32::microkernel::x3x4",
            crate::sampled::PROFILER_ROW,
            "candle_core::tensor::Tensor::matmul",
            "tracegraph::main"
        ]
    );
    let prof = &r.rows[1];
    assert_eq!(
        (prof.self_samples, prof.total_samples, prof.profiler_samples),
        (6, 6, 6)
    );
    // No crate group and no phase's hottest function counts them; the phase says so.
    let groups: u64 = r.groups.iter().map(|g| g.self_samples).sum();
    assert_eq!(groups, 8);
    let fwd = &r.phases[0];
    assert_eq!((fwd.samples, fwd.waiting, fwd.profiler), (14, 0, 6));
    assert_eq!(fwd.top.iter().map(|x| x.self_samples).sum::<u64>(), 8);
    // By span: the span's self samples carry the profiler's apart.
    let by_span = hot_report(
        &t,
        &HotOptions {
            by: HotBy::Span,
            ..HotOptions::default()
        },
    );
    assert_eq!(
        by_span
            .rows
            .iter()
            .map(|x| (x.name.as_str(), x.self_samples, x.profiler_samples))
            .collect::<Vec<_>>(),
        [("backward", 14, 6)]
    );
    // JSON carries the count.
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(
        (v["profiler"].as_u64(), v["phases"][0]["profiler"].as_u64()),
        (Some(6), Some(6))
    );
}

#[test]
fn a_hints_evidence_and_share_leave_the_profilers_samples_out() {
    // 3 samples of the barrier spinning, 8 of work, 6 of the profiler's wake: 3 of the
    // program's 11 samples (27 %) wait, a hint; over all 17 (18 %) it would not be.
    let t = load_sampled("wake_spin", |bw| decode_lines(bw, 8, 6, 3));
    let r = hot_report(&t, &HotOptions::default());
    assert_eq!((r.samples, r.waiting, r.profiler), (17, 3, 6));
    let pool = r
        .hints
        .iter()
        .find(|h| h.rule == "pool_waiting")
        .expect("the pool-waiting hint over the program's samples");
    assert_eq!(pool.samples, 3);
    assert!((pool.share - 3.0 / 11.0).abs() < 1e-12, "{}", pool.share);
    // Too few samples: the program's 11, not the 17.
    let few = r
        .hints
        .iter()
        .find(|h| h.rule == "too_few_samples")
        .unwrap();
    assert_eq!(few.samples, 11);
    assert!(few.hint.starts_with("11 samples"), "{}", few.hint);
    // With the profiler's share the same wake as waiting would have fired alone; every
    // stack whose frames hold the wake path is the profiler's, none waiting.
    let s = &t.sampled;
    for row in &s.samples {
        let wake = s
            .stack(row.stack)
            .iter()
            .any(|&f| s.frame_name(f).contains("futex_wake"));
        if wake {
            assert!(s.stack_is_profiler(row.stack) && !s.stack_is_waiting(row.stack));
        }
    }
}

#[test]
fn spans_are_rows_by_path_and_by_name_only_when_asked() {
    use trace_record::schema::{Phase, SamplerEvent, SamplesEvent, SpanKind, StackEvent};
    use trace_record::{Run, TraceSession};
    let (session, sink) = TraceSession::in_memory(Run::new("paths", Phase::Infer, "cpu"));
    // Two `linear` spans at different paths, each in its parent.
    let mut ids = Vec::new();
    for parent in ["attn", "mlp"] {
        let p = session.span(parent, SpanKind::Module, Some(ExecStep::Forward));
        let c = session.span("linear", SpanKind::Module, Some(ExecStep::Forward));
        ids.push((p.id().map(|s| s.0), c.id().map(|s| s.0)));
        drop(c);
        drop(p);
    }
    session.step();
    drop(session.span("attn", SpanKind::Module, Some(ExecStep::Forward)));
    let samples = |span, n| {
        Event::Samples(SamplesEvent {
            step: 0,
            thread: 1,
            stack: 1,
            n,
            phase: Some(ExecStep::Forward),
            span,
        })
    };
    session.record_sampled(&[
        frame(1, "tracegraph::main"),
        Event::Stack(StackEvent {
            id: 1,
            frames: vec![1],
        }),
        samples(ids[0].1, 3),
        samples(ids[1].1, 5),
        samples(ids[1].0, 1),
        Event::Sampler(SamplerEvent {
            step: 0,
            hz: 1000,
            taken: 9,
            lost: 0,
            cpu_ns: None,
            sampler_cpu_ns: None,
            ts: 0,
            dur: 1,
            source: None,
        }),
    ]);
    session.finish().unwrap();
    let text = String::from_utf8(sink.bytes()).unwrap();
    let t = crate::load_str(&text, "paths.jsonl", Default::default()).unwrap();
    let rows = |by| {
        let r = hot_report(
            &t,
            &HotOptions {
                by,
                ..HotOptions::default()
            },
        );
        r.rows
            .iter()
            .map(|x| (x.name.clone(), x.self_samples, x.total_samples))
            .collect::<Vec<_>>()
    };
    let own = |v: Vec<(&str, u64, u64)>| {
        v.into_iter()
            .map(|(n, a, b)| (n.to_string(), a, b))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rows(HotBy::Span),
        own(vec![
            ("mlp/linear", 5, 5),
            ("attn/linear", 3, 3),
            ("mlp", 1, 6),
            ("attn", 0, 3),
        ])
    );
    assert_eq!(
        rows(HotBy::SpanName),
        own(vec![("linear", 8, 8), ("mlp", 1, 6), ("attn", 0, 3)])
    );
    // A limit keeps the hottest paths.
    let top = hot_report(
        &t,
        &HotOptions {
            by: HotBy::Span,
            limit: Some(1),
            ..HotOptions::default()
        },
    );
    assert_eq!(top.rows.len(), 1);
    assert_eq!(top.rows[0].name, "mlp/linear");
}
