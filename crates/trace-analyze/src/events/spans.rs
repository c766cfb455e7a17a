//! The span tree: total and self time per span path, aggregated over steps (mean and spread),
//! with the execution step (forward, backward, optimizer) of each path.

use crate::model::intern::FastMap;
use serde::Serialize;

use crate::model::intern::Sym;
use trace_record::schema::{ExecStep, ParseEnumError, SpanKind, TimingMode};

use crate::model::trace::{MemEvent, Trace};
use crate::stats::{Spread, SpreadAcc};

/// Paths deeper than this many names are shown with their middle elided (see
/// [`SpanNode::path`]), so that the nodes of a deeply nested trace take linear memory.
pub const MAX_PATH_NAMES: usize = 32;

/// One node of the span tree: every span with the same path (names from the root joined by
/// `/`) is aggregated into one node.
#[derive(Debug, Clone, Serialize)]
pub struct SpanNode {
    /// The path, e.g. `forward/model/layers.0`, for display. A path of more than
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
    /// Logical bytes allocated directly in spans of this path: each allocation in the span
    /// it names, or, when it is stamped before that span began (an autograd storage the
    /// recorder placed at its step's forward phase), in the innermost span of that thread
    /// open at its stamp, where the memory timeline places it.
    pub alloc_bytes: u64,
}

/// The span tree, nodes in depth-first order (children in call order unless built with
/// [`SpanOrder::Total`]).
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
    let node = |nodes: &'t [SpanNode], i: Option<u32>| i.map(|i| &nodes[i as usize]);
    pair_forests(
        a.nodes.iter().map(|n| (n.parent, Some(n.name.as_str()))),
        b.nodes.iter().map(|n| (n.parent, n.name.as_str())),
    )
    .into_iter()
    .map(|(i, j)| (node(&a.nodes, i), node(&b.nodes, j)))
    .collect()
}

/// [`pair_nodes`] for two [`PathTree`]s, by node index: `(Some(i), Some(j))` for a pair,
/// with `None` on the side that lacks the path; pairs and `a`'s nodes in `a`'s order, then
/// `b`'s unpaired nodes in `b`'s order. Names are matched as strings across the two traces.
pub fn pair_paths(a: &PathTree<'_>, b: &PathTree<'_>) -> Vec<(Option<u32>, Option<u32>)> {
    let (ta, tb) = (a.trace, b.trace);
    pair_forests(
        a.nodes
            .iter()
            .map(|n| (n.parent.map(|p| p as usize), tb.strings.get(ta.str(n.name)))),
        b.nodes
            .iter()
            .map(|n| (n.parent.map(|p| p as usize), n.name)),
    )
}

/// [`pair_paths`] for two forests given in depth-first order as `(depth, name)` per node
/// (names of `ta` and `tb`), as a [`PathTree`]'s nodes are: what is left of two trees once
/// only their figures are kept. Same result as [`pair_paths`] on the trees.
pub(crate) fn pair_depth_first(
    ta: &Trace,
    a: &[(u32, Sym)],
    tb: &Trace,
    b: &[(u32, Sym)],
) -> Vec<(Option<u32>, Option<u32>)> {
    pair_forests(
        with_parents(a).map(|(p, name)| (p, tb.strings.get(ta.str(name)))),
        with_parents(b),
    )
}

/// Each node of a forest given in depth-first order as `(depth, name)` with its parent's
/// index: the last node before it at a smaller depth.
fn with_parents(nodes: &[(u32, Sym)]) -> impl Iterator<Item = (Option<usize>, Sym)> + '_ {
    // The nodes from the root to the current one.
    let mut chain: Vec<usize> = Vec::new();
    nodes.iter().enumerate().map(move |(i, &(depth, name))| {
        chain.truncate(depth as usize);
        let parent = chain.last().copied();
        chain.push(i);
        (parent, name)
    })
}

