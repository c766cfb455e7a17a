//! The report's sampled flame graph: the CPU sampler's call stacks with samples per phase.
//!
//! The page draws it (click to zoom, hover for details, a phase filter).

use trace_analyze::{
    FastMap, HotOptions, HotReport, Trace, format_ns, format_share, frame_label, function_groups,
    hot_report, sampler_totals, short_func, stack_counts,
};
use trace_record::SamplerAccount;

use crate::model::{FlameData, FlameHint};

/// Distinct stacks kept (those with the most samples); the rest are one `[N stacks cut for
/// size]` stack, so that every sample stays counted.
pub(crate) const MAX_FLAME_STACKS: usize = 4000;
/// Frames kept per stack (outermost first); deeper ones become one `[deeper frames]` frame.
pub(crate) const MAX_FLAME_DEPTH: usize = 256;
/// Characters of a frame's drawn label (the full name is in the hover details).
const LABEL_CHARS: usize = 80;
/// The frame put on top of every stack classified waiting (a thread pool spinning or parked),
/// in the colour group `waiting`, so waiting is drawn apart from work.
pub(crate) const WAITING_FRAME: &str = "[waiting]";
/// The frame put on top of every stack classified the profiler's own work (the sampler, the
/// recorder, the heap tracker on a program thread), in the colour group `profiler`.
pub(crate) const PROFILER_FRAME: &str = "[profiler]";
/// The phases, in the order of [`FlameData::counts`].
pub(crate) const PHASES: [&str; 4] = ["forward", "backward", "optimizer", "unknown"];

/// Interns frame names for the page.
struct Names {
    index: FastMap<String, u32>,
    names: Vec<String>,
    labels: Vec<String>,
    groups: Vec<&'static str>,
}

impl Names {
    fn get(&mut self, name: &str, label: impl FnOnce() -> String, group: &'static str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.index.insert(name.to_string(), i);
        self.names.push(name.to_string());
        self.labels.push(label());
        self.groups.push(group);
        i
    }
}

/// The sampler's account as the page's key figures, with what `tracegraph hot` adds to it
/// (`hot`: waiting samples, samples outside every step, saturated counts).
fn summary(
    acc: &SamplerAccount,
    samples: u64,
    ns_per_sample: Option<f64>,
    hot: &HotReport,
) -> Vec<(String, String)> {
    let mut rows = vec![
        ("samples".to_string(), samples.to_string()),
        (
            "recorded steps sampled".to_string(),
            match acc.step_range {
                Some((a, b)) if a != b => format!("{} (steps {a}–{b})", acc.steps),
                Some((a, _)) => format!("1 (step {a})"),
                None => "none".to_string(),
            },
        ),
        (
            "rate".to_string(),
            match acc.effective_hz {
                Some(hz) => format!(
                    "requested {} Hz, achieved {hz:.0} Hz of the sampled threads' CPU time",
                    acc.requested_hz
                ),
                None => format!("requested {} Hz (achieved: unknown)", acc.requested_hz),
            },
        ),
        ("samples lost".to_string(), acc.lost.to_string()),
        (
            "source".to_string(),
            format!(
                "{}{}",
                acc.sources_text(),
                if acc.source_unknown_in_some_steps() {
                    " (some steps did not say)"
                } else {
                    ""
                }
            ),
        ),
    ];
    if let Some((own, share)) = acc.sampler_share() {
        rows.push((
            "the sampler's own threads".to_string(),
            format!(
                "{} of CPU time ({:.1}% of the process's in the sampled steps; never sampled)",
                format_ns(own as f64),
                100.0 * share
            ),
        ));
    }
    if let Some(ns) = ns_per_sample {
        rows.push((
            "one sample ≈".to_string(),
            format!(
                "{} of CPU time (the sampled threads' CPU time ÷ samples taken; an estimate)",
                format_ns(ns)
            ),
        ));
    }
    rows.push((
        "waiting".to_string(),
        format!(
            "{} samples ({}) in thread pools spinning or parked (Candle's barrier, rayon's idle loop, futex waits): the [waiting] bars",
            hot.waiting,
            format_share(hot.share_of(hot.waiting))
        ),
    ));
    rows.push((
        "profiler".to_string(),
        format!(
            "{} samples ({}) of the profiler's own work on the program's threads (the sampler, the recorder, the heap tracker; the step-boundary wake): the [profiler] bars, in no hint",
            hot.profiler,
            format_share(hot.share_of(hot.profiler))
        ),
    ));
    if hot.outside_steps > 0 {
        rows.push((
            "left out".to_string(),
            format!(
                "{} samples of the boundary after the last step (no step: nothing was captured in it), as every command leaves it out",
                hot.outside_steps
            ),
        ));
    }
    if hot.saturated {
        rows.push((
            "warning".to_string(),
            "sample counts passed 2^64 - 1 and stopped there: the trace's counts are hostile or corrupt (`tracegraph validate` names the lines); shares are unreliable".to_string(),
        ));
    }
    rows
}

