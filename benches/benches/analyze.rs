//! Benchmark suite `analyze`: `tracegraph summary` (the release CLI, run as a child process) on
//! generated traces of 10k, 100k and 1M ops (4 events per op: tensor, op, alloc, free) — wall
//! time and peak RSS — side by side with candle-graph 0.7.0's `summary` on the same content
//! (converted to its trace format) where it finishes in under 3 minutes.
//!
//! Targets: 1M ops in ≤ 5 s with ≤ 1 GB peak RSS; ≥ 100× faster than candle-graph at 100k.
//! Quick mode (`cargo xtask bench --quick analyze`) runs each size once and skips candle-graph
//! at 100k (it takes minutes); the full run repeats each measurement 3 times (median time,
//! largest RSS) and runs candle-graph at 10k and 100k.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use candle_graph::trace::{
    MemoryAction, MemoryCategory as CgCategory, MemoryEvent as CgMemory, OpEvent as CgOp,
    SpanEndEvent, SpanKind as CgSpanKind, SpanStartEvent, TensorEvent as CgTensor, TimingMode,
    TraceRunMeta,
};
use candle_graph::{ExecutionPhase, ExecutionStep, TraceEvent};
use testkit::{SynthConfig, write_synthetic};
use trace_record::schema::{self as wire, Event};
use tracegraph_benches::{Row, emit, emit_time, measure_child, quick, release_cli};

const BASELINE_ENV: &str = "TRACEGRAPH_ANALYZE_BASELINE";
const BASELINE: &str = "candle-graph 0.7.0 summary";
const BASELINE_LIMIT: Duration = Duration::from_mins(3);

