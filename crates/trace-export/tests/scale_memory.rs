//! Peak heap memory of the Chrome export stays within 3× the trace's size on a million
//! nested spans never closed, measured by a counting global allocator in this test
//! binary alone (live bytes of the Rust heap on every thread and their peak: allocation
//! sizes, no timing; only the number of the reader's batches in flight varies, a few MB).
//! The trace is the issue's: 1,000,000 spans, 104 bytes a line.

use trace_export::{ChromeOptions, write_chrome_outlined};
use trace_record::{ReadOptions, TraceReader};

#[global_allocator]
static GLOBAL: testkit::PeakAlloc = testkit::PeakAlloc;

use testkit::peak_of;

/// The limit: peak heap over input bytes.
const LIMIT: f64 = 3.0;

/// Spans in the generated trace.
const N: u64 = 1_000_000;

/// `n` spans, each the child of the one before, never closed: 104 bytes a line.
fn nested_open_spans(n: u64) -> Vec<u8> {
    let mut w = Vec::new();
    testkit::write_nested_open_spans(&mut w, n).unwrap();
    w
}

/// What `tracegraph export --format chrome` does: an outline pass, then the export, written
/// to nowhere.
fn export(trace: &[u8]) -> u64 {
    let reader = || TraceReader::new(trace, ReadOptions::default()).unwrap();
    let outline = trace_export::outline(&mut reader()).unwrap();
    let s = write_chrome_outlined(
        &mut reader(),
        std::io::sink(),
        &ChromeOptions::default(),
        &outline,
    )
    .unwrap();
    s.spans
}

#[test]
fn chrome_export_of_nested_open_spans_stays_within_3x_the_input() {
    let trace = nested_open_spans(N);
    let (spans, peak) = peak_of(|| export(&trace));
    assert_eq!(spans, N);
    let ratio = peak as f64 / trace.len() as f64;
    eprintln!("chrome export: {ratio:.3}× the input");
    assert!(
        ratio <= LIMIT,
        "peak {ratio:.2}× the input (limit {LIMIT}×)"
    );
}
