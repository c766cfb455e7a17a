//! The sampled op table: each busy CPU sample named by the Candle operation it ran inside.
//!
//! Candle has no per-op hooks, so for a model from candle-transformers the samples are the
//! only way to see which Candle operations a span's own time went to. A sample's **op** is
//! the outermost frame of Candle's public API on its stack below the innermost span: a
//! `Tensor` method (`matmul`, `broadcast_add`, `cat`, `narrow`, `contiguous`, the operator
//! impls `add`, `mul`, ...), a `candle_nn` function (`softmax_last_dim`, `rms_norm`, `rope`,
//! ...), a `candle_nn` layer's `forward` (`Linear::forward`, `Embedding::forward`, ...) or an
//! optimizer's `step`. The modules whose functions count are [`CANDLE_OP_FRAMES`]; Candle's
//! kernels (`candle_core::cpu_backend`, `storage`, gemm) are below an op and inside it.
//!
//! How a stack is read (outermost frame first):
//!
//! - a frame of the model's or the program's code (any crate other than Candle's, its
//!   dependencies and Rust's runtime) below an op frame means Candle called back into code
//!   that may open spans (a module run by `Tensor::apply`, a custom op); the op is then the
//!   outermost op frame below that code, so the op is found below the innermost span;
//! - functions that only run something else ([`PASS_THROUGH`]: `Tensor::apply`,
//!   `Optimizer::backward_step`) and trait plumbing (`cpu_fwd`, `bwd`, closures) are never
//!   the op;
//! - a custom op's `Tensor::apply_op*` frame is named by the op's type in its generic
//!   arguments (`apply_op1_no_bwd<candle_nn::ops::SoftmaxLastDim>` → `softmax_last_dim`), as
//!   the small candle_nn function around it may be inlined without a frame of its own;
//! - inside `candle_core::backprop` (the `backward` pass), the op is the first op frame
//!   below backprop's own frames, named `matmul (backward)`; backprop's own work is
//!   `backward`;
//! - dropping a `Tensor` (`drop_in_place<candle_core::tensor::Tensor>`, which frees its
//!   storage when it was the last handle) is the op `drop` where no op is around it;
//! - a stack with no op frame at all, as on the worker threads that run a parallel kernel
//!   (they never see the driving thread's frames), is named from its kernel by
//!   [`WORKER_KERNELS`] (gemm's microkernels run a `matmul`); else `(no candle op)`;
//! - a stack classified the profiler's own work when loaded (its innermost frame of some
//!   code's own is the capture's, the recorder's, the sampler's or the heap tracker's:
//!   [`PROFILER_CRATES`], writing the trace, entering a `tracing` span, the step-boundary
//!   wake) is `(profiler)` whatever op it is in, as `tracegraph hot` counts it.
//!
//! Frame names are demangled Rust paths (`candle_core::tensor::Tensor::matmul`,
//! `<candle_nn::linear::Linear as candle_core::Module>::forward`) or, for functions named
//! from line tables only, unqualified with their source file (`matmul` in
//! `candle-core-0.11.1/src/tensor.rs`); generic arguments, closures and inlined markers are
//! handled for both.
//!
//! [`sampled_op_table`] lists per span path (the sample's innermost span) the samples, their
//! share and a Wilson 95 % interval on it, and two time estimates per op: **share × the
//! span's self time** (the span's duration less its child spans', a measured wall time: the
//! op's part of it, comparable with `tracegraph spans`, summing to the self time) and samples
//! × the sampler's period (CPU time over every thread, larger than the wall time where a
//! thread pool runs an op in parallel). Waiting samples (a thread pool spinning or parked:
//! [`WAITING_FRAMES`](crate::WAITING_FRAMES)) and busy samples without an op get rows of
//! their own, so each span's shares sum to 100 %. Linear in the samples and the frames of
//! the stacks they name.

use serde::Serialize;
use trace_record::schema::TimingMode;

use crate::model::intern::FastMap;
use crate::model::samples::{SampledStacks, crate_of_file, is_qualified, sampler_account};
use crate::model::trace::Trace;

/// What part of Candle's API an op frame belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// A `candle_core::Tensor` (or `Var`) method.
    Tensor,
    /// A `candle_nn` function (`softmax_last_dim`, `rms_norm`, `rope`, losses).
    Nn,
    /// A `candle_nn` (or quantized) layer's method, chiefly its `forward`.
    Layer,
    /// Candle's backward pass (`candle_core::backprop`).
    Backward,
    /// A `candle_nn` optimizer.
    Optimizer,
}

/// A module of Candle's public API whose functions are ops: functions of crate `krate` in
/// module `module` (the second segment of a qualified path, `candle_core::tensor::...`; for
/// an unqualified frame, its source file `src/<module>.rs` or `src/<module>/...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpModule {
    /// The crate (`candle_core`, `candle_nn`).
    pub krate: &'static str,
    /// The module.
    pub module: &'static str,
    /// What its functions are.
    pub kind: OpKind,
    /// The owner an unqualified frame's function is shown with (`Linear` → `Linear::forward`;
    /// a layer's functions other than `forward*` by the module: `linear::linear_no_bias`);
    /// `None`: the bare function (`matmul`). A qualified frame shows its own type.
    pub owner: Option<&'static str>,
    /// What the module holds.
    pub why: &'static str,
}

