//! Benchmark suite `capture` (being written).

fn main() {}
