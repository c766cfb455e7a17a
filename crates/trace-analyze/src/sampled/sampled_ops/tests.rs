//! Tests of the sampled op table: frame attribution, worker kernels, spans, waiting, intervals.

use super::*;
use trace_record::schema::{Event, FrameEvent, StackEvent};

const TENSOR: Option<&str> = Some("/r/candle-core-0.11.1/src/tensor.rs");
const STORAGE: Option<&str> = Some("/r/candle-core-0.11.1/src/storage.rs");
const CPU: Option<&str> = Some("/r/candle-core-0.11.1/src/cpu_backend/mod.rs");
const NN_OPS: Option<&str> = Some("/r/candle-nn-0.11.1/src/ops.rs");
const LINEAR: Option<&str> = Some("/r/candle-nn-0.11.1/src/linear.rs");
const LLAMA: Option<&str> = Some("/r/candle-transformers-0.11.1/src/models/llama.rs");
const BACKPROP: Option<&str> = Some("/r/candle-core-0.11.1/src/backprop.rs");

fn name(func: &str, file: Option<&str>) -> Option<String> {
    frame_op(func, file)
        .filter(|o| !o.pass_through)
        .map(|o| o.name)
}

#[test]
fn op_frames_qualified_and_by_line_tables() {
    let is = |func: &str, file: Option<&str>, want: &str| {
        assert_eq!(name(func, file).as_deref(), Some(want), "{func} {file:?}");
    };
    // Qualified names (symbol tables, full debug information).
    is("candle_core::tensor::Tensor::matmul", None, "matmul");
    is(
        "candle_core::tensor::Tensor::broadcast_add",
        None,
        "broadcast_add",
    );
    is(
        "candle_core::tensor::Tensor::narrow::<usize>",
        None,
        "narrow",
    );
    is(
        "candle_core::tensor::Tensor::contiguous::h0123456789abcdef",
        None,
        "contiguous",
    );
    is(
        "<candle_core::tensor::Tensor as core::ops::arith::Add>::add",
        None,
        "add",
    );
    is(
        "<&candle_core::tensor::Tensor as core::ops::arith::Mul<f64>>::mul",
        None,
        "mul",
    );
    is(
        "candle_core::tensor_cat::<impl candle_core::tensor::Tensor>::cat",
        None,
        "cat",
    );
    is(
        "<candle_core::tensor::Tensor>::reshape::<(usize, usize)>",
        None,
        "reshape",
    );
    is("candle_nn::ops::softmax_last_dim", None, "softmax_last_dim");
    is("candle_nn::ops::rms_norm", None, "rms_norm");
    is("candle_nn::rotary_emb::rope", None, "rope");
    is(
        "<candle_nn::linear::Linear as candle_core::Module>::forward",
        None,
        "Linear::forward",
    );
    is(
        "<candle_nn::layer_norm::RmsNorm as candle_core::Module>::forward",
        None,
        "RmsNorm::forward",
    );
    is(
        "<candle_nn::embedding::Embedding as candle_core::Module>::forward",
        None,
        "Embedding::forward",
    );
    is(
        "candle_core::backprop::<impl candle_core::tensor::Tensor>::backward",
        None,
        "backward",
    );
    is("candle_core::variable::Var::set", None, "Var::set");
    is(
        "<candle_nn::optim::AdamW as candle_nn::optim::Optimizer>::step",
        None,
        "AdamW::step",
    );
    // Line tables: unqualified, with their file (as the sampler records them).
    is("matmul", TENSOR, "matmul");
    is("add<candle_core::tensor::Tensor>", TENSOR, "add");
    is("reshape<(usize, usize)>", TENSOR, "reshape");
    is("argmax<usize>", TENSOR, "argmax");
    is("softmax_last_dim", NN_OPS, "softmax_last_dim");
    is("forward", LINEAR, "Linear::forward");
    is("linear_no_bias", LINEAR, "linear::linear_no_bias");
    is(
        "forward_t",
        Some("/r/candle-nn-0.11.1/src/batch_norm.rs"),
        "BatchNorm::forward_t",
    );
    is(
        "append",
        Some("/r/candle-nn-0.11.1/src/kv_cache.rs"),
        "kv_cache::append",
    );
    is(
        "candle_nn::kv_cache::KvCache::append",
        None,
        "KvCache::append",
    );
    is(
        "step",
        Some("/r/candle-nn-0.11.1/src/optim.rs"),
        "optim::step",
    );
    is(
        "set",
        Some("/r/candle-core-0.11.1/src/variable.rs"),
        "Var::set",
    );
    is("backward", BACKPROP, "backward");
    is(
        "cat<candle_core::tensor::Tensor>",
        Some("C:\\r\\candle-core-0.11.1\\src\\tensor_cat.rs"),
        "cat",
    );
    is(
        "rope",
        Some("/r/candle-nn-0.11.1/src/rotary_emb.rs"),
        "rope",
    );
    // Dropping a Tensor handle (freeing its storage when it was the last one).
    is(
        "drop_in_place<candle_core::tensor::Tensor>",
        Some("library/core/src/ptr/mod.rs"),
        "drop",
    );
    is(
        "core::ptr::drop_in_place<candle_core::tensor::Tensor>",
        None,
        "drop",
    );
    // A custom op by its type (the candle_nn function around it inlined away).
    let custom_op = Some("/r/candle-core-0.11.1/src/custom_op.rs");
    is(
        "apply_op1_no_bwd<candle_nn::ops::SoftmaxLastDim>",
        custom_op,
        "softmax_last_dim",
    );
    is(
        "apply_op2_no_bwd<candle_nn::ops::RmsNorm>",
        custom_op,
        "rms_norm",
    );
    is(
        "apply_op3_no_bwd<candle_nn::rotary_emb::RotaryEmb>",
        custom_op,
        "rope",
    );
    is("apply_op1<&my_model::Fancy<f32>>", custom_op, "fancy");
    is("apply_op1_arc", custom_op, "apply_op1_arc");
    is(
        "candle_core::custom_op::<impl candle_core::tensor::Tensor>::apply_op1_no_bwd::<candle_nn::ops::SoftmaxLastDim>",
        None,
        "softmax_last_dim",
    );
}

