//! Chrome Trace Event Format export (JSON object form), streamed event by event.
//!
//! The output opens in Perfetto UI, chrome://tracing and speedscope:
//!
//! ```text
//! {"traceEvents":[
//! {"ph":"M","name":"process_name","pid":41,"tid":0,"args":{"name":"..."}},
//! {"ph":"X","cat":"op","name":"matmul","pid":41,"tid":0,"ts":12.345,"dur":0.250,"args":{...}},
//! {"ph":"C","name":"logical memory cpu activation","pid":41,"ts":12.595,"args":{"bytes":4096}},
//! ...
//! ],
//! "displayTimeUnit":"ns",
//! "otherData":{"generator":"tracegraph",...,"adjustments":{...}}}
//! ```
//!
//! - Spans and ops are complete events (`"ph":"X"`) with `ts`/`dur` in microseconds and three
//!   decimals (exact nanoseconds), one `tid` per recorded thread, nested per thread (see
//!   [`Nester`](crate::nest::Nester); what had to be adjusted is counted in `otherData.adjustments`).
//! - Live logical bytes per category per device are counter events (`"ph":"C"`), one counter
//!   per device and category (`logical memory DEVICE CATEGORY`, one argument `bytes`), and a
//!   sample only when that category's bytes change: viewers hold a counter's value until its
//!   next sample. Physical samples are separate counters (`physical memory used DEVICE`,
//!   ...), never mixed in. Counters are process counters and carry no `tid`. Memory events
//!   of one device at one time make one sample per category that changed (the bytes after
//!   the last of them: viewers draw counters as steps, and a second sample at the same time
//!   hides the first). When the device's total in between reached more than any total shown
//!   so far, that moment is written too, first, at the same time: the largest total of what
//!   the samples show is the peak `tracegraph memory` reports. At a memory resolution of
//!   `N` ns (default 1 µs, [`ChromeOptions::memory_resolution_ns`]) the states of one device
//!   in one window of `N` ns are cut to its peaks and its end ([`crate::memory_window`]).
//! - Steps are global instant events (`step N`) and complete events on a `steps` track, one
//!   of each per step of the trace as trace-record's [`StepTracker`] numbers and bounds them
//!   (the rule every analysis uses): step 0 holds what ran before the first `step` event, a
//!   bar runs from its step's boundary to the next, and the empty boundary a loop's last
//!   `step()` opens is neither drawn nor exportable with `--step`.
//! - Markers and gradient facts are instant events; user counters are counter events.
//! - The tracked heap (`heap_alloc` / `heap_free`, schema version 2) is one counter series,
//!   `tracked heap` (argument `bytes`): the live bytes of the tracked allocations, a sample
//!   whenever they change (the changes stamped with one time make one sample, the bytes after
//!   the last of them). Heap bytes are what the program asked the allocator for, never added
//!   to the logical counters.
//! - Span names are those every analysis shows when the export is given the trace's
//!   [`TraceOutline`] ([`write_chrome_outlined`]); an op recorded outside every span is
//!   drawn at the root of the driving thread, between its spans (see [`crate::nest`]).
//! - Memory held while exporting: the open spans, one pending op per thread, the live
//!   allocations (storage id → bytes) and per device the states of its open memory window.
//!   The output is written as it is produced.

use std::io::{BufRead, Write};

use serde::Serialize;
use trace_record::schema::{AllocKind, Event, MemoryCategory, OpEvent};
use trace_record::{ClosedStep, StepTracker, TraceReader, json};

use crate::ExportError;
use crate::FastMap;
use crate::memory_window::{PerCategory, Window, total};
use crate::names::TraceOutline;
use crate::nest::{Adjustments, Interval, Nester, OUTSIDE_SPANS_TID};

/// The name of the tracked heap's counter series (argument `bytes`).
pub const HEAP_COUNTER: &str = "tracked heap";

/// The thread id of the `steps` track.
pub(crate) const STEPS_TID: u64 = 999_998;

/// The default time resolution of the logical memory counters, ns: one microsecond, the
/// Trace Event Format's own unit of time.
pub const DEFAULT_MEMORY_RESOLUTION_NS: u64 = 1_000;

/// Options of [`write_chrome`].
#[derive(Debug, Clone, Copy)]
pub struct ChromeOptions {
    /// Export only the spans, ops, counters and instants of this step: 0 for what ran before
    /// the first `step` event, else the index of its `step` event (the numbering of
    /// trace-record's [`StepTracker`]). Spans are kept when they start in the step.
    pub step: Option<u64>,
    /// Which arguments spans and ops carry (default [`ArgsMode::Compact`]).
    pub args: ArgsMode,
    /// Time resolution of the logical memory counters, ns (default
    /// [`DEFAULT_MEMORY_RESOLUTION_NS`]). 0 writes every change. Otherwise, per device, the
    /// changes whose times fall in one window `[k·N, (k+1)·N)` are written as at most: the
    /// state at which the device's total was highest in the window, the state at which a
    /// category was highest when that is above every value of it written before, and the
    /// state at the window's end, each at its own time. Every peak (per window, per
    /// category, per device) and the value after every window are those of the exact export;
    /// only the order of changes inside a window is simplified. A step boundary also ends a
    /// window.
    pub memory_resolution_ns: u64,
}

impl Default for ChromeOptions {
    fn default() -> Self {
        ChromeOptions {
            step: None,
            args: ArgsMode::default(),
            memory_resolution_ns: DEFAULT_MEMORY_RESOLUTION_NS,
        }
    }
}