/// Pairs two forests given in depth-first order as `(parent index, name key)` per node: a
/// node of `a` pairs with the child of the same key of its parent's partner (a key of `None`
/// pairs with nothing). Returns every node of either forest once, by index: `(Some(i),
/// Some(j))` for a pair, with `None` on the side that lacks the path; pairs and `a`'s nodes
/// in `a`'s order, then `b`'s unpaired nodes in `b`'s order. O(n) expected.
fn pair_forests<K: Copy + Eq + std::hash::Hash>(
    a: impl Iterator<Item = (Option<usize>, Option<K>)>,
    b: impl Iterator<Item = (Option<usize>, K)>,
) -> Vec<(Option<u32>, Option<u32>)> {
    // `b`'s children by (parent node, name).
    let mut b_child: FastMap<(Option<u32>, K), u32> = FastMap::default();
    let mut b_len = 0usize;
    for (j, (p, k)) in b.enumerate() {
        b_child.entry((p.map(|p| p as u32), k)).or_insert(j as u32);
        b_len = j + 1;
    }
    let mut partner: Vec<Option<u32>> = Vec::new();
    let mut taken = vec![false; b_len];
    for (p, k) in a {
        // Parents precede children (depth-first order), so the parent's partner is known.
        let bp = match p {
            None => Some(None),
            Some(p) => partner.get(p).copied().flatten().map(Some),
        };
        let m = bp.zip(k).and_then(|(bp, k)| b_child.get(&(bp, k)).copied());
        if let Some(j) = m {
            taken[j as usize] = true;
        }
        partner.push(m);
    }
    let mut out = Vec::with_capacity(partner.len().max(b_len));
    out.extend(
        partner
            .iter()
            .enumerate()
            .map(|(i, &m)| (Some(i as u32), m)),
    );
    out.extend(
        taken
            .iter()
            .enumerate()
            .filter(|(_, t)| !**t)
            .map(|(j, _)| (None, Some(j as u32))),
    );
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
        let id = if let Some(&id) = index.get(&k) {
            id
        } else {
            let id = table.len() as u32;
            table.push(k);
            index.insert(k, id);
            id
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

/// One span path of a [`PathTree`]: the figures of a [`SpanNode`] without its strings (the
/// name is interned in the tree's trace; display paths are made on demand).
#[derive(Debug, Clone, Copy)]
pub struct PathNode {
    /// The id of the path in the table of [`span_paths`] (per trace).
    pub path_id: u32,
    /// The last name of the path, a string of the tree's trace ([`PathTree::name`]).
    pub name: Sym,
    /// Depth (0 for a root).
    pub depth: u32,
    /// The index of the parent node in [`PathTree::nodes`].
    pub parent: Option<u32>,
    /// The kind of the first span seen with this path.
    pub kind: SpanKind,
    /// The training phase of the path (recorded on the span or inherited), when known.
    pub exec_step: Option<ExecStep>,
    /// How many closed spans have this path.
    pub count: u64,
    /// How many spans with this path were never closed (not counted in the times).
    pub open: u64,
    /// Sum of durations.
    pub total_ns: u64,
    /// Sum of self durations (see [`SpanNode::self_ns`]).
    pub self_ns: u64,
    /// Logical bytes allocated directly in spans of this path (see
    /// [`SpanNode::alloc_bytes`]).
    pub alloc_bytes: u64,
    per_step: SpreadAcc,
    per_step_self: SpreadAcc,
}

impl PathNode {
    /// The spread over steps of the per-step total of this path (only steps where it
    /// occurs); `None` when the trace has no steps.
    pub fn per_step(&self) -> Option<Spread> {
        self.per_step.finish()
    }

    /// The spread over steps of the per-step self time.
    pub fn per_step_self(&self) -> Option<Spread> {
        self.per_step_self.finish()
    }
}

/// The span tree in compact form: the nodes of [`SpanTree`] (same order, same figures) with
/// interned names and no path strings, so that its size is a few dozen bytes per path however
/// deep the paths nest. Display paths are made on demand ([`PathTree::display_paths`]).
#[derive(Debug, Clone)]
pub struct PathTree<'t> {
    trace: &'t Trace,
    /// The nodes, in depth-first order (children in the order the tree was built with, call
    /// order by default).
    pub nodes: Vec<PathNode>,
    /// The path id of every span (indexed like [`Trace::spans`]), as [`span_paths`] gives it.
    pub(crate) path_of: Vec<u32>,
}

impl<'t> PathTree<'t> {
    /// The trace the tree was built from.
    pub fn trace(&self) -> &'t Trace {
        self.trace
    }

    /// How many spans the tree aggregates.
    pub fn span_count(&self) -> usize {
        self.path_of.len()
    }

    /// The last name of node `i`'s path (empty for an index out of range).
    pub fn name(&self, i: usize) -> &'t str {
        self.nodes.get(i).map_or("", |n| self.trace.str(n.name))
    }

    /// The display paths of the nodes, in node order (bounded by [`MAX_PATH_NAMES`] like
    /// [`SpanNode::path`]); O(`MAX_PATH_NAMES`) per path.
    pub fn display_paths(&self) -> DisplayPaths<'_, 't> {
        DisplayPaths {
            tree: self,
            chain: PathChain::default(),
        }
    }

    /// The full path of node `i`: every name from the root, joined by `/` (O(depth)).
    pub fn full_path(&self, i: usize) -> String {
        let mut names = Vec::new();
        let mut cur = Some(i);
        while let Some(c) = cur {
            let Some(n) = self.nodes.get(c) else { break };
            names.push(self.trace.str(n.name));
            // Parents come before their children in depth-first order, so this ends.
            cur = n.parent.map(|p| p as usize).filter(|&p| p < c);
        }
        names.reverse();
        names.join("/")
    }
}