#[test]
fn kernels_closures_plumbing_and_other_crates_are_no_op_frames() {
    for (func, file) in [
        // Candle's kernels and storage: inside an op, never one.
        ("candle_core::cpu_backend::utils::unary_map", None),
        (
            "<candle_core::cpu_backend::MatMul as candle_core::cpu_backend::utils::Map2>::f",
            None,
        ),
        ("candle_core::storage::Storage::matmul", None),
        ("matmul", STORAGE),
        ("matmul", CPU),
        ("binary_impl<candle_core::op::Add>", CPU),
        (
            "f32_vec<candle_core::op::Sub>",
            Some("/r/candle-core-0.11.1/src/op.rs"),
        ),
        ("gemm_f32::microkernel::fma::f32::x3x4", None),
        // Closures and trait plumbing of op modules.
        ("{closure#0}<f32>", TENSOR),
        ("{closure#0}", NN_OPS),
        ("candle_core::tensor::Tensor::to_vec1::{{closure}}", None),
        ("candle_core::tensor::Tensor::to_vec1::{closure#0}", None),
        ("cpu_fwd", NN_OPS),
        (
            "<candle_nn::ops::SoftmaxLastDim as candle_core::custom_op::CustomOp1>::cpu_fwd",
            None,
        ),
        // Drops of a tensor's parts (below the Tensor handle's drop, which is an op).
        (
            "drop_in_place<candle_core::layout::Layout>",
            Some("library/core/src/ptr/mod.rs"),
        ),
        (
            "core::ptr::drop_in_place<alloc::sync::Arc<candle_core::tensor::Tensor_>>",
            None,
        ),
        (
            "core::ptr::drop_in_place<alloc::vec::Vec<candle_core::tensor::Tensor>>",
            None,
        ),
        // Weight loading, devices, shapes; the model's own code.
        ("get", Some("/r/candle-nn-0.11.1/src/var_builder.rs")),
        ("zeros", Some("/r/candle-core-0.11.1/src/device.rs")),
        ("candle_core::shape::Shape::elem_count", None),
        ("forward", LLAMA),
        ("candle_transformers::models::llama::Llama::forward", None),
        ("my_model::matmul", None),
        ("matmul", None),
        ("malloc", None),
    ] {
        assert_eq!(name(func, file), None, "{func} {file:?} is no op");
    }
    // Pass-through functions are op frames, never the op.
    for (func, file) in [
        ("apply<candle_nn::linear::Linear>", TENSOR),
        ("candle_core::tensor::Tensor::apply", None),
        ("backward_step", Some("/r/candle-nn-0.11.1/src/optim.rs")),
    ] {
        assert!(
            frame_op(func, file).is_some_and(|o| o.pass_through),
            "{func}"
        );
    }
    assert!(CANDLE_OP_FRAMES.iter().all(|m| !m.why.is_empty()));
    assert!(WORKER_KERNELS.iter().all(|k| !k.why.is_empty()));
}

