//! `tracegraph memory` on a trace with tracked-heap lines: the "heap (tracked)" section and
//! the `heap` object of `--json`, apart from the logical bytes.

use trace_record::schema::{
    AllocKind, Event, ExecStep, HeapAllocEvent, HeapFreeEvent, MemoryCategory, Phase, SpanKind,
};
use trace_record::{MemoryRecord, Run, TraceSession};

use super::{run_in, stdout};

/// A forward span holding an attention span that makes three 2 MiB score tensors (one freed
/// inside it), with one logical allocation beside.
fn write_trace(dir: &std::path::Path) {
    let path = dir.join("heap.jsonl");
    let s = TraceSession::open(&path, Run::new("cli::heap", Phase::Infer, "cpu")).unwrap();
    let alloc = |id, bytes, span: Option<trace_record::SpanId>| {
        Event::HeapAlloc(HeapAllocEvent {
            id,
            bytes,
            thread: 1,
            ts: s.now_ns(),
            phase: Some(ExecStep::Forward),
            span: span.map(|x| x.0),
        })
    };
    {
        let fwd = s.span("forward", SpanKind::Function, Some(ExecStep::Forward));
        s.record_memory(&MemoryRecord {
            kind: AllocKind::Alloc,
            storage: 1,
            tensor: 1,
            bytes: 4096,
            device: "cpu",
            category: MemoryCategory::Activation,
        });
        {
            let attn = s.span("self-attn", SpanKind::Module, None);
            s.record_heap(&[
                alloc(1, 2 << 20, attn.id()),
                alloc(2, 2 << 20, attn.id()),
                alloc(3, 2 << 20, attn.id()),
                alloc(4, 8192, fwd.id()),
            ]);
            s.record_heap(&[Event::HeapFree(HeapFreeEvent {
                id: 1,
                ts: s.now_ns(),
            })]);
        }
        s.record_heap(&[2, 3, 4].map(|id| Event::HeapFree(HeapFreeEvent { id, ts: s.now_ns() })));
    }
    s.finish().unwrap();
}

#[test]
fn memory_shows_the_tracked_heap_apart_from_logical_bytes() {
    let dir = tempfile::tempdir().unwrap();
    write_trace(dir.path());
    let out = run_in(dir.path(), &["memory", "heap.jsonl"]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("logical bytes"), "{text}");
    assert!(text.contains("heap (tracked)"), "{text}");
    assert!(text.contains("never summed with logical bytes"), "{text}");
    assert!(text.contains("peak 6.01 MiB"), "{text}");
    assert!(text.contains("forward/self-attn"), "{text}");
    assert!(text.contains("2.00 MiB (2097152 B) x3"), "{text}");

    let out = run_in(dir.path(), &["memory", "heap.jsonl", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "tracegraph.memory/1");
    let heap = &v["heap"];
    assert_eq!(heap["peak_bytes"], 3 * (2u64 << 20) + 8192);
    assert_eq!(heap["peak_by_span"][0]["path"], "forward/self-attn");
    assert_eq!(
        heap["peak_by_span"][0]["allocations"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(heap["spans"][0]["temporary_bytes"], 2u64 << 20);
    // The logical report is there beside it, its own figures unchanged.
    assert!(v["devices"].is_array(), "{v}");

    // `spans` puts the heap bytes per path beside the logical ones.
    let out = run_in(dir.path(), &["spans", "heap.jsonl"]);
    let text = stdout(&out);
    assert!(text.contains("allocated (logical)"), "{text}");
    assert!(text.contains("allocated (heap)"), "{text}");
    let attn = text
        .lines()
        .find(|l| l.trim_start().starts_with("self-attn"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(attn.trim_end().ends_with("6.00 MiB"), "{attn}");
    let out = run_in(dir.path(), &["spans", "heap.jsonl", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let nodes = v["nodes"].as_array().unwrap();
    let attn = nodes.iter().find(|n| n["name"] == "self-attn").unwrap();
    assert_eq!(attn["heap_alloc_bytes"], 3 * (2u64 << 20));
}
