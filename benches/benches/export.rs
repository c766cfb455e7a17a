//! Benchmark suite `export`.
//!
//! Chrome trace export of a 1M-op trace (seconds, peak RSS) and export throughput.
//!
//! The trace is recorded with trace-record's `TraceSession` into a temp file: training steps
//! of 1,000 ops (a step span with forward / backward / optimizer spans), each op with its
//! tensor, op, allocation and free events (4 events per op). The export is measured the way a
//! user runs it: `tracegraph export TRACE --format chrome -o OUT.json` with the release CLI,
//! as a child process — wall time, and peak RSS of that process (`/usr/bin/time -v` when
//! present, else the child's `VmHWM` polled every 5 ms). Targets: ≤ 5 s and ≤ 500 MB at 1M
//! ops; the rows compare against the targets (ratio ≤ 1 meets them). `bytes_per_op` is the
//! Chrome file's size per op event with default args (target ≤ 250 B, about what
//! torch.profiler writes per op event), and beside it where those bytes are: op events, logical
//! memory counter samples and the rest, per op event. Each op of this trace allocates its
//! output and frees its input at another time, so it changes the live bytes twice: written
//! change by change (`--memory-resolution-ns 0`, row `bytes_per_op_every_change`) that is two
//! memory samples (about 100 B each) beside its op event (about 160 B). At the default
//! resolution (1 µs) the changes within one µs are written as that µs's peak and its end, so
//! the samples per op depend on how many ops one µs holds at the recording's pace: with ops
//! 1 µs or more apart it is two again.
//!
//! Quick mode (`cargo xtask bench --quick export`) exports a 100k-op trace instead (rows named
//! `..._100k_ops (quick)`), once. The full run exports the 1M-op trace 3 times (median time,
//! largest RSS). A criterion group measures the in-process export of a 10k-op trace into a
//! sink (ns per op) and the folded-stacks fold of the same trace.
//!
//! The same trace is then exported as Parquet tables (`--format parquet -o DIR`, rows
//! `export/parquet_1M_ops`): wall time, peak RSS, the dataset's size and its bytes per op
//! (no target yet: these rows are the measurement).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use trace_export::{ChromeOptions, folded_stacks, write_chrome};
use trace_record::schema::{AllocKind, ExecStep, MemoryCategory, Phase, SpanKind};
use trace_record::{
    MemoryRecord, OpRecord, ReadOptions, Run, TensorRecord, TraceReader, TraceSession,
};
use tracegraph_benches::{Row, emit, emit_time, measure_child, quick, release_cli};

const OPS_PER_STEP: usize = 1000;
const TARGET_SECONDS: f64 = 5.0;
const TARGET_MB: f64 = 500.0;
/// Chrome file bytes per op event with default args.
const TARGET_BYTES_PER_OP: f64 = 250.0;

