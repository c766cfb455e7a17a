//! `cargo xtask fuzz`'s CLI pass: hostile zstd, rank-directory and Parquet-dataset inputs through
//! the `tracegraph` binary itself (exit codes, stderr notes and files on disk are the CLI's, so
//! they are checked there rather than in-process).
//!
//! Each run gets a 2 GiB address-space cap (`ulimit -v` in `sh`, the process's own limit: an
//! allocation past it fails and aborts the run, which is a finding) and a wall-clock limit
//! ([`RUN_LIMIT`]); `TRACEGRAPH_ZSTD_MAX_RATIO` is removed from its environment so the default
//! expansion budget applies. Runs go four at a time. The corpus, built under `target/fuzz/cli/`
//! (the two bombs once, cached under `target/fuzz/cli-cache/`):
//! - (a) a zstd op-line bomb: a header and 200 MB of one valid op line, zstd level 3 (a few KB);
//!   every command must exit 1 (3 accepted) naming the file, the compressed byte and
//!   `TRACEGRAPH_ZSTD_MAX_RATIO`;
//! - (b) one 200 MB line, zstd: the same, with "line longer than";
//! - (c) every seed trace of the trace pass compressed, then with 4,096 NUL bytes and with one
//!   plain line appended: `summary` and `validate` behave as on the clean file (same exit code and
//!   output) with a note "after the last complete zstd frame", and `validate --strict` exits 4;
//! - (d) gzip, xz, bzip2, lz4, lz4 legacy, zip and lzma data named `.jsonl.zst` and `.jsonl`: an
//!   error naming the format and the command that decompresses it;
//! - (e) strict-validation gaps (version 2 lines under a version 1 header, `"file":null`,
//!   `hz` = u64::MAX, a `heap_account` for a missing step): `validate --strict` reports the line
//!   and the problem; a 120 KB type name with bidirectional controls (raw and escaped, at its
//!   start, middle and end): `validate --strict` rejects its line, `validate` and `summary`
//!   skip it, and no output holds a raw control or over 1 KB of the name;
//! - (f) a rank directory with `RANK-0.JSONL`, a name that is not UTF-8, a `.Jsonl.ZST`, a
//!   symlink to a trace, a subdirectory, `notes.txt` and a dangling link: `summary` and `ops`
//!   (text and JSON) read the four traces and note the two other entries (subdirectories are not
//!   entered and, as documented, not named);
//! - (g) Parquet exports into datasets where `run=ID/rank=0`, `run=ID` or a table file is a
//!   symlink (to another directory, to a user's file): the export fails naming the link, the
//!   link targets and the other ranks' tables are unchanged.
//!
//! Last, every input file (the bombs included) must be byte-for-byte what it was before the runs.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The address-space cap of every run, in KiB (`ulimit -v`): 2 GiB.
const AS_CAP_KIB: u64 = 2 << 20;

/// The wall-clock limit of one run (the unoptimised binary reads a bomb's 64 MiB budget in about
/// 1.5 s; four runs share the machine).
const RUN_LIMIT: Duration = Duration::from_mins(2);

/// Runs at a time.
const WORKERS: usize = 4;

/// The decompressed size of each bomb: 200 MB.
const BOMB_BYTES: u64 = 200_000_000;

/// The line the op-line bomb repeats: a valid op.
const BOMB_OP: &str = r#"{"type":"op","name":"matmul","in":[1],"out":[2],"shape":[8,8],"dtype":"f32","ts":30,"dur":60,"in_b":128,"out_b":256}"#;

/// The environment variable of the expansion budget (removed from every run's environment).
const RATIO_ENV: &str = "TRACEGRAPH_ZSTD_MAX_RATIO";

/// The note a reader gives for bytes after the last complete zstd frame.
const TRAILING_NOTE: &str = "after the last complete zstd frame";

/// The plain line appended after a compressed trace's last frame.
const TRAILING_LINE: &str = "{\"type\":\"step\",\"index\":1000000,\"ts\":1}\n";

/// Other compression formats: magic bytes, the name the error must give, the command it must
/// suggest.
const FOREIGN: &[(&[u8], &str, &str)] = &[
    (&[0x1F, 0x8B], "gzip", "gunzip"),
    (&[0xFD, b'7', b'z', b'X', b'Z', 0x00], "xz", "unxz"),
    (b"BZh91AY&SY", "bzip2", "bunzip2"),
    (&[0x04, 0x22, 0x4D, 0x18], "lz4", "unlz4"),
    (&[0x02, 0x21, 0x4C, 0x18], "lz4 (legacy)", "unlz4"),
    (b"PK\x03\x04", "zip", "unzip"),
    (&[0x5D, 0x00, 0x00], "lzma", "unlzma"),
];

/// Bidirectional controls no output may carry raw: U+202A..=U+202E, U+2066..=U+2069, U+200F.
fn has_bidi(b: &[u8]) -> bool {
    String::from_utf8_lossy(b)
        .chars()
        .any(|c| matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200F}'))
}

/// The longest run of `c` in `b`.
fn longest_run(b: &[u8], c: u8) -> usize {
    b.split(|&x| x != c).map(<[u8]>::len).max().unwrap_or(0)
}

