//! Sampled stacks of real models checked against the spans they record (shared test code).
//!
//! A model's functions open its `tracing` spans in their first line and leave them at their
//! end, so the functions on a sample's stack say which spans were open when it was taken: the
//! innermost of them is the span the sample must name. A test gives the table from function
//! to span ([`SpanTable`]), runs the model with the sampler on and hands the trace to
//! [`attribute`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use trace_candle::Capture;
use trace_record::schema::Event;
use trace_record::{ParsedTrace, Run, TraceSession};

/// Which model function opens which span: a frame's function name containing the first text
/// (followed by nothing or by `::`, so `ops::softmax` is not `ops::softmax_last_dim`) opens
/// the span named by the second for as long as it runs.
pub type SpanTable = &'static [(&'static str, &'static str)];

/// The operating system's id of the calling thread (what `samples` lines name threads by),
/// from the `/proc/thread-self` link (`<pid>/task/<tid>`).
pub fn gettid() -> u64 {
    let link = std::fs::read_link("/proc/thread-self").unwrap();
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// A capture writing into memory.
pub fn new_capture(run: Run) -> (Capture, trace_record::MemorySink) {
    let (session, sink) = TraceSession::in_memory(run);
    (Capture::new(Arc::new(session)), sink)
}

/// The trace written so far, parsed and validated.
pub fn read_valid(sink: &trace_record::MemorySink) -> ParsedTrace {
    let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "{issues:?}");
    trace
}

/// CPU time the calling thread has run, from `/proc/thread-self/schedstat` (its first field,
/// in ns).
pub fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    let ns = stat.split_whitespace().next().unwrap().parse().unwrap();
    Duration::from_nanos(ns)
}

/// Runs `work` until the calling thread has run at least `cpu` more CPU time (on a loaded
/// machine wall time would give it less, and the sampler's own account of the samples lags
/// behind), at least twice. Returns the rounds. Bounded by CPU time, not wall time: a busy
/// machine makes it take longer, never do less.
pub fn run_for_cpu(cpu: Duration, mut work: impl FnMut()) -> usize {
    let cpu0 = thread_cpu();
    let mut rounds = 0;
    while thread_cpu().checked_sub(cpu0).unwrap() < cpu || rounds < 2 {
        work();
        rounds += 1;
    }
    rounds
}

/// Runs `work` as [`run_for_cpu`] does, and on until the sampler has taken at least
/// `samples` samples too (a loaded machine gives fewer per CPU second than requested, and a
/// test that judges shares needs enough of them), giving up after [`MAX_CPU`] of the
/// thread's CPU time (a sampler that stopped sampling; far more than any machine needs).
/// Returns the rounds.
pub fn run_for_samples(
    capture: &Capture,
    cpu: Duration,
    samples: u64,
    mut work: impl FnMut(),
) -> usize {
    let cpu0 = thread_cpu();
    let mut rounds = run_for_cpu(cpu, &mut work);
    let enough = || capture.sampler_stats().is_some_and(|s| s.taken >= samples);
    while !enough() && thread_cpu().checked_sub(cpu0).unwrap() < MAX_CPU {
        work();
        rounds += 1;
    }
    rounds
}

/// The most CPU time [`run_for_samples`] spends waiting for its samples.
pub const MAX_CPU: Duration = Duration::from_mins(5);

/// The trace's sampled op table, as `tracegraph ops --sampled` computes it (every op row).
pub fn sampled_ops(sink: &trace_record::MemorySink) -> trace_analyze::SampledOpTable {
    let text = String::from_utf8(sink.bytes()).unwrap();
    let trace = trace_analyze::load_str(&text, "sampled.jsonl", Default::default()).unwrap();
    trace_analyze::sampled_op_table(&trace, &trace_analyze::SampledOpOptions::default()).unwrap()
}

/// The Candle ops the table names, in any span path, with their samples.
pub fn named_ops(table: &trace_analyze::SampledOpTable) -> HashMap<String, u64> {
    let mut ops = HashMap::new();
    for row in table.spans.iter().flat_map(|s| &s.rows) {
        if row.kind.is_some() {
            *ops.entry(row.op.clone()).or_default() += row.samples;
        }
    }
    ops
}

