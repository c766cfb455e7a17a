//! Iterative traversals: topological order, reachability, pruning, subgraphs.
//!
//! Pruning to outputs (dead-code elimination) and subgraph extraction.

use crate::builder::GraphBuilder;
use crate::error::GraphError;
use crate::graph::{Graph, ValueKey, ValueRef};
use crate::hash::StableHash;
use crate::ids::{OpId, ParentId, ValueId};

/// A set of values and operations of one graph (the result of a reachability query).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    values: Vec<bool>,
    ops: Vec<bool>,
}

impl Reach {
    /// True when `value` is in the set.
    pub fn contains_value(&self, value: ValueId) -> bool {
        self.values.get(value.index()).copied().unwrap_or(false)
    }

    /// True when `op` is in the set.
    pub fn contains_op(&self, op: OpId) -> bool {
        self.ops.get(op.index()).copied().unwrap_or(false)
    }

    /// The values in the set, in arena order.
    pub fn values(&self) -> impl Iterator<Item = ValueId> + '_ {
        self.values
            .iter()
            .enumerate()
            .filter(|(_, b)| **b)
            .map(|(i, _)| ValueId(i as u32))
    }

    /// The operations in the set, in arena order.
    pub fn ops(&self) -> impl Iterator<Item = OpId> + '_ {
        self.ops
            .iter()
            .enumerate()
            .filter(|(_, b)| **b)
            .map(|(i, _)| OpId(i as u32))
    }

    /// Number of values in the set.
    pub fn num_values(&self) -> usize {
        self.values.iter().filter(|b| **b).count()
    }

    /// Number of operations in the set.
    pub fn num_ops(&self) -> usize {
        self.ops.iter().filter(|b| **b).count()
    }
}

/// A graph derived from another ([`Graph::prune_to`], [`Graph::extract_subgraph`]) with the
/// maps from the original's ids to the new ones.
#[derive(Debug)]
pub struct Extracted<Op> {
    /// The new graph.
    pub graph: Graph<Op>,
    /// `value_map[old.index()]` is the new id of each kept value, `None` for dropped ones.
    pub value_map: Vec<Option<ValueId>>,
    /// `op_map[old.index()]` is the new id of each kept operation.
    pub op_map: Vec<Option<OpId>>,
}

impl<Op> Graph<Op> {
    /// All operations in a topological order (every operation after the producers of its
    /// inputs): depth-first post-order with roots in arena order. Deterministic for a given
    /// arena; see [`canonical_ops`](Graph::canonical_ops) for the numbering-independent order
    /// of the live operations.
    pub fn topo_order(&self) -> Vec<OpId> {
        let mut state = crate::canon::walk_state(self.ops.len());
        let mut stack = Vec::new();
        let mut order = Vec::with_capacity(self.ops.len());
        // A built graph is acyclic, so the walk cannot fail.
        let _ = self.walk_rest(&mut state, &mut stack, |op| order.push(OpId(op)));
        order
    }

    /// The values and operations that `values` depend on (including `values` themselves),
    /// within this graph (parents are not entered).
    pub fn ancestors(&self, values: &[ValueId]) -> Result<Reach, GraphError> {
        let mut reach = Reach {
            values: vec![false; self.keys.len()],
            ops: vec![false; self.ops.len()],
        };
        let mut stack = Vec::with_capacity(values.len());
        for &v in values {
            if v.index() >= self.keys.len() {
                return Err(GraphError::UnknownValue { value: v });
            }
            stack.push(v);
        }
        while let Some(v) = stack.pop() {
            if std::mem::replace(&mut reach.values[v.index()], true) {
                continue;
            }
            if let Some((op, _)) = self.keys[v.index()].producer()
                && !std::mem::replace(&mut reach.ops[op.index()], true)
            {
                let node = &self.ops[op.index()];
                for r in self.op_inputs_of(node) {
                    if let ValueRef::Local(u) = *r
                        && !reach.values[u.index()]
                    {
                        stack.push(u);
                    }
                }
            }
        }
        Ok(reach)
    }

    /// What the graph outputs depend on.
    pub fn reachable_from_outputs(&self) -> Reach {
        self.ancestors(&self.outputs).unwrap_or_else(|_| Reach {
            values: vec![false; self.keys.len()],
            ops: vec![false; self.ops.len()],
        })
    }

