//! Display paths of a span tree kept as parent links over its own copy of the names.
//!
//! A few words a node instead of a display path string a node; a path is made when asked for,
//! in O([`MAX_PATH_NAMES`]) whatever the depth, and owes nothing to the trace.

use crate::events::spans::{MAX_PATH_NAMES, elided_path};
use crate::model::intern::{FastMap, Sym};
use crate::model::trace::Trace;

/// No node (the parent of a root).
const NONE: u32 = u32::MAX;

/// One node: its parent, its name, how many names its path has, and the node whose name is
/// the last one shown before an elision (the ancestor at position `MAX_PATH_NAMES / 2 - 1`).
#[derive(Debug, Clone, Copy)]
struct Entry {
    parent: u32,
    name: u32,
    len: u32,
    anchor: u32,
}

/// The display paths of a forest given in depth-first order, as
/// [`crate::events::spans::PathChain`] makes them one node after another, but for any node at any
/// time.
#[derive(Debug, Clone, Default)]
pub(crate) struct PathTable {
    /// The distinct names, each once.
    names: Vec<String>,
    nodes: Vec<Entry>,
}

impl PathTable {
    /// The table of the nodes given as `(depth, name)` (names of `trace`) in depth-first
    /// order: a node's path is the path of the last node before it at a smaller depth, then
    /// its own name (as [`crate::events::spans::PathChain`] reads them).
    pub(crate) fn new(trace: &Trace, nodes: &[(u32, Sym)]) -> PathTable {
        let half = MAX_PATH_NAMES / 2;
        let mut ids: FastMap<Sym, u32> = FastMap::default();
        let mut names: Vec<String> = Vec::new();
        let mut entries = Vec::with_capacity(nodes.len());
        // The nodes from the root to the current one.
        let mut chain: Vec<u32> = Vec::new();
        for (i, &(depth, sym)) in nodes.iter().enumerate() {
            chain.truncate(depth as usize);
            let parent = chain.last().copied().unwrap_or(NONE);
            chain.push(i as u32);
            let len = chain.len();
            let anchor = chain[len.min(half) - 1];
            let name = *ids.entry(sym).or_insert_with(|| {
                names.push(trace.str(sym).to_string());
                (names.len() - 1) as u32
            });
            entries.push(Entry {
                parent,
                name,
                len: len as u32,
                anchor,
            });
        }
        PathTable {
            names,
            nodes: entries,
        }
    }

    /// The display path of node `i` (bounded by [`MAX_PATH_NAMES`] names like
    /// [`crate::SpanNode::path`]); `None` when there is no such node.
    pub(crate) fn path(&self, i: usize) -> Option<String> {
        let e = self.nodes.get(i)?;
        let len = e.len as usize;
        let name_of = |n: u32| self.names.get(n as usize).map_or("", String::as_str);
        let mut head = [0u32; MAX_PATH_NAMES];
        if len > MAX_PATH_NAMES {
            let half = MAX_PATH_NAMES / 2;
            let mut tail = [0u32; MAX_PATH_NAMES / 2];
            let h = self.names_up(e.anchor, &mut head[..half]);
            let t = self.names_up(i as u32, &mut tail);
            Some(elided_path(len, h, t, name_of))
        } else {
            let h = self.names_up(i as u32, &mut head[..len]);
            Some(elided_path(len, h, &[], name_of))
        }
    }

    /// The names of node `from` and its ancestors, as many as `buf` holds (fewer at a root),
    /// root first, in the end of `buf`.
    fn names_up<'b>(&self, from: u32, buf: &'b mut [u32]) -> &'b [u32] {
        let mut k = buf.len();
        let mut cur = from;
        while k > 0 {
            let Some(n) = self.nodes.get(cur as usize) else {
                break;
            };
            k -= 1;
            buf[k] = n.name;
            cur = n.parent;
        }
        &buf[k..]
    }
}

#[cfg(test)]
mod tests {
    use super::PathTable;
    use crate::{LoadOptions, load_reader, path_tree};

    /// The table gives every node the path the tree's own display paths give it.
    fn same_as_display_paths(bytes: &[u8]) {
        let t = load_reader(bytes, "t", LoadOptions::default()).unwrap();
        let tree = path_tree(&t);
        let names: Vec<_> = tree.nodes.iter().map(|n| (n.depth, n.name)).collect();
        let table = PathTable::new(&t, &names);
        let want: Vec<String> = tree.display_paths().collect();
        assert!(!want.is_empty());
        for (i, w) in want.iter().enumerate() {
            assert_eq!(table.path(i).as_ref(), Some(w), "node {i}");
        }
        assert_eq!(table.path(want.len()), None);
    }

    #[test]
    fn deep_chains_are_elided_as_the_tree_does() {
        // 31, 32, 33 and 80 names: around the elision and well past it.
        for depth in [31, 32, 33, 80] {
            same_as_display_paths(&testkit::deep_nesting(depth));
        }
    }

    #[test]
    fn branching_trees_have_their_own_paths() {
        let bytes = std::fs::read(testkit::small_jsonl()).unwrap();
        same_as_display_paths(&bytes);
    }
}
