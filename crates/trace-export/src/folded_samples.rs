//! Folded sampled stacks (`span;span;frame;frame samples` lines).
//!
//! A CPU sampler's call stacks under the span they were taken in, weighted by sample count.
//!
//! A trace recorded with a CPU sampler (schema version 2) says, per recorded step, how many
//! samples landed in each interned call stack, and which span the program was in (the
//! innermost phase or module span the capture knew of). [`folded_samples`] writes one line
//! per distinct *span path + call stack*, weighted by the **number of samples**:
//!
//! ```text
//! backward;main;train::step;candle_core::backprop::…::backward;gemm::gemm 12
//! forward;model;layers.0;main;train::step;…;candle_core::tensor::Tensor::matmul 3
//! ```
//!
//! - The span part is the span's path as the span folded stacks ([`crate::folded_stacks`])
//!   name it (the same nesting, the same frame names), so both flame graphs line up.
//! - The call stack follows, outermost (the thread's entry) first, innermost last, as the
//!   sampler recorded it (inlined functions are frames of their own). An unqualified function
//!   name (line-table-only debug information names inlined functions without their path) is
//!   shown with its source file, `drop (candle-core-0.11.1/src/utils.rs)`, as `tracegraph hot`
//!   shows it.
//! - A sample whose span is absent (or not in the trace: a span opened outside the recorded
//!   steps) is placed under `[backward]` (its phase in brackets) or `[no span]`, and counted
//!   in [`FoldedSamples::without_span`]; a sample naming a stack that no `stack` line defines
//!   takes its frames from the caller when it symbolized the stack's `raw_stack` line (a run
//!   killed before its sampler stopped: [`SampleClasses::raw_frames`]), else gets one
//!   `[unknown stack]` frame, counted in [`FoldedSamples::unknown_stacks`]. No sample of a
//!   step is dropped: the weights sum to [`FoldedSamples::total_samples`].
//! - Steps are the trace's steps by trace-record's [`StepTracker`], as every command counts
//!   them: samples (and `sampler` lines) of a recorded step that is not a step — the empty
//!   boundary a loop's last `step()` opens, in which `finish()` ran — are left out and
//!   counted in [`FoldedSamples::outside_steps`].
//!
//! **Waiting and the profiler's own work, apart.** [`folded_samples_classified`] takes the
//! classes of the stacks from the caller ([`SampleClasses`]: the analyses' rules, which this
//! crate does not own; `tracegraph export` passes the ones `tracegraph hot` counts by) and
//! ends every stack of a thread waiting with one `[waiting]` frame and every stack of the
//! profiler's own work with one `[profiler]` frame ([`SampleClass::frame`]), so a flame
//! graph's self time lands on them rather than on a spin loop or a `futex_wake`, and the
//! weights of the lines ending in each sum to [`FoldedSamples::waiting`] and
//! [`FoldedSamples::profiler`]. [`folded_samples`] marks nothing (every stack busy).
//!
//! **Weights are sample counts, never nanoseconds**: the span folded stacks weigh measured
//! self time in ns, these weigh samples, so the two are separate outputs. One sample stands
//! for about [`SamplerAccount::ns_per_sample`] of the sampled threads' CPU time (an estimate).
//!
//! Memory held: the span nester's state, one path id per span (samples are written after
//! their step, when its spans are closed), the interned frames and stacks, one entry per
//! distinct (step, span, phase, stack) and one per `sampler` line. Lines are capped in depth
//! (see [`MAX_SAMPLED_FRAMES`]), so the output is linear in the input.

use std::io::{BufRead, Write};

use trace_record::schema::{Event, ExecStep, SamplerEvent};
use trace_record::{ClosedStep, SamplerAccount, StepTracker, TraceReader};

use crate::ExportError;
use crate::FastMap;
use crate::folded::{DEEPER_FRAMES, MAX_FOLDED_FRAMES, frame_name};
use crate::nest::{Adjustments, Interval, Nester};

/// Call stacks deeper than this many frames keep their outermost `MAX_SAMPLED_FRAMES - 1`
/// frames and one `[deeper frames]` frame (the span part is capped at [`MAX_FOLDED_FRAMES`]
/// as in the span folded stacks).
pub const MAX_SAMPLED_FRAMES: usize = 1024;

/// The frame standing for a stack id that no `stack` line defines.
pub const UNKNOWN_STACK: &str = "[unknown stack]";

/// The first frame of samples with neither a known span nor a phase.
pub const NO_SPAN: &str = "[no span]";

