//! 8 threads × 100,000 events into one session: every event exactly once, every line JSON.

use std::sync::Arc;

use trace_record::schema::{Event, SpanKind};
use trace_record::{OpRecord, ReadOptions, TraceReader, TraceSession};

use crate::common::run;

const THREADS: u64 = 8;
const PER_THREAD: u64 = 100_000;

#[test]
fn eight_threads_every_event_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("threads.jsonl");
    let session = Arc::new(TraceSession::open(&path, run()).unwrap());
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let session = Arc::clone(&session);
            std::thread::spawn(move || {
                let _span = session.span("worker", SpanKind::Function, None);
                for i in 0..PER_THREAD {
                    // Each event names its (thread, index) in its inputs.
                    session.record_op(&OpRecord {
                        name: "op",
                        inputs: &[t, i],
                        outputs: &[],
                        shape: &[],
                        dtype: "f32",
                        device: "cpu",
                        start_ns: i,
                        dur_ns: 0,
                        in_bytes: 0,
                        out_bytes: 0,
                        category: None,
                        flops: None,
                    });
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let summary = session.finish().unwrap();
    assert_eq!(summary.counts.op, THREADS * PER_THREAD);
    assert_eq!(summary.dropped, 0);

    // Every line is one complete JSON value (no interleaving).
    let bytes = std::fs::read(&path).unwrap();
    let mut lines = 0u64;
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(line) {
            panic!("line {} is not JSON: {e}", lines + 1);
        }
        lines += 1;
    }
    assert_eq!(lines, 1 + THREADS * PER_THREAD + 2 * THREADS + 1);

    let mut seen = vec![false; (THREADS * PER_THREAD) as usize];
    let mut reader = TraceReader::open(&path, ReadOptions::strict()).unwrap();
    let mut spans = 0;
    while let Some(e) = reader.next_event().unwrap() {
        match e.event {
            Event::Op(op) => {
                let [t, i] = op.inputs[..] else {
                    panic!("line {}: {:?}", e.line, op.inputs)
                };
                let slot = &mut seen[(t * PER_THREAD + i) as usize];
                assert!(!*slot, "event ({t}, {i}) twice");
                *slot = true;
                assert!(op.span.is_some());
            }
            Event::SpanStart(_) | Event::SpanEnd(_) => spans += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(!reader.is_incomplete());
    assert_eq!(spans, 2 * THREADS);
    assert!(seen.iter().all(|&s| s), "missing events");
}
