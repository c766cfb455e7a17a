//! The report's gradients section: gradient-less parameters first, non-finite flagged, and more.
//!
//! Also each parameter's norms per step, the autograd graph per step and where its activations
//! sit on the memory timeline.

use serde_json::{Value, json};
use testkit::{SynthConfig, write_synthetic};
use trace_analyze::{AUTOGRAD_LABEL, LoadOptions, Trace, load_str};
use trace_record::schema::{GradientState, MemoryCategory, Phase, SpanKind};
use trace_record::{Run, TensorRecord, TraceSession};
use trace_report::{ReportOptions, build_report, write_html};

fn load(bytes: &[u8]) -> Trace {
    load_str(
        std::str::from_utf8(bytes).expect("utf-8"),
        "grads.jsonl",
        LoadOptions::default(),
    )
    .expect("load")
}

fn autograd_tensor(session: &TraceSession, id: u64, shape: &[usize]) {
    session.record_tensor(&TensorRecord {
        id,
        label: Some(AUTOGRAD_LABEL),
        shape,
        dtype: "f32",
        device: "cpu",
        requires_grad: true,
        bytes: 4 * shape.iter().product::<usize>() as u64,
        category: MemoryCategory::Activation,
    });
}

/// Two training steps (0 and 1) with gradient facts for three parameters: `a.weight` fine,
/// `b.weight` never trained, `c.weight` non-finite in step 0; an autograd graph per step,
/// the same structure in both.
fn trace_with_gradients() -> Trace {
    let (session, sink) = TraceSession::in_memory(Run::new("grads", Phase::Train, "cpu"));
    let facts: [[(&str, GradientState, Option<f64>); 3]; 2] = [
        [
            ("c.weight", GradientState::NonFinite, None),
            ("a.weight", GradientState::Present, Some(1.5)),
            ("b.weight", GradientState::Missing, None),
        ],
        [
            ("c.weight", GradientState::Present, Some(2.0)),
            ("a.weight", GradientState::Present, Some(0.25)),
            ("b.weight", GradientState::Missing, None),
        ],
    ];
    for (step, facts) in facts.iter().enumerate() {
        if step > 0 {
            session.step();
        }
        // Something runs in each step (a step where nothing ran is not a step).
        let _step = session.span("train_step", SpanKind::Function, None);
        let base = 10 * (step as u64 + 1);
        autograd_tensor(&session, base, &[4, 8]);
        autograd_tensor(&session, base + 1, &[4, 4]);
        for (param, state, norm) in facts {
            session.record_gradient(param, *state, *norm);
        }
    }
    session.finish().expect("finish");
    load(&sink.bytes())
}

#[test]
fn never_trained_parameters_lead_non_finite_are_flagged_and_norms_are_per_step() {
    let trace = trace_with_gradients();
    let data = build_report(&trace, None, &ReportOptions::default()).expect("report");
    let g = data.gradients.as_ref().expect("a gradients section");
    let p = &g.params;

    let labels: Vec<&str> = p.columns.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "parameter",
            "verdict",
            "present",
            "missing",
            "zero",
            "non-finite",
            "last norm",
            "max norm",
            "step 0",
            "step 1"
        ]
    );
    let names: Vec<&str> = p.rows.iter().filter_map(|r| r[0].as_str()).collect();
    assert_eq!(names, ["b.weight", "c.weight", "a.weight"], "worst first");
    assert_eq!(
        p.row_class.as_deref(),
        Some(&["never", "non_finite", "ok"][..])
    );
    let row = |name: &str| -> &Vec<Value> {
        p.rows
            .iter()
            .find(|r| r[0] == json!(name))
            .expect("a row per parameter")
    };
    assert_eq!(row("b.weight")[1], json!("never received a gradient"));
    assert_eq!(row("b.weight")[8..], [json!("missing"), json!("missing")]);
    assert_eq!(row("b.weight")[6], Value::Null, "no norm: absent, not zero");
    assert_eq!(row("c.weight")[1], json!("non-finite gradient"));
    assert_eq!(row("c.weight")[5], json!(1), "one non-finite fact");
    assert_eq!(row("c.weight")[8..], [json!("non-finite"), json!(2.0)]);
    assert_eq!(row("a.weight")[8..], [json!(1.5), json!(0.25)]);
    assert_eq!(row("a.weight")[6], json!(0.25), "last norm");
    assert_eq!(row("a.weight")[7], json!(1.5), "max norm");

    let summary: std::collections::HashMap<&str, &str> = g
        .summary
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert!(summary["never received a gradient"].starts_with("1 "));
    assert!(summary["non-finite"].starts_with("1 "));
    assert_eq!(summary["steps with gradient facts"], "2");

    // The autograd graph per step: two nodes each, the same structure.
    let a = &g.autograd;
    assert_eq!(a.rows.len(), 2);
    assert_eq!(a.rows[0][0], json!(0));
    assert_eq!(a.rows[0][1], json!(2));
    // No storage counters in this hand trace: the storage bytes are unknown, not zero.
    assert_eq!(a.rows[0][2], serde_json::Value::Null);
    assert_eq!(a.rows[0][3], json!(4 * (32 + 16)));
    assert_eq!(a.rows[0][4], a.rows[1][4], "same fingerprint");
    assert_eq!(a.rows[1][5], json!("same as previous"));
    assert!(data.caps.is_empty(), "{:?}", data.caps);

    // The page has the section, its nav entry, and the data round-trips.
    let mut out = Vec::new();
    write_html(&data, &mut out).expect("write");
    let html = String::from_utf8(out).expect("utf-8");
    assert!(html.contains(r#"id="gradients""#));
    assert!(html.contains(r##"href="#gradients-section""##));
    assert!(html.contains("renderGradients"));
    assert!(html.contains("b.weight"));
}

#[test]
fn a_trace_without_gradients_has_no_gradients_section() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 15,
            ops_per_step: 5,
            ..Default::default()
        },
    )
    .expect("synthetic");
    let data = build_report(&load(&bytes), None, &ReportOptions::default()).expect("report");
    assert!(data.gradients.is_none());
    let v = serde_json::to_value(&data).expect("to value");
    assert_eq!(v["gradients"], Value::Null, "absent, drawn as absent");
}

