//! Chart data computed from the loaded trace: the memory band (min/max per bucket, exact when it fits), step times by phase, and where each tensor came from.

use std::collections::HashMap;

use trace_analyze::{Trace, span_paths};
use trace_record::schema::{ExecStep, MemoryCategory};

/// Points of a memory chart kept exactly (one per event) up to this many; more events are
/// reduced to this many time buckets, each keeping its minimum and maximum.
pub(crate) const MEMORY_POINTS: usize = 4096;

/// The memory band of one device: per point (an event, or a time bucket of events) the time,
/// the smallest and largest live total in it, and the live bytes per category at the instant
/// of the smallest total (the floor the band starts from).
#[derive(Debug, Clone, Default)]
pub(crate) struct Band {
    /// Start of the point (the event time, or the bucket's first event).
    pub(crate) t_ns: Vec<u64>,
    /// Smallest live total during the point (including what was live when it began).
    pub(crate) lo: Vec<u64>,
    /// Largest live total during the point.
    pub(crate) hi: Vec<u64>,
    /// Per category (`MemoryCategory::ALL` order), live bytes at the instant of `lo`.
    pub(crate) by_category_at_lo: Vec<Vec<u64>>,
    /// True when every point is one event (no bucketing).
    pub(crate) exact: bool,
    /// Time of the last event.
    pub(crate) end_ns: u64,
}

/// Live logical bytes over time of `device`, from the trace's allocation and free events
/// (a free without its allocation is ignored, a repeated allocation replaces the old one, as
/// in the memory report). O(n) in the memory events.
pub(crate) fn memory_band(trace: &Trace, device: &str) -> Band {
    let ncat = MemoryCategory::ALL.len();
    let events: Vec<&trace_analyze::MemEvent> = trace
        .memory
        .iter()
        .filter(|m| trace.str(m.device) == device)
        .collect();
    let mut band = Band {
        by_category_at_lo: vec![Vec::new(); ncat],
        exact: events.len() <= MEMORY_POINTS,
        ..Band::default()
    };
    let (Some(first), Some(last)) = (events.first(), events.last()) else {
        return band;
    };
    let (t0, t1) = (first.t_ns, last.t_ns.max(first.t_ns));
    band.end_ns = t1;
    let span = (t1 - t0).max(1);
    let bucket_of = |t: u64| -> usize {
        if band.exact {
            0
        } else {
            let b = (u128::from(t.saturating_sub(t0)) * MEMORY_POINTS as u128 / u128::from(span))
                as usize;
            b.min(MEMORY_POINTS - 1)
        }
    };
    let mut live: HashMap<u64, (usize, u64)> = HashMap::new();
    let mut cats = vec![0u64; ncat];
    let mut total = 0u64;
    let mut open: Option<usize> = None;
    for m in events {
        let c = m.category.index();
        if m.alloc {
            if let Some((oc, ob)) = live.insert(m.storage, (c, m.bytes)) {
                cats[oc] = cats[oc].saturating_sub(ob);
                total = total.saturating_sub(ob);
            }
            cats[c] = cats[c].saturating_add(m.bytes);
            total = total.saturating_add(m.bytes);
        } else if let Some((oc, ob)) = live.remove(&m.storage) {
            cats[oc] = cats[oc].saturating_sub(ob);
            total = total.saturating_sub(ob);
        } else {
            continue;
        }
        let b = bucket_of(m.t_ns);
        let new_point = band.exact || open != Some(b);
        if new_point {
            // A bucket starts from what was live when it began (the previous point's last
            // value is not lower than its floor, so the floor is at most the running value).
            band.t_ns.push(m.t_ns);
            band.lo.push(total);
            band.hi.push(total);
            for (k, v) in cats.iter().enumerate() {
                band.by_category_at_lo[k].push(*v);
            }
            open = Some(b);
        } else if let (Some(lo), Some(hi)) = (band.lo.last_mut(), band.hi.last_mut()) {
            if total < *lo {
                *lo = total;
                for (k, v) in cats.iter().enumerate() {
                    if let Some(x) = band.by_category_at_lo[k].last_mut() {
                        *x = *v;
                    }
                }
            }
            *hi = (*hi).max(total);
        }
    }
    band
}

/// Time per step split by training phase: forward, backward, optimizer, and the rest of the
/// step (`other`: time in no phase-tagged span). A phase's time is the duration of its
/// outermost spans in the step (a span whose parent has the same phase is not counted again).
#[derive(Debug, Clone, Default)]
pub(crate) struct StepPhases {
    /// Per whole step (as `Trace::complete_steps`): forward, backward, optimizer ns.
    pub(crate) per_step: Vec<[u64; 3]>,
}

fn phase_index(e: ExecStep) -> usize {
    match e {
        ExecStep::Forward => 0,
        ExecStep::Backward => 1,
        ExecStep::Optimizer => 2,
    }
}

