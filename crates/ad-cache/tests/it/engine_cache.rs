//! The `engine_cache` example's transform cache over its own graph type, keyed via `GraphView`.
//!
//! Correct hits on re-recorded tapes, alias maps in any order, limits, oversize values,
//! collisions and statistics.

#[allow(dead_code)] // the example's engine; not every item is used here
#[path = "../../examples/engine_cache/engine.rs"]
mod engine;

use std::sync::Arc;

use ad_cache::{CacheLimits, CacheStats, Fingerprint, TransformKind};
use engine::{
    Alias, Arg, EngineError, InputKey, Prim, Recorded, Recorder, Transform, TransformCache,
};

const POINT: [f64; 2] = [0.3, 1.1];

/// Outputs `y = sin^terms(w * x) + cos(x) * scale`, `cos(x) * scale` and the constant
/// `scale`; `swap` records the two summands in the other order (another numbering).
fn program(terms: usize, scale: f64, swap: bool) -> (Arc<Recorded>, Arg) {
    let mut r = Recorder::new();
    let w = r.input(InputKey::Param("w".into()));
    let x = r.input(InputKey::Data(0));
    let left = |r: &mut Recorder| {
        let mut acc = r.op(Prim::Mul, &[w, x]);
        for _ in 0..terms {
            acc = r.op(Prim::Sin, &[acc]);
        }
        acc
    };
    let right = |r: &mut Recorder| {
        let c = r.op(Prim::Cos, &[x]);
        let s = r.op(Prim::Const(scale), &[]);
        r.op(Prim::Mul, &[c, s])
    };
    let (a, b) = if swap {
        let b = right(&mut r);
        (left(&mut r), b)
    } else {
        let a = left(&mut r);
        (a, right(&mut r))
    };
    let y = r.op(Prim::Add, &[a, b]);
    let k = r.op(Prim::Const(scale), &[]);
    (r.finish(&[y, b, k]).expect("valid tape"), y)
}

/// The node `cos(x) * scale` of [`program`] (numbered differently in the two orders).
fn summand(terms: usize, swap: bool) -> Arg {
    Arg::Node(if swap { 2 } else { terms as u32 + 3 })
}

fn w() -> InputKey {
    InputKey::Param("w".into())
}

fn aliases() -> Vec<Alias> {
    vec![
        Alias {
            input: InputKey::Data(0),
            shares: w(),
        },
        Alias {
            input: w(),
            shares: InputKey::Data(1),
        },
    ]
}

/// Central finite difference of output 0 in input `i`.
fn numeric(g: &Recorded, i: usize) -> f64 {
    let eps = 1e-6;
    let (mut lo, mut hi) = (POINT, POINT);
    lo[i] -= eps;
    hi[i] += eps;
    let f = |p: [f64; 2]| engine::eval(g, &p).expect("eval")[0];
    (f(hi) - f(lo)) / (2.0 * eps)
}

