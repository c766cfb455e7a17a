//! `cargo xtask torch-check`: `compare --against-torch` on fresh Candle and PyTorch runs.
//!
//! Steps: build the release `tracegraph` (and check that its `compare` has `--against-torch`);
//! make or reuse the virtual environment `target/torchenv` with the pinned `torch` and
//! `transformers` (the CPU wheel index first, with a short timeout, then PyPI; nothing is
//! installed when the environment already holds those versions); run
//! `crates/testkit/data/torch/profile_torch.py --out DIR` for fresh torch.profiler traces of
//! the tiny Llama (and BERT) under `target/torch-check/torch/`; record the Candle side, the
//! demo's Llama (trace-candle's `profile_llama` example, the same model, config and tokens)
//! with the CPU sampler and `RAYON_NUM_THREADS=1`, under `target/torch-check/candle/`; then
//! take `tracegraph compare CANDLE --against-torch TORCH --json` and check it end to end:
//! the schema is `tracegraph.compare_torch/1`; torch's kind totals (per step × steps) equal
//! the self times of the `cpu_op` rows of torch's own `key_averages` that the script stored,
//! within 1 %; at least 10 layers are matched, `llama.forward` among them; Candle's kind
//! figures are the sampled estimate, or absent with the warning that the compared steps (about
//! 100 µs of decode each) caught no busy sample; both sides ran 1 thread or a warning says they differ;
//! every diagnosis has its text and evidence. Prints the step times, the top kind rows and
//! diagnoses, and the files' paths; fails with a message naming what did not hold.
//!
//! `.ci/run` does not run it (the torch wheel from PyPI is ~5.6 GB with its CUDA libraries;
//! CI's disk and 30-minute budget don't fit it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::Value;
use trace_analyze::{format_ns, format_share};

/// The PyPI packages the check installs, pinned (`torch` also from the CPU wheel index).
const TORCH: (&str, &str) = ("torch", "2.15.0");
const TRANSFORMERS: (&str, &str) = ("transformers", "5.25.0");
/// The CPU-only wheel index (about 200 MB instead of PyPI's ~5.6 GB CUDA build).
const CPU_INDEX: &str = "https://download.pytorch.org/whl/cpu";
/// pip's socket timeout for the CPU index, s (unreachable: fall back to PyPI quickly).
const CPU_INDEX_TIMEOUT_S: &str = "15";
/// The schema `compare --against-torch --json` prints.
const SCHEMA: &str = "tracegraph.compare_torch/1";
/// Torch's kind totals must equal `key_averages`' op self times within this share.
const SELF_TIME_TOLERANCE: f64 = 0.01;
/// Below this many busy samples the summary says Candle's kind figures are thin.
const FEW_SAMPLES: u64 = 30;
/// Layers the comparison must match, at least.
const MIN_LAYERS: usize = 10;

