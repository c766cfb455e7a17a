//! One step numbering: the analyses, the commands and the exports agree on a trace's steps.
//!
//! Shared by the CLI and the Llama test binaries (included with `#[path]`).

use std::path::Path;
use std::process::Command;

use trace_analyze::{LoadOptions, load_path};
use trace_export::{ChromeOptions, step_bar_us, write_chrome};
use trace_record::{ReadOptions, StepTracker, TraceReader};

/// Runs `tracegraph args...`: (exit code, stdout, stderr).
fn tracegraph(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tracegraph"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run tracegraph");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The JSON output of `tracegraph CMD TRACE --json`.
fn json_of(cmd: &str, trace: &str) -> serde_json::Value {
    let (code, out, err) = tracegraph(&[cmd, trace, "--json"]);
    assert_eq!(code, 0, "{cmd}: {err}");
    serde_json::from_str(&out).expect("JSON")
}

/// Asserts that every reader numbers and bounds the steps of the trace at `path` alike, and
/// returns their indices: the loaded steps (what `graph`, `ops`, `spans`, `summary` and the
/// report show), the shared rule run over the file (trace-record's `StepTracker`), the
/// Chrome export's step bars and instants (one per step, same number, same bounds, none for
/// the empty boundary after the last `step()`), `graph --json`, and `export --step` (every
/// step exports; the index after the last step does not).
pub(crate) fn assert_steps_agree(path: &Path) -> Vec<u64> {
    let p = path.to_str().expect("utf-8 path");
    let trace = load_path(path, LoadOptions { strict: true }).expect("load");
    let loaded: Vec<(u64, u64, u64)> = trace
        .steps
        .iter()
        .map(|s| (s.index, s.start_ns, s.end_ns))
        .collect();
    let indices: Vec<u64> = loaded.iter().map(|s| s.0).collect();
    assert!(!indices.is_empty(), "{p}: no steps");

    // The shared rule over the raw events gives the loader's steps.
    let reader = TraceReader::open(path, ReadOptions::default()).expect("open");
    let mut tracker = StepTracker::new();
    let mut ruled = Vec::new();
    for line in reader {
        let line = line.expect("read");
        ruled.extend(tracker.event(&line.event));
    }
    ruled.extend(tracker.finish());
    let ruled: Vec<(u64, u64, u64)> = ruled
        .iter()
        .filter(|s| s.is_step)
        .map(|s| (s.index, s.start_ns, s.end_ns))
        .collect();
    assert_eq!(ruled, loaded, "{p}: StepTracker and the loader");

    // The Chrome export: one bar and one instant per step, in order, with its bounds.
    let mut reader = TraceReader::open(path, ReadOptions::default()).expect("open");
    let mut json = Vec::new();
    let summary = write_chrome(&mut reader, &mut json, &ChromeOptions::default()).expect("export");
    assert_eq!(summary.step_bars_clamped, 0, "{p}");
    let v: serde_json::Value = serde_json::from_slice(&json).expect("chrome JSON");
    let events = v["traceEvents"].as_array().expect("traceEvents");
    let bars: Vec<(String, u64, u64, u64)> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "step")
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_string(),
                e["args"]["step"].as_u64().unwrap_or(u64::MAX),
                e["ts"].as_u64().unwrap_or(u64::MAX),
                e["dur"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    let want: Vec<(String, u64, u64, u64)> = loaded
        .iter()
        .map(|&(i, start, end)| {
            let (ts, dur) = step_bar_us(start, end);
            (format!("step {i}"), i, ts, dur)
        })
        .collect();
    assert_eq!(
        bars, want,
        "{p}: the Chrome steps track is the loaded steps"
    );
    let instants: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "i" && e["cat"].is_null() && e["args"]["step"].is_u64())
        .filter_map(|e| e["name"].as_str())
        .collect();
    let want: Vec<String> = indices.iter().map(|i| format!("step {i}")).collect();
    assert_eq!(instants, want, "{p}: one step instant per step");

    // The commands list the same steps.
    let graph = json_of("graph", p);
    let listed: Vec<u64> = graph["steps"]
        .as_array()
        .expect("graph steps")
        .iter()
        .filter_map(|s| s["step"].as_u64())
        .collect();
    assert_eq!(listed, indices, "{p}: graph --json");
    assert_eq!(
        json_of("spans", p)["steps"],
        indices.len(),
        "{p}: spans --json"
    );

    // The first, second and last steps export on their own; the index after the last one
    // (the empty boundary a loop's last `step()` opens, or no step at all) does not, and the
    // message lists the steps.
    let dir = tempfile::tempdir().expect("tempdir");
    for (k, &i) in indices.iter().enumerate() {
        if k > 1 && k + 1 != indices.len() {
            continue;
        }
        for format in ["chrome", "folded"] {
            let out = dir.path().join(format!("step{i}.{format}"));
            let (code, _, err) = tracegraph(&[
                "export",
                p,
                "--format",
                format,
                "--step",
                &i.to_string(),
                "-o",
                out.to_str().expect("utf-8"),
            ]);
            assert_eq!(code, 0, "{p}: export --format {format} --step {i}: {err}");
        }
    }
    let after = indices[indices.len() - 1] + 1;
    let out = dir.path().join("after.json");
    let (code, _, err) = tracegraph(&[
        "export",
        p,
        "--format",
        "chrome",
        "--step",
        &after.to_string(),
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 2, "{p}: export --step {after}: {err}");
    assert!(err.contains(&format!("no step {after}")), "{err}");
    assert!(
        err.contains(&format!("recorded steps: {}", indices[0])),
        "{err}"
    );
    indices
}
