//! Training through the one `Capture` handle: parameters, gradient facts, optimizer state
//! (estimated and declared) and a full strict-read step; the deprecated `TrainingCapture`
//! wrapper delegating to it.

use std::collections::HashMap;

use candle_core::{DType, Device, Module, Tensor, Var};
use candle_nn::{Optimizer, VarBuilder, VarMap};
use trace_candle::{ESTIMATED_STATE_BIT, OptimizerKind, Schedule, gradient_state, tensor_id};
use trace_record::schema::{AllocKind, Event, ExecStep, GradientState, MemoryCategory, Phase};

use super::{capture, events, finish_and_read};

#[test]
fn a_variable_is_recorded_as_a_parameter() {
    let (capture, sink) = capture(Phase::Train);
    let var = Var::ones((3, 5), DType::F32, &Device::Cpu).unwrap();
    assert_eq!(capture.parameters([("encoder.weight", var.as_tensor())]), 1);
    assert_eq!(capture.parameters([("duplicate", var.as_tensor())]), 0);
    assert_eq!(capture.parameter_names(), ["encoder.weight"]);
    {
        let _forward = capture.phase("forward", ExecStep::Forward);
    }
    capture.step();
    {
        // Recorded once, not again in a later step.
        let _forward = capture.phase("forward", ExecStep::Forward);
    }
    capture.step();
    let trace = finish_and_read(&capture, &sink);
    let tensors: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::Tensor(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(tensors.len(), 1);
    let t = &tensors[0];
    assert_eq!(t.id, tensor_id(var.as_tensor()));
    assert_eq!(t.label.as_deref(), Some("encoder.weight"));
    assert_eq!(t.category, MemoryCategory::Parameter);
    assert!(t.requires_grad);
    assert_eq!((t.shape.clone(), t.bytes), (vec![3, 5], 60));
    let mem: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::Memory(m) => Some((m.kind, m.storage, m.category)),
            _ => None,
        })
        .collect();
    assert_eq!(
        mem,
        vec![(AllocKind::Alloc, t.id, MemoryCategory::Parameter)]
    );
}

#[test]
fn gradient_states_present_zero_non_finite_missing() {
    let dev = Device::Cpu;
    let g = Tensor::new(&[3f32, 4.0], &dev).unwrap();
    assert_eq!(
        gradient_state(&g).unwrap(),
        (GradientState::Present, Some(5.0))
    );
    let z = Tensor::zeros(4, DType::F32, &dev).unwrap();
    assert_eq!(
        gradient_state(&z).unwrap(),
        (GradientState::Zero, Some(0.0))
    );
    let nan = Tensor::new(&[1f32, f32::NAN], &dev).unwrap();
    assert_eq!(
        gradient_state(&nan).unwrap(),
        (GradientState::NonFinite, None)
    );
    let inf = Tensor::new(&[f64::INFINITY, 1.0], &dev).unwrap();
    assert_eq!(
        gradient_state(&inf).unwrap(),
        (GradientState::NonFinite, None)
    );
    let bf = Tensor::new(&[3f32, 4.0], &dev)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    assert_eq!(
        gradient_state(&bf).unwrap(),
        (GradientState::Present, Some(5.0))
    );
}

#[test]
fn tiny_and_huge_finite_gradients_are_present_with_their_norm() {
    let dev = Device::Cpu;
    // The squares underflow to 0: still a gradient, not `zero`.
    let tiny = Tensor::new(&[3e-200f64, 4e-200], &dev).unwrap();
    let (state, norm) = gradient_state(&tiny).unwrap();
    assert_eq!(state, GradientState::Present);
    let norm = norm.unwrap();
    assert!((norm / 5e-200 - 1.0).abs() < 1e-12, "{norm}");
    // The squares overflow: every entry is finite, so not `non_finite`.
    let huge = Tensor::new(&[3e200f64, -4e200], &dev).unwrap();
    let (state, norm) = gradient_state(&huge).unwrap();
    assert_eq!(state, GradientState::Present);
    let norm = norm.unwrap();
    assert!((norm / 5e200 - 1.0).abs() < 1e-12, "{norm}");
    // Finite entries whose norm exceeds f64::MAX: present, without a norm.
    let past = Tensor::new(&[f64::MAX, f64::MAX], &dev).unwrap();
    assert_eq!(
        gradient_state(&past).unwrap(),
        (GradientState::Present, None)
    );
}