const fn op(
    krate: &'static str,
    module: &'static str,
    kind: OpKind,
    owner: Option<&'static str>,
    why: &'static str,
) -> OpModule {
    OpModule {
        krate,
        module,
        kind,
        owner,
        why,
    }
}

/// The modules of Candle's public API whose functions are ops (how stacks are read is in the
/// module docs). Kernels, storage, layouts, devices and weight loading are not ops.
pub const CANDLE_OP_FRAMES: &[OpModule] = &[
    op(
        "candle_core",
        "tensor",
        OpKind::Tensor,
        None,
        "Tensor methods and operator impls",
    ),
    op(
        "candle_core",
        "tensor_cat",
        OpKind::Tensor,
        None,
        "Tensor::cat, stack",
    ),
    op(
        "candle_core",
        "indexer",
        OpKind::Tensor,
        None,
        "Tensor::i (indexing)",
    ),
    op(
        "candle_core",
        "sort",
        OpKind::Tensor,
        None,
        "Tensor::arg_sort_last_dim",
    ),
    op(
        "candle_core",
        "conv",
        OpKind::Tensor,
        None,
        "Tensor::conv1d, conv2d",
    ),
    op(
        "candle_core",
        "custom_op",
        OpKind::Tensor,
        None,
        "Tensor::apply_op* (custom ops, named by their type)",
    ),
    op(
        "candle_core",
        "variable",
        OpKind::Tensor,
        Some("Var"),
        "Var methods",
    ),
    op(
        "candle_core",
        "backprop",
        OpKind::Backward,
        None,
        "the backward pass",
    ),
    op(
        "candle_core",
        "quantized",
        OpKind::Layer,
        Some("quantized"),
        "QMatMul and quantized tensors",
    ),
    op(
        "candle_nn",
        "ops",
        OpKind::Nn,
        None,
        "softmax_last_dim, rms_norm, layer_norm, sigmoid, ...",
    ),
    op(
        "candle_nn",
        "rotary_emb",
        OpKind::Nn,
        None,
        "rope, rope_i, rope_thd",
    ),
    op("candle_nn", "loss", OpKind::Nn, None, "losses"),
    op(
        "candle_nn",
        "activation",
        OpKind::Layer,
        Some("Activation"),
        "Activation::forward",
    ),
    op(
        "candle_nn",
        "linear",
        OpKind::Layer,
        Some("Linear"),
        "Linear::forward",
    ),
    op(
        "candle_nn",
        "embedding",
        OpKind::Layer,
        Some("Embedding"),
        "Embedding::forward",
    ),
    op(
        "candle_nn",
        "layer_norm",
        OpKind::Layer,
        Some("layer_norm"),
        "LayerNorm and RmsNorm forwards",
    ),
    op(
        "candle_nn",
        "group_norm",
        OpKind::Layer,
        Some("GroupNorm"),
        "GroupNorm::forward",
    ),
    op(
        "candle_nn",
        "batch_norm",
        OpKind::Layer,
        Some("BatchNorm"),
        "BatchNorm::forward",
    ),
    op(
        "candle_nn",
        "conv",
        OpKind::Layer,
        Some("conv"),
        "Conv1d/Conv2d forwards",
    ),
    op(
        "candle_nn",
        "rnn",
        OpKind::Layer,
        Some("rnn"),
        "LSTM and GRU steps",
    ),
    op(
        "candle_nn",
        "kv_cache",
        OpKind::Layer,
        Some("kv_cache"),
        "KV caches (append, concatenation)",
    ),
    op(
        "candle_nn",
        "optim",
        OpKind::Optimizer,
        Some("optim"),
        "SGD and AdamW steps",
    ),
];

/// Functions of op modules that only run something else and are never the op: `(crate,
/// module, function)`.
pub const PASS_THROUGH: &[(&str, &str, &str)] = &[
    // Tensor::apply(&module) runs the module's forward (a model's layer, maybe a span).
    ("candle_core", "tensor", "apply"),
    ("candle_core", "tensor", "apply_t"),
    // Optimizer::backward_step: the backward pass, then the step (each its own op).
    ("candle_nn", "optim", "backward_step"),
];

/// Functions of op modules that are trait plumbing called by Candle itself (a custom op's
/// kernels, formatting, drops), never an op of their own.
const PLUMBING: &[&str] = &[
    "cpu_fwd",
    "cuda_fwd",
    "metal_fwd",
    "fwd",
    "bwd",
    "name",
    "fmt",
    "drop",
];

