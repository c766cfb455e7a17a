//! A small scalar AD engine with its own graph type (`Tape`) and its ad-cache transform cache.
//!
//! Tapes are keyed exactly through graph-core's `GraphView`; the cache holds eager
//! linearizations and traced JVP / VJP transforms under ad-cache's ready-made `TransformKey`.
//!
//! Shared by the `engine_cache` example and ad-cache's tests (`tests/it/engine_cache.rs`).

use std::sync::Arc;

use ad_cache::{
    Cache, CacheError, CacheLimits, CacheStats, EagerKey, EngineKeyPart, EngineTracedKey,
    EngineTracedParts, HeapMeter, KeyError, RetainedBytes, TracedOutput, TransformKind,
};
use graph_core::{
    CanonicalGraph, GraphError, GraphView, NodeValue, Operand, StableHash, StableHasher,
};

/// The engine's errors.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum EngineError {
    /// The tape is not a valid graph.
    #[error("invalid tape: {0}")]
    Graph(#[from] GraphError),
    /// A key could not be built.
    #[error("invalid key: {0}")]
    Key(#[from] KeyError),
    /// The value asked for is not a live value of the graph.
    #[error("the value asked for is not live in the recorded graph")]
    NotLive,
    /// No input has the key differentiated with respect to.
    #[error("no input has key {0:?}")]
    NoSuchInput(InputKey),
    /// An evaluation got the wrong number of values.
    #[error("expected {expected} values, got {got}")]
    Arity {
        /// Values expected.
        expected: usize,
        /// Values given.
        got: usize,
    },
    /// A node reads a later node (the engine evaluates in recording order).
    #[error("node {0} reads a value recorded after it")]
    Order(u32),
    /// The cache returned no transform: a re-entrant request, a wait cycle or a timeout.
    #[error("the transform cache returned no transform: {0}")]
    Cache(CacheError<()>),
}

impl From<CacheError<EngineError>> for EngineError {
    fn from(e: CacheError<EngineError>) -> Self {
        match e {
            CacheError::Compute(e) => e,
            e => EngineError::Cache(e.map_compute(|_| ())),
        }
    }
}

/// The engine's input keys: parameters by name, data by position in the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InputKey {
    /// A named parameter.
    Param(String),
    /// A data input.
    Data(u32),
}

impl StableHash for InputKey {
    fn stable_hash(&self, h: &mut StableHasher) {
        match self {
            InputKey::Param(name) => {
                h.write_tag(0);
                h.write_str(name);
            }
            InputKey::Data(i) => {
                h.write_tag(1);
                h.write_u32(*i);
            }
        }
    }
}

impl RetainedBytes for InputKey {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        if let InputKey::Param(name) = self {
            name.visit_heap(meter);
        }
    }
}

/// Primitive operations (each node has one result).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Prim {
    /// `a + b`.
    Add,
    /// `a * b`.
    Mul,
    /// `sin a`.
    Sin,
    /// `cos a`.
    Cos,
    /// `-a`.
    Neg,
    /// A constant (no operands).
    Const(f64),
}

impl Prim {
    fn apply(self, a: &[f64]) -> f64 {
        let x = |i: usize| a.get(i).copied().unwrap_or(0.0);
        match self {
            Prim::Add => x(0) + x(1),
            Prim::Mul => x(0) * x(1),
            Prim::Sin => x(0).sin(),
            Prim::Cos => x(0).cos(),
            Prim::Neg => -x(0),
            Prim::Const(c) => c,
        }
    }
}

impl StableHash for Prim {
    fn stable_hash(&self, h: &mut StableHasher) {
        match self {
            Prim::Add => h.write_tag(0),
            Prim::Mul => h.write_tag(1),
            Prim::Sin => h.write_tag(2),
            Prim::Cos => h.write_tag(3),
            Prim::Neg => h.write_tag(4),
            Prim::Const(c) => {
                h.write_tag(5);
                c.stable_hash(h);
            }
        }
    }
}

/// What a node reads: a value of its own tape, or of the primal tape it was derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arg {
    /// This tape's input at a position.
    Input(u32),
    /// This tape's node.
    Node(u32),
    /// The primal tape's input at a position.
    PrimalInput(u32),
    /// The primal tape's node.
    PrimalNode(u32),
}

/// One recorded operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    /// The operation.
    pub(crate) prim: Prim,
    /// Its operands.
    pub(crate) args: Vec<Arg>,
}

