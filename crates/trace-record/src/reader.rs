//! The streaming trace reader: header, events with line numbers, trailer, typed errors.
//!
//! [`TraceReader`] reads a trace line by line into owned [`Event`]s. It accepts schema
//! versions [`MIN_SCHEMA_VERSION`]..=[`SCHEMA_VERSION`]. A file without a trailer (a crash,
//! `kill -9`) reads to its last complete line and is reported incomplete; a trailing partial
//! line is reported ([`TraceReader::partial_line`]), not fatal. In [`ReadMode::Lenient`]
//! unknown event types are skipped and counted; [`ReadMode::Strict`] rejects them.
//!
//! [`TraceReader::open`] reads zstd-compressed traces too (see [`TraceInput`]); a reader
//! built with [`TraceReader::new`] reads the bytes it is given (wrap them in a [`TraceInput`]
//! to accept both).
//!
//! Devices omitted on the wire (equal to the header's device) are filled back in.
//!
//! ```
//! use trace_record::{ReadOptions, TraceReader};
//! let text = concat!(
//!     r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"r","#,
//!     r#""entrypoint":"e","phase":"infer","device":"cpu","timing":"host","start_unix_ns":0,"pid":1}}"#,
//!     "\n",
//!     r#"{"type":"step","index":1,"ts":20}"#,
//!     "\n",
//! );
//! let mut reader = TraceReader::new(text.as_bytes(), ReadOptions::default()).unwrap();
//! let first = reader.next_event().unwrap().unwrap();
//! assert_eq!(first.line, 2);
//! assert!(reader.next_event().unwrap().is_none());
//! assert!(reader.is_incomplete()); // no trailer
//! ```

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};

use std::path::Path;

use crate::fast::{PLACEHOLDER, Spare, put};
use crate::input::TraceInput;

use serde::de::DeserializeOwned;

use crate::schema::{
    DumpRecord, Event, EventCounts, EventType, Header, MIN_SCHEMA_VERSION, OUT_BYTES_UNSET,
    Outcome, OutcomeKind, SCHEMA_NAME, SCHEMA_VERSION, Trailer, logical_bytes, shown, shown_up_to,
};

pub use crate::input::MAX_LINE_BYTES;

/// The UTF-8 byte order mark, accepted (and ignored) before the header.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Errors reading a trace.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Reading the file failed.
    #[error("reading trace: {0}")]
    Io(#[from] io::Error),
    /// A line is not valid JSON.
    #[error("line {line}, column {column}: invalid JSON: {message}")]
    Syntax {
        /// 1-based line number.
        line: u64,
        /// 1-based column (byte) in the line.
        column: u64,
        /// What the parser said.
        message: String,
    },
    /// A line is JSON but does not match the schema.
    #[error("line {line}, field `{field}`: {message}")]
    Schema {
        /// 1-based line number.
        line: u64,
        /// The offending field (`type` for an unknown or misplaced line).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The header's schema version is not one this reader accepts.
    #[error(
        "unsupported trace schema version {found} (supported: {min_supported}..={max_supported})"
    )]
    UnsupportedVersion {
        /// The version in the header.
        found: u64,
        /// The oldest version accepted.
        min_supported: u32,
        /// The newest version accepted.
        max_supported: u32,
    },
}

/// How to treat unknown event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// Skip and count unknown event types (forward compatibility).
    #[default]
    Lenient,
    /// Reject unknown event types with a schema error.
    Strict,
}

/// Reader options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadOptions {
    /// Lenient or strict.
    pub mode: ReadMode,
}

impl ReadOptions {
    /// Strict options.
    pub fn strict() -> Self {
        ReadOptions {
            mode: ReadMode::Strict,
        }
    }
}

/// One event with the 1-based line it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct LineEvent {
    /// 1-based line number.
    pub line: u64,
    /// The event.
    pub event: Event,
}

/// A streaming reader over one trace.
#[derive(Debug)]
pub struct TraceReader<R> {
    src: R,
    buf: Vec<u8>,
    line: u64,
    header: Header,
    trailer: Option<Trailer>,
    /// The `dump` line of a flight-recorder dump, once read.
    dump: Option<DumpRecord>,
    partial: Option<u64>,
    skipped: u64,
    mode: ReadMode,
    done: bool,
}

