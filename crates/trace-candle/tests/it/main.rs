//! Integration tests of trace-candle (real Candle tensors and modules on the CPU).

mod capture;
mod flight;
#[cfg(feature = "tracing")]
mod layer;
// A real candle-transformers model (the profile_llama example's config) trained with AdamW.
#[cfg(all(feature = "nn", feature = "tracing"))]
mod llama;
mod meta;
// Profiled candle-nn modules and the training capture need the `nn` feature (candle-nn).
#[cfg(feature = "nn")]
mod module;
mod props;
#[cfg(feature = "nn")]
mod train;

use std::sync::Arc;

use trace_candle::Capture;
use trace_record::schema::{Event, Phase, TimingMode};
use trace_record::{MemorySink, ParsedTrace as Trace, ReadOptions, Run, TraceReader, TraceSession};

/// A capture recording every step into memory.
pub(crate) fn capture(phase: Phase) -> (Capture, MemorySink) {
    capture_with(Run::new("trace-candle::tests", phase, "cpu"))
}

pub(crate) fn capture_with(run: Run) -> (Capture, MemorySink) {
    let (session, sink) = TraceSession::in_memory(run);
    (Capture::new(Arc::new(session)), sink)
}

/// A capture whose run synchronizes the device around timed ops.
pub(crate) fn synchronized_capture() -> (Capture, MemorySink) {
    capture_with(
        Run::new("trace-candle::tests", Phase::Infer, "cpu").timing(TimingMode::DeviceSynchronized),
    )
}

/// Finishes the session and reads the trace back in strict mode; asserts it validates.
pub(crate) fn finish_and_read(capture: &Capture, sink: &MemorySink) -> Trace {
    capture.session().finish().unwrap();
    let bytes = sink.bytes();
    let reader = TraceReader::new(bytes.as_slice(), ReadOptions::strict()).unwrap();
    let trace = Trace::from_reader(reader).unwrap();
    assert!(!trace.incomplete);
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "validation issues: {issues:?}");
    trace
}

pub(crate) fn events(trace: &Trace) -> impl Iterator<Item = &Event> {
    trace.events.iter().map(|e| &e.event)
}