/// The display paths of a [`PathTree`]'s nodes in node order (see
/// [`PathTree::display_paths`]): it keeps the names from the root to the current node.
#[derive(Debug)]
pub struct DisplayPaths<'a, 't> {
    tree: &'a PathTree<'t>,
    chain: PathChain,
}

impl DisplayPaths<'_, '_> {
    /// The display path of node `i`, which must not come before the last node asked for
    /// (`None` for one that does, or is out of range). The nodes skipped cost no string.
    pub fn path_of(&mut self, i: usize) -> Option<String> {
        let nodes = &self.tree.nodes;
        self.chain.path_of(self.tree.trace, i, |k| {
            nodes.get(k).map(|n| (n.depth, n.name))
        })
    }
}

/// The names from the root to the current node of a forest walked in depth-first order, for
/// display paths made one node after another in O(`MAX_PATH_NAMES`) each.
#[derive(Debug, Default)]
pub(crate) struct PathChain {
    chain: Vec<Sym>,
    next: usize,
}

impl PathChain {
    /// The display path of node `i` (names of `trace`), the nodes given by `node` as
    /// `(depth, name)` in depth-first order; `i` must not come before the last node asked
    /// for (`None` for one that does, or is out of range).
    pub(crate) fn path_of(
        &mut self,
        trace: &Trace,
        i: usize,
        node: impl Fn(usize) -> Option<(u32, Sym)>,
    ) -> Option<String> {
        if i < self.next {
            return None;
        }
        while self.next <= i {
            let (depth, name) = node(self.next)?;
            // Depth first: the chain's first `depth` names are the node's ancestors.
            self.chain.truncate(depth as usize);
            self.chain.push(name);
            self.next += 1;
        }
        Some(display_path(&self.chain, |s| trace.str(s)))
    }
}

impl ExactSizeIterator for DisplayPaths<'_, '_> {}

impl Iterator for DisplayPaths<'_, '_> {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        self.path_of(self.chain.next)
    }

    // Exact, so that collecting the paths (or zipping them with the nodes) allocates once.
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.tree.nodes.len().saturating_sub(self.chain.next);
        (left, Some(left))
    }
}