/// A kernel that names the op a stack without any op frame runs (a worker thread's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerKernel {
    /// Frames of crates whose name starts with this (`gemm`: gemm, gemm_common, gemm_f32...).
    pub crate_prefix: Option<&'static str>,
    /// Or: frames whose function name contains this text (closures are named by the op that
    /// built them, in their generic arguments).
    pub func: Option<&'static str>,
    /// The op.
    pub op: &'static str,
    /// Why that kernel is that op.
    pub why: &'static str,
}

/// Kernels that tell a worker thread's op (see the module docs), in the order tried.
pub const WORKER_KERNELS: &[WorkerKernel] = &[
    WorkerKernel {
        crate_prefix: Some("gemm"),
        func: None,
        op: "matmul",
        why: "Candle's CPU matmul runs gemm (its workers run gemm's microkernels)",
    },
    WorkerKernel {
        crate_prefix: None,
        func: Some("cpu_fwd::softmax"),
        op: "softmax_last_dim",
        why: "candle_nn's softmax kernel, split over rayon's threads",
    },
    WorkerKernel {
        crate_prefix: None,
        func: Some("rotary_emb::"),
        op: "rope",
        why: "candle_nn's rotary-embedding kernels, split over rayon's threads",
    },
];

/// Crates whose frames are the capture's own work: the recording crates, the sampler, the
/// heap tracker, and the `tracing` machinery the capture's layer runs in (the list the
/// samples model classifies stacks by when a trace is loaded).
pub const PROFILER_CRATES: &[&str] = crate::model::samples::PROFILER_CRATE_NAMES;

/// The op row of busy samples in the capture's own work ([`PROFILER_CRATES`]).
pub const PROFILER_ROW: &str = "(profiler)";
/// The op row of busy samples with no Candle op on their stack.
pub const NO_CANDLE_OP: &str = "(no candle op)";
/// The op row of waiting samples (thread pools spinning or parked).
pub const WAITING_ROW: &str = "(waiting)";
/// The op row of the ops past the table's limit.
pub const OTHER_OPS: &str = "(other ops)";
/// The span path of samples taken while no span was open.
pub const NO_SPAN_PATH: &str = "(no span)";

/// What one frame says as an op frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameOp {
    /// The op's name (`matmul`, `softmax_last_dim`, `Linear::forward`).
    pub name: String,
    /// Its kind.
    pub kind: OpKind,
    /// A function that only runs something else ([`PASS_THROUGH`]): never the op.
    pub pass_through: bool,
}

/// Splits a path at `::` outside `<…>`, `(…)` and `[…]`.
fn top_segments(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'<' | b'(' | b'[' => depth += 1,
            b'>' | b')' | b']' => depth = depth.saturating_sub(1),
            b':' if depth == 0 && b.get(i + 1) == Some(&b':') => {
                out.push(&s[start..i]);
                i += 2;
                start = i;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(&s[start..]);
    out
}

/// The text inside the `<…>` that `s` starts with, and what follows it.
fn split_angle(s: &str) -> Option<(&str, &str)> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some((&s[1..i], &s[i + 1..]));
                }
            }
            _ => {}
        }
    }
    None
}

/// A type's path without references and generic arguments: `&mut a::B<T>` → `a::B`.
fn bare_type(t: &str) -> &str {
    let t = t.trim().trim_start_matches(['&', '*', ' ']);
    let t = t
        .strip_prefix("mut ")
        .or_else(|| t.strip_prefix("const "))
        .or_else(|| t.strip_prefix("dyn "))
        .unwrap_or(t);
    t.split('<').next().unwrap_or(t).trim()
}

/// Splits `<T as Trait>` / `<T>` contents at its top-level ` as `: the self type.
fn self_type(inner: &str) -> &str {
    let mut depth = 0usize;
    let b = inner.as_bytes();
    for i in 0..b.len() {
        match b[i] {
            b'<' | b'(' | b'[' => depth += 1,
            b'>' | b')' | b']' => depth = depth.saturating_sub(1),
            b' ' if depth == 0 && inner[i..].starts_with(" as ") => return &inner[..i],
            _ => {}
        }
    }
    inner
}

/// Whether a path segment is a closure or a symbol hash (`{{closure}}`, `{closure#0}`,
/// `h0123456789abcdef`).
fn is_closure(seg: &str) -> bool {
    seg.starts_with('{') && seg.contains("closure")
}

