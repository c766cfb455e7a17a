//! Folded sampled stacks.
//!
//! A real sampled demo trace (span path + call stack, weights summing to the samples taken), the
//! exact format, and hostile input.

use std::collections::{HashMap, HashSet};

use trace_export::{
    DEEPER_FRAMES, FoldedSamples, MAX_FOLDED_FRAMES, MAX_SAMPLED_FRAMES, NO_SPAN, UNKNOWN_STACK,
    folded_samples, folded_stacks,
};
use trace_record::schema::{Event, ExecStep};
use trace_record::{ReadOptions, TraceReader};

/// `tracegraph demo --steps 10 --sample` (release build, 1 kHz): steps 7-9 recorded with the
/// CPU sampler on, frames as the sampler symbolized them.
const DEMO: &[u8] = include_bytes!("../data/sampled-demo.jsonl");

const HEADER_V2: &str = r#"{"type":"header","schema":"tracegraph-trace","version":2,"run":{"run_id":"t","entrypoint":"test","phase":"train","device":"cpu","timing":"host","start_unix_ns":0,"pid":7}}"#;

fn fold(bytes: &[u8], step: Option<u64>) -> FoldedSamples {
    let mut reader = TraceReader::new(bytes, ReadOptions::default()).expect("header");
    folded_samples(&mut reader, step).expect("fold")
}

fn text(f: &FoldedSamples) -> String {
    let mut out = Vec::new();
    f.write(&mut out).expect("write");
    String::from_utf8(out).expect("utf-8")
}

fn hand(lines: &[&str]) -> Vec<u8> {
    let mut s = format!("{HEADER_V2}\n");
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    s.into_bytes()
}

/// Every event of a trace.
fn events(bytes: &[u8]) -> Vec<Event> {
    TraceReader::new(bytes, ReadOptions::default())
        .expect("header")
        .map(|l| l.expect("line").event)
        .collect()
}

#[test]
fn the_demo_folds_every_sample_under_its_span_path() {
    let f = fold(DEMO, None);
    let evs = events(DEMO);
    let mut taken = 0;
    let mut by_phase: HashMap<Option<ExecStep>, u64> = HashMap::new();
    for e in &evs {
        match e {
            Event::Sampler(s) => taken += s.taken,
            Event::Samples(s) => *by_phase.entry(s.phase).or_default() += s.n,
            _ => {}
        }
    }
    assert!(taken > 0, "the fixture has samples");
    // No sample dropped, none invented: the weights sum to what the sampler took.
    let sum: u64 = f.lines.iter().map(|(_, n)| n).sum();
    assert_eq!(sum, f.total_samples);
    assert_eq!(f.total_samples, taken);
    assert_eq!(f.sampler.taken, taken);
    assert_eq!(f.sampler.steps, 3);
    assert_eq!(f.sampler.requested_hz, 1000);
    assert!(f.sampler.ns_per_sample().is_some_and(|ns| ns > 0.0));
    assert_eq!((f.without_span, f.unknown_stacks, f.truncated), (0, 0, 0));
    assert_eq!(f.adjustments.total(), 0);

    // The span part is a span path of the span folded stacks (same names, same nesting),
    // and the call stack follows from the thread's entry.
    let mut reader = TraceReader::new(DEMO, ReadOptions::default()).expect("header");
    let spans = folded_stacks(&mut reader, None).expect("fold spans");
    let mut span_paths: HashSet<String> = HashSet::new();
    for (stack, _) in &spans.lines {
        let frames: Vec<&str> = stack.split(';').collect();
        for k in 1..=frames.len() {
            span_paths.insert(frames[..k].join(";"));
        }
    }
    let mut on_main = 0;
    for (stack, _) in &f.lines {
        let frames: Vec<&str> = stack.split(';').collect();
        let k = (1..frames.len())
            .rev()
            .find(|&k| span_paths.contains(&frames[..k].join(";")))
            .unwrap_or_else(|| panic!("no span path starts {stack}"));
        // The call stack from the thread's entry: the main thread's through `main`,
        // Candle's worker threads' through `start_thread`.
        let call = &frames[k..];
        assert!(
            call.iter()
                .any(|fr| fr.starts_with("main (") || fr.starts_with("start_thread (")),
            "{stack}"
        );
        if call.iter().any(|fr| fr.starts_with("main (")) {
            on_main += 1;
        }
    }
    assert!(on_main > 0);

    // Backward's samples are under the `backward` span and break down into Candle's
    // backprop and kernels.
    let backward: Vec<&(String, u64)> = f
        .lines
        .iter()
        .filter(|(s, _)| s.starts_with("backward;"))
        .collect();
    let backward_n: u64 = backward.iter().map(|(_, n)| n).sum();
    assert_eq!(
        backward_n,
        by_phase
            .get(&Some(ExecStep::Backward))
            .copied()
            .unwrap_or(0)
    );
    assert!(backward_n > 0);
    // On the main thread, inside Candle's backprop (worker threads run its kernels).
    assert!(
        backward
            .iter()
            .filter(|(s, _)| s.contains(";main ("))
            .all(|(s, _)| s.contains("candle-core-0.11.1/src/backprop.rs")),
        "{backward:#?}"
    );
    // Broken down: distinct innermost frames under backward (kernels, memset, the
    // thread pool's spin-wait).
    let leaves: HashSet<&str> = backward
        .iter()
        .filter_map(|(s, _)| s.rsplit(';').next())
        .collect();
    assert!(leaves.len() >= 3, "{leaves:?}");

    // One line per stack, `frames count`, sorted.
    let t = text(&f);
    assert_eq!(t.lines().count(), f.lines.len());
    for line in t.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("stack and count");
        assert!(n.parse::<u64>().is_ok_and(|n| n > 0), "{line}");
        assert!(!stack.contains('\n'));
    }
}