/// Aggregated folded sampled stacks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FoldedSamples {
    /// `(stack, samples)` sorted by stack; frames joined by `;`.
    pub lines: Vec<(String, u64)>,
    /// Sum of every line's weight: the samples of the exported steps.
    pub total_samples: u64,
    /// Samples with no span, or a span the trace does not have (under `[phase]` or
    /// `[no span]`).
    pub without_span: u64,
    /// Samples naming a stack that no `stack` line defines and the caller did not resolve
    /// either (one `[unknown stack]` frame).
    pub unknown_stacks: u64,
    /// Lines whose span path or call stack was cut (a `[deeper frames]` frame).
    pub truncated: u64,
    /// Samples of a recorded step that is not a step of the trace (trace-record's
    /// [`StepTracker`]: the empty boundary a loop's last `step()` opens, what `finish()` ran
    /// in; a setup-only step 0): in no line, as their `sampler` lines are in no total.
    pub outside_steps: u64,
    /// The sampler's account over the exported steps.
    pub sampler: SamplerAccount,
    /// What the span nesting had to adjust (as in the span folded stacks).
    pub adjustments: Adjustments,
    /// Whether the step asked for was found (true when no step was asked for).
    pub step_found: bool,
    /// Of `total_samples`, samples of stacks classified waiting (lines ending in
    /// `[waiting]`).
    pub waiting: u64,
    /// Of `total_samples`, samples of stacks classified the profiler's own work (lines ending
    /// in `[profiler]`).
    pub profiler: u64,
}

/// What a sampled stack's samples are, as [`SampleClasses`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SampleClass {
    /// The program working: no frame added.
    #[default]
    Busy,
    /// A thread waiting (a pool spinning or parked): a `[waiting]` frame on top.
    Waiting,
    /// The profiler's own work on a program thread: a `[profiler]` frame on top.
    Profiler,
}

impl SampleClass {
    /// The frame put on top of a stack of this class: `[waiting]`, `[profiler]`, none for
    /// busy.
    pub fn frame(self) -> Option<&'static str> {
        match self {
            SampleClass::Busy => None,
            SampleClass::Waiting => Some("[waiting]"),
            SampleClass::Profiler => Some("[profiler]"),
        }
    }
}

/// The classes of a trace's sampled stacks, learnt from its `frame` and `stack` lines as they
/// are read (the caller's rules: the analyses own them); and, optionally, the frames of stacks
/// that only `raw_stack` lines describe (a run killed before its sampler stopped), which the
/// caller may symbolize from the binaries on disk.
pub trait SampleClasses {
    /// Sees every `frame`, `stack`, `module`, `raw_stack` and `samples` event, in file order.
    fn add(&mut self, event: &Event);
    /// Called once after the last line, before [`class`](Self::class) and
    /// [`raw_frames`](Self::raw_frames) are asked (where read-time symbolization happens).
    /// Does nothing by default.
    fn finish(&mut self) {}
    /// The class of the stack of wire id `stack` (busy when unknown), asked after every line
    /// was read.
    fn class(&self, stack: u64) -> SampleClass;
    /// The frames of a stack that no `stack` line defines, outermost first, each as
    /// `(function, source file)` passed to `each`; false (and nothing passed) when the caller
    /// does not know them either: the stack is then one `[unknown stack]` frame. False by
    /// default.
    fn raw_frames(&self, stack: u64, each: &mut dyn FnMut(&str, Option<&str>)) -> bool {
        let _ = (stack, each);
        false
    }
}

/// Every stack busy: what [`folded_samples`] folds with.
struct AllBusy;

impl SampleClasses for AllBusy {
    fn add(&mut self, _: &Event) {}
    fn class(&self, _: u64) -> SampleClass {
        SampleClass::Busy
    }
}

impl FoldedSamples {
    /// Writes one `stack samples` line per stack.
    pub fn write<W: Write>(&self, out: W) -> Result<(), ExportError> {
        crate::folded::write_lines(&self.lines, out)
    }
}

/// Whether a function name carries its path (`a::b`, `<T as U>::f`) outside generic
/// arguments (`record<a::b>` does not).
fn is_qualified(func: &str) -> bool {
    let b = func.as_bytes();
    if b.first() == Some(&b'<') {
        return true;
    }
    let mut depth = 0usize;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'<' => depth += 1,
            b'>' => depth = depth.saturating_sub(1),
            b':' if depth == 0 && b.get(i + 1) == Some(&b':') => return true,
            _ => {}
        }
    }
    false
}

