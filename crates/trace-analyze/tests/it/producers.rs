//! The producer of each listed allocation in the memory report: the op that recorded the
//! tensor as an output (the last one when several did) and the span path it ran in.

use trace_analyze::{Allocation, load_str, memory_report};
use trace_record::schema::MemoryCategory;

use crate::common::{from_lines, small};

fn listed(t: &trace_analyze::Trace) -> Vec<Allocation> {
    let m = memory_report(t).expect("memory events");
    m.devices
        .into_iter()
        .flat_map(|d| d.peak_allocations.into_iter().chain(d.possible_leaks))
        .collect()
}

#[test]
fn producers_name_the_op_and_its_span_path() {
    let t = from_lines(&[
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":64,"cat":"parameter","ts":0}"#,
        r#"{"type":"span_start","id":1,"name":"forward","kind":"function","thread":0,"ts":1}"#,
        r#"{"type":"span_start","id":2,"parent":1,"name":"layers.0","kind":"module","thread":0,"ts":2}"#,
        r#"{"type":"op","span":2,"name":"matmul","in":[1,2],"out":[7],"shape":[2,2],"dtype":"f32","ts":3,"dur":1,"in_b":32,"out_b":16}"#,
        r#"{"type":"memory","action":"alloc","storage":2,"tensor":7,"bytes":16,"cat":"activation","ts":4}"#,
        r#"{"type":"span_end","id":2,"ts":5}"#,
        r#"{"type":"span_end","id":1,"ts":6}"#,
        // Produced outside every span.
        r#"{"type":"op","name":"relu","in":[7],"out":[8],"shape":[2,2],"dtype":"f32","ts":7,"dur":1,"in_b":16,"out_b":16}"#,
        r#"{"type":"memory","action":"alloc","storage":3,"tensor":8,"bytes":16,"cat":"activation","ts":8}"#,
    ]);
    let all = listed(&t);
    let of = |tensor: u64| {
        all.iter()
            .find(|a| a.tensor == Some(tensor))
            .expect("listed")
    };
    assert_eq!(of(7).produced_by.as_deref(), Some("matmul"));
    assert_eq!(of(7).span_path.as_deref(), Some("forward/layers.0"));
    assert_eq!(of(8).produced_by.as_deref(), Some("relu"));
    assert_eq!(of(8).span_path, None);
    // A parameter no op produced.
    assert_eq!(of(1).produced_by, None);
    assert_eq!(of(1).span_path, None);
}

#[test]
fn the_last_op_writing_a_tensor_is_its_producer() {
    // In the small trace `matmul` and then `linear` write tensor 6, live at the peak.
    let all = listed(&small());
    let six: Vec<&Allocation> = all.iter().filter(|a| a.tensor == Some(6)).collect();
    assert!(!six.is_empty());
    for a in six {
        assert_eq!(a.produced_by.as_deref(), Some("linear"));
        assert_eq!(a.span_path.as_deref(), Some("train_step/forward"));
    }
}

#[test]
fn a_parent_read_after_its_child_does_not_extend_the_path() {
    // Span 2 names span 3 as its parent, whose start comes later: span 2 is a root, as in
    // the span tree.
    let t = from_lines(&[
        r#"{"type":"span_start","id":2,"parent":3,"name":"inner","kind":"function","thread":0,"ts":1}"#,
        r#"{"type":"span_start","id":3,"name":"outer","kind":"function","thread":0,"ts":2}"#,
        r#"{"type":"op","span":2,"name":"exp","in":[],"out":[9],"shape":[2],"dtype":"f32","ts":3,"dur":1}"#,
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":9,"bytes":8,"cat":"activation","ts":4}"#,
    ]);
    let all = listed(&t);
    assert_eq!(all[0].produced_by.as_deref(), Some("exp"));
    assert_eq!(all[0].span_path.as_deref(), Some("inner"));
}

#[test]
fn every_op_made_allocation_of_a_recorded_session_has_its_producer() {
    let text = String::from_utf8(testkit::session_trace(3)).expect("utf8");
    let t = load_str(&text, "session.jsonl", Default::default()).expect("loads");
    let all = listed(&t);
    assert!(!all.is_empty());
    for a in &all {
        if a.category == MemoryCategory::Parameter {
            continue;
        }
        assert!(a.produced_by.is_some(), "{a:?}");
        assert!(a.span_path.is_some(), "{a:?}");
    }
}