/// Asserts that the sampled op table names `matmul` and a softmax (`softmax`,
/// `softmax_last_dim`) among its ops.
pub fn assert_names_matmul_and_softmax(table: &trace_analyze::SampledOpTable) {
    let ops = named_ops(table);
    assert!(
        ops.get("matmul").is_some_and(|&n| n > 0),
        "no matmul in the sampled op table: {ops:?}"
    );
    assert!(
        ops.iter()
            .any(|(op, &n)| op.starts_with("softmax") && n > 0),
        "no softmax in the sampled op table: {ops:?}"
    );
}

/// The samples whose innermost span is the forward op `forward` itself (a span path whose
/// last name, before any `#k`, is `forward`), from the sampled op table.
#[derive(Debug, Default, Clone, Copy)]
pub struct AtOp {
    /// Busy samples (not waiting).
    pub busy: u64,
    /// Of them, the capture's own work (the table's `(profiler)` row: writing the trace,
    /// entering and leaving the model's `tracing` spans), not the model's.
    pub profiler: u64,
    /// Of them, samples in named Candle ops.
    pub named: u64,
}

impl AtOp {
    /// The model's own busy samples: busy, less the capture's own work.
    pub fn model(&self) -> u64 {
        self.busy - self.profiler
    }
}

/// The forward op's own samples in `table` (see [`AtOp`]).
pub fn at_op(table: &trace_analyze::SampledOpTable, forward: &str) -> AtOp {
    let own = |path: &str| {
        let last = path.rsplit('/').next().unwrap_or(path);
        last.split('#').next() == Some(forward)
    };
    let mut at = AtOp::default();
    for s in table.spans.iter().filter(|s| own(&s.path)) {
        at.busy += s.samples - s.waiting;
        at.profiler += s.profiler;
        at.named += s.in_ops;
    }
    at
}

/// A kind of disagreeing sample: the model spans its stack has open (outermost first) and the
/// span it names.
pub type Disagreement = (Vec<String>, Option<String>);

/// A recorded span: its name without the `#k` suffix, its parent, start and end (ns).
pub struct Span {
    /// The name before `#`.
    pub base: String,
    /// The parent span.
    pub parent: Option<u64>,
    /// Start.
    pub start: u64,
    /// End (`u64::MAX` when it never ended).
    pub end: u64,
}

/// How a trace's samples are attributed, counted in samples.
#[derive(Default)]
pub struct Attribution {
    /// Samples on the driving thread with a model function on their stack.
    pub forward: u64,
    /// Of those, the ones naming the innermost span their stack says is open (or, at its
    /// edges, the enclosing one).
    pub agree: u64,
    /// Of those, the ones naming a span below the forward op.
    pub below: u64,
    /// Of those, the ones naming the forward op's own span.
    pub at_forward: u64,
    /// Of those, the ones naming the forward op or a span below it, by innermost span name.
    pub by_span: HashMap<String, u64>,
    /// Of those, the ones with a span named by the second text among the spans they name or
    /// enclose (see [`attribute`]'s `under`).
    pub under: u64,
    /// Samples on other threads.
    pub workers: u64,
    /// Of those, the ones naming the forward op or a span below it.
    pub workers_in_forward: u64,
    /// The disagreeing samples by kind, most frequent first.
    pub disagree: Vec<(Disagreement, u64)>,
}

impl Attribution {
    /// Asserts the sample count and the share that name the innermost open span.
    pub fn assert_innermost(&self, min_samples: u64, percent: u64) {
        assert!(
            self.forward >= min_samples,
            "{} samples in forward",
            self.forward
        );
        assert!(
            self.agree * 100 >= self.forward * percent,
            "{} of {} samples name the innermost open span; the rest: {:?}",
            self.agree,
            self.forward,
            self.disagree
        );
        // Worker threads' samples (when gemm or Candle used any) are attributed to the driving
        // thread's spans: nearly all of the loop's time is inside a forward.
        assert!(
            self.workers < 10 || self.workers_in_forward * 10 >= self.workers * 8,
            "{} of {} worker samples in a forward",
            self.workers_in_forward,
            self.workers
        );
    }

    /// The share of the forward's samples that `n` is.
    pub fn share(&self, n: u64) -> f64 {
        n as f64 / self.forward.max(1) as f64
    }
}

