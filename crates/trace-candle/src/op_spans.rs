//! Lazily opened op spans: an op whose closure records anything nested becomes a span.
//!
//! Nested records are ops, spans and `tracing` spans; the span starts at the op's own start.
//!
//! Opening a span for every op would double the lines of a leaf op, so [`crate::Capture::op`]
//! only pushes a pending scope (its name, start and execution step) on a per-thread stack.
//! Whatever records something that must nest (another op, a span, a phase, a module call, a
//! `tracing` span) first calls [`materialize`], which opens a span of kind `op` for every
//! pending scope of that session on this thread, stamped with the op's start. When the op
//! ends, its `op` event is written inside its own span (if it got one) and the span ends.
//! While a sampler runs, an op's span is the scope samples are attributed to from the moment it
//! is opened (samples taken earlier in the op, before anything nested, name the enclosing span)
//! until it ends.

use std::cell::RefCell;

use trace_record::schema::{ExecStep, SpanKind};
use trace_record::{SpanId, TraceSession};

struct Pending {
    /// The session's address, for identity only (it outlives the op that pushed this).
    session: usize,
    /// Reused between ops: steady state allocates nothing.
    name: String,
    start_ns: u64,
    exec_step: Option<ExecStep>,
    span: Option<SpanId>,
}

#[derive(Default)]
struct Stack {
    entries: Vec<Pending>,
    len: usize,
}

thread_local! {
    static SCOPES: RefCell<Stack> = const { RefCell::new(Stack { entries: Vec::new(), len: 0 }) };
}

fn key(session: &TraceSession) -> usize {
    std::ptr::from_ref(session) as usize
}

/// Pushes a pending scope for an op of `session` that started at `start_ns`; returns its depth
/// (pass it to [`pop`]).
#[inline]
pub(crate) fn push(
    session: &TraceSession,
    name: &str,
    start_ns: u64,
    exec_step: Option<ExecStep>,
) -> usize {
    SCOPES.with(|s| {
        let mut s = s.borrow_mut();
        let depth = s.len;
        let session = key(session);
        if let Some(e) = s.entries.get_mut(depth) {
            e.session = session;
            e.name.clear();
            e.name.push_str(name);
            e.start_ns = start_ns;
            e.exec_step = exec_step;
            e.span = None;
        } else {
            s.entries.push(Pending {
                session,
                name: name.to_string(),
                start_ns,
                exec_step,
                span: None,
            });
        }
        s.len = depth + 1;
        depth
    })
}

/// Pops the scope pushed at `depth` (and any left above it by a panic); returns its span when
/// it was materialized.
#[inline]
pub(crate) fn pop(depth: usize) -> Option<SpanId> {
    SCOPES.with(|s| {
        let mut s = s.borrow_mut();
        let span = s.entries.get_mut(depth).and_then(|e| e.span.take());
        s.len = s.len.min(depth);
        span
    })
}

/// Opens a span (kind `op`, at the op's start) for every pending scope of `session` on this
/// thread that has none yet, outermost first. Cheap when nothing is pending.
#[inline]
pub(crate) fn materialize(session: &TraceSession) {
    SCOPES.with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else {
            return;
        };
        let len = s.len;
        if len == 0 {
            return;
        }
        let k = key(session);
        let mut opened = false;
        for e in &mut s.entries[..len] {
            if e.session == k && e.span.is_none() {
                e.span = session.start_span_at(&e.name, SpanKind::Op, e.exec_step, e.start_ns);
                opened |= e.span.is_some();
            }
        }
        if opened {
            crate::exec_scope::publish(session);
        }
    });
}

/// Ends the span of a scope popped while unwinding (a panic inside an op's closure).
pub(crate) struct Unwind<'a> {
    pub(crate) session: &'a TraceSession,
    pub(crate) depth: usize,
    pub(crate) armed: bool,
}

impl Drop for Unwind<'_> {
    fn drop(&mut self) {
        if self.armed
            && let Some(span) = pop(self.depth)
        {
            self.session.end_span_id(span);
            crate::exec_scope::publish(self.session);
        }
    }
}
