//! `tracegraph export --format parquet`: a session's trace and ranks exported and read back
//! with the parquet crate's reader; the directory rules, the overwrite rule and bad input.

#[path = "../common/cli.rs"]
mod common;

use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use common::cli;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use trace_record::schema::Event;

const TABLES: [&str; 9] = [
    "ops",
    "spans",
    "steps",
    "memory",
    "samples",
    "frames",
    "stacks",
    "gradients",
    "heap",
];

/// Every batch of the Parquet file at `path` (each file has at least its schema).
fn read(path: &Path) -> Vec<RecordBatch> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

fn i64s(batches: &[RecordBatch], col: &str) -> Vec<i64> {
    let mut v = Vec::new();
    for b in batches {
        let a = b.column_by_name(col).unwrap().as_primitive::<Int64Type>();
        v.extend((0..a.len()).map(|i| a.value(i)));
    }
    v
}

fn strs(batches: &[RecordBatch], col: &str) -> Vec<String> {
    let mut v = Vec::new();
    for b in batches {
        let a = b.column_by_name(col).unwrap().as_string::<i32>();
        v.extend((0..a.len()).map(|i| a.value(i).to_string()));
    }
    v
}

fn ranks(batches: &[RecordBatch]) -> Vec<i32> {
    let mut v = Vec::new();
    for b in batches {
        let a = b
            .column_by_name("rank")
            .unwrap()
            .as_primitive::<Int32Type>();
        v.extend((0..a.len()).map(|i| a.value(i)));
    }
    v
}

/// The session trace of testkit (spans, ops, memory, gradients over `steps` steps) at `path`,
/// with its header's run id set to `run` and rank `rank` when given.
fn write_trace(path: &Path, steps: u64, run: &str, rank: Option<u32>) -> Vec<u8> {
    let text = String::from_utf8(testkit::session_trace(steps)).unwrap();
    let (header, rest) = text.split_once('\n').unwrap();
    let mut h: serde_json::Value = serde_json::from_str(header).unwrap();
    h["run"]["run_id"] = run.into();
    if let Some(r) = rank {
        h["run"]["rank"] = r.into();
        h["run"]["world_size"] = 2.into();
    }
    let bytes = format!("{h}\n{rest}").into_bytes();
    std::fs::write(path, &bytes).unwrap();
    bytes
}

#[test]
fn a_trace_exports_to_its_partition_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    let bytes = write_trace(&trace, 5, "job/7", None);
    let out = dir.path().join("dataset");
    let (code, text) = cli(&[
        "export",
        "--format",
        "parquet",
        "-o",
        out.to_str().unwrap(),
        trace.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("wrote Parquet tables of 1 trace(s)"),
        "{text}"
    );
    // The run id escaped in the directory, rank 0 (the trace's position: no header rank).
    let part = out.join("run=job%2F7").join("rank=0");
    let mut names: Vec<String> = std::fs::read_dir(&part)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = TABLES.iter().map(|t| format!("{t}.parquet")).collect();
    want.sort();
    assert_eq!(names, want, "no temporary file is left");

    let parsed = trace_record::read_trace_bytes(&bytes).unwrap();
    let op_lines: Vec<&trace_record::schema::OpEvent> = parsed
        .events
        .iter()
        .filter_map(|l| match &l.event {
            Event::Op(o) => Some(o),
            _ => None,
        })
        .collect();
    let ops = read(&part.join("ops.parquet"));
    assert_eq!(rows(&ops), op_lines.len());
    assert_eq!(
        strs(&ops, "name"),
        op_lines.iter().map(|o| o.name.clone()).collect::<Vec<_>>()
    );
    assert_eq!(
        i64s(&ops, "dur_ns").iter().sum::<i64>(),
        op_lines.iter().map(|o| o.dur as i64).sum::<i64>()
    );
    assert!(strs(&ops, "run_id").iter().all(|r| r == "job/7"));
    assert!(ranks(&ops).iter().all(|&r| r == 0));
    let memory = read(&part.join("memory.parquet"));
    let memory_lines = parsed
        .events
        .iter()
        .filter(|l| matches!(l.event, Event::Memory(_)))
        .count();
    assert_eq!(rows(&memory), memory_lines);
    // Five steps, as `summary` counts them.
    let steps = read(&part.join("steps.parquet"));
    let mut counted = 0;
    for b in &steps {
        let is = b.column_by_name("is_step").unwrap().as_boolean();
        counted += (0..is.len()).filter(|&i| is.value(i)).count();
    }
    assert_eq!(counted, 5);
    // Tables the trace has no lines for are there, empty, with their schema.
    assert_eq!(rows(&read(&part.join("samples.parquet"))), 0);
}