/// Which `args` the span and op complete events carry.
///
/// speedscope keys a frame by the event's name *and* its serialized `args`, so arguments that
/// differ on every call (span ids, tensor ids, step indices) make one frame per call and
/// defeat its aggregation (Left Heavy, Sandwich). Perfetto and Catapult show the args of a
/// selected event and do not group by them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgsMode {
    /// Everything: the compact args plus the per-call ones (span id and step index; an op's
    /// input and output tensor ids, input and output bytes and step index). Best for
    /// inspecting single calls in Perfetto; speedscope shows one frame per call.
    Full,
    /// The args that describe *what* ran, identical for every call of the same thing: a
    /// span's kind, execution step and path; an op's output shape, dtype, device, memory
    /// category and FLOPs. speedscope aggregates calls (one frame per span path, per op name
    /// and shape); Perfetto still shows the detail. The default.
    #[default]
    Compact,
    /// No args on spans and ops: speedscope aggregates by name alone.
    None,
}

impl ArgsMode {
    /// The mode's name as the CLI spells it (`full`, `compact`, `none`).
    pub fn as_str(self) -> &'static str {
        match self {
            ArgsMode::Full => "full",
            ArgsMode::Compact => "compact",
            ArgsMode::None => "none",
        }
    }
}

/// A step bar on the `steps` track in whole microseconds: `(ts, dur)` with `ts` the step's
/// start rounded up and `ts + dur` its end rounded down, so that in the floating-point
/// microseconds viewers add (`ts + dur`, exact for integers below 2^53) a bar never ends after
/// the next one begins, however the boundaries fall between microseconds. A step shorter than
/// the rounding gets a zero-length bar at its rounded-up start.
///
/// ```
/// # use trace_export::step_bar_us;
/// // 453047.890 µs .. 485031.877 µs: the bar is 453048 + 31983 = 485031 ≤ the next start.
/// assert_eq!(step_bar_us(453_047_890, 485_031_877), (453_048, 31_983));
/// assert_eq!(step_bar_us(1_000, 2_000), (1, 1));
/// assert_eq!(step_bar_us(1_200, 1_700), (2, 0));
/// ```
pub fn step_bar_us(start_ns: u64, end_ns: u64) -> (u64, u64) {
    let ts = start_ns.div_ceil(1000);
    let end = (end_ns.max(start_ns) / 1000).max(ts);
    (ts, end - ts)
}

/// Memory events that could not be applied to the live-bytes counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MemoryAdjustments {
    /// Frees of a storage with no live allocation (ignored, so counters never go negative).
    pub frees_without_alloc: u64,
    /// Allocations of a storage that was already live (the old one is replaced).
    pub duplicate_allocs: u64,
    /// Frees whose byte count differs from the allocation's (the allocation's is used).
    pub free_size_mismatches: u64,
}

/// What [`write_chrome`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ChromeSummary {
    /// Trace events written in all.
    pub events_written: u64,
    /// Span complete events.
    pub spans: u64,
    /// Op complete events.
    pub ops: u64,
    /// Memory counter events (logical and physical).
    pub memory_counters: u64,
    /// Instant events (steps, markers, gradients).
    pub instants: u64,
    /// User counter values that were not finite (skipped: JSON has no NaN).
    pub non_finite_counters: u64,
    /// Adjustments made so that spans and ops nest per thread.
    pub adjustments: Adjustments,
    /// Memory events that could not be applied.
    pub memory: MemoryAdjustments,
    /// Samples of the [`HEAP_COUNTER`] series written.
    pub heap_counters: u64,
    /// Heap events that could not be applied to the tracked heap's live bytes (a free of an
    /// allocation not live, an allocation of an id already live: ignored, as the analyses
    /// ignore them; `free_size_mismatches` is always 0, a `heap_free` carries no size).
    pub heap: MemoryAdjustments,
    /// Whether the step asked for with [`ChromeOptions::step`] is a step of the trace (true
    /// without one).
    pub step_found: bool,
    /// Step bars whose start was moved later (or that shrank to zero length) so that they do
    /// not overlap an earlier bar on the steps track: steps recorded out of time order.
    pub step_bars_clamped: u64,
}

/// A buffered JSON array writer that formats numbers and strings without allocating.
struct Out<W: Write> {
    w: W,
    line: Vec<u8>,
    first: bool,
    written: u64,
}

impl<W: Write> Out<W> {
    fn begin(&mut self) {
        self.line.clear();
        if self.first {
            self.first = false;
        } else {
            self.line.extend_from_slice(b",\n");
        }
    }

    fn end(&mut self) -> Result<(), ExportError> {
        self.written += 1;
        self.w.write_all(&self.line).map_err(ExportError::Write)
    }

    fn raw(&mut self, s: &str) {
        self.line.extend_from_slice(s.as_bytes());
    }

    fn u64(&mut self, v: u64) {
        json::push_u64(&mut self.line, v);
    }

    fn us(&mut self, ns: u64) {
        json::push_micros(&mut self.line, ns);
    }

    fn str(&mut self, s: &str) {
        json::push_str(&mut self.line, s);
    }

    /// `"ph":PH,"name":NAME,"pid":PID,"tid":TID`
    fn head(&mut self, ph: &str, name: &str, pid: u64, tid: u64) {
        self.raw("{\"ph\":\"");
        self.raw(ph);
        self.raw("\",\"name\":");
        self.str(name);
        self.raw(",\"pid\":");
        self.u64(pid);
        self.raw(",\"tid\":");
        self.u64(tid);
    }
}

