//! Benchmark suite `fingerprint`: graph fingerprints against a `DefaultHasher` walk.
//!
//! Ours is the canonical walk + XXH3-128; the baseline a `derive(Hash)` + `DefaultHasher`
//! walk.
//!
//! Graphs of 1k, 10k and 100k operations with mixed operation kinds and payloads (names,
//! shapes, scalars, flags; one and two inputs, one and two outputs, all three roles), most of
//! them live. Rows:
//! - `fingerprint/<n> ns_per_op`: `Graph::compute_fingerprint` (the full canonical walk and
//!   hashing that `build` does, from scratch; the numbering-independent parts of each
//!   operation's record, its mask and payload bytes, are encoded by the builder as the
//!   operation is appended, and counted in `record_build` below) per operation, against the
//!   baseline
//!   `defaulthasher_walk`: every value's key and every operation's payload, role, inputs and
//!   outputs fed through `derive(Hash)` into `std`'s `DefaultHasher` (no canonicalisation).
//! - `fingerprint/<n>_shuffled ns_per_op` (and `cpu_ns_per_op`): the same graph with its value
//!   and operation ids shuffled (declared and appended in seeded random orders, as a trace
//!   loader that sees tensors before their producers numbers them; same fingerprint), against
//!   the walk of that graph: the canonical walk then jumps around the arena, the baseline
//!   still reads it in order.
//! - `fingerprint/<n> cpu_ns_per_op`: the same two walks timed by this thread's CPU time
//!   (`/proc/thread-self/schedstat`), alternating ours and the baseline over several rounds and
//!   taking medians, so that other processes on a busy machine skew the ratio less than they
//!   skew criterion's wall-clock figures. Linux only; skipped elsewhere.
//! - `fingerprint/repeat ns`: asking a built graph for its fingerprint again.
//! - `fingerprint/build/10k ns_per_op`: `GraphBuilder::build` (validation, canonical walk,
//!   fingerprint) per operation.
//! - `fingerprint/record_build/10k ns_per_op`: recording the graph (appending every
//!   operation to a `GraphBuilder`, as an engine or a trace loader does) and `build`: the
//!   whole cost of a fingerprinted graph, per operation.
//! - `fingerprint/structural_eq/10k ns_per_op`: exact comparison of two separately built
//!   equal graphs (what a cache does to confirm a hit).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion};
use graph_core::{Graph, GraphBuilder, Role, StableHash, StableHasher, ValueId, ValueRef};
use rand_xoshiro::SplitMix64;
use rand_xoshiro::rand_core::{Rng, SeedableRng};
use tracegraph_benches::{Row, emit, emit_time, emit_time_ratio, quick};

