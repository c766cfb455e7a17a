//! torch.profiler traces: real fixtures against torch's `key_averages`, and hostile inputs.
//!
//! The fixtures are real torch 2.15 runs; hostile inputs (cut, mistyped, deep, huge, not
//! gzip) must give located errors, never a panic.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::PathBuf;

use trace_analyze::AnalyzeError;
use trace_analyze::runs::{
    PROFILER_STEP_ROW, TorchDevice, TorchDims, TorchId, TorchRun, TorchSelfRow, load_torch_path,
    load_torch_reader,
};

/// `crates/testkit/data/torch/<name>`.
fn fixture(name: &str) -> PathBuf {
    testkit::data_dir().join("torch").join(name)
}

/// torch's `key_averages` rows of a fixture: name → (count, self µs, is_user_annotation).
fn key_averages(model: &str) -> (HashMap<String, (u64, f64, bool)>, u64) {
    let text = std::fs::read_to_string(fixture(&format!("{model}.key_averages.json"))).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let rows = v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["name"].as_str().unwrap().to_string(),
                (
                    o["count"].as_u64().unwrap(),
                    o["self_cpu_time_total_us"].as_f64().unwrap(),
                    o["is_user_annotation"].as_bool().unwrap(),
                ),
            )
        })
        .collect();
    (rows, v["active_steps"].as_u64().unwrap())
}

fn load(model: &str) -> TorchRun {
    load_torch_path(&fixture(&format!("{model}.trace.json.gz"))).unwrap()
}