fn engine_value(a: Arg) -> graph_core::NodeValue {
    match a {
        Arg::Node(n) => graph_core::NodeValue::Result { node: n, slot: 0 },
        _ => panic!("a node"),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-5 * (1.0 + b.abs())
}

fn limits(entries: usize, bytes: Option<u64>) -> CacheLimits {
    CacheLimits {
        max_entries: std::num::NonZeroUsize::new(entries).expect("non-zero"),
        max_retained_bytes: bytes,
    }
}

fn adds_up(s: &CacheStats, requests: u64) {
    assert_eq!(s.hits + s.misses, requests, "{s:?}");
    assert_eq!(s.entries, s.inserts - s.evictions - s.replacements, "{s:?}");
}

#[test]
fn hits_on_rerecorded_tapes_return_correct_derivatives() {
    let cache = TransformCache::new(CacheLimits::default());
    for (round, swap) in [false, true, false, true].into_iter().enumerate() {
        let (g, y) = program(3, 0.5, swap);
        let lin = cache.linearize(&g, &[0, 1, 2]).expect("linearize");
        let jvp = cache
            .traced(TransformKind::Jvp, &g, y, &w(), aliases())
            .expect("jvp");
        let vjp = cache
            .traced(TransformKind::Vjp, &g, y, &InputKey::Data(0), aliases())
            .expect("vjp");
        let (Transform::Linearize(lin), Transform::Jvp(jvp), Transform::Vjp(vjp)) =
            (&*lin, &*jvp, &*vjp)
        else {
            panic!("each request caches its own kind of transform");
        };
        let (dw, dx) = (numeric(&g, 0), numeric(&g, 1));
        let t = engine::eval_tangent(lin, &POINT, &[1.0, 0.0]).expect("tangent");
        assert!(close(t[0], dw), "linearize {} vs {dw}", t[0]);
        assert_eq!(t[1], 0.0, "cos(x) * s does not depend on w");
        assert_eq!(lin.tangent_outputs[2], None, "a constant has no tangent");
        let t = engine::eval_tangent(lin, &POINT, &[0.0, 1.0]).expect("tangent");
        assert!(close(t[0], dx), "linearize {} vs {dx}", t[0]);
        let j = engine::eval_tangent(jvp, &POINT, &[1.0, 0.0]).expect("jvp");
        assert!(close(j[0], dw), "jvp {} vs {dw}", j[0]);
        let v = engine::eval_backward(vjp, &POINT, 1.0).expect("vjp");
        assert!(close(v, dx), "vjp {v} vs {dx}");
        let s = cache.stats();
        assert_eq!(s.misses, 3, "round {round}: only the first round builds");
        assert_eq!(s.hits, 3 * round as u64);
    }
    adds_up(&cache.stats(), 12);
}

#[test]
fn renumbered_tapes_have_equal_fingerprints_and_keys() {
    let ((a, _), (b, _)) = (program(2, 1.0, false), program(2, 1.0, true));
    let (ya, yb) = (summand(2, false), summand(2, true));
    assert!(!Arc::ptr_eq(&a, &b));
    assert_ne!(ya, yb, "the output node has another number");
    assert_eq!(a.index(engine_value(ya)), b.index(engine_value(yb)));
    assert_eq!(a.fingerprint(), b.fingerprint());
    assert!(a.structurally_eq(&b));
    let key = |g: &Arc<Recorded>, y| {
        engine::traced_key(TransformKind::Vjp, Arc::clone(g), y, w(), aliases()).expect("key")
    };
    use ad_cache::CacheKey;
    assert_eq!(key(&a, ya).fingerprint(), key(&b, yb).fingerprint());
    assert!(key(&a, ya).same_key(&key(&b, yb)));
    // A different program is another key.
    let (c, _) = program(2, 2.0, false);
    let yc = summand(2, false);
    assert!(!key(&a, ya).same_key(&key(&c, yc)));
}

#[test]
fn alias_map_order_does_not_matter_but_its_entries_do() {
    let cache = TransformCache::new(CacheLimits::default());
    let (g, y) = program(1, 0.5, false);
    let mut reversed = aliases();
    reversed.reverse();
    let mut duplicated = aliases();
    duplicated.extend(aliases());
    let mut other = aliases();
    other[1].shares = InputKey::Data(2);
    let req = |a: Vec<Alias>| {
        cache
            .traced(TransformKind::Vjp, &g, y, &w(), a)
            .expect("vjp")
    };
    let first = req(aliases());
    assert!(Arc::ptr_eq(&first, &req(reversed)));
    assert!(Arc::ptr_eq(&first, &req(duplicated)));
    assert!(!Arc::ptr_eq(&first, &req(other)));
    assert!(!Arc::ptr_eq(&first, &req(Vec::new())));
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.entries), (2, 3, 3));
}

