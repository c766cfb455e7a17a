//! Several traces of one distributed run side by side: per-rank step times, stragglers, memory.
//!
//! Each rank of a job writes its own trace; its header carries the rank, the world size and
//! the wall-clock time the session started (every `ts` counts from it). [`rank_report`] puts
//! the ranks' whole steps side by side by step index: per rank its step times and logical
//! memory peak, per step the slowest rank, how much longer its step took than the median
//! rank's, and how much later (in wall-clock time, each trace's clock placed at its header's
//! start) it finished than the first rank to finish that step.
//!
//! Placing clocks on the headers' wall-clock starts is only as good as the machines' clocks.
//! The check: ranks of one job start a step together, so the first step every rank recorded
//! should start at about the same aligned time on each; when those starts lie further apart
//! than the median step time, the alignment is reported as doubtful (and the finish
//! differences should not be trusted). Ranks that do not synchronise per step drift apart in
//! later steps, which is what the straggler table shows, so only that first common step is
//! used to judge the clocks.

use serde::Serialize;

use crate::events::memory::memory_report;
use crate::model::intern::FastMap;
use crate::model::trace::Trace;
use crate::stats::{Spread, median};

/// One rank's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RankRow {
    /// The rank: the header's, else the trace's position in the input.
    pub rank: u32,
    /// Whether the rank came from the header (else from the position).
    pub rank_from_header: bool,
    /// The trace (as given).
    pub source: String,
    /// The header's run id.
    pub run_id: String,
    /// Whole steps recorded.
    pub steps: usize,
    /// Step times over the whole steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_time: Option<Spread>,
    /// The median step time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_step_ns: Option<f64>,
    /// The highest logical memory peak over its devices, when it has memory events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<u64>,
    /// In how many of the common steps this rank was the slowest.
    pub slowest_in: usize,
    /// Its header's wall-clock start less the earliest one, ns.
    pub clock_offset_ns: u64,
}

/// One step that every rank recorded.
#[derive(Debug, Clone, Serialize)]
pub struct StragglerRow {
    /// The step index.
    pub step: u64,
    /// The rank whose step took longest (the lowest rank among equals).
    pub slowest_rank: u32,
    /// Its step time, ns.
    pub slowest_ns: u64,
    /// The median of the ranks' step times, ns.
    pub median_ns: f64,
    /// How much later the slowest rank finished the step than the first rank to finish it, in
    /// aligned wall-clock time, ns.
    pub finished_later_ns: u64,
}

/// How the ranks' clocks were placed on one another, and whether that is to be trusted.
#[derive(Debug, Clone, Serialize)]
pub struct Alignment {
    /// The first step index every rank recorded, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_common_step: Option<u64>,
    /// How far apart the ranks started that step, in aligned time, ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_spread_ns: Option<u64>,
    /// Whether the alignment is doubtful (see the module documentation).
    pub doubtful: bool,
    /// Why, when doubtful.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Several ranks of one run side by side.
#[derive(Debug, Clone, Serialize)]
pub struct RankReport {
    /// Per rank, by rank.
    pub ranks: Vec<RankRow>,
    /// Per step that every rank recorded, by step index.
    pub steps: Vec<StragglerRow>,
    /// How the clocks were placed on one another.
    pub alignment: Alignment,
    /// What looks wrong with the set of traces (different run ids or world sizes, repeated
    /// ranks, a world size that is not the number of traces).
    pub notes: Vec<String>,
}

/// Per trace: step index → (aligned start, aligned end, duration) of its whole steps.
type StepTimes = FastMap<u64, (u64, u64, u64)>;

/// Builds the rank report over `traces` (one per rank, any order). O(n log n) in the steps.
pub fn rank_report(traces: &[Trace]) -> RankReport {
    let earliest = traces
        .iter()
        .map(|t| t.run.start_unix_ns)
        .min()
        .unwrap_or(0);
    let order = rank_order(traces);
    let mut rows: Vec<RankRow> = Vec::with_capacity(traces.len());
    let mut times: Vec<StepTimes> = Vec::with_capacity(traces.len());
    for &i in &order {
        let t = &traces[i];
        let offset = t.run.start_unix_ns.saturating_sub(earliest);
        let whole = t.complete_steps();
        let mut map = StepTimes::default();
        let mut durs: Vec<u64> = Vec::with_capacity(whole.len());
        for s in whole {
            let d = s.duration_ns();
            durs.push(d);
            map.insert(
                s.index,
                (
                    offset.saturating_add(s.start_ns),
                    offset.saturating_add(s.end_ns),
                    d,
                ),
            );
        }
        t.work.add(whole.len() as u64);
        let step_time = Spread::of(&durs);
        let median_step_ns = median(&mut durs);
        rows.push(RankRow {
            rank: rank_of(traces, i),
            rank_from_header: t.run.rank.is_some(),
            source: t.source.clone(),
            run_id: t.run.run_id.clone(),
            steps: whole.len(),
            step_time,
            median_step_ns,
            peak_bytes: memory_report(t).and_then(|m| m.devices.iter().map(|d| d.peak_bytes).max()),
            slowest_in: 0,
            clock_offset_ns: offset,
        });
        times.push(map);
    }
    let notes = set_notes(traces, &order);
    // Steps every rank recorded, in index order.
    let mut common: Vec<u64> = times
        .first()
        .map(|m| m.keys().copied().collect())
        .unwrap_or_default();
    common.retain(|k| times.iter().all(|m| m.contains_key(k)));
    common.sort_unstable();
    let mut steps = Vec::with_capacity(common.len());
    for &k in &common {
        let per: Vec<(u64, u64, u64)> = times.iter().map(|m| m[&k]).collect();
        let (slow_at, &(_, slow_end, slow_ns)) = per
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.2.cmp(&b.1.2).then(b.0.cmp(&a.0)))
            .unwrap_or((0, &(0, 0, 0)));
        let first_end = per.iter().map(|p| p.1).min().unwrap_or(0);
        let mut durs: Vec<u64> = per.iter().map(|p| p.2).collect();
        if let Some(r) = rows.get_mut(slow_at) {
            r.slowest_in += 1;
        }
        steps.push(StragglerRow {
            step: k,
            slowest_rank: rows.get(slow_at).map_or(0, |r| r.rank),
            slowest_ns: slow_ns,
            median_ns: median(&mut durs).unwrap_or(0.0),
            finished_later_ns: slow_end.saturating_sub(first_end),
        });
    }
    let alignment = align(&times, common.first().copied(), &rows, traces);
    RankReport {
        ranks: rows,
        steps,
        alignment,
        notes,
    }
}