#[test]
fn nan_gradient_is_non_finite_and_unused_variable_is_missing() {
    let (capture, sink) = capture(Phase::Train);
    let dev = Device::Cpu;
    let used = Var::new(&[1f32, 2.0], &dev).unwrap();
    let nan = Var::new(&[1f32, 2.0], &dev).unwrap();
    let unused = Var::new(&[1f32, 2.0], &dev).unwrap();
    let zero = Var::new(&[1f32, 2.0], &dev).unwrap();
    let registered = capture.parameters([
        ("used", used.as_tensor()),
        ("nan", nan.as_tensor()),
        ("unused", unused.as_tensor()),
        ("zero", zero.as_tensor()),
    ]);
    assert_eq!(registered, 4);
    let loss = {
        let _forward = capture.phase("forward", ExecStep::Forward);
        let a = used.as_tensor().sqr().unwrap().sum_all().unwrap();
        // d/dx of x * NaN is NaN.
        let b = (nan.as_tensor() * f64::NAN).unwrap().sum_all().unwrap();
        // Gradients 1 and -1 cancel exactly.
        let z = zero.as_tensor().sum_all().unwrap();
        let c = (&z - &z).unwrap();
        ((a + b).unwrap() + c).unwrap()
    };
    let grads = capture.backward(&loss).unwrap();
    let facts: HashMap<_, _> = capture
        .gradient_facts(&grads)
        .unwrap()
        .into_iter()
        .map(|f| (f.param, (f.state, f.norm)))
        .collect();
    let norm = (4f64 + 16.0).sqrt();
    assert_eq!(facts["used"], (GradientState::Present, Some(norm)));
    assert_eq!(facts["nan"], (GradientState::NonFinite, None));
    assert_eq!(facts["unused"], (GradientState::Missing, None));
    assert_eq!(facts["zero"], (GradientState::Zero, Some(0.0)));
    capture.step();
    let trace = finish_and_read(&capture, &sink);
    let recorded: HashMap<_, _> = events(&trace)
        .filter_map(|e| match e {
            Event::Gradient(g) => Some((g.param.clone(), (g.state, g.norm))),
            _ => None,
        })
        .collect();
    assert_eq!(recorded, facts);
    // A gradient allocation for the three variables that have one, freed at the step's end.
    let grad_allocs = events(&trace)
        .filter(|e| {
            matches!(e, Event::Memory(m)
                if m.kind == AllocKind::Alloc && m.category == MemoryCategory::Gradient)
        })
        .count();
    assert_eq!(grad_allocs, 3);
}

/// Each kind adds its own state per float parameter (an integer parameter has none), each
/// tensor once, with its own ids; parameters registered after the estimate get theirs too.
#[test]
fn optimizer_state_is_estimated_per_kind_and_for_later_parameters() {
    let dev = Device::Cpu;
    let w = Var::ones((2, 2), DType::F32, &dev).unwrap();
    let idx = Var::from_tensor(&Tensor::new(&[1u32], &dev).unwrap()).unwrap();
    let late = Var::ones(3, DType::F64, &dev).unwrap();
    let estimate = |kinds: &[OptimizerKind]| {
        let (capture, sink) = capture(Phase::Train);
        capture.parameters([("w", w.as_tensor()), ("idx", idx.as_tensor())]);
        let added: Vec<usize> = kinds
            .iter()
            .map(|&k| capture.estimate_optimizer_state(k))
            .collect();
        // Registered after the estimate: its state is added for every estimated kind.
        capture.parameters([("late", late.as_tensor())]);
        let labels = capture.optimizer_state_labels();
        (added, labels, finish_and_read(&capture, &sink))
    };
    let (added, labels, _) = estimate(&[OptimizerKind::AdamW, OptimizerKind::AdamW]);
    assert_eq!(
        added,
        [2, 0],
        "a kind estimated twice adds nothing the second time"
    );
    assert_eq!(
        labels,
        [
            "w.exp_avg",
            "w.exp_avg_sq",
            "late.exp_avg",
            "late.exp_avg_sq"
        ]
    );
    let (added, labels, _) = estimate(&[OptimizerKind::Sgd { momentum: true }]);
    assert_eq!(
        (added, labels),
        (
            vec![1],
            vec![
                "w.momentum_buffer".to_string(),
                "late.momentum_buffer".to_string()
            ]
        )
    );
    let (added, labels, trace) = estimate(&[OptimizerKind::Sgd { momentum: false }]);
    assert_eq!(added, [0]);
    assert!(labels.is_empty());
    assert!(
        !events(&trace)
            .any(|e| matches!(e, Event::Memory(m) if m.category == MemoryCategory::OptimizerState))
    );

    // Both kinds on one capture: five state tensors per float parameter... two and one,
    // with distinct ids, each recorded once, with its parameter's shape, dtype and bytes.
    let (_, labels, trace) =
        estimate(&[OptimizerKind::AdamW, OptimizerKind::Sgd { momentum: true }]);
    assert_eq!(labels.len(), 6);
    let state: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::Tensor(t) if t.category == MemoryCategory::OptimizerState => Some(t.clone()),
            _ => None,
        })
        .collect();
    let mut ids: Vec<u64> = state.iter().map(|t| t.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 6);
    assert!(ids.iter().all(|id| id & ESTIMATED_STATE_BIT != 0));
    for t in &state {
        let label = t.label.as_deref().unwrap();
        let (param, bytes, dtype) = if label.starts_with("w.") {
            (&w, 16, "f32")
        } else {
            (&late, 24, "f64")
        };
        assert_eq!(
            (t.shape.as_slice(), t.bytes, t.dtype.as_str()),
            (param.dims(), bytes, dtype),
            "{label}"
        );
        assert!(!t.requires_grad);
    }
    let allocs = events(&trace)
        .filter(|e| matches!(e, Event::Memory(m) if m.category == MemoryCategory::OptimizerState))
        .count();
    assert_eq!(allocs, 6, "each state tensor allocated once, never freed");
}

