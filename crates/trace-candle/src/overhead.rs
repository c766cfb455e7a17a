//! The capture's estimate of its own cost on the recording threads, written at finish.
//!
//! A profiler that cannot say what it costs leaves its user guessing whether a step is slow
//! or profiled. At [`Capture::finish`](crate::Capture::finish) the capture times each kind of
//! work it does on a recording thread, on this thread, against scratch sessions that write
//! nowhere: a span opened and closed, a captured op over a tiny tensor beyond the bare op
//! (its op, tensor and allocation lines and the free at the step's end), any other line, a
//! step boundary, a resident-memory sample and, with the `tracing` layer, a span's enter and
//! exit through `tracing-subscriber`'s registry. Each cost times how many of that kind the
//! trace holds, plus the heavier work whose cost depends on the model (the autograd walk,
//! gradient facts with their norms), timed as it ran, plus the time the recording threads
//! spent writing the trace's blocks out (`TraceSession::recording_write_ns`, timed as they
//! were written: the scratch sessions write nowhere, and on a slow file system writing a
//! decode step's span lines costs more than making them), gives the estimate, written as the counter
//! [`OVERHEAD_COUNTER`](trace_record::schema::OVERHEAD_COUNTER) (nanoseconds); `tracegraph
//! summary` prints it per step and as a share of step time. Only work on the threads that
//! record is counted (the sampler's and the heap tracker's threads run beside the program),
//! and only what happens inside the capture's calls: what recording does to the program's
//! caches around them is not seen, so the estimate is a floor.
//!
//! The calls are timed cold, each one after the caches it would use were flushed by writing a
//! static buffer larger than a core's L2 cache (2 MiB, resident from the first finish on): inside a model, the model's own work runs between two
//! of the capture's calls and evicts what the last one used. Timed hot (in a tight loop, best
//! of three), a tiny Llama's decode step's calls came to 6.7 µs where a `perf` profile of the
//! same loop put 16.7 µs in them, a quarter of the 26 µs the step measurably paid. Timing
//! takes about ten milliseconds. A run that ends outside the schedule's recorded windows
//! gets no estimate (a line there would be counted in the last recorded step).

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

use candle_core::{Device, Tensor};
use trace_record::schema::{EventCounts, Phase, SpanKind};
use trace_record::{Run, TraceSession};

use crate::Capture;
use crate::resident::process_resident_bytes;

/// What one unit of each kind of recording work costs here and now, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct UnitCosts {
    /// A span opened and closed (its two lines).
    pub(crate) span: f64,
    /// A captured op beyond the bare op: its op, tensor and allocation lines, its free.
    pub(crate) op: f64,
    /// Any other line (a memory event, a gradient, a marker, a counter).
    pub(crate) line: f64,
    /// A step boundary.
    pub(crate) step: f64,
    /// A resident-memory sample (the procfs read and its line).
    pub(crate) memory_sample: f64,
    /// A `tracing` span's enter and exit through the capture's layer and the subscriber's
    /// registry, the trace span it opens included (0 without the `tracing` feature).
    pub(crate) tracing_span: f64,
}

/// The best of three timed runs of `iters` calls of `f`, per call (the least disturbed by
/// preemption), after one untimed run.
fn ns_per_call(iters: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters {
        f();
    }
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let start = Instant::now();
        for _ in 0..iters {
            f();
        }
        best = best.min(start.elapsed().as_nanos() as f64 / f64::from(iters));
    }
    best
}

/// Bytes written between two cold calls: more than a core's L2 cache (512 KiB to 2 MiB on
/// current x86 and Arm servers), less than the shared L3 a model's working set would leave
/// the capture's data in.
const EVICT_BYTES: usize = 2 << 20;

/// The buffer written between cold calls: static (zeroed, resident once first written), not
/// allocated, because freeing a block this large moves glibc's adaptive mmap threshold, and
/// with it how fast every later tensor allocation of the user's program is (a tiny Llama's
/// training step measured 1.5 ms against 7.4 ms on either side of the threshold).
static EVICT: [AtomicU8; EVICT_BYTES] = [const { AtomicU8::new(0) }; EVICT_BYTES];

/// Writes one byte of every cache line of [`EVICT`].
fn evict() {
    for b in EVICT.iter().step_by(64) {
        b.fetch_add(1, Ordering::Relaxed);
    }
}

/// The median time of `iters` calls of `f`, each timed alone after [`evict`], less the cost
/// of reading the clock twice.
fn ns_per_call_cold(iters: u32, mut f: impl FnMut()) -> f64 {
    f();
    let mut clock = Vec::with_capacity(iters as usize);
    let mut times = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        let t = Instant::now();
        clock.push(black_box(t).elapsed().as_nanos() as f64);
        evict();
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_nanos() as f64);
    }
    (median(&mut times) - median(&mut clock)).max(0.0)
}

