//! Every string is written as valid JSON: quotes, backslashes, control characters, unicode.

use trace_record::schema::{Event, MarkerEvent};
use trace_record::{TraceSession, read_trace_bytes};

use crate::common::run;

fn nasty() -> Vec<String> {
    let mut v: Vec<String> = (0u8..0x20).map(|b| format!("c{}d", b as char)).collect();
    v.extend(
        [
            "plain",
            "",
            "quote \" inside",
            "back\\slash",
            "\\\"",
            "tab\tnew\nline\rcr",
            "del \u{7f}",
            "unicode é ü ß 中文 日本語",
            "emoji 🦀🔥",
            "\u{2028}\u{2029} separators",
            "\u{feff}bom",
            "</script>",
            "null\u{0}byte",
        ]
        .iter()
        .map(std::string::ToString::to_string),
    );
    v
}

#[test]
fn every_string_round_trips_through_the_session() {
    let (session, sink) = TraceSession::in_memory(run().tag("weird \"tag\"\n", "\u{1}"));
    let names = nasty();
    for n in &names {
        let _g = session.span(n, trace_record::schema::SpanKind::Function, None);
        session.record_marker(n);
    }
    session.finish().unwrap();
    let bytes = sink.bytes();
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        serde_json::from_slice::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("invalid JSON {:?}: {e}", String::from_utf8_lossy(line)));
        assert!(
            !line.contains(&b'\r') && !line.iter().any(|&b| b < 0x20),
            "raw control char"
        );
    }
    let trace = read_trace_bytes(&bytes).unwrap();
    assert_eq!(
        trace
            .header
            .run
            .tags
            .get("weird \"tag\"\n")
            .map(String::as_str),
        Some("\u{1}")
    );
    let markers: Vec<&str> = trace
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Marker(MarkerEvent { name, .. }) => Some(name.as_str()),
            _ => None,
        })
        .collect();
    let expected: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(markers, expected);
}

#[test]
fn escapes_use_the_short_forms_and_lowercase_hex() {
    let mut out = Vec::new();
    let e = Event::Marker(MarkerEvent {
        name: "a\"b\\c\nd\te\u{1}f\u{1f}g\u{8}h\u{c}i\rj".to_string(),
        span: None,
        ts: 5,
    });
    trace_record::encode_event(&e, "cpu", &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "{\"type\":\"marker\",\"name\":\"a\\\"b\\\\c\\nd\\te\\u0001f\\u001fg\\bh\\fi\\rj\",\"ts\":5}\n"
    );
}