/// Live logical bytes of one device.
struct DeviceLive {
    name: String,
    /// Per category, `{"ph":"C","name":"logical memory DEVICE CATEGORY","pid":P,"ts":` ready
    /// to copy.
    heads: Vec<Vec<u8>>,
    bytes: PerCategory,
    /// What the exact export (every change) shows now: per category, the bytes of its last
    /// sample (0 before its first, when its track has no sample yet). The states it goes
    /// through are what a memory resolution reduces.
    exact: PerCategory,
    /// The largest total of `exact` so far.
    peak_exact: u64,
    /// While a sample of this device is pending: the bytes when their total was largest, if
    /// that is above every total of `exact` so far.
    group_peak: Option<PerCategory>,
    /// What a viewer shows now: per category, the bytes of its last sample written. Equal to
    /// `exact` at resolution 0 and after every window.
    shown: PerCategory,
    /// Per category, the largest bytes written.
    shown_max: PerCategory,
    /// The exact states of the window now open (resolution above 0).
    window: Window,
}

/// The exporter's state besides the nester.
struct Chrome<W: Write> {
    out: Out<W>,
    pid: u64,
    filter: Option<u64>,
    named_tids: FastMap<u64, ()>,
    devices: Vec<DeviceLive>,
    device_index: FastMap<String, usize>,
    /// The device of the last memory event (most events share one device).
    last_device: Option<usize>,
    /// A memory counter sample not written yet: (device, time). Written when a memory event
    /// of another device or time comes, when a step begins and at the end, with the bytes
    /// then: so the events of one device at one time make one sample.
    pending_counter: Option<(usize, u64)>,
    /// Live storage id → (device, category, bytes).
    live: FastMap<u64, (usize, usize, u64)>,
    summary: ChromeSummary,
    /// Which step is open, and the steps that ended.
    steps: StepTracker,
    /// Where the last step bar ends, µs: the next bar starts there at the earliest.
    steps_track_us: u64,
    /// Which args spans and ops carry.
    args: ArgsMode,
    /// Time resolution of the logical memory counters, ns (0: every change).
    resolution: u64,
    /// The tracked heap's live bytes and its counter.
    heap: HeapLive,
    error: Option<ExportError>,
}

/// The tracked heap: live allocations (id → bytes), their total and the counter shown.
#[derive(Default)]
struct HeapLive {
    live: FastMap<u64, u64>,
    bytes: u64,
    /// The time of a sample not written yet (the changes stamped with it make one sample).
    pending: Option<u64>,
    /// The bytes of the last sample written.
    shown: Option<u64>,
    /// Whether a heap event was read.
    seen: bool,
}

impl<W: Write> Chrome<W> {
    fn keep(&self, step: Option<u64>) -> bool {
        self.filter.is_none_or(|f| step == Some(f))
    }

    fn thread_name(&mut self, tid: u64) -> Result<(), ExportError> {
        if self.named_tids.insert(tid, ()).is_some() {
            return Ok(());
        }
        let name = match tid {
            OUTSIDE_SPANS_TID => "ops outside spans".to_string(),
            STEPS_TID => "steps".to_string(),
            t => format!("thread {t}"),
        };
        let sort = match tid {
            STEPS_TID => 0,
            OUTSIDE_SPANS_TID => 1_000_000,
            t => t.saturating_add(1),
        };
        self.out.begin();
        self.out.head("M", "thread_name", self.pid, tid);
        self.out.raw(",\"args\":{\"name\":");
        self.out.str(&name);
        self.out.raw("}}");
        self.out.end()?;
        self.out.begin();
        self.out.head("M", "thread_sort_index", self.pid, tid);
        self.out.raw(",\"args\":{\"sort_index\":");
        self.out.u64(sort);
        self.out.raw("}}");
        self.out.end()
    }

    /// The nester's callback: writes the interval, keeping the first error for later.
    fn on_interval(&mut self, nester: &Nester, iv: Interval<'_>) {
        if self.error.is_none()
            && let Err(e) = self.interval(nester, iv)
        {
            self.error = Some(e);
        }
    }

