//! The summary `tracegraph summary` prints: header, health, step times (with each whole step's
//! time by phase), top ops, memory peak by category and graph stability, in one struct.

use serde::Serialize;

use crate::error::AnalyzeError;
use crate::events::memory::{ByCategory, PhysicalSummary, memory_report};
use trace_record::Issue;
use trace_record::schema::{ExecStep, TimingMode};

use crate::events::ops::{OpColumn, OpRow, OpTableOptions, op_table};
pub use crate::events::steps::ChangedStep;
use crate::events::steps::{CacheReport, GraphGroup, GraphPattern, StepCache, graph_report};
use crate::model::trace::{GradientCounts, ReadCounts, RunInfo, Trace, TraceEnd};
use crate::stats::{Spread, percentile};

/// How many ops the summary lists.
pub const TOP_OPS: usize = 10;
/// How many issues and changed steps the summary lists.
pub const LISTED: usize = 10;

/// Is the trace whole and sound?
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    /// How the run ended (`truncated` when the file has no trailer).
    pub outcome: TraceEnd,
    /// True when the trace is truncated or was dropped without finishing.
    pub incomplete: bool,
    /// A trailing partial line was ignored.
    pub partial_last_line: bool,
    /// Lines read.
    pub lines: u64,
    /// Events read, by type.
    pub events: ReadCounts,
    /// Events the recorder dropped (from the trailer).
    pub dropped: u64,
    /// True when the trailer's counts equal the events read; absent without a trailer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counts_match_trailer: Option<bool>,
    /// Structural issues found.
    pub issue_count: usize,
    /// The first issues (at most [`LISTED`]).
    pub issues: Vec<Issue>,
}

/// Step wall times.
#[derive(Debug, Clone, Serialize)]
pub struct StepTimes {
    /// Whole steps timed (a [`StepTimes::partial_step`] is not counted).
    pub count: usize,
    /// Sum of step times.
    pub total_ns: u64,
    /// Spread of step times.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
    /// 95th percentile step time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p95_ns: Option<u64>,
    /// The step cut off by the end of an incomplete trace (its recorded index): left out of
    /// the step times above, which cover whole steps only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial_step: Option<u64>,
    /// The total exceeded `u64::MAX` ns and is shown as `u64::MAX`. Omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub saturated: bool,
    /// The whole steps' time by phase, summed over them (each sum capped at `u64::MAX`);
    /// absent when there is no whole step. Per step: [`step_breakdown`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phases: Option<PhaseTimes>,
}

/// The time of a step by training phase. A phase's time is the duration of its outermost
/// spans in the step (a span whose parent has the same phase is not counted again); `other`
/// is the rest of the step's wall time, in no phase-tagged span. Every figure is capped at
/// `u64::MAX` (a trace's numbers may be hostile: a span may end at `u64::MAX` ns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PhaseTimes {
    /// Time in forward spans.
    pub forward_ns: u64,
    /// Time in backward spans.
    pub backward_ns: u64,
    /// Time in optimizer spans.
    pub optimizer_ns: u64,
    /// The step's wall time minus the three phases (0 when they add up to more).
    pub other_ns: u64,
}

impl PhaseTimes {
    /// The time of phase `e`.
    pub fn get(&self, e: ExecStep) -> u64 {
        match e {
            ExecStep::Forward => self.forward_ns,
            ExecStep::Backward => self.backward_ns,
            ExecStep::Optimizer => self.optimizer_ns,
        }
    }

    fn get_mut(&mut self, e: ExecStep) -> &mut u64 {
        match e {
            ExecStep::Forward => &mut self.forward_ns,
            ExecStep::Backward => &mut self.backward_ns,
            ExecStep::Optimizer => &mut self.optimizer_ns,
        }
    }

    /// Forward, backward and optimizer time together (capped at `u64::MAX`).
    pub fn in_phases_ns(&self) -> u64 {
        self.forward_ns
            .saturating_add(self.backward_ns)
            .saturating_add(self.optimizer_ns)
    }

