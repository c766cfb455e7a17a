//! The op table, span tree and memory peaks of several ranks of one run, side by side.
//!
//! Each view runs the single-trace analysis on every rank ([`op_table`], [`span_tree_ordered`],
//! [`memory_report`], [`heap_report`]) and lines the results up by op (name and, by shape,
//! input shapes), by span path (the same names from the root) or by rank. Ranks are numbered
//! and ordered as the rank report numbers them ([`crate::rank_report`]: the header's rank,
//! else the trace's position; repeated ranks each keep a column of their own, flagged in
//! `notes`).
//!
//! Per op and per span path, the slowest rank is the one with the largest total (the first
//! column among equals) and its excess is that total less the median of every rank's total,
//! a rank that never ran the op counting as zero (it spent no time in it). Per-rank figures
//! are kept only for the ranks that have the op or path, so that the views stay linear in the
//! ranks' own tables however many ranks there are and however little they share.

use serde::Serialize;
use trace_record::schema::{ExecStep, MemoryCategory, TimingMode};

use crate::events::heap::heap_report;
use crate::events::memory::{ByCategory, memory_report};
use crate::events::ops::{OpColumn, OpRow, OpTable, OpTableOptions, op_table, sort_rows};
use crate::events::spans::{SpanOrder, span_tree_ordered};
use crate::model::intern::FastMap;
use crate::model::trace::Trace;
use crate::runs::ranks::{rank_of, rank_order, set_notes};
use crate::stats::median;

/// One rank's column in a view over several ranks.
#[derive(Debug, Clone, Serialize)]
pub struct RankColumn {
    /// The rank: the header's, else the trace's position in the input.
    pub rank: u32,
    /// Whether the rank came from the header (else from the position).
    pub rank_from_header: bool,
    /// The trace (as given).
    pub source: String,
}

/// The columns of `traces` in rank order, and what looks wrong with the set.
fn columns(traces: &[Trace]) -> (Vec<usize>, Vec<RankColumn>, Vec<String>) {
    let order = rank_order(traces);
    let cols = order
        .iter()
        .map(|&i| RankColumn {
            rank: rank_of(traces, i),
            rank_from_header: traces[i].run.rank.is_some(),
            source: traces[i].source.clone(),
        })
        .collect();
    let notes = set_notes(traces, &order);
    (order, cols, notes)
}

/// The slowest of a row's per-rank totals and its excess over the median rank.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Slowest {
    /// The column (an index into the view's `ranks`) of the rank with the largest total.
    pub column: usize,
    /// Its rank.
    pub rank: u32,
    /// Its total, ns.
    pub total_ns: u64,
    /// The median of every rank's total (zero for a rank without the row), ns.
    pub median_ns: f64,
    /// `total_ns` less `median_ns`, ns (never negative).
    pub excess_ns: f64,
}

/// The slowest of `cells` (`(column, total)`, columns ascending, each at most once) among
/// `ranks` columns, the others counting as zero. O(k log k) in the cells.
fn slowest(cells: impl Iterator<Item = (usize, u64)>, cols: &[RankColumn]) -> Option<Slowest> {
    let totals: Vec<(usize, u64)> = cells.collect();
    let &(column, total_ns) = totals
        .iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))?;
    let zeros = cols.len().saturating_sub(totals.len());
    let mut present: Vec<u64> = totals.iter().map(|c| c.1).collect();
    let median_ns = median_with_zeros(&mut present, zeros);
    Some(Slowest {
        column,
        rank: cols.get(column).map_or(0, |c| c.rank),
        total_ns,
        median_ns,
        excess_ns: (total_ns as f64 - median_ns).max(0.0),
    })
}

/// The median of `present` together with `zeros` more zeros, without making the zeros.
fn median_with_zeros(present: &mut [u64], zeros: usize) -> f64 {
    let n = present.len() + zeros;
    if n == 0 {
        return 0.0;
    }
    present.sort_unstable();
    // The i-th smallest value of the whole multiset (zeros first).
    let at = |i: usize| {
        if i < zeros {
            0.0
        } else {
            present.get(i - zeros).map_or(0.0, |&v| v as f64)
        }
    };
    if n % 2 == 1 {
        at(n / 2)
    } else {
        f64::midpoint(at(n / 2 - 1), at(n / 2))
    }
}

/// One rank's figures for an op.
#[derive(Debug, Clone, Serialize)]
pub struct RankOpCell {
    /// The column (an index into [`RankOps::ranks`]).
    pub column: usize,
    /// The rank.
    pub rank: u32,
    /// Calls.
    pub count: u64,
    /// Sum of durations, ns.
    pub total_ns: u64,
    /// Sum of self durations, ns.
    pub self_ns: u64,
    /// Mean duration, ns.
    pub mean_ns: f64,
    /// 95th percentile duration on this rank, ns.
    pub p95_ns: u64,
}

/// One op across the ranks.
#[derive(Debug, Clone, Serialize)]
pub struct RankOpRow {
    /// The op name.
    pub name: String,
    /// The input shapes, when grouped by shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_shapes: Option<String>,
    /// The ranks that ran it, by column.
    pub ranks: Vec<RankOpCell>,
    /// The rank with the largest total and its excess over the median rank.
    pub slowest: Slowest,
}

