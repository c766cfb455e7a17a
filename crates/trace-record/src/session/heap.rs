//! Tracked-heap lines (schema version 2) written by a heap tracker's own thread.

use crate::encode;
use crate::schema::Event;

use super::TraceSession;

impl TraceSession {
    /// Writes tracked-heap events (`heap_alloc`, `heap_free`, `heap_small`, `heap_account`;
    /// any other event is ignored) as adjacent lines, in order, and returns how many were
    /// written.
    ///
    /// Like [`TraceSession::record_sampled`] these are written outside an active window too:
    /// a tracker drains its buffer after the fact, when the schedule may already have switched
    /// recording off. Nothing is written after `finish`. Meant for a tracker's own thread (a
    /// batch every few milliseconds), not for a hot path: it allocates.
    ///
    /// ```
    /// use trace_record::{Run, TraceSession};
    /// use trace_record::schema::{Event, HeapAllocEvent, HeapFreeEvent, Phase};
    ///
    /// let (session, sink) = TraceSession::in_memory(Run::new("doc::heap", Phase::Infer, "cpu"));
    /// let written = session.record_heap(&[
    ///     Event::HeapAlloc(HeapAllocEvent { id: 1, bytes: 8192, thread: 1, ts: 10, phase: None, span: None }),
    ///     Event::HeapFree(HeapFreeEvent { id: 1, ts: 20 }),
    /// ]);
    /// assert_eq!(written, 2);
    /// let summary = session.finish().unwrap();
    /// assert_eq!((summary.counts.heap_alloc, summary.counts.heap_free), (1, 1));
    /// let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    /// assert!(trace_record::validate(&trace).is_empty());
    /// ```
    pub fn record_heap(&self, events: &[Event]) -> usize {
        if self.finished.load(std::sync::atomic::Ordering::Relaxed) {
            return 0;
        }
        let heap = |e: &&Event| {
            matches!(
                e,
                Event::HeapAlloc(_)
                    | Event::HeapFree(_)
                    | Event::HeapSmall(_)
                    | Event::HeapAccount(_)
            )
        };
        let types: Vec<_> = events.iter().filter(heap).map(Event::event_type).collect();
        if types.is_empty() {
            return 0;
        }
        self.emit_lines(&types, |b| {
            for e in events.iter().filter(heap) {
                encode::heap(b, e);
            }
        });
        types.len()
    }

    /// Whether the session has finished (its trailer is written; nothing more is recorded).
    /// A background recorder (a heap tracker's thread) stops when it sees this.
    pub fn is_finished(&self) -> bool {
        self.finished.load(std::sync::atomic::Ordering::Relaxed)
    }
}