fn contains(hay: &[u8], needle: &str) -> bool {
    let n = needle.as_bytes();
    !n.is_empty() && hay.windows(n.len()).any(|w| w == n)
}

/// One invocation of the binary, run in the work directory.
struct Job {
    /// The case, for findings.
    case: String,
    args: Vec<OsString>,
}

fn job<S: AsRef<OsStr>>(case: impl Into<String>, args: impl IntoIterator<Item = S>) -> Job {
    Job {
        case: case.into(),
        args: args
            .into_iter()
            .map(|a| a.as_ref().to_os_string())
            .collect(),
    }
}

/// What one run did.
struct Out {
    case: String,
    /// The command line, for findings.
    cmd: String,
    /// The exit code; `None` when a signal or the time limit ended it.
    code: Option<i32>,
    /// How it ended when not by exiting (a signal, the time limit, a failed start).
    ended: Option<String>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    took: Duration,
}

impl Out {
    fn err_has(&self, s: &str) -> bool {
        contains(&self.stderr, s)
    }
    fn out_has(&self, s: &str) -> bool {
        contains(&self.stdout, s)
    }
    fn any_has(&self, s: &str) -> bool {
        self.err_has(s) || self.out_has(s)
    }
    fn code_in(&self, codes: &[i32]) -> bool {
        self.code.is_some_and(|c| codes.contains(&c))
    }
    /// The exit code and the ends of stderr and stdout, for a finding.
    fn tail(&self) -> String {
        let end = |b: &[u8]| {
            let text = String::from_utf8_lossy(b);
            let text = text.trim_end();
            let n = text.chars().count();
            let cut: String = text.chars().skip(n.saturating_sub(300)).collect();
            format!("{}{}", if n > 300 { "…" } else { "" }, cut.escape_debug())
        };
        format!(
            "exit {:?}; stderr: {}; stdout: {}",
            self.code,
            end(&self.stderr),
            end(&self.stdout)
        )
    }
}

/// The expectations checked and the findings.
#[derive(Default)]
struct Tally {
    runs: u64,
    checks: u64,
    findings: Vec<String>,
    slowest: Duration,
    /// The inputs as they were written, before any run read them.
    inputs: Snapshot,
}

impl Tally {
    /// Counts the runs and checks what every run must do: exit (no signal, no time-out) with a
    /// documented code, with no panic or allocation failure on stderr.
    fn runs(&mut self, outs: &[Out]) {
        for o in outs {
            self.runs += 1;
            self.slowest = self.slowest.max(o.took);
            self.check(o, o.ended.is_none(), || {
                format!("did not exit: {}", o.ended.as_deref().unwrap_or("?"))
            });
            self.check(o, o.code.is_none_or(|c| (0..=5).contains(&c)), || {
                format!("undocumented exit code {:?}", o.code)
            });
            self.check(
                o,
                !o.err_has("panicked") && !o.err_has("memory allocation of"),
                || format!("panicked or ran out of memory: {}", o.tail()),
            );
        }
    }

    fn check(&mut self, o: &Out, ok: bool, what: impl FnOnce() -> String) {
        self.checks += 1;
        if !ok {
            self.findings
                .push(format!("[{}] `{}`: {}", o.case, o.cmd, what()));
        }
    }

    /// Records what `path` holds now (an input just written), to be compared after every run.
    fn watch(&mut self, path: &Path) -> Result<()> {
        snapshot(path, &mut self.inputs)
    }

    /// A check about the files on disk (no run of its own).
    fn check_files(&mut self, case: &str, ok: bool, what: impl FnOnce() -> String) {
        self.checks += 1;
        if !ok {
            self.findings.push(format!("[{case}] {}", what()));
        }
    }
}

/// Runs the `tracegraph` binary.
struct Cli {
    bin: PathBuf,
    /// The working directory of every run; inputs and outputs are named relative to it.
    work: PathBuf,
    logs: PathBuf,
    next_log: AtomicUsize,
}

