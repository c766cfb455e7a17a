//! Streaming normalisation of spans and ops into perfectly nested intervals per thread.
//!
//! Viewers that draw a trace as stacked slices (Perfetto, chrome://tracing, speedscope,
//! flame graphs) reject or mis-draw a child that starts before its parent, overlaps its
//! previous sibling or ends after its parent. [`Nester`] consumes events in file order and
//! emits every span and op exactly once as an [`Interval`] whose start and end satisfy, per
//! thread: `parent.start <= child.start <= child.end <= parent.end` and
//! `previous_sibling.end <= next_sibling.start`. Where the recorded times violate that, the
//! smallest local fix is applied and counted in [`Adjustments`]:
//!
//! - a start earlier than its parent's start or its previous sibling's end is moved later;
//! - an op that ends after its span is cut at the span's end;
//! - a span that ends before a child span it contains is extended to cover it (the child was
//!   already emitted);
//! - spans still open at the end of the trace are closed at the last time seen;
//! - an op that names a span that is not open (unknown or closed), or that was recorded
//!   outside every span while the driving thread is inside one, is placed on a separate
//!   "ops outside spans" track.
//!
//! An op recorded outside every span (a top-level op such as a generation loop's `argmax`
//! after the model's forward) is no adjustment: it is drawn at the root of the *driving
//! thread*, the thread of the latest root span (before any, [`TraceOutline::first_driver`]),
//! between that thread's spans, so a trace written by `TraceSession` needs no adjustment.
//! With no driving thread known (a trace without spans, or ops before the first span when no
//! outline was read first) it is drawn on the "ops outside spans" track, uncounted.
//!
//! Span names are shown by the analyses' sibling-index rule once it is known
//! ([`Nester::set_names`], [`crate::names`]): paths print the names every command prints.
//!
//! An op that became a span (the op line recorded directly in a span of kind `op` with its
//! name and recorded start) is that span's own op ([`SpanFrame::own_op`]): it is emitted
//! once, as the span, and is no child of it, so a trace written by TraceSession needs no
//! adjustment around such ops.
//!
//! Memory held is one frame per open span and one pending op per thread: the last op of the
//! innermost span is held back until the next event on its thread tells whether its end must
//! be cut. Everything else streams.

use serde::Serialize;
use trace_record::schema::{Event, ExecStep, OpEvent, SpanKind};

use std::io::BufRead;

use trace_record::TraceReader;

use crate::ExportError;
use crate::FastMap;
use crate::names::{SpanNames, TraceOutline};

/// The thread id used for ops whose span is unknown or already closed.
pub const OUTSIDE_SPANS_TID: u64 = 999_999;

/// Display paths ([`Nester::path_display`]) deeper than this many names keep their first
/// and last half around `…N more…`, so that a deeply nested trace exports in linear size.
pub(crate) const MAX_DISPLAY_NAMES: u32 = 32;

/// One interned path: its parent path, last name, depth (names from the root) and the
/// ancestors at depths `MAX_DISPLAY_NAMES / 2` and [`Nester::clip_depth`] (or itself when
/// shallower), so that bounded prefixes are found in O(1) whatever the depth.
#[derive(Debug)]
struct PathEntry {
    parent: u32,
    name: String,
    /// How many bytes of `name` are shown ([`SpanNames::shown_len`]; all for an op leaf).
    shown: u32,
    /// Whether a span made the path (not an op leaf or a `[deeper frames]` frame).
    span: bool,
    depth: u32,
    head: u32,
    clip: u32,
}

