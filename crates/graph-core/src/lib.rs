//! graph-core: a computation graph of values and operations with stable, canonical fingerprints.
//!
//! [`Graph<Op>`] is the graph that AD engines, compilers and trace analysis share: an arena of
//! values and operations (`u32` ids), ordered inputs and outputs, and parent graphs shared
//! through `Arc`. [`GraphBuilder`] validates it (dangling references, values produced twice,
//! cycles, missing outputs) with typed [`GraphError`]s.
//!
//! Every graph carries a 128-bit [`Fingerprint`], computed once at build time from the
//! canonical byte encoding specified in `docs/fingerprint.md` (version
//! [`FINGERPRINT_VERSION`]) and hashed with XXH3-128. It does not depend on how values and
//! operations are numbered, and parents enter through their own cached fingerprint.
//! [`structural_eq`] confirms equality exactly in one linear pass. Operation payloads provide
//! their bytes through [`StableHash`].
//!
//! Engines with their own graph representation implement [`GraphView`] and wrap their graphs
//! in a [`CanonicalGraph`]: the same fingerprints, per-value hashes and exact equality, without
//! building a [`Graph`].
//!
//! All traversals are iterative; a graph of millions of operations builds, fingerprints,
//! compares and drops without deep recursion.
//!
//! ```
//! use graph_core::{structural_eq, GraphBuilder, Role};
//!
//! // The same structure, numbered differently.
//! let mut a = GraphBuilder::<&'static str>::new();
//! let x = a.add_input(0);
//! let (_, s) = a.add_op1("sin", &[x.into()], Role::Primary);
//! let (_, c) = a.add_op1("cos", &[x.into()], Role::Primary);
//! a.set_outputs(&[s, c]);
//! let a = a.build()?;
//!
//! let mut b = GraphBuilder::<&'static str>::new();
//! let x = b.add_input(0);
//! let (_, c) = b.add_op1("cos", &[x.into()], Role::Primary);
//! let (_, s) = b.add_op1("sin", &[x.into()], Role::Primary);
//! b.set_outputs(&[s, c]);
//! let b = b.build()?;
//!
//! assert_eq!(a.fingerprint(), b.fingerprint());
//! assert!(structural_eq(&a, &b));
//! # Ok::<(), graph_core::GraphError>(())
//! ```

mod builder;
mod canon;
mod error;
mod graph;
mod hash;
mod identity;
mod ids;
mod traverse;
mod view;

pub use builder::GraphBuilder;
pub use canon::{FINGERPRINT_DOMAIN, FINGERPRINT_VERSION, structural_eq};
pub use error::GraphError;
pub use graph::{Graph, OpView, Role, ValueKey, ValueRef};
pub use hash::{
    Fingerprint, StableHash, StableHasher, UNORDERED_DOMAIN, UNORDERED_VERSION,
    UnorderedFingerprint,
};
pub use ids::{OpId, ParentId, ValueId};
pub use traverse::{Extracted, Reach};
pub use view::{Canonical, CanonicalGraph, GraphView, NodeValue, Operand, ValueHashes};
