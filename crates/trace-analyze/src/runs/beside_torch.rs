//! A Candle run beside the PyTorch run of the same model: op kinds, layers, diagnoses.
//!
//! [`compare_with_torch`] lines up a Candle trace and a torch.profiler trace
//! ([`TorchRun`]) of the same model and says where the Candle port loses time:
//!
//! - **Like with like.** Each side's threads, element types and device are stated, and a
//!   warning is given where they differ (a 2-thread run against an 8-thread one is no
//!   comparison). Steps are aligned by position: by default the Candle steps whose index is a
//!   torch step's `ProfilerStep#N` (both count the same loop from 0), else every step; either
//!   side's range can be chosen ([`TorchCompareOptions`]). Figures are means per step over
//!   the chosen steps.
//! - **Op kinds** ([`OpClass`]): torch's side is the ops' self time (as `key_averages`
//!   gives it). Candle's side comes from one of two sources, said on every row
//!   ([`CandleSource`]): the captured ops' self time when the capture recorded ops (the same
//!   figure as `tracegraph ops`), else the sampled estimate when the trace has samples: each
//!   kind's share of the busy samples in the chosen steps (a sample is named by the Candle op
//!   it ran inside, as `tracegraph ops --sampled` names it) times the measured step time,
//!   with a Wilson 95 % interval. Copies and layout changes are a kind of their own on both
//!   sides, apart from the compute kinds and from views (which move no data).
//! - **Layers**: span paths on the Candle side and `record_function` range paths on torch's,
//!   matched by name with a `#0` suffix meaning the same as none (`attn#0` = `attn`), after a
//!   user's mapping of torch path prefixes ([`TorchCompareOptions::layer_map`]); spans Candle
//!   wraps the model in (a `forward` phase span) are looked through when torch's root range is
//!   a Candle span's name; time per step on each side, measured on both.
//! - **Rows are sorted by what Candle loses** (its time less torch's, per step), largest
//!   first, and [`diagnose`] turns the rows into sentences with their evidence.
//!
//! Linear in the two traces' events (plus sorting the rows); paths deeper than
//! [`MAX_LAYER_DEPTH`] names are not matched (their keys would cost more than their events).

use serde::Serialize;

use crate::events::op_class::OpClass;
use crate::events::self_time::op_self_times;
use crate::events::spans::span_paths;
use crate::model::intern::{FastMap, Sym};
use crate::model::trace::Trace;
use crate::runs::torch::TorchRun;
use crate::sampled::hints::SAMPLES_FOR_5_POINTS;
use crate::sampled::sampled_ops::{StackOp, stack_ops, wilson_95};

/// Paths of more names than this are not matched layer by layer.
pub const MAX_LAYER_DEPTH: usize = 32;

/// Captured ops must explain at least this share of Candle's step time for their self times
/// to be the kind figures; below it (a capture that records only the model's root call) the
/// sampled estimate is used where the trace has samples.
pub const CAPTURED_OPS_MIN_SHARE: f64 = 0.25;

/// A kind is diagnosed as slower when Candle takes at least this many times torch's time ...
pub const SLOWER_MIN_RATIO: f64 = 1.5;

/// ... and loses at least this share of its step time on it.
pub const LOSS_MIN_SHARE: f64 = 0.05;

/// Copy/layout is diagnosed when it is at least this share of Candle's step ...
pub const COPY_MIN_SHARE: f64 = 0.10;

/// ... and at least this many times its share of torch's step.
pub const COPY_MIN_RATIO: f64 = 2.0;

/// At most this many layers are diagnosed (the innermost that lose most).
pub const MAX_LAYER_DIAGNOSES: usize = 3;

/// Which steps to compare and how torch's layer names map onto Candle's.
#[derive(Debug, Clone, Default)]
pub struct TorchCompareOptions {
    /// Candle step indexes (inclusive, as `tracegraph` shows them); `None`: the indexes of
    /// the torch steps chosen (`ProfilerStep#N` ↔ step N) where the Candle trace has them,
    /// else every step.
    pub candle_steps: Option<(u64, u64)>,
    /// Torch step numbers (`ProfilerStep#N`, inclusive); `None`: every recorded step.
    pub torch_steps: Option<(u64, u64)>,
    /// Torch path prefixes and the Candle paths they stand for (`model.layers.0` →
    /// `block#0`), applied to whole leading names of a torch range path before matching: the
    /// longest prefix that a mapping names; of two mappings of one path, the first.
    pub layer_map: Vec<(String, String)>,
}

/// Where the Candle side's op-kind figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "source")]
pub enum CandleSource {
    /// The captured ops' self time (measured; `tracegraph ops`).
    CapturedOps,
    /// Busy samples' shares of the measured step time (an estimate, with an interval).
    Sampled {
        /// Busy samples in the chosen steps (waiting samples left out).
        busy_samples: u64,
    },
    /// Neither: the trace has no ops besides spans' own and no samples.
    None,
}

impl CandleSource {
    /// How the source reads in a table's header.
    pub fn describe(&self) -> String {
        match self {
            CandleSource::CapturedOps => "captured op time (measured)".to_string(),
            CandleSource::Sampled { busy_samples } => format!(
                "sampled estimate: share of {busy_samples} busy samples × measured step time, \
                 95% Wilson interval"
            ),
            CandleSource::None => "none (no captured ops, no samples)".to_string(),
        }
    }
}

/// What one side ran on and which steps are compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideFacts {
    /// The trace.
    pub source: String,
    /// The steps compared (Candle step indexes, torch `ProfilerStep` numbers).
    pub steps: Vec<u64>,
    /// Mean step time over them, ns.
    pub step_ns: f64,
    /// Threads that ran ops (torch) or recorded spans, ops or samples (Candle).
    pub threads: usize,
    /// Element types seen, most used first.
    pub dtypes: Vec<String>,
    /// The device.
    pub device: String,
}

