//! Comparing two traces: per span path and per op name, time and memory deltas with their
//! spread over steps and a noise-aware change of medians (bootstrap interval over steps);
//! graph fingerprint equality per step; ops present in one trace only.
//!
//! Like with like: when the steps ran more than one step graph, step times, span rows and op
//! rows are compared per graph group (a row per graph and path, per graph and op name), never
//! pooled over graphs. No change smaller than the minimum effect ([`Change::MIN_EFFECT_NS`]
//! per step, [`Change::MIN_EFFECT_RATIO`] of the base) is a regression or an improvement.
//! Runs recorded in alternating pairs can be compared pair by pair
//! ([`Comparison::of_paired_runs`]), so that machine drift hits both sides alike.

use crate::model::intern::FastMap;
use std::collections::BTreeMap;

use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};

use crate::error::AnalyzeError;
use crate::events::memory::{ByCategory, memory_report};
use trace_record::schema::TimingMode;

use crate::events::path_table::PathTable;
use crate::events::spans::{PathTree, pair_depth_first, pair_paths, path_tree};
use crate::events::steps::{GraphReport, StepCache, graph_report};
use crate::model::intern::Sym;
use crate::model::trace::Trace;
use crate::runs::significance::{
    BOOTSTRAP_SEED, Change, Verdict, compare_paired_run_samples, compare_run_samples,
};
use crate::stats::{Spread, SpreadAcc};

/// A figure in both traces and its change.
#[derive(Debug, Clone, Serialize)]
pub struct Delta {
    /// The base trace's value (absent when the base does not have it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<f64>,
    /// The candidate trace's value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<f64>,
    /// `candidate - base`, when both have it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    /// `delta / base` (e.g. 0.25 = 25 % more), when both have it and base is not 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
}

impl Delta {
    /// The delta of two optional values.
    pub fn of(base: Option<f64>, candidate: Option<f64>) -> Delta {
        let delta = base.zip(candidate).map(|(b, c)| c - b);
        let ratio = base
            .zip(delta)
            .filter(|(b, _)| *b != 0.0)
            .map(|(b, d)| d / b);
        Delta {
            base,
            candidate,
            delta,
            ratio,
        }
    }
}

/// One span path in both traces (in one step graph's steps, when the steps ran several).
#[derive(Debug, Clone, Serialize)]
pub struct SpanDelta {
    /// The span path.
    pub path: String,
    /// The step graph (its label in [`Comparison::graph_groups`]) whose whole steps this row
    /// compares, when the steps ran more than one graph; absent with one graph (the row is the
    /// path's over every step) and for a path that no whole step holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph: Option<String>,
    /// Mean time per step (ns), over the steps where the path occurs (of the row's graph,
    /// first run of each side); when the trace has no steps, the total.
    pub time_per_step_ns: Delta,
    /// Spread over steps in the base.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_spread: Option<Spread>,
    /// Spread over steps in the candidate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_spread: Option<Spread>,
    /// Logical bytes allocated directly in the path, in all (in the row's graph's whole steps
    /// when it has a graph).
    pub alloc_bytes: Delta,
    /// The change of the median time per step (steps where the path occurs, whole steps
    /// only, of the row's graph) with its bootstrap interval; absent when a trace has no such
    /// step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<Change>,
}

/// A row of [`SpanDeltas`] as kept: the paired nodes of the two trees, the change and, for a
/// row of one step graph, that graph and the row's own figures.
#[derive(Debug, Clone)]
struct SpanRow {
    base: Option<u32>,
    candidate: Option<u32>,
    /// Boxed: most rows of a trace of many paths have none, and a row is 40 bytes.
    change: Option<Box<Change>>,
    /// The graph group (index into [`SpanDeltas::labels`]) when the row is one graph's.
    group: Option<u32>,
    /// The figures of a graph's row (absent: the nodes' figures).
    figures: Option<Box<GroupFigures>>,
}

/// The figures of a span row of one graph: per side (base, candidate), the spread over that
/// graph's whole steps of the first run, and the bytes allocated in them (`None`: the side
/// has no such path).
#[derive(Debug, Clone)]
struct GroupFigures {
    spread: [Option<Spread>; 2],
    alloc: [Option<u64>; 2],
}

/// The span rows of a [`Comparison`], largest absolute time change first. Kept as the figures
/// of each tree's nodes, one table of display paths (parent links) per tree and, a row, the
/// paired nodes and the change: a [`SpanDelta`] (its path text included) is made when asked
/// for, so that a trace of many span paths is not held as rows and figures at once.
/// Serialises as the list of [`SpanDelta`]s.
#[derive(Debug, Clone, Default)]
pub struct SpanDeltas {
    rows: Vec<SpanRow>,
    /// The base's node figures, then the candidate's.
    nodes: [SlimNodes; 2],
    /// The base's display paths, then the candidate's.
    paths: [PathTable; 2],
    /// The graph groups' labels, when rows are per graph.
    labels: Vec<String>,
}

impl SpanDeltas {
    /// How many rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Row `i`.
    pub fn get(&self, i: usize) -> Option<SpanDelta> {
        self.rows.get(i).map(|r| self.row(r))
    }

    /// The rows in order, each made as it is reached.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = SpanDelta> + '_ {
        self.rows.iter().map(|r| self.row(r))
    }

    /// The rows' indices in [`significance_order`].
    pub fn significance_order(&self) -> Vec<usize> {
        significance_indices(&self.rows, |r| r.change.as_deref())
    }

    fn row(&self, r: &SpanRow) -> SpanDelta {
        let (b, c) = row_nodes(&self.nodes, r);
        let (spreads, alloc) = match &r.figures {
            Some(f) => (f.spread, f.alloc),
            None => (
                [b.and_then(|n| n.per_step), c.and_then(|n| n.per_step)],
                [b.map(|n| n.alloc_bytes), c.map(|n| n.alloc_bytes)],
            ),
        };
        SpanDelta {
            path: row_path(&self.paths, r),
            graph: r.group.and_then(|g| self.labels.get(g as usize)).cloned(),
            time_per_step_ns: row_time(&self.nodes, r),
            base_spread: spreads[0],
            candidate_spread: spreads[1],
            alloc_bytes: Delta::of(alloc[0].map(|x| x as f64), alloc[1].map(|x| x as f64)),
            change: r.change.as_deref().copied(),
        }
    }
}

/// The nodes of a row: the base's, the candidate's.
fn row_nodes(nodes: &[SlimNodes; 2], r: &SpanRow) -> (Option<NodeFigures>, Option<NodeFigures>) {
    (
        r.base.and_then(|i| nodes[0].get(i)),
        r.candidate.and_then(|i| nodes[1].get(i)),
    )
}

/// A row's time per step.
fn row_time(nodes: &[SlimNodes; 2], r: &SpanRow) -> Delta {
    if let Some(f) = &r.figures {
        return Delta::of(f.spread[0].map(|s| s.mean), f.spread[1].map(|s| s.mean));
    }
    let (b, c) = row_nodes(nodes, r);
    Delta::of(
        b.map(|n| per_step_or_total(n.per_step, n.total_ns)),
        c.map(|n| per_step_or_total(n.per_step, n.total_ns)),
    )
}

