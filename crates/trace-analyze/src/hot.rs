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
//! **Known costs.** A small set of rules ([`HINT_RULES`]) turns recognised patterns into
//! one-line hints ([`HotReport::hints`]), each with its evidence (samples and share):
//!
//! - `proc_read_per_op`: Candle (0.11) works out its thread count on every parallel op when
//!   `RAYON_NUM_THREADS` is unset, re-reading /proc (`default_num_threads`, `num_cpus`) under
//!   `candle_core::utils::get_num_threads`; at least [`PROC_READ_MIN_SHARE`] of the samples.
//! - `pool_waiting`: thread pools waiting (see above) in at least [`POOL_WAITING_MIN_SHARE`].
//! - `allocator`: the allocator (malloc/free, and the mmap/munmap/madvise/brk calls behind
//!   large allocations, where page faults land) innermost in at least
//!   [`ALLOCATOR_MIN_SHARE`].
//! - `too_few_samples`: fewer than [`SAMPLES_FOR_5_POINTS`] samples, the count whose shares
//!   are within ±5 points (95 %); the hint says how many more and how much CPU time that is at
//!   the achieved (else requested) rate.
//!
//! Every pass is linear in the samples and the frames of the stacks they name.

use serde::Serialize;
use trace_record::schema::{ExecStep, ParseEnumError};

use crate::intern::FastMap;
use crate::model::Trace;
pub use crate::samples::SamplerAccount;
use crate::samples::{SampleRow, SampledStacks, add_sat, sampler_account};

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
    /// The innermost open span the capture knew of (self), and its ancestors (total).
    Span,
    /// The Candle op the sample ran inside (the sampled op table's attribution:
    /// [`CANDLE_OP_FRAMES`](crate::CANDLE_OP_FRAMES)); busy samples outside any op make one
    /// `(profiler)` row (the capture's own work) and one `(no candle op)` row. Self and total
    /// are the same.
    Op,
}

impl HotBy {
    /// The names `--by` accepts (the JSON names too), in declaration order.
    const NAMES: &'static [&'static str] = &["function", "crate", "phase", "span", "op"];
}

impl std::str::FromStr for HotBy {
    type Err = ParseEnumError;