/// Per rank, its op time in all.
#[derive(Debug, Clone, Serialize)]
pub struct RankOpTotals {
    /// Ops recorded.
    pub op_count: u64,
    /// The sum of its ops' self times (each op's time less the ops nested in it), ns, capped
    /// at `u64::MAX`.
    pub self_ns: u64,
    /// The time of its whole steps, ns, when it has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_time_ns: Option<u64>,
}

/// The op tables of several ranks side by side, and merged.
#[derive(Debug, Clone, Serialize)]
pub struct RankOps {
    /// The ranks, by rank.
    pub ranks: Vec<RankColumn>,
    /// Per column, its op time in all.
    pub totals: Vec<RankOpTotals>,
    /// The rank with the most op self time and its excess over the median rank, when any
    /// rank has ops.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slowest: Option<Slowest>,
    /// What looks wrong with the set of traces (see [`crate::runs::RankReport::notes`]).
    pub notes: Vec<String>,
    /// The op table of all ranks together: counts, totals, self times, output bytes and
    /// FLOPs summed, min and max over every call, the share of step time over the sum of the
    /// ranks' whole steps. Its `p95_ns` is the highest of the ranks' 95th percentiles (an
    /// upper bound of the 95th percentile of all calls). Sorted and limited as asked.
    pub merged: OpTable,
    /// Per row of `merged` (same order, same limit), the ranks' figures.
    pub rows: Vec<RankOpRow>,
}

/// Running sums of one merged op row.
struct OpMerge {
    row: OpRow,
    /// Self time in whole steps summed over ranks (share × step time per rank).
    in_whole: f64,
    /// Duration of the calls that recorded FLOPs, summed over ranks.
    flop_ns: f64,
    cells: Vec<RankOpCell>,
}

/// The op tables of `traces` (one per rank, any order) side by side and merged, each rank's
/// table built by [`op_table`] with `opts` (by shape or not; the sort and limit apply to the
/// merged table). O(n log n) in the ranks' ops.
pub fn rank_op_tables(traces: &[Trace], opts: &OpTableOptions) -> RankOps {
    let (order, ranks, notes) = columns(traces);
    let per_rank = OpTableOptions {
        by_shape: opts.by_shape,
        sort: OpColumn::Name,
        limit: None,
    };
    let mut merged: Vec<OpMerge> = Vec::new();
    let mut index: FastMap<(String, Option<String>), usize> = FastMap::default();
    let mut totals = Vec::with_capacity(order.len());
    let (mut op_count, mut saturated) = (0u64, false);
    let mut step_time: Option<u64> = None;
    for (column, &i) in order.iter().enumerate() {
        let t = &traces[i];
        let table = op_table(t, &per_rank);
        t.work.add(table.rows.len() as u64);
        op_count = op_count.saturating_add(table.op_count);
        saturated |= table.saturated;
        if let Some(s) = table.step_time_ns {
            let sum = step_time.unwrap_or(0).checked_add(s);
            saturated |= sum.is_none();
            step_time = Some(sum.unwrap_or(u64::MAX));
        }
        let mut self_sum = 0u64;
        for r in table.rows {
            self_sum = self_sum.saturating_add(r.self_ns);
            let cell = RankOpCell {
                column,
                rank: ranks[column].rank,
                count: r.count,
                total_ns: r.total_ns,
                self_ns: r.self_ns,
                mean_ns: r.mean_ns,
                p95_ns: r.p95_ns,
            };
            let in_whole = match (r.share_of_step, table.step_time_ns) {
                (Some(f), Some(s)) => f * s as f64,
                _ => 0.0,
            };
            let flop_ns = match (r.flops, r.gflop_per_s) {
                (Some(f), Some(g)) if g > 0.0 => f as f64 / g,
                _ => 0.0,
            };
            let key = (r.name, r.input_shapes);
            if let Some(&m) = index.get(&key) {
                let m = &mut merged[m];
                let a = &mut m.row;
                saturated |= add_to(&mut a.count, r.count);
                saturated |= add_to(&mut a.total_ns, r.total_ns);
                saturated |= add_to(&mut a.self_ns, r.self_ns);
                saturated |= add_to(&mut a.output_bytes, r.output_bytes);
                a.min_ns = a.min_ns.min(r.min_ns);
                a.max_ns = a.max_ns.max(r.max_ns);
                a.p95_ns = a.p95_ns.max(r.p95_ns);
                a.flops = match (a.flops, r.flops) {
                    (Some(x), Some(y)) => {
                        saturated |= x.checked_add(y).is_none();
                        Some(x.saturating_add(y))
                    }
                    (x, y) => x.or(y),
                };
                m.in_whole += in_whole;
                m.flop_ns += flop_ns;
                m.cells.push(cell);
            } else {
                index.insert(key.clone(), merged.len());
                merged.push(OpMerge {
                    row: OpRow {
                        name: key.0,
                        input_shapes: key.1,
                        count: r.count,
                        total_ns: r.total_ns,
                        self_ns: r.self_ns,
                        mean_ns: 0.0,
                        min_ns: r.min_ns,
                        max_ns: r.max_ns,
                        p95_ns: r.p95_ns,
                        output_bytes: r.output_bytes,
                        share_of_step: None,
                        flops: r.flops,
                        gflop_per_s: None,
                    },
                    in_whole,
                    flop_ns,
                    cells: vec![cell],
                });
            }
        }
        totals.push(RankOpTotals {
            op_count: table.op_count,
            self_ns: self_sum,
            step_time_ns: table.step_time_ns,
        });
    }
    // Finish the merged rows, sort them as one op table is sorted, and keep each row's cells
    // beside it through the sort.
    let mut rows: Vec<(OpRow, Vec<RankOpCell>)> = merged
        .into_iter()
        .map(|mut m| {
            let r = &mut m.row;
            r.mean_ns = if r.count > 0 {
                r.total_ns as f64 / r.count as f64
            } else {
                0.0
            };
            r.share_of_step = step_time.filter(|&s| s > 0).map(|s| m.in_whole / s as f64);
            r.gflop_per_s = r
                .flops
                .filter(|_| m.flop_ns > 0.0)
                .map(|f| f as f64 / m.flop_ns);
            (m.row, m.cells)
        })
        .collect();
    let groups = rows.len();
    // Sort the rows as one op table is sorted, then lay the cells out in that order (`index`
    // holds each row's position in `rows`).
    let mut keyed: Vec<OpRow> = rows.iter().map(|(r, _)| r.clone()).collect();
    sort_rows(&mut keyed, opts.sort);
    if let Some(t) = traces.first() {
        t.work.add_sort(groups);
    }
    if let Some(l) = opts.limit {
        keyed.truncate(l);
    }
    let mut side = Vec::with_capacity(keyed.len());
    for r in &keyed {
        let cells = index
            .get(&(r.name.clone(), r.input_shapes.clone()))
            .and_then(|&k| rows.get_mut(k))
            .map(|(_, c)| std::mem::take(c))
            .unwrap_or_default();
        let Some(slow) = slowest(cells.iter().map(|c| (c.column, c.total_ns)), &ranks) else {
            continue;
        };
        side.push(RankOpRow {
            name: r.name.clone(),
            input_shapes: r.input_shapes.clone(),
            ranks: cells,
            slowest: slow,
        });
    }
    let slowest_rank = slowest(
        totals
            .iter()
            .enumerate()
            .filter(|(_, t)| t.op_count > 0)
            .map(|(c, t)| (c, t.self_ns)),
        &ranks,
    );
    RankOps {
        ranks,
        totals,
        slowest: slowest_rank,
        notes,
        merged: OpTable {
            // The first rank's (`notes` says when the ranks differ).
            timing: order
                .first()
                .map_or(TimingMode::Host, |&i| traces[i].run.timing),
            by_shape: opts.by_shape,
            sort: opts.sort,
            op_count,
            step_time_ns: step_time,
            saturated,
            groups,
            rows: keyed,
        },
        rows: side,
    }
}