/// A row's display path: its base node's, else its candidate node's.
fn row_path(paths: &[PathTable; 2], r: &SpanRow) -> String {
    match (r.base, r.candidate) {
        (Some(i), _) => paths[0].path(i as usize),
        (None, Some(j)) => paths[1].path(j as usize),
        (None, None) => None,
    }
    .unwrap_or_default()
}

impl Serialize for SpanDeltas {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.rows.len()))?;
        for r in &self.rows {
            seq.serialize_element(&self.row(r))?;
        }
        seq.end()
    }
}

/// One op name in both traces (in one step graph's steps, when the steps ran several).
#[derive(Debug, Clone, Serialize)]
pub struct OpDelta {
    /// The op name.
    pub name: String,
    /// The step graph (its label in [`Comparison::graph_groups`]) whose whole steps this row
    /// compares, when the steps ran more than one graph; absent with one graph and for the
    /// op's calls outside whole steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph: Option<String>,
    /// Calls in all.
    pub count: Delta,
    /// Total time per step (ns) — mean over steps; the total when there are no steps.
    pub time_per_step_ns: Delta,
    /// Spread over steps of the per-step time in the base.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_spread: Option<Spread>,
    /// The same in the candidate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_spread: Option<Spread>,
    /// Logical output bytes in all.
    pub output_bytes: Delta,
    /// The change of the median time per step (steps where the op runs, whole steps only)
    /// with its bootstrap interval; absent when a trace has no such step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<Change>,
}

/// Peak logical memory of one device in both traces.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryDelta {
    /// The device label.
    pub device: String,
    /// Peak live logical bytes.
    pub peak_bytes: Delta,
    /// The base's peak by category.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_peak_by_category: Option<ByCategory>,
    /// The candidate's peak by category.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_peak_by_category: Option<ByCategory>,
}

/// Step graph fingerprints side by side (steps paired by position).
#[derive(Debug, Clone, Serialize)]
pub struct StepGraphPair {
    /// Position (0-based) of the step in each trace.
    pub position: usize,
    /// The base's step index and fingerprint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<(u64, String)>,
    /// The candidate's step index and fingerprint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<(u64, String)>,
    /// True when both exist and the fingerprints are equal.
    pub equal: bool,
}

/// Which spread a comparison's intervals cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalBasis {
    /// One trace a side: the intervals resample steps, so they cover the step-to-step spread
    /// of each run only, not how much another run of the same program would differ.
    Steps,
    /// Several traces (runs) on a side: the intervals resample runs, then steps within them
    /// ([`crate::runs::compare_run_samples`]), so run-to-run variation is inside the noise.
    RunsThenSteps,
    /// Runs recorded in pairs, base run `i` right next to candidate run `i`
    /// ([`Comparison::of_paired_runs`]): the intervals resample pairs, then steps within
    /// them, so what the machine did while a pair ran hits both sides alike.
    PairedRuns,
}

impl IntervalBasis {
    /// What the intervals cover, in words: the caveat `tracegraph compare` and the report
    /// print above a comparison.
    pub fn describe(self) -> &'static str {
        match self {
            IntervalBasis::Steps => {
                "one run a side: the intervals cover the step-to-step spread only, not run-to-run \
                 variation (give several runs a side with --against to include it)"
            }
            IntervalBasis::RunsThenSteps => {
                "several runs a side: the intervals resample runs, then steps within them \
                 (runs recorded alternately, A B B A ..., can be compared with --paired)"
            }
            IntervalBasis::PairedRuns => {
                "runs paired by position (--paired): the intervals resample pairs, then steps \
                 within them, so machine drift during a pair hits both sides"
            }
        }
    }
}

/// The whole steps of one step graph in both sides: step times compared like with like.
#[derive(Debug, Clone, Serialize)]
pub struct GraphGroupDelta {
    /// `A`, `B`, ... in order of first appearance, base first, then the candidate's own.
    pub label: String,
    /// The graph's fingerprint.
    pub fingerprint: String,
    /// The graph in words: its first op and that op's input shapes, or `no ops captured`.
    pub signature: String,
    /// Whole steps with this graph on each side (over all runs of the side).
    pub steps: (usize, usize),
    /// `base` or `candidate` when only that side ran this graph (then there is no change).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub only_in: Option<&'static str>,
    /// Median step time of the group on each side.
    pub step_time_ns: Delta,
    /// The change of the median step time, with its interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<Change>,
}

/// The comparison of two traces.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The base trace (as given).
    pub base: String,
    /// The candidate trace (as given).
    pub candidate: String,
    /// TimingMode of each trace; comparing host with device time is flagged in `warnings`.
    pub timing: (TimingMode, TimingMode),
    /// Things to keep in mind (different timing modes, incomplete traces, ...).
    pub warnings: Vec<String>,
    /// Steps in each trace.
    pub steps: (usize, usize),
    /// Wall time per step (ns).
    pub step_time_ns: Delta,
    /// Spread of step times in the base.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_step_spread: Option<Spread>,
    /// Spread of step times in the candidate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_step_spread: Option<Spread>,
    /// The change of the median step time (whole steps) with its bootstrap interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_time_change: Option<Change>,
    /// Span paths in either trace, largest absolute time change first.
    pub spans: SpanDeltas,
    /// Op names in both traces, largest absolute time change first.
    pub ops: Vec<OpDelta>,
    /// Op names only the base has.
    pub ops_only_in_base: Vec<String>,
    /// Op names only the candidate has.
    pub ops_only_in_candidate: Vec<String>,
    /// Peak memory per device; absent when neither trace has memory events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Vec<MemoryDelta>>,
    /// Step graph fingerprints paired by position.
    pub graphs: Vec<StepGraphPair>,
    /// How many paired steps have equal fingerprints.
    pub graphs_equal: usize,
    /// Runs (traces) on each side.
    pub runs: (usize, usize),
    /// Every run's trace (as given) when a side has more than one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub base_runs: Vec<String>,
    /// The same for the candidate side.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub candidate_runs: Vec<String>,
    /// What the intervals (and so `--fail-on-regression`) cover.
    pub interval: IntervalBasis,
    /// Step times per step graph. With more than one graph on either side the pooled step
    /// time means nothing, so `step_time_change` is absent and these are compared instead
    /// (and the span and op rows are per graph too).
    pub graph_groups: Vec<GraphGroupDelta>,
    /// The minimum effect, ns per step: no change of a median smaller than this is a
    /// regression or an improvement ([`Change::MIN_EFFECT_NS`]).
    pub min_effect_ns: f64,
    /// The minimum effect relative to the base's median ([`Change::MIN_EFFECT_RATIO`]).
    pub min_effect_ratio: f64,
}

/// One figure that regressed beyond a threshold and outside its noise ([`Comparison::regressions`]).
#[derive(Debug, Clone, Serialize)]
pub struct Regression {
    /// `step time`, `op NAME` or `span PATH`.
    pub what: String,
    /// The change (ratio, interval, medians).
    pub change: Change,
}

