//! The AD engine: `VecOp`, evaluation, `linearize`, `transpose` and the VJP helpers.

use std::sync::Arc;

use graph_core::{
    Fingerprint, Graph, GraphBuilder, GraphError, OpId, ParentId, Role, StableHash, StableHasher,
    ValueId, ValueRef,
};

use ad_cache::{HeapMeter, LinearizedGraph, RetainedBytes, VjpTransform};

/// An operation on `f64` vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VecOp {
    /// `a + b`, elementwise (equal lengths).
    Add,
    /// `a * b`, elementwise (equal lengths).
    Mul,
    /// `-a`.
    Neg,
    /// `sin a`.
    Sin,
    /// `cos a`.
    Cos,
    /// `exp a`.
    Exp,
    /// The sum of `a`'s elements (length 1). In linear graphs it carries a second,
    /// inactive operand (the primal operand) whose length its transpose needs; the
    /// evaluator ignores it.
    Sum,
    /// `Broadcast(s, like)`: the single element of `s` repeated to `like`'s length. Linear in
    /// `s`; `like` only gives the length (it has no derivative).
    Broadcast,
    /// `ZerosLike(a)`: zeros of `a`'s length (no derivative).
    ZerosLike,
}

impl VecOp {
    /// Stable tag of the operation in fingerprints.
    fn tag(self) -> u8 {
        match self {
            VecOp::Add => 0,
            VecOp::Mul => 1,
            VecOp::Neg => 2,
            VecOp::Sin => 3,
            VecOp::Cos => 4,
            VecOp::Exp => 5,
            VecOp::Sum => 6,
            VecOp::Broadcast => 7,
            VecOp::ZerosLike => 8,
        }
    }

    /// Operand counts accepted by the evaluator.
    fn arity_ok(self, n: usize) -> bool {
        match self {
            VecOp::Add | VecOp::Mul | VecOp::Broadcast => n == 2,
            VecOp::Neg | VecOp::Sin | VecOp::Cos | VecOp::Exp | VecOp::ZerosLike => n == 1,
            VecOp::Sum => n == 1 || n == 2,
        }
    }
}

impl StableHash for VecOp {
    fn stable_hash(&self, h: &mut StableHasher) {
        h.write_tag(self.tag());
    }
}

impl RetainedBytes for VecOp {
    const HEAP_FREE: bool = true;
    fn visit_heap<'a>(&'a self, _: &mut HeapMeter<'a>) {}
}

/// Why a graph could not be evaluated, linearized or transposed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum VecAdError {
    /// The graph being built is invalid.
    #[error("invalid graph: {0}")]
    Graph(#[from] GraphError),
    /// Wrong number of graph inputs supplied.
    #[error("the graph has {expected} inputs, {got} were given")]
    InputCount {
        /// Inputs of the graph.
        expected: usize,
        /// Inputs given.
        got: usize,
    },
    /// Wrong number of parent evaluations supplied.
    #[error("the graph has {expected} parents, {got} evaluations were given")]
    ParentCount {
        /// Parents of the graph.
        expected: usize,
        /// Evaluations given.
        got: usize,
    },
    /// A parent evaluation is of another graph.
    #[error("the evaluation given for parent {parent} is of another graph")]
    ParentMismatch {
        /// The parent.
        parent: ParentId,
    },
    /// An operation has the wrong number of operands or outputs.
    #[error("{op} ({payload:?}) has {inputs} operands and {outputs} outputs")]
    Arity {
        /// The operation.
        op: OpId,
        /// Its payload.
        payload: VecOp,
        /// Its operand count.
        inputs: usize,
        /// Its output count.
        outputs: usize,
    },
    /// Operand lengths do not fit the operation.
    #[error("{op} ({payload:?}): operand lengths {left} and {right} do not fit")]
    Length {
        /// The operation.
        op: OpId,
        /// Its payload.
        payload: VecOp,
        /// First operand length.
        left: usize,
        /// Second operand length (or the required length).
        right: usize,
    },
    /// A value needed was not computed (dead in its graph, or not evaluated).
    #[error("value {value:?} is not available")]
    Missing {
        /// The value.
        value: ValueRef,
    },
    /// An operation of a linear graph is not linear in its active operands.
    #[error("{op} is not a linear operation this transposer knows")]
    NotLinear {
        /// The operation.
        op: OpId,
    },
    /// The linear graph does not have the parent layout `linearize` produces.
    #[error("the linear graph does not read a primal and a residual graph")]
    NotLinearized,
}