/// A payload like an AD engine's or a trace's operation description.
#[derive(Clone, Debug, PartialEq, Hash)]
enum BOp {
    Unary { name: &'static str },
    Binary { name: &'static str },
    Reshape { shape: Vec<usize> },
    Scalar(i64),
    Matmul { transpose: bool },
    Split { parts: u32, dim: u32 },
}

impl StableHash for BOp {
    #[inline]
    fn stable_hash(&self, h: &mut StableHasher) {
        match self {
            BOp::Unary { name } => {
                h.write_tag(0);
                h.write_str(name);
            }
            BOp::Binary { name } => {
                h.write_tag(1);
                h.write_str(name);
            }
            BOp::Reshape { shape } => {
                h.write_tag(2);
                shape.stable_hash(h);
            }
            BOp::Scalar(x) => {
                h.write_tag(3);
                h.write_i64(*x);
            }
            BOp::Matmul { transpose } => {
                h.write_tag(4);
                h.write_bool(*transpose);
            }
            BOp::Split { parts, dim } => {
                h.write_tag(5);
                h.write_u32(*parts);
                h.write_u32(*dim);
            }
        }
    }
}

const UNARY: [&str; 5] = ["relu", "gelu", "exp", "neg", "sqrt"];
const BINARY: [&str; 4] = ["add", "mul", "sub", "div"];

/// A deterministic mixed graph of `n` operations over 8 inputs; the outputs are the values
/// nobody reads (so nearly everything is live).
fn mixed_graph(n: usize) -> GraphBuilder<BOp> {
    let mut rng = SplitMix64::seed_from_u64(0x9e37_79b9_7f4a_7c15);
    let mut next = move || rng.next_u64();
    let mut b = GraphBuilder::with_capacity(n, n + n / 8 + 8);
    let mut values: Vec<ValueId> = (0..8).map(|k| b.add_input(k)).collect();
    let mut read = vec![false; 8];
    for i in 0..n {
        let r = next();
        let mut pick = |r: u64| {
            let back = (r % 32) as usize + 1;
            let k = values.len().saturating_sub(back);
            read[k] = true;
            ValueRef::Local(values[k])
        };
        let a = pick(r >> 8);
        let role = match r % 10 {
            0 => Role::Transposed,
            1 => Role::Linearized {
                active: vec![true, false],
            },
            _ => Role::Primary,
        };
        let (payload, inputs, n_out, role) = match (r >> 4) % 6 {
            0 => (
                BOp::Unary {
                    name: UNARY[i % UNARY.len()],
                },
                vec![a],
                1,
                Role::Primary,
            ),
            1 => (
                BOp::Binary {
                    name: BINARY[i % BINARY.len()],
                },
                vec![a, pick(r >> 20)],
                1,
                role,
            ),
            2 => (
                BOp::Reshape {
                    shape: vec![(i % 7) + 1, 64, (r % 5) as usize + 1],
                },
                vec![a],
                1,
                Role::Primary,
            ),
            3 => (BOp::Scalar((r % 1000) as i64), vec![a], 1, Role::Primary),
            4 => (
                BOp::Matmul {
                    transpose: r & 1 == 1,
                },
                vec![a, pick(r >> 28)],
                1,
                role,
            ),
            _ => (
                BOp::Split {
                    parts: 2,
                    dim: (r % 3) as u32,
                },
                vec![a],
                2,
                Role::Primary,
            ),
        };
        let (_, outs) = b.add_op(payload, &inputs, n_out, role);
        for v in outs {
            values.push(v);
            read.push(false);
        }
    }
    let sinks: Vec<ValueId> = values
        .iter()
        .zip(&read)
        .filter(|(_, r)| !**r)
        .map(|(v, _)| *v)
        .collect();
    b.set_outputs(&sinks);
    b
}

/// The same graph with its value and operation ids shuffled (seeded): values declared in a
/// random order, operations appended in another random order (the explicit-ids style of a
/// trace loader, where tensors are seen before their producers). Same function, same
/// fingerprint; only the arena order differs.
fn shuffled(g: &Graph<BOp>, seed: u64) -> Graph<BOp> {
    let mut rng = SplitMix64::seed_from_u64(seed);
    let mut perm = |n: usize| {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            p.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        p
    };
    let value_order = perm(g.num_values());
    let op_order = perm(g.num_ops());
    let mut b = GraphBuilder::with_capacity(g.num_ops(), g.num_values());
    // `new_id[old]`: the value declared at position `k` of the shuffled order is old value
    // `value_order[k]`.
    let mut new_id = vec![ValueId(0); g.num_values()];
    for &old in &value_order {
        new_id[old] = b.add_value();
    }
    for &v in g.inputs() {
        if let Some(graph_core::ValueKey::Input(key)) = g.value_key(v) {
            b.set_input(new_id[v.index()], key);
        }
    }
    let ops: Vec<_> = g.ops().collect();
    for &i in &op_order {
        let op = ops[i];
        let inputs: Vec<ValueRef> = op
            .inputs()
            .iter()
            .map(|r| match *r {
                ValueRef::Local(v) => ValueRef::Local(new_id[v.index()]),
                other @ ValueRef::Parent { .. } => other,
            })
            .collect();
        let outputs: Vec<ValueId> = op.outputs().iter().map(|v| new_id[v.index()]).collect();
        b.add_op_with_outputs(op.payload().clone(), &inputs, &outputs, op.role().clone());
    }
    let outputs: Vec<ValueId> = g.outputs().iter().map(|v| new_id[v.index()]).collect();
    b.set_outputs(&outputs);
    b.build().expect("a renumbered valid graph is valid")
}

/// The baseline: a walk feeding `derive(Hash)` of every value and operation into
/// `DefaultHasher` (no canonical numbering, not stable across Rust releases).
fn defaulthasher_walk(g: &Graph<BOp>) -> u64 {
    let mut h = DefaultHasher::new();
    for v in g.value_ids() {
        g.value_key(v).hash(&mut h);
    }
    for op in g.ops() {
        op.payload().hash(&mut h);
        op.role().hash(&mut h);
        op.inputs().hash(&mut h);
        op.outputs().hash(&mut h);
    }
    g.inputs().hash(&mut h);
    g.outputs().hash(&mut h);
    h.finish()
}

/// This thread's CPU time in nanoseconds (Linux), if known.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Median CPU ns per operation of ours and of the baseline, alternating rounds.
fn cpu_ns_per_op(g: &Graph<BOp>, n: usize, rounds: usize) -> Option<(f64, f64)> {
    let iters = (2_000_000 / n).max(1);
    let time = |f: &dyn Fn()| -> Option<f64> {
        let t0 = thread_cpu_ns()?;
        for _ in 0..iters {
            f();
        }
        let t1 = thread_cpu_ns()?;
        Some((t1 - t0) as f64 / (iters * n) as f64)
    };
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        ours.push(time(&|| {
            black_box(black_box(g).compute_fingerprint());
        })?);
        base.push(time(&|| {
            black_box(defaulthasher_walk(black_box(g)));
        })?);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Some((median(&mut ours), median(&mut base)))
}

fn label(n: usize) -> String {
    format!("{}k", n / 1000)
}

fn main() {
    let mut c: Criterion = tracegraph_benches::criterion();
    let sizes = [1_000usize, 10_000, 100_000];
    let graphs: Vec<(usize, Graph<BOp>)> = sizes
        .iter()
        .map(|&n| {
            let g = mixed_graph(n).build().expect("benchmark graph is valid");
            let live = g.canonical_ops().len();
            eprintln!(
                "fingerprint: {n} ops, {live} live, {} values",
                g.num_values()
            );
            (n, g)
        })
        .collect();
    let shuffled_graphs: Vec<(usize, Graph<BOp>)> = graphs
        .iter()
        .map(|(n, g)| {
            let s = shuffled(g, 0x5eed ^ *n as u64);
            assert_eq!(
                s.fingerprint(),
                g.fingerprint(),
                "renumbering kept the function"
            );
            (*n, s)
        })
        .collect();

    {
        let mut group = c.benchmark_group("fingerprint");
        for (n, g) in &graphs {
            group.bench_with_input(BenchmarkId::new("compute", label(*n)), g, |b, g| {
                b.iter(|| black_box(g).compute_fingerprint());
            });
            group.bench_with_input(
                BenchmarkId::new("defaulthasher_walk", label(*n)),
                g,
                |b, g| b.iter(|| defaulthasher_walk(black_box(g))),
            );
        }
        for (n, g) in &shuffled_graphs {
            let l = format!("{}_shuffled", label(*n));
            group.bench_with_input(BenchmarkId::new("compute", &l), g, |b, g| {
                b.iter(|| black_box(g).compute_fingerprint());
            });
            group.bench_with_input(BenchmarkId::new("defaulthasher_walk", &l), g, |b, g| {
                b.iter(|| defaulthasher_walk(black_box(g)));
            });
        }
        let g10 = &graphs[1].1;
        group.bench_function("repeat", |b| b.iter(|| black_box(g10).fingerprint()));
        group.bench_function(BenchmarkId::new("build", "10k"), |b| {
            b.iter_batched(
                || mixed_graph(10_000),
                graph_core::GraphBuilder::build,
                BatchSize::LargeInput,
            );
        });
        group.bench_function(BenchmarkId::new("record_build", "10k"), |b| {
            b.iter(|| mixed_graph(black_box(10_000)).build());
        });
        let other = mixed_graph(10_000).build().expect("valid");
        group.bench_function(BenchmarkId::new("structural_eq", "10k"), |b| {
            b.iter(|| graph_core::structural_eq(black_box(g10), black_box(&other)));
        });
        group.finish();
    }
    c.final_summary();

    let labelled = graphs
        .iter()
        .map(|(n, g)| (*n, label(*n), g))
        .chain(
            shuffled_graphs
                .iter()
                .map(|(n, g)| (*n, format!("{}_shuffled", label(*n)), g)),
        )
        .collect::<Vec<_>>();
    for (n, l, _) in &labelled {
        emit_time_ratio(
            &format!("fingerprint/{l}"),
            "ns_per_op",
            &format!("fingerprint/compute/{l}"),
            "defaulthasher_walk",
            &format!("fingerprint/defaulthasher_walk/{l}"),
            *n as f64,
        );
    }
    let rounds = if quick() { 5 } else { 15 };
    for (n, l, g) in &labelled {
        match cpu_ns_per_op(g, *n, rounds) {
            Some((ours, base)) => emit(
                Row::new(&format!("fingerprint/{l}"), "cpu_ns_per_op", ours, "ns")
                    .vs("defaulthasher_walk", base),
            ),
            None => {
                eprintln!("bench-row: fingerprint/{l} cpu_ns_per_op skipped (no thread CPU clock)");
            }
        }
    }
    emit_time("fingerprint/repeat", "ns", "fingerprint/repeat", 1.0);
    emit_time(
        "fingerprint/build/10k",
        "ns_per_op",
        "fingerprint/build/10k",
        10_000.0,
    );
    emit_time(
        "fingerprint/record_build/10k",
        "ns_per_op",
        "fingerprint/record_build/10k",
        10_000.0,
    );
    emit_time(
        "fingerprint/structural_eq/10k",
        "ns_per_op",
        "fingerprint/structural_eq/10k",
        10_000.0,
    );
}
