//! Miss explanations: how a missed key differs from the closest cached key, and its cost.
//!
//! Like JAX's `JAX_EXPLAIN_CACHE_MISSES`: with [`Cache::set_explain_misses`](crate::Cache::set_explain_misses)
//! on, every miss that computes its value is compared with the most recently used cached
//! keys of the same transform kind ([`CacheKey::kind_label`](crate::CacheKey::kind_label)),
//! at most [`EXPLAIN_CANDIDATES`] of them, each by one linear walk
//! ([`CacheKey::difference`](crate::CacheKey::difference)); the closest one (the one that
//! agrees longest) is named with its first difference, and once computed the miss's cost
//! (compute time and retained bytes) is added.

use std::fmt;
use std::time::Duration;

use graph_core::{CanonicalGraph, Fingerprint, Graph, GraphView, Operand, ValueRef};

/// How many cached keys of the same kind a miss is compared with, most recently used first.
pub const EXPLAIN_CANDIDATES: usize = 8;

/// How many explanations a cache keeps for [`Cache::take_miss_explanations`](crate::Cache::take_miss_explanations)
/// (the oldest go first).
pub const EXPLAIN_LOG: usize = 64;

/// The first difference between two keys of the same kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDifference {
    /// How far the two keys agree before the difference (in inputs, operations, outputs,
    /// walked in canonical order): larger means closer.
    pub agree: u64,
    /// What differs, requested key first ("operation 3: Load([2, 3]) vs Load([2, 4])").
    pub what: String,
}

impl KeyDifference {
    /// A difference found after `agree` equal items.
    pub fn new(agree: u64, what: impl Into<String>) -> Self {
        KeyDifference {
            agree,
            what: what.into(),
        }
    }

    /// The same difference with `prefix` before what differs and `agree` added.
    #[must_use]
    pub fn within(self, agree: u64, prefix: &str) -> Self {
        KeyDifference {
            agree: self.agree.saturating_add(agree),
            what: format!("{prefix}{}", self.what),
        }
    }
}

/// Why a key missed, as [`Cache::explain`](crate::Cache::explain) or the explain mode found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissExplanation {
    /// The missed key's transform kind ([`CacheKey::kind_label`](crate::CacheKey::kind_label)).
    pub kind: &'static str,
    /// The missed key's fingerprint.
    pub fingerprint: Fingerprint,
    /// Cached keys of the same kind it was compared with.
    pub compared: usize,
    /// The closest of them and its first difference (`None`: no cached key of that kind, or
    /// the key type describes no differences).
    pub closest: Option<KeyDifference>,
    /// Time spent computing the missed value (explain mode, once computed).
    pub compute_time: Option<Duration>,
    /// Retained bytes of the computed entry (explain mode, once computed and stored).
    pub retained_bytes: Option<u64>,
}

impl fmt::Display for MissExplanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.kind.is_empty() {
            "key"
        } else {
            self.kind
        };
        write!(f, "cache miss for {kind} {}", self.fingerprint)?;
        match &self.closest {
            Some(d) => write!(
                f,
                ": closest of {} cached {kind} keys differs at {}",
                self.compared, d.what
            )?,
            None if self.compared == 0 => write!(f, ": no cached {kind} key to compare with")?,
            None => write!(f, ": {} cached {kind} keys, none described", self.compared)?,
        }
        if let Some(t) = self.compute_time {
            write!(f, "; costing {:.3} ms", t.as_secs_f64() * 1e3)?;
        }
        if let Some(b) = self.retained_bytes {
            write!(f, " and {b} retained bytes")?;
        }
        Ok(())
    }
}

/// Counters of one transform kind; they survive eviction and [`Cache::clear`](crate::Cache::clear)
/// ([`Cache::reset_stats`](crate::Cache::reset_stats) zeroes them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindStats {
    /// The kind ([`CacheKey::kind_label`](crate::CacheKey::kind_label)).
    pub kind: &'static str,
    /// Lookups of this kind that found their key.
    pub hits: u64,
    /// Lookups of this kind that did not.
    pub misses: u64,
    /// Values of this kind computed by [`Cache::get_or_insert_with`](crate::Cache::get_or_insert_with)
    /// and friends.
    pub computed: u64,
    /// Time spent computing them.
    pub compute_time: Duration,
}

