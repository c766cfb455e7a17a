//! Self time, one meaning for spans and ops: a region's time not covered by its children.
//!
//! A span's children are the spans nested directly in it and the ops recorded directly in it
//! (the union of their intervals, so an op nested in another op is not subtracted twice), as
//! PyTorch reports a `record_function` range's self time without its child ops. An op's
//! children are the ops nested in its interval on its thread. An op that became a span is one
//! region with its span ([`Op::is_span`](crate::model::trace::Op::is_span)): its self time is the
//! span's, and it is not a child of its own span.

use crate::model::trace::Trace;

/// Self time of every span (indexed like [`Trace::spans`]): its duration minus the durations
/// of its direct child spans and minus the time covered by the ops recorded directly in it
/// other than its own op; `None` for a span never closed. O(n log n).
pub fn span_self_times(trace: &Trace) -> Vec<Option<u64>> {
    let mut self_ns: Vec<Option<u64>> = trace
        .spans
        .iter()
        .map(super::super::model::trace::Span::duration_ns)
        .collect();
    for (i, s) in trace.spans.iter().enumerate() {
        if let (Some(p), Some(d)) = (s.parent.filter(|&p| (p as usize) < i), s.duration_ns())
            && let Some(ps) = self_ns[p as usize].as_mut()
        {
            *ps = ps.saturating_sub(d);
        }
    }
    trace.work.add(2 * trace.spans.len() as u64);
    // ... and minus the time covered by the ops recorded directly in the span (the union of
    // their intervals, so an op nested inside another op is not subtracted twice), as PyTorch
    // reports a `record_function` range's self time without its child ops.
    let mut op_spans: Vec<(u32, u64, u64)> = trace
        .ops
        .iter()
        .filter(|o| !o.is_span)
        .filter_map(|o| {
            let sp = o.span.filter(|&sp| (sp as usize) < self_ns.len())?;
            Some((sp, o.start_ns, o.start_ns.saturating_add(o.dur_ns)))
        })
        .collect();
    op_spans.sort_unstable();
    let mut i = 0;
    while i < op_spans.len() {
        let (sp, mut cur_start, mut cur_end) = op_spans[i];
        let mut covered = 0u64;
        i += 1;
        while i < op_spans.len() && op_spans[i].0 == sp {
            let (_, st, en) = op_spans[i];
            if st > cur_end {
                covered = covered.saturating_add(cur_end - cur_start);
                (cur_start, cur_end) = (st, en);
            } else {
                cur_end = cur_end.max(en);
            }
            i += 1;
        }
        covered = covered.saturating_add(cur_end - cur_start);
        if let Some(ps) = self_ns[sp as usize].as_mut() {
            *ps = ps.saturating_sub(covered);
        }
    }
    trace.work.add(op_spans.len() as u64);
    self_ns
}

/// Self time of every op: its duration minus the durations of ops nested directly inside it
/// (same thread, interval contained); for an op that is its span's own op ([`Op::is_span`]),
/// its span's self time ([`span_self_times`]), so that `ops` and `spans` agree. O(n log n),
/// iterative.
///
/// [`Op::is_span`]: crate::model::trace::Op::is_span
pub fn op_self_times(trace: &Trace) -> Vec<u64> {
    let n = trace.ops.len();
    let mut self_ns: Vec<u64> = trace.ops.iter().map(|o| o.dur_ns).collect();
    let mut order: Vec<u32> = (0..n as u32).collect();
    // Already sorted in the common case (one thread, ops read in start order): skip the sort.
    let key = |i: u32| {
        let o = &trace.ops[i as usize];
        (o.thread, o.start_ns, std::cmp::Reverse(o.dur_ns), i)
    };
    let sorted = order.windows(2).all(|w| key(w[0]) <= key(w[1]));
    trace.work.add(n as u64);
    if !sorted {
        order.sort_unstable_by_key(|&i| key(i));
        trace.work.add_sort(n);
    }
    // Stack of (op index, end) on the current thread.
    let mut stack: Vec<(u32, u64)> = Vec::new();
    let mut thread = None;
    for &i in &order {
        let o = &trace.ops[i as usize];
        if thread != Some(o.thread) {
            stack.clear();
            thread = Some(o.thread);
        }
        let end = o.start_ns.saturating_add(o.dur_ns);
        while let Some(&(_, top_end)) = stack.last() {
            if o.start_ns >= top_end || end > top_end {
                stack.pop();
            } else {
                break;
            }
        }
        if let Some(&(parent, _)) = stack.last() {
            let p = &mut self_ns[parent as usize];
            *p = p.saturating_sub(o.dur_ns);
        }
        stack.push((i, end));
    }
    trace.work.add(n as u64);
    if trace.ops.iter().any(|o| o.is_span) {
        let spans = span_self_times(trace);
        for (o, s) in trace.ops.iter().zip(self_ns.iter_mut()) {
            if o.is_span
                && let Some(Some(own)) = o.span.and_then(|sp| spans.get(sp as usize))
            {
                *s = *own;
            }
        }
        trace.work.add(n as u64);
    }
    self_ns
}