/// Runs the check.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    if !args.is_empty() {
        bail!("torch-check takes no arguments");
    }
    let started = Instant::now();
    let (target, out, tg) = super::fresh_check(root, "torch-check")?;
    let help = output_of(Command::new(&tg).args(["compare", "--help"]))?;
    if !String::from_utf8_lossy(&help.stdout).contains("--against-torch") {
        bail!(
            "{} has no `compare --against-torch` (`tracegraph compare --help` does not list it): \
             nothing to check yet",
            tg.display()
        );
    }

    let t = Instant::now();
    let python = python_env(&target)?;
    eprintln!("torch-check: Python environment ready in {:.1} s", secs(t));

    let t = Instant::now();
    let torch_dir = out.join("torch");
    let mut profile = Command::new(&python);
    profile
        .arg(root.join("crates/testkit/data/torch/profile_torch.py"))
        .arg("--out")
        .arg(&torch_dir)
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1");
    write_output(profile, &out.join("profile_torch.log"))?;
    let torch_trace = torch_dir.join("llama.trace.json.gz");
    let key_averages_path = torch_dir.join("llama.key_averages.json");
    eprintln!("torch-check: torch.profiler traces in {:.1} s", secs(t));

    let t = Instant::now();
    let candle_dir = out.join("candle");
    record_candle(&tg, &candle_dir, &out.join("demo.log"))?;
    let candle_trace = candle_dir.join("trace.jsonl");
    eprintln!("torch-check: Candle trace in {:.1} s", secs(t));

    let mut compare = Command::new(&tg);
    compare
        .arg("compare")
        .arg(&candle_trace)
        .arg("--against-torch")
        .arg(&torch_trace);
    let text_path = out.join("compare.txt");
    write_output(compare, &text_path)?;
    let mut compare = Command::new(&tg);
    compare
        .arg("compare")
        .arg(&candle_trace)
        .arg("--against-torch")
        .arg(&torch_trace)
        .arg("--json");
    let json_path = out.join("compare.json");
    let json_out = write_output(compare, &json_path)?;
    let report: Value = serde_json::from_slice(&json_out.stdout).with_context(|| {
        format!(
            "the JSON of `compare --against-torch` ({})",
            json_path.display()
        )
    })?;
    let key_averages: Value = serde_json::from_slice(
        &std::fs::read(&key_averages_path)
            .with_context(|| format!("reading {}", key_averages_path.display()))?,
    )
    .with_context(|| format!("parsing {}", key_averages_path.display()))?;

    summarize(&report);
    let t = totals(&report, &key_averages);
    println!(
        "  torch's kind totals over {} steps: {}; key_averages' cpu_op self time: {}",
        t.torch_steps,
        ns_text(Some(t.kinds_total)),
        ns_text(Some(t.ops_total))
    );
    let failures = check(&report, &key_averages);
    println!("\nfiles:");
    for (what, p) in [
        ("Candle trace", &candle_trace),
        ("torch trace", &torch_trace),
        ("torch key_averages", &key_averages_path),
        ("comparison (text)", &text_path),
        ("comparison (JSON)", &json_path),
    ] {
        println!("  {what:<20} {}", p.display());
    }
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("torch-check: FAIL {f}");
        }
        bail!(
            "torch-check: {} check(s) failed on {}",
            failures.len(),
            json_path.display()
        );
    }
    println!(
        "\ntorch-check: ok ({:.1} s): the comparison parses as {SCHEMA}, torch's kind totals \
         match key_averages, layers are matched, Candle's side is sampled or says why not, every diagnosis \
         has its evidence",
        secs(started)
    );
    Ok(())
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// Runs `cmd` and returns its output, failing with its stderr when it fails.
fn output_of(cmd: &mut Command) -> Result<Output> {
    let out = cmd
        .output()
        .with_context(|| format!("failed to start {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out)
}

/// Runs `cmd`, writes its stdout to `path` (its stderr after it, on failure) and returns the
/// output.
fn write_output(mut cmd: Command, path: &Path) -> Result<Output> {
    eprintln!("xtask: running {cmd:?}");
    let out = cmd
        .output()
        .with_context(|| format!("failed to start {cmd:?}"))?;
    std::fs::write(path, &out.stdout).with_context(|| format!("writing {}", path.display()))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed with {} (its output: {}): {}",
            out.status,
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out)
}

/// The Candle side: `tracegraph demo --model llama --sample --out DIR` on Candle's fast path
/// with one thread, as the torch script runs torch. A demo whose `--sample` is for the MLP
/// only (a usage error, exit 2) is rerun with the example's own switch,
/// `PROFILE_LLAMA_SAMPLE=1`.
fn record_candle(tg: &Path, dir: &Path, log: &Path) -> Result<()> {
    let demo = |sample_flag: bool| {
        let mut cmd = Command::new(tg);
        cmd.args(["demo", "--model", "llama"]);
        if sample_flag {
            cmd.arg("--sample");
        } else {
            cmd.env("PROFILE_LLAMA_SAMPLE", "1");
        }
        cmd.arg("--out").arg(dir).env("RAYON_NUM_THREADS", "1");
        cmd
    };
    let mut cmd = demo(true);
    eprintln!("xtask: running {cmd:?}");
    let out = cmd
        .output()
        .with_context(|| format!("failed to start {cmd:?}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(2) && stderr.contains("--sample") {
        eprintln!(
            "torch-check: this demo takes no --sample for the Llama ({}); sampling with \
             PROFILE_LLAMA_SAMPLE=1 instead",
            stderr.trim()
        );
        write_output(demo(false), log)?;
        return Ok(());
    }
    std::fs::write(log, &out.stdout).with_context(|| format!("writing {}", log.display()))?;
    if !out.status.success() {
        bail!("{cmd:?} failed with {}: {stderr}", out.status);
    }
    Ok(())
}

/// The installed version of each of `packages` (`None` when not installed), local version
/// labels (`+cpu`, `+cu132`) dropped.
fn installed(python: &Path, packages: &[&str]) -> Result<Vec<Option<String>>> {
    let script = "import importlib.metadata as m, sys\n\
                  for p in sys.argv[1:]:\n\
                  \x20   try: print(m.version(p))\n\
                  \x20   except m.PackageNotFoundError: print('-')\n";
    let out = output_of(Command::new(python).args(["-c", script]).args(packages))?;
    let text = String::from_utf8(out.stdout).context("pip's versions are not UTF-8")?;
    Ok(text
        .lines()
        .map(|l| {
            let v = l.trim().split('+').next().unwrap_or("");
            (v != "-" && !v.is_empty()).then(|| v.to_string())
        })
        .collect())
}

/// `python -m pip install` with the check's flags.
fn pip(python: &Path) -> Command {
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-cache-dir",
    ]);
    cmd
}