/// Under a schedule, optimizer state estimated or declared while the session is inactive is
/// recorded once, at the first recorded step's start (outside every span), and a declared
/// tensor keeps its own id and label.
#[test]
fn optimizer_state_added_while_inactive_is_recorded_at_the_first_active_step() {
    let dev = Device::Cpu;
    let run =
        trace_record::Run::new("trace-candle::tests", Phase::Train, "cpu").schedule(Schedule {
            skip_first: 1,
            wait: 0,
            warmup: 0,
            active: 2,
            repeat: 1,
        });
    let (capture, sink) = super::capture_with(run);
    let w = Var::ones((4, 4), DType::F32, &dev).unwrap();
    let momentum = Tensor::zeros((4, 4), DType::F32, &dev).unwrap();
    assert!(!capture.is_active());
    capture.parameters([("w", w.as_tensor())]);
    assert_eq!(capture.estimate_optimizer_state(OptimizerKind::AdamW), 2);
    assert!(capture.declare_optimizer_state("w.my_momentum", &momentum));
    assert!(
        !capture.declare_optimizer_state("again", &momentum),
        "declared once"
    );
    for _ in 0..3 {
        let _forward = capture.phase("forward", ExecStep::Forward);
        drop(_forward);
        capture.step();
    }
    let trace = finish_and_read(&capture, &sink);
    // The first event after the boundary into the first recorded step: parameters first, then
    // the state, all outside any span, before the step's forward phase.
    let mut first_span_at = None;
    let mut persistent = Vec::new();
    for (i, e) in events(&trace).enumerate() {
        match e {
            Event::SpanStart(_) if first_span_at.is_none() => first_span_at = Some(i),
            Event::Memory(m) if m.kind == AllocKind::Alloc => {
                assert_eq!(m.span, None, "recorded outside every span");
                persistent.push((i, m.category, m.storage));
            }
            Event::Memory(m) => panic!("persistent memory freed: {m:?}"),
            _ => {}
        }
    }
    let categories: Vec<_> = persistent.iter().map(|p| p.1).collect();
    assert_eq!(
        categories,
        [
            MemoryCategory::Parameter,
            MemoryCategory::OptimizerState,
            MemoryCategory::OptimizerState,
            MemoryCategory::OptimizerState,
        ]
    );
    assert!(persistent.iter().all(|p| Some(p.0) < first_span_at));
    assert_eq!(persistent[3].2, tensor_id(&momentum));
    let declared = events(&trace)
        .find_map(|e| match e {
            Event::Tensor(t) if t.id == tensor_id(&momentum) => Some(t.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(declared.label.as_deref(), Some("w.my_momentum"));
    assert_eq!(declared.category, MemoryCategory::OptimizerState);
}

/// One full training step of a small MLP with AdamW, every capture on.
#[test]
fn a_full_training_step_reads_back_strictly_with_every_step_allocation_freed() {
    let (capture, sink) = capture(Phase::Train);
    let dev = Device::Cpu;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &dev);
    let layers = vec![
        candle_nn::linear(8, 16, vb.pp("l0")).unwrap(),
        candle_nn::linear(16, 3, vb.pp("l1")).unwrap(),
    ];
    let model = capture.profile_sequence("model", layers);
    let mut opt = candle_nn::AdamW::new_lr(varmap.all_vars(), 0.01).unwrap();
    assert_eq!(capture.parameters_varmap(&varmap), 4);
    assert_eq!(capture.estimate_optimizer_state(OptimizerKind::AdamW), 8);
    let x = Tensor::ones((5, 8), DType::F32, &dev).unwrap();
    let y = Tensor::new(&[0u32, 1, 2, 0, 1], &dev).unwrap();
    for _ in 0..2 {
        let _step = capture.span("train_step", trace_record::schema::SpanKind::Function);
        let loss = {
            let _forward = capture.phase("forward", ExecStep::Forward);
            capture.record_input(&x, "x");
            let logits = model.forward(&x).unwrap();
            let logits = capture.op("scale", &[&logits], || &logits * 2.0).unwrap();
            capture
                .op("cross_entropy", &[&logits, &y], || {
                    candle_nn::loss::cross_entropy(&logits, &y)
                })
                .unwrap()
        };
        let grads = capture.backward(&loss).unwrap();
        {
            let _optimizer = capture.phase("optimizer", ExecStep::Optimizer);
            opt.step(&grads).unwrap();
        }
        drop(_step);
        capture.step();
    }
    let trace = finish_and_read(&capture, &sink);

    // Every allocation is freed within its step, except parameters and optimizer state.
    let mut live: HashMap<u64, MemoryCategory> = HashMap::new();
    let mut step_allocs = 0;
    for e in events(&trace) {
        match e {
            Event::Step(_) => {
                let leaked: Vec<_> = live
                    .iter()
                    .filter(|(_, c)| {
                        !matches!(
                            c,
                            MemoryCategory::Parameter | MemoryCategory::OptimizerState
                        )
                    })
                    .collect();
                assert!(
                    leaked.is_empty(),
                    "not freed by the end of the step: {leaked:?}"
                );
            }
            Event::Memory(m) if m.kind == AllocKind::Alloc => {
                if !matches!(
                    m.category,
                    MemoryCategory::Parameter | MemoryCategory::OptimizerState
                ) {
                    step_allocs += 1;
                }
                assert!(live.insert(m.storage, m.category).is_none());
            }
            Event::Memory(m) => {
                assert!(live.remove(&m.storage).is_some());
            }
            _ => {}
        }
    }
    assert!(step_allocs > 0);
    let mut left: Vec<_> = live.values().copied().collect();
    left.sort();
    let mut expected = vec![MemoryCategory::Parameter; 4];
    expected.extend([MemoryCategory::OptimizerState; 8]);
    assert_eq!(left, expected);
    // Estimated state ids are synthetic, never a Candle tensor id.
    assert_eq!(
        live.iter()
            .filter(|(id, _)| *id & ESTIMATED_STATE_BIT != 0)
            .count(),
        8
    );

    // Two steps, each: train_step ⊃ forward, backward, optimizer; model under forward.
    let mut by_id = HashMap::new();
    let mut spans = Vec::new();
    for e in events(&trace) {
        if let Event::SpanStart(s) = e {
            by_id.insert(s.id, s.name.clone());
            spans.push((s.name.clone(), s.parent.map(|p| by_id[&p].clone()), s.step));
        }
    }
    let top: Vec<_> = spans
        .iter()
        .filter(|s| s.1.as_deref() == Some("train_step"))
        .map(|s| (s.0.as_str(), s.2))
        .collect();
    assert_eq!(
        top,
        [
            ("forward", Some(ExecStep::Forward)),
            ("backward", Some(ExecStep::Backward)),
            ("optimizer", Some(ExecStep::Optimizer)),
        ]
        .repeat(2)
    );
    assert!(
        spans
            .iter()
            .any(|s| s.0 == "model" && s.1.as_deref() == Some("forward"))
    );
    let states: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::Gradient(g) => Some(g.state),
            _ => None,
        })
        .collect();
    assert_eq!(states, vec![GradientState::Present; 8]);
}