/// What was changed to make the intervals nest (all zero for a well-formed trace).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Adjustments {
    /// Starts moved later: before the parent's start or the previous sibling's end.
    pub starts_clamped: u64,
    /// Ops whose end was cut at the end of their span.
    pub op_ends_clamped: u64,
    /// Spans extended to end with a child span that ended after them.
    pub span_ends_extended: u64,
    /// Spans closed because an enclosing span on their thread ended first.
    pub spans_closed_by_parent: u64,
    /// Spans never closed: closed at the last time seen in the trace.
    pub spans_left_open: u64,
    /// Ops whose span is open on its thread but is not the innermost open span there: drawn
    /// inside the innermost one.
    pub ops_moved_to_innermost_span: u64,
    /// Ops whose span is unknown or closed, or recorded outside every span while the driving
    /// thread is inside one: drawn on the "ops outside spans" track. An op recorded outside
    /// every span is otherwise drawn at the root of the driving thread, or on that track
    /// when no thread is known to drive (a trace without spans), and is no adjustment.
    pub ops_outside_spans: u64,
    /// `span_start` events reusing the id of an open span (ignored).
    pub duplicate_span_starts: u64,
    /// `span_end` events for spans that are not open (ignored).
    pub unknown_span_ends: u64,
}

impl Adjustments {
    /// The number of adjusted or dropped items.
    pub fn total(&self) -> u64 {
        self.starts_clamped
            + self.op_ends_clamped
            + self.span_ends_extended
            + self.spans_closed_by_parent
            + self.spans_left_open
            + self.ops_moved_to_innermost_span
            + self.ops_outside_spans
            + self.duplicate_span_starts
            + self.unknown_span_ends
    }

    /// `name=count` for every non-zero figure, comma separated (empty when all are zero).
    pub fn describe(&self) -> String {
        let all = [
            ("starts_clamped", self.starts_clamped),
            ("op_ends_clamped", self.op_ends_clamped),
            ("span_ends_extended", self.span_ends_extended),
            ("spans_closed_by_parent", self.spans_closed_by_parent),
            ("spans_left_open", self.spans_left_open),
            (
                "ops_moved_to_innermost_span",
                self.ops_moved_to_innermost_span,
            ),
            ("ops_outside_spans", self.ops_outside_spans),
            ("duplicate_span_starts", self.duplicate_span_starts),
            ("unknown_span_ends", self.unknown_span_ends),
        ];
        all.iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k}={n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// An open span on a thread's stack (also what a closed span is reported with).
#[derive(Debug, Clone)]
pub(crate) struct SpanFrame {
    /// The span's id in the trace (its name as recorded is its path's last name).
    pub id: u64,
    /// What the span stands for.
    pub kind: SpanKind,
    /// The execution step recorded on the span.
    pub exec_step: Option<ExecStep>,
    /// The interned path of the span (see [`Nester::path_names`]).
    pub path: u32,
    /// Normalised start, ns.
    pub start: u64,
    /// The step index current when the span started (0 before the first `step` event).
    pub step: Option<u64>,
    /// Sum of the normalised durations of its children on the same thread.
    pub children_ns: u64,
    /// Where the next child may start at the earliest (the end of the last child so far).
    cursor: u64,
    /// The start as recorded (before any clamping).
    recorded_start: u64,
    /// The span's own op, for a span of kind `op` that an op became: the op line recorded
    /// directly in it with its name and recorded start. Drawn as the span, not as a child.
    pub own_op: Option<Box<OpEvent>>,
}

/// One normalised interval, handed to the consumer of a [`Nester`].
#[derive(Debug)]
pub(crate) enum Interval<'a> {
    /// A span, emitted when it closes (after all its children).
    Span {
        /// The thread it is drawn on.
        tid: u64,
        /// The span.
        frame: &'a SpanFrame,
        /// Normalised end, ns (`>= frame.start`).
        end: u64,
    },
    /// An op, emitted when the next event on its thread (or its span's end) fixes its end.
    Op {
        /// The thread it is drawn on.
        tid: u64,
        /// The op as recorded.
        op: &'a OpEvent,
        /// Normalised start, ns.
        start: u64,
        /// Normalised end, ns (`>= start`).
        end: u64,
        /// The interned path of the op's parent span, or the root path.
        parent_path: u32,
        /// The step index current when the op was read.
        step: Option<u64>,
    },
}

#[derive(Debug)]
struct PendingOp {
    op: OpEvent,
    start: u64,
    end: u64,
    parent_path: u32,
    step: Option<u64>,
}

#[derive(Debug, Default)]
struct ThreadState {
    stack: Vec<SpanFrame>,
    /// Where the next root-level interval may start at the earliest.
    root_cursor: u64,
    pending: Option<PendingOp>,
}

/// The hash a path's last name is interned by (fixed seed: the same in every run).
fn name_hash(name: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::default().hash_one(name)
}

/// The streaming normaliser (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Nester {
    threads: FastMap<u64, ThreadState>,
    /// Open span id → its thread and interned path.
    open: FastMap<u64, (u64, u32)>,
    /// Path interner; path 0 is the root (empty).
    paths: Vec<PathEntry>,
    /// (parent path, hash of the last name) → the path first interned with that key: one
    /// flat entry of 16 bytes a path, the name itself held once, in [`PathEntry::name`]
    /// (a map per parent keyed by an owned name cost ten times that on a deep chain).
    path_index: FastMap<(u32, u64), u32>,
    /// The paths whose key was taken by another name (a hash collision), by parent and name.
    path_collisions: FastMap<(u32, String), u32>,
    /// The depth at which [`PathEntry::clip`] cuts (folded stacks), `u32::MAX` for none.
    clip_depth: u32,
    /// The sibling-index rule the shown names follow (empty: names as recorded).
    names: SpanNames,
    /// The thread of the latest root span: ops recorded outside every span are drawn there.
    driver: Option<u64>,
    /// The thread of the first root span.
    first_driver: Option<u64>,
    step: Option<u64>,
    last_ts: u64,
    adjustments: Adjustments,
}

