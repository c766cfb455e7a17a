//! `cargo xtask parquet-check`: the Parquet export read by DuckDB and Polars from PyPI.
//!
//! Steps: build the release `tracegraph`; record the demo's trace (with the CPU sampler) and a
//! run of 4 ranks as 4 real processes (this program re-run as `parquet-check --rank-child R
//! DIR`, rank 2 slowed down on purpose); export all five traces into one Parquet dataset
//! (`--run` names the ranks one run); take `tracegraph ops --json` and `memory --json` of
//! every trace (its `heap` object: the ranks record tracked-heap lines) and the straggler
//! table of `summary --json` over the 4 ranks; install the
//! pinned `duckdb` and `polars` wheels into a virtual environment under the target directory
//! (once; reused while the pins match); then run every DuckDB and Polars query of
//! `docs/exports.md` marked `<!-- parquet-check: ENGINE NAME -->` over the dataset, as
//! written there, and check that both engines agree with each other and with tracegraph's
//! numbers. Fails on any difference, and when a documented query is missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use trace_record::schema::{
    AllocKind, Event, HeapAllocEvent, HeapFreeEvent, HeapSmallEvent, MemoryCategory, Phase,
    SpanKind,
};
use trace_record::{MemoryRecord, OpRecord, Run, TraceSession};

/// The PyPI packages the check installs, pinned.
const WHEELS: [&str; 2] = ["duckdb==2.0.1", "polars==2.1.0"];
/// Ranks of the recorded run, the one slowed down, and its steps.
const RANKS: u32 = 4;
const SLOW: u32 = 2;
const STEPS: usize = 6;
/// The run id the 4 ranks are exported under (each process has its own header run id).
const RANKS_RUN: &str = "parquet-check-4-ranks";

/// Runs the check (or, with `--rank-child R DIR`, records one rank).
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    if let [flag, rank, dir] = args
        && flag == "--rank-child"
    {
        return record_rank(Path::new(dir), rank.parse().context("--rank-child RANK")?);
    }
    if !args.is_empty() {
        bail!("parquet-check takes no arguments");
    }
    let started = Instant::now();
    let (target, out, tg) = super::fresh_check(root, "parquet-check")?;

    let t = Instant::now();
    let demo_dir = out.join("demo");
    let mut demo = Command::new(&tg);
    demo.arg("demo").arg("--out").arg(&demo_dir).arg("--sample");
    demo.stdout(std::process::Stdio::null());
    super::run(demo)?;
    let demo_trace = demo_dir.join("trace.jsonl");
    let ranks_dir = out.join("ranks");
    std::fs::create_dir_all(&ranks_dir)?;
    record_ranks(&ranks_dir)?;
    let rank_traces: Vec<PathBuf> = (0..RANKS)
        .map(|r| ranks_dir.join(format!("rank-{r}.jsonl")))
        .collect();
    eprintln!("parquet-check: traces recorded in {:.1} s", secs(t));

    let t = Instant::now();
    let dataset = out.join("dataset");
    let mut export = Command::new(&tg);
    export
        .args(["export", "--format", "parquet", "-o"])
        .arg(&dataset)
        .arg(&demo_trace);
    super::run(export)?;
    let mut export = Command::new(&tg);
    export
        .args(["export", "--format", "parquet", "--run", RANKS_RUN, "-o"])
        .arg(&dataset)
        .arg(&ranks_dir);
    super::run(export)?;
    eprintln!("parquet-check: exported in {:.1} s", secs(t));

    let mut traces = Vec::new();
    let demo_run = header_run_id(&demo_trace)?;
    traces.push(expected_trace(&tg, &demo_trace, &demo_run, 0)?);
    for (r, p) in rank_traces.iter().enumerate() {
        traces.push(expected_trace(&tg, p, RANKS_RUN, r as u32)?);
    }
    let mut summary = Command::new(&tg);
    summary.args(["summary", "--json"]).args(&rank_traces);
    let ranks = json_of(summary)?;
    let steps = ranks["steps"].as_array().map_or(0, Vec::len);
    if steps == 0 {
        bail!("the rank report of the 4 ranks has no straggler rows: {ranks}");
    }
    let expected = json!({
        "traces": traces,
        "runs": [{ "run_id": RANKS_RUN, "ranks": ranks }],
    });
    let expected_path = out.join("expected.json");
    std::fs::write(
        &expected_path,
        serde_json::to_string_pretty(&expected)? + "\n",
    )
    .with_context(|| format!("writing {}", expected_path.display()))?;

    let t = Instant::now();
    let python = python_env(&target)?;
    eprintln!(
        "parquet-check: Python environment ready in {:.1} s",
        secs(t)
    );
    let script = out.join("check.py");
    std::fs::write(&script, CHECK_PY).with_context(|| format!("writing {}", script.display()))?;
    let t = Instant::now();
    let mut check = Command::new(&python);
    check
        .arg(&script)
        .arg(root.join("docs/exports.md"))
        .arg(&dataset)
        .arg(&expected_path);
    super::run(check)?;
    eprintln!(
        "parquet-check: queries checked in {:.1} s ({:.1} s in all)",
        secs(t),
        secs(started)
    );
    Ok(())
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// Records the 4 ranks as 4 processes at once (this program, `--rank-child`).
fn record_ranks(dir: &Path) -> Result<()> {
    let exe = std::env::current_exe().context("locating the xtask binary")?;
    let children = (0..RANKS)
        .map(|r| {
            Command::new(&exe)
                .arg("parquet-check")
                .arg("--rank-child")
                .arg(r.to_string())
                .arg(dir)
                .spawn()
                .with_context(|| format!("starting rank {r}"))
        })
        .collect::<Result<Vec<_>>>()?;
    for (r, mut c) in children.into_iter().enumerate() {
        let status = c.wait().with_context(|| format!("waiting for rank {r}"))?;
        if !status.success() {
            bail!("rank {r} failed with {status}");
        }
    }
    Ok(())
}