fn is_hash(seg: &str) -> bool {
    seg.len() == 17 && seg.starts_with('h') && seg[1..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// `(crate, module, owner type, function)` of a qualified function name.
type PathParts<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Option<&'a str>);

/// The parts of a qualified function name: `(crate, module, owner type, function)`, the
/// function `None` for a closure. `candle_core::tensor::Tensor::matmul` →
/// `(candle_core, tensor, Tensor, matmul)`;
/// `<candle_nn::linear::Linear as candle_core::Module>::forward` →
/// `(candle_nn, linear, Linear, forward)`;
/// `candle_core::tensor_cat::<impl candle_core::tensor::Tensor>::cat` →
/// `(candle_core, tensor_cat, Tensor, cat)`.
fn qualified_parts(func: &str) -> Option<PathParts<'_>> {
    let func = func.trim();
    let (type_path, rest): (Vec<&str>, Vec<&str>) = if func.starts_with('<') {
        let (inner, rest) = split_angle(func)?;
        let rest = rest.strip_prefix("::").unwrap_or(rest);
        (
            top_segments(bare_type(self_type(inner))),
            top_segments(rest),
        )
    } else {
        (Vec::new(), top_segments(func))
    };
    // Trailing generic arguments (`::<T>`) and hashes are no segments of the path.
    let mut rest: Vec<&str> = rest
        .into_iter()
        .filter(|s| !s.is_empty() && !is_hash(s))
        .collect();
    while rest
        .last()
        .is_some_and(|s| s.starts_with('<') && !s.starts_with("<impl "))
    {
        rest.pop();
    }
    let last = rest.last().copied()?;
    let function = (!is_closure(last) && !rest.iter().any(|s| is_closure(s)))
        .then(|| last.split('<').next().unwrap_or(last));
    let path: Vec<&str> = if type_path.is_empty() {
        rest[..rest.len() - 1].to_vec()
    } else {
        type_path
    };
    let krate = *path.first()?;
    let module = path
        .get(1)
        .copied()
        .filter(|m| !m.starts_with('<') && !m.starts_with(|c: char| c.is_ascii_uppercase()));
    // The owner: the type the function is a method of.
    let owner = path.iter().rev().find_map(|s| {
        if let Some(t) = s.strip_prefix("<impl ").and_then(|t| t.strip_suffix('>')) {
            top_segments(bare_type(t)).last().copied()
        } else {
            s.starts_with(|c: char| c.is_ascii_uppercase())
                .then(|| s.split('<').next().unwrap_or(s))
        }
    });
    Some((krate, module, owner, function))
}

/// The module of an unqualified frame's source file: the path component after its crate's
/// `src` (`candle-nn-0.11.1/src/linear.rs` → `linear`, `src/quantized/k_quants.rs` →
/// `quantized`).
fn module_of_file(file: &str) -> Option<String> {
    let file = file.replace('\\', "/");
    let parts: Vec<&str> = file.split('/').collect();
    let src = parts.iter().rposition(|p| *p == "src")?;
    let m = parts.get(src + 1)?;
    let m = m.strip_suffix(".rs").unwrap_or(m);
    (!m.is_empty() && m != "lib").then(|| m.to_string())
}

fn module_entry(krate: &str, module: &str) -> Option<&'static OpModule> {
    CANDLE_OP_FRAMES
        .iter()
        .find(|m| m.krate == krate && m.module == module)
}

/// What a frame of function `func` from source file `file` says as an op frame: `None`
/// unless it is a function (not a closure, not trait plumbing) of a module of
/// [`CANDLE_OP_FRAMES`]. Qualified names are read from their path; unqualified ones (named
/// by line tables) from their source file.
pub fn frame_op(func: &str, file: Option<&str>) -> Option<FrameOp> {
    if is_tensor_drop(func) {
        return Some(FrameOp {
            name: "drop".to_string(),
            kind: OpKind::Tensor,
            pass_through: false,
        });
    }
    let (krate, module, owner, function): (String, String, Option<&str>, &str) =
        if is_qualified(func) {
            let (krate, module, owner, function) = qualified_parts(func)?;
            (krate.to_string(), module?.to_string(), owner, function?)
        } else {
            if func.starts_with('{') {
                return None;
            }
            let file = file?;
            let krate = crate_of_file(file)?;
            let module = module_of_file(file)?;
            let function = func.split('<').next().unwrap_or(func).trim();
            (krate, module, None, function)
        };
    if function.is_empty() || PLUMBING.contains(&function) {
        return None;
    }
    let entry = module_entry(&krate, &module)?;
    let pass_through = PASS_THROUGH
        .iter()
        .any(|&(k, m, f)| k == krate && m == module && f == function);
    let owner = match (entry.kind, owner) {
        // Tensor methods by their own name; `Var::set`.
        (OpKind::Tensor, Some("Tensor")) | (OpKind::Nn | OpKind::Backward, _) => None,
        (_, Some(o)) => Some(o),
        // A layer's `forward` by its type; its other functions (constructors such as
        // `linear_no_bias`) by their module, the file telling no type.
        (OpKind::Layer, None) if !function.starts_with("forward") => Some(entry.module),
        (_, None) => entry.owner,
    };
    let custom = (entry.module == "custom_op" && function.starts_with("apply_op"))
        .then(|| custom_op_name(func))
        .flatten();
    let name = match (entry.kind, custom) {
        (OpKind::Backward, _) => "backward".to_string(),
        (_, Some(c)) => c,
        _ => match owner {
            Some(o) => format!("{o}::{function}"),
            None => function.to_string(),
        },
    };
    Some(FrameOp {
        name,
        kind: entry.kind,
        pass_through,
    })
}

