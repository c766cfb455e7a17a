//! The Parquet tables read back with the parquet crate's Arrow reader: rows, values, edge cases;
//! the dataset's runs replaced whole and never written through a link (`dataset`).

#[cfg(unix)]
mod dataset;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use trace_parquet::{ExportOptions, ParquetError, Table, write_tables};
use trace_record::{ReadOptions, TraceReader};

/// Every table of `trace` (bytes of a JSONL trace) as record batches, with the summary and
/// the number of row groups of each file.
struct Exported {
    tables: Vec<RecordBatch>,
    row_groups: Vec<usize>,
    summary: trace_parquet::ExportSummary,
}

fn export(trace: &[u8], opts: &ExportOptions) -> Result<Exported, ParquetError> {
    let mut reader = TraceReader::new(trace, ReadOptions::default())?;
    let outs: [Vec<u8>; Table::COUNT] = Default::default();
    let (outs, summary) = write_tables(&mut reader, "run-a", 3, opts, outs)?;
    let mut tables = Vec::new();
    let mut row_groups = Vec::new();
    for (t, bytes) in Table::ALL.iter().zip(outs) {
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &bytes).unwrap();
        let builder = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap_or_else(|e| panic!("{}: {e}", t.name()))
            .with_batch_size(1 << 20);
        row_groups.push(builder.metadata().num_row_groups());
        let schema = builder.schema().clone();
        let mut batches: Vec<RecordBatch> =
            builder.build().unwrap().collect::<Result<_, _>>().unwrap();
        // The tests' tables are small: one batch, or none for an empty table.
        assert!(
            batches.len() <= 1,
            "{}: {} batches",
            t.name(),
            batches.len()
        );
        tables.push(
            batches
                .pop()
                .unwrap_or_else(|| RecordBatch::new_empty(schema)),
        );
    }
    Ok(Exported {
        tables,
        row_groups,
        summary,
    })
}

fn i64s(b: &RecordBatch, col: &str) -> Vec<Option<i64>> {
    let a = b.column_by_name(col).unwrap().as_primitive::<Int64Type>();
    (0..a.len())
        .map(|i| (!a.is_null(i)).then(|| a.value(i)))
        .collect()
}

fn strs(b: &RecordBatch, col: &str) -> Vec<Option<String>> {
    let a = b.column_by_name(col).unwrap().as_string::<i32>();
    (0..a.len())
        .map(|i| (!a.is_null(i)).then(|| a.value(i).to_string()))
        .collect()
}

fn bools(b: &RecordBatch, col: &str) -> Vec<bool> {
    let a = b.column_by_name(col).unwrap().as_boolean();
    (0..a.len()).map(|i| a.value(i)).collect()
}

fn table(e: &Exported, t: Table) -> &RecordBatch {
    &e.tables[t.index()]
}

