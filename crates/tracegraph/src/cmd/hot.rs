//! `tracegraph hot`: where the sampled CPU time went, by function, crate group, phase, span or
//! Candle op.
//!
//! Every CPU time shown is an estimate, printed with the sample count it comes from. Samples
//! of a thread pool spinning or parked are *waiting* (trace-analyze's `WAITING_FRAMES`): each
//! span and phase shows its waiting on a line of its own, and the function rankings leave them
//! out unless `--include-waiting`. Samples of the profiler's own work on a program thread (the
//! sampler, the recorder, the heap tracker; the step-boundary wake) are *profiler*: one
//! `(profiler)` row in the function rankings, a line of their own per span and phase, and in
//! no hint. `--by span` rows are span paths; `--by span-name` merges them by name.

use std::fmt::Write as _;
use std::path::PathBuf;

use trace_analyze::{HotBy, HotHint, HotOptions, HotReport, HotRow, Trace, hot_report, short_func};
use trace_record::schema::ExecStep;

use super::output::UsageError;
use super::{Status, Table, load, nsu, print_json, write_stdout};

/// Arguments of `tracegraph hot`.
#[derive(clap::Args, Debug)]
pub(crate) struct HotArgs {
    /// The trace file (JSON Lines), recorded with the CPU sampler on
    /// (`tracegraph demo --sample`, or `Capture::sample_stacks`).
    pub(crate) trace: PathBuf,
    /// What rows are: `function`, `crate` (candle_core, gemm, candle_nn, model, allocator,
    /// other), `phase` (forward, backward, optimizer), `span` (span paths, as `spans` names
    /// them), `span-name` (spans merged by their last name) or `op` (the Candle op each
    /// sample ran inside, as `ops --sampled` attributes them).
    #[arg(long, value_name = "BY", default_value = "function")]
    pub(crate) by: HotBy,
    /// Only samples of recorded steps A to B (inclusive), e.g. `3..8`, `5`, `3..` or `..8`.
    #[arg(long, value_name = "A..B")]
    pub(crate) steps: Option<String>,
    /// Only samples of one phase: `forward`, `backward` or `optimizer`.
    #[arg(long, value_name = "PHASE")]
    pub(crate) phase: Option<ExecStep>,
    /// Rows shown (and functions per phase).
    #[arg(long, value_name = "N", default_value_t = 15)]
    pub(crate) top: usize,
    /// The model's crates for the `model` group (repeatable); default: the program's own
    /// crate, found from the stacks, and `candle_transformers`.
    #[arg(long = "model-crate", value_name = "CRATE")]
    pub(crate) model_crates: Vec<String>,
    /// Keep waiting samples (thread pools spinning or parked) in the function rankings; by
    /// default they are left out and counted on their own lines.
    #[arg(long)]
    pub(crate) include_waiting: bool,
    /// Print JSON (schema `tracegraph.hot/1`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

fn parse_steps(s: &str) -> anyhow::Result<(u64, u64)> {
    super::parse_step_range(s).map_err(|e| UsageError(format!("--steps {e}")).into())
}

/// Runs `tracegraph hot`.
pub(crate) fn run(args: &HotArgs) -> anyhow::Result<Status> {
    let steps = args.steps.as_deref().map(parse_steps).transpose()?;
    let trace = load(&args.trace, false)?;
    let report = hot_report(
        &trace,
        &HotOptions {
            by: args.by,
            steps,
            phase: args.phase,
            limit: Some(args.top),
            model_crates: args.model_crates.clone(),
            exclude_waiting: !args.include_waiting,
        },
    );
    if args.json {
        print_json("hot", &report)?;
        return Ok(Status::Ok);
    }
    let version = trace.run.version;
    write_stdout(&render(&report, version))?;
    Ok(Status::Ok)
}

/// The classes of a trace's sampled stacks as `tracegraph hot` counts them (trace-analyze's
/// samples model: waiting, the profiler's own work, busy), learnt from the sampled-stack lines
/// as an export streams them: what `export --format folded-samples` marks its `[waiting]` and
/// `[profiler]` frames by. Stacks that only `raw_stack` lines describe (a run killed before its
/// sampler stopped) are symbolized at the end from the binaries on disk, as `hot` does.
#[derive(Default)]
pub(crate) struct StackClasses {
    stacks: trace_analyze::SampledStacks,
    /// The stacks `samples` lines name (each passed to `stacks` once: what read-time
    /// symbolization resolves).
    named: trace_analyze::FastMap<u64, ()>,
}

impl StackClasses {
    /// What read-time symbolization did (`None`: every stack was defined by the recorder).
    pub(crate) fn read_time(&self) -> Option<&trace_analyze::model::ReadTimeSymbols> {
        self.stacks.read_time.as_ref()
    }
}

impl trace_export::SampleClasses for StackClasses {
    fn add(&mut self, event: &trace_record::schema::Event) {
        use trace_record::schema::Event;
        match event {
            Event::Frame(_) | Event::Stack(_) | Event::Module(_) | Event::RawStack(_) => {
                self.stacks.add(event);
            }
            Event::Samples(s) if self.named.insert(s.stack, ()).is_none() => {
                self.stacks.add(event);
            }
            _ => {}
        }
    }