/// A sampled frame as a folded frame: the function, with its source file when the name
/// is unqualified; separators replaced.
fn sampled_frame_name(func: &str, file: Option<&str>) -> String {
    match file {
        Some(file) if !is_qualified(func) => frame_name(&format!("{func} ({file})")),
        _ => frame_name(func),
    }
}

/// What a sample line is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SampleKey {
    span: Option<u64>,
    phase: Option<ExecStep>,
    stack: u64,
}

/// Folds the sampled stacks of `events` under the span each sample was taken in, weighted
/// by sample count (see the module documentation). With `step`, only samples (and
/// `sampler` lines) of that recorded step count; it is found when it is a step of the trace
/// as trace-record's [`StepTracker`] numbers them (0: before the first `step` event; the
/// empty boundary a loop's last `step()` opens is not a step).
///
/// ```
/// use trace_export::folded_samples;
/// use trace_record::schema::{Event, ExecStep, FrameEvent, Phase, SamplerEvent, SamplesEvent, SpanKind, StackEvent};
/// use trace_record::{ReadOptions, Run, TraceReader, TraceSession};
///
/// let (session, sink) = TraceSession::in_memory(Run::new("doc", Phase::Train, "cpu"));
/// let span = session.span("backward", SpanKind::Function, Some(ExecStep::Backward)).id().map(|s| s.0);
/// let frame = |id, func: &str| Event::Frame(FrameEvent { id, func: func.into(), file: None, inlined: false });
/// session.record_sampled(&[
///     frame(1, "main"),
///     frame(2, "gemm::gemm"),
///     Event::Stack(StackEvent { id: 1, frames: vec![1, 2] }),
///     Event::Samples(SamplesEvent { step: 0, thread: 7, stack: 1, n: 3, phase: Some(ExecStep::Backward), span }),
///     Event::Sampler(SamplerEvent { step: 0, hz: 1000, taken: 3, lost: 0, cpu_ns: Some(3_000_000), sampler_cpu_ns: None, ts: 0, dur: 4_000_000, source: None }),
/// ]);
/// session.finish()?;
/// let trace = sink.bytes();
/// let mut reader = TraceReader::new(&trace[..], ReadOptions::default())?;
/// let folded = folded_samples(&mut reader, None)?;
/// assert_eq!(folded.lines, [("backward;main;gemm::gemm".to_string(), 3)]);
/// assert_eq!(folded.sampler.ns_per_sample(), Some(1_000_000.0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn folded_samples<R: BufRead + Send>(
    reader: &mut TraceReader<R>,
    step: Option<u64>,
) -> Result<FoldedSamples, ExportError> {
    folded_samples_classified(reader, step, &mut AllBusy)
}

