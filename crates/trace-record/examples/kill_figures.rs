//! Steps lost at SIGKILL: kills a recording child many times and counts the finished steps
//! its trace is missing.
//!
//! ```text
//! cargo run --release -p trace-record --example kill_figures -- KILLS [OPS_PER_STEP [WORK]]
//! ```
//!
//! For plain JSONL and for zstd, `KILLS` times: starts this program as a child recording a
//! fast loop (steps of `OPS_PER_STEP` ops, default 20, with `WORK` rounds of a xorshift
//! between two ops, default 50,000: tens of microseconds) into a temp file, kills it with SIGKILL after a pseudo-random 0.2–1.2 s,
//! and reads the trace. The child reports on stdout, every millisecond, the last step whose
//! `step()` had returned (`done`) and the last one that had returned more than
//! `Run::step_write_bound` earlier (`safe`). Per kill it prints the last step on disk and
//! `lost` = `done` − on disk (finished steps not in the file) and `beyond` = `safe` − on disk
//! (steps lost although they ended more than the bound before the kill: the bound broken);
//! then a summary per compression.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use trace_record::schema::{Event, Phase, SpanKind};
use trace_record::{OpRecord, Run, TraceSession, read_trace};

/// Ops per step by default.
const OPS_PER_STEP: u64 = 20;
/// Rounds of work between two ops by default.
const WORK_ROUNDS: u64 = 50_000;

fn run() -> Run {
    Run::new("examples::kill_figures", Phase::Infer, "cpu")
}

/// `rounds` rounds of a xorshift: the program's work between two ops.
fn work(seed: u64, rounds: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

/// The child: records steps until killed, reporting `safe done` on stdout every millisecond.
fn child(path: &str, ops_per_step: u64, rounds: u64) -> ! {
    let run = run();
    let bound = run.step_write_bound().unwrap_or(Duration::ZERO);
    let session = match TraceSession::open(path, run) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("child: {e}");
            std::process::exit(2);
        }
    };
    let done = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&done);
    std::thread::spawn(move || {
        let mut samples: VecDeque<(Instant, u64)> = VecDeque::new();
        let mut safe = 0;
        let mut out = std::io::stdout().lock();
        loop {
            let now = Instant::now();
            samples.push_back((now, seen.load(Ordering::Acquire)));
            while let Some(&(t, k)) = samples.front() {
                if now.duration_since(t) <= bound {
                    break;
                }
                safe = k;
                samples.pop_front();
            }
            let k = samples.back().map_or(0, |s| s.1);
            if writeln!(out, "{safe} {k}")
                .and_then(|()| out.flush())
                .is_err()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let mut i = 0u64;
    let mut sink = 0u64;
    loop {
        let span = session.span("decode", SpanKind::Function, None);
        for _ in 0..ops_per_step {
            let t = session.now_ns();
            session.record_op(&OpRecord {
                name: "matmul",
                inputs: &[i, i + 1],
                outputs: &[i + 2],
                shape: &[64, 64],
                dtype: "f32",
                device: "cpu",
                start_ns: t,
                dur_ns: 1,
                in_bytes: 32768,
                out_bytes: 16384,
                category: None,
                flops: Some(524_288),
            });
            i += 1;
            sink ^= work(i, rounds);
        }
        drop(span);
        let k = session.step();
        done.store(k, Ordering::Release);
        std::hint::black_box(sink);
    }
}

/// One kill: (done, safe, last step on disk), or why the trace did not read.
fn one_kill(
    path: &Path,
    (ops_per_step, rounds): (u64, u64),
    delay: Duration,
) -> Result<(u64, u64, u64), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .arg("child")
        .arg(path)
        .arg(ops_per_step.to_string())
        .arg(rounds.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let last = Arc::new(Mutex::new((0u64, 0u64)));
    let seen = Arc::clone(&last);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut parts = line.split(' ').map(str::parse::<u64>);
            if let (Some(Ok(safe)), Some(Ok(done))) = (parts.next(), parts.next()) {
                *seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = (safe, done);
            }
        }
    });
    std::thread::sleep(delay);
    child.kill().map_err(|e| e.to_string())?; // SIGKILL
    child.wait().map_err(|e| e.to_string())?;
    reader.join().map_err(|_| "the reader thread panicked")?;
    let (safe, done) = *last
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let trace = read_trace(path).map_err(|e| e.to_string())?;
    let on_disk = trace
        .events
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::Step(s) => Some(s.index),
            _ => None,
        })
        .unwrap_or(0);
    Ok((done, safe, on_disk))
}

fn measure(kills: u64, ops_per_step: u64, rounds: u64) {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("temp dir: {e}");
            std::process::exit(1);
        }
    };
    let mut seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
        | 1;
    println!(
        "step_write_bound {:?}, {ops_per_step} ops a step, {rounds} work rounds an op",
        run().step_write_bound()
    );
    for ext in ["jsonl", "jsonl.zst"] {
        let (mut with_loss, mut max_lost, mut total_lost) = (0u64, 0u64, 0u64);
        let (mut beyond_kills, mut beyond_total, mut errors, mut total_done) =
            (0u64, 0u64, 0u64, 0u64);
        for n in 0..kills {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let delay = Duration::from_millis(200 + seed % 1000);
            let path = dir.path().join(format!("kill-{n}.{ext}"));
            match one_kill(&path, (ops_per_step, rounds), delay) {
                Ok((done, safe, on_disk)) => {
                    let lost = done.saturating_sub(on_disk);
                    let beyond = safe.saturating_sub(on_disk);
                    println!(
                        "{ext} kill {n} after {delay:?}: done {done} safe {safe} on disk {on_disk} lost {lost} beyond {beyond}"
                    );
                    with_loss += u64::from(lost > 0);
                    max_lost = max_lost.max(lost);
                    total_lost += lost;
                    total_done += done;
                    beyond_kills += u64::from(beyond > 0);
                    beyond_total += beyond;
                }
                Err(e) => {
                    println!("{ext} kill {n}: ERROR {e}");
                    errors += 1;
                }
            }
            let _ = std::fs::remove_file(&path);
        }
        println!(
            "SUMMARY {ext}: {kills} kills, {errors} unreadable; finished steps lost in {with_loss} \
             (max {max_lost}, {total_lost} of {total_done} in all); lost beyond the bound in \
             {beyond_kills} ({beyond_total} steps)"
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default);
    match args.first().map(String::as_str) {
        Some("child") => match args.get(1) {
            Some(path) => child(path, num(2, OPS_PER_STEP), num(3, WORK_ROUNDS)),
            None => std::process::exit(2),
        },
        Some(n) => match n.parse() {
            Ok(kills) => measure(kills, num(1, OPS_PER_STEP), num(2, WORK_ROUNDS)),
            Err(_) => {
                eprintln!("usage: kill_figures KILLS [OPS_PER_STEP [WORK]]");
                std::process::exit(2);
            }
        },
        None => measure(30, OPS_PER_STEP, WORK_ROUNDS),
    }
}
