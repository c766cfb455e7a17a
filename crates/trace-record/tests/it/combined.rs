//! `record_op_with_output` writes exactly the lines of `record_op`, `record_tensor` and
//! `record_memory_at` (stamped at the op's end), for shared and for unrelated records.

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use trace_record::schema::{AllocKind, Event, MemoryCategory, Phase, SpanKind};
use trace_record::{MemoryRecord, OpRecord, Run, TensorRecord, TraceSession};

/// An allocation's kind and its overrides of storage, owning tensor and bytes (`None`: the
/// tensor's own).
type MemCase = (AllocKind, Option<u64>, Option<u64>, Option<u64>);

/// Owned inputs of one combined call.
#[derive(Debug, Clone)]
struct Case {
    name: String,
    inputs: Vec<u64>,
    out_id: u64,
    shape: Vec<usize>,
    dtype: String,
    device: String,
    start: u64,
    dur: u64,
    in_bytes: u64,
    out_bytes: u64,
    op_cat: Option<MemoryCategory>,
    flops: Option<u64>,
    /// The tensor's own fields where a case makes them differ from the op's.
    label: Option<String>,
    tensor_id: Option<u64>,
    tensor_shape: Option<Vec<usize>>,
    tensor_device: Option<String>,
    grad: bool,
    cat: MemoryCategory,
    /// The allocation, when there is one: kind, storage and tensor overrides, bytes override.
    mem: Option<MemCase>,
    in_span: bool,
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_.:]{0,12}",
        any::<String>(),
        Just("a\"b\\c\n".to_string())
    ]
}

fn int() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..10_000,
        any::<u64>(),
        Just(u64::MAX),
        Just(100_000_000)
    ]
}

fn category() -> impl Strategy<Value = MemoryCategory> {
    proptest::sample::select(MemoryCategory::ALL.to_vec())
}

fn case() -> impl Strategy<Value = Case> {
    let op = (
        text(),
        vec(int(), 0..4),
        int(),
        vec(0usize..5000, 0..4),
        prop_oneof!["(f32|bf16|u8|i64)", text()],
        prop_oneof!["(cpu|cuda:0)", text()],
        (int(), int(), int(), int()),
        option::of(category()),
        option::of(int()),
    );
    let tensor = (
        option::weighted(0.2, text()),
        option::weighted(0.2, int()),
        option::weighted(0.2, vec(0usize..5000, 0..4)),
        option::weighted(0.2, "(cpu|cuda:1)"),
        any::<bool>(),
        category(),
    );
    let mem = option::weighted(
        0.7,
        (
            prop_oneof![Just(AllocKind::Alloc), Just(AllocKind::Free)],
            option::weighted(0.2, int()),
            option::weighted(0.2, int()),
            option::weighted(0.2, int()),
        ),
    );
    (op, tensor, mem, any::<bool>()).prop_map(
        |(
            (
                name,
                inputs,
                out_id,
                shape,
                dtype,
                device,
                (start, dur, in_bytes, out_bytes),
                op_cat,
                flops,
            ),
            (label, tensor_id, tensor_shape, tensor_device, grad, cat),
            mem,
            in_span,
        )| Case {
            name,
            inputs,
            out_id,
            shape,
            dtype,
            device,
            start: start / 2,
            dur: dur / 2,
            in_bytes,
            out_bytes,
            op_cat,
            flops,
            label,
            tensor_id,
            tensor_shape,
            tensor_device,
            grad,
            cat,
            mem,
            in_span,
        },
    )
}

/// The lines written for `c`: first by the three separate calls, then by the combined one.
fn both(c: &Case) -> (Vec<String>, Vec<String>) {
    let (session, sink) = TraceSession::in_memory(Run::new("tests::combined", Phase::Train, "cpu"));
    let outputs = [c.out_id];
    let op = OpRecord {
        name: &c.name,
        inputs: &c.inputs,
        outputs: &outputs,
        shape: &c.shape,
        dtype: &c.dtype,
        device: &c.device,
        start_ns: c.start,
        dur_ns: c.dur,
        in_bytes: c.in_bytes,
        out_bytes: c.out_bytes,
        category: c.op_cat,
        flops: c.flops,
    };
    let tensor_id = c.tensor_id.unwrap_or(c.out_id);
    let tensor = TensorRecord {
        id: tensor_id,
        label: c.label.as_deref(),
        shape: c.tensor_shape.as_deref().unwrap_or(&c.shape),
        dtype: &c.dtype,
        device: c.tensor_device.as_deref().unwrap_or(&c.device),
        requires_grad: c.grad,
        bytes: c.out_bytes,
        category: c.cat,
    };
    let mem = c.mem.map(|(kind, storage, owner, bytes)| MemoryRecord {
        kind,
        storage: storage.unwrap_or(tensor_id),
        tensor: owner.unwrap_or(tensor_id),
        bytes: bytes.unwrap_or(c.out_bytes),
        device: tensor.device,
        category: c.cat,
    });
    {
        let _span = c
            .in_span
            .then(|| session.span("layer", SpanKind::Module, None));
        session.record_op(&op);
        session.record_tensor(&tensor);
        if let Some(m) = &mem {
            session.record_memory_at(m, c.start + c.dur);
        }
        session.record_op_with_output(&op, &tensor, mem.as_ref());
    }
    let summary = session.finish().unwrap();
    let n = if mem.is_some() { 3 } else { 2 };
    assert_eq!(
        summary.counts.op + summary.counts.tensor + summary.counts.memory,
        2 * n
    );
    let text = String::from_utf8(sink.bytes()).unwrap();
    let lines: Vec<String> = text
        .lines()
        .filter(|l| {
            ["op", "tensor", "memory"]
                .iter()
                .any(|t| l.starts_with(&format!("{{\"type\":\"{t}\"")))
        })
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 2 * n as usize, "{text}");
    let (separate, combined) = lines.split_at(n as usize);
    (separate.to_vec(), combined.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn combined_lines_equal_the_separate_calls(c in case()) {
        let (separate, combined) = both(&c);
        prop_assert_eq!(separate, combined);
    }
}

