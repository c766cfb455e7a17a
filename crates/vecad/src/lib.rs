//! vecad: a reference AD engine on `f64` vectors over graph-core, for ad-cache's tests.
//!
//! The engine (evaluation, [`linearize`], [`transpose`]) is in one module and the bench graph
//! generator ([`chain_graph`]) in another; ad-cache's tests, example and benches use both.
//!
//! This is a real (if tiny) AD transform to cache; it is not published. It produces
//! ad-cache's cached value types ([`LinearizedGraph`](ad_cache::LinearizedGraph),
//! [`VjpTransform`](ad_cache::VjpTransform)). Values are `f64` vectors; operations are
//! [`VecOp`]s: elementwise `Add`, `Mul`, `Neg`, `Sin`, `Cos`, `Exp`, the reduction `Sum`
//! (n → 1), `Broadcast` (a length-1 value to the length of a second, shape-only operand) and
//! `ZerosLike` (zeros of an operand's length, for absent tangents).
//!
//! * [`linearize`] builds, from a primal graph, a **residual graph** (the coefficients the
//!   derivative needs, e.g. `cos x` for `sin x`) and a **linear (JVP) graph** mapping input
//!   tangents to output tangents. Its operations have role
//!   [`Role::Linearized`](graph_core::Role::Linearized), active on tangent operands only;
//!   non-tangent operands are read from the parents.
//! * [`transpose`] turns the linear graph into the **transposed (VJP) graph** mapping output
//!   cotangents to input cotangents, reading the same residuals.
//! * [`eval`] evaluates any of these graphs given its inputs and its parents' evaluations.
//!
//! Parent layout (relied on by [`transpose`] and [`vjp`]): the residual graph's parents are
//! `[primal, primal's parents…]`; the linear and transposed graphs' parents are
//! `[primal, residual, primal's parents…]`. Values the primal reads from its own parents are
//! constants for differentiation; the derivative is taken with respect to the primal's inputs.
//!
//! ```
//! use std::sync::Arc;
//! use vecad::VecOp;
//! use graph_core::{GraphBuilder, Role};
//!
//! // f(x) = sum(sin(x))
//! let mut b = GraphBuilder::new();
//! let x = b.add_input(0);
//! let (_, s) = b.add_op1(VecOp::Sin, &[x.into()], Role::Primary);
//! let (_, y) = b.add_op1(VecOp::Sum, &[s.into()], Role::Primary);
//! b.set_outputs(&[y]);
//! let f = Arc::new(b.build()?);
//!
//! let t = vecad::vjp(&f, &[0])?;
//! let x0 = [0.0, 1.0];
//! let grad = vecad::eval_vjp(&f, &t, &[&x0], &[&[1.0]])?;
//! assert!((grad[0][1] - 1.0f64.cos()).abs() < 1e-12); // d/dx sum(sin x) = cos x
//! # Ok::<(), vecad::VecAdError>(())
//! ```

mod engine;
mod generator;

pub use engine::{
    Evaluation, VecAdError, VecOp, eval, eval_jvp, eval_vjp, linearize, transpose, vjp,
};
pub use generator::chain_graph;
