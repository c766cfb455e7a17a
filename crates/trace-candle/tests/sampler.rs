//! The CPU sampler through a capture: a known answer, windows, off means nothing, attribution.
//!
//! A test binary of its own: the sampler samples every thread of the process into one
//! session, so the other integration tests' captures, running alongside in one binary, would
//! put their threads' samples (naming their own spans) into these tests' traces.

#![cfg(all(feature = "sampler", target_os = "linux"))]

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use candle_core::{DType, Device, Tensor};
use trace_record::schema::{Event, ExecStep, Phase, Schedule};
use trace_record::{ParsedTrace, Run};

use trace_candle::{Capture, SamplerConfig, SamplerError};

/// One sampler per process: the tests that start one take turns.
static TURN: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    TURN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[path = "sampler_common/mod.rs"]
#[allow(dead_code, unreachable_pub)]
mod common;

use common::{gettid, new_capture};

fn read(sink: &trace_record::MemorySink) -> ParsedTrace {
    trace_record::read_trace_bytes(&sink.bytes()).unwrap()
}

/// A matmul-dominated loop (64×64: gemm stays on the calling thread) for `cpu` of the
/// calling thread's CPU time: the samples due depend on the work's CPU time, which a loaded
/// machine does not shorten (a wall-time loop there runs a fraction of it).
fn matmuls(cpu: Duration) {
    let a = Tensor::randn(0f32, 1.0, (64, 64), &Device::Cpu).unwrap();
    common::run_for_cpu(cpu, || {
        let c = a.matmul(&a).unwrap();
        std::hint::black_box(c);
    });
}

/// An elementwise-dominated loop, for `cpu` of the calling thread's CPU time.
fn elementwise(cpu: Duration) {
    let x = Tensor::randn(0f32, 1.0, 64 * 1024, &Device::Cpu).unwrap();
    common::run_for_cpu(cpu, || {
        let y = x.exp().unwrap().sqr().unwrap();
        std::hint::black_box(y);
    });
}

const MATMUL: &[&str] = &["gemm", "MatMul"];
const ELEMENTWISE: &[&str] = &["unary_map", "binary_map", "UnaryOpT", "BinaryOpT"];

/// Per step: samples on `tid`, and how many of them have a frame naming each family.
struct Tally {
    total: u64,
    matmul: u64,
    elementwise: u64,
}

fn tally(trace: &ParsedTrace, tid: u64) -> HashMap<u64, Tally> {
    let mut frames: HashMap<u64, String> = HashMap::new();
    let mut stacks: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut out: HashMap<u64, Tally> = HashMap::new();
    // The sampler defines its stacks when it stops, after the samples naming them.
    for e in &trace.events {
        match &e.event {
            Event::Frame(f) => {
                frames.insert(f.id, f.func.clone());
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
                let has = |family: &[&str]| {
                    stacks[&s.stack]
                        .iter()
                        .any(|f| family.iter().any(|k| frames[f].contains(k)))
                };
                let t = out.entry(s.step).or_insert(Tally {
                    total: 0,
                    matmul: 0,
                    elementwise: 0,
                });
                t.total += s.n;
                if has(MATMUL) {
                    t.matmul += s.n;
                }
                if has(ELEMENTWISE) {
                    t.elementwise += s.n;
                }
            }
            _ => {}
        }
    }
    out
}

fn sampled_events(trace: &ParsedTrace) -> usize {
    trace
        .events
        .iter()
        .filter(|e| {
            matches!(
                e.event,
                Event::Frame(_) | Event::Stack(_) | Event::Samples(_) | Event::Sampler(_)
            )
        })
        .count()
}

fn sampler_threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.trim() == "tg-sampler")
            })
            .count()
    })
}

#[test]
fn a_matmul_loop_and_an_elementwise_loop_are_told_apart() {
    let _turn = turn();
    let (capture, sink) = new_capture(Run::new("sampler::known_answer", Phase::Infer, "cpu"));
    capture.sample_stacks(SamplerConfig::default()).unwrap();
    matmuls(Duration::from_millis(600));
    capture.step();
    elementwise(Duration::from_millis(600));
    capture.finish().unwrap();
    let trace = read(&sink);
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "{issues:?}");
    let t = tally(&trace, gettid());
    let mm = &t[&0];
    let ew = &t[&1];
    // 600 ms of the thread's CPU in each loop at 1 kHz: hundreds of samples due, 20 required.
    assert!(
        mm.total >= 20 && ew.total >= 20,
        "too few samples: {} {}",
        mm.total,
        ew.total
    );
    let share = |n: u64, d: u64| n as f64 / d as f64;
    assert!(
        share(mm.matmul, mm.total) >= 0.6,
        "matmul loop: {} of {} samples in matmul",
        mm.matmul,
        mm.total
    );
    assert!(
        share(ew.elementwise, ew.total) >= 0.6,
        "elementwise loop: {} of {} samples elementwise",
        ew.elementwise,
        ew.total
    );
    // Told apart: each loop's family dominates its own step only.
    assert!(share(mm.matmul, mm.total) > share(ew.matmul, ew.total) + 0.4);
    assert!(share(ew.elementwise, ew.total) > share(mm.elementwise, mm.total) + 0.4);
}

