//! `export --format parquet` into a dataset: a run replaced whole or not at all, never
//! through a link, bounded partition names, the Int32 rank, the heap table and the hint.

use std::path::{Path, PathBuf};

use testkit::files_under;
use trace_record::schema::{Event, HeapAllocEvent, HeapFreeEvent, Phase, SpanKind};
use trace_record::{Run, TraceSession};

use super::{run_in, stderr};

/// Writes 4 ranks of run `job` (`ops` ops each, seed `seed`) into `dir`; returns their paths.
fn ranks(dir: &Path, ops: usize, seed: u64) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    (0..4)
        .map(|r| {
            let path = dir.join(format!("rank-{r}.jsonl"));
            let cfg = testkit::SynthConfig {
                ops,
                ops_per_step: 5,
                seed: seed + u64::from(r),
                rank: Some((r, 4)),
                run_id: Some("job".into()),
                ..testkit::SynthConfig::default()
            };
            let mut f = std::fs::File::create(&path).unwrap();
            testkit::write_synthetic(&mut f, &cfg).unwrap();
            path
        })
        .collect()
}

fn export(dir: &Path, out: &Path, traces: &[&Path]) -> std::process::Output {
    let mut args = vec!["export", "--format", "parquet", "-o", out.to_str().unwrap()];
    args.extend(traces.iter().map(|p| p.to_str().unwrap()));
    run_in(dir, &args)
}

/// Rows of the Parquet file at `path`.
fn rows(path: &Path) -> i64 {
    let f = std::fs::File::open(path).unwrap();
    parquet::file::reader::FileReader::metadata(
        &parquet::file::serialized_reader::SerializedFileReader::new(f).unwrap(),
    )
    .file_metadata()
    .num_rows()
}

#[test]
fn a_failed_export_leaves_every_rank_of_the_old_run_and_a_good_one_replaces_all() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ds = d.join("ds");
    let old = ranks(&d.join("old"), 60, 1);
    let old: Vec<&Path> = old.iter().map(PathBuf::as_path).collect();
    let o = export(d, &ds, &old);
    assert!(o.status.success(), "{}", stderr(&o));
    let before = files_under(&ds);
    assert_eq!(before.len(), 4 * trace_parquet::Table::COUNT);
    for r in 0..4 {
        assert_eq!(rows(&ds.join(format!("run=job/rank={r}/ops.parquet"))), 60);
    }
    // The new run: 25 ops a rank, an invalid line in rank 2.
    let new = ranks(&d.join("new"), 25, 100);
    let mut bytes = std::fs::read(&new[2]).unwrap();
    bytes.extend_from_slice(b"{\"type\":\"op\",\"name\":\n");
    let bad = d.join("new/rank-2-bad.jsonl");
    std::fs::write(&bad, &bytes).unwrap();
    let with_bad = [&*new[0], &*new[1], &*bad, &*new[3]];
    let o = export(d, &ds, &with_bad);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("rank-2-bad.jsonl"), "{}", stderr(&o));
    assert_eq!(
        files_under(&ds),
        before,
        "every old rank as it was, no build left"
    );
    // A good export replaces every rank.
    let good: Vec<&Path> = new.iter().map(PathBuf::as_path).collect();
    let o = export(d, &ds, &good);
    assert!(o.status.success(), "{}", stderr(&o));
    for r in 0..4 {
        assert_eq!(rows(&ds.join(format!("run=job/rank={r}/ops.parquet"))), 25);
    }
    assert_eq!(
        std::fs::read_dir(&ds).unwrap().count(),
        1,
        "only run=job: no build or replaced partition left"
    );
    // Exporting two ranks of the run replaces it with those two: never a mix of exports.
    let o = export(d, &ds, &good[..2]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(ds.join("run=job")).unwrap().count(), 2);
}

