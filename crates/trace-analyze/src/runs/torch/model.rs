//! The model of one torch.profiler run ([`TorchRun`]): steps, ops, ranges, memory, threads.

use std::fmt;
use std::ops::Range;

use serde::Serialize;

use crate::events::op_class::OpClass;
use crate::events::spans::{MAX_PATH_NAMES, elided_path};
use crate::model::intern::{FastMap, Interner, Sym};

/// A `pid` or `tid` of a Chrome trace: torch writes numbers for real processes and threads and
/// strings for its own tracks (`"Spans"`, `"PyTorch Profiler"`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub enum TorchId {
    /// A number.
    Num(i64),
    /// A string.
    Text(String),
}

impl fmt::Display for TorchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TorchId::Num(n) => write!(f, "{n}"),
            TorchId::Text(s) => f.write_str(s),
        }
    }
}

/// Where the profiled program ran, as the trace shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TorchDevice {
    /// Host only: no CUDA kernels, copies or runtime calls in the trace.
    Cpu,
    /// CUDA: the trace has device-side events (`kernel`, `gpu_memcpy`, ...) or CUDA runtime
    /// calls.
    Cuda,
}

impl TorchDevice {
    /// `cpu` or `cuda`.
    pub fn as_str(self) -> &'static str {
        match self {
            TorchDevice::Cpu => "cpu",
            TorchDevice::Cuda => "cuda",
        }
    }
}

/// A thread of the trace that has complete events or a name.
#[derive(Debug, Clone, Serialize)]
pub struct TorchThread {
    /// The process id.
    pub pid: TorchId,
    /// The thread id.
    pub tid: TorchId,
    /// Its name from a `thread_name` metadata event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its ops (`cpu_op` events, after merging).
    pub ops: u64,
}

/// One profiler step: a `ProfilerStep#N` range (cat `user_annotation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TorchStep {
    /// `N` of `ProfilerStep#N` (torch counts every step of the schedule, recorded or not).
    pub number: u64,
    /// Its thread: an index into [`TorchRun::threads`].
    pub thread: u32,
    /// Start on the profiler's clock (`ts`), ns.
    pub start_ns: u64,
    /// Duration, ns.
    pub dur_ns: u64,
    /// Self time: the duration less its direct children's, ns.
    pub self_ns: u64,
}

impl TorchStep {
    /// The end, ns.
    pub fn end_ns(&self) -> u64 {
        self.start_ns.saturating_add(self.dur_ns)
    }
}

/// One op: a `cpu_op` event (an ATen op or a redispatch of one) after merging a same-named
/// only child into its parent (torch's `_remove_dup_nodes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TorchOp {
    /// Its name ([`TorchRun::str`]).
    pub name: Sym,
    /// Its thread: an index into [`TorchRun::threads`].
    pub thread: u32,
    /// Start on the profiler's clock (`ts`), ns.
    pub start_ns: u64,
    /// Duration, ns (clipped to its parent's end where it overlapped it; see
    /// [`TorchRun::adjusted`]).
    pub dur_ns: u64,
    /// Self time: the duration less the durations of its direct children (ops, ranges and
    /// any other complete events nested in it on its thread), ns.
    pub self_ns: u64,
    /// The step whose time span holds its start: an index into [`TorchRun::steps`].
    pub step: Option<u32>,
    /// How many ops enclose it (0: called from Python or a range directly).
    pub depth: u32,
    /// The innermost `record_function` range around it: an index into [`TorchRun::ranges`].
    pub range: Option<u32>,
    /// Its input dims ([`TorchRun::input_dims`], [`TorchRun::input_shapes`]).
    pub inputs: u32,
    /// Its input types ([`TorchRun::input_types`]).
    pub input_types: u32,
    /// Torch's `External id` (links an op to its kernels and to `key_averages`).
    pub external_id: Option<u64>,
}

