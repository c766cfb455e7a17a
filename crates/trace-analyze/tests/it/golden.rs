//! Golden JSON of every analysis of the small trace (`tests/data/*.golden.json`). Set
//! `UPDATE_GOLDENS=1` to rewrite them after an intended change, and review the diff.

use serde::Serialize;
use trace_analyze::memory_report;
use trace_analyze::span_tree;
use trace_analyze::summarize;
use trace_analyze::{OpTableOptions, op_table};
use trace_analyze::{graph_report, new_step_cache};

use crate::common::{data, small};

fn check<T: Serialize>(name: &str, value: &T) {
    let text = serde_json::to_string_pretty(value).unwrap() + "\n";
    testkit::assert_golden(&data(name), &text);
}

#[test]
fn small_trace_goldens() {
    let t = small();
    let cache = new_step_cache();
    check("small.summary.golden.json", &summarize(&t, &cache).unwrap());
    check(
        "small.ops.golden.json",
        &op_table(
            &t,
            &OpTableOptions {
                by_shape: true,
                ..Default::default()
            },
        ),
    );
    check("small.spans.golden.json", &span_tree(&t));
    check("small.memory.golden.json", &memory_report(&t));
    check(
        "small.graph.golden.json",
        &graph_report(&t, &new_step_cache()).unwrap(),
    );
}
