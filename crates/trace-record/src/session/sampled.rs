//! Sampled-stack lines (schema version 2) written by a CPU sampler's own thread.

use crate::encode;
use crate::schema::Event;

use super::TraceSession;

impl TraceSession {
    /// Writes sampled-stack events (`frame`, `stack`, `samples`, `sampler`, `module`,
    /// `raw_stack`; any other event is ignored) as adjacent lines, in order, and returns how many were written.
    ///
    /// Unlike the other records these are written outside an active window too: a sampler
    /// accounts for a recorded step after it ended, when the schedule may already have
    /// switched recording off. Nothing is written after `finish`. Meant for a sampler's own
    /// thread (a few calls per step), not for a hot path: it allocates.
    ///
    /// ```
    /// use trace_record::{Run, TraceSession};
    /// use trace_record::schema::{Event, FrameEvent, Phase, SamplerEvent, SamplesEvent, StackEvent};
    ///
    /// let (session, sink) = TraceSession::in_memory(Run::new("doc::sampled", Phase::Train, "cpu"));
    /// let frame = |id, func: &str| Event::Frame(FrameEvent { id, func: func.into(), file: None, inlined: false });
    /// let written = session.record_sampled(&[
    ///     frame(1, "main"),
    ///     frame(2, "gemm::gemm"),
    ///     Event::Stack(StackEvent { id: 1, frames: vec![1, 2] }),
    ///     Event::Samples(SamplesEvent { step: 0, thread: 7, stack: 1, n: 3, phase: None, span: None }),
    ///     Event::Sampler(SamplerEvent { step: 0, hz: 1000, taken: 3, lost: 0, cpu_ns: None, sampler_cpu_ns: None, ts: 0, dur: 3_000_000, source: None }),
    /// ]);
    /// assert_eq!(written, 5);
    /// let summary = session.finish().unwrap();
    /// assert_eq!((summary.counts.frame, summary.counts.samples), (2, 1));
    /// let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    /// assert!(trace_record::validate(&trace).is_empty());
    /// ```
    pub fn record_sampled(&self, events: &[Event]) -> usize {
        if self.finished.load(std::sync::atomic::Ordering::Relaxed) {
            return 0;
        }
        let sampled = |e: &&Event| {
            matches!(
                e,
                Event::Frame(_)
                    | Event::Stack(_)
                    | Event::Samples(_)
                    | Event::Sampler(_)
                    | Event::Module(_)
                    | Event::RawStack(_)
            )
        };
        let types: Vec<_> = events
            .iter()
            .filter(sampled)
            .map(Event::event_type)
            .collect();
        if types.is_empty() {
            return 0;
        }
        let mut out = super::output::lock(&self.out);
        if let Some(f) = out.flight.as_mut() {
            // A flight recorder keeps the interned lines for the whole run, beside the ring.
            let interned = |e: &&Event| {
                matches!(
                    e,
                    Event::Frame(_) | Event::Stack(_) | Event::Module(_) | Event::RawStack(_)
                )
            };
            for e in events.iter().filter(interned) {
                encode::sampled(&mut f.interned, e);
            }
            let rest: Vec<_> = events
                .iter()
                .filter(sampled)
                .filter(|e| !interned(e))
                .collect();
            for e in events.iter().filter(interned) {
                let t = e.event_type();
                out.appended.add(t, 1);
                out.counts.add(t, 1);
            }
            let rest_types: Vec<_> = rest.iter().map(|e| e.event_type()).collect();
            out.append_lines(&rest_types, |b| {
                for e in &rest {
                    encode::sampled(b, e);
                }
            });
            return types.len();
        }
        drop(out);
        self.emit_lines(&types, |b| {
            for e in events.iter().filter(sampled) {
                encode::sampled(b, e);
            }
        });
        types.len()
    }
}
