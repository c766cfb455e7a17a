//! Recorded FLOPs and their rate in the op table: summed over the calls that recorded them,
//! divided by those calls' time, absent when no call did, capped when the sum overflows.

use proptest::prelude::*;
use trace_analyze::{OpTableOptions, load_str, op_table};

use crate::common::{from_lines, small};

fn op(name: &str, ts: u64, dur: u64, flops: Option<u64>) -> String {
    let f = flops.map_or(String::new(), |f| format!(r#","flops":{f}"#));
    format!(
        r#"{{"type":"op","name":"{name}","in":[],"out":[],"shape":[2],"dtype":"f32","ts":{ts},"dur":{dur}{f}}}"#
    )
}

#[test]
fn flops_sum_over_the_calls_that_recorded_them() {
    let t = from_lines(&[
        op("matmul", 0, 100, Some(1000)),
        op("matmul", 200, 300, Some(3000)),
        // No FLOPs recorded: its time is not in the rate.
        op("matmul", 600, 1000, None),
        op("relu", 2000, 10, None),
        op("noop", 3000, 0, Some(50)),
    ]);
    let table = op_table(&t, &OpTableOptions::default());
    let row = |n: &str| table.rows.iter().find(|r| r.name == n).expect("row");
    assert_eq!(row("matmul").flops, Some(4000));
    assert_eq!(row("matmul").gflop_per_s, Some(4000.0 / 400.0));
    assert_eq!(row("relu").flops, None);
    assert_eq!(row("relu").gflop_per_s, None);
    // FLOPs in no time: the count is known, the rate is not.
    assert_eq!(row("noop").flops, Some(50));
    assert_eq!(row("noop").gflop_per_s, None);
    assert!(!table.saturated);
}

#[test]
fn flops_past_u64_max_are_capped_and_flagged() {
    let t = from_lines(&[
        op("huge", 0, 10, Some(u64::MAX - 1)),
        op("huge", 20, 10, Some(5)),
    ]);
    let table = op_table(&t, &OpTableOptions::default());
    assert_eq!(table.rows[0].flops, Some(u64::MAX));
    assert!(table.saturated);
}

#[test]
fn flops_of_a_recorded_session_and_of_a_trace_without_them() {
    let bytes = testkit::session_trace(3);
    let text = String::from_utf8(bytes).expect("utf8");
    let t = load_str(&text, "session.jsonl", Default::default()).expect("loads");
    let table = op_table(&t, &OpTableOptions::default());
    assert!(!table.rows.is_empty());
    for r in &table.rows {
        // Every op of the recorded session reports 2048 FLOPs.
        assert_eq!(r.flops, Some(2048 * r.count), "{}", r.name);
        let rate = r.gflop_per_s.expect("timed calls");
        assert!((rate - 2048.0 * r.count as f64 / r.total_ns as f64).abs() < 1e-9 * rate);
    }
    // The small trace records no FLOPs: absent, not zero.
    let table = op_table(&small(), &OpTableOptions::default());
    assert!(
        table
            .rows
            .iter()
            .all(|r| r.flops.is_none() && r.gflop_per_s.is_none())
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the grouping, the rows' FLOPs add up to the ops' FLOPs.
    #[test]
    fn row_flops_add_up_to_the_ops(ops in proptest::collection::vec((0usize..3, 0u64..1000, proptest::option::of(0u64..1_000_000)), 1..50), by_shape in any::<bool>()) {
        let names = ["a", "b", "c"];
        let lines: Vec<String> = ops
            .iter()
            .enumerate()
            .map(|(i, (n, dur, f))| op(names[*n], 2000 * i as u64, *dur, *f))
            .collect();
        let t = from_lines(&lines);
        let table = op_table(&t, &OpTableOptions { by_shape, ..Default::default() });
        let want: u64 = ops.iter().filter_map(|o| o.2).sum();
        let got: u64 = table.rows.iter().filter_map(|r| r.flops).sum();
        prop_assert_eq!(got, want);
        for r in &table.rows {
            // A rate only where FLOPs were recorded, and never more FLOPs per ns than recorded.
            prop_assert!(r.gflop_per_s.is_none() || r.flops.is_some());
            if let (Some(f), Some(rate)) = (r.flops, r.gflop_per_s) {
                prop_assert!(rate.is_finite() && rate <= f as f64);
            }
        }
    }
}