/// The first difference between two graph-core graphs in canonical order: input keys,
/// operations (payload, role, operands by canonical index, result count), outputs, parents.
/// One linear walk; `None` when none is found.
///
/// What [`GraphKey`](crate::GraphKey) answers for [`CacheKey::difference`](crate::CacheKey::difference);
/// a key type of one's own that wraps a [`Graph`] can answer the same way.
///
/// ```
/// use ad_cache::graph_difference;
/// use graph_core::{GraphBuilder, Role};
///
/// let build = |shape: u64| {
///     let mut b = GraphBuilder::new();
///     let x = b.add_input(0);
///     let (_, y) = b.add_op1(("load", shape), &[x.into()], Role::Primary);
///     b.set_outputs(&[y]);
///     b.build()
/// };
/// let (a, b) = (build(3)?, build(4)?);
/// let d = graph_difference(&a, &b).expect("they differ");
/// assert_eq!(d.what, r#"operation 0: ("load", 3) vs ("load", 4)"#);
/// assert_eq!(graph_difference(&a, &build(3)?), None);
/// # Ok::<(), graph_core::GraphError>(())
/// ```
pub fn graph_difference<Op: PartialEq + fmt::Debug>(
    a: &Graph<Op>,
    b: &Graph<Op>,
) -> Option<KeyDifference> {
    if std::ptr::eq(a, b) {
        return None;
    }
    let (ia, ib) = (a.inputs(), b.inputs());
    if ia.len() != ib.len() {
        return Some(KeyDifference::new(
            0,
            format!("input count {} vs {}", ia.len(), ib.len()),
        ));
    }
    for (i, (&va, &vb)) in ia.iter().zip(ib).enumerate() {
        let (ka, kb) = (a.value_key(va), b.value_key(vb));
        if ka != kb {
            return Some(KeyDifference::new(
                i as u64,
                format!("input {i}: {ka:?} vs {kb:?}"),
            ));
        }
    }
    let agree = ia.len() as u64;
    let (oa, ob) = (a.canonical_ops(), b.canonical_ops());
    let operand = |g: &Graph<Op>, r: &ValueRef| -> String {
        match *r {
            ValueRef::Local(v) => match g.canonical_index(v) {
                Some(c) => format!("%{c}"),
                None => "dead value".to_string(),
            },
            ValueRef::Parent { parent, value } => {
                let c = g.parent(parent).and_then(|p| p.canonical_index(value));
                match c {
                    Some(c) => format!("parent {}:%{c}", parent.0),
                    None => format!("parent {}:?", parent.0),
                }
            }
        }
    };
    for (k, (&xa, &xb)) in oa.iter().zip(ob).enumerate() {
        let (Some(pa), Some(pb)) = (a.op(xa), b.op(xb)) else {
            continue;
        };
        let at = agree + k as u64;
        if pa.payload() != pb.payload() {
            return Some(KeyDifference::new(
                at,
                format!("operation {k}: {:?} vs {:?}", pa.payload(), pb.payload()),
            ));
        }
        if pa.role() != pb.role() {
            return Some(KeyDifference::new(
                at,
                format!("operation {k} role: {:?} vs {:?}", pa.role(), pb.role()),
            ));
        }
        let (na, nb) = (pa.inputs(), pb.inputs());
        if na.len() != nb.len() {
            return Some(KeyDifference::new(
                at,
                format!(
                    "operation {k} ({:?}) operand count {} vs {}",
                    pa.payload(),
                    na.len(),
                    nb.len()
                ),
            ));
        }
        for (j, (ra, rb)) in na.iter().zip(nb).enumerate() {
            let (sa, sb) = (operand(a, ra), operand(b, rb));
            if sa != sb {
                return Some(KeyDifference::new(
                    at,
                    format!(
                        "operation {k} ({:?}) operand {j}: {sa} vs {sb}",
                        pa.payload()
                    ),
                ));
            }
        }
        if pa.outputs().len() != pb.outputs().len() {
            return Some(KeyDifference::new(
                at,
                format!(
                    "operation {k} ({:?}) result count {} vs {}",
                    pa.payload(),
                    pa.outputs().len(),
                    pb.outputs().len()
                ),
            ));
        }
    }
    if oa.len() != ob.len() {
        return Some(KeyDifference::new(
            agree + oa.len().min(ob.len()) as u64,
            format!("live operation count {} vs {}", oa.len(), ob.len()),
        ));
    }
    let agree = agree + oa.len() as u64;
    let (ua, ub) = (a.outputs(), b.outputs());
    if ua.len() != ub.len() {
        return Some(KeyDifference::new(
            agree,
            format!("output count {} vs {}", ua.len(), ub.len()),
        ));
    }
    for (i, (&va, &vb)) in ua.iter().zip(ub).enumerate() {
        let (ca, cb) = (a.canonical_index(va), b.canonical_index(vb));
        if ca != cb {
            return Some(KeyDifference::new(
                agree + i as u64,
                format!("output {i}: %{} vs %{}", opt(ca), opt(cb)),
            ));
        }
    }
    let agree = agree + ua.len() as u64;
    let (pa, pb) = (a.parents(), b.parents());
    if pa.len() != pb.len() {
        return Some(KeyDifference::new(
            agree,
            format!("parent count {} vs {}", pa.len(), pb.len()),
        ));
    }
    for (i, (x, y)) in pa.iter().zip(pb).enumerate() {
        if x.fingerprint() != y.fingerprint() {
            return Some(KeyDifference::new(
                agree + i as u64,
                format!(
                    "parent {i}: fingerprint {} vs {}",
                    x.fingerprint(),
                    y.fingerprint()
                ),
            ));
        }
    }
    None
}

