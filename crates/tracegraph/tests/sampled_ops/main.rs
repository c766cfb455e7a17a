//! The sampled op table against known work: two Candle ops timed apart, then sampled.
//!
//! Its own test binary: the CPU sampler records every thread of the process. Each recording
//! runs in a child process of this binary with Candle's and rayon's thread counts set to one
//! (`CANDLE_NUM_THREADS`, `RAYON_NUM_THREADS`), so that the timed ops run on the calling
//! thread: their CPU time is their wall time, which the test measures with `Instant`, call
//! by call, leaving out the calls a loaded machine preempted (`unpreempted_ns`).

#![cfg(all(feature = "demo", target_os = "linux"))]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use candle_core::{Device, Tensor};
use trace_analyze::{
    HotBy, HotOptions, LoadOptions, NO_CANDLE_OP, SampledOpOptions, WAITING_ROW, hot_report,
    load_path, sampled_op_table,
};
use trace_candle::{Capture, Phase, Run, SamplerConfig, SpanKind};

/// Set in the child process: the trace path to record into.
const CHILD: &str = "TRACEGRAPH_SAMPLED_OPS_TEST_TRACE";

/// Samples the known-work span must hold: shares within ±3 points (95 %) at this count.
const MIN_SAMPLES: u64 = 1000;

/// Runs this test binary's test `name` as a child that records into `path`, with one thread
/// for Candle and rayon.
fn record_in_child(name: &str, path: &Path) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, path)
        .env("CANDLE_NUM_THREADS", "1")
        .env("RAYON_NUM_THREADS", "1")
        .status()
        .unwrap();
    assert!(status.success(), "recording child failed: {status:?}");
}

/// Runs `work` in steps of about 300 ms inside a span named
/// `name` until the sampler has taken `samples` more (and at least `min` of that CPU time),
/// giving up after 300 s of CPU time (a sampler that stopped sampling). Bounded by CPU
/// time, not wall time: a loaded machine gives fewer samples per CPU second, and makes the
/// recording longer, never smaller.
fn sampled_steps(
    capture: &Capture,
    name: &str,
    min: Duration,
    samples: u64,
    mut work: impl FnMut(),
) {
    let taken = || capture.sampler_stats().map_or(0, |s| s.taken);
    let target = taken() + samples;
    let cpu0 = testkit::thread_cpu();
    let cpu = || testkit::thread_cpu().checked_sub(cpu0).unwrap();
    while (cpu() < min || taken() < target) && cpu() < Duration::from_mins(5) {
        let span = capture.span(name, SpanKind::Function);
        // The step's length is only how often the account is read: wall time will do (and
        // reading the CPU time per call would put its own samples among the work's).
        let step = Instant::now();
        while step.elapsed() < Duration::from_millis(300) {
            work();
        }
        drop(span);
        capture.step();
    }
}

/// What a timed call's wall time says of its CPU time: the sum of its calls' times, each
/// call over 4× the median left out. On one thread a call's wall time is its CPU time unless
/// the thread was preempted inside it; on a loaded machine a few calls are (by a
/// millisecond or more, tens of times a call), and those alone would skew a sum of wall
/// times. Leaving them out (and, idle, the rare call slowed by a page fault) keeps what the
/// samples measure: CPU time.
fn unpreempted_ns(calls: &mut [u64]) -> u128 {
    if calls.is_empty() {
        return 0;
    }
    calls.sort_unstable();
    let cap = calls[calls.len() / 2].saturating_mul(4);
    calls
        .iter()
        .filter(|&&c| c <= cap)
        .map(|&c| u128::from(c))
        .sum()
}

/// The known work: a 64×64 matmul (gemm without threads) and an `exp` over 4 Ki floats (no
/// pool), each timed apart; their results are freed outside the timed parts (a free is no
/// op's). Writes the measured nanoseconds of each to `<path>.times`.
fn record_known_work(path: &Path) {
    let a = Tensor::randn(0f32, 1.0, (64, 64), &Device::Cpu).unwrap();
    let x = Tensor::randn(0f32, 1.0, 4 * 1024, &Device::Cpu).unwrap();
    let capture = Capture::open(path, Run::new("sampled_ops::known", Phase::Infer, "cpu")).unwrap();
    capture.sample_stacks(SamplerConfig::hz(2000)).unwrap();
    let (mut mm, mut exp) = (Vec::new(), Vec::new());
    // Somewhat more than needed: some samples fall outside both ops (the loop, the frees).
    sampled_steps(
        &capture,
        "known",
        Duration::from_millis(900),
        MIN_SAMPLES * 3 / 2,
        || {
            let t = Instant::now();
            let c = a.matmul(&a).unwrap();
            mm.push(t.elapsed().as_nanos() as u64);
            let t = Instant::now();
            let e = x.exp().unwrap();
            exp.push(t.elapsed().as_nanos() as u64);
            std::hint::black_box((c, e));
        },
    );
    capture.finish().unwrap();
    let (mm_ns, exp_ns) = (unpreempted_ns(&mut mm), unpreempted_ns(&mut exp));
    std::fs::write(path.with_extension("times"), format!("{mm_ns} {exp_ns}")).unwrap();
}

