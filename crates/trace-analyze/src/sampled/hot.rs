//! Sampled hot spots: where CPU samples landed, by function, crate group, phase, span or op.
//!
//! [`hot_report`] turns a trace's [`SampledStacks`] (schema version 2) into tables: self
//! samples (the sample landed in the function) and total samples (the function was on the
//! stack), per phase and step range, with an **estimated** CPU time per row derived from the
//! sample count and the sampler's rate. Sample counts are estimates of where CPU time went,
//! never measured durations; every estimate carries its sample count.
//!
//! Crate groups ([`CrateGroup`]) follow what a Candle user asks about: `candle_core`, `gemm`
//! (every `gemm*` crate), `candle_nn`, the model's crate (the program's own crate, and
//! `candle_transformers`), the allocator, and the rest. A sample's group is that of its
//! innermost frame outside Rust's generic runtime (`core`, `std`, `alloc` helpers inlined into
//! a kernel belong to the kernel), unless it landed in the allocator.
//!
//! **Waiting.** Samples whose stack is classified waiting (a thread pool spinning or parked:
//! [`WAITING_FRAMES`](crate::WAITING_FRAMES)) are counted apart: every row carries its
//! waiting samples, each phase its waiting total, and with [`HotOptions::exclude_waiting`]
//! they are left out of the function rankings (rows by function, each phase's hottest
//! functions, crate groups) while still counting in the report's samples and shares, so a
//! spinning barrier does not read as the hottest "function".
//!
//! **The profiler's own samples.** Samples whose stack is classified the profiler's (the
//! sampler's, the recorder's, the heap tracker's own work on a program thread, the
//! step-boundary wake included: [`SampledStacks`]' classes) are counted apart too: every row
//! and phase carries them, the function rankings count them under one
//! [`PROFILER_ROW`](crate::sampled::PROFILER_ROW) row, the crate groups and each phase's
//! hottest functions leave them out, and no hint counts them.
//!
//! **Spans by path.** [`HotBy::Span`] rows are span paths (`llama.forward/block#0/attn`, as
//! `tracegraph spans` and `ops --sampled` name them), self being the sample's innermost span
//! and total its path's subtree; [`HotBy::SpanName`] merges paths by their last name.
//!
//! **Known costs.** The rules of [`hints`](crate::sampled::HINT_RULES) turn recognised
//! patterns (Candle re-reading /proc per op, pools waiting, the allocator, too few samples) into
//! one-line hints ([`HotReport::hints`]), each with its evidence; their thresholds are
//! documented in one table there.
//!
//! Every pass is linear in the samples and the frames of the stacks they name.

use serde::Serialize;
use trace_record::schema::{ExecStep, ParseEnumError};

use crate::model::intern::FastMap;
use crate::model::trace::Trace;
use crate::sampled::hints::{HotHint, hints, is_allocator_frame, is_proc_read_frame};
use crate::sampled::names::{CrateGroup, find_model_crates, frame_group, name_leaders};
use trace_record::SamplerAccount;

use crate::model::samples::{SampleRow, SampledStacks, add_sat, sampler_account};

/// What [`hot_report`] groups rows by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HotBy {
    /// Functions (self: the innermost frame; total: anywhere on the stack).
    #[default]
    Function,
    /// Crate groups ([`CrateGroup`]).
    Crate,
    /// Execution phase (forward, backward, optimizer, unknown).
    Phase,
    /// The path of the innermost open span the capture knew of (self), and the paths above
    /// it (total): one row per span path.
    Span,
    /// The innermost open span's name only (self) and its ancestors' names (total): spans of
    /// one name at different paths make one row (`--by span-name`).
    #[serde(rename = "span-name")]
    SpanName,
    /// The Candle op the sample ran inside (the sampled op table's attribution:
    /// [`CANDLE_OP_FRAMES`](crate::sampled::CANDLE_OP_FRAMES)); busy samples outside any op make one
    /// `(profiler)` row (the capture's own work) and one `(no candle op)` row. Self and total
    /// are the same.
    Op,
}

