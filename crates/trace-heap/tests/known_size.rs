//! Allocations of chosen sizes inside spans: every byte is attributed to its span, every free
//! matched, the small ones counted exactly; the trace validates.

#[global_allocator]
static ALLOC: trace_heap::TrackingAlloc = trace_heap::TrackingAlloc::system();

use std::sync::Arc;

use trace_heap::{HeapConfig, HeapError};
use trace_record::schema::{Event, ExecStep, Phase, SpanKind};
use trace_record::{Run, SpanGuard, TraceSession};

/// Opens a span and publishes it as the current scope, as trace-candle's recorder does.
fn span<'a>(s: &'a TraceSession, name: &str, phase: Option<ExecStep>) -> SpanGuard<'a> {
    let g = s.span(name, SpanKind::Function, phase);
    trace_sampler::set_scope(phase, g.id());
    g
}

/// One test per binary: the allocator and the tracker are the process's.
#[test]
fn chosen_sizes_are_attributed_to_their_spans_and_frees_matched() {
    let (session, sink) = TraceSession::in_memory(Run::new("known", Phase::Train, "cpu"));
    let session = Arc::new(session);
    trace_heap::start(&session, HeapConfig::threshold(4096)).expect("start");
    assert!(trace_heap::is_tracking());
    assert!(trace_sampler::is_sampling(), "the tracker asks for scopes");
    assert!(matches!(
        trace_heap::start(&session, HeapConfig::default()),
        Err(HeapError::Busy)
    ));
    // Room for the small blocks, made before any span opens.
    let mut small: Vec<Vec<u8>> = Vec::with_capacity(100);
    let (fwd_id, inner_id, kept);
    {
        let fwd = span(&session, "forward", Some(ExecStep::Forward));
        fwd_id = fwd.id().expect("written");
        let temp = std::hint::black_box(Vec::<u8>::with_capacity(40_961));
        kept = std::hint::black_box(Vec::<u8>::with_capacity(123_457));
        drop(temp);
        {
            let inner = span(&session, "inner", None);
            inner_id = inner.id().expect("written");
            trace_sampler::set_scope(Some(ExecStep::Forward), Some(inner_id));
            let big = std::hint::black_box(vec![1u8; 1_000_003]);
            for _ in 0..100 {
                small.push(std::hint::black_box(Vec::with_capacity(1000)));
            }
            drop(big);
        }
        trace_sampler::set_scope(Some(ExecStep::Forward), Some(fwd_id));
    }
    trace_sampler::set_scope(None, None);
    let stats = trace_heap::stop(&session).expect("was tracking");
    assert!(!trace_heap::is_tracking());
    assert!(!trace_sampler::is_sampling());
    drop(small);
    drop(kept);
    session.finish().expect("finish");

    let trace = trace_record::read_trace_bytes(&sink.bytes()).expect("read");
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "{issues:?}");
    let (fwd_id, inner_id) = (fwd_id.0, inner_id.0);
    let mut allocs = std::collections::HashMap::new();
    let mut freed = std::collections::HashSet::new();
    let mut small_in_inner = None;
    let mut accounts = 0;
    for e in trace.events.iter().map(|e| &e.event) {
        match e {
            Event::HeapAlloc(a) => {
                allocs.insert(a.id, a.clone());
            }
            Event::HeapFree(f) => {
                assert!(freed.insert(f.id));
            }
            Event::HeapSmall(s) if s.span == Some(inner_id) => {
                assert!(small_in_inner.replace((s.count, s.bytes)).is_none());
                assert_eq!(s.phase, Some(ExecStep::Forward));
            }
            Event::HeapAccount(a) => {
                accounts += 1;
                assert_eq!(a.threshold, 4096);
                assert_eq!(a.lost, 0);
            }
            _ => {}
        }
    }
    assert_eq!(accounts, 1);
    // Each chosen size: one allocation, in its span and phase, freed or not as it was.
    for (bytes, span, was_freed) in [
        (40_961, fwd_id, true),
        (123_457, fwd_id, false),
        (1_000_003, inner_id, true),
    ] {
        let found: Vec<_> = allocs.values().filter(|a| a.bytes == bytes).collect();
        assert_eq!(found.len(), 1, "{bytes} B: {found:?}");
        let a = found[0];
        assert_eq!(a.span, Some(span), "{bytes} B");
        assert_eq!(a.phase, Some(ExecStep::Forward), "{bytes} B");
        assert_eq!(freed.contains(&a.id), was_freed, "{bytes} B");
    }
    // Exactly the 100 blocks of 1000 bytes, counted in the inner span (nothing else
    // allocates below the threshold there).
    assert_eq!(small_in_inner, Some((100, 100_000)));
    assert_eq!(stats.allocs, allocs.len() as u64);
    assert_eq!(stats.frees, freed.len() as u64);
    assert_eq!(stats.unwritten, 0);
}