#[test]
fn samples_are_attributed_to_step_phase_and_span_and_sum_up() {
    let _turn = turn();
    let (capture, sink) = new_capture(Run::new("sampler::attribution", Phase::Train, "cpu"));
    capture.sample_stacks(SamplerConfig::hz(997)).unwrap();
    {
        let _g = capture.phase("backward", ExecStep::Backward);
        matmuls(Duration::from_millis(300));
    }
    capture.step();
    {
        let _g = capture.phase("optimizer", ExecStep::Optimizer);
        elementwise(Duration::from_millis(200));
    }
    capture.step();
    capture.finish().unwrap();
    let stats = capture.sampler_stats().unwrap();
    let trace = read(&sink);
    assert!(
        trace_record::validate(&trace).is_empty(),
        "{:?}",
        trace_record::validate(&trace)
    );
    let me = gettid();
    let mut by_phase: HashMap<(u64, Option<ExecStep>), u64> = HashMap::new();
    let mut spans: HashMap<u64, u64> = HashMap::new();
    let mut sums: HashMap<u64, u64> = HashMap::new();
    let mut taken: HashMap<u64, (u64, u64)> = HashMap::new();
    for e in &trace.events {
        match &e.event {
            Event::Samples(s) => {
                *sums.entry(s.step).or_default() += s.n;
                if s.thread == me {
                    *by_phase.entry((s.step, s.phase)).or_default() += s.n;
                    if let Some(sp) = s.span {
                        *spans.entry(sp).or_default() += s.n;
                    }
                }
            }
            Event::Sampler(s) => {
                assert_eq!(s.hz, 997);
                assert!(s.cpu_ns.is_some());
                // What the sampler's own threads used is said, and is part of the whole.
                let own = s.sampler_cpu_ns.expect("the sampler's own CPU time");
                assert!(Some(own) <= s.cpu_ns, "{own} of {:?}", s.cpu_ns);
                taken.insert(s.step, (s.taken, s.lost));
            }
            _ => {}
        }
    }
    // Per-step counts sum to what the sampler took; steps 0 and 1 recorded, step 2 (empty)
    // too, as the capture finished inside it.
    for (step, n) in &sums {
        assert_eq!(taken[step].0, *n);
    }
    let total: u64 = taken.values().map(|t| t.0).sum();
    let lost: u64 = taken.values().map(|t| t.1).sum();
    assert_eq!(
        (stats.taken, stats.lost, stats.steps),
        (total, lost, taken.len() as u64)
    );
    assert!(stats.effective_hz().is_some_and(|hz| hz > 0.0));
    assert!(lost <= total / 10 + 2, "lost {lost} of {total}");
    let bw = by_phase
        .get(&(0, Some(ExecStep::Backward)))
        .copied()
        .unwrap_or(0);
    let all0: u64 = by_phase
        .iter()
        .filter(|(k, _)| k.0 == 0)
        .map(|(_, v)| v)
        .sum();
    assert!(all0 > 0 && bw * 10 >= all0 * 9, "backward {bw} of {all0}");
    let opt = by_phase
        .get(&(1, Some(ExecStep::Optimizer)))
        .copied()
        .unwrap_or(0);
    assert!(opt > 0);
    // Samples name the phase spans (the trace's own span ids).
    let span_ids: Vec<u64> = trace
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::SpanStart(s) => Some(s.id),
            _ => None,
        })
        .collect();
    assert!(!spans.is_empty());
    assert!(spans.keys().all(|s| span_ids.contains(s)));
}