/// [`folded_samples`] with every stack of a thread waiting ending in a `[waiting]` frame and
/// every stack of the profiler's own work in a `[profiler]` frame, as `classes` classifies
/// them (see the module documentation); their weights are also summed in
/// [`FoldedSamples::waiting`] and [`FoldedSamples::profiler`].
///
/// ```
/// use trace_export::{SampleClass, SampleClasses, folded_samples_classified};
/// use trace_record::schema::{Event, FrameEvent, Phase, SamplesEvent, SpanKind, StackEvent};
/// use trace_record::{ReadOptions, Run, TraceReader, TraceSession};
///
/// /// Stack 2 waits.
/// struct Two;
/// impl SampleClasses for Two {
///     fn add(&mut self, _: &Event) {}
///     fn class(&self, stack: u64) -> SampleClass {
///         if stack == 2 { SampleClass::Waiting } else { SampleClass::Busy }
///     }
/// }
/// let (session, sink) = TraceSession::in_memory(Run::new("doc", Phase::Infer, "cpu"));
/// let span = session.span("decode", SpanKind::Function, None).id().map(|s| s.0);
/// let frame = |id, func: &str| Event::Frame(FrameEvent { id, func: func.into(), file: None, inlined: false });
/// let samples = |stack, n| Event::Samples(SamplesEvent { step: 0, thread: 7, stack, n, phase: None, span });
/// session.record_sampled(&[
///     frame(1, "main"),
///     frame(2, "core::hint::spin_loop"),
///     Event::Stack(StackEvent { id: 1, frames: vec![1] }),
///     Event::Stack(StackEvent { id: 2, frames: vec![1, 2] }),
///     samples(1, 3),
///     samples(2, 2),
/// ]);
/// session.finish()?;
/// let trace = sink.bytes();
/// let mut reader = TraceReader::new(&trace[..], ReadOptions::default())?;
/// let folded = folded_samples_classified(&mut reader, None, &mut Two)?;
/// assert_eq!(folded.lines, [
///     ("decode;main".to_string(), 3),
///     ("decode;main;core::hint::spin_loop;[waiting]".to_string(), 2),
/// ]);
/// assert_eq!((folded.waiting, folded.profiler), (2, 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn folded_samples_classified<R: BufRead + Send, C: SampleClasses + ?Sized>(
    reader: &mut TraceReader<R>,
    step: Option<u64>,
    classes: &mut C,
) -> Result<FoldedSamples, ExportError> {
    let mut nester = Nester::with_clip_depth(MAX_FOLDED_FRAMES - 1);
    // Span id → interned path, recorded when the span closes.
    let mut span_paths: FastMap<u64, u32> = FastMap::default();
    let mut frames: FastMap<u64, String> = FastMap::default();
    let mut stacks: FastMap<u64, Vec<u64>> = FastMap::default();
    // Samples and `sampler` lines by recorded step: whether a step is one is known when it
    // ends, and the last one's only at the end of the trace.
    let mut counts: FastMap<(u64, SampleKey), u64> = FastMap::default();
    let mut accounts: Vec<SamplerEvent> = Vec::new();
    let mut step_found = step.is_none();
    let mut steps = StepTracker::new();
    let mut real: FastMap<u64, ()> = FastMap::default();
    let mut found = |ended: Option<ClosedStep>| {
        if let Some(e) = ended.filter(|e| e.is_step) {
            real.insert(e.index, ());
            if step == Some(e.index) {
                step_found = true;
            }
        }
    };
    let keep = |s: u64| step.is_none_or(|f| s == f);
    let mut on = |_: &Nester, iv: Interval<'_>| {
        if let Interval::Span { frame, .. } = iv {
            span_paths.entry(frame.id).or_insert(frame.path);
        }
    };
    reader.for_each_batched(|line| {
        let event = line.event;
        found(steps.event(&event));
        match &event {
            // Defined once; a redefinition is a validation issue and ignored here.
            Event::Frame(f) => {
                classes.add(&event);
                frames
                    .entry(f.id)
                    .or_insert_with(|| sampled_frame_name(&f.func, f.file.as_deref()));
            }
            Event::Stack(s) => {
                classes.add(&event);
                stacks.entry(s.id).or_insert_with(|| s.frames.clone());
            }
            Event::Module(_) | Event::RawStack(_) => classes.add(&event),
            Event::Samples(s) if keep(s.step) => {
                classes.add(&event);
                let key = SampleKey {
                    span: s.span,
                    phase: s.phase,
                    stack: s.stack,
                };
                let n = counts.entry((s.step, key)).or_default();
                *n = n.saturating_add(s.n);
            }
            Event::Sampler(s) if keep(s.step) => accounts.push(s.clone()),
            _ => {}
        }
        nester.push(event, &mut on);
        Ok::<(), ExportError>(())
    })?;
    found(steps.finish());
    classes.finish();
    nester.finish(&mut on);
    // The span part is named as the span folded stacks name it (the analyses' names).
    nester.set_names(nester.span_names());
    let sampler = SamplerAccount::over(accounts.iter().filter(|s| real.contains_key(&s.step)));
    let mut total = 0u64;
    let mut outside_steps = 0u64;
    let mut by_key: FastMap<SampleKey, u64> = FastMap::default();
    for ((at, key), n) in counts {
        if real.contains_key(&at) {
            let w = by_key.entry(key).or_default();
            *w = w.saturating_add(n);
            total = total.saturating_add(n);
        } else {
            outside_steps = outside_steps.saturating_add(n);
        }
    }
    let counts = by_key;

    let mut without_span = 0u64;
    let mut unknown_stacks = 0u64;
    let mut truncated = 0u64;
    let (mut waiting, mut profiler) = (0u64, 0u64);
    let mut lines: Vec<(String, u64)> = Vec::with_capacity(counts.len());
    for (key, n) in counts {
        let mut parts: Vec<String> = Vec::new();
        let mut cut = false;
        match key.span.and_then(|id| span_paths.get(&id).copied()) {
            Some(path) if nester.depth(path) <= MAX_FOLDED_FRAMES => {
                parts.extend(nester.path_names(path).into_iter().map(frame_name));
            }
            Some(path) => {
                parts.extend(
                    nester
                        .path_names(nester.clip(path))
                        .into_iter()
                        .map(frame_name),
                );
                parts.push(DEEPER_FRAMES.to_string());
                cut = true;
            }
            None => {
                without_span = without_span.saturating_add(n);
                parts.push(match key.phase {
                    Some(p) => format!("[{}]", p.as_str()),
                    None => NO_SPAN.to_string(),
                });
            }
        }
        if let Some(ids) = stacks.get(&key.stack) {
            // Undefined frames are a validation issue; they are left out here.
            let known: Vec<&String> = ids.iter().filter_map(|id| frames.get(id)).collect();
            if known.len() > MAX_SAMPLED_FRAMES {
                parts.extend(known[..MAX_SAMPLED_FRAMES - 1].iter().map(|s| (*s).clone()));
                parts.push(DEEPER_FRAMES.to_string());
                cut = true;
            } else {
                parts.extend(known.into_iter().cloned());
            }
        } else {
            // Only raw (read-time symbolization), else unknown.
            let mut raw: Vec<String> = Vec::new();
            let known = classes.raw_frames(key.stack, &mut |func, file| {
                raw.push(sampled_frame_name(func, file));
            });
            if known {
                if raw.len() > MAX_SAMPLED_FRAMES {
                    raw.truncate(MAX_SAMPLED_FRAMES - 1);
                    raw.push(DEEPER_FRAMES.to_string());
                    cut = true;
                }
                parts.extend(raw);
            } else {
                unknown_stacks = unknown_stacks.saturating_add(n);
                parts.push(UNKNOWN_STACK.to_string());
            }
        }
        if cut {
            truncated += 1;
        }
        let class = classes.class(key.stack);
        if let Some(mark) = class.frame() {
            parts.push(mark.to_string());
            let sum = if class == SampleClass::Waiting {
                &mut waiting
            } else {
                &mut profiler
            };
            *sum = sum.saturating_add(n);
        }
        if n > 0 {
            lines.push((parts.join(";"), n));
        }
    }
    lines.sort_unstable();
    // Distinct keys can print the same (two phases without a span path, renamed frames).
    lines.dedup_by(|later, earlier| {
        if later.0 == earlier.0 {
            earlier.1 = earlier.1.saturating_add(later.1);
            true
        } else {
            false
        }
    });
    Ok(FoldedSamples {
        lines,
        total_samples: total,
        without_span,
        unknown_stacks,
        truncated,
        outside_steps,
        sampler,
        adjustments: nester.adjustments(),
        step_found,
        waiting,
        profiler,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace_record::schema::{Phase, SamplesEvent, SpanKind, StackEvent};
    use trace_record::{ReadOptions, Run, TraceSession};

    /// `n` samples of `stack` in step 0 on thread 1, in `span`.
    fn samples_in(span: Option<u64>, stack: u64, n: u64) -> Event {
        Event::Samples(SamplesEvent {
            step: 0,
            thread: 1,
            stack,
            n,
            phase: None,
            span,
        })
    }

    /// Stacks classified by their innermost frame's name, learnt from the frame and stack
    /// lines as read: `wait` waits, `trace_` is the profiler's.
    #[derive(Default)]
    struct ByInnermost {
        frames: FastMap<u64, String>,
        stacks: FastMap<u64, SampleClass>,
    }

    impl SampleClasses for ByInnermost {
        fn add(&mut self, event: &Event) {
            match event {
                Event::Frame(f) => {
                    self.frames.insert(f.id, f.func.clone());
                }
                Event::Stack(s) => {
                    let inner = s.frames.last().and_then(|f| self.frames.get(f));
                    let class = match inner {
                        Some(f) if f.contains("wait") => SampleClass::Waiting,
                        Some(f) if f.starts_with("trace_") => SampleClass::Profiler,
                        _ => SampleClass::Busy,
                    };
                    self.stacks.insert(s.id, class);
                }
                _ => {}
            }
        }
        fn class(&self, stack: u64) -> SampleClass {
            self.stacks.get(&stack).copied().unwrap_or_default()
        }
    }

    #[test]
    fn waiting_and_the_profilers_stacks_end_in_a_frame_of_their_own() {
        let (session, sink) = TraceSession::in_memory(Run::new("marks", Phase::Infer, "cpu"));
        let span = session
            .span("decode", SpanKind::Function, None)
            .id()
            .map(|s| s.0);
        let frame = testkit::frame_event;
        let samples = |stack, n| samples_in(span, stack, n);
        session.record_sampled(&[
            frame(1, "main"),
            frame(2, "gemm::gemm"),
            frame(3, "futex_wait"),
            frame(4, "trace_sampler::advance"),
            Event::Stack(StackEvent {
                id: 1,
                frames: vec![1, 2],
            }),
            Event::Stack(StackEvent {
                id: 2,
                frames: vec![1, 3],
            }),
            Event::Stack(StackEvent {
                id: 3,
                frames: vec![1, 4],
            }),
            samples(1, 5),
            samples(2, 3),
            samples(3, 2),
            // A stack no line defines: busy, one `[unknown stack]` frame.
            samples(9, 1),
        ]);
        session.finish().unwrap();
        let bytes = sink.bytes();
        let fold = |classes: &mut dyn SampleClasses| {
            let mut reader = TraceReader::new(&bytes[..], ReadOptions::default()).unwrap();
            folded_samples_classified(&mut reader, None, classes).unwrap()
        };
        let marked = fold(&mut ByInnermost::default());
        assert_eq!(
            marked.lines,
            [
                ("decode;[unknown stack]".to_string(), 1),
                ("decode;main;futex_wait;[waiting]".to_string(), 3),
                ("decode;main;gemm::gemm".to_string(), 5),
                (
                    "decode;main;trace_sampler::advance;[profiler]".to_string(),
                    2
                ),
            ]
        );
        assert_eq!(
            (marked.total_samples, marked.waiting, marked.profiler),
            (11, 3, 2)
        );
        // The weights of the lines ending in each mark sum to its total.
        let ending = |mark: &str| -> u64 {
            marked
                .lines
                .iter()
                .filter(|(l, _)| l.ends_with(mark))
                .map(|(_, n)| n)
                .sum()
        };
        assert_eq!(
            (ending(";[waiting]"), ending(";[profiler]")),
            (marked.waiting, marked.profiler)
        );
        // Unclassified: the same lines without marks.
        let plain = fold(&mut AllBusy);
        assert_eq!((plain.waiting, plain.profiler), (0, 0));
        assert!(
            plain
                .lines
                .iter()
                .all(|(l, _)| !l.contains("[waiting]") && !l.contains("[profiler]"))
        );
        assert_eq!(plain.total_samples, marked.total_samples);
    }

    /// Knows stack 9 (which no `stack` line defines) from its raw addresses, as a reader
    /// that symbolizes at read time does, once every line was read.
    #[derive(Default)]
    struct ResolvesNine {
        finished: bool,
    }

    impl SampleClasses for ResolvesNine {
        fn add(&mut self, _: &Event) {
            assert!(!self.finished, "every line is seen before finish");
        }
        fn finish(&mut self) {
            self.finished = true;
        }
        fn class(&self, stack: u64) -> SampleClass {
            assert!(self.finished);
            if stack == 9 {
                SampleClass::Waiting
            } else {
                SampleClass::Busy
            }
        }
        fn raw_frames(&self, stack: u64, each: &mut dyn FnMut(&str, Option<&str>)) -> bool {
            assert!(self.finished);
            if stack != 9 {
                return false;
            }
            each("main", None);
            each("park", Some("std/src/thread/mod.rs"));
            true
        }
    }

    #[test]
    fn stacks_only_the_caller_resolved_take_its_frames() {
        let (session, sink) = TraceSession::in_memory(Run::new("raw", Phase::Infer, "cpu"));
        // Work in step 0 (a span), so that it is a step of the trace.
        drop(session.span("decode", SpanKind::Function, None));
        let samples = |stack, n| samples_in(None, stack, n);
        session.record_sampled(&[samples(9, 4), samples(8, 1)]);
        session.finish().unwrap();
        let bytes = sink.bytes();
        let mut reader = TraceReader::new(&bytes[..], ReadOptions::default()).unwrap();
        let f = folded_samples_classified(&mut reader, None, &mut ResolvesNine::default()).unwrap();
        // Stack 9 by the caller's frames (an unqualified function with its file, as
        // defined frames are shown), marked as it classifies it; stack 8 stays unknown.
        assert_eq!(
            f.lines,
            [
                ("[no span];[unknown stack]".to_string(), 1),
                (
                    "[no span];main;park (std/src/thread/mod.rs);[waiting]".to_string(),
                    4
                ),
            ]
        );
        assert_eq!((f.total_samples, f.unknown_stacks, f.waiting), (5, 1, 4));
    }
}