impl Comparison {
    /// How a row's change and verdict are read: the legend `tracegraph compare` and the
    /// report print under a comparison.
    pub fn legend(&self) -> String {
        format!(
            "change: relative change of the medians; interval: {}% percentile bootstrap over \
             steps (fixed seed); \"within noise\" when the interval contains 0; \"below min \
             effect\" when the medians differ by less than {} per step or {} of the base (never \
             a regression)",
            (crate::runs::significance::CONFIDENCE * 100.0).round(),
            crate::format::format_ns(self.min_effect_ns),
            crate::format::format_share(self.min_effect_ratio),
        )
    }

    /// Every step-time, op or span change that is a regression larger than `pct` percent and
    /// outside its confidence interval ([`Change::regresses_beyond`]), largest first.
    pub fn regressions(&self, pct: f64) -> Vec<Regression> {
        let mut out: Vec<Regression> = Vec::new();
        let mut push = |what: String, c: &Option<Change>| {
            if let Some(c) = c.filter(|c| c.regresses_beyond(pct)) {
                out.push(Regression { what, change: c });
            }
        };
        push("step time".to_string(), &self.step_time_change);
        if self.step_time_change.is_none() {
            for g in &self.graph_groups {
                push(
                    format!("step time of graph {} ({})", g.label, g.signature),
                    &g.change,
                );
            }
        }
        let in_graph = |g: Option<&str>| g.map_or_else(String::new, |g| format!(" in graph {g}"));
        for o in &self.ops {
            push(
                format!("op {}{}", o.name, in_graph(o.graph.as_deref())),
                &o.change,
            );
        }
        for r in &self.spans.rows {
            if r.change.as_ref().is_some_and(|c| c.regresses_beyond(pct)) {
                let g = r.group.and_then(|g| self.spans.labels.get(g as usize));
                push(
                    format!(
                        "span {}{}",
                        row_path(&self.spans.paths, r),
                        in_graph(g.map(String::as_str))
                    ),
                    &r.change.as_deref().copied(),
                );
            }
        }
        out.sort_by(|a, b| {
            let r = |x: &Regression| x.change.ratio.unwrap_or(0.0);
            r(b).total_cmp(&r(a)).then_with(|| a.what.cmp(&b.what))
        });
        out
    }
}

struct OpAgg {
    count: u64,
    total: u64,
    bytes: u64,
    per_step: SpreadAcc,
    /// Time per whole step, for the steps where the op runs.
    samples: Vec<u64>,
}

/// An op row's key: its name and, when rows are per graph, the graph group of the step (none
/// for calls outside whole steps).
type OpKey = (String, Option<u32>);

/// Per op name (and graph group, with `step_group`: the group of each whole step by
/// position) its calls, time, bytes and per-step samples. Linear in the ops.
fn op_aggregates(t: &Trace, step_group: Option<&[u32]>) -> BTreeMap<OpKey, OpAgg> {
    type Key = (Sym, Option<u32>);
    let whole = t.complete_steps().len();
    let group_of = |step: Option<u32>| -> Option<u32> {
        let s = step? as usize;
        if s < whole {
            step_group?.get(s).copied()
        } else {
            None
        }
    };
    let mut by: FastMap<Key, OpAgg> = FastMap::default();
    let mut step_sum: FastMap<Key, u64> = FastMap::default();
    let mut sample_sum: FastMap<Key, u64> = FastMap::default();
    let flush = |by: &mut FastMap<Key, OpAgg>,
                 step_sum: &mut FastMap<Key, u64>,
                 sample_sum: &mut FastMap<Key, u64>| {
        for (k, v) in step_sum.drain() {
            if let Some(a) = by.get_mut(&k) {
                a.per_step.push(v);
            }
        }
        for (k, v) in sample_sum.drain() {
            if let Some(a) = by.get_mut(&k) {
                a.samples.push(v);
            }
        }
    };
    let mut cur_step = None;
    for op in &t.ops {
        if op.step != cur_step {
            flush(&mut by, &mut step_sum, &mut sample_sum);
            cur_step = op.step;
        }
        let key = (op.name, group_of(op.step));
        let a = by.entry(key).or_insert(OpAgg {
            count: 0,
            total: 0,
            bytes: 0,
            per_step: SpreadAcc::default(),
            samples: Vec::new(),
        });
        a.count += 1;
        // Saturating: durations and sizes from a file may sum past u64::MAX.
        a.total = a.total.saturating_add(op.dur_ns);
        a.bytes = a.bytes.saturating_add(op.output_bytes);
        if op.step.is_some() {
            let sum = step_sum.entry(key).or_insert(0);
            *sum = sum.saturating_add(op.dur_ns);
        }
        if op.step.is_some_and(|s| (s as usize) < whole) {
            let sum = sample_sum.entry(key).or_insert(0);
            *sum = sum.saturating_add(op.dur_ns);
        }
    }
    flush(&mut by, &mut step_sum, &mut sample_sum);
    t.work.add(t.ops.len() as u64);
    by.into_iter()
        .map(|((k, g), v)| ((t.str(k).to_string(), g), v))
        .collect()
}

/// Time per whole step of every span path, for the steps where the path occurs (in step
/// order): the samples of the span comparison, by path id (as [`PathNode::path_id`]), in one
/// flat list (a few words per path however many paths there are).
struct PathSamples {
    /// Where the samples of path `p` begin in `values` (`p + 1`: where they end).
    start: Vec<u32>,
    values: Vec<u64>,
    /// The graph group of each sample's step, when rows are per graph (else empty).
    groups: Vec<u32>,
}

impl PathSamples {
    /// The samples of path `p`; `None` when it has none.
    fn get(&self, p: u32) -> Option<&[u64]> {
        let (a, b) = (
            *self.start.get(p as usize)?,
            *self.start.get(p as usize + 1)?,
        );
        (b > a).then(|| &self.values[a as usize..b as usize])
    }

    /// The samples of path `p` and their graph groups (empty when rows are not per graph).
    fn get_grouped(&self, p: u32) -> (&[u64], &[u32]) {
        let (Some(&a), Some(&b)) = (self.start.get(p as usize), self.start.get(p as usize + 1))
        else {
            return (&[], &[]);
        };
        let (a, b) = (a as usize, b as usize);
        (
            self.values.get(a..b).unwrap_or(&[]),
            self.groups.get(a..b).unwrap_or(&[]),
        )
    }
}