/// The engine's graph: inputs with engine keys, nodes in recording order, outputs, and the
/// primal tape a derived tape reads from.
#[derive(Debug, Clone)]
pub(crate) struct Tape {
    /// Input keys, by position.
    pub(crate) inputs: Vec<InputKey>,
    /// Nodes, in recording order.
    pub(crate) nodes: Vec<Node>,
    /// Outputs (local inputs or nodes).
    pub(crate) outputs: Vec<Arg>,
    /// The primal tape (derived tapes only).
    pub(crate) primal: Option<Arc<Recorded>>,
}

/// A finished tape with graph-core's canonical numbering and fingerprint.
pub(crate) type Recorded = CanonicalGraph<Tape>;

fn node_value(a: Arg) -> NodeValue {
    match a {
        Arg::Input(i) | Arg::PrimalInput(i) => NodeValue::Input(i),
        Arg::Node(n) | Arg::PrimalNode(n) => NodeValue::Result { node: n, slot: 0 },
    }
}

impl GraphView for Tape {
    fn num_inputs(&self) -> usize {
        self.inputs.len()
    }
    fn hash_input(&self, position: u32, h: &mut StableHasher) {
        self.inputs[position as usize].stable_hash(h);
    }
    fn input_eq(&self, position: u32, other: &Self, other_position: u32) -> bool {
        self.inputs[position as usize] == other.inputs[other_position as usize]
    }
    fn num_nodes(&self) -> usize {
        self.nodes.len()
    }
    fn num_operands(&self, node: u32) -> usize {
        self.nodes[node as usize].args.len()
    }
    fn operand(&self, node: u32, i: usize) -> Operand {
        let a = self.nodes[node as usize].args[i];
        match a {
            Arg::Input(_) | Arg::Node(_) => Operand::Local(node_value(a)),
            Arg::PrimalInput(_) | Arg::PrimalNode(_) => Operand::Parent {
                parent: 0,
                value: node_value(a),
            },
        }
    }
    fn num_results(&self, _node: u32) -> u32 {
        1
    }
    fn hash_payload(&self, node: u32, h: &mut StableHasher) {
        self.nodes[node as usize].prim.stable_hash(h);
    }
    fn payload_eq(&self, node: u32, other: &Self, other_node: u32) -> bool {
        self.nodes[node as usize].prim == other.nodes[other_node as usize].prim
    }
    fn num_outputs(&self) -> usize {
        self.outputs.len()
    }
    fn output(&self, i: usize) -> NodeValue {
        node_value(self.outputs[i])
    }
    fn parent(&self, parent: u32) -> Option<&CanonicalGraph<Self>> {
        (parent == 0).then_some(self.primal.as_deref()).flatten()
    }
}

/// A tape's heap: its vectors and input names; the primal is part of the tape (owned with
/// it when a key owns the tape, else charged when the cache alone keeps it alive).
impl RetainedBytes for Tape {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        self.inputs.visit_heap(meter);
        let node = std::mem::size_of::<Node>() as u64;
        meter.add((self.nodes.capacity() as u64).saturating_mul(node));
        for n in &self.nodes {
            let arg = std::mem::size_of::<Arg>() as u64;
            meter.add((n.args.capacity() as u64).saturating_mul(arg));
        }
        let arg = std::mem::size_of::<Arg>() as u64;
        meter.add((self.outputs.capacity() as u64).saturating_mul(arg));
        if let Some(p) = &self.primal {
            meter.part_arc(p);
        }
    }
}

/// Records a tape, one operation at a time.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    tape: Vec<Node>,
    inputs: Vec<InputKey>,
}

impl Recorder {
    /// An empty recorder.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A new input.
    pub(crate) fn input(&mut self, key: InputKey) -> Arg {
        self.inputs.push(key);
        Arg::Input(self.inputs.len() as u32 - 1)
    }

    /// A new operation on `args`.
    pub(crate) fn op(&mut self, prim: Prim, args: &[Arg]) -> Arg {
        self.tape.push(Node {
            prim,
            args: args.to_vec(),
        });
        Arg::Node(self.tape.len() as u32 - 1)
    }

    /// The finished graph with outputs `outputs`.
    ///
    /// # Errors
    /// [`EngineError::Graph`] when the tape is not a valid graph.
    pub(crate) fn finish(self, outputs: &[Arg]) -> Result<Arc<Recorded>, EngineError> {
        let tape = Tape {
            inputs: self.inputs,
            nodes: self.tape,
            outputs: outputs.to_vec(),
            primal: None,
        };
        Ok(Arc::new(Recorded::new(tape)?))
    }
}

