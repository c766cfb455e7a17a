//! The vector AD transform: linearize and transpose checked against finite differences.

use std::sync::Arc;

use graph_core::{Graph, GraphBuilder, Role};
use proptest::prelude::*;
use rand_xoshiro::SplitMix64;
use rand_xoshiro::rand_core::{Rng, SeedableRng};
use vecad::{VecAdError, VecOp};

/// f(x, y) = [ broadcast(sum(x*y), x) * exp(sin x) - cos y,  sum(x),  zeros_like(x) ].
fn mixed_graph() -> Graph<VecOp> {
    let mut b = GraphBuilder::new();
    let x = b.add_input(10);
    let y = b.add_input(20);
    let p = Role::Primary;
    let (_, xy) = b.add_op1(VecOp::Mul, &[x.into(), y.into()], p.clone());
    let (_, s) = b.add_op1(VecOp::Sum, &[xy.into()], p.clone());
    let (_, bc) = b.add_op1(VecOp::Broadcast, &[s.into(), x.into()], p.clone());
    let (_, sx) = b.add_op1(VecOp::Sin, &[x.into()], p.clone());
    let (_, e) = b.add_op1(VecOp::Exp, &[sx.into()], p.clone());
    let (_, m) = b.add_op1(VecOp::Mul, &[bc.into(), e.into()], p.clone());
    let (_, cy) = b.add_op1(VecOp::Cos, &[y.into()], p.clone());
    let (_, ncy) = b.add_op1(VecOp::Neg, &[cy.into()], p.clone());
    let (_, out0) = b.add_op1(VecOp::Add, &[m.into(), ncy.into()], p.clone());
    let (_, out1) = b.add_op1(VecOp::Sum, &[x.into()], p.clone());
    let (_, out2) = b.add_op1(VecOp::ZerosLike, &[x.into()], p);
    b.set_outputs(&[out0, out1, out2]);
    b.build().unwrap()
}

fn eval_outputs(g: &Graph<VecOp>, x: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let xs: Vec<&[f64]> = x.iter().map(Vec::as_slice).collect();
    let e = vecad::eval(g, &xs, &[]).unwrap();
    e.outputs().into_iter().map(<[f64]>::to_vec).collect()
}

fn dot(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(u, v)| u.iter().zip(v).map(|(p, q)| p * q).sum::<f64>())
        .sum()
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
}

/// The outputs of one evaluation, by output.
type Outputs = Vec<Vec<f64>>;

/// Central-difference steps, coarse to fine.
const FD_STEPS: [f64; 6] = [1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10];

/// Checks a derivative against central differences at [`FD_STEPS`]: it passes when one of
/// them agrees with it. Random chains (products of products, sines of those) can be so
/// curved that no step is both past the O(h²) truncation error and above rounding (seed
/// 5380379193758162440 with 32 operations, d/dx0[1] at x0 = [0, 1.1757.., 0]: the JVP is
/// -23912.92; central differences give -23396.99 at h = 1e-5, -23907.74 at 1e-6, -23912.87
/// at 1e-7, converging to it, so one fixed step of 1e-6 failed a correct derivative). Panics
/// when the two finest differences agree with each other but not with `value` (the
/// derivative is wrong); returns false, checking nothing, when they do not agree with each
/// other either (finite differences have not converged there).
fn check_fd(what: &str, value: f64, fds: &[f64]) -> bool {
    if fds.iter().any(|&fd| close(value, fd, 1e-5)) {
        return true;
    }
    let converged = fds
        .windows(2)
        .last()
        .is_some_and(|w| close(w[0], w[1], 1e-5));
    assert!(
        !converged,
        "{what}: {value} vs central differences {fds:?} (steps {FD_STEPS:?})"
    );
    false
}

/// Checks JVP against central differences and VJP against the JVP (⟨ct, J dx⟩ =
/// ⟨Jᵀ ct, dx⟩) and, per input element, against central differences of ⟨ct, f⟩ (see
/// [`check_fd`]). Returns how many derivatives finite differences could not check.
fn check_derivatives(g: Graph<VecOp>, x: Vec<Vec<f64>>, dx: Vec<Vec<f64>>, seed: u64) -> usize {
    let g = Arc::new(g);
    let slots: Vec<u32> = (0..g.outputs().len() as u32).collect();
    let lin = vecad::linearize(&g, &slots).unwrap();
    let vjp = vecad::transpose(&lin).unwrap();
    let xs: Vec<&[f64]> = x.iter().map(Vec::as_slice).collect();
    let dxs: Vec<&[f64]> = dx.iter().map(Vec::as_slice).collect();
    let jvp = vecad::eval_jvp(&g, &lin, &xs, &dxs).unwrap();

    let shifted = |h: f64| -> Vec<Vec<f64>> {
        let moved: Vec<Vec<f64>> = x
            .iter()
            .zip(&dx)
            .map(|(a, d)| a.iter().zip(d).map(|(p, q)| p + h * q).collect())
            .collect();
        eval_outputs(&g, &moved)
    };
    let fd_steps: Vec<(Outputs, Outputs)> = FD_STEPS
        .iter()
        .map(|&h| (shifted(h), shifted(-h)))
        .collect();
    let mut unchecked = 0;
    for (o, jo) in jvp.iter().enumerate() {
        for (i, &ji) in jo.iter().enumerate() {
            let fds: Vec<f64> = FD_STEPS
                .iter()
                .zip(&fd_steps)
                .map(|(h, (p, m))| (p[o][i] - m[o][i]) / (2.0 * h))
                .collect();
            if !check_fd(&format!("jvp out {o}[{i}]"), ji, &fds) {
                unchecked += 1;
            }
        }
    }

    // Output cotangents: deterministic, from the seed.
    let outs = eval_outputs(&g, &x);
    let mut rng = SplitMix64::seed_from_u64(seed);
    let ct: Vec<Vec<f64>> = outs
        .iter()
        .map(|o| {
            o.iter()
                .map(|_| ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0)
                .collect()
        })
        .collect();
    let cts: Vec<&[f64]> = ct.iter().map(Vec::as_slice).collect();
    let grad = vecad::eval_vjp(&g, &vjp, &xs, &cts).unwrap();
    assert_eq!(grad.len(), x.len());
    let lhs = dot(&ct, &jvp);
    let rhs = dot(&grad, &dx);
    assert!(
        close(lhs, rhs, 1e-9),
        "<ct, J dx> = {lhs} but <J^T ct, dx> = {rhs}"
    );
    for (k, xk) in x.iter().enumerate() {
        for i in 0..xk.len() {
            let bump = |delta: f64| {
                let mut moved = x.clone();
                moved[k][i] += delta;
                dot(&ct, &eval_outputs(&g, &moved))
            };
            let fds: Vec<f64> = FD_STEPS
                .iter()
                .map(|&h| (bump(h) - bump(-h)) / (2.0 * h))
                .collect();
            if !check_fd(&format!("vjp x{k}[{i}]"), grad[k][i], &fds) {
                unchecked += 1;
            }
        }
    }
    unchecked
}