#[test]
fn one_step_of_the_demo() {
    let evs = events(DEMO);
    for step in [7, 8, 9] {
        let taken: u64 = evs
            .iter()
            .filter_map(|e| match e {
                Event::Sampler(s) if s.step == step => Some(s.taken),
                _ => None,
            })
            .sum();
        let f = fold(DEMO, Some(step));
        assert!(f.step_found);
        assert_eq!(f.sampler.steps, 1);
        assert_eq!(f.total_samples, taken, "step {step}");
        assert_eq!(f.lines.iter().map(|(_, n)| n).sum::<u64>(), taken);
    }
    let f = fold(DEMO, Some(3));
    assert!(!f.step_found);
    assert!(f.lines.is_empty());
}

#[test]
fn golden_folded_samples() {
    let bytes = hand(&[
        r#"{"type":"step","index":0,"ts":0}"#,
        r#"{"type":"span_start","id":1,"name":"forward","kind":"function","step":"forward","thread":0,"ts":0}"#,
        r#"{"type":"span_start","id":2,"parent":1,"name":"model;x","kind":"module","thread":0,"ts":10}"#,
        r#"{"type":"span_end","id":2,"ts":50}"#,
        r#"{"type":"span_end","id":1,"ts":60}"#,
        r#"{"type":"frame","id":1,"func":"main","file":"src/main.rs"}"#,
        r#"{"type":"frame","id":2,"func":"candle_core::tensor::Tensor::matmul"}"#,
        r#"{"type":"frame","id":3,"func":"record<a::b>","file":"src/ring.rs","inlined":true}"#,
        r#"{"type":"frame","id":4,"func":"<T as x::Y>::f"}"#,
        r#"{"type":"stack","id":1,"frames":[1,2]}"#,
        r#"{"type":"stack","id":2,"frames":[1,4,3]}"#,
        r#"{"type":"samples","step":0,"thread":9,"stack":1,"n":5,"phase":"forward","span":2}"#,
        r#"{"type":"samples","step":0,"thread":10,"stack":1,"n":2,"phase":"forward","span":2}"#,
        r#"{"type":"samples","step":0,"thread":9,"stack":2,"n":1,"phase":"forward","span":1}"#,
        r#"{"type":"samples","step":0,"thread":9,"stack":2,"n":3,"phase":"backward"}"#,
        r#"{"type":"samples","step":0,"thread":9,"stack":1,"n":4}"#,
        r#"{"type":"samples","step":0,"thread":9,"stack":77,"n":6,"span":1}"#,
        r#"{"type":"samples","step":0,"thread":9,"stack":1,"n":1,"span":999}"#,
        r#"{"type":"sampler","step":0,"hz":1000,"taken":22,"lost":1,"cpu_ns":44000000,"ts":0,"dur":60}"#,
        r#"{"type":"trailer","outcome":"complete","counts":{},"dropped":0,"ts":70}"#,
    ]);
    let f = fold(&bytes, None);
    assert_eq!(
        text(&f),
        "[backward];main (src/main.rs);<T as x::Y>::f;record<a::b> (src/ring.rs) 3\n\
         [no span];main (src/main.rs);candle_core::tensor::Tensor::matmul 5\n\
         forward;[unknown stack] 6\n\
         forward;main (src/main.rs);<T as x::Y>::f;record<a::b> (src/ring.rs) 1\n\
         forward;model:x;main (src/main.rs);candle_core::tensor::Tensor::matmul 7\n"
    );
    assert_eq!(f.total_samples, 22);
    // Phase-only (3), neither (4), a span the trace does not have (1).
    assert_eq!(f.without_span, 8);
    assert_eq!(f.unknown_stacks, 6);
    assert_eq!(f.sampler.lost, 1);
    assert!(
        f.sampler
            .ns_per_sample()
            .is_some_and(|ns| (ns - 2_000_000.0).abs() < 1e-6)
    );
    assert!(
        f.sampler
            .effective_hz
            .is_some_and(|hz| (hz - 500.0).abs() < 1e-9)
    );
    assert!(text(&f).contains(NO_SPAN) && text(&f).contains(UNKNOWN_STACK));
}