impl SideFacts {
    /// The side in one line, as the CLI and the report print it: `TRACE: 1.2 ms per step over
    /// 4 steps (2..5); 1 thread(s), f32, cpu`.
    pub fn describe(&self) -> String {
        let steps = match (self.steps.first(), self.steps.last()) {
            (Some(a), Some(b)) if a == b => format!("step {a}"),
            (Some(a), Some(b)) => format!("{} steps ({a}..{b})", self.steps.len()),
            _ => "no steps".to_string(),
        };
        format!(
            "{}: {} per step over {steps}; {} thread(s), {}, {}",
            self.source,
            crate::format::format_ns(self.step_ns),
            self.threads,
            self.dtypes.first().map_or("-", String::as_str),
            self.device
        )
    }
}

/// One op kind side by side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindRow {
    /// The kind.
    pub kind: OpClass,
    /// Candle's time on it per step, ns; `None` when Candle's side has no source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candle_ns: Option<f64>,
    /// The 95 % interval of a sampled estimate, ns per step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candle_interval: Option<(f64, f64)>,
    /// Samples behind a sampled estimate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candle_samples: Option<u64>,
    /// Torch's self time on it per step, ns.
    pub torch_ns: f64,
    /// `candle_ns / torch_ns`; `None` when either is missing or torch's is 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// What Candle loses on it per step: `candle_ns - torch_ns` (negative: Candle is faster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_ns: Option<f64>,
    /// Candle's ops of this kind, most time first (at most three): name and ns per step.
    pub candle_ops: Vec<(String, f64)>,
    /// Torch's ops of this kind, most self time first (at most three): name and ns per step.
    pub torch_ops: Vec<(String, f64)>,
}

/// One layer (span path ↔ range path) side by side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerRow {
    /// The path, as Candle names it (`llama.forward/block#0/attn`).
    pub path: String,
    /// Depth (0 for a root).
    pub depth: usize,
    /// Candle's time in it per step (span time, measured), ns.
    pub candle_ns: f64,
    /// Torch's time in it per step (range time, measured), ns.
    pub torch_ns: f64,
    /// `candle_ns / torch_ns`, when torch's is above 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// `candle_ns - torch_ns`.
    pub loss_ns: f64,
}

/// A finding in words, with the figures behind it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// The rule: `kind_slower`, `copy_layout`, `matmul_rate`, `layer_slower`.
    pub rule: &'static str,
    /// What Candle loses per step on it, ns (the order of the diagnoses).
    pub loss_ns: f64,
    /// The sentence.
    pub text: String,
    /// The evidence: the figures, their source, the ops and paths behind them.
    pub evidence: Vec<String>,
}

/// A Candle run beside a torch.profiler run of the same model (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TorchComparison {
    /// Candle's side.
    pub candle: SideFacts,
    /// Torch's side.
    pub torch: SideFacts,
    /// `candle.step_ns / torch.step_ns`, when torch's is above 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_ratio: Option<f64>,
    /// What makes the two less than like with like (threads, dtypes, device, step counts,
    /// no Candle source).
    pub warnings: Vec<String>,
    /// Where Candle's kind figures come from.
    pub candle_source: CandleSource,
    /// Op kinds, by what Candle loses (largest first); kinds neither side ran are left out.
    pub kinds: Vec<KindRow>,
    /// Copy/layout's share of the step on each side (Candle's `None` without a source).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candle_copy_share: Option<f64>,
    /// Torch's copy/layout share of its step.
    pub torch_copy_share: f64,
    /// Layers both sides name, by what Candle loses (largest first).
    pub layers: Vec<LayerRow>,
    /// Candle span paths with no torch range of that name (in the chosen steps).
    pub candle_only_layers: Vec<String>,
    /// Torch range paths with no Candle span of that name.
    pub torch_only_layers: Vec<String>,
    /// The findings, by what Candle loses (largest first).
    pub diagnoses: Vec<Diagnosis>,
}

/// A path name as matched: `attn#0` and `attn` are the same first instance.
fn match_name(name: &str) -> &str {
    name.strip_suffix("#0").unwrap_or(name)
}

/// The matching key of a path given as names (`#0` dropped, `/`-joined).
fn key_of<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for (i, n) in names.enumerate() {
        if i > 0 {
            out.push('/');
        }
        out.push_str(match_name(n));
    }
    out
}

/// A user's layer map, normalized once: torch key prefix → Candle key prefix.
struct LayerMap(FastMap<String, String>);

impl LayerMap {
    /// Normalizes every mapping's two sides as keys; the first mapping of a torch path wins.
    fn new(map: &[(String, String)]) -> LayerMap {
        let mut m: FastMap<String, String> = FastMap::default();
        for (from, to) in map {
            m.entry(key_of(from.split('/')))
                .or_insert_with(|| key_of(to.split('/')));
        }
        LayerMap(m)
    }

    /// `key` with its longest mapped prefix of whole names rewritten. O(names in `key`)
    /// lookups (keys are at most [`MAX_LAYER_DEPTH`] names), whatever the map's size.
    fn apply(&self, key: String) -> String {
        if self.0.is_empty() {
            return key;
        }
        let mut cut = Some(key.len());
        while let Some(end) = cut {
            if let Some(to) = self.0.get(&key[..end]) {
                return format!("{to}{}", &key[end..]);
            }
            cut = key[..end].rfind('/');
        }
        key
    }
}

/// Adds `ns` to `name`'s entry, keeping first-seen order.
fn bump(map: &mut FastMap<String, f64>, name: &str, ns: f64) {
    if let Some(v) = map.get_mut(name) {
        *v += ns;
    } else {
        map.insert(name.to_string(), ns);
    }
}

