//! Example: an AD engine with its own graph type keeps an exact, bounded transform cache.
//!
//! Eager linearize and traced JVP / VJP, keyed through graph-core's `GraphView`.
//!
//! Run with `cargo run --release -p ad-cache --example engine_cache`.
//!
//! The engine (`engine.rs`) records scalar programs on its own `Tape` type, never builds a
//! `graph_core::Graph`, and wraps each finished tape in a `CanonicalGraph`: renumbering-
//! invariant fingerprints and exact structural equality. Every step re-records the programs
//! (new graphs, nodes in a different order), and asks for an eager linearization and traced
//! JVP / VJP requests with alias maps given in varying order: after the first step, all hits.

mod engine;

use std::sync::Arc;

use ad_cache::{CacheLimits, TransformKind};
use engine::{
    Alias, Arg, EngineError, InputKey, Prim, Recorded, Recorder, Transform, TransformCache,
};

/// Outputs `f(w, x) = sin(w * x) + cos(x) * scale` (with `terms - 1` more `sin`s applied to
/// the first summand), `cos(x) * scale` and `scale`, recording the
/// two summands in an order that depends on `step` (the engine's numbering changes).
fn record(terms: usize, scale: f64, step: usize) -> Result<(Arc<Recorded>, Arg), EngineError> {
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
    let (a, b) = if step.is_multiple_of(2) {
        let a = left(&mut r);
        (a, right(&mut r))
    } else {
        let b = right(&mut r);
        (left(&mut r), b)
    };
    let y = r.op(Prim::Add, &[a, b]);
    // A third output that depends on no input: its tangent is absent (zero).
    let k = r.op(Prim::Const(scale), &[]);
    Ok((r.finish(&[y, b, k])?, y))
}

fn main() -> Result<(), EngineError> {
    let cache = TransformCache::new(CacheLimits {
        max_retained_bytes: Some(64 << 20),
        ..CacheLimits::default()
    });
    let programs = [(1usize, 0.5f64), (40, 2.0), (400, -1.0)];
    let point = [0.3, 1.1];
    for step in 0..4 {
        for &(terms, scale) in &programs {
            let (g, y) = record(terms, scale, step)?;
            let w = InputKey::Param("w".into());
            // The alias map, in an order that changes every step.
            let mut aliases = vec![
                Alias {
                    input: InputKey::Data(0),
                    shares: InputKey::Param("w".into()),
                },
                Alias {
                    input: InputKey::Param("w".into()),
                    shares: InputKey::Data(1),
                },
            ];
            aliases.rotate_left(step % 2);

            let lin = cache.linearize(&g, &[0, 1, 2])?;
            let jvp = cache.traced(TransformKind::Jvp, &g, y, &w, aliases.clone())?;
            let vjp = cache.traced(TransformKind::Vjp, &g, y, &w, aliases)?;
            let (Transform::Linearize(lin), Transform::Jvp(jvp), Transform::Vjp(vjp)) =
                (&*lin, &*jvp, &*vjp)
            else {
                unreachable!("each request caches its own kind of transform");
            };
            let d_lin = engine::eval_tangent(lin, &point, &[1.0, 0.0])?;
            let d_jvp = engine::eval_tangent(jvp, &point, &[1.0, 0.0])?;
            let d_vjp = engine::eval_backward(vjp, &point, 1.0)?;
            let f = engine::eval(&g, &point)?;
            println!(
                "step {step} program ({terms:>3} terms, fingerprint {}): f = {:+.6}, df/dw = {:+.6} (linearize) {:+.6} (jvp) {:+.6} (vjp); tangent outputs {:?}",
                &g.fingerprint().to_string()[..8],
                f[0],
                d_lin[0],
                d_jvp[0],
                d_vjp,
                lin.tangent_outputs
                    .iter()
                    .map(|t| if t.is_some() { "some" } else { "none" })
                    .collect::<Vec<_>>(),
            );
        }
    }
    let s = cache.stats();
    println!();
    println!("entries            {}", cache.cache().len());
    println!(
        "retained bytes     {} (peak {})",
        s.retained_bytes, s.peak_retained_bytes
    );
    println!("hits / misses      {} / {}", s.hits, s.misses);
    println!(
        "inserts            {} ({} replacements)",
        s.inserts, s.replacements
    );
    println!(
        "evictions          {} ({} bytes)",
        s.evictions, s.evicted_bytes
    );
    println!("collisions         {}", s.collisions);
    Ok(())
}
