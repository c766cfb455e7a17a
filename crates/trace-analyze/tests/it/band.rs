//! The memory report's min/max band: exact points when they fit, buckets keeping the smallest
//! and largest live total otherwise, and agreement with a naive replay of the events.

use proptest::prelude::*;
use trace_analyze::events::MemoryBand;
use trace_analyze::{BAND_POINTS, memory_report};
use trace_record::schema::MemoryCategory;

use crate::common::{from_lines, small, synthetic};

fn band_of(t: &trace_analyze::Trace, device: &str) -> MemoryBand {
    let report = memory_report(t).expect("memory events");
    let d = report.devices.iter().find(|d| d.device == device);
    d.expect("device").band.clone()
}

#[test]
fn the_band_keeps_every_point_when_it_fits_and_shows_drops() {
    let t = from_lines(&[
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":100,"cat":"parameter","ts":1}"#,
        r#"{"type":"memory","action":"alloc","storage":2,"tensor":2,"bytes":1000,"cat":"activation","ts":2}"#,
        r#"{"type":"memory","action":"free","storage":2,"tensor":2,"bytes":1000,"cat":"activation","ts":3}"#,
        r#"{"type":"memory","action":"free","storage":9,"tensor":9,"bytes":5,"cat":"activation","ts":4}"#,
    ]);
    let b = band_of(&t, "cpu");
    assert!(b.exact);
    // The free without its allocation is no point, but it is the device's last event.
    assert_eq!(b.t_ns, [1, 2, 3]);
    assert_eq!(b.end_ns, 4);
    assert_eq!(b.lo, [100, 1100, 100]);
    assert_eq!(b.hi, b.lo);
    assert_eq!(
        b.by_category_at_lo[MemoryCategory::Activation.index()],
        [0, 1000, 0]
    );
    assert_eq!(
        b.by_category_at_lo[MemoryCategory::Parameter.index()],
        [100, 100, 100]
    );
}

#[test]
fn a_repeated_allocation_replaces_the_old_one_in_the_band() {
    let t = from_lines(&[
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":100,"cat":"activation","ts":1}"#,
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":30,"cat":"temporary","ts":2}"#,
    ]);
    let b = band_of(&t, "cpu");
    assert_eq!(b.lo, [100, 30]);
    assert_eq!(
        b.by_category_at_lo[MemoryCategory::Activation.index()],
        [100, 0]
    );
    assert_eq!(
        b.by_category_at_lo[MemoryCategory::Temporary.index()],
        [0, 30]
    );
}

#[test]
fn a_bucketed_band_keeps_min_and_max() {
    let mut lines = Vec::new();
    for i in 0..(BAND_POINTS as u64 * 3) {
        lines.push(format!(
            r#"{{"type":"memory","action":"alloc","storage":{i},"tensor":{i},"bytes":1000,"cat":"activation","ts":{}}}"#,
            2 * i
        ));
        lines.push(format!(
            r#"{{"type":"memory","action":"free","storage":{i},"tensor":{i},"bytes":1000,"cat":"activation","ts":{}}}"#,
            2 * i + 1
        ));
    }
    let b = band_of(&from_lines(&lines), "cpu");
    assert!(!b.exact);
    assert!(b.t_ns.len() <= BAND_POINTS);
    assert!(b.t_ns.windows(2).all(|w| w[0] < w[1]));
    // Every bucket rises to 1000 and falls to 0: the drop between allocations is visible.
    assert!(b.hi.iter().all(|&h| h == 1000), "{:?}", &b.hi[..8]);
    assert!(b.lo.iter().skip(1).all(|&l| l == 0));
    assert_eq!(b.end_ns, 2 * (BAND_POINTS as u64 * 3) - 1);
}

#[test]
fn a_device_with_physical_samples_only_has_an_empty_band() {
    let t = from_lines(&[
        r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":100,"cat":"activation","ts":1}"#,
        r#"{"type":"device_memory","dev":"cuda:0","used":5,"ts":2}"#,
    ]);
    let b = band_of(&t, "cuda:0");
    assert!(b.exact && b.t_ns.is_empty() && b.end_ns == 0);
    assert_eq!(b.by_category_at_lo.len(), MemoryCategory::ALL.len());
}

#[test]
fn the_band_of_real_traces_reaches_the_peak_and_ends_at_the_end() {
    for t in [
        small(),
        synthetic(&testkit::SynthConfig::default()),
        synthetic(&testkit::SynthConfig {
            ops: 20_000,
            ..Default::default()
        }),
    ] {
        let report = memory_report(&t).expect("memory events");
        for d in &report.devices {
            let b = &d.band;
            assert_eq!(
                b.hi.iter().max().copied(),
                Some(d.peak_bytes),
                "{}",
                t.source
            );
            assert!(b.lo.iter().zip(&b.hi).all(|(l, h)| l <= h));
            for (i, lo) in b.lo.iter().enumerate() {
                let sum: u64 = b.by_category_at_lo.iter().map(|s| s[i]).sum();
                assert_eq!(sum, *lo, "categories at lo add up to lo");
            }
            if b.exact {
                assert_eq!(b.lo.last().copied(), Some(d.end_bytes));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random allocations and frees (some of storages never allocated): an exact band is the
    /// running live total after every matched event, a naive replay.
    #[test]
    fn an_exact_band_is_the_running_total(ev in proptest::collection::vec((any::<bool>(), 0u64..8, 1u64..1000), 1..300)) {
        let mut lines = Vec::new();
        let mut live = std::collections::HashMap::new();
        let mut want = Vec::new();
        for (i, (alloc, storage, bytes)) in ev.iter().enumerate() {
            let action = if *alloc { "alloc" } else { "free" };
            lines.push(format!(
                r#"{{"type":"memory","action":"{action}","storage":{storage},"tensor":{storage},"bytes":{bytes},"cat":"activation","ts":{i}}}"#
            ));
            let matched = if *alloc {
                live.insert(*storage, *bytes);
                true
            } else {
                live.remove(storage).is_some()
            };
            if matched {
                want.push((i as u64, live.values().sum::<u64>()));
            }
        }
        let t = from_lines(&lines);
        let b = band_of(&t, "cpu");
        prop_assert!(b.exact);
        prop_assert_eq!(b.t_ns.clone(), want.iter().map(|w| w.0).collect::<Vec<_>>());
        prop_assert_eq!(b.lo.clone(), want.iter().map(|w| w.1).collect::<Vec<_>>());
        prop_assert_eq!(b.hi, b.lo);
    }
}
