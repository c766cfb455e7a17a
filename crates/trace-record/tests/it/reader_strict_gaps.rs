//! What `validate --strict` must not accept: lines of a newer schema than
//! the header states, `null` where the schema has a string, impossible sampling rates, heap
//! accounts for steps that do not exist, and hostile names echoed raw into messages.

use trace_record::schema::SCHEMA_VERSION;
use trace_record::{IssueKind, ReadError, ReadMode, ReadOptions, TraceReader, Validator};

use crate::common::trace_text;

/// The fixed header, at `version`, then `lines`.
fn text_at(version: u32, lines: &[&str]) -> String {
    trace_text(lines).replacen(
        &format!("\"version\":{SCHEMA_VERSION}"),
        &format!("\"version\":{version}"),
        1,
    )
}

/// Reads `text` in `mode`: every event's line, or the first error.
fn read(text: &str, mode: ReadMode) -> Result<Vec<u64>, ReadError> {
    let mut r = TraceReader::new(text.as_bytes(), ReadOptions { mode })?;
    let mut lines = Vec::new();
    while let Some(e) = r.next_event()? {
        lines.push(e.line);
    }
    Ok(lines)
}

fn issues(text: &str) -> Vec<(u64, IssueKind)> {
    let mut v = Validator::new();
    let mut r = TraceReader::new(text.as_bytes(), ReadOptions::strict()).unwrap();
    while let Some(e) = r.next_event().unwrap() {
        v.check(e.line, &e.event);
    }
    v.finish().into_iter().map(|i| (i.line, i.kind)).collect()
}

const HEAP_ALLOC: &str = r#"{"type":"heap_alloc","id":1,"bytes":4096,"thread":1,"ts":5}"#;
const SAMPLES: &str = r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":1}"#;