impl Nester {
    /// An empty normaliser.
    pub(crate) fn new() -> Self {
        Self::with_clip_depth(u32::MAX)
    }

    /// An empty normaliser whose paths know their ancestor at `depth` ([`Nester::clip`]).
    pub(crate) fn with_clip_depth(depth: u32) -> Self {
        Nester {
            paths: vec![PathEntry {
                parent: 0,
                name: String::new(),
                shown: 0,
                span: false,
                depth: 0,
                head: 0,
                clip: 0,
            }],
            clip_depth: depth,
            // What comes before the first `step` event is step 0.
            step: Some(0),
            ..Nester::default()
        }
    }

    /// A normaliser that shows names by `outline`'s rule from the start and draws ops recorded
    /// outside every span on its first driving thread until a root span names another.
    pub(crate) fn outlined(outline: &TraceOutline) -> Self {
        let mut n = Self::new();
        n.names = outline.names.clone();
        n.driver = outline.first_driver;
        n
    }

    /// Shows every path's names by `names` from now on (interned paths included).
    pub(crate) fn set_names(&mut self, names: SpanNames) {
        self.names = names;
        for i in 0..self.paths.len() {
            let shown = u32::try_from(self.shown_len_of(i)).unwrap_or(u32::MAX);
            if let Some(e) = self.paths.get_mut(i) {
                e.shown = shown;
            }
        }
    }

    /// How much of path `i`'s name the current rule shows.
    fn shown_len_of(&self, i: usize) -> usize {
        let Some(e) = self.paths.get(i) else {
            return 0;
        };
        if !e.span {
            return e.name.len();
        }
        let parent = (e.parent != 0 && (e.parent as usize) < i)
            .then(|| self.paths.get(e.parent as usize).map(|p| p.name.as_str()))
            .flatten();
        self.names.shown_len(parent, &e.name)
    }

    /// The sibling-index rule of every span path interned so far (after the whole trace:
    /// the trace's rule). The parent's name is its recorded name.
    pub(crate) fn span_names(&self) -> SpanNames {
        let mut names = SpanNames::default();
        for (i, e) in self.paths.iter().enumerate().filter(|(_, e)| e.span) {
            let parent = (e.parent != 0 && (e.parent as usize) < i)
                .then(|| self.paths.get(e.parent as usize).map(|p| p.name.as_str()))
                .flatten();
            names.observe(parent, &e.name);
        }
        names
    }

