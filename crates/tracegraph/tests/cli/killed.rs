//! `tracegraph demo` killed at several moments (SIGKILL, SIGINT, SIGTERM): `summary` reads what it left, incomplete, to its last complete line.

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
    let deadline = Instant::now() + Duration::from_secs(120);
    while !trace.exists() {
        assert!(Instant::now() < deadline, "the demo never opened its trace");
        std::thread::sleep(Duration::from_millis(2));
    }
    child
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
