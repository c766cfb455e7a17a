//! Properties: any sequence of captured ops, modules, inputs and steps under any schedule gives a
//! trace that validates strictly, with every step allocation freed in its step.

use std::collections::HashSet;

use candle_core::{DType, Device, Module, Tensor};
use proptest::prelude::*;
use trace_candle::{ALL_DTYPES, dense_bytes, dtype_bits};
use trace_record::Run;
use trace_record::schema::{AllocKind, Event, ExecStep, Phase, Schedule};

use super::{capture_with, events, finish_and_read};

#[derive(Debug, Clone)]
enum Action {
    /// A captured op producing a fresh tensor of `rows` × 3.
    Op(usize),
    /// A captured op returning its input.
    Identity,
    /// A profiled module call (nested `depth` deep).
    Module(usize),
    /// A data batch recorded as an input.
    Input,
    /// Work inside an execution step.
    Phase(u8, Vec<usize>),
    /// End of step.
    Step,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        (1usize..4).prop_map(Action::Op),
        Just(Action::Identity),
        (1usize..3).prop_map(Action::Module),
        Just(Action::Input),
        (0u8..3, proptest::collection::vec(1usize..4, 0..3))
            .prop_map(|(p, ops)| Action::Phase(p, ops)),
        Just(Action::Step),
    ]
}

fn schedule() -> impl Strategy<Value = Option<Schedule>> {
    proptest::option::of((0u64..3, 0u64..2, 0u64..2, 1u64..3, 0u64..3).prop_map(
        |(skip_first, wait, warmup, active, repeat)| Schedule {
            skip_first,
            wait,
            warmup,
            active,
            repeat,
        },
    ))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_capture_sequence_validates(
        actions in proptest::collection::vec(action(), 0..40),
        schedule in schedule(),
    ) {
        let mut run = Run::new("props", Phase::Train, "cpu");
        if let Some(s) = schedule {
            run = run.schedule(s);
        }
        let (capture, sink) = capture_with(run);
        let dev = Device::Cpu;
        let x = Tensor::ones((2, 3), DType::F32, &dev).unwrap();
        let double = |t: &Tensor| t * 2.0;
        for a in &actions {
            match a {
                Action::Op(rows) => {
                    let t = Tensor::ones((*rows, 3), DType::F32, &dev).unwrap();
                    capture.op("scale", &[&t], || &t * 2.0).unwrap();
                }
                Action::Identity => {
                    capture.op("identity", &[&x], || Ok(x.clone())).unwrap();
                }
                Action::Module(depth) => {
                    let inner = capture.profile("m/inner", double);
                    if *depth == 1 {
                        inner.forward(&x).unwrap();
                    } else {
                        capture.profile("m", inner).forward(&x).unwrap();
                    }
                }
                Action::Input => capture.record_input(&x, "x"),
                Action::Phase(p, ops) => {
                    let step = [ExecStep::Forward, ExecStep::Backward, ExecStep::Optimizer][*p as usize];
                    let _phase = capture.phase("phase", step);
                    for rows in ops {
                        let t = Tensor::ones((*rows, 3), DType::F32, &dev).unwrap();
                        capture.op("scale", &[&t], || &t * 2.0).unwrap();
                    }
                }
                Action::Step => {
                    capture.step();
                }
            }
        }
        capture.step();
        // finish_and_read asserts zero validation issues in strict mode.
        let trace = finish_and_read(&capture, &sink);
        let mut live = HashSet::new();
        for e in events(&trace) {
            match e {
                Event::Step(_) => prop_assert!(live.is_empty(), "allocation left over a step"),
                Event::Memory(m) if m.kind == AllocKind::Alloc => {
                    prop_assert!(live.insert(m.storage));
                }
                Event::Memory(m) => prop_assert!(live.remove(&m.storage)),
                _ => {}
            }
        }
        prop_assert!(live.is_empty());
    }

    #[test]
    fn dense_bytes_is_packed_bits_rounded_up(n in 0usize..1_000_000, i in 0usize..ALL_DTYPES.len()) {
        let dtype = ALL_DTYPES[i];
        let bits = n as u64 * u64::from(dtype_bits(dtype));
        let bytes = dense_bytes(dtype, n);
        prop_assert!(bytes * 8 >= bits && bytes * 8 < bits + 8);
        prop_assert!(dense_bytes(dtype, n + 1) >= bytes);
    }
}