    /// The thread of the first root span seen, if any.
    pub(crate) fn first_driver(&self) -> Option<u64> {
        self.first_driver
    }

    /// The shown name of `path`'s last name.
    pub(crate) fn shown_name(&self, path: u32) -> &str {
        self.paths
            .get(path as usize)
            .map_or("", |e| e.name.get(..e.shown as usize).unwrap_or(&e.name))
    }

    /// What was adjusted so far.
    pub(crate) fn adjustments(&self) -> Adjustments {
        self.adjustments
    }

    /// The thread of span `id` while it is open.
    pub(crate) fn span_thread(&self, id: u64) -> Option<u64> {
        self.open.get(&id).map(|&(t, _)| t)
    }

    /// The names along interned path `path`, root first (empty for the root path 0). O(depth):
    /// for bounded output use [`path_display`](Self::path_display) or a clipped path.
    pub(crate) fn path_names(&self, path: u32) -> Vec<&str> {
        self.names_up(path, u32::MAX)
    }

    /// The last `n` names of `path` (fewer when shallower), root first.
    fn names_up(&self, path: u32, n: u32) -> Vec<&str> {
        let mut names = Vec::new();
        let mut cur = path;
        // Paths only point to smaller indices, so this walk ends.
        while cur != 0 && (names.len() as u32) < n {
            let Some(e) = self.paths.get(cur as usize) else {
                break;
            };
            names.push(e.name.get(..e.shown as usize).unwrap_or(&e.name));
            if e.parent >= cur {
                break;
            }
            cur = e.parent;
        }
        names.reverse();
        names
    }

    /// The depth of `path` (number of names; 0 for the root).
    pub(crate) fn depth(&self, path: u32) -> u32 {
        self.paths.get(path as usize).map_or(0, |e| e.depth)
    }

    /// The ancestor of `path` at the clip depth given to
    /// [`with_clip_depth`](Self::with_clip_depth), or `path` itself when it is not deeper.
    pub(crate) fn clip(&self, path: u32) -> u32 {
        self.paths.get(path as usize).map_or(0, |e| e.clip)
    }

    /// The names of `path` joined by `/`, with the middle elided as `…N more…` beyond
    /// [`MAX_DISPLAY_NAMES`] names: O(`MAX_DISPLAY_NAMES`) whatever the depth.
    pub(crate) fn path_display(&self, path: u32) -> String {
        let depth = self.depth(path);
        if depth <= MAX_DISPLAY_NAMES {
            return self.path_names(path).join("/");
        }
        let half = MAX_DISPLAY_NAMES / 2;
        let head = self.paths.get(path as usize).map_or(0, |e| e.head);
        let mut parts = self.names_up(head, half);
        let more = format!("…{} more…", depth - 2 * half);
        parts.push(&more);
        parts.extend(self.names_up(path, half));
        parts.join("/")
    }

    /// The path `parent` + `name` of a span, interned.
    pub(crate) fn intern_path(&mut self, parent: u32, name: &str) -> u32 {
        self.intern(parent, name, true)
    }

    /// The path `parent` + `name` of a frame that is no span (an op leaf, `[deeper
    /// frames]`), interned: its name is shown as recorded.
    pub(crate) fn intern_leaf(&mut self, parent: u32, name: &str) -> u32 {
        self.intern(parent, name, false)
    }