/// The samples of a tree's paths; with `step_group` (the graph group of each whole step, by
/// position) each sample's group too.
fn span_samples(tree: &PathTree<'_>, step_group: Option<&[u32]>) -> PathSamples {
    let t = tree.trace();
    let whole = t.complete_steps().len();
    // (path, step, duration) of every closed span of a whole step, grouped by path then step.
    let mut parts: Vec<(u32, u32, u64)> = t
        .spans
        .iter()
        .zip(&tree.path_of)
        .filter_map(|(s, &p)| {
            let step = s.step.filter(|&st| (st as usize) < whole)?;
            Some((p, step, s.duration_ns()?))
        })
        .collect();
    parts.sort_unstable();
    t.work.add(t.spans.len() as u64);
    t.work.add_sort(parts.len());
    let mut start: Vec<u32> = vec![0; tree.nodes.len() + 1];
    let mut values: Vec<u64> = Vec::new();
    let mut groups: Vec<u32> = Vec::new();
    let mut i = 0;
    while i < parts.len() {
        let (p, step, mut sum) = parts[i];
        i += 1;
        while i < parts.len() && (parts[i].0, parts[i].1) == (p, step) {
            // Saturating: durations from a file may sum past u64::MAX.
            sum = sum.saturating_add(parts[i].2);
            i += 1;
        }
        values.push(sum);
        if let Some(sg) = step_group {
            groups.push(sg.get(step as usize).copied().unwrap_or(u32::MAX));
        }
        if let Some(c) = start.get_mut(p as usize + 1) {
            *c += 1;
        }
    }
    for k in 1..start.len() {
        start[k] += start[k - 1];
    }
    PathSamples {
        start,
        values,
        groups,
    }
}

/// Bytes allocated directly in each path during the whole steps of each graph group: by
/// (path id, group). Linear in the memory events.
fn alloc_by_group(tree: &PathTree<'_>, step_group: &[u32]) -> FastMap<(u32, u32), u64> {
    let t = tree.trace();
    let whole = t.complete_steps().len();
    let mut out: FastMap<(u32, u32), u64> = FastMap::default();
    // Charged as `spans` charges them (an allocation stamped before the span it was written
    // in belongs to the span open at its stamp: autograd storages to the forward).
    let charged = crate::events::spans::ChargedSpans::of(t);
    for (i, e) in t.memory.iter().enumerate().filter(|(_, e)| e.alloc) {
        let Some(s) = charged.span_of(i, e) else {
            continue;
        };
        let (Some(&path), Some(span)) = (tree.path_of.get(s as usize), t.spans.get(s as usize))
        else {
            continue;
        };
        let Some(g) = span
            .step
            .filter(|&st| (st as usize) < whole)
            .and_then(|st| step_group.get(st as usize))
        else {
            continue;
        };
        let slot = out.entry((path, *g)).or_insert(0);
        *slot = slot.saturating_add(e.bytes);
    }
    t.work.add(t.memory.len() as u64);
    out
}

/// The figures the span comparison reads of a [`PathTree`] node, in 24 bytes (its spread
/// over steps, when it has one, in [`SlimNodes::spreads`]), so that each tree is dropped
/// before the other side's is built.
#[derive(Debug, Clone, Copy)]
struct SlimNode {
    path_id: u32,
    /// Index in [`SlimNodes::spreads`], `u32::MAX` for none.
    spread: u32,
    total_ns: u64,
    alloc_bytes: u64,
}

/// The figures of a side's nodes, in node order.
#[derive(Debug, Clone, Default)]
struct SlimNodes {
    nodes: Vec<SlimNode>,
    spreads: Vec<Spread>,
}

/// One node's figures, as read.
#[derive(Debug, Clone, Copy)]
struct NodeFigures {
    total_ns: u64,
    alloc_bytes: u64,
    per_step: Option<Spread>,
}

impl SlimNodes {
    /// The figures of `tree`'s nodes and their `(depth, name)` (for pairing and display
    /// paths), in its order; the tree is dropped.
    fn of(tree: PathTree<'_>) -> (SlimNodes, Vec<(u32, Sym)>) {
        let mut spreads = Vec::new();
        let mut nodes = Vec::with_capacity(tree.nodes.len());
        for n in &tree.nodes {
            let spread = match n.per_step() {
                Some(sp) => {
                    spreads.push(sp);
                    // Fewer spreads than nodes, whose indices are `u32`s.
                    (spreads.len() - 1) as u32
                }
                None => u32::MAX,
            };
            nodes.push(SlimNode {
                path_id: n.path_id,
                spread,
                total_ns: n.total_ns,
                alloc_bytes: n.alloc_bytes,
            });
        }
        spreads.shrink_to_fit();
        let names = tree.nodes.iter().map(|n| (n.depth, n.name)).collect();
        (SlimNodes { nodes, spreads }, names)
    }

    /// The figures of node `i`.
    fn get(&self, i: u32) -> Option<NodeFigures> {
        self.nodes.get(i as usize).map(|n| NodeFigures {
            total_ns: n.total_ns,
            alloc_bytes: n.alloc_bytes,
            per_step: self.spreads.get(n.spread as usize).copied(),
        })
    }

    /// The path id of node `i`.
    fn path_id(&self, i: u32) -> Option<u32> {
        self.nodes.get(i as usize).map(|n| n.path_id)
    }
}

fn per_step_or_total(spread: Option<Spread>, total: u64) -> f64 {
    spread.map_or(total as f64, |s| s.mean)
}

/// Compares `candidate` with `base`. Step graphs are analysed through `cache` (one cache may
/// serve both traces: equal steps across traces are hits too). The intervals cover the
/// step-to-step spread only ([`IntervalBasis::Steps`]); [`compare_runs`] compares several runs
/// a side.
pub fn compare(
    base: &Trace,
    candidate: &Trace,
    cache: &StepCache,
) -> Result<Comparison, AnalyzeError> {
    compare_runs(&[base], &[candidate], cache)
}

/// The change of per-run samples: over runs then steps when a side has several runs, else
/// over steps ([`compare_run_samples`]); over pairs then steps when `paired`
/// ([`compare_paired_run_samples`]). Always with the minimum effect
/// ([`Change::with_min_effect`]): every figure compared is a time in ns per step.
fn change_of_runs(base: &[&[u64]], candidate: &[&[u64]], paired: bool) -> Option<Change> {
    if paired {
        compare_paired_run_samples(base, candidate, BOOTSTRAP_SEED)
    } else {
        compare_run_samples(base, candidate, BOOTSTRAP_SEED)
    }
    .map(|c| c.with_min_effect(Change::MIN_EFFECT_NS, Change::MIN_EFFECT_RATIO))
}

/// Per run of a side, its whole steps as (fingerprint, step time).
type RunSteps = Vec<Vec<(String, u64)>>;

/// Per run of a side: its graph report and its whole steps as (fingerprint, step time).
fn steps_by_graph(
    runs: &[&Trace],
    cache: &StepCache,
) -> Result<(Vec<GraphReport>, RunSteps), AnalyzeError> {
    let mut reports = Vec::with_capacity(runs.len());
    let mut steps = Vec::with_capacity(runs.len());
    for t in runs {
        let r = graph_report(t, cache)?;
        steps.push(
            r.steps
                .iter()
                .filter(|s| !s.partial)
                .map(|s| (s.fingerprint.clone(), s.duration_ns))
                .collect(),
        );
        reports.push(r);
    }
    Ok((reports, steps))
}