impl TraceReader<TraceInput<BufReader<File>>> {
    /// Opens the trace at `path` and reads its header. A zstd-compressed trace (by content,
    /// whatever its name) is decompressed as it is read ([`TraceInput`]).
    pub fn open(path: impl AsRef<Path>, options: ReadOptions) -> Result<Self, ReadError> {
        Self::new(TraceInput::open(path)?, options)
    }
}

impl<R: BufRead> TraceReader<R> {
    /// Reads the header from `src`.
    pub fn new(src: R, options: ReadOptions) -> Result<Self, ReadError> {
        let mut r = TraceReader {
            src,
            buf: Vec::with_capacity(4096),
            line: 0,
            header: Header {
                schema: String::new(),
                version: 0,
                run: crate::schema::RunMeta {
                    run_id: String::new(),
                    entrypoint: String::new(),
                    phase: crate::schema::Phase::Infer,
                    device: String::new(),
                    timing: crate::schema::TimingMode::Host,
                    start_unix_ns: 0,
                    pid: 0,
                    rank: None,
                    world_size: None,
                    schedule: None,
                    tags: Default::default(),
                    versions: Default::default(),
                },
            },
            trailer: None,
            dump: None,
            partial: None,
            skipped: 0,
            mode: options.mode,
            done: false,
        };
        let complete = r.fill_line()?;
        // A UTF-8 byte order mark (some editors write one) is not part of the header.
        if r.buf.starts_with(UTF8_BOM) {
            r.buf.drain(..UTF8_BOM.len());
        }
        if r.line == 0 || !complete && r.buf.is_empty() {
            return Err(schema_err(1, "type", "empty trace: no header line".into()));
        }
        r.header = parse_header(&r.buf)?;
        Ok(r)
    }

    /// The header (line 1).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The trailer, once read (after the last event).
    pub fn trailer(&self) -> Option<&Trailer> {
        self.trailer.as_ref()
    }

    /// The `dump` line of a flight-recorder dump (line 2 of a dump, read with the first
    /// event after it), naming its trigger, evidence and steps; `None` for an ordinary trace.
    pub fn dump(&self) -> Option<&DumpRecord> {
        self.dump.as_ref()
    }

    /// After the last event: true when there is no trailer or its outcome is `incomplete`.
    pub fn is_incomplete(&self) -> bool {
        match &self.trailer {
            None => true,
            Some(t) => t.outcome == Outcome::Incomplete,
        }
    }

    /// The line number of a trailing partial line (no newline, not valid JSON), if any.
    pub fn partial_line(&self) -> Option<u64> {
        self.partial
    }

    /// Lines with unknown event types skipped so far (lenient mode).
    pub fn skipped_unknown(&self) -> u64 {
        self.skipped
    }

    /// Lines read so far (the header included).
    pub fn lines_read(&self) -> u64 {
        self.line
    }

    /// The source being read (say, a [`TraceInput`], to ask whether it was compressed).
    pub fn get_ref(&self) -> &R {
        &self.src
    }