/// Whether a frame drops a `Tensor` handle: `core::ptr::drop_in_place<candle_core::tensor::Tensor>`
/// (qualified, or unqualified as line tables name it).
fn is_tensor_drop(func: &str) -> bool {
    let f = func.strip_prefix("core::ptr::").unwrap_or(func);
    f.strip_prefix("drop_in_place")
        .filter(|rest| rest.starts_with('<'))
        .and_then(split_angle)
        .is_some_and(|(inner, _)| bare_type(inner) == "candle_core::tensor::Tensor")
}

/// Custom ops of candle_nn whose name is not their type's in snake case.
const CUSTOM_OP_NAMES: &[(&str, &str)] = &[
    ("RotaryEmb", "rope"),
    ("RotaryEmbI", "rope_i"),
    ("RotaryEmbThd", "rope_thd"),
];

/// The op a `Tensor::apply_op*` frame runs, from the custom op's type in its generic
/// arguments: `apply_op1_no_bwd<candle_nn::ops::SoftmaxLastDim>` → `softmax_last_dim` (the
/// op the candle_nn function that calls it is named by, where that function left no frame of
/// its own, being inlined without a record); `None` without one.
fn custom_op_name(func: &str) -> Option<String> {
    let at = func.find("apply_op")?;
    let open = at + func[at..].find('<')?;
    let (inner, _) = split_angle(&func[open..])?;
    let ty = top_segments(bare_type(inner)).last().copied()?;
    let ty = ty.split('<').next().unwrap_or(ty);
    if !ty.starts_with(|c: char| c.is_ascii_uppercase()) {
        return None;
    }
    if let Some(&(_, n)) = CUSTOM_OP_NAMES.iter().find(|(t, _)| *t == ty) {
        return Some(n.to_string());
    }
    Some(crate::events::op_class::camel_to_snake(ty))
}

/// Crates whose frames between two op frames do not mean Candle called back into a model's
/// code: Rust's runtime, Candle, and the crates Candle runs its kernels with.
fn is_candle_side(krate: Option<&str>) -> bool {
    match krate {
        None => true,
        Some(k) => {
            matches!(
                k,
                "core"
                    | "std"
                    | "alloc"
                    | "candle_core"
                    | "candle_nn"
                    | "rayon"
                    | "rayon_core"
                    | "half"
                    | "num_traits"
                    | "parking_lot"
                    | "parking_lot_core"
                    | "lock_api"
                    | "libm"
            ) || k.starts_with("gemm")
                || k.starts_with("crossbeam")
        }
    }
}

/// The op of a stack whose frames `ops` (outermost first) say what [`frame_op`] says, with
/// `foreign` true for frames of code outside Candle's side ([`is_candle_side`]): the index of
/// the op frame and, inside backward, of the op below it (see the module docs).
fn stack_op_frames(ops: &[(Option<&FrameOp>, bool)]) -> Option<(usize, Option<usize>)> {
    let mut cand: Option<usize> = None;
    let mut reset = false;
    for (i, (op, foreign)) in ops.iter().enumerate() {
        if *foreign {
            reset |= cand.is_some();
            continue;
        }
        if op.is_some_and(|o| !o.pass_through) && (cand.is_none() || reset) {
            cand = Some(i);
            reset = false;
        }
    }
    let c = cand?;
    let inner = match ops[c].0 {
        Some(o) if o.kind == OpKind::Backward => ops[c + 1..]
            .iter()
            .position(|(op, _)| op.is_some_and(|o| !o.pass_through && o.kind != OpKind::Backward))
            .map(|p| c + 1 + p),
        _ => None,
    };
    Some((c, inner))
}

/// Per frame of a trace's sampled stacks: what it says as an op frame, whether it is
/// foreign code, and which worker kernel it is.
struct FrameOps {
    ops: Vec<Option<FrameOp>>,
    foreign: Vec<bool>,
    kernel: Vec<Option<&'static str>>,
}

/// What a stack's samples ran inside.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Attribution {
    /// A Candle op: its name, kind, and whether a worker kernel named it.
    Op(String, OpKind, bool),
    /// The capture's own work.
    Profiler,
    /// Nothing of Candle's.
    NoOp,
}

impl FrameOps {
    fn new(s: &SampledStacks) -> Self {
        let n = s.frame_count();
        let (mut ops, mut foreign, mut kernel) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (i, f) in s.frames().enumerate() {
            let krate = s.frame_crate(i as u32);
            ops.push(frame_op(f.func, f.file));
            foreign.push(!is_candle_side(krate));
            kernel.push(worker_kernel(f.func, krate));
        }
        FrameOps {
            ops,
            foreign,
            kernel,
        }
    }

    /// What a stack (frame indices, outermost first) ran inside (see the module docs);
    /// `profiler`: the stack is classified the profiler's own work.
    fn attribute(&self, frames: &[u32], profiler: bool) -> Attribution {
        if profiler {
            return Attribution::Profiler;
        }
        match self.stack_op(frames) {
            Some((name, kind, worker)) => Attribution::Op(name, kind, worker),
            None => Attribution::NoOp,
        }
    }