/// The step-graph groups of both sides, labelled in order of first appearance (base first).
fn graph_groups(
    base: (&[GraphReport], &RunSteps),
    candidate: (&[GraphReport], &RunSteps),
    paired: bool,
) -> Vec<GraphGroupDelta> {
    // Fingerprint → (signature), in order of first appearance.
    let mut order: Vec<(String, String)> = Vec::new();
    let mut seen: FastMap<String, usize> = FastMap::default();
    for (reports, steps) in [base, candidate] {
        for (r, run) in reports.iter().zip(steps) {
            for (fp, _) in run {
                if !seen.contains_key(fp) {
                    let sig = r
                        .groups
                        .iter()
                        .find(|g| &g.fingerprint == fp)
                        .map_or_else(|| "no ops captured".to_string(), |g| g.signature.clone());
                    seen.insert(fp.clone(), order.len());
                    order.push((fp.clone(), sig));
                }
            }
        }
    }
    let per_run = |steps: &[Vec<(String, u64)>], fp: &str| -> Vec<Vec<u64>> {
        steps
            .iter()
            .map(|run| {
                run.iter()
                    .filter(|(f, _)| f == fp)
                    .map(|&(_, d)| d)
                    .collect()
            })
            .collect()
    };
    order
        .into_iter()
        .enumerate()
        .map(|(k, (fp, signature))| {
            let (b, c) = (per_run(base.1, &fp), per_run(candidate.1, &fp));
            let (nb, nc) = (
                b.iter().map(Vec::len).sum::<usize>(),
                c.iter().map(Vec::len).sum::<usize>(),
            );
            let med = |runs: &[Vec<u64>]| {
                let mut all: Vec<u64> = runs.iter().flatten().copied().collect();
                crate::stats::median(&mut all)
            };
            let (br, cr): (Vec<&[u64]>, Vec<&[u64]>) = (
                b.iter().map(Vec::as_slice).collect(),
                c.iter().map(Vec::as_slice).collect(),
            );
            GraphGroupDelta {
                label: crate::events::steps::group_label(k),
                fingerprint: fp,
                signature,
                steps: (nb, nc),
                only_in: match (nb, nc) {
                    (0, _) => Some("candidate"),
                    (_, 0) => Some("base"),
                    _ => None,
                },
                step_time_ns: Delta::of(med(&b), med(&c)),
                change: change_of_runs(&br, &cr, paired),
            }
        })
        .collect()
}

/// Compares the runs `candidate` with the runs `base` (one trace per run, at least one a
/// side): step times, per step graph, ops and spans from every run, each change with an
/// interval over runs then steps when a side has several runs ([`IntervalBasis`]); memory
/// and the step graphs paired by position from the first run of each side.
pub fn compare_runs(
    base_runs: &[&Trace],
    candidate_runs: &[&Trace],
    cache: &StepCache,
) -> Result<Comparison, AnalyzeError> {
    compare_sides(base_runs, candidate_runs, cache, false)
}

impl Comparison {
    /// Compares runs recorded in pairs: base run `i` and candidate run `i` one right after
    /// the other, the order alternating from pair to pair (A B, B A, A B, ...). As
    /// [`compare_runs`], but every interval resamples pairs (the same on both sides) and then
    /// steps within them ([`IntervalBasis::PairedRuns`]), so that a machine that is slower
    /// while one pair runs slows both sides of it and the drift cancels instead of widening
    /// the interval or, when all base runs ran before all candidate runs, passing for a
    /// change. With unequal numbers of runs a side it compares them unpaired and says so in
    /// `warnings`; when the headers' start times show a pair that was not recorded one run
    /// right after the other, `warnings` says that too.
    pub fn of_paired_runs(
        base_runs: &[&Trace],
        candidate_runs: &[&Trace],
        cache: &StepCache,
    ) -> Result<Comparison, AnalyzeError> {
        compare_sides(base_runs, candidate_runs, cache, true)
    }
}

/// What the headers' wall-clock starts say about the order the runs were recorded in: all
/// base runs before all candidate runs (or the reverse) when unpaired; pairs whose runs were
/// not recorded one right after the other when paired. Nothing when a side has one run or
/// the starts are not all distinct (unknown, or constructed).
fn order_warnings(base: &[&Trace], candidate: &[&Trace], paired: bool) -> Vec<String> {
    let mut out = Vec::new();
    if base.len() < 2 || candidate.len() < 2 {
        return out;
    }
    // (start, side, index) of every run, in start order.
    let mut all: Vec<(u64, usize, usize)> = base
        .iter()
        .enumerate()
        .map(|(i, t)| (t.run.start_unix_ns, 0, i))
        .chain(
            candidate
                .iter()
                .enumerate()
                .map(|(i, t)| (t.run.start_unix_ns, 1, i)),
        )
        .collect();
    all.sort_unstable();
    if all.iter().any(|r| r.0 == 0) || all.windows(2).any(|w| w[0].0 == w[1].0) {
        return out;
    }
    if paired {
        let mut pos = vec![[0usize; 2]; base.len()];
        for (k, &(_, side, i)) in all.iter().enumerate() {
            if let Some(p) = pos.get_mut(i) {
                p[side] = k;
            }
        }
        let apart: Vec<usize> = pos
            .iter()
            .enumerate()
            .filter(|(_, p)| p[0].abs_diff(p[1]) != 1)
            .map(|(i, _)| i + 1)
            .collect();
        if !apart.is_empty() {
            out.push(format!(
                "pair(s) {apart:?} were not recorded one run right after the other (headers' start \
                 times): pairing them cancels no machine drift; record A B, B A, A B, ..."
            ));
        }
    } else {
        let side_of_first_half: Vec<usize> = all[..base.len()].iter().map(|r| r.1).collect();
        let blocks = side_of_first_half.iter().all(|&s| s == 0)
            || all[..candidate.len()].iter().all(|r| r.1 == 1);
        if blocks {
            out.push(
                "every run of one side was recorded before every run of the other (headers' \
                 start times): a machine that got busier or cooler in between shifts one side \
                 alone, and no interval tells that from a change; record the runs alternately \
                 (A B, B A, A B, ...) and compare them with --paired"
                    .to_string(),
            );
        }
    }
    out
}

/// The graph group (index into the groups) of each whole step of each run of a side.
fn step_groups(steps: &RunSteps, index: &FastMap<&str, u32>) -> Vec<Vec<u32>> {
    steps
        .iter()
        .map(|run| {
            run.iter()
                .map(|(fp, _)| index.get(fp.as_str()).copied().unwrap_or(u32::MAX))
                .collect()
        })
        .collect()
}