/// One rank: `STEPS` steps of a span with two ops and an activation allocated and freed,
/// and tracked-heap lines (a buffer kept to the end, a temporary freed in the step, small
/// allocations counted); rank [`SLOW`] works 20 ms more per step.
fn record_rank(dir: &Path, rank: u32) -> Result<()> {
    let path = dir.join(format!("rank-{rank}.jsonl"));
    let run = Run::new("xtask::parquet_check", Phase::Train, "cpu").rank(rank, RANKS);
    let s =
        TraceSession::open(&path, run).with_context(|| format!("opening {}", path.display()))?;
    let weights = MemoryRecord {
        kind: AllocKind::Alloc,
        storage: 1,
        tensor: 1,
        bytes: 4096,
        device: "cpu",
        category: MemoryCategory::Parameter,
    };
    s.record_memory(&weights);
    for step in 0..STEPS as u64 {
        {
            let _span = s.span("train_step", SpanKind::Function, None);
            let act = MemoryRecord {
                kind: AllocKind::Alloc,
                storage: 100 + step,
                tensor: 100 + step,
                bytes: 1024 * (1 + u64::from(rank)),
                device: "cpu",
                category: MemoryCategory::Activation,
            };
            s.record_memory(&act);
            let heap_alloc = |id: u64, bytes: u64| {
                Event::HeapAlloc(HeapAllocEvent {
                    id,
                    bytes,
                    thread: 1,
                    ts: s.now_ns(),
                    phase: None,
                    span: None,
                })
            };
            s.record_heap(&[
                heap_alloc(2 * step + 1, 65536 * (1 + u64::from(rank))),
                heap_alloc(2 * step + 2, 8192),
            ]);
            for (name, ms) in [("matmul", 3), ("add", 1)] {
                let start = s.now_ns();
                std::thread::sleep(Duration::from_millis(ms));
                if name == "matmul" && rank == SLOW {
                    std::thread::sleep(Duration::from_millis(20));
                }
                s.record_op(&OpRecord {
                    name,
                    inputs: &[1, 100 + step],
                    outputs: &[200 + step],
                    shape: &[16, 16],
                    dtype: "f32",
                    device: "cpu",
                    start_ns: start,
                    dur_ns: s.now_ns().saturating_sub(start),
                    in_bytes: 2048,
                    out_bytes: 1024,
                    category: Some(MemoryCategory::Activation),
                    flops: None,
                });
            }
            s.record_memory(&MemoryRecord {
                kind: AllocKind::Free,
                ..act
            });
            s.record_heap(&[
                Event::HeapFree(HeapFreeEvent {
                    id: 2 * step + 2,
                    ts: s.now_ns(),
                }),
                Event::HeapSmall(HeapSmallEvent {
                    step,
                    phase: None,
                    span: None,
                    count: 3 + step,
                    bytes: 96,
                }),
            ]);
        }
        s.step();
    }
    s.finish().context("finishing the rank's trace")?;
    Ok(())
}