#[test]
fn many_steps_keep_the_last_norm_columns_and_say_so() {
    let (session, sink) = TraceSession::in_memory(Run::new("grads", Phase::Train, "cpu"));
    for step in 0..40u32 {
        if step > 0 {
            session.step();
        }
        let _step = session.span("train_step", SpanKind::Function, None);
        session.record_gradient("w", GradientState::Present, Some(f64::from(step) + 1.0));
    }
    session.finish().expect("finish");
    let data = build_report(&load(&sink.bytes()), None, &ReportOptions::default()).expect("report");
    let p = &data.gradients.as_ref().expect("gradients").params;
    let steps: Vec<&str> = p.columns[8..].iter().map(|c| c.label.as_str()).collect();
    assert_eq!(steps.len(), 24);
    assert_eq!(steps[0], "step 16");
    assert_eq!(steps[23], "step 39");
    assert_eq!(p.rows[0][8 + 23], json!(40.0));
    assert!(
        data.caps
            .iter()
            .any(|c| c.contains("norms of the last 24 of 40 steps")),
        "{:?}",
        data.caps
    );
}

/// The memory section says where the autograd graph's activations sit on the timeline, in
/// the words `tracegraph memory` prints, from the recorder's placement counters.
#[test]
fn the_memory_note_says_where_autograd_activations_were_placed() {
    use trace_record::MemoryRecord;
    use trace_record::schema::{
        AUTOGRAD_AT_FORWARD_START_COUNTER, AUTOGRAD_AT_WALK_COUNTER, AUTOGRAD_STORAGES_COUNTER,
        AllocKind,
    };
    let (session, sink) = TraceSession::in_memory(Run::new("placed", Phase::Train, "cpu"));
    {
        let _step = session.span("train_step", SpanKind::Function, None);
        for kind in [AllocKind::Alloc, AllocKind::Free] {
            session.record_memory(&MemoryRecord {
                kind,
                storage: 1,
                tensor: 1,
                bytes: 64,
                device: "cpu",
                category: MemoryCategory::Activation,
            });
        }
        session.record_counter(AUTOGRAD_STORAGES_COUNTER, 3.0);
        session.record_counter(AUTOGRAD_AT_FORWARD_START_COUNTER, 2.0);
        session.record_counter(AUTOGRAD_AT_WALK_COUNTER, 0.0);
    }
    session.finish().expect("finish");
    let trace = load(&sink.bytes());
    let placement = trace_analyze::memory_report(&trace)
        .and_then(|m| m.autograd)
        .expect("placement counted");
    assert_eq!(
        (
            placement.at_creation,
            placement.at_forward_start,
            placement.at_walk
        ),
        (1, 2, 0)
    );
    let data = build_report(&trace, None, &ReportOptions::default()).expect("report");
    let note = &data.memory.as_ref().expect("memory section").note;
    assert!(
        note.ends_with(
            " Autograd activations: 3 storage(s): 1 recorded when created (captured op \
             outputs); 2 placed at the start of their step's forward phase (creation time not \
             recorded)."
        ),
        "{note}"
    );
}
