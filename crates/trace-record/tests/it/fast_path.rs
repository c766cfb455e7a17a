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

/// Tracked-heap lines of every kind, any values.
fn heap_event() -> impl Strategy<Value = Event> {
    use trace_record::schema::{
        ExecStep, HeapAccountEvent, HeapAllocEvent, HeapFreeEvent, HeapSmallEvent,
    };
    let phase = proptest::option::of(prop_oneof![
        Just(ExecStep::Forward),
        Just(ExecStep::Backward),
        Just(ExecStep::Optimizer)
    ]);
    let span = proptest::option::of(any::<u64>());
    prop_oneof![
        (any::<[u64; 4]>(), phase.clone(), span.clone()).prop_map(|(v, phase, span)| {
            Event::HeapAlloc(HeapAllocEvent {
                id: v[0],
                bytes: v[1],
                thread: v[2],
                ts: v[3],
                phase,
                span,
            })
        }),
        any::<[u64; 2]>().prop_map(|v| Event::HeapFree(HeapFreeEvent { id: v[0], ts: v[1] })),
        (any::<[u64; 3]>(), phase, span).prop_map(|(v, phase, span)| {
            Event::HeapSmall(HeapSmallEvent {
                step: v[0],
                phase,
                span,
                count: v[1],
                bytes: v[2],
            })
        }),
        any::<[u64; 6]>().prop_map(|v| {
            Event::HeapAccount(HeapAccountEvent {
                step: v[0],
                threshold: v[1],
                lost: v[2],
                unmatched_frees: v[3],
                ts: v[4],
                dur: v[5],
            })
        }),
    ]
}

proptest! {
    /// The encoder writes tracked-heap lines byte for byte as serde does (same keys, same
    /// order, optional fields omitted), and they read back as themselves.
    #[test]
    fn heap_lines_are_serdes_bytes(e in heap_event()) {
        let line = encoded(&e);
        let serde = serde_json::to_vec(&e).unwrap();
        prop_assert_eq!(String::from_utf8_lossy(&line), String::from_utf8_lossy(&serde));
        prop_assert_eq!(read_one(&line), Ok(vec![e]));
    }
}