/// The op of one stack of `(func, file)` frames, outermost first, as a trace loads it.
fn op_of(frames: &[(&str, Option<&str>)]) -> Option<String> {
    let mut s = SampledStacks::default();
    for (i, (func, file)) in frames.iter().enumerate() {
        s.add(&Event::Frame(FrameEvent {
            id: i as u64,
            func: (*func).into(),
            file: file.map(str::to_string),
            inlined: false,
        }));
    }
    s.add(&Event::Stack(StackEvent {
        id: 1,
        frames: (0..frames.len() as u64).collect(),
    }));
    FrameOps::new(&s).stack_op(s.stack(1)).map(|(n, _, _)| n)
}

/// What one stack of `(func, file)` frames, outermost first, ran inside.
fn attribution_of(frames: &[(&str, Option<&str>)]) -> Attribution {
    let mut s = SampledStacks::default();
    for (i, (func, file)) in frames.iter().enumerate() {
        s.add(&Event::Frame(FrameEvent {
            id: i as u64,
            func: (*func).into(),
            file: file.map(str::to_string),
            inlined: false,
        }));
    }
    s.add(&Event::Stack(StackEvent {
        id: 1,
        frames: (0..frames.len() as u64).collect(),
    }));
    FrameOps::new(&s).attribute(s.stack(1), s.stack_is_profiler(1))
}

#[test]
fn tensor_drops_are_an_op_and_the_captures_own_work_is_the_profilers() {
    let main = ("main", Some("/w/crates/app/src/main.rs"));
    let ptr = Some("library/core/src/ptr/mod.rs");
    let capture = (
        "op_active<app::run::{closure_env#1}>",
        Some("/w/crates/trace-candle/src/capture.rs"),
    );
    let drop_tensor = ("drop_in_place<candle_core::tensor::Tensor>", ptr);
    let free = [
        ("drop_in_place<candle_core::tensor::Tensor_>", ptr),
        ("__GI___libc_free", Some("malloc/malloc.c")),
    ];
    // The model's code dropping an intermediate tensor: the op `drop`.
    let mut stack = vec![main, capture, ("forward", LLAMA), drop_tensor];
    stack.extend(free);
    assert_eq!(
        attribution_of(&stack),
        Attribution::Op("drop".into(), OpKind::Tensor, false)
    );
    // Inside an op, the op.
    let mut stack = vec![main, ("forward", LINEAR), ("matmul", TENSOR), drop_tensor];
    stack.extend(free);
    assert_eq!(op_of(&stack).as_deref(), Some("Linear::forward"));
    // Entering a model's `tracing` span, writing the trace: the profiler.
    assert_eq!(
        attribution_of(&[
            main,
            capture,
            (
                "forward",
                Some("/r/candle-transformers-0.11.1/src/models/with_tracing.rs")
            ),
            ("enter", Some("/r/tracing-0.1.44/src/span.rs")),
            (
                "on_enter<tracing_subscriber::registry::sharded::Registry>",
                Some("/w/crates/trace-candle/src/layer.rs"),
            ),
            ("raw", Some("/w/crates/trace-record/src/json.rs")),
            ("__memcpy_avx512_unaligned_erms", None),
        ]),
        Attribution::Profiler
    );
    // The model's own code inside the capture's op scope: no op, not the profiler.
    assert_eq!(
        attribution_of(&[
            main,
            capture,
            ("forward", LLAMA),
            (
                "branch<candle_core::tensor::Tensor>",
                Some("library/core/src/result.rs")
            ),
        ]),
        Attribution::NoOp
    );
    assert_eq!(attribution_of(&[]), Attribution::NoOp);
}

