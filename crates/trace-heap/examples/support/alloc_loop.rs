//! The allocation loop both cost examples time: alloc and free pairs of one size, best of runs.

use std::hint::black_box;
use std::time::Instant;

/// Nanoseconds per allocate-and-free pair of `bytes`, the best of 7 runs of `n` pairs.
pub(crate) fn ns_per_pair(bytes: usize, n: u32) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..7 {
        let t = Instant::now();
        for _ in 0..n {
            let v: Vec<u8> = black_box(Vec::with_capacity(bytes));
            drop(black_box(v));
        }
        best = best.min(t.elapsed().as_nanos() as f64 / f64::from(n));
    }
    best
}