#[test]
fn version_2_lines_under_a_version_1_header_fail_strict_reading() {
    for line in [
        HEAP_ALLOC,
        SAMPLES,
        r#"{"type":"frame","id":1,"func":"main"}"#,
        r#"{"type":"heap_account","step":0,"threshold":4096,"lost":0,"unmatched_frees":0,"ts":1,"dur":1}"#,
    ] {
        let v1 = text_at(1, &[r#"{"type":"step","index":0,"ts":1}"#, line]);
        match read(&v1, ReadMode::Strict) {
            Err(ReadError::Schema {
                line: 3,
                field,
                message,
            }) => {
                assert_eq!(field, "type");
                assert!(message.contains("schema version 2"), "{message}");
                assert!(message.contains("header states version 1"), "{message}");
            }
            other => panic!("{line}: {other:?}"),
        }
        // Lenient reading keeps them; a version 2 header makes them valid in strict mode.
        assert_eq!(read(&v1, ReadMode::Lenient).unwrap(), [2, 3]);
        let v2 = text_at(2, &[r#"{"type":"step","index":0,"ts":1}"#, line]);
        assert_eq!(read(&v2, ReadMode::Strict).unwrap(), [2, 3]);
    }
    // Version 1 lines under a version 1 header are fine.
    let v1 = text_at(1, &[r#"{"type":"step","index":0,"ts":1}"#]);
    assert_eq!(read(&v1, ReadMode::Strict).unwrap(), [2]);
}

#[test]
fn null_where_the_schema_has_a_string_fails_strict_reading() {
    let text = trace_text(&[r#"{"type":"frame","id":1,"func":"main","file":null}"#]);
    match read(&text, ReadMode::Strict) {
        Err(ReadError::Schema {
            line: 2,
            field,
            message,
        }) => {
            assert_eq!(field, "file");
            assert!(message.contains("null is not a value here"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(read(&text, ReadMode::Lenient).unwrap(), [2]);
    // A string containing `null` and the fields that may be null pass.
    let ok = trace_text(&[
        r#"{"type":"frame","id":1,"func":"null","file":"null.rs"}"#,
        r#"{"type":"counter","name":"loss","value":null,"ts":3}"#,
    ]);
    assert_eq!(read(&ok, ReadMode::Strict).unwrap(), [2, 3]);
    // `null` for another optional field (an integer) is refused too.
    let span =
        trace_text(&[r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":1,"span":null}"#]);
    assert!(
        matches!(read(&span, ReadMode::Strict), Err(ReadError::Schema { line: 2, ref field, .. }) if field == "span")
    );
}

#[test]
fn an_implausible_sampling_rate_is_an_issue() {
    let at = |hz: u64| {
        format!(
            r#"{{"type":"sampler","step":0,"hz":{hz},"taken":0,"lost":0,"cpu_ns":1000,"ts":1,"dur":10}}"#
        )
    };
    let max = at(u64::MAX);
    assert_eq!(
        issues(&trace_text(&[&max])),
        [(
            2,
            IssueKind::ImplausibleSampleRate {
                step: 0,
                hz: u64::MAX
            }
        )]
    );
    let over = at(Validator::MAX_SAMPLER_HZ + 1);
    assert_eq!(issues(&trace_text(&[&over])).len(), 1);
    let fine = at(Validator::MAX_SAMPLER_HZ);
    assert!(issues(&trace_text(&[&fine])).is_empty());
    let kind = IssueKind::ImplausibleSampleRate {
        step: 0,
        hz: u64::MAX,
    };
    assert!(kind.to_string().contains("implausible"), "{kind}");
}

#[test]
fn a_heap_account_for_a_step_that_does_not_exist_is_an_issue() {
    let account = |step: u64| {
        format!(
            r#"{{"type":"heap_account","step":{step},"threshold":4096,"lost":0,"unmatched_frees":0,"ts":1,"dur":1}}"#
        )
    };
    let (a0, a2, a7) = (account(0), account(2), account(7));
    let text = trace_text(&[
        r#"{"type":"step","index":1,"ts":1}"#,
        &a0,
        r#"{"type":"step","index":2,"ts":2}"#,
        &a2,
        &a7,
    ]);
    assert_eq!(
        issues(&text),
        [(6, IssueKind::HeapAccountForUnknownStep { step: 7 })]
    );
    // The account may follow the next step line (the tracker writes in batches).
    let later = trace_text(&[&a2, r#"{"type":"step","index":2,"ts":2}"#]);
    assert!(issues(&later).is_empty());
}

#[test]
fn a_huge_unknown_type_name_with_bidi_controls_is_shortened_and_escaped() {
    // 120,088 bytes of name, with a right-to-left override and an escape sequence in it.
    let name = format!("evil\u{202e}txt.exe\\u001b[2J{}", "x".repeat(120_088 - 20));
    let line = format!(r#"{{"type":"{name}","x":1}}"#);
    let err = read(&trace_text(&[&line]), ReadMode::Strict).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("unknown event type"), "{text}");
    assert!(text.len() < 400, "{} bytes", text.len());
    assert!(text.contains("…"), "{text}");
    assert!(
        text.contains("\\u{202e}") && text.contains("\\u{1b}"),
        "{text}"
    );
    assert!(
        !text.contains('\u{202e}') && !text.contains('\u{1b}'),
        "{text}"
    );
    // Lenient reading skips it, as any unknown type.
    assert!(
        read(&trace_text(&[&line]), ReadMode::Lenient)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn hostile_values_quoted_by_the_parser_are_shortened_and_escaped() {
    let kind = format!("\u{202e}{}", "k".repeat(10_000));
    let line =
        format!(r#"{{"type":"span_start","id":1,"name":"a","kind":"{kind}","thread":0,"ts":1}}"#);
    let err = read(&trace_text(&[&line]), ReadMode::Strict).unwrap_err();
    let text = err.to_string();
    assert!(text.len() < 1200, "{} bytes: {}", text.len(), &text[..200]);
    assert!(!text.contains('\u{202e}'), "{text}");
    assert!(text.contains("\\u{202e}"), "{text}");
}