#[test]
fn the_outermost_op_below_the_models_code_wins() {
    let main = ("main", Some("/w/crates/app/src/main.rs"));
    let llama = ("forward", LLAMA);
    // Kernels below a Tensor method are inside it.
    assert_eq!(
        op_of(&[
            main,
            llama,
            ("matmul", TENSOR),
            ("matmul", STORAGE),
            ("matmul", CPU),
            ("gemm_f32::microkernel::fma::f32::x3x4", None),
        ])
        .as_deref(),
        Some("matmul")
    );
    // A candle_nn function calling Tensor methods: the outermost, softmax_last_dim.
    assert_eq!(
        op_of(&[
            main,
            llama,
            ("softmax_last_dim", NN_OPS),
            (
                "apply_op1_no_bwd<candle_nn::ops::SoftmaxLastDim>",
                Some("/r/candle-core-0.11.1/src/custom_op.rs")
            ),
            ("cpu_fwd", NN_OPS),
            ("softmax<f32>", NN_OPS),
        ])
        .as_deref(),
        Some("softmax_last_dim")
    );
    // A layer's forward over matmul: the layer.
    assert_eq!(
        op_of(&[
            main,
            (
                "forward",
                Some("/r/candle-transformers-0.11.1/src/models/with_tracing.rs")
            ),
            ("forward", LINEAR),
            ("matmul", TENSOR),
        ])
        .as_deref(),
        Some("Linear::forward")
    );
    // Tensor::apply runs a model's module (which may open a span): the op is below it.
    assert_eq!(
        op_of(&[
            main,
            ("candle_core::tensor::Tensor::apply", None),
            ("my_model::Block::forward", None),
            ("candle_core::tensor::Tensor::broadcast_add", None),
            ("candle_core::cpu_backend::utils::binary_map", None),
        ])
        .as_deref(),
        Some("broadcast_add")
    );
    // ... and when the module is Candle's own layer, that layer.
    assert_eq!(
        op_of(&[
            main,
            ("apply<candle_nn::linear::Linear>", TENSOR),
            ("forward", LINEAR),
            ("t", TENSOR),
        ])
        .as_deref(),
        Some("Linear::forward")
    );
    // A model's code inside an op with no op below it (a custom op's kernel): the op.
    assert_eq!(
        op_of(&[
            main,
            (
                "candle_core::custom_op::<impl candle_core::tensor::Tensor>::apply_op1",
                None
            ),
            (
                "<my_model::MyOp as candle_core::custom_op::CustomOp1>::cpu_fwd",
                None
            ),
        ])
        .as_deref(),
        Some("apply_op1")
    );
    // Backward: the op below backprop's frames.
    assert_eq!(
        op_of(&[
            main,
            ("backward_step", Some("/r/candle-nn-0.11.1/src/optim.rs")),
            ("backward", BACKPROP),
            ("matmul", TENSOR),
            ("matmul", CPU),
        ])
        .as_deref(),
        Some("matmul (backward)")
    );
    assert_eq!(
        op_of(&[main, ("backward", BACKPROP), ("sorted_nodes", BACKPROP)]).as_deref(),
        Some("backward")
    );
    // No op: the model's own code, the runtime.
    assert_eq!(op_of(&[main, llama, ("malloc", None)]), None);
    assert_eq!(op_of(&[]), None);
    // Worker threads: named by their kernel.
    assert_eq!(
        op_of(&[
            (
                "std::sys::pal::unix::thread::Thread::new::thread_start",
                None
            ),
            ("rayon_core::registry::WorkerThread::wait_until_cold", None),
            ("gemm_common::gemm::gemm_basic_generic::{{closure}}", None),
            ("gemm_f32::microkernel::fma::f32::x3x4", None),
        ])
        .as_deref(),
        Some("matmul")
    );
    assert_eq!(
        op_of(&[
            ("rayon_core::registry::WorkerThread::wait_until_cold", None),
            (
                "for_each<rayon::iter::zip::Zip<rayon::slice::chunks::Chunks<f32>, rayon::slice::chunks::ChunksMut<f32>>, candle_nn::ops::{impl#3}::cpu_fwd::softmax::{closure_env#0}<f32>>",
                Some("/r/rayon-1.10.0/src/iter/for_each.rs"),
            ),
            ("{closure#0}", NN_OPS),
        ])
        .as_deref(),
        Some("softmax_last_dim")
    );
}