/// The header's run id of the trace at `path`.
fn header_run_id(path: &Path) -> Result<String> {
    let reader = trace_record::TraceReader::open(path, trace_record::ReadOptions::default())
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(reader.header().run.run_id.clone())
}

/// `ops --json` and `memory --json` of one trace, with the run id and rank it is exported
/// under.
fn expected_trace(tg: &Path, trace: &Path, run_id: &str, rank: u32) -> Result<Value> {
    let mut ops = Command::new(tg);
    ops.args(["ops", "--json"]).arg(trace);
    let mut memory = Command::new(tg);
    memory.args(["memory", "--json"]).arg(trace);
    Ok(json!({
        "run_id": run_id,
        "rank": rank,
        "ops": json_of(ops)?,
        "memory": json_of(memory)?,
    }))
}

fn json_of(mut cmd: Command) -> Result<Value> {
    let out = cmd
        .output()
        .with_context(|| format!("failed to start {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("the JSON of {cmd:?}"))
}

/// The virtual environment's Python with the pinned wheels: `target/pyenv`, created and
/// filled from PyPI when missing or holding other versions.
fn python_env(target: &Path) -> Result<PathBuf> {
    let env = target.join("pyenv");
    let python = env.join("bin").join("python");
    let pins_file = env.join("parquet-check-pins.txt");
    let pins = WHEELS.join("\n") + "\n";
    if python.exists() && std::fs::read_to_string(&pins_file).is_ok_and(|p| p == pins) {
        return Ok(python);
    }
    let host = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let mut venv = Command::new(&host);
    venv.args(["-m", "venv", "--clear"]).arg(&env);
    super::run(venv).with_context(|| {
        format!("creating a Python virtual environment with {host} (Debian: apt-get install -y python3-venv)")
    })?;
    let mut pip = Command::new(&python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-cache-dir",
    ])
    .args(WHEELS);
    super::run(pip)?;
    std::fs::write(&pins_file, pins).with_context(|| format!("writing {}", pins_file.display()))?;
    Ok(python)
}

/// The Python side: runs the marked queries of docs/exports.md and compares the numbers.
const CHECK_PY: &str = r#""""Runs the DuckDB and Polars queries of docs/exports.md and checks their numbers."""
import json
import re
import sys

import duckdb


def blocks(doc):
    """{(engine, name): code} of every block after `<!-- parquet-check: ENGINE NAME -->`."""
    pat = re.compile(r"<!-- parquet-check: (\w+) (\w+) -->\n```\w*\n(.*?)\n```", re.S)
    return {(m.group(1), m.group(2)): m.group(3) for m in pat.finditer(doc)}


def run_query(engine, code, root):
    """The query's result as a list of dicts (column: value)."""
    if engine == "duckdb":
        rel = duckdb.sql(code.replace("DIR", root))
        return [dict(zip(rel.columns, row)) for row in rel.fetchall()]
    scope = {"DIR": root}
    exec(code, scope)
    return scope["result"].to_dicts()


failures = []
RANKS = 4


def expect(what, got, want):
    if got != want:
        failures.append(f"{what}: got {got!r}, expected {want!r}")


def floats(rows):
    return [{k: float(v) if isinstance(v, float) else v for k, v in r.items()} for r in rows]


def main():
    doc_path, root, expected_path = sys.argv[1:4]
    code = blocks(open(doc_path, encoding="utf-8").read())
    names = ["op_table", "top_ops_per_step", "memory_peak", "stragglers", "heap_totals"]
    for engine in ["duckdb", "polars"]:
        for n in names:
            if (engine, n) not in code:
                failures.append(f"docs/exports.md has no {engine} query `{n}`")
    if failures:
        return
    expected = json.load(open(expected_path, encoding="utf-8"))
    results = {k: run_query(k[0], c, root) for k, c in sorted(code.items())}
    for n in names:
        expect(f"{n}: DuckDB and Polars agree",
               floats(results[("duckdb", n)]), floats(results[("polars", n)]))
    for engine in ["duckdb", "polars"]:
        for t in expected["traces"]:
            key = (t["run_id"], t["rank"])
            mine = lambda n: [r for r in results[(engine, n)] if (r["run_id"], r["rank"]) == key]
            # The op table: every op's calls, total, min and max duration and output bytes.
            got = {r["name"]: (r["calls"], r["total_ns"], r["min_ns"], r["max_ns"], r["out_bytes"])
                   for r in mine("op_table")}
            want = {r["name"]: (r["count"], r["total_ns"], r["min_ns"], r["max_ns"],
                                r["output_bytes"]) for r in t["ops"]["rows"]}
            expect(f"{engine} op_table {key}", got, want)
            if not want:
                failures.append(f"{key} has no ops to check")
            # Top ops per step: at most five a step, the most time first, every name in the
            # op table, and no step's time above the op table's total.
            per_step = {}
            for r in mine("top_ops_per_step"):
                per_step.setdefault(r["step"], []).append(r)
            expect(f"{engine} top_ops_per_step {key} has steps", bool(per_step), bool(want))
            for step, rows in per_step.items():
                totals = [r["total_ns"] for r in rows]
                expect(f"{engine} top_ops_per_step {key} step {step} order",
                       totals, sorted(totals, reverse=True))
                expect(f"{engine} top_ops_per_step {key} step {step} at most 5",
                       len(rows) <= 5, True)
                for r in rows:
                    expect(f"{engine} top_ops_per_step {key} step {step} {r['name']}",
                           r["name"] in want and r["total_ns"] <= want[r["name"]][1], True)
            # The memory peak of every device and what each category held there.
            devices = (t["memory"] or {}).get("devices", [])
            if not devices:
                failures.append(f"{key} has no memory to check")
            for dev in devices:
                rows = [r for r in mine("memory_peak") if r["device"] == dev["device"]]
                expect(f"{engine} memory_peak {key} {dev['device']} peak",
                       {r["peak_bytes"] for r in rows}, {dev["peak_bytes"]})
                got = {r["category"]: r["bytes_at_peak"] for r in rows if r["bytes_at_peak"]}
                want_c = {c: b for c, b in dev["peak_by_category"].items() if b}
                expect(f"{engine} memory_peak {key} {dev['device']} by category", got, want_c)
        # The tracked heap of every trace that has one (`memory --json`'s `heap` object).
        heaps = 0
        for t in expected["traces"]:
            h = (t["memory"] or {}).get("heap")
            if not h:
                continue
            heaps += 1
            key = (t["run_id"], t["rank"])
            got = [r for r in results[(engine, "heap_totals")] if (r["run_id"], r["rank"]) == key]
            cols = ["allocs", "alloc_bytes", "frees", "freed_bytes", "peak_bytes",
                    "live_at_end_bytes", "small_allocs"]
            expect(f"{engine} heap_totals {key}",
                   [{c: int(r[c]) for c in cols} for r in got], [{c: h[c] for c in cols}])
        expect(f"{engine} heap_totals: traces with a tracked heap", heaps >= RANKS, True)
        # The straggler table of each run of several ranks.
        for run in expected["runs"]:
            row = lambda s: (s["step"], s["slowest_rank"], s["slowest_ns"], float(s["median_ns"]),
                             s["finished_later_ns"])
            got = [row(r) for r in results[(engine, "stragglers")] if r["run_id"] == run["run_id"]]
            want = [row(s) for s in run["ranks"]["steps"]]
            expect(f"{engine} stragglers {run['run_id']}", got, want)
            if not want:
                failures.append(f"the run {run['run_id']} has no common step to check")


main()
for f in failures:
    print(f"parquet-check: FAIL {f}")
if failures:
    sys.exit(1)
print(f"parquet-check: ok: the documented DuckDB {duckdb.__version__} and Polars queries "
      "agree with each other and with tracegraph ops, memory and the straggler table")
"#;