#[test]
fn kind_output_wrt_and_input_keys_are_part_of_the_traced_key() {
    let cache = TransformCache::new(CacheLimits::default());
    let (g, y) = program(1, 0.5, false);
    let b = summand(1, false);
    assert_eq!(
        engine::eval(&g, &POINT).expect("eval")[1],
        POINT[1].cos() * 0.5,
        "b is cos(x) * s"
    );
    let get = |kind, out, wrt: &InputKey| {
        cache
            .traced(kind, &g, out, wrt, aliases())
            .expect("transform")
    };
    let base = get(TransformKind::Vjp, y, &w());
    for other in [
        get(TransformKind::Jvp, y, &w()),
        get(TransformKind::Vjp, b, &w()),
        get(TransformKind::Vjp, y, &InputKey::Data(0)),
    ] {
        assert!(!Arc::ptr_eq(&base, &other));
    }
    assert_eq!(cache.stats().misses, 4);
    // An engine input key renamed: another graph, another key.
    let mut r = Recorder::new();
    let v = r.input(InputKey::Param("v".into()));
    let x = r.input(InputKey::Data(0));
    let m = r.op(Prim::Mul, &[v, x]);
    let renamed = r.finish(&[m]).expect("valid");
    let mut r = Recorder::new();
    let v = r.input(w());
    let x = r.input(InputKey::Data(0));
    let m = r.op(Prim::Mul, &[v, x]);
    let original = r.finish(&[m]).expect("valid");
    assert_ne!(renamed.fingerprint(), original.fingerprint());
    assert!(!renamed.structurally_eq(&original));
    // Errors: a dead value, an unknown input.
    let dead = Arg::Node(g.graph().nodes.len() as u32 + 5);
    assert_eq!(
        cache
            .traced(TransformKind::Vjp, &g, dead, &w(), Vec::new())
            .map(|_| ())
            .unwrap_err(),
        EngineError::NotLive
    );
    let missing = InputKey::Param("nope".into());
    assert_eq!(
        cache
            .traced(TransformKind::Jvp, &g, y, &missing, Vec::new())
            .map(|_| ())
            .unwrap_err(),
        EngineError::NoSuchInput(missing)
    );
}

#[test]
fn entry_limit_evicts_the_least_recently_used() {
    let cache = TransformCache::new(limits(2, None));
    let programs: Vec<_> = (1..=3).map(|t| program(t, 1.0, false)).collect();
    let mut requests = 0;
    for (g, _) in &programs {
        cache.linearize(g, &[0]).expect("linearize");
        requests += 1;
    }
    let s = cache.stats();
    assert_eq!((s.entries, s.evictions, s.inserts), (2, 1, 3));
    // The first program was evicted: a miss (and it evicts the second); the third hits.
    cache.linearize(&programs[0].0, &[0]).expect("linearize");
    cache.linearize(&programs[2].0, &[0]).expect("linearize");
    requests += 2;
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.evictions), (1, 4, 2));
    assert!(
        !cache
            .cache()
            .contains(&engine::eager_key(Arc::clone(&programs[1].0), &[0]).expect("key"))
    );
    adds_up(&s, requests);
}

#[test]
fn byte_limit_holds_and_the_peak_never_exceeds_it() {
    let one = {
        let probe = TransformCache::new(CacheLimits::default());
        let (g, _) = program(50, 1.0, false);
        probe.linearize(&g, &[0]).expect("linearize");
        probe.stats().retained_bytes
    };
    let limit = one * 5 / 2;
    let cache = TransformCache::new(limits(128, Some(limit)));
    let mut requests = 0;
    for round in 0..3 {
        for t in [50, 51, 52, 53] {
            let (g, _) = program(t, 1.0, round % 2 == 1);
            cache.linearize(&g, &[0]).expect("linearize");
            requests += 1;
            let s = cache.stats();
            assert!(s.retained_bytes <= limit, "{s:?}");
            assert!(s.peak_retained_bytes <= limit, "{s:?}");
        }
    }
    let s = cache.stats();
    assert!(s.entries <= 2, "{s:?}");
    assert!(s.evictions > 0 && s.evicted_bytes > 0, "{s:?}");
    assert_eq!(s.rejected, 0);
    adds_up(&s, requests);
}