/// `*acc += v`, capped at `u64::MAX`; true when it had to cap.
fn add_to(acc: &mut u64, v: u64) -> bool {
    let (x, over) = acc.overflowing_add(v);
    *acc = if over { u64::MAX } else { x };
    over
}

/// One rank's figures for a span path.
#[derive(Debug, Clone, Serialize)]
pub struct RankSpanCell {
    /// The column (an index into [`RankSpans::ranks`]).
    pub column: usize,
    /// The rank.
    pub rank: u32,
    /// Closed spans with this path.
    pub count: u64,
    /// Spans with this path never closed (not counted in the times).
    pub open: u64,
    /// Sum of durations, ns.
    pub total_ns: u64,
    /// Sum of self durations, ns.
    pub self_ns: u64,
    /// Mean duration of a span, ns (0 without closed spans).
    pub mean_ns: f64,
    /// Mean total per step over the steps where the path occurs, ns; absent when the rank's
    /// trace has no steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_per_step_ns: Option<f64>,
}

/// One span path across the ranks.
#[derive(Debug, Clone, Serialize)]
pub struct RankSpanRow {
    /// The display path (as [`crate::SpanNode::path`]).
    pub path: String,
    /// The last name of the path.
    pub name: String,
    /// Depth (0 for a root).
    pub depth: u32,
    /// The training phase of the path on the first rank that has it, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_step: Option<ExecStep>,
    /// The ranks that have the path, by column.
    pub ranks: Vec<RankSpanCell>,
    /// The rank with the largest total and its excess over the median rank.
    pub slowest: Slowest,
}

/// The span trees of several ranks side by side.
#[derive(Debug, Clone, Serialize)]
pub struct RankSpans {
    /// How durations were measured (the first rank's).
    pub timing: TimingMode,
    /// The ranks, by rank.
    pub ranks: Vec<RankColumn>,
    /// What looks wrong with the set of traces (see [`crate::runs::RankReport::notes`]).
    pub notes: Vec<String>,
    /// The paths of all ranks in one tree, depth first: children in the order they first
    /// ran on the lowest rank that has them (later ranks' new paths after), or largest total
    /// over the ranks first with [`SpanOrder::Total`].
    pub rows: Vec<RankSpanRow>,
}

