//! The report's sampled flame graph: the CPU sampler's call stacks with their sample counts per phase, drawn by the page (click to zoom, hover for details, a phase filter).

use trace_analyze::{
    FastMap, HotBy, HotOptions, SamplerAccount, Trace, format_ns, hot_report, short_func,
};
use trace_record::schema::ExecStep;

use crate::model::FlameData;

/// Distinct stacks kept (those with the most samples); the rest are one `[N stacks cut for
/// size]` stack, so that every sample stays counted.
pub(crate) const MAX_FLAME_STACKS: usize = 4000;
/// Frames kept per stack (outermost first); deeper ones become one `[deeper frames]` frame.
pub(crate) const MAX_FLAME_DEPTH: usize = 256;
/// Characters of a frame's drawn label (the full name is in the hover details).
const LABEL_CHARS: usize = 80;
/// The phases, in the order of [`FlameData::counts`].
pub(crate) const PHASES: [&str; 4] = ["forward", "backward", "optimizer", "unknown"];

fn phase_index(p: Option<ExecStep>) -> usize {
    match p {
        Some(ExecStep::Forward) => 0,
        Some(ExecStep::Backward) => 1,
        Some(ExecStep::Optimizer) => 2,
        None => 3,
    }
}

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

/// The sampler's account as the page's key figures.
fn summary(
    acc: &SamplerAccount,
    samples: u64,
    ns_per_sample: Option<f64>,
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
                    "requested {} Hz, achieved {hz:.0} Hz of process CPU time",
                    acc.requested_hz
                ),
                None => format!("requested {} Hz (achieved: unknown)", acc.requested_hz),
            },
        ),
        ("samples lost".to_string(), acc.lost.to_string()),
    ];
    if let Some(ns) = ns_per_sample {
        rows.push((
            "one sample ≈".to_string(),
            format!(
                "{} of CPU time (process CPU time ÷ samples taken; an estimate)",
                format_ns(ns)
            ),
        ));
    }
    rows
}

/// The sampled flame graph of `trace`; absent when the trace has no sampled stacks. Caps
/// that cut something are added to `caps`.
pub(crate) fn flame_data(trace: &Trace, caps: &mut Vec<String>) -> Option<FlameData> {
    let s = &trace.sampled;
    if s.is_empty() {
        return None;
    }
    // Crate groups (colours) as `tracegraph hot` assigns them, by the frame's shown name.
    let hot = hot_report(
        trace,
        &HotOptions {
            by: HotBy::Function,
            ..HotOptions::default()
        },
    );
    let group_of: FastMap<&str, &'static str> = hot
        .rows
        .iter()
        .map(|r| (r.name.as_str(), r.group.map_or("other", |g| g.as_str())))
        .collect();
    let acc = &hot.sampler;
    let ns_per_sample = match (acc.cpu_ns, acc.taken) {
        (Some(ns), t) if t > 0 && ns > 0 => Some(ns as f64 / t as f64),
        _ if acc.requested_hz > 0 => Some(1e9 / acc.requested_hz as f64),
        _ => None,
    };

    // Samples per stack (wire id) and phase, over steps and threads.
    let mut per_stack: FastMap<u64, [u64; 4]> = FastMap::default();
    for row in &s.samples {
        let c = per_stack.entry(row.stack).or_default();
        let p = phase_index(row.phase);
        c[p] = c[p].saturating_add(row.n);
    }
    let mut stacks: Vec<(u64, [u64; 4])> = per_stack.into_iter().collect();
    let sum = |c: &[u64; 4]| c.iter().fold(0u64, |a, &b| a.saturating_add(b));
    stacks.sort_by(|a, b| sum(&b.1).cmp(&sum(&a.1)).then(a.0.cmp(&b.0)));
    let total: u64 = stacks
        .iter()
        .fold(0u64, |a, (_, c)| a.saturating_add(sum(c)));
    let mut phases = [0u64; 4];
    for (_, c) in &stacks {
        for (p, n) in phases.iter_mut().zip(c) {
            *p = p.saturating_add(*n);
        }
    }

    let mut names = Names {
        index: FastMap::default(),
        names: Vec::new(),
        labels: Vec::new(),
        groups: Vec::new(),
    };
    let mut out_stacks: Vec<Vec<u32>> = Vec::new();
    let mut out_counts: Vec<[u64; 4]> = Vec::new();
    let distinct = stacks.len();
    let mut deep = 0usize;
    let mut cut = [0u64; 4];
    for (i, (id, c)) in stacks.into_iter().enumerate() {
        if i >= MAX_FLAME_STACKS {
            for (k, n) in cut.iter_mut().zip(c) {
                *k = k.saturating_add(n);
            }
            continue;
        }
        let frames = s.stack(id);
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
            let name = s.frame_name(f);
            let group = group_of.get(name).copied().unwrap_or("other");
            let func = s.frames.get(f as usize).map_or(name, |fr| fr.func.as_str());
            path.push(names.get(name, || short_func(func, LABEL_CHARS), group));
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
        summary: summary(acc, total, ns_per_sample),
        note: "Sample counts are estimates of where CPU time went (every thread, Candle's worker \
               threads included), not measured durations: a bar's width is its share of the \
               samples shown. The estimated CPU time is samples × the CPU time of one sample. \
               Phases are as the capture recorded them with each sample (unknown: it did not \
               say). Click a frame to zoom in, a frame above it or \"reset zoom\" to zoom out."
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
    })
}