    fn finish(&mut self) {
        self.stacks.resolve_read_time();
        self.stacks.samples = Vec::new();
        self.named = trace_analyze::FastMap::default();
    }

    fn class(&self, stack: u64) -> trace_export::SampleClass {
        if self.stacks.stack_is_waiting(stack) {
            trace_export::SampleClass::Waiting
        } else if self.stacks.stack_is_profiler(stack) {
            trace_export::SampleClass::Profiler
        } else {
            trace_export::SampleClass::Busy
        }
    }

    fn raw_frames(&self, stack: u64, each: &mut dyn FnMut(&str, Option<&str>)) -> bool {
        if !self.stacks.has_stack(stack) {
            return false;
        }
        for &f in self.stacks.stack(stack) {
            if let Some(frame) = self.stacks.frame(f) {
                each(frame.func, frame.file);
            }
        }
        true
    }
}

/// The hints lines (`hints     …`, one per recognised cost, with its evidence); empty when
/// there is none.
fn hints_lines(hints: &[HotHint]) -> String {
    let mut o = String::new();
    for (i, h) in hints.iter().enumerate() {
        let _ = writeln!(
            o,
            "{}{} [{}; {} samples]",
            if i == 0 { "hints     " } else { "          " },
            h.hint,
            h.rule,
            h.samples
        );
    }
    o
}

/// The hints of a trace's sampled stacks for `tracegraph summary` (waiting left out of the
/// rankings, as `hot` does by default): a blank line and the hints lines, or nothing.
pub(crate) fn summary_hints(trace: &Trace) -> String {
    if trace.sampled.steps.is_empty() {
        return String::new();
    }
    let report = hot_report(
        trace,
        &HotOptions {
            exclude_waiting: true,
            ..HotOptions::default()
        },
    );
    let lines = hints_lines(&report.hints);
    if lines.is_empty() {
        lines
    } else {
        format!("\n\nsampled CPU (`tracegraph hot`)\n{}", lines.trim_end())
    }
}

/// A share as `12.3%`.
fn pct(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// `≈ 12.3 ms` (an estimate from samples), or `-` without a rate.
fn est(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |n| format!("≈{}", nsu(n)))
}

/// A table of rows; with `waiting_lines`, each row with waiting (or the profiler's) samples
/// is followed by a `waiting` (`profiler`) line of its own (its self samples of that class).
fn rows_table(first: &str, rows: &[HotRow], with_group: bool, waiting_lines: bool) -> Table {
    let mut cols = vec![first];
    if with_group {
        cols.push("group");
    }
    cols.extend([">self", ">self %", ">total", ">total %", ">est. CPU (self)"]);
    let mut t = Table::new(&cols);
    for r in rows {
        let mut row = vec![short_func(&r.name, 90)];
        if with_group {
            row.push(r.group.map_or("-".into(), |g| g.as_str().to_string()));
        }
        row.extend([
            r.self_samples.to_string(),
            pct(r.self_share),
            r.total_samples.to_string(),
            pct(r.total_share),
            est(r.self_est_ns),
        ]);
        t.row(row);
        let parts = [
            ("  └ waiting", r.waiting_samples),
            ("  └ profiler", r.profiler_samples),
        ];
        for (label, n) in parts {
            // A row of the profiler's samples only (the `(profiler)` row) needs no line.
            if !waiting_lines || n == 0 || (n == r.profiler_samples && n == r.self_samples) {
                continue;
            }
            let share = if r.self_samples > 0 {
                r.self_share * n as f64 / r.self_samples as f64
            } else {
                0.0
            };
            let est_ns = r
                .self_est_ns
                .map(|ns| (ns as f64 * n as f64 / r.self_samples.max(1) as f64).round() as u64);
            let mut line = vec![label.to_string()];
            if with_group {
                line.push("-".into());
            }
            line.extend([
                n.to_string(),
                pct(share),
                "-".into(),
                "-".into(),
                est(est_ns),
            ]);
            t.row(line);
        }
    }
    t
}

/// The report as text.
pub(crate) fn render(r: &HotReport, version: u32) -> String {
    let mut o = String::new();
    let a = &r.sampler;
    if r.samples == 0 {
        let why = if a.steps > 0 {
            "the sampler took no sample in the selected steps and phase"
        } else if version < 2 {
            "the trace is schema version 1, which has no sampled stacks; record it with the \
             sampler on (`tracegraph demo --sample`, `Capture::sample_stacks`)"
        } else {
            "the trace has no sampled stacks in the selection; record it with the sampler on \
             (`tracegraph demo --sample`, `Capture::sample_stacks`)"
        };
        let _ = writeln!(o, "no samples: {why}");
        o.push_str(&hints_lines(&r.hints));
        return o.trim_end().to_string();
    }
    let range = a.step_range.map_or("-".into(), |(x, y)| {
        if x == y {
            format!("step {x}")
        } else {
            format!("steps {x}..{y}")
        }
    });
    let _ = writeln!(
        o,
        "sampled   {} samples in {} recorded step(s) ({range}) by the {} source{}; requested {} Hz of CPU time, achieved {}; {} lost",
        r.samples,
        a.steps,
        a.sources_text(),
        if a.source_unknown_in_some_steps() {
            " (some steps did not say)"
        } else {
            ""
        },
        a.requested_hz,
        a.effective_hz
            .map_or("unknown (no CPU time)".into(), |h| format!(
                "{h:.0} Hz of the sampled threads' CPU time"
            )),
        a.lost,
    );
    if let Some((own, share)) = a.sampler_share() {
        let _ = writeln!(
            o,
            "          the sampler's own threads used {} of CPU time in these steps ({:.1}% of the process's; never sampled, and not in the rate)",
            nsu(own),
            100.0 * share
        );
    }
    let _ = writeln!(
        o,
        "          sample counts are estimates of where CPU time went (all sampled threads), not measured durations; est. CPU = samples x {}",
        match (a.effective_hz, a.ns_per_sample()) {
            (Some(hz), Some(ns)) if hz > 0.0 => format!(
                "{} (the sampled threads' CPU time / samples taken)",
                nsu(ns.round() as u64)
            ),
            _ => "the requested period".into(),
        }
    );
    if r.outside_steps > 0 {
        let _ = writeln!(
            o,
            "note      {} samples of the boundary after the last step (no step: nothing was captured in it) are left out, as every command leaves that boundary out",
            r.outside_steps
        );
    }
    if r.saturated {
        let _ = writeln!(
            o,
            "warning   sample counts passed 2^64 - 1 and stopped there: the trace's counts are hostile or corrupt (`tracegraph validate` names the lines); shares are unreliable"
        );
    }
    let _ = writeln!(o, "model     crate(s) {}", r.model_crates.join(", "));
    let _ = writeln!(
        o,
        "waiting   {} samples ({}) in thread pools spinning or parked (Candle's barrier, rayon's idle loop, futex waits); {}",
        r.waiting,
        pct(r.share_of(r.waiting)),
        if r.waiting_excluded {
            "left out of the function and crate rankings (--include-waiting keeps them)"
        } else {
            "kept in the rankings"
        }
    );
    let _ = writeln!(
        o,
        "profiler  {} samples ({}) of the profiler's own work on the program's threads (the sampler, the recorder, the heap tracker; the step-boundary wake); one (profiler) row in the function rankings, in no crate group and no hint",
        r.profiler,
        pct(r.share_of(r.profiler)),
    );
    o.push_str(&hints_lines(&r.hints));
    let _ = writeln!(o);
    let title = match r.by {
        HotBy::Function => "hottest functions (self: the sample landed in it; total: on the stack)",
        HotBy::Crate => {
            "by crate group (self: innermost frame outside core/std/alloc; total: on the stack)"
        }
        HotBy::Phase => "by phase",
        HotBy::Span => {
            "by span path: the innermost open span's (self) and the paths above it (total)"
        }
        HotBy::SpanName => {
            "by span name (paths merged): the innermost open span (self) and its ancestors (total)"
        }
        HotBy::Op => {
            "by Candle op (the outermost Candle API frame below the innermost span; `ops --sampled` splits it per span)"
        }
    };
    let _ = writeln!(o, "{title}");
    let first = match r.by {
        HotBy::Function => "function",
        HotBy::Crate => "group",
        HotBy::Phase => "phase",
        HotBy::Span => "span path",
        HotBy::SpanName => "span",
        HotBy::Op => "op",
    };
    let per_scope = matches!(
        r.by,
        HotBy::Span | HotBy::SpanName | HotBy::Phase | HotBy::Op
    );
    let _ = writeln!(
        o,
        "{}",
        rows_table(first, &r.rows, r.by == HotBy::Function, per_scope).render()
    );
    if r.by != HotBy::Crate {
        let _ = writeln!(o);
        let _ = writeln!(o, "by crate group");
        let _ = writeln!(
            o,
            "{}",
            rows_table("group", &r.groups, false, false).render()
        );
    }
    for p in &r.phases {
        let _ = writeln!(o);
        let waiting_share = if p.samples > 0 {
            p.share * p.waiting as f64 / p.samples as f64
        } else {
            0.0
        };
        let _ = writeln!(
            o,
            "{} — {} samples ({}); hottest functions (innermost frame outside core/std/alloc)",
            p.phase,
            p.samples,
            pct(p.share)
        );
        let _ = writeln!(
            o,
            "  waiting {} samples ({}){}",
            p.waiting,
            pct(waiting_share),
            if r.waiting_excluded {
                ", not ranked below"
            } else {
                ""
            }
        );
        if p.profiler > 0 {
            let _ = writeln!(
                o,
                "  profiler {} samples ({}), not ranked below",
                p.profiler,
                pct(if p.samples > 0 {
                    p.share * p.profiler as f64 / p.samples as f64
                } else {
                    0.0
                })
            );
        }
        let _ = writeln!(
            o,
            "{}",
            rows_table("function", &p.top, true, false).render()
        );
    }
    o.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::{StackClasses, parse_steps};
    use trace_analyze::{HotOptions, hot_report};
    use trace_record::schema::{
        Event, ExecStep, Phase, SamplerEvent, SamplesEvent, SpanKind, StackEvent,
    };
    use trace_record::{ReadOptions, Run, TraceReader, TraceSession};

    /// A decode step's samples on one thread: 8 of a matmul, 6 of the capture's step-boundary
    /// wake (the profiler's), 3 of Candle's barrier spinning (waiting), in a span.
    fn decode_trace() -> Vec<u8> {
        let (session, sink) = TraceSession::in_memory(Run::new("wake", Phase::Infer, "cpu"));
        let span = session
            .span("decode", SpanKind::Function, Some(ExecStep::Forward))
            .id()
            .map(|s| s.0);
        session.step();
        drop(session.span("decode", SpanKind::Function, Some(ExecStep::Forward)));
        let frame = testkit::frame_event;
        let stack = |id, frames: &[u64]| {
            Event::Stack(StackEvent {
                id,
                frames: frames.to_vec(),
            })
        };
        let samples = |stack, n| {
            Event::Samples(SamplesEvent {
                step: 0,
                thread: 1,
                stack,
                n,
                phase: Some(ExecStep::Forward),
                span,
            })
        };
        session.record_sampled(&[
            frame(1, "llama::main"),
            frame(2, "candle_core::tensor::Tensor::matmul"),
            frame(3, "gemm_f32::microkernel::x3x4"),
            frame(4, "trace_candle::capture::Capture::step"),
            frame(5, "trace_sampler::control::imp::Running::advance"),
            frame(6, "std::thread::Thread::unpark"),
            frame(7, "std::sys::pal::unix::futex::futex_wake"),
            frame(8, "candle_core::utils::BarrierPool::execute"),
            frame(
                9,
                "<candle_core::utils::BarrierGuard as core::ops::drop::Drop>::drop",
            ),
            frame(10, "core::hint::spin_loop"),
            stack(1, &[1, 2, 3]),
            stack(2, &[1, 4, 5, 6, 7]),
            stack(3, &[1, 8, 9, 10]),
            samples(1, 8),
            samples(2, 6),
            samples(3, 3),
            Event::Sampler(SamplerEvent {
                step: 0,
                hz: 1000,
                taken: 17,
                lost: 0,
                cpu_ns: Some(17_000_000),
                sampler_cpu_ns: None,
                ts: 0,
                dur: 1,
                source: None,
            }),
        ]);
        session.finish().unwrap();
        sink.bytes()
    }

    #[test]
    fn folded_samples_mark_waiting_and_the_profiler_as_hot_counts_them() {
        let bytes = decode_trace();
        let mut reader = TraceReader::new(&bytes[..], ReadOptions::default()).unwrap();
        let folded = trace_export::folded_samples_classified(
            &mut reader,
            None,
            &mut StackClasses::default(),
        )
        .unwrap();
        let text = String::from_utf8(bytes).unwrap();
        let trace = trace_analyze::load_str(&text, "wake.jsonl", Default::default()).unwrap();
        let hot = hot_report(&trace, &HotOptions::default());
        // `hot --json`'s totals, per class.
        let json = serde_json::to_value(&hot).unwrap();
        let class = |k: &str| json[k].as_u64().unwrap();
        assert_eq!(
            (folded.total_samples, folded.waiting, folded.profiler),
            (class("samples"), class("waiting"), class("profiler"))
        );
        assert_eq!((folded.waiting, folded.profiler), (3, 6));
        // Each class's lines end in its frame, and their weights sum to its total.
        let ending = |mark: &str| -> u64 {
            folded
                .lines
                .iter()
                .filter(|(l, _)| l.ends_with(mark))
                .map(|(_, n)| n)
                .sum()
        };
        assert_eq!(ending(";[waiting]"), class("waiting"));
        assert_eq!(ending(";[profiler]"), class("profiler"));
        let busy: u64 = folded
            .lines
            .iter()
            .filter(|(l, _)| !l.ends_with(']'))
            .map(|(_, n)| n)
            .sum();
        assert_eq!(
            busy,
            class("samples") - class("waiting") - class("profiler")
        );
        // The wake is the profiler's, never waiting.
        assert!(
            folded
                .lines
                .iter()
                .any(|(l, _)| l.contains("futex_wake") && l.ends_with(";[profiler]"))
        );
    }

    #[test]
    fn step_ranges() {
        assert_eq!(parse_steps("3..8").unwrap(), (3, 8));
        assert_eq!(parse_steps("5").unwrap(), (5, 5));
        assert_eq!(parse_steps("2..").unwrap(), (2, u64::MAX));
        assert_eq!(parse_steps("..3").unwrap(), (0, 3));
        assert_eq!(parse_steps(" .. 3 ").unwrap(), (0, 3));
        assert_eq!(parse_steps("..").unwrap(), (0, u64::MAX));
        assert!(parse_steps("").is_err());
        assert!(parse_steps("..x").is_err());
        assert!(parse_steps("8..3").is_err());
        assert!(parse_steps("x").is_err());
    }
}