impl Cli {
    /// Runs `jobs`, [`WORKERS`] at a time, each within the caps; the outputs in `jobs`' order.
    fn batch(&self, jobs: &[Job]) -> Vec<Out> {
        let next = AtomicUsize::new(0);
        let outs: Mutex<Vec<Option<Out>>> = Mutex::new(jobs.iter().map(|_| None).collect());
        std::thread::scope(|s| {
            for _ in 0..WORKERS.min(jobs.len()) {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(j) = jobs.get(i) else { break };
                        let out = self.one(j);
                        if let Ok(mut v) = outs.lock() {
                            v[i] = Some(out);
                        }
                    }
                });
            }
        });
        outs.into_inner()
            .unwrap_or_default()
            .into_iter()
            .zip(jobs)
            .map(|(o, j)| {
                o.unwrap_or_else(|| Out {
                    case: j.case.clone(),
                    cmd: String::new(),
                    code: None,
                    ended: Some("no result (a worker failed)".into()),
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                    took: Duration::ZERO,
                })
            })
            .collect()
    }

    fn one(&self, j: &Job) -> Out {
        let cmd = std::iter::once("tracegraph".to_string())
            .chain(j.args.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect::<Vec<_>>()
            .join(" ");
        let mut out = Out {
            case: j.case.clone(),
            cmd,
            code: None,
            ended: None,
            stdout: Vec::new(),
            stderr: Vec::new(),
            took: Duration::ZERO,
        };
        let n = self.next_log.fetch_add(1, Ordering::Relaxed);
        let (so, se) = (
            self.logs.join(format!("{n}.stdout")),
            self.logs.join(format!("{n}.stderr")),
        );
        let started = Instant::now();
        let spawned = File::create(&so)
            .and_then(|o| Ok((o, File::create(&se)?)))
            .and_then(|(o, e)| {
                Command::new("sh")
                    .arg("-c")
                    .arg(format!("ulimit -v {AS_CAP_KIB} && exec \"$@\""))
                    .arg("sh")
                    .arg(&self.bin)
                    .args(&j.args)
                    .current_dir(&self.work)
                    .env_remove(RATIO_ENV)
                    .stdin(Stdio::null())
                    .stdout(o)
                    .stderr(e)
                    .spawn()
            });
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                out.ended = Some(format!("could not start: {e}"));
                return out;
            }
        };
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if started.elapsed() > RUN_LIMIT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    out.ended = Some(format!("over the time limit ({} s)", RUN_LIMIT.as_secs()));
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => {
                    out.ended = Some(format!("waiting for it: {e}"));
                    break None;
                }
            }
        };
        out.took = started.elapsed();
        if let Some(s) = status {
            out.code = s.code();
            if let Some(sig) = s.signal() {
                out.ended = Some(format!("killed by signal {sig}"));
            }
        }
        out.stdout = std::fs::read(&so).unwrap_or_default();
        out.stderr = std::fs::read(&se).unwrap_or_default();
        out
    }
}