/// The decompressed JSON of a fixture.
fn json_of(model: &str) -> Vec<u8> {
    let gz = std::fs::read(fixture(&format!("{model}.trace.json.gz"))).unwrap();
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// Compares rows with key_averages (count equal, self within 1 %); returns the largest
/// relative self-time deviation and the two totals (µs).
fn compare(model: &str, rows: &[TorchSelfRow], annotations: bool) -> (f64, f64, f64) {
    let (ka, _) = key_averages(model);
    let want: HashMap<&str, (u64, f64)> = ka
        .iter()
        .filter(|&(_, &(_, _, ua))| ua == annotations)
        .map(|(k, &(c, s, _))| (k.as_str(), (c, s)))
        .collect();
    let got: HashMap<&str, &TorchSelfRow> = rows.iter().map(|r| (r.name.as_str(), r)).collect();
    let mut names: Vec<&str> = want.keys().chain(got.keys()).copied().collect();
    names.sort_unstable();
    names.dedup();
    let mut worst = 0.0f64;
    for name in names {
        let (Some(&(count, self_us)), Some(row)) = (want.get(name), got.get(name)) else {
            panic!("{model}: {name} only on one side");
        };
        assert_eq!(row.count, count, "{model}: {name}: count");
        let ours = row.self_ns as f64 / 1000.0;
        let rel = if self_us > 0.0 {
            (ours - self_us).abs() / self_us
        } else {
            ours
        };
        assert!(
            rel <= 0.01,
            "{model}: {name}: self {ours} µs vs key_averages {self_us} µs"
        );
        worst = worst.max(rel);
    }
    let ours: f64 = rows.iter().map(|r| r.self_ns as f64 / 1000.0).sum();
    let theirs: f64 = want.values().map(|&(_, s)| s).sum();
    assert!(
        (ours - theirs).abs() / theirs <= 0.01,
        "{model}: total {ours} vs {theirs}"
    );
    (worst, ours, theirs)
}

#[test]
fn real_fixtures_reproduce_key_averages_per_op_and_range() {
    for (model, steps, merged) in [("llama", 4, 20), ("bert", 3, 0)] {
        let run = load(model);
        let (_, active) = key_averages(model);
        assert_eq!(run.steps.len(), steps, "{model}");
        assert_eq!(active, steps as u64);
        let numbers: Vec<u64> = run.steps.iter().map(|s| s.number).collect();
        assert_eq!(
            numbers,
            (2..2 + steps as u64).collect::<Vec<_>>(),
            "{model}"
        );
        assert_eq!(run.merged, merged, "{model}: redispatches merged");
        assert_eq!(run.adjusted, 0, "{model}");
        // Every op lies in an active step: the step table and the whole trace agree.
        assert!(run.ops.iter().all(|op| op.step.is_some()));
        let ops = run.self_by_name_in_steps(0..run.steps.len());
        assert_eq!(ops, run.self_by_name());
        let (worst_op, op_total, ka_op_total) = compare(model, &ops, false);
        let ranges = run.range_self_by_name();
        let (worst_range, range_total, ka_range_total) = compare(model, &ranges, true);
        let all = op_total + range_total;
        let ka_all = ka_op_total + ka_range_total;
        assert!((all - ka_all).abs() / ka_all <= 0.01);
        println!(
            "{model}: {} ops, {} ranges; worst per-op deviation {:.5} %, per-range {:.5} %; \
             cpu_op self {op_total:.3} µs vs {ka_op_total:.3} µs; all {all:.3} vs {ka_all:.3}",
            run.ops.len(),
            run.ranges.len(),
            worst_op * 100.0,
            worst_range * 100.0,
        );
        // Self times never exceed durations; every kept step has its own row.
        assert!(run.ops.iter().all(|o| o.self_ns <= o.dur_ns));
        assert!(ranges.iter().any(|r| r.name == PROFILER_STEP_ROW));
    }
}

#[test]
fn real_fixtures_have_paths_shapes_threads_memory_and_metadata() {
    let llama = load("llama");
    let paths: Vec<String> = llama
        .range_self_by_path()
        .into_iter()
        .map(|r| r.name)
        .collect();
    for want in [
        "llama.forward",
        "llama.forward/block#0/attn#0",
        "llama.forward/block#0/attn#0/linear#2",
        "llama.forward/block#1/attn#0/attn-rot#1",
        "llama.forward/block#1/mlp#0/linear#0",
        "llama.forward/block#0/rms-norm#0",
    ] {
        assert!(paths.iter().any(|p| p == want), "{want} not in {paths:?}");
    }
    // Each range's parent is the range its path names.
    for r in &llama.ranges {
        let path = llama.range_path(r);
        match r.parent {
            Some(p) => {
                let parent = &llama.ranges[p as usize];
                assert_eq!(
                    path,
                    format!("{}/{}", llama.range_path(parent), llama.str(r.name))
                );
                assert_eq!(r.depth, parent.depth + 1);
            }
            None => assert_eq!(path, llama.str(r.name)),
        }
    }
    // Input dims and types of aten::mm: the decode step's [1,128] x [128,128] projections.
    let mm: Vec<_> = llama
        .ops
        .iter()
        .filter(|o| llama.str(o.name) == "aten::mm")
        .collect();
    assert_eq!(mm.len(), 60);
    assert_eq!(
        llama.input_dims(mm[0]),
        vec![
            TorchDims::Tensor(vec![1, 128]),
            TorchDims::Tensor(vec![128, 128])
        ]
    );
    assert_eq!(llama.input_shapes(mm[0]), "[1,128]x[128,128]");
    assert_eq!(llama.input_types(mm[0]), vec!["float", "float"]);
    assert!(
        mm.iter().all(|o| o.depth > 0),
        "mm runs inside aten::linear/matmul"
    );
    assert!(mm.iter().all(|o| o.range.is_some()));
    let in_range = llama.range_path(&llama.ranges[mm[0].range.unwrap() as usize]);
    assert!(in_range.starts_with("llama.forward/"), "{in_range}");
    // aten::cat takes a tensor list.
    let cat = llama
        .ops
        .iter()
        .find(|o| llama.str(o.name) == "aten::cat")
        .unwrap();
    assert!(matches!(llama.input_dims(cat)[0], TorchDims::List(_)));
    // Run facts.
    assert_eq!(llama.device, TorchDevice::Cpu);
    assert_eq!(llama.dtypes[0].dtype, "f32");
    assert_eq!(llama.op_threads, 1);
    assert_eq!(llama.base_time_ns, Some(1_790_857_026_000_000_000));
    assert_eq!(llama.device_properties, Some(0));
    assert_eq!(llama.schema_version, Some(1));
    let main = llama.threads.iter().find(|t| t.ops > 0).unwrap();
    assert_eq!(main.name.as_deref(), Some("thread 17919 (python)"));
    assert_eq!(main.tid, TorchId::Num(17919));
    assert!(
        llama
            .threads
            .iter()
            .all(|t| t.ops == 0 || matches!(t.tid, TorchId::Num(_)))
    );
    // Memory: every step allocates and frees; nothing outside the steps.
    let steps_with_memory: Vec<u32> = llama.memory.iter().map(|m| m.step).collect();
    assert_eq!(steps_with_memory, vec![0, 1, 2, 3]);
    for m in &llama.memory {
        assert_eq!(m.device_type, 0);
        assert!(m.allocated_bytes > 0 && m.freed_bytes > 0);
        assert!(m.peak_total_allocated.is_some_and(|p| p > 0));
    }
    assert_eq!(llama.counts.memory_outside_steps, 0);
    assert_eq!(llama.counts.events, 3703);
    let bert = load("bert");
    assert!(
        bert.range_self_by_path().iter().any(|r| r.name
            == "bert.forward/model#0/encoder#0/layer#1/attn#0/self-attn#0/linear#0")
    );
}

#[test]
fn gzip_is_told_by_its_magic_bytes_not_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let gz = std::fs::read(fixture("bert.trace.json.gz")).unwrap();
    let plain_named_gz = dir.path().join("bert.json.gz");
    std::fs::write(&plain_named_gz, json_of("bert")).unwrap();
    let gz_named_plain = dir.path().join("bert.json");
    std::fs::write(&gz_named_plain, &gz).unwrap();
    let a = load_torch_path(&plain_named_gz).unwrap();
    let b = load_torch_path(&gz_named_plain).unwrap();
    assert_eq!(a.self_by_name(), b.self_by_name());
    assert_eq!(a.ops.len(), 1068);
    // A reader that hands out one byte at a time.
    struct Trickle<'a>(&'a [u8]);
    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match (self.0.split_first(), buf.first_mut()) {
                (Some((&b, rest)), Some(out)) => {
                    *out = b;
                    self.0 = rest;
                    Ok(1)
                }
                _ => Ok(0),
            }
        }
    }
    let c = load_torch_reader(Trickle(&gz), "trickle").unwrap();
    assert_eq!(c.self_by_name(), a.self_by_name());
    let missing = load_torch_path(&dir.path().join("absent.json")).unwrap_err();
    assert!(matches!(missing, AnalyzeError::Io { .. }), "{missing}");
}

