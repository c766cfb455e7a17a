//! `tracegraph hot` on real sampled waiting: Candle's own thread pool spins and parks between
//! and around its kernels, a single-threaded compute loop does not.
//!
//! Its own test binary: the CPU sampler records every thread of the process. The recording
//! runs in a child process of this binary, so that Candle's pool is sized by the environment
//! (`CANDLE_NUM_THREADS=2`: the caller and one worker) whatever the machine.

#![cfg(all(feature = "demo", target_os = "linux"))]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use candle_core::{Device, Tensor};
use trace_analyze::{LoadOptions, load_path};
use trace_candle::{Capture, Phase, Run, SamplerConfig, SpanKind};

/// trace-candle's profile_llama example (the tiny Llama), shared by the tests that sample it.
#[path = "../../../trace-candle/examples/profile_llama.rs"]
#[allow(dead_code, unreachable_pub)]
mod profile_llama;

mod llama_wake;
mod read_time;

/// Set in a child process of this binary: the path the sampled tiny Llama records into.
const LLAMA_CHILD: &str = "TRACEGRAPH_HOT_TEST_LLAMA_TRACE";

/// In the child process [`record_sampled_llama`] starts: records the tiny Llama into the path
/// it was given and returns true (the test then returns at once); false in the test itself.
fn in_llama_child() -> bool {
    let Some(path) = std::env::var_os(LLAMA_CHILD) else {
        return false;
    };
    profile_llama::run(Path::new(&path)).unwrap();
    true
}

/// Records the tiny Llama (prefill, decode, training) with the CPU sampler on and one compute
/// thread into `path`, in a child process of this binary that runs the test `test` of module
/// `module` (`module_path!()`: the child's `profile_llama` installs a global `tracing`
/// subscriber, and the thread counts come from its environment).
fn record_sampled_llama(module: &str, test: &str, path: &Path) {
    // The harness names a test by its module path less the crate's name.
    let name = match module.split_once("::") {
        Some((_, m)) => format!("{m}::{test}"),
        None => test.to_string(),
    };
    let status = Command::new(std::env::current_exe().unwrap())
        .args([name.as_str(), "--exact", "--test-threads=1"])
        .env(LLAMA_CHILD, path)
        .env("PROFILE_LLAMA_SAMPLE", "1")
        .env("RAYON_NUM_THREADS", "1")
        .env("CANDLE_NUM_THREADS", "1")
        .status()
        .unwrap();
    assert!(status.success());
}

/// Set in the child process: the trace path to record into.
const CHILD: &str = "TRACEGRAPH_HOT_TEST_TRACE";

/// Runs `work` in steps of about 300 ms inside a span named
/// `name`, for at least `min` of that CPU time and until the sampler has taken `samples` more
/// (a loaded machine gives fewer samples per CPU second), giving up after 300 s of CPU time
/// (a sampler that stopped sampling). Bounded by CPU time, not wall time: a busy machine
/// makes the recording longer, never smaller.
fn sampled_steps(capture: &Capture, name: &str, min: Duration, samples: u64, work: impl Fn()) {
    let taken = || capture.sampler_stats().map_or(0, |s| s.taken);
    let target = taken() + samples;
    let cpu0 = testkit::thread_cpu();
    let cpu = || testkit::thread_cpu().checked_sub(cpu0).unwrap();
    while (cpu() < min || taken() < target) && cpu() < Duration::from_mins(5) {
        let _span = capture.span(name, SpanKind::Function);
        // The step's length is only how often the account is read: wall time will do (and
        // reading the CPU time per call would put its own samples among the work's).
        let step = Instant::now();
        while step.elapsed() < Duration::from_millis(300) {
            work();
        }
        drop(_span);
        capture.step();
    }
}