/// Values of a tape: inputs then nodes.
fn eval_tape(
    t: &Tape,
    inputs: &[f64],
    primal: Option<&(Vec<f64>, Vec<f64>)>,
) -> Result<Vec<f64>, EngineError> {
    if inputs.len() != t.inputs.len() {
        return Err(EngineError::Arity {
            expected: t.inputs.len(),
            got: inputs.len(),
        });
    }
    let mut nodes: Vec<f64> = Vec::with_capacity(t.nodes.len());
    let mut args = Vec::new();
    for (i, n) in t.nodes.iter().enumerate() {
        args.clear();
        for &a in &n.args {
            let v = match a {
                Arg::Input(k) => inputs.get(k as usize).copied(),
                Arg::Node(k) => nodes.get(k as usize).copied(),
                Arg::PrimalInput(k) => primal.and_then(|p| p.0.get(k as usize).copied()),
                Arg::PrimalNode(k) => primal.and_then(|p| p.1.get(k as usize).copied()),
            };
            args.push(v.ok_or(EngineError::Order(i as u32))?);
        }
        nodes.push(n.prim.apply(&args));
    }
    Ok(nodes)
}

fn read(a: Arg, inputs: &[f64], nodes: &[f64]) -> f64 {
    match a {
        Arg::Input(k) | Arg::PrimalInput(k) => inputs.get(k as usize).copied().unwrap_or(0.0),
        Arg::Node(k) | Arg::PrimalNode(k) => nodes.get(k as usize).copied().unwrap_or(0.0),
    }
}

/// Evaluates a recorded graph's outputs at `inputs`.
///
/// # Errors
/// [`EngineError::Arity`] or [`EngineError::Order`].
pub(crate) fn eval(g: &Recorded, inputs: &[f64]) -> Result<Vec<f64>, EngineError> {
    let t = g.graph();
    let nodes = eval_tape(t, inputs, None)?;
    Ok(t.outputs.iter().map(|&o| read(o, inputs, &nodes)).collect())
}

/// A linearized tape (eager linearize, traced JVP): tangent inputs by primal input
/// position; `tangent_outputs[j]` is the tangent of the `j`-th output asked for, `None`
/// where it is identically zero (the output does not depend on an active input).
#[derive(Debug)]
pub(crate) struct Linearized {
    /// The tangent tape; its primal is the recorded graph the transform was built for.
    pub(crate) tangent: Recorded,
    /// Tangent of each output asked for (`None`: zero).
    pub(crate) tangent_outputs: Vec<Option<Arg>>,
}

/// A VJP: the backward tape maps the output's cotangent (its one input) to the cotangent
/// of the input differentiated with respect to (`None`: zero).
#[derive(Debug)]
pub(crate) struct Backward {
    /// The backward tape; its primal is the recorded graph.
    pub(crate) backward: Recorded,
    /// The input's cotangent (`None`: zero).
    pub(crate) input_cotangent: Option<Arg>,
}

/// A cached transform.
#[derive(Debug)]
pub(crate) enum Transform {
    /// Eager linearization of a recorded graph at some outputs.
    Linearize(Linearized),
    /// A traced JVP for one output and one input.
    Jvp(Linearized),
    /// A traced VJP for one output and one input.
    Vjp(Backward),
}

impl RetainedBytes for Transform {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        let (g, outs) = match self {
            Transform::Linearize(l) | Transform::Jvp(l) => {
                (&l.tangent, l.tangent_outputs.capacity())
            }
            Transform::Vjp(b) => (&b.backward, 0),
        };
        g.visit_heap(meter);
        let arg = std::mem::size_of::<Option<Arg>>() as u64;
        meter.add((outs as u64).saturating_mul(arg));
    }
}

/// Builds tangent-tape nodes.
struct Builder {
    nodes: Vec<Node>,
}

impl Builder {
    fn op(&mut self, prim: Prim, args: &[Arg]) -> Arg {
        self.nodes.push(Node {
            prim,
            args: args.to_vec(),
        });
        Arg::Node(self.nodes.len() as u32 - 1)
    }

    /// `a + b` where either may be zero.
    fn add(&mut self, a: Option<Arg>, b: Option<Arg>) -> Option<Arg> {
        match (a, b) {
            (Some(a), Some(b)) => Some(self.op(Prim::Add, &[a, b])),
            (a, None) => a,
            (None, b) => b,
        }
    }
}

