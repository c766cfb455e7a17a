//! Benchmark suite `cache` (being written).

fn main() {}