/// `pool`: elementwise ops big enough for Candle's barrier pool (the caller and one worker);
/// `compute`: small matmuls, which stay on the calling thread.
fn record(path: &Path) {
    let x = Tensor::randn(0f32, 1.0, 512 * 1024, &Device::Cpu).unwrap();
    let a = Tensor::randn(0f32, 1.0, (64, 64), &Device::Cpu).unwrap();
    let capture = Capture::open(path, Run::new("hot::waiting", Phase::Infer, "cpu")).unwrap();
    capture.sample_stacks(SamplerConfig::hz(4000)).unwrap();
    // The worker's samples between kernels are about 1.5 % of the pool's: 2,000 samples give
    // about 30 of them (600 gave 9 once on a loaded CI machine, under the test's 10).
    sampled_steps(&capture, "pool", Duration::from_millis(1500), 2000, || {
        std::hint::black_box(x.exp().unwrap().sqr().unwrap());
    });
    sampled_steps(&capture, "compute", Duration::from_millis(600), 200, || {
        std::hint::black_box(a.matmul(&a).unwrap());
    });
    capture.finish().unwrap();
}

fn hot(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tracegraph"))
        .arg("hot")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Frames of Candle's kernels (the work the pool runs), of gemm, and of libm's `expf`.
fn is_kernel(func: &str) -> bool {
    ["cpu_backend", "gemm", "UnaryOpT", "expf", "<f32>::exp"]
        .iter()
        .any(|k| func.contains(k))
}

/// Frames of a job the pool's worker runs: a kernel, the dispatch around it, the closure that
/// catches its panics (inside the worker's loop closure).
fn in_job(func: &str) -> bool {
    is_kernel(func)
        || func.contains("call_trampoline")
        || func.contains("BarrierPool::new::{{closure}}::{{closure}}::{{closure}}")
}

#[test]
fn candles_pool_spinning_is_waiting_and_a_compute_loop_is_not() {
    if let Some(path) = std::env::var_os(CHILD) {
        record(Path::new(&path));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("waiting.trace.jsonl");
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "candles_pool_spinning_is_waiting_and_a_compute_loop_is_not",
            "--exact",
            "--test-threads=1",
        ])
        .env(CHILD, &path)
        .env("CANDLE_NUM_THREADS", "2")
        .env("RAYON_NUM_THREADS", "2")
        .status()
        .unwrap();
    assert!(status.success());

    let trace = load_path(&path, LoadOptions { strict: true }).unwrap();
    let s = &trace.sampled;
    let span_name = |id: Option<u64>| {
        let sp = trace.spans.iter().find(|sp| Some(sp.id) == id)?;
        Some(trace.str(sp.name))
    };
    // In `pool`: samples of Candle's pool worker outside any job (it waits for
    // work), of kernels, and how many of each are classified waiting.
    let (mut idle, mut idle_waiting, mut kernel, mut kernel_waiting) = (0u64, 0, 0, 0);
    let (mut compute, mut compute_waiting, mut waiting0) = (0u64, 0, 0);
    for row in &s.samples {
        let funcs: Vec<&str> = s
            .stack(row.stack)
            .iter()
            .filter_map(|&f| s.frame(f).map(|fr| fr.func))
            .collect();
        let waiting = s.stack_is_waiting(row.stack);
        let worker = funcs.iter().any(|f| f.contains("BarrierPool::new"));
        let in_job = funcs.iter().any(|f| in_job(f));
        let span = span_name(row.span);
        if span == Some("pool") {
            if waiting {
                waiting0 += row.n;
            }
            if worker && !in_job {
                idle += row.n;
                idle_waiting += if waiting { row.n } else { 0 };
            }
            // A kernel's own frames innermost (not the pool's barrier around it).
            let innermost_kernel = funcs.last().is_some_and(|f| is_kernel(f));
            if innermost_kernel {
                kernel += row.n;
                kernel_waiting += if waiting { row.n } else { 0 };
            }
        } else if span == Some("compute") && funcs.iter().any(|f| f.contains("gemm")) {
            compute += row.n;
            compute_waiting += if waiting { row.n } else { 0 };
        }
    }
    assert!(
        waiting0 >= 10,
        "{waiting0} waiting samples around Candle's pool"
    );
    assert!(
        idle >= 10,
        "{idle} samples of the pool worker between kernels"
    );
    assert!(
        idle_waiting * 100 >= idle * 95,
        "{idle_waiting} of {idle} idle-worker samples waiting"
    );
    assert!(
        kernel >= 30 && compute >= 50,
        "{kernel} kernel, {compute} compute samples"
    );
    assert!(
        kernel_waiting * 100 <= kernel,
        "{kernel_waiting} of {kernel} kernel samples waiting"
    );
    assert!(
        compute_waiting * 100 <= compute,
        "{compute_waiting} of {compute} compute samples waiting"
    );

    // `hot`: waiting counted apart, out of the function rankings unless asked.
    let p = path.to_str().unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&hot(&[p, "--json", "--top", "1000"])).unwrap();
    assert!(json["waiting"].as_u64().unwrap() >= waiting0);
    assert_eq!(json["waiting_excluded"], true);
    let rows = json["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["waiting_samples"] == 0), "{rows:?}");
    let kept: serde_json::Value =
        serde_json::from_str(&hot(&[p, "--json", "--top", "1000", "--include-waiting"])).unwrap();
    let kept_waiting: u64 = kept["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["waiting_samples"].as_u64().unwrap())
        .sum();
    assert!(kept_waiting >= waiting0, "{kept_waiting}");
    // The sampler's own threads' CPU time is in the trace and left out of the rate: the
    // achieved rate is the samples over the sampled threads' CPU time, and `hot` says both.
    let acc = &json["sampler"];
    let (own, all) = (
        acc["sampler_cpu_ns"].as_u64().expect("sampler_cpu_ns"),
        acc["cpu_ns"].as_u64().expect("cpu_ns"),
    );
    assert!(own <= all, "{acc}");
    let taken = acc["taken"].as_f64().unwrap();
    let hz = acc["effective_hz"].as_f64().unwrap();
    assert!(
        (hz - taken / ((all - own) as f64 / 1e9)).abs() < 1e-6 * hz.max(1.0),
        "{acc}"
    );
    let text = hot(&[p]);
    assert!(
        text.contains("Hz of the sampled threads' CPU time")
            && text.contains("the sampler's own threads used"),
        "{text}"
    );
    let text = hot(&[p, "--by", "phase"]);
    assert!(text.contains("\nwaiting   "), "{text}");
    assert!(text.contains("└ waiting"), "{text}");
    assert!(text.contains("  waiting "), "{text}");

    // Known costs: the pool's waiting is named, with its evidence, in `hot` and `summary`,
    // exactly when its share reaches the rule's threshold (the share varies from run to run;
    // the rule's own unit tests cover both sides of it).
    let share = json["waiting"].as_f64().unwrap() / json["samples"].as_f64().unwrap();
    let named = share >= trace_analyze::POOL_WAITING_MIN_SHARE;
    let text = hot(&[p]);
    assert_eq!(
        text.contains("of samples are thread pools waiting") && text.contains("[pool_waiting; "),
        named,
        "{share}: {text}"
    );
    let summary = Command::new(env!("CARGO_BIN_EXE_tracegraph"))
        .args(["summary", p])
        .output()
        .unwrap();
    let summary = String::from_utf8(summary.stdout).unwrap();
    assert_eq!(
        summary.contains("sampled CPU (`tracegraph hot`)") && summary.contains("[pool_waiting; "),
        named,
        "{share}: {summary}"
    );
    // One short step: too few samples for its rate, and how many it would have needed.
    let step0: serde_json::Value =
        serde_json::from_str(&hot(&[p, "--steps", "0", "--json"])).unwrap();
    let short = hot(&[p, "--steps", "0"]);
    let too_few = step0["samples"].as_u64().unwrap() < 385;
    assert_eq!(
        short.contains("[too_few_samples; ") && short.contains("385 are needed for ±5 points"),
        too_few,
        "{short}"
    );
}
