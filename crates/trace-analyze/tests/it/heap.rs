//! The tracked-heap analysis: hand-computed peak, what was live there by span path,
//! temporaries and activations, per step; hostile lines are counted, never trusted.

use trace_analyze::{NO_SPAN, heap_report, load_str};
use trace_record::schema::{
    Event, ExecStep, HeapAccountEvent, HeapAllocEvent, HeapFreeEvent, HeapSmallEvent, Phase,
    SpanKind,
};
use trace_record::{Run, SpanId, TraceSession};

fn alloc(s: &TraceSession, id: u64, bytes: u64, span: Option<SpanId>) -> Event {
    Event::HeapAlloc(HeapAllocEvent {
        id,
        bytes,
        thread: 1,
        ts: s.now_ns(),
        phase: Some(ExecStep::Forward),
        span: span.map(|s| s.0),
    })
}

fn free(s: &TraceSession, id: u64) -> Event {
    Event::HeapFree(HeapFreeEvent { id, ts: s.now_ns() })
}

fn load(session: TraceSession, sink: trace_record::MemorySink) -> trace_analyze::Trace {
    session.finish().unwrap();
    let text = String::from_utf8(sink.bytes()).unwrap();
    load_str(&text, "heap.jsonl", Default::default()).unwrap()
}

#[test]
fn the_peak_names_what_was_live_by_span_and_temporaries_are_told_from_activations() {
    let (s, sink) = TraceSession::in_memory(Run::new("heap", Phase::Infer, "cpu"));
    let attn_id;
    {
        let layer = s.span("layer", SpanKind::Module, Some(ExecStep::Forward));
        s.record_heap(&[alloc(&s, 1, 1000, layer.id())]);
        {
            let attn = s.span("attn", SpanKind::Module, None);
            attn_id = attn.id();
            s.record_heap(&[alloc(&s, 2, 5000, attn.id()), alloc(&s, 3, 7000, attn.id())]);
            // Freed inside the span that made it: a temporary.
            s.record_heap(&[free(&s, 2)]);
            s.record_heap(&[alloc(&s, 4, 2000, attn.id())]);
        }
        // Freed after its span ended: it outlived the span (an activation).
        s.record_heap(&[free(&s, 3), free(&s, 4)]);
    }
    s.record_heap(&[alloc(&s, 5, 300, None)]);
    s.record_heap(&[
        Event::HeapSmall(HeapSmallEvent {
            step: 0,
            phase: Some(ExecStep::Forward),
            span: attn_id.map(|i| i.0),
            count: 3,
            bytes: 300,
        }),
        Event::HeapAccount(HeapAccountEvent {
            step: 0,
            threshold: 256,
            lost: 0,
            unmatched_frees: 2,
            ts: 0,
            dur: s.now_ns(),
        }),
    ]);
    let trace = load(s, sink);
    assert!(trace.issues.is_empty(), "{:?}", trace.issues);
    let r = heap_report(&trace).expect("heap lines");
    assert_eq!((r.allocs, r.alloc_bytes), (5, 15_300));
    assert_eq!((r.frees, r.freed_bytes), (3, 14_000));
    // 1000 + 5000 + 7000 live at once, before the 5000 is freed.
    assert_eq!(r.peak_bytes, 13_000);
    assert_eq!(r.peak_live_allocations, 3);
    assert_eq!(r.live_at_end_bytes, 1300);
    assert_eq!(r.peak_by_span.len(), 2);
    assert_eq!(r.peak_by_span[0].path, "layer/attn");
    assert_eq!(r.peak_by_span[0].bytes, 12_000);
    let sizes: Vec<u64> = r.peak_by_span[0]
        .allocations
        .iter()
        .map(|a| a.bytes)
        .collect();
    assert_eq!(sizes, [7000, 5000]);
    assert_eq!(r.peak_by_span[1].path, "layer");
    assert_eq!(r.peak_by_span[1].bytes, 1000);
    let row = |p: &str| r.spans.iter().find(|x| x.path == p).unwrap().clone();
    let attn = row("layer/attn");
    assert_eq!(
        (attn.allocs, attn.alloc_bytes, attn.freed_bytes),
        (3, 14_000, 14_000)
    );
    assert_eq!((attn.temporary_bytes, attn.activation_bytes), (5000, 9000));
    assert_eq!((attn.small_allocs, attn.small_bytes), (3, 300));
    assert_eq!(attn.peak_bytes, 12_000);
    let layer = row("layer");
    assert_eq!((layer.alloc_bytes, layer.freed_bytes), (1000, 0));
    assert_eq!((layer.temporary_bytes, layer.activation_bytes), (0, 1000));
    let outside = row(NO_SPAN);
    assert_eq!(outside.activation_bytes, 300);
    assert_eq!(r.steps.len(), 1);
    let st = &r.steps[0];
    // The allocation after the last span is past the step's end (heap lines, written late,
    // do not extend a step): it is in no step.
    assert_eq!(
        (st.allocs, st.alloc_bytes, st.frees, st.freed_bytes),
        (4, 15_000, 3, 14_000)
    );
    assert_eq!(st.peak_bytes, Some(13_000));
    assert_eq!((st.small_allocs, st.small_bytes), (3, 300));
    assert_eq!(
        (r.threshold, r.unmatched_frees, r.lost, r.invalid),
        (Some(256), 2, 0, 0)
    );
    assert!(!r.saturated);
    // The timeline ends at the live bytes of the end and peaks at the peak.
    assert_eq!(r.timeline.last().map(|p| p.live_bytes), Some(1300));
    assert_eq!(r.timeline.iter().map(|p| p.live_bytes).max(), Some(13_000));
}

