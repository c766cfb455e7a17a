//! End-to-end tests of the `tracegraph` binary: goldens on a small trace, the demo's own trace
//! through every command, exit codes for bad input.

#[cfg(feature = "demo")]
mod autograd;
mod compare_ab;
mod compressed;
mod demo;
mod errors;
mod export_paths;
mod flight_dumps;
mod golden;
mod graph_changes;
mod heap;
#[cfg(feature = "demo")]
mod killed;
#[cfg(feature = "demo")]
mod layer;
#[cfg(feature = "demo")]
mod loops;
mod outputs;
#[cfg(feature = "demo")]
mod overhead;
mod parquet_dataset;
#[cfg(feature = "demo")]
mod ranks;
mod report_torch;
#[cfg(feature = "demo")]
#[path = "../common/steps.rs"]
mod steps;
mod torch;
mod usage;
mod validate_bounds;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The test data directory.
pub(crate) fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// Runs `tracegraph args...` in `dir`.
pub(crate) fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tracegraph"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run tracegraph")
}

/// Stdout as text.
pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stderr as text.
pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
