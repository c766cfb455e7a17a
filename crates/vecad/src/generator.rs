//! The bench graph generator: seeded pseudo-random primal graphs for tests and benchmarks.

use graph_core::{Graph, GraphBuilder, Role};
use rand_xoshiro::SplitMix64;
use rand_xoshiro::rand_core::{Rng, SeedableRng};

use crate::{VecAdError, VecOp};

/// A deterministic pseudo-random primal graph of about `n_ops` operations (all live) over two
/// inputs of the same length, with one scalar output (`sum` of the last value), for tests,
/// benchmarks and examples. Each operation reads the previous value and, for binary ones, a
/// recent earlier value. Every `exp` reads a `sin` and `sin`/`cos` bound their results, but
/// runs of products (and sums) grow, so derivatives can be large (thousands to millions).
/// Each seed draws its own pseudo-random sequence (the workspace's SplitMix64), so different
/// seeds give different graphs except by rare coincidence of the drawn operations.
///
/// # Errors
/// None in practice; graph-core validation errors are passed on.
pub fn chain_graph(n_ops: usize, seed: u64) -> Result<Graph<VecOp>, VecAdError> {
    let mut b = GraphBuilder::with_capacity(n_ops + 1, n_ops + 3);
    let x = b.add_input(0);
    let y = b.add_input(1);
    let mut live = vec![x, y];
    // SplitMix64: every seed (0 included) starts its own stream, and the first output is a
    // bijection of the seed, so distinct seeds never share a sequence. (An xorshift state of
    // `seed | 1` made seeds 2 and 3 give the same graph.)
    let mut rng = SplitMix64::seed_from_u64(seed);
    let mut last = x;
    while b.num_ops() + 1 < n_ops.max(2) {
        let r = rng.next_u64();
        // Every operation reads the previous value, so all of them are live.
        let a = last;
        let c = live[(r as usize >> 24) % live.len()];
        let z = match r % 6 {
            0 => {
                b.add_op1(VecOp::Add, &[a.into(), c.into()], Role::Primary)
                    .1
            }
            1 => {
                b.add_op1(VecOp::Mul, &[a.into(), c.into()], Role::Primary)
                    .1
            }
            2 => b.add_op1(VecOp::Neg, &[a.into()], Role::Primary).1,
            3 => b.add_op1(VecOp::Cos, &[a.into()], Role::Primary).1,
            4 => {
                let (_, s) = b.add_op1(VecOp::Sin, &[a.into()], Role::Primary);
                b.add_op1(VecOp::Exp, &[s.into()], Role::Primary).1
            }
            _ => b.add_op1(VecOp::Sin, &[a.into()], Role::Primary).1,
        };
        // Keep a sliding window of recent values so the graph stays connected and bounded.
        if live.len() >= 8 {
            live.remove(2);
        }
        live.push(z);
        last = z;
    }
    let (_, out) = b.add_op1(VecOp::Sum, &[last.into()], Role::Primary);
    b.set_outputs(&[out]);
    Ok(b.build()?)
}