/// One `record_function` range (cat `user_annotation`, other than `ProfilerStep#N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TorchRange {
    /// Its name ([`TorchRun::str`]), e.g. `attn#0`.
    pub name: Sym,
    /// Its path of enclosing ranges' names ([`TorchRun::path`]), e.g.
    /// `llama.forward/block#0/attn#0`.
    pub path: u32,
    /// The innermost range around it: an index into [`TorchRun::ranges`].
    pub parent: Option<u32>,
    /// Its thread: an index into [`TorchRun::threads`].
    pub thread: u32,
    /// Start on the profiler's clock (`ts`), ns.
    pub start_ns: u64,
    /// Duration, ns.
    pub dur_ns: u64,
    /// Self time: the duration less its direct children's (ops and ranges), ns.
    pub self_ns: u64,
    /// The step whose time span holds its start: an index into [`TorchRun::steps`].
    pub step: Option<u32>,
    /// How many ranges enclose it.
    pub depth: u32,
}

/// The memory events (`[memory]` instant events of `profile_memory=True`) of one step and
/// device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TorchStepMemory {
    /// The step: an index into [`TorchRun::steps`].
    pub step: u32,
    /// Torch's `Device Type` (0: CPU, 1: CUDA).
    pub device_type: i64,
    /// Memory events.
    pub events: u64,
    /// Bytes allocated: the sum of the positive `Bytes`.
    pub allocated_bytes: u64,
    /// Bytes freed: the sum of the negative `Bytes`, as a positive number.
    pub freed_bytes: u64,
    /// The highest `Total Allocated` seen (`None` where no event had one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_total_allocated: Option<i64>,
}

/// An element type seen in the ops' `Input type`, with how many op inputs had it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TorchDtype {
    /// Candle's name of the type: `f32` (torch's `float`), `f16` (`c10::Half`), `bf16`
    /// (`c10::BFloat16`), `f64` (`double`), `i64` (`long int`), `i32`, `i16`, `i8`, `u8`,
    /// `bool`.
    pub dtype: &'static str,
    /// Op inputs of that type (merged ops included).
    pub inputs: u64,
}

/// One argument's dims as the profiler recorded them (`Input Dims`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
pub enum TorchDims {
    /// A tensor's shape (empty for a scalar or a non-tensor argument).
    Tensor(Vec<i64>),
    /// A list of tensors' shapes (a `TensorList` argument, as of `aten::cat`).
    List(Vec<Vec<i64>>),
}

/// What the reader saw besides the model's records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TorchCounts {
    /// Elements of `traceEvents`.
    pub events: u64,
    /// Complete (`X`) events nested per thread: ops, ranges, steps and the rest.
    pub complete: u64,
    /// `python_function` events (nested, never ops).
    pub python_functions: u64,
    /// Other host-side complete events nested (CUDA runtime calls, uncategorised ones).
    pub other_complete: u64,
    /// Device-side events (kernels, copies): not nested, they only mark a CUDA run.
    pub device_events: u64,
    /// `[memory]` instant events.
    pub memory_events: u64,
    /// `[memory]` events outside every step (not in [`TorchRun::memory`]).
    pub memory_outside_steps: u64,
    /// Events not used: the profiler's own `Trace` span, other instant and metadata events,
    /// other phases.
    pub unused: u64,
}

/// Self time per name: one row of [`TorchRun::self_by_name`] and its kin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TorchSelfRow {
    /// The op or range name (`ProfilerStep*` for every step, as torch's `key_averages`).
    pub name: String,
    /// Events of that name.
    pub count: u64,
    /// Their total duration, ns (nested calls of one name count each time, as torch does).
    pub total_ns: u64,
    /// Their self time, ns.
    pub self_ns: u64,
}

/// Self time per op kind: one row of [`TorchRun::self_by_class`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TorchClassRow {
    /// The op kind ([`OpClass::of_aten`] of the op names).
    pub class: OpClass,
    /// Ops of that kind.
    pub count: u64,
    /// Their self time, ns.
    pub self_ns: u64,
}