/// Attributes `trace`'s samples: those on thread `driver` whose stack has a function of
/// `table` on it are checked against the innermost span those functions open. `blocks` lists
/// spans a model enters in a block inside a function's body (the function's span, the block's
/// span): a sample in that function may also name the block's span, entered a few
/// instructions before the call it guards. `forward` is the forward op's name; `under` is the
/// span counted in [`Attribution::under`].
pub fn attribute(
    trace: &ParsedTrace,
    driver: u64,
    table: SpanTable,
    blocks: SpanTable,
    forward: &str,
    under: &str,
) -> Attribution {
    let mut frames: HashMap<u64, String> = HashMap::new();
    let mut stacks: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut spans: HashMap<u64, Span> = HashMap::new();
    let mut windows: HashMap<u64, (u64, u64)> = HashMap::new();
    for e in &trace.events {
        match &e.event {
            Event::Frame(f) => {
                frames.insert(f.id, f.func.clone());
            }
            Event::Stack(s) => {
                stacks.insert(s.id, s.frames.clone());
            }
            Event::SpanStart(s) => {
                let base = s.name.split('#').next().unwrap_or_default().to_string();
                let span = Span {
                    base,
                    parent: s.parent,
                    start: s.ts,
                    end: u64::MAX,
                };
                spans.insert(s.id, span);
            }
            Event::SpanEnd(s) => {
                if let Some(sp) = spans.get_mut(&s.id) {
                    sp.end = s.ts;
                }
            }
            Event::Sampler(s) => {
                windows.insert(s.step, (s.ts, s.ts + s.dur));
            }
            _ => {}
        }
    }
    // The span's depth below the forward op (0: the op itself), when it is inside one.
    let below_forward = |mut id: u64| {
        let mut depth = 0;
        loop {
            let span = &spans[&id];
            if span.base == forward {
                return Some(depth);
            }
            depth += 1;
            id = span.parent?;
        }
    };
    let encloses = |mut id: u64, name: &str| loop {
        let span = &spans[&id];
        if span.base == name {
            return true;
        }
        match span.parent {
            Some(p) => id = p,
            None => return false,
        }
    };
    let opens = |func: &str, pattern: &str| {
        func.match_indices(pattern).any(|(at, _)| {
            let rest = &func[at + pattern.len()..];
            rest.is_empty() || rest.starts_with("::")
        })
    };
    let mut out = Attribution::default();
    let mut disagree: HashMap<Disagreement, u64> = HashMap::new();
    for e in &trace.events {
        let Event::Samples(s) = &e.event else {
            continue;
        };
        // The attributed span was recorded and open during the sample's step.
        if let Some(id) = s.span {
            let span = &spans[&id];
            let (w0, w1) = windows[&s.step];
            assert!(
                span.start < w1 && span.end > w0,
                "span {id} not open in step {}",
                s.step
            );
        }
        let in_forward = s.span.and_then(below_forward);
        if s.thread != driver {
            out.workers += s.n;
            if in_forward.is_some() {
                out.workers_in_forward += s.n;
            }
            continue;
        }
        // The model's spans open at this instant, outermost first, read off the stack.
        let path: Vec<&str> = stacks[&s.stack]
            .iter()
            .filter_map(|f| {
                let func = frames[f].as_str();
                table
                    .iter()
                    .find(|(pattern, _)| opens(func, pattern))
                    .map(|(_, name)| *name)
            })
            .collect();
        let Some(&expected) = path.last() else {
            continue;
        };
        out.forward += s.n;
        let named = s.span.map(|id| spans[&id].base.as_str());
        // A model function's frame exists a little before its span guard is entered (the
        // prologue, the recorder's own `on_enter`) and a little after it drops: a sample there
        // names the enclosing span, which is the truth at that instant.
        let parent = path.len().checked_sub(2).map(|i| path[i]);
        let block = blocks
            .iter()
            .any(|(func, block)| *func == expected && named == Some(*block));
        if named == Some(expected) || named == parent || block {
            out.agree += s.n;
        } else {
            let key = (
                path.iter().map(std::string::ToString::to_string).collect(),
                named.map(str::to_string),
            );
            *disagree.entry(key).or_default() += s.n;
        }
        match in_forward {
            Some(0) => out.at_forward += s.n,
            Some(_) => out.below += s.n,
            None => {}
        }
        if let (Some(name), Some(_)) = (named, in_forward) {
            *out.by_span.entry(name.to_string()).or_default() += s.n;
        }
        if s.span.is_some_and(|id| encloses(id, under)) {
            out.under += s.n;
        }
    }
    let mut worst: Vec<_> = disagree.into_iter().collect();
    worst.sort_by_key(|w| std::cmp::Reverse(w.1));
    out.disagree = worst;
    out
}