/// The span trees of `traces` (one per rank, any order) side by side: each rank's tree built
/// by [`span_tree_ordered`], paths paired by their names from the root. O(n log n) in the
/// ranks' spans.
pub fn rank_span_trees(traces: &[Trace], order: SpanOrder) -> RankSpans {
    let (by_rank, ranks, notes) = columns(traces);
    // Merged nodes in the order they were first met, keyed by (merged parent, name).
    struct Merged {
        parent: Option<usize>,
        row: RankSpanRow,
        total: u64,
    }
    let mut merged: Vec<Merged> = Vec::new();
    let mut index: FastMap<(Option<usize>, String), usize> = FastMap::default();
    let mut timing = None;
    for (column, &i) in by_rank.iter().enumerate() {
        let t = &traces[i];
        let tree = span_tree_ordered(t, order);
        timing.get_or_insert(tree.timing);
        t.work.add(tree.nodes.len() as u64);
        // This rank's node → merged node (parents come before children).
        let mut to_merged: Vec<usize> = Vec::with_capacity(tree.nodes.len());
        for n in tree.nodes {
            let parent = n.parent.and_then(|p| to_merged.get(p).copied());
            let cell = RankSpanCell {
                column,
                rank: ranks[column].rank,
                count: n.count,
                open: n.open,
                total_ns: n.total_ns,
                self_ns: n.self_ns,
                mean_ns: if n.count > 0 {
                    n.total_ns as f64 / n.count as f64
                } else {
                    0.0
                },
                mean_per_step_ns: n.per_step.map(|s| s.mean),
            };
            let key = (parent, n.name);
            let m = if let Some(&m) = index.get(&key) {
                m
            } else {
                let m = merged.len();
                merged.push(Merged {
                    parent,
                    row: RankSpanRow {
                        path: n.path,
                        name: key.1.clone(),
                        depth: parent.map_or(0, |p| merged[p].row.depth.saturating_add(1)),
                        exec_step: n.exec_step,
                        ranks: Vec::new(),
                        slowest: Slowest {
                            column,
                            rank: 0,
                            total_ns: 0,
                            median_ns: 0.0,
                            excess_ns: 0.0,
                        },
                    },
                    total: 0,
                });
                index.insert(key, m);
                m
            };
            let node = &mut merged[m];
            // A path met twice in one rank (names repeated under one parent do not occur in
            // one tree; kept safe all the same): its figures add up in one cell.
            match node.row.ranks.last_mut() {
                Some(c) if c.column == column => {
                    c.count = c.count.saturating_add(cell.count);
                    c.open = c.open.saturating_add(cell.open);
                    c.total_ns = c.total_ns.saturating_add(cell.total_ns);
                    c.self_ns = c.self_ns.saturating_add(cell.self_ns);
                }
                _ => node.row.ranks.push(cell),
            }
            node.total = node.total.saturating_add(n.total_ns);
            to_merged.push(m);
        }
    }
    // Children lists in first-met order, then a depth-first walk (iterative).
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); merged.len()];
    let mut roots: Vec<usize> = Vec::new();
    for (m, n) in merged.iter().enumerate() {
        match n.parent {
            Some(p) => children[p].push(m),
            None => roots.push(m),
        }
    }
    if order == SpanOrder::Total {
        let key = |&a: &usize, &b: &usize| {
            merged[b]
                .total
                .cmp(&merged[a].total)
                .then_with(|| merged[a].row.name.cmp(&merged[b].row.name))
        };
        roots.sort_by(key);
        for c in &mut children {
            c.sort_by(key);
        }
    }
    let mut dfs: Vec<usize> = Vec::with_capacity(merged.len());
    let mut stack: Vec<usize> = roots.into_iter().rev().collect();
    while let Some(m) = stack.pop() {
        dfs.push(m);
        stack.extend(children[m].iter().rev());
    }
    let mut slots: Vec<Option<Merged>> = merged.into_iter().map(Some).collect();
    let rows = dfs
        .into_iter()
        .filter_map(|m| slots.get_mut(m).and_then(Option::take))
        .filter_map(|m| {
            let mut row = m.row;
            row.slowest = slowest(row.ranks.iter().map(|c| (c.column, c.total_ns)), &ranks)?;
            Some(row)
        })
        .collect();
    RankSpans {
        timing: timing.unwrap_or(TimingMode::Host),
        ranks,
        notes,
        rows,
    }
}

/// One device of one rank at its logical memory peak.
#[derive(Debug, Clone, Serialize)]
pub struct RankDevicePeak {
    /// The device label.
    pub device: String,
    /// Peak live logical bytes.
    pub peak_bytes: u64,
    /// When the peak was first reached, ns from the rank's start.
    pub peak_at_ns: u64,
    /// The peak's breakdown by category.
    pub peak_by_category: ByCategory,
    /// Live logical bytes at the end of the trace.
    pub end_bytes: u64,
}