    /// Reads the next line into `buf` (without its newline). Returns whether the line was
    /// terminated by a newline; `line` is not advanced at end of input.
    fn fill_line(&mut self) -> Result<bool, ReadError> {
        self.buf.clear();
        let limit = MAX_LINE_BYTES as u64 + 1;
        let n = (&mut self.src)
            .take(limit)
            .read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            return Ok(false);
        }
        self.line += 1;
        let complete = self.buf.last() == Some(&b'\n');
        if !complete && self.buf.len() > MAX_LINE_BYTES {
            self.buf.clear();
            self.done = true;
            return Err(ReadError::Syntax {
                line: self.line,
                column: limit,
                message: format!("line longer than {MAX_LINE_BYTES} bytes"),
            });
        }
        if complete {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
        }
        Ok(complete)
    }

    /// The next event, `None` at the end (trailer or end of input).
    pub fn next_event(&mut self) -> Result<Option<LineEvent>, ReadError> {
        self.next_with(|line, event| LineEvent { line, event })
    }

    /// Reads the next event and hands it, with its line, to `f` (which may keep or drop it);
    /// `None` at the end. Cheaper than [`next_event`](Self::next_event) when the event is
    /// only inspected: it is not moved through the return value.
    #[inline]
    pub fn next_with<T>(
        &mut self,
        f: impl FnOnce(u64, Event) -> T,
    ) -> Result<Option<T>, ReadError> {
        let mut slot = PLACEHOLDER;
        Ok(self
            .next_into(&mut slot, &mut Spare::default())?
            .map(|line| f(line, slot)))
    }

    /// Calls `f` on every remaining event, in file order, on this thread, reading each into
    /// the memory of the one before (nothing is allocated per event in steady state).
    pub(crate) fn for_each_in_place(
        &mut self,
        mut f: impl FnMut(u64, &Event),
    ) -> Result<(), ReadError> {
        let mut slot = PLACEHOLDER;
        let mut spare = Spare::default();
        while let Some(line) = self.next_into(&mut slot, &mut spare)? {
            f(line, &slot);
        }
        Ok(())
    }

    /// Reads the next event into `slot`, reusing the memory of the event it holds (and of
    /// `spare`'s); returns its line, `None` at the end (then `slot` holds an unspecified
    /// event).
    #[inline]
    pub(crate) fn next_into(
        &mut self,
        slot: &mut Event,
        spare: &mut Spare,
    ) -> Result<Option<u64>, ReadError> {
        loop {
            if self.done {
                return Ok(None);
            }
            // A whole line inside the reader's buffer is parsed in place (no copy); a line
            // that spans buffers, or a last line without a newline, goes through `buf`.
            let avail = self.src.fill_buf()?;
            let (parsed, complete) = if let Some(pos) = memchr::memchr(b'\n', avail) {
                let l = trim_cr(&avail[..pos]);
                self.line += 1;
                let parsed = if l.iter().all(u8::is_ascii_whitespace) {
                    None
                } else if self.trailer.is_some() {
                    Some(Err(after_trailer(self.line)))
                } else {
                    Some(parse_line(l, self.line, self.mode, slot, spare))
                };
                self.src.consume(pos + 1);
                (parsed, true)
            } else {
                let complete = self.fill_line()?;
                if !complete && self.buf.is_empty() {
                    self.done = true;
                    return Ok(None);
                }
                let parsed = if self.buf.iter().all(u8::is_ascii_whitespace) {
                    None
                } else if self.trailer.is_some() {
                    Some(Err(after_trailer(self.line)))
                } else {
                    Some(parse_line(&self.buf, self.line, self.mode, slot, spare))
                };
                (parsed, complete)
            };
            let Some(parsed) = parsed else { continue };
            let line = self.line;
            let parsed = match parsed {
                Err(_) if !complete => {
                    // A truncated last line (crash mid-write): reported, not fatal.
                    self.partial = Some(line);
                    self.done = true;
                    return Ok(None);
                }
                other => other?,
            };
            if !complete {
                self.done = true;
            }
            match parsed {
                Parsed::Event => {
                    let ty = slot.event_type();
                    if self.mode == ReadMode::Strict && ty.since_version() > self.header.version {
                        return Err(schema_err(
                            line,
                            "type",
                            format!(
                                "`{ty}` lines are schema version {}, but the header states \
                                 version {}",
                                ty.since_version(),
                                self.header.version
                            ),
                        ));
                    }
                    if !fill_device(slot, &self.header.run.device, spare) {
                        return Err(schema_err(
                            line,
                            "out_b",
                            "missing field `out_b` (required when `shape` × `dtype` has no \
                             known size)"
                                .into(),
                        ));
                    }
                    return Ok(Some(line));
                }
                Parsed::Trailer(t) => {
                    self.trailer = Some(t);
                }
                Parsed::Header => {
                    return Err(schema_err(line, "type", "a second header".into()));
                }
                Parsed::Dump(d) => {
                    if self.dump.is_some() {
                        return Err(schema_err(line, "type", "a second dump line".into()));
                    }
                    if line != 2 && self.mode == ReadMode::Strict {
                        return Err(schema_err(
                            line,
                            "type",
                            "a dump line is line 2 (right after the header)".into(),
                        ));
                    }
                    self.dump = Some(*d);
                }
                Parsed::Unknown => self.skipped += 1,
            }
        }
    }
}

fn trim_cr(l: &[u8]) -> &[u8] {
    l.strip_suffix(b"\r").unwrap_or(l)
}

