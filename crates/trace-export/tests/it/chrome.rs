//! Chrome trace export: structure, adjustments, step filter, escaping, streaming, errors.

use std::collections::BTreeMap;
use std::io::Write;

use proptest::prelude::*;
use trace_export::{ArgsMode, ChromeOptions, ExportError, step_bar_us, write_chrome};
use trace_record::schema::{AllocKind, Event, MemoryCategory, Phase, SpanKind};
use trace_record::{OpRecord, ReadOptions, Run, TraceReader, TraceSession};

use crate::common::{
    check_nesting, check_structure, chrome, chrome_bytes, chrome_exact, chrome_with,
};
use testkit::{SynthConfig, XEvent, hand_trace, write_synthetic};

#[test]
fn a_synthetic_trace_exports_every_op_and_span() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 2000,
            ops_per_step: 100,
            ..Default::default()
        },
    )
    .expect("synthetic");
    let (v, summary) = chrome(&bytes, None);
    let xs = check_structure(&v);
    assert_eq!(summary.ops, 2000);
    assert_eq!(summary.spans, 20 * 4);
    assert_eq!(summary.adjustments.total(), 0);
    assert_eq!(xs.iter().filter(|x| x.cat == "op").count(), 2000);
    assert_eq!(
        summary.events_written as usize,
        v["traceEvents"].as_array().map_or(0, Vec::len)
    );
}

/// Each problem of host clocks gets the documented local fix, and is counted once.
#[test]
fn overlapping_times_are_adjusted_counted_and_then_nest() {
    let bytes = hand_trace(&[
        r#"{"type":"span_start","id":1,"name":"root","kind":"function","thread":0,"ts":100}"#,
        // Starts before its parent: moved to 100.
        r#"{"type":"span_start","id":2,"parent":1,"name":"child","kind":"module","thread":0,"ts":90}"#,
        // Starts before its span: moved to 100.
        r#"{"type":"op","span":2,"name":"early","dtype":"f32","ts":95,"dur":10}"#,
        // Recorded in the outer span while the inner one is open; overlaps `early`: moved.
        r#"{"type":"op","span":1,"name":"misplaced","dtype":"f32","ts":101,"dur":1}"#,
        // Ends after its span: cut at 150.
        r#"{"type":"op","span":2,"name":"late","dtype":"f32","ts":110,"dur":100}"#,
        r#"{"type":"span_end","id":2,"ts":150}"#,
        // Its span is unknown: drawn on the outside track.
        r#"{"type":"op","span":99,"name":"orphan","dtype":"f32","ts":120,"dur":5}"#,
        // Starts before its previous sibling ended: moved to 150.
        r#"{"type":"span_start","id":3,"parent":1,"name":"sibling","kind":"function","thread":0,"ts":140}"#,
        // The parent ends while `sibling` is open (closing it) and before `sibling` started.
        r#"{"type":"span_end","id":1,"ts":145}"#,
        r#"{"type":"span_end","id":42,"ts":200}"#,
        r#"{"type":"span_start","id":4,"name":"never closed","kind":"function","thread":1,"ts":300}"#,
        r#"{"type":"span_start","id":5,"name":"dup","kind":"function","thread":0,"ts":400}"#,
        r#"{"type":"span_start","id":5,"name":"dup again","kind":"function","thread":0,"ts":401}"#,
        r#"{"type":"span_end","id":5,"ts":410}"#,
    ]);
    let (v, summary) = chrome(&bytes, None);
    let xs = check_structure(&v);
    let a = summary.adjustments;
    assert_eq!(a.starts_clamped, 4, "{a:?}");
    assert_eq!(a.op_ends_clamped, 1, "{a:?}");
    assert_eq!(a.span_ends_extended, 1, "{a:?}");
    assert_eq!(a.spans_closed_by_parent, 1, "{a:?}");
    assert_eq!(a.spans_left_open, 1, "{a:?}");
    assert_eq!(a.ops_moved_to_innermost_span, 1, "{a:?}");
    assert_eq!(a.ops_outside_spans, 1, "{a:?}");
    assert_eq!(a.duplicate_span_starts, 1, "{a:?}");
    assert_eq!(a.unknown_span_ends, 1, "{a:?}");
    assert_eq!(a.total(), 12);
    assert_eq!(
        v["otherData"]["summary"]["adjustments"]["op_ends_clamped"],
        1
    );

    let get = |name: &str| {
        xs.iter()
            .find(|x| x.name == name)
            .map_or_else(|| panic!("no {name}"), |x| (x.tid, x.start, x.end))
    };
    assert_eq!(get("root"), (0, 100, 150));
    assert_eq!(get("child"), (0, 100, 150));
    assert_eq!(get("early"), (0, 100, 105));
    assert_eq!(get("misplaced"), (0, 105, 105));
    assert_eq!(get("late"), (0, 110, 150));
    assert_eq!(get("sibling"), (0, 150, 150));
    assert_eq!(get("orphan").0, trace_export::OUTSIDE_SPANS_TID);
    assert_eq!(get("never closed"), (1, 300, 410));
    assert_eq!(get("dup"), (0, 400, 410));
    assert!(xs.iter().all(|x| x.name != "dup again"));
    // The cut op says what was recorded.
    let late = xs.iter().find(|x| x.name == "late").expect("late");
    assert_eq!(late.args["recorded_dur_ns"], 100);
}