    /// The op of a stack (frame indices, outermost first) and whether a worker kernel named
    /// it; `None`: no Candle op.
    fn stack_op(&self, frames: &[u32]) -> Option<(String, OpKind, bool)> {
        let view: Vec<(Option<&FrameOp>, bool)> = frames
            .iter()
            .map(|&f| {
                (
                    self.ops.get(f as usize).and_then(Option::as_ref),
                    self.foreign.get(f as usize).copied().unwrap_or(false),
                )
            })
            .collect();
        if let Some((c, inner)) = stack_op_frames(&view) {
            let op = view[c].0?;
            return Some(match inner.and_then(|i| view[i].0) {
                Some(io) => (format!("{} (backward)", io.name), OpKind::Backward, false),
                None => (op.name.clone(), op.kind, false),
            });
        }
        frames
            .iter()
            .find_map(|&f| self.kernel.get(f as usize).copied().flatten())
            .map(|k| (k.to_string(), OpKind::Tensor, true))
    }
}

/// The worker kernel a frame of `func` in crate `krate` is, if any ([`WORKER_KERNELS`]).
pub fn worker_kernel(func: &str, krate: Option<&str>) -> Option<&'static str> {
    WORKER_KERNELS
        .iter()
        .find(|k| {
            k.crate_prefix
                .is_some_and(|p| krate.is_some_and(|c| c.starts_with(p)))
                || k.func.is_some_and(|t| func.contains(t))
        })
        .map(|k| k.op)
}

/// What one stack ran inside, its op interned in [`StackOps::names`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StackOp {
    /// The op's id, and whether a worker kernel named it.
    Op(u32, bool),
    /// The capture's own work ([`PROFILER_ROW`]).
    Profiler,
    /// No Candle op ([`NO_CANDLE_OP`]).
    NoOp,
}

/// Per distinct stack (by wire id) of a trace: its op, interned (see [`stack_ops`]).
pub(crate) struct StackOps {
    /// Op names, by id.
    pub(crate) names: Vec<(String, OpKind)>,
    /// Per stack wire id: what it ran inside.
    pub(crate) of_stack: FastMap<u64, StackOp>,
}

impl StackOps {
    /// The row name of a stack (by wire id): its op, [`PROFILER_ROW`] or [`NO_CANDLE_OP`].
    pub(crate) fn row_name(&self, stack: u64) -> &str {
        match self.of_stack.get(&stack) {
            Some(StackOp::Op(id, _)) => self
                .names
                .get(*id as usize)
                .map_or(NO_CANDLE_OP, |(n, _)| n.as_str()),
            Some(StackOp::Profiler) => PROFILER_ROW,
            _ => NO_CANDLE_OP,
        }
    }
}

/// The op of every stack that the trace's samples name, each stack read once. Linear in the
/// frames of those stacks.
pub(crate) fn stack_ops(trace: &Trace) -> StackOps {
    let s = &trace.sampled;
    let frames = FrameOps::new(s);
    let mut names: Vec<(String, OpKind)> = Vec::new();
    let mut index: FastMap<String, u32> = FastMap::default();
    let mut of_stack: FastMap<u64, StackOp> = FastMap::default();
    for row in &s.samples {
        if of_stack.contains_key(&row.stack) {
            continue;
        }
        let stack = s.stack(row.stack);
        trace.work.add(stack.len() as u64);
        let op = match frames.attribute(stack, s.stack_is_profiler(row.stack)) {
            Attribution::Op(name, kind, worker) => {
                let id = if let Some(&id) = index.get(&name) {
                    id
                } else {
                    let id = names.len() as u32;
                    index.insert(name.clone(), id);
                    names.push((name, kind));
                    id
                };
                StackOp::Op(id, worker)
            }
            Attribution::Profiler => StackOp::Profiler,
            Attribution::NoOp => StackOp::NoOp,
        };
        of_stack.insert(row.stack, op);
    }
    trace
        .work
        .add(s.samples.len() as u64 + s.frame_count() as u64);
    StackOps { names, of_stack }
}

/// A Wilson score interval at 95 % on a share of `k` in `n` trials; `(0, 1)` for `n = 0`.
pub fn wilson_95(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let z = 1.959_963_984_540_054_f64;
    let (k, n) = (k.min(n) as f64, n as f64);
    let p = k / n;
    let z2n = z * z / n;
    let center = (p + z2n / 2.0) / (1.0 + z2n);
    let half = z / (1.0 + z2n) * (p * (1.0 - p) / n + z2n / (4.0 * n)).sqrt();
    ((center - half).max(0.0), (center + half).min(1.0))
}

/// Options of [`sampled_op_table`].
#[derive(Debug, Clone, Default)]
pub struct SampledOpOptions {
    /// At most this many op rows per span path (the rest summed in one [`OTHER_OPS`] row);
    /// `None`: all.
    pub limit: Option<usize>,
}

