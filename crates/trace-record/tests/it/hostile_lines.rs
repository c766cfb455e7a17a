//! Hostile lines: an unknown type must still be JSON, a UTF-8 BOM is accepted.
//!
//! An object where a value belongs is named by its field.

use trace_record::schema::Event;
use trace_record::{ParsedTrace, ReadError, ReadOptions, TraceReader};

use crate::common::trace_text;

fn read(text: &str, options: ReadOptions) -> Result<ParsedTrace, ReadError> {
    ParsedTrace::from_reader(TraceReader::new(text.as_bytes(), options)?)
}

#[test]
fn a_line_that_only_starts_like_an_unknown_type_is_a_syntax_error() {
    let free = r#"{"type":"memory","action":"free","storage":1,"tensor":1,"bytes":1,"cat":"other","ts":2}"#;
    // A byte flip inside `memory"`: the quote is gone, the tag reads `memoryb,`.
    let broken = r#"{"type":"memoryb,"action":"free","storage":1,"tensor":1,"bytes":1,"cat":"other","ts":2}"#;
    let text = trace_text(&[free, broken]);
    for options in [ReadOptions::default(), ReadOptions::strict()] {
        match read(&text, options) {
            Err(ReadError::Syntax { line, column, .. }) => {
                assert_eq!(line, 3);
                assert!(column > 1, "{column}");
            }
            other => panic!("{options:?}: expected a syntax error, got {other:?}"),
        }
    }
    // A well-formed unknown type is still skipped (lenient) or named (strict).
    let text = trace_text(&[free, r#"{"type":"mystery","x":[1,{"y":2}]}"#]);
    let t = read(&text, ReadOptions::default()).unwrap();
    assert_eq!((t.events.len(), t.skipped_unknown), (1, 1));
    match read(&text, ReadOptions::strict()) {
        Err(ReadError::Schema { line: 3, field, .. }) => assert_eq!(field, "type"),
        other => panic!("{other:?}"),
    }
    // Nor is a line with invalid UTF-8 (a flipped byte inside the tag).
    let mut bytes = trace_text(&[r#"{"type":"memXry","x":1}"#]).into_bytes();
    let at = bytes.iter().rposition(|&b| b == b'X').unwrap();
    bytes[at] = 0xfa;
    for options in [ReadOptions::default(), ReadOptions::strict()] {
        let r = TraceReader::new(&bytes[..], options).and_then(ParsedTrace::from_reader);
        assert!(
            matches!(
                r,
                Err(ReadError::Syntax {
                    line: 2,
                    column: 13,
                    ..
                })
            ),
            "{r:?}"
        );
    }
    // Trailing garbage after an unknown type's object is not JSON either.
    let text = trace_text(&[r#"{"type":"mystery"} trailing"#]);
    assert!(matches!(
        read(&text, ReadOptions::default()),
        Err(ReadError::Syntax { line: 2, .. })
    ));
}

#[test]
fn a_utf8_bom_before_the_header_is_accepted() {
    let text = trace_text(&[r#"{"type":"step","index":1,"ts":3}"#]);
    let with_bom = format!("\u{feff}{text}");
    let t = read(&with_bom, ReadOptions::strict()).unwrap();
    assert_eq!(t.events.len(), 1);
    assert!(matches!(t.events[0].event, Event::Step(_)));
    assert_eq!(t.events[0].line, 2);
}

#[test]
fn an_object_where_a_value_belongs_is_named_by_its_field() {
    let cases = [
        (
            r#"{"type":"tensor","id":1,"shape":[],"dtype":"f32","bytes":1,"cat":{"type":"x"}}"#,
            "cat",
        ),
        (
            r#"{"type":"op","name":{"a":1},"in":[],"out":[],"shape":[],"dtype":"f32","ts":0,"dur":0}"#,
            "name",
        ),
        (r#"{"type":"step","index":{"n":1},"ts":3}"#, "index"),
        (r#"{"type":"step","index":1,"ts":{}}"#, "ts"),
        (r#"{"ts":{"a":[1,2]},"type":"step","index":1}"#, "ts"),
    ];
    for (line, field) in cases {
        let text = trace_text(&[line]);
        match read(&text, ReadOptions::strict()) {
            Err(ReadError::Schema {
                line: 2, field: f, ..
            }) => assert_eq!(f, field, "{line}"),
            other => panic!("{line}: expected a schema error, got {other:?}"),
        }
    }
}

#[test]
fn a_json_line_that_is_not_an_object_says_what_it_found() {
    for (line, found) in [
        (r#""hello""#, "a string"),
        ("[1,2]", "an array"),
        ("555", "a number"),
        ("-1.5", "a number"),
        ("true", "a boolean"),
        ("null", "null"),
    ] {
        let text = trace_text(&[line]);
        for options in [ReadOptions::default(), ReadOptions::strict()] {
            let err = read(&text, options).expect_err(line);
            assert_eq!(
                err.to_string(),
                format!(
                    "line 2, field `type`: expected a JSON object with a \"type\" field, found {found}"
                ),
                "{line}"
            );
            // No internal type name reaches the user.
            assert!(!err.to_string().contains("TagOnly"), "{err}");
        }
    }
    // A damaged non-object keeps its syntax error.
    let text = trace_text(&[r#""unterminated"#]);
    assert!(matches!(
        read(&text, ReadOptions::default()),
        Err(ReadError::Syntax { line: 2, .. })
    ));
    // The header line too.
    let err = TraceReader::new(&b"[1,2]\n"[..], ReadOptions::default())
        .and_then(ParsedTrace::from_reader)
        .expect_err("an array is no header");
    assert_eq!(
        err.to_string(),
        "line 1, field `type`: expected a JSON object with a \"type\" field (the header), found an array"
    );
}
