//! Benchmark suite `sampler`.
//!
//! The CPU sampler's cost at 1 and 4 kHz on the demo's training step and on a tiny Llama's
//! generation, and the sampling rate achieved at each rate.
//!
//! Each rate is one capture whose sampler runs at that rate, with a schedule that alternates
//! recorded and idle steps (wait 1, active 1, forever): a recorded step samples, an idle one
//! does not, so the same work alternates on and off step by step, the order flipping every
//! round, for a time budget per workload (10 s quick, 40 s full). Medians. The 1 kHz rows
//! keep their names; the 4 kHz rows end in `_4k`.
//!
//! Rows:
//! - `sampler/train_step ns_per_step (median)` (`sampler/train_step_4k` at 4 kHz): one step
//!   of `tracegraph demo`'s trainer (`crates/tracegraph/src/demo/mlp.rs`, uninstrumented)
//!   while the CPU sampler runs, against the same step with the sampler disarmed. Targets:
//!   ratio ≤ 1.03 at 1 kHz, ≤ 1.06 at 4 kHz. `median_paired_ratio` is the median of the
//!   per-round ratios.
//! - `sampler/llama_generate ns_per_generation (median, RAYON_NUM_THREADS=n)`
//!   (`sampler/llama_generate_4k`): one generation of the tiny candle-transformers Llama that
//!   `profile_llama` profiles (prefill of its 16-token prompt, then 20 greedy decode steps
//!   with a fresh KV cache; the model itself uninstrumented), on against off as above; same
//!   targets. Run it with `RAYON_NUM_THREADS` set (`cargo xtask bench` does): unset, Candle
//!   reads /proc on every matmul, which hides the sampler's cost. The metric names the value.
//! - `sampler/rate achieved_hz` (`sampler/rate_4k`): samples taken per second of process CPU
//!   time over the capture's sampled steps (both workloads), against the requested rate
//!   (the ratio is achieved / requested; target ≥ 0.9 at both rates): the ticker (the
//!   default source) delivers it less the sampler's own threads' CPU time and the samples
//!   of threads found asleep that it did not catch running again; perf events
//!   (`TRACEGRAPH_SAMPLER_SOURCE=perf_event`) less time in the kernel where only user space
//!   may be sampled; the process CPU-time timer, where neither works, is capped by the
//!   kernel's tick. The source and the rate over the sampled threads' CPU time go to stderr.
//! - `sampler/rate sampled_threads_hz` (`sampler/rate_4k`): the same samples per second of
//!   the sampled threads' CPU time (the process's less the sampler's own threads'), against
//!   the requested rate: the rate as `tracegraph hot` and `summary` report it, and as
//!   `SamplerConfig`'s `hz` defines it (the sampler's threads are never sampled). The row above
//!   keeps the process's CPU time for continuity; it also charges the sampler's own work.
//! - `sampler/rate lost_per_1000` (`sampler/rate_4k`): samples lost per 1000 taken
//!   (target ≤ 10).
//!
//! - `sampler/process_llama_<n>gen` (`sampler/process_llama_<n>gen_4k`), `n` = 100 and 1000:
//!   one process per mode, the tiny Llama's generation `n` times, each generation one recorded
//!   step of a capture (`RAYON_NUM_THREADS=1` in every child, whatever this process has), the
//!   modes interleaved round by round in rotated order: the sampler on; no sampler; and no
//!   sampler under `perf record -F <same rate> --call-graph dwarf` (`/usr/bin/perf` or `perf`
//!   on the `PATH`; the rows that need it say "perf not installed" on stderr and are skipped
//!   when it is absent or fails). Times are the children's own generation loops (the steps),
//!   so neither tool's work after the steps (our symbolization at `finish`, perf's at `perf
//!   report`) is in them; every child also reports its whole wall and CPU time on stderr.
//!   Metrics: `ns_per_generation (median, RAYON_NUM_THREADS=1)` (sampler on, against off);
//!   `on_over_off (median paired ratio)` against perf's own ratio to the same round's off run
//!   (target: ours ≤ perf's); `on_over_perf (median paired ratio)`: the sampler-on run over
//!   the same round's perf run, against the goal of 1, with its 95 % interval of the median
//!   (distribution-free) and a verdict on stderr: met when the whole interval is ≤ 1, missed
//!   when it is > 1, unresolved when it spans 1 (a short run's wall time moves ±15 % from
//!   one process to the next on a shared VM, hence 15 rounds, 5 quick);
//!   `rss_added_during_steps` (MiB, median): the child's resident
//!   memory after its last recorded step less before its first, with the sampler on, against
//!   the goal of 16 MiB. Regime: a lowest-priority (`nice -n 19`) spinner process keeps each
//!   CPU the workload leaves idle busy during these rounds (on a virtual machine an idle vCPU
//!   halts, and waking it costs more than a sampler: without it a sampler looks free). The
//!   children honour `TRACEGRAPH_SAMPLER_DIAGNOSE` too (for runs by hand: the suite itself
//!   runs these rows only without it).
//!
//! `TRACEGRAPH_SAMPLER_DIAGNOSE=deliver_only` or `tick_only` runs the same rounds with a
//! [`SamplerDiagnostic`] instead of sampling (the threads are interrupted as when sampling
//! but no stack is read; or the ticker ticks and sends nothing), to split the on/off cost
//! into its parts. Those runs emit only the on/off rows, named
//! `sampler/<row>_<diagnostic>` (e.g. `sampler/train_step_4k_deliver_only`), so a
//! diagnosis never stands in for the real rows; any other value is an error.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use trace_candle::{Capture, SamplerConfig, SamplerDiagnostic};
use trace_record::schema::{Phase, Schedule};
use trace_record::{Run, TraceSession};
use tracegraph_benches::{Rounds, Row, alternate, emit, emit_paired, median, quick, status_bytes};

