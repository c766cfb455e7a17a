//! Benchmark suite `fingerprint` (being written).

fn main() {}
