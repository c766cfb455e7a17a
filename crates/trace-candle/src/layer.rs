//! [`TraceLayer`] (feature `tracing`): a `tracing_subscriber::Layer` that turns `tracing` spans
//! into trace spans.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use trace_record::schema::SpanKind;
use trace_record::{SpanGuard, TraceSession};
use tracing::Subscriber;
use tracing::span::Id;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::capture::current_exec_step;

static NEXT_LAYER: AtomicU64 = AtomicU64::new(1);

struct Open {
    layer: u64,
    span: u64,
    _guard: SpanGuard<'static>,
}

thread_local! {
    static OPEN: RefCell<Vec<Open>> = const { RefCell::new(Vec::new()) };
}

/// A `tracing_subscriber::Layer` that turns `tracing` spans into trace spans, so existing
/// instrumentation (candle-transformers opens one span per linear, attention, embedding, …)
/// lands in the trace.
///
/// Each time a `tracing` span is entered on a thread, [`TraceLayer`] opens a trace span with
/// the same name (kind `function` unless set with [`TraceLayer::with_kind`], tagged with the
/// thread's execution step); when it is exited, the trace span ends. Nesting follows the
/// enter/exit order on each thread, which is also the parent stack [`crate::Capture`] records
/// into, so ops recorded inside a `tracing` span land in its trace span.
///
/// The layer composes with other layers, e.g. `tracing-chrome`, in one subscriber:
///
/// ```
/// use std::sync::Arc;
/// use tracing_subscriber::layer::SubscriberExt;
/// use trace_candle::{Phase, Run, TraceLayer, TraceSession};
///
/// let (session, _sink) = TraceSession::in_memory(Run::new("doc", Phase::Infer, "cpu"));
/// let session = Arc::new(session);
/// let subscriber = tracing_subscriber::registry().with(TraceLayer::from_arc(Arc::clone(&session)));
/// tracing::subscriber::with_default(subscriber, || {
///     let _outer = tracing::info_span!("attention").entered();
///     let _inner = tracing::info_span!("linear").entered();
/// });
/// assert_eq!(session.finish().unwrap().counts.span_start, 2);
/// ```
///
/// trace-record's span guards borrow their session and end on the thread that opened them,
/// so the layer holds a `&'static TraceSession`: pass one from a `static`, or use
/// [`TraceLayer::from_arc`], which keeps the session alive for the rest of the process (a
/// subscriber usually lives that long). Call `finish()` on the session when the run ends;
/// a session that is never dropped writes its trailer only then.
#[derive(Debug, Clone)]
pub struct TraceLayer {
    session: &'static TraceSession,
    kind: SpanKind,
    id: u64,
}

impl TraceLayer {
    /// A layer recording into a session that lives for the rest of the process.
    pub fn new(session: &'static TraceSession) -> Self {
        TraceLayer {
            session,
            kind: SpanKind::Function,
            id: NEXT_LAYER.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// A layer recording into a shared session; one reference to it is kept for the rest of
    /// the process, so the session is never dropped: finish it explicitly.
    pub fn from_arc(session: Arc<TraceSession>) -> Self {
        let leaked: &'static Arc<TraceSession> = Box::leak(Box::new(session));
        Self::new(leaked)
    }

    /// The kind of the trace spans (default `function`; `module` suits model instrumentation).
    pub fn with_kind(mut self, kind: SpanKind) -> Self {
        self.kind = kind;
        self
    }
}

impl<S> tracing_subscriber::Layer<S> for TraceLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(meta) = ctx.metadata(id) else {
            return;
        };
        let guard = self
            .session
            .span(meta.name(), self.kind, current_exec_step());
        OPEN.with(|open| {
            open.borrow_mut().push(Open {
                layer: self.id,
                span: id.into_u64(),
                _guard: guard,
            });
        });
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        let span = id.into_u64();
        let closed = OPEN.with(|open| {
            let mut open = open.borrow_mut();
            open.iter()
                .rposition(|o| o.layer == self.id && o.span == span)
                .map(|pos| open.remove(pos))
        });
        // Dropping the guard (outside the borrow) writes `span_end`.
        drop(closed);
    }
}
