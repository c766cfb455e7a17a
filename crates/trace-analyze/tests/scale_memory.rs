//! Peak heap memory of validating, loading and analysing a trace stays within 3× the trace's
//! size on the two hostile shapes a fuzzer found: one step of 1,000,000 ops (111 bytes a line)
//! and 1,000,000 nested spans never closed (104 bytes a line).
//!
//! A counting global allocator in this test binary alone tracks the live bytes of the Rust
//! heap (every thread: the loader parses on a second one) and their peak. The figures are
//! allocation sizes: no timing is involved. The one thing that varies between runs is how
//! many of the reader's batches are in flight (at most six of 4,096 events, a few MB,
//! about 0.05× of these traces), within the margin left below the limit. Each measurement
//! runs from nothing loaded to the command's result, and over the file's size.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use trace_analyze::{
    LoadOptions, Trace, compare, graph_report, load_path, new_step_cache, summarize,
};

#[global_allocator]
static GLOBAL: testkit::PeakAlloc = testkit::PeakAlloc;

/// One measurement at a time: the counters are global.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

use testkit::peak_of;

/// The issue's limit: peak heap over input bytes.
const LIMIT: f64 = 3.0;

/// Events in the generated traces: the issue's.
const N: u64 = 1_000_000;

/// A fixed offset that gives every id and time the same number of digits (7).
const BASE: u64 = 1_000_000;

/// One step of `n` ops, each line 111 bytes (the issue's 1,000,000 ops in 111 MB): every op
/// reads a tensor no op wrote and writes one no op reads.
fn one_step_of_ops(path: &Path, n: u64) {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(w, "{}", testkit::HEADER).unwrap();
    writeln!(w, r#"{{"type":"step","index":1,"ts":{BASE}}}"#).unwrap();
    for k in 0..n {
        let i = BASE + k;
        writeln!(
            w,
            r#"{{"type":"op","name":"matmul","in":[{}],"out":[{}],"shape":[8,8],"dtype":"f32","ts":{i},"dur":50}}"#,
            2 * i,
            2 * i + 1
        )
        .unwrap();
    }
    w.flush().unwrap();
}

/// `n` spans, each the child of the one before, never closed: 104 bytes a line (the issue's
/// 1,000,000 spans in 103.5 MB). The first one's parent is no span of the trace: one issue,
/// besides one a span.
fn nested_open_spans(path: &Path, n: u64) {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    testkit::write_nested_open_spans(&mut w, n).unwrap();
    w.flush().unwrap();
}

/// What `validate` does: one streaming pass through the reader and the validator.
fn validate(path: &Path) -> usize {
    let input = trace_record::TraceInput::open(path).unwrap();
    let mut reader =
        trace_record::TraceReader::new(input, trace_record::ReadOptions::default()).unwrap();
    let mut validator = trace_record::Validator::new();
    reader
        .for_each_batched_ref(|e| {
            validator.check(e.line, &e.event);
            Ok::<(), trace_record::ReadError>(())
        })
        .unwrap();
    validator.finish().len()
}

fn load(path: &Path) -> Trace {
    load_path(path, LoadOptions::default()).unwrap()
}

/// Peak heap over the input's bytes.
fn ratio(peak: usize, input: u64) -> f64 {
    peak as f64 / input as f64
}

fn assert_within(what: &str, r: f64) {
    eprintln!("{what}: {r:.3}× the input");
    assert!(
        r <= LIMIT,
        "{what}: peak heap {r:.2}× the input (limit {LIMIT}×)"
    );
}

/// A generated trace in a temporary directory.
struct Generated {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    bytes: u64,
}

fn generated(write: fn(&Path, u64)) -> Generated {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    write(&path, N);
    let bytes = std::fs::metadata(&path).unwrap().len();
    Generated {
        _dir: dir,
        path,
        bytes,
    }
}

#[test]
fn nested_open_spans_validate_load_and_summarize_within_3x() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let g = generated(nested_open_spans);
    let (issues, peak) = peak_of(|| validate(&g.path));
    assert_eq!(
        issues as u64,
        N + 1,
        "a span left open, each, and the root's parent"
    );
    assert_within("validate, nested open spans", ratio(peak, g.bytes));
    // `summary` (which builds the graph report too): the load, then the analyses.
    let (spans, peak) = peak_of(|| {
        let t = load(&g.path);
        summarize(&t, &new_step_cache()).unwrap();
        t.spans.len()
    });
    assert_eq!(spans as u64, N);
    assert_within("summary, nested open spans", ratio(peak, g.bytes));
}

#[test]
fn one_step_of_ops_validates_loads_and_compares_within_3x() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let g = generated(one_step_of_ops);
    let (_, peak) = peak_of(|| validate(&g.path));
    assert_within("validate, one step of ops", ratio(peak, g.bytes));
    let (ops, peak) = peak_of(|| load(&g.path).ops.len());
    assert_eq!(ops as u64, N);
    assert_within("load, one step of ops", ratio(peak, g.bytes));
    // `compare` of the trace with itself, over both inputs together.
    let (c, peak) = peak_of(|| {
        let (a, b) = (load(&g.path), load(&g.path));
        compare(&a, &b, &new_step_cache()).unwrap()
    });
    assert!(c.graphs.iter().all(|p| p.equal));
    assert_within("compare, one step of ops", ratio(peak, 2 * g.bytes));
}

/// The step graph of a million ops (graph-core's tables, about 180 bytes an op at the
/// peak of its build: 1.6× the op's line) on top of the loaded trace (1.2×).
#[test]
fn one_step_of_ops_summary_and_graph_within_3x() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let g = generated(one_step_of_ops);
    let (_, peak) = peak_of(|| {
        let t = load(&g.path);
        graph_report(&t, &new_step_cache()).unwrap().steps.len()
    });
    assert_within("graph, one step of ops", ratio(peak, g.bytes));
}

/// Comparing a million nested spans builds one side's path tree (`events::spans`, about 2×
/// that input at its peak) at a time, keeping 32 bytes a path of it for the rows.
#[test]
fn nested_open_spans_compare_within_3x() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let g = generated(nested_open_spans);
    let (_, peak) = peak_of(|| {
        let (a, b) = (load(&g.path), load(&g.path));
        compare(&a, &b, &new_step_cache()).unwrap().graphs.len()
    });
    assert_within("compare, nested open spans", ratio(peak, 2 * g.bytes));
}