impl HotBy {
    /// The names `--by` accepts (the JSON names too), in declaration order.
    const NAMES: &'static [&'static str] =
        &["function", "crate", "phase", "span", "span-name", "op"];
}

impl std::str::FromStr for HotBy {
    type Err = ParseEnumError;

    /// `function`, `crate`, `phase`, `span`, `span-name` or `op`.
    fn from_str(s: &str) -> Result<Self, ParseEnumError> {
        Ok(match s {
            "function" => HotBy::Function,
            "crate" => HotBy::Crate,
            "phase" => HotBy::Phase,
            "span" => HotBy::Span,
            "span-name" => HotBy::SpanName,
            "op" => HotBy::Op,
            _ => {
                return Err(ParseEnumError {
                    what: "grouping",
                    found: s.to_string(),
                    expected: HotBy::NAMES,
                });
            }
        })
    }
}

/// Options of [`hot_report`].
#[derive(Debug, Clone, Default)]
pub struct HotOptions {
    /// What rows are.
    pub by: HotBy,
    /// Only samples of recorded steps in this inclusive range.
    pub steps: Option<(u64, u64)>,
    /// Only samples of this phase.
    pub phase: Option<ExecStep>,
    /// At most this many rows (and functions per phase); `None`: all.
    pub limit: Option<usize>,
    /// The model's crates; empty: found from the stacks (the program's own crate, the
    /// outermost non-runtime crate of most samples) plus `candle_transformers`.
    pub model_crates: Vec<String>,
    /// Leave waiting samples out of the function rankings: rows by function, each phase's
    /// hottest functions and the crate groups. They still count in the report's samples (the
    /// shares' denominator), its `waiting` total, and the span and phase rows.
    pub exclude_waiting: bool,
}

/// One row of a [`HotReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotRow {
    /// The function, crate group, phase or span path.
    pub name: String,
    /// The crate group (function rows: the function's crate's group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<CrateGroup>,
    /// Samples that landed in it.
    pub self_samples: u64,
    /// Samples with it on the stack (or, for spans, in it or a descendant).
    pub total_samples: u64,
    /// Of `self_samples`, those classified waiting (a thread pool spinning or parked).
    pub waiting_samples: u64,
    /// Of `self_samples`, those classified the profiler's own work.
    pub profiler_samples: u64,
    /// `self_samples` over the report's samples.
    pub self_share: f64,
    /// `total_samples` over the report's samples.
    pub total_share: f64,
    /// Estimated CPU time of `self_samples` (ns), from the sampler's effective rate; an
    /// estimate, not a measurement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub self_est_ns: Option<u64>,
}

/// The samples of one phase and its hottest functions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseHot {
    /// `forward`, `backward`, `optimizer` or `unknown`.
    pub phase: String,
    /// Samples in the phase.
    pub samples: u64,
    /// Of them, samples classified waiting.
    pub waiting: u64,
    /// Of them, samples classified the profiler's own work (not in `top`).
    pub profiler: u64,
    /// Over the report's samples.
    pub share: f64,
    /// The phase's functions by self samples (innermost frame outside the generic runtime).
    pub top: Vec<HotRow>,
}

/// [`add_sat`] with the flag in a [`Cell`](std::cell::Cell), for closures that share it.
fn add_sat_cell(acc: &mut u64, x: u64, flag: &std::cell::Cell<bool>) {
    let mut f = flag.get();
    add_sat(acc, x, &mut f);
    flag.set(f);
}

