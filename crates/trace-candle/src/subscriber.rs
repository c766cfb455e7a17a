//! [`CaptureSubscriber`] (feature `tracing`): a `tracing` subscriber of the capture's own.
//!
//! What [`Capture::install_tracing`](crate::Capture::install_tracing) installs. It does what a
//! `tracing_subscriber` registry with a [`TraceLayer`] does for a model's spans, without the
//! registry: a model enters its spans thousands of times a second, and the registry's
//! per-span bookkeeping (a sharded slab entry per span, looked up, reference-counted and
//! pushed on a per-thread stack at every enter and exit) costs about as much as the trace
//! span itself once the model's own work has evicted it from the cache. The layer needs only
//! each span's name, so a span's id here carries its callsite: entering one is a table read,
//! no lock and no reference count.
//!
//! Nothing is stored per span, so nothing is freed when one closes: a span's id names its
//! callsite's slot in a table filled once per callsite (at most [`MAX_CALLSITES`]; spans of
//! callsites beyond that are recorded under the name `tracing`), plus a sequence number that
//! tells two live spans of one callsite apart.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_core::span::Current;

use crate::{Capture, TraceLayer};

/// Callsites (static span definitions) one subscriber can name; more get the overflow name.
pub const MAX_CALLSITES: usize = CHUNK * CHUNKS;

const CHUNK: usize = 256;
const CHUNKS: usize = 256;
/// The name of spans whose callsite did not fit in the table.
const OVERFLOW_NAME: &str = "tracing";

/// A callsite's name (read on every enter, so kept beside its metadata) and metadata.
type Slot = (&'static str, &'static Metadata<'static>);
type Chunk = Box<[OnceLock<Slot>]>;

/// The callsites seen by `new_span`, by slot, readable without a lock.
struct Callsites {
    chunks: Box<[OnceLock<Chunk>]>,
    /// Slot of each callsite (by its metadata's address), taken under the lock by `new_span`.
    slots: Mutex<HashMap<usize, u32>>,
}

impl Callsites {
    fn new() -> Self {
        Callsites {
            chunks: (0..CHUNKS).map(|_| OnceLock::new()).collect(),
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The slot of `meta`, given one the first time it is seen (`None` once the table is full).
    fn slot(&self, meta: &'static Metadata<'static>) -> Option<u32> {
        let key = std::ptr::from_ref(meta) as usize;
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&slot) = slots.get(&key) {
            return Some(slot);
        }
        let slot = slots.len();
        if slot >= MAX_CALLSITES {
            return None;
        }
        let chunk = self.chunks[slot / CHUNK]
            .get_or_init(|| (0..CHUNK).map(|_| OnceLock::new()).collect::<Chunk>());
        let _ = chunk[slot % CHUNK].set((meta.name(), meta));
        let slot = u32::try_from(slot).ok()?;
        slots.insert(key, slot);
        Some(slot)
    }

    fn get(&self, slot: usize) -> Option<Slot> {
        let chunk = self.chunks.get(slot / CHUNK)?.get()?;
        chunk.get(slot % CHUNK)?.get().copied()
    }
}

/// A `tracing` [`Subscriber`] that turns spans into the capture's trace spans exactly as a
/// registry with a [`TraceLayer`] does (the same names with sibling indices, nesting, kinds,
/// execution steps and sampler scope), at a fraction of the cost per span, and enables no
/// events. [`Capture::install_tracing`] sets one as the global default;
/// [`Capture::tracing_subscriber`] makes one to install otherwise (e.g. with
/// `tracing::subscriber::with_default` while a model is built).
///
/// It serves only the capture: to combine the capture with other layers (tracing-chrome, a
/// log formatter), put [`TraceLayer::for_capture`] in a `tracing_subscriber` registry
/// instead. [`Span::current`](tracing::Span::current) is the innermost span entered on the
/// thread; span fields and `follows_from` are not kept.
///
/// ```
/// use std::sync::Arc;
/// use trace_candle::{Capture, Phase, Run, TraceSession};
///
/// let (session, _sink) = TraceSession::in_memory(Run::new("doc", Phase::Infer, "cpu"));
/// let capture = Capture::new(Arc::new(session));
/// tracing::subscriber::with_default(capture.tracing_subscriber(), || {
///     let _block = tracing::info_span!("block").entered();
///     let _attn = tracing::info_span!("attn").entered();
/// });
/// assert_eq!(capture.finish().unwrap().counts.span_start, 2);
/// ```
#[derive(Debug)]
pub struct CaptureSubscriber {
    layer: TraceLayer,
    callsites: Callsites,
    next: AtomicU32,
}

impl std::fmt::Debug for Callsites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.slots.lock().map_or(0, |s| s.len());
        f.debug_struct("Callsites").field("len", &n).finish()
    }
}

impl CaptureSubscriber {
    /// A subscriber recording through `layer`'s session, kind and naming.
    pub fn new(layer: TraceLayer) -> Self {
        CaptureSubscriber {
            layer,
            callsites: Callsites::new(),
            next: AtomicU32::new(0),
        }
    }

    /// The callsite name and metadata of span id `id` (made by this subscriber's `new_span`).
    fn callsite_of(&self, id: &Id) -> Option<Slot> {
        let slot = usize::try_from((id.into_u64() >> 32).checked_sub(1)?).ok()?;
        self.callsites.get(slot)
    }
}

impl Subscriber for CaptureSubscriber {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if metadata.is_span() {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_span()
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        // Slot 0 of the id's high half is the overflow name; callsites count from 1.
        let slot = self
            .callsites
            .slot(span.metadata())
            .map_or(0, |s| u64::from(s) + 1);
        let seq = u64::from(self.next.fetch_add(1, Ordering::Relaxed));
        // Never 0 (an `Id` is non-zero): the sequence number's low half is at least 1.
        Id::from_u64((slot << 32) | (seq & 0xFFFF_FFFF).max(1))
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, _event: &Event<'_>) {}

    fn enter(&self, span: &Id) {
        let name = self
            .callsite_of(span)
            .map_or(OVERFLOW_NAME, |(name, _)| name);
        self.layer.enter_span(span.into_u64(), name);
    }

    fn exit(&self, span: &Id) {
        self.layer.exit_span(span.into_u64());
    }

    fn current_span(&self) -> Current {
        let current = self
            .layer
            .innermost_span()
            .map(Id::from_u64)
            .and_then(|id| {
                let (_, meta) = self.callsite_of(&id)?;
                Some(Current::new(id, meta))
            });
        current.unwrap_or_else(Current::none)
    }
}

impl Capture {
    /// A [`CaptureSubscriber`] recording this capture's `tracing` spans (kind `module`,
    /// sibling indices on, its span count written by [`Capture::finish`]): what
    /// [`Capture::install_tracing`] installs globally, to install some other way.
    pub fn tracing_subscriber(&self) -> CaptureSubscriber {
        CaptureSubscriber::new(TraceLayer::for_capture(self))
    }
}
