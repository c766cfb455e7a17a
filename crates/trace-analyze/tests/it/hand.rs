//! Analyses of the small hand-made trace against values computed by hand (see the comments).

use trace_analyze::memory_report;
use trace_analyze::span_tree;
use trace_analyze::{OpColumn, OpTableOptions, op_table};
use trace_analyze::{TraceEnd, load_str};
use trace_record::schema::{ExecStep, MemoryCategory, Outcome, TimingMode};

use crate::common::small;

#[test]
fn op_self_time_total_and_p95() {
    let t = small();
    let table = op_table(&t, &OpTableOptions::default());
    let row = |n: &str| table.rows.iter().find(|r| r.name == n).expect(n);
    // linear [20,120] contains matmul [30,90] and add [95,115]: self 100-60-20 = 20;
    // step 1: linear [320,370] contains matmul [330,360]: self 50-30 = 20.
    let linear = row("linear");
    assert_eq!(
        (linear.count, linear.total_ns, linear.self_ns),
        (2, 150, 40)
    );
    assert_eq!((linear.min_ns, linear.max_ns), (50, 100));
    // Nearest-rank p95 of {50, 100}: rank ceil(0.95*2) = 2 -> 100.
    assert_eq!(linear.p95_ns, 100);
    assert!((linear.mean_ns - 75.0).abs() < 1e-9);
    // Share = self / step time; steps: 0 -> [0,300), 1 -> [300,500] = 500 ns.
    assert_eq!(table.step_time_ns, Some(500));
    assert!((linear.share_of_step.unwrap() - 40.0 / 500.0).abs() < 1e-12);
    let matmul = row("matmul");
    assert_eq!((matmul.count, matmul.total_ns, matmul.self_ns), (2, 90, 90));
    assert_eq!(matmul.output_bytes, 256 + 1024);
    assert_eq!(row("matmul_bwd").self_ns, 100);
    // Sorted by total, descending: linear 150, matmul_bwd 100, matmul 90, add 20.
    let names: Vec<&str> = table.rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["linear", "matmul_bwd", "matmul", "add"]);
    assert_eq!(table.timing, TimingMode::Host);
}

#[test]
fn op_table_sorts_limits_and_groups_by_shape() {
    let t = small();
    let by_self = op_table(
        &t,
        &OpTableOptions {
            sort: OpColumn::SelfTime,
            limit: Some(2),
            by_shape: false,
        },
    );
    assert_eq!(by_self.groups, 4);
    let names: Vec<&str> = by_self.rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["matmul_bwd", "matmul"]);
    let by_name = op_table(
        &t,
        &OpTableOptions {
            sort: OpColumn::Name,
            limit: None,
            by_shape: true,
        },
    );
    let rows: Vec<(&str, &str)> = by_name
        .rows
        .iter()
        .map(|r| (r.name.as_str(), r.input_shapes.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        rows,
        [
            ("add", "[8, 8]"),
            ("linear", "[4, 4]"),
            ("matmul", "[4, 4] x [4, 4]"),
            ("matmul_bwd", "[4, 8]"),
        ]
    );
    assert_eq!("p95".parse::<OpColumn>(), Ok(OpColumn::P95));
    assert_eq!("Self_Time".parse::<OpColumn>(), Ok(OpColumn::SelfTime));
    assert_eq!(
        "bogus".parse::<OpColumn>().map_err(|e| e.to_string()),
        Err(
            "unknown op table column `bogus` (expected one of: name, count, total, self, mean, \
             min, max, p95, bytes, share)"
                .to_string()
        )
    );
}

