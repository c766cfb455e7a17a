//! [`TraceLayer`] (feature `tracing`): `tracing` spans as trace spans, and `install_tracing`.
//!
//! [`TraceLayer`] is a `tracing_subscriber::Layer` that turns `tracing` spans into trace spans;
//! [`Capture::install_tracing`] is the one call that installs the same recording, through
//! the capture's own subscriber ([`crate::CaptureSubscriber`], which shares this file's
//! per-thread span state and enter/exit path).

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use trace_record::schema::SpanKind;
use trace_record::{SpanGuard, SpanId, TraceSession};
use tracing::span::Id;
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::exec_scope::current_exec_step;
use crate::{Capture, CaptureError, op_spans};

static NEXT_LAYER: AtomicU64 = AtomicU64::new(1);

/// How many siblings of each name a parent has had so far (names are `tracing`'s static
/// callsite names).
type Siblings = Vec<(&'static str, u32)>;

struct Open {
    layer: u64,
    span: u64,
    /// The trace span it opened (`None` outside an active window).
    trace_span: Option<SpanId>,
    /// Where its children's sibling counts begin in [`Opened::counts`].
    counts_start: usize,
    _guard: SpanGuard<'static>,
}

/// Sibling counts of children of spans this layer did not open (a capture scope, a phase,
/// the root), by layer and parent trace span; a few recent parents are kept.
struct Roots {
    entries: Vec<(u64, Option<SpanId>, Siblings)>,
}

const ROOTS_KEPT: usize = 32;

/// The spans this thread has open through any layer, innermost last, and their children's
/// sibling counts in one flat list: each open span's counts run from its `counts_start` to
/// the next open span's (the innermost's to the end), so entering and exiting touch the end
/// of two vectors and allocate nothing in steady state.
struct Opened {
    open: Vec<Open>,
    counts: Siblings,
}

impl Opened {
    /// The end of the sibling counts of the open span at `pos`.
    fn counts_end(&self, pos: usize) -> usize {
        self.open
            .get(pos + 1)
            .map_or(self.counts.len(), |o| o.counts_start)
    }

    /// The next index of `name` among the children of the open span at `pos`.
    fn next_child_index(&mut self, pos: usize, name: &'static str) -> u32 {
        let (start, end) = (self.open[pos].counts_start, self.counts_end(pos));
        if let Some((_, k)) = self.counts[start..end].iter_mut().find(|(n, _)| *n == name) {
            *k += 1;
            return *k;
        }
        // A new name: at the end of this span's counts (the list's end unless spans of
        // another layer are open inside it).
        self.counts.insert(end, (name, 0));
        for o in &mut self.open[pos + 1..] {
            o.counts_start += 1;
        }
        0
    }

    /// Removes the open span at `pos` with its children's counts.
    fn remove(&mut self, pos: usize) -> Open {
        let (start, end) = (self.open[pos].counts_start, self.counts_end(pos));
        self.counts.drain(start..end);
        for o in &mut self.open[pos + 1..] {
            o.counts_start -= end - start;
        }
        self.open.remove(pos)
    }
}

thread_local! {
    static OPEN: RefCell<Opened> = const {
        RefCell::new(Opened { open: Vec::new(), counts: Vec::new() })
    };
    static ROOTS: RefCell<Roots> = const { RefCell::new(Roots { entries: Vec::new() }) };
}

/// The next index of `name` among `siblings` (0 for the first).
fn next_index(siblings: &mut Siblings, name: &'static str) -> u32 {
    if let Some((_, k)) = siblings.iter_mut().find(|(n, _)| *n == name) {
        *k += 1;
        *k
    } else {
        siblings.push((name, 0));
        0
    }
}

/// A `tracing_subscriber::Layer` that turns `tracing` spans into trace spans, so existing
/// instrumentation (candle-transformers opens one span per block, attention, MLP, linear,
/// embedding, …) lands in the trace.
///
/// Each time a `tracing` span is entered on a thread, the layer opens a trace span (kind
/// `function` unless set with [`TraceLayer::with_kind`], tagged with the thread's execution
/// step); when it is exited, the trace span ends. Nesting follows the enter/exit order on
/// each thread, which is also the parent stack [`crate::Capture`] records into, so ops
/// recorded inside a `tracing` span land in its trace span, and `tracing` spans entered inside
/// a captured op ([`Capture::op`]) nest under that op.
///
/// **Sibling names.** Repeated spans of one name under one parent are told apart by their
/// position: the trace span is named `name#k`, `k` counting that parent's earlier children
/// of the same name from 0 (the four projections of an attention block become `linear#0` …
/// `linear#3`; the blocks of a model `block#0`, `block#1`, which is each block's index).
/// [`TraceLayer::without_sibling_index`] keeps the plain names.
///
/// **Filters.** The layer asks for every span at every level (`TRACE`), whatever other
/// layers' per-layer filters do, and for no events. A *global* filter (one installed as a
/// plain layer, such as `EnvFilter` without `with_filter`, or a `max_level_*` feature of
/// `tracing`) disables spans for every layer, and spans created while no subscriber wanted
/// them (a model built before the layer was installed: candle-transformers creates its spans
/// at construction) stay disabled forever. [`Capture::install_tracing`] installs the same
/// recording (through [`crate::CaptureSubscriber`], without a registry) as the global
/// subscriber in one call; call it before building the model. The trace then
/// says how many spans the layer saw (counter [`trace_record::schema::TRACING_SPANS_COUNTER`], written by
/// [`Capture::finish`]), so a layer that saw none is reported rather than silent.
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
/// subscriber usually lives that long). Finish the session when the run ends.
#[derive(Debug, Clone)]
pub struct TraceLayer {
    session: &'static TraceSession,
    kind: SpanKind,
    id: u64,
    sibling_index: bool,
    seen: Option<Arc<AtomicU64>>,
}

impl TraceLayer {
    /// A layer recording into a session that lives for the rest of the process.
    pub fn new(session: &'static TraceSession) -> Self {
        TraceLayer {
            session,
            kind: SpanKind::Function,
            id: NEXT_LAYER.fetch_add(1, Ordering::Relaxed),
            sibling_index: true,
            seen: None,
        }
    }

    /// A layer recording into a shared session; one reference to it is kept for the rest of
    /// the process, so the session is never dropped: finish it explicitly.
    pub fn from_arc(session: Arc<TraceSession>) -> Self {
        let leaked: &'static Arc<TraceSession> = Box::leak(Box::new(session));
        Self::new(leaked)
    }

    /// A layer recording into `capture`'s session (kind `module`), whose span count
    /// [`Capture::finish`] writes into the trace. [`Capture::tracing_subscriber`] wraps one.
    pub fn for_capture(capture: &Capture) -> Self {
        let seen = Arc::new(AtomicU64::new(0));
        capture.inner().persist().layer_spans = Some(Arc::clone(&seen));
        let mut layer = Self::from_arc(Arc::clone(capture.session())).with_kind(SpanKind::Module);
        layer.seen = Some(seen);
        layer
    }

    /// The kind of the trace spans (default `function`; `module` suits model instrumentation).
    pub fn with_kind(mut self, kind: SpanKind) -> Self {
        self.kind = kind;
        self
    }

    /// Keeps `tracing`'s span names as they are, without the `#k` sibling index.
    pub fn without_sibling_index(mut self) -> Self {
        self.sibling_index = false;
        self
    }

    /// A `tracing` span (`span`, the subscriber's id of it) named `name` was entered on this
    /// thread: opens its trace span while the session is active (the layer's and
    /// [`CaptureSubscriber`](crate::CaptureSubscriber)'s shared path).
    pub(crate) fn enter_span(&self, span: u64, name: &'static str) {
        if let Some(seen) = &self.seen {
            seen.fetch_add(1, Ordering::Relaxed);
        }
        if !self.session.is_active() {
            return;
        }
        // A captured op running this span becomes its parent span first.
        op_spans::materialize(self.session);
        let step = current_exec_step();
        let guard = self
            .session
            .span_numbered_by(name, self.kind, step, |parent| {
                self.sibling_index(name, parent)
            });
        let trace_span = guard.id();
        OPEN.with(|open| {
            let mut open = open.borrow_mut();
            let counts_start = open.counts.len();
            open.open.push(Open {
                layer: self.id,
                span,
                trace_span,
                counts_start,
                _guard: guard,
            });
        });
        crate::exec_scope::publish(self.session);
    }

    /// The `tracing` span `span` was exited on this thread: ends the trace span its enter
    /// opened, if any.
    pub(crate) fn exit_span(&self, span: u64) {
        let closed = OPEN.with(|open| {
            let mut open = open.borrow_mut();
            let pos = open
                .open
                .iter()
                .rposition(|o| o.layer == self.id && o.span == span)?;
            let Open { _guard: guard, .. } = open.remove(pos);
            Some(guard)
        });
        // Dropping the guard (outside the borrow) writes `span_end`; the sampler's scope is
        // then the innermost span still open.
        if let Some(guard) = closed {
            drop(guard);
            crate::exec_scope::publish(self.session);
        }
    }

    /// The subscriber's id of the innermost `tracing` span this layer has open on this
    /// thread.
    pub(crate) fn innermost_span(&self) -> Option<u64> {
        OPEN.with(|open| {
            let open = open.borrow();
            open.open
                .iter()
                .rev()
                .find(|o| o.layer == self.id)
                .map(|o| o.span)
        })
    }

    /// The sibling index `k` of a span named `name` entered now on this thread under the
    /// trace span `parent` (its trace name is `name#k`, see the type docs), or `None` for
    /// the plain name.
    fn sibling_index(&self, name: &'static str, parent: Option<SpanId>) -> Option<u32> {
        if !self.sibling_index {
            return None;
        }
        let in_open = OPEN.with(|open| {
            let mut open = open.borrow_mut();
            let pos = open
                .open
                .iter()
                .rposition(|o| o.layer == self.id && o.trace_span.is_some())?;
            (open.open[pos].trace_span == parent).then(|| open.next_child_index(pos, name))
        });
        let k = in_open.unwrap_or_else(|| {
            ROOTS.with(|roots| {
                let mut roots = roots.borrow_mut();
                let pos = roots
                    .entries
                    .iter()
                    .position(|(l, p, _)| *l == self.id && *p == parent);
                let i = if let Some(i) = pos {
                    i
                } else {
                    if roots.entries.len() >= ROOTS_KEPT {
                        roots.entries.remove(0);
                    }
                    roots.entries.push((self.id, parent, Vec::new()));
                    roots.entries.len() - 1
                };
                next_index(&mut roots.entries[i].2, name)
            })
        });
        Some(k)
    }
}

impl<S> tracing_subscriber::Layer<S> for TraceLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if metadata.is_span() {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        metadata.is_span()
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(meta) = ctx.metadata(id) {
            self.enter_span(id.into_u64(), meta.name());
        }
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        self.exit_span(id.into_u64());
    }
}

impl Capture {
    /// Installs capture of `tracing` spans for the whole process in one call: this capture's
    /// [`CaptureSubscriber`](crate::CaptureSubscriber) (what a registry with
    /// [`TraceLayer::for_capture`] records — kind `module`, sibling indices on — without the
    /// registry's per-span cost) as the global default subscriber. Call it **before building
    /// the model**: candle-transformers creates its spans at construction, and spans created
    /// before a subscriber wanted them stay disabled. It enables every span at `TRACE` level
    /// and no events. Fails when a global subscriber is already set; then add
    /// [`TraceLayer::for_capture`] to that subscriber instead (with per-layer filters on
    /// the other layers, so none disables spans for all).
    pub fn install_tracing(&self) -> Result<(), CaptureError> {
        tracing::subscriber::set_global_default(self.tracing_subscriber())?;
        Ok(())
    }
}
