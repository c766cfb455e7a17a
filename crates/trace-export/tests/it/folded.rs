//! Folded stacks: golden output.
//!
//! Weights summing to the total self time and to the Chrome export's outermost events.

use std::collections::HashMap;

use proptest::prelude::*;
use trace_export::{FoldedStacks, folded_stacks};
use trace_record::{ReadOptions, TraceReader};

use crate::chrome::random_trace;
use crate::common::{check_structure, chrome};
use testkit::{XEvent, hand_trace, session_trace};

fn fold(bytes: &[u8], step: Option<u64>) -> FoldedStacks {
    let mut reader = TraceReader::new(bytes, ReadOptions::default()).expect("header");
    folded_stacks(&mut reader, step).expect("fold")
}

fn text(f: &FoldedStacks) -> String {
    let mut out = Vec::new();
    f.write(&mut out).expect("write");
    String::from_utf8(out).expect("utf-8")
}

/// The summed durations of the outermost complete events of every thread.
fn root_total(xs: &[XEvent]) -> u64 {
    let mut by_tid: HashMap<u64, Vec<&XEvent>> = HashMap::new();
    for x in xs.iter().filter(|x| x.cat != "step") {
        by_tid.entry(x.tid).or_default().push(x);
    }
    let mut total = 0;
    for (_, mut list) in by_tid {
        list.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
        let mut reach = 0u64;
        let mut first = true;
        for x in list {
            if first || x.start >= reach {
                total += x.end - x.start;
                reach = x.end;
                first = false;
            }
        }
    }
    total
}

#[test]
fn golden_folded_stacks() {
    let bytes = hand_trace(&[
        r#"{"type":"step","index":0,"ts":0}"#,
        r#"{"type":"span_start","id":1,"name":"root","kind":"function","thread":0,"ts":0}"#,
        r#"{"type":"span_start","id":2,"parent":1,"name":"a;b","kind":"module","thread":0,"ts":10}"#,
        r#"{"type":"op","span":2,"name":"mm","dtype":"f32","ts":20,"dur":10}"#,
        r#"{"type":"span_end","id":2,"ts":50}"#,
        r#"{"type":"op","span":1,"name":"add","dtype":"f32","ts":60,"dur":10}"#,
        r#"{"type":"span_end","id":1,"ts":100}"#,
        r#"{"type":"step","index":1,"ts":100}"#,
        r#"{"type":"span_start","id":3,"name":"root","kind":"function","thread":0,"ts":100}"#,
        r#"{"type":"op","span":3,"name":"add","dtype":"f32","ts":100,"dur":7}"#,
        r#"{"type":"span_end","id":3,"ts":110}"#,
    ]);
    let f = fold(&bytes, None);
    assert_eq!(
        text(&f),
        "root 53\nroot;a:b 30\nroot;a:b;mm 10\nroot;add 17\n"
    );
    assert_eq!(f.total_self_ns, 110);
    assert_eq!(f.adjustments.total(), 0);

    let one = fold(&bytes, Some(1));
    assert!(one.step_found);
    assert_eq!(text(&one), "root 3\nroot;add 7\n");
    assert!(!fold(&bytes, Some(5)).step_found);
}

#[test]
fn weights_sum_to_the_outermost_chrome_events_of_a_recorded_session() {
    let bytes = session_trace(3);
    let f = fold(&bytes, None);
    let sum: u64 = f.lines.iter().map(|(_, w)| w).sum();
    assert_eq!(sum, f.total_self_ns);
    assert!(f.lines.iter().all(|(_, w)| *w > 0));
    assert!(
        f.lines
            .iter()
            .any(|(s, _)| s == "train_step;forward;model/l0;matmul")
    );
    assert!(f.lines.iter().any(|(s, _)| s == "loader;decode"));
    // The total self time equals the outermost complete events of the Chrome export.
    let (v, _) = chrome(&bytes, None);
    assert_eq!(f.total_self_ns, root_total(&check_structure(&v)));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// On any trace, however inconsistent its times, the folded weights sum to the time of the
    /// outermost events of the Chrome export (both use the same nesting).
    #[test]
    fn folded_total_matches_the_chrome_roots(items in proptest::collection::vec((any::<u8>(), any::<u16>(), any::<u16>()), 1..100)) {
        let bytes = random_trace(&items);
        let f = fold(&bytes, None);
        let (v, _) = chrome(&bytes, None);
        let xs = check_structure(&v);
        prop_assert_eq!(f.total_self_ns, root_total(&xs));
        prop_assert_eq!(f.lines.iter().map(|(_, w)| *w).sum::<u64>(), f.total_self_ns);
    }
}

/// An op that became a span is one frame: its weight is its self time (what its child span
/// and the op in it leave), and its stacks sum to its duration.
#[test]
fn an_op_that_became_a_span_is_one_frame() {
    let f = fold(&testkit::op_span_trace(), None);
    assert_eq!(f.adjustments.total(), 0, "{:?}", f.adjustments);
    assert_eq!(
        text(&f),
        "lone 50\nlone;lone 50\nouter 160\nouter;add 40\nouter;inner 60\nouter;inner;mm 40\n"
    );
}
