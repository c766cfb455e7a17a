//! `compare` on generated runs: no doubled sign in the table or the gate's message, the A/B
//! procedure (`--paired`) on runs with constructed machine drift, and `summary DIR`'s note on
//! ranks timed differently.

use std::path::{Path, PathBuf};

use testkit::{SynthConfig, write_synthetic};

use super::{run_in, stderr, stdout};

/// Writes a synthetic trace to `dir/name` and returns its path.
fn write(dir: &Path, name: &str, cfg: &SynthConfig) -> PathBuf {
    let mut buf = Vec::new();
    write_synthetic(&mut buf, cfg).expect("write to a Vec");
    let p = dir.join(name);
    std::fs::write(&p, buf).expect("write trace");
    p
}

/// Run `slot` of a machine that slows by 3 % with every run (speed and header start follow
/// the slot), `slower_pct` more for a real slowdown.
fn drifting(slot: u64, slower_pct: u64) -> SynthConfig {
    SynthConfig {
        seed: slot + 1,
        speed_pct: (100 + 3 * slot) * (100 + slower_pct) / 100,
        start_offset_ns: slot * 1_000_000_000,
        ..Default::default()
    }
}

#[test]
fn a_doubled_run_time_reads_plus_100_percent_once() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.jsonl", &SynthConfig::default());
    let b = write(
        dir.path(),
        "b.jsonl",
        &SynthConfig {
            seed: 2,
            speed_pct: 200,
            ..Default::default()
        },
    );
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let o = run_in(dir.path(), &["compare", a, b, "--fail-on-regression", "10"]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(5), "{out}\n{err}");
    assert!(err.contains("regression beyond 10%: step time +"), "{err}");
    assert!(!err.contains("++") && !out.contains("++"), "{out}\n{err}");
    assert!(out.contains("REGRESSION"), "{out}");
    // The minimum effect is stated with the table.
    assert!(out.contains("below min effect\" when"), "{out}");
}

/// The README's A/B procedure on runs with constructed drift: side by side the same program
/// fails a 10 % gate and the output says why; alternated and `--paired`, it passes.
#[test]
fn alternated_paired_runs_pass_where_runs_side_by_side_fail() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let name = |side: &str, i: usize| format!("{side}{i}.jsonl");
    // Side by side: A A A A, then B B B B.
    let seq_a: Vec<String> = (0..4u64)
        .map(|s| {
            let p = write(d, &name("sa", s as usize), &drifting(s, 0));
            p.to_string_lossy().into_owned()
        })
        .collect();
    let seq_b: Vec<String> = (4..8u64)
        .map(|s| {
            let p = write(d, &name("sb", s as usize), &drifting(s, 0));
            p.to_string_lossy().into_owned()
        })
        .collect();
    let mut args = vec!["compare"];
    args.extend(seq_a.iter().map(String::as_str));
    args.push("--against");
    args.extend(seq_b.iter().map(String::as_str));
    args.extend(["--fail-on-regression", "10"]);
    let o = run_in(d, &args);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(5), "{out}\n{}", stderr(&o));
    assert!(out.contains("compare them with --paired"), "{out}");
    // Alternated: A B, B A, A B, B A; each side's runs in pair order.
    let (a_slots, b_slots) = ([0u64, 3, 4, 7], [1u64, 2, 5, 6]);
    let side = |prefix: &str, slots: &[u64], slower: u64| -> Vec<String> {
        slots
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let p = write(d, &name(prefix, i), &drifting(s, slower));
                p.to_string_lossy().into_owned()
            })
            .collect()
    };
    let (pa, pb, slow) = (
        side("pa", &a_slots, 0),
        side("pb", &b_slots, 0),
        side("ps", &b_slots, 15),
    );
    let paired = |cand: &[String]| {
        let mut args = vec!["compare", "--paired"];
        args.extend(pa.iter().map(String::as_str));
        args.push("--against");
        args.extend(cand.iter().map(String::as_str));
        args.extend(["--fail-on-regression", "10"]);
        run_in(d, &args)
    };
    let o = paired(&pb);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    assert!(out.contains("runs paired by position"), "{out}");
    assert!(!out.contains("warning:"), "{out}");
    // A real 15 % slowdown on top of the drift still fails.
    let o = paired(&slow);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    assert!(!stderr(&o).contains("++"), "{}", stderr(&o));
    // Unequal sides cannot be paired: a usage error.
    let mut args = vec!["compare", "--paired"];
    args.extend(pa.iter().map(String::as_str));
    args.push("--against");
    args.extend(pb[..3].iter().map(String::as_str));
    let o = run_in(d, &args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("as many base as candidate runs"),
        "{}",
        stderr(&o)
    );
}

/// Several step graphs: the span and op tables get a graph column.
#[test]
fn span_and_op_tables_name_the_graph_of_each_row() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = |seed| SynthConfig {
        changed_step: Some(3),
        seed,
        ..Default::default()
    };
    let a = write(dir.path(), "a.jsonl", &cfg(1));
    let b = write(dir.path(), "b.jsonl", &cfg(2));
    let o = run_in(
        dir.path(),
        &[
            "compare",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--limit",
            "100",
        ],
    );
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    assert!(
        out.contains("over the steps where the path occurs, per step graph"),
        "{out}"
    );
    let rows = |name: &str| -> Vec<String> {
        let mut v: Vec<String> = out
            .lines()
            .filter(|l| l.split_whitespace().nth(1) == Some(name))
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(rows("train_step"), ["A", "B"], "{out}");
    assert_eq!(rows("gelu"), ["B"], "{out}");
}

/// `summary DIR` of ranks timed differently says so, as the other rank views do.
#[test]
fn summary_of_ranks_timed_differently_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("run");
    std::fs::create_dir(&runs).unwrap();
    for r in 0..2u32 {
        let p = write(
            &runs,
            &format!("rank{r}.jsonl"),
            &SynthConfig {
                rank: Some((r, 2)),
                seed: u64::from(r) + 1,
                ..Default::default()
            },
        );
        if r == 1 {
            let text = std::fs::read_to_string(&p).unwrap();
            let (head, rest) = text.split_once('\n').unwrap();
            assert!(head.contains(r#""timing":"host""#), "{head}");
            let head = head.replace(r#""timing":"host""#, r#""timing":"device_synchronized""#);
            std::fs::write(&p, format!("{head}\n{rest}")).unwrap();
        }
    }
    let o = run_in(dir.path(), &["summary", "run"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    assert!(
        out.contains("note: the ranks were timed differently"),
        "{out}"
    );
    let o = run_in(dir.path(), &["summary", "run", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let notes = v["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("timed differently")),
        "{notes:?}"
    );
    // Ranks timed alike: no note.
    let p = runs.join("rank1.jsonl");
    write(
        &runs,
        "rank1.jsonl",
        &SynthConfig {
            rank: Some((1, 2)),
            seed: 2,
            ..Default::default()
        },
    );
    assert!(p.exists());
    let o = run_in(dir.path(), &["summary", "run"]);
    assert!(!stdout(&o).contains("timed differently"), "{}", stdout(&o));
}