/// Loads `json`, expecting an error; returns it and its message.
fn fails(json: &[u8]) -> (AnalyzeError, String) {
    let e = load_torch_reader(json, "t.json").expect_err("must fail");
    let msg = e.to_string();
    assert!(msg.starts_with("t.json: "), "{msg}");
    assert!(e.is_bad_trace(), "{msg}");
    (e, msg)
}

/// The event index and field of a torch error.
fn at(e: &AnalyzeError) -> (Option<u64>, Option<&'static str>) {
    match e {
        AnalyzeError::Torch { event, field, .. } => (*event, *field),
        other => panic!("not a torch error: {other}"),
    }
}

const OK_EVENT: &str =
    r#"{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":1.0,"dur":1.0}"#;

#[test]
fn mistyped_fields_name_the_event_and_field() {
    let with = |second: &str| format!(r#"{{"traceEvents":[{OK_EVENT},{second}]}}"#);
    for (event, field, want) in [
        (
            r#"{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":"x"}"#,
            "dur",
            "expected a number of microseconds",
        ),
        (
            r#"{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":-1.5,"dur":1}"#,
            "ts",
            "negative",
        ),
        (
            r#"{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1e300,"dur":1}"#,
            "ts",
            "too large",
        ),
        (
            r#"{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":18446744073709551615}"#,
            "dur",
            "too large",
        ),
        (
            r#"{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1e999}"#,
            "dur",
            "out of range",
        ),
        (
            r#"{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":NaN,"dur":1}"#,
            "ts",
            "expected value",
        ),
        (
            r#"{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1}"#,
            "dur",
            "missing field `dur`",
        ),
        (
            r#"{"cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1}"#,
            "ph",
            "missing field `ph`",
        ),
        (
            r#"{"ph":"X","cat":"cpu_op","name":7,"pid":1,"tid":1,"ts":1,"dur":1}"#,
            "name",
            "expected a string",
        ),
        (
            r#"{"ph":"X","cat":"cpu_op","name":"a","pid":1.5,"tid":1,"ts":1,"dur":1}"#,
            "pid",
            "expected an integer or a string",
        ),
        (
            r#"{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1,"args":{"Input Dims":[[1,"a"]]}}"#,
            "args.Input Dims",
            "invalid type",
        ),
        (
            r#"{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1,"args":{"Input Dims":[[1,[2]]]}}"#,
            "args.Input Dims",
            "mix integers and arrays",
        ),
        (
            r#"{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1,"args":{"Input type":[1]}}"#,
            "args.Input type",
            "expected a string",
        ),
        (
            r#"{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1,"args":[]}"#,
            "args",
            "expected an object",
        ),
        (
            r#"{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":1,"args":{"Bytes":"many"}}"#,
            "args.Bytes",
            "invalid type",
        ),
        (
            r#"{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":1,"args":{}}"#,
            "args.Bytes",
            "missing field",
        ),
        (r#"{"ph":5}"#, "ph", "expected a phase string"),
    ] {
        let (e, msg) = fails(with(event).as_bytes());
        assert_eq!(at(&e), (Some(1), Some(field)), "{msg}");
        assert!(
            msg.starts_with(&format!("t.json: event 1: field \"{field}\": ")),
            "{msg}"
        );
        assert!(msg.contains(want), "{msg} lacks {want}");
        assert!(msg.contains("line 1 column"), "{msg}");
    }
}

#[test]
fn documents_that_are_not_chrome_traces_say_so() {
    for (json, event, field, want) in [
        ("42", None, None, "expected a Chrome trace"),
        (r#""trace""#, None, None, "expected a Chrome trace"),
        ("[]", None, None, "expected a Chrome trace"),
        ("null", None, None, "expected a Chrome trace"),
        ("", None, None, "EOF"),
        (
            r#"{"schemaVersion":1}"#,
            None,
            Some("traceEvents"),
            "no \"traceEvents\"",
        ),
        (
            r#"{"traceEvents":{}}"#,
            None,
            Some("traceEvents"),
            "an array of trace events",
        ),
        (
            r#"{"traceEvents":[1]}"#,
            Some(0),
            None,
            "expected a trace event object",
        ),
        (r#"{"traceEvents":[]} x"#, None, None, "trailing characters"),
        (
            r#"{"traceEvents":[],"baseTimeNanoseconds":-1}"#,
            None,
            Some("baseTimeNanoseconds"),
            "invalid value",
        ),
    ] {
        let (e, msg) = fails(json.as_bytes());
        assert_eq!(at(&e), (event, field), "{json}: {msg}");
        assert!(msg.contains(want), "{json}: {msg}");
    }
    // An empty trace is a valid one.
    let run = load_torch_reader(&br#"{"traceEvents":[]}"#[..], "empty").unwrap();
    assert!(run.ops.is_empty() && run.steps.is_empty());
}

#[test]
fn a_cut_file_names_the_event_it_was_cut_in() {
    let json = json_of("llama");
    for (cut, in_events) in [
        (json.len() / 2, true),
        (json.len() - 3, false),
        (200, false),
    ] {
        let (e, msg) = fails(&json[..cut]);
        let (event, _) = at(&e);
        assert!(msg.contains("EOF while parsing"), "{msg}");
        assert_eq!(event.is_some_and(|e| e > 1000), in_events, "{msg}");
    }
    // A gzip stream cut short, and gzip garbage.
    let gz = std::fs::read(fixture("llama.trace.json.gz")).unwrap();
    for bytes in [
        gz[..gz.len() / 2].to_vec(),
        vec![0x1f, 0x8b, 0, 1, 2, 3, 4, 5, 6, 7],
        vec![0x1f, 0x8b],
        [&gz[..20], &[0xff; 64][..]].concat(),
    ] {
        let e = load_torch_reader(bytes.as_slice(), "cut.json.gz").unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("cut.json.gz: "), "{msg}");
        assert!(e.is_bad_trace(), "{msg}");
    }
    let e = load_torch_reader(&[0x1f, 0x8b, 0, 1, 2, 3][..], "garbage.gz").unwrap_err();
    assert!(matches!(e, AnalyzeError::Gzip { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("garbage.gz: not a valid gzip stream")
    );
}

#[test]
fn deeply_nested_json_values_take_no_stack() {
    let depth = 100_000;
    let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    // In a field the reader skips: skipped without recursion.
    let json = format!(
        r#"{{"traceEvents":[{{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1,"args":{{"Concrete Inputs":{nested}}}}}],"other":{nested}}}"#
    );
    let run = load_torch_reader(json.as_bytes(), "deep-json").unwrap();
    assert_eq!(run.ops.len(), 1);
    // In fields the reader reads: an error at once.
    for (field, event) in [
        (
            "args.Input Dims",
            format!(r#"{{"args":{{"Input Dims":{nested}}}}}"#),
        ),
        (
            "args.Input type",
            format!(r#"{{"args":{{"Input type":{nested}}}}}"#),
        ),
        ("name", format!(r#"{{"name":{nested}}}"#)),
        ("ts", format!(r#"{{"ts":{nested}}}"#)),
        ("pid", format!(r#"{{"pid":{nested}}}"#)),
    ] {
        let json = format!(r#"{{"traceEvents":[{event}]}}"#);
        let (e, msg) = fails(json.as_bytes());
        assert_eq!(at(&e), (Some(0), Some(field)), "{msg}");
        assert!(msg.contains("invalid type"), "{msg}");
    }
}

/// `n` complete events nested each in the one before (given in reverse order): event `i`
/// starts at `i` µs and lasts `2 (n - i)` µs.
fn chain(n: usize, cat: &str, name: impl Fn(usize) -> String) -> Vec<u8> {
    let mut s = String::from(r#"{"traceEvents":["#);
    for i in (0..n).rev() {
        if i + 1 < n {
            s.push(',');
        }
        s.push_str(&format!(
            r#"{{"ph":"X","cat":"{cat}","name":"{}","pid":1,"tid":1,"ts":{i}.000,"dur":{}.000}}"#,
            name(i),
            2 * (n - i)
        ));
    }
    s.push_str("]}");
    s.into_bytes()
}

#[test]
fn a_hundred_thousand_nested_events_nest_merge_and_walk_without_recursion() {
    let n = 100_000;
    // Ops of alternating names: a chain of n ops, each 2 µs of self time.
    let run = load_torch_reader(
        chain(n, "cpu_op", |i| format!("aten::op{}", i % 2)).as_slice(),
        "deep",
    )
    .unwrap();
    assert_eq!(run.ops.len(), n);
    assert_eq!(run.merged, 0);
    assert_eq!(run.ops.iter().map(|o| o.depth).max(), Some(n as u32 - 1));
    assert!(run.ops.iter().all(|o| o.self_ns == 2_000));
    // One name: every event is its parent's only child of the same name, so all merge into
    // the outermost (torch's `_remove_dup_nodes`), which keeps its whole time as self.
    let run =
        load_torch_reader(chain(n, "cpu_op", |_| "aten::x".into()).as_slice(), "same").unwrap();
    assert_eq!((run.ops.len(), run.merged), (1, n as u64 - 1));
    assert_eq!(run.ops[0].self_ns, run.ops[0].dur_ns);
    // Ranges: paths n deep, interned once each.
    let run = load_torch_reader(
        chain(n, "user_annotation", |i| format!("r{}", i % 3)).as_slice(),
        "ranges",
    )
    .unwrap();
    assert_eq!(run.ranges.len(), n);
    let deepest = run.ranges.iter().max_by_key(|r| r.depth).unwrap();
    assert_eq!(deepest.depth as usize, n - 1);
    assert_eq!(run.range_path(deepest).split('/').count(), n);
    // Display paths are bounded: linear text for n paths of depth up to n.
    let rows = run.range_self_by_path();
    assert_eq!(rows.len(), n);
    assert!(rows.iter().map(|r| r.name.len()).sum::<usize>() < n * 400);
    let shown = run.display_path(deepest.path);
    assert!(shown.starts_with("r0/r1/r2/r0/"), "{shown}");
    assert!(shown.contains(&format!("/…{} more…/", n - 32)), "{shown}");
    assert_eq!(shown.split('/').count(), 33);
    let shallow = &run.ranges[3];
    assert_eq!(run.display_path(shallow.path), "r0/r1/r2/r0");
}

/// A reader that writes `n` events on the fly: steps of 1000 ops each on two threads.
struct Generated {
    n: usize,
    next: usize,
    buf: Vec<u8>,
    pos: usize,
    done: bool,
}

impl Generated {
    fn new(n: usize) -> Self {
        Generated {
            n,
            next: 0,
            buf: br#"{"schemaVersion":1,"traceEvents":["#.to_vec(),
            pos: 0,
            done: false,
        }
    }

    fn refill(&mut self) {
        self.buf.clear();
        self.pos = 0;
        while self.buf.len() < 1 << 16 && !self.done {
            let i = self.next;
            if i == self.n {
                self.buf.extend_from_slice(b"]}");
                self.done = true;
                break;
            }
            if i > 0 {
                self.buf.push(b',');
            }
            // Every 1000th event is a step holding the next 999 ops (1 µs apart).
            let (step, k) = (i / 1000, i % 1000);
            let base = step * 1000;
            if k == 0 {
                write!(
                    self.buf,
                    r#"{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{step}","pid":1,"tid":1,"ts":{base}.000,"dur":1000.000}}"#
                )
                .unwrap();
            } else {
                write!(
                    self.buf,
                    r#"{{"ph":"X","cat":"cpu_op","name":"aten::op{}","pid":1,"tid":{},"ts":{}.250,"dur":0.500,"args":{{"Input Dims":[[{k},8]],"Input type":["c10::BFloat16"]}}}}"#,
                    k % 7,
                    1 + k % 2,
                    base + k
                )
                .unwrap();
            }
            self.next += 1;
        }
    }
}

impl Read for Generated {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.buf.len() {
            if self.done {
                return Ok(0);
            }
            self.refill();
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[test]
fn a_million_generated_events_stream_through() {
    let n = 1_000_000;
    let run = load_torch_reader(Generated::new(n), "million").unwrap();
    assert_eq!(run.counts.events, n as u64);
    assert_eq!(run.steps.len(), n / 1000);
    assert_eq!(run.ops.len(), n - n / 1000);
    assert_eq!(run.op_threads, 2);
    assert!(run.ops.iter().all(|o| o.step.is_some() && o.self_ns == 500));
    let rows = run.self_by_name();
    assert_eq!(rows.len(), 7);
    assert_eq!(
        rows.iter().map(|r| r.count).sum::<u64>(),
        run.ops.len() as u64
    );
    assert_eq!(run.dtypes[0].dtype, "bf16");
    assert_eq!(run.dtypes[0].inputs, run.ops.len() as u64);
    // Ops on thread 2 are not inside the step range of thread 1 but still in its step.
    let in_step_0 = run.self_by_name_in_steps(0..1);
    assert_eq!(in_step_0.iter().map(|r| r.count).sum::<u64>(), 999);
}

#[test]
fn hostile_overlaps_are_clipped_and_counted() {
    let json = br#"{"traceEvents":[
      {"ph":"X","cat":"cpu_op","name":"parent","pid":1,"tid":1,"ts":0,"dur":10},
      {"ph":"X","cat":"cpu_op","name":"overlaps","pid":1,"tid":1,"ts":5,"dur":10},
      {"ph":"X","cat":"cpu_op","name":"inside","pid":1,"tid":1,"ts":6,"dur":1},
      {"ph":"X","cat":"cpu_op","name":"after","pid":1,"tid":1,"ts":15,"dur":0},
      {"ph":"X","cat":"cpu_op","name":"zero","pid":1,"tid":1,"ts":15,"dur":0},
      {"ph":"X","cat":"cpu_op","name":"other-thread","pid":1,"tid":2,"ts":5,"dur":100}
    ]}"#;
    let run = load_torch_reader(&json[..], "overlap").unwrap();
    assert_eq!(run.adjusted, 1);
    let by: HashMap<&str, (u64, u64, u32)> = run
        .ops
        .iter()
        .map(|o| (run.str(o.name), (o.dur_ns, o.self_ns, o.depth)))
        .collect();
    assert_eq!(by["parent"], (10_000, 5_000, 0));
    assert_eq!(by["overlaps"], (5_000, 4_000, 1));
    assert_eq!(by["inside"], (1_000, 1_000, 2));
    assert_eq!(by["after"], (0, 0, 0));
    assert_eq!(by["zero"], (0, 0, 0), "a zero-length event holds nothing");
    assert_eq!(by["other-thread"], (100_000, 100_000, 0));
    assert_eq!(run.op_threads, 2);
}

#[test]
fn ranges_python_functions_steps_memory_and_threads_from_hand_events() {
    let json = br#"{"deviceProperties":[{"id":0}],"traceEvents":[
      {"ph":"M","name":"thread_name","pid":"p","tid":"t","args":{"name":"worker"}},
      {"ph":"M","name":"process_name","pid":"p","tid":0,"args":{"name":7}},
      {"ph":"X","cat":"user_annotation","name":"ProfilerStep#7","pid":"p","tid":"t","ts":0,"dur":100},
      {"ph":"X","cat":"user_annotation","name":"model","pid":"p","tid":"t","ts":1,"dur":90},
      {"ph":"X","cat":"python_function","name":"nn.Module: Linear_0","pid":"p","tid":"t","ts":2,"dur":50},
      {"ph":"X","cat":"cpu_op","name":"aten::linear","pid":"p","tid":"t","ts":3,"dur":40,
       "args":{"External id":9,"Input Dims":[[2,3],[4,3],[]],"Input type":["c10::Half","c10::Half",""]}},
      {"ph":"X","cat":"user_annotation","name":"ProfilerStep#x","pid":"p","tid":"t","ts":4,"dur":1},
      {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":"p","tid":"t","ts":10,"dur":5},
      {"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":12,"dur":30},
      {"ph":"X","cat":"Trace","name":"PyTorch Profiler (0)","pid":"Spans","tid":"PyTorch Profiler","ts":0,"dur":1000},
      {"ph":"i","name":"[memory]","pid":"p","tid":"t","ts":5,"args":{"Bytes":100,"Total Allocated":100,"Device Type":0}},
      {"ph":"i","name":"[memory]","pid":"p","tid":"t","ts":6,"args":{"Bytes":-40,"Total Allocated":60}},
      {"ph":"i","name":"[memory]","pid":"p","tid":"t","ts":7,"args":{"Bytes":8,"Device Type":1}},
      {"ph":"i","name":"[memory]","pid":"p","tid":"t","ts":500,"args":{"Bytes":8}},
      {"ph":"B","name":"begin","pid":"p","tid":"t","ts":1}
    ]}"#;
    let run = load_torch_reader(&json[..], "hand").unwrap();
    assert_eq!(run.device, TorchDevice::Cuda);
    assert_eq!(run.device_properties, Some(1));
    assert_eq!(run.steps.len(), 1);
    assert_eq!((run.steps[0].number, run.steps[0].self_ns), (7, 10_000));
    // `ProfilerStep#x` is not a step: a range.
    let names: Vec<&str> = run.ranges.iter().map(|r| run.str(r.name)).collect();
    assert_eq!(names, vec!["model", "ProfilerStep#x"]);
    assert_eq!(run.range_path(&run.ranges[1]), "model/ProfilerStep#x");
    assert_eq!(
        run.ranges[0].self_ns, 40_000,
        "90 less the python function's 50"
    );
    assert_eq!(
        run.ops.len(),
        1,
        "python functions and CUDA calls are not ops"
    );
    let op = run.ops[0];
    assert_eq!(
        op.self_ns, 34_000,
        "40 less the range's 1 and the runtime call's 5"
    );
    assert_eq!((op.external_id, op.step, op.depth), (Some(9), Some(0), 0));
    assert_eq!(run.input_shapes(&op), "[2,3]x[4,3]x[]");
    assert_eq!(run.input_types(&op), vec!["c10::Half", "c10::Half", ""]);
    assert_eq!(run.dtypes.len(), 1);
    assert_eq!((run.dtypes[0].dtype, run.dtypes[0].inputs), ("f16", 2));
    assert_eq!(run.counts.python_functions, 1);
    assert_eq!(run.counts.device_events, 1);
    assert_eq!(run.counts.memory_events, 4);
    assert_eq!(run.counts.memory_outside_steps, 1);
    assert_eq!(run.memory.len(), 2);
    let cpu = run.memory[0];
    assert_eq!((cpu.device_type, cpu.events), (0, 2));
    assert_eq!((cpu.allocated_bytes, cpu.freed_bytes), (100, 40));
    assert_eq!(cpu.peak_total_allocated, Some(100));
    let gpu = run.memory[1];
    assert_eq!((gpu.device_type, gpu.allocated_bytes), (1, 8));
    assert_eq!(gpu.peak_total_allocated, None);
    let worker = &run.threads[0];
    assert_eq!(
        (&worker.pid, &worker.tid, worker.name.as_deref(), worker.ops),
        (
            &TorchId::Text("p".into()),
            &TorchId::Text("t".into()),
            Some("worker"),
            1
        )
    );
    assert_eq!(run.op_threads, 1);
}

#[test]
fn error_messages_read_like_the_documented_example() {
    let json = format!(
        r#"{{"traceEvents":[{}{OK_EVENT},{{"ph":"X","dur":"x"}}]}}"#,
        format!("{OK_EVENT},").repeat(12)
    );
    let e = load_torch_reader(json.as_bytes(), "llama.trace.json").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with(
            "llama.trace.json: event 13: field \"dur\": invalid type: string \"x\", \
             expected a number of microseconds at line 1 column"
        ),
        "{msg}"
    );
}