/// [`compare_runs`], or [`Comparison::of_paired_runs`] when `paired`.
#[allow(clippy::too_many_lines)] // one comparison, section by section
fn compare_sides(
    base_runs: &[&Trace],
    candidate_runs: &[&Trace],
    cache: &StepCache,
    paired: bool,
) -> Result<Comparison, AnalyzeError> {
    let (Some(&base), Some(&candidate)) = (base_runs.first(), candidate_runs.first()) else {
        return Err(AnalyzeError::NoRuns);
    };
    let mut warnings = Vec::new();
    if base.run.timing != candidate.run.timing {
        warnings.push(format!(
            "timing differs: base is {}, candidate is {}; durations are not directly comparable",
            base.run.timing.as_str(),
            candidate.run.timing.as_str()
        ));
    }
    for (which, t) in [("base", base), ("candidate", candidate)] {
        if t.is_incomplete() {
            warnings.push(format!("{which} trace {} is incomplete", t.source));
        }
    }
    let paired = if paired && base_runs.len() != candidate_runs.len() {
        warnings.push(format!(
            "runs can be paired only with as many base as candidate runs ({} and {}): compared unpaired",
            base_runs.len(),
            candidate_runs.len()
        ));
        false
    } else {
        paired
    };
    warnings.extend(order_warnings(base_runs, candidate_runs, paired));
    // Step times.
    let st = |t: &Trace| {
        // Whole steps only: a step cut off by a truncation is a prefix, not a step time.
        let v: Vec<u64> = t
            .complete_steps()
            .iter()
            .map(super::super::model::trace::Step::duration_ns)
            .collect();
        Spread::of(&v)
    };
    let (bs, cs) = (st(base), st(candidate));
    let (bg_all, bsteps) = steps_by_graph(base_runs, cache)?;
    let (cg_all, csteps) = steps_by_graph(candidate_runs, cache)?;
    let groups = graph_groups((&bg_all, &bsteps), (&cg_all, &csteps), paired);
    // Like with like: with one graph on both sides its steps are the step time; with more,
    // the pooled step time mixes graphs and only the groups are compared.
    let step_time_change = match groups.as_slice() {
        [] => None,
        [g] => g.change,
        _ => {
            warnings.push(format!(
                "the steps ran {} different step graphs: step times, spans and ops are compared per graph (graph_groups), not pooled",
                groups.len()
            ));
            None
        }
    };
    if groups.iter().any(|g| g.only_in.is_some()) {
        warnings.push(
            "some step graphs ran on one side only (graph_groups, only_in): their steps are not compared"
                .to_string(),
        );
    }
    // With several graphs, rows are per graph: each whole step's group, per run of a side.
    let grouped = groups.len() > 1;
    let (b_groups, c_groups) = if grouped {
        let index: FastMap<&str, u32> = groups
            .iter()
            .enumerate()
            .map(|(k, g)| (g.fingerprint.as_str(), k as u32))
            .collect();
        (step_groups(&bsteps, &index), step_groups(&csteps, &index))
    } else {
        (Vec::new(), Vec::new())
    };
    drop((bsteps, csteps));
    let group_of = |v: &[Vec<u32>], i: usize| -> Option<Vec<u32>> {
        grouped.then(|| v.get(i).cloned().unwrap_or_default())
    };
    let spans = span_rows(
        (base_runs, &b_groups),
        (candidate_runs, &c_groups),
        grouped.then(|| groups.iter().map(|g| g.label.clone()).collect()),
        paired,
    );

    // Ops (the other runs' samples by op name and graph).
    let agg = |runs: &[&Trace], sg: &[Vec<u32>]| -> Vec<BTreeMap<OpKey, OpAgg>> {
        runs.iter()
            .enumerate()
            .map(|(i, t)| op_aggregates(t, group_of(sg, i).as_deref()))
            .collect()
    };
    let (b_ops, c_ops) = (agg(base_runs, &b_groups), agg(candidate_runs, &c_groups));
    let (Some((bo, box_)), Some((co, cox))) = (b_ops.split_first(), c_ops.split_first()) else {
        return Err(AnalyzeError::NoRuns);
    };
    let op_runs = |first: &OpAgg, rest: &[BTreeMap<OpKey, OpAgg>], key: &OpKey| -> Vec<Vec<u64>> {
        std::iter::once(first.samples.clone())
            .chain(
                rest.iter()
                    .map(|m| m.get(key).map(|a| a.samples.clone()).unwrap_or_default()),
            )
            .collect()
    };
    let label = |g: Option<u32>| {
        g.and_then(|g| groups.get(g as usize))
            .map(|g| g.label.clone())
    };
    let mut ops = Vec::new();
    for (key, b) in bo {
        let Some(c) = co.get(key) else { continue };
        let (bsp, csp) = (b.per_step.finish(), c.per_step.finish());
        ops.push(OpDelta {
            name: key.0.clone(),
            graph: label(key.1),
            count: Delta::of(Some(b.count as f64), Some(c.count as f64)),
            time_per_step_ns: Delta::of(
                Some(per_step_or_total(bsp, b.total)),
                Some(per_step_or_total(csp, c.total)),
            ),
            base_spread: bsp,
            candidate_spread: csp,
            output_bytes: Delta::of(Some(b.bytes as f64), Some(c.bytes as f64)),
            change: {
                let (rb, rc) = (op_runs(b, box_, key), op_runs(c, cox, key));
                let (sb, sc): (Vec<&[u64]>, Vec<&[u64]>) = (
                    rb.iter().map(Vec::as_slice).collect(),
                    rc.iter().map(Vec::as_slice).collect(),
                );
                change_of_runs(&sb, &sc, paired)
            },
        });
    }
    // Names in one side only (in any graph).
    let names = |m: &BTreeMap<OpKey, OpAgg>| -> Vec<String> {
        let mut v: Vec<String> = m.keys().map(|k| k.0.clone()).collect();
        v.dedup();
        v
    };
    let (bnames, cnames) = (names(bo), names(co));
    let only_b: Vec<String> = bnames
        .iter()
        .filter(|n| cnames.binary_search(n).is_err())
        .cloned()
        .collect();
    let only_c: Vec<String> = cnames
        .iter()
        .filter(|n| bnames.binary_search(n).is_err())
        .cloned()
        .collect();
    sort_by_abs(
        &mut ops,
        |o| o.time_per_step_ns.clone(),
        |ops, run| {
            run.sort_by(|&a, &b| {
                let (x, y) = (&ops[a as usize], &ops[b as usize]);
                x.name.cmp(&y.name).then_with(|| x.graph.cmp(&y.graph))
            });
        },
    );

    // Memory.
    let (bm, cm) = (memory_report(base), memory_report(candidate));
    let memory = if bm.is_none() && cm.is_none() {
        None
    } else {
        let mut devs: BTreeMap<
            String,
            (
                Option<&crate::events::memory::DeviceMemory>,
                Option<&crate::events::memory::DeviceMemory>,
            ),
        > = BTreeMap::new();
        for d in bm.iter().flat_map(|m| m.devices.iter()) {
            devs.entry(d.device.clone()).or_default().0 = Some(d);
        }
        for d in cm.iter().flat_map(|m| m.devices.iter()) {
            devs.entry(d.device.clone()).or_default().1 = Some(d);
        }
        Some(
            devs.into_iter()
                .map(|(device, (b, c))| MemoryDelta {
                    device,
                    peak_bytes: Delta::of(
                        b.map(|d| d.peak_bytes as f64),
                        c.map(|d| d.peak_bytes as f64),
                    ),
                    base_peak_by_category: b.map(|d| d.peak_by_category),
                    candidate_peak_by_category: c.map(|d| d.peak_by_category),
                })
                .collect(),
        )
    };

    // Graphs (the first run of each side, paired by position).
    let (Some(bg), Some(cg)) = (bg_all.first(), cg_all.first()) else {
        return Err(AnalyzeError::NoRuns);
    };
    // Whole steps only: the step a truncated trace ends in is a prefix of a graph.
    let whole = |r: &GraphReport| -> Vec<(u64, String)> {
        r.steps
            .iter()
            .filter(|s| !s.partial)
            .map(|s| (s.step, s.fingerprint.clone()))
            .collect()
    };
    let (bw, cw) = (whole(bg), whole(cg));
    let n = bw.len().max(cw.len());
    let graphs: Vec<StepGraphPair> = (0..n)
        .map(|i| {
            let b = bw.get(i).cloned();
            let c = cw.get(i).cloned();
            let equal = matches!((&b, &c), (Some(x), Some(y)) if x.1 == y.1);
            StepGraphPair {
                position: i,
                base: b,
                candidate: c,
                equal,
            }
        })
        .collect();
    let graphs_equal = graphs.iter().filter(|g| g.equal).count();

    Ok(Comparison {
        base: base.source.clone(),
        candidate: candidate.source.clone(),
        timing: (base.run.timing, candidate.run.timing),
        warnings,
        steps: (base.steps.len(), candidate.steps.len()),
        step_time_ns: Delta::of(bs.map(|s| s.mean), cs.map(|s| s.mean)),
        base_step_spread: bs,
        candidate_step_spread: cs,
        step_time_change,
        spans,
        ops,
        ops_only_in_base: only_b,
        ops_only_in_candidate: only_c,
        memory,
        graphs,
        graphs_equal,
        runs: (base_runs.len(), candidate_runs.len()),
        base_runs: sources(base_runs),
        candidate_runs: sources(candidate_runs),
        interval: if paired && base_runs.len() > 1 {
            IntervalBasis::PairedRuns
        } else if base_runs.len() > 1 || candidate_runs.len() > 1 {
            IntervalBasis::RunsThenSteps
        } else {
            IntervalBasis::Steps
        },
        graph_groups: groups,
        min_effect_ns: Change::MIN_EFFECT_NS,
        min_effect_ratio: Change::MIN_EFFECT_RATIO,
    })
}