/// One rank's memory.
#[derive(Debug, Clone, Serialize)]
pub struct RankMemoryRow {
    /// The column (an index into [`RankMemory::ranks`]).
    pub column: usize,
    /// The rank.
    pub rank: u32,
    /// Per device (by device label), its logical peak; empty when the rank's trace has no
    /// memory events (absent, not zero).
    pub devices: Vec<RankDevicePeak>,
    /// The highest logical peak over its devices (the rank report's figure); absent without
    /// memory events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<u64>,
    /// The tracked heap's peak, when the trace has tracked-heap lines (heap bytes, never
    /// summed with logical ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heap_peak_bytes: Option<u64>,
}

/// The rank whose logical peak is highest.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct HighestPeak {
    /// Its column.
    pub column: usize,
    /// Its rank.
    pub rank: u32,
    /// Its peak, bytes.
    pub peak_bytes: u64,
    /// The median peak of the ranks with memory events, bytes.
    pub median_bytes: f64,
    /// `peak_bytes` less `median_bytes` (never negative).
    pub excess_bytes: f64,
}

/// The memory peaks of several ranks side by side.
#[derive(Debug, Clone, Serialize)]
pub struct RankMemory {
    /// Always `logical` (see [`crate::MemoryReport::bytes_kind`]).
    pub bytes_kind: &'static str,
    /// The ranks, by rank.
    pub ranks: Vec<RankColumn>,
    /// What looks wrong with the set of traces (see [`crate::runs::RankReport::notes`]).
    pub notes: Vec<String>,
    /// The categories that are not zero at some rank's peak, in [`MemoryCategory::ALL`]
    /// order.
    pub categories: Vec<MemoryCategory>,
    /// Per column, its memory.
    pub rows: Vec<RankMemoryRow>,
    /// The rank with the highest logical peak (the first column among equals), when any rank
    /// has memory events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub highest: Option<HighestPeak>,
}

/// The memory peaks of `traces` (one per rank, any order) side by side, each rank's from
/// [`memory_report`] (and [`heap_report`]). Linear in the ranks' memory events.
pub fn rank_memory(traces: &[Trace]) -> RankMemory {
    let (order, ranks, notes) = columns(traces);
    let mut rows = Vec::with_capacity(order.len());
    for (column, &i) in order.iter().enumerate() {
        let t = &traces[i];
        let devices: Vec<RankDevicePeak> = memory_report(t)
            .map(|r| {
                r.devices
                    .into_iter()
                    .map(|d| RankDevicePeak {
                        device: d.device,
                        peak_bytes: d.peak_bytes,
                        peak_at_ns: d.peak_at_ns,
                        peak_by_category: d.peak_by_category,
                        end_bytes: d.end_bytes,
                    })
                    .collect()
            })
            .unwrap_or_default();
        rows.push(RankMemoryRow {
            column,
            rank: ranks[column].rank,
            peak_bytes: devices.iter().map(|d| d.peak_bytes).max(),
            devices,
            heap_peak_bytes: heap_report(t).map(|h| h.peak_bytes),
        });
    }
    let categories = MemoryCategory::ALL
        .into_iter()
        .filter(|&c| {
            rows.iter()
                .flat_map(|r| &r.devices)
                .any(|d| d.peak_by_category.get(c) > 0)
        })
        .collect();
    let mut peaks: Vec<u64> = rows.iter().filter_map(|r| r.peak_bytes).collect();
    let median_bytes = median(&mut peaks);
    let highest = rows
        .iter()
        .filter_map(|r| Some((r.column, r.rank, r.peak_bytes?)))
        .max_by(|a, b| a.2.cmp(&b.2).then(b.0.cmp(&a.0)))
        .zip(median_bytes)
        .map(|((column, rank, peak_bytes), median_bytes)| HighestPeak {
            column,
            rank,
            peak_bytes,
            median_bytes,
            excess_bytes: (peak_bytes as f64 - median_bytes).max(0.0),
        });
    RankMemory {
        bytes_kind: "logical",
        ranks,
        notes,
        categories,
        rows,
        highest,
    }
}

#[cfg(test)]
mod tests {
    use trace_record::schema::{AllocKind, Phase, SpanKind};
    use trace_record::{MemoryRecord, OpRecord, Run, TraceSession};

    use super::*;
    use crate::model::load::{LoadOptions, load_str};

    const SLOW: u32 = 2;
    const STEPS: u64 = 3;

    /// How a test rank records.
    #[derive(Clone, Copy)]
    struct Shape {
        /// The rank in the header, if any.
        rank: Option<u32>,
        /// Extra time in `matmul` (and so in its span) per step, ns.
        extra: u64,
        /// Whether it records ops and memory at all.
        ops: bool,
        /// Whether it runs an op (and span) no other rank runs.
        extra_op: bool,
        /// Activation bytes allocated per step.
        bytes: u64,
    }

    fn shape(rank: u32) -> Shape {
        Shape {
            rank: Some(rank),
            extra: if rank == SLOW { 3_000_000 } else { 0 },
            ops: true,
            extra_op: false,
            bytes: 1024 * (u64::from(rank) + 1),
        }
    }

    /// Every op's chosen duration (the slowed matmul's adds [`Shape::extra`]).
    const OP_NS: u64 = 50_000;

