//! How sampled frames are named and grouped: crate groups, the model's crates, short names.
//!
//! Shared by the hot-spot report, the CLI and the HTML report (which colours its flame graph
//! by [`function_groups`]), so that a function has one short name and one group everywhere.

use serde::Serialize;

use crate::model::intern::FastMap;
use crate::model::samples::SampledStacks;
use crate::model::trace::Trace;

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
pub(crate) fn group_of_crate(name: Option<&str>, model: &[String]) -> CrateGroup {
    match name {
        Some("candle_core") => CrateGroup::CandleCore,
        Some("candle_nn") => CrateGroup::CandleNn,
        Some(n) if n.starts_with("gemm") => CrateGroup::Gemm,
        Some(n) if model.iter().any(|m| m == n) => CrateGroup::Model,
        _ => CrateGroup::Other,
    }
}

/// The model's crates: the outermost non-runtime crate of the most samples (the program),
/// plus `candle_transformers`.
pub(crate) fn find_model_crates(trace: &Trace) -> Vec<String> {
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

/// The crate group of each frame's row by function in a [`hot_report`](crate::sampled::hot_report) over every sample
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

/// The crate group of frame `f`: the allocator's, else its crate's.
pub(crate) fn frame_group(s: &SampledStacks, f: u32, model: &[String]) -> CrateGroup {
    if s.frame_is_allocator(f) {
        CrateGroup::Allocator
    } else {
        group_of_crate(s.frame_crate(f), model)
    }
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
