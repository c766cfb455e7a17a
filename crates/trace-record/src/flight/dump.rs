//! Writing dumps: the consistent cut of the ring's lines and the background dump thread.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::FlightStats;
use super::ring::Block;
use crate::encode;
use crate::json::LineBuf;
use crate::schema::{DumpRecord, EventCounts, EventType, Outcome, Trailer};

/// One dump to write.
pub(crate) struct Job {
    /// The final file name (without a collision suffix).
    pub(crate) name: String,
    /// The session's header line.
    pub(crate) header: Arc<[u8]>,
    pub(crate) record: DumpRecord,
    /// The `frame` and `stack` lines of the run so far.
    pub(crate) interned: Vec<u8>,
    /// The steps, oldest first.
    pub(crate) blocks: Vec<Block>,
    /// The `step` line that ended the last step: (index, ts), when it was written.
    pub(crate) boundary: Option<(u64, u64)>,
}

/// The dump thread: writes jobs in order, reports into the shared stats.
pub(crate) struct Writer {
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    pub(crate) stats: Arc<Mutex<FlightStats>>,
}

impl Writer {
    pub(crate) fn start(dir: PathBuf) -> io::Result<Writer> {
        let (tx, rx) = channel::<Job>();
        let stats = Arc::new(Mutex::new(FlightStats::default()));
        let shared = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("trace-record-dump".into())
            .spawn(move || run(&dir, &rx, &shared))?;
        Ok(Writer {
            tx: Some(tx),
            thread: Some(thread),
            stats,
        })
    }

    /// Queues a dump (counted as pending until written).
    pub(crate) fn send(&self, job: Job) {
        let Some(tx) = &self.tx else { return };
        lock(&self.stats).pending += 1;
        if tx.send(job).is_err() {
            let mut s = lock(&self.stats);
            s.pending -= 1;
            s.failed += 1;
            s.first_error
                .get_or_insert_with(|| "the dump thread is gone".to_string());
        }
    }

    /// Waits until every queued dump is written and stops the thread.
    pub(crate) fn join(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            // The thread never panics on purpose; a panic was reported already.
            let _ = t.join();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.join();
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn run(dir: &Path, rx: &Receiver<Job>, stats: &Mutex<FlightStats>) {
    while let Ok(job) = rx.recv() {
        let result = write_dump(dir, &job);
        let mut s = lock(stats);
        s.pending = s.pending.saturating_sub(1);
        match result {
            Ok((path, bytes)) => {
                s.dumps.push(path);
                s.dump_bytes += bytes;
            }
            Err((path, e)) => {
                s.failed += 1;
                s.first_error
                    .get_or_insert_with(|| format!("dump {}: {e}", path.display()));
            }
        }
    }
}

/// Writes `job` under a hidden temporary name in `dir`, then links it to its final name
/// (never replacing a file: a taken name gets `-2`, `-3`, ...) and removes the temporary
/// name. A process killed meanwhile leaves at most the hidden temporary file.
fn write_dump(dir: &Path, job: &Job) -> Result<(PathBuf, u64), (PathBuf, io::Error)> {
    let tmp = dir.join(format!(".{}.{}.tmp", job.name, std::process::id()));
    let bytes = cut(job);
    let written = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_data()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err((tmp, e));
    }
    let (stem, ext) = job
        .name
        .strip_suffix(".jsonl")
        .map_or((job.name.as_str(), ""), |s| (s, ".jsonl"));
    for n in 1..=1000u32 {
        let path = if n == 1 {
            dir.join(&job.name)
        } else {
            dir.join(format!("{stem}-{n}{ext}"))
        };
        match fs::hard_link(&tmp, &path) {
            Ok(()) => {
                let _ = fs::remove_file(&tmp);
                return Ok((path, bytes.len() as u64));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err((path, e));
            }
        }
    }
    let _ = fs::remove_file(&tmp);
    Err((
        dir.join(&job.name),
        io::Error::other("1000 dumps of this name exist already"),
    ))
}

/// A line's `type`, as this crate writes it (first key).
fn tag(line: &[u8]) -> &[u8] {
    let Some(rest) = line.strip_prefix(b"{\"type\":\"") else {
        return b"";
    };
    let end = rest.iter().position(|&b| b == b'"').unwrap_or(0);
    &rest[..end]
}

/// Where `,"key":` starts in `line` and the integer after it. A `,"` never occurs inside a
/// JSON string (a quote there is escaped), so the match is a key of the line's object.
fn field(line: &[u8], key: &[u8]) -> Option<(usize, usize, u64)> {
    let at = line.windows(key.len()).position(|w| w == key)?;
    let start = at + key.len();
    let digits = line[start..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let value = std::str::from_utf8(&line[start..start + digits])
        .ok()?
        .parse()
        .ok()?;
    Some((at, start + digits, value))
}

/// What the cut keeps of the dump's lines (see the module docs of `flight`).
struct Cut {
    first_step: u64,
    /// Spans both started and ended in the dump.
    kept_spans: HashSet<u64>,
    live: HashSet<u64>,
    heap_live: HashSet<u64>,
    counts: EventCounts,
    cut_lines: u64,
}

impl Cut {
    /// Appends `line` to `out` as the cut keeps it (maybe without a span reference), or not.
    fn line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let ty = tag(line);
        let keep = match ty {
            b"span_start" | b"span_end" => {
                field(line, b",\"id\":").is_some_and(|(_, _, id)| self.kept_spans.contains(&id))
            }
            b"memory" => match field(line, b",\"storage\":") {
                Some((_, _, storage))
                    if line.starts_with(b"{\"type\":\"memory\",\"action\":\"free\"") =>
                {
                    self.live.remove(&storage)
                }
                Some((_, _, storage)) => {
                    self.live.insert(storage);
                    true
                }
                None => true,
            },
            b"heap_alloc" => {
                if let Some((_, _, id)) = field(line, b",\"id\":") {
                    self.heap_live.insert(id);
                }
                true
            }
            b"heap_free" => {
                field(line, b",\"id\":").is_some_and(|(_, _, id)| self.heap_live.remove(&id))
            }
            b"samples" | b"sampler" | b"heap_small" | b"heap_account" => {
                field(line, b",\"step\":").is_none_or(|(_, _, s)| s >= self.first_step)
            }
            _ => true,
        };
        if !keep {
            self.cut_lines += 1;
            return;
        }
        let start = out.len();
        out.extend_from_slice(line);
        // A reference to a span not in the dump is removed (the event reads as the root).
        for key in [&b",\"parent\":"[..], b",\"span\":"] {
            if let Some((at, end, id)) = field(&out[start..], key)
                && !self.kept_spans.contains(&id)
            {
                out.drain(start + at..start + end);
                self.cut_lines += 1;
            }
        }
        if let Some(t) = std::str::from_utf8(ty)
            .ok()
            .and_then(|t| t.parse::<EventType>().ok())
        {
            self.counts.add(t, 1);
        }
    }
}

/// Appends the `dump` line (with its trailing `\n`) to `out`.
pub(crate) fn encode_dump(record: &DumpRecord, out: &mut Vec<u8>) {
    #[derive(serde::Serialize)]
    struct Tagged<'a> {
        #[serde(rename = "type")]
        ty: &'static str,
        #[serde(flatten)]
        record: &'a DumpRecord,
    }
    // Serializing strings, integers and finite floats into a Vec cannot fail.
    if serde_json::to_writer(&mut *out, &Tagged { ty: "dump", record }).is_ok() {
        out.push(b'\n');
    }
}

fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes
        .split_inclusive(|&b| b == b'\n')
        .filter(|l| l.ends_with(b"\n"))
}

/// The dump's bytes: header, dump record, interned lines, the steps' lines as the cut keeps
/// them, the boundary after the last step, trailer.
fn cut(job: &Job) -> Vec<u8> {
    let mut started = HashSet::new();
    let mut ended = HashSet::new();
    for b in &job.blocks {
        for l in lines(&b.bytes) {
            let set = match tag(l) {
                b"span_start" => &mut started,
                b"span_end" => &mut ended,
                _ => continue,
            };
            if let Some((_, _, id)) = field(l, b",\"id\":") {
                set.insert(id);
            }
        }
    }
    let kept_spans = started.intersection(&ended).copied().collect();
    drop((started, ended));
    let mut c = Cut {
        first_step: job.record.first_step,
        kept_spans,
        live: HashSet::new(),
        heap_live: HashSet::new(),
        counts: EventCounts::default(),
        cut_lines: 0,
    };
    let total: usize = job.blocks.iter().map(|b| b.bytes.len()).sum();
    let mut body = Vec::with_capacity(total + job.interned.len() + 256);
    for l in lines(&job.interned) {
        c.line(l, &mut body);
    }
    for b in &job.blocks {
        for l in lines(&b.bytes) {
            c.line(l, &mut body);
        }
    }
    let mut last_ts = job.blocks.last().map_or(0, |b| b.end_ns);
    if let Some((index, ts)) = job.boundary {
        let mut step = LineBuf::default();
        encode::step(&mut step, index, ts);
        body.extend_from_slice(step.bytes());
        c.counts.add(EventType::Step, 1);
        last_ts = last_ts.max(ts);
    }
    let mut record = job.record.clone();
    record.cut_lines = c.cut_lines;
    let mut out = Vec::with_capacity(body.len() + job.header.len() + 1024);
    out.extend_from_slice(&job.header);
    encode_dump(&record, &mut out);
    out.extend_from_slice(&body);
    encode::encode_trailer(
        &Trailer {
            outcome: Outcome::Complete,
            counts: c.counts,
            dropped: 0,
            ts: last_ts,
        },
        &mut out,
    );
    out
}
