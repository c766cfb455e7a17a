//! The schema enums: one wire name per variant, agreeing with serde, `FromStr`, `Display`.

use std::fmt::Debug;
use std::str::FromStr;

use serde::Serialize;
use serde::de::DeserializeOwned;
use trace_record::schema::{
    AllocKind, EventCounts, EventType, ExecStep, GradientState, MemoryCategory, Outcome,
    OutcomeKind, ParseEnumError, Phase, SpanKind, TimingMode,
};

/// Every variant: `as_str` is what serde writes and reads, what `FromStr` parses and what
/// `Display` prints; `ALL` is in `Ord` order and `index` is the position in it.
fn check<T>(all: &[T], as_str: fn(T) -> &'static str, index: fn(T) -> usize, what: &str)
where
    T: Copy + Ord + Debug + Serialize + DeserializeOwned + FromStr<Err = ParseEnumError>,
    T: std::fmt::Display,
{
    assert!(
        all.windows(2).all(|w| w[0] < w[1]),
        "{what}: ALL not in Ord order"
    );
    for (i, &v) in all.iter().enumerate() {
        let name = as_str(v);
        assert_eq!(index(v), i);
        let json = format!("\"{name}\"");
        assert_eq!(serde_json::to_string(&v).unwrap(), json, "{v:?}");
        assert_eq!(serde_json::from_str::<T>(&json).unwrap(), v);
        assert_eq!(name.parse::<T>(), Ok(v));
        assert_eq!(v.to_string(), name);
        assert_eq!(format!("{v:>20}"), format!("{name:>20}"));
    }
    let err = "NoSuchName".parse::<T>().unwrap_err();
    assert_eq!(err.what, what);
    assert_eq!(err.found, "NoSuchName");
    assert_eq!(
        err.expected,
        all.iter().map(|&v| as_str(v)).collect::<Vec<_>>()
    );
    assert!(
        err.to_string()
            .starts_with(&format!("unknown {what} `NoSuchName`"))
    );
}

#[test]
fn every_enum_has_one_table() {
    check(&Phase::ALL, Phase::as_str, Phase::index, "phase");
    check(
        &TimingMode::ALL,
        TimingMode::as_str,
        TimingMode::index,
        "timing mode",
    );
    check(
        &SpanKind::ALL,
        SpanKind::as_str,
        SpanKind::index,
        "span kind",
    );
    check(
        &ExecStep::ALL,
        ExecStep::as_str,
        ExecStep::index,
        "execution step",
    );
    check(
        &MemoryCategory::ALL,
        MemoryCategory::as_str,
        MemoryCategory::index,
        "memory category",
    );
    check(
        &AllocKind::ALL,
        AllocKind::as_str,
        AllocKind::index,
        "memory action",
    );
    check(
        &GradientState::ALL,
        GradientState::as_str,
        GradientState::index,
        "gradient state",
    );
    check(
        &OutcomeKind::ALL,
        OutcomeKind::as_str,
        OutcomeKind::index,
        "outcome",
    );
    check(
        &EventType::ALL,
        EventType::as_str,
        EventType::index,
        "event type",
    );
}

#[test]
fn wire_names_are_the_documented_ones() {
    assert_eq!(
        MemoryCategory::ALL.map(MemoryCategory::as_str),
        [
            "parameter",
            "activation",
            "gradient",
            "optimizer_state",
            "input",
            "temporary",
            "other"
        ]
    );
    assert_eq!(
        TimingMode::DeviceSynchronized.as_str(),
        "device_synchronized"
    );
    assert_eq!(GradientState::NonFinite.as_str(), "non_finite");
    assert_eq!(
        EventType::from_wire(b"device_memory"),
        Some(EventType::DeviceMemory)
    );
    assert_eq!(EventType::from_wire(b"header"), None);
    assert_eq!(EventType::from_wire(&[0xff]), None);
    assert!(MemoryCategory::Parameter.is_persistent());
    assert!(MemoryCategory::OptimizerState.is_persistent());
    assert!(!MemoryCategory::Activation.is_persistent());
}

#[test]
fn outcomes_name_their_kind() {
    let failed = Outcome::Failed {
        reason: "disk full".into(),
    };
    assert_eq!(failed.kind(), OutcomeKind::Failed);
    assert_eq!(failed.as_str(), "failed");
    assert_eq!(Outcome::Complete.as_str(), "complete");
    assert_eq!(Outcome::Incomplete.kind(), OutcomeKind::Incomplete);
}

#[test]
fn event_counts_are_counters() {
    let mut c = EventCounts::default();
    for (i, ty) in EventType::ALL.into_iter().enumerate() {
        c[ty] += i as u64;
    }
    // 0 + 1 + ... over the 20 types of schema version 2.
    assert_eq!(c.total(), 190);
    assert_eq!(c.counter, 9);
    assert_eq!(c.sampler, 13);
    let mut d = c;
    d += c;
    assert_eq!(d.heap_account, 34);
    assert_eq!(d.total(), 380);
    assert_eq!(
        d.iter().collect::<Vec<_>>(),
        EventType::ALL
            .map(|ty| (ty, 2 * ty.index() as u64))
            .to_vec()
    );
    let huge = EventCounts {
        op: u64::MAX,
        step: 1,
        ..EventCounts::default()
    };
    assert_eq!(huge.total(), u64::MAX);
    // Serialized with the wire names as keys (the trailer's `counts`).
    let json = serde_json::to_value(d).unwrap();
    for ty in EventType::ALL {
        assert_eq!(json[ty.as_str()], d[ty]);
    }
}