    fn interval(&mut self, nester: &Nester, iv: Interval<'_>) -> Result<(), ExportError> {
        match iv {
            Interval::Span {
                tid, frame, end, ..
            } => {
                if !self.keep(frame.step) {
                    return Ok(());
                }
                self.thread_name(tid)?;
                let o = &mut self.out;
                o.begin();
                o.head("X", nester.shown_name(frame.path), self.pid, tid);
                o.raw(",\"cat\":\"span,");
                o.raw(frame.kind.as_str());
                o.raw("\",\"ts\":");
                o.us(frame.start);
                o.raw(",\"dur\":");
                o.us(end - frame.start);
                let args = self.args;
                if args != ArgsMode::None {
                    o.raw(",\"args\":{\"kind\":\"");
                    o.raw(frame.kind.as_str());
                    o.raw("\"");
                    if let Some(e) = frame.exec_step {
                        o.raw(",\"exec_step\":\"");
                        o.raw(e.as_str());
                        o.raw("\"");
                    }
                    o.raw(",\"path\":");
                    let path = nester.path_display(frame.path);
                    o.str(&path);
                    if let Some(op) = &frame.own_op {
                        // An op that became this span: its fields on the span itself.
                        o.raw(",");
                        op_fields(o, op, args, None);
                    }
                    if args == ArgsMode::Full {
                        o.raw(",\"span_id\":");
                        o.u64(frame.id);
                        if let Some(s) = frame.step {
                            o.raw(",\"step\":");
                            o.u64(s);
                        }
                    }
                    o.raw("}");
                }
                o.raw("}");
                o.end()?;
                self.summary.spans += 1;
                if frame.own_op.is_some() {
                    self.summary.ops += 1;
                }
            }
            Interval::Op {
                tid,
                op,
                start,
                end,
                step,
                ..
            } => {
                if !self.keep(step) {
                    return Ok(());
                }
                self.thread_name(tid)?;
                let o = &mut self.out;
                o.begin();
                o.head("X", &op.name, self.pid, tid);
                o.raw(",\"cat\":\"op\",\"ts\":");
                o.us(start);
                o.raw(",\"dur\":");
                o.us(end - start);
                let args = self.args;
                let cut = op.dur != end - start || op.ts != start;
                if args != ArgsMode::None {
                    o.raw(",\"args\":{");
                    op_fields(o, op, args, step);
                    if cut {
                        // Kept in every mode but `none`: a cut op says so.
                        o.raw(",\"recorded_ts_ns\":");
                        o.u64(op.ts);
                        o.raw(",\"recorded_dur_ns\":");
                        o.u64(op.dur);
                    }
                    o.raw("}");
                }
                o.raw("}");
                o.end()?;
                self.summary.ops += 1;
            }
        }
        Ok(())
    }

    fn device(&mut self, name: &str) -> usize {
        if let Some(i) = self.last_device
            && self.devices.get(i).is_some_and(|d| d.name == name)
        {
            return i;
        }
        let i = if let Some(i) = self.device_index.get(name) {
            *i
        } else {
            let i = self.devices.len();
            let heads = MemoryCategory::ALL
                .iter()
                .map(|c| {
                    let mut head = b"{\"ph\":\"C\",\"name\":".to_vec();
                    json::push_str(&mut head, &format!("logical memory {name} {}", c.as_str()));
                    head.extend_from_slice(b",\"pid\":");
                    json::push_u64(&mut head, self.pid);
                    head.extend_from_slice(b",\"ts\":");
                    head
                })
                .collect();
            self.devices.push(DeviceLive {
                name: name.to_string(),
                heads,
                bytes: [0; MemoryCategory::ALL.len()],
                exact: [0; MemoryCategory::ALL.len()],
                peak_exact: 0,
                group_peak: None,
                shown: [0; MemoryCategory::ALL.len()],
                shown_max: [0; MemoryCategory::ALL.len()],
                window: Window::default(),
            });
            self.device_index.insert(name.to_string(), i);
            i
        };
        self.last_device = Some(i);
        i
    }

    /// Writes the pending memory counter samples (the categories that changed); first the
    /// moment in between that went above every total shown so far, if there was one.
    fn flush_counter(&mut self) -> Result<(), ExportError> {
        let Some((dev, ts)) = self.pending_counter.take() else {
            return Ok(());
        };
        let Some(d) = self.devices.get_mut(dev) else {
            return Ok(());
        };
        let now = d.bytes;
        if let Some(peak) = d.group_peak.take()
            && peak != now
        {
            self.write_counter(dev, ts, peak)?;
        }
        self.write_counter(dev, ts, now)
    }

    /// Notes the bytes of device `dev` after a memory event of its pending sample.
    fn note_pending(&mut self, dev: usize) {
        if let Some(d) = self.devices.get_mut(dev) {
            let now = total(&d.bytes);
            let above = d.group_peak.as_ref().map_or(d.peak_exact, |p| total(p));
            if now > above {
                d.group_peak = Some(d.bytes);
            }
        }
    }

    /// Writes the memory counter samples of device `dev` at `ts` that bring what a viewer
    /// shows to its bytes now.
    fn memory_counter(&mut self, dev: usize, ts: u64) -> Result<(), ExportError> {
        match self.devices.get(dev) {
            Some(d) => self.write_counter(dev, ts, d.bytes),
            None => Ok(()),
        }
    }

    /// Makes `values` the state of device `dev` from `ts` on, as the exact export shows it:
    /// at resolution 0 its samples are written at once ([`Chrome::write_state`]); otherwise
    /// the state joins its window, which is written when a state of another window comes
    /// ([`Chrome::flush_window`]). A state equal to the one before changes nothing.
    fn write_counter(
        &mut self,
        dev: usize,
        ts: u64,
        values: PerCategory,
    ) -> Result<(), ExportError> {
        let resolution = self.resolution;
        let Some(d) = self.devices.get_mut(dev) else {
            return Ok(());
        };
        if d.exact == values {
            return Ok(());
        }
        d.exact = values;
        d.peak_exact = d.peak_exact.max(total(&values));
        if resolution == 0 {
            return self.write_state(dev, ts, values);
        }
        let index = Window::index_of(ts, resolution);
        if d.window.is_other(index) {
            self.flush_window(dev)?;
        }
        if let Some(d) = self.devices.get_mut(dev) {
            d.window.push(index, ts, values);
        }
        Ok(())
    }

