//! The op kind tables: every entry, unknown names, and coverage of real torch runs' self time.

use trace_analyze::events::{ATEN_OP_CLASSES, CANDLE_LAYER_CLASSES, CANDLE_OP_CLASSES, OpClass};
use trace_analyze::runs::load_torch_path;

fn check(of: fn(&str) -> OpClass, cases: &[(&str, OpClass)]) {
    for &(name, want) in cases {
        assert_eq!(of(name), want, "{name}");
    }
}

#[test]
fn every_table_entry_maps_to_its_class() {
    for &(name, class) in ATEN_OP_CLASSES {
        assert_eq!(OpClass::of_aten(name), class, "{name}");
        assert_eq!(
            OpClass::of_aten(&format!("aten::{name}")),
            class,
            "aten::{name}"
        );
    }
    for &(name, class) in CANDLE_OP_CLASSES {
        assert_eq!(OpClass::of_candle(name), class, "{name}");
    }
    for &(owner, class) in CANDLE_LAYER_CLASSES {
        assert_eq!(
            OpClass::of_candle(&format!("{owner}::forward")),
            class,
            "{owner}"
        );
    }
    // Every class but Other has names on both sides' tables (Rope: Candle's and fused ones).
    for class in OpClass::ALL {
        let listed = |t: &[(&str, OpClass)]| t.iter().any(|&(_, c)| c == class);
        assert_eq!(
            listed(ATEN_OP_CLASSES),
            class != OpClass::Other,
            "{class:?}"
        );
        assert_eq!(
            listed(CANDLE_OP_CLASSES),
            class != OpClass::Other,
            "{class:?}"
        );
    }
}

#[test]
fn views_copies_and_unknown_names() {
    check(
        OpClass::of_aten,
        &[
            ("aten::view", OpClass::View),
            ("aten::_unsafe_view", OpClass::View),
            ("aten::transpose", OpClass::View),
            ("aten::as_strided", OpClass::View),
            ("aten::expand", OpClass::View),
            ("aten::reshape", OpClass::View),
            ("aten::copy_", OpClass::CopyLayout),
            ("aten::clone", OpClass::CopyLayout),
            ("aten::contiguous", OpClass::CopyLayout),
            ("aten::_to_copy", OpClass::CopyLayout),
            ("aten::linear", OpClass::Matmul),
            ("aten::addmm", OpClass::Matmul),
            ("aten::scaled_dot_product_attention", OpClass::Attention),
            (
                "aten::_scaled_dot_product_flash_attention_for_cpu",
                OpClass::Attention,
            ),
            ("aten::_softmax", OpClass::Softmax),
            ("aten::native_layer_norm", OpClass::Norm),
            ("aten::rms_norm", OpClass::Norm),
            ("aten::silu_", OpClass::Elementwise),
            ("aten::argmax", OpClass::Reduction),
            ("aten::stack", OpClass::Concat),
            ("aten::index_select", OpClass::Indexing),
            ("aten::conv2d", OpClass::Convolution),
            ("aten::empty_strided", OpClass::Allocation),
            ("aten::result_type", OpClass::Other),
            ("aten::no_such_op", OpClass::Other),
            ("cudaLaunchKernel", OpClass::Other),
            ("llama.forward", OpClass::Other),
        ],
    );
    check(
        OpClass::of_candle,
        &[
            ("matmul", OpClass::Matmul),
            ("broadcast_matmul", OpClass::Matmul),
            ("softmax_last_dim", OpClass::Softmax),
            ("rms_norm", OpClass::Norm),
            ("layer_norm", OpClass::Norm),
            ("rope", OpClass::Rope),
            ("rope_i", OpClass::Rope),
            ("cat", OpClass::Concat),
            ("copy_strided_src", OpClass::CopyLayout),
            ("copy2d", OpClass::CopyLayout),
            ("contiguous", OpClass::CopyLayout),
            ("to_dtype", OpClass::CopyLayout),
            ("transpose", OpClass::View),
            ("narrow", OpClass::View),
            ("index_select", OpClass::Indexing),
            ("embedding", OpClass::Indexing),
            ("conv2d", OpClass::Convolution),
            ("sum_keepdim", OpClass::Reduction),
            ("max_keepdim", OpClass::Reduction),
            ("silu", OpClass::Elementwise),
            ("broadcast_add", OpClass::Elementwise),
            ("affine", OpClass::Elementwise),
            ("Linear::forward", OpClass::Matmul),
            ("RmsNorm::forward", OpClass::Norm),
            ("Embedding::forward", OpClass::Indexing),
            ("llama.forward", OpClass::Other),
            ("backward", OpClass::Other),
            ("(profiler)", OpClass::Other),
        ],
    );
}

/// The share of torch's `key_averages` cpu_op self time whose op names have a class.
fn key_averages_coverage(model: &str) -> f64 {
    let path = testkit::data_dir()
        .join("torch")
        .join(format!("{model}.key_averages.json"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (mut known, mut total) = (0.0, 0.0);
    for op in v["ops"].as_array().unwrap() {
        if op["is_user_annotation"].as_bool().unwrap() {
            continue;
        }
        let us = op["self_cpu_time_total_us"].as_f64().unwrap();
        total += us;
        if OpClass::of_aten(op["name"].as_str().unwrap()) != OpClass::Other {
            known += us;
        }
    }
    known / total
}

#[test]
fn classes_cover_real_torch_runs() {
    for model in ["llama", "bert"] {
        let from_key_averages = key_averages_coverage(model);
        let run = load_torch_path(
            &testkit::data_dir()
                .join("torch")
                .join(format!("{model}.trace.json.gz")),
        )
        .unwrap();
        let rows = run.self_by_class();
        let total: u64 = rows.iter().map(|r| r.self_ns).sum();
        let other: u64 = rows
            .iter()
            .filter(|r| r.class == OpClass::Other)
            .map(|r| r.self_ns)
            .sum();
        let from_trace = 1.0 - other as f64 / total as f64;
        println!(
            "{model}: classes cover {:.3} % of key_averages' cpu_op self time, {:.3} % of the \
             trace's; {}",
            from_key_averages * 100.0,
            from_trace * 100.0,
            rows.iter()
                .map(|r| format!("{} {:.1} µs", r.class.as_str(), r.self_ns as f64 / 1e3))
                .collect::<Vec<_>>()
                .join(", ")
        );
        assert!(from_key_averages >= 0.95, "{model}: {from_key_averages}");
        assert!(from_trace >= 0.95, "{model}: {from_trace}");
        assert_eq!(
            rows.iter().map(|r| r.count).sum::<u64>(),
            run.ops.len() as u64
        );
    }
}