#[test]
fn memory_counters_never_go_negative() {
    let bytes = hand_trace(&[
        r#"{"type":"memory","action":"free","storage":5,"tensor":5,"bytes":64,"cat":"activation","ts":1}"#,
        r#"{"type":"memory","action":"alloc","storage":6,"tensor":6,"bytes":100,"cat":"activation","ts":2}"#,
        r#"{"type":"memory","action":"alloc","storage":6,"tensor":6,"bytes":40,"cat":"gradient","ts":3}"#,
        r#"{"type":"memory","action":"alloc","storage":7,"tensor":7,"bytes":10,"dev":"cuda:0","cat":"parameter","ts":4}"#,
        r#"{"type":"memory","action":"free","storage":6,"tensor":6,"bytes":99,"cat":"gradient","ts":5}"#,
        r#"{"type":"device_memory","dev":"cuda:0","used":1000,"reserved":2000,"ts":6}"#,
    ]);
    let (v, summary) = chrome_exact(&bytes, None);
    check_structure(&v);
    assert_eq!(summary.memory.frees_without_alloc, 1);
    assert_eq!(summary.memory.duplicate_allocs, 1);
    assert_eq!(summary.memory.free_size_mismatches, 1);
    let counters = counter_samples(&v);
    // One counter per category, a sample only when its bytes change; counters carry no tid.
    let cpu: Vec<(&str, u64, u64)> = counters
        .iter()
        .filter(|c| c.0.starts_with("logical memory cpu "))
        .map(|c| (c.0.as_str(), c.1, c.2["bytes"].as_u64().unwrap_or(u64::MAX)))
        .collect();
    assert_eq!(
        cpu,
        vec![
            ("logical memory cpu activation", 2, 100),
            // The duplicate allocation replaces storage 6: activation 0, gradient 40.
            ("logical memory cpu activation", 3, 0),
            ("logical memory cpu gradient", 3, 40),
            ("logical memory cpu gradient", 5, 0),
        ]
    );
    assert!(
        counters
            .iter()
            .any(|c| c.0 == "logical memory cuda:0 parameter" && c.2["bytes"] == 10)
    );
    assert!(
        v["traceEvents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["ph"] == "C")
            .all(|e| e.get("tid").is_none())
    );
    // Physical samples are separate counters, never added to the logical ones.
    assert!(
        counters
            .iter()
            .any(|c| c.0 == "physical memory used cuda:0" && c.2["used"] == 1000)
    );
    assert!(
        !counters
            .iter()
            .any(|c| c.0.contains("physical") && c.2.get("bytes").is_some())
    );
}

/// Every counter sample: (name, ts in ns, args), in file order.
fn counter_samples(v: &serde_json::Value) -> Vec<(String, u64, serde_json::Value)> {
    v["traceEvents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["ph"] == "C")
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_string(),
                crate::common::ns(&e["ts"]),
                e["args"].clone(),
            )
        })
        .collect()
}

/// Memory events of one device at one time make one sample per category that changed, with
/// the bytes after the last of them, and a category that did not change gets none; a moment
/// between them whose total is above every total shown so far is written first, at the same
/// time (what the samples show reaches the peak).
#[test]
fn memory_events_at_one_time_make_one_sample() {
    let bytes = hand_trace(&[
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":100,"cat":"activation","ts":1}"#,
        r#"{"type":"memory","action":"alloc","storage":2,"tensor":2,"bytes":50,"cat":"activation","ts":1}"#,
        r#"{"type":"memory","action":"alloc","storage":3,"tensor":3,"bytes":8,"cat":"gradient","ts":2}"#,
        r#"{"type":"memory","action":"free","storage":1,"tensor":1,"bytes":100,"cat":"activation","ts":2}"#,
        r#"{"type":"memory","action":"alloc","storage":4,"tensor":4,"bytes":100,"cat":"activation","ts":3}"#,
        r#"{"type":"memory","action":"free","storage":4,"tensor":4,"bytes":100,"cat":"activation","ts":3}"#,
        r#"{"type":"memory","action":"alloc","storage":5,"tensor":5,"bytes":7,"dev":"cuda:0","cat":"parameter","ts":3}"#,
        r#"{"type":"memory","action":"free","storage":2,"tensor":2,"bytes":50,"cat":"activation","ts":3}"#,
        r#"{"type":"memory","action":"free","storage":3,"tensor":3,"bytes":8,"cat":"gradient","ts":4}"#,
    ]);
    let (v, summary) = chrome_exact(&bytes, None);
    check_structure(&v);
    let samples: Vec<(String, u64, u64)> = counter_samples(&v)
        .into_iter()
        .map(|(name, ts, args)| (name, ts, args["bytes"].as_u64().unwrap_or(u64::MAX)))
        .collect();
    let cpu = |cat: &str, ts: u64, b: u64| (format!("logical memory cpu {cat}"), ts, b);
    // ts 1: one sample after both allocations; ts 2: after the free (activation 150 and
    // gradient 8 in between, 158 in all, is above 150, the peak so far: written first, only
    // the gradient changed), then activation 50; ts 3: the alloc and free of storage 4 cancel
    // (158 in between is no new peak: no sample until the other device's event), then
    // storage 2's free is a sample of its own; ts 4: the last free.
    assert_eq!(
        samples,
        vec![
            cpu("activation", 1, 150),
            cpu("gradient", 2, 8),
            cpu("activation", 2, 50),
            ("logical memory cuda:0 parameter".to_string(), 3, 7),
            cpu("activation", 3, 0),
            cpu("gradient", 4, 0),
        ]
    );
    assert_eq!(summary.memory_counters, 6);
    // What a viewer shows of the cpu: its totals after each sample reach the peak, 158.
    let totals: Vec<u64> = testkit::check_chrome(&v)
        .logical_memory
        .iter()
        .filter(|(device, _, _)| device == "cpu")
        .map(|(_, _, b)| b.values().sum())
        .collect();
    assert_eq!(totals, vec![150, 158, 58, 8, 0]);
}

/// A storage allocated again replaces the old allocation: on another device, that device's
/// counter drops at once; and of the samples at one time, the categories that went down come
/// first, so no total shown in between is above both ends.
#[test]
fn a_storage_allocated_again_moves_its_bytes_at_once() {
    let bytes = hand_trace(&[
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":73,"cat":"optimizer_state","ts":1}"#,
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":5,"cat":"parameter","ts":2}"#,
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":9,"dev":"cuda:0","cat":"parameter","ts":3}"#,
    ]);
    let (v, summary) = chrome_exact(&bytes, None);
    check_structure(&v);
    assert_eq!(summary.memory.duplicate_allocs, 2);
    let samples: Vec<(String, u64, u64)> = counter_samples(&v)
        .into_iter()
        .map(|(name, ts, args)| (name, ts, args["bytes"].as_u64().unwrap_or(u64::MAX)))
        .collect();
    let s = |name: &str, ts: u64, b: u64| (format!("logical memory {name}"), ts, b);
    assert_eq!(
        samples,
        vec![
            s("cpu optimizer_state", 1, 73),
            s("cpu optimizer_state", 2, 0),
            s("cpu parameter", 2, 5),
            s("cpu parameter", 3, 0),
            s("cuda:0 parameter", 3, 9),
        ]
    );
}

