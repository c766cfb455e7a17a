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
//!
//! Then the CLI pass (module `fuzz_cli`; `--no-cli` skips it): hostile zstd inputs (a 200 MB
//! op-line bomb, a 200 MB line, trailing bytes after the last frame, other compression
//! formats), strict-validation gaps, a rank directory with odd entries and Parquet datasets
//! holding links, through the `tracegraph` binary under a 2 GiB address-space cap, checking
//! exit codes, messages, notes and that no input changed.
//!
//! Then the torch pass (`--torch-seconds`, default 25; module `torch`): the torch.profiler
//! fixtures, mutated, and generated traces (1,000,000 events, 100,000 nested 100k deep, ...)
//! through `load_torch_reader`, plain and gzip, and `compare_with_torch` against small Candle
//! traces, with the same budgets and failure handling (a generated trace of more than 200,000
//! events gets one time budget per 200,000: linear time is the promise, and `cargo xtask`
//! runs unoptimised); its input is at `target/fuzz/current.torch.json`, findings are saved as
//! `target/fuzz/finding-torch-N.json`.
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
#[derive(Debug, Clone, Copy)]
struct Options {
    seconds: u64,
    /// Seconds of the torch.profiler trace pass (after the trace pass; 0: skipped).
    torch_seconds: u64,
    seed: u64,
    time_budget: Duration,
    memory_budget: usize,
    /// Whether the CLI pass runs (after the trace pass).
    cli: bool,
}

const USAGE: &str = "usage: cargo xtask fuzz [--seconds N] [--torch-seconds N] [--no-cli] [--tracegraph PATH] [--seed S] [--time-budget-ms MS] [--memory-budget-mb MB]\n\n  --seconds N        the Candle trace pass (default 60)\n  --no-cli           skip the CLI pass after it (hostile zstd, rank directories and\n                     Parquet datasets through the tracegraph binary; about a minute)\n  --tracegraph PATH  the binary the CLI pass runs (default: target/debug/tracegraph,\n                     built first)\n  --torch-seconds N  the torch.profiler trace pass last (default 25; 0 skips it)";

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options {
        seconds: 60,
        torch_seconds: 25,
        seed: 0x5eed,
        time_budget: Duration::from_secs(10),
        memory_budget: 1 << 30,
        cli: true,
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
            "--torch-seconds" => o.torch_seconds = value(a)?,
            "--seed" => o.seed = value("--seed")?,
            "--no-cli" => o.cli = false,
            // Read by `tracegraph_arg`.
            "--tracegraph" => {
                it.next()
                    .with_context(|| format!("--tracegraph needs a path\n{USAGE}"))?;
            }
            "--time-budget-ms" => o.time_budget = Duration::from_millis(value(a)?),
            "--memory-budget-mb" => {
                o.memory_budget = usize::try_from(value(a)?)?.saturating_mul(1 << 20);
            }
            other => bail!("unknown fuzz option `{other}`\n{USAGE}"),
        }
    }
    Ok(o)
}

/// The binary `--tracegraph` names, if any.
fn tracegraph_arg(args: &[String]) -> Option<std::path::PathBuf> {
    let at = args.iter().position(|a| a == "--tracegraph")?;
    args.get(at + 1).map(std::path::PathBuf::from)
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
pub(crate) fn seeds(root: &Path) -> Result<Vec<(String, Vec<u8>)>> {
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

/// One to four distinct number tokens of `input` (byte ranges, sorted), for a mutation to
/// replace right to left; none when it has no number.
fn number_picks(rng: &mut Rng, input: &[u8]) -> Vec<(usize, usize)> {
    let (nums, _) = tokens(input);
    let mut picks: Vec<(usize, usize)> = (0..=rng.below(4))
        .filter(|_| !nums.is_empty())
        .map(|_| nums[rng.below(nums.len())])
        .collect();
    picks.sort_unstable();
    picks.dedup();
    picks
}

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
            let mut b = input.to_vec();
            // Right to left so earlier ranges stay valid.
            for r in number_picks(rng, input).into_iter().rev() {
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
    let Ok(trace) = trace_analyze::load_str(text, "fuzz", Default::default()) else {
        outcome.rejected = true;
        return Ok(outcome);
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

/// What running one input within the budgets gave: its outcome, its time and its peak heap.
struct Ran<T> {
    out: T,
    took: Duration,
    peak: usize,
}

/// Runs `work` on a worker thread within `o`'s time and memory budgets. `Ok(Err(finding))`
/// is a finding: a panic, an overrun, or what `work` itself reported.
fn budgeted<T: Send + 'static>(
    o: &Options,
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<Result<Ran<T>, String>> {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    OVER.store(false, Ordering::Relaxed);
    LIMIT.store(base.saturating_add(o.memory_budget), Ordering::Relaxed);
    let started = Instant::now();
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("fuzz-input".into())
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let _ = tx.send(r);
        });
    if let Err(e) = spawned {
        LIMIT.store(usize::MAX, Ordering::Relaxed);
        return Err(e).context("starting a worker thread");
    }
    let result = rx.recv_timeout(o.time_budget);
    LIMIT.store(usize::MAX, Ordering::Relaxed);
    let took = started.elapsed();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    Ok(match result {
        Err(_) => Err(format!(
            "over the time budget ({} ms)",
            o.time_budget.as_millis()
        )),
        Ok(Err(panic)) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| {
                    panic
                        .downcast_ref::<&str>()
                        .map(std::string::ToString::to_string)
                })
                .unwrap_or_else(|| "?".into());
            let at = PANIC_AT.lock().map(|w| w.clone()).unwrap_or_default();
            Err(if OVER.load(Ordering::Relaxed) {
                format!("over the memory budget: {msg} at {at}")
            } else {
                format!("panicked: {msg} at {at}")
            })
        }
        Ok(Ok(Err(bad))) => Err(bad),
        Ok(Ok(Ok(out))) => {
            if OVER.load(Ordering::Relaxed) || peak > o.memory_budget {
                Err(format!("over the memory budget (peak {} MiB)", peak >> 20))
            } else {
                Ok(Ran { out, took, peak })
            }
        }
    })
}

/// Runs `cargo xtask fuzz`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return Ok(());
    }
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
        let work = input.clone();
        let ran = budgeted(&o, move || run_all(&work))?;
        inputs += 1;
        match ran {
            Ok(r) => {
                loaded += u64::from(r.out.loaded);
                rejected += u64::from(r.out.rejected);
                max_ms = max_ms.max(r.took.as_millis());
                max_peak = max_peak.max(r.peak);
            }
            Err(f) => {
                let keep = dir.join(format!("finding-{inputs}.jsonl"));
                std::fs::write(&keep, &input)?;
                bail!(
                    "input {inputs} (seed {name}, mutations {applied:?}): {f}; saved as {}",
                    keep.display()
                );
            }
        }
        if inputs.is_multiple_of(500) {
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
    if o.cli {
        crate::fuzz_cli::pass(root, &dir, &seeds, tracegraph_arg(args))?;
    }
    if o.torch_seconds > 0 {
        torch::pass(root, &o, &dir, &mut rng)?;
    }
    Ok(())
}