/// A trace with spans `attn` (a child `linear` inside) and samples: in `attn`, matmul 6,
/// softmax 3 (2 of a rayon worker), cat 1, the trace writer 1, a waiting spin 2, the
/// model's own code 2; in `linear`, Linear::forward 4; in no span, exp 1.
fn table_trace() -> Trace {
    use trace_record::schema::{Phase, SamplerEvent, SamplesEvent, SpanKind};
    use trace_record::{Run, TraceSession};
    let (session, sink) = TraceSession::in_memory(Run::new("ops", Phase::Infer, "cpu"));
    let (attn, linear) = {
        let a = session.span("attn", SpanKind::Function, None);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let l = session.span("linear", SpanKind::Function, None);
        std::thread::sleep(std::time::Duration::from_millis(1));
        let ids = (a.id().map(|s| s.0), l.id().map(|s| s.0));
        drop(l);
        ids
    };
    session.step();
    drop(session.span("attn", SpanKind::Function, None));
    let f = |id: u64, func: &str, file: Option<&str>| {
        Event::Frame(FrameEvent {
            id,
            func: func.into(),
            file: file.map(str::to_string),
            inlined: false,
        })
    };
    let st = |id: u64, frames: &[u64]| {
        Event::Stack(StackEvent {
            id,
            frames: frames.to_vec(),
        })
    };
    let sm = |stack: u64, n: u64, span: Option<u64>| {
        Event::Samples(SamplesEvent {
            step: 0,
            thread: 1,
            stack,
            n,
            phase: None,
            span,
        })
    };
    session.record_sampled(&[
        f(1, "my_model::main", None),
        f(2, "candle_core::tensor::Tensor::matmul", None),
        f(3, "gemm_f32::microkernel::x3x4", None),
        f(4, "candle_nn::ops::softmax_last_dim", None),
        f(5, "rayon_core::registry::WorkerThread::execute", None),
        f(6, "gemm_common::gemm::gemm_basic_generic", None),
        f(
            7,
            "cat<candle_core::tensor::Tensor>",
            Some("/r/candle-core-0.11.1/src/tensor_cat.rs"),
        ),
        f(8, "core::hint::spin_loop", None),
        f(
            9,
            "<candle_nn::linear::Linear as candle_core::Module>::forward",
            None,
        ),
        f(10, "candle_core::tensor::Tensor::exp", None),
        f(
            11,
            "candle_nn::ops::{impl#3}::cpu_fwd::softmax::{closure#0}<f32>",
            None,
        ),
        f(12, "trace_record::json::raw", None),
        st(1, &[1, 2, 3]),
        st(2, &[1, 4]),
        st(3, &[5, 11]),
        st(4, &[1, 7]),
        st(5, &[1, 8]),
        st(6, &[1]),
        st(7, &[1, 9, 2, 3]),
        st(8, &[1, 10]),
        st(9, &[5, 6]),
        st(10, &[1, 12]),
        sm(1, 5, attn),
        sm(9, 1, attn),
        sm(2, 1, attn),
        sm(3, 2, attn),
        sm(4, 1, attn),
        sm(5, 2, attn),
        sm(6, 2, attn),
        sm(7, 4, linear),
        sm(8, 1, None),
        sm(10, 1, attn),
        Event::Sampler(SamplerEvent {
            step: 0,
            hz: 1000,
            taken: 20,
            lost: 0,
            cpu_ns: Some(20_000_000),
            sampler_cpu_ns: None,
            ts: 0,
            dur: 1,
            source: None,
        }),
    ]);
    session.finish().unwrap();
    let text = String::from_utf8(sink.bytes()).unwrap();
    crate::load_str(&text, "ops.jsonl", Default::default()).unwrap()
}