fn after_trailer(line: u64) -> ReadError {
    schema_err(line, "type", "a line after the trailer".into())
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<LineEvent, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_event() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => None,
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// A whole trace read into memory.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedTrace {
    /// The header.
    pub header: Header,
    /// Every event with its line.
    pub events: Vec<LineEvent>,
    /// The trailer, when present.
    pub trailer: Option<Trailer>,
    /// No trailer, or a trailer with outcome `incomplete`.
    pub incomplete: bool,
    /// The line number of a trailing partial line, if any.
    pub partial_line: Option<u64>,
    /// Unknown event types skipped (lenient mode).
    pub skipped_unknown: u64,
    /// The `dump` line of a flight-recorder dump; `None` for an ordinary trace.
    pub dump: Option<DumpRecord>,
}

impl ParsedTrace {
    /// Reads every event from `reader`.
    pub fn from_reader<R: BufRead>(mut reader: TraceReader<R>) -> Result<ParsedTrace, ReadError> {
        let mut events = Vec::new();
        while let Some(e) = reader.next_event()? {
            events.push(e);
        }
        Ok(ParsedTrace {
            incomplete: reader.is_incomplete(),
            partial_line: reader.partial,
            skipped_unknown: reader.skipped,
            trailer: reader.trailer,
            dump: reader.dump,
            header: reader.header,
            events,
        })
    }
}

/// Reads the whole trace at `path` (lenient mode).
pub fn read_trace(path: impl AsRef<Path>) -> Result<ParsedTrace, ReadError> {
    ParsedTrace::from_reader(TraceReader::open(path, ReadOptions::default())?)
}

/// Reads a whole trace from bytes (lenient mode).
pub fn read_trace_bytes(bytes: &[u8]) -> Result<ParsedTrace, ReadError> {
    ParsedTrace::from_reader(TraceReader::new(bytes, ReadOptions::default())?)
}

/// Fills what the writer omits: the header's device and derivable output bytes. False when
/// an op omits `out_b` but its size cannot be derived (unknown dtype or overflow): the
/// writer never does that, and a made-up zero would pass for evidence.
#[must_use]
fn fill_device(event: &mut Event, device: &str, spare: &mut Spare) -> bool {
    let d = match event {
        Event::Op(e) => {
            if e.out_bytes == OUT_BYTES_UNSET {
                match logical_bytes(&e.shape, &e.dtype) {
                    Some(b) => e.out_bytes = b,
                    None => return false,
                }
            }
            // `in_dtypes` is omitted when every input has the op's dtype.
            if let (Some(shapes), None) = (&e.in_shapes, &e.in_dtypes) {
                e.in_dtypes = Some(spare.dtypes(&e.dtype, shapes.len()));
            }
            &mut e.device
        }
        Event::Tensor(e) => &mut e.device,
        Event::Memory(e) => &mut e.device,
        _ => return true,
    };
    if d.is_empty() {
        d.push_str(device);
    }
    true
}

fn schema_err(line: u64, field: &str, message: String) -> ReadError {
    ReadError::Schema {
        line,
        field: field.to_string(),
        message,
    }
}

/// What a line held; for an event, it is in the slot the line was parsed into.
enum Parsed {
    Event,
    Trailer(Trailer),
    Header,
    Dump(Box<DumpRecord>),
    Unknown,
}

/// The value of a leading `{"type":"..."` as written by this crate, if the line starts so.
fn fast_tag(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(b"{\"type\":\"")?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    (rest[end] == b'"').then_some(&rest[..end])
}

/// What a line holds when its first value is not a JSON object (`a string`, `an array`, ...),
/// read from its first non-blank byte; `None` for an object or an empty line.
fn not_an_object(line: &[u8]) -> Option<&'static str> {
    let first = line.iter().find(|b| !b.is_ascii_whitespace())?;
    Some(match first {
        b'{' => return None,
        b'"' => "a string",
        b'[' => "an array",
        b't' | b'f' => "a boolean",
        b'n' => "null",
        b'-' | b'0'..=b'9' => "a number",
        _ => return None,
    })
}

/// Keys whose value may be `null` on the wire: a counter's non-finite `value`.
const NULL_KEYS: &[&[u8]] = &[b"value"];

