//! The span tree: total and self time per span path, aggregated over steps (mean and spread),
//! with the execution step (forward, backward, optimizer) of each path.

use crate::intern::FastMap;
use serde::Serialize;

use crate::intern::Sym;
use trace_record::schema::{ExecStep, SpanKind, TimingMode};

use crate::model::Trace;
use crate::stats::{Spread, SpreadAcc};

/// Paths deeper than this many names are shown with their middle elided (see
/// [`SpanNode::path`]), so that the nodes of a deeply nested trace take linear memory.
pub const MAX_PATH_NAMES: usize = 32;

/// One node of the span tree: every span with the same path (names from the root joined by
/// `/`) is aggregated into one node.
#[derive(Debug, Clone, Serialize)]
pub struct SpanNode {
    /// The path, e.g. `train_step/forward/model/layers.0`, for display. A path of more than
    /// [`MAX_PATH_NAMES`] names keeps its first and last `MAX_PATH_NAMES / 2` names around
    /// `…N more…`; nodes are identified by their position in the tree ([`SpanNode::parent`]
    /// and [`SpanNode::name`]), never by this text (see [`pair_nodes`]).
    pub path: String,
    /// The id of the path in the table of [`span_paths`] (per trace).
    #[serde(skip)]
    pub path_id: u32,
    /// The last name of the path.
    pub name: String,
    /// Depth (0 for a root).
    pub depth: u32,
    /// The index of the parent node in [`SpanTree::nodes`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<usize>,
    /// The kind of the first span seen with this path.
    pub kind: SpanKind,
    /// The training phase of the path (recorded on the span or inherited), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_step: Option<ExecStep>,
    /// How many closed spans have this path.
    pub count: u64,
    /// How many spans with this path were never closed (not counted in the times).
    pub open: u64,
    /// Sum of durations.
    pub total_ns: u64,
    /// Sum of self durations: duration minus the durations of direct child spans and minus
    /// the time covered by ops recorded directly in the span (the union of their intervals).
    pub self_ns: u64,
    /// The spread over steps of the per-step total of this path (only steps where it occurs);
    /// absent when the trace has no steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_step: Option<Spread>,
    /// The spread over steps of the per-step self time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_step_self: Option<Spread>,
    /// Logical bytes allocated directly in spans of this path (memory events naming the span).
    pub alloc_bytes: u64,
}

/// The span tree, nodes in depth-first order (children by total time, largest first).
///
/// Building it is O(n log n) in the spans, and its size is linear in the number of distinct
/// paths, however deep they nest (display paths are bounded by [`MAX_PATH_NAMES`]).
#[derive(Debug, Clone, Serialize)]
pub struct SpanTree {
    /// How durations were measured.
    pub timing: TimingMode,
    /// Number of steps in the trace.
    pub steps: usize,
    /// Number of spans read.
    pub span_count: usize,
    /// The nodes.
    pub nodes: Vec<SpanNode>,
}

impl SpanTree {
    /// The node with (display) `path`, if any.
    pub fn node(&self, path: &str) -> Option<&SpanNode> {
        self.nodes.iter().find(|n| n.path == path)
    }

    /// The full path of node `i`: every name from the root, joined by `/` (O(depth); the
    /// nodes carry a bounded display path instead).
    pub fn full_path(&self, i: usize) -> String {
        let mut names = Vec::new();
        let mut cur = Some(i);
        while let Some(c) = cur {
            let Some(n) = self.nodes.get(c) else { break };
            names.push(n.name.as_str());
            // Parents come before their children in depth-first order, so this ends.
            cur = n.parent.filter(|&p| p < c);
        }
        names.reverse();
        names.join("/")
    }
}