#[test]
fn span_tree_total_self_spread_and_exec_step() {
    let t = small();
    let tree = span_tree(&t);
    let paths: Vec<&str> = tree.nodes.iter().map(|n| n.path.as_str()).collect();
    assert_eq!(
        paths,
        ["train_step", "train_step/forward", "train_step/backward"]
    );
    let root = tree.node("train_step").unwrap();
    // 300 + 200; self: (300 - 140 - 130) + (200 - 90) = 30 + 110.
    assert_eq!((root.count, root.total_ns, root.self_ns), (2, 500, 140));
    let ps = root.per_step.unwrap();
    assert_eq!((ps.count, ps.min, ps.max), (2, 200, 300));
    assert!((ps.mean - 250.0).abs() < 1e-9 && (ps.stddev - 50.0).abs() < 1e-9);
    let fwd = tree.node("train_step/forward").unwrap();
    assert_eq!(
        (fwd.total_ns, fwd.exec_step),
        (230, Some(ExecStep::Forward))
    );
    let fs = fwd.per_step.unwrap();
    assert!((fs.mean - 115.0).abs() < 1e-9 && (fs.stddev - 25.0).abs() < 1e-9);
    // Self time leaves out the time covered by the span's own ops, counted once where ops
    // nest: step 0 [10,150] minus the union [20,120] of linear ⊃ {matmul, add} = 40;
    // step 1 [310,400] minus linear [320,370] ⊃ matmul = 40.
    assert_eq!(fwd.self_ns, 80);
    let fss = fwd.per_step_self.unwrap();
    assert_eq!((fss.count, fss.min, fss.max), (2, 40, 40));
    // Allocations made in forward spans: 256 + 128 + 1024.
    assert_eq!(fwd.alloc_bytes, 1408);
    let bwd = tree.node("train_step/backward").unwrap();
    assert_eq!((bwd.count, bwd.exec_step), (1, Some(ExecStep::Backward)));
    // [150,280] minus matmul_bwd [160,260].
    assert_eq!((bwd.total_ns, bwd.self_ns), (130, 30));
    assert_eq!(bwd.parent, Some(0));
}

#[test]
fn memory_peak_breakdown_live_at_peak_and_leaks() {
    let t = small();
    let m = memory_report(&t).expect("memory present");
    assert_eq!(m.bytes_kind, "logical");
    assert_eq!(m.devices.len(), 1);
    let d = &m.devices[0];
    assert_eq!(d.device, "cpu");
    // Live: 64, 320, 448, 192, 704, 576, 1600 (alloc of 1024 at 350), 576.
    assert_eq!((d.peak_bytes, d.peak_at_ns), (1600, 350));
    assert_eq!(d.peak_by_category.get(MemoryCategory::Parameter), 64);
    assert_eq!(d.peak_by_category.get(MemoryCategory::Activation), 1024);
    assert_eq!(d.peak_by_category.get(MemoryCategory::Gradient), 512);
    assert_eq!(d.peak_by_category.total(), 1600);
    let at_peak: Vec<(u64, u64)> = d
        .peak_allocations
        .iter()
        .map(|a| (a.storage, a.bytes))
        .collect();
    assert_eq!(at_peak, [(5, 1024), (4, 512), (1, 64)]);
    assert_eq!(d.peak_allocations[1].label.as_deref(), Some("w.grad"));
    assert_eq!(d.peak_allocations[1].shape.as_deref(), Some("[8, 16]"));
    assert_eq!(d.end_bytes, 576);
    // The gradient is still live at the end; the parameter is expected to be.
    assert_eq!((d.possible_leak_count, d.possible_leak_bytes), (1, 512));
    assert_eq!(d.possible_leaks[0].storage, 4);
    assert_eq!((d.allocs, d.frees, d.unmatched_frees), (5, 3, 0));
    assert!(d.physical.is_none());
    assert!(d.timeline.iter().any(|p| p.live_bytes == 1600));
}

#[test]
fn steps_and_health() {
    let t = small();
    assert_eq!(t.outcome, TraceEnd::Trailer(Outcome::Complete));
    assert!(t.issues.is_empty(), "{:?}", t.issues);
    let durs: Vec<u64> = t
        .steps
        .iter()
        .map(trace_analyze::Step::duration_ns)
        .collect();
    assert_eq!(durs, [300, 200]);
    assert_eq!(t.step_ops(0).len(), 4);
    assert_eq!(t.step_ops(1).len(), 2);
}