    /// An op of `dur` ns from `start`.
    fn op_for(s: &TraceSession, name: &str, id: u64, start: u64, dur: u64, bytes: u64) {
        s.record_op(&OpRecord {
            name,
            inputs: &[],
            outputs: &[id],
            shape: &[4],
            dtype: "f32",
            device: "cpu",
            start_ns: start,
            dur_ns: dur,
            in_bytes: 0,
            out_bytes: bytes,
            category: Some(MemoryCategory::Activation),
            flops: Some(1000),
        });
    }

    /// An op from `start` to now.
    fn op(s: &TraceSession, name: &str, id: u64, start: u64, bytes: u64) {
        op_for(
            s,
            name,
            id,
            start,
            s.now_ns().saturating_sub(start).max(1),
            bytes,
        );
    }

    fn mem(s: &TraceSession, kind: AllocKind, id: u64, bytes: u64, at: u64) {
        s.record_memory_at(
            &MemoryRecord {
                kind,
                storage: id,
                tensor: id,
                bytes,
                device: "cpu",
                category: MemoryCategory::Activation,
            },
            at,
        );
    }

    /// One rank recorded by a real session: `STEPS` steps of a `train_step` span holding a
    /// `forward` span with a `matmul` op (slowed by `extra`) and an `add` op.
    ///
    /// With chosen times: every span, op and memory event of a step is placed from the
    /// instant the step began, and the next boundary waits until the clock has passed them
    /// (`testkit::wait_past`), so the durations compared are the chosen ones on an idle and
    /// on a saturated machine alike (a timed sleep once let a preempted rank outrun the
    /// slowed one).
    fn record(sh: Shape) -> Trace {
        let mut run = Run::new("tests::rank_views", Phase::Train, "cpu").run_id("job");
        if let Some(r) = sh.rank {
            run = run.rank(r, 4);
        }
        let (s, sink) = TraceSession::in_memory(run);
        let mut id = 1u64;
        for _ in 0..STEPS {
            s.step();
            let t0 = s.now_ns();
            let mut t = t0;
            let step = s.start_span_at("train_step", SpanKind::Function, None, t);
            let fwd = s.start_span_at("forward", SpanKind::Module, Some(ExecStep::Forward), t);
            if sh.ops {
                op_for(&s, "matmul", id, t, OP_NS + sh.extra, 64);
                t += OP_NS + sh.extra;
                mem(&s, AllocKind::Alloc, id, sh.bytes, t);
                op_for(&s, "add", id + 1, t, OP_NS, 64);
                t += OP_NS;
            } else {
                t += sh.extra;
            }
            s.end_span_id_at(fwd.unwrap(), t);
            if sh.extra_op {
                let x = s.start_span_at("all_reduce", SpanKind::Function, None, t);
                op_for(&s, "all_reduce", id + 2, t, OP_NS, 8);
                t += OP_NS;
                s.end_span_id_at(x.unwrap(), t);
            }
            if sh.ops {
                mem(&s, AllocKind::Free, id, sh.bytes, t);
            }
            s.end_span_id_at(step.unwrap(), t);
            testkit::wait_past(&s, t);
            id += 3;
        }
        drop(s.finish());
        let text = String::from_utf8(sink.bytes()).unwrap_or_default();
        let name = format!("rank-{}.jsonl", sh.rank.map_or(-1, i64::from));
        load_str(&text, &name, LoadOptions::default()).unwrap()
    }

    fn four() -> Vec<Trace> {
        // Given out of rank order: the views order by rank.
        [3, 1, 0, 2].into_iter().map(|r| record(shape(r))).collect()
    }

    #[test]
    fn rank_ops_name_the_slowed_rank_and_merge_the_tables() {
        let traces = four();
        let v = rank_op_tables(&traces, &OpTableOptions::default());
        let ranks: Vec<u32> = v.ranks.iter().map(|c| c.rank).collect();
        assert_eq!(ranks, [0, 1, 2, 3]);
        assert!(v.notes.is_empty(), "{:?}", v.notes);
        assert_eq!(v.merged.rows[0].name, "matmul", "{:?}", v.merged.rows);
        let mm = &v.rows[0];
        assert_eq!(mm.name, "matmul");
        assert_eq!(mm.ranks.len(), 4);
        assert_eq!(mm.slowest.rank, SLOW);
        assert_eq!(mm.slowest.column, SLOW as usize);
        // The chosen extra time, exactly: 3 ms in each of the 3 steps.
        assert_eq!(mm.slowest.excess_ns, 3.0 * 3e6, "{:?}", mm.slowest);
        assert_eq!(v.slowest.map(|s| s.rank), Some(SLOW));
        // The merged row is the sums of the ranks' rows.
        let m = &v.merged.rows[0];
        assert_eq!(m.count, 4 * STEPS);
        let total: u64 = mm.ranks.iter().map(|c| c.total_ns).sum();
        assert_eq!(m.total_ns, total);
        assert_eq!(m.flops, Some(4 * STEPS * 1000));
        assert_eq!(
            m.p95_ns,
            mm.ranks.iter().map(|c| c.p95_ns).max().unwrap_or(0)
        );
        assert_eq!(v.merged.op_count, 4 * 2 * STEPS);
        let steps: u64 = v.totals.iter().filter_map(|t| t.step_time_ns).sum();
        assert_eq!(v.merged.step_time_ns, Some(steps));
        // Sort and limit apply to the merged table and its side-by-side rows alike.
        let by_name = rank_op_tables(
            &traces,
            &OpTableOptions {
                sort: OpColumn::Name,
                limit: Some(1),
                ..OpTableOptions::default()
            },
        );
        assert_eq!(by_name.merged.groups, 2);
        assert_eq!(by_name.merged.rows.len(), 1);
        assert_eq!(by_name.rows.len(), 1);
        assert_eq!(by_name.rows[0].name, "add");
    }

