//! Structural validation of a trace: span identity, nesting in time, allocation pairing,
//! sampled stacks (interned ids and per-step sample sums), tracked-heap allocation pairing.
//!
//! [`Validator`] is fed events in file order (streaming, O(1) per event with hash maps) and
//! reports typed [`Issue`]s with line numbers, sorted by line. References to spans are
//! resolved at the end, so the order of lines from different threads does not matter.
//!
//! ```
//! use trace_record::{Run, TraceSession, Validator};
//! use trace_record::schema::{Phase, SpanKind};
//! let (session, sink) = TraceSession::in_memory(Run::new("doc", Phase::Infer, "cpu"));
//! {
//!     let _outer = session.span("outer", SpanKind::Function, None);
//!     let _inner = session.span("inner", SpanKind::Op, None);
//! }
//! session.finish().unwrap();
//! let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
//! assert!(trace_record::validate(&trace).is_empty());
//! ```

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use crate::reader::{ParsedTrace, ReadError, ReadOptions, TraceReader};
use crate::schema::{AllocKind, Event, EventCounts, Header, Trailer};

/// A structural problem in a trace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IssueKind {
    /// A `span_start` reused an id started before (at `first_line`).
    DuplicateSpan {
        /// The span id.
        id: u64,
        /// Where it was first started.
        first_line: u64,
    },
    /// A `span_end` for a span never started.
    SpanEndWithoutStart {
        /// The span id.
        id: u64,
    },
    /// A second `span_end` for the same span.
    DuplicateSpanEnd {
        /// The span id.
        id: u64,
    },
    /// A span ends before it starts.
    SpanEndsBeforeStart {
        /// The span id.
        id: u64,
    },
    /// A span starts before or ends after its parent (or ends while its parent stays open).
    ChildOutsideParent {
        /// The child span.
        id: u64,
        /// Its parent.
        parent: u64,
    },
    /// A span that never ended.
    SpanLeftOpen {
        /// The span id.
        id: u64,
    },
    /// An event (or a span's parent) names a span that never started.
    UnknownSpan {
        /// The unknown span id.
        id: u64,
    },
    /// A free of storage that is not allocated.
    FreeWithoutAlloc {
        /// The storage id.
        storage: u64,
    },
    /// An allocation of storage that is already allocated (first at `first_line`).
    DuplicateAlloc {
        /// The storage id.
        storage: u64,
        /// Where the live allocation was recorded.
        first_line: u64,
    },
    /// A `frame` or `stack` reused an id defined before (version 2).
    DuplicateInterned {
        /// `frame`, `stack`, `module` or `raw_stack`.
        what: &'static str,
        /// The id.
        id: u64,
    },
    /// A `stack` names a frame, a `raw_stack` a module, or a `samples` line a stack (by a
    /// `stack` or `raw_stack` line), never defined (version 2).
    UnknownInterned {
        /// `frame`, `module` or `stack`.
        what: &'static str,
        /// The unknown id.
        id: u64,
    },
    /// A gradient's L2 norm is negative, NaN or infinite: a norm is finite and `>= 0`
    /// (a non-finite gradient is recorded as state `non_finite` without a norm).
    InvalidGradientNorm {
        /// The parameter.
        param: String,
        /// The norm as written.
        norm: String,
    },
    /// A second `sampler` line for a step (first at `first_line`): a step has one account.
    DuplicateSamplerAccount {
        /// The step.
        step: u64,
        /// The line of the step's first `sampler` line.
        first_line: u64,
    },
    /// A `sampler` line accounts for more samples (`taken + lost`) than its rate allows in
    /// the step's process CPU time (twice the rate, plus 64, is the bound; without `cpu_ns`,
    /// the step's wall time on 4,096 CPUs), or so many that the sum overflows.
    ImpossibleSampleAccount {
        /// The step.
        step: u64,
        /// Samples taken.
        taken: u64,
        /// Samples lost.
        lost: u64,
        /// The most samples the rate and the CPU time allow (`None`: the sum overflows).
        bound: Option<u64>,
    },
    /// A `sampler` line says the sampler's own threads used more CPU time
    /// (`sampler_cpu_ns`) than the whole process (`cpu_ns`) in the step: the rate achieved
    /// over the sampled threads' CPU time cannot be told (readers clamp it to `cpu_ns`).
    ImpossibleSamplerCpu {
        /// The step.
        step: u64,
        /// The sampler's own CPU time, ns.
        sampler_cpu_ns: u64,
        /// The process's CPU time, ns.
        cpu_ns: u64,
    },
    /// A `sampler` line's `taken` differs from the sum of its step's `samples` counts.
    SampleCountMismatch {
        /// The step.
        step: u64,
        /// What the `sampler` line says was taken.
        taken: u64,
        /// The sum of `n` over the step's `samples` lines.
        counted: u64,
    },
    /// A `heap_alloc` reused an id allocated before (first at `first_line`).
    DuplicateHeapAlloc {
        /// The allocation id.
        id: u64,
        /// Where it was first allocated.
        first_line: u64,
    },
    /// A `heap_free` of an id no earlier `heap_alloc` allocated.
    HeapFreeWithoutAlloc {
        /// The allocation id.
        id: u64,
    },
    /// A second `heap_free` of the same allocation (first freed at `first_line`).
    HeapDoubleFree {
        /// The allocation id.
        id: u64,
        /// Where it was first freed.
        first_line: u64,
    },
    /// A `heap_free` earlier in time than its allocation.
    HeapFreeBeforeAlloc {
        /// The allocation id.
        id: u64,
    },
    /// A `heap_account` for a step the trace does not have: no `step` line has its index
    /// (step 0, which begins with the trace, always exists).
    HeapAccountForUnknownStep {
        /// The step the account names.
        step: u64,
    },
    /// A `sampler` line whose rate is above [`Validator::MAX_SAMPLER_HZ`]: no sampler ticks
    /// that fast.
    ImplausibleSampleRate {
        /// The step.
        step: u64,
        /// The rate as written.
        hz: u64,
    },
}

