//! Taking a trace path: exclusive create, a lock while recording, replace by rename only.

use std::sync::{Arc, Barrier};

use trace_record::schema::{Outcome, SpanKind};
use trace_record::{TraceError, TraceSession, Writer, read_trace, writer_of};

use crate::common::run;

fn tmp_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

#[test]
fn an_existing_trace_is_refused_unless_the_run_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, "the user's file\n").unwrap();
    match TraceSession::open(&path, run()) {
        Err(e @ TraceError::Exists { .. }) => {
            assert!(e.to_string().contains("t.jsonl"), "{e}");
            assert!(e.to_string().contains("exists"), "{e}");
        }
        other => panic!("expected Exists, got {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "the user's file\n");

    let s = TraceSession::open(&path, run().overwrite(true)).unwrap();
    drop(s.span("work", SpanKind::Function, None));
    s.finish().unwrap();
    let t = read_trace(&path).unwrap();
    assert_eq!(t.trailer.map(|t| t.outcome), Some(Outcome::Complete));
    assert!(
        tmp_files(dir.path()).is_empty(),
        "{:?}",
        tmp_files(dir.path())
    );
}

#[test]
fn a_file_being_written_is_never_shared_and_says_who_writes_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.jsonl");
    let first = TraceSession::open(&path, run()).unwrap();
    assert_eq!(
        writer_of(&path),
        Writer::Live {
            pid: Some(std::process::id())
        }
    );
    // Replacing it while it is written is refused, naming the writer.
    match TraceSession::open(&path, run().overwrite(true)) {
        Err(e @ TraceError::Busy { pid: Some(_), .. }) => {
            assert!(
                e.to_string()
                    .contains(&format!("being written by pid {}", std::process::id())),
                "{e}"
            );
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    drop(first.span("still mine", SpanKind::Function, None));
    first.finish().unwrap();
    assert_eq!(writer_of(&path), Writer::None);
    let t = read_trace(&path).unwrap();
    assert_eq!(t.events.len(), 2, "the first writer's trace is whole");
    assert!(tmp_files(dir.path()).is_empty());
}

#[test]
fn of_many_writers_started_together_exactly_one_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.jsonl");
    let n = 8;
    let start = Arc::new(Barrier::new(n));
    let hold = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (path, start, hold) = (path.clone(), start.clone(), hold.clone());
            std::thread::spawn(move || {
                start.wait();
                // Half replace, half create: every kind of open races.
                let r = TraceSession::open(&path, run().overwrite(i % 2 == 0));
                // Everyone holds what they got until all have tried.
                hold.wait();
                match r {
                    Ok(s) => {
                        for _ in 0..100 {
                            drop(s.span("winner", SpanKind::Function, None));
                        }
                        s.finish().unwrap();
                        Ok(())
                    }
                    Err(e) => Err(e.to_string()),
                }
            })
        })
        .collect();
    let results: Vec<Result<(), String>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let won = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(won, 1, "{results:?}");
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(
            e.contains("exists") || e.contains("being written"),
            "a clear reason: {e}"
        );
    }
    let t = read_trace(&path).unwrap();
    assert_eq!(t.events.len(), 200, "one writer's lines, none interleaved");
    assert_eq!(t.trailer.map(|t| t.outcome), Some(Outcome::Complete));
    assert!(tmp_files(dir.path()).is_empty());
}

#[cfg(unix)]
#[test]
fn replacing_a_symlink_replaces_the_link_not_its_target() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "keep me\n").unwrap();
    let path = dir.path().join("t.jsonl");
    std::os::unix::fs::symlink(&victim, &path).unwrap();
    assert!(matches!(
        TraceSession::open(&path, run()),
        Err(TraceError::Exists { .. })
    ));
    let s = TraceSession::open(&path, run().overwrite(true)).unwrap();
    s.finish().unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    assert!(
        !std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(read_trace(&path).is_ok());
}

#[test]
fn devices_are_written_as_before() {
    let a = TraceSession::open("/dev/null", run()).unwrap();
    let b = TraceSession::open("/dev/null", run()).unwrap();
    a.finish().unwrap();
    b.finish().unwrap();
    assert_eq!(writer_of("/dev/null"), Writer::None);
}