/// The `n` largest entries of `map`, by value then name.
fn top(map: &FastMap<String, f64>, n: usize) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = map.iter().map(|(k, &x)| (k.clone(), x)).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

/// The torch steps chosen.
fn torch_steps(torch: &TorchRun, opts: &TorchCompareOptions) -> Vec<usize> {
    (0..torch.steps.len())
        .filter(|&i| {
            opts.torch_steps
                .is_none_or(|(a, b)| (a..=b).contains(&torch.steps[i].number))
        })
        .collect()
}

/// Candle's steps chosen (indexes into `trace.steps`) and whether they were aligned on torch's
/// numbers.
fn candle_steps(trace: &Trace, torch_numbers: &[u64], opts: &TorchCompareOptions) -> Vec<usize> {
    let steps = trace.complete_steps();
    if let Some((a, b)) = opts.candle_steps {
        return (0..steps.len())
            .filter(|&i| (a..=b).contains(&steps[i].index))
            .collect();
    }
    let wanted: std::collections::BTreeSet<u64> = torch_numbers.iter().copied().collect();
    let aligned: Vec<usize> = (0..steps.len())
        .filter(|&i| wanted.contains(&steps[i].index))
        .collect();
    if aligned.is_empty() {
        (0..steps.len()).collect()
    } else {
        aligned
    }
}