/// The virtual environment's Python with the pinned torch and transformers:
/// `target/torchenv`, created when missing, filled when it holds other versions.
fn python_env(target: &Path) -> Result<PathBuf> {
    let env = target.join("torchenv");
    let python = env.join("bin").join("python");
    if !python.exists() {
        let host = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        let mut venv = Command::new(&host);
        venv.args(["-m", "venv", "--clear"]).arg(&env);
        super::run(venv).with_context(|| {
            format!(
                "creating a Python virtual environment with {host} (Debian: apt-get install -y python3-venv)"
            )
        })?;
    }
    let pins = [TORCH, TRANSFORMERS];
    let names = pins.map(|(n, _)| n);
    let have = installed(&python, &names)?;
    if have[0].as_deref() != Some(TORCH.1) {
        let want = format!("{}=={}", TORCH.0, TORCH.1);
        let mut cpu = pip(&python);
        cpu.args(["--timeout", CPU_INDEX_TIMEOUT_S, "--retries", "0"])
            .args(["--index-url", CPU_INDEX])
            .arg(&want);
        if let Err(e) = super::run(cpu) {
            eprintln!(
                "torch-check: the CPU wheel index did not serve {want} ({e:#}); installing it \
                 from PyPI (the CUDA build, ~5.6 GB with its libraries)"
            );
            let mut pypi = pip(&python);
            pypi.arg(&want);
            super::run(pypi)?;
        }
    }
    if have[1].as_deref() != Some(TRANSFORMERS.1) {
        let mut pypi = pip(&python);
        pypi.arg(format!("{}=={}", TRANSFORMERS.0, TRANSFORMERS.1));
        super::run(pypi)?;
    }
    let now = installed(&python, &names)?;
    for ((name, want), got) in pins.iter().zip(&now) {
        if got.as_deref() != Some(*want) {
            bail!(
                "{} holds {name} {} after installing, not {want}",
                env.display(),
                got.as_deref().unwrap_or("(none)")
            );
        }
    }
    Ok(python)
}

/// A number of the report (`f64`), or `None`.
fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// `12.3 µs` for a figure in ns, `-` when absent.
fn ns_text(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), format_ns)
}

/// Prints step times, the top 5 kind rows, warnings and the top diagnoses.
fn summarize(report: &Value) {
    let side = |s: &str| &report[s];
    println!("\ntorch-check: Candle beside PyTorch (tiny Llama decode, per step)");
    for name in ["candle", "torch"] {
        let s = side(name);
        println!(
            "  {name:<7} {:>10} per step over steps {}, {} thread(s), {} on {}",
            ns_text(num(s, "step_ns")),
            s["steps"],
            s["threads"],
            s["dtypes"],
            s["device"].as_str().unwrap_or("?")
        );
    }
    if let Some(r) = num(report, "step_ratio") {
        println!("  Candle / torch step time: {r:.2}×");
    }
    let source = &report["candle_source"];
    println!(
        "  Candle's kind figures: {}",
        source["source"].as_str().unwrap_or("?")
    );
    if let Some(n) = source["busy_samples"].as_u64()
        && n < FEW_SAMPLES
    {
        println!(
            "  note: only {n} busy sample(s) behind Candle's kind figures (the sampler takes \
             about 1 per ms of CPU time): read them as their intervals say"
        );
    }
    for w in report["warnings"].as_array().into_iter().flatten() {
        println!("  warning: {}", w.as_str().unwrap_or("?"));
    }
    println!(
        "\n  {:<14} {:>10} {:>10} {:>7} {:>10}",
        "kind", "candle", "torch", "ratio", "loss"
    );
    for row in report["kinds"].as_array().into_iter().flatten().take(5) {
        println!(
            "  {:<14} {:>10} {:>10} {:>7} {:>10}",
            row["kind"].as_str().unwrap_or("?"),
            ns_text(num(row, "candle_ns")),
            ns_text(num(row, "torch_ns")),
            num(row, "ratio").map_or_else(|| "-".into(), |r| format!("{r:.2}×")),
            ns_text(num(row, "loss_ns")),
        );
    }
    if let (Some(c), Some(t)) = (
        num(report, "candle_copy_share"),
        num(report, "torch_copy_share"),
    ) {
        println!(
            "  copy/layout share of the step: Candle {}, torch {}",
            format_share(c),
            format_share(t)
        );
    }
    let layers = report["layers"].as_array().map_or(0, Vec::len);
    println!("  layers matched: {layers}");
    let diagnoses = report["diagnoses"].as_array().cloned().unwrap_or_default();
    println!("\n  diagnoses ({}):", diagnoses.len());
    for d in diagnoses.iter().take(3) {
        println!(
            "  - [{}] {}",
            d["rule"].as_str().unwrap_or("?"),
            d["text"].as_str().unwrap_or("?")
        );
    }
}

