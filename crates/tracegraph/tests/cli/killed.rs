//! `tracegraph demo` killed at several moments (SIGKILL, SIGINT, SIGTERM).
//!
//! `summary` reads what it left, incomplete, to its last complete line.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{run_in, stderr};

fn spawn_demo(dir: &std::path::Path, out: &str) -> std::process::Child {
    let child = Command::new(env!("CARGO_BIN_EXE_tracegraph"))
        .args(["demo", "--out", out, "--steps", "100000"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // `open` creates the file: wait for it (the header is written before `open` returns).
    let trace = dir.join(out).join("trace.jsonl");
    // A hang guard only (the demo opens its trace as it starts).
    let deadline = Instant::now() + Duration::from_mins(5);
    while !trace.exists() {
        assert!(Instant::now() < deadline, "the demo never opened its trace");
        std::thread::sleep(Duration::from_millis(2));
    }
    child
}

/// Waits until `trace` holds `lines` complete lines. The deadline only keeps a regression from
/// hanging the test.
fn wait_for_lines(trace: &std::path::Path, lines: usize) {
    let deadline = Instant::now() + Duration::from_mins(5);
    while !std::fs::read_to_string(trace).is_ok_and(|t| t.matches('\n').count() >= lines) {
        assert!(
            Instant::now() < deadline,
            "the demo never wrote {lines} lines"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_killed_demo_leaves_a_trace_that_summary_reads() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (i, (signal, after_ms)) in [
        ("KILL", 0u64),
        ("KILL", 300),
        ("KILL", 1500),
        ("INT", 300),
        ("TERM", 1500),
    ]
    .into_iter()
    .enumerate()
    {
        let out = format!("run{i}");
        let mut child = spawn_demo(d, &out);
        std::thread::sleep(Duration::from_millis(after_ms));
        if signal != "KILL" {
            // The handler that writes the trailer is installed right after `open`, before
            // anything is recorded: a line past the header shows it is there, where a fixed
            // delay only makes that likely (a loaded machine can hold the demo back).
            wait_for_lines(&d.join(&out).join("trace.jsonl"), 2);
        }
        let sent = Command::new("kill")
            .args(["-s", signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let status = child.wait().unwrap();
        assert!(status.signal().is_some(), "{signal}: {status}");
        let trace = format!("{out}/trace.jsonl");
        let text = std::fs::read_to_string(d.join(&trace)).unwrap();
        assert!(
            text.starts_with("{\"type\":\"header\""),
            "{signal} after {after_ms} ms: {:?}",
            &text[..text.len().min(80)]
        );
        let o = run_in(d, &["summary", &trace]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{signal} after {after_ms} ms: {}",
            stderr(&o)
        );
        assert!(stderr(&o).contains("incomplete"), "{}", stderr(&o));
        if signal != "KILL" {
            // The handler wrote the trailer with outcome `incomplete`.
            let last = text.lines().last().unwrap();
            assert!(
                last.contains("\"type\":\"trailer\"") && last.contains("\"incomplete\""),
                "{signal}: {last}"
            );
        }
    }
}

#[test]
fn a_second_demo_on_the_same_output_refuses_and_readers_see_the_live_writer() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut first = spawn_demo(d, "same");
    let pid = first.id();
    // Wait for the header (the pid the refusal names is read from it).
    let trace = d.join("same/trace.jsonl");
    wait_for_lines(&trace, 1);
    let second = run_in(d, &["demo", "--out", "same", "--steps", "3"]);
    let e = stderr(&second);
    assert!(!second.status.success(), "the second demo must refuse: {e}");
    assert!(e.contains(&format!("being written by pid {pid}")), "{e}");
    // A reader of the growing trace is told so and reads what is there.
    let o = run_in(d, &["summary", "same/trace.jsonl"]);
    assert!(
        stderr(&o).contains(&format!("is being written by pid {pid}")),
        "{}",
        stderr(&o)
    );
    first.kill().unwrap();
    first.wait().unwrap();
    // The first run's trace is its own, whole up to its last line, not mixed with another.
    let text = std::fs::read_to_string(&trace).unwrap();
    assert_eq!(text.matches("\"type\":\"header\"").count(), 1);
    // With the writer gone, the next demo replaces the trace.
    let third = run_in(d, &["demo", "--out", "same", "--steps", "3"]);
    assert!(third.status.success(), "{}", stderr(&third));
    let leftovers: Vec<_> = std::fs::read_dir(d.join("same"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_symlink_at_the_demo_trace_is_replaced_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("out")).unwrap();
    std::fs::write(d.join("victim.txt"), "keep me\n").unwrap();
    std::os::unix::fs::symlink(d.join("victim.txt"), d.join("out/trace.jsonl")).unwrap();
    let o = run_in(d, &["demo", "--out", "out", "--steps", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(d.join("victim.txt")).unwrap(),
        "keep me\n"
    );
    let meta = std::fs::symlink_metadata(d.join("out/trace.jsonl")).unwrap();
    assert!(meta.file_type().is_file());
}