/// Where the sampled CPU time went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotReport {
    /// What the rows are.
    pub by: HotBy,
    /// Samples selected (step range, phase).
    pub samples: u64,
    /// Of them, samples classified waiting (a thread pool spinning or parked).
    pub waiting: u64,
    /// Waiting samples were left out of the function rankings
    /// ([`HotOptions::exclude_waiting`]).
    pub waiting_excluded: bool,
    /// Of `samples`, samples classified the profiler's own work (the sampler, the recorder,
    /// the heap tracker on a program thread): one row in the function rankings, in no crate
    /// group and in no hint.
    pub profiler: u64,
    /// The sampler's account over the selected steps.
    pub sampler: SamplerAccount,
    /// The model's crates used for the `model` group.
    pub model_crates: Vec<String>,
    /// Rows, by self samples (then total) descending.
    pub rows: Vec<HotRow>,
    /// Per phase: samples and hottest functions.
    pub phases: Vec<PhaseHot>,
    /// Per crate group: self samples.
    pub groups: Vec<HotRow>,
    /// Recognised costs, one line each with its evidence (see the module docs).
    pub hints: Vec<HotHint>,
    /// Samples left out at load because their step is no step of the trace
    /// ([`SampledStacks::outside_steps`](crate::SampledStacks::outside_steps)).
    pub outside_steps: u64,
    /// A count above passed `u64::MAX` and stopped there: the trace's sample counts are
    /// hostile or corrupt (`tracegraph validate` names the lines), so shares are unreliable.
    pub saturated: bool,
}

impl HotReport {
    /// `n` samples as a share of the [`samples`](Self::samples) selected (0 when none were).
    pub fn share_of(&self, n: u64) -> f64 {
        if self.samples > 0 {
            n as f64 / self.samples as f64
        } else {
            0.0
        }
    }
}

/// The phase of a sample: the capture's, else what its stack shows (a frame of Candle's
/// backprop → backward, of an optimizer → optimizer).
fn phase_of(row: &SampleRow, frames: &[u32], s: &SampledStacks) -> Option<ExecStep> {
    row.phase.or_else(|| {
        frames.iter().rev().find_map(|&f| {
            let fr = s.frame(f)?;
            let file = fr.file.unwrap_or("");
            let krate = s.frame_crate(f);
            if fr.func.contains("candle_core::backprop")
                || (krate == Some("candle_core") && file.ends_with("backprop.rs"))
            {
                Some(ExecStep::Backward)
            } else if fr.func.contains("candle_nn::optim")
                || (krate == Some("candle_nn") && file.ends_with("optim.rs"))
            {
                Some(ExecStep::Optimizer)
            } else {
                None
            }
        })
    })
}

fn phase_name(p: Option<ExecStep>) -> &'static str {
    p.map_or("unknown", ExecStep::as_str)
}

/// The innermost frame of a stack outside the generic runtime (an allocator frame counts),
/// or the innermost frame when all are runtime.
fn attributed_frame(frames: &[u32], s: &SampledStacks) -> Option<u32> {
    frames
        .iter()
        .rev()
        .copied()
        .find(|&f| s.frame_is_allocator(f) || !s.frame_is_runtime(f))
        .or_else(|| frames.last().copied())
}

/// The order rows are shown in: most self samples first, then most total samples, then by
/// name. Arguments are (self samples, total samples, name).
fn rank_order(a: (u64, u64, &str), b: (u64, u64, &str)) -> std::cmp::Ordering {
    b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(b.2))
}

/// Sorts `ranked` in [`rank_order`] of `key` (self samples, total samples, name) and keeps
/// the first `limit`. With a limit, the kept ones are selected first (linear), so only they
/// are sorted.
fn drop_ranked_beyond_limit<'a, T>(
    ranked: &mut Vec<T>,
    limit: Option<usize>,
    key: impl Fn(&T) -> (u64, u64, &'a str),
) {
    let order = |a: &T, b: &T| rank_order(key(a), key(b));
    if let Some(l) = limit {
        if l == 0 {
            ranked.clear();
            return;
        }
        if l < ranked.len() {
            ranked.select_nth_unstable_by(l - 1, order);
            ranked.truncate(l);
        }
    }
    ranked.sort_by(order);
}

#[derive(Default, Clone, Copy)]
struct Acc {
    self_n: u64,
    total_n: u64,
    wait_n: u64,
    prof_n: u64,
    /// The last sample row that counted towards `total_n` (counts a key once per stack).
    last: usize,
}