/// One side of the span comparison: its runs and, when rows are per graph, each run's whole
/// steps' graph groups (else empty).
type Side<'a, 'b> = (&'a [&'b Trace], &'a [Vec<u32>]);

/// The span rows: compact trees, paired by position (linear, no path strings), like paths;
/// then only what the rows read is kept of them, and a row is made of it when asked for.
/// With `labels` (several step graphs), one row per path and graph whose whole steps hold it.
fn span_rows(
    base: Side<'_, '_>,
    candidate: Side<'_, '_>,
    labels: Option<Vec<String>>,
    paired: bool,
) -> SpanDeltas {
    let grouped = labels.is_some();
    let (Some(&bt0), Some(&ct0)) = (base.0.first(), candidate.0.first()) else {
        return SpanDeltas::default();
    };
    fn groups_at(grouped: bool, v: &[Vec<u32>], i: usize) -> Option<&[u32]> {
        grouped.then(|| v.get(i).map_or(&[][..], Vec::as_slice))
    }
    // One side at a time: its compact tree, what the rows read of it (samples, allocations
    // per graph, the other runs paired with it, the nodes' figures and names), then the tree
    // is dropped before the other side's is built.
    let side = |first: &Trace, runs: &[&Trace], groups: &[Vec<u32>]| {
        let tree = path_tree(first);
        let samples = span_samples(&tree, groups_at(grouped, groups, 0));
        // Allocations per path and graph (the first run).
        let alloc = groups_at(grouped, groups, 0)
            .map(|g| alloc_by_group(&tree, g))
            .unwrap_or_default();
        // The other runs, their paths paired with the first run's.
        let extra = extra_runs(&tree, runs, |i| groups_at(grouped, groups, i + 1));
        let (nodes, names) = SlimNodes::of(tree);
        (samples, alloc, extra, nodes, names)
    };
    let (bss, ba, bx, bn, b_names) = side(bt0, &base.0[1..], base.1);
    let (css, ca, cx, cn, c_names) = side(ct0, &candidate.0[1..], candidate.1);
    let pairs = pair_depth_first(bt0, &b_names, ct0, &c_names);
    let mut rows: Vec<SpanRow> = Vec::with_capacity(pairs.len());
    for &(bi, ci) in &pairs {
        let b = bi.and_then(|i| bn.path_id(i));
        let c = ci.and_then(|i| cn.path_id(i));
        let (b_first, c_first) = (bi.zip(b), ci.zip(c));
        if !grouped {
            rows.push(SpanRow {
                base: bi,
                candidate: ci,
                change: change_of_runs(
                    &run_samples(b_first, &bss, &bx),
                    &run_samples(c_first, &css, &cx),
                    paired,
                )
                .map(Box::new),
                group: None,
                figures: None,
            });
            continue;
        }
        // Every sample of the row as (group, run, value), per side, sorted: the rows of each
        // graph are then runs of it (n log n in the row's samples however many graphs).
        let tagged = |first: Option<(u32, u32)>,
                      samples: &PathSamples,
                      extra: &[(Vec<Option<u32>>, PathSamples)]|
         -> Vec<(u32, u32, u64)> {
            let mut v: Vec<(u32, u32, u64)> = Vec::new();
            for (run, (vals, grps)) in run_samples_grouped(first, samples, extra)
                .into_iter()
                .enumerate()
            {
                v.extend(grps.iter().zip(vals).map(|(&g, &x)| (g, run as u32, x)));
            }
            v.sort_unstable();
            v
        };
        let (tb, tc) = (tagged(b_first, &bss, &bx), tagged(c_first, &css, &cx));
        let mut gs: Vec<u32> = tb.iter().chain(&tc).map(|x| x.0).collect();
        gs.sort_unstable();
        gs.dedup();
        if gs.is_empty() {
            // No whole step holds the path: one row, its figures over the whole trace.
            rows.push(SpanRow {
                base: bi,
                candidate: ci,
                change: None,
                group: None,
                figures: None,
            });
            continue;
        }
        let runs_of = |t: &[(u32, u32, u64)], g: u32, n: usize| -> Vec<Vec<u64>> {
            let mut out = vec![Vec::new(); n];
            let from = t.partition_point(|x| x.0 < g);
            for &(_, run, x) in t[from..].iter().take_while(|x| x.0 == g) {
                if let Some(r) = out.get_mut(run as usize) {
                    r.push(x);
                }
            }
            out
        };
        for g in gs {
            let (rb, rc) = (
                runs_of(&tb, g, base.0.len()),
                runs_of(&tc, g, candidate.0.len()),
            );
            fn slices(r: &[Vec<u64>]) -> Vec<&[u64]> {
                r.iter().map(Vec::as_slice).collect()
            }
            let first_spread = |r: &[Vec<u64>]| r.first().and_then(|v| Spread::of(v));
            let alloc = |path: Option<u32>, m: &FastMap<(u32, u32), u64>| {
                path.map(|p| m.get(&(p, g)).copied().unwrap_or(0))
            };
            rows.push(SpanRow {
                base: bi,
                candidate: ci,
                change: change_of_runs(&slices(&rb), &slices(&rc), paired).map(Box::new),
                group: Some(g),
                figures: Some(Box::new(GroupFigures {
                    spread: [first_spread(&rb), first_spread(&rc)],
                    alloc: [alloc(b, &ba), alloc(c, &ca)],
                })),
            });
        }
    }
    drop((bss, css, bx, cx, pairs, ba, ca));
    // The display paths as parent links; the rows' other figures stay in the nodes.
    let paths = [PathTable::new(bt0, &b_names), PathTable::new(ct0, &c_names)];
    drop((b_names, c_names));
    let nodes = [bn, cn];
    sort_by_abs(
        &mut rows,
        |r| row_time(&nodes, r),
        |rows, run| {
            // Equal changes by path, then graph: the texts of these rows only.
            let texts: Vec<String> = run
                .iter()
                .map(|&i| row_path(&paths, &rows[i as usize]))
                .collect();
            let mut order: Vec<u32> = (0..run.len() as u32).collect();
            order.sort_by(|&a, &b| {
                texts[a as usize].cmp(&texts[b as usize]).then_with(|| {
                    let g = |k: u32| rows[run[k as usize] as usize].group;
                    g(a).cmp(&g(b))
                })
            });
            let sorted: Vec<u32> = order.iter().map(|&k| run[k as usize]).collect();
            run.copy_from_slice(&sorted);
        },
    );
    SpanDeltas {
        rows,
        nodes,
        paths,
        labels: labels.unwrap_or_default(),
    }
}

