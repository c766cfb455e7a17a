//! Samples per distinct sampled call stack and phase, with its frames: what a flame graph draws.

use trace_record::schema::ExecStep;

use crate::intern::FastMap;
use crate::model::Trace;

/// The phases samples are counted by, in the order of [`StackSamples::by_phase`] (the last:
/// the capture did not say).
pub const STACK_PHASES: [Option<ExecStep>; 4] = [
    Some(ExecStep::Forward),
    Some(ExecStep::Backward),
    Some(ExecStep::Optimizer),
    None,
];

/// The slot of `phase` in [`STACK_PHASES`].
fn phase_slot(phase: Option<ExecStep>) -> usize {
    match phase {
        Some(ExecStep::Forward) => 0,
        Some(ExecStep::Backward) => 1,
        Some(ExecStep::Optimizer) => 2,
        None => 3,
    }
}

/// One frame of a sampled stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackFrame<'t> {
    /// The name as `tracegraph hot` shows it (an unqualified function with its source file).
    pub name: &'t str,
    /// The function as recorded (the name when the frame is unknown).
    pub func: &'t str,
}

/// The samples of one distinct call stack, over every step and thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackSamples<'t> {
    /// The stack's id in the trace.
    pub stack: u64,
    /// Its frames, outermost first; empty when the trace did not define the stack.
    pub frames: Vec<StackFrame<'t>>,
    /// Samples per phase, in [`STACK_PHASES`] order (each capped at `u64::MAX`).
    pub by_phase: [u64; 4],
}

impl StackSamples<'_> {
    /// Samples in every phase (capped at `u64::MAX`).
    pub fn total(&self) -> u64 {
        sum(&self.by_phase)
    }
}

/// Every sampled stack with its samples by phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampledStackReport<'t> {
    /// Distinct stacks, most samples first (ties by stack id).
    pub stacks: Vec<StackSamples<'t>>,
    /// Samples per phase over every stack, in [`STACK_PHASES`] order.
    pub by_phase: [u64; 4],
    /// Samples over every stack and phase.
    pub total: u64,
}

fn sum(c: &[u64; 4]) -> u64 {
    c.iter().fold(0u64, |a, &b| a.saturating_add(b))
}

/// Samples per distinct stack and phase; `None` when the trace has no sampled stacks. Counts
/// saturate (a trace's numbers may be hostile). O(n log n) in the distinct stacks plus their
/// frames, O(n) in the sample rows.
pub fn stack_samples(trace: &Trace) -> Option<SampledStackReport<'_>> {
    let s = &trace.sampled;
    if s.is_empty() {
        return None;
    }
    let mut per_stack: FastMap<u64, [u64; 4]> = FastMap::default();
    for row in &s.samples {
        let c = per_stack.entry(row.stack).or_default();
        let p = phase_slot(row.phase);
        c[p] = c[p].saturating_add(row.n);
    }
    trace.work.add(s.samples.len() as u64);
    let mut counts: Vec<(u64, [u64; 4])> = per_stack.into_iter().collect();
    counts.sort_by(|a, b| sum(&b.1).cmp(&sum(&a.1)).then(a.0.cmp(&b.0)));
    trace.work.add_sort(counts.len());
    let total = counts
        .iter()
        .fold(0u64, |a, (_, c)| a.saturating_add(sum(c)));
    let mut by_phase = [0u64; 4];
    for (_, c) in &counts {
        for (p, n) in by_phase.iter_mut().zip(c) {
            *p = p.saturating_add(*n);
        }
    }
    let stacks: Vec<StackSamples<'_>> = counts
        .into_iter()
        .map(|(id, c)| StackSamples {
            stack: id,
            frames: s
                .stack(id)
                .iter()
                .map(|&f| {
                    let name = s.frame_name(f);
                    StackFrame {
                        name,
                        func: s.frames.get(f as usize).map_or(name, |fr| fr.func.as_str()),
                    }
                })
                .collect(),
            by_phase: c,
        })
        .collect();
    trace
        .work
        .add(stacks.iter().map(|x| x.frames.len() as u64).sum::<u64>());
    Some(SampledStackReport {
        total,
        stacks,
        by_phase,
    })
}
