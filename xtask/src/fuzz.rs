//! `cargo xtask fuzz`: every analysis and export on mutated traces, within time and memory.
//!
//! It mutates checked-in and generated traces and runs each input in-process, within a time
//! and a memory budget.
//!
//! Seeds: the checked-in traces under `crates/*/tests/data` and `crates/testkit/data`, a recorded
//! session, a synthetic training trace and testkit's hostile traces. Mutations: truncation, byte
//! flips, line edits (delete, duplicate, swap, copy), hostile numbers and strings, a UTF-8 BOM and
//! CRLF line ends, deep nesting, unended spans, structured ids (`i << 40`), deep sampled stacks
//! and hostile sample counts and gradient norms. Every input goes
//! through the reader and validator, the loader, the summary, op table, span tree, memory report,
//! graph report, gradients, every `hot` view, a self-comparison, the HTML report and the four
//! exports (Chrome, folded, folded samples, Parquet); JSON outputs are parsed back, Parquet
//! tables read back, the Chrome export is checked by testkit's checker and folded lines are
//! parsed. A panic, an input
//! over the time or memory budget, or an output that does not parse fails the run; the input is
//! saved under `target/fuzz/` to reproduce it. The input being run is always at
//! `target/fuzz/current.jsonl`, so an abort leaves it behind too.
#![allow(unsafe_code)] // the counting global allocator needs `unsafe impl GlobalAlloc`

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rand_xoshiro::SplitMix64;
use rand_xoshiro::rand_core::{Rng as _, SeedableRng};

/// Counts live heap bytes and their peak, and refuses an allocation that would take the
/// live bytes past the hard limit while a budget is armed (the run then aborts with the
/// input saved as `current.jsonl`).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
static OVER: AtomicBool = AtomicBool::new(false);

// SAFETY: every method forwards to the system allocator with the same layout and pointer;
// the counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        if live > LIMIT.load(Ordering::Relaxed) {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            OVER.store(true, Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: same layout as given, forwarded.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            let grow = new_size - layout.size();
            let live = LIVE.fetch_add(grow, Ordering::Relaxed) + grow;
            if live > LIMIT.load(Ordering::Relaxed) {
                LIVE.fetch_sub(grow, Ordering::Relaxed);
                OVER.store(true, Ordering::Relaxed);
                return std::ptr::null_mut();
            }
            PEAK.fetch_max(live, Ordering::Relaxed);
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Where the last panic happened (file:line).
static PANIC_AT: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// Options of `cargo xtask fuzz`.
struct Options {
    seconds: u64,
    seed: u64,
    time_budget: Duration,
    memory_budget: usize,
}

const USAGE: &str = "usage: cargo xtask fuzz [--seconds N] [--seed S] [--time-budget-ms MS] [--memory-budget-mb MB]";

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options {
        seconds: 60,
        seed: 0x5eed,
        time_budget: Duration::from_secs(10),
        memory_budget: 1 << 30,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<u64> {
            it.next()
                .with_context(|| format!("{name} needs a value\n{USAGE}"))?
                .parse()
                .with_context(|| format!("{name} needs a number\n{USAGE}"))
        };
        match a.as_str() {
            "--seconds" => o.seconds = value("--seconds")?,
            "--seed" => o.seed = value("--seed")?,
            "--time-budget-ms" => o.time_budget = Duration::from_millis(value(a)?),
            "--memory-budget-mb" => {
                o.memory_budget = usize::try_from(value(a)?)?.saturating_mul(1 << 20)
            }
            other => bail!("unknown fuzz option `{other}`\n{USAGE}"),
        }
    }
    Ok(o)
}

