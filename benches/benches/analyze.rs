//! Benchmark suite `analyze` (being written).

fn main() {}