/// The first key (shown safely) of `line`, a JSON object that parsed, whose value is `null`
/// although the schema has no null there ([`NULL_KEYS`]); `None` when there is none. Serde
/// reads `null` as an absent optional field, but the format omits absent fields, so strict
/// reading rejects it. Linear in the line; lines without `null` are not scanned.
fn null_value(line: &[u8]) -> Option<String> {
    memchr::memmem::find(line, b"null")?;
    let mut i = 0;
    // The byte range of the last string read, and whether a `:` followed it (a key).
    let mut key: Option<(usize, usize)> = None;
    while i < line.len() {
        match line[i] {
            b'"' => {
                let (range, is_key, next) = json_string(line, i);
                if is_key {
                    key = Some(range);
                }
                i = next;
            }
            b'n' if line[i..].starts_with(b"null") => {
                if let Some((a, b)) = key
                    && !NULL_KEYS.contains(&&line[a..b])
                {
                    return Some(shown(&String::from_utf8_lossy(&line[a..b])));
                }
                i += 4;
            }
            _ => i += 1,
        }
    }
    None
}

/// The JSON string whose opening quote is at byte `quote` of `line`: the byte range of its
/// content (escapes skipped over, cut at the line's end when unterminated), whether a `:`
/// follows it (an object key), and the byte after its closing quote.
fn json_string(line: &[u8], quote: usize) -> ((usize, usize), bool, usize) {
    let start = quote + 1;
    let mut j = start;
    while j < line.len() && line[j] != b'"' {
        j += if line[j] == b'\\' { 2 } else { 1 };
    }
    let mut k = j + 1;
    while k < line.len() && line[k].is_ascii_whitespace() {
        k += 1;
    }
    (
        (start, j.min(line.len())),
        line.get(k) == Some(&b':'),
        j + 1,
    )
}

/// Only the `type` of a line, for lines whose keys are not in this crate's order.
#[derive(serde::Deserialize)]
struct TagOnly {
    #[serde(rename = "type")]
    ty: Option<String>,
}

/// The trailer as written (`outcome` and `reason` side by side), parsed without
/// `#[serde(flatten)]` so errors keep their column.
#[derive(serde::Deserialize)]
struct RawTrailer {
    outcome: OutcomeKind,
    #[serde(default)]
    reason: Option<String>,
    counts: EventCounts,
    dropped: u64,
    ts: u64,
}

fn parse_trailer(line: &[u8], no: u64) -> Result<Trailer, ReadError> {
    let raw: RawTrailer = from_slice_at(line, no)?;
    let outcome = match raw.outcome {
        OutcomeKind::Complete => Outcome::Complete,
        OutcomeKind::Incomplete => Outcome::Incomplete,
        OutcomeKind::Failed => Outcome::Failed {
            reason: raw
                .reason
                .ok_or_else(|| schema_err(no, "reason", "missing field `reason`".into()))?,
        },
    };
    Ok(Trailer {
        outcome,
        counts: raw.counts,
        dropped: raw.dropped,
        ts: raw.ts,
    })
}