// The trainer `tracegraph demo` runs: one home (the CLI), measured here as is.
#[path = "../../crates/tracegraph/src/demo/mlp.rs"]
mod mlp;

// The model `profile_llama` profiles: one home (the example), its configuration and sizes.
#[path = "../../crates/trace-candle/examples/profile_llama.rs"]
#[allow(dead_code, unreachable_pub)]
mod profile_llama;

// The tiny Llama the llama and flight suites measure, here without a capture.
#[path = "shared/tiny_llama.rs"]
mod tiny_llama;

use mlp::MlpTrainer;
use profile_llama::tiny_config;

/// The tiny Llama, uninstrumented (built under no `tracing` subscriber): the llama suite's
/// [`tiny_llama::Model`] without a capture, and the example's prompt.
struct TinyLlama {
    model: tiny_llama::Model,
    prompt: Vec<u32>,
}

impl TinyLlama {
    fn new() -> Self {
        let model = tiny_llama::Model::new(None, &tiny_config(), tiny_llama::Omit::default())
            .expect("tiny Llama");
        TinyLlama {
            model,
            prompt: tiny_llama::prompt(),
        }
    }

    /// Prefill of the prompt, then `DECODE` greedy decode steps with a fresh KV cache.
    fn generate(&self) -> Vec<u32> {
        self.model.generate(&self.prompt).expect("generate")
    }
}

/// The workloads measured at each rate.
struct Work {
    trainer: MlpTrainer,
    llama: TinyLlama,
    rounds: Rounds,
}

/// The diagnostic `TRACEGRAPH_SAMPLER_DIAGNOSE` asks for (see the module docs).
fn diagnostic_from_env() -> Option<SamplerDiagnostic> {
    let value = std::env::var("TRACEGRAPH_SAMPLER_DIAGNOSE").ok()?;
    let all = [SamplerDiagnostic::DeliverOnly, SamplerDiagnostic::TickOnly];
    let found = all.into_iter().find(|d| d.as_str() == value);
    assert!(
        found.is_some(),
        "TRACEGRAPH_SAMPLER_DIAGNOSE={value:?}: expected deliver_only or tick_only"
    );
    found
}