    /// Writes the states that device `dev`'s open window keeps (its peaks and its end, see
    /// [`crate::memory_window`]), each at its own time.
    fn flush_window(&mut self, dev: usize) -> Result<(), ExportError> {
        let Some(d) = self.devices.get_mut(dev) else {
            return Ok(());
        };
        let kept = d.window.take(&d.shown_max);
        for s in kept.states() {
            self.write_state(dev, s.ts, s.bytes)?;
        }
        Ok(())
    }

    /// Writes every device's open window (at a step boundary and at the end).
    fn flush_windows(&mut self) -> Result<(), ExportError> {
        for dev in 0..self.devices.len() {
            self.flush_window(dev)?;
        }
        Ok(())
    }

    /// Writes the samples of device `dev` at `ts` that make what a viewer shows `values`:
    /// one per category whose bytes differ from its last sample, on that category's own
    /// counter with one argument (`bytes`). A viewer holds a counter's value until its next
    /// sample, so a category that did not change needs none. One counter per category and
    /// not one with an argument per category: Catapult (chrome://tracing) fixes a counter's
    /// series from its first sample and reads a series missing from a later sample as 0, so
    /// a shared counter would need every category in every sample; Perfetto makes a track of
    /// every argument either way. The categories that went down are written first, so that
    /// no total shown between two of these samples is above both the one before and after.
    fn write_state(&mut self, dev: usize, ts: u64, values: PerCategory) -> Result<(), ExportError> {
        let Some(d) = self.devices.get_mut(dev) else {
            return Ok(());
        };
        let o = &mut self.out;
        for down in [true, false] {
            for ((shown, &v), head) in d.shown.iter_mut().zip(&values).zip(&d.heads) {
                if *shown == v || (v < *shown) != down {
                    continue;
                }
                *shown = v;
                o.begin();
                o.line.extend_from_slice(head);
                o.us(ts);
                o.raw(",\"args\":{\"bytes\":");
                o.u64(v);
                o.raw("}}");
                o.end()?;
                self.summary.memory_counters += 1;
            }
        }
        for (m, &v) in d.shown_max.iter_mut().zip(&values) {
            *m = (*m).max(v);
        }
        Ok(())
    }

    /// Writes a counter sample of one argument `key` (physical memory, user counters).
    fn simple_counter(
        &mut self,
        name: &str,
        key: &str,
        ts: u64,
        value: CounterValue,
    ) -> Result<(), ExportError> {
        let o = &mut self.out;
        o.begin();
        o.raw("{\"ph\":\"C\",\"name\":");
        o.str(name);
        o.raw(",\"pid\":");
        o.u64(self.pid);
        o.raw(",\"ts\":");
        o.us(ts);
        o.raw(",\"args\":{");
        o.str(key);
        o.raw(":");
        match value {
            CounterValue::Int(v) => o.u64(v),
            // Parsed from JSON numbers, so finite.
            CounterValue::Float(v) => json::push_f64(&mut o.line, v),
        }
        o.raw("}}");
        o.end()
    }

    fn instant(
        &mut self,
        name: &str,
        scope: &str,
        tid: u64,
        ts: u64,
        args: &[u8],
    ) -> Result<(), ExportError> {
        let o = &mut self.out;
        o.begin();
        o.head("i", name, self.pid, tid);
        o.raw(",\"s\":\"");
        o.raw(scope);
        o.raw("\",\"ts\":");
        o.us(ts);
        if !args.is_empty() {
            o.raw(",\"args\":");
            o.line.extend_from_slice(args);
        }
        o.raw("}");
        o.end()?;
        self.summary.instants += 1;
        Ok(())
    }

    /// Writes the instant and the bar of a step that ended, when it is a step by the rule
    /// (an empty first or last boundary is not) and the filter keeps it. The bar runs from
    /// the step's boundary to the next when that is the next index, else to the last time
    /// seen in it — steps the schedule did not record are left as a gap, as the analyses
    /// measure step time. Whole microseconds ([`step_bar_us`]), so bars never overlap in a
    /// viewer's arithmetic.
    fn close_step(&mut self, step: ClosedStep) -> Result<(), ExportError> {
        if !step.is_step || !self.keep(Some(step.index)) {
            return Ok(());
        }
        let index = step.index;
        self.summary.step_found = true;
        let mut args = Vec::with_capacity(24);
        let mut o = json::Object::new(&mut args);
        o.u64("step", index);
        o.finish();
        self.instant(&format!("step {index}"), "g", 0, step.start_ns, &args)?;
        let (mut ts, mut dur) = step_bar_us(step.start_ns, step.end_ns);
        if ts < self.steps_track_us {
            // A step recorded out of time order: keep the track a sequence of disjoint bars.
            let end_us = ts + dur;
            ts = self.steps_track_us;
            dur = end_us.saturating_sub(ts);
            self.summary.step_bars_clamped += 1;
        }
        self.steps_track_us = ts + dur;
        self.thread_name(STEPS_TID)?;
        let o = &mut self.out;
        o.begin();
        o.head("X", &format!("step {index}"), self.pid, STEPS_TID);
        o.raw(",\"cat\":\"step\",\"ts\":");
        o.u64(ts);
        o.raw(",\"dur\":");
        o.u64(dur);
        o.raw(",\"args\":{\"step\":");
        o.u64(index);
        o.raw("}}");
        o.end()
    }