#[test]
fn a_session_trace_round_trips() {
    let trace = testkit::session_trace(4);
    let e = export(&trace, &ExportOptions::default()).unwrap();
    // Count the trace's lines by type with the reader, independently of the exporter.
    let parsed = trace_record::read_trace_bytes(&trace).unwrap();
    let count = |f: &dyn Fn(&trace_record::schema::Event) -> bool| {
        parsed.events.iter().filter(|l| f(&l.event)).count()
    };
    use trace_record::schema::Event;
    let ops = count(&|e| matches!(e, Event::Op(_)));
    let spans = count(&|e| matches!(e, Event::SpanStart(_)));
    let memory = count(&|e| matches!(e, Event::Memory(_)));
    let gradients = count(&|e| matches!(e, Event::Gradient(_)));
    assert!(ops > 10 && spans > 5 && memory > 5 && gradients > 0);
    let rows = |t: Table| table(&e, t).num_rows();
    assert_eq!(rows(Table::Ops), ops);
    assert_eq!(rows(Table::Spans), spans);
    assert_eq!(rows(Table::Memory), memory);
    assert_eq!(rows(Table::Gradients), gradients);
    assert_eq!(e.summary.rows_of(Table::Ops), ops as u64);
    // Every row carries the run and rank it was exported under.
    for t in Table::ALL {
        let b = table(&e, t);
        assert!(
            strs(b, "run_id")
                .iter()
                .all(|r| r.as_deref() == Some("run-a"))
        );
        let rank = b
            .column_by_name("rank")
            .unwrap()
            .as_primitive::<Int32Type>();
        assert!((0..rank.len()).all(|i| rank.value(i) == 3), "{}", t.name());
    }
    // Op values as the trace has them, in file order.
    let op_lines: Vec<&trace_record::schema::OpEvent> = parsed
        .events
        .iter()
        .filter_map(|l| match &l.event {
            Event::Op(o) => Some(o),
            _ => None,
        })
        .collect();
    let b = table(&e, Table::Ops);
    let names = strs(b, "name");
    let durs = i64s(b, "dur_ns");
    for (i, o) in op_lines.iter().enumerate() {
        assert_eq!(names[i].as_deref(), Some(o.name.as_str()));
        assert_eq!(durs[i], Some(o.dur as i64));
    }
    // Steps: four recorded steps, numbered as the step rule numbers them.
    let steps = table(&e, Table::Steps);
    let counted: Vec<i64> = i64s(steps, "step")
        .into_iter()
        .zip(bools(steps, "is_step"))
        .filter_map(|(s, is)| is.then_some(s.unwrap()))
        .collect();
    assert_eq!(counted, [1, 2, 3, 4]);
    assert!(bools(steps, "complete").iter().all(|&c| c));
    // Every op is in a step that counts.
    assert!(
        i64s(b, "step")
            .iter()
            .all(|s| s.is_some_and(|s| counted.contains(&s)))
    );
    // Live bytes never go negative and end at what was never freed.
    let m = table(&e, Table::Memory);
    let mut live = 0i64;
    for d in i64s(m, "delta_bytes") {
        live += d.unwrap();
        assert!(live >= 0);
    }
}

#[test]
fn row_groups_are_written_as_rows_arrive() {
    let trace = testkit::session_trace(6);
    let small = ExportOptions {
        row_group_rows: 4,
        ..ExportOptions::default()
    };
    let a = export(&trace, &small).unwrap();
    let b = export(&trace, &ExportOptions::default()).unwrap();
    let ops = a.summary.rows_of(Table::Ops) as usize;
    assert_eq!(a.row_groups[Table::Ops.index()], ops.div_ceil(4));
    assert_eq!(b.row_groups[Table::Ops.index()], 1);
    // The same rows either way.
    for t in Table::ALL {
        assert_eq!(table(&a, t), table(&b, t), "{}", t.name());
    }
}