/// Runs both workloads on and off under one capture sampling at `hz` (or running
/// `diagnostic` instead) and emits the rows, their bench names ending in `suffix`.
fn measure(
    dir: &Path,
    hz: u32,
    suffix: &str,
    diagnostic: Option<SamplerDiagnostic>,
    work: &mut Work,
) {
    let run = Run::new("benches::sampler", Phase::Train, "cpu").schedule(Schedule {
        skip_first: 0,
        wait: 1,
        warmup: 0,
        active: 1,
        repeat: 0,
    });
    let path = dir.join(format!("sampler-{hz}.jsonl"));
    let session = Arc::new(TraceSession::open(path, run).expect("trace file"));
    let capture = Capture::new(Arc::clone(&session));
    let config = SamplerConfig {
        diagnostic,
        ..SamplerConfig::hz(hz)
    };
    capture.sample_stacks(config).expect("sampler");
    let suffix = match diagnostic {
        Some(d) => format!("{suffix}_{d}"),
        None => suffix.to_string(),
    };
    // Steps the capture (and so the sampler) to the wanted state, then times `f` in it.
    let timed = |on: bool, f: &mut dyn FnMut()| {
        while capture.is_active() != on {
            capture.step();
        }
        let start = Instant::now();
        f();
        let ns = start.elapsed().as_nanos() as f64;
        capture.step();
        ns
    };
    let trainer = &mut work.trainer;
    let (train_on, train_off) = alternate(work.rounds, 1, |on| {
        timed(on, &mut || {
            black_box(trainer.step().expect("step"));
        })
    });
    let llama = &work.llama;
    let (gen_on, gen_off) = alternate(work.rounds, 1, |on| {
        timed(on, &mut || {
            black_box(llama.generate());
        })
    });
    capture.finish().expect("finish");
    let stats = capture.sampler_stats().expect("sampler stats");
    eprintln!(
        "sampler at {hz} Hz: {} training and {} generation rounds; {} samples taken, {} lost over {} sampled steps; training accuracy {:.3}",
        train_on.len(),
        gen_on.len(),
        stats.taken,
        stats.lost,
        stats.steps,
        work.trainer.accuracy().expect("accuracy")
    );
    // Which source sampled (the ticker, perf events, or the timer), and the
    // rate over the sampled threads' CPU time (the process's less the sampler thread's own).
    eprintln!(
        "sampler/rate{suffix}: source {}; {:.0} Hz of the sampled threads' CPU time, the sampler thread used {:.1} ms of {:.1} ms",
        stats.source.map_or("none", |s| s.as_str()),
        stats.sampled_hz().unwrap_or(f64::NAN),
        stats.sampler_cpu_ns.unwrap_or(0) as f64 / 1e6,
        stats.cpu_ns.unwrap_or(0) as f64 / 1e6,
    );
    if let Some(d) = diagnostic {
        eprintln!(
            "sampler/rate{suffix}: diagnostic {d}: {} signals handled without a sample",
            stats.interrupts
        );
    }
    emit_paired(
        &format!("sampler/train_step{suffix}"),
        "ns_per_step (median)",
        "same step, sampler timer disarmed (alternating)",
        train_on,
        train_off,
    );
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "unset".to_string());
    emit_paired(
        &format!("sampler/llama_generate{suffix}"),
        &format!("ns_per_generation (median, RAYON_NUM_THREADS={threads})"),
        "same generation, sampler disarmed (alternating)",
        gen_on,
        gen_off,
    );
    if diagnostic.is_some() {
        return;
    }
    let rate = format!("sampler/rate{suffix}");
    // Over the process's CPU time, then over the sampled threads' (see the module docs).
    for (metric, hz) in [
        ("achieved_hz", stats.effective_hz()),
        ("sampled_threads_hz", stats.sampled_hz()),
    ] {
        let row = Row::new(&rate, metric, hz.unwrap_or(f64::NAN), "Hz");
        emit(row.vs("requested", f64::from(config.hz)));
    }
    emit(Row::new(
        &rate,
        "lost_per_1000",
        if stats.taken > 0 {
            stats.lost as f64 * 1000.0 / stats.taken as f64
        } else {
            f64::NAN
        },
        "samples",
    ));
}

/// The environment variable that makes this bench a child of the process rows: `off:N`,
/// `on:HZ:N` (N generations, each one recorded step) or `spin` (the idle-CPU spinner).
const PROCESS_CHILD: &str = "TRACEGRAPH_SAMPLER_PROCESS";

/// This process's user and system CPU time, ns (`/proc/self/stat`, clock ticks of 10 ms).
fn process_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10_000_000)
}