/// How the children of a span path (and the roots) are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanOrder {
    /// In the order they first ran (the model's own order: embeddings, then layer 0, 1, ...).
    #[default]
    Call,
    /// Largest total time first (ties by name).
    Total,
}

impl std::str::FromStr for SpanOrder {
    type Err = ParseEnumError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "call" => Ok(SpanOrder::Call),
            "total" => Ok(SpanOrder::Total),
            _ => Err(ParseEnumError {
                what: "span order",
                found: s.to_string(),
                expected: &["call", "total"],
            }),
        }
    }
}

/// Builds the span tree in compact form, children in call order ([`path_tree_ordered`]).
pub fn path_tree(trace: &Trace) -> PathTree<'_> {
    path_tree_ordered(trace, SpanOrder::Call)
}

/// Builds the span tree in compact form, children in `order`. O(n log n) in the number of
/// spans; besides the tree, a few words per span while it is built.
pub fn path_tree_ordered(trace: &Trace, order: SpanOrder) -> PathTree<'_> {
    let (path_of, table) = span_paths(trace);
    let np = table.len();
    let mut nodes: Vec<PathNode> = table
        .iter()
        .enumerate()
        .map(|(id, &(_, name))| PathNode {
            path_id: id as u32,
            name,
            depth: 0,
            parent: None,
            kind: SpanKind::Function,
            exec_step: None,
            count: 0,
            open: 0,
            total_ns: 0,
            self_ns: 0,
            alloc_bytes: 0,
            per_step: SpreadAcc::default(),
            per_step_self: SpreadAcc::default(),
        })
        .collect();
    {
        let self_ns = crate::events::self_time::span_self_times(trace);
        // Whether a span of the path was seen (the first one gives the kind).
        let mut seen = vec![false; np];
        // (step, total, self) of the step being accumulated, per path.
        let mut cur: Vec<Option<(u32, u64, u64)>> = vec![None; np];
        // Spans are visited grouped by step so per-step sums close in one pass: sort span
        // indices by step (stable, so load order within a step).
        let mut order: Vec<u32> = (0..trace.spans.len() as u32).collect();
        order.sort_by_key(|&i| trace.spans[i as usize].step.map_or(u64::MAX, u64::from));
        trace.work.add_sort(order.len());
        let flush = |n: &mut PathNode, c: &mut Option<(u32, u64, u64)>| {
            if let Some((_, t, s)) = c.take() {
                n.per_step.push(t);
                n.per_step_self.push(s);
            }
        };
        for &i in &order {
            let s = &trace.spans[i as usize];
            let p = path_of[i as usize] as usize;
            let a = &mut nodes[p];
            if !seen[p] {
                seen[p] = true;
                a.kind = s.kind;
                a.exec_step = s.exec_step;
            }
            if a.exec_step.is_none() {
                a.exec_step = s.exec_step;
            }
            let (Some(d), Some(sf)) = (s.duration_ns(), self_ns[i as usize]) else {
                a.open += 1;
                continue;
            };
            a.count += 1;
            a.total_ns = a.total_ns.saturating_add(d);
            a.self_ns = a.self_ns.saturating_add(sf);
            if let Some(step) = s.step {
                match cur[p] {
                    Some((cs, ref mut t, ref mut sl)) if cs == step => {
                        *t = t.saturating_add(d);
                        *sl = sl.saturating_add(sf);
                    }
                    _ => {
                        flush(a, &mut cur[p]);
                        cur[p] = Some((step, d, sf));
                    }
                }
            }
        }
        for (n, c) in nodes.iter_mut().zip(cur.iter_mut()) {
            flush(n, c);
        }
        trace.work.add(trace.spans.len() as u64);
    }
    let charged = ChargedSpans::of(trace);
    for (i, e) in trace.memory.iter().enumerate().filter(|(_, e)| e.alloc) {
        if let Some(n) = charged
            .span_of(i, e)
            .and_then(|s| path_of.get(s as usize))
            .and_then(|&p| nodes.get_mut(p as usize))
        {
            n.alloc_bytes = n.alloc_bytes.saturating_add(e.bytes);
        }
    }
    trace.work.add(trace.memory.len() as u64);

    // Children of each path, contiguous (counting sort by parent), and the roots.
    let mut first: Vec<u32> = vec![0; np + 1];
    for &(parent, _) in &table {
        if let Some(p) = parent {
            first[p as usize + 1] += 1;
        }
    }
    for i in 0..np {
        first[i + 1] += first[i];
    }
    let mut fill: Vec<u32> = first[..np].to_vec();
    let mut children: Vec<u32> = vec![0; first[np] as usize];
    let mut roots: Vec<u32> = Vec::new();
    for (id, &(parent, _)) in table.iter().enumerate() {
        match parent {
            Some(p) => {
                let f = &mut fill[p as usize];
                children[*f as usize] = id as u32;
                *f += 1;
            }
            None => roots.push(id as u32),
        }
    }
    drop(fill);
    let by_total = |a: &u32, b: &u32| {
        let (na, nb) = (&nodes[*a as usize], &nodes[*b as usize]);
        nb.total_ns
            .cmp(&na.total_ns)
            .then_with(|| trace.str(na.name).cmp(trace.str(nb.name)))
    };
    // Path ids are given in the order paths first ran: call order is id order, which the
    // counting sort above already left in place.
    if order == SpanOrder::Total {
        roots.sort_by(by_total);
        for i in 0..np {
            children[first[i] as usize..first[i + 1] as usize].sort_by(by_total);
        }
        trace.work.add_sort(np);
    }
    // Depth-first order (iterative): the position of each path, its depth.
    let mut pos: Vec<u32> = vec![0; np];
    let mut stack: Vec<(u32, u32)> = roots.iter().rev().map(|&r| (r, 0)).collect();
    let mut next = 0u32;
    while let Some((id, depth)) = stack.pop() {
        pos[id as usize] = next;
        next += 1;
        nodes[id as usize].depth = depth;
        let kids = &children[first[id as usize] as usize..first[id as usize + 1] as usize];
        stack.extend(kids.iter().rev().map(|&c| (c, depth + 1)));
    }
    for (n, &(parent, _)) in nodes.iter_mut().zip(&table) {
        n.parent = parent.map(|p| pos[p as usize]);
    }
    // Move every node to its position, in place (each swap puts one node where it belongs).
    for i in 0..np {
        while pos[i] as usize != i {
            let j = pos[i] as usize;
            nodes.swap(i, j);
            pos.swap(i, j);
        }
    }
    trace.work.add(np as u64);
    PathTree {
        trace,
        nodes,
        path_of,
    }
}