#[test]
fn spans_ends_own_ops_and_memory_replay() {
    let trace = testkit::hand_trace(&[
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":100,"cat":"parameter","ts":1}"#,
        r#"{"type":"span_start","id":1,"name":"outer","kind":"op","thread":0,"ts":100}"#,
        r#"{"type":"op","span":1,"name":"add","dtype":"f32","ts":110,"dur":40}"#,
        r#"{"type":"op","span":1,"name":"outer","dtype":"f32","ts":100,"dur":300}"#,
        r#"{"type":"memory","action":"alloc","storage":2,"tensor":2,"bytes":50,"cat":"activation","ts":120}"#,
        r#"{"type":"memory","action":"alloc","storage":2,"tensor":2,"bytes":70,"cat":"activation","ts":130}"#,
        r#"{"type":"memory","action":"free","storage":9,"tensor":9,"bytes":5,"cat":"activation","ts":140}"#,
        r#"{"type":"memory","action":"free","storage":2,"tensor":2,"bytes":70,"cat":"activation","ts":150}"#,
        r#"{"type":"span_end","id":1,"ts":400}"#,
        r#"{"type":"span_end","id":77,"ts":401}"#,
        r#"{"type":"step","index":1,"ts":500}"#,
        r#"{"type":"span_start","id":2,"name":"never_ends","kind":"module","thread":1,"ts":510}"#,
        r#"{"type":"op","span":2,"name":"mm","dtype":"f32","ts":520,"dur":10}"#,
    ]);
    let e = export(&trace, &ExportOptions::default()).unwrap();
    let ops = table(&e, Table::Ops);
    assert_eq!(bools(ops, "own_op"), [false, true, false]);
    assert_eq!(i64s(ops, "step"), [Some(0), Some(0), Some(1)]);
    let spans = table(&e, Table::Spans);
    assert_eq!(
        strs(spans, "name"),
        [Some("outer".into()), Some("never_ends".into())]
    );
    assert_eq!(i64s(spans, "dur_ns"), [Some(300), None]);
    assert_eq!(i64s(spans, "end_ns"), [Some(400), None]);
    assert_eq!(e.summary.unended_spans, 1);
    assert_eq!(e.summary.stray_span_ends, 1);
    let mem = table(&e, Table::Memory);
    // alloc 100, alloc 50, re-alloc as 70 (+20), free of a storage never allocated (0),
    // free returning the allocation's 70.
    assert_eq!(
        i64s(mem, "delta_bytes"),
        [Some(100), Some(50), Some(20), Some(0), Some(-70)]
    );
    assert_eq!(e.summary.duplicate_allocs, 1);
    assert_eq!(e.summary.frees_without_alloc, 1);
    // No trailer: the trace is incomplete and its last step is where it stopped.
    assert!(e.summary.incomplete);
    let steps = table(&e, Table::Steps);
    assert_eq!(i64s(steps, "step"), [Some(0), Some(1)]);
    assert_eq!(bools(steps, "complete"), [true, false]);
    assert_eq!(i64s(steps, "start_unix_ns"), [Some(1), Some(500)]);
}

#[test]
fn sampled_stacks_are_three_tables() {
    let trace = testkit::hand_trace(&[
        r#"{"type":"span_start","id":1,"name":"s","kind":"function","thread":0,"ts":10}"#,
        r#"{"type":"frame","id":1,"func":"main","file":"src/main.rs"}"#,
        r#"{"type":"frame","id":2,"func":"work","inlined":true}"#,
        r#"{"type":"stack","id":5,"frames":[1,2]}"#,
        r#"{"type":"samples","step":0,"thread":4242,"stack":5,"n":7,"span":1}"#,
        r#"{"type":"span_end","id":1,"ts":20}"#,
    ]);
    let e = export(&trace, &ExportOptions::default()).unwrap();
    let frames = table(&e, Table::Frames);
    assert_eq!(
        strs(frames, "func"),
        [Some("main".into()), Some("work".into())]
    );
    assert_eq!(strs(frames, "file"), [Some("src/main.rs".into()), None]);
    assert_eq!(bools(frames, "inlined"), [false, true]);
    let stacks = table(&e, Table::Stacks);
    assert_eq!(i64s(stacks, "depth"), [Some(0), Some(1)]);
    assert_eq!(i64s(stacks, "frame_id"), [Some(1), Some(2)]);
    let samples = table(&e, Table::Samples);
    assert_eq!(i64s(samples, "n"), [Some(7)]);
    assert_eq!(i64s(samples, "thread"), [Some(4242)]);
    assert_eq!(i64s(samples, "span_id"), [Some(1)]);
}

#[test]
fn hostile_values_get_their_line_and_field() {
    let big = testkit::hand_trace(&[
        r#"{"type":"op","name":"a","dtype":"f32","ts":1,"dur":2}"#,
        r#"{"type":"op","name":"a","dtype":"f32","ts":1,"dur":18446744073709551615}"#,
    ]);
    match export(&big, &ExportOptions::default()) {
        Err(ParquetError::OutOfRange { line, field, value }) => {
            assert_eq!((line, field, value), (3, "dur", u64::MAX));
        }
        other => panic!("{:?}", other.map(|e| e.summary)),
    }
    let bad = testkit::hand_trace(&[
        r#"{"type":"op","name":"a","dtype":"f32","ts":1,"dur":2}"#,
        r#"{"type":"op","name":"#,
    ]);
    let err = export(&bad, &ExportOptions::default())
        .err()
        .expect("a syntax error");
    assert!(matches!(err, ParquetError::Read(_)), "{err}");
    assert!(err.to_string().starts_with("line 3"), "{err}");
}

