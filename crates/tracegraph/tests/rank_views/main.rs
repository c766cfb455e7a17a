//! `ops`, `spans` and `memory` over several traces of one run: four ranks recorded by real
//! sessions into one directory (one of them zstd-compressed), rank 2's `matmul` given 3 ms
//! more and allocating more; each command, as text and as JSON, names rank 2.

use std::path::Path;
use std::process::{Command, Output};

use trace_record::schema::{AllocKind, ExecStep, MemoryCategory, Phase, SpanKind};
use trace_record::{MemoryRecord, OpRecord, Run, TraceSession};

const RANKS: u32 = 4;
const SLOW: u32 = 2;
const STEPS: u64 = 4;

/// Runs `tracegraph args...` in `dir`.
fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tracegraph"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run tracegraph")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// Runs a command that must succeed and returns its stdout.
fn ok(dir: &Path, args: &[&str]) -> String {
    let o = run_in(dir, args);
    assert!(o.status.success(), "{args:?}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(dir: &Path, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(dir, args)).expect("JSON output")
}

/// Every op's duration; the slowed rank's `matmul` takes [`EXTRA_NS`] more.
const OP_NS: u64 = 50_000;
const EXTRA_NS: u64 = 3_000_000;

/// One rank: `STEPS` steps of `train_step` / `forward` with a `matmul` ([`EXTRA_NS`] longer
/// on [`SLOW`]) and an `add`, the matmul's output allocated (1 MiB on [`SLOW`], 4 KiB
/// elsewhere) and freed at the step's end.
///
/// Recorded by a real session with chosen times: each step's spans, ops and memory events
/// are placed from the instant the step began, and the next boundary waits until the clock
/// has passed them (`testkit::wait_past`), so the durations compared are the chosen ones
/// whatever the machine's load (timed sleeps once let a preempted rank outrun the slowed
/// one).
fn record_rank(path: &Path, rank: u32) {
    let run = Run::new("tests::rank_views", Phase::Train, "cpu")
        .run_id("job-1")
        .rank(rank, RANKS);
    let s = TraceSession::open(path, run).unwrap();
    let bytes: u64 = if rank == SLOW { 1 << 20 } else { 4096 };
    for step in 0..STEPS {
        s.step();
        let t0 = s.now_ns();
        let root = s
            .start_span_at("train_step", SpanKind::Function, None, t0)
            .unwrap();
        let fwd = s
            .start_span_at("forward", SpanKind::Module, Some(ExecStep::Forward), t0)
            .unwrap();
        let id = 10 + 2 * step;
        let mut t = t0;
        for (name, slow) in [("matmul", rank == SLOW), ("add", false)] {
            let dur = if slow { OP_NS + EXTRA_NS } else { OP_NS };
            s.record_op(&OpRecord {
                name,
                inputs: &[],
                outputs: &[id],
                shape: &[256, 1024],
                dtype: "f32",
                device: "cpu",
                start_ns: t,
                dur_ns: dur,
                in_bytes: 0,
                out_bytes: bytes,
                category: Some(MemoryCategory::Activation),
                flops: None,
            });
            t += dur;
        }
        for kind in [AllocKind::Alloc, AllocKind::Free] {
            s.record_memory_at(
                &MemoryRecord {
                    kind,
                    storage: id,
                    tensor: id,
                    bytes,
                    device: "cpu",
                    category: MemoryCategory::Activation,
                },
                t,
            );
        }
        s.end_span_id_at(fwd, t);
        s.end_span_id_at(root, t);
        testkit::wait_past(&s, t);
    }
    s.finish().unwrap();
}

#[test]
fn ops_spans_and_memory_of_four_ranks_name_the_slowed_one() {
    let dir = tempfile::tempdir().unwrap();
    for r in 0..RANKS {
        // One rank compressed: a directory's `.jsonl.zst` files are ranks too.
        let name = if r == 3 {
            format!("rank-{r}.jsonl.zst")
        } else {
            format!("rank-{r}.jsonl")
        };
        record_rank(&dir.path().join(name), r);
    }
    let d = dir.path();

    // ops: per-rank totals side by side, the slowest rank, the merged table.
    let v = json(d, &["ops", "--json", "."]);
    assert_eq!(v["schema"], "tracegraph.ops_ranks/1");
    let ranks: Vec<u64> = v["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks, [0, 1, 2, 3]);
    assert!(v["notes"].as_array().unwrap().is_empty(), "{}", v["notes"]);
    let mm = &v["rows"][0];
    assert_eq!(mm["name"], "matmul", "{v}");
    assert_eq!(mm["ranks"].as_array().unwrap().len(), 4);
    assert_eq!(mm["slowest"]["rank"], SLOW);
    assert!(
        mm["slowest"]["excess_ns"].as_f64() == Some((STEPS * EXTRA_NS) as f64),
        "{mm}"
    );
    assert_eq!(v["slowest"]["rank"], SLOW);
    assert_eq!(v["merged"]["rows"][0]["name"], "matmul");
    assert_eq!(v["merged"]["rows"][0]["count"], 4 * STEPS);
    assert_eq!(v["merged"]["op_count"], 4 * 2 * STEPS);
    let out = ok(
        d,
        &[
            "ops",
            "rank-0.jsonl",
            "rank-1.jsonl",
            "rank-2.jsonl",
            "rank-3.jsonl.zst",
        ],
    );
    assert!(out.starts_with("4 rank(s): per op"), "{out}");
    assert!(out.contains("most time in ops: rank r2"), "{out}");
    let header = out.lines().find(|l| l.starts_with("op ")).unwrap();
    for col in ["r0", "r1", "r2", "r3", "slowest", "excess"] {
        assert!(header.contains(col), "{header}");
    }
    let row = out.lines().find(|l| l.starts_with("matmul")).unwrap();
    // Its cells are durations but for the slowest rank's label.
    let labels: Vec<&str> = row
        .split_whitespace()
        .filter(|c| c.starts_with('r'))
        .collect();
    assert_eq!(labels, ["r2"], "{out}");
    assert!(out.contains("merged over the 4 rank(s)"), "{out}");
    assert!(
        out.contains(&format!("{} ops in 2 group(s)", 4 * 2 * STEPS)),
        "{out}"
    );
    // Sort and limit apply to the ranks' view too.
    let v = json(d, &["ops", "--json", "--sort", "name", "--limit", "1", "."]);
    assert_eq!(v["rows"].as_array().unwrap().len(), 1);
    assert_eq!(v["rows"][0]["name"], "add");
    // One trace: the op table as ever (a directory of one trace is that trace).
    let one = tempfile::tempdir().unwrap();
    std::fs::copy(d.join("rank-0.jsonl"), one.path().join("rank-0.jsonl")).unwrap();
    let single = ok(d, &["ops", "rank-0.jsonl"]);
    assert!(
        single.starts_with(&format!("{} ops in 2 group(s)", 2 * STEPS)),
        "{single}"
    );
    assert_eq!(ok(one.path(), &["ops", "."]), single);
    assert_eq!(
        json(d, &["ops", "--json", "rank-0.jsonl"])["schema"],
        "tracegraph.ops/1"
    );

    // spans: one tree of the ranks' paths, the slowed rank named on both.
    let v = json(d, &["spans", "--json", "."]);
    assert_eq!(v["schema"], "tracegraph.spans_ranks/1");
    let rows = v["rows"].as_array().unwrap();
    let paths: Vec<&str> = rows.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["train_step", "train_step/forward"]);
    for r in rows {
        assert_eq!(r["slowest"]["rank"], SLOW, "{r}");
        assert_eq!(r["ranks"][SLOW as usize]["count"], STEPS, "{r}");
        // Both spans hold the two ops: exactly their chosen durations per step.
        assert_eq!(
            r["ranks"][SLOW as usize]["mean_per_step_ns"].as_f64(),
            Some((2 * OP_NS + EXTRA_NS) as f64),
            "{r}"
        );
    }
    let out = ok(d, &["spans", "."]);
    assert!(out.starts_with("4 rank(s), 2 span path(s)"), "{out}");
    let row = out.lines().find(|l| l.starts_with("train_step")).unwrap();
    let labels: Vec<&str> = row
        .split_whitespace()
        .filter(|c| c.starts_with('r'))
        .collect();
    assert_eq!(labels, ["r2"], "{out}");
    let v = json(d, &["spans", "--json", "--depth", "0", "."]);
    assert_eq!(v["rows"].as_array().unwrap().len(), 1);

    // memory: each rank's peak by category side by side, the highest named.
    let v = json(d, &["memory", "--json", "."]);
    assert_eq!(v["schema"], "tracegraph.memory_ranks/1");
    assert_eq!(v["highest"]["rank"], SLOW);
    assert_eq!(v["highest"]["peak_bytes"], 1 << 20);
    assert_eq!(v["highest"]["median_bytes"], 4096.0);
    assert_eq!(v["categories"], serde_json::json!(["activation"]));
    assert_eq!(v["rows"][SLOW as usize]["peak_bytes"], 1 << 20);
    let out = ok(d, &["memory", "."]);
    assert!(out.contains("highest peak: rank r2, 1.00 MiB"), "{out}");
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("r2 "))
        .unwrap();
    assert!(row.contains("cpu") && row.contains("1.00 MiB"), "{out}");

    // What needs one trace says so (exit 2).
    for args in [
        ["ops", "--sampled", "rank-0.jsonl", "rank-1.jsonl"],
        ["spans", "--by-shape", "rank-0.jsonl", "rank-1.jsonl"],
    ] {
        let o = run_in(d, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("reads one trace"), "{}", text(&o));
    }
    // An empty directory is an error naming it.
    let empty = tempfile::tempdir().unwrap();
    let o = run_in(empty.path(), &["memory", "."]);
    assert!(!o.status.success());
    assert!(text(&o).contains("holds no trace"), "{}", text(&o));
}
