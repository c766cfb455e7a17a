//! Bad input: a clear error naming file, line and field, and the documented exit codes.

use crate::{run_in, stderr, stdout};

fn small_text() -> String {
    std::fs::read_to_string(testkit::small_jsonl()).unwrap()
}

#[test]
fn schema_error_names_file_line_and_field_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let bad = small_text().replacen(r#""dur":60"#, r#""dur":"sixty""#, 1);
    std::fs::write(dir.path().join("bad.jsonl"), bad).unwrap();
    for cmd in ["summary", "ops", "validate"] {
        let o = run_in(dir.path(), &[cmd, "bad.jsonl"]);
        assert_eq!(o.status.code(), Some(3), "{cmd}");
        let e = stderr(&o);
        assert!(
            e.contains("bad.jsonl") && e.contains("line 8") && e.contains("dur"),
            "{e}"
        );
        assert_eq!(e.matches("line 8").count(), 1, "said once: {e}");
    }
    // The exports report it the same way: once, with the documented exit code.
    for format in ["chrome", "folded"] {
        let o = run_in(
            dir.path(),
            &["export", "bad.jsonl", "--format", format, "-o", "out"],
        );
        assert_eq!(o.status.code(), Some(3), "{format}");
        let e = stderr(&o);
        assert!(e.contains("bad.jsonl: line 8, field `dur`"), "{e}");
        assert_eq!(e.matches("line 8").count(), 1, "said once: {e}");
        assert!(!dir.path().join("out").exists());
    }
    std::fs::write(dir.path().join("syntax.jsonl"), "{not json\n").unwrap();
    let o = run_in(dir.path(), &["summary", "syntax.jsonl"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("syntax.jsonl") && stderr(&o).contains("line 1"));
    // An unsupported version names the header's line and field like any schema error.
    let future = small_text().replacen(r#""version":1"#, r#""version":7"#, 1);
    std::fs::write(dir.path().join("future.jsonl"), future).unwrap();
    for args in [
        &["summary", "future.jsonl"][..],
        &["validate", "future.jsonl"],
        &["export", "future.jsonl", "-o", "out.json"],
    ] {
        let cmd = args[0];
        let o = run_in(dir.path(), args);
        assert_eq!(o.status.code(), Some(3), "{cmd}");
        let e = stderr(&o);
        assert!(
            e.contains("future.jsonl: line 1, field `version`: unsupported trace schema version 7"),
            "{e}"
        );
    }
}

#[test]
fn missing_file_usage_and_validation_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(dir.path(), &["summary", "nope.jsonl"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("nope.jsonl"));
    let o = run_in(dir.path(), &["summary"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run_in(dir.path(), &["ops", "x.jsonl", "--sort", "bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown op table column"),
        "{}",
        stderr(&o)
    );
    let o = run_in(dir.path(), &["--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("Exit codes:") && stdout(&o).contains("invalid trace"));
    // A span_end for a span that never started: a structural issue, exit 4.
    let text = small_text().replacen(
        r#"{"type":"span_end","id":5,"ts":400}"#,
        r#"{"type":"span_end","id":99,"ts":400}"#,
        1,
    );
    std::fs::write(dir.path().join("issues.jsonl"), text).unwrap();
    let o = run_in(dir.path(), &["validate", "issues.jsonl"]);
    assert_eq!(o.status.code(), Some(4), "{}", stdout(&o));
    assert!(stdout(&o).contains("line 31"), "{}", stdout(&o));
    // Analyses still run on it.
    assert_eq!(
        run_in(dir.path(), &["summary", "issues.jsonl"])
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn unknown_event_types_are_skipped_and_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let text = small_text().replacen(
        r#"{"type":"step","index":1"#,
        "{\"type\":\"from_the_future\",\"x\":1}\n{\"type\":\"step\",\"index\":1",
        1,
    );
    std::fs::write(dir.path().join("future.jsonl"), text).unwrap();
    let o = run_in(dir.path(), &["summary", "future.jsonl"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("1 line(s) of unknown event type skipped"),
        "{}",
        stdout(&o)
    );
    let o = run_in(dir.path(), &["validate", "--strict", "future.jsonl"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).contains("line 23, field `type`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn truncated_trace_is_analysed_and_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let text = small_text();
    let cut = text.find(r#"{"type":"step","index":1"#).unwrap() + 20;
    std::fs::write(dir.path().join("cut.jsonl"), &text[..cut]).unwrap();
    let o = run_in(dir.path(), &["summary", "cut.jsonl"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("incomplete"), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("incomplete: truncated"),
        "{}",
        stdout(&o)
    );
    let o = run_in(dir.path(), &["validate", "cut.jsonl"]);
    assert_eq!(o.status.code(), Some(0));
    let o = run_in(dir.path(), &["validate", "--strict", "cut.jsonl"]);
    assert_eq!(o.status.code(), Some(4));
}

#[test]
fn compare_counts_steps_present_in_one_trace_only_apart_from_changed_graphs() {
    let dir = tempfile::tempdir().unwrap();
    let text = small_text();
    std::fs::write(dir.path().join("small.jsonl"), &text).unwrap();
    // Cut inside step 1: step 0 is whole, step 1 is partial and left out.
    let at = text.find(r#"{"type":"span_start","id":4"#).unwrap();
    let cut = at + text[at..].find('\n').unwrap() + 1;
    std::fs::write(dir.path().join("cut.jsonl"), &text[..cut]).unwrap();
    let o = run_in(dir.path(), &["compare", "small.jsonl", "cut.jsonl"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(
            "step graphs: 1 of 1 paired step(s) have equal fingerprints; 1 step(s) only in base"
        ),
        "{out}"
    );
    assert!(!out.contains("vs candidate (none)"), "{out}");
}

#[test]
fn no_threshold_value_disables_the_regression_gate() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.jsonl"), small_text()).unwrap();
    for bad in [
        "NaN", "nan", "inf", "-inf", "1e400", "-5", "10001", "ten", "",
    ] {
        let arg = format!("--fail-on-regression={bad}");
        let o = run_in(dir.path(), &["compare", "a.jsonl", "a.jsonl", &arg]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("--fail-on-regression"), "{bad}: {e}");
        assert!(stdout(&o).is_empty(), "{bad}: nothing compared");
    }
    for good in ["0", "2.5", "10", "10000"] {
        let o = run_in(
            dir.path(),
            &[
                "compare",
                "a.jsonl",
                "a.jsonl",
                "--fail-on-regression",
                good,
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{good}: {}", stderr(&o));
    }
}

#[test]
fn demo_rates_and_step_counts_out_of_range_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["demo", "--sample=0"][..],
        &["demo", "--sample=20000"][..],
        &["demo", "--steps", "0"][..],
        &["demo", "--steps", "-3"][..],
    ] {
        let o = run_in(dir.path(), args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!dir.path().join("tracegraph-demo").exists(), "{args:?}");
    }
}

#[test]
fn memory_resolutions_out_of_range_or_off_chrome_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.jsonl"), small_text()).unwrap();
    let export = |extra: &[&str]| {
        let mut args = vec!["export", "t.jsonl", "-o", "out"];
        args.extend_from_slice(extra);
        run_in(dir.path(), &args)
    };
    for bad in ["-1", "1.5", "NaN", "inf", "1e3", "1000000001", "", "ten"] {
        let arg = format!("--memory-resolution-ns={bad}");
        let o = export(&[&arg]);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--memory-resolution-ns"),
            "{bad:?}: {}",
            stderr(&o)
        );
        assert!(!dir.path().join("out").exists(), "{bad:?}");
    }
    let o = export(&["--format", "folded", "--memory-resolution-ns", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("an option of --format chrome"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.path().join("out").exists());
    // Every change (0), the default (1 µs) and the coarsest (1 s) are accepted; the default
    // is 1000 ns, and a coarser resolution never writes more samples.
    let mut samples = Vec::new();
    for n in [Some("0"), None, Some("1000"), Some("1000000000")] {
        let o = match n {
            Some(n) => export(&["--memory-resolution-ns", n]),
            None => export(&[]),
        };
        assert_eq!(o.status.code(), Some(0), "{n:?}: {}", stderr(&o));
        let text = std::fs::read_to_string(dir.path().join("out")).unwrap();
        samples.push((text.matches("\"logical memory ").count(), text));
    }
    assert_eq!(samples[1].1, samples[2].1, "the default is 1000 ns");
    assert!(samples[0].0 > 0);
    assert!(
        samples.windows(2).all(|w| w[0].0 >= w[1].0),
        "{:?}",
        samples.iter().map(|s| s.0).collect::<Vec<_>>()
    );
}

#[test]
fn a_trace_without_samples_gets_the_same_no_samples_answer_from_every_sample_command() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.jsonl"), small_text()).unwrap();
    let hot = run_in(dir.path(), &["hot", "a.jsonl"]);
    assert_eq!(hot.status.code(), Some(0), "{}", stderr(&hot));
    assert!(stdout(&hot).contains("no samples"), "{}", stdout(&hot));
    let export = run_in(
        dir.path(),
        &[
            "export",
            "a.jsonl",
            "--format",
            "folded-samples",
            "-o",
            "s.folded",
        ],
    );
    assert_eq!(export.status.code(), Some(0), "{}", stderr(&export));
    assert!(
        stderr(&export).contains("no samples"),
        "{}",
        stderr(&export)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("s.folded")).unwrap(),
        ""
    );
}

#[test]
fn compare_signs_each_change_once() {
    let dir = tempfile::tempdir().unwrap();
    let base = small_text();
    // The candidate's ops take twice as long: every change is positive.
    let slower = base.replace(r#""dur":60"#, r#""dur":120"#);
    std::fs::write(dir.path().join("a.jsonl"), &base).unwrap();
    std::fs::write(dir.path().join("b.jsonl"), slower).unwrap();
    let o = run_in(dir.path(), &["compare", "a.jsonl", "b.jsonl"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains('+'), "{text}");
    assert!(!text.contains("++") && !text.contains("+-"), "{text}");
}