    fn intern(&mut self, parent: u32, name: &str, span: bool) -> u32 {
        let key = (parent, name_hash(name));
        let taken = match self.path_index.get(&key) {
            Some(&id) if self.paths.get(id as usize).is_some_and(|e| e.name == name) => {
                return id;
            }
            Some(_) => true,
            None => false,
        };
        if taken && let Some(&id) = self.path_collisions.get(&(parent, name.to_string())) {
            return id;
        }
        let id = u32::try_from(self.paths.len()).unwrap_or(u32::MAX);
        let (pdepth, phead, pclip) = self
            .paths
            .get(parent as usize)
            .map_or((0, 0, 0), |e| (e.depth, e.head, e.clip));
        let depth = pdepth.saturating_add(1);
        let half = MAX_DISPLAY_NAMES / 2;
        let shown = if span {
            let pname = (parent != 0)
                .then(|| self.paths.get(parent as usize).map(|p| p.name.as_str()))
                .flatten();
            self.names.shown_len(pname, name)
        } else {
            name.len()
        };
        let shown = u32::try_from(shown).unwrap_or(u32::MAX);
        self.paths.push(PathEntry {
            parent,
            name: name.to_string(),
            shown,
            span,
            depth,
            head: if depth <= half { id } else { phead },
            clip: if depth <= self.clip_depth { id } else { pclip },
        });
        if taken {
            self.path_collisions.insert((parent, name.to_string()), id);
        } else {
            self.path_index.insert(key, id);
        }
        id
    }

    /// Feeds one event; calls `emit` for every interval it completes.
    pub(crate) fn push<F: FnMut(&Nester, Interval<'_>)>(&mut self, event: Event, emit: &mut F) {
        if let Some(ts) = event.ts() {
            self.last_ts = self.last_ts.max(ts);
        }
        match event {
            Event::Step(s) => self.step = Some(s.index),
            Event::SpanStart(s) => {
                if self.open.contains_key(&s.id) {
                    self.adjustments.duplicate_span_starts += 1;
                    return;
                }
                self.flush_pending(s.thread, emit);
                // The parent's path from the open map: O(1), however deep the stacks are.
                let parent_path = s
                    .parent
                    .and_then(|p| self.open.get(&p).map(|&(_, path)| path))
                    .or_else(|| {
                        self.threads
                            .get(&s.thread)
                            .and_then(|t| t.stack.last())
                            .map(|f| f.path)
                    })
                    .unwrap_or(0);
                let path = self.intern_path(parent_path, &s.name);
                if parent_path == 0 {
                    // A root span: its thread drives.
                    self.driver = Some(s.thread);
                    self.first_driver.get_or_insert(s.thread);
                }
                let step = self.step;
                let thread = self.threads.entry(s.thread).or_default();
                let floor = thread.stack.last().map_or(thread.root_cursor, |f| f.cursor);
                let start = if s.ts < floor {
                    self.adjustments.starts_clamped += 1;
                    floor
                } else {
                    s.ts
                };
                thread.stack.push(SpanFrame {
                    id: s.id,
                    kind: s.kind,
                    exec_step: s.step,
                    path,
                    start,
                    step,
                    children_ns: 0,
                    cursor: start,
                    recorded_start: s.ts,
                    own_op: None,
                });
                self.open.insert(s.id, (s.thread, path));
            }
            Event::SpanEnd(e) => {
                let Some(tid) = self.span_thread(e.id) else {
                    self.adjustments.unknown_span_ends += 1;
                    return;
                };
                let above = self.threads.get(&tid).and_then(|t| {
                    t.stack
                        .iter()
                        .rposition(|f| f.id == e.id)
                        .map(|pos| t.stack.len() - 1 - pos)
                });
                let Some(above) = above else {
                    self.open.remove(&e.id);
                    self.adjustments.unknown_span_ends += 1;
                    return;
                };
                self.adjustments.spans_closed_by_parent += above as u64;
                for _ in 0..=above {
                    self.close_top(tid, e.ts, emit);
                }
            }
            Event::Op(op) => self.push_op(op, emit),
            _ => {}
        }
    }