/// A random run of memory events on two devices (allocations, frees of live and unknown
/// storages, duplicate allocations, several at one time): (action, storage, bytes, device,
/// category, time step).
fn random_memory_trace(items: &[(bool, u8, u16, bool, u8, u8)]) -> (Vec<u8>, Vec<String>) {
    let mut lines = Vec::new();
    let mut ts = 0u64;
    for &(alloc, storage, bytes, cuda, cat, dt) in items {
        ts += u64::from(dt % 3);
        let action = if alloc { "alloc" } else { "free" };
        let dev = if cuda { r#","dev":"cuda:0""# } else { "" };
        let category = MemoryCategory::ALL[usize::from(cat) % MemoryCategory::ALL.len()].as_str();
        lines.push(format!(
            r#"{{"type":"memory","action":"{action}","storage":{},"tensor":1,"bytes":{}{dev},"cat":"{category}","ts":{ts}}}"#,
            storage % 6,
            bytes % 300
        ));
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    (hand_trace(&refs), lines)
}

/// The live bytes per device and category after each memory event, replayed from the trace
/// by the rules the export documents (a free takes its allocation's device, category and
/// bytes; a free of a storage not live changes nothing; an allocation of a live storage
/// replaces it): (device, time, nonzero bytes per category) for each device the event
/// changed.
fn replay_memory(trace: &[u8]) -> Vec<(String, u64, BTreeMap<String, u64>)> {
    let mut reader = TraceReader::new(trace, ReadOptions::default()).expect("header");
    let mut live: BTreeMap<u64, (String, String, u64)> = BTreeMap::new();
    let mut bytes: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut after = Vec::new();
    while let Some(line) = reader.next_event().expect("event") {
        let Event::Memory(m) = line.event else {
            continue;
        };
        let cat = m.category.as_str().to_string();
        let mut touched = Vec::new();
        let sub = |bytes: &mut BTreeMap<String, BTreeMap<String, u64>>, (d, c, b)| {
            let v = bytes.entry(d).or_default().entry(c).or_default();
            *v = v.saturating_sub(b);
        };
        match m.kind {
            AllocKind::Alloc => {
                let new = (m.device.clone(), cat.clone(), m.bytes);
                if let Some(old) = live.insert(m.storage, new) {
                    touched.push(old.0.clone());
                    sub(&mut bytes, old);
                }
                *bytes
                    .entry(m.device.clone())
                    .or_default()
                    .entry(cat)
                    .or_default() += m.bytes;
                touched.push(m.device.clone());
            }
            AllocKind::Free => {
                if let Some(old) = live.remove(&m.storage) {
                    touched.push(old.0.clone());
                    sub(&mut bytes, old);
                }
            }
        }
        touched.dedup();
        for d in touched {
            let now = bytes[&d]
                .iter()
                .filter(|(_, b)| **b > 0)
                .map(|(c, b)| (c.clone(), *b))
                .collect();
            after.push((d, m.ts, now));
        }
    }
    after
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// What the memory counters show (each category holding its last sample) is, at every
    /// time of a memory event, the live bytes per category after the last event at that
    /// time; samples are only at those times; and the largest total shown is the largest
    /// total after any one event (the peak `tracegraph memory` reports).
    #[test]
    fn memory_counters_show_the_live_bytes_at_every_time(
        items in proptest::collection::vec((any::<bool>(), any::<u8>(), any::<u16>(), any::<bool>(), any::<u8>(), any::<u8>()), 1..80)
    ) {
        let (trace, lines) = random_memory_trace(&items);
        let (v, _) = chrome_exact(&trace, None);
        let check = testkit::check_chrome(&v);
        prop_assert!(check.failures.is_empty(), "{:#?}", check.failures);
        let replayed = replay_memory(&trace);
        for device in ["cpu", "cuda:0"] {
            let shown: Vec<(u64, &BTreeMap<String, u64>)> = check
                .logical_memory
                .iter()
                .filter(|(d, _, _)| d == device)
                .map(|(_, ts, b)| (*ts, b))
                .collect();
            let events: Vec<&(String, u64, BTreeMap<String, u64>)> =
                replayed.iter().filter(|e| e.0 == device).collect();
            let shown_at = |t: u64| -> BTreeMap<String, u64> {
                shown
                    .iter()
                    .take_while(|(ts, _)| *ts <= t)
                    .last()
                    .map(|(_, b)| b.iter().filter(|(_, b)| **b > 0).map(|(c, b)| (c.clone(), *b)).collect())
                    .unwrap_or_default()
            };
            for (i, (_, t, now)) in events.iter().enumerate() {
                if events.get(i + 1).is_some_and(|next| next.1 == *t) {
                    continue;
                }
                prop_assert_eq!(&shown_at(*t), now, "{} at {}: {:#?}", device, t, lines);
            }
            prop_assert!(shown.iter().all(|(ts, _)| events.iter().any(|e| e.1 == *ts)));
            let total = |b: &BTreeMap<String, u64>| b.values().sum::<u64>();
            let peak_shown = shown.iter().map(|(_, b)| total(b)).max().unwrap_or(0);
            let peak = events.iter().map(|e| total(&e.2)).max().unwrap_or(0);
            prop_assert_eq!(peak_shown, peak, "{}: {:#?}", device, lines);
        }
    }
}

/// The Chrome export of `trace` at memory resolution `ns`, every arg, parsed back.
fn chrome_at(trace: &[u8], ns: u64) -> (serde_json::Value, trace_export::ChromeSummary) {
    let opts = ChromeOptions {
        args: ArgsMode::Full,
        memory_resolution_ns: ns,
        ..ChromeOptions::default()
    };
    let (out, summary) = chrome_bytes(trace, &opts);
    (serde_json::from_slice(&out).expect("valid JSON"), summary)
}

/// The logical memory samples: (name, ts in ns, bytes), in file order.
fn memory_samples(v: &serde_json::Value) -> Vec<(String, u64, u64)> {
    counter_samples(v)
        .into_iter()
        .filter(|(name, _, _)| name.starts_with("logical memory "))
        .map(|(name, ts, args)| (name, ts, args["bytes"].as_u64().unwrap_or(u64::MAX)))
        .collect()
}

/// At a resolution of 1 µs (the default), an op's allocation and its input's free a few
/// hundred ns apart are written as the window's peak and its end; a category that went above
/// everything shown of it keeps its own peak; at resolution 0 every change is written.
#[test]
fn a_memory_resolution_keeps_each_windows_peaks_and_its_end() {
    let line = |action: &str, storage: u64, bytes: u64, cat: &str, ts: u64| {
        format!(
            r#"{{"type":"memory","action":"{action}","storage":{storage},"tensor":{storage},"bytes":{bytes},"cat":"{cat}","ts":{ts}}}"#
        )
    };
    let lines = [
        line("alloc", 1, 100, "activation", 0),
        line("alloc", 2, 100, "activation", 100),
        line("free", 1, 100, "activation", 200),
        line("alloc", 3, 100, "activation", 300),
        line("free", 2, 100, "activation", 400),
        line("alloc", 9, 40, "gradient", 420),
        line("free", 9, 40, "gradient", 440),
        line("alloc", 4, 100, "activation", 500),
        line("free", 3, 100, "activation", 600),
        line("alloc", 5, 100, "activation", 1_200),
        line("free", 4, 100, "activation", 1_300),
    ];
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let trace = hand_trace(&refs);
    let s = |cat: &str, ts: u64, b: u64| (format!("logical memory cpu {cat}"), ts, b);
    let (v, summary) = chrome_at(&trace, 1_000);
    check_structure(&v);
    // Window 0 (0..1000 ns): the highest total (200 at 100 ns, its first moment), the
    // gradient's only peak (420 ns, the whole state then: activation 100 first, as it went
    // down), the end (600 ns); window 1: its peak and its end.
    assert_eq!(
        memory_samples(&v),
        vec![
            s("activation", 100, 200),
            s("activation", 420, 100),
            s("gradient", 420, 40),
            s("gradient", 600, 0),
            s("activation", 1_200, 200),
            s("activation", 1_300, 100),
        ]
    );
    assert_eq!(summary.memory_counters, 6);
    assert_eq!(chrome(&trace, None).0, v, "1 µs is the default");
    let (exact, summary) = chrome_at(&trace, 0);
    assert_eq!(summary.memory_counters, 11, "{:#?}", memory_samples(&exact));
    assert_eq!(chrome_exact(&trace, None).0, exact);
}

/// At resolution 0 the logical memory counters are byte for byte those written before the
/// export had a resolution (every change): the demo trace's, kept in
/// `tests/data/sampled-demo.exact-memory.txt` as the samples' lines.
#[test]
fn resolution_zero_writes_the_exact_counters_byte_for_byte() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let trace = std::fs::read(data.join("sampled-demo.jsonl")).expect("trace");
    let expected = std::fs::read_to_string(data.join("sampled-demo.exact-memory.txt"))
        .expect("expected samples");
    let opts = ChromeOptions {
        memory_resolution_ns: 0,
        ..ChromeOptions::default()
    };
    let (out, _) = chrome_bytes(&trace, &opts);
    let out = String::from_utf8(out).expect("UTF-8");
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(r#""name":"logical memory "#))
        .collect();
    assert_eq!(lines, expected.lines().collect::<Vec<_>>());
    // The default resolution writes fewer of them, never more.
    let (default, _) = chrome_bytes(&trace, &ChromeOptions::default());
    let fewer = String::from_utf8(default)
        .expect("UTF-8")
        .lines()
        .filter(|l| l.contains(r#""name":"logical memory "#))
        .count();
    assert!(fewer < lines.len(), "{fewer} of {}", lines.len());
}

/// What a viewer shows of one device: (ts, nonzero bytes per category) after each sample.
fn shown_of(check: &testkit::ChromeCheck, device: &str) -> Vec<(u64, BTreeMap<String, u64>)> {
    check
        .logical_memory
        .iter()
        .filter(|(d, _, _)| d == device)
        .map(|(_, ts, b)| {
            let nonzero = b
                .iter()
                .filter(|(_, b)| **b > 0)
                .map(|(c, b)| (c.clone(), *b))
                .collect();
            (*ts, nonzero)
        })
        .collect()
}

/// The largest total of `shown`, and the largest bytes of each category.
fn peaks(shown: &[(u64, BTreeMap<String, u64>)]) -> (u64, BTreeMap<String, u64>) {
    let mut categories: BTreeMap<String, u64> = BTreeMap::new();
    let mut peak = 0;
    for (_, b) in shown {
        peak = peak.max(b.values().sum::<u64>());
        for (c, v) in b {
            let m = categories.entry(c.clone()).or_default();
            *m = (*m).max(*v);
        }
    }
    (peak, categories)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// At any resolution, what a viewer sees has the exact export's peaks (each device's
    /// total, each category's), the live bytes at every window's end, samples only at times
    /// of memory events and never more samples than the exact export.
    #[test]
    fn a_memory_resolution_keeps_every_peak_and_every_windows_end(
        items in proptest::collection::vec((any::<bool>(), any::<u8>(), any::<u16>(), any::<bool>(), any::<u8>(), any::<u8>()), 1..120),
        resolution in prop_oneof![Just(1u64), Just(2), Just(3), Just(7), Just(40), Just(1_000)],
    ) {
        let (trace, lines) = random_memory_trace(&items);
        let (exact, exact_summary) = chrome_exact(&trace, None);
        let (v, summary) = chrome_at(&trace, resolution);
        let check = testkit::check_chrome(&v);
        prop_assert!(check.failures.is_empty(), "{:#?}", check.failures);
        prop_assert!(summary.memory_counters <= exact_summary.memory_counters);
        let exact_check = testkit::check_chrome(&exact);
        let replayed = replay_memory(&trace);
        for device in ["cpu", "cuda:0"] {
            let shown = shown_of(&check, device);
            let exact_shown = shown_of(&exact_check, device);
            prop_assert_eq!(peaks(&shown), peaks(&exact_shown), "{} at {} ns: {:#?}", device, resolution, lines);
            let events: Vec<&(String, u64, BTreeMap<String, u64>)> =
                replayed.iter().filter(|e| e.0 == device).collect();
            prop_assert!(shown.iter().all(|(ts, _)| events.iter().any(|e| e.1 == *ts)));
            // Each window with an event of this device ends on the live bytes then.
            let ends: std::collections::BTreeSet<u64> =
                events.iter().map(|e| (e.1 / resolution + 1) * resolution).collect();
            for end in ends {
                let live = events
                    .iter()
                    .take_while(|e| e.1 < end)
                    .last()
                    .map(|e| e.2.clone())
                    .unwrap_or_default();
                let seen = shown
                    .iter()
                    .take_while(|(ts, _)| *ts < end)
                    .last()
                    .map(|(_, b)| b.clone())
                    .unwrap_or_default();
                prop_assert_eq!(seen, live, "{} before {} at {} ns: {:#?}", device, end, resolution, lines);
            }
        }
    }
}

#[test]
fn one_step_only() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 40,
            ops_per_step: 8,
            ..Default::default()
        },
    )
    .expect("synthetic");
    let (v, summary) = chrome(&bytes, Some(2));
    let xs = check_structure(&v);
    assert!(summary.step_found);
    assert_eq!(summary.ops, 8);
    assert_eq!(summary.spans, 4);
    let ops: Vec<&XEvent> = xs.iter().filter(|x| x.cat == "op").collect();
    assert_eq!(ops.len(), 8);
    assert!(ops.iter().all(|x| x.args["step"] == 2));
    assert_eq!(xs.iter().filter(|x| x.cat == "step").count(), 1);
    assert_eq!(v["otherData"]["step"], 2);

    let mut reader = TraceReader::new(&bytes[..], ReadOptions::default()).expect("header");
    let err = write_chrome(
        &mut reader,
        std::io::sink(),
        &ChromeOptions {
            step: Some(9),
            ..ChromeOptions::default()
        },
    );
    assert!(matches!(err, Err(ExportError::StepNotFound(9))), "{err:?}");
}

#[test]
fn odd_names_stay_valid_json_and_round_trip() {
    let names = [
        "quote \" and back\\slash",
        "new\nline\ttab\r",
        "control \u{1} \u{1f}",
        "ünïcödé ✓ 漢字 🚀",
        "</script><script>alert(1)</script>",
    ];
    let (session, sink) = TraceSession::in_memory(Run::new("odd", Phase::Infer, "cpu"));
    for name in names {
        let _s = session.span(name, SpanKind::Function, None);
        let t = session.now_ns();
        session.record_op(&OpRecord {
            name,
            inputs: &[],
            outputs: &[],
            shape: &[1],
            dtype: "f32",
            device: "cpu",
            start_ns: t,
            dur_ns: 0,
            in_bytes: 0,
            out_bytes: 4,
            category: None,
            flops: None,
        });
    }
    session.finish().expect("finish");
    let (v, _) = chrome(&sink.bytes(), None);
    let xs = check_structure(&v);
    for name in names {
        assert_eq!(
            xs.iter().filter(|x| x.name == name).count(),
            2,
            "{name:?} (span and op)"
        );
    }
}

#[test]
fn a_truncated_trace_exports_what_it_has_and_says_so() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 30,
            ops_per_step: 10,
            truncate: true,
            ..Default::default()
        },
    )
    .expect("synthetic");
    bytes.extend_from_slice(br#"{"type":"op","span":1,"na"#);
    let (v, summary) = chrome(&bytes, None);
    check_structure(&v);
    assert_eq!(summary.ops, 30);
    assert_eq!(v["otherData"]["incomplete"], true);
    assert!(v["otherData"]["partial_last_line"].is_u64());
}