/// An issue at a line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Issue {
    /// The 1-based line the issue is reported at.
    pub line: u64,
    /// What is wrong.
    pub kind: IssueKind,
}

impl std::fmt::Display for IssueKind {
    /// What is wrong, without the line (`span 3 never ended`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IssueKind::DuplicateSpan { id, first_line } => {
                write!(f, "span {id} started again (first at line {first_line})")
            }
            IssueKind::SpanEndWithoutStart { id } => {
                write!(f, "span_end of span {id} that never started")
            }
            IssueKind::DuplicateSpanEnd { id } => write!(f, "span {id} ended twice"),
            IssueKind::SpanEndsBeforeStart { id } => write!(f, "span {id} ends before it starts"),
            IssueKind::ChildOutsideParent { id, parent } => {
                write!(
                    f,
                    "span {id} is not inside its parent span {parent} in time"
                )
            }
            IssueKind::SpanLeftOpen { id } => write!(f, "span {id} never ended"),
            IssueKind::UnknownSpan { id } => write!(f, "refers to unknown span {id}"),
            IssueKind::FreeWithoutAlloc { storage } => {
                write!(f, "free of storage {storage} that is not allocated")
            }
            IssueKind::DuplicateAlloc {
                storage,
                first_line,
            } => write!(
                f,
                "storage {storage} allocated again (live since line {first_line})"
            ),
            IssueKind::DuplicateInterned { what, id } => write!(f, "{what} {id} defined again"),
            IssueKind::UnknownInterned { what, id } => write!(f, "refers to unknown {what} {id}"),
            IssueKind::InvalidGradientNorm { param, norm } => write!(
                f,
                "gradient of {}: norm {norm} is impossible (a norm is finite and >= 0)",
                crate::schema::shown(param)
            ),
            IssueKind::DuplicateSamplerAccount { step, first_line } => write!(
                f,
                "step {step}: a second sampler account (the first is at line {first_line})"
            ),
            IssueKind::ImpossibleSampleAccount {
                step,
                taken,
                lost,
                bound,
            } => match bound {
                Some(bound) => write!(
                    f,
                    "step {step}: {taken} taken + {lost} lost samples exceed the {bound} the \
                     rate allows in the step's CPU time"
                ),
                None => write!(
                    f,
                    "step {step}: {taken} taken + {lost} lost samples overflow a 64-bit count"
                ),
            },
            IssueKind::ImpossibleSamplerCpu {
                step,
                sampler_cpu_ns,
                cpu_ns,
            } => write!(
                f,
                "step {step}: the sampler's own threads used {sampler_cpu_ns} ns of CPU time, \
                 more than the process's {cpu_ns} ns"
            ),
            IssueKind::SampleCountMismatch {
                step,
                taken,
                counted,
            } => write!(
                f,
                "step {step}: the sampler took {taken} samples but the samples lines count {counted}"
            ),
            IssueKind::DuplicateHeapAlloc { id, first_line } => write!(
                f,
                "heap allocation {id} allocated again (first at line {first_line})"
            ),
            IssueKind::HeapFreeWithoutAlloc { id } => {
                write!(f, "heap_free of allocation {id} that was never allocated")
            }
            IssueKind::HeapDoubleFree { id, first_line } => write!(
                f,
                "heap allocation {id} freed twice (first at line {first_line})"
            ),
            IssueKind::HeapFreeBeforeAlloc { id } => {
                write!(f, "heap allocation {id} is freed before it is allocated")
            }
            IssueKind::HeapAccountForUnknownStep { step } => write!(
                f,
                "heap_account for step {step}, which the trace does not have (no step line \
                 with that index)"
            ),
            IssueKind::ImplausibleSampleRate { step, hz } => write!(
                f,
                "step {step}: a sampling rate of {hz} Hz is implausible (at most \
                 {} Hz)",
                Validator::MAX_SAMPLER_HZ
            ),
        }
    }
}