    /// Handles the non-interval events (memory, steps, instants, counters).
    fn side_event(&mut self, event: &Event, nester: &Nester) -> Result<(), ExportError> {
        let step = self.steps.current();
        match event {
            Event::Memory(m) => {
                let dev = self.device(&m.device);
                // The pending sample keeps collecting while events are of its device and time.
                if self.pending_counter.is_some_and(|p| p != (dev, m.ts)) {
                    self.flush_counter()?;
                }
                let cat = m.category.index();
                let touched = match m.kind {
                    AllocKind::Alloc => {
                        if let Some((d, c, b)) = self.live.insert(m.storage, (dev, cat, m.bytes)) {
                            self.summary.memory.duplicate_allocs += 1;
                            if let Some(old) = self.devices.get_mut(d) {
                                old.bytes[c] = old.bytes[c].saturating_sub(b);
                            }
                            // The replaced storage was on another device: its counters now.
                            if d != dev && self.keep(step) {
                                self.memory_counter(d, m.ts)?;
                            }
                        }
                        if let Some(d) = self.devices.get_mut(dev) {
                            d.bytes[cat] = d.bytes[cat].saturating_add(m.bytes);
                        }
                        Some(dev)
                    }
                    AllocKind::Free => {
                        if let Some((d, c, b)) = self.live.remove(&m.storage) {
                            if b != m.bytes {
                                self.summary.memory.free_size_mismatches += 1;
                            }
                            if let Some(dl) = self.devices.get_mut(d) {
                                dl.bytes[c] = dl.bytes[c].saturating_sub(b);
                            }
                            Some(d)
                        } else {
                            self.summary.memory.frees_without_alloc += 1;
                            None
                        }
                    }
                };
                if let Some(d) = touched
                    && self.keep(step)
                {
                    if d == dev {
                        self.pending_counter = Some((d, m.ts));
                        self.note_pending(d);
                    } else {
                        self.memory_counter(d, m.ts)?;
                    }
                }
            }
            Event::DeviceMemory(d) => {
                if !self.keep(step) {
                    return Ok(());
                }
                for (what, v) in [("used", d.used), ("reserved", d.reserved), ("free", d.free)] {
                    if let Some(v) = v {
                        let name = format!("physical memory {what} {}", d.device);
                        self.simple_counter(&name, what, d.ts, CounterValue::Int(v))?;
                        self.summary.memory_counters += 1;
                    }
                }
            }
            Event::Counter(c) => {
                if !self.keep(step) {
                    return Ok(());
                }
                if c.value.is_finite() {
                    self.simple_counter(&c.name, "value", c.ts, CounterValue::Float(c.value))?;
                } else {
                    self.summary.non_finite_counters += 1;
                }
            }
            Event::Marker(m) => {
                if !self.keep(step) {
                    return Ok(());
                }
                match m.span.and_then(|s| nester.span_thread(s)) {
                    Some(tid) => {
                        self.thread_name(tid)?;
                        self.instant(&m.name, "t", tid, m.ts, b"")?;
                    }
                    None => self.instant(&m.name, "g", 0, m.ts, b"")?,
                }
            }
            Event::Gradient(g) => {
                if !self.keep(step) {
                    return Ok(());
                }
                let mut args = Vec::with_capacity(64 + g.param.len());
                let mut o = json::Object::new(&mut args);
                o.str("param", &g.param).str("state", g.state.as_str());
                if let Some(n) = g.norm.filter(|n| n.is_finite()) {
                    o.f64("l2_norm", n);
                }
                o.finish();
                let name = format!("gradient {}: {}", g.param, g.state.as_str());
                self.instant(&name, "p", 0, g.ts, &args)?;
            }
            Event::Step(s) => {
                self.flush_counter()?;
                self.flush_heap()?;
                if self.filter.is_some() && self.keep(Some(s.index)) && self.heap.seen {
                    // The tracked heap when the step begins.
                    self.heap.shown = None;
                    self.heap.pending = Some(s.ts);
                    self.flush_heap()?;
                }
                // A window ends at a step boundary: each step ends on its exact bytes.
                self.flush_windows()?;
                // The step's instant and bar are written when it ends, once it is known to
                // be a step.
                if self.filter.is_some() && self.keep(Some(s.index)) {
                    // The counters' state when the step begins.
                    for d in 0..self.devices.len() {
                        self.memory_counter(d, s.ts)?;
                    }
                }
            }
            Event::SpanStart(_) | Event::SpanEnd(_) | Event::Op(_) | Event::Tensor(_) => {}
            // Sampled stacks (schema version 2) are estimates, not timed events: the folded
            // export and `tracegraph hot` show them.
            Event::Frame(_)
            | Event::Stack(_)
            | Event::Samples(_)
            | Event::Sampler(_)
            | Event::Module(_)
            | Event::RawStack(_) => {}
            // The tracked heap (schema version 2) is shown by `tracegraph memory`.
            Event::HeapAlloc(a) => {
                self.heap_change(step, a.ts)?;
                match self.heap.live.entry(a.id) {
                    std::collections::hash_map::Entry::Occupied(_) => {
                        self.summary.heap.duplicate_allocs += 1;
                    }
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(a.bytes);
                        self.heap.bytes = self.heap.bytes.saturating_add(a.bytes);
                    }
                }
            }
            Event::HeapFree(f) => {
                self.heap_change(step, f.ts)?;
                match self.heap.live.remove(&f.id) {
                    Some(b) => self.heap.bytes = self.heap.bytes.saturating_sub(b),
                    None => self.summary.heap.frees_without_alloc += 1,
                }
            }
            // Counted, not tracked one by one (their frees are not seen): no live bytes.
            Event::HeapSmall(_) | Event::HeapAccount(_) => {}
        }
        Ok(())
    }
}

