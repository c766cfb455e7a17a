//! `cargo xtask`: the project's automation (CI checks and the benchmark runner).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

mod browser_check;
mod fuzz;
mod fuzz_cli;
mod load_check;
mod parquet_check;
#[cfg(test)]
mod tidy;
mod torch_check;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci                       fmt check, clippy -D warnings, the tests, the doc tests
  bench [--quick] [FILTER] run the criterion suites in benches/ (those whose file name
                           contains FILTER) and write target/bench-summary.json; sets
                           RAYON_NUM_THREADS (Candle's fast path) unless it is set
  fuzz [--seconds N] [--torch-seconds N] [--no-cli] [--tracegraph PATH]
                           mutate checked-in and generated traces and run every analysis
                           and export on each in-process (time and memory budget per
                           input); fails on a panic, an overrun or an unparsable output;
                           then (default 25 s) torch.profiler traces through the importer
                           (plain and gzip) and the comparison with a Candle run; then
                           the tracegraph binary (--tracegraph PATH, or a debug build) on
                           zstd bombs, foreign formats, strict gaps, rank directories and
                           linked datasets under a 2 GiB cap (--no-cli skips it)
  browser-check            build the demo's trace and HTML reports, load them in headless
                           Chromium from disk, fail on any console message or missing
                           section, and save target/browser-check/report.png
  parquet-check            export the demo's trace and a 4-rank run to Parquet and check
                           the queries of docs/exports.md in DuckDB and Polars (PyPI)
                           against tracegraph ops, memory and the straggler table
  torch-check              profile the tiny Llama with torch.profiler (pinned torch and
                           transformers in target/torchenv) and with the demo, then check
                           `tracegraph compare --against-torch` on them end to end
                           (not run by .ci/run: the PyPI torch wheel is ~5.6 GB)
  load-check [--per-core N] [-- ARGS]
                           run `cargo test --workspace [ARGS]` while N busy loops per core
                           (default 2) keep every core busy; fails when the tests fail
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("bench") => bench(&args[1..]),
        Some("browser-check") => browser_check::run(&root(), &args[1..]),
        Some("fuzz") => fuzz::run(&root(), &args[1..]),
        Some("load-check") => load_check::run(&root(), &args[1..]),
        Some("parquet-check") => parquet_check::run(&root(), &args[1..]),
        Some("torch-check") => torch_check::run(&root(), &args[1..]),
        Some("-h" | "--help") | None => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown xtask command `{other}`\n\n{USAGE}"),
    }
}

/// The workspace root: the parent of this crate's manifest directory.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The target directory (`CARGO_TARGET_DIR`, else `target/`), the check's own empty output
/// folder `target/NAME` (what an earlier run left there removed: the folder is the check's),
/// and the release `tracegraph`, built: what `parquet-check` and `torch-check` start from.
fn fresh_check(root: &Path, name: &str) -> Result<(PathBuf, PathBuf, PathBuf)> {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let out = target.join(name);
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut build = cargo();
    build.args(["build", "--release", "-p", "tracegraph"]);
    run(build)?;
    let tg = target.join("release").join("tracegraph");
    Ok((target, out, tg))
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

fn run(mut cmd: Command) -> Result<()> {
    eprintln!("xtask: running {cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("failed to start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

fn ci() -> Result<()> {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    run(fmt)?;
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    run(clippy)?;
    let mut test = cargo();
    test.args(["test", "--workspace"]);
    run(test)?;
    let mut doc = cargo();
    doc.args(["test", "--workspace", "--doc"]);
    run(doc)?;
    Ok(())
}

fn bench(args: &[String]) -> Result<()> {
    let mut quick = false;
    let mut filter: Option<&str> = None;
    for arg in args {
        match arg.as_str() {
            "--quick" => quick = true,
            a if a.starts_with('-') => bail!("unknown bench option `{a}`\n\n{USAGE}"),
            a => {
                if filter.replace(a).is_some() {
                    bail!("bench takes at most one FILTER\n\n{USAGE}");
                }
            }
        }
    }
    let root = root();
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    std::fs::create_dir_all(&target).with_context(|| format!("creating {}", target.display()))?;
    let rows_path = target.join("bench-rows.jsonl");
    if rows_path.exists() {
        std::fs::remove_file(&rows_path)
            .with_context(|| format!("removing stale {}", rows_path.display()))?;
    }

    let suites = bench_suites(&root.join("benches/benches"))?;
    let selected: Vec<&String> = suites
        .iter()
        .filter(|s| filter.is_none_or(|f| s.contains(f)))
        .collect();
    if selected.is_empty() {
        bail!("no benchmark suite matches {filter:?}; suites: {suites:?}");
    }

    let mut cmd = cargo();
    cmd.args(["bench", "-p", "tracegraph-benches"]);
    for suite in &selected {
        cmd.args(["--bench", suite.as_str()]);
    }
    cmd.env("TRACEGRAPH_BENCH_ROWS", &rows_path)
        .env("CRITERION_HOME", target.join("criterion"));
    if quick {
        cmd.env("TRACEGRAPH_BENCH_QUICK", "1");
    }
    // Candle's fast path, the one users who care run: with `RAYON_NUM_THREADS` unset
    // candle-core reads /proc on every matmul, which slows the bare work the rows compare
    // against and hides our cost. The llama suite also measures the unset path itself.
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let n = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        eprintln!("bench: RAYON_NUM_THREADS={n} (Candle's fast path; set it to choose)");
        cmd.env("RAYON_NUM_THREADS", n.to_string());
    }
    run(cmd)?;

    let rows = read_rows(&rows_path)?;
    let summary_path = target.join("bench-summary.json");
    let text = serde_json::to_string_pretty(&Value::Array(rows.clone()))
        .context("serialising the benchmark summary")?;
    std::fs::write(&summary_path, text + "\n")
        .with_context(|| format!("writing {}", summary_path.display()))?;
    print_table(&rows);
    println!("\nwrote {} rows to {}", rows.len(), summary_path.display());
    Ok(())
}

/// The bench target names: one `benches/benches/<name>.rs` file each.
fn bench_suites(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "rs")
            && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
        {
            names.push(stem.to_string());
        }
    }
    names.sort();
    Ok(names)
}

fn read_rows(path: &Path) -> Result<Vec<Value>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: invalid benchmark row", path.display(), i + 1))
        })
        .collect()
}

fn fmt_num(v: Option<&Value>) -> String {
    match v.and_then(Value::as_f64) {
        Some(x) if x.abs() >= 1000.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.3}"),
        None => "-".to_string(),
    }
}

fn print_table(rows: &[Value]) {
    let header = [
        "bench",
        "metric",
        "value",
        "unit",
        "baseline",
        "baseline_value",
        "ratio",
    ];
    let cells: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("-").to_string();
            [
                s("bench"),
                s("metric"),
                fmt_num(r.get("value")),
                s("unit"),
                s("baseline"),
                fmt_num(r.get("baseline_value")),
                fmt_num(r.get("ratio")),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let line = |row: &[String]| {
        row.iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if (2..=2).contains(&i) || i >= 5 {
                    format!("{c:>w$}")
                } else {
                    format!("{c:<w$}")
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    println!("{}", line(&header.map(String::from)));
    for row in &cells {
        println!("{}", line(row));
    }
}