/// The rank of trace `i`: its header's, else its position in `traces`. The one numbering
/// rule of every view over several ranks.
pub(crate) fn rank_of(traces: &[Trace], i: usize) -> u32 {
    traces.get(i).and_then(|t| t.run.rank).unwrap_or(i as u32)
}

/// The traces' indices by rank, then position (repeated ranks keep their input order).
/// O(n log n) in the traces.
pub(crate) fn rank_order(traces: &[Trace]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..traces.len()).collect();
    order.sort_by_key(|&i| (rank_of(traces, i), i));
    order
}

/// What looks wrong with a set of traces taken as the ranks of one run, `order` as
/// [`rank_order`] gives it: repeated ranks, different run ids without any rank in the
/// headers, different world sizes, a world size that is not the number of traces, ranks timed
/// differently (host and synchronized device time).
pub(crate) fn set_notes(traces: &[Trace], order: &[usize]) -> Vec<String> {
    let mut notes = Vec::new();
    let mut seen: FastMap<u32, usize> = FastMap::default();
    for &i in order {
        *seen.entry(rank_of(traces, i)).or_default() += 1;
    }
    let mut repeated: Vec<u32> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(r, _)| *r)
        .collect();
    repeated.sort_unstable();
    if !repeated.is_empty() {
        notes.push(format!(
            "rank(s) {repeated:?} appear in more than one trace: are these ranks of one run?"
        ));
    }
    let mut run_ids: Vec<&str> = order
        .iter()
        .filter_map(|&i| traces.get(i))
        .map(|t| t.run.run_id.as_str())
        .collect();
    run_ids.sort_unstable();
    run_ids.dedup();
    if run_ids.len() > 1 && traces.iter().all(|t| t.run.rank.is_none()) {
        notes.push(
            "no trace names its rank (Run::rank): ranks are the traces' positions".to_string(),
        );
    }
    let mut worlds: Vec<u32> = traces.iter().filter_map(|t| t.run.world_size).collect();
    worlds.sort_unstable();
    worlds.dedup();
    if worlds.len() > 1 {
        notes.push(format!("the traces name different world sizes: {worlds:?}"));
    } else if let Some(&w) = worlds.first()
        && w as usize != traces.len()
    {
        notes.push(format!(
            "the world size is {w} but {} trace(s) were given",
            traces.len()
        ));
    }
    let first = traces.first().map(|t| t.run.timing);
    if traces.iter().any(|t| Some(t.run.timing) != first) {
        notes.push(
            "the ranks were timed differently (host time on some, synchronized device time on \
             others): their times are not comparable"
                .to_string(),
        );
    }
    notes
}

/// Judges the clock alignment on the first common step (see the module documentation).
fn align(times: &[StepTimes], first: Option<u64>, rows: &[RankRow], traces: &[Trace]) -> Alignment {
    if traces.iter().any(|t| t.run.start_unix_ns == 0) {
        return Alignment {
            first_common_step: first,
            start_spread_ns: None,
            doubtful: true,
            reason: Some("a header has no wall-clock start".to_string()),
        };
    }
    let Some(k) = first else {
        return Alignment {
            first_common_step: None,
            start_spread_ns: None,
            doubtful: times.len() > 1,
            reason: (times.len() > 1).then(|| "no step was recorded by every rank".to_string()),
        };
    };
    let starts: Vec<u64> = times
        .iter()
        .filter_map(|m| m.get(&k).map(|p| p.0))
        .collect();
    let spread = starts.iter().max().unwrap_or(&0) - starts.iter().min().unwrap_or(&0);
    let mut medians: Vec<u64> = rows
        .iter()
        .filter_map(|r| r.median_step_ns.map(|m| m as u64))
        .collect();
    let typical = median(&mut medians).unwrap_or(0.0);
    let doubtful = spread as f64 > typical;
    Alignment {
        first_common_step: Some(k),
        start_spread_ns: Some(spread),
        doubtful,
        reason: doubtful.then(|| {
            format!(
                "the ranks began step {k} {} apart in aligned time, more than a median step ({}): the machines' clocks may disagree, or the ranks did not start together",
                crate::format::format_ns(spread as f64),
                crate::format::format_ns(typical)
            )
        }),
    }
}