    /// Adds `other`'s times to these, each capped at `u64::MAX`.
    fn add(&mut self, other: &PhaseTimes) {
        self.forward_ns = self.forward_ns.saturating_add(other.forward_ns);
        self.backward_ns = self.backward_ns.saturating_add(other.backward_ns);
        self.optimizer_ns = self.optimizer_ns.saturating_add(other.optimizer_ns);
        self.other_ns = self.other_ns.saturating_add(other.other_ns);
    }
}

/// One whole step: its recorded index, wall time, ops and time by phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StepBreakdown {
    /// The step index as recorded.
    pub index: u64,
    /// The step's wall time.
    pub duration_ns: u64,
    /// Ops that ran in the step.
    pub ops: u64,
    /// The step's time by phase.
    pub phases: PhaseTimes,
}

/// Every whole step ([`Trace::complete_steps`], in order) with its time by phase. O(n) in the
/// spans and steps.
pub fn step_breakdown(trace: &Trace) -> Vec<StepBreakdown> {
    let steps = trace.complete_steps();
    let mut per_step: Vec<StepBreakdown> = steps
        .iter()
        .map(|st| StepBreakdown {
            index: st.index,
            duration_ns: st.duration_ns(),
            ops: u64::from(st.ops.1.saturating_sub(st.ops.0)),
            phases: PhaseTimes::default(),
        })
        .collect();
    for s in &trace.spans {
        let (Some(e), Some(step), Some(d)) = (s.exec_step, s.step, s.duration_ns()) else {
            continue;
        };
        let parent_same = s
            .parent
            .and_then(|p| trace.spans.get(p as usize))
            .is_some_and(|p| p.exec_step == Some(e));
        if parent_same {
            continue;
        }
        if let Some(row) = per_step.get_mut(step as usize) {
            let t = row.phases.get_mut(e);
            *t = t.saturating_add(d);
        }
    }
    for row in &mut per_step {
        let dur = row.duration_ns;
        row.phases.other_ns = dur - row.phases.in_phases_ns().min(dur);
    }
    trace.work.add((trace.spans.len() + steps.len()) as u64);
    per_step
}

/// Peak logical memory of one device.
#[derive(Debug, Clone, Serialize)]
pub struct DevicePeak {
    /// The device label.
    pub device: String,
    /// Peak live logical bytes.
    pub peak_bytes: u64,
    /// The peak by category.
    pub peak_by_category: ByCategory,
    /// Live logical bytes at the end.
    pub end_bytes: u64,
    /// Bytes live at the end outside parameters and optimizer state.
    pub possible_leak_bytes: u64,
    /// Physical samples, beside (never mixed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical: Option<PhysicalSummary>,
}

/// Graph stability across steps.
#[derive(Debug, Clone, Serialize)]
pub struct GraphStability {
    /// Steps with a graph.
    pub steps: usize,
    /// Distinct step graphs.
    pub distinct_graphs: usize,
    /// The step from which every step has the same graph.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stable_from_step: Option<u64>,
    /// The fingerprint of the last step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_fingerprint: Option<String>,
    /// The distinct changes of graph between consecutive steps, each once, with how often it
    /// happened (at most [`LISTED`]).
    pub changed_steps: Vec<ChangedStep>,
    /// The steps grouped by graph, with each group's step times.
    pub groups: Vec<GraphGroup>,
    /// How the groups follow each other.
    pub pattern: GraphPattern,
    /// The verdict in words (the graph report's).
    pub verdict: String,
    /// The step-analysis cache: identical steps are hits.
    pub cache: CacheReport,
}

/// What every view that shows spans says when trace-candle's `tracing` layer was installed
/// but saw no span (it was installed after the model was built, so the model's spans were
/// made without it).
pub const TRACING_LAYER_SAW_NO_SPANS: &str = "the tracing layer saw no spans: install it \
     (Capture::install_tracing) before the model is built; its spans are made there";

/// Whether `trace`'s `tracing` layer was installed and saw no span (its counter is 0): then
/// [`TRACING_LAYER_SAW_NO_SPANS`] is to be shown wherever spans are.
pub fn tracing_layer_saw_no_spans(trace: &Trace) -> bool {
    trace
        .counter(trace_record::schema::TRACING_SPANS_COUNTER)
        .is_some_and(|v| v == 0.0)
}

