//! Four ranks of one run, recorded by four real processes, one slowed down on purpose:
//! `summary DIR` names the slowed rank as the straggler of every step.
//!
//! The ranks are this test binary re-run as children (`rank_child`, ignored unless a parent
//! runs it with `TG_RANK`): separate processes with their own clocks and headers.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use trace_candle::{Capture, Phase, Run};

use crate::{run_in, stdout};

const RANKS: u32 = 4;
const SLOW: u32 = 2;
const STEPS: usize = 6;

/// One rank's run into `dir/rank-R.jsonl`: `STEPS` steps of a little work each; rank
/// [`SLOW`] sleeps 30 ms more per step.
fn record_rank(dir: &Path, rank: u32) {
    let path = dir.join(format!("rank-{rank}.jsonl"));
    let run = Run::new("tests::ranks", Phase::Train, "cpu").rank(rank, RANKS);
    let capture = Capture::open(&path, run).unwrap();
    for _ in 0..STEPS {
        {
            let _work = capture.span("train_step", trace_record::schema::SpanKind::Function);
            std::thread::sleep(Duration::from_millis(5));
            if rank == SLOW {
                std::thread::sleep(Duration::from_millis(30));
            }
        }
        capture.step();
    }
    capture.finish().unwrap();
}

/// The child side: records one rank when a parent asked for it.
#[test]
#[ignore = "a rank process of four_ranks_name_the_slowed_one; run by that test"]
fn rank_child() {
    if let (Ok(rank), Ok(dir)) = (std::env::var("TG_RANK"), std::env::var("TG_RANK_DIR")) {
        record_rank(Path::new(&dir), rank.parse().unwrap());
    }
}

#[test]
fn four_ranks_name_the_slowed_one() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..RANKS)
        .map(|r| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "ranks::rank_child",
                    "--include-ignored",
                    "--quiet",
                ])
                .env("TG_RANK", r.to_string())
                .env("TG_RANK_DIR", dir.path())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    for r in 0..RANKS {
        assert!(
            dir.path().join(format!("rank-{r}.jsonl")).exists(),
            "rank {r}"
        );
    }
    let out = run_in(dir.path(), &["summary", "--json", "."]);
    assert!(out.status.success(), "{}", crate::stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "tracegraph.ranks/1");
    let ranks: Vec<u64> = v["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks, [0, 1, 2, 3]);
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), STEPS);
    for s in steps {
        assert_eq!(s["slowest_rank"], SLOW, "{s}");
        assert!(s["slowest_ns"].as_u64().unwrap() >= 30_000_000, "{s}");
    }
    assert_eq!(v["ranks"][SLOW as usize]["slowest_in"], STEPS);
    // The slowed rank finishes ever later than the others: by its last step, by about
    // STEPS × 30 ms.
    let last = steps.last().unwrap()["finished_later_ns"].as_u64().unwrap();
    assert!(last >= (STEPS as u64 - 1) * 30_000_000, "{last}");
    assert!(v["notes"].as_array().unwrap().is_empty(), "{}", v["notes"]);
    // The text names it too, and several files given one by one are the same ranks.
    let files: Vec<String> = (0..RANKS).map(|r| format!("rank-{r}.jsonl")).collect();
    let mut args = vec!["summary"];
    args.extend(files.iter().map(String::as_str));
    let out = run_in(dir.path(), &args);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.starts_with("4 rank(s), 6 step(s) recorded by every rank"),
        "{text}"
    );
    assert!(text.contains("stragglers:"), "{text}");
    let first_row = text
        .lines()
        .skip_while(|l| !l.starts_with("stragglers:"))
        .nth(3)
        .unwrap();
    let cells: Vec<&str> = first_row.split_whitespace().collect();
    assert_eq!(cells.get(1), Some(&"2"), "{text}");

    // The span tree of the four processes: their one path, the slowed rank its slowest.
    let out = run_in(dir.path(), &["spans", "--json", "."]);
    assert!(out.status.success(), "{}", crate::stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "tracegraph.spans_ranks/1");
    assert_eq!(v["rows"][0]["path"], "train_step", "{v}");
    assert_eq!(v["rows"][0]["slowest"]["rank"], SLOW, "{v}");
    assert!(
        v["rows"][0]["slowest"]["excess_ns"].as_f64().unwrap() >= 0.9 * STEPS as f64 * 30e6,
        "{v}"
    );

    // Runs compared as runs: two a side, the interval over runs then steps.
    let out = run_in(
        dir.path(),
        &[
            "compare",
            "rank-0.jsonl",
            "rank-1.jsonl",
            "--against",
            "rank-2.jsonl",
            "rank-3.jsonl",
        ],
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("runs       2 base, 2 candidate"), "{text}");
    assert!(
        text.contains("the intervals resample runs, then steps"),
        "{text}"
    );
    // Three traces without --against: which are the base runs is not said.
    let out = run_in(
        dir.path(),
        &["compare", "rank-0.jsonl", "rank-1.jsonl", "rank-2.jsonl"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
}
