//! The autograd graph's bytes agree everywhere: each storage once, views add nothing.
//!
//! A view-heavy backward (a transposed parameter, a narrowed and a transposed activation, a
//! reshaped one): `gradients` gives the distinct storages' bytes the recorder counted, the
//! memory timeline allocates exactly those bytes, and the per-tensor sum (views counted again)
//! is larger.

use candle_core::{DType, Device, Tensor, Var};
use trace_analyze::{LoadOptions, gradient_report, load_path};
use trace_candle::{Capture, MemoryCategory, Phase, Run};

#[test]
fn autograd_bytes_count_each_storage_once_in_gradients_and_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("autograd.jsonl");
    let device = Device::Cpu;
    let capture = Capture::open(&path, Run::new("tests::autograd", Phase::Train, "cpu")).unwrap();
    let w = Var::ones((4, 8), DType::F32, &device).unwrap();
    capture.parameters([("w", w.as_tensor())]);
    let x = Tensor::ones((2, 8), DType::F32, &device).unwrap();
    // Views of the parameter (w.t()) allocate nothing; views of h share its storage.
    let h = x.matmul(&w.as_tensor().t().unwrap()).unwrap(); // [2, 4]
    let a = h.narrow(1, 0, 2).unwrap(); // view of h
    let b = h.t().unwrap(); // view of h
    let r = h.reshape((4, 2)).unwrap(); // h is contiguous: a view too
    let loss = (a.sqr().unwrap().sum_all().unwrap()
        + b.sqr().unwrap().sum_all().unwrap()
        + r.exp().unwrap().sum_all().unwrap())
    .unwrap();
    let summary = capture.autograd(&loss);
    loss.backward().unwrap();
    capture.step();
    capture.finish().unwrap();
    assert!(summary.nodes > summary.storages, "{summary:?}");

    let trace = load_path(&path, LoadOptions { strict: true }).unwrap();
    let g = gradient_report(&trace);
    assert_eq!(g.autograd.len(), 1);
    let a = &g.autograd[0];
    assert_eq!(a.nodes, summary.nodes as u64);
    assert_eq!(a.storages, Some(summary.storages as u64));
    assert_eq!(a.storage_bytes, Some(summary.bytes));
    assert!(
        a.tensor_bytes > summary.bytes,
        "views are counted again per tensor: {a:?}"
    );
    // The memory timeline allocated exactly the distinct storages (no op was captured, so
    // every storage of the graph was first seen by the autograd walk).
    let allocated: u64 = trace
        .memory
        .iter()
        .filter(|m| m.alloc && m.category == MemoryCategory::Activation)
        .map(|m| m.bytes)
        .sum();
    assert_eq!(allocated, summary.bytes);
    let out = crate::run_in(dir.path(), &["gradients", path.to_str().unwrap()]);
    let text = crate::stdout(&out);
    assert!(out.status.success(), "{text}");
    let row = text
        .lines()
        .find(|l| l.contains(&g.autograd[0].fingerprint))
        .expect("the autograd row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    let bytes = trace_analyze::format_bytes(summary.bytes as f64);
    assert!(
        cells.contains(&summary.storages.to_string().as_str()) && row.contains(&bytes),
        "{text}"
    );
}

/// A backward recorded with no registered parameter: `gradients` and `summary` say why there
/// are no gradient facts instead of asking for the call the program made.
#[test]
fn no_gradient_facts_after_a_backward_without_parameters_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("noparams.jsonl");
    let capture = Capture::open(&path, Run::new("tests::noparams", Phase::Train, "cpu")).unwrap();
    let w = Var::ones((2, 2), DType::F32, &Device::Cpu).unwrap();
    let x = Tensor::ones((1, 2), DType::F32, &Device::Cpu).unwrap();
    let h = capture
        .op("matmul", &[&x, w.as_tensor()], || x.matmul(w.as_tensor()))
        .unwrap();
    let loss = h.sum_all().unwrap();
    capture.backward(&loss).unwrap();
    capture.step();
    capture.finish().unwrap();
    let p = path.to_str().unwrap();
    for cmd in ["gradients", "summary"] {
        let out = crate::run_in(dir.path(), &[cmd, p]);
        let text = crate::stdout(&out);
        assert!(out.status.success(), "{text}");
        assert!(
            text.contains("no parameters were registered"),
            "{cmd}: {text}"
        );
    }
}