impl<W: Write> Chrome<W> {
    /// A heap event at `ts` in `step`: writes the sample of another time first, and notes
    /// that a sample at `ts` is due when the step is exported.
    fn heap_change(&mut self, step: Option<u64>, ts: u64) -> Result<(), ExportError> {
        if self.heap.pending.is_some_and(|p| p != ts) {
            self.flush_heap()?;
        }
        self.heap.seen = true;
        if self.keep(step) {
            self.heap.pending = Some(ts);
        }
        Ok(())
    }

    /// Writes the pending sample of the tracked heap, when its bytes differ from the last.
    fn flush_heap(&mut self) -> Result<(), ExportError> {
        let Some(ts) = self.heap.pending.take() else {
            return Ok(());
        };
        let v = self.heap.bytes;
        if self.heap.shown == Some(v) {
            return Ok(());
        }
        self.heap.shown = Some(v);
        self.simple_counter(HEAP_COUNTER, "bytes", ts, CounterValue::Int(v))?;
        self.summary.heap_counters += 1;
        Ok(())
    }
}

enum CounterValue {
    Int(u64),
    Float(f64),
}

/// An op's fields inside an event's `args` object (from `"shape"` on, no leading comma):
/// shape, dtype, device, category and FLOPs, and in [`ArgsMode::Full`] its bytes, tensor ids
/// and (when given) its step.
fn op_fields<W: Write>(o: &mut Out<W>, op: &OpEvent, args: ArgsMode, step: Option<u64>) {
    o.raw("\"shape\":[");
    for (i, d) in op.shape.iter().enumerate() {
        if i > 0 {
            o.raw(",");
        }
        o.u64(*d as u64);
    }
    o.raw("],\"dtype\":");
    o.str(&op.dtype);
    o.raw(",\"device\":");
    o.str(&op.device);
    if let Some(c) = op.category {
        o.raw(",\"category\":\"");
        o.raw(c.as_str());
        o.raw("\"");
    }
    if let Some(f) = op.flops {
        o.raw(",\"flops\":");
        o.u64(f);
    }
    if args == ArgsMode::Full {
        o.raw(",\"in_bytes\":");
        o.u64(op.in_bytes);
        o.raw(",\"out_bytes\":");
        o.u64(op.out_bytes);
        for (key, ids) in [("inputs", &op.inputs), ("outputs", &op.outputs)] {
            o.raw(",\"");
            o.raw(key);
            o.raw("\":[");
            for (i, id) in ids.iter().enumerate() {
                if i > 0 {
                    o.raw(",");
                }
                o.u64(*id);
            }
            o.raw("]");
        }
        if let Some(s) = step {
            o.raw(",\"step\":");
            o.u64(s);
        }
    }
}

/// Reads the rest of `reader` and writes it to `out` as Chrome Trace Event Format JSON;
/// returns what was written. Events are consumed one at a time and the output is written as
/// it is produced (wrap `out` in a `BufWriter`), so memory stays flat however long the trace.
/// Parsing runs on a second thread, a few thousand events ahead (trace-record's [`TraceReader::for_each_batched`]).
///
/// Errors: a read error ([`ExportError::Read`]), a write error ([`ExportError::Write`]), or
/// [`ExportError::StepNotFound`] when [`ChromeOptions::step`] names a step the trace does
/// not have (the output is then complete but holds no span or op).
///
/// ```
/// use trace_export::{ChromeOptions, write_chrome};
/// use trace_record::schema::{Phase, SpanKind};
/// use trace_record::{OpRecord, ReadOptions, Run, TraceReader, TraceSession};
///
/// // Record a span with one op in it, in memory.
/// let (session, sink) = TraceSession::in_memory(Run::new("doc", Phase::Infer, "cpu"));
/// {
///     let _fwd = session.span("forward", SpanKind::Function, None);
///     let start = session.now_ns();
///     session.record_op(&OpRecord {
///         name: "matmul", inputs: &[1, 2], outputs: &[3], shape: &[2, 4], dtype: "f32",
///         device: "cpu", start_ns: start, dur_ns: 1_000, in_bytes: 64, out_bytes: 32,
///         category: None, flops: None,
///     });
/// }
/// session.finish()?;
/// let trace = sink.bytes();
/// let mut reader = TraceReader::new(&trace[..], ReadOptions::default())?;
/// let mut json = Vec::new();
/// let summary = write_chrome(&mut reader, &mut json, &ChromeOptions::default())?;
/// assert_eq!(summary.ops, 1);
/// let parsed: serde_json::Value = serde_json::from_slice(&json)?;
/// assert!(parsed["traceEvents"].is_array());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_chrome<R, W>(
    reader: &mut TraceReader<R>,
    out: W,
    opts: &ChromeOptions,
) -> Result<ChromeSummary, ExportError>
where
    R: BufRead + Send,
    W: Write,
{
    write_chrome_outlined(reader, out, opts, &TraceOutline::default())
}