#[test]
fn an_oversize_transform_is_returned_not_retained_and_evicts_nothing() {
    let (small, ys) = program(1, 1.0, false);
    let cache = TransformCache::new(limits(128, Some(1 << 20)));
    cache
        .traced(TransformKind::Vjp, &small, ys, &w(), aliases())
        .expect("vjp");
    let before = cache.stats();
    assert_eq!(before.entries, 1);
    // A tape whose transform alone is larger than the byte limit.
    let (big, yb) = program(20_000, 1.0, false);
    let got = cache
        .traced(TransformKind::Vjp, &big, yb, &w(), aliases())
        .expect("vjp");
    let Transform::Vjp(v) = &*got else {
        panic!("a VJP")
    };
    let d = engine::eval_backward(v, &POINT, 1.0).expect("eval");
    assert!(close(d, numeric(&big, 0)));
    let s = cache.stats();
    assert_eq!(s.rejected, 1);
    assert_eq!(s.entries, 1, "the small entry stays");
    assert_eq!(s.evictions, 0);
    assert_eq!(s.retained_bytes, before.retained_bytes);
    assert!(s.peak_retained_bytes <= 1 << 20);
    // Asking again computes again (nothing was kept).
    cache
        .traced(TransformKind::Vjp, &big, yb, &w(), aliases())
        .expect("vjp");
    assert_eq!(cache.stats().rejected, 2);
    adds_up(&cache.stats(), 3);
}

#[test]
fn a_forced_collision_is_a_miss_and_never_returns_the_other_transform() {
    let cache = TransformCache::new(CacheLimits::default());
    let forced = Fingerprint(0xdead_beef);
    let (a, ya) = program(1, 1.0, false);
    let (b, yb) = program(1, 3.0, false);
    let key = |g: &Arc<Recorded>, y| {
        engine::traced_key(TransformKind::Vjp, Arc::clone(g), y, w(), aliases())
            .expect("key")
            .with_fingerprint(forced)
    };
    let build = |g: &Arc<Recorded>, y| {
        let g = Arc::clone(g);
        move || engine::vjp(&g, y, &w()).map(Transform::Vjp)
    };
    let va = cache.get_or_build(key(&a, ya), build(&a, ya)).expect("a");
    let vb = cache.get_or_build(key(&b, yb), build(&b, yb)).expect("b");
    assert!(!Arc::ptr_eq(&va, &vb));
    let s = cache.stats();
    assert_eq!(s.hits, 0);
    assert!(s.collisions >= 1, "{s:?}");
    // b's value is b's derivative, not a's.
    let Transform::Vjp(v) = &*vb else {
        panic!("a VJP")
    };
    let d = engine::eval_backward(v, &POINT, 1.0).expect("eval");
    assert!(close(d, numeric(&b, 0)), "{d}");
    // A lookup of a (re-recorded, same forced fingerprint) is a miss or a's own value.
    let (a2, ya2) = program(1, 1.0, true);
    if let Some(got) = cache.cache().get(&key(&a2, ya2)) {
        assert!(Arc::ptr_eq(&got, &va));
    }
    let s = cache.stats();
    assert_eq!(s.hits + s.misses, 3);
}

#[test]
fn the_cache_prices_the_recorded_tape_it_keeps_alive() {
    let cache = TransformCache::new(CacheLimits::default());
    let (g, _) = program(200, 1.0, false);
    cache.linearize(&g, &[0]).expect("linearize");
    let with_tape = cache.stats().retained_bytes;
    // The tape alone (its nodes, at least) is charged to the entry.
    let nodes = g.graph().nodes.len() as u64 * std::mem::size_of::<engine::Node>() as u64;
    assert!(with_tape > nodes, "{with_tape} <= {nodes}");
    cache.cache().clear();
    assert_eq!(cache.stats().retained_bytes, 0);
    assert_eq!(cache.stats().clears, 1);
}