/// Records a trace of `ops` ops with a real `TraceSession`; returns the events written.
fn record(path: &Path, ops: usize) -> u64 {
    let session = TraceSession::open(path, Run::new("bench::export", Phase::Train, "cpu"))
        .expect("open trace");
    let shape = [32usize, 64];
    let names = ["matmul", "add", "relu", "matmul", "add", "softmax"];
    let mut id = 1u64;
    let mut done = 0usize;
    let mut prev: Option<(u64, MemoryCategory)> = None;
    while done < ops {
        session.step();
        let _step = session.span("train_step", SpanKind::Function, None);
        let in_step = OPS_PER_STEP.min(ops - done);
        let phases = [
            (
                "forward",
                ExecStep::Forward,
                in_step / 2,
                MemoryCategory::Activation,
            ),
            (
                "backward",
                ExecStep::Backward,
                in_step / 4,
                MemoryCategory::Gradient,
            ),
            (
                "optimizer",
                ExecStep::Optimizer,
                in_step - in_step / 2 - in_step / 4,
                MemoryCategory::Temporary,
            ),
        ];
        for (name, exec, n, cat) in phases {
            let _phase = session.span(name, SpanKind::Function, Some(exec));
            for k in 0..n {
                let out = id;
                id += 1;
                let start = session.now_ns();
                let inputs = [out.saturating_sub(1)];
                session.record_tensor(&TensorRecord {
                    id: out,
                    label: None,
                    shape: &shape,
                    dtype: "f32",
                    device: "cpu",
                    requires_grad: false,
                    bytes: 8192,
                    category: cat,
                });
                let dur = session.now_ns().saturating_sub(start).max(1);
                session.record_op(&OpRecord {
                    name: names[k % names.len()],
                    inputs: &inputs,
                    outputs: &[out],
                    shape: &shape,
                    dtype: "f32",
                    device: "cpu",
                    start_ns: start,
                    dur_ns: dur,
                    in_bytes: 8192,
                    out_bytes: 8192,
                    category: Some(cat),
                    flops: None,
                });
                session.record_memory(&MemoryRecord {
                    kind: AllocKind::Alloc,
                    storage: out,
                    tensor: out,
                    bytes: 8192,
                    device: "cpu",
                    category: cat,
                });
                if let Some((p, pc)) = prev.replace((out, cat)) {
                    session.record_memory(&MemoryRecord {
                        kind: AllocKind::Free,
                        storage: p,
                        tensor: p,
                        bytes: 8192,
                        device: "cpu",
                        category: pc,
                    });
                }
            }
        }
        done += in_step;
    }
    let summary = session.finish().expect("finish trace");
    summary.counts.total()
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut c = tracegraph_benches::criterion();

    // In-process throughput on a small trace (criterion).
    let small = dir.path().join("export-10k.jsonl");
    record(&small, 10_000);
    let small_bytes = std::fs::read(&small).expect("read trace");
    let mut group = c.benchmark_group("export");
    group.bench_function("chrome_10k_ops", |b| {
        b.iter(|| {
            let mut reader =
                TraceReader::new(&small_bytes[..], ReadOptions::default()).expect("header");
            write_chrome(&mut reader, std::io::sink(), &ChromeOptions::default()).expect("export")
        });
    });
    group.bench_function("folded_10k_ops", |b| {
        b.iter(|| {
            let mut reader =
                TraceReader::new(&small_bytes[..], ReadOptions::default()).expect("header");
            folded_stacks(&mut reader, None).expect("fold")
        });
    });
    group.finish();
    c.final_summary();
    emit_time(
        "export/chrome_10k_ops (in process, to a sink)",
        "ns_per_op",
        "export/chrome_10k_ops",
        10_000.0,
    );
    emit_time(
        "export/folded_10k_ops (in process)",
        "ns_per_op",
        "export/folded_10k_ops",
        10_000.0,
    );

    // The 1M-op export with the release CLI, as a user runs it.
    let (ops, label) = if quick() {
        (100_000usize, "chrome_100k_ops (quick)")
    } else {
        (1_000_000usize, "chrome_1M_ops")
    };
    let cli = release_cli();
    let trace = dir.path().join("export-big.jsonl");
    let t0 = Instant::now();
    let events = record(&trace, ops);
    let trace_mb = std::fs::metadata(&trace).map_or(0, |m| m.len()) as f64 / 1e6;
    eprintln!(
        "export: recorded {ops} ops ({events} events, {trace_mb:.0} MB) in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    let out = dir.path().join("export-big.chrome.json");
    let repeats = if quick() { 1 } else { 3 };
    let mut times = Vec::new();
    let mut rss = 0u64;
    let mut how = "";
    for _ in 0..repeats {
        let mut cmd = Command::new(&cli);
        cmd.arg("export")
            .arg(&trace)
            .args(["--format", "chrome", "-o"])
            .arg(&out);
        let m = measure_child(cmd, None).expect("no time limit");
        assert!(m.ok, "tracegraph export failed:\n{}", m.stderr);
        let (wall, peak, h) = (m.wall, m.peak_rss.unwrap_or(0), m.rss_source);
        times.push(wall.as_secs_f64());
        rss = rss.max(peak);
        how = h;
    }
    times.sort_by(f64::total_cmp);
    let secs = times[times.len() / 2];
    let out_mb = std::fs::metadata(&out).map_or(0, |m| m.len()) as f64 / 1e6;
    eprintln!(
        "export: {label}: median {secs:.2} s of {repeats}, peak RSS {:.1} MB ({how}), output {out_mb:.0} MB",
        rss as f64 / 1e6
    );
    let bench = format!("export/{label} (release CLI, child process)");
    emit(Row::new(&bench, "wall_seconds", secs, "s").vs("target", TARGET_SECONDS));
    emit(Row::new(&bench, "peak_rss", rss as f64 / 1e6, "MB").vs("target", TARGET_MB));
    emit(Row::new(
        &bench,
        "events_per_second",
        events as f64 / secs,
        "events/s",
    ));
    emit(Row::new(&bench, "output_size", out_mb, "MB"));
    // Bytes of the Chrome file per op event with default args (torch.profiler writes about
    // 249 B per op event into its Chrome trace).
    emit(
        Row::new(&bench, "bytes_per_op", out_mb * 1e6 / ops as f64, "B")
            .vs("target", TARGET_BYTES_PER_OP),
    );
    let kinds = bytes_by_kind(&out);
    for (metric, bytes) in [
        ("op_event_bytes_per_op", kinds.ops),
        ("memory_counter_bytes_per_op", kinds.memory),
        ("other_bytes_per_op", kinds.other),
    ] {
        emit(Row::new(&bench, metric, bytes as f64 / ops as f64, "B"));
    }
    // The same export with every memory change (resolution 0), once, for its size: what the
    // default resolution saves.
    let mut cmd = Command::new(&cli);
    cmd.arg("export")
        .arg(&trace)
        .args(["--format", "chrome", "--memory-resolution-ns", "0", "-o"])
        .arg(&out);
    let m = measure_child(cmd, None).expect("no time limit");
    assert!(
        m.ok,
        "tracegraph export --memory-resolution-ns 0 failed:\n{}",
        m.stderr
    );
    let every_change = std::fs::metadata(&out).map_or(0, |m| m.len()) as f64;
    emit(Row::new(
        &bench,
        "bytes_per_op_every_change",
        every_change / ops as f64,
        "B",
    ));
    let _ = std::fs::remove_file(&out);

    // The same trace as Parquet tables, with the release CLI.
    let label = if quick() {
        "parquet_100k_ops (quick)"
    } else {
        "parquet_1M_ops"
    };
    let dataset = dir.path().join("export-big.parquet");
    let mut times = Vec::new();
    let mut rss = 0u64;
    for _ in 0..repeats {
        let mut cmd = Command::new(&cli);
        cmd.arg("export")
            .args(["--format", "parquet", "-o"])
            .arg(&dataset)
            .arg(&trace);
        let m = measure_child(cmd, None).expect("no time limit");
        assert!(
            m.ok,
            "tracegraph export --format parquet failed:\n{}",
            m.stderr
        );
        times.push(m.wall.as_secs_f64());
        rss = rss.max(m.peak_rss.unwrap_or(0));
    }
    times.sort_by(f64::total_cmp);
    let secs = times[times.len() / 2];
    let bytes = dir_bytes(&dataset);
    eprintln!(
        "export: {label}: median {secs:.2} s of {repeats}, peak RSS {:.1} MB, dataset {:.1} MB",
        rss as f64 / 1e6,
        bytes as f64 / 1e6
    );
    let bench = format!("export/{label} (release CLI, child process)");
    emit(Row::new(&bench, "wall_seconds", secs, "s"));
    emit(Row::new(&bench, "peak_rss", rss as f64 / 1e6, "MB"));
    emit(Row::new(&bench, "output_size", bytes as f64 / 1e6, "MB"));
    emit(Row::new(
        &bench,
        "bytes_per_op",
        bytes as f64 / ops as f64,
        "B",
    ));
}

/// The bytes of a Chrome export by kind of line.
struct ChromeBytes {
    /// Op complete events (`"cat":"op"`).
    ops: u64,
    /// Logical memory counter samples.
    memory: u64,
    /// Everything else: spans, steps, instants, metadata, the frame of the file.
    other: u64,
}

/// Reads the Chrome export at `path` (one event a line) and sums its bytes by kind.
fn bytes_by_kind(path: &Path) -> ChromeBytes {
    use std::io::BufRead;
    let file = std::fs::File::open(path).expect("open the export");
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut sums = ChromeBytes {
        ops: 0,
        memory: 0,
        other: 0,
    };
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .expect("read the export") as u64;
        if n == 0 {
            return sums;
        }
        let has = |needle: &[u8]| line.windows(needle.len()).any(|w| w == needle);
        if line.starts_with(b"{\"ph\":\"X\"") && has(b"\"cat\":\"op\"") {
            sums.ops += n;
        } else if line.starts_with(b"{\"ph\":\"C\",\"name\":\"logical memory ") {
            sums.memory += n;
        } else {
            sums.other += n;
        }
    }
}

/// The bytes of every file under `dir` (the Parquet dataset's partitions).
fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("list the dataset").flatten() {
            let path = entry.path();
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(path),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}
