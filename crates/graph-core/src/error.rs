//! `GraphError`: the typed errors of graph building and graph queries.
//!
//! Each names the offending id.

use crate::ids::{OpId, ParentId, ValueId};

/// Why a graph could not be built or a query could not be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// An operation reads a local value that does not exist.
    #[error("{op} reads {value}, which does not exist")]
    DanglingInput {
        /// The reading operation.
        op: OpId,
        /// The missing value.
        value: ValueId,
    },
    /// An operation reads from a parent graph that was never added.
    #[error("{op} reads from parent {parent}, which does not exist")]
    DanglingParent {
        /// The reading operation.
        op: OpId,
        /// The missing parent.
        parent: ParentId,
    },
    /// An operation reads a value that its parent graph does not have.
    #[error("{op} reads {value} of parent {parent}, which does not exist there")]
    DanglingParentValue {
        /// The reading operation.
        op: OpId,
        /// The parent.
        parent: ParentId,
        /// The missing value.
        value: ValueId,
    },
    /// An operation reads a parent value that is neither an input of the parent nor computed
    /// by an operation the parent's outputs depend on, so it has no canonical identity.
    #[error(
        "{op} reads {value} of parent {parent}, which is dead code there (not an input, no output depends on it)"
    )]
    ParentValueNotLive {
        /// The reading operation.
        op: OpId,
        /// The parent.
        parent: ParentId,
        /// The dead parent value.
        value: ValueId,
    },
    /// An operation is declared to produce a value that does not exist.
    #[error("{op} produces {value}, which does not exist")]
    DanglingOpOutput {
        /// The producing operation.
        op: OpId,
        /// The missing value.
        value: ValueId,
    },
    /// Two operations produce the same value.
    #[error("{value} is produced twice, by {first} and by {second}")]
    ProducedTwice {
        /// The value.
        value: ValueId,
        /// The first producer.
        first: OpId,
        /// The second producer.
        second: OpId,
    },
    /// A graph input is also produced by an operation.
    #[error("{value} is a graph input and is also produced by {op}")]
    InputProduced {
        /// The value.
        value: ValueId,
        /// The producing operation.
        op: OpId,
    },
    /// A value is declared an input twice.
    #[error("{value} is declared a graph input twice")]
    DuplicateInput {
        /// The value.
        value: ValueId,
    },
    /// A value is declared an input but does not exist.
    #[error("input {value} does not exist")]
    DanglingInputDecl {
        /// The missing value.
        value: ValueId,
    },
    /// A value is neither a graph input nor produced by any operation.
    #[error("{value} is neither a graph input nor produced by any operation")]
    Unproduced {
        /// The value.
        value: ValueId,
    },
    /// The operations form a cycle; `op` lies on it.
    #[error("the operations form a cycle through {op}")]
    Cycle {
        /// An operation on the cycle.
        op: OpId,
    },
    /// A graph output names a value that does not exist.
    #[error("graph output {value} does not exist")]
    DanglingOutput {
        /// The missing value.
        value: ValueId,
    },
    /// A linearized operation's active-input mask does not have one entry per input.
    #[error("{op} has {inputs} inputs but its active mask has {mask} entries")]
    MaskArity {
        /// The operation.
        op: OpId,
        /// Its number of inputs.
        inputs: usize,
        /// The mask's length.
        mask: usize,
    },
    /// More values, operations or parents than a `u32` id can name.
    #[error("too many {what} for u32 ids")]
    TooMany {
        /// `"values"`, `"operations"`, `"parents"` or (graph views) `"nodes"`.
        what: &'static str,
    },
    /// A query names a value that this graph does not have.
    #[error("{value} does not exist in this graph")]
    UnknownValue {
        /// The missing value.
        value: ValueId,
    },
    /// Operand `operand` of node `node` of a graph view names a value that does not exist.
    #[error("node {node}'s operand {operand} names a value that does not exist")]
    ViewOperand {
        /// The node.
        node: u32,
        /// The operand's position.
        operand: u32,
    },
    /// Operand `operand` of node `node` of a graph view reads a parent that does not exist,
    /// or a parent value that does not exist or is not live there.
    #[error(
        "node {node}'s operand {operand} reads a parent value that does not exist or is not live"
    )]
    ViewParentValue {
        /// The node.
        node: u32,
        /// The operand's position.
        operand: u32,
    },
    /// A linearized node of a graph view has an active mask of the wrong length.
    #[error("node {node} has {operands} operands but its active mask has {mask} entries")]
    ViewMaskArity {
        /// The node.
        node: u32,
        /// Its number of operands.
        operands: usize,
        /// The mask's length.
        mask: usize,
    },
    /// Graph output `position` of a graph view names a value that does not exist.
    #[error("graph output {position} names a value that does not exist")]
    ViewOutput {
        /// The output's position.
        position: usize,
    },
    /// The nodes of a graph view form a cycle; `node` lies on it.
    #[error("the nodes form a cycle through node {node}")]
    ViewCycle {
        /// A node on the cycle.
        node: u32,
    },
}
