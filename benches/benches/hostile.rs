//! Benchmark suite `hostile`: hostile traces stay linear.
//!
//! 20,000-deep span nesting through `spans`, `report` and `export` (Chrome and folded) as child
//! processes (wall and peak RSS), and 250,000 allocations with ids `i << 40` against ids `1..n`
//! through load + memory report.
//!
//! Targets: each deep-nesting command ≤ 1 s and ≤ 200 MB peak RSS; the memory
//! analysis of structured ids ≤ 1.5× the time of dense ids, measured in the same run.
//!
//! Peak memory against the input: `spans`, `compare` (the trace against itself), `report` and
//! `hot` on a large deep nesting, on as many never-closed root spans (200,000 spans quick,
//! 1,000,000 full) and on one sampled stack as deep (as many distinct frames), each as
//! `hostile/rss_per_input/<shape>/<command> peak_rss_per_input_mb` (peak RSS in MiB over the
//! input's MiB; target ≤ 3). `hot` runs on the deep stack only: the span shapes have no
//! samples.

use std::hint::black_box;
use std::process::Command;
use std::time::Duration;

use trace_analyze::{LoadOptions, load_reader, memory_report};
use tracegraph_benches::{Row, emit, emit_time_ratio, measure_child, quick, release_cli};

const DEPTH: u64 = 20_000;
const ALLOCS: u64 = 250_000;
const LIMIT: Duration = Duration::from_mins(1);

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cli = release_cli();
    let deep = dir.path().join("deep-20k.jsonl");
    std::fs::write(&deep, testkit::deep_nesting(DEPTH)).expect("write the deep trace");
    let out = |name: &str| dir.path().join(name).display().to_string();
    let deep_s = deep.display().to_string();
    let commands: Vec<(&str, Vec<String>)> = vec![
        ("spans", vec!["spans".into(), deep_s.clone()]),
        (
            "report",
            vec!["report".into(), deep_s.clone(), "-o".into(), out("r.html")],
        ),
        (
            "export_chrome",
            vec![
                "export".into(),
                deep_s.clone(),
                "--format".into(),
                "chrome".into(),
                "-o".into(),
                out("c.json"),
            ],
        ),
        (
            "export_folded",
            vec![
                "export".into(),
                deep_s.clone(),
                "--format".into(),
                "folded".into(),
                "-o".into(),
                out("f.txt"),
            ],
        ),
    ];
    let repeats = if quick() { 1 } else { 3 };
    for (name, args) in &commands {
        let mut wall = Vec::new();
        let mut rss = 0u64;
        for _ in 0..repeats {
            let mut cmd = Command::new(&cli);
            cmd.args(args);
            let m = measure_child(cmd, Some(LIMIT))
                .unwrap_or_else(|| panic!("tracegraph {name} ran past {} s", LIMIT.as_secs()));
            assert!(m.ok, "tracegraph {name} failed: {}", m.stderr);
            wall.push(m.wall.as_secs_f64());
            rss = rss.max(m.peak_rss.unwrap_or(0));
        }
        wall.sort_by(f64::total_cmp);
        let bench = format!("hostile/deep_nesting_20k/{name}");
        emit(Row::new(&bench, "cli_wall_time", wall[wall.len() / 2], "s"));
        emit(Row::new(
            &bench,
            "cli_peak_rss",
            rss as f64 / 1048576.0,
            "MiB",
        ));
    }

    rss_per_input_rows(dir.path(), &cli);

    // Structured ids against dense ids: load (validation keys its maps by id) and the memory
    // report (live allocations keyed by storage id), in process.
    let structured = testkit::allocations(ALLOCS, true);
    let dense = testkit::allocations(ALLOCS, false);
    let mut c = tracegraph_benches::criterion();
    let mut g = c.benchmark_group("hostile");
    g.sample_size(10);
    for (id, bytes) in [
        ("memory_250k_ids_i_shl_40", &structured),
        ("memory_250k_ids_1_to_n", &dense),
    ] {
        g.bench_function(id, |b| {
            b.iter(|| {
                let t = load_reader(&bytes[..], "bench", LoadOptions::default()).expect("load");
                black_box(memory_report(&t));
            });
        });
    }
    g.finish();
    c.final_summary();
    emit_time_ratio(
        "hostile/memory_250k_allocs",
        "load_and_memory_ns_per_alloc",
        "hostile/memory_250k_ids_i_shl_40",
        "ids 1..n",
        "hostile/memory_250k_ids_1_to_n",
        ALLOCS as f64,
    );
}