#[test]
fn the_sampler_s_own_cpu_time_is_not_what_samples_stand_for() {
    // 44 ms of process CPU in two steps; the sampler's own threads used 2 ms of the first
    // step's 20 and all 24 of the second's (its line says 30: clamped to the whole), 26 ms.
    // The 11 samples stand for the other 18 ms: about 1.6 ms each, 611 Hz (the process's CPU
    // time alone would say 4 ms and 250 Hz).
    let bytes = hand(&[
        r#"{"type":"step","index":0,"ts":0}"#,
        r#"{"type":"span_start","id":1,"name":"forward","kind":"function","thread":0,"ts":0}"#,
        r#"{"type":"span_end","id":1,"ts":10}"#,
        r#"{"type":"frame","id":1,"func":"main"}"#,
        r#"{"type":"stack","id":1,"frames":[1]}"#,
        r#"{"type":"samples","step":0,"thread":9,"stack":1,"n":11,"span":1}"#,
        r#"{"type":"sampler","step":0,"hz":1000,"taken":11,"lost":0,"cpu_ns":20000000,"sampler_cpu_ns":2000000,"ts":0,"dur":20}"#,
        r#"{"type":"step","index":1,"ts":20}"#,
        r#"{"type":"span_start","id":2,"name":"forward","kind":"function","thread":0,"ts":20}"#,
        r#"{"type":"span_end","id":2,"ts":30}"#,
        r#"{"type":"sampler","step":1,"hz":1000,"taken":0,"lost":0,"cpu_ns":24000000,"sampler_cpu_ns":30000000,"ts":20,"dur":20}"#,
        r#"{"type":"trailer","outcome":"complete","counts":{},"dropped":0,"ts":40}"#,
    ]);
    let f = fold(&bytes, None);
    assert_eq!(f.sampler.steps, 2);
    assert_eq!(f.sampler.cpu_ns, Some(44_000_000));
    assert_eq!(f.sampler.sampler_cpu_ns, Some(26_000_000));
    assert!(
        f.sampler
            .ns_per_sample()
            .is_some_and(|ns| (ns - 18_000_000.0 / 11.0).abs() < 1e-6)
    );
    assert!(
        f.sampler
            .effective_hz
            .is_some_and(|hz| (hz - 11.0 / 0.018).abs() < 1e-6)
    );
}

