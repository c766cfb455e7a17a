//! Reader errors name the line and field; versions N and N-1; lenient vs strict; truncation.

use trace_record::schema::{Event, SCHEMA_VERSION};
use trace_record::{ParsedTrace, ReadError, ReadOptions, TraceReader, read_trace_bytes};

use crate::common::trace_text;

fn read(text: &str, options: ReadOptions) -> Result<ParsedTrace, ReadError> {
    ParsedTrace::from_reader(TraceReader::new(text.as_bytes(), options)?)
}

fn schema_error(text: &str) -> (u64, String) {
    match read(text, ReadOptions::strict()) {
        Err(ReadError::Schema { line, field, .. }) => (line, field),
        other => panic!("expected a schema error, got {other:?}"),
    }
}

#[test]
fn schema_errors_name_line_and_field() {
    let cases: &[(&[&str], u64, &str)] = &[
        (&[r#"{"type":"step","ts":1}"#], 2, "index"),
        (
            &[
                r#"{"type":"step","index":1,"ts":1}"#,
                r#"{"type":"step","index":"x","ts":1}"#,
            ],
            3,
            "index",
        ),
        (
            &[r#"{"type":"span_start","id":1,"name":"a","kind":"banana","thread":1,"ts":0}"#],
            2,
            "kind",
        ),
        (
            &[
                r#"{"type":"op","name":"a","in":[1,-2],"out":[],"shape":[],"dtype":"f32","ts":0,"dur":0}"#,
            ],
            2,
            "in",
        ),
        (
            &[
                r#"{"type":"memory","action":"realloc","storage":1,"tensor":1,"bytes":1,"cat":"other","ts":0}"#,
            ],
            2,
            "action",
        ),
        (
            &[
                r#"{"type":"tensor","id":1,"shape":[],"dtype":"f32","grad":false,"bytes":1,"cat":"nope"}"#,
            ],
            2,
            "cat",
        ),
        (&[r#"{"ts":1,"type":"step"}"#], 2, "index"),
        (&[r#"{"index":1,"ts":1}"#], 2, "type"),
        (&[r#"{"type":7}"#], 2, "type"),
        (&[r#"{"type":"mystery","x":1}"#], 2, "type"),
        (
            &[
                r#"{"type":"trailer","outcome":"complete","counts":{},"dropped":0,"ts":0}"#,
                r#"{"type":"step","index":1,"ts":1}"#,
            ],
            3,
            "type",
        ),
        (
            &[
                r#"{"type":"trailer","outcome":"complete","counts":{"op":"many"},"dropped":0,"ts":0}"#,
            ],
            2,
            "counts.op",
        ),
        // `out_b` may be omitted only when `shape` × dtype size gives it: otherwise the
        // reader would have to make up a number (in either key order).
        (
            &[
                r#"{"type":"op","name":"a","in":[],"out":[],"shape":[2],"dtype":"f32","ts":0,"dur":0,"in_b":0}"#,
                r#"{"type":"op","name":"a","in":[],"out":[],"shape":[2],"dtype":"mystery","ts":0,"dur":0,"in_b":0}"#,
            ],
            3,
            "out_b",
        ),
        (
            &[
                r#"{"name":"a","type":"op","in":[],"out":[],"shape":[4294967296,4294967296],"dtype":"f32","ts":0,"dur":0,"in_b":0}"#,
            ],
            2,
            "out_b",
        ),
    ];
    for (lines, line, field) in cases {
        let (l, f) = schema_error(&trace_text(lines));
        assert_eq!((l, f.as_str()), (*line, *field), "{lines:?}");
    }
}

#[test]
fn syntax_errors_name_the_line() {
    let text = trace_text(&[
        r#"{"type":"step","index":1,"ts":1}"#,
        r#"{"type":"step","index":1,"ts":}"#,
    ]);
    match read(&text, ReadOptions::default()) {
        Err(ReadError::Syntax {
            line: 3, column, ..
        }) => assert!(column > 20),
        other => panic!("{other:?}"),
    }
    let err = read(&trace_text(&["not json"]), ReadOptions::default()).unwrap_err();
    assert!(matches!(err, ReadError::Syntax { line: 2, .. }), "{err}");
    assert!(err.to_string().starts_with("line 2"), "{err}");
}

#[test]
fn header_errors() {
    let bad_first = "{\"type\":\"step\",\"index\":1,\"ts\":1}\n";
    assert!(matches!(
        read(bad_first, ReadOptions::default()),
        Err(ReadError::Schema { line: 1, ref field, .. }) if field == "type"
    ));
    assert!(matches!(
        read("", ReadOptions::default()),
        Err(ReadError::Schema { line: 1, .. })
    ));
    let other_schema = trace_text(&[]).replace("tracegraph-trace", "candle-graph/trace/6");
    assert!(matches!(
        read(&other_schema, ReadOptions::default()),
        Err(ReadError::Schema { line: 1, ref field, .. }) if field == "schema"
    ));
    let no_device = trace_text(&[]).replace("\"device\":\"cpu\",", "");
    assert!(
        matches!(
            read(&no_device, ReadOptions::default()),
            Err(ReadError::Schema { line: 1, ref field, .. }) if field == "run.device"
                || field == "device"
        ),
        "{:?}",
        read(&no_device, ReadOptions::default())
    );
}

#[test]
fn versions_n_and_n_minus_1_are_accepted() {
    let current = format!("\"version\":{SCHEMA_VERSION}");
    for (v, ok) in [
        (SCHEMA_VERSION, true),
        (SCHEMA_VERSION - 1, true),
        (SCHEMA_VERSION + 1, false),
        (SCHEMA_VERSION + 7, false),
    ] {
        let text = trace_text(&[]).replace(&current, &format!("\"version\":{v}"));
        match read(&text, ReadOptions::default()) {
            Ok(t) => {
                assert!(ok, "{v}");
                assert_eq!(t.header.version, v);
            }
            Err(ReadError::UnsupportedVersion {
                found,
                min_supported,
                max_supported,
            }) => {
                assert!(!ok, "{v}");
                assert_eq!(found, u64::from(v));
                assert_eq!(
                    (min_supported, max_supported),
                    (SCHEMA_VERSION - 1, SCHEMA_VERSION)
                );
            }
            Err(e) => panic!("{v}: {e}"),
        }
    }
}

#[test]
fn lenient_mode_skips_and_counts_unknown_types() {
    let text = trace_text(&[
        r#"{"type":"step","index":1,"ts":1}"#,
        r#"{"type":"future_event","payload":[1,2,3]}"#,
        r#"{"payload":{"x":1},"type":"another_one"}"#,
        r#"{"type":"step","index":2,"ts":2,"new_optional_field":true}"#,
    ]);
    let t = read(&text, ReadOptions::default()).unwrap();
    assert_eq!(t.skipped_unknown, 2);
    assert_eq!(t.events.iter().map(|e| e.line).collect::<Vec<_>>(), [2, 5]);
    assert!(matches!(
        read(&text, ReadOptions::strict()),
        Err(ReadError::Schema { line: 3, .. })
    ));
}

#[test]
fn other_key_orders_and_blank_lines_are_read() {
    let text = trace_text(&[
        r#"{"ts":5,"id":3,"type":"span_end"}"#,
        "",
        r#"  {"type":"op","name":"a","in":[],"out":[],"shape":[],"dtype":"f32","ts":0,"dur":0}"#,
    ]);
    let t = read(&text, ReadOptions::strict()).unwrap();
    assert_eq!(t.events.len(), 2);
    let Event::Op(op) = &t.events[1].event else {
        panic!()
    };
    assert_eq!(op.device, "cpu", "the header's device is filled in");
    assert_eq!(t.events[1].line, 4);
}

#[test]
fn truncated_files_read_to_the_last_complete_line() {
    let full = trace_text(&[
        r#"{"type":"step","index":1,"ts":1}"#,
        r#"{"type":"marker","name":"last","ts":2}"#,
        r#"{"type":"trailer","outcome":"complete","counts":{"step":1,"marker":1},"dropped":0,"ts":3}"#,
    ]);
    let t = read_trace_bytes(full.as_bytes()).unwrap();
    assert!(!t.incomplete);
    assert_eq!(t.trailer.unwrap().counts.marker, 1);
    let marker_end = full.find("\"ts\":2}").unwrap() + 7;
    for cut in marker_end - 20..full.len() - 1 {
        let t = read_trace_bytes(&full.as_bytes()[..cut]).unwrap();
        assert!(t.incomplete, "cut at {cut}");
        assert!(t.trailer.is_none());
        let complete = full[..cut].matches('\n').count() as u64;
        let partial = !full[..cut].ends_with('\n');
        let last_event = t.events.last().unwrap().line;
        if partial && cut == marker_end {
            // `...}` without its newline is still a whole JSON value: read it.
            assert_eq!((last_event, t.partial_line), (3, None));
        } else {
            assert_eq!(last_event, complete.min(3));
            assert_eq!(
                t.partial_line,
                partial.then_some(complete + 1),
                "cut at {cut}"
            );
        }
    }
}

#[test]
fn io_errors_are_typed() {
    let err = trace_record::read_trace("/nonexistent/trace.jsonl").unwrap_err();
    assert!(matches!(err, ReadError::Io(_)), "{err}");
}

/// A trace whose third line is a valid `marker` line of exactly `len` bytes (newline
/// excluded), followed by a step line.
fn trace_with_marker_of_len(len: usize) -> impl std::io::BufRead {
    use std::io::Read;
    let text = trace_text(&[r#"{"type":"step","index":1,"ts":1}"#]);
    let (head, tail) = (&br#"{"type":"marker","name":""#[..], &br#"","ts":1}"#[..]);
    let name = std::io::repeat(b'a').take((len - head.len() - tail.len()) as u64);
    let src = std::io::Cursor::new(text.into_bytes())
        .chain(head)
        .chain(name)
        .chain(tail)
        .chain(&b"\n{\"type\":\"step\",\"index\":2,\"ts\":2}\n"[..]);
    std::io::BufReader::new(src)
}

#[test]
fn an_overlong_line_is_a_syntax_error_not_read_whole() {
    let max = trace_record::MAX_LINE_BYTES;
    // One byte past the limit (a corrupt file, binary data without newlines): an error at that
    // line, and the reader stops there.
    let mut reader =
        TraceReader::new(trace_with_marker_of_len(max + 1), ReadOptions::default()).unwrap();
    assert!(reader.next_event().unwrap().is_some());
    match reader.next_event() {
        Err(ReadError::Syntax { line, .. }) => assert_eq!(line, 3),
        other => panic!(
            "expected a syntax error, got {:?}",
            other.map(|e| e.map(|e| e.line))
        ),
    }
    assert!(reader.next_event().unwrap().is_none());
    // A line of exactly the limit is read.
    let mut reader =
        TraceReader::new(trace_with_marker_of_len(max), ReadOptions::default()).unwrap();
    let lines: Vec<u64> = (&mut reader).map(|e| e.unwrap().line).collect();
    assert_eq!(lines, [2, 3, 4]);
}