/// A torch.profiler run read from its Chrome trace (`prof.export_chrome_trace`), with self
/// times computed as torch's `key_averages` computes them (see [`load_torch_path`]).
///
/// Times are integer nanoseconds on the profiler's clock (`ts` × 1000, rounded); the wall
/// time of `t` is [`base_time_ns`](Self::base_time_ns) + `t` where torch wrote
/// `baseTimeNanoseconds`. Durations are host wall time.
///
/// [`load_torch_path`]: crate::runs::load_torch_path
#[derive(Debug, Clone)]
pub struct TorchRun {
    /// The trace (as given).
    pub source: String,
    /// `traceName`: the file torch wrote.
    pub trace_name: Option<String>,
    /// `schemaVersion`.
    pub schema_version: Option<u64>,
    /// `baseTimeNanoseconds`: the Unix time of the profiler clock's zero, ns.
    pub base_time_ns: Option<u64>,
    /// Entries of `deviceProperties` (`None`: absent; torch lists its GPUs there).
    pub device_properties: Option<u64>,
    /// Where the program ran.
    pub device: TorchDevice,
    /// The profiler steps, by start.
    pub steps: Vec<TorchStep>,
    /// The ops, by start (then longest first).
    pub ops: Vec<TorchOp>,
    /// The `record_function` ranges, by start (then longest first).
    pub ranges: Vec<TorchRange>,
    /// Memory events per step and device, by step then device.
    pub memory: Vec<TorchStepMemory>,
    /// The threads with complete events or names, in order of first appearance.
    pub threads: Vec<TorchThread>,
    /// Threads that ran ops.
    pub op_threads: usize,
    /// Element types of the ops' inputs, most inputs first.
    pub dtypes: Vec<TorchDtype>,
    /// What the reader saw.
    pub counts: TorchCounts,
    /// Events merged into a same-named parent that had no other child (torch's
    /// `_remove_dup_nodes`: a redispatch such as `aten::div_` inside `aten::div_`); they are
    /// not in [`ops`](Self::ops) or [`ranges`](Self::ranges).
    pub merged: u64,
    /// Events that partly overlapped the event they start in (not possible for a trace
    /// torch wrote): their end was clipped to the enclosing event's end.
    pub adjusted: u64,
    pub(crate) strings: Interner,
    /// Range paths, interned: each a name under a parent path.
    pub(crate) paths: Vec<PathNode>,
    /// Input dims per signature: the flat encoding and its text.
    pub(crate) dims: Vec<(Box<[i64]>, String)>,
    /// Input types per signature.
    pub(crate) types: Vec<Box<[Sym]>>,
}

/// One interned range path: a name under a parent path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PathNode {
    pub(crate) parent: Option<u32>,
    pub(crate) name: Sym,
    /// Names in the path (1 for a root range).
    pub(crate) len: u32,
    /// The path's ancestor of [`HEAD`] names (itself when shorter): where the head of a
    /// display path ends, found without walking the whole path.
    pub(crate) head: u32,
}

/// Names kept at each end of a display path ([`TorchRun::display_path`]).
pub(crate) const HEAD: usize = MAX_PATH_NAMES / 2;

/// Torch's `key_averages` name of every `ProfilerStep#N`.
pub const PROFILER_STEP_ROW: &str = "ProfilerStep*";

impl TorchRun {
    /// The string of `sym` (an op's or range's name).
    pub fn str(&self, sym: Sym) -> &str {
        self.strings.resolve(sym)
    }

    /// The path of range path `path` ([`TorchRange::path`]): names from the outermost range,
    /// joined by `/` (`llama.forward/block#0/attn#0`). Linear in its depth.
    pub fn path(&self, path: u32) -> String {
        let mut names = self.path_names(Some(path), usize::MAX);
        names.reverse();
        names.join("/")
    }

