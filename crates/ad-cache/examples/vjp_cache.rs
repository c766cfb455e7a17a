//! Example: repeated VJP requests for a few recorded graphs turn into cache hits.
//!
//! Run with `cargo run -p ad-cache --example vjp_cache`.

use std::sync::Arc;
use std::time::Instant;

use ad_cache::{Cache, CacheLimits, LinearizeKey, VjpTransform};
use vecad::VecOp;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Three "recorded" programs of different sizes, as an AD engine would see them each step.
    let programs: Vec<Arc<graph_core::Graph<VecOp>>> = [(2_000, 1), (500, 2), (8_000, 3)]
        .into_iter()
        .map(|(ops, seed)| vecad::chain_graph(ops, seed).map(Arc::new))
        .collect::<Result<_, vecad::VecAdError>>()?;
    let cache: Cache<LinearizeKey<VecOp>, VjpTransform<VecOp>> = Cache::with_limits(CacheLimits {
        max_retained_bytes: Some(32 << 20),
        ..CacheLimits::default()
    });

    let x = [0.1, -0.4, 0.7];
    let y = [0.5, 0.2, -0.3];
    for step in 0..5 {
        for (i, program) in programs.iter().enumerate() {
            // The engine re-records the same program every step: equal structure, new Arc.
            let recorded = if step == 0 {
                Arc::clone(program)
            } else {
                Arc::new((**program).clone())
            };
            let key = LinearizeKey::new(Arc::clone(&recorded), &[0])?;
            let start = Instant::now();
            let transform = cache.get_or_insert_with(key, || vecad::vjp(&recorded, &[0]))?;
            let took = start.elapsed();
            let grad = vecad::eval_vjp(&recorded, &transform, &[&x, &y], &[&[1.0]])?;
            println!(
                "step {step} program {i} ({:>5} ops): transform in {:>9.1?}, d/dx[0] = {:+.6}",
                recorded.num_ops(),
                took,
                grad[0][0]
            );
        }
    }
    let s = cache.stats();
    println!();
    println!("entries            {}", s.entries);
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
    println!("rejected           {}", s.rejected);
    println!("collisions         {}", s.collisions);
    println!("clears             {}", s.clears);
    Ok(())
}