#[test]
fn the_ready_made_key_enum_forwards_quick_eq_and_checks_canonical_outputs() {
    use ad_cache::{
        CacheKey, EngineTracedKey, EngineTracedParts, KeyError, KeyGraph, TracedOutput,
    };
    let (g, y) = program(3, 1.0, false);
    let (again, y2) = program(3, 1.0, true);
    let key = |g: &Arc<Recorded>, y| {
        engine::traced_key(TransformKind::Vjp, Arc::clone(g), y, w(), aliases()).expect("key")
    };
    // Same tapes: answered under the lock (no second lock for the full comparison).
    assert_eq!(key(&g, y).quick_eq(&key(&g, y)), Some(true));
    // A re-recorded tape: only the full comparison can say, and it says equal.
    assert_eq!(key(&g, y).quick_eq(&key(&again, y2)), None);
    assert!(key(&g, y).same_key(&key(&again, y2)));
    let eager = engine::eager_key(Arc::clone(&g), &[0]).expect("key");
    assert_eq!(eager.quick_eq(&key(&g, y)), Some(false));
    // A canonical name made in another (not structurally equal) tape is a typed error.
    let values = g.canonical_count();
    let (other, y_other) = program(4, 1.0, false);
    let foreign = TracedOutput::of(&[Arc::clone(&other)], 0, engine_value(y_other)).expect("live");
    let raw = EngineTracedKey::<Recorded, InputKey, TracedOutput, Alias>::new(EngineTracedParts {
        kind: TransformKind::Vjp,
        roots: vec![Arc::clone(&g)],
        output: foreign,
        wrt: w(),
        aliases: aliases(),
    });
    assert_eq!(
        raw.map(|_| ()).unwrap_err(),
        KeyError::ForeignValue { root: 0 }
    );
    // The count is the inputs plus the live nodes' results (one each here).
    let live = (0..g.graph().nodes.len() as u32)
        .filter(|&n| g.canonical().is_live(n))
        .count() as u32;
    assert_eq!(values, g.graph().inputs.len() as u32 + live);
}

/// The raw-id misuse: a multi-output tape recorded twice with its nodes in another
/// order, the engine naming the output by the node id it had in the first recording. The
/// only way to name an output is `TracedOutput::of` (the fields are private), which maps
/// the id through the second tape: a different value there, so a miss, never the first
/// recording's transform of another output.
#[test]
fn a_node_id_from_another_recording_misses_instead_of_serving_another_output() {
    use ad_cache::CacheKey;
    let cache = TransformCache::new(limits(16, None));
    let (first, _) = program(3, 1.0, false);
    let (second, _) = program(3, 1.0, true);
    let node_in_first = summand(3, false);
    let cached = cache
        .traced(TransformKind::Jvp, &first, node_in_first, &w(), aliases())
        .expect("jvp");
    // The first recording's node id, asked of the second recording: another value there.
    let misused = engine::traced_key(
        TransformKind::Jvp,
        Arc::clone(&second),
        node_in_first,
        w(),
        aliases(),
    )
    .expect("a live node");
    let right = engine::traced_key(
        TransformKind::Jvp,
        Arc::clone(&second),
        summand(3, true),
        w(),
        aliases(),
    )
    .expect("key");
    assert!(
        !misused.same_key(&right),
        "the id names another value in the second tape"
    );
    assert!(
        cache.cache().get(&misused).is_none(),
        "a miss, not another output's transform"
    );
    // The right name in the second recording hits the first recording's entry.
    let hit = cache
        .cache()
        .get(&right)
        .expect("equal structure, same output");
    assert!(Arc::ptr_eq(&hit, &cached));
}

/// The kind misuse: an eager JVP cached, then the eager VJP of the same recording
/// asked for. The ready-made key carries the kind: a miss, and both entries stay apart.
#[test]
fn an_eager_jvp_is_never_served_for_an_eager_vjp() {
    use ad_cache::{CacheKey, EagerKey};
    let cache = TransformCache::new(limits(16, None));
    let (g, _) = program(2, 1.0, false);
    let jvp = engine::TransformKey::eager(
        TransformKind::Jvp,
        EagerKey::new(Arc::clone(&g), &[0]).expect("slot"),
    );
    let vjp = engine::TransformKey::eager(
        TransformKind::Vjp,
        EagerKey::new(Arc::clone(&g), &[0]).expect("slot"),
    );
    assert_ne!(jvp.fingerprint(), vjp.fingerprint());
    assert!(!jvp.same_key(&vjp));
    assert_eq!(jvp.quick_eq(&vjp), Some(false));
    let lin = cache.linearize(&g, &[0]).expect("linearize");
    assert!(
        cache
            .cache()
            .get(&jvp)
            .is_some_and(|v| Arc::ptr_eq(&v, &lin))
    );
    assert!(
        cache.cache().get(&vjp).is_none(),
        "the JVP is not the VJP's value"
    );
    // Forced to share a fingerprint, they still never match.
    let forced = vjp.clone().with_fingerprint(jvp.fingerprint());
    assert_eq!(forced.fingerprint(), jvp.fingerprint());
    assert!(cache.cache().get(&forced).is_none());
    assert_eq!(cache.stats().collisions, 1);
}
