//! `RetainedBytes` for graph-core graphs: own arenas, payload heap, and parent graphs as shared allocations.

use graph_core::Graph;

use crate::bytes::{HeapMeter, RetainedBytes};

/// A graph's own storage is [`Graph::arena_heap_bytes`] (graph-core's exact count of the heap
/// of its arenas, walk tables, canonical numbering, linearized masks and, once computed, its
/// per-value identity hashes) plus the heap of every operation payload. Parent graphs are
/// shared allocations ([`HeapMeter::arc`]): each is charged once, and only when what is being
/// priced keeps it alive on its own (a parent the caller also holds, such as the recorded
/// graph a linearization reads from, is not charged). Parents of parents are walked
/// iteratively, each once.
impl<Op: RetainedBytes> RetainedBytes for Graph<Op> {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        meter.add(u64::try_from(self.arena_heap_bytes()).unwrap_or(u64::MAX));
        if !Op::HEAP_FREE {
            for op in self.ops() {
                op.payload().visit_heap(meter);
            }
        }
        for p in self.parents() {
            meter.arc(p);
        }
    }
}