/// One row of a span path's sampled ops.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SampledOpRow {
    /// The op (`matmul`, `Linear::forward`, `matmul (backward)`), or [`NO_CANDLE_OP`],
    /// [`PROFILER_ROW`], [`WAITING_ROW`], [`OTHER_OPS`].
    pub op: String,
    /// The op's kind; `None` for the rows that are no op.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<OpKind>,
    /// Samples in it.
    pub samples: u64,
    /// Of them, samples of worker threads named by their kernel ([`WORKER_KERNELS`]).
    pub worker_samples: u64,
    /// `samples` over the span path's samples: the share of the span's self time the op
    /// explains.
    pub share: f64,
    /// The Wilson 95 % interval on `share`: low end.
    pub share_low: f64,
    /// High end.
    pub share_high: f64,
    /// `share` × the span path's self time (ns): the op's estimated part of the measured
    /// self time; `None` without a self time (no span).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub est_self_ns: Option<u64>,
    /// `samples` × the sampler's period (ns): estimated CPU time over every thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub est_cpu_ns: Option<u64>,
}

/// The sampled ops of one span path: the samples whose innermost span has that path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpanOps {
    /// The span path (as `tracegraph spans` shows it), or [`NO_SPAN_PATH`].
    pub path: String,
    /// Depth of the path (0 for a root; 0 for no span).
    pub depth: u32,
    /// The path's self time: its spans' durations less their child spans' (and the ops
    /// recorded directly in them), summed over every step; `None` for no span.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub self_ns: Option<u64>,
    /// Samples whose innermost span has this path.
    pub samples: u64,
    /// Of them, waiting (thread pools spinning or parked).
    pub waiting: u64,
    /// Of them, busy samples inside a named Candle op.
    pub in_ops: u64,
    /// Of them, busy samples in the capture's own work ([`PROFILER_ROW`]).
    pub profiler: u64,
    /// Rows: ops by samples (descending), then [`OTHER_OPS`], [`PROFILER_ROW`],
    /// [`NO_CANDLE_OP`], [`WAITING_ROW`] where they have samples; shares sum to 1.
    pub rows: Vec<SampledOpRow>,
}

/// The sampled op table (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SampledOpTable {
    /// How the spans' times were measured.
    pub timing: TimingMode,
    /// Samples in the trace's steps.
    pub samples: u64,
    /// Of them, waiting.
    pub waiting: u64,
    /// Of them, busy samples inside a named Candle op.
    pub in_ops: u64,
    /// Of them, busy samples in the capture's own work ([`PROFILER_ROW`]).
    pub profiler: u64,
    /// The sampler's requested rate (the largest over the steps), samples per CPU second.
    pub requested_hz: u64,
    /// Nanoseconds of CPU per sample: the process's CPU time over the samples taken where the
    /// sampler reported it, else the requested period; `None` when it said neither.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns_per_sample: Option<f64>,
    /// Per span path with samples, in the span tree's order (children by total time), the
    /// samples in no span first.
    pub spans: Vec<SpanOps>,
    /// A count passed `u64::MAX` and stopped there (hostile or corrupt counts).
    pub saturated: bool,
}

impl SampledOpTable {
    /// The table's totals in words, as the CLI's header and the report's note both give
    /// them: `N samples: X (p%) in named Candle ops, P (q%) the profiler's own, W (r%) waiting`
    /// (shares of all samples; `-` with no samples).
    pub fn totals(&self) -> String {
        let share = |k: u64| {
            if self.samples > 0 {
                crate::format::format_share(k as f64 / self.samples as f64)
            } else {
                "-".to_string()
            }
        };
        format!(
            "{} samples: {} ({}) in named Candle ops, {} ({}) the profiler's own, {} ({}) waiting",
            self.samples,
            self.in_ops,
            share(self.in_ops),
            self.profiler,
            share(self.profiler),
            self.waiting,
            share(self.waiting),
        )
    }
}

#[derive(Default, Clone)]
struct PathAcc {
    samples: u64,
    waiting: u64,
    no_op: u64,
    profiler: u64,
    /// Per op id: (samples, worker samples).
    ops: FastMap<u32, (u64, u64)>,
}