    #[test]
    fn rank_ops_of_one_trace_are_its_op_table() {
        let t = record(shape(SLOW));
        for by_shape in [false, true] {
            let opts = OpTableOptions {
                by_shape,
                ..OpTableOptions::default()
            };
            let one = op_table(&t, &opts);
            let v = rank_op_tables(std::slice::from_ref(&t), &opts);
            assert_eq!(v.merged.rows.len(), one.rows.len());
            for (a, b) in v.merged.rows.iter().zip(&one.rows) {
                let share = |r: &OpRow| r.share_of_step.unwrap_or(-1.0);
                assert!((share(a) - share(b)).abs() < 1e-9, "{a:?} {b:?}");
                let gf = |r: &OpRow| r.gflop_per_s.unwrap_or(-1.0);
                assert!((gf(a) - gf(b)).abs() < 1e-9 * gf(b).abs().max(1.0));
                let strip = |r: &OpRow| OpRow {
                    share_of_step: None,
                    gflop_per_s: None,
                    ..r.clone()
                };
                assert_eq!(
                    serde_json::to_value(strip(a)).ok(),
                    serde_json::to_value(strip(b)).ok()
                );
            }
            assert_eq!(v.merged.op_count, one.op_count);
            assert_eq!(v.merged.step_time_ns, one.step_time_ns);
            assert_eq!(v.merged.groups, one.groups);
            // One rank is its own median: no excess.
            assert!(v.rows.iter().all(|r| r.slowest.excess_ns == 0.0));
        }
    }

