//! The op table: per op name (optionally per name and input shapes) count, total, self, mean,
//! min, max and p95 duration, output bytes, share of step time and recorded FLOPs with their
//! rate, like PyTorch's `key_averages().table()`.

use crate::model::intern::FastMap;
use serde::Serialize;

use crate::model::intern::{ShapeId, Sym, format_shape};
use trace_record::schema::{ParseEnumError, TimingMode};

use crate::model::trace::Trace;
use crate::stats::percentile;

/// A column of the op table (also the sort keys of `tracegraph ops --sort`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpColumn {
    /// The op name (ascending).
    Name,
    /// Number of calls.
    Count,
    /// Total duration.
    Total,
    /// Self duration (total minus nested ops).
    SelfTime,
    /// Mean duration.
    Mean,
    /// Shortest call.
    Min,
    /// Longest call.
    Max,
    /// 95th percentile duration (nearest rank).
    P95,
    /// Output bytes (logical).
    OutputBytes,
    /// Share of the step time.
    Share,
}

impl OpColumn {
    /// The column names `--sort` lists (`from_str` also takes a few aliases).
    const NAMES: &'static [&'static str] = &[
        "name", "count", "total", "self", "mean", "min", "max", "p95", "bytes", "share",
    ];
}

impl std::str::FromStr for OpColumn {
    type Err = ParseEnumError;

    /// Parses a column name as accepted by `--sort` (`name`, `count`, `total`, `self`, `mean`,
    /// `min`, `max`, `p95`, `bytes`, `share`; also `calls`, `self_time`, `avg`,
    /// `output_bytes`), in any case.
    fn from_str(s: &str) -> Result<OpColumn, ParseEnumError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "name" => OpColumn::Name,
            "count" | "calls" => OpColumn::Count,
            "total" => OpColumn::Total,
            "self" | "self_time" => OpColumn::SelfTime,
            "mean" | "avg" => OpColumn::Mean,
            "min" => OpColumn::Min,
            "max" => OpColumn::Max,
            "p95" => OpColumn::P95,
            "bytes" | "output_bytes" => OpColumn::OutputBytes,
            "share" => OpColumn::Share,
            _ => {
                return Err(ParseEnumError {
                    what: "op table column",
                    found: s.to_string(),
                    expected: OpColumn::NAMES,
                });
            }
        })
    }
}

/// How to build an [`OpTable`].
#[derive(Debug, Clone, Copy)]
pub struct OpTableOptions {
    /// Group by op name and input shapes instead of op name only.
    pub by_shape: bool,
    /// The sort column (descending, except [`OpColumn::Name`], which is ascending). Ties are
    /// broken by name, then input shapes.
    pub sort: OpColumn,
    /// Keep only the first `limit` rows after sorting.
    pub limit: Option<usize>,
}

impl Default for OpTableOptions {
    fn default() -> Self {
        OpTableOptions {
            by_shape: false,
            sort: OpColumn::Total,
            limit: None,
        }
    }
}

/// One row of the op table. Durations are in ns, labelled by [`OpTable::timing`].
#[derive(Debug, Clone, Serialize)]
pub struct OpRow {
    /// The op name.
    pub name: String,
    /// The input shapes (`[32, 784] x [784, 128]`) when grouped by shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_shapes: Option<String>,
    /// Number of calls.
    pub count: u64,
    /// Sum of durations.
    pub total_ns: u64,
    /// Sum of self durations (duration minus the ops nested inside it on the same thread; for
    /// an op that became a span, its span's self time, see [`crate::events::span_self_times`]).
    pub self_ns: u64,
    /// Mean duration.
    pub mean_ns: f64,
    /// Shortest call.
    pub min_ns: u64,
    /// Longest call.
    pub max_ns: u64,
    /// 95th percentile duration (nearest rank).
    pub p95_ns: u64,
    /// Sum of logical output bytes.
    pub output_bytes: u64,
    /// Self time in whole steps as a fraction of the time of the whole steps (0..1), as the
    /// summary times steps: a step cut off by a truncation ([`Trace::partial_step`]) counts
    /// in neither. Absent when the trace has no whole step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_of_step: Option<f64>,
    /// Floating-point operations summed over the calls that recorded them (capped at
    /// `u64::MAX`); absent when no call did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flops: Option<u64>,
    /// `flops` divided by the summed duration of the calls that recorded them, in GFLOP/s
    /// (FLOPs per ns); absent when no call recorded FLOPs or those calls took no time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gflop_per_s: Option<f64>,
}