    fn push_op<F: FnMut(&Nester, Interval<'_>)>(&mut self, op: OpEvent, emit: &mut F) {
        // The thread, or whether drawing it apart is an adjustment.
        let placed = match (op.span, self.driver) {
            (Some(s), _) => self.span_thread(s).ok_or(true),
            // Outside every span: at the root of the driving thread, when it is at its root.
            (None, Some(d)) if self.threads.get(&d).is_none_or(|t| t.stack.is_empty()) => Ok(d),
            (None, Some(_)) => Err(true),
            // No thread has driven a span yet (a trace without spans): a track of its own.
            (None, None) => Err(false),
        };
        let tid = placed.unwrap_or_else(|counted| {
            if counted {
                self.adjustments.ops_outside_spans += 1;
            }
            OUTSIDE_SPANS_TID
        });
        self.flush_pending(tid, emit);
        let step = self.step;
        let thread = self.threads.entry(tid).or_default();
        // An op that became a span is its span: it is drawn as that span, not inside it.
        if let Some(top) = thread.stack.last_mut()
            && op.span == Some(top.id)
            && top.own_op.is_none()
            && let Some(path) = self.paths.get(top.path as usize)
            && op.is_own_op_of(top.kind, &path.name, top.recorded_start)
        {
            self.last_ts = self.last_ts.max(op.ts.saturating_add(op.dur));
            top.own_op = Some(Box::new(op));
            return;
        }
        if let (Some(top), Some(span)) = (thread.stack.last(), op.span)
            && top.id != span
        {
            self.adjustments.ops_moved_to_innermost_span += 1;
        }
        let (floor, parent_path) = thread
            .stack
            .last()
            .map_or((thread.root_cursor, 0), |f| (f.cursor, f.path));
        let start = if op.ts < floor {
            self.adjustments.starts_clamped += 1;
            floor
        } else {
            op.ts
        };
        let end = op.ts.saturating_add(op.dur).max(start);
        self.last_ts = self.last_ts.max(end);
        match thread.stack.last_mut() {
            Some(f) => f.cursor = end,
            None => thread.root_cursor = end,
        }
        thread.pending = Some(PendingOp {
            op,
            start,
            end,
            parent_path,
            step,
        });
    }

    /// Emits the held-back op of thread `tid`, if any, unchanged.
    fn flush_pending<F: FnMut(&Nester, Interval<'_>)>(&mut self, tid: u64, emit: &mut F) {
        let Some(p) = self.threads.get_mut(&tid).and_then(|t| t.pending.take()) else {
            return;
        };
        self.emit_op(tid, &p, emit);
    }

    fn emit_op<F: FnMut(&Nester, Interval<'_>)>(&mut self, tid: u64, p: &PendingOp, emit: &mut F) {
        let dur = p.end - p.start;
        if let Some(t) = self.threads.get_mut(&tid)
            && let Some(f) = t.stack.last_mut()
        {
            f.children_ns = f.children_ns.saturating_add(dur);
        }
        emit(
            self,
            Interval::Op {
                tid,
                op: &p.op,
                start: p.start,
                end: p.end,
                parent_path: p.parent_path,
                step: p.step,
            },
        );
    }

    /// Closes the innermost open span of thread `tid` at recorded time `ts`.
    fn close_top<F: FnMut(&Nester, Interval<'_>)>(&mut self, tid: u64, ts: u64, emit: &mut F) {
        let Some(thread) = self.threads.get_mut(&tid) else {
            return;
        };
        let pending = thread.pending.take();
        let Some(frame_start) = thread.stack.last().map(|f| f.start) else {
            if let Some(p) = pending {
                self.emit_op(tid, &p, emit);
            }
            return;
        };
        let mut end = ts.max(frame_start);
        if let Some(mut p) = pending {
            if p.end > end {
                if p.start <= end {
                    p.end = end;
                    self.adjustments.op_ends_clamped += 1;
                    // The op was the span's last child: the span's children now end here.
                    if let Some(f) = self.threads.get_mut(&tid).and_then(|t| t.stack.last_mut()) {
                        f.cursor = end;
                    }
                } else {
                    end = p.end;
                    self.adjustments.span_ends_extended += 1;
                }
            }
            self.emit_op(tid, &p, emit);
        }
        let Some(thread) = self.threads.get_mut(&tid) else {
            return;
        };
        let Some(frame) = thread.stack.pop() else {
            return;
        };
        if frame.cursor > end {
            end = frame.cursor;
            self.adjustments.span_ends_extended += 1;
        }
        let dur = end - frame.start;
        match thread.stack.last_mut() {
            Some(parent) => {
                parent.children_ns = parent.children_ns.saturating_add(dur);
                parent.cursor = end;
            }
            None => thread.root_cursor = end,
        }
        self.open.remove(&frame.id);
        emit(
            self,
            Interval::Span {
                tid,
                frame: &frame,
                end,
            },
        );
    }