#[test]
fn deep_and_unended_spans_are_linear() {
    // 50,000 spans nested in one another: one pass, every span written once when it ends.
    let trace = testkit::deep_nesting(50_000);
    let e = export(&trace, &ExportOptions::default()).unwrap();
    assert_eq!(e.summary.rows_of(Table::Spans), 50_000);
}

/// `lines` after a version-2 header (the tracked-heap lines' version).
fn v2_trace(lines: &[&str]) -> Vec<u8> {
    let text = String::from_utf8(testkit::hand_trace(lines)).unwrap();
    text.replacen("\"version\":1", "\"version\":2", 1)
        .into_bytes()
}

#[test]
fn tracked_heap_lines_are_the_heap_table() {
    let trace = v2_trace(&[
        r#"{"type":"span_start","id":1,"name":"fwd","kind":"function","thread":0,"ts":100}"#,
        r#"{"type":"op","span":1,"name":"mm","dtype":"f32","ts":110,"dur":40}"#,
        r#"{"type":"span_end","id":1,"ts":400}"#,
        r#"{"type":"step","index":1,"ts":500}"#,
        r#"{"type":"op","name":"mm","dtype":"f32","ts":510,"dur":40}"#,
        // Written by the tracker's thread after the boundary: placed by their time.
        r#"{"type":"heap_alloc","id":1,"bytes":4096,"thread":2,"ts":120,"phase":"forward","span":1}"#,
        r#"{"type":"heap_alloc","id":2,"bytes":8192,"thread":1,"ts":130}"#,
        r#"{"type":"heap_free","id":1,"ts":300}"#,
        r#"{"type":"heap_free","id":1,"ts":310}"#,
        r#"{"type":"heap_free","id":9,"ts":320}"#,
        r#"{"type":"heap_alloc","id":1,"bytes":64,"thread":1,"ts":330}"#,
        r#"{"type":"heap_alloc","id":3,"bytes":100,"thread":1,"ts":520}"#,
        r#"{"type":"heap_small","step":0,"phase":"forward","span":1,"count":12,"bytes":1536}"#,
        r#"{"type":"heap_account","step":0,"threshold":4096,"lost":1,"unmatched_frees":2,"ts":100,"dur":400}"#,
        r#"{"type":"trailer","outcome":"complete","counts":{},"dropped":0,"ts":600}"#,
    ]);
    let e = export(&trace, &ExportOptions::default()).unwrap();
    let h = table(&e, Table::Heap);
    assert_eq!(h.num_rows(), 9);
    assert_eq!(e.summary.rows_of(Table::Heap), 9);
    let events: Vec<String> = strs(h, "event").into_iter().map(Option::unwrap).collect();
    assert_eq!(
        events,
        [
            "heap_alloc",
            "heap_alloc",
            "heap_free",
            "heap_free",
            "heap_free",
            "heap_alloc",
            "heap_alloc",
            "heap_small",
            "heap_account"
        ]
    );
    assert_eq!(i64s(h, "line"), (7..=15).map(Some).collect::<Vec<_>>());
    // The heap replay of `memory`: a second free and a free of an unknown id change
    // nothing, nor does an id allocated again.
    assert_eq!(
        i64s(h, "delta_bytes"),
        [
            Some(4096),
            Some(8192),
            Some(-4096),
            Some(0),
            Some(0),
            Some(0),
            Some(100),
            Some(0),
            Some(0)
        ]
    );
    assert_eq!(e.summary.heap_ignored, 3);
    // Allocations and frees by time (step 0 ran to 500), sums and accounts by their step.
    assert_eq!(
        i64s(h, "step"),
        [
            Some(0),
            Some(0),
            Some(0),
            Some(0),
            Some(0),
            Some(0),
            Some(1),
            Some(0),
            Some(0)
        ]
    );
    assert_eq!(
        i64s(h, "bytes"),
        [
            Some(4096),
            Some(8192),
            None,
            None,
            None,
            Some(64),
            Some(100),
            Some(1536),
            None
        ]
    );
    assert_eq!(
        i64s(h, "alloc_id")[..5],
        [Some(1), Some(2), Some(1), Some(1), Some(9)]
    );
    assert_eq!(i64s(h, "thread")[..3], [Some(2), Some(1), None]);
    assert_eq!(strs(h, "exec_step")[0].as_deref(), Some("forward"));
    assert_eq!(i64s(h, "span_id")[0], Some(1));
    assert_eq!(i64s(h, "count")[7], Some(12));
    assert_eq!(i64s(h, "ts_ns")[7], None, "a heap_small line has no time");
    assert_eq!(i64s(h, "threshold")[8], Some(4096));
    assert_eq!(i64s(h, "lost")[8], Some(1));
    assert_eq!(i64s(h, "unmatched_frees")[8], Some(2));
    assert_eq!(i64s(h, "dur_ns")[8], Some(400));
    // A trace without heap lines has the table, empty.
    let plain = export(&testkit::session_trace(2), &ExportOptions::default()).unwrap();
    assert_eq!(table(&plain, Table::Heap).num_rows(), 0);
    assert_eq!(table(&plain, Table::Heap).schema(), h.schema());
}

