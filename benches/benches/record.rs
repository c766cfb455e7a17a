//! Benchmark suite `record` (being written).

fn main() {}