#[test]
fn shared_output_golden() {
    let c = Case {
        name: "matmul".into(),
        inputs: vec![7, 8],
        out_id: 123_456_789_012,
        shape: vec![64, 128],
        dtype: "f32".into(),
        device: "cuda:0".into(),
        start: 1_000,
        dur: 250,
        in_bytes: 65_536,
        out_bytes: 32_768,
        op_cat: Some(MemoryCategory::Activation),
        flops: Some(1 << 20),
        label: None,
        tensor_id: None,
        tensor_shape: None,
        tensor_device: None,
        grad: true,
        cat: MemoryCategory::Activation,
        mem: Some((AllocKind::Alloc, None, None, None)),
        in_span: true,
    };
    let (separate, combined) = both(&c);
    assert_eq!(separate, combined);
    assert_eq!(
        combined,
        [
            r#"{"type":"op","span":1,"name":"matmul","in":[7,8],"out":[123456789012],"shape":[64,128],"dtype":"f32","dev":"cuda:0","ts":1000,"dur":250,"in_b":65536,"cat":"activation","flops":1048576}"#,
            r#"{"type":"tensor","id":123456789012,"shape":[64,128],"dtype":"f32","dev":"cuda:0","grad":true,"bytes":32768,"cat":"activation","span":1}"#,
            r#"{"type":"memory","action":"alloc","storage":123456789012,"tensor":123456789012,"bytes":32768,"dev":"cuda:0","cat":"activation","span":1,"ts":1250}"#,
        ]
    );
}

#[test]
fn lines_stay_adjacent_when_threads_contend() {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 20_000;
    let (session, sink) = TraceSession::in_memory(Run::new("tests::combined", Phase::Train, "cpu"));
    let session = std::sync::Arc::new(session);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let session = std::sync::Arc::clone(&session);
            std::thread::spawn(move || {
                let _span = session.span("worker", SpanKind::Function, None);
                for i in 0..PER_THREAD {
                    let id = t * PER_THREAD + i;
                    let outputs = [id];
                    let cat = MemoryCategory::Activation;
                    session.record_op_with_output(
                        &OpRecord {
                            name: "op",
                            inputs: &[t],
                            outputs: &outputs,
                            shape: &[2],
                            dtype: "f32",
                            device: "cpu",
                            start_ns: i,
                            dur_ns: 1,
                            in_bytes: 8,
                            out_bytes: 8,
                            category: Some(cat),
                            flops: None,
                        },
                        &TensorRecord {
                            id,
                            label: None,
                            shape: &[2],
                            dtype: "f32",
                            device: "cpu",
                            requires_grad: false,
                            bytes: 8,
                            category: cat,
                        },
                        Some(&MemoryRecord {
                            kind: AllocKind::Alloc,
                            storage: id,
                            tensor: id,
                            bytes: 8,
                            device: "cpu",
                            category: cat,
                        }),
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let summary = session.finish().unwrap();
    assert_eq!(summary.counts.memory, THREADS * PER_THREAD);
    let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    assert!(trace_record::validate(&trace).is_empty());
    let events: Vec<&Event> = trace.events.iter().map(|e| &e.event).collect();
    let mut seen = vec![false; (THREADS * PER_THREAD) as usize];
    for (i, e) in events.iter().enumerate() {
        let Event::Op(op) = e else { continue };
        let id = op.outputs[0];
        match (events.get(i + 1), events.get(i + 2)) {
            (Some(Event::Tensor(t)), Some(Event::Memory(m))) => {
                assert_eq!(
                    (t.id, m.storage, t.span, m.span),
                    (id, id, op.span, op.span)
                );
            }
            other => panic!("op {id} not followed by its tensor and alloc: {other:?}"),
        }
        assert!(
            !std::mem::replace(&mut seen[id as usize], true),
            "op {id} twice"
        );
    }
    assert!(seen.iter().all(|&s| s), "an op is missing");
}
