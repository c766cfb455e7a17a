//! Worker threads allocating while the driving thread's span is open are attributed to it.

#[global_allocator]
static ALLOC: trace_heap::TrackingAlloc = trace_heap::TrackingAlloc::system();

use std::sync::Arc;

use trace_heap::HeapConfig;
use trace_record::schema::{Event, ExecStep, Phase, SpanKind};
use trace_record::{Run, TraceSession};

#[test]
fn worker_allocations_are_attributed_to_the_driving_threads_span() {
    let (session, sink) = TraceSession::in_memory(Run::new("threads", Phase::Infer, "cpu"));
    let session = Arc::new(session);
    trace_heap::start(&session, HeapConfig::default()).expect("start");
    let span_id;
    {
        let g = session.span("matmul", SpanKind::Op, Some(ExecStep::Forward));
        span_id = g.id().expect("written");
        trace_sampler::set_scope(Some(ExecStep::Forward), Some(span_id));
        std::thread::scope(|s| {
            for w in 0..4usize {
                s.spawn(move || {
                    // Each worker's sizes are its own: 200_000 + 1000 w + i.
                    for i in 0..25usize {
                        let v =
                            std::hint::black_box(Vec::<u8>::with_capacity(200_000 + 1000 * w + i));
                        drop(v);
                    }
                });
            }
        });
    }
    trace_sampler::set_scope(None, None);
    trace_heap::stop(&session).expect("was tracking");
    session.finish().expect("finish");
    // A tracker whose session finished without `stop` makes way for the next one.
    let (other, _sink) = TraceSession::in_memory(Run::new("next", Phase::Infer, "cpu"));
    let other = Arc::new(other);
    trace_heap::start(&other, HeapConfig::default()).expect("start");
    other.finish().expect("finish");
    let (third, _sink) = TraceSession::in_memory(Run::new("third", Phase::Infer, "cpu"));
    let third = Arc::new(third);
    trace_heap::start(&third, HeapConfig::default()).expect("the finished one made way");
    assert!(
        trace_heap::stop(&other).is_none(),
        "not the running tracker's session"
    );
    assert!(trace_heap::stop(&third).is_some());

    let trace = trace_record::read_trace_bytes(&sink.bytes()).expect("read");
    assert!(trace_record::validate(&trace).is_empty());
    let mut threads = std::collections::HashSet::new();
    let mut seen = 0;
    let mut freed = std::collections::HashSet::new();
    for e in trace.events.iter().map(|e| &e.event) {
        if let Event::HeapFree(f) = e {
            freed.insert(f.id);
        }
    }
    for e in trace.events.iter().map(|e| &e.event) {
        if let Event::HeapAlloc(a) = e
            && (200_000..204_000).contains(&a.bytes)
            && (a.bytes - 200_000) % 1000 < 25
        {
            seen += 1;
            assert_eq!(a.span, Some(span_id.0), "{a:?}");
            assert_eq!(a.phase, Some(ExecStep::Forward), "{a:?}");
            assert!(freed.contains(&a.id), "{a:?} freed");
            threads.insert((a.bytes - 200_000) / 1000 * 1_000_000 + a.thread);
        }
    }
    assert_eq!(seen, 100);
    // Four workers, each on a thread of its own, none the driving thread's number.
    let by_worker: std::collections::HashSet<u64> = threads.iter().map(|t| t / 1_000_000).collect();
    assert_eq!(by_worker.len(), 4);
    let thread_nos: std::collections::HashSet<u64> =
        threads.iter().map(|t| t % 1_000_000).collect();
    assert_eq!(thread_nos.len(), 4);
}