impl std::fmt::Display for Issue {
    /// `line N: ` and the kind's message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.kind)
    }
}

impl serde::Serialize for Issue {
    /// `{"line":N,"message":"..."}` (the message is the kind's `Display`).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Issue", 2)?;
        st.serialize_field("line", &self.line)?;
        st.serialize_field("message", &self.kind.to_string())?;
        st.end()
    }
}

/// Maps keyed by ids: foldhash (fast, and well mixed in the low bits, so structured ids such
/// as `i << 40` spread over the buckets), with a fixed seed so runs are reproducible.
type IdMap<V> = HashMap<u64, V, IdHash>;

/// The hasher of [`IdMap`].
type IdHash = foldhash::fast::FixedState;

/// What the validator keeps of tracked heap allocations (version 2).
#[derive(Default)]
struct Heap {
    /// Allocation id → (line, ts) of its `heap_alloc` while it is live.
    live: IdMap<(u64, u64)>,
    /// Allocation id → lines of its `heap_alloc` and its `heap_free`.
    freed: IdMap<(u64, u64)>,
    /// (line, step) of every `heap_account` line, checked against the steps at the end.
    accounts: Vec<(u64, u64)>,
}

/// What the validator keeps of sampled stacks (version 2).
#[derive(Default)]
struct Sampled {
    frames: std::collections::HashSet<u64, IdHash>,
    stacks: std::collections::HashSet<u64, IdHash>,
    /// Stack ids defined by a `raw_stack` line (a stack id is defined by a `stack` line, a
    /// `raw_stack` line or both: the sampler writes the raw one while it samples and the
    /// resolved one, under the same id, when it stops).
    raw_stacks: std::collections::HashSet<u64, IdHash>,
    modules: std::collections::HashSet<u64, IdHash>,
    /// (line, `frame`, `stack` or `module`, id) references to ids not yet defined, checked at the end.
    refs: Vec<(u64, &'static str, u64)>,
    /// Step → sum of its `samples` counts.
    counted: IdMap<u64>,
    /// (line, step, taken) of every `sampler` line.
    taken: Vec<(u64, u64, u64)>,
    /// Step → line of its first `sampler` line.
    accounts: IdMap<u64>,
}

#[derive(Clone, Copy)]
struct SpanInfo {
    line: u64,
    parent: Option<u64>,
    start: u64,
    end: Option<u64>,
    end_line: u64,
}

/// Streaming structural validator.
#[derive(Default)]
pub struct Validator {
    spans: IdMap<SpanInfo>,
    /// Storage id → line of its live allocation.
    live: IdMap<u64>,
    /// (line, span) references checked at the end.
    refs: Vec<(u64, u64)>,
    /// Sampled stacks (version 2): interned ids, references and per-step sums.
    sampled: Sampled,
    /// Tracked heap allocations (version 2): live and freed ids.
    heap: Heap,
    issues: Vec<Issue>,
    events: u64,
    /// The indices of the trace's `step` lines.
    steps: std::collections::HashSet<u64, IdHash>,
    /// The span id the last reference found known (spans are never forgotten, so it stays
    /// known): most events name the span of the event before them.
    known_span: Option<u64>,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validator")
            .field("events", &self.events)
            .field("issues", &self.issues.len())
            .finish_non_exhaustive()
    }
}