/// [`write_chrome`] with what a first pass over the same trace found ([`crate::outline`]):
/// span names and paths as every analysis shows them (`block#0` alone among its siblings is
/// `block`, `linear#0` beside `linear#1` keeps its index), and ops recorded outside every
/// span before the first root span drawn on that span's thread. [`write_chrome`] shows names
/// as recorded, and draws such early ops on the `ops outside spans` track.
///
/// ```
/// use trace_export::{ChromeOptions, outline, write_chrome_outlined};
/// use trace_record::{ReadOptions, TraceReader};
///
/// let trace = concat!(
///     r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"r","entrypoint":"e","phase":"infer","device":"cpu","timing":"host","start_unix_ns":0,"pid":1}}"#, "\n",
///     r#"{"type":"span_start","id":1,"name":"model#0","kind":"module","thread":3,"ts":1}"#, "\n",
///     r#"{"type":"span_end","id":1,"ts":6}"#, "\n",
/// );
/// let first = outline(&mut TraceReader::new(trace.as_bytes(), ReadOptions::default())?)?;
/// let mut reader = TraceReader::new(trace.as_bytes(), ReadOptions::default())?;
/// let mut json = Vec::new();
/// write_chrome_outlined(&mut reader, &mut json, &ChromeOptions::default(), &first)?;
/// let text = String::from_utf8(json)?;
/// assert!(text.contains(r#""name":"model""#) && !text.contains("model#0"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_chrome_outlined<R, W>(
    reader: &mut TraceReader<R>,
    out: W,
    opts: &ChromeOptions,
    outline: &TraceOutline,
) -> Result<ChromeSummary, ExportError>
where
    R: BufRead + Send,
    W: Write,
{
    let header = reader.header().clone();
    let header = &header;
    let pid = u64::from(header.run.pid);
    let mut c = Chrome {
        out: Out {
            w: out,
            line: Vec::with_capacity(512),
            first: true,
            written: 0,
        },
        pid,
        filter: opts.step,
        named_tids: FastMap::default(),
        devices: Vec::new(),
        device_index: FastMap::default(),
        last_device: None,
        pending_counter: None,
        live: FastMap::default(),
        summary: ChromeSummary {
            step_found: opts.step.is_none(),
            ..ChromeSummary::default()
        },
        steps: StepTracker::new(),
        steps_track_us: 0,
        args: opts.args,
        resolution: opts.memory_resolution_ns,
        heap: HeapLive::default(),
        error: None,
    };
    c.out
        .w
        .write_all(b"{\"traceEvents\":[\n")
        .map_err(ExportError::Write)?;
    let mut process = format!("{} ({})", header.run.entrypoint, header.run.run_id);
    if let Some(rank) = header.run.rank {
        process.push_str(&format!(" rank {rank}"));
    }
    c.out.begin();
    c.out.head("M", "process_name", pid, 0);
    c.out.raw(",\"args\":{\"name\":");
    c.out.str(&process);
    c.out.raw("}}");
    c.out.end()?;

    let mut nester = Nester::outlined(outline);
    reader.for_each_batched(|line| {
        let event = line.event;
        if let Some(ended) = c.steps.event(&event) {
            c.close_step(ended)?;
        }
        match event {
            Event::SpanStart(_) | Event::SpanEnd(_) | Event::Op(_) => {
                nester.push(event, &mut |n: &Nester, iv: Interval<'_>| {
                    c.on_interval(n, iv);
                });
            }
            Event::Tensor(_) => {}
            Event::Step(_) => {
                c.side_event(&event, &nester)?;
                nester.push(event, &mut |n: &Nester, iv: Interval<'_>| {
                    c.on_interval(n, iv);
                });
            }
            other => c.side_event(&other, &nester)?,
        }
        match c.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    })?;
    nester.finish(&mut |n: &Nester, iv: Interval<'_>| c.on_interval(n, iv));
    if let Some(e) = c.error.take() {
        return Err(e);
    }
    c.flush_counter()?;
    c.flush_windows()?;
    c.flush_heap()?;
    if let Some(last) = c.steps.finish() {
        c.close_step(last)?;
    }
    c.summary.adjustments = nester.adjustments();
    c.summary.events_written = c.out.written;
    let summary = c.summary;
    let mut tail = Vec::new();
    tail.extend_from_slice(b"\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":");
    let other = OtherData {
        generator: "tracegraph",
        schema: &header.schema,
        schema_version: header.version,
        run_id: &header.run.run_id,
        entrypoint: &header.run.entrypoint,
        device: &header.run.device,
        timing: match header.run.timing {
            trace_record::schema::TimingMode::Host => "host",
            trace_record::schema::TimingMode::DeviceSynchronized => "device_synchronized",
        },
        start_unix_ns: header.run.start_unix_ns,
        memory_bytes: "logical (shape x dtype size), not allocator or physical bytes",
        step: opts.step,
        incomplete: reader.is_incomplete(),
        partial_last_line: reader.partial_line(),
        summary: &summary,
    };
    serde_json::to_writer(&mut tail, &other).map_err(|e| ExportError::Write(e.into()))?;
    tail.extend_from_slice(b"}\n");
    c.out.w.write_all(&tail).map_err(ExportError::Write)?;
    c.out.w.flush().map_err(ExportError::Write)?;
    if let Some(step) = opts.step
        && !summary.step_found
    {
        return Err(ExportError::StepNotFound(step));
    }
    Ok(summary)
}

#[derive(Serialize)]
struct OtherData<'a> {
    generator: &'a str,
    schema: &'a str,
    schema_version: u32,
    run_id: &'a str,
    entrypoint: &'a str,
    device: &'a str,
    timing: &'a str,
    start_unix_ns: u64,
    memory_bytes: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<u64>,
    incomplete: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    partial_last_line: Option<u64>,
    summary: &'a ChromeSummary,
}
