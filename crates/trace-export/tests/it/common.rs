//! Shared helpers: a Chrome export parsed back, and testkit's structural checker as assertions.

use serde_json::Value;
use testkit::{XEvent, check_chrome, nesting_failures};
use trace_export::{ArgsMode, ChromeOptions, ChromeSummary, write_chrome};
use trace_record::{ReadOptions, TraceReader};

/// Exports `trace` as Chrome JSON with every arg (`ArgsMode::Full`) and parses it back.
pub(crate) fn chrome(trace: &[u8], step: Option<u64>) -> (Value, ChromeSummary) {
    chrome_with(trace, step, ArgsMode::Full)
}

/// Exports `trace` as Chrome JSON with `args` and parses it back.
pub(crate) fn chrome_with(
    trace: &[u8],
    step: Option<u64>,
    args: ArgsMode,
) -> (Value, ChromeSummary) {
    let opts = ChromeOptions {
        step,
        args,
        ..ChromeOptions::default()
    };
    let (out, summary) = chrome_bytes(trace, &opts);
    let v: Value = serde_json::from_slice(&out).expect("the export is valid JSON");
    (v, summary)
}

/// Exports `trace` as Chrome JSON with every arg and every memory change (resolution 0) and
/// parses it back.
pub(crate) fn chrome_exact(trace: &[u8], step: Option<u64>) -> (Value, ChromeSummary) {
    let opts = ChromeOptions {
        step,
        args: ArgsMode::Full,
        memory_resolution_ns: 0,
    };
    let (out, summary) = chrome_bytes(trace, &opts);
    let v: Value = serde_json::from_slice(&out).expect("the export is valid JSON");
    (v, summary)
}

/// The Chrome export of `trace` with `opts`, as written.
pub(crate) fn chrome_bytes(trace: &[u8], opts: &ChromeOptions) -> (Vec<u8>, ChromeSummary) {
    let mut reader = TraceReader::new(trace, ReadOptions::default()).expect("header");
    let mut out = Vec::new();
    let summary = write_chrome(&mut reader, &mut out, opts).expect("export");
    (out, summary)
}

/// `ts` or `dur` (µs with three decimals) as integer ns.
pub(crate) fn ns(v: &Value) -> u64 {
    testkit::ns(v).unwrap_or_else(|| panic!("not a non-negative time: {v}"))
}

/// Asserts that the export is well formed (testkit's checker finds nothing) and returns its
/// complete events.
pub(crate) fn check_structure(v: &Value) -> Vec<XEvent> {
    let check = check_chrome(v);
    assert!(check.failures.is_empty(), "{:#?}", check.failures);
    check.complete
}

/// Asserts that complete events nest per thread.
pub(crate) fn check_nesting(xs: &[XEvent]) {
    let failures = nesting_failures(xs);
    assert!(failures.is_empty(), "{failures:#?}");
}
