//! Work grows linearly: a 200k-op generated trace costs at most a small constant of work units
//! per event, and twice the ops cost about twice the work (no quadratic blow-up).

use testkit::SynthConfig;
use trace_analyze::compare;
use trace_analyze::memory_report;
use trace_analyze::new_step_cache;
use trace_analyze::span_tree;
use trace_analyze::summarize;
use trace_analyze::{OpTableOptions, op_table};

use crate::common::synthetic;

fn work_of(ops: usize) -> (u64, u64) {
    let t = synthetic(&SynthConfig {
        ops,
        ops_per_step: 1000,
        ..Default::default()
    });
    let events = t.counts.total();
    let cache = new_step_cache();
    summarize(&t, &cache).unwrap();
    op_table(
        &t,
        &OpTableOptions {
            by_shape: true,
            ..Default::default()
        },
    );
    span_tree(&t);
    memory_report(&t);
    (t.work.get(), events)
}

#[test]
fn work_is_linear_on_a_200k_op_trace() {
    let (w1, e1) = work_of(100_000);
    let (w2, e2) = work_of(200_000);
    assert!(e2 >= 800_000, "4 events per op: {e2}");
    // Measured about 8 units per event; a quadratic pass would add ~n^2 = 4e10.
    assert!(w2 <= 20 * e2, "work {w2} for {e2} events");
    let ratio = w2 as f64 / w1 as f64;
    let events_ratio = e2 as f64 / e1 as f64;
    assert!(
        ratio <= events_ratio * 1.1,
        "work ratio {ratio:.3} for events ratio {events_ratio:.3}"
    );
}

#[test]
fn comparing_two_large_traces_stays_linear() {
    let cfg = SynthConfig {
        ops: 50_000,
        ops_per_step: 1000,
        ..Default::default()
    };
    let (a, b) = (synthetic(&cfg), synthetic(&cfg));
    let cache = new_step_cache();
    let c = compare(&a, &b, &cache).unwrap();
    assert_eq!(c.graphs_equal, 50);
    let events = a.counts.total() + b.counts.total();
    let work = a.work.get() + b.work.get();
    assert!(work <= 20 * events, "work {work} for {events} events");
}