/// Builds the span tree, children in call order. O(n log n) in the number of spans.
pub fn span_tree(trace: &Trace) -> SpanTree {
    span_tree_ordered(trace, SpanOrder::Call)
}

/// Builds the span tree, children in `order`. O(n log n) in the number of spans.
pub fn span_tree_ordered(trace: &Trace, order: SpanOrder) -> SpanTree {
    let tree = path_tree_ordered(trace, order);
    let nodes: Vec<SpanNode> = tree
        .nodes
        .iter()
        .zip(tree.display_paths())
        .map(|(n, path)| SpanNode {
            path,
            path_id: n.path_id,
            name: trace.str(n.name).to_string(),
            depth: n.depth,
            parent: n.parent.map(|p| p as usize),
            kind: n.kind,
            exec_step: n.exec_step,
            count: n.count,
            open: n.open,
            total_ns: n.total_ns,
            self_ns: n.self_ns,
            per_step: n.per_step(),
            per_step_self: n.per_step_self(),
            alloc_bytes: n.alloc_bytes,
        })
        .collect();
    SpanTree {
        timing: trace.run.timing,
        steps: trace.steps.len(),
        span_count: trace.spans.len(),
        nodes,
    }
}

/// The display path of the names along `chain` (root first), joined by `/`, with the middle
/// elided beyond [`MAX_PATH_NAMES`] names: O(`MAX_PATH_NAMES`) whatever the depth.
fn display_path<'n, T: Copy>(chain: &[T], name_of: impl Fn(T) -> &'n str) -> String {
    let half = MAX_PATH_NAMES / 2;
    if chain.len() > MAX_PATH_NAMES {
        elided_path(
            chain.len(),
            &chain[..half],
            &chain[chain.len() - half..],
            name_of,
        )
    } else {
        elided_path(chain.len(), chain, &chain[..0], name_of)
    }
}