/// The deprecated `TrainingCapture` is a thin wrapper: what it registers and estimates is the
/// capture's (one registry, one optimizer state), so `Capture::backward` gives the facts of
/// parameters watched through it and its estimate is not repeated by the capture's.
#[test]
#[allow(deprecated)]
fn the_deprecated_training_capture_delegates_to_the_capture() {
    use trace_candle::TrainingCapture;
    let (capture, sink) = capture(Phase::Train);
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let model = candle_nn::linear(3, 2, vb.pp("fc")).unwrap();
    let mut training = TrainingCapture::new(&capture);
    assert_eq!(training.watch_varmap(&varmap), 2);
    // The same variables through the capture: already registered, nothing added.
    assert_eq!(capture.parameters_varmap(&varmap), 0);
    assert_eq!(capture.parameter_names(), ["fc.bias", "fc.weight"]);
    assert_eq!(training.parameter_names(), capture.parameter_names());
    assert_eq!(training.estimate_optimizer_state(OptimizerKind::AdamW), 4);
    assert_eq!(capture.estimate_optimizer_state(OptimizerKind::AdamW), 0);
    assert_eq!(
        training
            .clone()
            .estimate_optimizer_state(OptimizerKind::AdamW),
        0
    );
    let x = Tensor::ones((4, 3), DType::F32, &Device::Cpu).unwrap();
    let loss = {
        let _forward = training.forward();
        model
            .forward(&x)
            .unwrap()
            .sqr()
            .unwrap()
            .mean_all()
            .unwrap()
    };
    let grads = capture.backward(&loss).unwrap();
    assert!(grads.get(model.weight()).is_some());
    {
        let _optimizer = training.optimizer();
    }
    training.end_step();
    let trace = finish_and_read(&capture, &sink);
    let mut facts: Vec<(String, GradientState)> = events(&trace)
        .filter_map(|e| match e {
            Event::Gradient(g) => Some((g.param.clone(), g.state)),
            _ => None,
        })
        .collect();
    facts.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        facts,
        [
            ("fc.bias".to_string(), GradientState::Present),
            ("fc.weight".to_string(), GradientState::Present)
        ]
    );
    // Parameters and optimizer state are recorded once, by the one registry.
    let count = |cat| {
        events(&trace)
            .filter(|e| matches!(e, Event::Memory(m) if m.category == cat))
            .count()
    };
    assert_eq!(count(MemoryCategory::Parameter), 2);
    assert_eq!(count(MemoryCategory::OptimizerState), 4);
    // Its phases are the capture's.
    let phases: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::SpanStart(s) => Some((s.name.as_str(), s.step)),
            _ => None,
        })
        .filter(|(_, step)| step.is_some())
        .map(|(name, _)| name)
        .collect();
    assert_eq!(phases, ["forward", "backward", "optimizer"]);
}