/// Pairs the nodes of two span trees that have the same full path (the same names from the
/// root), in O(n) expected time and without building path strings: a node pairs with the
/// child of the same name of its parent's partner. Returns every node of either tree once,
/// as `(Some(a), Some(b))` for a pair or with `None` on the side that lacks the path; pairs
/// and `a`'s nodes in `a`'s order, then `b`'s unpaired nodes in `b`'s order.
pub fn pair_nodes<'t>(
    a: &'t SpanTree,
    b: &'t SpanTree,
) -> Vec<(Option<&'t SpanNode>, Option<&'t SpanNode>)> {
    // `b`'s children by (parent node, name).
    let mut b_child: FastMap<(Option<usize>, &str), usize> = FastMap::default();
    for (i, n) in b.nodes.iter().enumerate() {
        b_child.entry((n.parent, n.name.as_str())).or_insert(i);
    }
    let mut partner: Vec<Option<usize>> = vec![None; a.nodes.len()];
    let mut taken = vec![false; b.nodes.len()];
    let mut out = Vec::with_capacity(a.nodes.len().max(b.nodes.len()));
    for (i, n) in a.nodes.iter().enumerate() {
        // Parents precede children (depth-first order), so the parent's partner is known.
        let bp = match n.parent {
            None => Some(None),
            Some(p) => partner.get(p).copied().flatten().map(Some),
        };
        let m = bp.and_then(|bp| b_child.get(&(bp, n.name.as_str())).copied());
        partner[i] = m;
        if let Some(j) = m {
            taken[j] = true;
        }
        out.push((Some(n), m.map(|j| &b.nodes[j])));
    }
    for (j, n) in b.nodes.iter().enumerate() {
        if !taken[j] {
            out.push((None, Some(n)));
        }
    }
    out
}

/// The path id of each span (an index into the returned path table), plus the table of
/// `(parent path, name)` per path. Iterative: a parent's `span_start` is read before its
/// children's, so one pass in load order suffices; a span whose parent comes later or is
/// unknown is treated as a root.
pub fn span_paths(trace: &Trace) -> (Vec<u32>, Vec<(Option<u32>, Sym)>) {
    let mut table: Vec<(Option<u32>, Sym)> = Vec::new();
    let mut index: FastMap<(Option<u32>, Sym), u32> = FastMap::default();
    let mut path_of: Vec<u32> = Vec::with_capacity(trace.spans.len());
    for (i, s) in trace.spans.iter().enumerate() {
        let parent_path = s
            .parent
            .filter(|&p| (p as usize) < i)
            .map(|p| path_of[p as usize]);
        let k = (parent_path, s.name);
        let id = match index.get(&k) {
            Some(&id) => id,
            None => {
                let id = table.len() as u32;
                table.push(k);
                index.insert(k, id);
                id
            }
        };
        path_of.push(id);
    }
    trace.work.add(trace.spans.len() as u64);
    (path_of, table)
}

/// The full path of span `i` (an index into [`Trace::spans`]): every name from the root joined
/// by `/`, with the parents [`span_paths`] follows (a parent read after its child, or unknown,
/// makes the child a root). O(depth).
pub(crate) fn full_span_path(trace: &Trace, i: usize) -> String {
    let mut names = Vec::new();
    let mut cur = Some(i);
    while let Some(c) = cur {
        let Some(s) = trace.spans.get(c) else { break };
        names.push(trace.str(s.name));
        // Parents precede their children, so this ends.
        cur = s.parent.map(|p| p as usize).filter(|&p| p < c);
    }
    names.reverse();
    names.join("/")
}

