//! Four ranks of one run, one slowed down by a chosen amount: `summary DIR` names the slowed
//! rank as the straggler of every step.
//!
//! The ranks are synthetic traces (`testkit::SynthConfig` with a rank): each its own header,
//! run clock and start time (the ranks started a few microseconds apart), and rank [`SLOW`]
//! spends [`PAUSE_NS`] more in every step. Written, not timed: what the test asserts is the
//! traces' chosen durations, the same on an idle and on a saturated machine (four processes
//! sleeping their way to a slow rank were at the mercy of the scheduler: a loaded rank 1 once
//! came out slower than the slowed rank 2).

use std::path::Path;

use crate::{run_in, stdout};

const RANKS: u32 = 4;
const SLOW: u32 = 2;
const STEPS: usize = 6;
/// What the slowed rank spends more in every step.
const PAUSE_NS: u64 = 30_000_000;

/// One rank's trace into `dir/rank-R.jsonl`: `STEPS` steps of 100 generated ops (about
/// 150 µs each, jittered by the rank's own seed); rank [`SLOW`] pauses [`PAUSE_NS`] more in
/// each step's `train_step` span. The ranks' clocks start 10 µs apart.
fn write_rank(dir: &Path, rank: u32) {
    let path = dir.join(format!("rank-{rank}.jsonl"));
    let cfg = testkit::SynthConfig {
        ops: STEPS * 100,
        ops_per_step: 100,
        seed: 7 + u64::from(rank),
        rank: Some((rank, RANKS)),
        run_id: Some("tests::ranks".into()),
        start_offset_ns: u64::from(rank) * 10_000,
        step_pause_ns: if rank == SLOW { PAUSE_NS } else { 0 },
        ..testkit::SynthConfig::default()
    };
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    testkit::write_synthetic(&mut f, &cfg).unwrap();
}

#[test]
fn four_ranks_name_the_slowed_one() {
    let dir = tempfile::tempdir().unwrap();
    for r in 0..RANKS {
        write_rank(dir.path(), r);
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
        // Its step is the others' (about 150 µs) and the pause.
        let slowest = s["slowest_ns"].as_u64().unwrap();
        assert!((PAUSE_NS..PAUSE_NS + 1_000_000).contains(&slowest), "{s}");
    }
    assert_eq!(v["ranks"][SLOW as usize]["slowest_in"], STEPS);
    // The slowed rank finishes ever later than the others: by its last step, by STEPS
    // pauses (and the 20 µs it started after rank 0).
    let last = steps.last().unwrap()["finished_later_ns"].as_u64().unwrap();
    assert!(
        (STEPS as u64 * PAUSE_NS..STEPS as u64 * PAUSE_NS + 1_000_000).contains(&last),
        "{last}"
    );
    assert!(v["notes"].as_array().unwrap().is_empty(), "{}", v["notes"]);
    // The clocks are placed on the headers' starts: 30 µs apart at most, less than a step.
    assert_eq!(v["alignment"]["doubtful"], false, "{}", v["alignment"]);
    assert_eq!(
        v["alignment"]["start_spread_ns"], 30_000,
        "{}",
        v["alignment"]
    );
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

    // The span tree of the four ranks: the step's path first, the slowed rank its slowest.
    let out = run_in(dir.path(), &["spans", "--json", "."]);
    assert!(out.status.success(), "{}", crate::stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "tracegraph.spans_ranks/1");
    assert_eq!(v["rows"][0]["path"], "train_step", "{v}");
    assert_eq!(v["rows"][0]["slowest"]["rank"], SLOW, "{v}");
    assert!(
        v["rows"][0]["slowest"]["excess_ns"].as_f64().unwrap()
            >= 0.9 * (STEPS as u64 * PAUSE_NS) as f64,
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
