//! The baseline of `alloc_cost`: the same loop on the system allocator, no tracking allocator.
//!
//! `cargo run --release -p trace-heap --example alloc_cost_system`, then `--example alloc_cost`.

#[path = "support/alloc_loop.rs"]
mod alloc_loop;

fn main() {
    for bytes in [64usize, 65_536] {
        println!(
            "system allocator: {bytes} B alloc+free {:.2} ns",
            alloc_loop::ns_per_pair(bytes, 2_000_000)
        );
    }
}