/// The sampled op table of a trace: per span path, the Candle ops its busy samples ran inside
/// (see the module docs); `None` when the trace has no samples. O(n log n) in the spans and
/// ops per path, linear in the samples and the frames of their stacks.
pub fn sampled_op_table(trace: &Trace, opts: &SampledOpOptions) -> Option<SampledOpTable> {
    let s = &trace.sampled;
    if s.is_empty() {
        return None;
    }
    let ops = stack_ops(trace);
    let tree = crate::events::spans::path_tree(trace);
    // Span wire id → path id.
    let span_path: FastMap<u64, u32> = trace
        .spans
        .iter()
        .zip(&tree.path_of)
        .map(|(sp, &p)| (sp.id, p))
        .collect();
    // Path id → node index.
    let mut node_of = vec![u32::MAX; tree.nodes.len()];
    for (i, n) in tree.nodes.iter().enumerate() {
        if let Some(slot) = node_of.get_mut(n.path_id as usize) {
            *slot = i as u32;
        }
    }
    let mut sat = false;
    let mut add = |a: &mut u64, x: u64| {
        if let Some(v) = a.checked_add(x) {
            *a = v;
        } else {
            *a = u64::MAX;
            sat = true;
        }
    };
    // Per node, plus one for no span (last).
    let no_span = tree.nodes.len();
    let mut acc: Vec<PathAcc> = vec![PathAcc::default(); tree.nodes.len() + 1];
    let (mut total, mut waiting, mut in_ops, mut profiler) = (0u64, 0u64, 0u64, 0u64);
    for row in &s.samples {
        let node = row
            .span
            .and_then(|id| span_path.get(&id))
            .and_then(|&p| node_of.get(p as usize))
            .filter(|&&n| n != u32::MAX)
            .map_or(no_span, |&n| n as usize);
        let a = &mut acc[node];
        add(&mut total, row.n);
        add(&mut a.samples, row.n);
        if s.stack_is_waiting(row.stack) {
            add(&mut waiting, row.n);
            add(&mut a.waiting, row.n);
            continue;
        }
        match ops.of_stack.get(&row.stack).copied() {
            Some(StackOp::Op(op, worker)) => {
                add(&mut in_ops, row.n);
                let e = a.ops.entry(op).or_default();
                add(&mut e.0, row.n);
                if worker {
                    add(&mut e.1, row.n);
                }
            }
            Some(StackOp::Profiler) => {
                add(&mut profiler, row.n);
                add(&mut a.profiler, row.n);
            }
            Some(StackOp::NoOp) | None => add(&mut a.no_op, row.n),
        }
    }
    trace.work.add(s.samples.len() as u64);
    // The same per-sample figure as `hot`'s account over every step.
    let account = sampler_account(s, |_| true);
    let (requested_hz, per) = (account.requested_hz, account.ns_per_sample());
    let make = |op: String, kind: Option<OpKind>, k: u64, w: u64, n: u64, self_ns: Option<u64>| {
        let share = if n > 0 { k as f64 / n as f64 } else { 0.0 };
        let (lo, hi) = wilson_95(k, n);
        SampledOpRow {
            op,
            kind,
            samples: k,
            worker_samples: w,
            share,
            share_low: lo,
            share_high: hi,
            est_self_ns: self_ns.map(|t| (t as f64 * share).round() as u64),
            est_cpu_ns: per.map(|p| (k as f64 * p).round() as u64),
        }
    };
    let mut spans = Vec::new();
    let mut paths = tree.display_paths();
    let order = std::iter::once(no_span).chain(0..tree.nodes.len());
    for i in order {
        let a = &acc[i];
        if a.samples == 0 {
            continue;
        }
        let (path, depth, self_ns) = if i == no_span {
            (NO_SPAN_PATH.to_string(), 0, None)
        } else {
            let n = &tree.nodes[i];
            (
                paths.path_of(i).unwrap_or_else(|| tree.full_path(i)),
                n.depth,
                Some(n.self_ns),
            )
        };
        let mut list: Vec<(u32, (u64, u64))> = a.ops.iter().map(|(&k, &v)| (k, v)).collect();
        list.sort_by(|x, y| {
            y.1.0
                .cmp(&x.1.0)
                .then_with(|| ops.names[x.0 as usize].0.cmp(&ops.names[y.0 as usize].0))
        });
        trace.work.add_sort(list.len());
        let keep = opts.limit.unwrap_or(usize::MAX).min(list.len());
        let n = a.samples;
        let mut rows: Vec<SampledOpRow> = list[..keep]
            .iter()
            .map(|&(id, (k, w))| {
                let (name, kind) = &ops.names[id as usize];
                make(name.clone(), Some(*kind), k, w, n, self_ns)
            })
            .collect();
        let span_in_ops = list
            .iter()
            .fold(0u64, |t, &(_, (k, _))| t.saturating_add(k));
        let (rest, rest_w) = list[keep..]
            .iter()
            .fold((0u64, 0u64), |(t, tw), &(_, (k, w))| {
                (t.saturating_add(k), tw.saturating_add(w))
            });
        if rest > 0 {
            rows.push(make(OTHER_OPS.into(), None, rest, rest_w, n, self_ns));
        }
        if a.profiler > 0 {
            rows.push(make(PROFILER_ROW.into(), None, a.profiler, 0, n, self_ns));
        }
        if a.no_op > 0 {
            rows.push(make(NO_CANDLE_OP.into(), None, a.no_op, 0, n, self_ns));
        }
        if a.waiting > 0 {
            rows.push(make(WAITING_ROW.into(), None, a.waiting, 0, n, self_ns));
        }
        spans.push(SpanOps {
            path,
            depth,
            self_ns,
            samples: n,
            waiting: a.waiting,
            in_ops: span_in_ops,
            profiler: a.profiler,
            rows,
        });
    }
    Some(SampledOpTable {
        timing: trace.run.timing,
        samples: total,
        waiting,
        in_ops,
        profiler,
        requested_hz,
        ns_per_sample: per,
        spans,
        saturated: sat,
    })
}

#[cfg(test)]
mod tests;
