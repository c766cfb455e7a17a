//! Property: random events written by the encoder read back identical (and match serde's view).

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use trace_record::schema::*;
use trace_record::{ReadOptions, TraceReader};

use crate::common::header;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_.:]{0,12}",
        any::<String>(),
        vec(any::<char>(), 0..8).prop_map(|c| c.into_iter().collect()),
    ]
}

fn device() -> impl Strategy<Value = String> {
    prop_oneof!["cpu".prop_map(String::from), "cuda:[0-3]", "[a-z]{1,6}"]
}

fn ids() -> impl Strategy<Value = Vec<u64>> {
    vec(any::<u64>(), 0..5)
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    vec(any::<usize>(), 0..5)
}

fn small_shape() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![shape(), vec(0usize..300, 0..4)]
}

fn dtype() -> impl Strategy<Value = String> {
    prop_oneof![text(), "(f32|bf16|u8|i64|f8e4m3)"]
}

fn category() -> impl Strategy<Value = MemoryCategory> {
    proptest::sample::select(MemoryCategory::ALL.to_vec())
}

fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("finite", |f| f.is_finite()),
        -1e3..1e3f64
    ]
}

pub(crate) fn event() -> impl Strategy<Value = Event> {
    let kind = prop_oneof![
        Just(SpanKind::Function),
        Just(SpanKind::Module),
        Just(SpanKind::Op)
    ];
    let step = option::of(prop_oneof![
        Just(ExecStep::Forward),
        Just(ExecStep::Backward),
        Just(ExecStep::Optimizer)
    ]);
    let state = prop_oneof![
        Just(GradientState::Present),
        Just(GradientState::Missing),
        Just(GradientState::Zero),
        Just(GradientState::NonFinite)
    ];
    prop_oneof![
        (
            any::<u64>(),
            option::of(any::<u64>()),
            text(),
            kind,
            step,
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(id, parent, name, kind, step, thread, ts)| {
                Event::SpanStart(SpanStart {
                    id,
                    parent,
                    name,
                    kind,
                    step,
                    thread,
                    ts,
                })
            }),
        (any::<u64>(), any::<u64>()).prop_map(|(id, ts)| Event::SpanEnd(SpanEnd { id, ts })),
        (
            (
                option::of(any::<u64>()),
                text(),
                ids(),
                ids(),
                small_shape(),
                dtype(),
                device()
            ),
            (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
            (
                option::of(category()),
                option::of(any::<u64>()),
                any::<bool>()
            ),
        )
            .prop_map(
                |(
                    (span, name, inputs, outputs, shape, dtype, device),
                    mut t,
                    (category, flops, logical),
                )| {
                    // Often the logical output bytes, which the writer omits and the reader
                    // derives.
                    if logical && let Some(b) = logical_bytes(&shape, &dtype) {
                        t.3 = b;
                    }
                    Event::Op(OpEvent {
                        span,
                        name,
                        inputs,
                        outputs,
                        shape,
                        dtype,
                        device,
                        ts: t.0,
                        dur: t.1,
                        in_bytes: t.2,
                        out_bytes: t.3,
                        category,
                        flops,
                        in_shapes: None,
                        in_dtypes: None,
                    })
                }
            ),
        (
            any::<u64>(),
            option::of(text()),
            shape(),
            text(),
            device(),
            any::<bool>(),
            any::<u64>(),
            category(),
            option::of(any::<u64>())
        )
            .prop_map(
                |(id, label, shape, dtype, device, requires_grad, bytes, category, span)| {
                    Event::Tensor(TensorEvent {
                        id,
                        label,
                        shape,
                        dtype,
                        device,
                        requires_grad,
                        bytes,
                        category,
                        span,
                    })
                }
            ),
        (
            any::<bool>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            device(),
            category(),
            option::of(any::<u64>()),
            any::<u64>()
        )
            .prop_map(
                |(alloc, storage, tensor, bytes, device, category, span, ts)| {
                    Event::Memory(MemoryEvent {
                        kind: if alloc {
                            AllocKind::Alloc
                        } else {
                            AllocKind::Free
                        },
                        storage,
                        tensor,
                        bytes,
                        device,
                        category,
                        span,
                        ts,
                    })
                }
            ),
        (
            text(),
            option::of(any::<u64>()),
            option::of(any::<u64>()),
            option::of(any::<u64>()),
            any::<u64>()
        )
            .prop_map(|(device, used, free, reserved, ts)| {
                Event::DeviceMemory(DeviceMemoryEvent {
                    device,
                    used,
                    free,
                    reserved,
                    ts,
                })
            }),
        (text(), state, option::of(finite()), any::<u64>()).prop_map(|(param, state, norm, ts)| {
            Event::Gradient(GradientEvent {
                param,
                state,
                norm,
                ts,
            })
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(index, ts)| Event::Step(StepEvent { index, ts })),
        (text(), option::of(any::<u64>()), any::<u64>())
            .prop_map(|(name, span, ts)| Event::Marker(MarkerEvent { name, span, ts })),
        (text(), finite(), any::<u64>())
            .prop_map(|(name, value, ts)| Event::Counter(CounterEvent { name, value, ts })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn events_round_trip(events in vec(event(), 0..40)) {
        let mut bytes = Vec::new();
        trace_record::encode_header(&header("cpu"), &mut bytes);
        for e in &events {
            let start = bytes.len();
            trace_record::encode_event(e, "cpu", &mut bytes);
            // The hand-written line and serde's serialization agree key for key.
            let ours: serde_json::Value = serde_json::from_slice(&bytes[start..]).unwrap();
            let mut theirs = serde_json::to_value(e).unwrap();
            // The encoder omits derivable output bytes; serde keeps them.
            if let Event::Op(op) = e
                && logical_bytes(&op.shape, &op.dtype) == Some(op.out_bytes)
                && let Some(obj) = theirs.as_object_mut()
            {
                prop_assert!(ours.get("out_b").is_none());
                obj.remove("out_b");
            }
            // The encoder omits the header's device; serde keeps it.
            if let Some(obj) = theirs.as_object_mut()
                && obj.get("dev").and_then(|d| d.as_str()) == Some("cpu")
                && !matches!(e, Event::DeviceMemory(_))
            {
                obj.remove("dev");
            }
            prop_assert_eq!(ours, theirs);
        }
        let mut strict = TraceReader::new(&bytes[..], ReadOptions::strict()).unwrap();
        let mut back = Vec::new();
        while let Some(e) = strict.next_event().unwrap() {
            back.push(e);
        }
        prop_assert!(strict.is_incomplete());
        prop_assert_eq!(strict.partial_line(), None);
        prop_assert_eq!(back.len(), events.len());
        for (i, (got, want)) in back.iter().zip(&events).enumerate() {
            prop_assert_eq!(got.line, i as u64 + 2);
            prop_assert_eq!(&got.event, want);
        }
    }

    #[test]
    fn trailers_round_trip(
        outcome in prop_oneof![
            Just(Outcome::Complete),
            Just(Outcome::Incomplete),
            text().prop_map(|reason| Outcome::Failed { reason }),
        ],
        op in any::<u64>(),
        dropped in any::<u64>(),
        ts in any::<u64>(),
    ) {
        let trailer = Trailer {
            outcome,
            counts: EventCounts { op, ..EventCounts::default() },
            dropped,
            ts,
        };
        let mut bytes = Vec::new();
        trace_record::encode_header(&header("cuda:0"), &mut bytes);
        trace_record::encode_trailer(&trailer, &mut bytes);
        let trace = trace_record::read_trace_bytes(&bytes).unwrap();
        prop_assert_eq!(trace.trailer.as_ref(), Some(&trailer));
        prop_assert_eq!(trace.header, header("cuda:0"));
        prop_assert_eq!(trace.incomplete, trailer.outcome == Outcome::Incomplete);
    }
}