impl Validator {
    /// The highest sampling rate a `sampler` line may state: 1 MHz (a timer tick per
    /// microsecond of CPU time; real samplers run at 100 Hz to tens of kHz). A higher one is
    /// [`IssueKind::ImplausibleSampleRate`].
    pub const MAX_SAMPLER_HZ: u64 = 1_000_000;

    /// An empty validator.
    pub fn new() -> Self {
        Self::default()
    }

    fn issue(&mut self, line: u64, kind: IssueKind) {
        self.issues.push(Issue { line, kind });
    }

    /// A reference to span `id`: resolved now when the span is known, else at the end.
    #[inline]
    fn span_ref(&mut self, line: u64, id: u64) {
        if self.known_span == Some(id) {
            return;
        }
        if self.spans.contains_key(&id) {
            self.known_span = Some(id);
        } else {
            self.refs.push((line, id));
        }
    }

    /// Checks one event read at `line`.
    pub fn check(&mut self, line: u64, event: &Event) {
        self.events += 1;
        match event {
            Event::SpanStart(s) => {
                if let Some(first) = self.spans.get(&s.id) {
                    let first_line = first.line;
                    self.issue(
                        line,
                        IssueKind::DuplicateSpan {
                            id: s.id,
                            first_line,
                        },
                    );
                    return;
                }
                self.spans.insert(
                    s.id,
                    SpanInfo {
                        line,
                        parent: s.parent,
                        start: s.ts,
                        end: None,
                        end_line: 0,
                    },
                );
            }
            Event::SpanEnd(e) => match self.spans.get_mut(&e.id) {
                None => self.issue(line, IssueKind::SpanEndWithoutStart { id: e.id }),
                Some(info) if info.end.is_some() => {
                    self.issue(line, IssueKind::DuplicateSpanEnd { id: e.id });
                }
                Some(info) => {
                    info.end = Some(e.ts);
                    info.end_line = line;
                    if e.ts < info.start {
                        self.issue(line, IssueKind::SpanEndsBeforeStart { id: e.id });
                    }
                }
            },
            Event::Memory(m) => {
                match m.kind {
                    AllocKind::Alloc => {
                        if let Some(&first_line) = self.live.get(&m.storage) {
                            self.issue(
                                line,
                                IssueKind::DuplicateAlloc {
                                    storage: m.storage,
                                    first_line,
                                },
                            );
                        } else {
                            self.live.insert(m.storage, line);
                        }
                    }
                    AllocKind::Free => {
                        if self.live.remove(&m.storage).is_none() {
                            self.issue(line, IssueKind::FreeWithoutAlloc { storage: m.storage });
                        }
                    }
                }
                if let Some(s) = m.span {
                    self.span_ref(line, s);
                }
            }
            Event::Op(_) | Event::Tensor(_) | Event::Marker(_) => {
                if let Some(s) = event.span() {
                    self.span_ref(line, s);
                }
            }
            Event::Gradient(g) => {
                if let Some(norm) = g.norm
                    && !(norm.is_finite() && norm >= 0.0)
                {
                    self.issue(
                        line,
                        IssueKind::InvalidGradientNorm {
                            param: g.param.clone(),
                            norm: format!("{norm}"),
                        },
                    );
                }
            }
            Event::Step(st) => {
                self.steps.insert(st.index);
            }
            Event::DeviceMemory(_) | Event::Counter(_) => {}
            Event::Frame(f) => {
                if !self.sampled.frames.insert(f.id) {
                    self.issue(
                        line,
                        IssueKind::DuplicateInterned {
                            what: "frame",
                            id: f.id,
                        },
                    );
                }
            }
            Event::Stack(st) => {
                if !self.sampled.stacks.insert(st.id) {
                    self.issue(
                        line,
                        IssueKind::DuplicateInterned {
                            what: "stack",
                            id: st.id,
                        },
                    );
                }
                for &f in &st.frames {
                    if !self.sampled.frames.contains(&f) {
                        self.sampled.refs.push((line, "frame", f));
                    }
                }
            }
            Event::Module(m) => {
                if !self.sampled.modules.insert(m.id) {
                    self.issue(
                        line,
                        IssueKind::DuplicateInterned {
                            what: "module",
                            id: m.id,
                        },
                    );
                }
            }
            Event::RawStack(st) => {
                if !self.sampled.raw_stacks.insert(st.id) {
                    self.issue(
                        line,
                        IssueKind::DuplicateInterned {
                            what: "raw_stack",
                            id: st.id,
                        },
                    );
                }
                // Module 0: an address no module held.
                for &[m, _] in &st.frames {
                    if m != 0 && !self.sampled.modules.contains(&m) {
                        self.sampled.refs.push((line, "module", m));
                    }
                }
            }
            Event::Samples(sm) => {
                if !self.sampled.stacks.contains(&sm.stack)
                    && !self.sampled.raw_stacks.contains(&sm.stack)
                {
                    self.sampled.refs.push((line, "stack", sm.stack));
                }
                if let Some(s) = sm.span {
                    self.span_ref(line, s);
                }
                let sum = self.sampled.counted.entry(sm.step).or_default();
                *sum = sum.saturating_add(sm.n);
            }
            Event::Sampler(sp) => {
                if sp.hz > Self::MAX_SAMPLER_HZ {
                    self.issue(
                        line,
                        IssueKind::ImplausibleSampleRate {
                            step: sp.step,
                            hz: sp.hz,
                        },
                    );
                }
                if let Some(first_line) = self.sampled.accounts.insert(sp.step, line) {
                    self.sampled.accounts.insert(sp.step, first_line);
                    self.issue(
                        line,
                        IssueKind::DuplicateSamplerAccount {
                            step: sp.step,
                            first_line,
                        },
                    );
                }
                let bound = sp.taken.checked_add(sp.lost).map_or(Some(None), |all| {
                    // At `hz` per CPU second the sampler can take no more than hz × CPU
                    // seconds; twice that plus 64 leaves room for timer jitter and rounding.
                    // Without the CPU time, the wall time on 4,096 CPUs bounds it.
                    let cpu_ns = sp.cpu_ns.unwrap_or(sp.dur.saturating_mul(4096));
                    let allowed = u128::from(sp.hz) * u128::from(cpu_ns) * 2 / 1_000_000_000 + 64;
                    (u128::from(all) > allowed)
                        .then(|| Some(u64::try_from(allowed).unwrap_or(u64::MAX)))
                });
                if let Some(bound) = bound {
                    self.issue(
                        line,
                        IssueKind::ImpossibleSampleAccount {
                            step: sp.step,
                            taken: sp.taken,
                            lost: sp.lost,
                            bound,
                        },
                    );
                }
                if let (Some(own), Some(all)) = (sp.sampler_cpu_ns, sp.cpu_ns)
                    && own > all
                {
                    self.issue(
                        line,
                        IssueKind::ImpossibleSamplerCpu {
                            step: sp.step,
                            sampler_cpu_ns: own,
                            cpu_ns: all,
                        },
                    );
                }
                self.sampled.taken.push((line, sp.step, sp.taken));
            }
            Event::HeapAlloc(a) => {
                let first = self
                    .heap
                    .live
                    .get(&a.id)
                    .map(|&(l, _)| l)
                    .or_else(|| self.heap.freed.get(&a.id).map(|&(l, _)| l));
                match first {
                    Some(first_line) => self.issue(
                        line,
                        IssueKind::DuplicateHeapAlloc {
                            id: a.id,
                            first_line,
                        },
                    ),
                    None => {
                        self.heap.live.insert(a.id, (line, a.ts));
                    }
                }
                if let Some(s) = a.span {
                    self.span_ref(line, s);
                }
            }
            Event::HeapFree(fr) => match self.heap.live.remove(&fr.id) {
                Some((alloc_line, ts)) => {
                    self.heap.freed.insert(fr.id, (alloc_line, line));
                    if fr.ts < ts {
                        self.issue(line, IssueKind::HeapFreeBeforeAlloc { id: fr.id });
                    }
                }
                None => match self.heap.freed.get(&fr.id) {
                    Some(&(_, first_line)) => self.issue(
                        line,
                        IssueKind::HeapDoubleFree {
                            id: fr.id,
                            first_line,
                        },
                    ),
                    None => self.issue(line, IssueKind::HeapFreeWithoutAlloc { id: fr.id }),
                },
            },
            Event::HeapSmall(sm) => {
                if let Some(s) = sm.span {
                    self.span_ref(line, s);
                }
            }
            Event::HeapAccount(a) => self.heap.accounts.push((line, a.step)),
        }
    }