#[test]
fn a_trace_without_heap_lines_has_no_heap_report() {
    let (s, sink) = TraceSession::in_memory(Run::new("none", Phase::Infer, "cpu"));
    drop(s.span("x", SpanKind::Function, None));
    assert!(heap_report(&load(s, sink)).is_none());
}

#[test]
fn hostile_lines_are_counted_and_ignored_and_sums_saturate() {
    let (s, sink) = TraceSession::in_memory(Run::new("hostile", Phase::Infer, "cpu"));
    s.record_heap(&[
        free(&s, 99),
        alloc(&s, 1, u64::MAX, Some(SpanId(12345))),
        alloc(&s, 1, 10, None),
        alloc(&s, 2, u64::MAX, None),
        free(&s, 1),
        free(&s, 1),
    ]);
    let trace = load(s, sink);
    assert!(!trace.issues.is_empty(), "validation names the lines");
    let r = heap_report(&trace).expect("heap lines");
    // A free of an unknown id, an id allocated twice, a second free.
    assert_eq!(r.invalid, 3);
    assert!(r.saturated);
    assert_eq!(r.peak_bytes, u64::MAX);
    assert_eq!(r.live_at_end_bytes, u64::MAX);
    // A span the trace lacks is no span.
    assert_eq!(r.spans.len(), 1);
    assert_eq!(r.spans[0].path, NO_SPAN);
}

/// Work per line stays constant: twice the allocations (reusing ids, addresses and sizes,
/// with hostile frees mixed in) cost twice the work. Counted in the analysis's work units, not
/// timed: the count is the same on an idle and on a saturated machine.
#[test]
fn work_is_linear_in_the_heap_lines() {
    let work = |n: u64| {
        let (s, sink) = TraceSession::in_memory(Run::new("linear", Phase::Infer, "cpu"));
        let span = s.span("deep", SpanKind::Function, None);
        let mut batch = Vec::new();
        for i in 0..n {
            batch.push(alloc(&s, i, 4096 + i % 7, span.id()));
            if i % 3 == 0 {
                batch.push(free(&s, i));
                batch.push(free(&s, i));
            }
            if batch.len() > 10_000 {
                s.record_heap(&batch);
                batch.clear();
            }
        }
        s.record_heap(&batch);
        drop(span);
        let trace = load(s, sink);
        let before = trace.work.get();
        let r = heap_report(&trace).unwrap();
        assert_eq!(r.allocs, n);
        trace.work.get() - before
    };
    let a = work(50_000);
    let b = work(100_000);
    // At least a unit per line (the count is real), and no more than twice for twice the lines.
    assert!(a >= 50_000, "{a}");
    assert!(b <= 2 * a + 10, "{a} then {b}");
}
