//! The span tree split by module input shape: one row per span path and input shape.
//!
//! Profiled modules record their input's shape in their span (trace-candle's `module_input`
//! tensor events, loaded as [`Trace::module_inputs`]), and an op that became a span has its
//! inputs' shapes. A span without one of its own takes its nearest ancestor's: the model's
//! `tracing` spans inside `capture.op("bert.forward", ..)` are split by the batch shape they
//! ran on. The same module called on batches of two sequence lengths is then two rows, each
//! with its own count, total and self time, as `tracegraph ops --by-shape` splits ops. Spans
//! with no shape of their own or above keep one row with no shape.

use serde::Serialize;

use crate::events::spans::path_tree;
use crate::model::intern::{FastMap, ShapeId};
use crate::model::trace::Trace;

/// One span path with one input shape.
#[derive(Debug, Clone, Serialize)]
pub struct SpanShapeRow {
    /// The span path (as in the span tree).
    pub path: String,
    /// Depth of the path (0 for a root).
    pub depth: u32,
    /// The input shape (`[4, 16, 128]`), the span's own or its nearest ancestor's; absent
    /// when neither recorded one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_shape: Option<String>,
    /// Closed spans of this path with this input shape.
    pub count: u64,
    /// Their summed duration.
    pub total_ns: u64,
    /// Their summed self time (see the span tree).
    pub self_ns: u64,
    /// `total_ns / count`.
    pub mean_ns: f64,
}

/// The span tree split by module input shape: rows in the span tree's order, the shapes of
/// one path in the order they first ran.
#[derive(Debug, Clone, Serialize)]
pub struct SpanShapeTable {
    /// How many rows carry an input shape.
    pub shaped_rows: usize,
    /// The rows.
    pub rows: Vec<SpanShapeRow>,
}

/// One (path, shape) group while it is summed: where it first ran and its sums.
#[derive(Clone, Copy)]
struct Group {
    first: u32,
    count: u64,
    total: u64,
    self_t: u64,
}

/// A group's key: the path id and the shape.
type Key = (u32, Option<ShapeId>);

/// Builds the table. O(n log n) in the spans.
pub fn span_shape_table(trace: &Trace) -> SpanShapeTable {
    let tree = path_tree(trace);
    let self_ns = crate::events::self_time::span_self_times(trace);
    // Each span's own input shape: a profiled module's recorded input, or the first input of
    // the op that became the span; else its nearest ancestor's (the batch it ran in), so the
    // whole subtree of a batch shape is split, not only its root. Parents precede children.
    let mut own: FastMap<u32, ShapeId> = trace.module_inputs.iter().copied().collect();
    for o in trace.ops.iter().filter(|o| o.is_span) {
        if let (Some(span), Some(&(shape, _))) =
            (o.span, trace.input_meta.get(o.input_meta.0 as usize))
            && o.input_meta.1 > o.input_meta.0
        {
            own.entry(span).or_insert(shape);
        }
    }
    let mut shape_of: Vec<Option<ShapeId>> = Vec::with_capacity(trace.spans.len());
    for (i, s) in trace.spans.iter().enumerate() {
        let inherited = s
            .parent
            .filter(|&p| (p as usize) < i)
            .and_then(|p| shape_of[p as usize]);
        shape_of.push(own.get(&(i as u32)).copied().or(inherited));
    }
    trace.work.add((trace.spans.len() + trace.ops.len()) as u64);
    // (path id, shape) → (first span index, count, total, self).
    let mut groups: FastMap<Key, Group> = FastMap::default();
    for (i, s) in trace.spans.iter().enumerate() {
        let (Some(d), Some(&p)) = (s.duration_ns(), tree.path_of.get(i)) else {
            continue;
        };
        let key = (p, shape_of[i]);
        let g = groups.entry(key).or_insert(Group {
            first: i as u32,
            count: 0,
            total: 0,
            self_t: 0,
        });
        g.count += 1;
        g.total = g.total.saturating_add(d);
        let own_self = self_ns.get(i).copied().flatten().unwrap_or(0);
        g.self_t = g.self_t.saturating_add(own_self);
    }
    trace.work.add(trace.spans.len() as u64);
    // Rows in tree order, then by first appearance.
    let position: FastMap<u32, usize> = tree
        .nodes
        .iter()
        .enumerate()
        .map(|(k, n)| (n.path_id, k))
        .collect();
    let mut keyed: Vec<(usize, Key, Group)> = groups
        .into_iter()
        .filter_map(|(key, g)| Some((*position.get(&key.0)?, key, g)))
        .collect();
    keyed.sort_unstable_by_key(|k| (k.0, k.2.first));
    trace.work.add_sort(keyed.len());
    let paths: Vec<String> = tree.display_paths().collect();
    let rows: Vec<SpanShapeRow> = keyed
        .into_iter()
        .map(|(pos, (_, shape), g)| SpanShapeRow {
            path: paths.get(pos).cloned().unwrap_or_default(),
            depth: tree.nodes.get(pos).map_or(0, |n| n.depth),
            input_shape: shape.map(|s| trace.shapes.display(s).clone()),
            count: g.count,
            total_ns: g.total,
            self_ns: g.self_t,
            mean_ns: g.total as f64 / g.count.max(1) as f64,
        })
        .collect();
    SpanShapeTable {
        shaped_rows: rows.iter().filter(|r| r.input_shape.is_some()).count(),
        rows,
    }
}