    #[test]
    fn rank_views_take_ranks_without_ops_repeated_and_missing_ranks() {
        // Rank 3 records no ops or memory; rank 1 runs an op nobody else runs.
        let mut shapes: Vec<Shape> = (0..4).map(shape).collect();
        shapes[3].ops = false;
        shapes[1].extra_op = true;
        let traces: Vec<Trace> = shapes.iter().map(|&s| record(s)).collect();
        let v = rank_op_tables(&traces, &OpTableOptions::default());
        assert_eq!(v.totals[3].op_count, 0);
        let ar = v.rows.iter().find(|r| r.name == "all_reduce").unwrap();
        assert_eq!(ar.ranks.len(), 1);
        assert_eq!(ar.slowest.rank, 1);
        // Three of four ranks spent nothing in it: the median rank's total is zero.
        assert_eq!(ar.slowest.median_ns, 0.0);
        assert_eq!(ar.slowest.excess_ns, ar.slowest.total_ns as f64);
        let mm = v.rows.iter().find(|r| r.name == "matmul").unwrap();
        assert_eq!(
            mm.ranks.iter().map(|c| c.rank).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        let sp = rank_span_trees(&traces, SpanOrder::Call);
        let ar = sp.rows.iter().find(|r| r.name == "all_reduce").unwrap();
        assert_eq!((ar.ranks.len(), ar.slowest.rank), (1, 1));
        let m = rank_memory(&traces);
        assert!(m.rows[3].devices.is_empty());
        assert_eq!(m.rows[3].peak_bytes, None);
        // The median is over the ranks that have memory: 1, 2 and 3 KiB.
        assert_eq!(m.highest.map(|h| h.median_bytes), Some(2048.0));

        // Two traces that both say rank 0, and a world of 4 with two traces given.
        let twice = vec![record(shape(0)), record(shape(0))];
        let v = rank_op_tables(&twice, &OpTableOptions::default());
        assert_eq!(v.ranks.len(), 2);
        assert!(v.ranks.iter().all(|c| c.rank == 0));
        assert!(v.notes.iter().any(|n| n.contains("more than one trace")));
        assert!(v.notes.iter().any(|n| n.contains("world size is 4")));
        assert_eq!(v.rows[0].ranks.len(), 2);
        // No rank in the headers: ranks are positions.
        let plain: Vec<Trace> = (0..2)
            .map(|k| {
                record(Shape {
                    rank: None,
                    ..shape(k)
                })
            })
            .collect();
        let m = rank_memory(&plain);
        assert_eq!(m.ranks.iter().map(|c| c.rank).collect::<Vec<_>>(), [0, 1]);
        assert!(m.ranks.iter().all(|c| !c.rank_from_header));
        // Nothing at all.
        let none = rank_op_tables(&[], &OpTableOptions::default());
        assert!(none.rows.is_empty() && none.slowest.is_none());
        assert!(rank_span_trees(&[], SpanOrder::Total).rows.is_empty());
        assert!(rank_memory(&[]).highest.is_none());
    }

    #[test]
    fn rank_spans_pair_paths_and_name_the_slowed_rank() {
        let mut shapes: Vec<Shape> = (0..4).map(shape).collect();
        shapes[3].extra_op = true;
        let traces: Vec<Trace> = shapes.iter().map(|&s| record(s)).collect();
        let v = rank_span_trees(&traces, SpanOrder::Call);
        let paths: Vec<(&str, u32)> = v.rows.iter().map(|r| (r.path.as_str(), r.depth)).collect();
        assert_eq!(
            paths,
            [
                ("train_step", 0),
                ("train_step/forward", 1),
                ("train_step/all_reduce", 1)
            ]
        );
        for r in &v.rows[..2] {
            assert_eq!(r.ranks.len(), 4, "{r:?}");
            assert_eq!(r.slowest.rank, SLOW, "{r:?}");
            assert!(r.slowest.excess_ns >= 0.9 * 3.0 * 3e6, "{r:?}");
            let cell = &r.ranks[SLOW as usize];
            assert_eq!(cell.count, STEPS);
            assert!(cell.mean_per_step_ns.is_some());
        }
        assert_eq!(v.rows[1].exec_step, Some(ExecStep::Forward));
        // By total: the slowed work first.
        let t = rank_span_trees(&traces, SpanOrder::Total);
        assert_eq!(t.rows[0].path, "train_step");
        assert_eq!(t.rows[1].path, "train_step/forward");
    }

    #[test]
    fn rank_memory_names_the_highest_peak() {
        let mut shapes: Vec<Shape> = (0..4).map(shape).collect();
        shapes[SLOW as usize].bytes = 1 << 20;
        let traces: Vec<Trace> = shapes.iter().map(|&s| record(s)).collect();
        let m = rank_memory(&traces);
        assert_eq!(m.categories, [MemoryCategory::Activation]);
        let h = m.highest.unwrap();
        assert_eq!((h.rank, h.peak_bytes), (SLOW, 1 << 20));
        // Median of 1, 2, 4 KiB and 1 MiB.
        assert_eq!(h.median_bytes, 3.0 * 1024.0);
        for r in &m.rows {
            assert_eq!(r.devices.len(), 1);
            assert_eq!(
                r.devices[0].peak_by_category.activation,
                r.peak_bytes.unwrap()
            );
            assert_eq!(r.heap_peak_bytes, None);
        }
    }

    #[test]
    fn rank_views_stay_linear_when_ranks_share_nothing() {
        // Every rank its own op: one cell per row, not a column per rank per row.
        let traces: Vec<Trace> = (0..40u32)
            .map(|r| {
                let (s, sink) =
                    TraceSession::in_memory(Run::new("t", Phase::Train, "cpu").rank(r, 40));
                s.step();
                let start = s.now_ns();
                op(&s, &format!("op{r}"), 1, start, 8);
                drop(s.finish());
                let text = String::from_utf8(sink.bytes()).unwrap_or_default();
                load_str(&text, "r", LoadOptions::default()).unwrap()
            })
            .collect();
        let v = rank_op_tables(&traces, &OpTableOptions::default());
        assert_eq!(v.rows.len(), 40);
        assert!(v.rows.iter().all(|r| r.ranks.len() == 1));
        assert!(v.rows.iter().all(|r| r.slowest.median_ns == 0.0));
    }

    #[test]
    fn rank_views_say_when_ranks_were_timed_differently() {
        let traces: Vec<Trace> = [TimingMode::Host, TimingMode::DeviceSynchronized]
            .into_iter()
            .enumerate()
            .map(|(r, timing)| {
                let run = Run::new("t", Phase::Train, "cpu")
                    .rank(r as u32, 2)
                    .timing(timing);
                let (s, sink) = TraceSession::in_memory(run);
                s.step();
                drop(s.finish());
                let text = String::from_utf8(sink.bytes()).unwrap_or_default();
                load_str(&text, "r", LoadOptions::default()).unwrap()
            })
            .collect();
        let differ = |notes: &[String]| notes.iter().any(|n| n.contains("timed differently"));
        assert!(differ(
            &rank_op_tables(&traces, &OpTableOptions::default()).notes
        ));
        assert!(differ(&rank_span_trees(&traces, SpanOrder::Call).notes));
        assert!(!differ(&rank_memory(&traces[..1]).notes));
    }

    #[test]
    fn rank_median_counts_missing_ranks_as_zero() {
        assert_eq!(median_with_zeros(&mut [], 0), 0.0);
        assert_eq!(median_with_zeros(&mut [5], 0), 5.0);
        assert_eq!(median_with_zeros(&mut [5], 1), 2.5);
        assert_eq!(median_with_zeros(&mut [9, 1, 5], 0), 5.0);
        assert_eq!(median_with_zeros(&mut [9, 1, 5], 2), 1.0);
        assert_eq!(median_with_zeros(&mut [9, 1, 5, 7], 0), 6.0);
        assert_eq!(median_with_zeros(&mut [u64::MAX], 0), u64::MAX as f64);
    }
}