/// The median of `v` (0 for none).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// A capture over a session that writes nowhere, flushing nothing in the background. End it
/// with its session's `finish` (its own would estimate its cost in turn).
fn scratch() -> Capture {
    let run = Run::new("trace_candle::overhead", Phase::Infer, "cpu").flush_interval(None);
    Capture::new(Arc::new(TraceSession::from_writer(std::io::sink(), run)))
}

/// Times each kind of recording work on this thread, cold (about ten milliseconds).
pub(crate) fn unit_costs(samples_memory: bool) -> UnitCosts {
    let spans = scratch();
    let session = spans.session();
    let span = ns_per_call_cold(64, || {
        let guard = session.span_numbered_by("calibrate", SpanKind::Module, None, |_| Some(0));
        drop(black_box(guard));
    });
    let line = ns_per_call_cold(64, || session.record_counter("calibrate", 1.0));
    let step = ns_per_call_cold(32, || {
        black_box(spans.step());
    });
    let op = op_cost(&scratch());
    let memory_sample = if samples_memory {
        ns_per_call(16, || {
            black_box(process_resident_bytes());
        }) + line
    } else {
        0.0
    };
    let _ = spans.session().finish();
    UnitCosts {
        span,
        op,
        line,
        step,
        memory_sample,
        tracing_span: tracing_span_cost(),
    }
}

/// A captured op over a 4-element tensor beyond the bare op (its op, tensor and allocation
/// lines; its free at the step's end is a line, counted with the other lines), both timed
/// cold; 0 when Candle fails.
fn op_cost(capture: &Capture) -> f64 {
    let Ok(x) = Tensor::new(&[1f32, 2.0, 3.0, 4.0], &Device::Cpu) else {
        return 0.0;
    };
    let bare = ns_per_call_cold(64, || {
        let _ = black_box(black_box(&x).affine(2.0, 1.0));
    });
    let mut n = 0u32;
    let with = ns_per_call_cold(64, || {
        let _ = black_box(capture.op("calibrate", &[&x], || black_box(&x).affine(2.0, 1.0)));
        n += 1;
        // The outputs' frees, at a step's end, every 16th call (the median leaves those out).
        if n.is_multiple_of(16) {
            black_box(capture.step());
        }
    });
    let _ = capture.session().finish();
    (with - bare).max(0.0)
}

/// A `tracing` span entered and exited inside another through the capture's own subscriber
/// (what `Capture::install_tracing` installs), timed cold: all a model's instrumented span
/// costs (the subscriber's callsite lookup, the sibling numbering and scope, the trace span it
/// opens and closes). The layer records into a scratch session kept for the process (a layer holds a
/// `'static` session), so calibrating leaks nothing per capture.
#[cfg(feature = "tracing")]
fn tracing_span_cost() -> f64 {
    use std::sync::OnceLock;
    static CALIBRATION: OnceLock<TraceSession> = OnceLock::new();
    let session = CALIBRATION.get_or_init(|| {
        let run = Run::new("trace_candle::overhead", Phase::Infer, "cpu").flush_interval(None);
        TraceSession::from_writer(std::io::sink(), run)
    });
    let subscriber = crate::CaptureSubscriber::new(crate::TraceLayer::new(session));
    tracing::subscriber::with_default(subscriber, || {
        let outer = tracing::info_span!("calibrate_outer");
        let inner = tracing::info_span!("calibrate");
        let _outer = outer.enter();
        ns_per_call_cold(64, || {
            let entered = inner.enter();
            drop(black_box(entered));
        })
    })
}

#[cfg(not(feature = "tracing"))]
fn tracing_span_cost() -> f64 {
    0.0
}

/// What the capture timed directly: its heavier work (the autograd walk, gradient facts with
/// their norms), timed as it ran, how many lines that work wrote, and how much of its time
/// went to writing the trace's blocks out.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Measured {
    pub(crate) ns: u64,
    pub(crate) lines: u64,
    pub(crate) writes_ns: u64,
}

/// The estimated time, in nanoseconds, the recording of `counts` (events recorded by the
/// capture's calls; lines the sampler's and the heap tracker's threads write are not
/// counted) and of `tracing_spans` layer spans took at `costs`, plus the work timed directly
/// (`measured`, whose lines are not counted again) and the time the recording threads spent
/// writing the trace's blocks out (`writes_ns`, timed as they were written; those inside
/// the measured work are in its time already).
pub(crate) fn estimate_ns(
    counts: &EventCounts,
    tracing_spans: u64,
    costs: &UnitCosts,
    measured: Measured,
    writes_ns: u64,
) -> f64 {
    let n = |v: u64| v as f64;
    // An op's tensor and allocation lines and its free are in its own cost.
    let other = (counts.tensor + counts.memory + counts.gradient + counts.marker + counts.counter)
        .saturating_sub(3 * counts.op)
        .saturating_sub(measured.lines);
    // A layer span's trace span is in its own cost.
    n(counts.span_start.saturating_sub(tracing_spans)) * costs.span
        + n(counts.op) * costs.op
        + n(other) * costs.line
        + n(counts.step) * costs.step
        + n(counts.device_memory) * costs.memory_sample
        + n(tracing_spans) * costs.tracing_span
        + n(measured.ns)
        + n(writes_ns.saturating_sub(measured.writes_ns))
}