    /// Events checked so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Resolves span references and nesting; returns every issue, sorted by line.
    pub fn finish(mut self) -> Vec<Issue> {
        let refs = std::mem::take(&mut self.refs);
        for (line, id) in refs {
            if !self.spans.contains_key(&id) {
                self.issue(line, IssueKind::UnknownSpan { id });
            }
        }
        let sampled = std::mem::take(&mut self.sampled);
        for (line, what, id) in sampled.refs {
            let known = match what {
                "frame" => sampled.frames.contains(&id),
                "module" => sampled.modules.contains(&id),
                _ => sampled.stacks.contains(&id) || sampled.raw_stacks.contains(&id),
            };
            if !known {
                self.issue(line, IssueKind::UnknownInterned { what, id });
            }
        }
        for (line, step, taken) in sampled.taken {
            let counted = sampled.counted.get(&step).copied().unwrap_or(0);
            if counted != taken {
                self.issue(
                    line,
                    IssueKind::SampleCountMismatch {
                        step,
                        taken,
                        counted,
                    },
                );
            }
        }
        for (line, step) in std::mem::take(&mut self.heap.accounts) {
            if step != 0 && !self.steps.contains(&step) {
                self.issue(line, IssueKind::HeapAccountForUnknownStep { step });
            }
        }
        let spans = std::mem::take(&mut self.spans);
        for (&id, info) in &spans {
            if info.end.is_none() {
                self.issue(info.line, IssueKind::SpanLeftOpen { id });
            }
            let Some(parent) = info.parent else { continue };
            let Some(p) = spans.get(&parent) else {
                self.issue(info.line, IssueKind::UnknownSpan { id: parent });
                continue;
            };
            let outside = info.start < p.start
                || match (info.end, p.end) {
                    (Some(ce), Some(pe)) => ce > pe,
                    _ => false,
                };
            if outside {
                let line = if info.end.is_some() {
                    info.end_line
                } else {
                    info.line
                };
                self.issue(line, IssueKind::ChildOutsideParent { id, parent });
            }
        }
        // The span map is the largest thing a validator holds: freed before the sort. An
        // unstable sort is enough (equal issues are identical, every field is compared, so
        // their order cannot show) and sorts in place, where a stable one allocates scratch
        // of up to half the list (28 MB for a million never-ended spans).
        drop(spans);
        self.issues.sort_unstable();
        self.issues
    }
}