/// Torch's side of the report in total, and key_averages' op self time, both in ns.
struct Totals {
    /// The sum over kinds of torch's ns per step × the steps.
    kinds_total: f64,
    /// The sum of key_averages' `cpu_op` rows' self time (user annotations, that is
    /// `record_function` ranges and `ProfilerStep*`, left out).
    ops_total: f64,
    /// Torch's steps compared.
    torch_steps: usize,
}

fn totals(report: &Value, key_averages: &Value) -> Totals {
    let torch_steps = report["torch"]["steps"].as_array().map_or(0, Vec::len);
    let kinds_total = report["kinds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| num(r, "torch_ns"))
        .sum::<f64>()
        * torch_steps as f64;
    let ops_total = key_averages["ops"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["is_user_annotation"] == false)
        .filter_map(|r| num(r, "self_cpu_time_total_us"))
        .sum::<f64>()
        * 1000.0;
    Totals {
        kinds_total,
        ops_total,
        torch_steps,
    }
}

/// What does not hold of `report` (see the module docs); empty when all holds.
fn check(report: &Value, key_averages: &Value) -> Vec<String> {
    let mut failures = Vec::new();
    let mut expect = |ok: bool, what: String| {
        if !ok {
            failures.push(what);
        }
    };
    expect(
        report["schema"] == SCHEMA,
        format!("the schema is {}, not {SCHEMA}", report["schema"]),
    );

    // Torch's kind totals against key_averages' cpu_op rows.
    let rows = key_averages["ops"].as_array().cloned().unwrap_or_default();
    let annotated = rows.iter().all(|r| r["is_user_annotation"].is_boolean());
    expect(
        !rows.is_empty() && annotated,
        "key_averages has no op rows with `is_user_annotation` (regenerate it with \
         profile_torch.py)"
            .to_string(),
    );
    let Totals {
        kinds_total,
        ops_total,
        torch_steps,
    } = totals(report, key_averages);
    let off = (kinds_total - ops_total).abs() / ops_total.max(1.0);
    expect(
        ops_total > 0.0 && off <= SELF_TIME_TOLERANCE,
        format!(
            "torch's kind totals ({} per step × {torch_steps} steps = {}) differ from \
             key_averages' cpu_op self times ({}) by {} (allowed {})",
            ns_text(Some(kinds_total / torch_steps.max(1) as f64)),
            ns_text(Some(kinds_total)),
            ns_text(Some(ops_total)),
            format_share(off),
            format_share(SELF_TIME_TOLERANCE)
        ),
    );
    let recorded = &key_averages["recorded_profiler_steps"];
    expect(
        report["torch"]["steps"] == *recorded,
        format!(
            "torch's steps compared are {}, the script recorded {recorded}",
            report["torch"]["steps"]
        ),
    );

    // Layers.
    let layers = report["layers"].as_array().cloned().unwrap_or_default();
    expect(
        layers.len() >= MIN_LAYERS,
        format!(
            "{} layer(s) matched, expected at least {MIN_LAYERS}",
            layers.len()
        ),
    );
    expect(
        layers.iter().any(|l| l["path"] == "llama.forward"),
        "`llama.forward` is not among the matched layers".to_string(),
    );

    // Candle's source.
    let warnings: Vec<&str> = report["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    // The demo's Llama captures one op per forward (`llama.forward`), so Candle's kinds are
    // the sampled estimate; its decode steps take about 100 µs, so the sampler (about one
    // sample per ms of CPU time) may catch none of them in the four compared steps, and then
    // the comparison must say so instead of showing figures.
    let source = report["candle_source"]["source"].as_str().unwrap_or("?");
    let said = warnings
        .iter()
        .any(|w| w.contains("no busy samples in the chosen steps"));
    expect(
        source == "sampled" || (source == "none" && said),
        format!(
            "Candle's kind figures come from {}: expected the sampled estimate, or none with \
             the warning that the chosen steps have no busy samples (Candle's steps take {} \
             each; the report's warnings: {warnings:?})",
            report["candle_source"],
            ns_text(num(&report["candle"], "step_ns"))
        ),
    );

    // Threads.
    let threads = |s: &str| report[s]["threads"].as_u64();
    let (ct, tt) = (threads("candle"), threads("torch"));
    let warned = warnings.iter().any(|w| w.contains("threads differ"));
    expect(
        (ct == Some(1) && tt == Some(1)) || (ct != tt && warned),
        format!(
            "threads: Candle {ct:?}, torch {tt:?}, and no warning says they differ (expected \
             1 each, RAYON_NUM_THREADS=1 and torch.set_num_threads(1))"
        ),
    );

    // Diagnoses.
    for (i, d) in report["diagnoses"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let text = d["text"].as_str().unwrap_or("");
        let evidence = d["evidence"].as_array().cloned().unwrap_or_default();
        let filled = !evidence.is_empty()
            && evidence
                .iter()
                .all(|e| e.as_str().is_some_and(|e| !e.trim().is_empty()));
        expect(
            !text.trim().is_empty() && filled,
            format!(
                "diagnosis {i} ({}) lacks its text or evidence: {d}",
                d["rule"]
            ),
        );
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report() -> Value {
        json!({
            "schema": SCHEMA,
            "candle": {"steps": [2, 3], "step_ns": 3000.0, "threads": 1},
            "torch": {"steps": [2, 3], "step_ns": 2000.0, "threads": 1},
            "warnings": [],
            "candle_source": {"source": "sampled", "busy_samples": 40},
            "kinds": [
                {"kind": "matmul", "candle_ns": 2000.0, "torch_ns": 1000.0},
                {"kind": "copy_layout", "candle_ns": 500.0, "torch_ns": 500.5},
            ],
            "layers": (0..10).map(|i| json!({"path": if i == 0 {
                "llama.forward".to_string()
            } else {
                format!("llama.forward/block#{i}")
            }})).collect::<Vec<_>>(),
            "diagnoses": [{"rule": "kind_slower", "text": "matmul is slower", "evidence": ["x"]}],
        })
    }

    fn key_averages() -> Value {
        json!({
            "recorded_profiler_steps": [2, 3],
            "ops": [
                {"name": "aten::mm", "self_cpu_time_total_us": 2.0, "is_user_annotation": false},
                {"name": "aten::copy_", "self_cpu_time_total_us": 1.0, "is_user_annotation": false},
                {"name": "ProfilerStep*", "self_cpu_time_total_us": 9.0, "is_user_annotation": true},
            ],
        })
    }

    #[test]
    fn a_report_that_holds_passes() {
        assert_eq!(check(&report(), &key_averages()), Vec::<String>::new());
    }

    #[test]
    fn each_broken_fact_is_named() {
        type Break = fn(&mut Value);
        let cases: [(&str, Break); 6] = [
            ("schema", |r| r["schema"] = json!("tracegraph.compare/1")),
            ("kind totals", |r| r["kinds"][0]["torch_ns"] = json!(1100.0)),
            ("layer(s) matched", |r| {
                r["layers"].as_array_mut().map(Vec::pop);
            }),
            ("sampled", |r| {
                r["candle_source"] = json!({"source": "captured_ops"});
            }),
            ("threads", |r| r["candle"]["threads"] = json!(2)),
            ("evidence", |r| r["diagnoses"][0]["evidence"] = json!([])),
        ];
        for (what, break_it) in cases {
            let mut r = report();
            break_it(&mut r);
            let failures = check(&r, &key_averages());
            assert_eq!(failures.len(), 1, "{what}: {failures:?}");
            assert!(failures[0].contains(what), "{what}: {failures:?}");
        }
        // No samples in the compared steps: absent kind figures pass when the report says why.
        let mut r = report();
        r["candle_source"] = json!({"source": "none"});
        assert_eq!(check(&r, &key_averages()).len(), 1);
        r["warnings"] = json!([
            "the Candle trace has no busy samples in the chosen steps (0 of its CPU samples in all)"
        ]);
        assert!(check(&r, &key_averages()).is_empty());
        // Differing threads pass when a warning says so.
        let mut r = report();
        r["candle"]["threads"] = json!(2);
        r["warnings"] = json!(["threads differ: Candle 2, torch 1"]);
        assert!(check(&r, &key_averages()).is_empty());
    }
}