/// Parses `line` (line `no`); an event goes into `slot` (see [`crate::fast::parse_into`]).
fn parse_line(
    line: &[u8],
    no: u64,
    mode: ReadMode,
    slot: &mut Event,
    spare: &mut Spare,
) -> Result<Parsed, ReadError> {
    if crate::fast::parse_into(line, slot, spare).is_some() {
        return Ok(Parsed::Event);
    }
    let slow;
    let tag = if let Some(tag) = fast_tag(line) {
        tag
    } else {
        // Any key order: find the tag first; struct fields are order-independent.
        if let Some(found) = not_an_object(line) {
            // Valid JSON of another kind (`"hello"`, `[1,2]`, `555`) is named as such; a
            // damaged line keeps its syntax error and column.
            from_slice_at::<serde::de::IgnoredAny>(line, no)?;
            return Err(schema_err(
                no,
                "type",
                format!("expected a JSON object with a \"type\" field, found {found}"),
            ));
        }
        let t: TagOnly = from_slice_at(line, no)?;
        slow =
            t.ty.ok_or_else(|| schema_err(no, "type", "missing field `type`".into()))?;
        slow.as_bytes()
    };
    let Some(ty) = EventType::from_wire(tag) else {
        return match tag {
            b"trailer" => parse_trailer(line, no).map(Parsed::Trailer),
            b"header" => Ok(Parsed::Header),
            b"dump" => from_slice_at(line, no).map(|d| Parsed::Dump(Box::new(d))),
            _ => {
                // Only a whole JSON line is an event of an unknown type: a damaged line that
                // merely starts like one (`{"type":"memoryb,...`) is a syntax error.
                // JSON text is UTF-8, and skipping a string does not check it.
                if let Err(e) = std::str::from_utf8(line) {
                    return Err(ReadError::Syntax {
                        line: no,
                        column: e.valid_up_to() as u64 + 1,
                        message: "invalid UTF-8".into(),
                    });
                }
                from_slice_at::<serde::de::IgnoredAny>(line, no)?;
                if mode == ReadMode::Lenient {
                    Ok(Parsed::Unknown)
                } else {
                    Err(schema_err(
                        no,
                        "type",
                        format!(
                            "unknown event type `{}`",
                            shown(&String::from_utf8_lossy(tag))
                        ),
                    ))
                }
            }
        };
    };
    let event = match ty {
        EventType::SpanStart => Event::SpanStart(from_slice_at(line, no)?),
        EventType::SpanEnd => Event::SpanEnd(from_slice_at(line, no)?),
        EventType::Op => Event::Op(from_slice_at(line, no)?),
        EventType::Tensor => Event::Tensor(from_slice_at(line, no)?),
        EventType::Memory => Event::Memory(from_slice_at(line, no)?),
        EventType::DeviceMemory => Event::DeviceMemory(from_slice_at(line, no)?),
        EventType::Gradient => Event::Gradient(from_slice_at(line, no)?),
        EventType::Step => Event::Step(from_slice_at(line, no)?),
        EventType::Marker => Event::Marker(from_slice_at(line, no)?),
        EventType::Counter => Event::Counter(from_slice_at(line, no)?),
        EventType::Frame => Event::Frame(from_slice_at(line, no)?),
        EventType::Stack => Event::Stack(from_slice_at(line, no)?),
        EventType::Samples => Event::Samples(from_slice_at(line, no)?),
        EventType::Sampler => Event::Sampler(from_slice_at(line, no)?),
        EventType::HeapAlloc => Event::HeapAlloc(from_slice_at(line, no)?),
        EventType::HeapFree => Event::HeapFree(from_slice_at(line, no)?),
        EventType::HeapSmall => Event::HeapSmall(from_slice_at(line, no)?),
        EventType::HeapAccount => Event::HeapAccount(from_slice_at(line, no)?),
        EventType::Module => Event::Module(from_slice_at(line, no)?),
        EventType::RawStack => Event::RawStack(from_slice_at(line, no)?),
    };
    if mode == ReadMode::Strict
        && let Some(key) = null_value(line)
    {
        return Err(schema_err(
            no,
            &key,
            "null is not a value here: an optional field is omitted when absent".into(),
        ));
    }
    put(slot, event, spare);
    Ok(Parsed::Event)
}

fn parse_header(line: &[u8]) -> Result<Header, ReadError> {
    let value: serde_json::Value = from_slice_at(line, 1)?;
    if let Some(found) = not_an_object(line) {
        return Err(schema_err(
            1,
            "type",
            format!("expected a JSON object with a \"type\" field (the header), found {found}"),
        ));
    }
    match value.get("type").and_then(|t| t.as_str()) {
        Some("header") => {}
        _ => return Err(schema_err(1, "type", "line 1 is not a header".into())),
    }
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(SCHEMA_NAME) => {}
        Some(other) => {
            return Err(schema_err(
                1,
                "schema",
                format!("unknown schema `{}`", shown(other)),
            ));
        }
        None => return Err(schema_err(1, "schema", "missing field `schema`".into())),
    }
    let Some(version) = value.get("version").and_then(serde_json::Value::as_u64) else {
        return Err(schema_err(
            1,
            "version",
            "missing or non-integer `version`".into(),
        ));
    };
    if version < u64::from(MIN_SCHEMA_VERSION) || version > u64::from(SCHEMA_VERSION) {
        return Err(ReadError::UnsupportedVersion {
            found: version,
            min_supported: MIN_SCHEMA_VERSION,
            max_supported: SCHEMA_VERSION,
        });
    }
    from_slice_at::<Header>(line, 1)
}

/// `serde_json::from_slice` with errors mapped to typed errors naming line and field.
fn from_slice_at<T: DeserializeOwned>(line: &[u8], no: u64) -> Result<T, ReadError> {
    serde_json::from_slice(line).map_err(|e| map_json_error(&e, line, no))
}