/// The display path of a chain of `len` names of which only the first (`head`) and the last
/// (`tail`) are given: the names missing between them are elided as `…N more…`. With all
/// `len` names in `head`, the path in full. For callers that hold a path as parent links,
/// not as a chain.
pub(crate) fn elided_path<'n, T: Copy>(
    len: usize,
    head: &[T],
    tail: &[T],
    name_of: impl Fn(T) -> &'n str,
) -> String {
    let missing = len.saturating_sub(head.len() + tail.len());
    let mid = (missing > 0).then(|| format!("…{missing} more…"));
    // Sized once (every separator counted), not grown by doubling: a deep tree has a path
    // of this length per node.
    let cap = head
        .iter()
        .chain(tail)
        .map(|&p| name_of(p).len() + 1)
        .sum::<usize>()
        + mid.as_ref().map_or(0, |m| m.len() + 1);
    let mut s = String::with_capacity(cap);
    let parts = head
        .iter()
        .map(|&p| name_of(p))
        .chain(mid.as_deref())
        .chain(tail.iter().map(|&p| name_of(p)));
    for part in parts {
        if !s.is_empty() {
            s.push('/');
        }
        s.push_str(part);
    }
    s
}

/// The span each memory event is charged to: the span it names, except for an event stamped
/// before that span began. A recorder writes an event in the thread's current span but may
/// stamp it earlier: trace-candle's autograd walk, at backward, finds the storages the
/// forward pass allocated and autograd keeps alive, and stamps each at the start of its step's
/// forward phase (or at the step's start when the step had none), which is where the memory
/// timeline holds them. Such an event is charged to the innermost span of the same thread
/// that was open at its stamp (the forward phase), or to none when no span was open then (a
/// step's start), so `spans` and `memory` place it alike and the backward span is charged
/// only with what backward allocated. Built in O(n log n) in the spans and memory events,
/// and in O(memory events) when nothing is stamped early.
#[derive(Debug, Default)]
pub(crate) struct ChargedSpans {
    /// Memory event index → the span it is charged to instead of the one it names.
    moved: FastMap<usize, Option<u32>>,
}

