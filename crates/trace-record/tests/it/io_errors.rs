//! I/O errors never panic: the session stops writing, counts drops, `finish` returns the error.

use std::io::{self, Write};

use trace_record::schema::SpanKind;
use trace_record::{TraceError, TraceSession, read_trace_bytes};

use crate::common::run;

fn record(session: &TraceSession, n: u64) {
    let _g = session.span("s", SpanKind::Function, None);
    for i in 0..n {
        session.record_counter("c", i as f64);
    }
}

#[test]
fn dev_full_gives_a_clean_error() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("no /dev/full on this system; nothing to check");
        return;
    }
    let session = TraceSession::open("/dev/full", run()).unwrap();
    record(&session, 50_000); // several blocks
    match session.finish() {
        Err(TraceError::Io {
            source, dropped, ..
        }) => {
            assert_eq!(source.raw_os_error(), Some(28), "ENOSPC: {source}");
            assert!(dropped > 0);
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    // Small session: the error surfaces at finish.
    let session = TraceSession::open("/dev/full", run()).unwrap();
    record(&session, 3);
    assert!(matches!(session.finish(), Err(TraceError::Io { .. })));
    // Dropped without finish: no panic.
    let session = TraceSession::open("/dev/full", run()).unwrap();
    record(&session, 10);
    drop(session);
}

#[test]
fn opening_an_unwritable_path_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = TraceSession::open(dir.path().join("missing/dir/t.jsonl"), run()).unwrap_err();
    assert!(
        matches!(err, TraceError::Io { ref path, .. } if path.is_some()),
        "{err}"
    );
}

/// Accepts `limit` bytes, then fails every write.
struct Limited {
    limit: usize,
    data: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Write for Limited {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut d = self.data.lock().unwrap();
        if d.len() + buf.len() > self.limit {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
        }
        d.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn data_before_the_error_stays_readable() {
    let data = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Limited {
        limit: 3 * trace_record::BLOCK_BYTES,
        data: data.clone(),
    };
    let session = TraceSession::from_writer(sink, run());
    record(&session, 100_000);
    let err = session.finish().unwrap_err();
    let TraceError::Io {
        dropped, source, ..
    } = err
    else {
        panic!("{err:?}")
    };
    assert_eq!(source.kind(), io::ErrorKind::StorageFull);
    let bytes = data.lock().unwrap().clone();
    assert!(!bytes.is_empty());
    let trace = read_trace_bytes(&bytes).unwrap();
    assert!(trace.incomplete);
    assert_eq!(trace.partial_line, None, "blocks hold whole lines");
    // Everything recorded was either written or counted as dropped (+2 span events).
    assert_eq!(trace.events.len() as u64 + dropped, 100_000 + 2);
}