/// Everything `tracegraph summary` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The trace file (as given).
    pub source: String,
    /// Header metadata.
    pub run: RunInfo,
    /// How durations were measured (`host` unless the header says `device_synchronized`).
    pub timing: TimingMode,
    /// Health.
    pub health: Health,
    /// Ops in the trace.
    pub op_count: usize,
    /// Spans in the trace.
    pub span_count: usize,
    /// Step times.
    pub steps: StepTimes,
    /// The ops with the most self time (at most [`TOP_OPS`]).
    pub top_ops: Vec<OpRow>,
    /// Peak logical memory per device; absent when the trace has no memory events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Vec<DevicePeak>>,
    /// Graph stability.
    pub graph: GraphStability,
    /// Gradient facts; absent when the trace has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gradients: Option<GradientCounts>,
    /// A backward was recorded with no registered parameter (why there are no gradient
    /// facts; see [`crate::no_gradient_facts_reason`]). Omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub backward_without_parameters: bool,
    /// The hottest sampled functions inside backward (at most [`TOP_BACKWARD_KERNELS`], by
    /// self samples: estimates); empty when the trace has no backward samples.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub backward_kernels: Vec<crate::sampled::hot::HotRow>,
    /// How many spans trace-candle's `tracing` layer saw (its counter
    /// `trace_candle.tracing_spans`, written at `Capture::finish`); absent when the trace has
    /// no such counter (no layer installed). 0: the layer saw no span at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracing_spans: Option<u64>,
    /// The capture's estimate of its own recording time (trace-candle's counter
    /// `trace_candle.overhead_ns`, written at `Capture::finish`); absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead: Option<Overhead>,
    /// The `dump` line when the trace is a flight-recorder dump (trigger, evidence, steps,
    /// number, refused triggers, cut lines); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dump: Option<trace_record::schema::DumpRecord>,
    /// In a dump: the triggering step's duration, ns; absent when it is not a complete step
    /// of the dump (or the trace is no dump).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dump_trigger_step_ns: Option<u64>,
    /// In a dump: the median duration of its other complete steps, ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dump_median_other_ns: Option<u64>,
    /// In a dump: its slowest complete step (the first of equals).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dump_slowest_step: Option<u64>,
}

/// A dump's triggering step set beside its other complete steps: (the triggering step's
/// duration, the median of the others, the slowest step); all `None` for a trace that is no
/// dump.
fn dump_steps(trace: &Trace) -> (Option<u64>, Option<u64>, Option<u64>) {
    let Some(record) = &trace.dump else {
        return (None, None, None);
    };
    let steps: Vec<(u64, u64)> = trace
        .complete_steps()
        .iter()
        .map(|s| (s.index, s.duration_ns()))
        .collect();
    let trigger = steps
        .iter()
        .find(|s| s.0 == record.trigger_step)
        .map(|s| s.1);
    let mut others: Vec<u64> = steps
        .iter()
        .filter(|s| s.0 != record.trigger_step)
        .map(|s| s.1)
        .collect();
    others.sort_unstable();
    let median = others.get(others.len() / 2).copied();
    let slowest = steps
        .iter()
        .fold(None::<(u64, u64)>, |best, &s| match best {
            Some(b) if b.1 >= s.1 => Some(b),
            _ => Some(s),
        })
        .map(|s| s.0);
    (trigger, median, slowest)
}

/// The profiler's estimate of the time its own recording took on the recording threads.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Overhead {
    /// The estimate for the whole run, ns.
    pub total_ns: u64,
    /// The estimate per recorded step (the total over the complete steps); absent with none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_step_ns: Option<u64>,
    /// The estimate as a share of the complete steps' time (0–1, may exceed 1 for a trace
    /// whose steps are shorter than what was recorded around them); absent with no step time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_of_steps: Option<f64>,
}

impl Overhead {
    /// The estimate of a trace whose counter reads `total_ns` and whose `steps` complete steps
    /// took `steps_ns` in all; `None` for a counter that is no count of nanoseconds.
    pub fn of(total_ns: f64, steps: usize, steps_ns: u64) -> Option<Overhead> {
        if !total_ns.is_finite() || total_ns < 0.0 {
            return None;
        }
        // A finite non-negative f64 converts saturating at u64::MAX.
        let total_ns = total_ns.round() as u64;
        Some(Overhead {
            total_ns,
            per_step_ns: (steps > 0).then(|| total_ns / steps as u64),
            share_of_steps: (steps_ns > 0).then(|| total_ns as f64 / steps_ns as f64),
        })
    }
}