/// The values of one evaluated graph, by [`ValueId`] (`None` for dead values).
///
/// A graph reading this one as a parent names values by the ids of the parent *it was built
/// with*, which may be another, structurally equal graph numbered differently (a cache hit
/// returns a transform built for an equal graph). [`eval`] therefore reads parent values by
/// their canonical index, which structurally equal graphs share.
#[derive(Debug, Clone)]
pub struct Evaluation {
    fingerprint: Fingerprint,
    values: Vec<Option<Vec<f64>>>,
    outputs: Vec<ValueId>,
    /// The value id of each canonical index of the evaluated graph.
    by_canonical: Vec<ValueId>,
}

impl Evaluation {
    /// The value `v`, if computed.
    pub fn value(&self, v: ValueId) -> Option<&[f64]> {
        self.values.get(v.index()).and_then(|x| x.as_deref())
    }

    /// The graph outputs, in order.
    pub fn outputs(&self) -> Vec<&[f64]> {
        self.outputs.iter().filter_map(|&v| self.value(v)).collect()
    }

    /// The fingerprint of the evaluated graph.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
}

fn fetch<'a>(
    g: &Graph<VecOp>,
    r: ValueRef,
    local: &'a [Option<Vec<f64>>],
    parents: &'a [&Evaluation],
) -> Result<&'a [f64], VecAdError> {
    let v = match r {
        ValueRef::Local(v) => local.get(v.index()).and_then(|x| x.as_deref()),
        // `value` is numbered in `g`'s parent; the evaluation may be of an equal graph
        // numbered differently: go through the canonical index both share.
        ValueRef::Parent { parent, value } => g
            .parent(parent)
            .and_then(|p| p.canonical_index(value))
            .and_then(|c| {
                let e = parents.get(parent.index())?;
                e.value(*e.by_canonical.get(c as usize)?)
            }),
    };
    v.ok_or(VecAdError::Missing { value: r })
}