/// Puts a Candle trace beside a torch.profiler run of the same model (see the module docs).
/// Linear in both traces' events, plus sorting the rows.
pub fn compare_with_torch(
    trace: &Trace,
    torch: &TorchRun,
    opts: &TorchCompareOptions,
) -> TorchComparison {
    let mut warnings = Vec::new();

    // Steps.
    let t_steps = torch_steps(torch, opts);
    let t_numbers: Vec<u64> = t_steps.iter().map(|&i| torch.steps[i].number).collect();
    let c_steps = candle_steps(trace, &t_numbers, opts);
    let steps = trace.complete_steps();
    let c_indexes: Vec<u64> = c_steps.iter().map(|&i| steps[i].index).collect();
    let mean = |total: f64, n: usize| if n > 0 { total / n as f64 } else { 0.0 };
    let c_step_ns = mean(
        c_steps.iter().map(|&i| steps[i].duration_ns() as f64).sum(),
        c_steps.len(),
    );
    let t_step_ns = mean(
        t_steps.iter().map(|&i| torch.steps[i].dur_ns as f64).sum(),
        t_steps.len(),
    );
    if c_steps.is_empty() {
        warnings.push("no Candle step chosen: Candle's figures are 0".to_string());
    }
    if t_steps.is_empty() {
        warnings.push("no torch step chosen (no ProfilerStep#N in range)".to_string());
    }
    if opts.candle_steps.is_none()
        && !t_numbers.is_empty()
        && !c_indexes.iter().any(|i| t_numbers.contains(i))
    {
        warnings.push(format!(
            "the Candle trace has none of torch's step numbers ({}): every Candle step is \
             compared; choose steps on each side for like with like",
            t_numbers
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !c_steps.is_empty() && c_steps.len() != t_steps.len() {
        warnings.push(format!(
            "{} Candle step(s) against {} torch step(s): figures are means per step",
            c_steps.len(),
            t_steps.len()
        ));
    }
    let c_in: Vec<bool> = {
        let mut v = vec![false; steps.len()];
        for &i in &c_steps {
            v[i] = true;
        }
        v
    };
    // Trace step index (into `trace.steps`) of a loaded step slot; complete_steps is a prefix.
    let chosen_step = |slot: Option<u32>| slot.is_some_and(|s| c_in.get(s as usize) == Some(&true));
    let chosen_index: std::collections::BTreeSet<u64> = c_indexes.iter().copied().collect();
    let t_in = {
        let mut v = vec![false; torch.steps.len()];
        for &i in &t_steps {
            v[i] = true;
        }
        v
    };
    let t_chosen = |slot: Option<u32>| slot.is_some_and(|s| t_in.get(s as usize) == Some(&true));

    // Facts of each side.
    let mut c_threads: std::collections::BTreeSet<u64> = std::collections::BTreeSet::new();
    let mut c_dtypes: FastMap<Sym, u64> = FastMap::default();
    for op in &trace.ops {
        c_threads.insert(op.thread);
        *c_dtypes.entry(op.dtype).or_default() += 1;
    }
    for sp in &trace.spans {
        c_threads.insert(sp.thread);
    }
    let sampled_threads: std::collections::BTreeSet<u64> =
        trace.sampled.samples.iter().map(|r| r.thread).collect();
    let mut c_dtype_list: Vec<(Sym, u64)> = c_dtypes.into_iter().collect();
    c_dtype_list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut candle = SideFacts {
        source: trace.source.clone(),
        steps: c_indexes.clone(),
        step_ns: c_step_ns,
        threads: c_threads.len().max(sampled_threads.len()),
        dtypes: c_dtype_list
            .iter()
            .map(|&(s, _)| trace.str(s).to_string())
            .collect(),
        device: trace.run.device.clone(),
    };
    // The sampled threads that did work are the compute threads (the driving thread and the
    // pool's workers); spans name only the driving thread.
    if !sampled_threads.is_empty() {
        candle.threads = sampled_threads.len();
    }
    let torch_facts = SideFacts {
        source: torch.source.clone(),
        steps: t_numbers.clone(),
        step_ns: t_step_ns,
        threads: torch.op_threads,
        dtypes: torch.dtypes.iter().map(|d| d.dtype.to_string()).collect(),
        device: torch.device.as_str().to_string(),
    };
    if candle.threads != torch_facts.threads && candle.threads > 0 && torch_facts.threads > 0 {
        warnings.push(format!(
            "threads differ: Candle {} ({}), torch {} thread(s) ran ops: set \
             RAYON_NUM_THREADS and torch.set_num_threads to the same count",
            candle.threads,
            if sampled_threads.is_empty() {
                "threads that recorded spans or ops; record samples to count the pool's"
            } else {
                "sampled threads"
            },
            torch_facts.threads
        ));
    }
    let c_float = candle
        .dtypes
        .iter()
        .find(|d| d.starts_with('f') || *d == "bf16");
    let t_float = torch_facts
        .dtypes
        .iter()
        .find(|d| d.starts_with('f') || *d == "bf16");
    if let (Some(c), Some(t)) = (c_float, t_float)
        && c != t
    {
        warnings.push(format!(
            "element types differ: Candle computes in {c}, torch in {t}"
        ));
    }
    let c_dev = candle.device.split(':').next().unwrap_or("");
    if c_dev != torch_facts.device {
        warnings.push(format!(
            "devices differ: Candle ran on {}, torch on {}",
            candle.device, torch_facts.device
        ));
    }

    // Torch's kinds.
    let mut t_kind: FastMap<OpClass, f64> = FastMap::default();
    let mut t_ops: FastMap<OpClass, FastMap<String, f64>> = FastMap::default();
    let mut t_matmul_flops = 0f64;
    let mut t_matmul_rows_one = true;
    for op in torch.ops.iter().filter(|o| t_chosen(o.step)) {
        let name = torch.str(op.name);
        let class = OpClass::of_aten(name);
        *t_kind.entry(class).or_default() += op.self_ns as f64;
        bump(t_ops.entry(class).or_default(), name, op.self_ns as f64);
        if class == OpClass::Matmul
            && op.depth == 0
            && let Some((flops, rows)) = matmul_flops(name, &torch.input_dims(op))
        {
            t_matmul_flops += flops;
            t_matmul_rows_one &= rows == 1;
        }
    }
    let tn = t_steps.len();
    let per_t = |x: f64| mean(x, tn);

    // Candle's kinds.
    let self_times = op_self_times(trace);
    let mut c_kind: FastMap<OpClass, f64> = FastMap::default();
    let mut c_ops: FastMap<OpClass, FastMap<String, f64>> = FastMap::default();
    let mut captured_total = 0f64;
    for (op, &s) in trace.ops.iter().zip(&self_times) {
        if op.is_span || !chosen_step(op.step) {
            continue;
        }
        let name = trace.str(op.name);
        let class = OpClass::of_candle(name);
        *c_kind.entry(class).or_default() += s as f64;
        bump(c_ops.entry(class).or_default(), name, s as f64);
        captured_total += s as f64;
    }
    let cn = c_steps.len();
    let captured_enough = cn > 0 && mean(captured_total, cn) >= CAPTURED_OPS_MIN_SHARE * c_step_ns;
    let mut c_samples: FastMap<OpClass, u64> = FastMap::default();
    let mut c_copy_paths: FastMap<String, u64> = FastMap::default();
    let source = if captured_enough {
        CandleSource::CapturedOps
    } else if !trace.sampled.is_empty() {
        c_kind.clear();
        c_ops.clear();
        let ops = stack_ops(trace);
        let (path_of, table) = span_paths(trace);
        let span_path: FastMap<u64, u32> = trace
            .spans
            .iter()
            .zip(&path_of)
            .map(|(sp, &p)| (sp.id, p))
            .collect();
        let mut by_name: FastMap<(OpClass, u32), u64> = FastMap::default();
        let mut busy = 0u64;
        for row in &trace.sampled.samples {
            if !chosen_index.contains(&row.step) || trace.sampled.stack_is_waiting(row.stack) {
                continue;
            }
            let (class, id) = match ops.of_stack.get(&row.stack) {
                Some(StackOp::Op(id, _)) => {
                    let name = ops.names.get(*id as usize).map_or("", |(n, _)| n.as_str());
                    (OpClass::of_candle(name), *id)
                }
                _ => (OpClass::Other, u32::MAX),
            };
            busy = busy.saturating_add(row.n);
            let e = c_samples.entry(class).or_default();
            *e = e.saturating_add(row.n);
            let e = by_name.entry((class, id)).or_default();
            *e = e.saturating_add(row.n);
            if class == OpClass::CopyLayout
                && let Some(&p) = row.span.and_then(|s| span_path.get(&s))
            {
                let path = path_text(&table, trace, p);
                let e = c_copy_paths.entry(path).or_default();
                *e = e.saturating_add(row.n);
            }
        }
        let share_ns = |k: u64| {
            if busy > 0 {
                k as f64 / busy as f64 * c_step_ns
            } else {
                0.0
            }
        };
        for (&class, &k) in &c_samples {
            c_kind.insert(class, share_ns(k) * cn as f64);
        }
        for (&(class, id), &k) in &by_name {
            let name = if id == u32::MAX {
                crate::sampled::sampled_ops::NO_CANDLE_OP
            } else {
                ops.names.get(id as usize).map_or("", |(n, _)| n.as_str())
            };
            bump(
                c_ops.entry(class).or_default(),
                name,
                share_ns(k) * cn as f64,
            );
        }
        if busy == 0 {
            warnings.push(format!(
                "the Candle trace has no busy samples in the chosen steps ({} of its CPU \
                 samples in all): Candle's op kinds are unknown; sample more steps, a longer \
                 run or a higher rate",
                trace
                    .sampled
                    .samples
                    .iter()
                    .fold(0u64, |t, r| t.saturating_add(r.n))
            ));
            CandleSource::None
        } else {
            if busy < SAMPLES_FOR_5_POINTS {
                warnings.push(format!(
                    "Candle's op kinds rest on {busy} busy sample(s) in the chosen steps \
                     ({SAMPLES_FOR_5_POINTS} give shares within ±5 points): read them with \
                     their intervals, or sample more steps or at a higher rate"
                ));
            }
            CandleSource::Sampled { busy_samples: busy }
        }
    } else {
        warnings.push(
            "the Candle trace has neither captured ops (besides spans' own) nor samples: \
             Candle's op kinds are unknown; record with the sampler (`demo --sample`, \
             Capture::sample_stacks) or capture ops"
                .to_string(),
        );
        CandleSource::None
    };
    let per_c = |x: f64| mean(x, cn);

    let mut kinds: Vec<KindRow> = OpClass::ALL
        .iter()
        .filter(|c| t_kind.contains_key(c) || c_kind.contains_key(c))
        .map(|&class| {
            let torch_ns = per_t(t_kind.get(&class).copied().unwrap_or(0.0));
            let candle_ns = (source != CandleSource::None)
                .then(|| per_c(c_kind.get(&class).copied().unwrap_or(0.0)));
            let (candle_interval, candle_samples) = match source {
                CandleSource::Sampled { busy_samples } => {
                    let k = c_samples.get(&class).copied().unwrap_or(0);
                    let (lo, hi) = wilson_95(k, busy_samples);
                    (Some((lo * c_step_ns, hi * c_step_ns)), Some(k))
                }
                _ => (None, None),
            };
            let scale_c = |v: Vec<(String, f64)>| -> Vec<(String, f64)> {
                v.into_iter().map(|(n, x)| (n, per_c(x))).collect()
            };
            let scale_t = |v: Vec<(String, f64)>| -> Vec<(String, f64)> {
                v.into_iter().map(|(n, x)| (n, per_t(x))).collect()
            };
            KindRow {
                kind: class,
                candle_ns,
                candle_interval,
                candle_samples,
                torch_ns,
                ratio: candle_ns.filter(|_| torch_ns > 0.0).map(|c| c / torch_ns),
                loss_ns: candle_ns.map(|c| c - torch_ns),
                candle_ops: c_ops
                    .get(&class)
                    .map(|m| scale_c(top(m, 3)))
                    .unwrap_or_default(),
                torch_ops: t_ops
                    .get(&class)
                    .map(|m| scale_t(top(m, 3)))
                    .unwrap_or_default(),
            }
        })
        .collect();
    kinds.sort_by(|a, b| {
        let la = a.loss_ns.unwrap_or(f64::NEG_INFINITY);
        let lb = b.loss_ns.unwrap_or(f64::NEG_INFINITY);
        lb.total_cmp(&la)
            .then_with(|| b.torch_ns.total_cmp(&a.torch_ns))
            .then(a.kind.cmp(&b.kind))
    });
    let candle_copy_share = (source != CandleSource::None && c_step_ns > 0.0)
        .then(|| per_c(c_kind.get(&OpClass::CopyLayout).copied().unwrap_or(0.0)) / c_step_ns);
    let torch_copy_share = if t_step_ns > 0.0 {
        per_t(t_kind.get(&OpClass::CopyLayout).copied().unwrap_or(0.0)) / t_step_ns
    } else {
        0.0
    };

    // Layers.
    let (path_of, table) = span_paths(trace);
    let mut c_layer: FastMap<u32, f64> = FastMap::default();
    for (sp, &p) in trace.spans.iter().zip(&path_of) {
        if let Some(d) = sp.duration_ns()
            && chosen_step(sp.step)
        {
            *c_layer.entry(p).or_default() += d as f64;
        }
    }
    // Candle path id → (key, display path, depth), for paths not deeper than the limit.
    let mut c_keys: FastMap<String, (u32, String, usize)> = FastMap::default();
    let depths = path_depths(&table);
    for &p in c_layer.keys() {
        let depth = depths.get(p as usize).copied().unwrap_or(usize::MAX);
        if depth >= MAX_LAYER_DEPTH {
            continue;
        }
        let names = path_names(&table, trace, p);
        let key = key_of(names.iter().map(String::as_str));
        c_keys.insert(key, (p, names.join("/"), depth));
    }
    let layer_map = LayerMap::new(&opts.layer_map);
    let mut t_layer: FastMap<String, f64> = FastMap::default();
    let mut t_key_of: FastMap<u32, Option<String>> = FastMap::default();
    for r in torch.ranges.iter().filter(|r| t_chosen(r.step)) {
        let key = t_key_of
            .entry(r.path)
            .or_insert_with(|| {
                ((r.depth as usize) < MAX_LAYER_DEPTH).then(|| {
                    let full = torch.path(r.path);
                    layer_map.apply(key_of(full.split('/')))
                })
            })
            .clone();
        if let Some(k) = key {
            *t_layer.entry(k).or_default() += r.dur_ns as f64;
        }
    }
    // Candle may wrap the model in spans torch has no range for (a `forward` phase span
    // around `bert.forward`): when no torch root is a Candle root, the shortest Candle path
    // that ends in a torch root's name is the model's, and what is above it is left out.
    let c_keys = strip_wrapper(c_keys, &t_layer);
    let mut layers = Vec::new();
    let mut candle_only = Vec::new();
    for (key, (p, display, depth)) in &c_keys {
        let c = per_c(c_layer.get(p).copied().unwrap_or(0.0));
        match t_layer.get(key) {
            Some(&t) => {
                let t = per_t(t);
                layers.push(LayerRow {
                    path: display.clone(),
                    depth: *depth,
                    candle_ns: c,
                    torch_ns: t,
                    ratio: (t > 0.0).then(|| c / t),
                    loss_ns: c - t,
                });
            }
            None => candle_only.push(display.clone()),
        }
    }
    let mut torch_only: Vec<String> = t_layer
        .keys()
        .filter(|k| !c_keys.contains_key(*k))
        .cloned()
        .collect();
    layers.sort_by(|a, b| {
        b.loss_ns
            .total_cmp(&a.loss_ns)
            .then_with(|| a.path.cmp(&b.path))
    });
    candle_only.sort();
    torch_only.sort();

    let mut cmp = TorchComparison {
        step_ratio: (t_step_ns > 0.0).then(|| c_step_ns / t_step_ns),
        candle,
        torch: torch_facts,
        warnings,
        candle_source: source,
        kinds,
        candle_copy_share,
        torch_copy_share,
        layers,
        candle_only_layers: candle_only,
        torch_only_layers: torch_only,
        diagnoses: Vec::new(),
    };
    let copy_paths = top(
        &c_copy_paths
            .into_iter()
            .map(|(k, v)| (k, v as f64))
            .collect(),
        3,
    );
    let matmul = MatmulFlops {
        flops_per_step: per_t(t_matmul_flops),
        one_row: t_matmul_rows_one && t_matmul_flops > 0.0,
    };
    cmp.diagnoses = diagnose(&cmp, &copy_paths, &matmul);
    cmp
}

/// Candle's layer keys with the wrapper above the model dropped (see [`compare_with_torch`]):
/// when no torch root key is a Candle key, the shortest Candle key `W/R` whose tail `R` is a
/// torch root makes every key under `W/` lose that prefix (and keys not under it are kept as
/// they are). Linear in the keys.
fn strip_wrapper(
    c_keys: FastMap<String, (u32, String, usize)>,
    t_layer: &FastMap<String, f64>,
) -> FastMap<String, (u32, String, usize)> {
    let roots: Vec<&str> = t_layer
        .keys()
        .filter(|k| !k.contains('/'))
        .map(String::as_str)
        .collect();
    if roots.is_empty() || roots.iter().any(|r| c_keys.contains_key(*r)) {
        return c_keys;
    }
    let wrapper = c_keys
        .keys()
        .filter_map(|k| {
            let (w, tail) = k.rsplit_once('/')?;
            roots.contains(&tail).then_some(w)
        })
        .min_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
        .map(|w| format!("{w}/"));
    let Some(wrapper) = wrapper else {
        return c_keys;
    };
    c_keys
        .into_iter()
        .map(|(k, v)| match k.strip_prefix(&wrapper) {
            Some(rest) => (rest.to_string(), v),
            None => (k, v),
        })
        .collect()
}

/// The depth of every path id of a span-path table (0 for a root). Linear: a parent's id is
/// always below its child's.
fn path_depths(table: &[(Option<u32>, Sym)]) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(table.len());
    for &(parent, _) in table {
        let d = parent
            .and_then(|p| out.get(p as usize))
            .map_or(0, |d| d.saturating_add(1));
        out.push(d);
    }
    out
}

/// The names of a span path, root first (callers bound the depth).
fn path_names(table: &[(Option<u32>, Sym)], trace: &Trace, mut p: u32) -> Vec<String> {
    let mut names = Vec::new();
    let mut guard = 0;
    while let Some(&(parent, name)) = table.get(p as usize) {
        names.push(trace.str(name).to_string());
        guard += 1;
        match parent {
            Some(q) if q < p && guard < MAX_LAYER_DEPTH * 2 => p = q,
            _ => break,
        }
    }
    names.reverse();
    names
}

/// A span path as text, its depth bounded.
fn path_text(table: &[(Option<u32>, Sym)], trace: &Trace, p: u32) -> String {
    path_names(table, trace, p).join("/")
}

/// FLOPs of one ATen matrix product from its input dims, with its number of rows (the
/// product of the first input's leading dims): `mm`, `addmm`, `bmm`, `matmul`, `linear`.
fn matmul_flops(name: &str, dims: &[crate::runs::torch::TorchDims]) -> Option<(f64, u64)> {
    use crate::runs::torch::TorchDims;
    let bare = name.strip_prefix("aten::").unwrap_or(name);
    let shape = |i: usize| match dims.get(i) {
        Some(TorchDims::Tensor(v)) if !v.is_empty() => Some(v.as_slice()),
        _ => None,
    };
    let pos = |x: i64| u64::try_from(x).ok();
    let (a, b) = match bare {
        "mm" | "bmm" | "matmul" => (shape(0)?, shape(1)?),
        "addmm" => (shape(1)?, shape(2)?),
        "linear" => (shape(0)?, shape(1)?),
        _ => return None,
    };
    let k = pos(*a.last()?)?;
    let rows: u64 = a[..a.len() - 1]
        .iter()
        .try_fold(1u64, |acc, &x| acc.checked_mul(pos(x)?))?;
    // `linear`'s weight is [out, in]; the others' second operand is [.., k, n].
    let n = if bare == "linear" {
        pos(*b.first()?)?
    } else {
        pos(*b.last()?)?
    };
    let flops = 2.0 * rows as f64 * k as f64 * n as f64;
    Some((flops, rows))
}

/// Torch's matrix-product work per step, from its ops' input dims.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatmulFlops {
    /// FLOPs per step of the outermost matmul-kind ops with known dims.
    pub(crate) flops_per_step: f64,
    /// Every one of them had one row (decode's matrix-vector products).
    pub(crate) one_row: bool,
}

/// `1.23 µs` style, for sentences.
fn ns(v: f64) -> String {
    crate::format::format_ns(v)
}

/// The findings of a comparison, by what Candle loses (largest first), a sampled estimate
/// judged at the low end of its 95 % interval: kinds at least
/// [`SLOWER_MIN_RATIO`] slower that lose at least [`LOSS_MIN_SHARE`] of Candle's step;
/// copy/layout at least [`COPY_MIN_SHARE`] of Candle's step and [`COPY_MIN_RATIO`] times its
/// share in torch; matrix products' rate against torch's on the same FLOPs; the innermost
/// layers that lose most.
pub(crate) fn diagnose(
    c: &TorchComparison,
    copy_paths: &[(String, f64)],
    matmul: &MatmulFlops,
) -> Vec<Diagnosis> {
    let mut out = Vec::new();
    let step = c.candle.step_ns;
    let source = match c.candle_source {
        CandleSource::CapturedOps => "captured op time".to_string(),
        CandleSource::Sampled { .. } => "sampled estimate".to_string(),
        CandleSource::None => return layer_diagnoses(c, step),
    };
    for row in &c.kinds {
        let (Some(cn), Some(ratio), Some(loss)) = (row.candle_ns, row.ratio, row.loss_ns) else {
            continue;
        };
        if row.kind == OpClass::Other || row.kind == OpClass::CopyLayout {
            continue;
        }
        // A sampled estimate must make its case at the low end of its interval: two samples
        // of twenty that both landed in one kind are no finding.
        let low = row.candle_interval.map_or(cn, |(lo, _)| lo.min(cn));
        let sure_ratio = if row.torch_ns > 0.0 {
            low / row.torch_ns
        } else {
            ratio
        };
        let sure_loss = loss - (cn - low);
        if sure_ratio >= SLOWER_MIN_RATIO && step > 0.0 && sure_loss >= LOSS_MIN_SHARE * step {
            let mut evidence = vec![format!(
                "Candle {} per step ({source}{}), torch {} per step (self time)",
                ns(cn),
                row.candle_samples
                    .map_or(String::new(), |k| format!(", {k} samples")),
                ns(row.torch_ns)
            )];
            evidence.push(format!("Candle's ops: {}", names(&row.candle_ops)));
            evidence.push(format!("torch's ops: {}", names(&row.torch_ops)));
            out.push(Diagnosis {
                rule: "kind_slower",
                loss_ns: loss,
                text: format!(
                    "{} is {ratio:.1}× slower in Candle: {} against {} per step ({} more, \
                     {} of Candle's step)",
                    row.kind.label(),
                    ns(cn),
                    ns(row.torch_ns),
                    ns(loss),
                    crate::format::format_share(loss / step)
                ),
                evidence,
            });
        }
        if row.kind == OpClass::Matmul
            && matmul.flops_per_step > 0.0
            && cn > 0.0
            && sure_ratio >= SLOWER_MIN_RATIO
        {
            let c_rate = matmul.flops_per_step / cn;
            let t_rate = matmul.flops_per_step / row.torch_ns.max(1.0);
            out.push(Diagnosis {
                rule: "matmul_rate",
                loss_ns: loss,
                text: format!(
                    "matmul{} runs at {:.2} GFLOP/s in Candle against {:.2} GFLOP/s in \
                     PyTorch on the same work ({:.3} MFLOP per step)",
                    if matmul.one_row {
                        " with one row (decode's matrix-vector products)"
                    } else {
                        ""
                    },
                    c_rate,
                    t_rate,
                    matmul.flops_per_step / 1e6
                ),
                evidence: vec![
                    "FLOPs from torch's input dims (2·rows·k·n per mm/addmm/bmm/linear)"
                        .to_string(),
                    format!(
                        "Candle {} per step ({source}), torch {}",
                        ns(cn),
                        ns(row.torch_ns)
                    ),
                ],
            });
        }
    }
    // As for the kinds: a sampled share makes its case at the low end of its interval.
    let copy_low = c
        .kinds
        .iter()
        .find(|r| r.kind == OpClass::CopyLayout)
        .and_then(|r| r.candle_interval)
        .map(|(lo, _)| if step > 0.0 { lo / step } else { 0.0 });
    if let Some(share) = c.candle_copy_share
        && copy_low.unwrap_or(share).min(share) >= COPY_MIN_SHARE
        && copy_low.unwrap_or(share).min(share) >= COPY_MIN_RATIO * c.torch_copy_share
    {
        let row = c.kinds.iter().find(|r| r.kind == OpClass::CopyLayout);
        let loss = row.and_then(|r| r.loss_ns).unwrap_or(share * step);
        let mut evidence = vec![format!(
            "Candle {} per step ({source}), torch {} (self time)",
            ns(share * step),
            ns(c.torch_copy_share * c.torch.step_ns)
        )];
        if let Some(r) = row {
            evidence.push(format!("Candle's ops: {}", names(&r.candle_ops)));
            evidence.push(format!("torch's ops: {}", names(&r.torch_ops)));
        }
        if !copy_paths.is_empty() {
            evidence.push(format!(
                "where (samples): {}",
                copy_paths
                    .iter()
                    .map(|(p, k)| format!("{p} ({k:.0})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out.push(Diagnosis {
            rule: "copy_layout",
            loss_ns: loss,
            text: format!(
                "copy/layout is {} of Candle's step{} against {} in PyTorch: a transpose or \
                 narrow before a matmul or a cat makes Candle copy (copy_strided_src, \
                 contiguous); keep the layout the kernel wants, or copy once outside the loop",
                crate::format::format_share(share),
                copy_paths
                    .first()
                    .map_or(String::new(), |(p, _)| format!(" (most under {p})")),
                crate::format::format_share(c.torch_copy_share)
            ),
            evidence,
        });
    }
    out.extend(layer_diagnoses(c, step));
    out.sort_by(|a, b| b.loss_ns.total_cmp(&a.loss_ns).then(a.rule.cmp(b.rule)));
    out
}

/// Layers at least [`SLOWER_MIN_RATIO`] slower that lose at least [`LOSS_MIN_SHARE`] of
/// Candle's step, innermost ones only (a block's loss is its parts'), the
/// [`MAX_LAYER_DIAGNOSES`] that lose most. O(n log n) in the layer rows.
fn layer_diagnoses(c: &TorchComparison, step: f64) -> Vec<Diagnosis> {
    let mut losing: Vec<&LayerRow> = c
        .layers
        .iter()
        .filter(|r| {
            r.ratio.is_some_and(|x| x >= SLOWER_MIN_RATIO)
                && step > 0.0
                && r.loss_ns >= LOSS_MIN_SHARE * step
        })
        .collect();
    losing.sort_by(|a, b| a.path.cmp(&b.path));
    // A row with a losing row below it is not innermost: the first path at or after `P/`
    // starts with `P/` exactly when one does.
    let paths: Vec<&str> = losing.iter().map(|r| r.path.as_str()).collect();
    let mut innermost: Vec<&LayerRow> = losing
        .iter()
        .copied()
        .filter(|r| {
            let below = format!("{}/", r.path);
            let at = paths.partition_point(|p| *p < below.as_str());
            !paths.get(at).is_some_and(|p| p.starts_with(&below))
        })
        .collect();
    innermost.sort_by(|a, b| {
        b.loss_ns
            .total_cmp(&a.loss_ns)
            .then_with(|| a.path.cmp(&b.path))
    });
    innermost
        .into_iter()
        .take(MAX_LAYER_DIAGNOSES)
        .map(|row| Diagnosis {
            rule: "layer_slower",
            loss_ns: row.loss_ns,
            text: format!(
                "{} takes {:.1}× PyTorch's time: {} against {} per step ({} more)",
                row.path,
                row.ratio.unwrap_or(0.0),
                ns(row.candle_ns),
                ns(row.torch_ns),
                ns(row.loss_ns)
            ),
            evidence: vec![
                "span time (Candle) and record_function range time (torch), both measured".into(),
            ],
        })
        .collect()
}

/// `a (1.2 µs), b (300 ns)`.
fn names(v: &[(String, f64)]) -> String {
    if v.is_empty() {
        return "-".to_string();
    }
    v.iter()
        .map(|(n, x)| format!("{n} ({})", ns(*x)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_with_or_without_a_first_instance_suffix() {
        assert_eq!(
            key_of("llama.forward/block#0/attn#0/linear#1".split('/')),
            "llama.forward/block/attn/linear#1"
        );
        assert_eq!(key_of("a/b".split('/')), "a/b");
    }

    #[test]
    fn a_mapping_rewrites_whole_leading_names_only() {
        let map = LayerMap::new(&[
            ("model.layers.0".to_string(), "block#0".to_string()),
            ("model.layers.0/mlp".to_string(), "block#0/ffn".to_string()),
            (
                "model.layers.0".to_string(),
                "ignored: the first mapping wins".to_string(),
            ),
        ]);
        assert_eq!(map.apply("model.layers.0/attn".into()), "block/attn");
        assert_eq!(map.apply("model.layers.0".into()), "block");
        // The longest mapped prefix wins.
        assert_eq!(map.apply("model.layers.0/mlp/up".into()), "block/ffn/up");
        assert_eq!(
            map.apply("model.layers.01/mlp".into()),
            "model.layers.01/mlp"
        );
    }

    #[test]
    fn a_wrapper_span_above_the_model_is_looked_through() {
        let keys = |v: &[&str]| -> FastMap<String, (u32, String, usize)> {
            v.iter()
                .enumerate()
                .map(|(i, k)| (k.to_string(), (i as u32, k.to_string(), 0)))
                .collect()
        };
        let torch: FastMap<String, f64> = ["bert.forward", "bert.forward/model"]
            .iter()
            .map(|k| (k.to_string(), 1.0))
            .collect();
        let c = strip_wrapper(
            keys(&[
                "forward",
                "forward/bert.forward",
                "forward/bert.forward/model",
                "other",
            ]),
            &torch,
        );
        let mut got: Vec<&str> = c.keys().map(String::as_str).collect();
        got.sort_unstable();
        assert_eq!(
            got,
            ["bert.forward", "bert.forward/model", "forward", "other"]
        );
        // A Candle root that is torch's root: nothing to look through.
        let same = strip_wrapper(keys(&["bert.forward", "x/bert.forward"]), &torch);
        assert!(same.contains_key("x/bert.forward"));
    }

    #[test]
    fn matmul_flops_read_the_operands_dims() {
        use crate::runs::torch::TorchDims::Tensor;
        let mm = [Tensor(vec![1, 128]), Tensor(vec![128, 256])];
        assert_eq!(
            matmul_flops("aten::mm", &mm),
            Some((2.0 * 128.0 * 256.0, 1))
        );
        let addmm = [
            Tensor(vec![256]),
            Tensor(vec![4, 128]),
            Tensor(vec![128, 256]),
        ];
        assert_eq!(
            matmul_flops("aten::addmm", &addmm),
            Some((2.0 * 4.0 * 128.0 * 256.0, 4))
        );
        let linear = [Tensor(vec![2, 3, 128]), Tensor(vec![64, 128])];
        assert_eq!(
            matmul_flops("aten::linear", &linear),
            Some((2.0 * 6.0 * 128.0 * 64.0, 6))
        );
        assert_eq!(matmul_flops("aten::add", &mm), None);
        assert_eq!(
            matmul_flops("aten::mm", &[Tensor(vec![-1, 2]), Tensor(vec![2, 2])]),
            None
        );
    }
}