#[test]
fn the_sampled_op_table_splits_known_work_as_measured() {
    if let Some(path) = std::env::var_os(CHILD) {
        record_known_work(Path::new(&path));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("known.trace.jsonl");
    record_in_child("the_sampled_op_table_splits_known_work_as_measured", &path);
    let times = std::fs::read_to_string(path.with_extension("times")).unwrap();
    let (mm_ns, exp_ns) = times.split_once(' ').unwrap();
    let (mm_ns, exp_ns): (f64, f64) = (mm_ns.parse().unwrap(), exp_ns.parse().unwrap());
    let measured = mm_ns / (mm_ns + exp_ns);

    let trace = load_path(&path, LoadOptions { strict: true }).unwrap();
    let table = sampled_op_table(&trace, &SampledOpOptions::default()).unwrap();
    let span = table
        .spans
        .iter()
        .find(|s| s.path == "known")
        .unwrap_or_else(|| panic!("no `known` span in {table:#?}"));
    let row = |op: &str| span.rows.iter().find(|r| r.op == op);
    let n = |op: &str| row(op).map_or(0, |r| r.samples);
    let (mm, exp) = (n("matmul"), n("exp"));
    let report = format!(
        "measured matmul {:.1}% of matmul + exp ({mm_ns:.0} / {exp_ns:.0} ns); {span:#?}",
        measured * 100.0
    );
    assert!(span.samples >= MIN_SAMPLES, "too few samples: {report}");
    // The two ops are most of the loop: little is left to the loop, the timers and frees.
    assert!(
        (mm + exp) as f64 >= 0.8 * (span.samples - span.waiting) as f64,
        "matmul and exp are most busy samples: {report}"
    );
    let sampled = mm as f64 / (mm + exp) as f64;
    eprintln!(
        "matmul of matmul + exp: measured {:.1}%, sampled {:.1}% ({mm} + {exp} samples)",
        measured * 100.0,
        sampled * 100.0
    );
    assert!(
        (sampled - measured).abs() <= 0.10,
        "sampled matmul {:.1}% of matmul + exp: {report}",
        sampled * 100.0
    );
    // The rows add up: shares sum to one, and the estimates to the span's self time.
    let shares: f64 = span.rows.iter().map(|r| r.share).sum();
    assert!((shares - 1.0).abs() < 1e-9, "{report}");
    let self_ns = span.self_ns.unwrap() as f64;
    let est: f64 = span
        .rows
        .iter()
        .map(|r| r.est_self_ns.unwrap() as f64)
        .sum();
    assert!((est - self_ns).abs() <= span.rows.len() as f64, "{report}");
    // Each share lies in its interval, and the interval is tight at this count.
    for r in &span.rows {
        assert!(r.share_low <= r.share && r.share <= r.share_high, "{r:?}");
        assert!(r.share_high - r.share_low <= 0.07, "{r:?}");
    }
    // `hot --by op` ranks the same two ops first, with the same counts.
    let hot = hot_report(
        &trace,
        &HotOptions {
            by: HotBy::Op,
            exclude_waiting: true,
            ..HotOptions::default()
        },
    );
    let hot_n = |op: &str| {
        hot.rows
            .iter()
            .find(|r| r.name == op)
            .map_or(0, |r| r.self_samples)
    };
    assert!(hot_n("matmul") >= mm && hot_n("exp") >= exp, "{hot:#?}");
    let top: Vec<&str> = hot.rows.iter().take(2).map(|r| r.name.as_str()).collect();
    assert!(top.contains(&"matmul") && top.contains(&"exp"), "{top:?}");
}

/// An attention-like loop: a matmul, candle_nn's softmax (run on rayon's thread) and a
/// transpose made contiguous, inside `attn`, and Rust work of the program's own in `glue`.
fn record_attention(path: &Path) {
    let q = Tensor::randn(0f32, 1.0, (64, 64), &Device::Cpu).unwrap();
    let capture = Capture::open(path, Run::new("sampled_ops::attn", Phase::Infer, "cpu")).unwrap();
    capture.sample_stacks(SamplerConfig::hz(2000)).unwrap();
    sampled_steps(&capture, "attn", Duration::from_millis(600), 600, || {
        let s = q.matmul(&q.t().unwrap().contiguous().unwrap()).unwrap();
        let p = candle_nn::ops::softmax_last_dim(&s).unwrap();
        std::hint::black_box(p);
    });
    let mut v: Vec<u64> = (0..4096).collect();
    sampled_steps(&capture, "glue", Duration::from_millis(300), 100, || {
        for x in &mut v {
            *x = x.wrapping_mul(6364136223846793005).rotate_left(7);
        }
        std::hint::black_box(&v);
    });
    capture.finish().unwrap();
}

fn tracegraph(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tracegraph"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn ops_sampled_and_hot_by_op_name_the_candle_ops() {
    if let Some(path) = std::env::var_os(CHILD) {
        record_attention(Path::new(&path));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("attn.trace.jsonl");
    record_in_child("ops_sampled_and_hot_by_op_name_the_candle_ops", &path);
    let p = path.to_str().unwrap();

    let text = tracegraph(&["ops", p, "--sampled"]);
    let attn = text
        .split("\n\n")
        .find(|b| b.starts_with("attn — "))
        .unwrap_or_else(|| panic!("no attn block: {text}"));
    for op in ["matmul", "softmax_last_dim", "contiguous"] {
        assert!(attn.contains(&format!("\n  {op} ")), "{op} in {text}");
    }
    // The program's own loop is no Candle op.
    let glue = text
        .split("\n\n")
        .find(|b| b.starts_with("glue — "))
        .unwrap_or_else(|| panic!("no glue block: {text}"));
    assert!(glue.contains(NO_CANDLE_OP), "{text}");
    assert!(!glue.contains("\n  matmul "), "{text}");

    let json: serde_json::Value =
        serde_json::from_str(&tracegraph(&["ops", p, "--sampled", "--json"])).unwrap();
    assert_eq!(json["schema"], "tracegraph.sampled_ops/1");
    let spans = json["spans"].as_array().unwrap();
    let attn = spans.iter().find(|s| s["path"] == "attn").unwrap();
    let rows = attn["rows"].as_array().unwrap();
    let share: f64 = rows.iter().map(|r| r["share"].as_f64().unwrap()).sum();
    assert!((share - 1.0).abs() < 1e-9, "{attn}");
    let softmax = rows.iter().find(|r| r["op"] == "softmax_last_dim").unwrap();
    // softmax runs on rayon's thread: its samples there are named from the kernel.
    assert!(softmax["worker_samples"].as_u64().unwrap() > 0, "{softmax}");
    // The caller waits for rayon meanwhile: waiting, its own row.
    assert!(rows.iter().any(|r| r["op"] == WAITING_ROW), "{attn}");

    let hot = tracegraph(&["hot", p, "--by", "op"]);
    assert!(hot.contains("by Candle op"), "{hot}");
    for op in ["matmul", "softmax_last_dim"] {
        assert!(hot.lines().any(|l| l.starts_with(op)), "{op} in {hot}");
    }
    let limited = tracegraph(&["ops", p, "--sampled", "--limit", "1"]);
    assert!(limited.contains("(other ops)"), "{limited}");
}

#[test]
fn a_trace_without_samples_answers_no_samples() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.trace.jsonl");
    let capture =
        Capture::open(&path, Run::new("sampled_ops::plain", Phase::Infer, "cpu")).unwrap();
    let a = Tensor::ones((4, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
    capture.op("matmul", &[&a, &a], || a.matmul(&a)).unwrap();
    capture.step();
    capture.finish().unwrap();
    let p = path.to_str().unwrap();
    let text = tracegraph(&["ops", p, "--sampled"]);
    assert!(text.starts_with("no samples: "), "{text}");
    let hot = tracegraph(&["hot", p, "--by", "op"]);
    assert!(hot.starts_with("no samples: "), "{hot}");
    let json: serde_json::Value =
        serde_json::from_str(&tracegraph(&["ops", p, "--sampled", "--json"])).unwrap();
    assert_eq!(json["samples"], 0);
}
