//! The reader's fast path (exact encoder lines parsed by hand) agrees with serde.
//!
//! A line with a space after its `{` does not match the fast path's grammar, so it is read by
//! serde; the two readings of every encoded line, and of randomly mutated lines, must agree.

use proptest::prelude::*;
use trace_record::schema::Event;
use trace_record::{ParsedTrace, ReadOptions, TraceReader};

use crate::common::header;
use crate::roundtrip::event;

fn read_one(line: &[u8]) -> Result<Vec<Event>, ()> {
    let mut bytes = Vec::new();
    trace_record::encode_header(&header("cpu"), &mut bytes);
    bytes.extend_from_slice(line);
    bytes.push(b'\n');
    let reader = TraceReader::new(&bytes[..], ReadOptions::strict()).map_err(|_| ())?;
    let trace = ParsedTrace::from_reader(reader).map_err(|_| ())?;
    Ok(trace.events.into_iter().map(|e| e.event).collect())
}

/// The same line, made unreadable by the fast path but equal as JSON.
fn slow_variant(line: &[u8]) -> Vec<u8> {
    let mut v = line.to_vec();
    if v.first() == Some(&b'{') {
        v.insert(1, b' ');
    } else {
        v.insert(0, b' ');
    }
    v
}

fn encoded(e: &Event) -> Vec<u8> {
    let mut out = Vec::new();
    trace_record::encode_event(e, "cpu", &mut out);
    out.pop();
    out
}

const BYTES: &[u8] = b"0123456789\"\\,:{}[] x-.eE\x01\xc3\xa9";

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn fast_and_serde_agree_on_encoded_lines(e in event()) {
        let line = encoded(&e);
        let fast = read_one(&line);
        prop_assert_eq!(fast.clone(), read_one(&slow_variant(&line)));
        prop_assert_eq!(fast, Ok(vec![e]));
    }

    #[test]
    fn fast_and_serde_agree_on_mutated_lines(
        e in event(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0..BYTES.len() + 2), 1..4),
    ) {
        let mut line = encoded(&e);
        for (at, what) in edits {
            if line.is_empty() {
                break;
            }
            let i = at.index(line.len());
            match what {
                w if w < BYTES.len() => line[i] = BYTES[w],
                w if w == BYTES.len() => {
                    line.remove(i);
                }
                _ => line.truncate(i),
            }
        }
        let fast = read_one(&line);
        let slow = read_one(&slow_variant(&line));
        prop_assert_eq!(fast, slow, "{}", String::from_utf8_lossy(&line));
    }
}