/// The op table.
#[derive(Debug, Clone, Serialize)]
pub struct OpTable {
    /// How durations were measured.
    pub timing: TimingMode,
    /// True when grouped by name and input shapes.
    pub by_shape: bool,
    /// The sort column.
    pub sort: OpColumn,
    /// Total ops in the trace.
    pub op_count: u64,
    /// Total wall time of the whole steps (the denominator of the share; a partial step is
    /// left out, as in the summary), when there are whole steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_time_ns: Option<u64>,
    /// Some sum (a total, self time, bytes, FLOPs or the step time) exceeded `u64::MAX` and is
    /// shown as `u64::MAX` instead of wrapping. Omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub saturated: bool,
    /// Number of groups before the limit.
    pub groups: usize,
    /// The rows, sorted and limited.
    pub rows: Vec<OpRow>,
}

/// Builds the op table. O(n log n) in the number of ops.
pub fn op_table(trace: &Trace, opts: &OpTableOptions) -> OpTable {
    let self_ns = crate::events::self_time::op_self_times(trace);
    // Group key: (name, input shape list id) where the list id is 0 when not by shape.
    let mut shape_lists: FastMap<Vec<ShapeId>, u32> = FastMap::default();
    let mut shape_list_strings: Vec<String> = Vec::new();
    let mut group_of: FastMap<(Sym, u32), u32> = FastMap::default();
    let mut groups: Vec<(Sym, u32)> = Vec::new();
    let mut op_group: Vec<u32> = Vec::with_capacity(trace.ops.len());
    let mut scratch: Vec<ShapeId> = Vec::new();
    for op in &trace.ops {
        let list = if opts.by_shape {
            scratch.clear();
            for t in trace.op_inputs(op) {
                match trace.tensors.get(t) {
                    Some(info) => scratch.push(info.shape),
                    None => scratch.push(ShapeId(u32::MAX)),
                }
            }
            if let Some(&id) = shape_lists.get(&scratch) {
                id
            } else {
                let id = shape_list_strings.len() as u32;
                let text = if scratch.is_empty() {
                    "-".to_string()
                } else {
                    scratch
                        .iter()
                        .map(|s| {
                            if s.0 == u32::MAX {
                                "?".to_string()
                            } else {
                                format_shape(trace.shapes.resolve(*s))
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(" x ")
                };
                shape_list_strings.push(text);
                shape_lists.insert(scratch.clone(), id);
                id
            }
        } else {
            0
        };
        let k = (op.name, list);
        let g = if let Some(&g) = group_of.get(&k) {
            g
        } else {
            let g = groups.len() as u32;
            groups.push(k);
            group_of.insert(k, g);
            g
        };
        op_group.push(g);
    }
    trace.work.add(trace.ops.len() as u64);

    // Durations grouped contiguously (counting sort by group) for the percentiles.
    let ng = groups.len();
    let mut starts = vec![0usize; ng + 1];
    for &g in &op_group {
        starts[g as usize + 1] += 1;
    }
    for i in 0..ng {
        starts[i + 1] += starts[i];
    }
    let mut fill = starts.clone();
    let mut durs = vec![0u64; trace.ops.len()];
    let mut acc = vec![(0u64, 0u64, u64::MAX, 0u64, 0u64); ng]; // total, self, min, max, bytes
    // Self time within whole steps per group (the numerator of the share of step time).
    let whole_steps = trace.complete_steps().len();
    let mut in_whole = vec![0u64; ng];
    // Recorded FLOPs per group and the time of the calls that recorded them.
    let mut flops: Vec<Option<(u64, u64)>> = vec![None; ng];
    let mut saturated = false;
    for (i, op) in trace.ops.iter().enumerate() {
        let g = op_group[i] as usize;
        durs[fill[g]] = op.dur_ns;
        fill[g] += 1;
        let a = &mut acc[g];
        saturated |= add_to(&mut a.0, op.dur_ns);
        saturated |= add_to(&mut a.1, self_ns[i]);
        a.2 = a.2.min(op.dur_ns);
        a.3 = a.3.max(op.dur_ns);
        saturated |= add_to(&mut a.4, op.output_bytes);
        if op.step.is_some_and(|st| (st as usize) < whole_steps) {
            saturated |= add_to(&mut in_whole[g], self_ns[i]);
        }
        if let Some(f) = op.flops {
            let (sum, ns) = flops[g].get_or_insert((0, 0));
            saturated |= add_to(sum, f);
            saturated |= add_to(ns, op.dur_ns);
        }
    }
    trace.work.add(2 * trace.ops.len() as u64);
    // The denominator is the summary's: whole steps only, summed exactly.
    let step_time = (whole_steps > 0).then(|| {
        let sum: u128 = trace
            .complete_steps()
            .iter()
            .map(|s| u128::from(s.duration_ns()))
            .sum();
        u64::try_from(sum).unwrap_or_else(|_| {
            saturated = true;
            u64::MAX
        })
    });
    let mut rows: Vec<OpRow> = Vec::with_capacity(ng);
    for (g, &(name, list)) in groups.iter().enumerate() {
        let slice = &mut durs[starts[g]..starts[g + 1]];
        let count = slice.len() as u64;
        let p95 = percentile(slice, 95.0).unwrap_or(0);
        let (total, self_t, min, max, bytes) = acc[g];
        rows.push(OpRow {
            name: trace.str(name).to_string(),
            input_shapes: opts.by_shape.then(|| {
                shape_list_strings
                    .get(list as usize)
                    .cloned()
                    .unwrap_or_default()
            }),
            count,
            total_ns: total,
            self_ns: self_t,
            mean_ns: if count > 0 {
                total as f64 / count as f64
            } else {
                0.0
            },
            min_ns: if count > 0 { min } else { 0 },
            max_ns: max,
            p95_ns: p95,
            output_bytes: bytes,
            share_of_step: step_time
                .filter(|&t| t > 0)
                .map(|t| in_whole[g] as f64 / t as f64),
            flops: flops[g].map(|(f, _)| f),
            gflop_per_s: flops[g]
                .filter(|&(_, ns)| ns > 0)
                .map(|(f, ns)| f as f64 / ns as f64),
        });
    }
    trace.work.add(trace.ops.len() as u64);
    sort_rows(&mut rows, opts.sort);
    trace.work.add_sort(rows.len());
    let groups_n = rows.len();
    if let Some(l) = opts.limit {
        rows.truncate(l);
    }
    OpTable {
        timing: trace.run.timing,
        by_shape: opts.by_shape,
        sort: opts.sort,
        op_count: trace.ops.len() as u64,
        step_time_ns: step_time,
        saturated,
        groups: groups_n,
        rows,
    }
}

/// Sorts rows by `col` (descending, except by name), ties by name then input shapes.
pub(crate) fn sort_rows(rows: &mut [OpRow], col: OpColumn) {
    use std::cmp::Ordering;
    let f = |r: &OpRow| -> f64 {
        match col {
            OpColumn::Name => 0.0,
            OpColumn::Count => r.count as f64,
            OpColumn::Total => r.total_ns as f64,
            OpColumn::SelfTime => r.self_ns as f64,
            OpColumn::Mean => r.mean_ns,
            OpColumn::Min => r.min_ns as f64,
            OpColumn::Max => r.max_ns as f64,
            OpColumn::P95 => r.p95_ns as f64,
            OpColumn::OutputBytes => r.output_bytes as f64,
            OpColumn::Share => r.share_of_step.unwrap_or(r.self_ns as f64),
        }
    };
    rows.sort_by(|a, b| {
        f(b).partial_cmp(&f(a))
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.input_shapes.cmp(&b.input_shapes))
    });
}

/// `*acc += v`, capped at `u64::MAX`; true when it had to cap.
fn add_to(acc: &mut u64, v: u64) -> bool {
    if let Some(x) = acc.checked_add(v) {
        *acc = x;
        false
    } else {
        *acc = u64::MAX;
        true
    }
}
