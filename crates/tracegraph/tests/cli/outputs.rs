//! Outputs never destroy a user's file (temporary file renamed into place, devices written in
//! place, an output that is an input refused) and every command exits as `--help` documents.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::{run_in, stderr, stdout};

fn small_text() -> String {
    std::fs::read_to_string(testkit::small_jsonl()).unwrap()
}

/// A trace that fails in the middle: the export has started writing when it fails.
fn write_bad_midway(dir: &Path) {
    let mut text = small_text();
    let cut = text.rfind("{\"type\":\"trailer\"").unwrap();
    text.truncate(cut);
    text.push_str("{\"type\":\"op\",\"name\":1}\n");
    std::fs::write(dir.join("bad.jsonl"), text).unwrap();
}

#[test]
fn a_failed_export_or_report_leaves_an_existing_output_and_a_symlink_target_alone() {
    let dir = tempfile::tempdir().unwrap();
    write_bad_midway(dir.path());
    std::fs::write(dir.path().join("keep.txt"), "precious").unwrap();
    std::fs::write(dir.path().join("target.txt"), "target").unwrap();
    std::os::unix::fs::symlink("target.txt", dir.path().join("link.txt")).unwrap();
    for out in ["keep.txt", "link.txt"] {
        for args in [
            &["export", "bad.jsonl", "--format", "chrome", "-o", out][..],
            &["export", "bad.jsonl", "--format", "folded", "-o", out],
            &["report", "bad.jsonl", "-o", out],
        ] {
            let o = run_in(dir.path(), args);
            assert_eq!(o.status.code(), Some(3), "{args:?}: {}", stderr(&o));
        }
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
        "precious"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("target.txt")).unwrap(),
        "target"
    );
    assert!(
        std::fs::symlink_metadata(dir.path().join("link.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // No temporary file is left behind.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["bad.jsonl", "keep.txt", "link.txt", "target.txt"]);

    // A successful export through the symlink replaces its target and keeps the link.
    std::fs::copy(testkit::small_jsonl(), dir.path().join("t.jsonl")).unwrap();
    let o = run_in(
        dir.path(),
        &["export", "t.jsonl", "--format", "folded", "-o", "link.txt"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        std::fs::symlink_metadata(dir.path().join("link.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let folded = std::fs::read_to_string(dir.path().join("target.txt")).unwrap();
    assert!(folded.contains("train_step;forward"), "{folded}");
}

#[test]
fn device_nodes_are_written_in_place_and_never_removed() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    write_bad_midway(dir.path());
    std::fs::copy(testkit::small_jsonl(), dir.path().join("t.jsonl")).unwrap();
    // A failed export into /dev/null: the device stays.
    let o = run_in(dir.path(), &["export", "bad.jsonl", "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    // A successful one too.
    let o = run_in(dir.path(), &["export", "t.jsonl", "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // /dev/full: the write fails (exit 1, the OS error said once) and the device stays.
    if Path::new("/dev/full").exists() {
        for args in [
            &["export", "t.jsonl", "-o", "/dev/full"][..],
            &["report", "t.jsonl", "-o", "/dev/full"],
        ] {
            let o = run_in(dir.path(), args);
            assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
            let e = stderr(&o);
            assert_eq!(e.matches("No space left on device").count(), 1, "{e}");
            let m = std::fs::metadata("/dev/full").unwrap();
            assert!(m.file_type().is_char_device());
        }
    }
    for dev in ["/dev/null", "/dev/full"] {
        if Path::new(dev).exists() {
            assert!(std::fs::metadata(dev).unwrap().file_type().is_char_device());
        }
    }
}

#[test]
fn a_fifo_output_is_written_in_place() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(testkit::small_jsonl(), dir.path().join("t.jsonl")).unwrap();
    let fifo = dir.path().join("pipe");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        return; // no mkfifo on this machine
    }
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut s = String::new();
            std::fs::File::open(fifo)
                .unwrap()
                .read_to_string(&mut s)
                .unwrap();
            s
        })
    };
    let o = run_in(
        dir.path(),
        &["export", "t.jsonl", "--format", "folded", "-o", "pipe"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let got = reader.join().unwrap();
    assert!(got.contains("train_step;forward"), "{got}");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
}

#[test]
fn an_output_that_is_an_input_is_a_usage_error_and_the_trace_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let text = small_text();
    std::fs::write(dir.path().join("t.jsonl"), &text).unwrap();
    std::fs::hard_link(dir.path().join("t.jsonl"), dir.path().join("hard.jsonl")).unwrap();
    std::os::unix::fs::symlink("t.jsonl", dir.path().join("soft.jsonl")).unwrap();
    std::fs::write(dir.path().join("base.jsonl"), &text).unwrap();
    for out in ["t.jsonl", "./t.jsonl", "hard.jsonl", "soft.jsonl"] {
        for args in [
            &["export", "t.jsonl", "-o", out][..],
            &["export", "t.jsonl", "--format", "folded", "-o", out],
            &["report", "t.jsonl", "-o", out],
        ] {
            let o = run_in(dir.path(), args);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
            assert!(stderr(&o).contains("the same file"), "{}", stderr(&o));
        }
    }
    let o = run_in(
        dir.path(),
        &[
            "report",
            "t.jsonl",
            "--baseline",
            "base.jsonl",
            "-o",
            "base.jsonl",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("t.jsonl")).unwrap(),
        text
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("base.jsonl")).unwrap(),
        text
    );
}

#[test]
fn a_new_output_gets_the_usual_mode_and_an_existing_one_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(testkit::small_jsonl(), dir.path().join("t.jsonl")).unwrap();
    let o = run_in(dir.path(), &["export", "t.jsonl", "-o", "new.json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mode = std::fs::metadata(dir.path().join("new.json"))
        .unwrap()
        .permissions()
        .mode();
    // 0o666 less a umask: readable by the group at least as a created file would be, and
    // never the temporary file's private 0o600 unless the umask says so.
    assert_eq!(mode & 0o600, 0o600);
    let existing = dir.path().join("old.json");
    std::fs::write(&existing, "x").unwrap();
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o640)).unwrap();
    let o = run_in(dir.path(), &["export", "t.jsonl", "-o", "old.json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mode = std::fs::metadata(&existing).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o640);
}

#[test]
fn export_to_a_closed_pipe_is_success() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = Vec::new();
    testkit::write_synthetic(
        &mut big,
        &testkit::SynthConfig {
            ops: 20_000,
            ..testkit::SynthConfig::default()
        },
    )
    .unwrap();
    std::fs::write(dir.path().join("big.jsonl"), big).unwrap();
    for format in ["chrome", "folded"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tracegraph"))
            .args(["export", "big.jsonl", "--format", format, "-o", "-"])
            .current_dir(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut head = [0u8; 16];
        child.stdout.take().unwrap().read_exact(&mut head).unwrap();
        // The read end is closed here (dropped), like `| head -c 16`.
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{format}: {}", stderr(&o));
        assert!(!stderr(&o).contains("error"), "{}", stderr(&o));
    }
}

#[test]
fn an_unknown_step_is_a_usage_error_listing_the_recorded_steps() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(testkit::small_jsonl(), dir.path().join("t.jsonl")).unwrap();
    std::fs::write(dir.path().join("keep.json"), "keep").unwrap();
    for format in ["chrome", "folded"] {
        let o = run_in(
            dir.path(),
            &[
                "export",
                "t.jsonl",
                "--format",
                format,
                "--step",
                "999",
                "-o",
                "keep.json",
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{format}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("999") && e.contains("recorded steps: 0-"), "{e}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep.json")).unwrap(),
        "keep"
    );
}

#[test]
fn validate_json_for_a_rejected_trace_and_truncation_only_fails_strict() {
    let dir = tempfile::tempdir().unwrap();
    let bad = small_text().replacen(r#""dur":60"#, r#""dur":"sixty""#, 1);
    std::fs::write(dir.path().join("bad.jsonl"), bad).unwrap();
    let o = run_in(dir.path(), &["validate", "--json", "bad.jsonl"]);
    assert_eq!(o.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["schema"], "tracegraph.validate/1");
    assert_eq!(v["valid"], false);
    assert_eq!(v["line"], 8);
    assert_eq!(v["field"], "dur");
    let o = run_in(dir.path(), &["validate", "--json", "missing.jsonl"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["rejected"], "unreadable");
    assert_eq!(
        stderr(&o).matches("No such file or directory").count(),
        1,
        "{}",
        stderr(&o)
    );

    // Cut inside the first step: spans are open at the cut.
    let text = small_text();
    let cut = text.find(r#"{"type":"span_end","id":2"#).unwrap();
    std::fs::write(dir.path().join("cut.jsonl"), &text[..cut]).unwrap();
    let o = run_in(dir.path(), &["validate", "cut.jsonl"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("valid"), "{}", stdout(&o));
    let o = run_in(dir.path(), &["validate", "--strict", "cut.jsonl"]);
    assert_eq!(o.status.code(), Some(4), "{}", stdout(&o));
    // A complete trace with a span left open is still a structural problem.
    let open = text.replacen(r#"{"type":"span_end","id":2,"ts":150}"#, "", 1);
    std::fs::write(dir.path().join("open.jsonl"), open).unwrap();
    let o = run_in(dir.path(), &["validate", "open.jsonl"]);
    assert_eq!(o.status.code(), Some(4), "{}", stdout(&o));
}

#[test]
fn hostile_traces_print_in_linear_size_and_say_what_was_capped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("deep.jsonl"), testkit::deep_nesting(20_000)).unwrap();
    let o = run_in(dir.path(), &["spans", "deep.jsonl"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Indentation stops at a fixed depth: ~100 bytes a row, not 2 bytes per level.
    assert!(o.stdout.len() < 20_000 * 200, "{} bytes", o.stdout.len());
    assert!(stdout(&o).contains("[depth 19999]"));
    let o = run_in(
        dir.path(),
        &["export", "deep.jsonl", "--format", "folded", "-o", "f.txt"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("[deeper frames]"), "{}", stderr(&o));

    std::fs::write(dir.path().join("huge.jsonl"), testkit::overflowing_sums()).unwrap();
    let o = run_in(dir.path(), &["memory", "huge.jsonl"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("capped"), "{}", stdout(&o));
    let o = run_in(dir.path(), &["ops", "huge.jsonl"]);
    assert!(stdout(&o).contains("capped"), "{}", stdout(&o));
    let o = run_in(dir.path(), &["summary", "--json", "huge.jsonl"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["steps"]["saturated"], true, "{v}");
}

/// The hidden temporary files in `dir` (`.NAME.PID.XXXXXX.tmp`).
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n.ends_with(".tmp"))
        .collect()
}

/// Starts `tracegraph export big.jsonl -o out.json` and waits until its temporary file exists.
fn export_in_flight(dir: &Path) -> std::process::Child {
    let child = Command::new(env!("CARGO_BIN_EXE_tracegraph"))
        .args([
            "export",
            "big.jsonl",
            "--format",
            "chrome",
            "-o",
            "out.json",
        ])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    while temporaries(dir).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the export never made its temporary file"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    child
}

#[test]
fn a_killed_export_leaves_no_temporary_file_behind() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = testkit::SynthConfig {
        ops: 400_000,
        ..Default::default()
    };
    let mut f = std::io::BufWriter::new(std::fs::File::create(d.join("big.jsonl")).unwrap());
    testkit::write_synthetic(&mut f, &cfg).unwrap();
    drop(f);
    std::fs::write(d.join("out.json"), "the previous export").unwrap();
    // SIGINT and SIGTERM: the handler removes the temporary file, then the process ends by
    // the signal as before.
    for signal in ["INT", "TERM"] {
        let mut child = export_in_flight(d);
        let sent = Command::new("kill")
            .args(["-s", signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let status = child.wait().unwrap();
        if status.success() {
            // The export won the race and finished: nothing to clean up then either.
            assert!(temporaries(d).is_empty());
            std::fs::write(d.join("out.json"), "the previous export").unwrap();
            continue;
        }
        assert!(status.signal().is_some(), "{signal}: {status}");
        assert!(temporaries(d).is_empty(), "{signal}: {:?}", temporaries(d));
        assert_eq!(
            std::fs::read_to_string(d.join("out.json")).unwrap(),
            "the previous export"
        );
    }
    // SIGKILL cannot be caught: its leftover is removed by the next output written there.
    let mut child = export_in_flight(d);
    child.kill().unwrap();
    child.wait().unwrap();
    let left = temporaries(d);
    let o = run_in(
        d,
        &[
            "export",
            "big.jsonl",
            "--format",
            "folded",
            "-o",
            "out.json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        temporaries(d).is_empty(),
        "left {left:?}, now {:?}",
        temporaries(d)
    );
}
