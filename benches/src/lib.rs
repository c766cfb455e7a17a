//! Shared support for the benchmark suites: criterion configuration and summary rows.
//!
//! Every suite in `benches/benches/` builds its [`Criterion`] with [`criterion()`], runs its
//! groups, then reports one [`Row`] per figure with [`emit`] (or [`emit_time_ratio`] for a
//! criterion measurement against a baseline measured in the same run). `cargo xtask bench`
//! collects the rows into `target/bench-summary.json`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use criterion::Criterion;
use serde_json::{Value, json};

/// True when `cargo xtask bench --quick` asked for a short run (about 3 minutes in all).
pub fn quick() -> bool {
    std::env::var_os("TRACEGRAPH_BENCH_QUICK").is_some_and(|v| v != "0")
}

/// A criterion configured for this project: short in quick mode, thorough otherwise.
pub fn criterion() -> Criterion {
    let c = Criterion::default();
    let c = if quick() {
        c.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(900))
            .sample_size(10)
    } else {
        c.warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .sample_size(30)
    };
    c.configure_from_args()
}

/// One line of `target/bench-summary.json`.
#[derive(Debug, Clone)]
pub struct Row {
    /// What was measured, e.g. `fingerprint/10k`.
    pub bench: String,
    /// The figure, e.g. `ns_per_op`.
    pub metric: String,
    /// Our value.
    pub value: f64,
    /// The unit of `value` and `baseline_value`, e.g. `ns`, `B`, `events/s`.
    pub unit: String,
    /// The baseline's name, when there is one.
    pub baseline: Option<String>,
    /// The baseline's value in the same run, when there is one.
    pub baseline_value: Option<f64>,
}

impl Row {
    /// A row without a baseline.
    pub fn new(bench: &str, metric: &str, value: f64, unit: &str) -> Self {
        Row {
            bench: bench.to_string(),
            metric: metric.to_string(),
            value,
            unit: unit.to_string(),
            baseline: None,
            baseline_value: None,
        }
    }

    /// The same row compared with a baseline measured in the same run.
    pub fn vs(mut self, baseline: &str, baseline_value: f64) -> Self {
        self.baseline = Some(baseline.to_string());
        self.baseline_value = Some(baseline_value);
        self
    }

    /// `value / baseline_value` (lower is better for times), when both are known and the
    /// baseline is non-zero.
    pub fn ratio(&self) -> Option<f64> {
        self.baseline_value
            .filter(|b| *b != 0.0 && b.is_finite())
            .map(|b| self.value / b)
    }

    fn to_json(&self) -> Value {
        json!({
            "bench": self.bench,
            "metric": self.metric,
            "value": self.value,
            "unit": self.unit,
            "baseline": self.baseline,
            "baseline_value": self.baseline_value,
            "ratio": self.ratio(),
        })
    }
}

/// Where rows go: `$TRACEGRAPH_BENCH_ROWS`, else `target/bench-rows.jsonl` in the workspace.
fn rows_path() -> PathBuf {
    if let Some(p) = std::env::var_os("TRACEGRAPH_BENCH_ROWS") {
        return PathBuf::from(p);
    }
    target_dir().join("bench-rows.jsonl")
}

/// The workspace target directory (`$CARGO_TARGET_DIR` or `<workspace>/target`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    )
}

/// Where criterion writes its estimates, found as criterion finds it: `$CRITERION_HOME`, else
/// `criterion` in `$CARGO_TARGET_DIR` or (under cargo, which sets `$CARGO`) the workspace
/// target directory, else `target/criterion` in the current directory (a bench binary run
/// directly, whose rows would otherwise read another run's estimates).
pub fn criterion_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    if std::env::var_os("CARGO_TARGET_DIR").is_some() || std::env::var_os("CARGO").is_some() {
        return target_dir().join("criterion");
    }
    PathBuf::from("target/criterion")
}

/// Appends a row to the summary and prints it. A row that cannot be written is reported on
/// stderr; the benchmark itself still counts.
pub fn emit(row: Row) {
    let line = row.to_json().to_string();
    eprintln!(
        "bench-row: {} {} = {:.3} {}{}",
        row.bench,
        row.metric,
        row.value,
        row.unit,
        match (&row.baseline, row.baseline_value, row.ratio()) {
            (Some(b), Some(v), Some(r)) => format!(" (baseline {b} = {v:.3}, ratio {r:.3})"),
            _ => String::new(),
        }
    );
    let path = rows_path();
    let result = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = result {
        eprintln!("bench-row: cannot write {}: {e}", path.display());
    }
}

/// The mean time in nanoseconds of one iteration of criterion benchmark `id`
/// (`"group/function"` or `"group/function/parameter"`), read from criterion's
/// `new/estimates.json`. `None` when the benchmark did not run (filtered out).
pub fn criterion_mean_ns(id: &str) -> Option<f64> {
    let mut path = criterion_home();
    for part in id.split('/') {
        path.push(sanitize(part));
    }
    path.push("new/estimates.json");
    let text = std::fs::read_to_string(&path).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v.get("mean")?.get("point_estimate")?.as_f64()
}

