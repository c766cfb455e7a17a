//! The tracked heap (`heap_*` lines): live bytes over time, the true peak and what was live
//! there by span path, allocated and freed per span path and per step, temporaries told from
//! activations.
//!
//! Heap bytes are what the program asked the allocator for, from a tracking allocator; they
//! are never summed with the logical bytes (shape × dtype) of the memory report. One pass over
//! the allocations and frees in file order (the order the tracker matched them in) with a hash
//! map by allocation id, so O(n) on any input: a free of an id never allocated, a second free,
//! or an id allocated twice is counted in [`HeapReport::invalid`] and otherwise ignored.

use serde::Serialize;
use trace_record::schema::ExecStep;

use crate::events::spans::{MAX_PATH_NAMES, span_paths};
use crate::model::heap_log::HeapEntry;
use crate::model::intern::FastMap;
use crate::model::trace::Trace;

/// Timeline points kept at most (each the largest live total of its time bucket).
pub const HEAP_TIMELINE_POINTS: usize = 1024;

/// The path shown for allocations made outside every span (or in a span the trace lacks).
pub const NO_SPAN: &str = "(no span)";

/// One point of the heap timeline: live tracked bytes at `t_ns` (the largest in its bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HeapPoint {
    /// Time, ns since session start.
    pub t_ns: u64,
    /// Live tracked heap bytes.
    pub live_bytes: u64,
}

/// One allocation live at the peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeakAllocation {
    /// The allocation id (`heap_alloc`'s).
    pub id: u64,
    /// Heap bytes.
    pub bytes: u64,
    /// When it was allocated, ns since session start.
    pub allocated_at_ns: u64,
    /// The phase it was allocated in, when known.
    pub phase: Option<ExecStep>,
}

/// What was live at the peak in one span path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeakSpan {
    /// The span path (names from the root joined by `/`), or [`NO_SPAN`].
    pub path: String,
    /// Heap bytes live there at the peak.
    pub bytes: u64,
    /// Each allocation, largest first.
    pub allocations: Vec<PeakAllocation>,
}

/// Allocated and freed heap bytes of one span path (over every span with that path).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HeapSpanRow {
    /// The span path, or [`NO_SPAN`].
    pub path: String,
    /// The path's id in [`span_paths`] (and [`SpanNode::path_id`](crate::SpanNode::path_id)),
    /// `None` for [`NO_SPAN`].
    pub path_id: Option<u32>,
    /// Tracked allocations made in it.
    pub allocs: u64,
    /// Their heap bytes.
    pub alloc_bytes: u64,
    /// Bytes of those freed (at any time).
    pub freed_bytes: u64,
    /// Bytes freed before the span that made them ended: temporaries.
    pub temporary_bytes: u64,
    /// Bytes still live when the span that made them ended (or never freed in the trace):
    /// activations and other results that outlive their span.
    pub activation_bytes: u64,
    /// Allocations below the threshold (counted, not tracked; `heap_small`).
    pub small_allocs: u64,
    /// Their bytes.
    pub small_bytes: u64,
    /// Heap bytes of its allocations live at the peak.
    pub peak_bytes: u64,
}

/// Heap allocated and freed in one step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HeapStepRow {
    /// The step index.
    pub step: u64,
    /// Tracked allocations made in it.
    pub allocs: u64,
    /// Their heap bytes.
    pub alloc_bytes: u64,
    /// Tracked frees in it.
    pub frees: u64,
    /// Their heap bytes.
    pub freed_bytes: u64,
    /// The most tracked bytes live at any moment of it (absent: nothing tracked happened).
    pub peak_bytes: Option<u64>,
    /// Allocations below the threshold.
    pub small_allocs: u64,
    /// Their bytes.
    pub small_bytes: u64,
}