impl ChargedSpans {
    /// The charges of `trace`'s memory events.
    pub(crate) fn of(trace: &Trace) -> Self {
        // (thread, stamp, memory event index) of every event stamped before its span began.
        let mut early: Vec<(u64, u64, usize)> = trace
            .memory
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                let span = trace.spans.get(e.span? as usize)?;
                (e.t_ns < span.start_ns).then_some((span.thread, e.t_ns, i))
            })
            .collect();
        trace.work.add(trace.memory.len() as u64);
        if early.is_empty() {
            return Self::default();
        }
        early.sort_unstable();
        trace.work.add_sort(early.len());
        // The spans of those threads, by thread and start (file order among equal starts:
        // a parent before the children it opened at the same instant).
        let threads: std::collections::HashSet<u64, foldhash::fast::FixedState> =
            early.iter().map(|&(thread, _, _)| thread).collect();
        let mut order: Vec<u32> = (0..trace.spans.len() as u32)
            .filter(|&i| threads.contains(&trace.spans[i as usize].thread))
            .collect();
        order.sort_by_key(|&i| {
            let s = &trace.spans[i as usize];
            (s.thread, s.start_ns)
        });
        trace.work.add(trace.spans.len() as u64);
        trace.work.add_sort(order.len());
        let end = |i: u32| trace.spans[i as usize].end_ns.unwrap_or(u64::MAX);
        let mut moved: FastMap<usize, Option<u32>> = FastMap::default();
        // One sweep per thread: the spans started by each stamp, as a stack of those still
        // open (each span pushed and popped at most once).
        let mut next = 0usize;
        let mut open: Vec<u32> = Vec::new();
        let mut thread = None;
        for &(t_thread, t, i) in &early {
            if thread != Some(t_thread) {
                thread = Some(t_thread);
                open.clear();
                while order
                    .get(next)
                    .is_some_and(|&s| trace.spans[s as usize].thread < t_thread)
                {
                    next += 1;
                }
            }
            while let Some(&s) = order.get(next) {
                let span = &trace.spans[s as usize];
                if span.thread != t_thread || span.start_ns > t {
                    break;
                }
                while open.last().is_some_and(|&o| end(o) < span.start_ns) {
                    open.pop();
                }
                open.push(s);
                next += 1;
            }
            while open.last().is_some_and(|&o| end(o) < t) {
                open.pop();
            }
            moved.insert(i, open.last().copied());
        }
        // Each span pushed and popped at most once, one lookup per early event.
        trace.work.add((2 * order.len() + early.len()) as u64);
        Self { moved }
    }

    /// The span memory event `i` (`e`) is charged to.
    pub(crate) fn span_of(&self, i: usize, e: &MemEvent) -> Option<u32> {
        if self.moved.is_empty() {
            return e.span;
        }
        self.moved.get(&i).copied().unwrap_or(e.span)
    }
}

#[cfg(test)]
mod tests {
    use trace_record::schema::{AllocKind, ExecStep, MemoryCategory, Phase, SpanKind};
    use trace_record::{MemoryRecord, Run, TraceSession};

    use super::{ChargedSpans, span_tree};
    use crate::model::load::{LoadOptions, load_str};
    use crate::model::trace::Trace;

    fn alloc(s: &TraceSession, storage: u64, bytes: u64, at: u64) {
        s.record_memory_at(
            &MemoryRecord {
                kind: AllocKind::Alloc,
                storage,
                tensor: storage,
                bytes,
                device: "cpu",
                category: MemoryCategory::Activation,
            },
            at,
        );
    }

    /// A span `[start, end]` on this thread around `inside`, at explicit instants (no clock
    /// read decides anything).
    fn span(s: &TraceSession, name: &str, start: u64, end: u64, inside: impl FnOnce()) {
        let id = s
            .start_span_at(name, SpanKind::Function, None, start)
            .unwrap();
        inside();
        s.end_span_id_at(id, end);
    }

    fn load(s: &TraceSession, sink: &trace_record::MemorySink) -> Trace {
        s.finish().unwrap();
        let text = String::from_utf8(sink.bytes()).unwrap();
        load_str(&text, "charged.jsonl", LoadOptions::default()).unwrap()
    }