mod torch {
    //! The torch.profiler pass: Chrome traces from `prof.export_chrome_trace`, mutated and
    //! generated, through the importer and the comparison with a Candle run.
    //!
    //! Seeds: the fixtures `crates/testkit/data/torch/*.trace.json.gz`, decompressed, whole
    //! and cut after their first 400 events. Mutations: truncation, byte flips, a field of an
    //! event given another type or a hostile value (`"dur":"x"`, `"ts":-1`, `1e300`, `NaN`,
    //! `Infinity`, ...), hostile `args` (input dims, memory bytes, JSON nested 100k deep),
    //! relabelled names, categories and phases, hostile numbers anywhere, events deleted,
    //! duplicated, swapped and copied, chains of up to 20,000 nested events, and wrong top
    //! levels. Generated traces (streamed, never held whole): 1,000,000 events, 100,000
    //! events nested with the same `ts` and `dur` (same names, alternating names, ranges),
    //! 100,000 partly overlapping events, 100,000 threads, 50,000 steps. Each input goes
    //! through `load_torch_reader` plain and (most of them) gzip-compressed, intact or
    //! corrupted, and, when it loads, through the run's tables and `compare_with_torch`
    //! against three small Candle traces. Findings besides panics and overruns: an error
    //! that does not start with the file's name, a torch error whose message lacks its event
    //! or field, an error at another event than the one a single mutation broke, a plain and
    //! a gzip load of the same bytes that disagree, a comparison figure that is not finite,
    //! a diagnosis without text or evidence, an output that does not parse.

    use std::collections::BTreeMap;
    use std::io::{Read, Write as _};
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use anyhow::{Context, Result, bail};
    use trace_analyze::runs::{
        TorchCompareOptions, TorchComparison, TorchRun, compare_with_torch, load_torch_reader,
    };
    use trace_analyze::{AnalyzeError, Trace};
    use trace_record::schema::{ExecStep, Phase, SpanKind};
    use trace_record::{OpRecord, Run, TraceSession};

    use super::{HOSTILE_NUMBERS, Options, Rng, budgeted, splice};

