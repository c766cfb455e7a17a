//! The thread's execution step and innermost span, published as the sampler's current scope.
//!
//! [`Capture::phase`](crate::Capture::phase) sets the thread's execution step; every span this
//! crate opens or ends (phases, op scopes that became spans,
//! [`Capture::span`](crate::Capture::span), module wrappers, the `tracing` layer's spans) then
//! publishes the step and the thread's innermost open span ([`trace_sampler::set_scope`]), so
//! that samples are attributed to it. With no sampler running that costs one relaxed load. A
//! leaf module: the capture, the op scopes and the sampler hooks all use it, and it uses none
//! of them.

use std::cell::Cell;

use trace_record::schema::ExecStep;
use trace_record::{SpanGuard, SpanId, TraceSession};

thread_local! {
    static EXEC_STEP: Cell<Option<ExecStep>> = const { Cell::new(None) };
}

/// The execution step this thread is in (set by [`Capture::phase`]), if any.
pub(crate) fn current_exec_step() -> Option<ExecStep> {
    EXEC_STEP.with(Cell::get)
}

/// Sets this thread's execution step, returning the one before.
pub(crate) fn replace_exec_step(step: Option<ExecStep>) -> Option<ExecStep> {
    EXEC_STEP.with(|c| c.replace(step))
}

/// Sets this thread's execution step (restoring an earlier one).
pub(crate) fn set_exec_step(step: Option<ExecStep>) {
    EXEC_STEP.with(|c| c.set(step));
}

/// Publishes this thread's execution step and innermost open span of `session` as the scope
/// samples are attributed to; one relaxed load when no sampler runs. Called after every span
/// start and end, so a sample taken after a child span ended names its parent.
#[inline]
pub(crate) fn publish(session: &TraceSession) {
    if trace_sampler::is_sampling() {
        publish_now(session);
    }
}

#[inline(never)]
fn publish_now(session: &TraceSession) {
    trace_sampler::set_scope(current_exec_step(), session.current_span());
}

/// An open span of a capture ([`Capture::span`](crate::Capture::span),
/// [`Capture::phase`](crate::Capture::phase), module wrappers): ends when dropped (or on
/// [`CaptureSpan::end`]), and while a sampler runs, samples taken inside it are attributed to
/// it until then, to the enclosing span after.
#[must_use = "a span ends when its guard is dropped"]
#[derive(Debug)]
pub struct CaptureSpan<'a> {
    session: &'a TraceSession,
    span: Option<SpanGuard<'a>>,
}

impl<'a> CaptureSpan<'a> {
    /// Takes over `span` (just opened in `session`) and publishes it as the current scope.
    pub(crate) fn opened(session: &'a TraceSession, span: SpanGuard<'a>) -> CaptureSpan<'a> {
        publish(session);
        CaptureSpan {
            session,
            span: Some(span),
        }
    }

    /// The span's id when it was written (opened inside an active window).
    pub fn id(&self) -> Option<SpanId> {
        self.span.as_ref().and_then(SpanGuard::id)
    }

    /// Ends the span now.
    pub fn end(self) {}
}

impl Drop for CaptureSpan<'_> {
    fn drop(&mut self) {
        drop(self.span.take());
        publish(self.session);
    }
}