/// Writes `path` as zstd level 3 of what `fill` writes, streamed through the zstd crate's
/// encoder (the C library the traces are read with; nothing here holds the decompressed
/// bytes); temp file and rename.
fn zstd_to(path: &Path, fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(".part");
    let tmp = PathBuf::from(tmp);
    let file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut enc = zstd::Encoder::new(BufWriter::with_capacity(1 << 20, file), 3)
        .with_context(|| format!("starting a zstd encoder for {}", tmp.display()))?;
    fill(&mut enc)
        .and_then(|()| enc.finish())
        .and_then(|mut w| w.flush())
        .with_context(|| format!("compressing into {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}

/// A header and [`BOMB_OP`] repeated to [`BOMB_BYTES`].
fn fill_op_lines(w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(w, "{}", testkit::HEADER)?;
    let line = format!("{BOMB_OP}\n");
    let chunk = line.repeat((1 << 20) / line.len());
    let mut written = 0u64;
    while written < BOMB_BYTES {
        w.write_all(chunk.as_bytes())?;
        written += chunk.len() as u64;
    }
    Ok(())
}

/// A header and one op line whose name is [`BOMB_BYTES`] of `x`.
fn fill_long_line(w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(w, "{}", testkit::HEADER)?;
    w.write_all(br#"{"type":"op","name":""#)?;
    let chunk = vec![b'x'; 1 << 20];
    let mut written = 0u64;
    while written < BOMB_BYTES {
        w.write_all(&chunk)?;
        written += chunk.len() as u64;
    }
    w.write_all(b"\"}\n")
}

/// The cached bomb at `cache/name`, generated when missing.
fn bomb(
    cache: &Path,
    name: &str,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<PathBuf> {
    let p = cache.join(name);
    if !std::fs::metadata(&p).is_ok_and(|m| m.is_file() && m.len() > 0) {
        let started = Instant::now();
        zstd_to(&p, fill)?;
        eprintln!(
            "xtask fuzz: cli: generated {} in {:.1} s",
            p.display(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(p)
}

/// What a tree of inputs holds: each file's bytes, each link's target, each directory.
type Snapshot = BTreeMap<PathBuf, Entry>;

#[derive(PartialEq, Eq, Debug)]
enum Entry {
    File(Vec<u8>),
    Link(PathBuf),
    Dir,
    /// Gone, or unreadable.
    Missing,
}

/// What `p` itself holds now (a directory's entries are not read).
fn entry(p: &Path) -> Entry {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::read_link(p).map_or(Entry::Missing, Entry::Link)
        }
        Ok(m) if m.is_dir() => Entry::Dir,
        Ok(_) => std::fs::read(p).map_or(Entry::Missing, Entry::File),
        Err(_) => Entry::Missing,
    }
}

fn snapshot(root: &Path, into: &mut Snapshot) -> Result<()> {
    let meta =
        std::fs::symlink_metadata(root).with_context(|| format!("reading {}", root.display()))?;
    if meta.file_type().is_symlink() {
        into.insert(root.to_path_buf(), Entry::Link(std::fs::read_link(root)?));
    } else if meta.is_dir() {
        into.insert(root.to_path_buf(), Entry::Dir);
        for e in std::fs::read_dir(root).with_context(|| format!("listing {}", root.display()))? {
            snapshot(&e?.path(), into)?;
        }
    } else {
        into.insert(
            root.to_path_buf(),
            Entry::File(
                std::fs::read(root).with_context(|| format!("reading {}", root.display()))?,
            ),
        );
    }
    Ok(())
}

fn snap(root: &Path) -> Result<Snapshot> {
    let mut s = Snapshot::new();
    snapshot(root, &mut s)?;
    Ok(s)
}

/// The paths where two snapshots differ.
fn differences(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for (p, e) in before {
        match after.get(p) {
            None | Some(Entry::Missing) => out.push(format!("{} removed", p.display())),
            Some(a) if a != e => out.push(format!("{} changed", p.display())),
            Some(_) => {}
        }
    }
    for p in after.keys().filter(|p| !before.contains_key(*p)) {
        out.push(format!("{} added", p.display()));
    }
    out
}

/// A bomb's commands: every analysis and export the trace pass runs, on `f`.
fn every_command(case: &str, f: &str, small: &str, out: &str) -> Vec<Job> {
    let mut jobs: Vec<Job> = [
        vec!["validate", f],
        vec!["validate", "--strict", f],
        vec!["summary", f],
        vec!["summary", "--json", f],
        vec!["ops", f],
        vec!["spans", f],
        vec!["memory", f],
        vec!["graph", f],
        vec!["hot", f],
        vec!["gradients", f],
        vec!["compare", small, f],
    ]
    .into_iter()
    .map(|a| job(case, a))
    .collect();
    for (what, args) in [
        ("report", vec!["report", "-o"]),
        ("chrome", vec!["export", "--format", "chrome", "-o"]),
        ("folded", vec!["export", "--format", "folded", "-o"]),
        ("parquet", vec!["export", "--format", "parquet", "-o"]),
    ] {
        let target = format!("{out}/{}-{what}", case.replace(' ', "-"));
        let mut a = args;
        a.push(&target);
        a.push(f);
        jobs.push(job(case, a));
    }
    jobs
}

/// (a) and (b): the bombs through every command.
fn bombs(cli: &Cli, cache: &Path, t: &mut Tally) -> Result<String> {
    let cases = [
        (
            "op-line bomb",
            bomb(cache, "op-lines-200MB.jsonl.zst", fill_op_lines)?,
            "TRACEGRAPH_ZSTD_MAX_RATIO",
        ),
        (
            "200 MB line",
            bomb(cache, "one-line-200MB.jsonl.zst", fill_long_line)?,
            "line longer than",
        ),
    ];
    let mut sizes = Vec::new();
    for (_, path, _) in &cases {
        t.watch(path)?;
    }
    for (case, path, words) in &cases {
        let len = std::fs::metadata(path)?.len();
        sizes.push(format!("{case} {len} bytes"));
        let f = path.to_string_lossy().into_owned();
        let jobs = every_command(case, &f, "inputs/small.jsonl", "out");
        let outs = cli.batch(&jobs);
        t.runs(&outs);
        for o in &outs {
            t.check(o, o.code_in(&[1, 3]), || {
                format!("expected exit 1: {}", o.tail())
            });
            let name = path
                .file_name()
                .map(OsStr::to_string_lossy)
                .unwrap_or_default();
            t.check(
                o,
                o.err_has(&name) && o.err_has("compressed byte") && o.err_has(words),
                || {
                    format!(
                        "the error must name the file, the compressed byte and {words:?}: {}",
                        o.tail()
                    )
                },
            );
            t.check(o, o.stdout.len() < 64 << 10, || {
                format!("{} bytes on stdout", o.stdout.len())
            });
        }
        t.check_files(case, len < 1 << 20, || {
            format!(
                "{} compresses to {len} bytes (not under 1 MB)",
                path.display()
            )
        });
    }
    Ok(sizes.join(", "))
}

/// (c): each seed compressed, then with NUL bytes and with a plain line after its last frame.
fn trailing(cli: &Cli, inputs: &Path, seeds: &[(String, Vec<u8>)], t: &mut Tally) -> Result<usize> {
    let dir = inputs.join("trailing");
    std::fs::create_dir_all(&dir)?;
    let mut jobs = Vec::new();
    let mut names = Vec::new();
    for (k, (seed, bytes)) in seeds.iter().enumerate() {
        let clean = dir.join(format!("seed-{k}.jsonl.zst"));
        zstd_to(&clean, |w| w.write_all(bytes))?;
        let z = std::fs::read(&clean)?;
        let variants = [
            ("clean", Vec::new()),
            ("nul", vec![0u8; 4096]),
            ("line", TRAILING_LINE.as_bytes().to_vec()),
        ];
        let mut files = Vec::new();
        for (v, tail) in variants {
            let f = format!("inputs/trailing/seed-{k}-{v}.jsonl.zst");
            std::fs::write(cli.work.join(&f), [z.as_slice(), &tail].concat())?;
            files.push(f);
        }
        std::fs::remove_file(&clean)?;
        let case = format!("trailing bytes, seed {seed}");
        for f in &files {
            jobs.push(job(&case, ["summary", f]));
            jobs.push(job(&case, ["validate", f]));
            jobs.push(job(&case, ["validate", "--strict", f]));
        }
        names.push(files);
    }
    t.watch(&dir)?;
    let outs = cli.batch(&jobs);
    t.runs(&outs);
    // Per seed: 3 files × (summary, validate, validate --strict), in that order.
    for (files, o) in names.iter().zip(outs.chunks(9)) {
        let [c_sum, c_val, c_strict] = [&o[0], &o[1], &o[2]];
        for (v, f) in files.iter().enumerate().skip(1) {
            let (sum, val, strict) = (&o[3 * v], &o[3 * v + 1], &o[3 * v + 2]);
            let same_out = |a: &Out, b: &Out| {
                String::from_utf8_lossy(&a.stdout).replace(f.as_str(), &files[0])
                    == String::from_utf8_lossy(&b.stdout)
            };
            // The note: on stderr for an analysis, in the report (stdout) for `validate`.
            for (x, clean, note_on) in [(sum, c_sum, &sum.stderr), (val, c_val, &val.stdout)] {
                t.check(x, x.code == clean.code, || {
                    format!(
                        "exit {:?}, the clean file's {:?}: {}",
                        x.code,
                        clean.code,
                        x.tail()
                    )
                });
                if clean.code == Some(0) {
                    t.check(x, contains(note_on, TRAILING_NOTE), || {
                        format!("no note {TRAILING_NOTE:?}: {}", x.tail())
                    });
                }
            }
            t.check(sum, same_out(sum, c_sum), || {
                "stdout differs from the clean file's".into()
            });
            match c_strict.code {
                Some(0 | 4) => {
                    t.check(strict, strict.code == Some(4), || {
                        format!("expected exit 4: {}", strict.tail())
                    });
                    t.check(strict, strict.out_has("after the last zstd frame"), || {
                        "stdout does not name the bytes after the last zstd frame".into()
                    });
                }
                c => t.check(strict, strict.code == c, || {
                    format!("exit {:?}, the clean file's {c:?}", strict.code)
                }),
            }
        }
    }
    Ok(seeds.len())
}

/// (d): other compression formats named `.jsonl.zst` and `.jsonl`.
fn foreign(cli: &Cli, inputs: &Path, small: &[u8], t: &mut Tally) -> Result<()> {
    let dir = inputs.join("foreign");
    std::fs::create_dir_all(&dir)?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(small)?;
    let gz = gz.finish()?;
    let mut jobs = Vec::new();
    let mut expect = Vec::new();
    for &(magic, name, tool) in FOREIGN {
        let bytes = if name == "gzip" {
            gz.clone()
        } else {
            [magic, small].concat()
        };
        let slug: String = name.chars().filter(char::is_ascii_alphanumeric).collect();
        for ext in ["jsonl.zst", "jsonl"] {
            let f = format!("inputs/foreign/{slug}.{ext}");
            std::fs::write(cli.work.join(&f), &bytes)?;
            for args in [
                vec!["validate", &f],
                vec!["validate", "--strict", &f],
                vec!["summary", &f],
                vec!["ops", "--json", &f],
            ] {
                jobs.push(job(format!("{name} data named .{ext}"), args));
                expect.push((f.clone(), name, tool));
            }
        }
    }
    t.watch(&dir)?;
    let outs = cli.batch(&jobs);
    t.runs(&outs);
    for (o, (f, name, tool)) in outs.iter().zip(&expect) {
        t.check(o, o.code_in(&[1, 3]), || {
            format!("expected exit 1: {}", o.tail())
        });
        t.check(
            o,
            o.err_has(f)
                && o.err_has(&format!("{name}-compressed"))
                && o.err_has(&format!("`{tool}`")),
            || {
                format!(
                    "the error must name the file, {name:?} and `{tool}`: {}",
                    o.tail()
                )
            },
        );
    }
    Ok(())
}

/// `base` (a trace's lines) with `line` (if any) inserted as line 6, under a header of
/// `version`.
fn with_line(base: &str, version: u32, line: Option<&str>) -> String {
    let mut out = String::new();
    for (i, l) in base.split_inclusive('\n').enumerate() {
        if let Some(line) = line.filter(|_| i == 5) {
            out.push_str(line);
            out.push('\n');
        }
        if i == 0 {
            out.push_str(&l.replacen("\"version\":1", &format!("\"version\":{version}"), 1));
        } else {
            out.push_str(l);
        }
    }
    out
}

/// (e): strict-validation gaps and a 120 KB type name with bidirectional controls.
fn strict_gaps(cli: &Cli, inputs: &Path, small: &str, t: &mut Tally) -> Result<()> {
    let dir = inputs.join("strict");
    std::fs::create_dir_all(&dir)?;
    let m = u64::MAX;
    let gaps: Vec<(&str, u32, String, &[&str])> = vec![
        ("control (v2 header, nothing inserted)", 2, String::new(), &[]),
        (
            "heap_alloc under a v1 header",
            1,
            r#"{"type":"heap_alloc","id":1,"bytes":10,"thread":0,"ts":5}"#.into(),
            &["line 6", "version"],
        ),
        (
            "samples under a v1 header",
            1,
            r#"{"type":"samples","step":0,"thread":1,"stack":1,"n":1}"#.into(),
            &["line 6", "version"],
        ),
        (
            "frame under a v1 header",
            1,
            r#"{"type":"frame","id":1,"func":"f","file":"a.rs"}"#.into(),
            &["line 6", "version"],
        ),
        (
            "\"file\":null",
            2,
            r#"{"type":"frame","id":1,"func":"f","file":null}"#.into(),
            &["line 6", "`file`"],
        ),
        (
            "hz = u64::MAX",
            2,
            format!(
                r#"{{"type":"sampler","step":0,"hz":{m},"taken":0,"lost":0,"cpu_ns":1000,"ts":0,"dur":5}}"#
            ),
            &["line 6", "Hz"],
        ),
        (
            "heap_account for a missing step",
            2,
            r#"{"type":"heap_account","step":999,"threshold":4096,"lost":0,"unmatched_frees":0,"ts":0,"dur":1}"#
                .into(),
            &["line 6", "step 999"],
        ),
    ];
    let mut jobs = Vec::new();
    for (k, (case, version, line, _)) in gaps.iter().enumerate() {
        let f = format!("inputs/strict/gap-{k}.jsonl");
        let text = with_line(
            small,
            *version,
            Some(line.as_str()).filter(|l| !l.is_empty()),
        );
        std::fs::write(cli.work.join(&f), text)?;
        t.watch(&cli.work.join(&f))?;
        jobs.push(job(*case, ["validate", "--strict", &f]));
    }
    let outs = cli.batch(&jobs);
    t.runs(&outs);
    for (o, (_, _, line, words)) in outs.iter().zip(&gaps) {
        if line.is_empty() {
            t.check(o, o.code == Some(0), || {
                format!(
                    "the control must be valid (else the cases prove nothing): {}",
                    o.tail()
                )
            });
            continue;
        }
        t.check(o, o.code_in(&[3, 4]), || {
            format!("expected exit 3 or 4: {}", o.tail())
        });
        for w in *words {
            t.check(o, o.any_has(w), || {
                format!("the report does not say {w:?}: {}", o.tail())
            });
        }
    }

    // 120 KB type names with a bidirectional control, raw or escaped, at the start, middle, end.
    let fill = "A".repeat(60_000);
    let mut jobs = Vec::new();
    let mut k = 0;
    for (ctl, esc) in [('\u{202E}', "\\u202e"), ('\u{2066}', "\\u2066")] {
        for raw in [true, false] {
            let c = if raw {
                ctl.to_string()
            } else {
                esc.to_string()
            };
            for name in [
                format!("{c}{fill}{fill}"),
                format!("{fill}{c}{fill}"),
                format!("{fill}{fill}{c}"),
            ] {
                let f = format!("inputs/strict/bidi-{k}.jsonl");
                k += 1;
                let line = format!(r#"{{"type":"{name}","ts":1}}"#);
                std::fs::write(cli.work.join(&f), with_line(small, 1, Some(&line)))?;
                t.watch(&cli.work.join(&f))?;
                let case = format!(
                    "120 KB type name with U+{:04X} ({})",
                    ctl as u32,
                    if raw { "raw" } else { "escaped" }
                );
                for args in [
                    vec!["validate", "--strict", &f],
                    vec!["validate", &f],
                    vec!["summary", &f],
                ] {
                    jobs.push(job(&case, args));
                }
            }
        }
    }
    let outs = cli.batch(&jobs);
    t.runs(&outs);
    // Per file: validate --strict (rejects the line), validate and summary (skip a line of an
    // unknown type, and say so); none may echo the name.
    for (i, o) in outs.iter().enumerate() {
        if i % 3 == 0 {
            t.check(o, o.code_in(&[3, 4]), || {
                format!("expected exit 3 or 4: {}", o.tail())
            });
            t.check(o, o.any_has("line 6"), || {
                format!("the error must name line 6: {}", o.tail())
            });
        }
        for (what, b) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
            t.check(o, !has_bidi(b), || {
                format!("{what} holds a raw bidirectional control")
            });
            t.check(o, longest_run(b, b'A') <= 1024, || {
                format!("{what} echoes {} bytes of the name", longest_run(b, b'A'))
            });
        }
    }
    Ok(())
}

/// (f): a rank directory with odd names, a link, a subdirectory and other files.
fn rank_dir(cli: &Cli, inputs: &Path, small: &[u8], t: &mut Tally) -> Result<()> {
    use std::os::unix::fs::symlink;
    let dir = inputs.join("ranks");
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub)?;
    let elsewhere = inputs.join("rank-elsewhere");
    std::fs::create_dir_all(&elsewhere)?;
    std::fs::write(dir.join("RANK-0.JSONL"), small)?;
    let odd = OsStr::from_bytes(b"rank-\xff1.jsonl");
    std::fs::write(dir.join(odd), small)?;
    zstd_to(&dir.join("rank-2.Jsonl.ZST"), |w| w.write_all(small))?;
    std::fs::write(elsewhere.join("real.jsonl"), small)?;
    symlink("../rank-elsewhere/real.jsonl", dir.join("link-3.jsonl"))?;
    std::fs::write(sub.join("inner.jsonl"), small)?;
    std::fs::write(dir.join("notes.txt"), "not a trace\n")?;
    symlink("../nowhere/gone.jsonl", dir.join("dead.jsonl"))?;
    let traces = [
        "RANK-0.JSONL",
        "rank-\u{FFFD}1.jsonl",
        "rank-2.Jsonl.ZST",
        "link-3.jsonl",
    ];
    t.watch(&dir)?;
    t.watch(&elsewhere)?;
    let d = "inputs/ranks";
    let jobs = [
        job("rank directory", ["summary", d]),
        job("rank directory", ["summary", "--json", d]),
        job("rank directory", ["ops", d]),
        job("rank directory", ["ops", "--json", d]),
    ];
    let outs = cli.batch(&jobs);
    t.runs(&outs);
    for (i, o) in outs.iter().enumerate() {
        t.check(o, o.code == Some(0), || {
            format!("expected exit 0: {}", o.tail())
        });
        for skipped in ["notes.txt", "dead.jsonl"] {
            t.check(o, o.err_has("not read") && o.err_has(skipped), || {
                format!("no note naming the skipped {skipped}: {}", o.tail())
            });
        }
        t.check(
            o,
            !o.err_has("inner.jsonl") && !o.out_has("inner.jsonl"),
            || "a subdirectory's trace was read".into(),
        );
        if i % 2 == 1 {
            let sources: Vec<String> = serde_json::from_slice::<serde_json::Value>(&o.stdout)
                .ok()
                .and_then(|v| {
                    v["ranks"].as_array().map(|r| {
                        r.iter()
                            .filter_map(|x| x["source"].as_str().map(String::from))
                            .collect()
                    })
                })
                .unwrap_or_default();
            t.check(o, sources.len() == traces.len(), || {
                format!(
                    "{} ranks read, expected {}: {sources:?}",
                    sources.len(),
                    traces.len()
                )
            });
            for want in traces {
                t.check(o, sources.iter().any(|s| s.ends_with(want)), || {
                    format!("{want} was not read: {sources:?}")
                });
            }
        } else {
            // The text tables name ranks by position, not by file.
            let n = format!("{} rank(s)", traces.len());
            t.check(o, o.out_has(&n), || {
                format!("no {n:?} in the output: {}", o.tail())
            });
        }
    }
    Ok(())
}

/// (g): Parquet exports into datasets holding links.
fn parquet_links(cli: &Cli, inputs: &Path, small: &[u8], t: &mut Tally) -> Result<()> {
    use std::os::unix::fs::symlink;
    let run = inputs.join("pq-run");
    std::fs::create_dir_all(&run)?;
    std::fs::write(run.join("r0.jsonl"), small)?;
    std::fs::write(run.join("r1.jsonl"), small)?;
    t.watch(&run)?;
    let export = |case: &str, ds: &str| {
        job(
            case,
            [
                "export",
                "--format",
                "parquet",
                "--run",
                "job",
                "-o",
                ds,
                "inputs/pq-run",
            ],
        )
    };
    let refused = |t: &mut Tally, o: &Out, link: &str| {
        t.check(o, o.code_in(&[1, 3]), || {
            format!("expected exit 1: {}", o.tail())
        });
        t.check(o, o.err_has(link) && o.err_has("link"), || {
            format!("the error must name the link {link}: {}", o.tail())
        });
    };
    let out = cli.work.join("out");

    // run=job/rank=0 a link to another directory (holding a user's file).
    let case = "rank partition a symlink";
    let other = inputs.join("pq-elsewhere-1");
    std::fs::create_dir_all(&other)?;
    std::fs::write(other.join("keep.txt"), "a user's file\n")?;
    std::fs::create_dir_all(out.join("ds-rank/run=job"))?;
    symlink(&other, out.join("ds-rank/run=job/rank=0"))?;
    t.watch(&other)?;
    let before = snap(&other)?;
    let o = cli.batch(&[export(case, "out/ds-rank")]);
    t.runs(&o);
    refused(t, &o[0], "out/ds-rank/run=job/rank=0");
    let d = differences(&before, &snap(&other)?);
    t.check_files(case, d.is_empty(), || {
        format!("the link's target changed: {d:?}")
    });

    // run=job a link to an empty directory.
    let case = "run partition a symlink";
    let other = inputs.join("pq-elsewhere-2");
    std::fs::create_dir_all(&other)?;
    std::fs::create_dir_all(out.join("ds-run"))?;
    symlink(&other, out.join("ds-run/run=job"))?;
    t.watch(&other)?;
    let o = cli.batch(&[export(case, "out/ds-run")]);
    t.runs(&o);
    refused(t, &o[0], "out/ds-run/run=job");
    let left = std::fs::read_dir(&other)?.count();
    t.check_files(case, left == 0, || {
        format!("{left} entries written into the link's target")
    });

    // A table of an exported run replaced by a link to a user's file, then the run re-exported.
    let case = "table file a symlink";
    let user = inputs.join("pq-user.txt");
    std::fs::write(&user, "a user's file, not Parquet\n")?;
    t.watch(&user)?;
    let o = cli.batch(&[export(case, "out/ds-table")]);
    t.runs(&o);
    t.check(&o[0], o[0].code == Some(0), || {
        format!("the first export failed: {}", o[0].tail())
    });
    let part = out.join("ds-table/run=job");
    let table = part.join("rank=0/spans.parquet");
    if std::fs::symlink_metadata(&table).is_ok() {
        std::fs::remove_file(&table)?;
    }
    symlink(&user, &table)?;
    let before_user = std::fs::read(&user)?;
    let before = snap(&part)?;
    let o = cli.batch(&[export(case, "out/ds-table")]);
    t.runs(&o);
    refused(t, &o[0], "spans.parquet");
    t.check_files(case, std::fs::read(&user)? == before_user, || {
        "the user's file behind the link changed".into()
    });
    let d = differences(&before, &snap(&part)?);
    t.check_files(case, d.is_empty(), || {
        format!("the old partition is not intact after the failed export: {d:?}")
    });
    Ok(())
}

/// Runs the CLI pass: builds `tracegraph` (unless `bin` names one), writes the corpus under
/// `dir/cli`, runs it.
pub(crate) fn pass(
    root: &Path,
    dir: &Path,
    seeds: &[(String, Vec<u8>)],
    bin: Option<PathBuf>,
) -> Result<()> {
    let started = Instant::now();
    let bin = if let Some(b) = bin {
        std::path::absolute(&b).with_context(|| format!("--tracegraph {}", b.display()))?
    } else {
        let target =
            std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
        let mut build = crate::cargo();
        build.args(["build", "-p", "tracegraph"]);
        crate::run(build)?;
        target.join("debug").join("tracegraph")
    };
    let kind = bin.display().to_string();
    let cache = dir.join("cli-cache");
    let work = dir.join("cli");
    // The folder is this pass's own: what an earlier run left there goes (links are removed,
    // never followed).
    if std::fs::symlink_metadata(&work).is_ok() {
        std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    for d in [
        &cache,
        &work.join("inputs"),
        &work.join("out"),
        &work.join("logs"),
    ] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let cli = Cli {
        bin,
        logs: work.join("logs"),
        work: work.clone(),
        next_log: AtomicUsize::new(0),
    };
    let inputs = work.join("inputs");
    let small = std::fs::read(root.join("crates/testkit/data/small.jsonl"))
        .context("reading crates/testkit/data/small.jsonl")?;
    std::fs::write(inputs.join("small.jsonl"), &small)?;
    let small_text = String::from_utf8(small.clone()).context("small.jsonl is not UTF-8")?;

    let mut t = Tally::default();
    t.watch(&inputs.join("small.jsonl"))?;
    let sizes = bombs(&cli, &cache, &mut t)?;
    let n_seeds = trailing(&cli, &inputs, seeds, &mut t)?;
    foreign(&cli, &inputs, &small, &mut t)?;
    strict_gaps(&cli, &inputs, &small_text, &mut t)?;
    rank_dir(&cli, &inputs, &small, &mut t)?;
    parquet_links(&cli, &inputs, &small, &mut t)?;
    // Every input as it was written, before the runs that read it.
    let mut now = Snapshot::new();
    for p in t.inputs.keys() {
        now.insert(p.clone(), entry(p));
    }
    let changed = differences(&t.inputs, &now);
    t.check_files("inputs", changed.is_empty(), || {
        format!("inputs changed by the runs: {changed:?}")
    });
    let files = t
        .inputs
        .values()
        .filter(|e| matches!(e, Entry::File(_)))
        .count();

    if !t.findings.is_empty() {
        let shown: Vec<&String> = t.findings.iter().take(30).collect();
        bail!(
            "xtask fuzz: cli: {} finding(s) in {} runs (inputs kept under {}):\n  {}",
            t.findings.len(),
            t.runs,
            work.display(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    }
    println!(
        "xtask fuzz: cli: {} runs of {kind} in {:.0} s, each under a {} GiB \
         address-space cap and {} s: {} expectations checked, 0 findings; bombs (200 MB each, \
         zstd -3): {sizes}; {n_seeds} seeds with trailing bytes, {} foreign formats, rank \
         directory, Parquet links; {files} input files unchanged; slowest run {} ms",
        t.runs,
        started.elapsed().as_secs_f64(),
        AS_CAP_KIB >> 20,
        RUN_LIMIT.as_secs(),
        t.checks,
        FOREIGN.len(),
        t.slowest.as_millis()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidi_controls_and_runs_are_found() {
        assert!(has_bidi("a\u{202E}b".as_bytes()));
        assert!(has_bidi("\u{2066}".as_bytes()));
        assert!(!has_bidi(b"a\\u202e \\u{202e}"));
        assert_eq!(longest_run(b"xAAAyAAAAAz", b'A'), 5);
        assert_eq!(longest_run(b"", b'A'), 0);
    }

    #[test]
    fn an_inserted_line_is_line_six_under_the_header_asked_for() {
        let base = "{\"version\":1}\n1\n2\n3\n4\n5\n6\n";
        let out = with_line(base, 2, Some("X"));
        assert_eq!(with_line(base, 1, None), base);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "{\"version\":2}");
        assert_eq!(lines[5], "X");
        assert_eq!(lines.len(), 8);
    }

    #[test]
    fn snapshots_see_changed_removed_and_added_files() {
        let d = std::env::temp_dir().join(format!("xtask-fuzz-cli-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        std::fs::write(d.join("a"), "1").expect("a");
        std::fs::write(d.join("b"), "2").expect("b");
        let before = snap(&d).expect("snap");
        assert!(differences(&before, &snap(&d).expect("snap")).is_empty());
        std::fs::write(d.join("a"), "x").expect("a");
        std::fs::remove_file(d.join("b")).expect("b");
        std::fs::write(d.join("c"), "3").expect("c");
        let mut diff = differences(&before, &snap(&d).expect("snap"));
        diff.sort();
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(diff.len(), 3, "{diff:?}");
        assert!(diff[0].ends_with("a changed") && diff[1].ends_with("b removed"));
        assert!(diff[2].ends_with("c added"));
    }
}