/// A backward recorded with no registered parameter says so once, in the trace.
#[test]
fn a_backward_without_parameters_is_reported_once() {
    let (capture, sink) = capture(Phase::Train);
    let w = Var::ones((2, 2), DType::F32, &Device::Cpu).unwrap();
    for _ in 0..2 {
        let loss = w.as_tensor().sqr().unwrap().sum_all().unwrap();
        capture.backward(&loss).unwrap();
        capture.step();
    }
    let trace = finish_and_read(&capture, &sink);
    let counters: Vec<&str> = events(&trace)
        .filter_map(|e| match e {
            Event::Counter(c)
                if c.name == trace_record::schema::BACKWARD_WITHOUT_PARAMETERS_COUNTER =>
            {
                Some(c.name.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(counters.len(), 1);
    assert!(!events(&trace).any(|e| matches!(e, Event::Gradient(_))));
}

/// Activations found only in the autograd graph (no captured op made them, so their creation
/// time is unknown) are placed at the start of their step's forward phase, where the memory
/// timeline then holds them; in a step with no forward phase, at the step's start (its
/// boundary); in the run's first step without one, when found. The memory report counts each.
#[test]
fn autograd_activations_are_placed_at_their_forward_phase_start() {
    use trace_record::schema::SpanKind;
    let (capture, sink) = capture(Phase::Train);
    let w = Var::ones((64, 64), DType::F32, &Device::Cpu).unwrap();
    let x = Tensor::ones((8, 64), DType::F32, &Device::Cpu).unwrap();
    let forward = |x: &Tensor| {
        x.matmul(w.as_tensor())
            .unwrap()
            .relu()
            .unwrap()
            .sum_all()
            .unwrap()
    };
    // Step 0, the run's first: no forward phase and no boundary before it; placed at the walk.
    let loss = forward(&x);
    {
        let _other = capture.span("first_step", SpanKind::Function);
    }
    let first = capture.autograd(&loss);
    let n = first.recorded_allocations;
    assert!(n >= 2, "{first:?}");
    assert_eq!(
        (first.placed_at_forward_start, first.placed_at_step_start),
        (0, 0)
    );
    capture.step();
    // Step 1: a forward phase, other work after it, then the walk.
    let loss = {
        let _forward = capture.phase("forward", ExecStep::Forward);
        forward(&x)
    };
    {
        let _other = capture.span("after_forward", SpanKind::Function);
    }
    let second = capture.autograd(&loss);
    assert_eq!(second.recorded_allocations, n);
    assert_eq!(second.placed_at_forward_start, n);
    capture.step();
    // Step 2: no forward phase; placed at the step's start.
    {
        let _other = capture.span("third_step", SpanKind::Function);
    }
    let loss = forward(&x);
    let third = capture.autograd(&loss);
    assert_eq!(
        (third.placed_at_forward_start, third.placed_at_step_start),
        (0, n)
    );
    capture.step();
    let trace = finish_and_read(&capture, &sink);

    // Span intervals by name, step boundaries, and the activation allocations with the span
    // last opened before them in the file (each step's last span: the walk comes after it).
    let mut starts: HashMap<u64, (String, u64)> = HashMap::new();
    let mut spans: HashMap<String, (u64, u64)> = HashMap::new();
    let mut boundaries: Vec<u64> = Vec::new();
    let mut allocs: HashMap<String, Vec<u64>> = HashMap::new();
    let mut last_span = String::new();
    for e in events(&trace) {
        match e {
            Event::SpanStart(s) => {
                starts.insert(s.id, (s.name.clone(), s.ts));
                last_span = s.name.clone();
            }
            Event::SpanEnd(s) => {
                let (name, start) = starts[&s.id].clone();
                spans.insert(name, (start, s.ts));
            }
            Event::Step(s) => boundaries.push(s.ts),
            Event::Memory(m)
                if m.kind == AllocKind::Alloc && m.category == MemoryCategory::Activation =>
            {
                allocs.entry(last_span.clone()).or_default().push(m.ts);
            }
            _ => {}
        }
    }
    let (_, first_end) = spans["first_step"];
    assert_eq!(allocs["first_step"].len(), n);
    assert!(allocs["first_step"].iter().all(|&ts| ts >= first_end));
    let (f0, f1) = spans["forward"];
    let (after, _) = spans["after_forward"];
    assert_eq!(allocs["after_forward"].len(), n);
    for ts in &allocs["after_forward"] {
        // Written after the later span, stamped inside the forward phase.
        assert!(
            (f0..=f1).contains(ts) && *ts < after,
            "{ts} not in {f0}..{f1}"
        );
    }
    let (third_start, _) = spans["third_step"];
    let step2 = boundaries[1];
    assert_eq!(allocs["third_step"].len(), n);
    for ts in &allocs["third_step"] {
        // At the boundary that began step 2, before its first span.
        assert!(
            (step2..=third_start).contains(ts),
            "{ts} not in {step2}..{third_start}"
        );
    }

    // The memory report: the placements counted, and the timeline holds step 1's activations
    // from the forward phase (events in time order).
    let text = String::from_utf8(sink.bytes()).unwrap();
    let loaded = trace_analyze::load_str(&text, "autograd.jsonl", Default::default()).unwrap();
    assert!(loaded.memory.is_sorted_by_key(|e| e.t_ns));
    let report = trace_analyze::memory_report(&loaded).unwrap();
    let storages = (first.storages + second.storages + third.storages) as u64;
    let n = n as u64;
    assert_eq!(
        report.autograd,
        Some(trace_analyze::AutogradPlacement {
            storages,
            at_creation: storages - 3 * n,
            at_forward_start: n,
            at_step_start: n,
            at_walk: n,
        })
    );
    let in_forward = loaded
        .memory
        .iter()
        .filter(|e| e.alloc && e.category == MemoryCategory::Activation)
        .filter(|e| (f0..=f1).contains(&e.t_ns))
        .count();
    assert_eq!(in_forward as u64, n);
}