/// `tracegraph hot`'s report over every recorded step, waiting left out of the rankings (as
/// `hot` and `summary` do by default): its hints and its account of the samples.
fn hot_of(trace: &Trace) -> HotReport {
    hot_report(
        trace,
        &HotOptions {
            exclude_waiting: true,
            // Only the hints and totals are shown: no ranking rows are needed.
            limit: Some(0),
            ..HotOptions::default()
        },
    )
}

/// The sampled flame graph of `trace`, with the sampled op table of at most `max_op_spans`
/// span paths beside it; absent when the trace has no sampled stacks. Caps that cut
/// something are added to `caps`.
pub(crate) fn flame_data(
    trace: &Trace,
    max_op_spans: usize,
    caps: &mut Vec<String>,
) -> Option<FlameData> {
    let sampled = stack_counts(trace)?;
    // Crate groups (colours) as `tracegraph hot` assigns them, by the frame's shown name.
    let groups = function_groups(trace);
    let group_of = |f: u32| groups.get(f as usize).map_or("other", |g| g.as_str());
    let acc = &sampler_totals(trace);
    let ns_per_sample = acc.ns_per_sample();
    let hot = hot_of(trace);

    let total = sampled.total;
    let phases = sampled.by_phase;
    let sum = |c: &[u64; 4]| c.iter().fold(0u64, |a, &b| a.saturating_add(b));

    let mut names = Names {
        index: FastMap::default(),
        names: Vec::new(),
        labels: Vec::new(),
        groups: Vec::new(),
    };
    let mut out_stacks: Vec<Vec<u32>> = Vec::new();
    let mut out_counts: Vec<[u64; 4]> = Vec::new();
    let distinct = sampled.stacks.len();
    let mut deep = 0usize;
    let mut cut = [0u64; 4];
    for (i, st) in sampled.stacks.into_iter().enumerate() {
        let c = st.by_phase;
        if i >= MAX_FLAME_STACKS {
            for (k, n) in cut.iter_mut().zip(c) {
                *k = k.saturating_add(n);
            }
            continue;
        }
        let frames = st.frames;
        let mut path: Vec<u32> = Vec::with_capacity(frames.len().min(MAX_FLAME_DEPTH));
        if frames.is_empty() {
            path.push(names.get("[unknown stack]", || "[unknown stack]".into(), "other"));
        }
        for (d, &f) in frames.iter().enumerate() {
            if d + 1 == MAX_FLAME_DEPTH && frames.len() > MAX_FLAME_DEPTH {
                deep += 1;
                path.push(names.get("[deeper frames]", || "[deeper frames]".into(), "other"));
                break;
            }
            let (name, func) = frame_label(trace, f);
            path.push(names.get(name, || short_func(func, LABEL_CHARS), group_of(f)));
        }
        // A thread pool spinning or parked: a bar of its own on top, drawn apart.
        if st.waiting && path.len() < MAX_FLAME_DEPTH {
            path.push(names.get(WAITING_FRAME, || WAITING_FRAME.into(), "waiting"));
        }
        // The profiler's own work: a bar of its own on top too.
        if st.profiler && path.len() < MAX_FLAME_DEPTH {
            path.push(names.get(PROFILER_FRAME, || PROFILER_FRAME.into(), "profiler"));
        }
        out_stacks.push(path);
        out_counts.push(c);
    }
    if distinct > MAX_FLAME_STACKS {
        let label = format!("[{} stacks cut for size]", distinct - MAX_FLAME_STACKS);
        let cut_n = sum(&cut);
        out_stacks.push(vec![names.get(&label, || label.clone(), "other")]);
        out_counts.push(cut);
        caps.push(format!(
            "sampled flame graph: the {MAX_FLAME_STACKS} stacks with the most samples of {distinct}; the other {cut_n} samples are one \"stacks cut for size\" bar"
        ));
    }
    if deep > 0 {
        caps.push(format!(
            "sampled flame graph: {deep} stacks deeper than {MAX_FLAME_DEPTH} frames end in a \"[deeper frames]\" frame"
        ));
    }
    Some(FlameData {
        summary: summary(acc, total, ns_per_sample, &hot),
        note: "Sample counts are estimates of where CPU time went (every thread, Candle's worker \
               threads included), not measured durations: a bar's width is its share of the \
               samples shown. The estimated CPU time is samples × the CPU time of one sample. \
               Phases are as the capture recorded them with each sample (unknown: it did not \
               say). Stacks start at their thread's entry (the program's main, a worker's \
               loop), below the runtime's start frames; a thread pool spinning or parked ends \
               in a [waiting] bar of its own colour, the profiler's own work in a [profiler] \
               bar. Click a frame to zoom in, a frame above \
               it or \"reset zoom\" to zoom out."
            .to_string(),
        names: names.names,
        labels: names.labels,
        groups: names.groups,
        stacks: out_stacks,
        counts: out_counts,
        phases: PHASES
            .iter()
            .zip(phases)
            .map(|(p, n)| ((*p).to_string(), n))
            .collect(),
        samples: total,
        ns_per_sample,
        hints: hot
            .hints
            .into_iter()
            .map(|h| FlameHint {
                rule: h.rule,
                hint: h.hint,
                samples: h.samples,
            })
            .collect(),
        ops: crate::sampled_ops::sampled_ops_table(trace, max_op_spans, caps),
    })
}