    /// The display path of range path `path`: as [`path`](Self::path) up to
    /// [`MAX_PATH_NAMES`] names, else its first and last `MAX_PATH_NAMES / 2` names around
    /// `…N more…` (as the span tree's). O(`MAX_PATH_NAMES`) whatever the depth.
    pub fn display_path(&self, path: u32) -> String {
        let Some(node) = self.paths.get(path as usize) else {
            return String::new();
        };
        let len = node.len as usize;
        if len <= MAX_PATH_NAMES {
            return self.path(path);
        }
        let mut head = self.path_names(Some(node.head), HEAD);
        head.reverse();
        let mut tail = self.path_names(Some(path), HEAD);
        tail.reverse();
        elided_path(len, &head, &tail, |s| s)
    }

    /// Up to `max` names of a path from its last one up.
    fn path_names(&self, mut at: Option<u32>, max: usize) -> Vec<&str> {
        let mut names = Vec::new();
        while let Some(p) = at {
            let Some(node) = self.paths.get(p as usize) else {
                break;
            };
            if names.len() == max {
                break;
            }
            names.push(self.str(node.name));
            // Parents are interned before their children, so this ends.
            at = node.parent.filter(|&q| q < p);
        }
        names
    }

    /// `range`'s path (see [`path`](Self::path)).
    pub fn range_path(&self, range: &TorchRange) -> String {
        self.path(range.path)
    }

    /// `op`'s input dims, one entry per argument.
    pub fn input_dims(&self, op: &TorchOp) -> Vec<TorchDims> {
        self.dims
            .get(op.inputs as usize)
            .map_or_else(Vec::new, |(flat, _)| decode_dims(flat))
    }

    /// `op`'s input dims as text: arguments joined by `x`, `[1,128]x[128,128]`; a tensor
    /// list as `[[1,2],[1,2]]`; empty where the trace recorded none.
    pub fn input_shapes(&self, op: &TorchOp) -> &str {
        self.dims.get(op.inputs as usize).map_or("", |(_, t)| t)
    }

    /// `op`'s input types as torch wrote them (`float`, `Scalar`, empty for `None`).
    pub fn input_types(&self, op: &TorchOp) -> Vec<&str> {
        self.types
            .get(op.input_types as usize)
            .map_or_else(Vec::new, |t| t.iter().map(|&s| self.str(s)).collect())
    }

    /// The step whose time span (`[start, end)`) holds `t_ns`: an index into
    /// [`steps`](Self::steps).
    pub fn step_at(&self, t_ns: u64) -> Option<usize> {
        step_at(&self.steps, t_ns)
    }

    /// Ops' self time per name over the whole trace, most self time first (then by name):
    /// the rows of torch's `key_averages` for its `cpu_op` events.
    pub fn self_by_name(&self) -> Vec<TorchSelfRow> {
        self.op_rows(|_| true)
    }

    /// Ops' self time per name over steps `steps` (indices into [`steps`](Self::steps); an op
    /// counts in the step that holds its start).
    pub fn self_by_name_in_steps(&self, steps: Range<usize>) -> Vec<TorchSelfRow> {
        self.op_rows(|op| op.step.is_some_and(|s| steps.contains(&(s as usize))))
    }

    /// Ranges' self time per name, with one row [`PROFILER_STEP_ROW`] for the steps: the
    /// rows of torch's `key_averages` for its `user_annotation` events.
    pub fn range_self_by_name(&self) -> Vec<TorchSelfRow> {
        let mut acc: FastMap<&str, (u64, u64, u64)> = FastMap::default();
        for r in &self.ranges {
            add(
                acc.entry(self.str(r.name)).or_default(),
                r.dur_ns,
                r.self_ns,
            );
        }
        for s in &self.steps {
            add(
                acc.entry(PROFILER_STEP_ROW).or_default(),
                s.dur_ns,
                s.self_ns,
            );
        }
        rows(acc)
    }