/// The tracked heap of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeapReport {
    /// The tracking threshold (bytes), from the tracker's accounts, when there are any.
    pub threshold: Option<u64>,
    /// Tracked allocations.
    pub allocs: u64,
    /// Their heap bytes.
    pub alloc_bytes: u64,
    /// Matched frees.
    pub frees: u64,
    /// Their heap bytes.
    pub freed_bytes: u64,
    /// The most tracked bytes live at once: the true peak (every tracked allocation and free
    /// replayed in order, not sampled).
    pub peak_bytes: u64,
    /// When the peak was first reached.
    pub peak_at_ns: u64,
    /// Allocations live at the peak.
    pub peak_live_allocations: u64,
    /// What was live at the peak, by span path, largest first.
    pub peak_by_span: Vec<PeakSpan>,
    /// Bytes still live at the end of the trace.
    pub live_at_end_bytes: u64,
    /// Live tracked bytes over time (at most [`HEAP_TIMELINE_POINTS`] points).
    pub timeline: Vec<HeapPoint>,
    /// Per span path, most bytes allocated first.
    pub spans: Vec<HeapSpanRow>,
    /// Per step, in step order.
    pub steps: Vec<HeapStepRow>,
    /// Allocations below the threshold (counted per scope and step).
    pub small_allocs: u64,
    /// Their bytes.
    pub small_bytes: u64,
    /// Entries the tracker lost (its buffer was full): the figures are then incomplete.
    pub lost: u64,
    /// Frees of tracked size whose allocation was not tracked.
    pub unmatched_frees: u64,
    /// Lines that contradict the others (a free of an unknown or already freed id, an id
    /// allocated twice), ignored.
    pub invalid: u64,
    /// Some sum passed 2^64 - 1 and stopped there.
    pub saturated: bool,
}

struct Alloc {
    bytes: u64,
    ts: u64,
    pos: usize,
    freed: Option<(usize, u64)>,
    /// Path index (`paths` for none).
    path: usize,
    span_end: Option<u64>,
    phase: Option<ExecStep>,
    id: u64,
}

/// The display path of path `p`: its names from the root, the outermost elided beyond
/// [`MAX_PATH_NAMES`] names (O(`MAX_PATH_NAMES`)).
fn path_string(
    trace: &Trace,
    table: &[(Option<u32>, crate::model::Sym)],
    depth: &[u32],
    p: usize,
) -> String {
    let mut names = Vec::new();
    let mut cur = Some(p as u32);
    while let Some(c) = cur {
        if names.len() == MAX_PATH_NAMES {
            break;
        }
        let (parent, name) = table[c as usize];
        names.push(trace.str(name));
        cur = parent;
    }
    names.reverse();
    let mut s = String::new();
    let total = depth[p] as usize;
    if total > names.len() {
        s.push_str(&format!("…{} more…/", total - names.len()));
    }
    s.push_str(&names.join("/"));
    s
}

/// The step (an index into [`Trace::steps`]) whose time holds `ts`.
fn step_at(trace: &Trace, ts: u64) -> Option<usize> {
    let i = trace.steps.partition_point(|s| s.start_ns <= ts);
    let i = i.checked_sub(1)?;
    (ts <= trace.steps[i].end_ns).then_some(i)
}