/// Validates a trace read into memory.
pub fn validate(trace: &ParsedTrace) -> Vec<Issue> {
    let mut v = Validator::new();
    for e in &trace.events {
        v.check(e.line, &e.event);
    }
    v.finish()
}

/// The result of reading and validating a trace in one streaming pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    /// The header.
    pub header: Header,
    /// The trailer, when present.
    pub trailer: Option<Trailer>,
    /// No trailer, or outcome `incomplete`.
    pub incomplete: bool,
    /// A trailing partial line, if any.
    pub partial_line: Option<u64>,
    /// Events read, by type.
    pub counts: EventCounts,
    /// Unknown event types skipped.
    pub skipped_unknown: u64,
    /// Structural issues, sorted by line.
    pub issues: Vec<Issue>,
}

/// Reads and validates the trace from `reader` in one pass, without keeping events.
pub fn validate_reader<R: BufRead>(mut reader: TraceReader<R>) -> Result<Validation, ReadError> {
    let mut v = Validator::new();
    let mut counts = EventCounts::default();
    reader.for_each_in_place(|line, event| {
        counts.add(event.event_type(), 1);
        v.check(line, event);
    })?;
    Ok(Validation {
        incomplete: reader.is_incomplete(),
        partial_line: reader.partial_line(),
        skipped_unknown: reader.skipped_unknown(),
        trailer: reader.trailer().cloned(),
        header: reader.header().clone(),
        counts,
        issues: v.finish(),
    })
}

