//! The tracked-heap view of the report: present with heap lines (chart points, the peak by
//! span path, per span path), absent from the page's data without them.

use trace_analyze::{LoadOptions, load_str};
use trace_record::schema::{Event, ExecStep, HeapAllocEvent, HeapFreeEvent, Phase, SpanKind};
use trace_record::{Run, TraceSession};
use trace_report::{ReportOptions, build_report, embedded_json};

fn trace(with_heap: bool) -> trace_analyze::Trace {
    let (s, sink) = TraceSession::in_memory(Run::new("report::heap", Phase::Infer, "cpu"));
    {
        let attn = s.span("self-attn", SpanKind::Module, Some(ExecStep::Forward));
        if with_heap {
            let alloc = |id| {
                Event::HeapAlloc(HeapAllocEvent {
                    id,
                    bytes: 2 << 20,
                    thread: 1,
                    ts: s.now_ns(),
                    phase: Some(ExecStep::Forward),
                    span: attn.id().map(|x| x.0),
                })
            };
            s.record_heap(&[alloc(1), alloc(2), alloc(3)]);
            s.record_heap(&[Event::HeapFree(HeapFreeEvent {
                id: 1,
                ts: s.now_ns(),
            })]);
        }
    }
    s.finish().unwrap();
    let text = String::from_utf8(sink.bytes()).unwrap();
    load_str(&text, "heap.jsonl", LoadOptions::default()).unwrap()
}

#[test]
fn heap_lines_give_a_heap_view_and_none_leave_the_data_unchanged() {
    let data = build_report(&trace(true), None, &ReportOptions::default()).unwrap();
    let h = data.heap.as_ref().expect("heap view");
    assert_eq!(h.bytes_kind, "heap (tracked)");
    assert_eq!(h.peak["bytes"], 3 * (2u64 << 20));
    assert_eq!(h.live.iter().copied().max(), Some(3 * (2u64 << 20)));
    assert_eq!(h.t_ns.len(), h.live.len());
    assert_eq!(h.peak_by_span.rows.len(), 1);
    assert_eq!(h.peak_by_span.rows[0][0], "self-attn");
    assert_eq!(h.peak_by_span.rows[0][3], "2.00 MiB (2097152 B) ×3");
    assert_eq!(h.spans.rows[0][4], 2u64 << 20, "the temporary");
    let json: serde_json::Value = serde_json::from_str(&embedded_json(&data).unwrap()).unwrap();
    assert!(json["heap"].is_object());

    let data = build_report(&trace(false), None, &ReportOptions::default()).unwrap();
    assert!(data.heap.is_none());
    let json: serde_json::Value = serde_json::from_str(&embedded_json(&data).unwrap()).unwrap();
    assert!(
        json.get("heap").is_none(),
        "no key: the page's data as before"
    );
}
