//! Runs the `tracegraph` binary of the test's own build: exit code and stdout + stderr.

use std::process::Command;

/// `tracegraph ARGS`: its exit code (-1 when killed) and its stdout followed by its stderr.
pub(crate) fn cli(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tracegraph"))
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}