/// Each thread's name and CPU time so far (user and system, ms), from `/proc/self/task`.
fn thread_cpu_ms() -> String {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return String::new();
    };
    let mut out: Vec<String> = tasks
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.ok()?.path().join("stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            let name = head.split_once('(')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
            Some(format!("{name} {}", ticks * 10))
        })
        .collect();
    out.sort();
    out.join(", ")
}

/// One child run: `n` generations, each a recorded step of a capture, the sampler at `hz`
/// when given. Prints one line to stdout: `loop_ns rss_before rss_after sampler_cpu_ns taken`.
fn process_child(hz: Option<u32>, n: usize) {
    let llama = TinyLlama::new();
    for _ in 0..3 {
        black_box(llama.generate());
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let run = Run::new("benches::sampler::process", Phase::Infer, "cpu");
    let session = Arc::new(TraceSession::open(dir.path().join("t.jsonl"), run).expect("trace"));
    let capture = Capture::new(Arc::clone(&session));
    if let Some(hz) = hz {
        let mut config = SamplerConfig::hz(hz);
        if let Some(d) = diagnostic_from_env() {
            config = config.with_diagnostic(d);
        }
        capture.sample_stacks(config).expect("sampler");
    }
    let rss_before = status_bytes("VmRSS").unwrap_or(0);
    let start = Instant::now();
    for _ in 0..n {
        black_box(llama.generate());
        capture.step();
    }
    let loop_ns = start.elapsed().as_nanos();
    let rss_after = status_bytes("VmRSS").unwrap_or(0);
    let threads = thread_cpu_ms();
    let summary = capture.finish().expect("finish");
    let (sampler_cpu, taken) = capture
        .sampler_stats()
        .map_or((0, 0), |s| (s.sampler_cpu_ns.unwrap_or(0), s.taken));
    let mib = |b: u64| b as f64 / 1_048_576.0;
    eprintln!(
        "process child {hz:?} Hz x {n}: whole process {:.1} ms CPU; resident {:.1} MiB before \
         the steps, {:.1} MiB after them, {:.1} MiB after finish, peak {:.1} MiB; CPU by thread \
         after the steps (ms): {threads}; trace: {} bytes, {} samples, {} stack, {} frame lines",
        process_cpu_ns().unwrap_or(0) as f64 / 1e6,
        mib(rss_before),
        mib(rss_after),
        mib(status_bytes("VmRSS").unwrap_or(0)),
        mib(status_bytes("VmHWM").unwrap_or(0)),
        summary.bytes,
        summary.counts.samples,
        summary.counts.stack,
        summary.counts.frame,
    );
    println!("{loop_ns} {rss_before} {rss_after} {sampler_cpu} {taken}");
}

/// What one child reported.
#[derive(Debug, Clone, Copy)]
struct ChildRun {
    loop_ns: f64,
    rss_added: f64,
    sampler_cpu_ns: f64,
}

/// Runs this bench as a child with `spec` (see [`PROCESS_CHILD`]), under `perf record` at
/// `perf_hz` when given; `Err` says why there is no result.
fn run_child(spec: &str, perf: Option<(&Path, u32, &Path)>) -> Result<ChildRun, String> {
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().map_err(|e| format!("this bench's path: {e}"))?;
    let mut cmd = match perf {
        Some((perf, hz, out)) => {
            let mut c = Command::new(perf);
            c.args([
                "record",
                "-q",
                "-F",
                &hz.to_string(),
                "--call-graph",
                "dwarf",
                "-o",
            ])
            .arg(out)
            .arg("--")
            .arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    cmd.args(std::env::args_os().skip(1))
        .env(PROCESS_CHILD, spec)
        .env("RAYON_NUM_THREADS", "1")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let out = cmd
        .output()
        .map_err(|e| format!("{spec}: did not start: {e}"))?;
    if !out.status.success() {
        return Err(format!("{spec}: failed: {}", out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let nums: Vec<f64> = text
        .lines()
        .last()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    let [loop_ns, before, after, sampler_cpu_ns, _taken] = nums[..] else {
        return Err(format!("{spec}: unexpected output {text:?}"));
    };
    Ok(ChildRun {
        loop_ns,
        rss_added: (after - before) / 1048576.0,
        sampler_cpu_ns,
    })
}

/// `perf` on this machine: `/usr/bin/perf`, else the first on the `PATH`.
fn find_perf() -> Option<std::path::PathBuf> {
    let fixed = std::path::PathBuf::from("/usr/bin/perf");
    if fixed.exists() {
        return Some(fixed);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("perf"))
            .find(|p| p.exists())
    })
}

/// The process rows (see the module docs): per length and rate, the sampler on, off, and
/// perf, one child process each, interleaved round by round.
fn process_rows(dir: &Path) {
    // Many rounds: a 0.2 s run's wall time moves by ±15 % from one process to the next on a
    // shared VM, so that a few rounds cannot tell two tools 5 % apart.
    let rounds = if quick() { 5 } else { 15 };
    let perf = find_perf();
    if perf.is_none() {
        eprintln!("sampler/process_llama: perf not installed: the perf comparison is skipped");
    }
    // The spinners: every CPU the one compute thread leaves idle, at the lowest priority.
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let exe = std::env::current_exe().expect("this bench's path");
    let mut spinners: Vec<std::process::Child> = (1..cpus)
        .filter_map(|_| {
            std::process::Command::new("nice")
                .args(["-n", "19"])
                .arg(&exe)
                .env(PROCESS_CHILD, "spin")
                .spawn()
                .ok()
        })
        .collect();
    let cases: Vec<(usize, u32)> = [100usize, 1000]
        .into_iter()
        .flat_map(|n| [1000u32, 4000].map(|hz| (n, hz)))
        .collect();
    // Per case: (on, off, perf) runs, round by round.
    let mut runs: Vec<Vec<(ChildRun, ChildRun, Option<ChildRun>)>> = vec![Vec::new(); cases.len()];
    let mut perf_error: Option<String> = None;
    for round in 0..rounds {
        for (c, &(n, hz)) in cases.iter().enumerate() {
            let perf_out = dir.join(format!("perf-{round}-{c}.data"));
            let one = |mode: usize, perf_ok: bool| -> Result<Option<ChildRun>, String> {
                match mode {
                    0 => run_child(&format!("on:{hz}:{n}"), None).map(Some),
                    1 => run_child(&format!("off:{n}"), None).map(Some),
                    _ => match &perf {
                        Some(p) if perf_ok => {
                            let r = run_child(&format!("off:{n}"), Some((p, hz, &perf_out)));
                            let _ = std::fs::remove_file(&perf_out);
                            r.map(Some)
                        }
                        _ => Ok(None),
                    },
                }
            };
            let mut got: [Option<ChildRun>; 3] = [None; 3];
            for k in 0..3 {
                let mode = (k + round + c) % 3;
                match one(mode, perf_error.is_none()) {
                    Ok(r) => got[mode] = r,
                    Err(e) if mode == 2 => {
                        eprintln!("sampler/process_llama: perf record failed, skipped: {e}");
                        perf_error = Some(e);
                    }
                    Err(e) => panic!("sampler/process_llama: {e}"),
                }
            }
            if let [Some(on), Some(off), p] = got {
                runs[c].push((on, off, p));
            }
        }
    }
    for s in &mut spinners {
        let _ = s.kill();
        let _ = s.wait();
    }
    for (&(n, hz), runs) in cases.iter().zip(runs) {
        let suffix = if hz == 1000 { "" } else { "_4k" };
        let bench = format!("sampler/process_llama_{n}gen{suffix}");
        let per = n as f64;
        let on: Vec<f64> = runs.iter().map(|r| r.0.loop_ns / per).collect();
        let off: Vec<f64> = runs.iter().map(|r| r.1.loop_ns / per).collect();
        emit(
            Row::new(
                &bench,
                "ns_per_generation (median, RAYON_NUM_THREADS=1)",
                median(&mut on.clone()),
                "ns",
            )
            .vs("no sampler (own process)", median(&mut off.clone())),
        );
        let mut ours: Vec<f64> = runs.iter().map(|r| r.0.loop_ns / r.1.loop_ns).collect();
        let mut theirs: Vec<f64> = runs
            .iter()
            .filter_map(|r| Some(r.2?.loop_ns / r.1.loop_ns))
            .collect();
        // Ours against perf's, round by round (the two runs nearest in time).
        let mut head_to_head: Vec<f64> = runs
            .iter()
            .filter_map(|r| Some(r.0.loop_ns / r.2?.loop_ns))
            .collect();
        let ci = |v: &mut Vec<f64>| {
            tracegraph_benches::median_ci95(v).map_or_else(
                || "no 95 % interval (under 6 rounds)".to_string(),
                |(lo, hi)| format!("95 % interval of the median {lo:.3}–{hi:.3}"),
            )
        };
        eprintln!(
            "{bench}: {} rounds; on/off {}; perf/off {}",
            runs.len(),
            ci(&mut ours),
            ci(&mut theirs)
        );
        let row = Row::new(
            &bench,
            "on_over_off (median paired ratio)",
            median(&mut ours),
            "x",
        );
        if theirs.is_empty() {
            eprintln!(
                "bench-row: {bench} on_over_off: perf not installed (or failed): no perf baseline"
            );
            emit(row);
        } else {
            emit(row.vs(
                &format!("perf record -F {hz} --call-graph dwarf"),
                median(&mut theirs),
            ));
            // The goal (ours ≤ perf's) judged by the paired interval: met when its top is at
            // most 1, missed when its bottom is above 1, unresolved at this noise otherwise.
            let verdict = match tracegraph_benches::median_ci95(&mut head_to_head.clone()) {
                Some((_, hi)) if hi <= 1.0 => "ours ≤ perf's: met (the whole interval ≤ 1)",
                Some((lo, _)) if lo > 1.0 => "ours ≤ perf's: missed (the whole interval > 1)",
                Some(_) => "ours ≤ perf's: not resolved at this noise (the interval spans 1)",
                None => "ours ≤ perf's: too few rounds for an interval",
            };
            eprintln!("{bench}: on/perf {}; {verdict}", ci(&mut head_to_head));
            emit(
                Row::new(
                    &bench,
                    "on_over_perf (median paired ratio)",
                    median(&mut head_to_head),
                    "x",
                )
                .vs("goal", 1.0),
            );
        }
        let mut rss: Vec<f64> = runs.iter().map(|r| r.0.rss_added).collect();
        emit(Row::new(&bench, "rss_added_during_steps", median(&mut rss), "MiB").vs("goal", 16.0));
        let mut cpu: Vec<f64> = runs.iter().map(|r| r.0.sampler_cpu_ns / 1e6).collect();
        eprintln!(
            "{bench}: the sampler's threads used {:.1} ms of CPU during the steps (median of {} runs)",
            median(&mut cpu),
            runs.len()
        );
    }
}

fn main() {
    if let Ok(spec) = std::env::var(PROCESS_CHILD) {
        let parts: Vec<&str> = spec.split(':').collect();
        let num = |i: usize| -> usize {
            parts
                .get(i)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| {
                    panic!("{PROCESS_CHILD}={spec:?}: expected off:N, on:HZ:N or spin")
                })
        };
        match parts.first().copied() {
            Some("spin") => loop {
                std::hint::spin_loop();
            },
            Some("off") => process_child(None, num(1)),
            Some("on") => process_child(Some(num(1) as u32), num(2)),
            _ => panic!("{PROCESS_CHILD}={spec:?}: expected off:N, on:HZ:N or spin"),
        }
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (warmup, rounds) = if quick() {
        (5, (10, 20, 400))
    } else {
        (20, (40, 100, 4000))
    };
    let mut work = Work {
        trainer: MlpTrainer::new(None, 42, 0.01).expect("trainer"),
        llama: TinyLlama::new(),
        rounds: Rounds {
            budget: Duration::from_secs(rounds.0),
            min_rounds: rounds.1,
            max_rounds: rounds.2,
        },
    };
    for _ in 0..warmup {
        black_box(work.trainer.step().expect("step"));
        black_box(work.llama.generate());
    }
    // The default rate (1 kHz), then 4 kHz.
    let diagnostic = diagnostic_from_env();
    measure(dir.path(), 1000, "", diagnostic, &mut work);
    measure(dir.path(), 4000, "_4k", diagnostic, &mut work);
    if diagnostic.is_none() {
        process_rows(dir.path());
    }
}