fn map_json_error(e: &serde_json::Error, line: &[u8], no: u64) -> ReadError {
    use serde_json::error::Category;
    let message = e.to_string();
    // serde_json appends " at line L column C"; the line is always 1 here.
    let message = match message.rfind(" at line ") {
        Some(i) => clip_quoted(&message[..i]),
        None => clip_quoted(&message),
    };
    match e.classify() {
        Category::Data => {
            if let Some(field) = missing_field(&message) {
                return ReadError::Schema {
                    line: no,
                    field,
                    message,
                };
            }
            let (field, message) = match key_at(line, e.column()) {
                // An object where a plain value belongs: serde reads it as an enum's
                // `{"variant": ...}` or reports a key inside it; name the field that holds it.
                Some((keys, Some(object_at))) => (
                    keys[..=object_at].join("."),
                    format!("an object is not a valid value here ({message})"),
                ),
                Some((keys, None)) => (keys.join("."), message),
                None => ("?".to_string(), message),
            };
            ReadError::Schema {
                line: no,
                field,
                message,
            }
        }
        Category::Io | Category::Syntax | Category::Eof => ReadError::Syntax {
            line: no,
            column: e.column() as u64,
            message,
        },
    }
}

/// Keys of the schema whose values are objects (the header's run metadata and maps, the
/// trailer's counts); any other object-valued key is a wrong value.
const OBJECT_KEYS: &[&str] = &["run", "tags", "versions", "schedule", "counts"];

/// A parser's message with the text it quotes from the line (between backticks or double
/// quotes: an unknown variant, an invalid string) made safe to show ([`shown`]), the rest
/// escaped the same way.
fn clip_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(1024));
    let mut rest = message;
    while let Some(open) = rest.find(['`', '"']) {
        let q = &rest[open..=open];
        out.push_str(&shown_all(&rest[..=open]));
        let after = &rest[open + 1..];
        match after.find(q) {
            Some(close) => {
                out.push_str(&shown(&after[..close]));
                out.push_str(q);
                rest = &after[close + 1..];
            }
            None => {
                out.push_str(&shown(after));
                return out;
            }
        }
    }
    out.push_str(&shown_all(rest));
    out
}

/// The parser's own words, escaped like [`shown`] with room for any of its messages.
fn shown_all(s: &str) -> String {
    shown_up_to(s, 512)
}

fn missing_field(message: &str) -> Option<String> {
    let rest = message.split_once("missing field `")?.1;
    Some(rest.split_once('`')?.0.to_string())
}

/// The object keys whose value contains byte column `column` (1-based), outermost first: the
/// last key seen before it at each nesting level, tracking strings and nesting. With them,
/// the index of the first key whose value is an object although the schema has no object
/// there (see [`OBJECT_KEYS`]), if any.
fn key_at(line: &[u8], column: usize) -> Option<(Vec<String>, Option<usize>)> {
    let end = column.min(line.len());
    // Per open `{` or `[`: whether it is an object, and the byte range of the last key seen
    // in it (arrays have none). One pass, no allocation per key.
    let mut path: Vec<(bool, Option<(usize, usize)>)> = Vec::new();
    let mut i = 0;
    while i < end {
        match line[i] {
            b'"' => {
                let (range, is_key, next) = json_string(line, i);
                if is_key && let Some(top) = path.last_mut() {
                    top.1 = Some(range);
                }
                i = next;
                continue;
            }
            b'{' => path.push((true, None)),
            b'[' => path.push((false, None)),
            b'}' | b']' => {
                path.pop();
            }
            _ => {}
        }
        i += 1;
    }
    let mut keys = Vec::new();
    let mut object_at = None;
    for (depth, (_, key)) in path.iter().enumerate() {
        let Some((a, b)) = *key else { continue };
        let k = shown(&String::from_utf8_lossy(&line[a..b]));
        // The frame after a key's frame is that key's value.
        let value_is_object = path.get(depth + 1).is_some_and(|f| f.0);
        if object_at.is_none() && value_is_object && !OBJECT_KEYS.contains(&k.as_str()) {
            object_at = Some(keys.len());
        }
        keys.push(k);
    }
    if keys.is_empty() {
        None
    } else {
        Some((keys, object_at))
    }
}
