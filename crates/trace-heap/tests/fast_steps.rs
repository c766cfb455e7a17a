//! Many fast steps on a loaded machine: each gets an account of its own, its small sums and
//! its tracked allocations, never merged with a neighbour's, however far the tracker lags.

#[global_allocator]
static ALLOC: trace_heap::TrackingAlloc = trace_heap::TrackingAlloc::system();

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use trace_heap::HeapConfig;
use trace_record::schema::{Event, ExecStep, Phase, SpanKind};
use trace_record::{Run, TraceSession};

const STEPS: u64 = 400;

/// The small blocks step `i` makes (1 to 5: neighbours differ).
fn small_count(i: u64) -> u64 {
    i % 5 + 1
}

/// One test per binary: the allocator and the tracker are the process's.
#[test]
fn each_fast_step_has_its_own_account_sums_and_allocations() {
    let (session, sink) = TraceSession::in_memory(Run::new("fast", Phase::Infer, "cpu"));
    let session = Arc::new(session);
    // Room for every small block, made before tracking starts.
    let mut held: Vec<Vec<u8>> = Vec::with_capacity((STEPS * 5) as usize);
    let mut spans = Vec::with_capacity(STEPS as usize);
    trace_heap::start(&session, HeapConfig::default()).expect("start");
    // Threads that only spin, so the tracker's thread waits for a core and falls behind.
    let spinning = Arc::new(AtomicBool::new(true));
    let load: Vec<_> = (0..3)
        .map(|_| {
            let spinning = Arc::clone(&spinning);
            std::thread::spawn(move || {
                while spinning.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    for i in 0..STEPS {
        assert_eq!(session.current_step(), i);
        {
            let g = session.span("step", SpanKind::Function, Some(ExecStep::Forward));
            let id = g.id().expect("written");
            spans.push(id.0);
            trace_sampler::set_scope(Some(ExecStep::Forward), Some(id));
            for _ in 0..small_count(i) {
                held.push(std::hint::black_box(Vec::with_capacity(100)));
            }
            drop(std::hint::black_box(Vec::<u8>::with_capacity(
                100_000 + i as usize,
            )));
            // The span's end line is written outside its scope: only the blocks above are
            // counted in it.
            trace_sampler::set_scope(None, None);
        }
        session.step();
        trace_heap::on_step(&session);
    }
    let stats = trace_heap::stop(&session).expect("was tracking");
    spinning.store(false, Ordering::Relaxed);
    for t in load {
        t.join().expect("spinning thread");
    }
    drop(held);
    session.finish().expect("finish");

    let trace = trace_record::read_trace_bytes(&sink.bytes()).expect("read");
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!((stats.lost, stats.unwritten), (0, 0), "{stats:?}");
    let step_of_span: HashMap<u64, u64> = spans
        .iter()
        .enumerate()
        .map(|(i, &s)| (s, i as u64))
        .collect();
    let mut accounts = Vec::new();
    let mut small: HashMap<u64, (u64, u64, u64)> = HashMap::new();
    let mut tracked_ts: HashMap<u64, u64> = HashMap::new();
    for e in trace.events.iter().map(|e| &e.event) {
        match e {
            Event::HeapAccount(a) => accounts.push((a.step, a.ts, a.ts + a.dur)),
            Event::HeapSmall(s) => {
                if let Some(&i) = s.span.and_then(|sp| step_of_span.get(&sp)) {
                    assert!(
                        small.insert(i, (s.step, s.count, s.bytes)).is_none(),
                        "step {i}"
                    );
                }
            }
            Event::HeapAlloc(a) if (100_000..100_000 + STEPS).contains(&a.bytes) => {
                assert!(tracked_ts.insert(a.bytes - 100_000, a.ts).is_none());
                assert_eq!(a.span, Some(spans[(a.bytes - 100_000) as usize]));
            }
            _ => {}
        }
    }
    // One account per step, in order: the steps of the loop and the one its last boundary
    // opened (closed by `stop`).
    let steps: Vec<u64> = accounts.iter().map(|a| a.0).collect();
    assert_eq!(steps, (0..=STEPS).collect::<Vec<_>>());
    for i in 0..STEPS {
        // The step's small blocks are summed in its own account, not a neighbour's.
        let n = small_count(i);
        assert_eq!(
            small.get(&i),
            Some(&(i, n, 100 * n)),
            "step {i}'s small sums"
        );
        // Its tracked allocation lies inside its own account's window.
        let (_, start, end) = accounts[i as usize];
        let ts = tracked_ts[&i];
        assert!(
            start <= ts && ts <= end,
            "step {i}: {ts} outside {start}..={end}"
        );
    }
    assert_eq!(stats.steps, STEPS + 1);
}
