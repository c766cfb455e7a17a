//! Every usage message the commands print after parsing: exit code 2, one clean sentence.

use crate::{run_in, stderr};

/// Runs `args` in `dir`, expects exit 2 and a message containing `says`, on one line with
/// no run of spaces (a message wrapped in the source must not carry its indentation).
fn usage(dir: &std::path::Path, args: &[&str], says: &str) {
    let o = run_in(dir, args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
    assert!(e.contains(says), "{args:?}: {e}");
    let line = e.lines().find(|l| l.contains(says)).unwrap_or_default();
    assert!(!line.contains("  "), "{args:?}: stray spaces in {line:?}");
}

#[test]
fn every_usage_message_exits_2_and_reads_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(testkit::small_jsonl(), d.join("a.jsonl")).unwrap();
    std::fs::copy(testkit::small_jsonl(), d.join("b.jsonl")).unwrap();
    std::fs::write(d.join("file"), "not a directory").unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["compare", "a.jsonl"],
            "compare takes a base and a candidate trace, or base runs and `--against` candidate runs",
        ),
        (
            &["compare", "a.jsonl", "b.jsonl", "--against-torch", "t.json"],
            "compare --against-torch takes one Candle trace",
        ),
        (
            &["spans", "a.jsonl", "b.jsonl", "--by-shape"],
            "spans --by-shape reads one trace",
        ),
        (
            &["ops", "a.jsonl", "b.jsonl", "--sampled"],
            "ops --sampled reads one trace",
        ),
        (
            &["hot", "a.jsonl", "--steps", "x"],
            "--steps x: expected A..B or N",
        ),
        (
            &[
                "export", "a.jsonl", "--format", "chrome", "--run", "r", "-o", "o.json",
            ],
            "--run is an option of --format parquet",
        ),
        (
            &[
                "export",
                "a.jsonl",
                "--format",
                "folded",
                "--memory-resolution-ns",
                "5",
                "-o",
                "o.txt",
            ],
            "--memory-resolution-ns is an option of --format chrome",
        ),
        (
            &[
                "export", "a.jsonl", "b.jsonl", "--format", "chrome", "-o", "o.json",
            ],
            "--format chrome exports one trace (2 given)",
        ),
        (
            &[
                "export", "a.jsonl", "--format", "parquet", "--step", "1", "-o", "ds",
            ],
            "--step is not an option of --format parquet",
        ),
        (
            &[
                "export", "a.jsonl", "--format", "parquet", "--args", "full", "-o", "ds",
            ],
            "--args is an option of --format chrome",
        ),
        (
            &[
                "export",
                "a.jsonl",
                "--format",
                "parquet",
                "--memory-resolution-ns",
                "5",
                "-o",
                "ds",
            ],
            "--memory-resolution-ns is an option of --format chrome",
        ),
        (
            &["export", "a.jsonl", "--format", "parquet", "-o", "-"],
            "give -o DIR, not -",
        ),
        (
            &["export", "a.jsonl", "--format", "parquet", "-o", "file"],
            "is not a directory",
        ),
        (
            &[
                "export", "a.jsonl", "--format", "chrome", "--step", "999", "-o", "o.json",
            ],
            "--step 999: the trace",
        ),
        (
            &["export", "a.jsonl", "--format", "chrome", "-o", "a.jsonl"],
            "is the input",
        ),
    ];
    for (args, says) in cases {
        usage(d, args, says);
    }
    // Nothing was written by a refused command.
    for out in ["o.json", "o.txt", "ds"] {
        assert!(!d.join(out).exists(), "{out}");
    }
}

#[cfg(feature = "demo")]
#[test]
fn the_llama_demo_refuses_the_mlp_demo_s_options() {
    let dir = tempfile::tempdir().unwrap();
    usage(
        dir.path(),
        &["demo", "--model", "llama", "--steps", "3", "--out", "x"],
        "--steps, --sample, --rank and --run-id apply to the MLP demo",
    );
}
