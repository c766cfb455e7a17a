//! A tiny candle-transformers Llama decoding with one compute thread (`RAYON_NUM_THREADS=1`),
//! sampled: the capture's step-boundary wake (`Capture::step` → the sampler's `advance` →
//! `unpark` → `futex_wake`) is the profiler's own work, never waiting, and the pool-waiting
//! hint ("thread pools waiting … try fewer threads") never counts it.
//!
//! The recording runs in a child process of this binary (the example installs a global
//! `tracing` subscriber, and the thread counts come from its environment). What is asserted
//! is the classification of whatever samples the run took, never their number.

use trace_analyze::{HotOptions, LoadOptions, hot_report, load_path};

use crate::profile_llama;

#[test]
fn a_single_threaded_llama_decodes_wake_is_the_profilers_and_in_no_hint() {
    if crate::in_llama_child() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("llama.trace.jsonl");
    crate::record_sampled_llama(
        module_path!(),
        "a_single_threaded_llama_decodes_wake_is_the_profilers_and_in_no_hint",
        &path,
    );

    let trace = load_path(&path, LoadOptions { strict: true }).unwrap();
    let s = &trace.sampled;
    assert!(!s.steps.is_empty(), "the sampler accounted for the steps");
    let name = |f: u32| s.frame(f).map_or("", |fr| fr.func);
    let (mut at_boundary, mut total) = (0u64, 0u64);
    for row in &s.samples {
        total += row.n;
        let frames = s.stack(row.stack);
        let names: Vec<&str> = frames.iter().map(|&f| name(f)).collect();
        // The sampler never runs the program's code: any stack through it is its own.
        let sampler = frames
            .iter()
            .any(|&f| s.frame_crate(f) == Some("trace_sampler"));
        // The step boundary: `Capture::step` and what it calls (the capture's own work only:
        // it runs none of the program's code), qualified or named by line tables.
        let step = frames.iter().any(|&f| {
            let fr = s.frame(f);
            name(f).ends_with("Capture::step")
                || (name(f) == "step"
                    && fr
                        .and_then(|fr| fr.file)
                        .is_some_and(|p| p.ends_with("trace-candle/src/capture.rs")))
        });
        if sampler || step {
            at_boundary += row.n;
            assert!(
                s.stack_is_profiler(row.stack) && !s.stack_is_waiting(row.stack),
                "the profiler's own stack classified otherwise: {names:?}"
            );
        }
    }
    // Said, not asserted: how many there were depends on the machine.
    eprintln!("{total} samples, {at_boundary} of them at the step boundary or in the sampler");
    // The decode steps (1..=DECODE): the pool-waiting hint's evidence is the waiting samples
    // only, and none of them is the profiler's. (Whether it fires depends on what else was
    // sampled: a one-thread rayon pool's worker going to sleep is the program's waiting, and
    // a decode of 20 tokens may hold only a few samples; the hint's rule is tested on
    // constructed traces in trace-analyze.)
    let decode = hot_report(
        &trace,
        &HotOptions {
            steps: Some((1, profile_llama::DECODE as u64)),
            exclude_waiting: true,
            ..HotOptions::default()
        },
    );
    let in_decode = |step: u64| (1..=profile_llama::DECODE as u64).contains(&step);
    let (mut waiting, mut profiler) = (0u64, 0u64);
    for r in s.samples.iter().filter(|r| in_decode(r.step)) {
        if s.stack_is_waiting(r.stack) {
            waiting += r.n;
        }
        if s.stack_is_profiler(r.stack) {
            profiler += r.n;
        }
    }
    assert_eq!((decode.waiting, decode.profiler), (waiting, profiler));
    if let Some(h) = decode.hints.iter().find(|h| h.rule == "pool_waiting") {
        assert_eq!(h.samples, waiting, "{h:?}");
        let program = decode.samples - decode.profiler;
        assert!(
            (h.share - waiting as f64 / program as f64).abs() < 1e-12,
            "{h:?}"
        );
    }
}