    /// Ends the stream: closes every span still open at the last time seen (counted) and
    /// emits every held-back op. Threads are finished in id order.
    pub(crate) fn finish<F: FnMut(&Nester, Interval<'_>)>(&mut self, emit: &mut F) {
        let mut tids: Vec<u64> = self.threads.keys().copied().collect();
        tids.sort_unstable();
        let last = self.last_ts;
        for tid in tids {
            loop {
                let open = self.threads.get(&tid).map_or(0, |t| t.stack.len());
                if open == 0 {
                    break;
                }
                self.adjustments.spans_left_open += 1;
                self.close_top(tid, last, emit);
            }
            self.flush_pending(tid, emit);
        }
    }
}

/// Reads the rest of `reader` once, holding what the span nester holds (the open spans and
/// the distinct span paths), and returns the trace's [`TraceOutline`] for
/// [`crate::write_chrome_outlined`]. Read the trace again for the export itself.
///
/// ```
/// use trace_export::outline;
/// use trace_record::{ReadOptions, TraceReader};
///
/// let trace = concat!(
///     r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"r","entrypoint":"e","phase":"infer","device":"cpu","timing":"host","start_unix_ns":0,"pid":1}}"#, "\n",
///     r#"{"type":"span_start","id":1,"name":"block#0","kind":"module","thread":3,"ts":1}"#, "\n",
///     r#"{"type":"span_start","id":2,"parent":1,"name":"linear#0","kind":"module","thread":3,"ts":2}"#, "\n",
///     r#"{"type":"span_end","id":2,"ts":3}"#, "\n",
///     r#"{"type":"span_start","id":3,"parent":1,"name":"linear#1","kind":"module","thread":3,"ts":4}"#, "\n",
///     r#"{"type":"span_end","id":3,"ts":5}"#, "\n",
///     r#"{"type":"span_end","id":1,"ts":6}"#, "\n",
/// );
/// let mut reader = TraceReader::new(trace.as_bytes(), ReadOptions::default())?;
/// let o = outline(&mut reader)?;
/// assert_eq!(o.names.show(None, "block#0"), "block");
/// assert_eq!(o.names.show(Some("block#0"), "linear#0"), "linear#0");
/// assert_eq!(o.first_driver, Some(3));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn outline<R: BufRead + Send>(
    reader: &mut TraceReader<R>,
) -> Result<TraceOutline, ExportError> {
    let mut nester = Nester::new();
    let mut ignore = |_: &Nester, _: Interval<'_>| {};
    reader.for_each_batched(|line| {
        nester.push(line.event, &mut ignore);
        Ok::<(), ExportError>(())
    })?;
    nester.finish(&mut ignore);
    Ok(TraceOutline {
        names: nester.span_names(),
        first_driver: nester.first_driver(),
    })
}

#[cfg(test)]
mod tests {
    use super::{Nester, name_hash};

    /// Two names whose (parent, name hash) keys collide are still two paths, each found
    /// again by its name.
    #[test]
    fn a_hash_collision_interns_two_paths() {
        let mut n = Nester::new();
        let a = n.intern_path(0, "a");
        // Make "b" collide with "a": its key already names the path of "a".
        n.path_index.insert((0, name_hash("b")), a);
        let b = n.intern_path(0, "b");
        assert_ne!(a, b);
        assert_eq!(n.intern_path(0, "b"), b);
        assert_eq!(n.intern_path(0, "a"), a);
        assert_eq!(n.path_names(b), vec!["b"]);
        let c = n.intern_path(b, "a");
        assert!(c != a && c != b);
        assert_eq!(n.path_names(c), vec!["b", "a"]);
        assert_eq!(n.intern_path(b, "a"), c);
    }
}