#[test]
fn no_samples_outside_the_schedules_windows() {
    let _turn = turn();
    // Step 0 skipped, step 1 recorded, then nothing more.
    let run = Run::new("sampler::windows", Phase::Infer, "cpu").schedule(Schedule {
        skip_first: 1,
        wait: 0,
        warmup: 0,
        active: 1,
        repeat: 1,
    });
    let (capture, sink) = new_capture(run);
    capture.sample_stacks(SamplerConfig::default()).unwrap();
    matmuls(Duration::from_millis(150));
    capture.step();
    matmuls(Duration::from_millis(150));
    capture.step();
    matmuls(Duration::from_millis(150));
    capture.finish().unwrap();
    let trace = read(&sink);
    let steps: Vec<u64> = trace
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Samples(s) => Some(s.step),
            Event::Sampler(s) => Some(s.step),
            _ => None,
        })
        .collect();
    assert!(!steps.is_empty());
    assert!(steps.iter().all(|&s| s == 1), "{steps:?}");

    // A schedule that never records: no sample at all.
    let run = Run::new("sampler::never", Phase::Infer, "cpu").schedule(Schedule {
        skip_first: 100,
        wait: 0,
        warmup: 0,
        active: 1,
        repeat: 1,
    });
    let (capture, sink) = new_capture(run);
    capture.sample_stacks(SamplerConfig::default()).unwrap();
    matmuls(Duration::from_millis(150));
    capture.step();
    matmuls(Duration::from_millis(100));
    let stats = capture.sampler_stats().unwrap();
    capture.finish().unwrap();
    assert_eq!((stats.steps, stats.taken), (0, 0));
    assert_eq!(sampled_events(&read(&sink)), 0);
}

#[test]
fn sampler_off_writes_nothing_and_starts_no_thread() {
    let _turn = turn();
    let (capture, sink) = new_capture(Run::new("sampler::off", Phase::Train, "cpu"));
    {
        let _b = capture.phase("backward", ExecStep::Backward);
        matmuls(Duration::from_millis(100));
        assert_eq!(sampler_threads(), 0);
    }
    capture.step();
    assert!(capture.sampler_stats().is_none());
    capture.finish().unwrap();
    let trace = read(&sink);
    assert_eq!(sampled_events(&trace), 0);
    assert_eq!(sampler_threads(), 0);
    // Turned on, it has its one thread until the capture finishes.
    let (capture, _sink) = capture_on();
    assert_eq!(sampler_threads(), 1);
    capture.finish().unwrap();
    assert_eq!(sampler_threads(), 0);
}

fn capture_on() -> (Capture, trace_record::MemorySink) {
    let (capture, sink) = new_capture(Run::new("sampler::on", Phase::Train, "cpu"));
    capture.sample_stacks(SamplerConfig::default()).unwrap();
    (capture, sink)
}

#[test]
fn one_sampler_per_process_and_rates_are_checked() {
    let _turn = turn();
    let (first, _s1) = capture_on();
    let (second, _s2) = new_capture(Run::new("sampler::second", Phase::Train, "cpu"));
    assert!(matches!(
        second.sample_stacks(SamplerConfig::default()),
        Err(SamplerError::Busy)
    ));
    assert!(matches!(
        first.sample_stacks(SamplerConfig::default()),
        Err(SamplerError::AlreadySampling)
    ));
    assert!(matches!(
        second.sample_stacks(SamplerConfig::hz(0)),
        Err(SamplerError::InvalidRate { hz: 0 })
    ));
    // Dropping a sampling capture without finishing stops its sampler too.
    drop(first);
    second.sample_stacks(SamplerConfig::default()).unwrap();
    let t = Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap();
    std::hint::black_box(t);
    second.finish().unwrap();
}

#[test]
fn every_kind_of_span_is_the_scope_while_open_and_hands_back_to_its_parent() {
    use trace_record::schema::SpanKind;
    use trace_sampler::{Scope, current_scope};
    let _turn = turn();
    let (capture, _sink) = capture_on();
    let scope = |span: Option<trace_record::SpanId>, phase| Scope { phase, span };
    let fwd = Some(ExecStep::Forward);
    {
        let phase = capture.phase("forward", ExecStep::Forward);
        let phase_id = capture.session().current_span();
        assert!(phase_id.is_some());
        assert_eq!(current_scope(), scope(phase_id, fwd));
        let _ = &phase;
        {
            let plain = capture.span("plain", SpanKind::Function);
            assert_eq!(current_scope(), scope(plain.id(), fwd));
            // An op whose closure records something nested becomes a span: its scope from
            // then until it ends, the plain span's again after.
            let x = Tensor::ones(4, DType::F32, &Device::Cpu).unwrap();
            let inner_seen = std::cell::Cell::new(None);
            let op_seen = std::cell::Cell::new(None);
            capture
                .op("outer", &[&x], || {
                    let before = current_scope();
                    assert_eq!(before, scope(plain.id(), fwd), "not yet a span");
                    let y = capture.op("inner", &[&x], || x.exp())?;
                    op_seen.set(Some(current_scope()));
                    inner_seen.set(capture.session().current_span());
                    Ok(y)
                })
                .unwrap();
            let op_scope = op_seen.get().unwrap();
            assert!(op_scope.span.is_some() && op_scope.span != plain.id());
            assert_eq!(op_scope.span, inner_seen.get(), "the op's own span");
            assert_eq!(current_scope(), scope(plain.id(), fwd), "after the op");
            plain.end();
        }
        assert_eq!(
            current_scope(),
            scope(phase_id, fwd),
            "after the plain span"
        );
    }
    assert_eq!(current_scope(), scope(None, None), "after the phase");
    capture.finish().unwrap();
}