impl Capture {
    /// Runs `f`, heavier recording work whose cost depends on the model (the autograd walk,
    /// gradient facts with their norms), adding its time and the lines it wrote to what the
    /// estimate counts as measured; only `f` outside an active window.
    pub(crate) fn measured<T>(&self, f: impl FnOnce() -> T) -> T {
        if !self.is_active() {
            return f();
        }
        let s = self.session();
        let (t0, l0, w0) = (
            s.now_ns(),
            s.recorded_counts().total(),
            s.recording_write_ns(),
        );
        let out = f();
        let (t1, l1, w1) = (
            s.now_ns(),
            s.recorded_counts().total(),
            s.recording_write_ns(),
        );
        let mut p = self.inner().persist();
        p.measured_ns = p.measured_ns.saturating_add(t1.saturating_sub(t0));
        p.measured_lines = p.measured_lines.saturating_add(l1.saturating_sub(l0));
        p.measured_writes_ns = p.measured_writes_ns.saturating_add(w1.saturating_sub(w0));
        out
    }

    /// Records, at finish, the capture's estimate of its own recording time (counter
    /// `trace_candle.overhead_ns`), when the session recorded anything and the run ends in a
    /// recorded step (a line outside the schedule's windows would be counted in the last
    /// recorded step, stretching it to the run's end).
    pub(crate) fn record_overhead(&self) {
        let counts = self.session().recorded_counts();
        if !self.is_active() || counts.total() == 0 {
            return;
        }
        let (samples_memory, tracing_spans, measured) = {
            let p = self.inner().persist();
            let measured = Measured {
                ns: p.measured_ns,
                lines: p.measured_lines,
                writes_ns: p.measured_writes_ns,
            };
            (
                !p.sampled.is_empty(),
                p.layer_span_count().unwrap_or(0),
                measured,
            )
        };
        let costs = unit_costs(samples_memory);
        let writes_ns = self.session().recording_write_ns();
        let ns = estimate_ns(&counts, tracing_spans, &costs, measured, writes_ns);
        self.session()
            .record_counter(trace_record::schema::OVERHEAD_COUNTER, ns.round());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_each_count_times_its_cost() {
        let costs = UnitCosts {
            span: 100.0,
            op: 300.0,
            line: 10.0,
            step: 1000.0,
            memory_sample: 2000.0,
            tracing_span: 50.0,
        };
        let counts = EventCounts {
            span_start: 30,
            span_end: 30,
            op: 2,
            tensor: 3,
            memory: 5,
            counter: 1,
            step: 4,
            device_memory: 1,
            ..EventCounts::default()
        };
        // 30 spans, 20 of them the layer's (their trace spans in their own cost), 2 ops,
        // (3 + 5 + 1 - 6) other lines, 4 steps, 1 sample.
        let want = 1000.0 + 600.0 + 30.0 + 4000.0 + 2000.0 + 1000.0;
        assert_eq!(
            estimate_ns(&counts, 20, &costs, Measured::default(), 0),
            want
        );
        // Work timed directly is added, and its lines are not counted again.
        let measured = Measured {
            ns: 7000,
            lines: 2,
            writes_ns: 0,
        };
        let want = want - 20.0 + 7000.0;
        assert_eq!(estimate_ns(&counts, 20, &costs, measured, 0), want);
        // Block writes are added, less those inside the measured work (in its time).
        let measured = Measured {
            writes_ns: 500,
            ..measured
        };
        assert_eq!(
            estimate_ns(&counts, 20, &costs, measured, 3500),
            want + 3000.0
        );
    }

    #[test]
    fn the_unit_costs_are_measured_and_plausible() {
        let c = unit_costs(cfg!(target_os = "linux"));
        // Each is real work: more than nothing, less than a millisecond.
        for (what, v) in [("span", c.span), ("line", c.line), ("step", c.step)] {
            assert!(v > 0.0 && v < 1e6, "{what}: {v} ns");
        }
        assert!((0.0..1e6).contains(&c.op), "op: {} ns", c.op);
        assert!(c.span > c.line * 0.5, "a span is two lines: {c:?}");
    }
}
