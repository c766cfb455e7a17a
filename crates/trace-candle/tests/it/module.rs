//! Profiled modules: nested module spans named by path, with input and output shapes.

use candle_core::{DType, Device, Module, ModuleT, Tensor};
use candle_nn::{VarBuilder, VarMap};
use trace_record::schema::{Event, MemoryCategory, Phase, SpanKind};

use super::{capture, events, finish_and_read};

/// A module with a profiled submodule, as a user would nest them.
struct Block {
    fc: trace_candle::Profiled<candle_nn::Linear>,
}

impl Module for Block {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        self.fc.forward(xs)?.relu()
    }
}

#[test]
fn profiled_modules_give_the_nested_span_tree_with_shapes() {
    let (capture, sink) = capture(Phase::Infer);
    let dev = Device::Cpu;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &dev);
    let blocks = (0..2).map(|i| {
        let path = format!("model/layers.{i}");
        let fc = candle_nn::linear(4, 4, vb.pp(format!("l{i}"))).unwrap();
        Block {
            fc: trace_candle::Profiled::new(&capture, format!("{path}/mlp"), fc),
        }
    });
    let model = capture.profile_sequence("model", blocks);
    assert_eq!(model.len(), 2);
    assert_eq!(model.layers()[1].path(), "model/layers.1");
    let x = Tensor::ones((3, 4), DType::F32, &dev).unwrap();
    let y = model.forward(&x).unwrap();
    // ModuleT comes with Module (Candle's blanket impl).
    let y_t = model.forward_t(&x, false).unwrap();
    assert_eq!(y.dims(), y_t.dims());
    capture.step();
    let trace = finish_and_read(&capture, &sink);

    // Spans of the first forward, as (name, parent name): each named relative to the module
    // it nests in, so the span paths are the module paths, never doubled.
    let mut names = std::collections::HashMap::new();
    let mut tree = Vec::new();
    for e in events(&trace) {
        if let Event::SpanStart(s) = e {
            assert_eq!(s.kind, SpanKind::Module);
            names.insert(s.id, s.name.clone());
            let parent = s.parent.map(|p| names[&p].clone());
            tree.push((s.name.clone(), parent));
        }
    }
    let first: Vec<_> = tree.iter().take(5).cloned().collect();
    let s = |x: &str| x.to_string();
    assert_eq!(
        first,
        vec![
            (s("model"), None),
            (s("layers.0"), Some(s("model"))),
            (s("mlp"), Some(s("layers.0"))),
            (s("layers.1"), Some(s("model"))),
            (s("mlp"), Some(s("layers.1"))),
        ]
    );
    assert_eq!(tree.len(), 10);
    // Full paths (names from the root joined by `/`) are the module paths.
    let mut full = std::collections::HashMap::new();
    let mut paths = Vec::new();
    for e in events(&trace) {
        if let Event::SpanStart(sp) = e {
            let path = match sp.parent.and_then(|p| full.get(&p)) {
                Some(parent) => format!("{parent}/{}", sp.name),
                None => sp.name.clone(),
            };
            full.insert(sp.id, path.clone());
            paths.push(path);
        }
    }
    assert_eq!(
        &paths[..5],
        [
            "model",
            "model/layers.0",
            "model/layers.0/mlp",
            "model/layers.1",
            "model/layers.1/mlp"
        ]
    );

    // Each span records its input and output shapes, and the output's activation bytes.
    let span_of = |name: &str| {
        events(&trace)
            .find_map(|e| match e {
                Event::SpanStart(s) if s.name == name => Some(s.id),
                _ => None,
            })
            .unwrap()
    };
    let mlp = span_of("mlp");
    let tensors: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::Tensor(t) if t.span == Some(mlp) => {
                Some((t.label.clone().unwrap(), t.shape.clone(), t.category))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        tensors,
        vec![
            (s("module_input"), vec![3, 4], MemoryCategory::Activation),
            (s("module_output"), vec![3, 4], MemoryCategory::Activation),
        ]
    );
    let allocs: Vec<_> = events(&trace)
        .filter_map(|e| match e {
            Event::Memory(m) if m.span == Some(mlp) => Some((m.bytes, m.category)),
            _ => None,
        })
        .collect();
    assert_eq!(allocs, vec![(48, MemoryCategory::Activation)]);
}

#[test]
fn a_module_t_only_module_passes_the_train_flag() {
    let (capture, sink) = capture(Phase::Train);
    let dropout = capture.profile_t("model/dropout", candle_nn::Dropout::new(0.5));
    let x = Tensor::ones((64, 64), DType::F32, &Device::Cpu).unwrap();
    // Eval: identity values. Train: some entries dropped.
    let eval = dropout.forward_t(&x, false).unwrap();
    assert_eq!(eval.sum_all().unwrap().to_scalar::<f32>().unwrap(), 4096.0);
    let train = dropout.forward_t(&x, true).unwrap();
    let zeros = train
        .eq(0f32)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(zeros > 0.0);
    capture.step();
    let trace = finish_and_read(&capture, &sink);
    assert_eq!(trace.trailer.as_ref().unwrap().counts.span_start, 2);
}