/// Reads and validates the trace at `path` in one streaming pass.
pub fn validate_file(
    path: impl AsRef<Path>,
    options: ReadOptions,
) -> Result<Validation, ReadError> {
    validate_reader(TraceReader::open(path, options)?)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    use super::{IdHash, IssueKind};
    use crate::schema::{Event, Phase, SamplerEvent, SamplingSource};
    use crate::{Run, TraceSession};

    /// A session's bytes with one `sampler` line for step 0 (and no samples).
    fn with_sampler_line(line: SamplerEvent) -> Vec<u8> {
        let (session, sink) = TraceSession::in_memory(Run::new("v", Phase::Infer, "cpu"));
        session.record_sampled(&[Event::Sampler(line)]);
        session.finish().unwrap();
        sink.bytes()
    }

    fn line(source: Option<SamplingSource>, cpu_ns: u64, own: u64) -> SamplerEvent {
        SamplerEvent {
            step: 0,
            hz: 1000,
            taken: 0,
            lost: 0,
            cpu_ns: Some(cpu_ns),
            sampler_cpu_ns: Some(own),
            ts: 0,
            dur: 1,
            source,
        }
    }

    #[test]
    fn the_sampler_line_says_its_source_and_an_impossible_own_cpu_is_an_issue() {
        // The source round-trips by its wire word.
        let bytes = with_sampler_line(line(Some(SamplingSource::PerfEvent), 4_000, 1_000));
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.contains(r#""source":"perf_event""#), "{text}");
        let trace = crate::read_trace_bytes(&bytes).unwrap();
        assert!(crate::validate(&trace).is_empty());
        let read = trace.events.iter().find_map(|e| match &e.event {
            Event::Sampler(s) => Some(s.source),
            _ => None,
        });
        assert_eq!(read, Some(Some(SamplingSource::PerfEvent)));
        // The sampler's own CPU time above the process's: the achieved rate cannot be told.
        let bad = crate::read_trace_bytes(&with_sampler_line(line(None, 1_000, 4_000))).unwrap();
        let kinds: Vec<IssueKind> = crate::validate(&bad).into_iter().map(|i| i.kind).collect();
        assert_eq!(
            kinds,
            [IssueKind::ImpossibleSamplerCpu {
                step: 0,
                sampler_cpu_ns: 4_000,
                cpu_ns: 1_000
            }]
        );
        // A source no writer names is an error naming the line and the word.
        let unknown = text.replace(r#""source":"perf_event""#, r#""source":"sonar""#);
        let err = crate::read_trace_bytes(unknown.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("sonar") && err.contains("line"), "{err}");
    }

    /// Ids with structure in the high bits (`i << 40`, as some allocators and id schemes make
    /// them) spread over the low bits that pick a bucket: many distinct buckets and only short
    /// chains, so every map operation stays O(1) and validation linear. A multiplicative
    /// hasher puts them all in bucket 0 (the product of `i << 40` has 40 zero low bits).
    #[test]
    fn structured_ids_spread_over_buckets() {
        let n = 250_000u64;
        let buckets = 1u64 << 18;
        let hasher = IdHash::default();
        let used: HashSet<u64> = (0..n)
            .map(|i| hasher.hash_one(i << 40) & (buckets - 1))
            .collect();
        // Random placement fills about 161,000 of the 262,144 buckets; foldhash fills about
        // 130,000 with chains of at most 4 (more even than random).
        assert!(used.len() > 100_000, "{} buckets used", used.len());
        // The longest chain stays short.
        let mut chains = vec![0u32; buckets as usize];
        for i in 0..n {
            chains[(hasher.hash_one(i << 40) & (buckets - 1)) as usize] += 1;
        }
        let longest = chains.iter().copied().max().unwrap_or(0);
        assert!(longest <= 8, "longest chain {longest}");
    }
}