/// The primal's argument as the derived tape reads it.
fn primal_arg(a: Arg) -> Arg {
    match a {
        Arg::Input(k) => Arg::PrimalInput(k),
        Arg::Node(k) => Arg::PrimalNode(k),
        other => other,
    }
}

/// Forward-mode tangent tape of `primal` with tangent inputs where `active`, for `outputs`.
fn tangent(
    primal: &Arc<Recorded>,
    active: &[bool],
    outputs: &[Arg],
) -> Result<Linearized, EngineError> {
    let p = primal.graph();
    let mut b = Builder { nodes: Vec::new() };
    let dot_in: Vec<Option<Arg>> = (0..p.inputs.len())
        .map(|i| {
            active
                .get(i)
                .copied()
                .unwrap_or(false)
                .then_some(Arg::Input(i as u32))
        })
        .collect();
    let mut dot: Vec<Option<Arg>> = Vec::with_capacity(p.nodes.len());
    let tan = |a: Arg, dot: &[Option<Arg>]| match a {
        Arg::Input(k) => dot_in.get(k as usize).copied().flatten(),
        Arg::Node(k) => dot.get(k as usize).copied().flatten(),
        _ => None,
    };
    for n in &p.nodes {
        let a = n.args.first().copied();
        let c = n.args.get(1).copied();
        let (ta, tc) = (a.and_then(|a| tan(a, &dot)), c.and_then(|c| tan(c, &dot)));
        let t = match (n.prim, a, c) {
            (Prim::Add, _, _) => b.add(ta, tc),
            (Prim::Mul, Some(a), Some(c)) => {
                let l = ta.map(|ta| b.op(Prim::Mul, &[ta, primal_arg(c)]));
                let r = tc.map(|tc| b.op(Prim::Mul, &[primal_arg(a), tc]));
                b.add(l, r)
            }
            (Prim::Sin, Some(a), _) => ta.map(|ta| {
                let cos = b.op(Prim::Cos, &[primal_arg(a)]);
                b.op(Prim::Mul, &[cos, ta])
            }),
            (Prim::Cos, Some(a), _) => ta.map(|ta| {
                let sin = b.op(Prim::Sin, &[primal_arg(a)]);
                let m = b.op(Prim::Mul, &[sin, ta]);
                b.op(Prim::Neg, &[m])
            }),
            (Prim::Neg, _, _) => ta.map(|ta| b.op(Prim::Neg, &[ta])),
            _ => None,
        };
        dot.push(t);
    }
    let tangent_outputs: Vec<Option<Arg>> = outputs.iter().map(|&o| tan(o, &dot)).collect();
    let tape = Tape {
        inputs: p.inputs.clone(),
        nodes: b.nodes,
        outputs: tangent_outputs.iter().flatten().copied().collect(),
        primal: Some(Arc::clone(primal)),
    };
    Ok(Linearized {
        tangent: Recorded::new(tape)?,
        tangent_outputs,
    })
}