/// Criterion's directory-name sanitisation of benchmark id components.
fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| match c {
            '?' | '"' | '/' | '\\' | '*' | '<' | '>' | ':' | '|' | '^' => '_',
            c => c,
        })
        .collect()
}

/// Emits `ours / per` against `baseline / per` (e.g. ns per op for a graph of `per` ops),
/// both read from criterion's estimates of this run. Skipped (with a note) when either did
/// not run.
pub fn emit_time_ratio(
    bench: &str,
    metric: &str,
    ours_id: &str,
    baseline: &str,
    baseline_id: &str,
    per: f64,
) {
    match (criterion_mean_ns(ours_id), criterion_mean_ns(baseline_id)) {
        (Some(o), Some(b)) => emit(Row::new(bench, metric, o / per, "ns").vs(baseline, b / per)),
        _ => eprintln!(
            "bench-row: {bench} {metric} skipped ({ours_id} or {baseline_id} did not run)"
        ),
    }
}

/// Emits `ours / per` from a criterion estimate, without a baseline.
pub fn emit_time(bench: &str, metric: &str, ours_id: &str, per: f64) {
    match criterion_mean_ns(ours_id) {
        Some(o) => emit(Row::new(bench, metric, o / per, "ns")),
        None => eprintln!("bench-row: {bench} {metric} skipped ({ours_id} did not run)"),
    }
}

/// Peak resident set size of this process so far, in bytes (Linux `VmHWM`), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    status_bytes("VmHWM")
}

/// A memory field of this process's `/proc/self/status` in bytes (`VmRSS` the resident set
/// now, `VmHWM` its peak, given in kB there), if known: `None` off Linux, or when the field is
/// missing or not a number of kB.
pub fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kb| kb * 1024)
}

/// Builds the release `tracegraph` CLI (`cargo build --release -p tracegraph`) and returns the
/// path of its binary. Panics (the benchmark cannot run) when the build fails.
pub fn release_cli() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = std::process::Command::new(cargo)
        .args(["build", "--release", "-p", "tracegraph"])
        .current_dir(&root)
        .status()
        .expect("run cargo build");
    assert!(
        status.success(),
        "cargo build --release -p tracegraph failed"
    );
    let exe = target_dir()
        .join("release")
        .join(format!("tracegraph{}", std::env::consts::EXE_SUFFIX));
    assert!(exe.exists(), "{} missing", exe.display());
    exe
}

/// What [`measure_child`] saw of one child process.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Whether the child exited successfully.
    pub ok: bool,
    /// Wall time from spawn to exit.
    pub wall: Duration,
    /// Peak resident set size of the child in bytes, when it could be measured.
    pub peak_rss: Option<u64>,
    /// How `peak_rss` was measured.
    pub rss_source: &'static str,
    /// The child's standard error (with `/usr/bin/time -v`'s report when that was used).
    pub stderr: String,
}

/// Peak RSS (`VmHWM`) of process `pid` so far, in bytes, if it can be read.
fn proc_hwm(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Runs `cmd` (stdout discarded) and measures its wall time and peak RSS: with
/// `/usr/bin/time -v` when present, else by polling `/proc/<pid>/status` (`VmHWM`) every 5 ms.
/// Returns `None` when it ran past `limit` (it is then killed).
pub fn measure_child(cmd: std::process::Command, limit: Option<Duration>) -> Option<Measured> {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let gnu_time = std::path::Path::new("/usr/bin/time");
    let (mut cmd, source) = if gnu_time.exists() {
        let mut t = Command::new(gnu_time);
        t.arg("-v").arg(cmd.get_program()).args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            if let Some(v) = v {
                t.env(k, v);
            }
        }
        (t, "/usr/bin/time -v")
    } else {
        (cmd, "VmHWM polled every 5 ms")
    };
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let start = std::time::Instant::now();
    let mut child = cmd.spawn().expect("spawn the measured command");
    let pid = child.id();
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stderr {
            for line in BufReader::new(s).lines().map_while(Result::ok) {
                text.push_str(&line);
                text.push('\n');
            }
        }
        text
    });
    let mut hwm = 0u64;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for the measured command") {
            break st;
        }
        if let Some(l) = limit
            && start.elapsed() > l
        {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        if let Some(v) = proc_hwm(pid) {
            hwm = hwm.max(v);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let wall = start.elapsed();
    let stderr = reader.join().unwrap_or_default();
    let from_time = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("Maximum resident set size (kbytes):"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024);
    let (peak_rss, rss_source) = match from_time {
        Some(b) => (Some(b), source),
        None => ((hwm > 0).then_some(hwm), "VmHWM polled every 5 ms"),
    };
    Some(Measured {
        ok: status.success(),
        wall,
        peak_rss,
        rss_source,
        stderr,
    })
}

/// The median of `values` (the mean of the two middle values for an even count); NaN when
/// empty. Sorts `values` in place.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => f64::midpoint(values[n / 2 - 1], values[n / 2]),
    }
}