    /// The torch seeds: each fixture decompressed, and its first 400 events as a trace of
    /// its own (small inputs run many more times a second).
    fn seeds(root: &Path) -> Result<Vec<(String, Vec<u8>)>> {
        let dir = root.join("crates/testkit/data/torch");
        let mut out = Vec::new();
        for e in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
            let p = e?.path();
            let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(short) = name.strip_suffix(".gz") else {
                continue;
            };
            if !short.ends_with(".trace.json") {
                continue;
            }
            let gz = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
            let mut plain = Vec::new();
            flate2::read::MultiGzDecoder::new(gz.as_slice())
                .read_to_end(&mut plain)
                .with_context(|| format!("decompressing {}", p.display()))?;
            let head = head_events(&plain, 400)
                .with_context(|| format!("{} has fewer than 400 events", p.display()))?;
            out.push((format!("{short} (first 400 events)"), head));
            out.push((short.to_string(), plain));
        }
        out.sort();
        if out.is_empty() {
            bail!("no torch fixtures (*.trace.json.gz) in {}", dir.display());
        }
        Ok(out)
    }

    /// `b` cut after its `n`th event and closed (`]}`): a whole trace of those events.
    fn head_events(b: &[u8], n: usize) -> Option<Vec<u8>> {
        let l = layout(b)?;
        let &(_, end) = l.events.get(n.checked_sub(1)?)?;
        let mut out = b[..end].to_vec();
        out.extend_from_slice(b"]}");
        Some(out)
    }

    // ---- A loose JSON scanner: where the events and their fields are -----------------------

    fn skip_ws(b: &[u8], mut i: usize) -> usize {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    }

    /// The end (exclusive) of the string starting at `s` (its opening quote).
    fn string_end(b: &[u8], s: usize) -> Option<usize> {
        let mut i = s + 1;
        while i < b.len() {
            match b[i] {
                b'\\' => i += 2,
                b'"' => return Some(i + 1),
                _ => i += 1,
            }
        }
        None
    }

    /// The end (exclusive) of the JSON value starting at `s`; `None` when it is cut short.
    fn value_end(b: &[u8], s: usize) -> Option<usize> {
        match *b.get(s)? {
            b'"' => string_end(b, s),
            b'{' | b'[' => {
                let mut depth = 0usize;
                let mut i = s;
                while i < b.len() {
                    match b[i] {
                        b'"' => {
                            i = string_end(b, i)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.saturating_sub(1);
                            if depth == 0 {
                                return Some(i + 1);
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                None
            }
            _ => {
                let mut i = s;
                while i < b.len()
                    && !b[i].is_ascii_whitespace()
                    && !matches!(b[i], b',' | b']' | b'}')
                {
                    i += 1;
                }
                (i > s).then_some(i)
            }
        }
    }

    /// A member of an object: its key (raw) and its value's byte range.
    type Member<'a> = (&'a [u8], (usize, usize));

    /// The members of the object starting at `s`.
    fn members(b: &[u8], s: usize) -> Option<Vec<Member<'_>>> {
        if b.get(s) != Some(&b'{') {
            return None;
        }
        let mut out = Vec::new();
        let mut i = skip_ws(b, s + 1);
        if b.get(i) == Some(&b'}') {
            return Some(out);
        }
        loop {
            if b.get(i) != Some(&b'"') {
                return None;
            }
            let ke = string_end(b, i)?;
            let key = &b[i + 1..ke - 1];
            i = skip_ws(b, ke);
            if b.get(i) != Some(&b':') {
                return None;
            }
            let vs = skip_ws(b, i + 1);
            let ve = value_end(b, vs)?;
            out.push((key, (vs, ve)));
            i = skip_ws(b, ve);
            match *b.get(i)? {
                b',' => i = skip_ws(b, i + 1),
                b'}' => return Some(out),
                _ => return None,
            }
        }
    }

    /// Where `traceEvents`' array and its elements are.
    struct Layout {
        /// The `[`.
        open: usize,
        /// The `]`.
        close: usize,
        /// Each element's byte range.
        events: Vec<(usize, usize)>,
    }

    fn layout(b: &[u8]) -> Option<Layout> {
        let top = skip_ws(b, 0);
        let (_, (open, _)) = members(b, top)?
            .into_iter()
            .find(|(k, (vs, _))| *k == b"traceEvents" && b.get(*vs) == Some(&b'['))?;
        let mut events = Vec::new();
        let mut i = skip_ws(b, open + 1);
        if b.get(i) == Some(&b']') {
            return Some(Layout {
                open,
                close: i,
                events,
            });
        }
        loop {
            let e = value_end(b, i)?;
            events.push((i, e));
            i = skip_ws(b, e);
            match *b.get(i)? {
                b',' => i = skip_ws(b, i + 1),
                b']' => {
                    return Some(Layout {
                        open,
                        close: i,
                        events,
                    });
                }
                _ => return None,
            }
        }
    }

    // ---- Mutations --------------------------------------------------------------------------

    /// What a mutation says of the error its input gives, when it is rejected (checked only
    /// when it is the one mutation applied).
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Expect {
        Nothing,
        /// The error is a torch error at this event of `traceEvents` (`None`: outside it).
        EventIs(Option<u64>),
    }

    /// The torch mutations, by name.
    const MUTATIONS: &[&str] = &[
        "truncate",
        "byte_flip",
        "field_type",
        "hostile_args",
        "relabel",
        "hostile_number",
        "delete_event",
        "duplicate_event",
        "swap_events",
        "copy_event",
        "deep_events",
        "wrong_top",
        "none",
    ];

    /// Values a field is given: other types, negative, huge and NaN-like tokens. Each is one
    /// whole JSON token or balanced value, so the error stays in the event.
    const HOSTILE_VALUES: &[&str] = &[
        "\"x\"",
        "\"\"",
        "\"1.5\"",
        "-1",
        "-0",
        "-1e-300",
        "1e300",
        "-1e300",
        "1e400",
        "NaN",
        "nan",
        "Infinity",
        "-Infinity",
        "inf",
        "null",
        "true",
        "[]",
        "{}",
        "[[[[1]]]]",
        "18446744073709551616",
        "9223372036854775807",
        "4611686018427387.904",
        "4611686018427387.905",
        "4611686018427388",
        "1.7976931348623157e308",
        "0.0005",
        "0.0004999",
        "9007199254740993.5",
        "\"\\ud800\"",
        "\"\\u0000\"",
    ];

    /// Values an event's `args` is given.
    fn hostile_args(rng: &mut Rng) -> String {
        const FIXED: &[&str] = &[
            r#"{"Input Dims": [[1, 2], [3]], "Input type": ["float", "c10::Half"]}"#,
            r#"{"Input Dims": [[[[[1]]]]]}"#,
            r#"{"Input Dims": "x"}"#,
            r#"{"Input Dims": [[-1, 9223372036854775807, 18446744073709551616]]}"#,
            r#"{"Input Dims": [[], [[]], null, [[1, 2], [3]]]}"#,
            r#"{"Input Dims": [[1e300, 1.5, -0]]}"#,
            r#"{"Input type": [1, null, {}]}"#,
            r#"{"Input type": "float"}"#,
            r#"{"Bytes": "x"}"#,
            r#"{"Bytes": 1e300, "Total Allocated": NaN}"#,
            r#"{"Bytes": -9223372036854775808, "Total Allocated": 18446744073709551615, "Device Type": -1}"#,
            r#"{"Bytes": 9223372036854775807, "Device Type": 1}"#,
            r#"{"External id": -1}"#,
            r#"{"External id": "x"}"#,
            r#"{"name": 5}"#,
            r#"{"name": "\ud800"}"#,
            "null",
            "[]",
            "\"x\"",
        ];
        match rng.below(FIXED.len() + 3) {
            i if i < FIXED.len() => FIXED[i].to_string(),
            // JSON nested 100k deep (the parser's recursion limit must answer, not the stack).
            i if i == FIXED.len() => format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
            i if i == FIXED.len() + 1 => {
                format!("{}1{}", "{\"a\":".repeat(100_000), "}".repeat(100_000))
            }
            // 100,000 input dims.
            _ => format!(
                "{{\"Input Dims\": [{}[1]], \"Input type\": [{}\"float\"]}}",
                "[1, 128],".repeat(100_000),
                "\"float\",".repeat(100_000)
            ),
        }
    }

    /// Names, categories and phases an event is relabelled with.
    fn relabel(rng: &mut Rng) -> (&'static [u8], String) {
        const NAMES: &[&str] = &[
            "ProfilerStep#18446744073709551616",
            "ProfilerStep#18446744073709551615",
            "ProfilerStep#",
            "ProfilerStep#-1",
            "ProfilerStep#00",
            "ProfilerStep#1",
            "ProfilerStep*",
            "[memory]",
            "thread_name",
            "\\u0000",
            "a/b/c",
            "llama.forward",
            "block#0",
            "aten::mm",
            "aten::copy_",
            "é😀",
        ];
        const CATS: &[&str] = &[
            "cpu_op",
            "user_annotation",
            "python_function",
            "Trace",
            "kernel",
            "gpu_memcpy",
            "cuda_runtime",
            "cpu_instant_event",
            "",
        ];
        const PHS: &[&str] = &["X", "i", "I", "M", "B", "E", "s", "f", ""];
        match rng.below(4) {
            0 => (b"name", format!("\"{}\"", NAMES[rng.below(NAMES.len())])),
            1 if rng.below(8) == 0 => (b"name", format!("\"{}\"", "x".repeat(100_000))),
            1 => (b"cat", format!("\"{}\"", CATS[rng.below(CATS.len())])),
            _ => (b"ph", format!("\"{}\"", PHS[rng.below(PHS.len())])),
        }
    }

    /// The event at `k`'s members, or `None`.
    fn event_members<'a>(input: &'a [u8], l: &Layout, k: usize) -> Option<Vec<Member<'a>>> {
        members(input, l.events.get(k)?.0)
    }

    /// Sets `key` of event `k` to `with` (inserting it first in the event when absent).
    fn set_field(input: &[u8], l: &Layout, k: usize, key: &[u8], with: &str) -> Vec<u8> {
        let (s, _) = l.events[k];
        if let Some((_, r)) =
            event_members(input, l, k).and_then(|ms| ms.into_iter().find(|(mk, _)| *mk == key))
        {
            splice(input, r, with.as_bytes())
        } else {
            let mut ins = format!("\"{}\": {with}", String::from_utf8_lossy(key));
            let empty = input.get(skip_ws(input, s + 1)) == Some(&b'}');
            if !empty {
                ins.push(',');
            }
            splice(input, (s + 1, s + 1), ins.as_bytes())
        }
    }

    /// A top level that is not a torch trace's, or a torch trace's with hostile top fields.
    fn wrong_top(rng: &mut Rng, input: &[u8], l: Option<&Layout>) -> (Vec<u8>, Expect) {
        let none = Expect::EventIs(None);
        let top = skip_ws(input, 0);
        let at_top = |ins: &str| {
            if input.get(top) == Some(&b'{') {
                splice(input, (top + 1, top + 1), ins.as_bytes())
            } else {
                input.to_vec()
            }
        };
        let events = l.map(|l| &input[l.open..=l.close]);
        match rng.below(20) {
            // Chrome's JSON array form: the events without the object.
            0 => (events.unwrap_or(b"[]").to_vec(), none),
            1 => match input.windows(13).position(|w| w == b"\"traceEvents\"") {
                Some(p) => (splice(input, (p, p + 13), b"\"traceEventz\""), none),
                None => (input.to_vec(), Expect::Nothing),
            },
            2 => match l {
                Some(l) => {
                    const VALUES: &[(&str, Option<u64>)] = &[
                        ("null", None),
                        ("{}", None),
                        ("\"x\"", None),
                        ("1", None),
                        ("[1, 2]", Some(0)),
                        ("[[]]", Some(0)),
                        ("[null]", Some(0)),
                        ("[{}]", Some(0)),
                        ("[{\"ph\": \"X\"}]", Some(0)),
                        ("[]", None),
                    ];
                    let (v, e) = VALUES[rng.below(VALUES.len())];
                    (
                        splice(input, (l.open, l.close + 1), v.as_bytes()),
                        Expect::EventIs(e),
                    )
                }
                None => (input.to_vec(), Expect::Nothing),
            },
            3 => {
                let mut b = b"{\"a\": ".to_vec();
                b.extend_from_slice(input);
                b.push(b'}');
                (b, none)
            }
            4 => {
                let mut b = b"[".to_vec();
                b.extend_from_slice(input);
                b.push(b']');
                (b, none)
            }
            5 => ([input, input].concat(), none),
            6 => ([input, b" x"].concat(), none),
            7 => {
                const TOPS: &[&str] = &["", "   ", "null", "\"\"", "{}", "[]", "0", "{", "}"];
                (TOPS[rng.below(TOPS.len())].as_bytes().to_vec(), none)
            }
            8 => ([b"\xEF\xBB\xBF", input].concat(), none),
            9 => ("[".repeat(100_000).into_bytes(), none),
            10 => (
                format!("{{\"traceEvents\": {}", "[".repeat(100_000)).into_bytes(),
                Expect::Nothing,
            ),
            // `traceEvents` twice.
            11 => match events {
                Some(ev) => {
                    let mut ins = b"\"traceEvents\": ".to_vec();
                    ins.extend_from_slice(ev);
                    ins.push(b',');
                    (
                        at_top(std::str::from_utf8(&ins).unwrap_or("")),
                        Expect::Nothing,
                    )
                }
                None => (input.to_vec(), Expect::Nothing),
            },
            _ => {
                const FIELDS: &[&str] = &[
                    "\"schemaVersion\": \"x\",",
                    "\"schemaVersion\": -1,",
                    "\"schemaVersion\": 1e300,",
                    "\"baseTimeNanoseconds\": -1,",
                    "\"baseTimeNanoseconds\": 1e300,",
                    "\"baseTimeNanoseconds\": \"x\",",
                    "\"baseTimeNanoseconds\": 18446744073709551616,",
                    "\"baseTimeNanoseconds\": 18446744073709551615,",
                    "\"deviceProperties\": {},",
                    "\"deviceProperties\": [1, 2, 3],",
                    "\"deviceProperties\": \"x\",",
                    "\"traceName\": 5,",
                    "\"traceName\": null,",
                    "\"traceName\": \"\\ud800\",",
                    "\"displayTimeUnit\": \"ns\",",
                ];
                (at_top(FIELDS[rng.below(FIELDS.len())]), none)
            }
        }
    }

    /// Applies mutation `which`; the expectation holds for the result.
    fn mutate(rng: &mut Rng, input: &[u8], which: &str) -> (Vec<u8>, Expect) {
        let l = layout(input);
        let n = l.as_ref().map_or(0, |l| l.events.len());
        match (which, &l) {
            ("truncate", _) => {
                // Mostly inside the events, sometimes anywhere.
                let p = match &l {
                    Some(l) if rng.below(4) != 0 => l.open + rng.below(l.close - l.open + 1),
                    _ => rng.below(input.len() + 1),
                };
                let expect = match &l {
                    Some(l) if l.open < p && p <= l.close => Expect::EventIs(Some(
                        l.events.iter().take_while(|&&(_, e)| e <= p).count() as u64,
                    )),
                    Some(_) => Expect::EventIs(None),
                    None => Expect::Nothing,
                };
                (input[..p].to_vec(), expect)
            }
            ("byte_flip", _) => (super::mutate(rng, input, "byte_flip"), Expect::Nothing),
            ("hostile_number", _) => {
                let mut b = input.to_vec();
                for r in super::number_picks(rng, input).into_iter().rev() {
                    let with = if rng.below(2) == 0 {
                        HOSTILE_NUMBERS[rng.below(HOSTILE_NUMBERS.len())]
                    } else {
                        HOSTILE_VALUES[rng.below(HOSTILE_VALUES.len())]
                    };
                    b = splice(&b, r, with.as_bytes());
                }
                (b, Expect::Nothing)
            }
            ("wrong_top", _) => wrong_top(rng, input, l.as_ref()),
            (_, Some(l)) if n > 0 => {
                let k = rng.below(n);
                let j = rng.below(n);
                let at = Expect::EventIs(Some(k as u64));
                let (ks, ke) = l.events[k];
                match which {
                    "field_type" => {
                        const KEYS: &[&[u8]] = &[
                            b"ts", b"dur", b"ph", b"cat", b"name", b"pid", b"tid", b"args",
                        ];
                        let key = KEYS[rng.below(KEYS.len())];
                        let with = HOSTILE_VALUES[rng.below(HOSTILE_VALUES.len())];
                        (set_field(input, l, k, key, with), at)
                    }
                    "hostile_args" => {
                        let with = hostile_args(rng);
                        (set_field(input, l, k, b"args", &with), at)
                    }
                    "relabel" => {
                        let (key, with) = relabel(rng);
                        (set_field(input, l, k, key, &with), at)
                    }
                    "delete_event" => {
                        // The element and the comma after it (before it, for the last).
                        let range = if k + 1 < n {
                            (ks, l.events[k + 1].0)
                        } else if k > 0 {
                            (l.events[k - 1].1, ke)
                        } else {
                            (ks, ke)
                        };
                        (splice(input, range, b""), Expect::Nothing)
                    }
                    "duplicate_event" | "copy_event" => {
                        let src = if which == "copy_event" { j } else { k };
                        let (ss, se) = l.events[src];
                        let mut ins = input[ss..se].to_vec();
                        ins.extend_from_slice(b",\n");
                        (splice(input, (ks, ks), &ins), Expect::Nothing)
                    }
                    "swap_events" if j != k => {
                        let (a, b) = (k.min(j), k.max(j));
                        let (ra, rb) = (l.events[a], l.events[b]);
                        let mut out = input[..ra.0].to_vec();
                        out.extend_from_slice(&input[rb.0..rb.1]);
                        out.extend_from_slice(&input[ra.1..rb.0]);
                        out.extend_from_slice(&input[ra.0..ra.1]);
                        out.extend_from_slice(&input[rb.1..]);
                        (out, Expect::Nothing)
                    }
                    "deep_events" => (deep_events(rng, input, l, k), Expect::Nothing),
                    _ => (input.to_vec(), Expect::Nothing),
                }
            }
            _ => (input.to_vec(), Expect::Nothing),
        }
    }

    /// A chain of up to 20,000 events nested with one `ts` and `dur` (event `k`'s, so they sit
    /// where it does), inserted after event `k`.
    fn deep_events(rng: &mut Rng, input: &[u8], l: &Layout, k: usize) -> Vec<u8> {
        let ms = event_members(input, l, k).unwrap_or_default();
        let raw = |key: &[u8], or: &str| {
            ms.iter()
                .find(|(mk, (vs, ve))| {
                    *mk == key && input.get(*vs).is_some_and(u8::is_ascii_digit) && ve > vs
                })
                .map_or(or.to_string(), |(_, (vs, ve))| {
                    String::from_utf8_lossy(&input[*vs..*ve]).into_owned()
                })
        };
        let (ts, dur, pid, tid) = (
            raw(b"ts", "1.0"),
            raw(b"dur", "1.0"),
            raw(b"pid", "1"),
            raw(b"tid", "1"),
        );
        let depth = if rng.below(8) == 0 {
            20_000
        } else {
            1 + rng.below(3000)
        };
        let cat = ["cpu_op", "user_annotation", "python_function"][rng.below(3)];
        let same = rng.below(2) == 0;
        let mut chain = String::new();
        for d in 0..depth {
            let name = if same { "d" } else { ["d#0", "e#0"][d % 2] };
            chain.push_str(&format!(
                ",{{\"ph\":\"X\",\"cat\":\"{cat}\",\"name\":\"{name}\",\"pid\":{pid},\"tid\":{tid},\"ts\":{ts},\"dur\":{dur}}}"
            ));
        }
        let end = l.events[k].1;
        splice(input, (end, end), chain.as_bytes())
    }

    // ---- Generated traces, streamed -----------------------------------------------------------

    /// The shapes of the generated traces.
    #[derive(Debug, Clone, Copy)]
    enum GenKind {
        /// 100 steps of 10,000 events: ranges, ops with input dims, memory events.
        Million,
        /// One step and, inside it, ops of one name nested with the step's `ts` and `dur`.
        DeepSame,
        /// The same with two names taking turns (nothing merges).
        DeepAlternating,
        /// The same with `record_function` ranges (paths 100k names deep).
        DeepRanges,
        /// Ops each starting 1 ns after the last and lasting 500 µs: each overlaps the next.
        OverlapChain,
        /// An op on each of 100,000 threads.
        ManyThreads,
        /// Steps with huge numbers, each holding one op.
        ManySteps,
    }

    /// The generated traces: shape and events.
    const GENERATED: &[(GenKind, u64)] = &[
        (GenKind::Million, 1_000_000),
        (GenKind::DeepSame, 100_000),
        (GenKind::DeepAlternating, 100_000),
        (GenKind::DeepRanges, 100_000),
        (GenKind::OverlapChain, 100_000),
        (GenKind::ManyThreads, 100_000),
        (GenKind::ManySteps, 100_000),
    ];

    /// A generated trace as a reader: events are written into a small buffer as they are
    /// read, so memory stays bounded whatever the count.
    struct Gen {
        kind: GenKind,
        n: u64,
        next: u64,
        stage: u8,
        buf: Vec<u8>,
        pos: usize,
    }

    impl Gen {
        fn new(kind: GenKind, n: u64) -> Gen {
            Gen {
                kind,
                n,
                next: 0,
                stage: 0,
                buf: Vec::with_capacity(1 << 16),
                pos: 0,
            }
        }

        /// Event `i`.
        fn event(&self, i: u64, out: &mut Vec<u8>) {
            let x = |cat: &str, name: &str, tid: u64, ts: &str, dur: &str, args: &str| {
                format!(
                    "{{\"ph\":\"X\",\"cat\":\"{cat}\",\"name\":\"{name}\",\"pid\":1,\"tid\":{tid},\"ts\":{ts},\"dur\":{dur}{args}}}"
                )
            };
            let step = |n: u64, ts: &str, dur: &str| {
                x(
                    "user_annotation",
                    &format!("ProfilerStep#{n}"),
                    1,
                    ts,
                    dur,
                    "",
                )
            };
            let e = match self.kind {
                GenKind::Million => {
                    let (s, j) = (i / 10_000, i % 10_000);
                    let t0 = 1 + s * 100_000;
                    if j == 0 {
                        step(s, &format!("{t0}.000"), "99000.000")
                    } else {
                        let (g, r) = ((j - 1) / 4, (j - 1) % 4);
                        let tg = t0 + 10 * g;
                        match r {
                            0 => x(
                                "user_annotation",
                                ["block#0", "block#1"][(g % 2) as usize],
                                1,
                                &format!("{tg}.500"),
                                "9.000",
                                "",
                            ),
                            // Input dims and types on one linear in 8.
                            1 => x(
                                "cpu_op",
                                "aten::linear",
                                1,
                                &format!("{}.000", tg + 1),
                                "6.000",
                                if g % 8 == 0 {
                                    ",\"args\":{\"Input Dims\":[[1,128],[128,128]],\"Input type\":[\"float\",\"float\"]}"
                                } else {
                                    ""
                                },
                            ),
                            2 => x(
                                "cpu_op",
                                "aten::addmm",
                                1,
                                &format!("{}.000", tg + 2),
                                "4.000",
                                "",
                            ),
                            // A memory event in one group of 4, else an op ending with the linear.
                            _ if g % 4 == 0 => format!(
                                "{{\"ph\":\"i\",\"s\":\"t\",\"name\":\"[memory]\",\"pid\":1,\"tid\":1,\"ts\":{}.000,\"args\":{{\"Bytes\":512,\"Total Allocated\":{},\"Device Type\":0}}}}",
                                tg + 3,
                                i * 512
                            ),
                            _ => x(
                                "cpu_op",
                                "aten::t",
                                1,
                                &format!("{}.500", tg + 6),
                                "0.500",
                                "",
                            ),
                        }
                    }
                }
                GenKind::DeepSame | GenKind::DeepAlternating | GenKind::DeepRanges => {
                    if i == 0 {
                        step(1, "1.000", "1000.000")
                    } else {
                        let (cat, names) = match self.kind {
                            GenKind::DeepSame => ("cpu_op", ["aten::add", "aten::add"]),
                            GenKind::DeepAlternating => ("cpu_op", ["aten::add", "aten::mul"]),
                            _ => ("user_annotation", ["block#0", "attn#0"]),
                        };
                        x(cat, names[(i % 2) as usize], 1, "1.000", "1000.000", "")
                    }
                }
                GenKind::OverlapChain => {
                    if i == 0 {
                        step(1, "1.000", "1000.000")
                    } else {
                        let ts = format!("{}.{:03}", 1 + i / 1000, i % 1000);
                        x(
                            "cpu_op",
                            ["aten::add", "aten::mul"][(i % 2) as usize],
                            1,
                            &ts,
                            "500.000",
                            "",
                        )
                    }
                }
                GenKind::ManyThreads => {
                    if i == 0 {
                        step(1, "1.000", "1000.000")
                    } else {
                        x("cpu_op", "aten::add", i, "2.000", "1.000", "")
                    }
                }
                GenKind::ManySteps => {
                    let k = i / 2;
                    let ts = format!("{}.000", 1 + 2 * k);
                    if i.is_multiple_of(2) {
                        step(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), &ts, "2.000")
                    } else {
                        let ts = format!("{}.500", 1 + 2 * k);
                        x("cpu_op", "aten::add", 1, &ts, "1.000", "")
                    }
                }
            };
            out.extend_from_slice(e.as_bytes());
        }

        /// Writes the next part into the buffer; false at the end.
        fn refill(&mut self) -> bool {
            self.buf.clear();
            self.pos = 0;
            match self.stage {
                0 => {
                    self.buf.extend_from_slice(
                        b"{\"schemaVersion\":1,\"deviceProperties\":[],\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n",
                    );
                    self.stage = 1;
                }
                1 => {
                    let mut buf = std::mem::take(&mut self.buf);
                    while buf.len() < (1 << 16) && self.next < self.n {
                        if self.next > 0 {
                            buf.extend_from_slice(b",\n");
                        }
                        self.event(self.next, &mut buf);
                        self.next += 1;
                    }
                    self.buf = buf;
                    if self.next == self.n {
                        self.stage = 2;
                    }
                }
                2 => {
                    self.buf
                        .extend_from_slice(b"\n],\"traceName\":\"generated by xtask fuzz\"}\n");
                    self.stage = 3;
                }
                _ => return false,
            }
            true
        }
    }

    impl Read for Gen {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            while self.pos == self.buf.len() {
                if !self.refill() {
                    return Ok(0);
                }
            }
            let n = out.len().min(self.buf.len() - self.pos);
            out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    /// What must hold of a generated trace once loaded.
    fn check_generated(kind: GenKind, n: u64, run: &TorchRun) -> Result<(), String> {
        let fail = |what: &str| Err(format!("{kind:?} ({n} events): {what}"));
        if run.counts.events != n {
            return fail(&format!("{} events read", run.counts.events));
        }
        let ok = match kind {
            GenKind::Million => run.steps.len() as u64 == n.div_ceil(10_000),
            GenKind::DeepSame => run.ops.len() as u64 + run.merged == n - 1,
            GenKind::DeepAlternating => run.ops.len() as u64 == n - 1 && run.merged == 0,
            GenKind::DeepRanges => run.ranges.len() as u64 == n - 1,
            GenKind::OverlapChain => run.ops.len() as u64 + run.merged == n - 1,
            GenKind::ManyThreads => run.op_threads as u64 == n - 1,
            GenKind::ManySteps => run.steps.len() as u64 == n / 2,
        };
        if !ok {
            return fail(&format!(
                "{} steps, {} ops, {} ranges, {} merged, {} op threads",
                run.steps.len(),
                run.ops.len(),
                run.ranges.len(),
                run.merged,
                run.op_threads
            ));
        }
        Ok(())
    }

    // ---- Running one input ------------------------------------------------------------------

    /// How an input's gzip twin is made.
    #[derive(Debug, Clone, Copy)]
    enum Gz {
        /// No twin.
        No,
        /// The input compressed: it must load or fail exactly as the plain bytes do.
        Same,
        /// Compressed, then cut after this share (per mille) of its bytes.
        Cut(usize),
        /// Compressed, then bytes flipped (the seed of the flips).
        Flip(u64),
    }

    /// What one torch input did: loads tried (plain and gzip), loaded, rejected.
    #[derive(Debug, Default, Clone, Copy)]
    struct Outcome {
        loads: u64,
        gzip_loads: u64,
        loaded: u64,
        rejected: u64,
        /// Rejections whose event was checked against the one a lone mutation broke.
        located: u64,
    }

    impl Outcome {
        fn count(&mut self, r: &Result<TorchRun, AnalyzeError>) {
            self.loads += 1;
            if r.is_ok() {
                self.loaded += 1;
            } else {
                self.rejected += 1;
            }
        }
    }

    /// The JSON of `v` parses back.
    fn json(what: &str, v: serde_json::Result<String>) -> Result<(), String> {
        let s = v.map_err(|e| format!("{what} does not serialize: {e}"))?;
        serde_json::from_str::<serde_json::Value>(&s)
            .map(|_| ())
            .map_err(|e| format!("{what} JSON does not parse: {e}"))
    }

    /// An error must name the file (and its event and field where it has them), and be at
    /// the event a lone mutation broke.
    fn judge(r: &Result<TorchRun, AnalyzeError>, name: &str, expect: Expect) -> Result<(), String> {
        let Err(e) = r else {
            return Ok(());
        };
        let msg = e.to_string();
        if !msg.starts_with(&format!("{name}: ")) {
            return Err(format!(
                "the error does not start with the file {name:?}: {msg}"
            ));
        }
        match e {
            AnalyzeError::Torch { event, field, .. } => {
                if let Some(k) = event
                    && !msg.contains(&format!("event {k}: "))
                {
                    return Err(format!("the error does not name its event {k}: {msg}"));
                }
                if let Some(f) = field
                    && !msg.contains(&format!("field \"{f}\""))
                {
                    return Err(format!("the error does not name its field {f}: {msg}"));
                }
                if let Expect::EventIs(want) = expect
                    && *event != want
                {
                    return Err(format!(
                        "the error is located at event {event:?}, the mutation broke event \
                         {want:?}: {msg}"
                    ));
                }
            }
            AnalyzeError::Gzip { .. } if expect == Expect::Nothing => {}
            _ => return Err(format!("unexpected kind of error ({e:?}): {msg}")),
        }
        Ok(())
    }

    /// A plain load and the load of the same bytes gzip-compressed agree.
    fn agree(
        plain: &Result<TorchRun, AnalyzeError>,
        name: &str,
        gz: &Result<TorchRun, AnalyzeError>,
        gz_name: &str,
    ) -> Result<(), String> {
        match (plain, gz) {
            (Ok(a), Ok(b)) => {
                let facts = |r: &TorchRun| {
                    (
                        r.counts,
                        r.steps.len(),
                        r.ops.len(),
                        r.ranges.len(),
                        r.merged,
                        r.adjusted,
                        r.op_threads,
                    )
                };
                if facts(a) != facts(b) {
                    return Err(format!(
                        "plain and gzip loads differ: {:?} and {:?}",
                        facts(a),
                        facts(b)
                    ));
                }
            }
            (Err(a), Err(b)) => {
                let (a, b) = (a.to_string(), b.to_string());
                if a.get(name.len()..) != b.get(gz_name.len()..) {
                    return Err(format!("plain and gzip errors differ: {a} / {b}"));
                }
            }
            (a, b) => {
                return Err(format!(
                    "plain {} but gzip {}",
                    a.as_ref()
                        .map_or_else(|e| format!("failed: {e}"), |_| "loaded".into()),
                    b.as_ref()
                        .map_or_else(|e| format!("failed: {e}"), |_| "loaded".into())
                ));
            }
        }
        Ok(())
    }

    fn gzip(b: &[u8]) -> Result<Vec<u8>, String> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(b).map_err(|e| format!("gzip: {e}"))?;
        enc.finish().map_err(|e| format!("gzip: {e}"))
    }

    /// Every figure of a comparison is finite and every diagnosis says something.
    fn check_comparison(c: &TorchComparison) -> Result<(), String> {
        let mut figures = vec![c.candle.step_ns, c.torch.step_ns, c.torch_copy_share];
        figures.extend(c.step_ratio);
        figures.extend(c.candle_copy_share);
        for k in &c.kinds {
            figures.push(k.torch_ns);
            figures.extend(k.candle_ns);
            figures.extend(k.ratio);
            figures.extend(k.loss_ns);
            figures.extend(k.candle_interval.map(|(a, b)| a + b));
        }
        for l in &c.layers {
            figures.extend([l.candle_ns, l.torch_ns, l.loss_ns]);
            figures.extend(l.ratio);
        }
        for d in &c.diagnoses {
            figures.push(d.loss_ns);
            if d.text.trim().is_empty() || d.evidence.is_empty() {
                return Err(format!("a diagnosis without text or evidence: {d:?}"));
            }
        }
        if figures.iter().any(|x| !x.is_finite()) {
            return Err("a figure of the comparison with torch is not finite".into());
        }
        Ok(())
    }

    /// Step ranges and layer maps, ordinary and hostile.
    fn options(rng: &mut Rng) -> TorchCompareOptions {
        const MAPS: &[(&str, &str)] = &[
            ("llama.forward", "forward"),
            ("llama.forward/block#0", "model/l0"),
            ("", ""),
            ("a//b", "x"),
            ("#0", ""),
            ("llama.forward", "llama.forward/llama.forward"),
            ("block#1", "block#0"),
            ("d", "d/d"),
        ];
        let mut range = || match rng.below(4) {
            0 => None,
            1 => {
                let a = rng.below(8) as u64;
                Some((a, a + rng.below(5) as u64))
            }
            2 => Some((0, u64::MAX)),
            _ => Some((u64::MAX, u64::MAX)),
        };
        let (candle_steps, torch_steps) = (range(), range());
        let layer_map = (0..rng.below(4))
            .map(|_| {
                let (a, b) = MAPS[rng.below(MAPS.len())];
                (a.to_string(), b.to_string())
            })
            .collect();
        TorchCompareOptions {
            candle_steps,
            torch_steps,
            layer_map,
        }
    }

    /// The run's tables, and the comparison with each Candle trace (default options and
    /// drawn ones).
    fn exercise(run: &TorchRun, candle: &[Trace], seed: u64) -> Result<(), String> {
        json(
            "torch self_by_name",
            serde_json::to_string(&run.self_by_name()),
        )?;
        json(
            "torch range_self_by_name",
            serde_json::to_string(&run.range_self_by_name()),
        )?;
        json(
            "torch range_self_by_path",
            serde_json::to_string(&run.range_self_by_path()),
        )?;
        json(
            "torch self_by_class",
            serde_json::to_string(&run.self_by_class()),
        )?;
        json(
            "torch self_by_name_in_steps",
            serde_json::to_string(&run.self_by_name_in_steps(0..run.steps.len())),
        )?;
        for op in run.ops.iter().take(10_000) {
            let _ = (
                run.input_dims(op),
                run.input_shapes(op),
                run.input_types(op),
            );
        }
        for r in &run.ranges {
            let _ = run.display_path(r.path);
        }
        for t in [0, u64::MAX, run.ops.first().map_or(1, |o| o.start_ns)] {
            let _ = run.step_at(t);
        }
        let mut rng = Rng::new(seed);
        for trace in candle {
            for opts in [TorchCompareOptions::default(), options(&mut rng)] {
                let c = compare_with_torch(trace, run, &opts);
                check_comparison(&c)?;
                json("the comparison with torch", serde_json::to_string(&c))?;
            }
        }
        Ok(())
    }

    /// One mutated input: plain, then its gzip twin.
    fn run_bytes(
        input: &[u8],
        name: &str,
        expect: Expect,
        gz: Gz,
        candle: &[Trace],
        seed: u64,
    ) -> Result<Outcome, String> {
        let mut out = Outcome::default();
        let plain = load_torch_reader(input, name);
        out.count(&plain);
        judge(&plain, name, expect)?;
        if plain.is_err() && expect != Expect::Nothing {
            out.located += 1;
        }
        if let Ok(run) = &plain {
            exercise(run, candle, seed)?;
        }
        if let Gz::No = gz {
            return Ok(out);
        }
        let mut bytes = gzip(input)?;
        let gz_name = format!("{name}.gz");
        match gz {
            Gz::Cut(pm) => bytes.truncate(bytes.len() * pm / 1000),
            Gz::Flip(s) => {
                let mut rng = Rng::new(s);
                for _ in 0..=rng.below(4) {
                    let i = rng.below(bytes.len());
                    bytes[i] ^= 1 << rng.below(8);
                }
            }
            Gz::Same | Gz::No => {}
        }
        let twin = load_torch_reader(bytes.as_slice(), &gz_name);
        out.count(&twin);
        out.gzip_loads += 1;
        if let Gz::Same = gz {
            judge(&twin, &gz_name, expect)?;
            agree(&plain, name, &twin, &gz_name)?;
        } else {
            judge(&twin, &gz_name, Expect::Nothing)?;
            if let Ok(run) = &twin {
                exercise(run, candle, seed)?;
            }
        }
        Ok(out)
    }

    /// One generated trace, streamed.
    fn run_generated(kind: GenKind, n: u64, candle: &[Trace]) -> Result<Outcome, String> {
        let mut out = Outcome::default();
        let name = format!("generated {kind:?} ({n} events)");
        let r = load_torch_reader(Gen::new(kind, n), &name);
        out.count(&r);
        match &r {
            Ok(run) => {
                check_generated(kind, n, run)?;
                // One Candle trace is enough to show the comparison stays linear.
                exercise(run, &candle[..1], n)?;
            }
            Err(e) => return Err(format!("a generated trace is rejected: {e}")),
        }
        Ok(out)
    }

    /// A small Candle trace recorded by a real session, named like the Llama: 6 steps of
    /// `llama.forward` with `block#k/attn#0/linear#j` and `mlp#0` spans and ops.
    fn llama_like_trace() -> Vec<u8> {
        let run = Run::new("xtask::fuzz", Phase::Infer, "cpu");
        let (s, sink) = TraceSession::in_memory(run);
        let op = |name: &str, id: u64| {
            let start = s.now_ns();
            let mut acc = 0u64;
            for i in 0..500u64 {
                acc = acc.wrapping_mul(31).wrapping_add(i);
            }
            std::hint::black_box(acc);
            s.record_op(&OpRecord {
                name,
                inputs: &[1],
                outputs: &[id],
                shape: &[1, 128],
                dtype: "f32",
                device: "cpu",
                start_ns: start,
                dur_ns: s.now_ns().saturating_sub(start).max(1),
                in_bytes: 512,
                out_bytes: 512,
                category: None,
                flops: Some(32_768),
            });
        };
        let mut id = 10;
        for _ in 0..6 {
            {
                let _f = s.span("llama.forward", SpanKind::Function, Some(ExecStep::Forward));
                for b in 0..2 {
                    let _b = s.span(&format!("block#{b}"), SpanKind::Module, None);
                    {
                        let _a = s.span("attn#0", SpanKind::Module, None);
                        for j in 0..4 {
                            let _l = s.span(&format!("linear#{j}"), SpanKind::Module, None);
                            op("matmul", id);
                            id += 1;
                        }
                        op("softmax", id);
                        op("copy", id + 1);
                        id += 2;
                    }
                    let _m = s.span("mlp#0", SpanKind::Module, None);
                    op("matmul", id);
                    op("silu", id + 1);
                    id += 2;
                }
            }
            s.step();
        }
        let _ = s.finish();
        sink.bytes()
    }

    /// The Candle traces every torch run is compared with.
    fn candle_traces() -> Result<Vec<Trace>> {
        let mut out = Vec::new();
        for (name, bytes) in [
            ("llama_like", llama_like_trace()),
            ("session_trace(3)", testkit::session_trace(3)),
            ("sampled_hostile", super::sampled_hostile()),
        ] {
            let text = String::from_utf8(bytes).context("a Candle trace is not UTF-8")?;
            out.push(
                trace_analyze::load_str(&text, name, Default::default())
                    .with_context(|| format!("loading the Candle trace {name}"))?,
            );
        }
        Ok(out)
    }

    /// Runs the torch pass for `o.torch_seconds`: the generated traces first, then mutated
    /// fixtures until the time is up.
    pub(super) fn pass(root: &Path, o: &Options, dir: &Path, rng: &mut Rng) -> Result<()> {
        let seeds = seeds(root)?;
        let candle = Arc::new(candle_traces()?);
        eprintln!(
            "xtask fuzz: torch pass: {} seeds, {} generated traces, {} s",
            seeds.len(),
            GENERATED.len(),
            o.torch_seconds
        );
        let started = Instant::now();
        let deadline = started + Duration::from_secs(o.torch_seconds);
        let current = dir.join("current.torch.json");
        let mut total = Outcome::default();
        let mut inputs = 0u64;
        let mut by_mutation: BTreeMap<&str, u64> = BTreeMap::new();
        let (mut max_ms, mut max_peak) = (0u128, 0usize);
        let mut slowest_generated = (0u128, "");

        for &(kind, n) in GENERATED {
            // The input is described, not written (it would be ~170 MB); written on a finding.
            std::fs::write(
                &current,
                format!("generated by xtask fuzz's torch pass: {kind:?}, {n} events\n"),
            )
            .with_context(|| format!("writing {}", current.display()))?;
            let c = Arc::clone(&candle);
            let scaled = Options {
                time_budget: o.time_budget * budget_factor(n),
                ..*o
            };
            let ran = budgeted(&scaled, move || run_generated(kind, n, &c))?;
            inputs += 1;
            match ran {
                Ok(r) => {
                    add(&mut total, r.out);
                    max_peak = max_peak.max(r.peak);
                    if r.took.as_millis() > slowest_generated.0 {
                        slowest_generated = (r.took.as_millis(), kind_name(kind));
                    }
                }
                Err(f) => {
                    let keep = dir.join(format!("finding-torch-{inputs}.json"));
                    let mut file = std::io::BufWriter::new(
                        std::fs::File::create(&keep)
                            .with_context(|| format!("creating {}", keep.display()))?,
                    );
                    std::io::copy(&mut Gen::new(kind, n), &mut file)
                        .and_then(|_| file.flush())
                        .with_context(|| format!("writing {}", keep.display()))?;
                    bail!(
                        "torch input {inputs} (generated {kind:?}, {n} events): {f}; saved as {}",
                        keep.display()
                    );
                }
            }
        }

        while Instant::now() < deadline {
            // Small seeds three times in four.
            let small: Vec<&(String, Vec<u8>)> =
                seeds.iter().filter(|(n, _)| n.contains("first")).collect();
            let (name, seed) = if rng.below(4) != 0 && !small.is_empty() {
                small[rng.below(small.len())]
            } else {
                &seeds[rng.below(seeds.len())]
            };
            // One mutation half the time (its expectation is then checked), else two or three.
            let count = if rng.below(2) == 0 {
                1
            } else {
                2 + rng.below(2)
            };
            let mut input = seed.clone();
            let mut applied = Vec::new();
            let mut expect = Expect::Nothing;
            for _ in 0..count {
                let m = MUTATIONS[rng.below(MUTATIONS.len())];
                let (next, e) = mutate(rng, &input, m);
                input = next;
                expect = if count == 1 { e } else { Expect::Nothing };
                applied.push(m);
            }
            for m in &applied {
                *by_mutation.entry(m).or_default() += 1;
            }
            let gz = match rng.below(8) {
                0 | 1 => Gz::No,
                2 => Gz::Cut(rng.below(1000)),
                3 => Gz::Flip(rng.next()),
                _ => Gz::Same,
            };
            let work_seed = rng.next();
            std::fs::write(&current, &input)
                .with_context(|| format!("writing {}", current.display()))?;
            let file = name.split(' ').next().unwrap_or("fuzz.json").to_string();
            let work = input.clone();
            let c = Arc::clone(&candle);
            let ran = budgeted(o, move || {
                run_bytes(&work, &file, expect, gz, &c, work_seed)
            })?;
            inputs += 1;
            match ran {
                Ok(r) => {
                    add(&mut total, r.out);
                    max_ms = max_ms.max(r.took.as_millis());
                    max_peak = max_peak.max(r.peak);
                }
                Err(f) => {
                    let keep = dir.join(format!("finding-torch-{inputs}.json"));
                    std::fs::write(&keep, &input)?;
                    bail!(
                        "torch input {inputs} (seed {name}, mutations {applied:?}, gzip {gz:?}): \
                         {f}; saved as {} (plain)",
                        keep.display()
                    );
                }
            }
            if inputs.is_multiple_of(100) {
                eprintln!(
                    "xtask fuzz: torch: {inputs} inputs, {} loaded, {} rejected",
                    total.loaded, total.rejected
                );
            }
        }
        println!(
            "xtask fuzz: torch: {inputs} inputs ({} generated) in {:.0} s: {} loads ({} of gzip), \
             {} loaded (tables and comparisons), {} rejected with an error naming the file ({} at \
             the event a lone mutation broke, checked), 0 findings; slowest mutated {max_ms} ms, \
             slowest generated {} ms ({}), peak heap {} MiB",
            GENERATED.len(),
            started.elapsed().as_secs_f64(),
            total.loads,
            total.gzip_loads,
            total.loaded,
            total.rejected,
            total.located,
            slowest_generated.0,
            slowest_generated.1,
            max_peak >> 20
        );
        let counts: Vec<String> = by_mutation
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!("xtask fuzz: torch mutations applied: {}", counts.join(", "));
        Ok(())
    }

    /// Events a generated trace may have within one time budget; a larger one gets a budget
    /// per this many events (linear time is the promise, and the unoptimised build
    /// `cargo xtask` runs reads about 100,000 torch events a second).
    const EVENTS_PER_BUDGET: u64 = 200_000;

    /// How many time budgets a generated trace of `n` events gets.
    fn budget_factor(n: u64) -> u32 {
        u32::try_from(n.div_ceil(EVENTS_PER_BUDGET).max(1)).unwrap_or(u32::MAX)
    }

    fn add(total: &mut Outcome, o: Outcome) {
        total.loads += o.loads;
        total.gzip_loads += o.gzip_loads;
        total.loaded += o.loaded;
        total.rejected += o.rejected;
        total.located += o.located;
    }

    fn kind_name(kind: GenKind) -> &'static str {
        match kind {
            GenKind::Million => "1M events",
            GenKind::DeepSame => "deep, one name",
            GenKind::DeepAlternating => "deep, two names",
            GenKind::DeepRanges => "deep ranges",
            GenKind::OverlapChain => "overlapping",
            GenKind::ManyThreads => "many threads",
            GenKind::ManySteps => "many steps",
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_scanner_finds_every_event_of_the_fixtures() {
            let root = crate::root();
            let seeds = seeds(&root).expect("the torch fixtures");
            for (name, bytes) in &seeds {
                let l = layout(bytes).unwrap_or_else(|| panic!("{name}: no layout"));
                let run = load_torch_reader(bytes.as_slice(), name).expect("a fixture loads");
                assert_eq!(run.counts.events, l.events.len() as u64, "{name}");
            }
        }

        #[test]
        fn a_cut_trace_is_rejected_at_the_event_being_read() {
            let root = crate::root();
            let seeds = seeds(&root).expect("the torch fixtures");
            let (name, bytes) = &seeds[0];
            let l = layout(bytes).expect("layout");
            for p in [
                0,
                l.open,
                l.open + 1,
                l.events[3].0,
                l.events[3].0 + 1,
                l.events[3].1,
                l.close,
            ] {
                let expect = if l.open < p && p <= l.close {
                    Expect::EventIs(Some(
                        l.events.iter().take_while(|&&(_, e)| e <= p).count() as u64
                    ))
                } else {
                    Expect::EventIs(None)
                };
                let r = load_torch_reader(&bytes[..p], name);
                assert!(r.is_err(), "cut at {p}");
                judge(&r, name, expect).unwrap_or_else(|e| panic!("cut at {p}: {e}"));
            }
        }

        #[test]
        fn a_field_of_the_wrong_type_is_reported_at_its_event() {
            let root = crate::root();
            let seeds = seeds(&root).expect("the torch fixtures");
            let (name, bytes) = &seeds[0];
            let l = layout(bytes).expect("layout");
            let k = l.events.len() / 2;
            for (key, with) in [
                (&b"dur"[..], "\"x\""),
                (b"ts", "-1"),
                (b"ts", "1e300"),
                (b"ts", "NaN"),
            ] {
                let input = set_field(bytes, &l, k, key, with);
                let r = load_torch_reader(input.as_slice(), name);
                let e = r.as_ref().expect_err("rejected");
                assert!(e.to_string().contains(&format!("event {k}: ")), "{e}");
                judge(&r, name, Expect::EventIs(Some(k as u64))).expect("at its event");
                assert!(judge(&r, name, Expect::EventIs(Some(k as u64 + 1))).is_err());
                assert!(judge(&r, "other.json", Expect::Nothing).is_err());
            }
        }

        #[test]
        fn generated_traces_stream_as_valid_json() {
            for kind in [GenKind::Million, GenKind::ManySteps, GenKind::DeepRanges] {
                let mut text = Vec::new();
                Gen::new(kind, 2_000).read_to_end(&mut text).expect("reads");
                let v: serde_json::Value = serde_json::from_slice(&text).expect("JSON");
                assert_eq!(v["traceEvents"].as_array().map(Vec::len), Some(2_000));
                let run = load_torch_reader(Gen::new(kind, 2_000), "gen").expect("loads");
                check_generated(kind, 2_000, &run).expect("holds");
            }
        }
    }
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
