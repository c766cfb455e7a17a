//! `TraceReader::for_each_batched` and `for_each_batched_ref`: order, line numbers, errors
//! from the parser and from `f`, events read into reused memory.

use trace_record::schema::{Event, MarkerEvent};
use trace_record::{LineEvent, ReadError, ReadOptions, TraceReader, encode_event};

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

use crate::common::trace_text;

/// A trace of `n` markers (lines 2..=n+1), then `tail` lines.
fn markers(n: usize, tail: &[&str]) -> String {
    let mut text = trace_text(&[]);
    let mut line = Vec::new();
    for i in 0..n {
        let event = Event::Marker(MarkerEvent {
            name: format!("m{i}"),
            span: None,
            ts: i as u64,
        });
        line.clear();
        encode_event(&event, "cpu", &mut line);
        text.push_str(std::str::from_utf8(&line).unwrap());
    }
    for l in tail {
        text.push_str(l);
        text.push('\n');
    }
    text
}

fn sequential(text: &str) -> Vec<LineEvent> {
    TraceReader::new(text.as_bytes(), ReadOptions::default())
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[derive(Debug)]
enum TestError {
    Read(ReadError),
    Stop(u64),
}

impl From<ReadError> for TestError {
    fn from(e: ReadError) -> Self {
        TestError::Read(e)
    }
}

#[test]
fn events_arrive_in_order_with_their_lines_across_batches() {
    for n in [0, 1, 4095, 4096, 4097, 3 * 4096 + 17, 40_000] {
        let text = markers(
            n,
            &[r#"{"type":"trailer","outcome":"complete","counts":{},"dropped":0,"ts":9}"#],
        );
        let mut reader = TraceReader::new(text.as_bytes(), ReadOptions::default()).unwrap();
        let mut seen = Vec::new();
        reader
            .for_each_batched(|e| {
                seen.push(e);
                Ok::<(), ReadError>(())
            })
            .unwrap();
        assert_eq!(seen.len(), n);
        assert_eq!(seen, sequential(&text), "n = {n}");
        assert!(!reader.is_incomplete());
        assert_eq!(reader.trailer().map(|t| t.ts), Some(9));
        assert_eq!(reader.lines_read(), n as u64 + 2);
    }
}

#[test]
fn a_parse_error_comes_after_every_event_before_it() {
    let n = 10_000;
    let text = markers(
        n,
        &[
            r#"{"type":"step","index":"x","ts":1}"#,
            r#"{"type":"step","index":1,"ts":1}"#,
        ],
    );
    let mut reader = TraceReader::new(text.as_bytes(), ReadOptions::default()).unwrap();
    let mut count = 0usize;
    let err = reader
        .for_each_batched(|e| {
            count += 1;
            assert_eq!(e.line, count as u64 + 1);
            Ok::<(), TestError>(())
        })
        .unwrap_err();
    assert_eq!(count, n);
    match err {
        TestError::Read(ReadError::Schema { line, field, .. }) => {
            assert_eq!((line, field.as_str()), (n as u64 + 2, "index"));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn an_error_from_f_stops_early_and_is_returned() {
    let text = markers(50_000, &[]);
    let mut reader = TraceReader::new(text.as_bytes(), ReadOptions::default()).unwrap();
    let mut count = 0u64;
    let err = reader
        .for_each_batched(|e| {
            count += 1;
            if count == 5000 {
                return Err(TestError::Stop(e.line));
            }
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(err, TestError::Stop(5001)), "{err:?}");
    assert_eq!(count, 5000);
    // The parser stopped within a few batches of the failure, not at the end of the file.
    assert!(
        reader.lines_read() < 5001 + 8 * 4096,
        "{}",
        reader.lines_read()
    );
}

#[test]
fn a_truncated_trace_reads_to_its_last_complete_line() {
    let mut text = markers(5, &[]);
    text.push_str(r#"{"type":"marker","na"#);
    let mut reader = TraceReader::new(text.as_bytes(), ReadOptions::default()).unwrap();
    let mut count = 0;
    reader
        .for_each_batched(|_| {
            count += 1;
            Ok::<(), ReadError>(())
        })
        .unwrap();
    assert_eq!(count, 5);
    assert!(reader.is_incomplete());
    assert_eq!(reader.partial_line(), Some(7));
}

/// Every event kind in a random order, many batches long: the events the parser reads into
/// reused memory (the fields of earlier events of any kind still there) are the events a
/// fresh reader reads.
#[test]
fn events_read_into_reused_memory_equal_fresh_ones() {
    let mut runner = TestRunner::deterministic();
    let strategy = crate::roundtrip::event();
    let mut text = trace_text(&[]);
    let mut line = Vec::new();
    for _ in 0..12 * 4096 + 5 {
        let event = strategy.new_tree(&mut runner).unwrap().current();
        line.clear();
        encode_event(&event, "cpu", &mut line);
        text.push_str(std::str::from_utf8(&line).unwrap());
    }
    let expected = sequential(&text);
    assert_eq!(expected.len(), 12 * 4096 + 5);
    let mut reader = TraceReader::new(text.as_bytes(), ReadOptions::default()).unwrap();
    let mut seen = Vec::new();
    reader
        .for_each_batched_ref(|e| {
            seen.push(e.clone());
            Ok::<(), ReadError>(())
        })
        .unwrap();
    assert!(seen == expected, "borrowed events differ from fresh ones");
    let mut reader = TraceReader::new(text.as_bytes(), ReadOptions::default()).unwrap();
    let mut owned = Vec::new();
    reader
        .for_each_batched(|e| {
            owned.push(e);
            Ok::<(), ReadError>(())
        })
        .unwrap();
    assert!(owned == expected, "owned events differ from fresh ones");
}

#[test]
fn the_borrowing_pipeline_reports_errors_like_the_owning_one() {
    let text = markers(
        10_000,
        &[
            r#"{"type":"step","index":"x","ts":1}"#,
            r#"{"type":"step","index":1,"ts":1}"#,
        ],
    );
    let mut reader = TraceReader::new(text.as_bytes(), ReadOptions::default()).unwrap();
    let mut count = 0u64;
    let err = reader
        .for_each_batched_ref(|e| {
            count += 1;
            assert_eq!(e.line, count + 1);
            Ok::<(), TestError>(())
        })
        .unwrap_err();
    assert_eq!(count, 10_000);
    assert!(
        matches!(&err, TestError::Read(ReadError::Schema { line: 10_002, field, .. }) if field == "index"),
        "{err:?}"
    );
    let mut reader = TraceReader::new(text.as_bytes(), ReadOptions::default()).unwrap();
    let mut count = 0u64;
    let err = reader
        .for_each_batched_ref(|e| {
            count += 1;
            if count == 5000 {
                return Err(TestError::Stop(e.line));
            }
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(err, TestError::Stop(5001)), "{err:?}");
}