#[test]
fn gaps_are_absent_not_zero_and_device_timing_is_labelled() {
    let text = concat!(
        r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"g","entrypoint":"e","phase":"infer","device":"cuda:0","timing":"device_synchronized","start_unix_ns":0,"pid":1}}"#,
        "\n",
        r#"{"type":"op","name":"relu","in":[1],"out":[2],"shape":[4],"dtype":"f32","ts":20,"dur":5}"#,
        "\n",
    );
    let t = load_str(text, "gaps.jsonl", Default::default()).unwrap();
    assert!(memory_report(&t).is_none());
    assert_eq!(t.run.timing, TimingMode::DeviceSynchronized);
    let table = op_table(&t, &OpTableOptions::default());
    assert_eq!(table.timing, TimingMode::DeviceSynchronized);
    // No `step` event: the op is in step 0 (the schema's rule), which ends at its last event;
    // without a trailer that step is partial, left out of step times here as in the summary.
    assert_eq!(table.step_time_ns, None);
    assert!(table.rows[0].share_of_step.is_none());
    // No trailer: truncated, analysed anyway.
    assert_eq!(t.outcome, TraceEnd::Truncated);
    assert!(t.is_incomplete());
    let cache = trace_analyze::new_step_cache();
    let s = trace_analyze::summarize(&t, &cache).unwrap();
    assert!(s.memory.is_none() && s.steps.spread.is_none() && s.health.incomplete);
}

#[test]
fn truncated_trace_is_analysed_and_flagged() {
    let text = std::fs::read_to_string(testkit::small_jsonl()).unwrap();
    // Cut in the middle of the line after the first step's spans end.
    let cut = text.find(r#"{"type":"step","index":1"#).unwrap() + 20;
    let t = load_str(&text[..cut], "cut.jsonl", Default::default()).unwrap();
    assert_eq!(t.outcome, TraceEnd::Truncated);
    assert!(t.partial_last_line);
    assert_eq!(t.ops.len(), 4);
    assert_eq!(t.steps.len(), 1);
}

#[test]
fn bad_input_names_file_line_and_field() {
    let text = std::fs::read_to_string(testkit::small_jsonl()).unwrap();
    let bad = text.replacen(r#""dur":60"#, r#""dur":"sixty""#, 1);
    let e = load_str(&bad, "bad.jsonl", Default::default()).unwrap_err();
    let msg = e.to_string();
    assert!(e.is_bad_trace());
    assert!(msg.contains("bad.jsonl") && msg.contains("line 8"), "{msg}");
    assert!(msg.contains("dur"), "{msg}");
}

#[test]
fn physical_samples_beside_logical_per_device() {
    let text = concat!(
        r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"p","entrypoint":"e","phase":"train","device":"cuda:0","timing":"device_synchronized","start_unix_ns":0,"pid":1}}"#,
        "\n",
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":100,"cat":"activation","ts":1}"#,
        "\n",
        r#"{"type":"memory","action":"alloc","storage":2,"tensor":2,"bytes":40,"dev":"cpu","cat":"input","ts":2}"#,
        "\n",
        r#"{"type":"device_memory","dev":"cuda:0","used":5000,"reserved":8000,"ts":3}"#,
        "\n",
        r#"{"type":"device_memory","dev":"cuda:0","used":6000,"free":100,"ts":4}"#,
        "\n",
        r#"{"type":"memory","action":"free","storage":1,"tensor":1,"bytes":100,"cat":"activation","ts":5}"#,
        "\n",
    );
    let t = load_str(text, "phys.jsonl", Default::default()).unwrap();
    let m = memory_report(&t).unwrap();
    let devs: Vec<&str> = m.devices.iter().map(|d| d.device.as_str()).collect();
    assert_eq!(devs, ["cpu", "cuda:0"]);
    let (cpu, gpu) = (&m.devices[0], &m.devices[1]);
    assert_eq!((cpu.peak_bytes, cpu.end_bytes), (40, 40));
    assert_eq!(cpu.peak_by_category.get(MemoryCategory::Input), 40);
    assert!(cpu.physical.is_none());
    // Logical bytes are the allocations only; the physical figures stay beside them.
    assert_eq!((gpu.peak_bytes, gpu.end_bytes), (100, 0));
    let p = gpu.physical.as_ref().unwrap();
    assert_eq!(p.samples, 2);
    assert_eq!(p.max_used_bytes, Some(6000));
    assert_eq!(p.max_reserved_bytes, Some(8000));
    assert_eq!(p.min_free_bytes, Some(100));
}