    /// `function`, `crate`, `phase`, `span` or `op`.
    fn from_str(s: &str) -> Result<Self, ParseEnumError> {
        Ok(match s {
            "function" => HotBy::Function,
            "crate" => HotBy::Crate,
            "phase" => HotBy::Phase,
            "span" => HotBy::Span,
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

/// A crate group of sampled frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CrateGroup {
    /// `candle_core`: tensors, backprop, the CPU backend's kernels.
    CandleCore,
    /// `gemm` and its `gemm_*` crates: matrix-multiply kernels.
    Gemm,
    /// `candle_nn`: layers, losses, optimizers.
    CandleNn,
    /// The program's own crate and `candle_transformers`: the model's code.
    Model,
    /// The memory allocator (`malloc`, `free`, `__rust_alloc`, ...).
    Allocator,
    /// Everything else (runtime, threads, other crates, unknown frames).
    Other,
}

impl CrateGroup {
    /// `candle_core`, `gemm`, `candle_nn`, `model`, `allocator`, `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            CrateGroup::CandleCore => "candle_core",
            CrateGroup::Gemm => "gemm",
            CrateGroup::CandleNn => "candle_nn",
            CrateGroup::Model => "model",
            CrateGroup::Allocator => "allocator",
            CrateGroup::Other => "other",
        }
    }
}

/// Which group a crate name falls in, given the model's crates.
fn group_of_crate(name: Option<&str>, model: &[String]) -> CrateGroup {
    match name {
        Some("candle_core") => CrateGroup::CandleCore,
        Some("candle_nn") => CrateGroup::CandleNn,
        Some(n) if n.starts_with("gemm") => CrateGroup::Gemm,
        Some(n) if model.iter().any(|m| m == n) => CrateGroup::Model,
        _ => CrateGroup::Other,
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

/// Shares of samples at or above which a rule's hint is given (see the module docs).
pub const PROC_READ_MIN_SHARE: f64 = 0.02;
/// See [`PROC_READ_MIN_SHARE`].
pub const POOL_WAITING_MIN_SHARE: f64 = 0.20;
/// See [`PROC_READ_MIN_SHARE`].
pub const ALLOCATOR_MIN_SHARE: f64 = 0.05;
/// Samples whose shares are within ±5 points at 95 % confidence (a share near one half:
/// 1.96² × 0.25 / 0.05²).
pub const SAMPLES_FOR_5_POINTS: u64 = 385;

/// The rules of [`HotReport::hints`], by name, with what each recognises.
pub const HINT_RULES: &[(&str, &str)] = &[
    (
        "proc_read_per_op",
        "Candle re-reading /proc for its thread count on every op (RAYON_NUM_THREADS unset)",
    ),
    ("pool_waiting", "thread pools waiting instead of working"),
    (
        "allocator",
        "time in the allocator (malloc/free, mmap/munmap, page faults)",
    ),
    (
        "too_few_samples",
        "too few samples for the shares to mean much",
    ),
];

/// A recognised cost: the rule, a one-line hint, and its evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotHint {
    /// The rule's name ([`HINT_RULES`]).
    pub rule: &'static str,
    /// The hint, one line.
    pub hint: String,
    /// Samples that are its evidence (for `too_few_samples`, those the report has).
    pub samples: u64,
    /// Their share of the report's samples.
    pub share: f64,
}

/// A frame of Candle's per-op thread-count lookup that reads /proc when `RAYON_NUM_THREADS`
/// is unset: candle-core's `default_num_threads` and CPU-list detection, or `num_cpus`.
fn is_proc_read_frame(func: &str, krate: Option<&str>) -> bool {
    match krate {
        Some("num_cpus") => true,
        Some("candle_core") => {
            func.contains("default_num_threads") || func.contains("linux_detect_preferred_cpus")
        }
        _ => false,
    }
}

/// Frames of the allocator, and of the system calls behind large allocations (where their
/// page faults are taken).
fn is_allocator_frame(func: &str) -> bool {
    if crate::samples::is_allocator(func) {
        return true;
    }
    // libc's names: `mmap64`, `__mmap`, `__GI___munmap`, `madvise`, `__brk`, `sbrk`.
    let bare = func
        .trim_start_matches('_')
        .trim_start_matches("GI_")
        .trim_start_matches('_');
    let name = bare.split(' ').next().unwrap_or(bare);
    ["mmap", "munmap", "madvise", "mremap", "brk", "sbrk"]
        .iter()
        .any(|p| {
            name.strip_prefix(p)
                .is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// A share as `12.3%`.
fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// The hints of a report with `total` samples, of which `waiting`, `proc_read` and
/// `allocator` are each rule's evidence.
fn hints(
    total: u64,
    waiting: u64,
    proc_read: u64,
    allocator: u64,
    acc: &SamplerAccount,
) -> Vec<HotHint> {
    let mut out = Vec::new();
    if acc.steps == 0 {
        return out;
    }
    let share = |x: u64| {
        if total > 0 {
            x as f64 / total as f64
        } else {
            0.0
        }
    };
    let mut add = |rule, samples: u64, min: f64, hint: String| {
        if total > 0 && samples > 0 && share(samples) >= min {
            out.push(HotHint {
                rule,
                hint,
                samples,
                share: share(samples),
            });
        }
    };
    add(
        "proc_read_per_op",
        proc_read,
        PROC_READ_MIN_SHARE,
        format!(
            "{} of samples re-read /proc for Candle's thread count on every op \
             (candle_core::utils::get_num_threads, RAYON_NUM_THREADS unset): set \
             RAYON_NUM_THREADS to the number of cores",
            pct(share(proc_read))
        ),
    );
    add(
        "pool_waiting",
        waiting,
        POOL_WAITING_MIN_SHARE,
        format!(
            "{} of samples are thread pools waiting (spinning at Candle's barrier, rayon \
             idle, parked): the ops are too small for the threads; try fewer threads \
             (RAYON_NUM_THREADS, CANDLE_NUM_THREADS) or larger batches",
            pct(share(waiting))
        ),
    );
    add(
        "allocator",
        allocator,
        ALLOCATOR_MIN_SHARE,
        format!(
            "{} of samples are in the allocator (malloc/free, mmap/munmap and their page \
             faults): tensors are allocated and freed per op; reuse buffers or batch work",
            pct(share(allocator))
        ),
    );
    if total < SAMPLES_FOR_5_POINTS {
        let hz = acc
            .effective_hz
            .filter(|&h| h > 0.0)
            .unwrap_or(acc.requested_hz as f64);
        let more = SAMPLES_FOR_5_POINTS - total;
        let cpu = if hz > 0.0 {
            format!(
                ", about {} of CPU at the {} {hz:.0} Hz",
                crate::format_ns((more as f64 / hz * 1e9).round()),
                if acc.effective_hz.is_some_and(|h| h > 0.0) {
                    "achieved"
                } else {
                    "requested"
                }
            )
        } else {
            String::new()
        };
        let margin = if total > 0 {
            format!(
                "shares are within ±{:.0} points (95%)",
                1.96 * (0.25 / total as f64).sqrt() * 100.0
            )
        } else {
            "no share can be told".to_string()
        };
        out.push(HotHint {
            rule: "too_few_samples",
            hint: format!(
                "{total} samples: {margin}; {SAMPLES_FOR_5_POINTS} are needed for ±5 points, \
                 {more} more{cpu}: record more steps or raise the rate"
            ),
            samples: total,
            share: 1.0,
        });
    }
    out
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

/// The model's crates: the outermost non-runtime crate of the most samples (the program),
/// plus `candle_transformers`.
fn find_model_crates(trace: &Trace) -> Vec<String> {
    let s = &trace.sampled;
    let mut votes: FastMap<&str, u64> = FastMap::default();
    for row in &s.samples {
        let outer = s.stack(row.stack).iter().find_map(|&f| {
            let c = s.frame_crate(f)?;
            let runtime = matches!(
                c,
                "core" | "std" | "alloc" | "candle_core" | "candle_nn" | "rayon" | "rayon_core"
            ) || c.starts_with("gemm")
                || c.starts_with("trace_");
            (!runtime).then_some(c)
        });
        if let Some(c) = outer {
            let v = votes.entry(c).or_default();
            *v = v.saturating_add(row.n);
        }
    }
    let mut out: Vec<String> = votes
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
        .map(|(c, _)| c.to_string())
        .into_iter()
        .collect();
    if !out.iter().any(|c| c == "candle_transformers") {
        out.push("candle_transformers".into());
    }
    out
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

/// Per frame: the frame that stands for every frame of its shown name (the first by index),
/// so that rows by function are counted per name over frame indices instead of names.
/// O(n log n) in the frames.
pub(crate) fn name_leaders(s: &SampledStacks) -> Vec<u32> {
    let n = u32::try_from(s.frame_count()).unwrap_or(u32::MAX);
    let mut order: Vec<u32> = (0..n).collect();
    order.sort_unstable_by(|&a, &b| s.frame_name(a).cmp(s.frame_name(b)).then(a.cmp(&b)));
    let mut leader: Vec<u32> = (0..n).collect();
    let mut cur: Option<u32> = None;
    for &f in &order {
        match cur {
            Some(l) if s.frame_name(l) == s.frame_name(f) => leader[f as usize] = l,
            _ => cur = Some(f),
        }
    }
    leader
}

#[derive(Default, Clone, Copy)]
struct Acc {
    self_n: u64,
    total_n: u64,
    wait_n: u64,
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
    let span_info: FastMap<u64, (usize, Option<u32>)> = if opts.by == HotBy::Span {
        trace
            .spans
            .iter()
            .enumerate()
            .map(|(i, sp)| (sp.id, (i, sp.parent)))
            .collect()
    } else {
        FastMap::default()
    };

    // Stack → Candle op for --by op.
    let stack_ops = (opts.by == HotBy::Op).then(|| crate::sampled_ops::stack_ops(trace));

    // Keyed by names the trace (or this crate) owns: no string is copied per row until the
    // rows that are kept are made.
    let mut keys: FastMap<&str, (Acc, Option<CrateGroup>)> = FastMap::default();
    let mut groups: FastMap<CrateGroup, Acc> = FastMap::default();
    let mut phase_tot: FastMap<&'static str, (u64, u64)> = FastMap::default();
    let mut phase_fn: FastMap<(&'static str, u32), (u64, u64)> = FastMap::default();
    let mut total = 0u64;
    let mut waiting_total = 0u64;
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
        // Left out of the function rankings (not of the span and phase rows).
        let ranked = !(waiting && opts.exclude_waiting);
        let pname = phase_name(phase);
        let pt = phase_tot.entry(pname).or_default();
        add(&mut pt.0, n);
        add(&mut pt.1, wait_n);
        if frames.iter().any(|&f| proc_frame[f as usize]) {
            add(&mut proc_read, n);
        }
        // The allocator innermost, looking through the generic runtime and libc.
        let alloc = frames
            .iter()
            .rev()
            .find(|&&f| alloc_frame[f as usize] || !s.frame_is_runtime(f))
            .is_some_and(|&f| alloc_frame[f as usize]);
        if alloc {
            add(&mut allocator, n);
        }
        let attributed = attributed_frame(frames, s).filter(|_| ranked);
        if let Some(f) = attributed {
            let pf = phase_fn.entry((pname, f)).or_default();
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
            HotBy::Function | HotBy::Crate => {
                // Crate rows are the groups below; unranked samples make no function row.
            }
            HotBy::Phase => bump(pname, None, true),
            HotBy::Op if ranked => {
                let op = stack_ops
                    .as_ref()
                    .map_or(crate::sampled_ops::NO_CANDLE_OP, |o| o.row_name(row.stack));
                bump(op, None, true);
            }
            HotBy::Op => {}
            HotBy::Span => {
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
        ranked
            .into_iter()
            .map(|(k, a, g)| make(k.to_string(), g, a))
            .chain(named.into_iter().map(|f| {
                let (a, g) = by_frame[f as usize];
                make(s.frame_name(f).to_string(), g, a)
            }))
            .collect()
    };

    let mut phases: Vec<PhaseHot> = phase_tot
        .iter()
        .map(|(&p, &(n, w))| {
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
                            last: 0,
                        },
                    )
                })
                .collect();
            sort(&mut top);
            PhaseHot {
                phase: p.to_string(),
                samples: n,
                waiting: w,
                share: share(n),
                top,
            }
        })
        .collect();
    let order = |p: &str| match p {
        "forward" => 0,
        "backward" => 1,
        "optimizer" => 2,
        _ => 3,
    };
    phases.sort_by_key(|p| order(&p.phase));

    let hints = hints(total, waiting_total, proc_read, allocator, &acc);
    let saturated = sat.get() || acc.saturated;
    HotReport {
        hints,
        saturated,
        outside_steps: s.outside_steps,
        by: opts.by,
        samples: total,
        waiting: waiting_total,
        waiting_excluded: opts.exclude_waiting,
        sampler: acc,
        model_crates: model,
        rows,
        phases,
        groups: group_rows,
    }
}

/// The crate group of each frame's row by function in a [`hot_report`] over every sample
/// (the group of its shown name: that of the first frame counted under the name), by frame
/// index; [`CrateGroup::Other`] for a frame no sample's stack holds. What the report's flame
/// graph colours frames by, without making the rows. Linear in the samples and the frames
/// of their stacks, O(n log n) in the frames.
pub fn function_groups(trace: &Trace) -> Vec<CrateGroup> {
    let s = &trace.sampled;
    let model = find_model_crates(trace);
    let leaders = name_leaders(s);
    let mut first: Vec<Option<CrateGroup>> = vec![None; leaders.len()];
    for row in &s.samples {
        for &f in s.stack(row.stack) {
            let leader = leaders.get(f as usize).copied().unwrap_or(f);
            if let Some(g @ None) = first.get_mut(leader as usize) {
                *g = Some(frame_group(s, f, &model));
            }
        }
    }
    leaders
        .iter()
        .map(|&l| {
            first
                .get(l as usize)
                .copied()
                .flatten()
                .unwrap_or(CrateGroup::Other)
        })
        .collect()
}

/// The sampler's account over every step of the trace (what [`HotReport::sampler`] is with
/// no step range).
pub fn sampler_totals(trace: &Trace) -> SamplerAccount {
    sampler_account(&trace.sampled, |_| true)
}

/// The crate group of frame `f`: the allocator's, else its crate's.
fn frame_group(s: &SampledStacks, f: u32, model: &[String]) -> CrateGroup {
    if s.frame_is_allocator(f) {
        CrateGroup::Allocator
    } else {
        group_of_crate(s.frame_crate(f), model)
    }
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

/// A function name shortened for a table: generic arguments elided (`Vec<…>`), at most
/// `max` characters (the tail kept, where the function's own name is).
pub fn short_func(func: &str, max: usize) -> String {
    let mut out = String::with_capacity(func.len().min(max + 8));
    // Depth inside elided generic arguments, and inside kept `<T as Trait>` / `<impl T>`.
    let (mut skip, mut qual) = (0usize, 0usize);
    for ch in func.chars() {
        if skip > 0 {
            match ch {
                '<' => skip += 1,
                '>' => skip -= 1,
                _ => {}
            }
            continue;
        }
        match ch {
            '<' if out.is_empty() || ["::", "<", " ", "&"].iter().any(|e| out.ends_with(e)) => {
                qual += 1;
                out.push(ch);
            }
            '<' => {
                out.push_str("<…>");
                skip = 1;
            }
            '>' if qual > 0 => {
                qual -= 1;
                out.push(ch);
            }
            _ => out.push(ch),
        }
    }
    let n = out.chars().count();
    if n > max && max > 1 {
        let tail: String = out.chars().skip(n - max + 1).collect();
        format!("…{tail}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples::{crate_of, is_allocator};
    use trace_record::schema::Event;

    #[test]
    fn crates_and_groups() {
        let model = vec!["tracegraph".to_string()];
        let check = |func: &str, krate: Option<&str>, group: CrateGroup| {
            assert_eq!(crate_of(func), krate, "{func}");
            let g = if is_allocator(func) {
                CrateGroup::Allocator
            } else {
                group_of_crate(crate_of(func), &model)
            };
            assert_eq!(g, group, "{func}");
        };
        check(
            "<candle_core::cpu_backend::MatMul as candle_core::cpu_backend::utils::Map2>::f",
            Some("candle_core"),
            CrateGroup::CandleCore,
        );
        check(
            "gemm_f32::microkernel::fma::f32::x3x4",
            Some("gemm_f32"),
            CrateGroup::Gemm,
        );
        check(
            "gemm_common::gemm::gemm_basic_generic",
            Some("gemm_common"),
            CrateGroup::Gemm,
        );
        check(
            "candle_nn::ops::softmax_last_dim",
            Some("candle_nn"),
            CrateGroup::CandleNn,
        );
        check(
            "tracegraph::demo::mlp::train",
            Some("tracegraph"),
            CrateGroup::Model,
        );
        check("malloc", None, CrateGroup::Allocator);
        check("__rust_dealloc", None, CrateGroup::Allocator);
        check("_int_free", None, CrateGroup::Allocator);
        check(
            "core::ptr::drop_in_place<alloc::vec::Vec<f32>>",
            Some("core"),
            CrateGroup::Other,
        );
        check("[unknown]", None, CrateGroup::Other);
    }

    /// A frame line: `func` without a source file, not inlined.
    fn frame(id: u64, func: &str) -> Event {
        Event::Frame(trace_record::schema::FrameEvent {
            id,
            func: func.into(),
            file: None,
            inlined: false,
        })
    }

    /// A recorded session with a backward span in step 0 (its id is given to `sampled`) and
    /// one in step 1, so both are steps, and the sampled lines `sampled` returns; loaded.
    fn load_sampled(name: &str, sampled: impl FnOnce(Option<u64>) -> Vec<Event>) -> Trace {
        use trace_record::schema::{Phase, SpanKind};
        use trace_record::{Run, TraceSession};
        let (session, sink) = TraceSession::in_memory(Run::new(name, Phase::Train, "cpu"));
        let bw = {
            let g = session.span("backward", SpanKind::Function, Some(ExecStep::Backward));
            g.id().map(|s| s.0)
        };
        session.step();
        drop(session.span("backward", SpanKind::Function, Some(ExecStep::Backward)));
        session.record_sampled(&sampled(bw));
        session.finish().unwrap();
        let text = String::from_utf8(sink.bytes()).unwrap();
        crate::load_str(&text, &format!("{name}.jsonl"), Default::default()).unwrap()
    }

    /// A trace with two recorded steps of samples: backward in gemm and candle's backprop,
    /// forward in the model's code, one allocator sample.
    fn sampled_trace() -> Trace {
        use trace_record::schema::{SamplerEvent, SamplesEvent, StackEvent};
        load_sampled("hot", |bw| {
            let stack = |id: u64, frames: &[u64]| {
                Event::Stack(StackEvent {
                    id,
                    frames: frames.to_vec(),
                })
            };
            let samples = |step, stack, n, phase, span| {
                Event::Samples(SamplesEvent {
                    step,
                    thread: 1,
                    stack,
                    n,
                    phase,
                    span,
                })
            };
            let sampler = |step, taken| {
                Event::Sampler(SamplerEvent {
                    step,
                    hz: 1000,
                    taken,
                    lost: 1,
                    cpu_ns: Some(taken * 2_000_000),
                    sampler_cpu_ns: None,
                    ts: 0,
                    dur: 1,
                })
            };
            let bwd = Some(ExecStep::Backward);
            vec![
                frame(1, "tracegraph::main"),
                frame(
                    2,
                    "candle_core::backprop::<impl candle_core::tensor::Tensor>::backward",
                ),
                frame(3, "gemm_f32::microkernel::x3x4"),
                frame(4, "core::ptr::copy_nonoverlapping<f32>"),
                frame(5, "tracegraph::demo::Mlp::forward"),
                frame(6, "malloc"),
                stack(1, &[1, 2, 3]),
                stack(2, &[1, 2, 4]),
                stack(3, &[1, 5]),
                stack(4, &[1, 5, 6]),
                samples(0, 1, 6, bwd, bw),
                samples(0, 2, 2, bwd, bw),
                samples(0, 3, 1, Some(ExecStep::Forward), None),
                sampler(0, 9),
                // Step 1: no phase from the capture; the stack shows backprop.
                samples(1, 1, 3, None, None),
                samples(1, 4, 1, None, None),
                sampler(1, 4),
            ]
        })
    }

    #[test]
    fn the_rate_and_a_sample_s_time_leave_out_the_sampler_s_own_threads() {
        use trace_record::schema::SamplerEvent;
        let account = |own: [Option<u64>; 2]| {
            let t = load_sampled("own", |_| {
                (0..2)
                    .map(|step| {
                        Event::Sampler(SamplerEvent {
                            step,
                            hz: 1000,
                            taken: 0,
                            lost: 0,
                            cpu_ns: Some(20_000_000),
                            sampler_cpu_ns: own[step as usize],
                            ts: 0,
                            dur: 1,
                        })
                    })
                    .collect()
            });
            sampler_totals(&t)
        };
        // No samples: the rate is 0 and a sample stands for the requested period.
        let a = account([Some(5_000_000), Some(15_000_000)]);
        assert_eq!(a.sampler_cpu_ns, Some(20_000_000));
        assert_eq!(a.effective_hz, Some(0.0));
        assert_eq!(a.ns_per_sample(), Some(1_000_000.0));
        let with_samples = |own: [Option<u64>; 2], taken: u64| {
            let t = load_sampled("own", |_| {
                use trace_record::schema::{SamplesEvent, StackEvent};
                let mut ev = vec![
                    frame(1, "tracegraph::main"),
                    Event::Stack(StackEvent {
                        id: 1,
                        frames: vec![1],
                    }),
                ];
                for step in 0..2u64 {
                    ev.push(Event::Samples(SamplesEvent {
                        step,
                        thread: 1,
                        stack: 1,
                        n: taken,
                        phase: None,
                        span: None,
                    }));
                    ev.push(Event::Sampler(SamplerEvent {
                        step,
                        hz: 1000,
                        taken,
                        lost: 0,
                        cpu_ns: Some(20_000_000),
                        sampler_cpu_ns: own[step as usize],
                        ts: 0,
                        dur: 1,
                    }));
                }
                ev
            });
            sampler_totals(&t)
        };
        // 40 ms of process CPU, 20 of them the sampler's own: 20 samples stand for 20 ms.
        let a = with_samples([Some(5_000_000), Some(15_000_000)], 10);
        assert_eq!((a.taken, a.cpu_ns), (20, Some(40_000_000)));
        assert_eq!(a.effective_hz, Some(1000.0));
        assert_eq!(a.ns_per_sample(), Some(1_000_000.0));
        // A step that does not say counts its whole CPU time (as traces before the field).
        let a = with_samples([Some(20_000_000), None], 10);
        assert_eq!(a.sampler_cpu_ns, None);
        assert_eq!(a.effective_hz, Some(1000.0));
        // More than the whole is clamped to it.
        let a = with_samples([Some(30_000_000), Some(0)], 10);
        assert_eq!(a.effective_hz, Some(1000.0));
        // None said: the process's CPU time, as before.
        let a = with_samples([None, None], 10);
        assert_eq!(a.effective_hz, Some(500.0));
        assert_eq!(a.ns_per_sample(), Some(2_000_000.0));
    }

    #[test]
    fn hot_report_counts_self_total_groups_phases_and_spans() {
        let t = sampled_trace();
        assert!(t.issues.is_empty(), "{:?}", t.issues);
        let r = hot_report(&t, &HotOptions::default());
        assert_eq!(r.samples, 13);
        assert_eq!(r.model_crates, ["tracegraph", "candle_transformers"]);
        assert_eq!(
            (r.sampler.taken, r.sampler.lost, r.sampler.steps),
            (13, 2, 2)
        );
        assert_eq!(r.sampler.effective_hz, Some(500.0));
        let row =
            |rows: &[HotRow], name: &str| rows.iter().find(|x| x.name == name).cloned().unwrap();
        let g = row(&r.rows, "gemm_f32::microkernel::x3x4");
        assert_eq!(
            (g.self_samples, g.total_samples, g.group),
            (9, 9, Some(CrateGroup::Gemm))
        );
        // 2 ms of CPU per sample (measured CPU time over samples taken): an estimate.
        assert_eq!(g.self_est_ns, Some(18_000_000));
        let main = row(&r.rows, "tracegraph::main");
        assert_eq!((main.self_samples, main.total_samples), (0, 13));
        assert_eq!(r.rows[0].name, "gemm_f32::microkernel::x3x4");
        // Groups: core's copy inlined into backprop counts as candle_core.
        let by = hot_report(
            &t,
            &HotOptions {
                by: HotBy::Crate,
                ..HotOptions::default()
            },
        );
        assert_eq!(row(&by.rows, "gemm").self_samples, 9);
        assert_eq!(row(&by.rows, "candle_core").self_samples, 2);
        assert_eq!(row(&by.rows, "candle_core").total_samples, 11);
        assert_eq!(row(&by.rows, "model").self_samples, 1);
        assert_eq!(row(&by.rows, "allocator").self_samples, 1);
        // Phases: step 1's backprop stacks are backward from their frames.
        let ph = hot_report(
            &t,
            &HotOptions {
                by: HotBy::Phase,
                ..HotOptions::default()
            },
        );
        assert_eq!(row(&ph.rows, "backward").self_samples, 11);
        assert_eq!(row(&ph.rows, "unknown").self_samples, 1);
        assert_eq!(ph.phases[0].phase, "forward");
        assert_eq!(ph.phases[1].phase, "backward");
        let kernels: Vec<&str> = ph.phases[1].top.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(
            kernels,
            [
                "gemm_f32::microkernel::x3x4",
                "candle_core::backprop::<impl candle_core::tensor::Tensor>::backward"
            ]
        );
        // Spans: the phase span named by the capture.
        let sp = hot_report(
            &t,
            &HotOptions {
                by: HotBy::Span,
                ..HotOptions::default()
            },
        );
        assert_eq!(row(&sp.rows, "backward").self_samples, 8);
        assert_eq!(row(&sp.rows, "(no span)").self_samples, 5);
        // Step range and phase filters.
        let s1 = hot_report(
            &t,
            &HotOptions {
                steps: Some((1, 1)),
                ..HotOptions::default()
            },
        );
        assert_eq!((s1.samples, s1.sampler.steps, s1.sampler.taken), (4, 1, 4));
        let fwd = hot_report(
            &t,
            &HotOptions {
                phase: Some(ExecStep::Forward),
                ..HotOptions::default()
            },
        );
        assert_eq!(fwd.samples, 1);
        assert_eq!(
            backward_kernels(&t, 1)[0].name,
            "gemm_f32::microkernel::x3x4"
        );
        // The summary names them.
        let cache = crate::new_step_cache();
        let summary = crate::summarize(&t, &cache).unwrap();
        assert_eq!(summary.backward_kernels.len(), 2);
    }

    /// Backward: 6 samples of gemm work and 4 of the caller spinning at Candle's barrier, in
    /// the backward span; 2 of a parked pool worker, in no span.
    fn waiting_trace() -> Trace {
        use trace_record::schema::{SamplerEvent, SamplesEvent, StackEvent};
        load_sampled("wait", |bw| {
            let samples = |thread, stack, n, span| {
                Event::Samples(SamplesEvent {
                    step: 0,
                    thread,
                    stack,
                    n,
                    phase: Some(ExecStep::Backward),
                    span,
                })
            };
            vec![
                frame(1, "tracegraph::main"),
                frame(2, "candle_core::utils::BarrierPool::execute"),
                frame(3, "gemm_f32::microkernel::x3x4"),
                frame(
                    4,
                    "<candle_core::utils::BarrierGuard as core::ops::drop::Drop>::drop",
                ),
                frame(5, "core::hint::spin_loop"),
                frame(6, "rayon_core::registry::WorkerThread::wait_until_cold"),
                frame(7, "std::thread::park"),
                Event::Stack(StackEvent {
                    id: 1,
                    frames: vec![1, 2, 3],
                }),
                Event::Stack(StackEvent {
                    id: 2,
                    frames: vec![1, 2, 4, 5],
                }),
                Event::Stack(StackEvent {
                    id: 3,
                    frames: vec![6, 7],
                }),
                samples(1, 1, 6, bw),
                samples(1, 2, 4, bw),
                samples(2, 3, 2, None),
                Event::Sampler(SamplerEvent {
                    step: 0,
                    hz: 1000,
                    taken: 12,
                    lost: 0,
                    cpu_ns: Some(12_000_000),
                    sampler_cpu_ns: None,
                    ts: 0,
                    dur: 1,
                }),
            ]
        })
    }

    #[test]
    fn waiting_is_counted_apart_and_left_out_of_function_rankings_when_asked() {
        let t = waiting_trace();
        assert!(t.issues.is_empty(), "{:?}", t.issues);
        let find = |rows: &[HotRow], name: &str| rows.iter().find(|r| r.name == name).cloned();
        let opts = |by, exclude_waiting| HotOptions {
            by,
            exclude_waiting,
            ..HotOptions::default()
        };
        // Kept: the spin is a function row, its samples marked waiting.
        let kept = hot_report(&t, &opts(HotBy::Function, false));
        assert_eq!(
            (kept.samples, kept.waiting, kept.waiting_excluded),
            (12, 6, false)
        );
        let spin = find(&kept.rows, "core::hint::spin_loop").unwrap();
        assert_eq!((spin.self_samples, spin.waiting_samples), (4, 4));
        assert_eq!(
            find(&kept.rows, "std::thread::park").unwrap().self_samples,
            2
        );
        // Left out: no waiting function, group or phase row; shares keep every sample.
        let out = hot_report(&t, &opts(HotBy::Function, true));
        assert_eq!(
            (out.samples, out.waiting, out.waiting_excluded),
            (12, 6, true)
        );
        let names: Vec<&str> = out.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "gemm_f32::microkernel::x3x4",
                "candle_core::utils::BarrierPool::execute",
                "tracegraph::main"
            ]
        );
        assert_eq!(out.rows[0].self_share, 0.5);
        assert!(out.rows.iter().all(|r| r.waiting_samples == 0));
        let groups: u64 = out.groups.iter().map(|g| g.self_samples).sum();
        assert_eq!(groups, 6);
        let bw = &out.phases[0];
        assert_eq!(
            (bw.phase.as_str(), bw.samples, bw.waiting),
            ("backward", 12, 6)
        );
        assert_eq!(bw.top.len(), 1);
        assert_eq!(bw.top[0].name, "gemm_f32::microkernel::x3x4");
        // Spans and phases keep their waiting as part of their rows.
        let spans = hot_report(&t, &opts(HotBy::Span, true));
        let b = find(&spans.rows, "backward").unwrap();
        assert_eq!((b.self_samples, b.waiting_samples), (10, 4));
        let none = find(&spans.rows, "(no span)").unwrap();
        assert_eq!((none.self_samples, none.waiting_samples), (2, 2));
        let phases = hot_report(&t, &opts(HotBy::Phase, true));
        let b = find(&phases.rows, "backward").unwrap();
        assert_eq!((b.self_samples, b.waiting_samples), (12, 6));
        // The summary's backward kernels are work only.
        let kernels: Vec<String> = backward_kernels(&t, 5)
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(kernels, ["gemm_f32::microkernel::x3x4"]);
        // JSON carries the counts.
        let v = serde_json::to_value(&out).unwrap();
        assert_eq!(v["waiting"], 6);
        assert_eq!(v["phases"][0]["waiting"], 6);
        assert_eq!(v["rows"][0]["waiting_samples"], 0);
    }

    /// A trace of one recorded step at 1 kHz (1 ms of CPU per sample) with `stacks`: the
    /// functions of each (outermost first) and its sample count.
    fn trace_of(stacks: &[(&[&str], u64)]) -> Trace {
        use trace_record::schema::{FrameEvent, Phase, SamplerEvent, SamplesEvent, StackEvent};
        use trace_record::{Run, TraceSession};
        let (session, sink) = TraceSession::in_memory(Run::new("hints", Phase::Infer, "cpu"));
        let mut events = Vec::new();
        let mut ids: Vec<&str> = Vec::new();
        for (i, (funcs, n)) in stacks.iter().enumerate() {
            let mut frames = Vec::new();
            for f in *funcs {
                let id = match ids.iter().position(|x| x == f) {
                    Some(p) => p,
                    None => {
                        ids.push(f);
                        events.push(Event::Frame(FrameEvent {
                            id: ids.len() as u64 - 1,
                            func: (*f).into(),
                            file: None,
                            inlined: false,
                        }));
                        ids.len() - 1
                    }
                };
                frames.push(id as u64);
            }
            events.push(Event::Stack(StackEvent {
                id: i as u64,
                frames,
            }));
            events.push(Event::Samples(SamplesEvent {
                step: 0,
                thread: 1,
                stack: i as u64,
                n: *n,
                phase: None,
                span: None,
            }));
        }
        let taken: u64 = stacks.iter().map(|s| s.1).sum();
        events.push(Event::Sampler(SamplerEvent {
            step: 0,
            hz: 1000,
            taken,
            lost: 0,
            cpu_ns: Some(taken * 1_000_000),
            sampler_cpu_ns: None,
            ts: 0,
            dur: 1,
        }));
        session.record_sampled(&events);
        session.finish().unwrap();
        let text = String::from_utf8(sink.bytes()).unwrap();
        crate::load_str(&text, "hints.jsonl", Default::default()).unwrap()
    }

    fn rules(r: &HotReport) -> Vec<(&'static str, u64)> {
        r.hints.iter().map(|h| (h.rule, h.samples)).collect()
    }

    #[test]
    fn known_costs_are_named_with_their_evidence() {
        let proc_read: &[&str] = &[
            "my::main",
            "candle_core::tensor::Tensor::matmul",
            "candle_core::utils::get_num_threads",
            "candle_core::utils::default_num_threads",
            "num_cpus::linux::get_num_physical_cpus",
            "std::fs::read_to_string",
            "read",
        ];
        // With RAYON_NUM_THREADS set, the lookup reads the variable only.
        let env_only: &[&str] = &[
            "my::main",
            "candle_core::utils::get_num_threads",
            "std::env::var",
            "getenv",
        ];
        let gemm: &[&str] = &["my::main", "gemm_f32::microkernel::x3x4"];
        let malloc: &[&str] = &["my::main", "alloc::raw_vec::RawVec::allocate", "malloc"];
        let munmap: &[&str] = &["my::main", "free", "__GI___munmap"];
        let spin: &[&str] = &["my::main", "core::hint::spin_loop"];
        let r = hot_report(
            &trace_of(&[
                (proc_read, 300),
                (env_only, 50),
                (gemm, 500),
                (malloc, 60),
                (munmap, 40),
            ]),
            &HotOptions::default(),
        );
        assert_eq!(r.samples, 950);
        assert_eq!(rules(&r), [("proc_read_per_op", 300), ("allocator", 100)]);
        let h = &r.hints[0];
        assert!((h.share - 300.0 / 950.0).abs() < 1e-12);
        assert!(
            h.hint.starts_with("31.6% of samples re-read /proc"),
            "{}",
            h.hint
        );
        assert!(h.hint.contains("RAYON_NUM_THREADS"), "{}", h.hint);
        assert!(
            r.hints[1]
                .hint
                .starts_with("10.5% of samples are in the allocator")
        );
        // Below the thresholds: no hint; waiting above its own.
        let r = hot_report(
            &trace_of(&[(proc_read, 1), (gemm, 500), (malloc, 10), (spin, 200)]),
            &HotOptions::default(),
        );
        assert_eq!(rules(&r), [("pool_waiting", 200)]);
        assert!(
            r.hints[0]
                .hint
                .starts_with("28.1% of samples are thread pools waiting")
        );
        // Every hint's rule is documented.
        assert!(
            r.hints
                .iter()
                .all(|h| HINT_RULES.iter().any(|(name, _)| *name == h.rule))
        );
        assert!(is_allocator_frame("mmap64") && is_allocator_frame("__madvise"));
        assert!(!is_allocator_frame("mmap_reader::open") && !is_allocator_frame("brkfoo"));
    }

    #[test]
    fn a_run_too_short_for_its_rate_says_how_many_samples_it_needed() {
        let gemm: &[&str] = &["my::main", "gemm_f32::microkernel::x3x4"];
        let r = hot_report(&trace_of(&[(gemm, 100)]), &HotOptions::default());
        assert_eq!(rules(&r), [("too_few_samples", 100)]);
        // 1 kHz achieved: 285 more samples are 285 ms of CPU.
        assert_eq!(
            r.hints[0].hint,
            "100 samples: shares are within ±10 points (95%); 385 are needed for ±5 points, \
             285 more, about 285.000 ms of CPU at the achieved 1000 Hz: record more steps or \
             raise the rate"
        );
        let r = hot_report(&trace_of(&[(gemm, 385)]), &HotOptions::default());
        assert!(r.hints.is_empty(), "{:?}", r.hints);
        // A recorded step without samples: the requested rate.
        let r = hot_report(&trace_of(&[]), &HotOptions::default());
        assert_eq!(rules(&r), [("too_few_samples", 0)]);
        assert!(
            r.hints[0]
                .hint
                .starts_with("0 samples: no share can be told; 385 are needed")
        );
        assert!(
            r.hints[0].hint.contains("at the requested 1000 Hz"),
            "{}",
            r.hints[0].hint
        );
        // No sampler at all: nothing to say.
        let (session, sink) = trace_record::TraceSession::in_memory(trace_record::Run::new(
            "none",
            trace_record::schema::Phase::Infer,
            "cpu",
        ));
        session.finish().unwrap();
        let t = crate::load_str(
            &String::from_utf8(sink.bytes()).unwrap(),
            "none.jsonl",
            Default::default(),
        )
        .unwrap();
        assert!(hot_report(&t, &HotOptions::default()).hints.is_empty());
    }

    #[test]
    fn a_trace_without_samples_has_an_empty_report() {
        let (session, sink) = trace_record::TraceSession::in_memory(trace_record::Run::new(
            "none",
            trace_record::schema::Phase::Infer,
            "cpu",
        ));
        session.finish().unwrap();
        let text = String::from_utf8(sink.bytes()).unwrap();
        let t = crate::load_str(&text, "none.jsonl", Default::default()).unwrap();
        let r = hot_report(&t, &HotOptions::default());
        assert_eq!((r.samples, r.rows.len(), r.sampler.steps), (0, 0, 0));
        assert_eq!(r.sampler.cpu_ns, None);
        assert!(backward_kernels(&t, 3).is_empty());
    }

    #[test]
    fn groupings_parse_from_their_json_names_and_list_them_when_unknown() {
        for name in HotBy::NAMES {
            let by: HotBy = name.parse().unwrap();
            assert_eq!(serde_json::to_value(by).unwrap(), *name);
        }
        assert_eq!("span".parse::<HotBy>(), Ok(HotBy::Span));
        assert_eq!("op".parse::<HotBy>(), Ok(HotBy::Op));
        assert_eq!(
            "thread".parse::<HotBy>().unwrap_err().to_string(),
            "unknown grouping `thread` (expected one of: function, crate, phase, span, op)"
        );
    }

    #[test]
    fn short_names_elide_generic_arguments() {
        assert_eq!(
            short_func("core::ptr::drop_in_place<alloc::vec::Vec<f32>>", 80),
            "core::ptr::drop_in_place<…>"
        );
        assert_eq!(
            short_func(
                "candle_core::backprop::<impl candle_core::tensor::Tensor>::backward",
                80
            ),
            "candle_core::backprop::<impl candle_core::tensor::Tensor>::backward"
        );
        assert_eq!(
            short_func("<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop", 80),
            "<alloc::vec::Vec<…> as core::ops::drop::Drop>::drop"
        );
        assert_eq!(short_func("abcdefghij", 5), "…ghij");
    }

    /// A trace of `lines` (each a JSON event) after a version 2 header with one span in step 0
    /// and a step boundary to step 1 with a span in it.
    fn trace_of_lines(lines: &[&str]) -> Trace {
        let mut text = String::from(
            r#"{"type":"header","schema":"tracegraph-trace","version":2,"run":{"run_id":"t","entrypoint":"test","phase":"train","device":"cpu","timing":"host","start_unix_ns":0,"pid":7}}"#,
        );
        text.push('\n');
        for l in [
            r#"{"type":"span_start","id":1,"name":"forward","kind":"function","step":"forward","thread":1,"ts":1}"#,
            r#"{"type":"span_end","id":1,"ts":2}"#,
            r#"{"type":"frame","id":1,"func":"main"}"#,
            r#"{"type":"stack","id":1,"frames":[1]}"#,
        ]
        .iter()
        .chain(lines)
        {
            text.push_str(l);
            text.push('\n');
        }
        crate::load_str(&text, "t.jsonl", Default::default()).unwrap()
    }

    #[test]
    fn sample_sums_stop_at_u64_max_and_say_so() {
        let t = trace_of_lines(&[
            r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":9223372036854775808,"span":1}"#,
            r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":9223372036854775808,"span":1}"#,
            r#"{"type":"sampler","step":0,"hz":1000,"taken":3,"lost":18446744073709551615,"ts":0,"dur":5}"#,
            r#"{"type":"sampler","step":0,"hz":1000,"taken":3,"lost":5,"ts":0,"dur":5}"#,
        ]);
        for by in [HotBy::Function, HotBy::Span, HotBy::Phase, HotBy::Crate] {
            let r = hot_report(
                &t,
                &HotOptions {
                    by,
                    ..Default::default()
                },
            );
            // 2^63 + 2^63 wrapped to 0 before; now it stops at the top, flagged.
            assert_eq!(r.samples, u64::MAX, "{by:?}");
            assert!(r.saturated, "{by:?}");
            assert!(r.sampler.saturated && r.sampler.lost == u64::MAX, "{by:?}");
            assert!(r.rows.iter().all(|row| row.self_samples <= r.samples));
        }
        let fine = trace_of_lines(&[
            r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":4,"span":1}"#,
            r#"{"type":"sampler","step":0,"hz":1000,"taken":4,"lost":0,"ts":0,"dur":5}"#,
        ]);
        let r = hot_report(&fine, &HotOptions::default());
        assert!(!r.saturated && !r.sampler.saturated);
        assert_eq!(r.samples, 4);
    }

    #[test]
    fn the_empty_boundary_after_the_last_step_is_no_sampled_step() {
        // Steps 0 and 1 hold work; the boundary to step 2 (a loop's last `step()`) holds only
        // the sampler's empty account, as a real run writes it.
        let t = trace_of_lines(&[
            r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":2,"span":1}"#,
            r#"{"type":"sampler","step":0,"hz":1000,"taken":2,"lost":0,"ts":0,"dur":5}"#,
            r#"{"type":"step","index":1,"ts":3}"#,
            r#"{"type":"span_start","id":2,"name":"forward","kind":"function","step":"forward","thread":1,"ts":4}"#,
            r#"{"type":"span_end","id":2,"ts":5}"#,
            r#"{"type":"samples","step":1,"thread":1,"stack":1,"n":3,"span":2}"#,
            r#"{"type":"sampler","step":1,"hz":1000,"taken":3,"lost":0,"ts":3,"dur":5}"#,
            r#"{"type":"step","index":2,"ts":9}"#,
            r#"{"type":"samples","step":2,"thread":1,"stack":1,"n":1,"span":2}"#,
            r#"{"type":"sampler","step":2,"hz":1000,"taken":1,"lost":0,"ts":9,"dur":1}"#,
        ]);
        assert_eq!(t.steps.len(), 2);
        // Left out once, at load, for every analysis.
        assert_eq!(t.sampled.outside_steps, 1);
        let flame = crate::stack_samples(&t).expect("samples");
        assert_eq!(flame.total, 5, "the flame graph counts the same samples");
        let r = hot_report(&t, &HotOptions::default());
        assert_eq!(r.sampler.steps, 2, "steps 0 and 1, not the boundary");
        assert_eq!(r.sampler.step_range, Some((0, 1)));
        assert_eq!(r.samples, 5);
    }

    #[test]
    fn frames_of_one_name_make_one_row_and_the_flame_graph_gets_its_group() {
        // Frames 2 and 3 share a name (one function, two files of a qualified name); frame 4
        // is the allocator.
        let t = trace_of_lines(&[
            r#"{"type":"frame","id":2,"func":"gemm::run","file":"a.rs"}"#,
            r#"{"type":"frame","id":3,"func":"gemm::run","file":"b.rs"}"#,
            r#"{"type":"frame","id":4,"func":"malloc"}"#,
            r#"{"type":"stack","id":2,"frames":[1,2,3,4]}"#,
            r#"{"type":"stack","id":3,"frames":[1,3]}"#,
            r#"{"type":"samples","step":0,"thread":1,"stack":2,"n":2,"span":1}"#,
            r#"{"type":"samples","step":0,"thread":1,"stack":3,"n":5,"span":1}"#,
        ]);
        let r = hot_report(&t, &HotOptions::default());
        let rows: Vec<(&str, u64, u64)> = r
            .rows
            .iter()
            .map(|r| (r.name.as_str(), r.self_samples, r.total_samples))
            .collect();
        assert_eq!(
            rows,
            [("gemm::run", 5, 7), ("malloc", 2, 2), ("main", 0, 7)]
        );
        assert_eq!(name_leaders(&t.sampled), [0, 1, 1, 3]);
        let groups = function_groups(&t);
        assert_eq!(
            groups,
            [
                CrateGroup::Other,
                CrateGroup::Gemm,
                CrateGroup::Gemm,
                CrateGroup::Allocator
            ]
        );
        for row in &r.rows {
            let f = (0..4)
                .find(|&f| t.sampled.frame_name(f) == row.name)
                .unwrap();
            assert_eq!(Some(groups[f as usize]), row.group, "{}", row.name);
        }
        assert_eq!(sampler_totals(&t), r.sampler);
        // Cut to a limit: the same first rows.
        let one = hot_report(
            &t,
            &HotOptions {
                limit: Some(1),
                ..HotOptions::default()
            },
        );
        assert_eq!(one.rows, r.rows[..1]);
    }
}