/// The draws of a run, from the workspace's seeded generator (SplitMix64): one stream per
/// `--seed`, the same on every machine.
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(SplitMix64::seed_from_u64(seed))
    }
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform-enough in `0..n` for choosing mutations; 0 when `n` is 0.
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// The seed traces: `(name, bytes)`.
fn seeds(root: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(root.join("crates")).context("listing crates/")? {
        let dir = dir?.path();
        // Each crate's test data, and testkit's shared data (the small trace).
        for data in [dir.join("tests/data"), dir.join("data")] {
            let Ok(entries) = std::fs::read_dir(&data) else {
                continue;
            };
            for e in entries {
                let p = e?.path();
                if p.extension().is_some_and(|x| x == "jsonl") {
                    let bytes = std::fs::read(&p).with_context(|| format!("{}", p.display()))?;
                    out.push((p.display().to_string(), bytes));
                }
            }
        }
    }
    out.push(("session_trace(3)".into(), testkit::session_trace(3)));
    let mut synth = Vec::new();
    testkit::write_synthetic(
        &mut synth,
        &testkit::SynthConfig {
            ops: 400,
            ops_per_step: 50,
            changed_step: Some(3),
            ..testkit::SynthConfig::default()
        },
    )?;
    out.push(("synthetic(400 ops)".into(), synth));
    out.push(("deep_nesting(2000)".into(), testkit::deep_nesting(2000)));
    out.push(("unended_roots(2000)".into(), testkit::unended_roots(2000)));
    out.push((
        "allocations(5000, i << 40)".into(),
        testkit::allocations(5000, true),
    ));
    out.push(("overflowing_sums".into(), testkit::overflowing_sums()));
    out.push(("sampled_hostile".into(), sampled_hostile()));
    out.push(("heap_hostile".into(), heap_hostile()));
    Ok(out)
}

/// The start of the hostile version 2 seeds (sampled stacks and heap lines are version 2): the
/// header and span 1, `forward`, opened at 0 on thread 1.
fn v2_forward_prefix() -> String {
    let mut t = testkit::HEADER.replacen("\"version\":1", "\"version\":2", 1);
    t.push('\n');
    t.push_str(
        r#"{"type":"span_start","id":1,"name":"forward","kind":"function","step":"forward","thread":1,"ts":0}"#,
    );
    t.push('\n');
    t
}

