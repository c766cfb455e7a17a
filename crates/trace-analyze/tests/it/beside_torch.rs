//! A Candle run beside a torch.profiler run: constructed pairs and the real torch fixtures.

use std::path::PathBuf;

use trace_analyze::events::{OpClass, OpTableOptions, op_table};
use trace_analyze::runs::{
    CandleSource, TorchCompareOptions, compare_with_torch, load_torch_path, load_torch_reader,
};
use trace_analyze::{SampledOpOptions, sampled_op_table};

use crate::common::from_lines;

/// One op of a step: (Candle name, torch name, layer, µs on Candle, µs on torch).
type Spec = (&'static str, &'static str, &'static str, u64, u64);

/// A model of two layers: attention (a copy and a softmax) and an MLP (a matmul and an add).
fn model(softmax_candle_us: u64) -> Vec<Spec> {
    vec![
        ("copy_strided_src", "aten::copy_", "attn", 50, 50),
        (
            "softmax_last_dim",
            "aten::_softmax",
            "attn",
            softmax_candle_us,
            100,
        ),
        ("matmul", "aten::mm", "mlp", 300, 300),
        ("add", "aten::add", "mlp", 100, 100),
    ]
}

const STEPS: u64 = 3;
const STEP_US: u64 = 1000;

/// The Candle side: per step a `model` span holding `attn` and `mlp` spans, each holding its
/// ops laid end to end (5 µs apart, 10 µs of the span's own at each end).
fn candle(spec: &[Spec]) -> trace_analyze::Trace {
    let mut lines = Vec::new();
    let mut id = 0u64;
    for k in 0..STEPS {
        let s = k * STEP_US * 1000;
        lines.push(format!(r#"{{"type":"step","index":{k},"ts":{s}}}"#));
        id += 1;
        let model = id;
        lines.push(format!(
            r#"{{"type":"span_start","id":{model},"name":"model","kind":"module","thread":0,"ts":{s}}}"#
        ));
        let mut t = s;
        for layer in ["attn", "mlp"] {
            id += 1;
            let span = id;
            lines.push(format!(
                r#"{{"type":"span_start","id":{span},"parent":{model},"name":"{layer}","kind":"module","thread":0,"ts":{t}}}"#
            ));
            t += 10_000;
            for (name, _, l, us, _) in spec.iter().filter(|o| o.2 == layer) {
                let _ = l;
                let dur = us * 1000;
                lines.push(format!(
                    r#"{{"type":"op","span":{span},"name":"{name}","in":[],"out":[],"shape":[4],"dtype":"f32","ts":{t},"dur":{dur}}}"#
                ));
                t += dur + 5_000;
            }
            t += 10_000;
            lines.push(format!(r#"{{"type":"span_end","id":{span},"ts":{t}}}"#));
        }
        lines.push(format!(r#"{{"type":"span_end","id":{model},"ts":{t}}}"#));
    }
    let end = STEPS * STEP_US * 1000;
    lines.push(format!(
        r#"{{"type":"trailer","outcome":"complete","counts":{{}},"dropped":0,"ts":{end}}}"#
    ));
    from_lines(&lines)
}

/// The torch side: the same layout as Chrome trace events (µs), ranges named as torch's
/// hooks name them (`attn#0`), steps `ProfilerStep#0..`.
fn torch_json(spec: &[Spec]) -> String {
    let mut ev = Vec::new();
    let x = |cat: &str, name: &str, ts: f64, dur: f64, args: &str| {
        format!(
            r#"{{"ph":"X","cat":"{cat}","name":"{name}","pid":1,"tid":1,"ts":{ts:.3},"dur":{dur:.3}{args}}}"#
        )
    };
    for k in 0..STEPS {
        let s = (k * STEP_US) as f64;
        ev.push(x(
            "user_annotation",
            &format!("ProfilerStep#{k}"),
            s,
            STEP_US as f64,
            "",
        ));
        let mut t = s;
        let mut model_events = Vec::new();
        for layer in ["attn", "mlp"] {
            let start = t;
            t += 10.0;
            let mut ops = Vec::new();
            for (_, name, _, _, us) in spec.iter().filter(|o| o.2 == layer) {
                ops.push(x(
                    "cpu_op",
                    name,
                    t,
                    *us as f64,
                    r#","args":{"Input Dims":[[1,128],[128,128]],"Input type":["float","float"]}"#,
                ));
                t += *us as f64 + 5.0;
            }
            t += 10.0;
            model_events.push(x(
                "user_annotation",
                &format!("{layer}#0"),
                start,
                t - start,
                "",
            ));
            model_events.extend(ops);
        }
        ev.push(x("user_annotation", "model", s, t - s, ""));
        ev.extend(model_events);
    }
    format!(
        r#"{{"schemaVersion":1,"traceEvents":[{}]}}"#,
        ev.join(",\n")
    )
}

fn torch(spec: &[Spec]) -> trace_analyze::runs::TorchRun {
    load_torch_reader(torch_json(spec).as_bytes(), "torch.json").expect("constructed torch trace")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

#[test]
fn a_kind_three_times_slower_in_candle_comes_first_with_its_diagnosis() {
    let c = compare_with_torch(
        &candle(&model(300)),
        &torch(&model(100)),
        &Default::default(),
    );
    assert_eq!(c.candle_source, CandleSource::CapturedOps);
    assert_eq!(c.candle.steps, [0, 1, 2]);
    assert_eq!(c.torch.steps, [0, 1, 2]);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let first = &c.kinds[0];
    assert_eq!(first.kind, OpClass::Softmax);
    assert!(close(first.candle_ns.unwrap(), 300_000.0), "{first:?}");
    assert!(close(first.torch_ns, 100_000.0));
    assert!(close(first.ratio.unwrap(), 3.0));
    assert!(close(first.loss_ns.unwrap(), 200_000.0));
    assert_eq!(first.candle_ops[0].0, "softmax_last_dim");
    assert_eq!(first.torch_ops[0].0, "aten::_softmax");
    // The other kinds take the same time on both sides.
    for r in &c.kinds[1..] {
        assert!(close(r.loss_ns.unwrap(), 0.0), "{r:?}");
    }
    let d = &c.diagnoses[0];
    assert_eq!(d.rule, "kind_slower");
    assert!(
        d.text.starts_with("softmax is 3.0× slower in Candle"),
        "{}",
        d.text
    );
    assert!(d.evidence.iter().any(|e| e.contains("softmax_last_dim")));
    // Layer by layer: attention loses the 200 µs, and the deepest losing layer is diagnosed.
    let attn = c.layers.iter().find(|l| l.path == "model/attn").unwrap();
    assert!(close(attn.loss_ns, 200_000.0));
    let mlp = c.layers.iter().find(|l| l.path == "model/mlp").unwrap();
    assert!(close(mlp.loss_ns, 0.0));
    assert!(
        c.diagnoses
            .iter()
            .any(|d| d.rule == "layer_slower" && d.text.starts_with("model/attn takes 2.1×")),
        "{:?}",
        c.diagnoses
    );
    assert!(c.candle_only_layers.is_empty() && c.torch_only_layers.is_empty());
}

#[test]
fn an_equal_pair_has_no_diagnosis_and_candle_kinds_add_up_to_the_op_table() {
    let t = candle(&model(100));
    let c = compare_with_torch(&t, &torch(&model(100)), &Default::default());
    assert!(c.diagnoses.is_empty(), "{:?}", c.diagnoses);
    // The captured-op source is the op table's self time, kind by kind.
    let table = op_table(&t, &OpTableOptions::default());
    let ops_total: u64 = table.rows.iter().map(|r| r.self_ns).sum();
    let kinds_total: f64 = c.kinds.iter().filter_map(|r| r.candle_ns).sum::<f64>() * 3.0;
    assert!(close(kinds_total, ops_total as f64));
}

#[test]
fn copies_that_dominate_candle_s_step_are_diagnosed_apart_from_compute() {
    let mut spec = model(100);
    spec[0].3 = 400; // copy_strided_src: 400 µs in Candle against 50 in torch
    let c = compare_with_torch(&candle(&spec), &torch(&model(100)), &Default::default());
    let copy = c
        .diagnoses
        .iter()
        .find(|d| d.rule == "copy_layout")
        .unwrap();
    assert!(
        copy.text
            .contains("% of Candle's step against 5.0% in PyTorch"),
        "{}",
        copy.text
    );
    assert!(c.candle_copy_share.unwrap() > 0.39 && c.torch_copy_share < 0.06);
    assert_eq!(c.kinds[0].kind, OpClass::CopyLayout);
}

#[test]
fn steps_are_chosen_by_number_on_each_side_and_differences_are_said() {
    let opts = TorchCompareOptions {
        candle_steps: Some((1, 2)),
        torch_steps: Some((0, 0)),
        ..Default::default()
    };
    let c = compare_with_torch(&candle(&model(100)), &torch(&model(100)), &opts);
    assert_eq!(c.candle.steps, [1, 2]);
    assert_eq!(c.torch.steps, [0]);
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("2 Candle step(s) against 1 torch"))
    );
    // Means per step: still equal.
    assert!(c.kinds.iter().all(|r| close(r.loss_ns.unwrap(), 0.0)));
}

#[test]
fn a_layer_map_lines_up_torch_s_own_names() {
    let json = torch_json(&model(100))
        .replace("\"attn#0\"", "\"self_attn\"")
        .replace("\"mlp#0\"", "\"feed_forward\"");
    let t = load_torch_reader(json.as_bytes(), "renamed.json").unwrap();
    let plain = compare_with_torch(&candle(&model(100)), &t, &Default::default());
    assert_eq!(
        plain.layers.len(),
        1,
        "only `model` matches: {:?}",
        plain.layers
    );
    let opts = TorchCompareOptions {
        layer_map: vec![
            ("model/self_attn".into(), "model/attn".into()),
            ("model/feed_forward".into(), "model/mlp".into()),
        ],
        ..Default::default()
    };
    let mapped = compare_with_torch(&candle(&model(100)), &t, &opts);
    assert_eq!(mapped.layers.len(), 3, "{:?}", mapped.layers);
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testkit/data/torch")
        .join(name)
}

#[test]
fn the_torch_side_of_a_real_llama_adds_up_to_key_averages() {
    let run = load_torch_path(&fixture("llama.trace.json.gz")).unwrap();
    let c = compare_with_torch(&candle(&model(100)), &run, &Default::default());
    let steps = c.torch.steps.len() as f64;
    assert_eq!(steps, 4.0);
    let kinds_us: f64 = c.kinds.iter().map(|r| r.torch_ns).sum::<f64>() * steps / 1000.0;
    let ka: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("llama.key_averages.json")).unwrap())
            .unwrap();
    let ops = ka["ops"].as_array().expect("key_averages ops");
    let cpu_op_us: f64 = ops
        .iter()
        .filter(|o| o["is_user_annotation"] == serde_json::Value::Bool(false))
        .map(|o| o["self_cpu_time_total_us"].as_f64().unwrap())
        .sum();
    assert!(
        (kinds_us - cpu_op_us).abs() <= 0.01 * cpu_op_us,
        "kinds {kinds_us} µs against key_averages' cpu ops {cpu_op_us} µs"
    );
    // Steps by number: of Candle's 0-2, only step 2 is one of torch's 2-5, and the
    // difference in counts is said.
    assert_eq!(c.candle.steps, [2]);
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("1 Candle step(s) against 4 torch"))
    );
    let none = compare_with_torch(
        &candle(&model(100)),
        &run,
        &TorchCompareOptions {
            torch_steps: Some((4, 5)),
            ..Default::default()
        },
    );
    assert_eq!(none.candle.steps, [0, 1, 2]);
    assert!(
        none.warnings
            .iter()
            .any(|w| w.contains("none of torch's step numbers"))
    );
    // Like with like: one thread and f32 on both sides, no warning about them.
    assert!(
        !c.warnings
            .iter()
            .any(|w| w.contains("threads differ") || w.contains("element"))
    );
}

/// The Candle side without captured ops: the model's spans and, in each step, samples of
/// stacks that name Candle ops (a softmax in `attn`; a matmul and an add in `mlp`).
fn sampled_candle(softmax: u64, matmul: u64, add: u64) -> trace_analyze::Trace {
    let mut lines = vec![
        r#"{"type":"frame","id":1,"func":"main"}"#.to_string(),
        r#"{"type":"frame","id":2,"func":"candle_nn::ops::softmax_last_dim"}"#.to_string(),
        r#"{"type":"frame","id":3,"func":"candle_core::tensor::Tensor::matmul"}"#.to_string(),
        r#"{"type":"frame","id":4,"func":"<candle_core::tensor::Tensor as core::ops::arith::Add>::add"}"#.to_string(),
        r#"{"type":"stack","id":1,"frames":[1,2]}"#.to_string(),
        r#"{"type":"stack","id":2,"frames":[1,3]}"#.to_string(),
        r#"{"type":"stack","id":3,"frames":[1,4]}"#.to_string(),
    ];
    let mut id = 0u64;
    for k in 0..STEPS {
        let s = k * STEP_US * 1000;
        lines.push(format!(r#"{{"type":"step","index":{k},"ts":{s}}}"#));
        id += 1;
        let model = id;
        lines.push(format!(
            r#"{{"type":"span_start","id":{model},"name":"model","kind":"module","thread":0,"ts":{s}}}"#
        ));
        let (attn, mlp) = (id + 1, id + 2);
        id += 2;
        lines.push(format!(
            r#"{{"type":"span_start","id":{attn},"parent":{model},"name":"attn","kind":"module","thread":0,"ts":{s}}}"#
        ));
        lines.push(format!(
            r#"{{"type":"span_end","id":{attn},"ts":{}}}"#,
            s + 400_000
        ));
        lines.push(format!(
            r#"{{"type":"span_start","id":{mlp},"parent":{model},"name":"mlp","kind":"module","thread":0,"ts":{}}}"#,
            s + 400_000
        ));
        lines.push(format!(
            r#"{{"type":"span_end","id":{mlp},"ts":{}}}"#,
            s + 900_000
        ));
        lines.push(format!(
            r#"{{"type":"span_end","id":{model},"ts":{}}}"#,
            s + 900_000
        ));
        for (stack, span, n) in [(1, attn, softmax), (2, mlp, matmul), (3, mlp, add)] {
            lines.push(format!(
                r#"{{"type":"samples","step":{k},"thread":9,"stack":{stack},"n":{n},"span":{span}}}"#
            ));
        }
        let taken = softmax + matmul + add;
        lines.push(format!(
            r#"{{"type":"sampler","step":{k},"hz":100000,"taken":{taken},"lost":0,"cpu_ns":1000000,"ts":{s},"dur":1000000}}"#
        ));
    }
    let end = STEPS * STEP_US * 1000;
    lines.push(format!(
        r#"{{"type":"trailer","outcome":"complete","counts":{{}},"dropped":0,"ts":{end}}}"#
    ));
    let mut text = String::from(
        r#"{"type":"header","schema":"tracegraph-trace","version":2,"run":{"run_id":"s","entrypoint":"test","phase":"infer","device":"cpu","timing":"host","start_unix_ns":0,"pid":7}}"#,
    );
    for l in &lines {
        text.push('\n');
        text.push_str(l);
    }
    text.push('\n');
    trace_analyze::load_str(&text, "sampled.jsonl", Default::default()).expect("sampled trace")
}

#[test]
fn without_captured_ops_the_samples_estimate_candle_s_kinds_with_intervals() {
    // Per step: 30 softmax, 30 matmul, 10 add samples over a 1 ms step.
    let c = compare_with_torch(
        &sampled_candle(30, 30, 10),
        &torch(&model(100)),
        &Default::default(),
    );
    assert_eq!(c.candle_source, CandleSource::Sampled { busy_samples: 210 });
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("rest on 210 busy sample(s)")),
        "{:?}",
        c.warnings
    );
    let first = &c.kinds[0];
    assert_eq!(first.kind, OpClass::Softmax);
    assert_eq!(first.candle_samples, Some(90));
    let step = c.candle.step_ns;
    assert!(
        close(first.candle_ns.unwrap(), 90.0 / 210.0 * step),
        "{first:?}"
    );
    let (lo, hi) = first.candle_interval.unwrap();
    assert!(lo < first.candle_ns.unwrap() && first.candle_ns.unwrap() < hi);
    assert_eq!(first.candle_ops[0].0, "softmax_last_dim");
    let d = &c.diagnoses[0];
    assert_eq!(d.rule, "kind_slower");
    assert!(d.text.starts_with("softmax is "), "{}", d.text);
    assert!(
        d.evidence[0].contains("sampled estimate, 90 samples"),
        "{:?}",
        d.evidence
    );
    // Samples the table cannot name are kept, as `other`, never dropped.
    let named: u64 = c.kinds.iter().filter_map(|r| r.candle_samples).sum();
    assert_eq!(named, 210);
    // Kind by kind, the samples are those `ops --sampled` names (every step is compared).
    let table = sampled_op_table(&sampled_candle(30, 30, 10), &SampledOpOptions::default())
        .expect("samples");
    let mut by_kind: std::collections::BTreeMap<OpClass, u64> = Default::default();
    for span in &table.spans {
        for row in &span.rows {
            let kind = row
                .kind
                .map_or(OpClass::Other, |_| OpClass::of_candle(&row.op));
            *by_kind.entry(kind).or_default() += row.samples;
        }
    }
    for r in &c.kinds {
        assert_eq!(
            r.candle_samples.unwrap_or(0),
            by_kind.get(&r.kind).copied().unwrap_or(0),
            "{:?}",
            r.kind
        );
    }
}

#[test]
fn a_sampled_kind_is_diagnosed_only_when_its_interval_makes_the_case() {
    // Softmax takes half of Candle's busy samples (3 of 6 over the steps): 500 µs a step as a
    // point estimate, twice torch's 250 µs, but its 95 % interval reaches down to 190 µs.
    let mut spec = model(100);
    spec[1].4 = 250;
    let few = compare_with_torch(&sampled_candle(1, 1, 0), &torch(&spec), &Default::default());
    let softmax = few
        .kinds
        .iter()
        .find(|r| r.kind == OpClass::Softmax)
        .unwrap();
    assert!(softmax.ratio.unwrap() >= 1.5, "{softmax:?}");
    assert!(
        !few.diagnoses.iter().any(|d| d.rule == "kind_slower"),
        "{:?}",
        few.diagnoses
    );
    // Thirty times the samples in the same shares: the interval is narrow, the finding holds.
    let many = compare_with_torch(
        &sampled_candle(30, 30, 0),
        &torch(&spec),
        &Default::default(),
    );
    assert!(
        many.diagnoses
            .iter()
            .any(|d| d.rule == "kind_slower" && d.text.starts_with("softmax is ")),
        "{:?}",
        many.diagnoses
    );
}