/// Evaluates the live operations of `g` in canonical (topological) order.
///
/// `inputs[i]` is the value of `g.inputs()[i]`; `parents[p]` the evaluation of
/// `g.parents()[p]` (checked by fingerprint).
///
/// # Errors
/// Wrong input or parent counts, a parent evaluation of another graph, operand counts or
/// lengths that do not fit an operation, values that are not available.
pub fn eval(
    g: &Graph<VecOp>,
    inputs: &[&[f64]],
    parents: &[&Evaluation],
) -> Result<Evaluation, VecAdError> {
    if inputs.len() != g.inputs().len() {
        return Err(VecAdError::InputCount {
            expected: g.inputs().len(),
            got: inputs.len(),
        });
    }
    if parents.len() != g.parents().len() {
        return Err(VecAdError::ParentCount {
            expected: g.parents().len(),
            got: parents.len(),
        });
    }
    for (i, (e, p)) in parents.iter().zip(g.parents()).enumerate() {
        if e.fingerprint != p.fingerprint() {
            return Err(VecAdError::ParentMismatch {
                parent: ParentId(i as u32),
            });
        }
    }
    let mut values: Vec<Option<Vec<f64>>> = vec![None; g.num_values()];
    for (&v, x) in g.inputs().iter().zip(inputs) {
        values[v.index()] = Some(x.to_vec());
    }
    for &id in g.canonical_ops() {
        let Some(op) = g.op(id) else { continue };
        let payload = *op.payload();
        let ins = op.inputs();
        let outs = op.outputs();
        if !payload.arity_ok(ins.len()) || outs.len() != 1 {
            return Err(VecAdError::Arity {
                op: id,
                payload,
                inputs: ins.len(),
                outputs: outs.len(),
            });
        }
        let a = fetch(g, ins[0], &values, parents)?;
        let result = match payload {
            VecOp::Add | VecOp::Mul => {
                let b = fetch(g, ins[1], &values, parents)?;
                if a.len() != b.len() {
                    return Err(VecAdError::Length {
                        op: id,
                        payload,
                        left: a.len(),
                        right: b.len(),
                    });
                }
                if payload == VecOp::Add {
                    a.iter().zip(b).map(|(x, y)| x + y).collect()
                } else {
                    a.iter().zip(b).map(|(x, y)| x * y).collect()
                }
            }
            VecOp::Neg => a.iter().map(|x| -x).collect(),
            VecOp::Sin => a.iter().map(|x| x.sin()).collect(),
            VecOp::Cos => a.iter().map(|x| x.cos()).collect(),
            VecOp::Exp => a.iter().map(|x| x.exp()).collect(),
            VecOp::Sum => vec![a.iter().sum()],
            VecOp::Broadcast => {
                let like = fetch(g, ins[1], &values, parents)?;
                if a.len() != 1 {
                    return Err(VecAdError::Length {
                        op: id,
                        payload,
                        left: a.len(),
                        right: 1,
                    });
                }
                vec![a[0]; like.len()]
            }
            VecOp::ZerosLike => vec![0.0; a.len()],
        };
        values[outs[0].index()] = Some(result);
    }
    let mut by_canonical = vec![ValueId(u32::MAX); g.num_values()];
    for v in g.value_ids() {
        if let Some(c) = g.canonical_index(v) {
            by_canonical[c as usize] = v;
        }
    }
    Ok(Evaluation {
        fingerprint: g.fingerprint(),
        values,
        outputs: g.outputs().to_vec(),
        by_canonical,
    })
}

/// Checks that `op` has the operand count its payload needs and one output.
fn check_arity(g: &Graph<VecOp>, id: OpId) -> Result<(VecOp, &[ValueRef], ValueId), VecAdError> {
    let op = g.op(id).ok_or(VecAdError::NotLinear { op: id })?;
    let payload = *op.payload();
    let ins = op.inputs();
    let outs = op.outputs();
    match outs {
        [z] if payload.arity_ok(ins.len()) => Ok((payload, ins, *z)),
        _ => Err(VecAdError::Arity {
            op: id,
            payload,
            inputs: ins.len(),
            outputs: outs.len(),
        }),
    }
}

const PRIMAL: ParentId = ParentId(0);
const RESIDUAL: ParentId = ParentId(1);