    /// Allocations stamped before the span they were written in are charged to the innermost
    /// span of their thread open at their stamp (or to none), the others to their own span;
    /// every charged span holds its allocation's stamp, as the memory timeline places it.
    #[test]
    fn early_stamped_allocations_are_charged_to_the_span_open_at_their_stamp() {
        let (s, sink) = TraceSession::in_memory(Run::new("charged", Phase::Train, "cpu"));
        // Another thread's span covers every stamp: never chosen for this thread's events.
        std::thread::scope(|scope| {
            scope.spawn(|| span(&s, "worker", 1, 2_000, || {}));
        });
        span(&s, "forward", 100, 300, || {
            span(&s, "model", 150, 250, || {});
        });
        span(&s, "backward", 400, 500, || {
            alloc(&s, 1, 1000, 120); // the forward phase, before `model` opened
            alloc(&s, 2, 7, 50); // no span of this thread open: charged to none
            alloc(&s, 3, 3, 200); // inside `model`: the innermost
            alloc(&s, 4, 10, 450); // backward's own (not stamped early)
        });
        span(&s, "optimizer", 600, 900, || {
            span(&s, "inner", 610, 650, || {});
            span(&s, "after", 700, 800, || {
                alloc(&s, 5, 20, 620); // `inner`, closed by now
                alloc(&s, 6, 30, 660); // between children: the optimizer itself
            });
        });
        let trace = load(&s, &sink);
        let tree = span_tree(&trace);
        let bytes = |path: &str| tree.node(path).map(|n| n.alloc_bytes);
        assert_eq!(bytes("forward"), Some(1000));
        assert_eq!(bytes("forward/model"), Some(3));
        assert_eq!(bytes("backward"), Some(10));
        assert_eq!(bytes("optimizer"), Some(30));
        assert_eq!(bytes("optimizer/inner"), Some(20));
        assert_eq!(bytes("optimizer/after"), Some(0));
        assert_eq!(bytes("worker"), Some(0));
        let charged: u64 = tree.nodes.iter().map(|n| n.alloc_bytes).sum();
        assert_eq!(
            charged,
            1000 + 3 + 10 + 30 + 20,
            "the early one outside spans is not charged"
        );
        let charges = ChargedSpans::of(&trace);
        for (i, e) in trace.memory.iter().enumerate() {
            if let Some(sp) = charges.span_of(i, e) {
                let sp = &trace.spans[sp as usize];
                assert!(sp.start_ns <= e.t_ns && sp.end_ns.is_some_and(|end| e.t_ns <= end));
            }
        }
    }

    /// Nothing stamped early: every allocation stays in the span it names (no lookup built).
    #[test]
    fn allocations_stamped_in_their_span_keep_it() {
        let (s, sink) = TraceSession::in_memory(Run::new("kept", Phase::Train, "cpu"));
        span(&s, "forward", 100, 300, || alloc(&s, 1, 8, 200));
        span(&s, "backward", 400, 500, || alloc(&s, 2, 16, 500));
        let trace = load(&s, &sink);
        assert!(ChargedSpans::of(&trace).moved.is_empty());
        let tree = span_tree(&trace);
        assert_eq!(tree.node("forward").map(|n| n.alloc_bytes), Some(8));
        assert_eq!(tree.node("backward").map(|n| n.alloc_bytes), Some(16));
    }

    /// A deep nest of spans and one early allocation per level: each is charged to the
    /// level open at its stamp (the sweep keeps a stack, so the nest costs one pass).
    #[test]
    fn a_deep_nest_charges_each_level() {
        const DEPTH: u64 = 2_000;
        let (s, sink) = TraceSession::in_memory(Run::new("deep", Phase::Train, "cpu"));
        let mut ids = Vec::new();
        for d in 0..DEPTH {
            ids.push(
                s.start_span_at("level", SpanKind::Function, Some(ExecStep::Forward), 10 * d)
                    .unwrap(),
            );
        }
        for (d, id) in ids.into_iter().enumerate().rev() {
            s.end_span_id_at(id, 10 * (2 * DEPTH - d as u64));
        }
        span(&s, "backward", 100 * DEPTH, 100 * DEPTH + 10, || {
            for d in 0..DEPTH {
                alloc(&s, d + 1, d + 1, 10 * d + 5);
            }
        });
        let trace = load(&s, &sink);
        let charges = ChargedSpans::of(&trace);
        for (i, e) in trace.memory.iter().enumerate() {
            let sp = charges.span_of(i, e).expect("charged to a level");
            // Level d (the (d+1)-th span in the file) holds the allocation of d + 1 bytes.
            assert_eq!(u64::from(sp) + 1, e.bytes);
        }
        let backward = span_tree(&trace).node("backward").map(|n| n.alloc_bytes);
        assert_eq!(backward, Some(0));
    }
}