/// A version 2 trace with one step in which one span holds one sampled stack of `depth`
/// distinct frames (each defined on its own line), sampled three times.
fn deep_stack(depth: u64) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut s = testkit::HEADER.replacen("\"version\":1", "\"version\":2", 1);
    s.push('\n');
    s.push_str("{\"type\":\"step\",\"index\":0,\"ts\":0}\n");
    s.push_str(concat!(
        r#"{"type":"span_start","id":1,"name":"forward","kind":"function","#,
        r#""step":"forward","thread":1,"ts":0}"#,
        "\n"
    ));
    for f in 1..=depth {
        let _ = writeln!(
            s,
            r#"{{"type":"frame","id":{f},"func":"f{f}","file":"src/f{f}.rs"}}"#
        );
    }
    s.push_str(r#"{"type":"stack","id":1,"frames":["#);
    for f in 1..=depth {
        let _ = write!(s, "{}{f}", if f > 1 { "," } else { "" });
    }
    s.push_str("]}\n");
    s.push_str(concat!(
        r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":3,"phase":"forward","span":1}"#,
        "\n",
        r#"{"type":"sampler","step":0,"hz":1000,"taken":3,"lost":0,"cpu_ns":1000000,"ts":0,"#,
        r#""dur":5}"#,
        "\n",
        r#"{"type":"span_end","id":1,"ts":10}"#,
        "\n",
        r#"{"type":"step","index":1,"ts":11}"#,
        "\n"
    ));
    s.into_bytes()
}

/// Peak RSS over input size of `spans`, `compare`, `report` and `hot` on the large hostile
/// shapes. `compare` reads the trace twice (it is compared with itself): its input is both
/// files, twice the trace's size.
fn rss_per_input_rows(dir: &std::path::Path, cli: &std::path::Path) {
    let n: u64 = if quick() { 200_000 } else { 1_000_000 };
    for (shape, bytes) in [
        ("deep_nesting", testkit::deep_nesting(n)),
        ("unended_roots", testkit::unended_roots(n)),
        ("deep_stack", deep_stack(n)),
    ] {
        let path = dir.join(format!("{shape}.jsonl"));
        std::fs::write(&path, &bytes).expect("write the hostile trace");
        let input_mib = bytes.len() as f64 / 1048576.0;
        drop(bytes);
        let p = path.display().to_string();
        let html = dir.join(format!("{shape}.html")).display().to_string();
        // (command, arguments, how many times the input is read)
        let mut commands: Vec<(&str, Vec<&str>, f64)> = vec![
            ("spans", vec!["spans", &p], 1.0),
            ("compare", vec!["compare", &p, &p], 2.0),
            ("report", vec!["report", &p, "-o", &html], 1.0),
        ];
        if shape == "deep_stack" {
            commands.push(("hot", vec!["hot", &p], 1.0));
        }
        for (name, args, inputs) in commands {
            let input_mib = input_mib * inputs;
            let mut cmd = Command::new(cli);
            cmd.args(&args);
            let m = measure_child(cmd, Some(LIMIT))
                .unwrap_or_else(|| panic!("tracegraph {name} ran past {} s", LIMIT.as_secs()));
            assert!(m.ok, "tracegraph {name} on {shape} failed: {}", m.stderr);
            let Some(rss) = m.peak_rss else {
                eprintln!("bench-row: hostile/rss_per_input skipped (no peak RSS measured)");
                return;
            };
            let bench = format!("hostile/rss_per_input/{shape}_{n}/{name}");
            let rss_mib = rss as f64 / 1048576.0;
            emit(Row::new(
                &bench,
                "peak_rss_per_input_mb",
                rss_mib / input_mib,
                "x",
            ));
            emit(Row::new(&bench, "cli_peak_rss", rss_mib, "MiB"));
            emit(Row::new(&bench, "input_size", input_mib, "MiB"));
            emit(Row::new(&bench, "cli_wall_time", m.wall.as_secs_f64(), "s"));
        }
    }
}