/// An op that became a span and its span are one region: `ops` and `spans` give it the same
/// total and the same self time (what its child span and the op in it leave); an op line in
/// a span of kind `op` that started later is an op inside that span.
#[test]
fn an_op_that_became_a_span_has_its_spans_self_time() {
    let bytes = testkit::op_span_trace();
    let t = load_str(
        std::str::from_utf8(&bytes).unwrap(),
        "op_span",
        Default::default(),
    )
    .unwrap();
    let is_span: Vec<bool> = t.ops.iter().map(|o| o.is_span).collect();
    assert_eq!(is_span, [false, false, true, false]);
    let tree = span_tree(&t);
    let outer = tree.node("outer").unwrap();
    assert_eq!((outer.total_ns, outer.self_ns), (300, 160));
    let lone = tree.node("lone").unwrap();
    assert_eq!((lone.total_ns, lone.self_ns), (100, 50));
    let ops = op_table(&t, &OpTableOptions::default());
    let row = |name: &str| {
        let r = ops.rows.iter().find(|r| r.name == name).unwrap();
        (r.total_ns, r.self_ns)
    };
    assert_eq!(row("outer"), (300, 160));
    assert_eq!(row("lone"), (50, 50));
    assert_eq!(row("mm"), (40, 40));
}

/// The `tracing` layer's `#0` is dropped from a span alone among its siblings, decided over
/// the whole trace by parent name, so a path reads alike in every step; numbered siblings keep
/// their index.
#[test]
fn a_span_alone_among_its_siblings_loses_its_zero_index() {
    let bytes = testkit::hand_trace(&[
        r#"{"type":"span_start","id":1,"name":"model#0","kind":"module","thread":0,"ts":1}"#,
        r#"{"type":"span_start","id":2,"parent":1,"name":"attention#0","kind":"module","thread":0,"ts":2}"#,
        r#"{"type":"span_start","id":3,"parent":2,"name":"linear#0","kind":"module","thread":0,"ts":3}"#,
        r#"{"type":"span_end","id":3,"ts":4}"#,
        r#"{"type":"span_end","id":2,"ts":5}"#,
        r#"{"type":"span_start","id":4,"parent":1,"name":"attention#1","kind":"module","thread":0,"ts":6}"#,
        r#"{"type":"span_end","id":4,"ts":7}"#,
        r#"{"type":"span_end","id":1,"ts":8}"#,
        // A later forward where `norm` has a sibling: `norm#0` keeps its index everywhere.
        r#"{"type":"span_start","id":5,"name":"forward","kind":"function","thread":0,"ts":9}"#,
        r#"{"type":"span_start","id":6,"parent":5,"name":"norm#0","kind":"module","thread":0,"ts":10}"#,
        r#"{"type":"span_end","id":6,"ts":11}"#,
        r#"{"type":"span_end","id":5,"ts":12}"#,
        r#"{"type":"span_start","id":7,"name":"forward","kind":"function","thread":0,"ts":13}"#,
        r#"{"type":"span_start","id":8,"parent":7,"name":"norm#0","kind":"module","thread":0,"ts":14}"#,
        r#"{"type":"span_end","id":8,"ts":15}"#,
        r#"{"type":"span_start","id":9,"parent":7,"name":"norm#1","kind":"module","thread":0,"ts":16}"#,
        r#"{"type":"span_end","id":9,"ts":17}"#,
        r#"{"type":"span_end","id":7,"ts":18}"#,
    ]);
    let t = load_str(
        std::str::from_utf8(&bytes).unwrap(),
        "names",
        Default::default(),
    )
    .unwrap();
    let paths: Vec<String> = span_tree(&t).nodes.iter().map(|n| n.path.clone()).collect();
    assert_eq!(
        paths,
        [
            "model",
            "model/attention#0",
            "model/attention#0/linear",
            "model/attention#1",
            "forward",
            "forward/norm#0",
            "forward/norm#1"
        ]
    );
}
