//! What the tracking allocator costs per allocation: off (no tracker), and on inside a window
//! (a counted small allocation, a tracked one); `alloc_cost_system` is the baseline.
//!
//! `cargo run --release -p trace-heap --example alloc_cost_system`, then
//! `cargo run --release -p trace-heap --example alloc_cost`.

#[global_allocator]
static ALLOC: trace_heap::TrackingAlloc = trace_heap::TrackingAlloc::system();

#[path = "support/alloc_loop.rs"]
mod alloc_loop;

use std::sync::Arc;

use trace_record::schema::Phase;
use trace_record::{Run, TraceSession};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for bytes in [64usize, 65_536] {
        println!(
            "tracking allocator, no tracker: {bytes} B alloc+free {:.2} ns",
            alloc_loop::ns_per_pair(bytes, 2_000_000)
        );
    }
    // The lines go to /dev/null (a device is written as it is): no file is created, none
    // replaced, none left to remove.
    let session = Arc::new(TraceSession::open(
        "/dev/null",
        Run::new("alloc_cost", Phase::Infer, "cpu"),
    )?);
    trace_heap::start(&session, trace_heap::HeapConfig::default())?;
    let span = session.span("loop", trace_record::schema::SpanKind::Function, None);
    trace_sampler::set_scope(None, span.id());
    // Fewer tracked pairs: each is two entries the tracker drains and writes.
    for (bytes, n) in [(64usize, 2_000_000), (65_536, 20_000)] {
        println!(
            "tracking allocator, tracking: {bytes} B alloc+free {:.2} ns",
            alloc_loop::ns_per_pair(bytes, n)
        );
    }
    drop(span);
    let stats = trace_heap::stop(&session);
    session.finish()?;
    println!("{stats:?}");
    Ok(())
}
