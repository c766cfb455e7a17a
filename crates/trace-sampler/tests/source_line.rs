//! The trace says what ran: every `sampler` line names the source that took its step's samples
//! (the one `SamplerStats::source` reports), beside the rate requested, the samples over the
//! sampled threads' CPU time and the sampler's own CPU time.

#![cfg(all(feature = "enabled", target_os = "linux"))]

use std::sync::Arc;
use std::time::{Duration, Instant};

use trace_record::schema::{Event, Phase, Schedule};
use trace_record::{Run, SamplerAccount, TraceSession};
use trace_sampler::{Sampler, SamplerConfig};

#[test]
fn every_sampler_line_names_its_source_and_validates() {
    let run = Run::new("trace-sampler::source", Phase::Infer, "cpu").schedule(Schedule {
        skip_first: 0,
        wait: 0,
        warmup: 0,
        active: 2,
        repeat: 1,
    });
    let (session, sink) = TraceSession::in_memory(run);
    let session = Arc::new(session);
    let sampler = Sampler::new();
    sampler.start(&session, SamplerConfig::hz(1000)).unwrap();
    for _ in 0..2 {
        // Some work in each step; how many samples it gets does not matter here.
        let t0 = Instant::now();
        let mut x = 1u64;
        while t0.elapsed() < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        session.step();
        sampler.on_step(&session);
    }
    sampler.stop(&session);
    let stats = sampler.stats().expect("the sampler ran");
    session.finish().unwrap();
    let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    let issues = trace_record::validate(&trace);
    assert!(issues.is_empty(), "{issues:?}");
    let lines: Vec<_> = trace
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Sampler(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    assert!(!lines.is_empty(), "no sampler line");
    let source = stats.source.expect("the source that ran").wire();
    for line in &lines {
        assert_eq!(line.source, Some(source), "{line:?}");
        assert_eq!(line.hz, 1000);
        // The sampler's own CPU time is within the process's, as written.
        if let (Some(own), Some(all)) = (line.sampler_cpu_ns, line.cpu_ns) {
            assert!(own <= all, "{line:?}");
        }
    }
    let account = SamplerAccount::over(&lines);
    assert_eq!(account.sources, [source]);
    assert_eq!(account.steps_without_source, 0);
}