#[test]
fn mixed_graph_matches_finite_differences() {
    let x = vec![vec![0.3, -0.7, 1.1], vec![0.5, 0.2, -0.4]];
    let dx = vec![vec![0.9, -0.1, 0.4], vec![-0.6, 0.8, 0.3]];
    assert_eq!(check_derivatives(mixed_graph(), x, dx, 7), 0);
}

#[test]
fn known_gradient_of_sum_sin() {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let (_, s) = b.add_op1(VecOp::Sin, &[x.into()], Role::Primary);
    let (_, y) = b.add_op1(VecOp::Sum, &[s.into()], Role::Primary);
    b.set_outputs(&[y]);
    let g = Arc::new(b.build().unwrap());
    let t = vecad::vjp(&g, &[0]).unwrap();
    let x0 = [0.0, 0.5, 2.0];
    let grad = vecad::eval_vjp(&g, &t, &[&x0], &[&[2.0]]).unwrap();
    for (gi, xi) in grad[0].iter().zip(x0) {
        assert!((gi - 2.0 * xi.cos()).abs() < 1e-12);
    }
}

#[test]
fn an_input_nothing_depends_on_gets_zero_cotangent() {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let _unused = b.add_input(1);
    let (_, y) = b.add_op1(VecOp::Exp, &[x.into()], Role::Primary);
    b.set_outputs(&[y]);
    let g = Arc::new(b.build().unwrap());
    let t = vecad::vjp(&g, &[0]).unwrap();
    let grad = vecad::eval_vjp(&g, &t, &[&[1.0, 2.0], &[5.0, 6.0, 7.0]], &[&[1.0, 1.0]]).unwrap();
    assert_eq!(grad[1], vec![0.0; 3]);
    assert!((grad[0][1] - 2.0f64.exp()).abs() < 1e-12);
}

#[test]
fn linear_graph_ops_are_linearized_and_transposed_ops_transposed() {
    let g = Arc::new(mixed_graph());
    let lin = vecad::linearize(&g, &[0, 1]).unwrap();
    assert_eq!(lin.tangent_inputs.len(), 2);
    assert_eq!(lin.tangent_outputs.len(), 2);
    assert!(
        lin.graph
            .ops()
            .all(|op| matches!(op.role(), Role::Linearized { .. }))
    );
    let t = vecad::transpose(&lin).unwrap();
    assert!(t.transposed.ops().all(|op| *op.role() == Role::Transposed));
    assert_eq!(t.transposed.inputs().len(), 2);
    assert_eq!(t.transposed.outputs().len(), 2);
    // Rebuilding gives structurally equal transforms with equal fingerprints.
    let again = vecad::vjp(&g, &[0, 1]).unwrap();
    assert_eq!(again.transposed.fingerprint(), t.transposed.fingerprint());
    assert!(graph_core::structural_eq(&again.transposed, &t.transposed));
}

#[test]
fn bad_inputs_are_typed_errors() {
    let g = Arc::new(mixed_graph());
    assert!(matches!(
        vecad::eval(&g, &[&[1.0]], &[]),
        Err(VecAdError::InputCount {
            expected: 2,
            got: 1
        })
    ));
    assert!(matches!(
        vecad::eval(&g, &[&[1.0, 2.0], &[1.0]], &[]),
        Err(VecAdError::Length { .. })
    ));
    assert!(matches!(
        vecad::linearize(&g, &[9]),
        Err(VecAdError::Missing { .. })
    ));
    // A primal graph is not a linear graph.
    let lin = ad_cache::LinearizedGraph {
        graph: mixed_graph(),
        tangent_inputs: vec![],
        tangent_outputs: vec![],
    };
    assert!(matches!(
        vecad::transpose(&lin),
        Err(VecAdError::NotLinearized)
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_chains_match_finite_differences(
        seed in 1u64..u64::MAX,
        n_ops in 2usize..40,
        x in proptest::collection::vec(-1.5f64..1.5, 6),
        dx in proptest::collection::vec(-1.0f64..1.0, 6),
    ) {
        let g = vecad::chain_graph(n_ops, seed).unwrap();
        // Derivatives that finite differences cannot check (see `check_fd`) are still
        // covered by the exact JVP/VJP identity.
        let _unchecked = check_derivatives(
            g,
            vec![x[..3].to_vec(), x[3..].to_vec()],
            vec![dx[..3].to_vec(), dx[3..].to_vec()],
            seed,
        );
    }
}