/// Builds the residual and linear (JVP) graphs of `primal` for its outputs at `slots`
/// (positions in `primal.outputs()`).
///
/// The linear graph's inputs are the tangents of the primal inputs (same keys, same order);
/// its outputs are the tangents of the requested outputs (zeros where an output does not
/// depend on any input). Work and size are linear in the primal graph.
///
/// # Errors
/// A slot past the primal's outputs ([`VecAdError::Missing`]), an operation with the wrong
/// operand count, or a graph-core validation error.
pub fn linearize(
    primal: &Arc<Graph<VecOp>>,
    slots: &[u32],
) -> Result<LinearizedGraph<VecOp>, VecAdError> {
    // A primal operand seen from the residual graph (parents: primal, primal's parents).
    let lift_r = |r: ValueRef| match r {
        ValueRef::Local(v) => ValueRef::Parent {
            parent: PRIMAL,
            value: v,
        },
        ValueRef::Parent { parent, value } => ValueRef::Parent {
            parent: ParentId(parent.0 + 1),
            value,
        },
    };
    // ... and from the linear graph (parents: primal, residual, primal's parents).
    let lift = |r: ValueRef| match r {
        ValueRef::Local(v) => ValueRef::Parent {
            parent: PRIMAL,
            value: v,
        },
        ValueRef::Parent { parent, value } => ValueRef::Parent {
            parent: ParentId(parent.0 + 2),
            value,
        },
    };
    let ops = primal.canonical_ops();

    // Pass 1: the residual graph.
    let mut rb = GraphBuilder::with_capacity(ops.len(), ops.len());
    rb.add_parent(Arc::clone(primal));
    for p in primal.parents() {
        rb.add_parent(Arc::clone(p));
    }
    let mut coefficient: Vec<Option<ValueId>> = vec![None; primal.num_ops()];
    let mut residual_outputs = Vec::new();
    for &id in ops {
        let (payload, ins, _) = check_arity(primal, id)?;
        let c = match payload {
            VecOp::Sin => rb.add_op1(VecOp::Cos, &[lift_r(ins[0])], Role::Primary).1,
            VecOp::Cos => {
                let (_, s) = rb.add_op1(VecOp::Sin, &[lift_r(ins[0])], Role::Primary);
                rb.add_op1(VecOp::Neg, &[s.into()], Role::Primary).1
            }
            _ => continue,
        };
        coefficient[id.index()] = Some(c);
        residual_outputs.push(c);
    }
    // Residual values are read by position in this list: map them to output positions.
    rb.set_outputs(&residual_outputs);
    let residual = Arc::new(rb.build()?);

    // Pass 2: the linear graph.
    let mut lb = GraphBuilder::with_capacity(2 * ops.len(), 2 * ops.len());
    lb.add_parent(Arc::clone(primal));
    lb.add_parent(Arc::clone(&residual));
    for p in primal.parents() {
        lb.add_parent(Arc::clone(p));
    }
    let mut tangent: Vec<Option<ValueId>> = vec![None; primal.num_values()];
    let mut tangent_inputs = Vec::with_capacity(primal.inputs().len());
    for &x in primal.inputs() {
        let key = match primal.value_key(x) {
            Some(graph_core::ValueKey::Input(k)) => k,
            _ => 0,
        };
        let t = lb.add_input(key);
        tangent[x.index()] = Some(t);
        tangent_inputs.push(t);
    }
    let tan = |r: ValueRef, tangent: &[Option<ValueId>]| match r {
        ValueRef::Local(v) => tangent.get(v.index()).copied().flatten(),
        ValueRef::Parent { .. } => None, // constants
    };
    let lin = |active: &[bool]| Role::Linearized {
        active: active.to_vec(),
    };
    for &id in ops {
        let (payload, ins, z) = check_arity(primal, id)?;
        let t0 = tan(ins[0], &tangent);
        let tz = match payload {
            VecOp::Add => {
                let t1 = tan(ins[1], &tangent);
                match (t0, t1) {
                    (Some(a), Some(b)) => Some(
                        lb.add_op1(VecOp::Add, &[a.into(), b.into()], lin(&[true, true]))
                            .1,
                    ),
                    (a, b) => a.or(b),
                }
            }
            VecOp::Mul => {
                let t1 = tan(ins[1], &tangent);
                let left = t0.map(|a| {
                    lb.add_op1(VecOp::Mul, &[a.into(), lift(ins[1])], lin(&[true, false]))
                        .1
                });
                let right = t1.map(|b| {
                    lb.add_op1(VecOp::Mul, &[lift(ins[0]), b.into()], lin(&[false, true]))
                        .1
                });
                match (left, right) {
                    (Some(a), Some(b)) => Some(
                        lb.add_op1(VecOp::Add, &[a.into(), b.into()], lin(&[true, true]))
                            .1,
                    ),
                    (a, b) => a.or(b),
                }
            }
            VecOp::Neg => t0.map(|a| lb.add_op1(VecOp::Neg, &[a.into()], lin(&[true])).1),
            VecOp::Sin | VecOp::Cos => match (t0, coefficient[id.index()]) {
                (Some(a), Some(c)) => {
                    let c = ValueRef::Parent {
                        parent: RESIDUAL,
                        value: c,
                    };
                    Some(
                        lb.add_op1(VecOp::Mul, &[a.into(), c], lin(&[true, false]))
                            .1,
                    )
                }
                _ => None,
            },
            VecOp::Exp => t0.map(|a| {
                let e = lift(ValueRef::Local(z));
                lb.add_op1(VecOp::Mul, &[a.into(), e], lin(&[true, false]))
                    .1
            }),
            VecOp::Sum => t0.map(|a| {
                lb.add_op1(VecOp::Sum, &[a.into(), lift(ins[0])], lin(&[true, false]))
                    .1
            }),
            VecOp::Broadcast => t0.map(|a| {
                lb.add_op1(
                    VecOp::Broadcast,
                    &[a.into(), lift(ins[1])],
                    lin(&[true, false]),
                )
                .1
            }),
            VecOp::ZerosLike => None,
        };
        tangent[z.index()] = tz;
    }
    let mut tangent_outputs = Vec::with_capacity(slots.len());
    for &slot in slots {
        let Some(&v) = primal.outputs().get(slot as usize) else {
            return Err(VecAdError::Missing {
                value: ValueRef::Local(ValueId(slot)),
            });
        };
        let t = match tangent[v.index()] {
            Some(t) => t,
            None => {
                lb.add_op1(VecOp::ZerosLike, &[lift(ValueRef::Local(v))], lin(&[false]))
                    .1
            }
        };
        tangent_outputs.push(t);
    }
    lb.set_outputs(&tangent_outputs);
    Ok(LinearizedGraph {
        graph: lb.build()?,
        tangent_inputs,
        tangent_outputs,
    })
}