/// How many sampled functions inside backward the summary names.
pub const TOP_BACKWARD_KERNELS: usize = 3;

/// Builds the summary of `trace`.
pub fn summarize(trace: &Trace, cache: &StepCache) -> Result<Summary, AnalyzeError> {
    let counts_match_trailer = trace
        .trailer_counts
        .as_ref()
        .map(|tc| *tc == trace.counts.by_type);
    let health = Health {
        outcome: trace.outcome.clone(),
        incomplete: trace.is_incomplete(),
        partial_last_line: trace.partial_last_line,
        lines: trace.lines,
        events: trace.counts.clone(),
        dropped: trace.dropped,
        counts_match_trailer,
        issue_count: trace.issues.len(),
        issues: trace.issues.iter().take(LISTED).cloned().collect(),
    };
    let mut durs: Vec<u64> = trace
        .complete_steps()
        .iter()
        .map(super::model::trace::Step::duration_ns)
        .collect();
    // Summed exactly; a total past u64::MAX is shown capped and flagged, never wrapped.
    let exact: u128 = durs.iter().map(|&d| u128::from(d)).sum();
    let per_step = step_breakdown(trace);
    let phases = (!per_step.is_empty()).then(|| {
        let mut sum = PhaseTimes::default();
        for p in &per_step {
            sum.add(&p.phases);
        }
        sum
    });
    let steps = StepTimes {
        count: durs.len(),
        total_ns: u64::try_from(exact).unwrap_or(u64::MAX),
        saturated: exact > u128::from(u64::MAX),
        spread: Spread::of(&durs),
        p95_ns: percentile(&mut durs, 95.0),
        partial_step: trace.partial_step().map(|s| s.index),
        phases,
    };
    let table = op_table(
        trace,
        &OpTableOptions {
            by_shape: false,
            sort: OpColumn::SelfTime,
            limit: Some(TOP_OPS),
        },
    );
    let memory = memory_report(trace).map(|m| {
        m.devices
            .into_iter()
            .map(|d| DevicePeak {
                device: d.device,
                peak_bytes: d.peak_bytes,
                peak_by_category: d.peak_by_category,
                end_bytes: d.end_bytes,
                possible_leak_bytes: d.possible_leak_bytes,
                physical: d.physical,
            })
            .collect()
    });
    let g = graph_report(trace, cache)?;
    let graph = GraphStability {
        steps: g.steps.len(),
        distinct_graphs: g.distinct_graphs,
        stable_from_step: g.stable_from_step,
        // A step without ops has the empty graph's fingerprint, which names nothing.
        last_fingerprint: g
            .steps
            .iter()
            .rev()
            .find(|s| !s.partial)
            .filter(|s| s.ops > 0)
            .map(|s| s.fingerprint.clone()),
        changed_steps: {
            let mut c = g.distinct_changes();
            c.truncate(LISTED);
            c
        },
        cache: g.cache,
        groups: g.groups.clone(),
        pattern: g.pattern,
        verdict: g.verdict.clone(),
    };
    let gr = trace.gradients;
    let gradients = (gr.present + gr.missing + gr.zero + gr.non_finite > 0).then_some(gr);
    let (dump_trigger_step_ns, dump_median_other_ns, dump_slowest_step) = dump_steps(trace);
    let overhead = trace
        .counter(trace_record::schema::OVERHEAD_COUNTER)
        .and_then(|v| Overhead::of(v, steps.count, steps.total_ns));
    Ok(Summary {
        source: trace.source.clone(),
        run: trace.run.clone(),
        timing: trace.run.timing,
        health,
        op_count: trace.ops.len(),
        span_count: trace.spans.len(),
        steps,
        top_ops: table.rows,
        memory,
        graph,
        gradients,
        backward_without_parameters: trace
            .counter(trace_record::schema::BACKWARD_WITHOUT_PARAMETERS_COUNTER)
            .is_some(),
        backward_kernels: crate::sampled::hot::backward_kernels(trace, TOP_BACKWARD_KERNELS),
        tracing_spans: trace
            .counter(trace_record::schema::TRACING_SPANS_COUNTER)
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| v as u64),
        overhead,
        dump: trace.dump.clone(),
        dump_trigger_step_ns,
        dump_median_other_ns,
        dump_slowest_step,
    })
}