/// The sources of a side's runs when it has more than one (else none: `base`/`candidate`
/// name it).
fn sources(runs: &[&Trace]) -> Vec<String> {
    if runs.len() > 1 {
        runs.iter().map(|t| t.source.clone()).collect()
    } else {
        Vec::new()
    }
}

/// Per other run of a side: for each node of the side's first tree `first`, the path id of
/// the paired node in that run's tree, and that run's samples by path id. Linear per run.
fn extra_runs<'g>(
    first: &PathTree<'_>,
    runs: &[&Trace],
    groups: impl Fn(usize) -> Option<&'g [u32]>,
) -> Vec<(Vec<Option<u32>>, PathSamples)> {
    runs.iter()
        .enumerate()
        .map(|(i, t)| {
            let tree = path_tree(t);
            let samples = span_samples(&tree, groups(i));
            let mut map = vec![None; first.nodes.len()];
            for (a, b) in pair_paths(first, &tree) {
                if let (Some(a), Some(b)) = (a, b)
                    && let (Some(slot), Some(node)) =
                        (map.get_mut(a as usize), tree.nodes.get(b as usize))
                {
                    *slot = Some(node.path_id);
                }
            }
            (map, samples)
        })
        .collect()
}

/// The per-run samples of a span row on one side: the first run's (node `first.0`, path id
/// `first.1`), then each other run's paired path's (empty where the run lacks the path).
fn run_samples<'a>(
    first: Option<(u32, u32)>,
    samples: &'a PathSamples,
    extra: &'a [(Vec<Option<u32>>, PathSamples)],
) -> Vec<&'a [u64]> {
    let Some((node, path)) = first else {
        return Vec::new();
    };
    std::iter::once(samples.get(path).unwrap_or(&[]))
        .chain(extra.iter().map(|(map, s)| {
            map.get(node as usize)
                .copied()
                .flatten()
                .and_then(|p| s.get(p))
                .unwrap_or(&[])
        }))
        .collect()
}

/// [`run_samples`] with each sample's graph group.
fn run_samples_grouped<'a>(
    first: Option<(u32, u32)>,
    samples: &'a PathSamples,
    extra: &'a [(Vec<Option<u32>>, PathSamples)],
) -> Vec<(&'a [u64], &'a [u32])> {
    let Some((node, path)) = first else {
        return Vec::new();
    };
    std::iter::once(samples.get_grouped(path))
        .chain(extra.iter().map(|(map, s)| {
            map.get(node as usize)
                .copied()
                .flatten()
                .map_or((&[][..], &[][..]), |p| s.get_grouped(p))
        }))
        .collect()
}

/// Sorts `v` by largest absolute change first; equal changes by size (base, else candidate),
/// then by name: `by_name` orders each run of rows (indices into `v`, in their order in `v`)
/// whose change and size are equal, stably, so that only tied rows need their names.
fn sort_by_abs<T>(v: &mut [T], d: impl Fn(&T) -> Delta, by_name: impl Fn(&[T], &mut [u32])) {
    let key = |x: &T| {
        let dd = d(x);
        (
            dd.delta.map_or(0.0, f64::abs),
            dd.base.or(dd.candidate).unwrap_or(0.0),
        )
    };
    // A stable sort of indices (its buffer is a few bytes a row, not a copy of the rows),
    // then each row moved to its place in place.
    let by_key = |ia: u32, ib: u32| {
        let (ka, kb) = (key(&v[ia as usize]), key(&v[ib as usize]));
        kb.0.partial_cmp(&ka.0)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| kb.1.partial_cmp(&ka.1).unwrap_or(std::cmp::Ordering::Equal))
    };
    let mut order: Vec<u32> = (0..v.len() as u32).collect();
    order.sort_by(|&ia, &ib| by_key(ia, ib));
    // Stable: each run of equal keys is in its rows' order in `v`, as `by_name` expects.
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && by_key(order[start], order[end]).is_eq() {
            end += 1;
        }
        if end - start > 1 {
            by_name(v, &mut order[start..end]);
        }
        start = end;
    }
    // `dest[i]`: where the row now at `i` goes.
    let mut dest: Vec<u32> = vec![0; v.len()];
    for (k, &i) in order.iter().enumerate() {
        dest[i as usize] = k as u32;
    }
    drop(order);
    for i in 0..v.len() {
        while dest[i] as usize != i {
            let j = dest[i] as usize;
            v.swap(i, j);
            dest.swap(i, j);
        }
    }
}

/// Orders comparison rows for people: significant changes (regressions and improvements)
/// first, largest relative change first; then the rest in their given order (the
/// comparison's own: largest absolute change of the means first). `change` picks a row's
/// noise-aware [`Change`]. The CLI's `compare` and the report's comparison section share it.
pub fn significance_order<T>(rows: &[T], change: impl Fn(&T) -> Option<&Change>) -> Vec<&T> {
    significance_indices(rows, change)
        .into_iter()
        .map(|i| &rows[i])
        .collect()
}

/// The indices of `rows` in [`significance_order`].
fn significance_indices<T>(rows: &[T], change: impl Fn(&T) -> Option<&Change>) -> Vec<usize> {
    let mut v: Vec<(usize, &T)> = rows.iter().enumerate().collect();
    let key = |c: Option<&Change>| -> (u8, f64) {
        match c {
            Some(c) if matches!(c.verdict, Verdict::Regression | Verdict::Improvement) => {
                (0, -c.ratio.map_or(0.0, f64::abs))
            }
            _ => (1, 0.0),
        }
    };
    v.sort_by(|(ia, a), (ib, b)| {
        let (ka, kb) = (key(change(a)), key(change(b)));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1)).then(ia.cmp(ib))
    });
    v.into_iter().map(|(i, _)| i).collect()
}