/// Eager linearization of `primal` at output slots `slots` (every input active).
///
/// # Errors
/// [`EngineError::Key`] for a slot past the outputs; [`EngineError::Graph`] never for a
/// valid primal.
pub(crate) fn linearize(primal: &Arc<Recorded>, slots: &[u32]) -> Result<Linearized, EngineError> {
    let p = primal.graph();
    let outputs = slots
        .iter()
        .map(|&s| {
            p.outputs
                .get(s as usize)
                .copied()
                .ok_or(KeyError::OutputSlot {
                    slot: s,
                    outputs: p.outputs.len(),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    tangent(primal, &vec![true; p.inputs.len()], &outputs)
}

fn input_position(p: &Tape, wrt: &InputKey) -> Result<usize, EngineError> {
    p.inputs
        .iter()
        .position(|k| k == wrt)
        .ok_or_else(|| EngineError::NoSuchInput(wrt.clone()))
}

/// Traced JVP of `output` with respect to the input keyed `wrt`.
///
/// # Errors
/// [`EngineError::NoSuchInput`].
pub(crate) fn jvp(
    primal: &Arc<Recorded>,
    output: Arg,
    wrt: &InputKey,
) -> Result<Linearized, EngineError> {
    let p = primal.graph();
    let i = input_position(p, wrt)?;
    let active: Vec<bool> = (0..p.inputs.len()).map(|k| k == i).collect();
    tangent(primal, &active, &[output])
}

/// Traced VJP of `output` with respect to the input keyed `wrt`: a reverse sweep over the
/// primal's nodes.
///
/// # Errors
/// [`EngineError::NoSuchInput`].
pub(crate) fn vjp(
    primal: &Arc<Recorded>,
    output: Arg,
    wrt: &InputKey,
) -> Result<Backward, EngineError> {
    let p = primal.graph();
    let i = input_position(p, wrt)?;
    let mut b = Builder { nodes: Vec::new() };
    let mut bar_in: Vec<Option<Arg>> = vec![None; p.inputs.len()];
    let mut bar: Vec<Option<Arg>> = vec![None; p.nodes.len()];
    let seed = Some(Arg::Input(0));
    match output {
        Arg::Input(k) => bar_in[k as usize] = seed,
        Arg::Node(k) => bar[k as usize] = seed,
        _ => return Err(EngineError::NotLive),
    }
    for (k, n) in p.nodes.iter().enumerate().rev() {
        let Some(g) = bar[k] else { continue };
        let a = n.args.first().copied();
        let c = n.args.get(1).copied();
        let contributions: Vec<(Arg, Arg)> = match (n.prim, a, c) {
            (Prim::Add, Some(a), Some(c)) => vec![(a, g), (c, g)],
            (Prim::Mul, Some(a), Some(c)) => vec![
                (a, b.op(Prim::Mul, &[g, primal_arg(c)])),
                (c, b.op(Prim::Mul, &[primal_arg(a), g])),
            ],
            (Prim::Sin, Some(a), _) => {
                let cos = b.op(Prim::Cos, &[primal_arg(a)]);
                vec![(a, b.op(Prim::Mul, &[cos, g]))]
            }
            (Prim::Cos, Some(a), _) => {
                let sin = b.op(Prim::Sin, &[primal_arg(a)]);
                let m = b.op(Prim::Mul, &[sin, g]);
                vec![(a, b.op(Prim::Neg, &[m]))]
            }
            (Prim::Neg, Some(a), _) => vec![(a, b.op(Prim::Neg, &[g]))],
            _ => Vec::new(),
        };
        for (target, v) in contributions {
            let slot = match target {
                Arg::Input(t) => &mut bar_in[t as usize],
                Arg::Node(t) => &mut bar[t as usize],
                _ => continue,
            };
            *slot = b.add(*slot, Some(v));
        }
    }
    let input_cotangent = bar_in[i];
    let tape = Tape {
        inputs: vec![InputKey::Data(0)],
        nodes: b.nodes,
        outputs: input_cotangent.into_iter().collect(),
        primal: Some(Arc::clone(primal)),
    };
    Ok(Backward {
        backward: Recorded::new(tape)?,
        input_cotangent,
    })
}

/// Evaluates a tangent tape: the primal (the tape's own primal) at `primal_inputs`, then the
/// tangents of the outputs asked for, given the tangents of the primal inputs (zero for
/// inactive ones).
///
/// # Errors
/// [`EngineError::Arity`] or [`EngineError::Order`].
pub(crate) fn eval_tangent(
    l: &Linearized,
    primal_inputs: &[f64],
    tangents: &[f64],
) -> Result<Vec<f64>, EngineError> {
    let t = l.tangent.graph();
    let primal = t.primal.as_ref().ok_or(EngineError::NotLive)?;
    let p_nodes = eval_tape(primal.graph(), primal_inputs, None)?;
    let ctx = (primal_inputs.to_vec(), p_nodes);
    let nodes = eval_tape(t, tangents, Some(&ctx))?;
    Ok(l.tangent_outputs
        .iter()
        .map(|o| o.map_or(0.0, |o| read(o, tangents, &nodes)))
        .collect())
}

/// Evaluates a backward tape: the cotangent of the input for an output cotangent `seed`.
///
/// # Errors
/// [`EngineError::Arity`] or [`EngineError::Order`].
pub(crate) fn eval_backward(
    v: &Backward,
    primal_inputs: &[f64],
    seed: f64,
) -> Result<f64, EngineError> {
    let t = v.backward.graph();
    let primal = t.primal.as_ref().ok_or(EngineError::NotLive)?;
    let p_nodes = eval_tape(primal.graph(), primal_inputs, None)?;
    let ctx = (primal_inputs.to_vec(), p_nodes);
    let nodes = eval_tape(t, &[seed], Some(&ctx))?;
    Ok(v.input_cotangent.map_or(0.0, |o| read(o, &[seed], &nodes)))
}

/// Input keys name no values of the roots: nothing to check.
impl EngineKeyPart for InputKey {}

/// One entry of the alias map: an input whose storage is shared with another input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Alias {
    /// The aliasing input.
    pub(crate) input: InputKey,
    /// The input whose storage it shares.
    pub(crate) shares: InputKey,
}

impl StableHash for Alias {
    fn stable_hash(&self, h: &mut StableHasher) {
        self.input.stable_hash(h);
        self.shares.stable_hash(h);
    }
}

impl RetainedBytes for Alias {
    fn visit_heap<'a>(&'a self, meter: &mut HeapMeter<'a>) {
        self.input.visit_heap(meter);
        self.shares.visit_heap(meter);
    }
}

/// Alias entries name inputs by key: nothing to check.
impl EngineKeyPart for Alias {}

/// The engine's one cache key, eager or traced: ad-cache's ready-made key over tapes.
pub(crate) type TransformKey = ad_cache::TransformKey<Recorded, InputKey, TracedOutput, Alias>;

/// The eager key of `graph` at output slots `slots`.
///
/// # Errors
/// [`EngineError::Key`] for a slot past the outputs.
pub(crate) fn eager_key(graph: Arc<Recorded>, slots: &[u32]) -> Result<TransformKey, EngineError> {
    Ok(TransformKey::eager(
        TransformKind::Jvp,
        EagerKey::new(graph, slots)?,
    ))
}

/// The traced key: `kind` of output `output` of `root` (a value of it) with respect to the
/// input keyed `wrt`, under alias map `aliases` (any order).
///
/// # Errors
/// [`EngineError::NotLive`] when `output` is not a live value of `root`.
pub(crate) fn traced_key(
    kind: TransformKind,
    root: Arc<Recorded>,
    output: Arg,
    wrt: InputKey,
    aliases: Vec<Alias>,
) -> Result<TransformKey, EngineError> {
    let (Arg::Input(_) | Arg::Node(_)) = output else {
        return Err(EngineError::NotLive);
    };
    let roots = vec![root];
    let output = TracedOutput::of(&roots, 0, node_value(output)).map_err(|e| match e {
        KeyError::NotLive { .. } => EngineError::NotLive,
        e => EngineError::Key(e),
    })?;
    let parts = EngineTracedParts {
        kind,
        roots,
        output,
        wrt,
        aliases,
    };
    Ok(EngineTracedKey::new(parts)?.into())
}

/// The engine's transform cache: one bounded cache of eager and traced transforms.
pub(crate) struct TransformCache {
    cache: Cache<TransformKey, Transform>,
}

impl TransformCache {
    /// A cache with `limits` (AD engines use 128 entries and 64 MiB).
    pub(crate) fn new(limits: CacheLimits) -> Self {
        TransformCache {
            cache: Cache::with_limits(limits),
        }
    }

    /// The eager linearization of `graph` at output slots `slots`, cached.
    ///
    /// # Errors
    /// [`EngineError::Key`] for a slot past the outputs.
    pub(crate) fn linearize(
        &self,
        graph: &Arc<Recorded>,
        slots: &[u32],
    ) -> Result<Arc<Transform>, EngineError> {
        let key = eager_key(Arc::clone(graph), slots)?;
        self.get_or_build(key, || linearize(graph, slots).map(Transform::Linearize))
    }

    /// The traced JVP or VJP of `output` of `root` with respect to `wrt` under `aliases`,
    /// cached.
    ///
    /// # Errors
    /// [`EngineError::NotLive`] or [`EngineError::NoSuchInput`].
    pub(crate) fn traced(
        &self,
        kind: TransformKind,
        root: &Arc<Recorded>,
        output: Arg,
        wrt: &InputKey,
        aliases: Vec<Alias>,
    ) -> Result<Arc<Transform>, EngineError> {
        let key = traced_key(kind, Arc::clone(root), output, wrt.clone(), aliases)?;
        self.get_or_build(key, || match kind {
            TransformKind::Jvp => jvp(root, output, wrt).map(Transform::Jvp),
            TransformKind::Vjp => vjp(root, output, wrt).map(Transform::Vjp),
        })
    }

    /// The value for `key`, built by `build` on a miss.
    ///
    /// # Errors
    /// The error of `build`.
    pub(crate) fn get_or_build(
        &self,
        key: TransformKey,
        build: impl FnOnce() -> Result<Transform, EngineError>,
    ) -> Result<Arc<Transform>, EngineError> {
        Ok(self.cache.get_or_insert_with(key, build)?)
    }

    /// The cache's statistics.
    pub(crate) fn stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// The underlying cache (limits, entries, clear).
    pub(crate) fn cache(&self) -> &Cache<TransformKey, Transform> {
        &self.cache
    }
}