#[cfg(test)]
mod overhead_tests {
    use super::Overhead;

    #[test]
    fn the_estimate_per_step_and_as_a_share() {
        let o = Overhead::of(1000.0, 4, 10_000).unwrap();
        assert_eq!((o.total_ns, o.per_step_ns), (1000, Some(250)));
        assert_eq!(o.share_of_steps, Some(0.1));
        let none = Overhead::of(1000.0, 0, 0).unwrap();
        assert_eq!((none.per_step_ns, none.share_of_steps), (None, None));
        // A counter that is no count of nanoseconds gives no estimate.
        for bad in [f64::NAN, -1.0, f64::INFINITY] {
            assert_eq!(Overhead::of(bad, 4, 10_000), None, "{bad}");
        }
    }
}

#[cfg(test)]
mod dump_tests {
    use std::fmt::Write as _;

    use trace_record::schema::DumpTrigger;

    use crate::model::load::{LoadOptions, load_str};

    /// A dump of steps 9–14 whose step 12 took 10 ms and the others 1 ms: the summary names
    /// step 12 as the trigger and the slowest, beside the median of the others.
    #[test]
    fn a_dump_names_its_trigger_against_the_median_of_its_other_steps() {
        let mut t = String::from(
            r#"{"type":"header","schema":"tracegraph-trace","version":2,"run":{"run_id":"t","entrypoint":"t","phase":"train","device":"cpu","timing":"host","start_unix_ns":0,"pid":1}}
{"type":"dump","trigger":"slow_step","trigger_step":12,"first_step":9,"last_step":14,"evidence":{"step_ns":10000000,"median_ns":1000000,"factor":3.0,"window":8},"seq":1}
"#,
        );
        let mut ts = 1_000_000_000u64;
        for step in 9..=15u64 {
            let _ = writeln!(t, r#"{{"type":"step","index":{step},"ts":{ts}}}"#);
            if step == 15 {
                break;
            }
            let _ = writeln!(
                t,
                r#"{{"type":"op","name":"matmul","shape":[2],"dtype":"f32","ts":{},"dur":10,"in_b":8}}"#,
                ts + 1
            );
            ts += if step == 12 { 10_000_000 } else { 1_000_000 };
        }
        let _ = writeln!(
            t,
            r#"{{"type":"trailer","outcome":"complete","counts":{{"op":6,"step":7}},"dropped":0,"ts":{ts}}}"#
        );
        let trace = load_str(&t, "dump", LoadOptions::default()).unwrap();
        let sum = super::summarize(&trace, &crate::new_step_cache()).unwrap();
        let d = sum.dump.unwrap();
        assert_eq!(d.trigger, DumpTrigger::SlowStep);
        assert_eq!((d.trigger_step, d.first_step, d.last_step), (12, 9, 14));
        assert_eq!(sum.steps.count, 6);
        assert_eq!(sum.dump_trigger_step_ns, Some(10_000_000));
        assert_eq!(sum.dump_median_other_ns, Some(1_000_000));
        assert_eq!(sum.dump_slowest_step, Some(12));
    }

    /// An ordinary trace has no dump figures.
    #[test]
    fn an_ordinary_trace_has_no_dump() {
        let t = r#"{"type":"header","schema":"tracegraph-trace","version":2,"run":{"run_id":"t","entrypoint":"t","phase":"train","device":"cpu","timing":"host","start_unix_ns":0,"pid":1}}
{"type":"op","name":"matmul","shape":[2],"dtype":"f32","ts":1,"dur":10,"in_b":8}
"#;
        let trace = load_str(t, "plain", LoadOptions::default()).unwrap();
        let sum = super::summarize(&trace, &crate::new_step_cache()).unwrap();
        assert!(sum.dump.is_none() && sum.dump_slowest_step.is_none());
    }
}