    /// Ranges' self time per path, most self time first; each row named by its display path
    /// (`llama.forward/block#0/attn#0`; [`display_path`](Self::display_path): bounded, so two
    /// very deep paths that differ only in the middle are two rows with the same text).
    pub fn range_self_by_path(&self) -> Vec<TorchSelfRow> {
        let mut acc: FastMap<u32, (u64, u64, u64)> = FastMap::default();
        for r in &self.ranges {
            add(acc.entry(r.path).or_default(), r.dur_ns, r.self_ns);
        }
        let mut out: Vec<TorchSelfRow> = acc
            .into_iter()
            .map(|(p, (count, total_ns, self_ns))| TorchSelfRow {
                name: self.display_path(p),
                count,
                total_ns,
                self_ns,
            })
            .collect();
        sort_rows(&mut out);
        out
    }

    /// Ops' self time per op kind ([`OpClass::of_aten`]), most self time first.
    pub fn self_by_class(&self) -> Vec<TorchClassRow> {
        let mut by_name: FastMap<Sym, (u64, u64)> = FastMap::default();
        for op in &self.ops {
            let e = by_name.entry(op.name).or_default();
            e.0 += 1;
            e.1 = e.1.saturating_add(op.self_ns);
        }
        let mut acc: FastMap<OpClass, (u64, u64)> = FastMap::default();
        for (name, (count, self_ns)) in by_name {
            let e = acc.entry(OpClass::of_aten(self.str(name))).or_default();
            e.0 += count;
            e.1 = e.1.saturating_add(self_ns);
        }
        let mut out: Vec<TorchClassRow> = acc
            .into_iter()
            .map(|(class, (count, self_ns))| TorchClassRow {
                class,
                count,
                self_ns,
            })
            .collect();
        out.sort_by(|a, b| b.self_ns.cmp(&a.self_ns).then(a.class.cmp(&b.class)));
        out
    }

    fn op_rows(&self, keep: impl Fn(&TorchOp) -> bool) -> Vec<TorchSelfRow> {
        let mut acc: FastMap<&str, (u64, u64, u64)> = FastMap::default();
        for op in self.ops.iter().filter(|op| keep(op)) {
            add(
                acc.entry(self.str(op.name)).or_default(),
                op.dur_ns,
                op.self_ns,
            );
        }
        rows(acc)
    }
}

/// Adds one event to a (count, total, self) accumulator.
fn add(acc: &mut (u64, u64, u64), dur: u64, self_ns: u64) {
    acc.0 += 1;
    acc.1 = acc.1.saturating_add(dur);
    acc.2 = acc.2.saturating_add(self_ns);
}

fn rows(acc: FastMap<&str, (u64, u64, u64)>) -> Vec<TorchSelfRow> {
    let mut out: Vec<TorchSelfRow> = acc
        .into_iter()
        .map(|(name, (count, total_ns, self_ns))| TorchSelfRow {
            name: name.to_string(),
            count,
            total_ns,
            self_ns,
        })
        .collect();
    sort_rows(&mut out);
    out
}

fn sort_rows(rows: &mut [TorchSelfRow]) {
    rows.sort_by(|a, b| b.self_ns.cmp(&a.self_ns).then_with(|| a.name.cmp(&b.name)));
}

/// The step of `steps` (sorted by start) whose `[start, end)` holds `t`; the latest-starting
/// one where steps overlap.
pub(crate) fn step_at(steps: &[TorchStep], t: u64) -> Option<usize> {
    let i = steps.partition_point(|s| s.start_ns <= t).checked_sub(1)?;
    (t < steps[i].end_ns()).then_some(i)
}

/// Argument kinds of the flat dims encoding: `[kind, n, payload]` per argument, a tensor's
/// payload its `n` dims, a list's `n` times `[len, dims...]`.
pub(crate) const DIMS_TENSOR: i64 = 0;
/// A tensor list argument in the flat dims encoding.
pub(crate) const DIMS_LIST: i64 = 1;

