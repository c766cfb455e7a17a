//! `RetainedBytes` for graph-core graphs: own arenas, payload heap, parent graphs as parts.

use graph_core::Graph;

use crate::bytes::{HeapMeter, RetainedBytes};

/// A graph's own storage is [`Graph::arena_heap_bytes`] (graph-core's exact count of the heap
/// of its arenas, walk tables, canonical numbering, linearized masks and, once computed, its
/// per-value identity hashes) plus the heap of every operation payload. Parent graphs are
/// parts of the graph ([`HeapMeter::part_arc`]): a graph a key owns by contract owns its
/// parents (and theirs) too, so a parent that many cached roots share is charged once to the
/// cache while any of them is cached, whoever else holds it; a parent of a graph that is not
/// owned by contract is charged only when what the cache holds keeps it alive (a parent the
/// caller also holds, such as the recorded graph a linearization reads from, is not).
/// Parents of parents are walked iteratively, each once.
impl<Op: RetainedBytes> RetainedBytes for Graph<Op> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        meter.add(u64::try_from(self.arena_heap_bytes()).unwrap_or(u64::MAX));
        if !Op::HEAP_FREE {
            for op in self.ops() {
                op.payload().visit_heap(meter);
            }
        }
        for p in self.parents() {
            meter.part_arc(p);
        }
    }
}