/// A version 2 trace with tracked-heap lines at their worst: 5,000 live allocations whose
/// bytes sum past `u64::MAX`, frees without an allocation, double frees, a reused id, a free
/// stamped before its allocation, spans that do not exist, and small-allocation sums and an
/// account at `u64::MAX`.
fn heap_hostile() -> Vec<u8> {
    let mut t = v2_forward_prefix();
    for i in 1..=5000u64 {
        let bytes = if i % 2 == 0 { u64::MAX / 3 } else { 4096 * i };
        t.push_str(&format!(
            r#"{{"type":"heap_alloc","id":{i},"bytes":{bytes},"thread":{},"ts":{},"phase":"forward","span":{}}}"#,
            i % 7,
            10 + i,
            if i % 3 == 0 { 1 } else { 1u64 << 50 }
        ));
        t.push('\n');
    }
    for (id, ts) in [(3u64, 20_000u64), (3, 20_001), (9_999, 20_002), (5, 1)] {
        t.push_str(&format!(r#"{{"type":"heap_free","id":{id},"ts":{ts}}}"#));
        t.push('\n');
    }
    t.push_str(r#"{"type":"heap_alloc","id":7,"bytes":1,"thread":1,"ts":20003}"#);
    t.push('\n');
    t.push_str(&format!(
        r#"{{"type":"heap_small","step":0,"phase":"forward","span":1,"count":{m},"bytes":{m}}}"#,
        m = u64::MAX
    ));
    t.push('\n');
    t.push_str(&format!(
        r#"{{"type":"heap_account","step":0,"threshold":4096,"lost":{m},"unmatched_frees":{m},"ts":0,"dur":{m}}}"#,
        m = u64::MAX
    ));
    t.push('\n');
    t.push_str(r#"{"type":"span_end","id":1,"ts":30000}"#);
    t.push('\n');
    t.into_bytes()
}

/// A version 2 trace with the shapes sampled stacks and gradient facts can take at their
/// worst: a 20,000-frame stack, sample counts whose sums pass `u64::MAX`, a sampler account
/// that loses `u64::MAX` samples, a duplicated account, and gradient norms that are
/// negative, huge or absent.
fn sampled_hostile() -> Vec<u8> {
    let mut t = v2_forward_prefix();
    for f in 1..=4u64 {
        t.push_str(&format!(
            "{{\"type\":\"frame\",\"id\":{f},\"func\":\"f{f}\",\"file\":\"src/f{f}.rs\"}}\n"
        ));
    }
    let deep: Vec<String> = (0..20_000).map(|k| (1 + k % 4).to_string()).collect();
    t.push_str(&format!(
        "{{\"type\":\"stack\",\"id\":1,\"frames\":[{}]}}\n",
        deep.join(",")
    ));
    t.push_str("{\"type\":\"stack\",\"id\":2,\"frames\":[1,2,3]}\n");
    for (stack, n) in [(1u64, 1u64 << 63), (2, 1 << 63), (2, u64::MAX), (1, 3)] {
        t.push_str(&format!(
            "{{\"type\":\"samples\",\"step\":0,\"thread\":1,\"stack\":{stack},\"n\":{n},\"phase\":\"forward\",\"span\":1}}\n"
        ));
    }
    for _ in 0..2 {
        t.push_str(&format!(
            "{{\"type\":\"sampler\",\"step\":0,\"hz\":1000,\"taken\":3,\"lost\":{},\"cpu_ns\":1000000,\"ts\":0,\"dur\":5}}\n",
            u64::MAX
        ));
    }
    for (param, norm) in [("w", "-3.0"), ("b", "1e308"), ("c", "null"), ("d", "0")] {
        t.push_str(&format!(
            "{{\"type\":\"gradient\",\"param\":\"{param}\",\"state\":\"present\",\"norm\":{norm},\"ts\":3}}\n"
        ));
    }
    t.push_str(r#"{"type":"span_end","id":1,"ts":10}"#);
    t.push('\n');
    t.push_str(r#"{"type":"step","index":1,"ts":11}"#);
    t.push('\n');
    t.into_bytes()
}

const HOSTILE_NUMBERS: &[&str] = &[
    "0",
    "-1",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "1e308",
    "-0",
    "1.5",
    "99999999999999999999999999",
    "4294967296",
];

const HOSTILE_STRINGS: &[&str] = &[
    "",
    "a;b\\nc",
    "\\u0000",
    "\\ud800",
    "</script><script>alert(1)</script>",
    "é/ü/😀",
    "a/b/c",
    "\\\"quoted\\\"",
];

fn lines(b: &[u8]) -> Vec<&[u8]> {
    b.split_inclusive(|&c| c == b'\n').collect()
}

/// Byte ranges `(start, end)` in an input.
type Ranges = Vec<(usize, usize)>;

/// Byte ranges of the JSON numbers and of the string contents in `b`.
fn tokens(b: &[u8]) -> (Ranges, Ranges) {
    let (mut nums, mut strs) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let s = i + 1;
                let mut j = s;
                while j < b.len() && b[j] != b'"' && b[j] != b'\n' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let j = j.min(b.len());
                strs.push((s, j));
                i = j + 1;
            }
            b'-' | b'0'..=b'9' => {
                let s = i;
                while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                nums.push((s, i));
            }
            _ => i += 1,
        }
    }
    (nums, strs)
}

fn splice(b: &[u8], (s, e): (usize, usize), with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len() + with.len());
    out.extend_from_slice(&b[..s]);
    out.extend_from_slice(with);
    out.extend_from_slice(&b[e..]);
    out
}

/// The mutations, by name.
const MUTATIONS: &[&str] = &[
    "truncate",
    "byte_flip",
    "delete_line",
    "duplicate_line",
    "swap_lines",
    "copy_line",
    "hostile_number",
    "hostile_string",
    "bom_crlf",
    "deep_nesting",
    "unend_spans",
    "structured_ids",
    "deep_stack",
    "hostile_samples",
    "none",
];

fn mutate(rng: &mut Rng, input: &[u8], which: &str) -> Vec<u8> {
    let ls = lines(input);
    match which {
        "truncate" => input[..rng.below(input.len() + 1)].to_vec(),
        "byte_flip" => {
            let mut b = input.to_vec();
            for _ in 0..=rng.below(8) {
                if !b.is_empty() {
                    let i = rng.below(b.len());
                    b[i] = match rng.below(4) {
                        0 => b'"',
                        1 => b'{',
                        2 => b[i] ^ (1 << rng.below(8)),
                        _ => rng.next() as u8,
                    };
                }
            }
            b
        }
        "delete_line" | "duplicate_line" | "swap_lines" | "copy_line" if ls.len() > 1 => {
            let mut v: Vec<Vec<u8>> = ls.iter().map(|l| l.to_vec()).collect();
            let i = 1 + rng.below(v.len() - 1);
            let j = 1 + rng.below(v.len() - 1);
            match which {
                "delete_line" => {
                    v.remove(i);
                }
                "duplicate_line" => {
                    let l = v[i].clone();
                    v.insert(i, l);
                }
                "swap_lines" => v.swap(i, j),
                _ => {
                    let l = v[j].clone();
                    v.insert(i, l);
                }
            }
            v.concat()
        }
        "hostile_number" | "structured_ids" => {
            let (nums, _) = tokens(input);
            let mut b = input.to_vec();
            // Right to left so earlier ranges stay valid.
            let mut picks: Vec<(usize, usize)> = (0..=rng.below(4))
                .filter(|_| !nums.is_empty())
                .map(|_| nums[rng.below(nums.len())])
                .collect();
            picks.sort_unstable();
            picks.dedup();
            for r in picks.into_iter().rev() {
                let with = if which == "structured_ids" {
                    let v: u64 = std::str::from_utf8(&b[r.0..r.1])
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(1);
                    (v.wrapping_shl(40)).to_string()
                } else {
                    HOSTILE_NUMBERS[rng.below(HOSTILE_NUMBERS.len())].to_string()
                };
                b = splice(&b, r, with.as_bytes());
            }
            b
        }
        "hostile_string" => {
            let (_, strs) = tokens(input);
            if strs.is_empty() {
                return input.to_vec();
            }
            let r = strs[rng.below(strs.len())];
            let with = if rng.below(8) == 0 {
                "x".repeat(100_000)
            } else {
                HOSTILE_STRINGS[rng.below(HOSTILE_STRINGS.len())].to_string()
            };
            splice(input, r, with.as_bytes())
        }
        "bom_crlf" => {
            let mut b = b"\xEF\xBB\xBF".to_vec();
            for l in ls {
                match l.strip_suffix(b"\n") {
                    Some(x) if rng.below(2) == 0 => {
                        b.extend_from_slice(x);
                        b.extend_from_slice(b"\r\n");
                    }
                    _ => b.extend_from_slice(l),
                }
            }
            b
        }
        "deep_nesting" if ls.len() > 1 => {
            // A chain of nested spans (never ended) inserted after a random line.
            let at = 1 + rng.below(ls.len() - 1);
            let depth = 1 + rng.below(3000) as u64;
            let base = 1u64 << 50;
            let mut chain = String::new();
            for k in 0..depth {
                let id = base + k;
                let parent = if k == 0 {
                    String::new()
                } else {
                    format!("\"parent\":{},", id - 1)
                };
                chain.push_str(&format!(
                    "{{\"type\":\"span_start\",\"id\":{id},{parent}\"name\":\"d{}\",\"kind\":\"module\",\"thread\":{},\"ts\":{k}}}\n",
                    k % 5,
                    rng.below(3)
                ));
            }
            let mut b = ls[..at].concat();
            b.extend_from_slice(chain.as_bytes());
            b.extend_from_slice(&ls[at..].concat());
            b
        }
        "deep_stack" if ls.len() > 1 => {
            // A stack of up to 30,000 frames (some never defined) and samples naming it.
            let at = 1 + rng.below(ls.len() - 1);
            let depth = 1 + rng.below(30_000);
            let id = 1u64 << 45 | rng.below(1 << 20) as u64;
            let frames: Vec<String> = (0..depth).map(|_| (1 + rng.below(8)).to_string()).collect();
            let lines = format!(
                "{{\"type\":\"stack\",\"id\":{id},\"frames\":[{}]}}\n{{\"type\":\"samples\",\"step\":{},\"thread\":{},\"stack\":{id},\"n\":{}}}\n",
                frames.join(","),
                rng.below(4),
                rng.below(3),
                HOSTILE_NUMBERS[rng.below(HOSTILE_NUMBERS.len())]
            );
            let mut b = ls[..at].concat();
            b.extend_from_slice(lines.as_bytes());
            b.extend_from_slice(&ls[at..].concat());
            b
        }
        "hostile_samples" => {
            // Every count of the sampled lines (n, taken, lost, hz, cpu_ns) and every norm
            // becomes a hostile number.
            let keys: &[&[u8]] = &[
                b"\"n\":",
                b"\"taken\":",
                b"\"lost\":",
                b"\"hz\":",
                b"\"cpu_ns\":",
                b"\"norm\":",
            ];
            let mut b = Vec::with_capacity(input.len());
            let mut i = 0;
            while i < input.len() {
                let key = keys.iter().find(|k| input[i..].starts_with(k));
                match key {
                    Some(k) if rng.below(2) == 0 => {
                        b.extend_from_slice(k);
                        i += k.len();
                        while i < input.len()
                            && (input[i].is_ascii_digit() || b"-+.eE".contains(&input[i]))
                        {
                            i += 1;
                        }
                        b.extend_from_slice(
                            HOSTILE_NUMBERS[rng.below(HOSTILE_NUMBERS.len())].as_bytes(),
                        );
                    }
                    _ => {
                        b.push(input[i]);
                        i += 1;
                    }
                }
            }
            b
        }
        "unend_spans" => ls
            .iter()
            .filter(|l| !(l.starts_with(b"{\"type\":\"span_end\"") && rng.below(2) == 0))
            .copied()
            .collect::<Vec<_>>()
            .concat(),
        _ => input.to_vec(),
    }
}

/// What one input did.
#[derive(Default)]
struct Outcome {
    /// The loader rejected it with an error (a clear error is a pass).
    rejected: bool,
    /// It loaded (possibly incomplete).
    loaded: bool,
}

/// Every line of a folded export is `stack weight` with a non-empty stack.
fn check_folded(out: Vec<u8>, what: &str) -> Result<(), String> {
    let text = String::from_utf8(out).map_err(|e| format!("{what} not UTF-8: {e}"))?;
    for l in text.lines() {
        let ok = l
            .rsplit_once(' ')
            .is_some_and(|(s, w)| !s.is_empty() && w.parse::<u64>().is_ok());
        if !ok {
            return Err(format!("a line of the {what} does not parse: {l:?}"));
        }
    }
    Ok(())
}

/// The Parquet export of a trace the reader accepted: when it succeeds, every table must read
/// back as a Parquet file holding the rows the export says it wrote (small row groups, so
/// several are cut). An export that fails with an error is a rejection, not a finding.
fn check_parquet(r: &mut trace_record::TraceReader<&[u8]>) -> Result<(), String> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let opts = trace_parquet::ExportOptions {
        row_group_rows: 64,
        ..Default::default()
    };
    let outputs: [Vec<u8>; trace_parquet::Table::COUNT] = Default::default();
    let Ok((written, summary)) = trace_parquet::write_tables(r, "fuzz", 0, &opts, outputs) else {
        return Ok(());
    };
    for (table, bytes) in trace_parquet::Table::ALL.into_iter().zip(written) {
        let file = SerializedFileReader::new(bytes::Bytes::from(bytes))
            .map_err(|e| format!("the Parquet table {table:?} does not read back: {e}"))?;
        let rows = file.metadata().file_metadata().num_rows();
        if u64::try_from(rows).ok() != Some(summary.rows_of(table)) {
            return Err(format!(
                "the Parquet table {table:?} holds {rows} rows, the export says {}",
                summary.rows_of(table)
            ));
        }
    }
    Ok(())
}

/// Runs everything on `input`; `Err` is a finding (an output that does not parse).
fn run_all(input: &[u8]) -> Result<Outcome, String> {
    let mut outcome = Outcome::default();
    // The reader and validator.
    if let Ok(t) = trace_record::read_trace_bytes(input) {
        let _ = trace_record::validate(&t);
    }
    // The exports (they stream the trace, not the analysis).
    if let Ok(mut r) = trace_record::TraceReader::new(input, trace_record::ReadOptions::default()) {
        let mut out = Vec::new();
        let opts = trace_export::ChromeOptions::default();
        if trace_export::write_chrome(&mut r, &mut out, &opts).is_ok() {
            let v: serde_json::Value = serde_json::from_slice(&out)
                .map_err(|e| format!("the Chrome export is not JSON: {e}"))?;
            let check = testkit::check_chrome(&v);
            // Viewers (and the checker) hold times as f64 µs: from about 2^51 ns (26 days)
            // on, an f64 of µs no longer resolves 1 ns, so nesting cannot be judged to the
            // ns there and only structure is checked.
            let inexact = check.complete.iter().any(|x| x.end >= 1 << 50);
            let failures: Vec<&String> = check
                .failures
                .iter()
                .filter(|f| !(inexact && f.contains("sticks out of")))
                .collect();
            if !failures.is_empty() {
                return Err(format!(
                    "the Chrome export fails the checker: {:?}",
                    &failures[..failures.len().min(5)]
                ));
            }
        }
    }
    if let Ok(mut r) = trace_record::TraceReader::new(input, trace_record::ReadOptions::default())
        && let Ok(f) = trace_export::folded_stacks(&mut r, None)
    {
        let mut out = Vec::new();
        f.write(&mut out)
            .map_err(|e| format!("writing folded stacks: {e}"))?;
        check_folded(out, "folded stacks")?;
    }
    if let Ok(mut r) = trace_record::TraceReader::new(input, trace_record::ReadOptions::default())
        && let Ok(f) = trace_export::folded_samples(&mut r, None)
    {
        let mut out = Vec::new();
        f.write(&mut out)
            .map_err(|e| format!("writing folded samples: {e}"))?;
        check_folded(out, "folded samples")?;
    }
    if let Ok(mut r) = trace_record::TraceReader::new(input, trace_record::ReadOptions::default()) {
        check_parquet(&mut r)?;
    }
    // The analyses.
    let text = match std::str::from_utf8(input) {
        Ok(t) => t,
        Err(e) => {
            // Bytes after the last newline are a partial last line (a write cut short): the
            // reader reports it and reads the trace up to it, whatever those bytes are. Invalid
            // UTF-8 anywhere before must be a clear error.
            let complete = input.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            return match trace_analyze::load_reader(input, "fuzz", Default::default()) {
                Ok(t) if e.valid_up_to() >= complete && t.partial_last_line => {
                    outcome.loaded = true;
                    Ok(outcome)
                }
                Ok(_) => Err("a trace with non-UTF-8 bytes in a complete line loaded".into()),
                Err(_) => {
                    outcome.rejected = true;
                    Ok(outcome)
                }
            };
        }
    };
    let trace = match trace_analyze::load_str(text, "fuzz", Default::default()) {
        Ok(t) => t,
        Err(_) => {
            outcome.rejected = true;
            return Ok(outcome);
        }
    };
    outcome.loaded = true;
    let json = |what: &str, v: serde_json::Result<String>| -> Result<(), String> {
        let s = v.map_err(|e| format!("{what} does not serialize: {e}"))?;
        serde_json::from_str::<serde_json::Value>(&s)
            .map(|_| ())
            .map_err(|e| format!("{what} JSON does not parse: {e}"))
    };
    let cache = trace_analyze::new_step_cache();
    if let Ok(s) = trace_analyze::summarize(&trace, &cache) {
        json("summary", serde_json::to_string(&s))?;
    }
    let ops = trace_analyze::op_table(&trace, &trace_analyze::OpTableOptions::default());
    json("ops", serde_json::to_string(&ops))?;
    json(
        "spans",
        serde_json::to_string(&trace_analyze::span_tree(&trace)),
    )?;
    json(
        "memory",
        serde_json::to_string(&trace_analyze::memory_report(&trace)),
    )?;
    if let Ok(g) = trace_analyze::graph_report(&trace, &cache) {
        json("graph", serde_json::to_string(&g))?;
    }
    if let Ok(c) = trace_analyze::compare(&trace, &trace, &cache) {
        json("compare", serde_json::to_string(&c))?;
    }
    // Runs as runs, ranks side by side, the span tree by shape and in total order.
    if let Ok(c) = trace_analyze::compare_runs(&[&trace, &trace], &[&trace], &cache) {
        json("compare runs", serde_json::to_string(&c))?;
    }
    json(
        "ranks",
        serde_json::to_string(&trace_analyze::rank_report(std::slice::from_ref(&trace))),
    )?;
    json(
        "span shapes",
        serde_json::to_string(&trace_analyze::span_shape_table(&trace)),
    )?;
    if let Some(t) =
        trace_analyze::sampled_op_table(&trace, &trace_analyze::SampledOpOptions::default())
    {
        json("sampled ops", serde_json::to_string(&t))?;
    }
    json(
        "spans by total",
        serde_json::to_string(&trace_analyze::span_tree_ordered(
            &trace,
            trace_analyze::SpanOrder::Total,
        )),
    )?;
    json(
        "gradients",
        serde_json::to_string(&trace_analyze::gradient_report(&trace)),
    )?;
    if let Some(heap) = trace_analyze::heap_report(&trace) {
        json("heap", serde_json::to_string(&heap))?;
    }
    for by in ["function", "crate", "phase", "span", "op"] {
        let by: trace_analyze::HotBy = by
            .parse()
            .map_err(|e| format!("hot --by {by} does not parse: {e}"))?;
        let opts = trace_analyze::HotOptions {
            by,
            ..Default::default()
        };
        json(
            "hot",
            serde_json::to_string(&trace_analyze::hot_report(&trace, &opts)),
        )?;
    }
    if let Ok(data) =
        trace_report::build_report(&trace, None, &trace_report::ReportOptions::default())
    {
        let mut page = Vec::new();
        trace_report::write_html(&data, &mut page).map_err(|e| format!("report: {e}"))?;
        let page = String::from_utf8(page).map_err(|e| format!("report not UTF-8: {e}"))?;
        if !page.trim_end().ends_with("</html>") {
            return Err("the report page is not a whole HTML page".into());
        }
        let embedded = trace_report::embedded_json(&data).map_err(|e| format!("report: {e}"))?;
        serde_json::from_str::<serde_json::Value>(&embedded)
            .map_err(|e| format!("the report's embedded JSON does not parse: {e}"))?;
    }
    Ok(outcome)
}

/// Runs `cargo xtask fuzz`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let dir = root.join("target/fuzz");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let seeds = seeds(root)?;
    eprintln!(
        "xtask fuzz: {} seeds, {} s, budget {} ms and {} MiB per input, seed {}",
        seeds.len(),
        o.seconds,
        o.time_budget.as_millis(),
        o.memory_budget >> 20,
        o.seed
    );
    // Panics are findings, reported with their input and location: keep the default hook
    // quiet, remember where it happened.
    std::panic::set_hook(Box::new(|info| {
        if let Some(l) = info.location()
            && let Ok(mut w) = PANIC_AT.lock()
        {
            *w = format!("{}:{}", l.file(), l.line());
        }
    }));
    let mut rng = Rng::new(o.seed);
    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    let mut by_mutation: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut inputs, mut loaded, mut rejected) = (0u64, 0u64, 0u64);
    let mut max_ms = 0u128;
    let mut max_peak = 0usize;
    let current = dir.join("current.jsonl");
    while Instant::now() < deadline {
        let (name, seed) = &seeds[rng.below(seeds.len())];
        // One to three stacked mutations.
        let mut input = seed.clone();
        let mut applied = Vec::new();
        for _ in 0..=rng.below(3) {
            let m = MUTATIONS[rng.below(MUTATIONS.len())];
            input = mutate(&mut rng, &input, m);
            applied.push(m);
        }
        for m in &applied {
            *by_mutation.entry(m).or_default() += 1;
        }
        std::fs::write(&current, &input)
            .with_context(|| format!("writing {}", current.display()))?;
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        OVER.store(false, Ordering::Relaxed);
        LIMIT.store(base.saturating_add(o.memory_budget), Ordering::Relaxed);
        let started = Instant::now();
        let (tx, rx) = mpsc::channel();
        let work = input.clone();
        std::thread::Builder::new()
            .name("fuzz-input".into())
            .spawn(move || {
                let r = std::panic::catch_unwind(|| run_all(&work));
                let _ = tx.send(r);
            })
            .context("starting a worker thread")?;
        let result = rx.recv_timeout(o.time_budget);
        LIMIT.store(usize::MAX, Ordering::Relaxed);
        let took = started.elapsed();
        let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
        inputs += 1;
        let finding = match result {
            Err(_) => Some(format!(
                "over the time budget ({} ms)",
                o.time_budget.as_millis()
            )),
            Ok(Err(panic)) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "?".into());
                let at = PANIC_AT.lock().map(|w| w.clone()).unwrap_or_default();
                Some(if OVER.load(Ordering::Relaxed) {
                    format!("over the memory budget: {msg} at {at}")
                } else {
                    format!("panicked: {msg} at {at}")
                })
            }
            Ok(Ok(Err(bad))) => Some(bad),
            Ok(Ok(Ok(out))) => {
                loaded += u64::from(out.loaded);
                rejected += u64::from(out.rejected);
                if OVER.load(Ordering::Relaxed) || peak > o.memory_budget {
                    Some(format!("over the memory budget (peak {} MiB)", peak >> 20))
                } else {
                    None
                }
            }
        };
        max_ms = max_ms.max(took.as_millis());
        max_peak = max_peak.max(peak);
        if let Some(f) = finding {
            let keep = dir.join(format!("finding-{inputs}.jsonl"));
            std::fs::write(&keep, &input)?;
            bail!(
                "input {inputs} (seed {name}, mutations {applied:?}): {f}; saved as {}",
                keep.display()
            );
        }
        if inputs % 500 == 0 {
            eprintln!("xtask fuzz: {inputs} inputs, {loaded} loaded, {rejected} rejected");
        }
    }
    println!(
        "xtask fuzz: {inputs} inputs in {} s: {loaded} loaded (analysed and exported), {rejected} rejected with an error, 0 findings; slowest {max_ms} ms, peak heap {} MiB",
        o.seconds,
        max_peak >> 20
    );
    let counts: Vec<String> = by_mutation
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!("xtask fuzz: mutations applied: {}", counts.join(", "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hostile_sampled_seed_loads_and_runs_through_everything() {
        let seed = sampled_hostile();
        let text = std::str::from_utf8(&seed).expect("UTF-8");
        let trace = trace_analyze::load_str(text, "sampled_hostile", Default::default())
            .expect("the seed is a readable trace (a rejected seed would test nothing)");
        assert_eq!(trace.sampled.frame_count(), 4);
        let outcome = run_all(&seed).expect("no finding");
        assert!(outcome.loaded);
    }

    #[test]
    fn the_hostile_heap_seed_loads_and_runs_through_everything() {
        let seed = heap_hostile();
        let text = std::str::from_utf8(&seed).expect("UTF-8");
        let trace = trace_analyze::load_str(text, "heap_hostile", Default::default())
            .expect("the seed is a readable trace (a rejected seed would test nothing)");
        let heap = trace_analyze::heap_report(&trace).expect("the seed has heap lines");
        let json = serde_json::to_value(&heap).expect("serialises");
        assert!(json.is_object());
        let outcome = run_all(&seed).expect("no finding");
        assert!(outcome.loaded);
    }
}