#[test]
fn samples_of_the_boundary_after_the_last_step_are_in_no_step() {
    // `step()` at the end of each iteration: step 0, step 1, then the empty boundary the last
    // `step()` opens, in which `finish()` ran (and the sampler took a sample and accounted
    // for it).
    let bytes = hand(&[
        r#"{"type":"span_start","id":1,"name":"forward","kind":"function","thread":0,"ts":0}"#,
        r#"{"type":"span_end","id":1,"ts":60}"#,
        r#"{"type":"step","index":1,"ts":100}"#,
        r#"{"type":"span_start","id":2,"name":"forward","kind":"function","thread":0,"ts":110}"#,
        r#"{"type":"span_end","id":2,"ts":160}"#,
        r#"{"type":"step","index":2,"ts":200}"#,
        r#"{"type":"frame","id":1,"func":"main"}"#,
        r#"{"type":"stack","id":1,"frames":[1]}"#,
        r#"{"type":"samples","step":0,"thread":9,"stack":1,"n":5,"span":1}"#,
        r#"{"type":"sampler","step":0,"hz":1000,"taken":5,"lost":0,"ts":0,"dur":100}"#,
        r#"{"type":"samples","step":1,"thread":9,"stack":1,"n":4,"span":2}"#,
        r#"{"type":"sampler","step":1,"hz":1000,"taken":4,"lost":0,"ts":100,"dur":100}"#,
        r#"{"type":"samples","step":2,"thread":9,"stack":1,"n":2}"#,
        r#"{"type":"sampler","step":2,"hz":1000,"taken":2,"lost":0,"ts":200,"dur":30}"#,
    ]);
    let f = fold(&bytes, None);
    assert_eq!(text(&f), "forward;main 9\n");
    assert_eq!((f.total_samples, f.outside_steps), (9, 2));
    assert_eq!((f.sampler.steps, f.sampler.taken), (2, 9));
    let f0 = fold(&bytes, Some(0));
    assert!(f0.step_found);
    assert_eq!(f0.total_samples, 5);
    let f2 = fold(&bytes, Some(2));
    assert!(!f2.step_found, "the boundary is no step");
    assert_eq!(f2.total_samples, 0);
}

#[test]
fn a_trace_without_samples_folds_to_nothing() {
    let f = fold(testkit::session_trace(3).as_slice(), None);
    assert!(f.lines.is_empty());
    assert_eq!(f.total_samples, 0);
    assert_eq!(f.sampler.steps, 0);
    assert_eq!(f.sampler.cpu_ns, None);
    assert_eq!(f.sampler.ns_per_sample(), None);
}

#[test]
fn deep_spans_and_stacks_are_cut_in_linear_size() {
    let depth = 3 * MAX_FOLDED_FRAMES as usize;
    let mut lines: Vec<String> = Vec::new();
    lines.push(r#"{"type":"step","index":0,"ts":0}"#.into());
    for i in 1..=depth {
        let parent = if i > 1 {
            format!(r#""parent":{},"#, i - 1)
        } else {
            String::new()
        };
        lines.push(format!(
            r#"{{"type":"span_start","id":{i},{parent}"name":"s{i}","kind":"function","thread":0,"ts":{i}}}"#
        ));
    }
    for i in (1..=depth).rev() {
        lines.push(format!(
            r#"{{"type":"span_end","id":{i},"ts":{}}}"#,
            2 * depth - i + 1
        ));
    }
    let frames = 2 * MAX_SAMPLED_FRAMES;
    for i in 1..=frames {
        lines.push(format!(r#"{{"type":"frame","id":{i},"func":"f{i}"}}"#));
    }
    let ids: Vec<String> = (1..=frames).map(|i| i.to_string()).collect();
    lines.push(format!(
        r#"{{"type":"stack","id":1,"frames":[{}]}}"#,
        ids.join(",")
    ));
    // Every span names the deep stack: the output stays linear in the input.
    for i in 1..=depth {
        lines.push(format!(
            r#"{{"type":"samples","step":0,"thread":1,"stack":1,"n":1,"span":{i}}}"#
        ));
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let f = fold(&hand(&refs), None);
    assert_eq!(f.total_samples, depth as u64);
    assert_eq!(f.lines.iter().map(|(_, n)| n).sum::<u64>(), depth as u64);
    for (stack, _) in &f.lines {
        let n = stack.split(';').count();
        assert!(
            n <= MAX_FOLDED_FRAMES as usize + MAX_SAMPLED_FRAMES,
            "{n} frames"
        );
        assert!(stack.ends_with(DEEPER_FRAMES));
        assert!(stack.contains(&format!(";f{};", MAX_SAMPLED_FRAMES - 1)));
        assert!(!stack.contains(&format!(";f{MAX_SAMPLED_FRAMES};")));
    }
    // Spans deeper than the cap share one cut prefix.
    assert_eq!(f.lines.len(), MAX_FOLDED_FRAMES as usize + 1);
    assert_eq!(f.truncated, depth as u64);
}