#[test]
fn no_table_is_written_through_a_link_inside_the_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ds = d.join("ds");
    let traces = ranks(&d.join("t"), 10, 1);
    let traces: Vec<&Path> = traces.iter().map(PathBuf::as_path).collect();
    assert!(export(d, &ds, &traces).status.success());
    // `run=job/rank=0` a link to a directory elsewhere.
    let elsewhere = d.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let rank0 = ds.join("run=job/rank=0");
    std::fs::remove_dir_all(&rank0).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &rank0).unwrap();
    let before = files_under(&ds);
    let o = export(d, &ds, &traces);
    assert!(!o.status.success());
    let text = stderr(&o);
    assert!(
        text.contains(&format!("{} is a symbolic link", rank0.display())),
        "{text}"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    assert_eq!(files_under(&ds), before);
    // `spans.parquet` a link to a user's file.
    std::fs::remove_file(&rank0).unwrap();
    std::fs::remove_dir_all(ds.join("run=job")).unwrap();
    assert!(export(d, &ds, &traces).status.success());
    let user = d.join("user.txt");
    std::fs::write(&user, "mine").unwrap();
    let spans = ds.join("run=job/rank=1/spans.parquet");
    std::fs::remove_file(&spans).unwrap();
    std::os::unix::fs::symlink(&user, &spans).unwrap();
    let o = export(d, &ds, &traces);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("spans.parquet is a symbolic link"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&user).unwrap(), "mine");
    // The output directory itself may be a link: the user named it.
    let named = d.join("named");
    std::os::unix::fs::symlink(d.join("real"), &named).unwrap();
    std::fs::create_dir(d.join("real")).unwrap();
    let o = export(d, &named, &traces);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(d.join("real/run=job/rank=3/heap.parquet").is_file());
}

/// A version-2 trace of `run_id` with a span and tracked-heap lines (two allocations, one
/// freed), its header's rank `rank`.
fn heap_trace(path: &Path, run_id: &str, rank: Option<u32>) {
    let mut run = Run::new("cli::parquet", Phase::Infer, "cpu").run_id(run_id);
    if let Some(r) = rank {
        run = run.rank(r, r.saturating_add(1));
    }
    let s = TraceSession::open(path, run).unwrap();
    {
        let span = s.span("forward", SpanKind::Function, None);
        let alloc = |id, bytes| {
            Event::HeapAlloc(HeapAllocEvent {
                id,
                bytes,
                thread: 1,
                ts: s.now_ns(),
                phase: None,
                span: span.id().map(|x| x.0),
            })
        };
        s.record_heap(&[alloc(1, 8192), alloc(2, 4096)]);
        s.record_heap(&[Event::HeapFree(HeapFreeEvent {
            id: 1,
            ts: s.now_ns(),
        })]);
    }
    s.finish().unwrap();
}

#[test]
fn heap_lines_long_run_ids_big_ranks_and_the_hint() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ds = d.join("ds");
    let long = "r".repeat(300);
    let trace = d.join("heap.jsonl");
    heap_trace(&trace, &long, None);
    let o = export(d, &ds, &[&trace]);
    let text = stderr(&o);
    assert!(o.status.success(), "{text}");
    // One table per glob in the hint (a glob over every table mixes schemas).
    assert!(
        text.contains("/**/ops.parquet', hive_partitioning = true)"),
        "{text}"
    );
    assert!(!text.contains("*.parquet'"), "{text}");
    assert!(text.contains("3 heap"), "{text}");
    let name = trace_parquet::run_partition_name(&long);
    assert!(name.len() < 255 && name.contains('~'), "{name}");
    let heap = ds.join(&name).join("rank=0/heap.parquet");
    assert_eq!(rows(&heap), 3);
    // A rank beyond Int32: refused before anything is written, naming the column's type.
    let big = d.join("big.jsonl");
    heap_trace(&big, "big", Some(u32::MAX));
    let o = export(d, &ds, &[&big]);
    let text = stderr(&o);
    assert!(!o.status.success());
    assert!(
        text.contains("big.jsonl") && text.contains("Int32"),
        "{text}"
    );
    assert!(!text.contains("64-bit"), "{text}");
    assert!(!ds.join("run=big").exists());
}