/// The tracked heap of `trace`; `None` when it has no tracked-heap line (absent, not zero).
pub fn heap_report(trace: &Trace) -> Option<HeapReport> {
    let log = &trace.heap;
    if log.is_empty() {
        return None;
    }
    trace
        .work
        .add((log.entries.len() + log.small.len() + trace.spans.len()) as u64);
    let mut span_index: FastMap<u64, usize> = FastMap::default();
    for (i, s) in trace.spans.iter().enumerate() {
        span_index.entry(s.id).or_insert(i);
    }
    let (path_of, table) = span_paths(trace);
    let np = table.len();
    let mut depth = vec![0u32; np];
    for (p, &(parent, _)) in table.iter().enumerate() {
        depth[p] = parent.map_or(1, |q| depth[q as usize].saturating_add(1));
    }
    let saturated = std::cell::Cell::new(false);
    let add = |a: &mut u64, b: u64| {
        if let Some(v) = a.checked_add(b) {
            *a = v;
        } else {
            *a = u64::MAX;
            saturated.set(true);
        }
    };
    let mut rows: Vec<HeapSpanRow> = vec![HeapSpanRow::default(); np + 1];
    let mut steps: Vec<HeapStepRow> = trace
        .steps
        .iter()
        .map(|s| HeapStepRow {
            step: s.index,
            ..HeapStepRow::default()
        })
        .collect();
    let mut allocs: Vec<Alloc> = Vec::new();
    let mut by_id: FastMap<u64, usize> = FastMap::default();
    let (mut invalid, mut frees, mut freed_bytes, mut alloc_bytes) = (0u64, 0u64, 0u64, 0u64);
    let mut live: u128 = 0;
    let (mut peak, mut peak_pos, mut peak_at) = (0u128, None::<usize>, 0u64);
    let mut points: Vec<HeapPoint> = Vec::with_capacity(log.entries.len());
    let clamp = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    for (pos, e) in log.entries.iter().enumerate() {
        let ts = match e {
            HeapEntry::Alloc(a) => {
                if by_id.contains_key(&a.id) {
                    invalid += 1;
                    continue;
                }
                let span = a.span.and_then(|s| span_index.get(&s).copied());
                let path = span.map_or(np, |i| path_of[i] as usize);
                by_id.insert(a.id, allocs.len());
                allocs.push(Alloc {
                    bytes: a.bytes,
                    ts: a.ts,
                    pos,
                    freed: None,
                    path,
                    span_end: span.and_then(|i| trace.spans[i].end_ns),
                    phase: a.phase,
                    id: a.id,
                });
                live += u128::from(a.bytes);
                add(&mut alloc_bytes, a.bytes);
                let row = &mut rows[path];
                row.allocs += 1;
                add(&mut row.alloc_bytes, a.bytes);
                if let Some(st) = step_at(trace, a.ts) {
                    steps[st].allocs += 1;
                    add(&mut steps[st].alloc_bytes, a.bytes);
                }
                a.ts
            }
            HeapEntry::Free(f) => {
                let Some(&i) = by_id.get(&f.id) else {
                    invalid += 1;
                    continue;
                };
                let al = &mut allocs[i];
                if al.freed.is_some() {
                    invalid += 1;
                    continue;
                }
                al.freed = Some((pos, f.ts));
                let bytes = al.bytes;
                let (path, span_end) = (al.path, al.span_end);
                live -= u128::from(bytes);
                frees += 1;
                add(&mut freed_bytes, bytes);
                let row = &mut rows[path];
                add(&mut row.freed_bytes, bytes);
                if span_end.is_some_and(|end| f.ts <= end) {
                    add(&mut row.temporary_bytes, bytes);
                }
                if let Some(st) = step_at(trace, f.ts) {
                    steps[st].frees += 1;
                    add(&mut steps[st].freed_bytes, bytes);
                }
                f.ts
            }
        };
        if live > peak || peak_pos.is_none() {
            peak = live;
            peak_pos = Some(pos);
            peak_at = ts;
        }
        if let Some(st) = step_at(trace, ts) {
            let p = &mut steps[st].peak_bytes;
            *p = Some(p.map_or(clamp(live), |v| v.max(clamp(live))));
        }
        points.push(HeapPoint {
            t_ns: ts,
            live_bytes: clamp(live),
        });
    }
    if live > u128::from(u64::MAX) || peak > u128::from(u64::MAX) {
        saturated.set(true);
    }
    // Activations: whatever was not freed before its span ended (or never freed).
    let mut peak_groups: Vec<Vec<PeakAllocation>> = vec![Vec::new(); np + 1];
    let mut peak_live = 0u64;
    for a in &allocs {
        let temporary = matches!((a.freed, a.span_end), (Some((_, ft)), Some(end)) if ft <= end);
        if !temporary {
            add(&mut rows[a.path].activation_bytes, a.bytes);
        }
        let live_at_peak =
            peak_pos.is_some_and(|pp| a.pos <= pp && a.freed.is_none_or(|(fp, _)| fp > pp));
        if live_at_peak {
            peak_live += 1;
            add(&mut rows[a.path].peak_bytes, a.bytes);
            peak_groups[a.path].push(PeakAllocation {
                id: a.id,
                bytes: a.bytes,
                allocated_at_ns: a.ts,
                phase: a.phase,
            });
        }
    }
    // Small allocations by span path and step.
    let step_pos: FastMap<u64, usize> = trace
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.index, i))
        .collect();
    let (mut small_allocs, mut small_bytes) = (0u64, 0u64);
    for s in &log.small {
        let path = s
            .span
            .and_then(|id| span_index.get(&id))
            .map_or(np, |&i| path_of[i] as usize);
        add(&mut rows[path].small_allocs, s.count);
        add(&mut rows[path].small_bytes, s.bytes);
        add(&mut small_allocs, s.count);
        add(&mut small_bytes, s.bytes);
        if let Some(&st) = step_pos.get(&s.step) {
            add(&mut steps[st].small_allocs, s.count);
            add(&mut steps[st].small_bytes, s.bytes);
        }
    }
    let (mut lost, mut unmatched_frees) = (0u64, 0u64);
    for a in &log.accounts {
        add(&mut lost, a.lost);
        add(&mut unmatched_frees, a.unmatched_frees);
    }
    let threshold = log.accounts.iter().map(|a| a.threshold).max();
    let name = |p: usize| {
        if p == np {
            NO_SPAN.to_string()
        } else {
            path_string(trace, &table, &depth, p)
        }
    };
    let mut peak_by_span: Vec<PeakSpan> = peak_groups
        .into_iter()
        .enumerate()
        .filter(|(_, g)| !g.is_empty())
        .map(|(p, mut g)| {
            g.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.id.cmp(&b.id)));
            let bytes = g.iter().fold(0u64, |s, a| s.saturating_add(a.bytes));
            PeakSpan {
                path: name(p),
                bytes,
                allocations: g,
            }
        })
        .collect();
    peak_by_span.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.path.cmp(&b.path)));
    let mut span_rows: Vec<HeapSpanRow> = rows
        .into_iter()
        .enumerate()
        .filter(|(_, r)| r.allocs > 0 || r.small_allocs > 0)
        .map(|(p, mut r)| {
            r.path = name(p);
            r.path_id = (p < np).then_some(p as u32);
            r
        })
        .collect();
    span_rows.sort_by(|a, b| {
        b.alloc_bytes
            .cmp(&a.alloc_bytes)
            .then(b.small_bytes.cmp(&a.small_bytes))
            .then(a.path.cmp(&b.path))
    });
    steps.retain(|s| s.allocs > 0 || s.frees > 0 || s.small_allocs > 0);
    Some(HeapReport {
        threshold,
        allocs: allocs.len() as u64,
        alloc_bytes,
        frees,
        freed_bytes,
        peak_bytes: clamp(peak),
        peak_at_ns: peak_at,
        peak_live_allocations: peak_live,
        peak_by_span,
        live_at_end_bytes: clamp(live),
        timeline: bucket(points),
        spans: span_rows,
        steps,
        small_allocs,
        small_bytes,
        lost,
        unmatched_frees,
        invalid,
        saturated: saturated.get(),
    })
}

/// At most [`HEAP_TIMELINE_POINTS`] points: equal time buckets, each its largest live total
/// (at that point's time), in time order.
fn bucket(mut points: Vec<HeapPoint>) -> Vec<HeapPoint> {
    if points.len() <= HEAP_TIMELINE_POINTS {
        points.sort_by_key(|p| p.t_ns);
        return points;
    }
    let lo = points.iter().map(|p| p.t_ns).min().unwrap_or(0);
    let hi = points.iter().map(|p| p.t_ns).max().unwrap_or(0);
    let width = u128::from(hi - lo) + 1;
    let n = HEAP_TIMELINE_POINTS as u128;
    let mut out: Vec<Option<HeapPoint>> = vec![None; HEAP_TIMELINE_POINTS];
    for p in points {
        let b = (u128::from(p.t_ns - lo) * n / width) as usize;
        let slot = &mut out[b.min(HEAP_TIMELINE_POINTS - 1)];
        if slot.is_none_or(|q| p.live_bytes > q.live_bytes) {
            *slot = Some(p);
        }
    }
    out.into_iter().flatten().collect()
}
