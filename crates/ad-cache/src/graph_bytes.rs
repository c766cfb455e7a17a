//! `RetainedBytes` for graph-core graphs: own arenas, payload heap, and parent graphs charged once.

use std::collections::HashMap;
use std::mem::size_of;
use std::sync::Arc;

use graph_core::Graph;

use crate::bytes::RetainedBytes;

/// The heap a graph owns directly (not counting its parents' contents): graph-core's exact
/// account of its own tables, plus the heap its payloads own.
fn own_heap_bytes<Op: RetainedBytes>(g: &Graph<Op>) -> u64 {
    let tables = u64::try_from(g.arena_heap_bytes()).unwrap_or(u64::MAX);
    if Op::HEAP_FREE {
        return tables;
    }
    g.ops().fold(tables, |acc, op| {
        acc.saturating_add(op.payload().heap_bytes())
    })
}

/// Heap bytes of graphs held by one value: `inline` graphs stored in the value itself (their
/// inline size is the container's), and `arcs` held through `Arc`s. Graphs reachable from
/// several of them are visited once.
///
/// # The rule for graphs
///
/// A graph's own storage is [`Graph::arena_heap_bytes`] (graph-core's exact count of the heap
/// of its arenas, walk tables, canonical numbering, linearized masks and, once computed, its
/// per-value identity hashes) plus [`RetainedBytes::heap_bytes`] of every operation payload.
/// A graph held through an `Arc` that the value alone keeps alive also costs its inline size
/// and the `Arc`'s two counters.
///
/// Parent graphs (and their parents) are visited once each, however many graphs of the value
/// share them. A parent is charged only when the value keeps it alive on its own: every strong
/// reference to it comes from the value itself or from parents that are themselves charged,
/// and there is no weak reference. A parent the caller also holds (for instance the recorded
/// graph a linearization reads from) is not charged: it stays alive without the cache. The
/// test runs once, when the cache prices the entry.
pub fn graphs_heap_bytes<Op: RetainedBytes>(
    inline: &[&Graph<Op>],
    arcs: &[&Arc<Graph<Op>>],
) -> u64 {
    struct Node<'a, Op> {
        arc: &'a Arc<Graph<Op>>,
        /// References from discovered holders not yet decided.
        pending: usize,
        /// References from holders known to be charged (owned by the value).
        owned_refs: usize,
        owned: bool,
    }
    // Discovery: every graph reachable through an Arc, once, with an edge per reference.
    let mut index: HashMap<*const Graph<Op>, usize> = HashMap::new();
    let mut nodes: Vec<Node<'_, Op>> = Vec::new();
    let mut edges: Vec<(Option<usize>, usize)> = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    let mut roots: Vec<(Option<usize>, &Arc<Graph<Op>>)> = Vec::new();
    for g in inline {
        for p in g.parents() {
            roots.push((None, p));
        }
    }
    for a in arcs {
        roots.push((None, a));
    }
    let mut frontier = roots;
    loop {
        for (holder, arc) in frontier.drain(..) {
            let key = Arc::as_ptr(arc);
            let i = match index.get(&key) {
                Some(&i) => i,
                None => {
                    let i = nodes.len();
                    index.insert(key, i);
                    nodes.push(Node {
                        arc,
                        pending: 0,
                        owned_refs: 0,
                        owned: false,
                    });
                    stack.push(i);
                    i
                }
            };
            nodes[i].pending += 1;
            edges.push((holder, i));
        }
        let Some(i) = stack.pop() else { break };
        let arc = nodes[i].arc;
        for p in arc.parents() {
            frontier.push((Some(i), p));
        }
    }
    // Decide holders before what they hold (Kahn's order over the reference DAG).
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut ready: Vec<usize> = Vec::new();
    for &(holder, child) in &edges {
        match holder {
            Some(h) => out[h].push(child),
            None => {
                nodes[child].owned_refs += 1;
                nodes[child].pending -= 1;
            }
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        if n.pending == 0 {
            ready.push(i);
        }
    }
    let mut total = inline
        .iter()
        .fold(0u64, |acc, g| acc.saturating_add(own_heap_bytes(g)));
    while let Some(i) = ready.pop() {
        let n = &mut nodes[i];
        n.owned = n.owned_refs == Arc::strong_count(n.arc) && Arc::weak_count(n.arc) == 0;
        let owned = n.owned;
        if owned {
            let g: &Graph<Op> = n.arc;
            total = total
                .saturating_add(size_of::<Graph<Op>>() as u64)
                .saturating_add(2 * size_of::<usize>() as u64)
                .saturating_add(own_heap_bytes(g));
        }
        for &c in &out[i] {
            let child = &mut nodes[c];
            if owned {
                child.owned_refs += 1;
            }
            child.pending -= 1;
            if child.pending == 0 {
                ready.push(c);
            }
        }
    }
    total
}

/// A graph's own arenas, its payloads' heap, and the parents it alone keeps alive, each once
/// (see [`graphs_heap_bytes`] for the rule).
impl<Op: RetainedBytes> RetainedBytes for Graph<Op> {
    fn heap_bytes(&self) -> u64 {
        graphs_heap_bytes(&[self], &[])
    }
}