#[test]
fn an_allocation_in_a_gap_between_steps_has_no_step() {
    // Step 1 ends at its last time (200): the schedule did not record step 2, so step 3 is
    // no continuation and 250 lies in no step.
    let trace = v2_trace(&[
        r#"{"type":"step","index":1,"ts":100}"#,
        r#"{"type":"op","name":"mm","dtype":"f32","ts":110,"dur":90}"#,
        r#"{"type":"step","index":3,"ts":300}"#,
        r#"{"type":"op","name":"mm","dtype":"f32","ts":310,"dur":40}"#,
        r#"{"type":"heap_alloc","id":1,"bytes":4096,"thread":1,"ts":150}"#,
        r#"{"type":"heap_alloc","id":2,"bytes":4096,"thread":1,"ts":250}"#,
        r#"{"type":"heap_alloc","id":3,"bytes":4096,"thread":1,"ts":50}"#,
        r#"{"type":"heap_alloc","id":4,"bytes":4096,"thread":1,"ts":320}"#,
    ]);
    let e = export(&trace, &ExportOptions::default()).unwrap();
    assert_eq!(
        i64s(table(&e, Table::Heap), "step"),
        [Some(1), None, None, Some(3)]
    );
}

#[test]
fn a_rank_beyond_int32_names_the_column_type() {
    let trace = testkit::session_trace(1);
    let mut reader = TraceReader::new(&trace[..], ReadOptions::default()).unwrap();
    let outs: [Vec<u8>; Table::COUNT] = Default::default();
    let err = write_tables(
        &mut reader,
        "r",
        trace_parquet::MAX_RANK + 1,
        &ExportOptions::default(),
        outs,
    )
    .expect_err("out of range");
    assert!(matches!(
        err,
        ParquetError::RankOutOfRange {
            rank: 2_147_483_648
        }
    ));
    let text = err.to_string();
    assert!(
        text.contains("Int32") && text.contains("2147483648"),
        "{text}"
    );
    assert!(!text.contains("64-bit"), "{text}");
    // The largest rank that fits is written.
    let mut reader = TraceReader::new(&trace[..], ReadOptions::default()).unwrap();
    let outs: [Vec<u8>; Table::COUNT] = Default::default();
    write_tables(
        &mut reader,
        "r",
        trace_parquet::MAX_RANK,
        &ExportOptions::default(),
        outs,
    )
    .unwrap();
}