/// Builds the transposed (VJP) graph of a linear graph made by [`linearize`].
///
/// Its inputs are the cotangents of the linear graph's outputs (keys `0, 1, …`); its outputs
/// the cotangents of the primal inputs, in order (zeros for inputs no output depends on).
/// It has the linear graph's parents, in the same order.
///
/// # Errors
/// [`VecAdError::NotLinearized`] when the parent layout is not `linearize`'s,
/// [`VecAdError::NotLinear`] for an operation that is not linear in its active operands.
pub fn transpose(lin: &LinearizedGraph<VecOp>) -> Result<VjpTransform<VecOp>, VecAdError> {
    let l = &lin.graph;
    let (Some(primal), Some(residual)) = (l.parent(PRIMAL), l.parent(RESIDUAL)) else {
        return Err(VecAdError::NotLinearized);
    };
    if primal.inputs().len() != lin.tangent_inputs.len() {
        return Err(VecAdError::NotLinearized);
    }
    let ops = l.canonical_ops();
    let mut tb = GraphBuilder::with_capacity(2 * ops.len(), 2 * ops.len());
    for p in l.parents() {
        tb.add_parent(Arc::clone(p));
    }
    let mut ct: Vec<Option<ValueId>> = vec![None; l.num_values()];
    fn acc(tb: &mut GraphBuilder<VecOp>, ct: &mut [Option<ValueId>], v: ValueId, c: ValueId) {
        let slot = &mut ct[v.index()];
        *slot = Some(match *slot {
            None => c,
            Some(old) => {
                tb.add_op1(VecOp::Add, &[old.into(), c.into()], Role::Transposed)
                    .1
            }
        });
    }
    for (j, &out) in l.outputs().iter().enumerate() {
        let c = tb.add_input(j as u64);
        acc(&mut tb, &mut ct, out, c);
    }
    for &id in ops.iter().rev() {
        let (payload, ins, z) = check_arity(l, id)?;
        let Some(cz) = ct[z.index()] else { continue };
        let op = l.op(id).ok_or(VecAdError::NotLinear { op: id })?;
        let active: &[bool] = match op.role() {
            Role::Linearized { active } => active,
            _ => return Err(VecAdError::NotLinear { op: id }),
        };
        // The active operands must be local tangents; inactive ones must come from parents.
        let mut tangents = Vec::with_capacity(2);
        for (r, &is_active) in ins.iter().zip(active) {
            match (r, is_active) {
                (ValueRef::Local(v), true) => tangents.push(*v),
                (ValueRef::Parent { .. }, false) => {}
                _ => return Err(VecAdError::NotLinear { op: id }),
            }
        }
        let t = Role::Transposed;
        match (payload, tangents.as_slice()) {
            (VecOp::Add, [a, b]) => {
                acc(&mut tb, &mut ct, *a, cz);
                acc(&mut tb, &mut ct, *b, cz);
            }
            (VecOp::Neg, [a]) => {
                let c = tb.add_op1(VecOp::Neg, &[cz.into()], t).1;
                acc(&mut tb, &mut ct, *a, c);
            }
            (VecOp::Mul, [a]) => {
                let coeff = if active[0] { ins[1] } else { ins[0] };
                let c = tb.add_op1(VecOp::Mul, &[cz.into(), coeff], t).1;
                acc(&mut tb, &mut ct, *a, c);
            }
            (VecOp::Sum, [a]) if ins.len() == 2 => {
                let c = tb.add_op1(VecOp::Broadcast, &[cz.into(), ins[1]], t).1;
                acc(&mut tb, &mut ct, *a, c);
            }
            (VecOp::Broadcast, [a]) => {
                let c = tb.add_op1(VecOp::Sum, &[cz.into()], t).1;
                acc(&mut tb, &mut ct, *a, c);
            }
            (VecOp::ZerosLike, []) => {}
            _ => return Err(VecAdError::NotLinear { op: id }),
        }
    }
    let mut outputs = Vec::with_capacity(lin.tangent_inputs.len());
    for (i, &t) in lin.tangent_inputs.iter().enumerate() {
        let c = if let Some(c) = ct.get(t.index()).copied().flatten() {
            c
        } else {
            let x = ValueRef::Parent {
                parent: PRIMAL,
                value: primal.inputs()[i],
            };
            tb.add_op1(VecOp::ZerosLike, &[x], Role::Transposed).1
        };
        outputs.push(c);
    }
    tb.set_outputs(&outputs);
    Ok(VjpTransform {
        residual: Arc::clone(residual),
        transposed: tb.build()?,
    })
}