fn opt(x: Option<u32>) -> String {
    x.map_or_else(|| "?".to_string(), |c| c.to_string())
}

/// The first difference between two engine graphs in canonical order: inputs (by the
/// view's equality), nodes (payload, operand count and canonical operands, result count),
/// outputs. One linear walk.
pub(crate) fn view_difference<G: GraphView>(
    a: &CanonicalGraph<G>,
    b: &CanonicalGraph<G>,
) -> Option<KeyDifference> {
    if std::ptr::eq(a, b) {
        return None;
    }
    let (ga, gb) = (a.graph(), b.graph());
    if ga.num_inputs() != gb.num_inputs() {
        return Some(KeyDifference::new(
            0,
            format!("input count {} vs {}", ga.num_inputs(), gb.num_inputs()),
        ));
    }
    for i in 0..ga.num_inputs() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        if !ga.input_eq(i, gb, i) {
            return Some(KeyDifference::new(u64::from(i), format!("input {i} key")));
        }
    }
    let agree = ga.num_inputs() as u64;
    let (oa, ob) = (a.canonical().order(), b.canonical().order());
    let operand = |g: &CanonicalGraph<G>, o: Operand| -> String {
        match o {
            Operand::Local(v) => g.index(v).map_or_else(|| "?".into(), |c| format!("%{c}")),
            Operand::Parent { parent, value } => {
                let c = g.graph().parent(parent).and_then(|p| p.index(value));
                format!("parent {parent}:%{}", opt(c))
            }
        }
    };
    for (k, (&na, &nb)) in oa.iter().zip(ob).enumerate() {
        let at = agree + k as u64;
        if !ga.payload_eq(na, gb, nb) {
            return Some(KeyDifference::new(at, format!("operation {k}: payload")));
        }
        let (ca, cb) = (ga.num_operands(na), gb.num_operands(nb));
        if ca != cb {
            return Some(KeyDifference::new(
                at,
                format!("operation {k} operand count {ca} vs {cb}"),
            ));
        }
        for j in 0..ca {
            let (sa, sb) = (operand(a, ga.operand(na, j)), operand(b, gb.operand(nb, j)));
            if sa != sb {
                return Some(KeyDifference::new(
                    at,
                    format!("operation {k} operand {j}: {sa} vs {sb}"),
                ));
            }
        }
        if ga.num_results(na) != gb.num_results(nb) {
            return Some(KeyDifference::new(
                at,
                format!(
                    "operation {k} result count {} vs {}",
                    ga.num_results(na),
                    gb.num_results(nb)
                ),
            ));
        }
    }
    if oa.len() != ob.len() {
        return Some(KeyDifference::new(
            agree + oa.len().min(ob.len()) as u64,
            format!("live operation count {} vs {}", oa.len(), ob.len()),
        ));
    }
    let agree = agree + oa.len() as u64;
    if ga.num_outputs() != gb.num_outputs() {
        return Some(KeyDifference::new(
            agree,
            format!("output count {} vs {}", ga.num_outputs(), gb.num_outputs()),
        ));
    }
    for i in 0..ga.num_outputs() {
        let (ca, cb) = (a.index(ga.output(i)), b.index(gb.output(i)));
        if ca != cb {
            return Some(KeyDifference::new(
                agree + i as u64,
                format!("output {i}: %{} vs %{}", opt(ca), opt(cb)),
            ));
        }
    }
    None
}