/// Decodes the flat dims encoding (see [`DIMS_TENSOR`]); stops at anything malformed.
pub(crate) fn decode_dims(flat: &[i64]) -> Vec<TorchDims> {
    let mut out = Vec::new();
    let mut at = 0usize;
    let take = |at: &mut usize, n: i64| -> Option<Vec<i64>> {
        let n = usize::try_from(n).ok()?;
        let end = at.checked_add(n)?;
        let v = flat.get(*at..end)?.to_vec();
        *at = end;
        Some(v)
    };
    while let (Some(&kind), Some(&n)) = (flat.get(at), flat.get(at + 1)) {
        at += 2;
        if kind == DIMS_LIST {
            let mut list = Vec::new();
            for _ in 0..n.max(0) {
                let Some(&len) = flat.get(at) else {
                    return out;
                };
                at += 1;
                let Some(dims) = take(&mut at, len) else {
                    return out;
                };
                list.push(dims);
            }
            out.push(TorchDims::List(list));
        } else {
            let Some(dims) = take(&mut at, n) else {
                return out;
            };
            out.push(TorchDims::Tensor(dims));
        }
    }
    out
}

/// The text of a flat dims encoding: `[1,128]x[128,128]`, lists `[[1,2],[3]]`.
pub(crate) fn dims_text(flat: &[i64]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let join = |s: &mut String, dims: &[i64]| {
        s.push('[');
        for (i, d) in dims.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(s, "{d}");
        }
        s.push(']');
    };
    for (i, arg) in decode_dims(flat).iter().enumerate() {
        if i > 0 {
            s.push('x');
        }
        match arg {
            TorchDims::Tensor(d) => join(&mut s, d),
            TorchDims::List(list) => {
                s.push('[');
                for (j, d) in list.iter().enumerate() {
                    if j > 0 {
                        s.push(',');
                    }
                    join(&mut s, d);
                }
                s.push(']');
            }
        }
    }
    s
}

/// Candle's name of a torch `Input type` that is an element type (`float` → `f32`).
pub(crate) fn dtype_of(torch_type: &str) -> Option<&'static str> {
    Some(match torch_type {
        "float" => "f32",
        "double" => "f64",
        "c10::Half" => "f16",
        "c10::BFloat16" => "bf16",
        "long int" => "i64",
        "int" => "i32",
        "short int" => "i16",
        "signed char" => "i8",
        "unsigned char" => "u8",
        "bool" => "bool",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_round_trip_and_text() {
        let flat = [
            DIMS_TENSOR,
            2,
            1,
            128,
            DIMS_LIST,
            2,
            1,
            3,
            0,
            DIMS_TENSOR,
            0,
        ];
        assert_eq!(
            decode_dims(&flat),
            vec![
                TorchDims::Tensor(vec![1, 128]),
                TorchDims::List(vec![vec![3], vec![]]),
                TorchDims::Tensor(vec![]),
            ]
        );
        assert_eq!(dims_text(&flat), "[1,128]x[[3],[]]x[]");
        // Malformed encodings stop, never panic.
        assert_eq!(decode_dims(&[DIMS_TENSOR, 5, 1]), vec![]);
        assert_eq!(decode_dims(&[DIMS_LIST, 3, -1]), vec![]);
        assert_eq!(decode_dims(&[DIMS_TENSOR, i64::MAX]), vec![]);
    }

    #[test]
    fn steps_hold_half_open_spans() {
        let s = |start_ns, dur_ns| TorchStep {
            number: 0,
            thread: 0,
            start_ns,
            dur_ns,
            self_ns: 0,
        };
        let steps = [s(10, 10), s(20, 5), s(40, 0)];
        assert_eq!(step_at(&steps, 9), None);
        assert_eq!(step_at(&steps, 10), Some(0));
        assert_eq!(step_at(&steps, 19), Some(0));
        assert_eq!(step_at(&steps, 20), Some(1));
        assert_eq!(step_at(&steps, 25), None);
        assert_eq!(step_at(&steps, 40), None);
    }

    #[test]
    fn dtypes() {
        assert_eq!(dtype_of("float"), Some("f32"));
        assert_eq!(dtype_of("c10::Half"), Some("f16"));
        assert_eq!(dtype_of("c10::BFloat16"), Some("bf16"));
        assert_eq!(dtype_of("double"), Some("f64"));
        assert_eq!(dtype_of("Scalar"), None);
    }
}
