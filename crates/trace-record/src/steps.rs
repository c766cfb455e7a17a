//! Which steps a trace has: the one rule every reader of a trace numbers and bounds steps by.
//!
//! A session is in step 0 until its first `step()` call; every call writes a `step` event
//! for the step it opens (when the schedule records it). Readers of a trace (the analyses,
//! the exports, `tracegraph`'s commands) number steps the same way, by this rule:
//!
//! - **Step 0** is everything before the first `step` event: it begins at the first timed
//!   event before that boundary. It is a step like any other (the first iteration of a loop
//!   that calls `step()` at its end, a generation's prefill).
//! - **Every `step` event** begins the step of its index.
//! - **A step ends** at the next boundary when the next step is the next index (and does not
//!   begin earlier), else at the last time seen in it: steps the schedule did not record are
//!   a gap, not part of the step before them.
//! - **A first or last step in which no work ran is not a step.** Work is an op or a span
//!   start ([`is_step_work`]); frees, memory and device samples, counters, markers, gradient
//!   facts and sampled stacks are not. This drops the boundary a loop's last `step()` opens
//!   (`step()` at the end of each iteration: what `finish()` writes after it — frees, the
//!   last memory sample — does not make it a step) and the step 0 that a loop's first
//!   `step()` closes (`step()` at the start of each iteration: setup only). An empty step
//!   between two steps (a recorded step in which nothing was captured) stays a step.
//!
//! [`StepTracker`] applies the rule to a stream of events with O(1) state, so a streaming
//! exporter and a loader that keeps everything agree on every step's number and bounds.

use crate::schema::Event;

/// True when `event` makes the step it is in a step: an op or the start of a span.
pub fn is_step_work(event: &Event) -> bool {
    matches!(event, Event::Op(_) | Event::SpanStart(_))
}

/// Whether the time of `event` extends the step it is in, and to when: an op's end, the time
/// of spans, memory, device memory, gradients, markers and counters. `step` events (they
/// begin a step), tensors, sampled stacks and the sampler's account (written when a step is
/// done, about the time it took) and tracked-heap lines (written in batches by the tracker's
/// thread, possibly after the step ended) do not.
pub fn step_time_ns(event: &Event) -> Option<u64> {
    match event {
        Event::Op(o) => Some(o.ts.saturating_add(o.dur)),
        Event::SpanStart(_)
        | Event::SpanEnd(_)
        | Event::Memory(_)
        | Event::DeviceMemory(_)
        | Event::Gradient(_)
        | Event::Marker(_)
        | Event::Counter(_) => event.ts(),
        Event::Step(_)
        | Event::Tensor(_)
        | Event::Frame(_)
        | Event::Stack(_)
        | Event::Samples(_)
        | Event::Sampler(_)
        | Event::HeapAlloc(_)
        | Event::HeapFree(_)
        | Event::HeapSmall(_)
        | Event::HeapAccount(_)
        | Event::Module(_)
        | Event::RawStack(_) => None,
    }
}

/// A step that [`StepTracker`] has seen end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClosedStep {
    /// The step's index: 0 for the events before the first `step` event, else the index of
    /// the `step` event that began it.
    pub index: u64,
    /// When it began, ns since the session's start.
    pub start_ns: u64,
    /// When it ended (see the module documentation), never before `start_ns`.
    pub end_ns: u64,
    /// Whether an op ran or a span started in it.
    pub has_work: bool,
    /// Whether it is a step by the rule: it has work, or it is neither the first nor the
    /// last step of the trace.
    pub is_step: bool,
}

/// The step open in a [`StepTracker`].
#[derive(Debug, Clone, Copy)]
struct Open {
    index: u64,
    start_ns: u64,
    last_ns: u64,
    has_work: bool,
}

/// Applies the step rule (see the module documentation) to a trace's events in file order.
///
/// Feed every event to [`event`](Self::event); a `step` event returns the step it closed,
/// and [`finish`](Self::finish) the last one. Only a step's first or last position can make
/// an empty step not a step, and both are known when it closes, so each step is decided
/// when it ends.
///
/// ```
/// use trace_record::StepTracker;
/// use trace_record::schema::Event;
///
/// let ev = |line: &str| serde_json::from_str::<Event>(line).unwrap();
/// let op = |ts: u64| ev(&format!(r#"{{"type":"op","name":"a","dtype":"f32","ts":{ts},"dur":5}}"#));
/// let step = |index: u64, ts: u64| ev(&format!(r#"{{"type":"step","index":{index},"ts":{ts}}}"#));
/// let mut steps = StepTracker::new();
/// assert_eq!(steps.event(&op(10)), None); // step 0: everything before the first boundary
/// assert_eq!(steps.current(), Some(0));
/// let s0 = steps.event(&step(1, 100)).unwrap();
/// assert_eq!((s0.index, s0.start_ns, s0.end_ns, s0.is_step), (0, 10, 100, true));
/// steps.event(&op(110));
/// let s1 = steps.event(&step(2, 200)).unwrap();
/// assert!(s1.is_step);
/// // The boundary a loop's last `step()` opens: nothing ran in it.
/// let last = steps.finish().unwrap();
/// assert_eq!((last.index, last.has_work, last.is_step), (2, false, false));
/// ```
#[derive(Debug, Clone, Default)]
pub struct StepTracker {
    open: Option<Open>,
    /// A step has been closed: the open one is not the first.
    closed_any: bool,
    /// A `step` event was read: later events never open the implicit step 0.
    seen_boundary: bool,
}

impl StepTracker {
    /// A tracker before the first event.
    pub fn new() -> Self {
        Self::default()
    }

    /// The index of the step the next event belongs to, when one is open: 0 from the first
    /// timed event before the first `step` event, then the last `step` event's index.
    pub fn current(&self) -> Option<u64> {
        self.open.map(|o| o.index)
    }

    /// Reads the next event; returns the step a `step` event ends, if one was open.
    pub fn event(&mut self, event: &Event) -> Option<ClosedStep> {
        if let Event::Step(s) = event {
            let closed = self.close(Some((s.index, s.ts)));
            self.seen_boundary = true;
            self.open = Some(Open {
                index: s.index,
                start_ns: s.ts,
                last_ns: s.ts,
                has_work: false,
            });
            return closed;
        }
        if self.open.is_none()
            && !self.seen_boundary
            && let Some(ts) = event.ts()
        {
            self.open = Some(Open {
                index: 0,
                start_ns: ts,
                last_ns: ts,
                has_work: false,
            });
        }
        if let Some(o) = &mut self.open {
            o.has_work |= is_step_work(event);
            if let Some(t) = step_time_ns(event) {
                o.last_ns = o.last_ns.max(t);
            }
        }
        None
    }

    /// Ends the trace: returns its last step, if one is open.
    pub fn finish(&mut self) -> Option<ClosedStep> {
        self.close(None)
    }

    fn close(&mut self, next: Option<(u64, u64)>) -> Option<ClosedStep> {
        let o = self.open.take()?;
        let first = !self.closed_any;
        self.closed_any = true;
        let end_ns = match next {
            Some((index, ts)) if o.index.checked_add(1) == Some(index) && ts >= o.start_ns => ts,
            _ => o.last_ns.max(o.start_ns),
        };
        Some(ClosedStep {
            index: o.index,
            start_ns: o.start_ns,
            end_ns,
            has_work: o.has_work,
            is_step: o.has_work || !(first || next.is_none()),
        })
    }
}