#[cfg(all(feature = "nn", feature = "tracing"))]
#[path = "../examples/profile_llama.rs"]
#[allow(dead_code, unreachable_pub)]
mod profile_llama;

/// Which of candle-transformers' Llama functions opens which `tracing` span (the span is
/// entered in the function's first line and left at its end).
#[cfg(all(feature = "nn", feature = "tracing"))]
const LLAMA_SPANS: common::SpanTable = &[
    (
        "candle_transformers::models::llama::Llama::forward",
        "llama.forward",
    ),
    (
        "candle_transformers::models::llama::Block::forward",
        "block",
    ),
    (
        "candle_transformers::models::llama::CausalSelfAttention::forward",
        "attn",
    ),
    (
        "candle_transformers::models::llama::CausalSelfAttention::apply_rotary_emb",
        "attn-rot",
    ),
    ("candle_transformers::models::llama::Mlp::forward", "mlp"),
    (
        "with_tracing::Linear as candle_core::Module>::forward",
        "linear",
    ),
    (
        "with_tracing::RmsNorm as candle_core::Module>::forward",
        "rms-norm",
    ),
];

#[cfg(all(feature = "nn", feature = "tracing"))]
#[test]
fn samples_in_a_llama_forward_name_the_innermost_span_open_on_the_driving_thread() {
    use candle_nn::{VarBuilder, VarMap};
    use candle_transformers::models::llama::{Cache, Llama};
    let _turn = turn();
    let (capture, sink) = new_capture(Run::new("sampler::llama", Phase::Infer, "cpu"));
    // The one global subscriber of this binary: before the model is built.
    capture.install_tracing().unwrap();
    capture.sample_stacks(SamplerConfig::hz(4000)).unwrap();
    let cfg = profile_llama::tiny_config();
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let llama = Llama::load(vb, &cfg).unwrap();
    let mut cache = Cache::new(false, DType::F32, &cfg, &Device::Cpu).unwrap();
    let tokens: Vec<u32> = (0..16u32).map(|i| (i * 37 + 11) % 1000).collect();
    let input = Tensor::new(&tokens[..], &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    // At least 1.5 s of the thread's CPU in forwards and 600 samples (a busy machine gives
    // fewer per CPU second; the softmax, a few % of them, must be seen in the sampled op
    // table), a step per few; bounded by CPU time, so a busy machine makes it longer, not
    // shorter.
    let cpu0 = common::thread_cpu();
    let cpu = || common::thread_cpu().checked_sub(cpu0).unwrap();
    let mut n = 0;
    let enough = |c: &Capture| c.sampler_stats().is_some_and(|s| s.taken >= 600);
    while (cpu() < Duration::from_millis(1500) || n < 8 || !enough(&capture))
        && cpu() < common::MAX_CPU
    {
        let out = capture
            .op("llama.forward", &[&input], || {
                llama.forward(&input, 0, &mut cache)
            })
            .unwrap();
        std::hint::black_box(out);
        n += 1;
        if n % 4 == 0 {
            capture.step();
        }
    }
    capture.finish().unwrap();
    let trace = common::read_valid(&sink);
    let seen = common::attribute(&trace, gettid(), LLAMA_SPANS, &[], "llama.forward", "");
    seen.assert_innermost(150, 98);
    assert!(
        seen.below * 10 >= seen.forward * 9,
        "{} of {} samples below the forward op",
        seen.below,
        seen.forward
    );
    // The sampled op table (`tracegraph ops --sampled`) names the attention's Candle ops.
    let table = common::sampled_ops(&sink);
    eprintln!("named ops: {:?}", common::named_ops(&table));
    common::assert_names_matmul_and_softmax(&table);
}