/// Builds the span tree. O(n log n) in the number of spans.
pub fn span_tree(trace: &Trace) -> SpanTree {
    let (path_of, table) = span_paths(trace);
    let np = table.len();
    let self_ns = crate::self_time::span_self_times(trace);

    struct Acc {
        kind: SpanKind,
        exec: Option<ExecStep>,
        count: u64,
        open: u64,
        total: u64,
        self_t: u64,
        // (step, total, self) of the step being accumulated.
        cur: Option<(u32, u64, u64)>,
        per_step: SpreadAcc,
        per_step_self: SpreadAcc,
    }
    let mut acc: Vec<Option<Acc>> = (0..np).map(|_| None).collect();
    // Spans are visited grouped by step so per-step sums close in one pass: sort span indices
    // by step (stable, so load order within a step).
    let mut order: Vec<u32> = (0..trace.spans.len() as u32).collect();
    order.sort_by_key(|&i| trace.spans[i as usize].step.map_or(u64::MAX, u64::from));
    trace.work.add_sort(order.len());
    let flush = |a: &mut Acc| {
        if let Some((_, t, s)) = a.cur.take() {
            a.per_step.push(t);
            a.per_step_self.push(s);
        }
    };
    for &i in &order {
        let s = &trace.spans[i as usize];
        let p = path_of[i as usize] as usize;
        let a = acc[p].get_or_insert_with(|| Acc {
            kind: s.kind,
            exec: s.exec_step,
            count: 0,
            open: 0,
            total: 0,
            self_t: 0,
            cur: None,
            per_step: SpreadAcc::default(),
            per_step_self: SpreadAcc::default(),
        });
        if a.exec.is_none() {
            a.exec = s.exec_step;
        }
        let (Some(d), Some(sf)) = (s.duration_ns(), self_ns[i as usize]) else {
            a.open += 1;
            continue;
        };
        a.count += 1;
        a.total = a.total.saturating_add(d);
        a.self_t = a.self_t.saturating_add(sf);
        if let Some(step) = s.step {
            match a.cur {
                Some((cs, ref mut t, ref mut sl)) if cs == step => {
                    *t = t.saturating_add(d);
                    *sl = sl.saturating_add(sf);
                }
                _ => {
                    flush(a);
                    a.cur = Some((step, d, sf));
                }
            }
        }
    }
    for a in acc.iter_mut().flatten() {
        flush(a);
    }
    trace.work.add(trace.spans.len() as u64);
    let mut alloc_bytes = vec![0u64; np];
    for e in trace.memory.iter().filter(|e| e.alloc) {
        if let Some(s) = e.span {
            let b = &mut alloc_bytes[path_of[s as usize] as usize];
            *b = b.saturating_add(e.bytes);
        }
    }
    trace.work.add(trace.memory.len() as u64);

    // Children lists and depth-first order (iterative).
    let mut children: Vec<Vec<u32>> = vec![Vec::new(); np];
    let mut roots: Vec<u32> = Vec::new();
    for (id, &(parent, _)) in table.iter().enumerate() {
        match parent {
            Some(p) => children[p as usize].push(id as u32),
            None => roots.push(id as u32),
        }
    }
    let total_of = |id: u32| acc[id as usize].as_ref().map_or(0, |a| a.total);
    let name_of = |id: u32| trace.str(table[id as usize].1);
    let by_total = |a: &u32, b: &u32| {
        total_of(*b)
            .cmp(&total_of(*a))
            .then_with(|| name_of(*a).cmp(name_of(*b)))
    };
    roots.sort_by(by_total);
    for c in children.iter_mut() {
        c.sort_by(by_total);
    }
    trace.work.add_sort(np);
    let mut nodes: Vec<SpanNode> = Vec::with_capacity(np);
    // The path ids from the root to the node being visited (depth-first).
    let mut chain: Vec<u32> = Vec::new();
    // Stack of (path id, parent node index, depth), pushed in reverse so the largest comes first.
    let mut stack: Vec<(u32, Option<usize>, u32)> =
        roots.iter().rev().map(|&r| (r, None, 0)).collect();
    while let Some((id, parent_node, depth)) = stack.pop() {
        let name = name_of(id).to_string();
        chain.truncate(depth as usize);
        chain.push(id);
        let path = display_path(&chain, |p| name_of(p));
        let a = acc[id as usize].as_ref();
        let node_index = nodes.len();
        nodes.push(SpanNode {
            path,
            path_id: id,
            name,
            depth,
            parent: parent_node,
            kind: a.map_or(SpanKind::Function, |a| a.kind),
            exec_step: a.and_then(|a| a.exec),
            count: a.map_or(0, |a| a.count),
            open: a.map_or(0, |a| a.open),
            total_ns: a.map_or(0, |a| a.total),
            self_ns: a.map_or(0, |a| a.self_t),
            per_step: a.and_then(|a| a.per_step.finish()),
            per_step_self: a.and_then(|a| a.per_step_self.finish()),
            alloc_bytes: alloc_bytes[id as usize],
        });
        for &c in children[id as usize].iter().rev() {
            stack.push((c, Some(node_index), depth + 1));
        }
    }
    trace.work.add(np as u64);
    SpanTree {
        timing: trace.run.timing,
        steps: trace.steps.len(),
        span_count: trace.spans.len(),
        nodes,
    }
}

/// The display path of the names along `chain` (root first), joined by `/`, with the middle
/// elided beyond [`MAX_PATH_NAMES`] names: O(`MAX_PATH_NAMES`) whatever the depth.
fn display_path<'n>(chain: &[u32], name_of: impl Fn(u32) -> &'n str) -> String {
    let half = MAX_PATH_NAMES / 2;
    let mut s = String::new();
    let push = |s: &mut String, part: &str| {
        if !s.is_empty() {
            s.push('/');
        }
        s.push_str(part);
    };
    if chain.len() <= MAX_PATH_NAMES {
        for &p in chain {
            push(&mut s, name_of(p));
        }
    } else {
        for &p in &chain[..half] {
            push(&mut s, name_of(p));
        }
        push(&mut s, &format!("…{} more…", chain.len() - 2 * half));
        for &p in &chain[chain.len() - half..] {
            push(&mut s, name_of(p));
        }
    }
    s
}