/// Where the sampled CPU time went (see the module docs). Linear in the selected samples and
/// the frames of their stacks.
pub fn hot_report(trace: &Trace, opts: &HotOptions) -> HotReport {
    let s = &trace.sampled;
    let model = if opts.model_crates.is_empty() {
        find_model_crates(trace)
    } else {
        opts.model_crates.clone()
    };
    // Samples of steps that are no step of the trace were left out at load
    // (`SampledStacks::outside_steps`).
    let in_steps = |step: u64| opts.steps.is_none_or(|(a, b)| step >= a && step <= b);
    let group_of = |f: u32| frame_group(s, f, &model);

    let acc = sampler_account(s, in_steps);
    let ns_per_sample = acc.ns_per_sample();

    // Span ids → (name, parent id) for --by span.
    let span_info: FastMap<u64, (usize, Option<u32>)> = if opts.by == HotBy::SpanName {
        trace
            .spans
            .iter()
            .enumerate()
            .map(|(i, sp)| (sp.id, (i, sp.parent)))
            .collect()
    } else {
        FastMap::default()
    };

    // Span ids → path nodes for --by span: self per node here, totals over each subtree
    // at the end (parents come before their children).
    let tree = (opts.by == HotBy::Span).then(|| crate::events::spans::path_tree(trace));
    let node_of_span: FastMap<u64, u32> = tree.as_ref().map_or_else(FastMap::default, |t| {
        let mut node_of = vec![u32::MAX; t.nodes.len()];
        for (i, n) in t.nodes.iter().enumerate() {
            if let Some(slot) = node_of.get_mut(n.path_id as usize) {
                *slot = i as u32;
            }
        }
        trace
            .spans
            .iter()
            .zip(&t.path_of)
            .filter_map(|(sp, &p)| {
                node_of
                    .get(p as usize)
                    .filter(|&&n| n != u32::MAX)
                    .map(|&n| (sp.id, n))
            })
            .collect()
    });
    let mut by_node: Vec<Acc> = vec![Acc::default(); tree.as_ref().map_or(0, |t| t.nodes.len())];

    // Stack → Candle op for --by op.
    let stack_ops = (opts.by == HotBy::Op).then(|| crate::sampled::sampled_ops::stack_ops(trace));

    // Keyed by names the trace (or this crate) owns: no string is copied per row until the
    // rows that are kept are made.
    let mut keys: FastMap<&str, (Acc, Option<CrateGroup>)> = FastMap::default();
    let mut groups: FastMap<CrateGroup, Acc> = FastMap::default();
    let mut phase_tot: FastMap<Option<ExecStep>, (u64, u64, u64)> = FastMap::default();
    let mut phase_fn: FastMap<(Option<ExecStep>, u32), (u64, u64)> = FastMap::default();
    let mut total = 0u64;
    let mut waiting_total = 0u64;
    let mut profiler_total = 0u64;
    let (mut proc_read, mut allocator) = (0u64, 0u64);
    // Per frame: a frame of the per-op /proc read, of the allocator.
    let proc_frame: Vec<bool> = s
        .frames()
        .enumerate()
        .map(|(i, f)| is_proc_read_frame(f.func, s.frame_crate(i as u32)))
        .collect();
    let alloc_frame: Vec<bool> = s.frames().map(|f| is_allocator_frame(f.func)).collect();
    // Rows by function: per frame standing for its name (`name_leaders`), by index.
    let by_function = opts.by == HotBy::Function;
    let leaders = if by_function {
        name_leaders(s)
    } else {
        Vec::new()
    };
    let mut by_frame: Vec<(Acc, Option<CrateGroup>)> = vec![(Acc::default(), None); leaders.len()];
    // Counts stop at u64::MAX (hostile `n`) and say so, as the validator's sums do.
    let sat = std::cell::Cell::new(false);
    let add = |a: &mut u64, x: u64| add_sat_cell(a, x, &sat);
    for (ri, row) in s.samples.iter().enumerate() {
        let ri = ri + 1;
        if !in_steps(row.step) {
            continue;
        }
        let frames = s.stack(row.stack);
        let phase = phase_of(row, frames, s);
        if opts.phase.is_some() && phase != opts.phase {
            continue;
        }
        let n = row.n;
        add(&mut total, n);
        let waiting = s.stack_is_waiting(row.stack);
        let wait_n = if waiting { n } else { 0 };
        add(&mut waiting_total, wait_n);
        let profiler = s.stack_is_profiler(row.stack);
        let prof_n = if profiler { n } else { 0 };
        add(&mut profiler_total, prof_n);
        // Left out of the function rankings (not of the span and phase rows); the
        // profiler's own samples make one row of their own there.
        let ranked = !(profiler || (waiting && opts.exclude_waiting));
        let pname = phase_name(phase);
        let pt = phase_tot.entry(phase).or_default();
        add(&mut pt.0, n);
        add(&mut pt.1, wait_n);
        add(&mut pt.2, prof_n);
        // No hint counts the profiler's own samples.
        if !profiler && frames.iter().any(|&f| proc_frame[f as usize]) {
            add(&mut proc_read, n);
        }
        // The allocator innermost, looking through the generic runtime and libc.
        let alloc = !profiler
            && frames
                .iter()
                .rev()
                .find(|&&f| alloc_frame[f as usize] || !s.frame_is_runtime(f))
                .is_some_and(|&f| alloc_frame[f as usize]);
        if alloc {
            add(&mut allocator, n);
        }
        let attributed = attributed_frame(frames, s).filter(|_| ranked);
        if let Some(f) = attributed {
            let pf = phase_fn.entry((phase, f)).or_default();
            add(&mut pf.0, n);
            add(&mut pf.1, wait_n);
            let g = groups.entry(group_of(f)).or_default();
            add(&mut g.self_n, n);
            add(&mut g.wait_n, wait_n);
        }
        // Total per group: once per stack.
        for &f in frames.iter().filter(|_| ranked) {
            let g = groups.entry(group_of(f)).or_default();
            if g.last != ri {
                g.last = ri;
                add(&mut g.total_n, n);
            }
        }
        let count =
            |(a, g): &mut (Acc, Option<CrateGroup>), group: Option<CrateGroup>, is_self: bool| {
                if g.is_none() {
                    *g = group;
                }
                if is_self {
                    add(&mut a.self_n, n);
                    add(&mut a.wait_n, wait_n);
                    add(&mut a.prof_n, prof_n);
                }
                if a.last != ri {
                    a.last = ri;
                    add(&mut a.total_n, n);
                }
            };
        let mut bump = |key, group: Option<CrateGroup>, is_self: bool| {
            count(
                keys.entry(key).or_insert((Acc::default(), None)),
                group,
                is_self,
            );
        };
        match opts.by {
            HotBy::Function if ranked => {
                // A name counts once per stack (total), its group is that of the first
                // frame counted under it.
                let last = frames.len().saturating_sub(1);
                for (i, &f) in frames.iter().enumerate() {
                    let leader = leaders.get(f as usize).copied().unwrap_or(f);
                    if let Some(slot) = by_frame.get_mut(leader as usize) {
                        count(slot, Some(group_of(f)), i == last);
                    }
                }
            }
            HotBy::Function if profiler => {
                bump(crate::sampled::sampled_ops::PROFILER_ROW, None, true);
            }
            HotBy::Function | HotBy::Crate => {
                // Crate rows are the groups below; unranked samples make no function row.
            }
            HotBy::Phase => bump(pname, None, true),
            HotBy::Op if ranked || profiler => {
                let op = stack_ops
                    .as_ref()
                    .map_or(crate::sampled::sampled_ops::NO_CANDLE_OP, |o| {
                        o.row_name(row.stack)
                    });
                bump(op, None, true);
            }
            HotBy::Op => {}
            HotBy::Span => match row.span.and_then(|id| node_of_span.get(&id).copied()) {
                Some(node) => {
                    if let Some(a) = by_node.get_mut(node as usize) {
                        add(&mut a.self_n, n);
                        add(&mut a.wait_n, wait_n);
                        add(&mut a.prof_n, prof_n);
                    }
                }
                None => bump(crate::sampled::sampled_ops::NO_SPAN_PATH, None, true),
            },
            HotBy::SpanName => {
                let mut cur = row.span.and_then(|id| span_info.get(&id).copied());
                if cur.is_none() {
                    bump("(no span)", None, true);
                }
                let mut first = true;
                let mut hops = 0usize;
                while let Some((i, parent)) = cur {
                    let name = trace.strings.resolve(trace.spans[i].name);
                    bump(name, None, first);
                    first = false;
                    hops += 1;
                    if hops > trace.spans.len() {
                        break;
                    }
                    cur = parent.map(|p| {
                        let sp = &trace.spans[p as usize];
                        (p as usize, sp.parent)
                    });
                }
            }
        }
    }

    // Span paths: a node's total is its subtree's self samples (children after parents).
    if let Some(t) = &tree {
        for a in &mut by_node {
            a.total_n = a.self_n;
        }
        for i in (0..by_node.len()).rev() {
            let parent = t.nodes[i].parent.map(|p| p as usize).filter(|&p| p < i);
            if let Some(p) = parent {
                let child = by_node[i].total_n;
                add(&mut by_node[p].total_n, child);
            }
        }
    }

    let share = |x: u64| {
        if total > 0 {
            x as f64 / total as f64
        } else {
            0.0
        }
    };
    let est = |x: u64| ns_per_sample.map(|p| (x as f64 * p).round() as u64);
    let make = |name: String, group: Option<CrateGroup>, a: Acc| HotRow {
        name,
        group,
        self_samples: a.self_n,
        total_samples: a.total_n,
        waiting_samples: a.wait_n,
        profiler_samples: a.prof_n,
        self_share: share(a.self_n),
        total_share: share(a.total_n),
        self_est_ns: est(a.self_n),
    };
    let sort = |rows: &mut Vec<HotRow>| {
        rows.sort_by(|a, b| {
            rank_order(
                (a.self_samples, a.total_samples, &a.name),
                (b.self_samples, b.total_samples, &b.name),
            )
        });
        if let Some(l) = opts.limit {
            rows.truncate(l);
        }
    };
    let mut group_rows: Vec<HotRow> = groups
        .iter()
        .map(|(&g, &a)| make(g.as_str().to_string(), Some(g), a))
        .collect();
    sort(&mut group_rows);
    let rows: Vec<HotRow> = if opts.by == HotBy::Crate {
        group_rows.clone()
    } else {
        // Ranked and cut to the limit before any row (and its name's copy) is made: a
        // trace may hold millions of distinct names.
        let mut ranked: Vec<(&str, Acc, Option<CrateGroup>)> =
            keys.into_iter().map(|(k, (a, g))| (k, a, g)).collect();
        drop_ranked_beyond_limit(&mut ranked, opts.limit, |r| (r.1.self_n, r.1.total_n, r.0));
        trace.work.add_sort(ranked.len());
        // By function: the names counted (a counted name's `last` is a row, from 1).
        let mut named: Vec<u32> = (0..by_frame.len())
            .filter(|&f| by_frame[f].0.last != 0)
            .map(|f| f as u32)
            .collect();
        drop_ranked_beyond_limit(&mut named, opts.limit, |&f| {
            let a = &by_frame[f as usize].0;
            (a.self_n, a.total_n, s.frame_name(f))
        });
        trace.work.add_sort(named.len());
        // By span path: the paths counted, ranked and cut, then named in tree order (a
        // display path is made walking the tree forwards).
        let mut nodes: Vec<u32> = (0..by_node.len())
            .filter(|&i| by_node[i].total_n > 0)
            .map(|i| i as u32)
            .collect();
        if let Some(t) = &tree {
            drop_ranked_beyond_limit(&mut nodes, opts.limit, |&i| {
                let a = &by_node[i as usize];
                (a.self_n, a.total_n, t.name(i as usize))
            });
            trace.work.add_sort(nodes.len());
            nodes.sort_unstable();
        }
        let mut paths = tree
            .as_ref()
            .map(crate::events::spans::PathTree::display_paths);
        let path_rows: Vec<HotRow> = nodes
            .into_iter()
            .filter_map(|i| {
                let (t, p) = (tree.as_ref()?, paths.as_mut()?);
                let path = p
                    .path_of(i as usize)
                    .unwrap_or_else(|| t.full_path(i as usize));
                Some(make(path, None, by_node[i as usize]))
            })
            .collect();
        let mut rows: Vec<HotRow> = ranked
            .into_iter()
            .map(|(k, a, g)| make(k.to_string(), g, a))
            .chain(named.into_iter().map(|f| {
                let (a, g) = by_frame[f as usize];
                make(s.frame_name(f).to_string(), g, a)
            }))
            .chain(path_rows)
            .collect();
        // Rows of two kinds (the profiler's row beside functions, `(no span)` beside
        // paths) in one order.
        sort(&mut rows);
        rows
    };

    // The schema's order (forward, backward, optimizer), a phase no frame tells last.
    let mut phase_order: Vec<(Option<ExecStep>, (u64, u64, u64))> =
        phase_tot.iter().map(|(&p, &t)| (p, t)).collect();
    phase_order.sort_by_key(|&(p, _)| (p.is_none(), p));
    let phases: Vec<PhaseHot> = phase_order
        .into_iter()
        .map(|(p, (n, w, pr))| {
            let mut top: Vec<HotRow> = phase_fn
                .iter()
                .filter(|((q, _), _)| *q == p)
                .map(|(&(_, f), &(k, kw))| {
                    make(
                        s.frame_name(f).to_string(),
                        Some(group_of(f)),
                        Acc {
                            self_n: k,
                            total_n: k,
                            wait_n: kw,
                            prof_n: 0,
                            last: 0,
                        },
                    )
                })
                .collect();
            sort(&mut top);
            PhaseHot {
                phase: phase_name(p).to_string(),
                samples: n,
                waiting: w,
                profiler: pr,
                share: share(n),
                top,
            }
        })
        .collect();

    // Hints are about the program: its samples, the profiler's own left out.
    let hints = hints(
        total.saturating_sub(profiler_total),
        waiting_total,
        proc_read,
        allocator,
        &acc,
    );
    let saturated = sat.get() || acc.saturated;
    HotReport {
        hints,
        saturated,
        outside_steps: s.outside_steps,
        by: opts.by,
        samples: total,
        waiting: waiting_total,
        waiting_excluded: opts.exclude_waiting,
        profiler: profiler_total,
        sampler: acc,
        model_crates: model,
        rows,
        phases,
        groups: group_rows,
    }
}

/// The sampler's account over every step of the trace (what [`HotReport::sampler`] is with
/// no step range).
pub fn sampler_totals(trace: &Trace) -> SamplerAccount {
    SamplerAccount::over(&trace.sampled.steps)
}

/// The hottest functions inside backward (by self samples, innermost frame outside the generic
/// runtime), at most `n`: the summary's "top kernels inside backward", waiting left out (a
/// thread pool's spin is no kernel). Empty when the trace has no backward samples.
pub fn backward_kernels(trace: &Trace, n: usize) -> Vec<HotRow> {
    if trace.sampled.is_empty() {
        return Vec::new();
    }
    let r = hot_report(
        trace,
        &HotOptions {
            by: HotBy::Phase,
            phase: Some(ExecStep::Backward),
            limit: Some(n),
            exclude_waiting: true,
            ..HotOptions::default()
        },
    );
    r.phases
        .into_iter()
        .next()
        .map(|p| p.top)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