/// The phase times of every whole step. O(n) in the spans.
pub(crate) fn step_phases(trace: &Trace) -> StepPhases {
    let n = trace.complete_steps().len();
    let mut per_step = vec![[0u64; 3]; n];
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
            let k = phase_index(e);
            row[k] = row[k].saturating_add(d);
        }
    }
    StepPhases { per_step }
}

/// Where tensors came from: tensor id → (producing op name, span path of that op).
pub(crate) struct Producers {
    by_tensor: HashMap<u64, (String, Option<String>)>,
}

impl Producers {
    /// Indexes every op's outputs (the last op writing a tensor id wins). O(n) in the ops.
    pub(crate) fn new(trace: &Trace) -> Producers {
        let (path_of, table) = span_paths(trace);
        let mut names: Vec<String> = Vec::with_capacity(table.len());
        for (parent, name) in &table {
            let s = match parent.and_then(|p| names.get(p as usize)) {
                Some(p) => format!("{p}/{}", trace.str(*name)),
                None => trace.str(*name).to_string(),
            };
            names.push(s);
        }
        let mut by_tensor = HashMap::new();
        for op in &trace.ops {
            let path = op
                .span
                .and_then(|s| path_of.get(s as usize))
                .and_then(|p| names.get(*p as usize))
                .cloned();
            let (a, b) = op.outputs;
            if let Some(outs) = trace.tensor_refs.get(a as usize..b as usize) {
                for id in outs {
                    by_tensor.insert(*id, (trace.str(op.name).to_string(), path.clone()));
                }
            }
        }
        Producers { by_tensor }
    }

    /// The producing op and its span path, when an op recorded the tensor as an output.
    pub(crate) fn of(&self, tensor: u64) -> Option<&(String, Option<String>)> {
        self.by_tensor.get(&tensor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(lines: &[&str]) -> Trace {
        let mut s = String::from(
            r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"t","entrypoint":"test","phase":"train","device":"cpu","timing":"host","start_unix_ns":0,"pid":7}}"#,
        );
        for l in lines {
            s.push('\n');
            s.push_str(l);
        }
        s.push('\n');
        trace_analyze::load_str(&s, "t.jsonl", Default::default()).expect("trace")
    }

    #[test]
    fn the_band_keeps_every_point_when_it_fits_and_shows_drops() {
        let t = trace(&[
            r#"{"type":"memory","action":"alloc","storage":1,"tensor":1,"bytes":100,"cat":"parameter","ts":1}"#,
            r#"{"type":"memory","action":"alloc","storage":2,"tensor":2,"bytes":1000,"cat":"activation","ts":2}"#,
            r#"{"type":"memory","action":"free","storage":2,"tensor":2,"bytes":1000,"cat":"activation","ts":3}"#,
            r#"{"type":"memory","action":"free","storage":9,"tensor":9,"bytes":5,"cat":"activation","ts":4}"#,
        ]);
        let b = memory_band(&t, "cpu");
        assert!(b.exact);
        assert_eq!(b.t_ns, [1, 2, 3]);
        assert_eq!(b.lo, [100, 1100, 100]);
        assert_eq!(b.hi, b.lo);
        assert_eq!(
            b.by_category_at_lo[MemoryCategory::Activation.index()],
            [0, 1000, 0]
        );
    }

    #[test]
    fn a_bucketed_band_keeps_min_and_max() {
        let mut lines = Vec::new();
        for i in 0..(MEMORY_POINTS as u64 * 3) {
            lines.push(format!(
                r#"{{"type":"memory","action":"alloc","storage":{i},"tensor":{i},"bytes":1000,"cat":"activation","ts":{}}}"#,
                2 * i
            ));
            lines.push(format!(
                r#"{{"type":"memory","action":"free","storage":{i},"tensor":{i},"bytes":1000,"cat":"activation","ts":{}}}"#,
                2 * i + 1
            ));
        }
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let b = memory_band(&trace(&refs), "cpu");
        assert!(!b.exact);
        assert!(b.t_ns.len() <= MEMORY_POINTS);
        // Every bucket rises to 1000 and falls to 0: the drop between allocations is visible.
        assert!(b.hi.iter().all(|&h| h == 1000), "{:?}", &b.hi[..8]);
        assert!(b.lo.iter().skip(1).all(|&l| l == 0));
    }

    #[test]
    fn producers_name_the_op_and_its_span_path() {
        let t = trace(&[
            r#"{"type":"span_start","id":1,"name":"forward","kind":"function","thread":0,"ts":1}"#,
            r#"{"type":"span_start","id":2,"parent":1,"name":"layers.0","kind":"module","thread":0,"ts":2}"#,
            r#"{"type":"op","span":2,"name":"matmul","in":[1,2],"out":[7],"shape":[2,2],"dtype":"f32","ts":3,"dur":1,"in_b":32,"out_b":16}"#,
            r#"{"type":"span_end","id":2,"ts":5}"#,
            r#"{"type":"span_end","id":1,"ts":6}"#,
        ]);
        let p = Producers::new(&t);
        assert_eq!(
            p.of(7),
            Some(&("matmul".to_string(), Some("forward/layers.0".to_string())))
        );
        assert!(p.of(1).is_none());
    }
}