#[test]
fn ranks_of_one_run_and_the_overwrite_rule() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.jsonl");
    let b = dir.path().join("b.jsonl");
    write_trace(&a, 2, "pid-1", Some(1));
    write_trace(&b, 3, "pid-2", Some(0));
    let out = dir.path().join("ds");
    let o = out.to_str().unwrap();
    let (code, text) = cli(&[
        "export",
        "--format",
        "parquet",
        "--run",
        "job",
        "-o",
        o,
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{text}");
    let r1 = out.join("run=job/rank=1/steps.parquet");
    let r0 = out.join("run=job/rank=0/steps.parquet");
    assert_eq!(ranks(&read(&r1))[0], 1);
    assert_eq!(ranks(&read(&r0))[0], 0);
    // Without --run the header run ids differ: two runs, and a note says so.
    let (code, text) = cli(&[
        "export",
        "--format",
        "parquet",
        "-o",
        o,
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("2 different run ids"), "{text}");
    assert!(out.join("run=pid-1/rank=1/ops.parquet").exists());
    // A file of the user's inside a run's partition: the export refuses to replace the
    // partition (it deletes only what an export wrote), names the file, and changes nothing.
    let keep = out.join("run=job/rank=1/notes.txt");
    std::fs::write(&keep, "mine").unwrap();
    let before = std::fs::read(&r1).unwrap();
    write_trace(&a, 4, "pid-1", Some(1));
    let export_a = [
        "export",
        "--format",
        "parquet",
        "--run",
        "job",
        "-o",
        o,
        a.to_str().unwrap(),
    ];
    let (code, text) = cli(&export_a);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("notes.txt"), "{text}");
    assert_eq!(std::fs::read(&r1).unwrap(), before, "the old tables stay");
    assert!(r0.exists(), "and so does the other rank");
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "mine");
    // Without it, the export replaces the whole run: the partition holds exactly the ranks of
    // this export (rank 1 alone), never ranks of two exports mixed.
    std::fs::remove_file(&keep).unwrap();
    let (code, text) = cli(&export_a);
    assert_eq!(code, 0, "{text}");
    let steps = read(&r1);
    assert_eq!(i64s(&steps, "step").len(), rows(&steps));
    assert!(
        i64s(&steps, "step").contains(&4),
        "replaced by the 4-step trace"
    );
    assert!(
        !r0.exists(),
        "rank 0 was not part of this export of the run"
    );
    // One trace twice for one run and rank is refused (exit 2), nothing written.
    let (code, text) = cli(&[
        "export",
        "--format",
        "parquet",
        "--run",
        "x",
        "-o",
        o,
        a.to_str().unwrap(),
        a.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("both rank 1 of run x"), "{text}");
    assert!(
        !out.join("run=x").exists(),
        "decided before anything is written"
    );
}

#[test]
fn outputs_that_are_not_directories_and_bad_traces() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    write_trace(&trace, 2, "r", None);
    let t = trace.to_str().unwrap();
    // A file as the output directory, and stdout, are refused.
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let (code, text) = cli(&[
        "export",
        "--format",
        "parquet",
        "-o",
        file.to_str().unwrap(),
        t,
    ]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("is not a directory"), "{text}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    let (code, text) = cli(&["export", "--format", "parquet", "-o", "-", t]);
    assert_eq!(code, 2, "{text}");
    // Chrome takes one trace.
    let (code, text) = cli(&["export", "-o", "-", t, t]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("exports one trace (2 given)"), "{text}");
    // A bad line: exit 3 naming the file and line; the tables of the earlier export stay.
    let out = dir.path().join("ds");
    let o = out.to_str().unwrap();
    let (code, text) = cli(&["export", "--format", "parquet", "-o", o, t]);
    assert_eq!(code, 0, "{text}");
    let part = out.join("run=r/rank=0");
    let before = std::fs::read(part.join("ops.parquet")).unwrap();
    let mut bytes = std::fs::read(&trace).unwrap();
    bytes.extend_from_slice(b"{\"type\":\"op\",\"name\":\n");
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, &bytes).unwrap();
    // Same run and rank as the good trace: its partition.
    let (code, text) = cli(&[
        "export",
        "--format",
        "parquet",
        "-o",
        o,
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "{text}");
    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    assert!(text.contains("bad.jsonl"), "{text}");
    assert!(text.contains(&format!("line {lines}")), "{text}");
    assert_eq!(std::fs::read(part.join("ops.parquet")).unwrap(), before);
    let left: Vec<_> = std::fs::read_dir(&part)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
