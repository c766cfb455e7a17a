//! Benchmark suite `export` (being written).

fn main() {}