/// A writer that fails the test if the exporter hands it the whole output at once.
struct Chunks {
    writes: u64,
    largest: usize,
    total: usize,
}

impl Write for Chunks {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writes += 1;
        self.largest = self.largest.max(buf.len());
        self.total += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_export_streams_event_by_event() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 5000,
            ops_per_step: 500,
            ..Default::default()
        },
    )
    .expect("synthetic");
    let mut reader = TraceReader::new(&bytes[..], ReadOptions::default()).expect("header");
    let mut out = Chunks {
        writes: 0,
        largest: 0,
        total: 0,
    };
    let summary = write_chrome(&mut reader, &mut out, &ChromeOptions::default()).expect("export");
    assert!(
        out.writes >= summary.events_written,
        "{} writes",
        out.writes
    );
    assert!(out.largest < 4096, "largest write {} B", out.largest);
    assert!(out.total > 500_000);
}

/// A random thread of nested spans and ops with jittered (possibly inconsistent) times.
pub(crate) fn random_trace(items: &[(u8, u16, u16)]) -> Vec<u8> {
    let mut lines = Vec::new();
    let mut open: Vec<u64> = Vec::new();
    let mut next = 1u64;
    let mut ts = 1000i64;
    for &(kind, jitter, dur) in items {
        ts += 10;
        let t = (ts + i64::from(jitter % 64) - 32).max(0);
        let thread = u64::from(kind / 128);
        match kind % 4 {
            0 => {
                let parent = open
                    .last()
                    .map_or(String::new(), |p| format!(",\"parent\":{p}"));
                lines.push(format!(
                    r#"{{"type":"span_start","id":{next}{parent},"name":"s{}","kind":"function","thread":{thread},"ts":{t}}}"#,
                    next % 3
                ));
                open.push(next);
                next += 1;
            }
            1 => {
                if let Some(id) = open.pop() {
                    lines.push(format!(r#"{{"type":"span_end","id":{id},"ts":{t}}}"#));
                }
            }
            _ => {
                let span = open
                    .last()
                    .map_or(String::new(), |s| format!(",\"span\":{s}"));
                lines.push(format!(
                    r#"{{"type":"op"{span},"name":"op{}","dtype":"f32","ts":{t},"dur":{}}}"#,
                    kind % 5,
                    dur % 200
                ));
            }
        }
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    hand_trace(&refs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Whatever the recorded times, the exported complete events nest on every thread.
    #[test]
    fn exported_intervals_always_nest(items in proptest::collection::vec((any::<u8>(), any::<u16>(), any::<u16>()), 1..120)) {
        let bytes = random_trace(&items);
        let (v, _) = chrome(&bytes, None);
        let xs = check_structure(&v);
        check_nesting(&xs);
    }
}

/// A writer that fails once `limit` bytes were written.
struct FailAfter {
    left: usize,
}

impl Write for FailAfter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() > self.left {
            return Err(std::io::Error::other("disk full"));
        }
        self.left -= buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_write_error_stops_the_export_and_the_parser() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 20_000,
            ops_per_step: 1000,
            ..Default::default()
        },
    )
    .expect("synthetic");
    let mut reader = TraceReader::new(&bytes[..], ReadOptions::default()).expect("header");
    let r = write_chrome(
        &mut reader,
        FailAfter { left: 10_000 },
        &ChromeOptions::default(),
    );
    assert!(matches!(r, Err(ExportError::Write(_))), "{r:?}");
}

#[test]
fn a_bad_line_is_a_read_error_with_its_line_number() {
    let mut bytes = Vec::new();
    write_synthetic(
        &mut bytes,
        &SynthConfig {
            ops: 10_000,
            ops_per_step: 1000,
            ..Default::default()
        },
    )
    .expect("synthetic");
    // Corrupt line 30001 (well past the first batch handed between the threads).
    let mut text = String::from_utf8(bytes).expect("utf-8");
    let start = text
        .match_indices('\n')
        .nth(29_999)
        .map(|(i, _)| i + 1)
        .expect("enough lines");
    text.insert_str(start, "{not json}\n");
    let mut reader = TraceReader::new(text.as_bytes(), ReadOptions::default()).expect("header");
    let r = write_chrome(&mut reader, std::io::sink(), &ChromeOptions::default());
    match r {
        Err(ExportError::Read(e)) => assert!(e.to_string().contains("line 30001"), "{e}"),
        other => panic!("expected a read error, got {other:?}"),
    }
}

/// The `args` of the complete events with category `cat`.
fn args_of(v: &serde_json::Value, cat: &str) -> Vec<serde_json::Value> {
    v["traceEvents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["ph"] == "X" && e["cat"].as_str().is_some_and(|c| c.starts_with(cat)))
        .map(|e| e["args"].clone())
        .collect()
}

#[test]
fn args_modes_keep_what_ran_and_drop_per_call_ids() {
    let bytes = hand_trace(&[
        r#"{"type":"step","index":0,"ts":0}"#,
        r#"{"type":"span_start","id":1,"name":"backward","kind":"function","exec":"backward","thread":0,"ts":10}"#,
        r#"{"type":"op","span":1,"name":"matmul","in":[1,2],"out":[3],"shape":[2,4],"dtype":"f32","ts":20,"dur":10,"in_b":64,"out_b":32}"#,
        r#"{"type":"span_end","id":1,"ts":50}"#,
        r#"{"type":"step","index":1,"ts":100}"#,
        r#"{"type":"span_start","id":2,"name":"backward","kind":"function","exec":"backward","thread":0,"ts":110}"#,
        r#"{"type":"op","span":2,"name":"matmul","in":[4,5],"out":[6],"shape":[2,4],"dtype":"f32","ts":120,"dur":10,"in_b":64,"out_b":32}"#,
        r#"{"type":"span_end","id":2,"ts":150}"#,
    ]);
    // compact: both calls carry equal args (speedscope keys frames by name + args).
    let (v, _) = chrome_with(&bytes, None, ArgsMode::Compact);
    check_structure(&v);
    let spans = args_of(&v, "span");
    assert_eq!(spans.len(), 2);
    assert_eq!(spans[0], spans[1]);
    assert_eq!(spans[0]["path"], "backward");
    assert_eq!(spans[0]["kind"], "function");
    assert!(spans[0].get("span_id").is_none() && spans[0].get("step").is_none());
    let ops = args_of(&v, "op");
    assert_eq!(ops.len(), 2);
    assert_eq!(ops[0], ops[1]);
    assert_eq!(ops[0]["shape"], serde_json::json!([2, 4]));
    assert_eq!(ops[0]["dtype"], "f32");
    assert!(ops[0].get("inputs").is_none() && ops[0].get("step").is_none());
    // full: the per-call ids are there, so the calls differ.
    let (v, _) = chrome_with(&bytes, None, ArgsMode::Full);
    check_structure(&v);
    let spans = args_of(&v, "span");
    assert_eq!(
        (&spans[0]["span_id"], &spans[1]["span_id"]),
        (&1.into(), &2.into())
    );
    assert_eq!(spans[1]["step"], 1);
    let ops = args_of(&v, "op");
    assert_eq!(ops[0]["inputs"], serde_json::json!([1, 2]));
    assert_eq!(ops[1]["outputs"], serde_json::json!([6]));
    assert_eq!(ops[1]["out_bytes"], 32);
    assert_ne!(ops[0], ops[1]);
    // none: no args on spans and ops (steps keep theirs).
    let (v, _) = chrome_with(&bytes, None, ArgsMode::None);
    check_structure(&v);
    assert!(
        args_of(&v, "span")
            .iter()
            .chain(&args_of(&v, "op"))
            .all(serde_json::Value::is_null)
    );
    assert_eq!(args_of(&v, "step").len(), 2);
    assert_eq!(ChromeOptions::default().args, ArgsMode::Compact);
}

#[test]
fn step_bar_arithmetic_is_integer_and_never_overlaps() {
    // Whole microseconds: start rounded up, end rounded down.
    assert_eq!(step_bar_us(453_047_890, 485_031_877), (453_048, 31_983));
    assert_eq!(step_bar_us(0, 999), (0, 0));
    assert_eq!(step_bar_us(1, 999), (1, 0));
    assert_eq!(step_bar_us(999, 1001), (1, 0));
    assert_eq!(step_bar_us(5_000, 5_000), (5, 0));
    assert_eq!(step_bar_us(7_000, 3_000), (7, 0));
    assert_eq!(
        step_bar_us(u64::MAX - 5, u64::MAX),
        (18_446_744_073_709_552, 0)
    );
    // Consecutive bars: in f64 (what viewers add), each ends at or before the next begins.
    let mut t = 0u64;
    let mut prev_end = 0.0f64;
    let mut jitter = 12_345u64;
    for _ in 0..20_000 {
        jitter = jitter
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let next = t + 1 + (jitter >> 40) % 50_000_000;
        let (ts, dur) = step_bar_us(t, next);
        let (ts, end) = (ts as f64, ts as f64 + dur as f64);
        assert!(
            ts >= prev_end,
            "bar at {ts} begins before the previous ends at {prev_end}"
        );
        assert!(end >= ts);
        prev_end = end;
        t = next;
    }
}

#[test]
fn step_bars_leave_unrecorded_steps_as_gaps_and_never_overlap() {
    // Steps 0, 1 recorded, 2-3 not (schedule window), 4 recorded.
    let bytes = hand_trace(&[
        r#"{"type":"step","index":0,"ts":1000}"#,
        r#"{"type":"op","name":"a","dtype":"f32","ts":1100,"dur":500}"#,
        r#"{"type":"step","index":1,"ts":453047890}"#,
        r#"{"type":"op","name":"a","dtype":"f32","ts":453048000,"dur":1000}"#,
        r#"{"type":"op","name":"a","dtype":"f32","ts":460000000,"dur":1500}"#,
        r#"{"type":"step","index":4,"ts":900000000}"#,
        r#"{"type":"op","name":"a","dtype":"f32","ts":900000100,"dur":2000}"#,
    ]);
    let (v, _) = chrome(&bytes, None);
    check_structure(&v);
    let bars: Vec<(String, f64, f64)> = v["traceEvents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["cat"] == "step")
        .map(|e| {
            let ts = e["ts"].as_f64().unwrap_or(-1.0);
            let dur = e["dur"].as_f64().unwrap_or(-1.0);
            assert!(e["ts"].is_u64() && e["dur"].is_u64(), "not whole µs: {e}");
            (
                e["name"].as_str().unwrap_or_default().to_string(),
                ts,
                ts + dur,
            )
        })
        .collect();
    assert_eq!(
        bars,
        vec![
            ("step 0".to_string(), 1.0, 453_047.0),
            // Step 1 ends at its last event (460,001.5 µs), not at step 4's start.
            ("step 1".to_string(), 453_048.0, 460_001.0),
            ("step 4".to_string(), 900_000.0, 900_002.0),
        ]
    );
}

#[test]
fn steps_recorded_out_of_time_order_still_give_disjoint_bars() {
    // Fuzz finding (seed 9001, input 4777): step 8's line comes after step 9's and starts
    // before it; its bar used to overlap step 9's on the steps track.
    let bytes = hand_trace(&[
        r#"{"type":"step","index":7,"ts":291326284}"#,
        r#"{"type":"op","name":"a","dtype":"f32","ts":291326300,"dur":1000}"#,
        r#"{"type":"step","index":9,"ts":468752106}"#,
        r#"{"type":"op","name":"a","dtype":"f32","ts":468752200,"dur":90000000}"#,
        r#"{"type":"step","index":8,"ts":368448962}"#,
        r#"{"type":"op","name":"a","dtype":"f32","ts":368449000,"dur":1000}"#,
    ]);
    let (v, summary) = chrome(&bytes, None);
    check_structure(&v);
    let mut bars: Vec<(u64, u64)> = v["traceEvents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["cat"] == "step")
        .map(|e| {
            let ts = e["ts"].as_u64().unwrap_or(u64::MAX);
            (ts, ts + e["dur"].as_u64().unwrap_or(u64::MAX))
        })
        .collect();
    assert_eq!(bars.len(), 3);
    bars.sort_unstable();
    for w in bars.windows(2) {
        assert!(w[0].1 <= w[1].0, "overlapping step bars: {bars:?}");
    }
    assert_eq!(summary.step_bars_clamped, 1);
}

#[test]
fn twenty_thousand_steps_export_without_overlapping_bars() {
    let mut lines = Vec::new();
    // Boundaries at odd nanoseconds that add up badly in three-decimal microseconds.
    let mut t = 453_047_890u64;
    for i in 0..20_000u64 {
        lines.push(format!(r#"{{"type":"step","index":{i},"ts":{t}}}"#));
        lines.push(format!(
            r#"{{"type":"op","name":"a","dtype":"f32","ts":{},"dur":1000}}"#,
            t + 7
        ));
        t += 31_983_987 + (i % 7) * 13;
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let (v, _) = chrome(&hand_trace(&refs), None);
    check_structure(&v);
    let mut bars: Vec<(f64, f64)> = v["traceEvents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["cat"] == "step")
        .map(|e| {
            let ts = e["ts"].as_f64().unwrap_or(-1.0);
            (ts, ts + e["dur"].as_f64().unwrap_or(-1.0))
        })
        .collect();
    assert_eq!(bars.len(), 20_000);
    bars.sort_by(|a, b| a.0.total_cmp(&b.0));
    for w in bars.windows(2) {
        assert!(w[0].1 <= w[1].0, "{:?} overlaps {:?}", w[0], w[1]);
    }
}

/// The step bars of `v`: (name, ts, end) in whole µs.
fn step_bars(v: &serde_json::Value) -> Vec<(String, u64, u64)> {
    v["traceEvents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["cat"] == "step")
        .map(|e| {
            let ts = e["ts"].as_u64().unwrap_or(u64::MAX);
            let end = ts.saturating_add(e["dur"].as_u64().unwrap_or(u64::MAX));
            (e["name"].as_str().unwrap_or_default().to_string(), ts, end)
        })
        .collect()
}

/// Whether `--step step` finds a step in `bytes` (Chrome and folded agree).
fn finds_step(bytes: &[u8], step: u64) -> bool {
    let mut reader = TraceReader::new(bytes, ReadOptions::default()).expect("header");
    let opts = ChromeOptions {
        step: Some(step),
        ..ChromeOptions::default()
    };
    let chrome = match write_chrome(&mut reader, std::io::sink(), &opts) {
        Ok(s) => s.step_found,
        Err(ExportError::StepNotFound(s)) if s == step => false,
        Err(e) => panic!("{e}"),
    };
    let mut reader = TraceReader::new(bytes, ReadOptions::default()).expect("header");
    let folded = trace_export::folded_stacks(&mut reader, Some(step)).expect("folded");
    assert_eq!(chrome, folded.step_found, "step {step}");
    chrome
}

#[test]
fn steps_are_numbered_as_the_analyses_number_them() {
    // `step()` at the end of each iteration: step 0 is what ran before the first boundary,
    // and the boundary the last `step()` opens holds only what `finish()` writes.
    let at_end = hand_trace(&[
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":64,"cat":"parameter","ts":500}"#,
        r#"{"type":"op","name":"a","dtype":"f32","ts":1000,"dur":1000}"#,
        r#"{"type":"step","index":1,"ts":3000}"#,
        r#"{"type":"op","name":"a","dtype":"f32","ts":3500,"dur":1000}"#,
        r#"{"type":"step","index":2,"ts":6000}"#,
        r#"{"type":"memory","action":"free","storage":1,"tensor":1,"bytes":64,"cat":"parameter","ts":7000}"#,
        r#"{"type":"device_memory","dev":"cpu","used":1000,"ts":8000}"#,
    ]);
    let (v, summary) = chrome(&at_end, None);
    check_structure(&v);
    assert_eq!(
        step_bars(&v),
        [("step 0".into(), 1, 3), ("step 1".into(), 3, 6)]
    );
    assert_eq!(summary.step_bars_clamped, 0);
    let (v0, _) = chrome(&at_end, Some(0));
    let ops = args_of(&v0, "op");
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0]["step"], 0);
    assert!(finds_step(&at_end, 0) && finds_step(&at_end, 1));
    assert!(
        !finds_step(&at_end, 2),
        "the empty boundary after the last step() is no step"
    );

    // `step()` at the start of each iteration: the first call closes a step 0 in which only
    // setup ran (not a step); an empty step between two steps stays one.
    let at_start = hand_trace(&[
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":64,"cat":"parameter","ts":500}"#,
        r#"{"type":"step","index":1,"ts":1000}"#,
        r#"{"type":"op","name":"a","dtype":"f32","ts":1500,"dur":1000}"#,
        r#"{"type":"step","index":2,"ts":3000}"#,
        r#"{"type":"marker","name":"nothing captured","ts":3500}"#,
        r#"{"type":"step","index":3,"ts":4000}"#,
        r#"{"type":"span_start","id":1,"name":"s","kind":"function","thread":0,"ts":4100}"#,
        r#"{"type":"span_end","id":1,"ts":4900}"#,
        r#"{"type":"memory","action":"free","storage":1,"tensor":1,"bytes":64,"cat":"parameter","ts":5000}"#,
    ]);
    let (v, _) = chrome(&at_start, None);
    check_structure(&v);
    assert_eq!(
        step_bars(&v),
        [
            ("step 1".into(), 1, 3),
            ("step 2".into(), 3, 4),
            ("step 3".into(), 4, 5)
        ]
    );
    let instants: Vec<&str> = v["traceEvents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["ph"] == "i" && e["args"]["step"].is_u64())
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(instants, ["step 1", "step 2", "step 3"]);
    assert!(!finds_step(&at_start, 0), "setup only: step 0 is no step");
    assert!(finds_step(&at_start, 2) && finds_step(&at_start, 3));
}

/// An op that became a span is drawn once, as its span, with the op's fields and nothing
/// adjusted; an op line in a span of kind `op` that started later is an op inside it.
#[test]
fn an_op_that_became_a_span_is_drawn_once_as_that_span() {
    let (v, summary) = chrome(&testkit::op_span_trace(), None);
    let xs = check_structure(&v);
    assert_eq!(summary.adjustments.total(), 0, "{:?}", summary.adjustments);
    let outer: Vec<&XEvent> = xs.iter().filter(|x| x.name == "outer").collect();
    assert_eq!(outer.len(), 1, "{outer:?}");
    assert_eq!(
        (outer[0].cat.as_str(), outer[0].start, outer[0].end),
        ("span,op", 100, 400)
    );
    assert_eq!(outer[0].args["shape"], serde_json::json!([2, 3]));
    assert_eq!(outer[0].args["flops"], 12);
    assert_eq!(outer[0].args["path"], "outer");
    let lone: Vec<&str> = xs
        .iter()
        .filter(|x| x.name == "lone")
        .map(|x| x.cat.as_str())
        .collect();
    assert_eq!(
        lone,
        ["op", "span,op"],
        "the op inside, then its span as it closes"
    );
    // 4 op lines, 3 spans: `outer` counts once as each.
    assert_eq!((summary.spans, summary.ops), (3, 4));
    let check = testkit::check_chrome(&v);
    assert!(check.failures.is_empty(), "{:?}", check.failures);
    assert_eq!(check.op_totals.get("outer"), Some(&300));
    assert_eq!(check.op_totals.get("lone"), Some(&50));
}