#[test]
fn the_table_splits_each_spans_samples_into_ops_no_op_and_waiting() {
    let t = table_trace();
    assert!(t.issues.is_empty(), "{:?}", t.issues);
    let table = sampled_op_table(&t, &SampledOpOptions::default()).unwrap();
    assert_eq!(
        (table.samples, table.waiting, table.in_ops, table.profiler),
        (20, 2, 15, 1)
    );
    assert_eq!(table.ns_per_sample, Some(1e6));
    let paths: Vec<&str> = table.spans.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(paths, [NO_SPAN_PATH, "attn", "attn/linear"]);
    let rows = |i: usize| -> Vec<(&str, u64, u64)> {
        table.spans[i]
            .rows
            .iter()
            .map(|r| (r.op.as_str(), r.samples, r.worker_samples))
            .collect()
    };
    assert_eq!(rows(0), [("exp", 1, 0)]);
    assert_eq!(
        rows(1),
        [
            ("matmul", 6, 1),
            ("softmax_last_dim", 3, 2),
            ("cat", 1, 0),
            (PROFILER_ROW, 1, 0),
            (NO_CANDLE_OP, 2, 0),
            (WAITING_ROW, 2, 0)
        ]
    );
    assert_eq!(rows(2), [("Linear::forward", 4, 0)]);
    let attn = &table.spans[1];
    assert_eq!(
        (attn.samples, attn.waiting, attn.in_ops, attn.profiler),
        (15, 2, 10, 1)
    );
    let self_ns = attn.self_ns.unwrap();
    assert!(self_ns > 0);
    let share: f64 = attn.rows.iter().map(|r| r.share).sum();
    assert!((share - 1.0).abs() < 1e-12);
    for r in &attn.rows {
        let want = (self_ns as f64 * r.samples as f64 / 15.0).round() as u64;
        assert_eq!(r.est_self_ns, Some(want), "{r:?}");
        assert_eq!(r.est_cpu_ns, Some(r.samples * 1_000_000));
        assert!(r.share_low <= r.share && r.share <= r.share_high);
    }
    assert_eq!(table.spans[0].self_ns, None);
    assert_eq!(table.spans[0].rows[0].est_self_ns, None);
    // A limit sums the rest in one row; shares still sum to one.
    let limited = sampled_op_table(&t, &SampledOpOptions { limit: Some(1) }).unwrap();
    let ops: Vec<(&str, u64)> = limited.spans[1]
        .rows
        .iter()
        .map(|r| (r.op.as_str(), r.samples))
        .collect();
    assert_eq!(
        ops,
        [
            ("matmul", 6),
            (OTHER_OPS, 4),
            (PROFILER_ROW, 1),
            (NO_CANDLE_OP, 2),
            (WAITING_ROW, 2)
        ]
    );
    // `hot --by op` ranks the same attribution over every span, waiting left out.
    let hot = crate::hot_report(
        &t,
        &crate::HotOptions {
            by: crate::HotBy::Op,
            exclude_waiting: true,
            ..Default::default()
        },
    );
    let by_op: Vec<(&str, u64)> = hot
        .rows
        .iter()
        .map(|r| (r.name.as_str(), r.self_samples))
        .collect();
    assert_eq!(
        by_op,
        [
            ("matmul", 6),
            ("Linear::forward", 4),
            ("softmax_last_dim", 3),
            (NO_CANDLE_OP, 2),
            (PROFILER_ROW, 1),
            ("cat", 1),
            ("exp", 1)
        ]
    );
    // A trace without samples has no table.
    let (session, sink) = trace_record::TraceSession::in_memory(trace_record::Run::new(
        "none",
        trace_record::schema::Phase::Infer,
        "cpu",
    ));
    session.step();
    session.finish().unwrap();
    let text = String::from_utf8(sink.bytes()).unwrap();
    let plain = crate::load_str(&text, "none.jsonl", Default::default()).unwrap();
    assert!(sampled_op_table(&plain, &SampledOpOptions::default()).is_none());
}

#[test]
fn wilson_intervals() {
    let (lo, hi) = wilson_95(50, 100);
    assert!(
        (lo - 0.4038).abs() < 1e-3 && (hi - 0.5962).abs() < 1e-3,
        "{lo} {hi}"
    );
    let (lo, hi) = wilson_95(0, 10);
    assert!(lo < 1e-9 && (hi - 0.2775).abs() < 1e-3, "{hi}");
    let (lo, hi) = wilson_95(10, 10);
    assert!((lo - 0.7225).abs() < 1e-3 && hi > 1.0 - 1e-9, "{lo}");
    assert_eq!(wilson_95(3, 0), (0.0, 1.0));
    // Hostile counts stay in [0, 1].
    let (lo, hi) = wilson_95(u64::MAX, 5);
    assert!((0.0..=1.0).contains(&lo) && (0.0..=1.0).contains(&hi));
}