    /// For each value, the operations that read it (each operation listed once per value, in
    /// arena order).
    pub fn consumers(&self) -> Vec<Vec<OpId>> {
        let mut users: Vec<Vec<OpId>> = vec![Vec::new(); self.keys.len()];
        for (i, node) in self.ops.iter().enumerate() {
            let op = OpId(i as u32);
            for r in self.op_inputs_of(node) {
                if let ValueRef::Local(v) = *r {
                    let list = &mut users[v.index()];
                    if list.last() != Some(&op) {
                        list.push(op);
                    }
                }
            }
        }
        users
    }
}

impl<Op: Clone + StableHash> Graph<Op> {
    /// Dead-code elimination: a graph with all of this graph's inputs (same order and keys),
    /// the operations that `outputs` depend on, and `outputs` as its outputs. Parents no kept
    /// operation reads are dropped. `g.prune_to(g.outputs())` has `g`'s fingerprint.
    pub fn prune_to(&self, outputs: &[ValueId]) -> Result<Extracted<Op>, GraphError> {
        let reach = self.ancestors(outputs)?;
        let inputs: Vec<ValueId> = self.inputs.clone();
        self.rebuild(&reach.ops, &inputs, outputs)
    }

    /// The subgraph that computes `values`: the operations they depend on, the graph inputs
    /// they depend on (in their original order, with their keys) as its inputs, and `values`
    /// as its outputs.
    pub fn extract_subgraph(&self, values: &[ValueId]) -> Result<Extracted<Op>, GraphError> {
        let reach = self.ancestors(values)?;
        let inputs: Vec<ValueId> = self
            .inputs
            .iter()
            .copied()
            .filter(|v| reach.values[v.index()])
            .collect();
        self.rebuild(&reach.ops, &inputs, values)
    }

    fn rebuild(
        &self,
        keep_op: &[bool],
        inputs: &[ValueId],
        outputs: &[ValueId],
    ) -> Result<Extracted<Op>, GraphError> {
        let mut keep_value = vec![false; self.keys.len()];
        for &v in inputs {
            keep_value[v.index()] = true;
        }
        let mut parent_used = vec![false; self.parents.len()];
        let mut n_kept_ops = 0;
        for (i, node) in self.ops.iter().enumerate() {
            if !keep_op[i] {
                continue;
            }
            n_kept_ops += 1;
            for &v in &self.op_outputs[node.outputs.0 as usize..node.outputs.1 as usize] {
                keep_value[v.index()] = true;
            }
            for r in self.op_inputs_of(node) {
                if let ValueRef::Parent { parent, .. } = *r {
                    parent_used[parent.index()] = true;
                }
            }
        }

        let mut b = GraphBuilder::with_capacity(n_kept_ops, self.keys.len());
        let mut value_map = vec![None; self.keys.len()];
        for (i, keep) in keep_value.iter().enumerate() {
            if *keep {
                value_map[i] = Some(b.add_value());
            }
        }
        let mut parent_map: Vec<Option<ParentId>> = vec![None; self.parents.len()];
        for (i, used) in parent_used.iter().enumerate() {
            if *used {
                parent_map[i] = Some(b.add_parent(self.parents[i].clone()));
            }
        }
        let missing = ValueId(u32::MAX);
        let map_v = |v: ValueId| value_map[v.index()].unwrap_or(missing);
        for &v in inputs {
            if let ValueKey::Input(key) = self.key(v) {
                b.set_input(map_v(v), key);
            }
        }
        let mut op_map = vec![None; self.ops.len()];
        let mut operands = Vec::new();
        let mut outs = Vec::new();
        for (i, node) in self.ops.iter().enumerate() {
            if !keep_op[i] {
                continue;
            }
            operands.clear();
            operands.extend(self.op_inputs_of(node).iter().map(|r| match *r {
                ValueRef::Local(v) => ValueRef::Local(map_v(v)),
                ValueRef::Parent { parent, value } => ValueRef::Parent {
                    parent: parent_map[parent.index()].unwrap_or(ParentId(u32::MAX)),
                    value,
                },
            }));
            outs.clear();
            outs.extend(
                self.op_outputs[node.outputs.0 as usize..node.outputs.1 as usize]
                    .iter()
                    .map(|&v| map_v(v)),
            );
            op_map[i] = Some(b.add_op_with_outputs(
                node.payload.clone(),
                &operands,
                &outs,
                self.role_of(node).clone(),
            ));
        }
        let new_outputs: Vec<ValueId> = outputs.iter().map(|&v| map_v(v)).collect();
        b.set_outputs(&new_outputs);
        let graph = b.build()?;
        Ok(Extracted {
            graph,
            value_map,
            op_map,
        })
    }
}