/// A 95 % confidence interval for the median of `values` that assumes nothing of their
/// distribution (the order statistics `k` and `n + 1 - k`, with `k` the largest count whose
/// binomial tail `P(Bin(n, ½) < k)` is at most 2.5 %); `None` below 6 values, where no such
/// interval exists. Sorts `values` in place.
pub fn median_ci95(values: &mut [f64]) -> Option<(f64, f64)> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    // P(Bin(n, ½) = i), summed from i = 0 while the tail stays within 2.5 %.
    let mut term = 0.5f64.powi(i32::try_from(n).ok()?);
    let mut tail = 0.0;
    let mut k = 0usize;
    while k < n {
        if tail + term > 0.025 {
            break;
        }
        tail += term;
        term *= (n - k) as f64 / (k + 1) as f64;
        k += 1;
    }
    (k >= 1).then(|| (values[k - 1], values[n - k]))
}

/// How long an on/off comparison runs: rounds until `budget` is spent, at least `min_rounds`
/// and at most `max_rounds`.
#[derive(Debug, Clone, Copy)]
pub struct Rounds {
    /// Wall time to spend.
    pub budget: Duration,
    /// Rounds run whatever the budget.
    pub min_rounds: usize,
    /// Rounds never exceeded.
    pub max_rounds: usize,
}

/// Times `time(true)` (the instrumented side) and `time(false)` once each per round, the order
/// flipping every `flip_every` rounds so that drift hits both sides alike, for `rounds`.
/// Returns the on and off times, round by round.
pub fn alternate(
    rounds: Rounds,
    flip_every: usize,
    mut time: impl FnMut(bool) -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let (mut t_on, mut t_off) = (Vec::new(), Vec::new());
    let started = std::time::Instant::now();
    let mut round = 0usize;
    while round < rounds.max_rounds
        && (round < rounds.min_rounds || started.elapsed() < rounds.budget)
    {
        if (round / flip_every.max(1)).is_multiple_of(2) {
            t_off.push(time(false));
            t_on.push(time(true));
        } else {
            t_on.push(time(true));
            t_off.push(time(false));
        }
        round += 1;
    }
    (t_on, t_off)
}

/// Emits the median row of `t_on` against `t_off` (labelled `baseline`) and the median of the
/// per-round ratios (`median_paired_ratio`); returns the two medians.
pub fn emit_paired(
    bench: &str,
    metric: &str,
    baseline: &str,
    mut t_on: Vec<f64>,
    mut t_off: Vec<f64>,
) -> (f64, f64) {
    let mut paired: Vec<f64> = t_on.iter().zip(&t_off).map(|(a, b)| a / b).collect();
    let (on, off) = (median(&mut t_on), median(&mut t_off));
    emit(Row::new(bench, metric, on, "ns").vs(baseline, off));
    emit(Row::new(
        bench,
        "median_paired_ratio",
        median(&mut paired),
        "x",
    ));
    (on, off)
}

/// Runs this bench binary again, with the same arguments, in a child process whose
/// environment has `marker` set to `value` (so the child knows which rows it runs) and
/// `RAYON_NUM_THREADS` set to `threads`, or removed when `None`: for rows that need another
/// Candle thread count than this process's, since Candle sizes its thread pools once per
/// process. Returns an error naming `what` when the child cannot start or fails.
pub fn run_self_as_child(
    what: &str,
    (marker, value): (&str, &str),
    threads: Option<&str>,
) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("{what}: this bench's path: {e}"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(std::env::args_os().skip(1)).env(marker, value);
    match threads {
        Some(n) => cmd.env("RAYON_NUM_THREADS", n),
        None => cmd.env_remove("RAYON_NUM_THREADS"),
    };
    let status = cmd
        .status()
        .map_err(|e| format!("{what}: the child did not start: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what}: the child failed: {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::median_ci95;

    #[test]
    fn the_median_interval_takes_the_tabled_order_statistics() {
        let mut v: Vec<f64> = (1..=15).map(f64::from).collect();
        // n = 15: P(X ≤ 3) = 1.76 % ≤ 2.5 % < P(X ≤ 4) = 5.9 %: the 4th and 12th values.
        assert_eq!(median_ci95(&mut v), Some((4.0, 12.0)));
        let mut v: Vec<f64> = (1..=6).rev().map(f64::from).collect();
        // n = 6: P(X = 0) = 1.6 %: the extremes.
        assert_eq!(median_ci95(&mut v), Some((1.0, 6.0)));
        let mut v: Vec<f64> = (1..=5).map(f64::from).collect();
        assert_eq!(median_ci95(&mut v), None);
        assert_eq!(median_ci95(&mut []), None);
    }
}