/// [`linearize`] then [`transpose`]: the VJP transform of `primal` for outputs `slots`.
///
/// # Errors
/// As [`linearize`] and [`transpose`].
pub fn vjp(primal: &Arc<Graph<VecOp>>, slots: &[u32]) -> Result<VjpTransform<VecOp>, VecAdError> {
    transpose(&linearize(primal, slots)?)
}

/// Evaluates a primal graph without parents at `x`, then the JVP with input tangents `dx`:
/// returns the output tangents.
///
/// # Errors
/// As [`eval`].
pub fn eval_jvp(
    primal: &Graph<VecOp>,
    lin: &LinearizedGraph<VecOp>,
    x: &[&[f64]],
    dx: &[&[f64]],
) -> Result<Vec<Vec<f64>>, VecAdError> {
    let p = eval(primal, x, &[])?;
    let r = residual_eval(&lin.graph, &p)?;
    let t = eval(&lin.graph, dx, &[&p, &r])?;
    Ok(t.outputs().into_iter().map(<[f64]>::to_vec).collect())
}

/// Evaluates a primal graph without parents at `x`, then the VJP with output cotangents
/// `ct`: returns the input cotangents.
///
/// # Errors
/// As [`eval`].
pub fn eval_vjp(
    primal: &Graph<VecOp>,
    transform: &VjpTransform<VecOp>,
    x: &[&[f64]],
    ct: &[&[f64]],
) -> Result<Vec<Vec<f64>>, VecAdError> {
    let p = eval(primal, x, &[])?;
    let r = eval(&transform.residual, &[], &[&p])?;
    let t = eval(&transform.transposed, ct, &[&p, &r])?;
    Ok(t.outputs().into_iter().map(<[f64]>::to_vec).collect())
}

fn residual_eval(l: &Graph<VecOp>, p: &Evaluation) -> Result<Evaluation, VecAdError> {
    let residual = l.parent(RESIDUAL).ok_or(VecAdError::NotLinearized)?;
    eval(residual, &[], &[p])
}
