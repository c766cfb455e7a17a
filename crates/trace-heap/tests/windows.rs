//! The tracker follows the session's schedule: allocations outside a recorded step are not
//! tracked, a block tracked inside one is still seen freed after it, each recorded step has
//! one account.

#[global_allocator]
static ALLOC: trace_heap::TrackingAlloc = trace_heap::TrackingAlloc::system();

use std::sync::Arc;

use trace_heap::HeapConfig;
use trace_record::schema::{Event, Phase, Schedule};
use trace_record::{Run, TraceSession};

#[test]
fn only_recorded_steps_are_tracked_and_their_blocks_frees_are_seen_after() {
    // Step 0 is skipped, step 1 recorded, the rest not.
    let run = Run::new("windows", Phase::Train, "cpu").schedule(Schedule {
        skip_first: 1,
        wait: 0,
        warmup: 0,
        active: 1,
        repeat: 1,
    });
    let (session, sink) = TraceSession::in_memory(run);
    let session = Arc::new(session);
    trace_heap::start(&session, HeapConfig::default()).expect("start");
    let before = std::hint::black_box(Vec::<u8>::with_capacity(50_001));
    session.step();
    trace_heap::on_step(&session);
    assert!(session.is_active());
    let kept = std::hint::black_box(Vec::<u8>::with_capacity(50_002));
    drop(std::hint::black_box(Vec::<u8>::with_capacity(50_003)));
    session.step();
    trace_heap::on_step(&session);
    assert!(!session.is_active());
    // Frees are still seen (a tracked block is live): this one's allocation was never tracked.
    drop(before);
    drop(kept);
    let after = std::hint::black_box(Vec::<u8>::with_capacity(50_004));
    let stats = trace_heap::stop(&session).expect("tracking");
    drop(after);
    session.finish().expect("finish");

    let trace = trace_record::read_trace_bytes(&sink.bytes()).expect("read");
    assert!(trace_record::validate(&trace).is_empty());
    let mut sizes = std::collections::HashMap::new();
    let mut freed = std::collections::HashSet::new();
    let mut accounts = Vec::new();
    for e in trace.events.iter().map(|e| &e.event) {
        match e {
            Event::HeapAlloc(a) if (50_001..=50_004).contains(&a.bytes) => {
                sizes.insert(a.bytes, a.id);
            }
            Event::HeapFree(f) => {
                freed.insert(f.id);
            }
            Event::HeapAccount(a) => accounts.push(a.step),
            _ => {}
        }
    }
    let mut tracked: Vec<u64> = sizes.keys().copied().collect();
    tracked.sort_unstable();
    assert_eq!(tracked, [50_002, 50_003]);
    assert!(freed.contains(&sizes[&50_002]), "freed after its step");
    assert!(freed.contains(&sizes[&50_003]));
    assert_eq!(accounts, [1]);
    // The free of the block allocated before tracking is not matched, and counted.
    assert!(stats.unmatched_frees >= 1, "{stats:?}");
}