fn main() {
    // Child mode: run candle-graph's summary on one trace and exit.
    if let Some(path) = std::env::var_os(BASELINE_ENV) {
        let out = std::env::temp_dir().join(format!("cg-summary-{}.json", std::process::id()));
        let r = candle_graph::cli::trace_cli::run_summary(Path::new(&path), Some(&out));
        let _ = std::fs::remove_file(&out);
        if let Err(e) = r {
            eprintln!("candle-graph summary failed: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let cli = release_cli();
    let mut c = tracegraph_benches::criterion();

    let sizes: [(usize, &str, bool); 3] = [
        (10_000, "10k", true),
        (100_000, "100k", !quick()),
        (1_000_000, "1M", false),
    ];
    let repeats = if quick() { 1 } else { 3 };
    let mut rows = Vec::new();
    for (ops, label, with_baseline) in sizes {
        let ours_path = dir.path().join(format!("synthetic-{label}.jsonl"));
        let events = generate(&ours_path, ops);
        let mut times = Vec::new();
        let mut rss = 0u64;
        for _ in 0..repeats {
            let mut cmd = Command::new(&cli);
            cmd.arg("summary").arg(&ours_path).arg("--json");
            let m = measure_child(cmd, None).expect("tracegraph summary runs");
            assert!(m.ok, "tracegraph summary failed on {}", ours_path.display());
            times.push(m.wall.as_secs_f64());
            rss = rss.max(m.peak_rss.unwrap_or(0));
        }
        let ours = median(&mut times);
        let mut baseline: Option<(f64, u64)> = None;
        let mut baseline_timed_out = false;
        if with_baseline {
            let cg_path = dir.path().join(format!("candle-graph-{label}.jsonl"));
            convert_to_candle_graph(&ours_path, &cg_path);
            let exe = std::env::current_exe().expect("own path");
            let mut cmd = Command::new(exe);
            cmd.env(BASELINE_ENV, &cg_path);
            match measure_child(cmd, Some(BASELINE_LIMIT)) {
                Some(m) if m.ok => {
                    baseline = Some((m.wall.as_secs_f64(), m.peak_rss.unwrap_or(0)));
                }
                Some(_) => eprintln!("analyze: {BASELINE} failed at {label}; no baseline row"),
                None => {
                    baseline_timed_out = true;
                    eprintln!(
                        "analyze: {BASELINE} did not finish {label} ops in {} s (killed); \
                         its time is reported as a lower bound",
                        BASELINE_LIMIT.as_secs()
                    );
                }
            }
            let _ = std::fs::remove_file(&cg_path);
        } else if ops == 100_000 {
            eprintln!(
                "analyze: quick mode skips {BASELINE} at 100k ops (it takes minutes); \
                 run `cargo xtask bench analyze` for that row"
            );
        }
        rows.push((label, ops, events, ours, rss, baseline, baseline_timed_out));
        if ops == 10_000 {
            // In-process load + summarize, measured by criterion (ns per op).
            let text = std::fs::read_to_string(&ours_path).expect("read trace");
            let mut g = c.benchmark_group("analyze");
            g.bench_function("inprocess_summary_10k", |b| {
                b.iter(|| {
                    let t =
                        trace_analyze::load_str(&text, "bench", Default::default()).expect("loads");
                    let cache = trace_analyze::new_step_cache();
                    trace_analyze::summarize(&t, &cache).expect("summary")
                });
            });
            g.finish();
        }
        let _ = std::fs::remove_file(&ours_path);
    }
    c.final_summary();

    for (label, ops, events, ours, rss, baseline, timed_out) in rows {
        let bench = format!("analyze/summary_{label}_ops");
        let mut time_row = Row::new(&bench, "cli_wall_time", ours, "s");
        let mut rss_row = Row::new(&bench, "cli_peak_rss", rss as f64 / 1048576.0, "MiB");
        if let Some((b, brss)) = baseline {
            time_row = time_row.vs(BASELINE, b);
            rss_row = rss_row.vs(BASELINE, brss as f64 / 1048576.0);
        }
        emit(time_row);
        emit(rss_row);
        if timed_out {
            // The baseline was killed at the limit: its time is at least that (ratio is an
            // upper bound of ours / baseline).
            emit(
                Row::new(&bench, "cli_wall_time_vs_killed_baseline", ours, "s").vs(
                    &format!(
                        "{BASELINE} (killed at {} s: lower bound)",
                        BASELINE_LIMIT.as_secs()
                    ),
                    BASELINE_LIMIT.as_secs_f64(),
                ),
            );
        }
        emit(Row::new(
            &bench,
            "events_per_s",
            events as f64 / ours,
            "events/s",
        ));
        let _ = ops;
    }
    emit_time(
        "analyze/inprocess_summary_10k_ops",
        "ns_per_op",
        "analyze/inprocess_summary_10k",
        10_000.0,
    );
}

/// Writes a synthetic trace of `ops` ops; returns its event count.
fn generate(path: &Path, ops: usize) -> u64 {
    let f = File::create(path).expect("create trace");
    let mut w = BufWriter::with_capacity(1 << 20, f);
    let n = write_synthetic(
        &mut w,
        &SynthConfig {
            ops,
            ops_per_step: 1000,
            ..Default::default()
        },
    )
    .expect("write trace");
    w.flush().expect("flush");
    n
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v[v.len() / 2]
}

fn cg_category(c: wire::MemoryCategory) -> CgCategory {
    match c {
        wire::MemoryCategory::Parameter => CgCategory::Parameter,
        wire::MemoryCategory::Activation | wire::MemoryCategory::Input => CgCategory::Activation,
        wire::MemoryCategory::Gradient => CgCategory::Gradient,
        wire::MemoryCategory::OptimizerState => CgCategory::Optimizer,
        wire::MemoryCategory::Temporary | wire::MemoryCategory::Other => CgCategory::Other,
    }
}

/// Rewrites one of our traces as candle-graph's `trace/6` JSONL with the same content: every
/// span, op, tensor and memory event, under one measured root span (candle-graph requires
/// exactly one root and one measured region).
fn convert_to_candle_graph(ours: &Path, out: &Path) {
    let reader = trace_record::TraceReader::open(ours, Default::default()).expect("open trace");
    let header = reader.header().clone();
    let f = File::create(out).expect("create");
    let mut w = BufWriter::with_capacity(1 << 20, f);
    let put = |w: &mut BufWriter<File>, e: &TraceEvent| {
        serde_json::to_writer(&mut *w, e).expect("serialize");
        w.write_all(b"\n").expect("write");
    };
    put(
        &mut w,
        &TraceEvent::meta(TraceRunMeta {
            run_id: header.run.run_id.clone(),
            correlation_id: header.run.run_id.clone(),
            entrypoint: header.run.entrypoint.clone(),
            phase: ExecutionPhase::Train,
            timestamp: "2026-01-01T00:00:00Z".into(),
            capture_step: 1,
            warmup_steps: 0,
            device: header.run.device.clone(),
            measured_region_device_synchronized: false,
            timing_mode: TimingMode::Host,
            tags: Default::default(),
            candle_version: None,
        }),
    );
    let root = "run".to_string();
    put(
        &mut w,
        &TraceEvent::SpanStart(SpanStartEvent {
            id: root.clone(),
            parent_id: None,
            name: "run".into(),
            start_ns: 0,
            kind: CgSpanKind::Function,
            measured: true,
            step: None,
        }),
    );
    let mut starts = std::collections::HashMap::new();
    let mut last = 0u64;
    let sid = |s: Option<u64>| s.map_or_else(|| "run".to_string(), |s| format!("s{s}"));
    for le in reader {
        let le = le.expect("read event");
        match le.event {
            Event::SpanStart(s) => {
                starts.insert(s.id, s.ts);
                put(
                    &mut w,
                    &TraceEvent::SpanStart(SpanStartEvent {
                        id: format!("s{}", s.id),
                        parent_id: Some(sid(s.parent)),
                        name: s.name,
                        start_ns: s.ts,
                        kind: CgSpanKind::Function,
                        measured: false,
                        step: s.step.map(|x| match x {
                            wire::ExecStep::Forward => ExecutionStep::Forward,
                            wire::ExecStep::Backward => ExecutionStep::Backward,
                            wire::ExecStep::Optimizer => ExecutionStep::Optimizer,
                        }),
                    }),
                );
            }
            Event::SpanEnd(s) => {
                last = last.max(s.ts);
                let start = starts.get(&s.id).copied().unwrap_or(s.ts);
                put(
                    &mut w,
                    &TraceEvent::SpanEnd(SpanEndEvent {
                        id: format!("s{}", s.id),
                        duration_ns: s.ts - start,
                    }),
                );
            }
            Event::Op(o) => put(
                &mut w,
                &TraceEvent::Op(CgOp {
                    span_id: sid(o.span),
                    op_name: o.name,
                    inputs: o.inputs.iter().map(|i| format!("t{i}")).collect(),
                    output: o.outputs.first().map(|i| format!("t{i}")),
                    shape: o.shape,
                    dtype: o.dtype,
                    device: o.device,
                    duration_ns: o.dur,
                    timestamp_ns: o.ts,
                    storage_bytes: Some(o.out_bytes),
                    input_storage_bytes: o.in_bytes,
                }),
            ),
            Event::Tensor(t) => put(
                &mut w,
                &TraceEvent::Tensor(CgTensor {
                    span_id: sid(t.span),
                    tensor_id: format!("t{}", t.id),
                    shape: t.shape,
                    dtype: t.dtype,
                    device: t.device,
                    requires_grad: t.requires_grad,
                    storage_bytes: Some(t.bytes),
                    category: cg_category(t.category),
                }),
            ),
            Event::Memory(m) => put(
                &mut w,
                &TraceEvent::Memory(CgMemory {
                    timestamp_ns: m.ts,
                    tensor_id: format!("t{}", m.tensor),
                    span_id: sid(m.span),
                    op_name: None,
                    device: m.device,
                    bytes: m.bytes,
                    action: match m.kind {
                        wire::AllocKind::Alloc => MemoryAction::Alloc,
                        wire::AllocKind::Free => MemoryAction::Free,
                    },
                    shape: Vec::new(),
                    dtype: "f32".into(),
                    category: cg_category(m.category),
                }),
            ),
            _ => {}
        }
    }
    put(
        &mut w,
        &TraceEvent::SpanEnd(SpanEndEvent {
            id: root,
            duration_ns: last + 1,
        }),
    );
    w.flush().expect("flush");
}
