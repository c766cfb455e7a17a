//! [`TraceInput`]: a trace's bytes as JSONL, decompressed on the fly when they are zstd frames.
//!
//! Every reader opens traces through it, so a `.jsonl.zst` file (or a compressed file under
//! any name: the decision is made on the first bytes, [`is_zstd`]) reads like plain JSONL.
//! Decompression streams: the decoder holds one window (at most 2^[`MAX_WINDOW_LOG`] bytes;
//! a frame that declares more is refused) and one output buffer, so a small file that
//! expands to gigabytes costs no more memory than a plain file of that size read line by line.
//!
//! A truncated last frame (a recording killed mid-write) is not an error: the input ends where
//! the decodable data ends, and the trace reader then reports a partial last line as it does
//! for plain JSONL ([`TraceInput::zstd`] says the frame was cut). Bytes after the last complete
//! frame that do not start a frame (the NUL bytes a power loss can leave, a line appended by
//! hand) are not an error either: the input ends at that frame and [`ZstdStats::trailing_bytes`]
//! counts them, to be reported as a note. Corrupt data inside a frame is an
//! [`io::ErrorKind::InvalidData`] error naming the compressed byte.
//!
//! Memory is bounded on compressed input as on plain input:
//! - a line longer than [`MAX_LINE_BYTES`] is refused as it is decoded, naming the
//!   compressed byte, before the reader would hold it;
//! - the decoded *content* (bytes that are not ASCII whitespace: what a reader parses and an
//!   analysis keeps) may not exceed max([`Compression::EXPANSION_FLOOR`],
//!   [`Compression::DEFAULT_MAX_RATIO`] × the compressed bytes read so far), so a small file
//!   cannot make an analysis hold gigabytes (a zstd bomb); the environment variable
//!   [`Compression::MAX_RATIO_ENV`] raises (or with `0` lifts) the ratio, and
//!   [`TraceInput::with_max_ratio`] sets it.
//!
//! A file compressed with another tool (gzip, xz, bzip2, lz4, zip) is an
//! [`io::ErrorKind::InvalidData`] error naming the format and the command that decompresses it,
//! whatever the file's name.
//!
//! Decompression needs the crate's `zstd` feature; without it a compressed input is an
//! [`io::ErrorKind::Unsupported`] error saying so, and every input that opens is plain.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Chain, Cursor, Read};
use std::path::Path;

#[cfg(feature = "zstd")]
use zstd::stream::raw::{DParameter, Decoder, InBuffer, Operation, OutBuffer};

#[cfg(feature = "zstd")]
use crate::compression::MAX_WINDOW_LOG;
use crate::compression::{Compression, is_zstd};

/// The longest line the reader accepts (64 MiB, newline excluded). A longer line (a corrupt
/// file, or binary data without newlines) is a [`crate::ReadError::Syntax`] error at its first byte
/// past the limit instead of being read into memory whole.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// How far a compressed trace may expand (see [`Compression::DEFAULT_MAX_RATIO`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ExpansionLimit {
    /// Content bytes allowed per compressed byte read; `0` means no limit.
    ratio: u64,
    /// Content bytes always allowed.
    floor: u64,
}

impl ExpansionLimit {
    /// The content bytes allowed after `compressed` bytes were read (`None`: no limit).
    #[cfg(feature = "zstd")]
    fn allowed(self, compressed: u64) -> Option<u64> {
        (self.ratio != 0).then(|| self.floor.max(self.ratio.saturating_mul(compressed)))
    }
}

/// The bytes [`TraceInput::new`] reads to decide what a file holds.
const PREFIX: usize = 6;

/// What the decompressing side of a [`TraceInput`] has seen so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ZstdStats {
    /// Frames decoded to their end.
    pub frames: u64,
    /// Compressed bytes consumed.
    pub compressed_bytes: u64,
    /// Decompressed bytes produced.
    pub bytes: u64,
    /// The input ended inside a frame (a recording killed while writing it).
    pub truncated: bool,
    /// Bytes after the last complete frame that start no frame (NUL bytes a power loss left,
    /// an appended line): not read as trace data, to be reported as a note.
    pub trailing_bytes: u64,
}

impl ZstdStats {
    /// A note for people about how the compressed data ended, when it did not end cleanly
    /// after its last frame: `None` for a clean end.
    pub fn note(&self) -> Option<String> {
        if self.trailing_bytes > 0 {
            Some(format!(
                "{} byte(s) after the last complete zstd frame (from compressed byte {}) are \
                 not zstd data and were ignored; read up to that frame",
                self.trailing_bytes, self.compressed_bytes
            ))
        } else if self.truncated {
            Some("the last zstd frame is cut short (read up to where it ends)".to_string())
        } else {
            None
        }
    }
}

type Prefixed<R> = Chain<Cursor<Vec<u8>>, R>;

/// A trace's bytes, plain or decompressed: a [`BufRead`] of JSONL.
pub struct TraceInput<R> {
    inner: Inner<R>,
}

enum Inner<R> {
    Plain(Prefixed<R>),
    #[cfg(feature = "zstd")]
    Zstd(Box<ZstdInput<Prefixed<R>>>),
}

impl<R> std::fmt::Debug for TraceInput<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceInput")
            .field("compression", &self.compression_name())
            .field("zstd", &self.zstd())
            .finish()
    }
}

impl TraceInput<BufReader<File>> {
    /// Opens the file at `path` (compressed or not).
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        let file = File::open(path)?;
        TraceInput::new(BufReader::with_capacity(256 * 1024, file))
    }
}

impl<R: BufRead> TraceInput<R> {
    /// Reads the first bytes of `src` to decide whether it is zstd-compressed. Compressed data
    /// may expand [`Compression::max_ratio_from_env`] times (see
    /// [`with_max_ratio`](Self::with_max_ratio)). Compressed bytes are an
    /// [`io::ErrorKind::Unsupported`] error when the crate was built without its `zstd`
    /// feature; another compression format is an [`io::ErrorKind::InvalidData`] error naming
    /// it.
    pub fn new(src: R) -> io::Result<Self> {
        Self::with_max_ratio(src, Compression::max_ratio_from_env())
    }

    /// Like [`new`](Self::new), but compressed data may expand to at most
    /// max([`Compression::EXPANSION_FLOOR`], `ratio` × the compressed bytes read) bytes of
    /// content (bytes that are not ASCII whitespace); `0` lifts the limit. Past it, reading
    /// fails with an [`io::ErrorKind::InvalidData`] error naming the compressed byte.
    pub fn with_max_ratio(mut src: R, ratio: u64) -> io::Result<Self> {
        let limit = ExpansionLimit {
            ratio,
            floor: Compression::EXPANSION_FLOOR,
        };
        let mut prefix = Vec::with_capacity(PREFIX);
        while prefix.len() < PREFIX {
            let avail = match src.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                break;
            }
            let take = avail.len().min(PREFIX - prefix.len());
            prefix.extend_from_slice(&avail[..take]);
            src.consume(take);
        }
        if let Some((name, tool)) = Compression::foreign(&prefix) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "this file is {name}-compressed; tracegraph reads plain JSONL or zstd (.zst) \
                     traces: decompress it with `{tool}` (or recompress it with `zstd`)"
                ),
            ));
        }
        let zstd = is_zstd(&prefix);
        let src = Cursor::new(prefix).chain(src);
        let inner = if zstd {
            compressed(src, limit)?
        } else {
            Inner::Plain(src)
        };
        Ok(TraceInput { inner })
    }
}

impl<R> TraceInput<R> {
    /// Whether the input is zstd frames (`Some`, with what was decoded so far) or plain.
    pub fn zstd(&self) -> Option<ZstdStats> {
        match &self.inner {
            Inner::Plain(_) => None,
            #[cfg(feature = "zstd")]
            Inner::Zstd(z) => Some(z.stats),
        }
    }

    /// `none` or `zstd` (see [`Compression::name`]).
    pub fn compression_name(&self) -> &'static str {
        match &self.inner {
            Inner::Plain(_) => Compression::None.name(),
            #[cfg(feature = "zstd")]
            Inner::Zstd(_) => Compression::zstd().name(),
        }
    }
}

impl<R: BufRead> Read for TraceInput<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let avail = self.fill_buf()?;
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for TraceInput<R> {
    #[inline]
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match &mut self.inner {
            Inner::Plain(r) => r.fill_buf(),
            #[cfg(feature = "zstd")]
            Inner::Zstd(z) => z.fill_buf(),
        }
    }

    #[inline]
    fn consume(&mut self, amt: usize) {
        match &mut self.inner {
            Inner::Plain(r) => r.consume(amt),
            #[cfg(feature = "zstd")]
            Inner::Zstd(z) => z.consume(amt),
        }
    }
}

/// The decompressing input for zstd frames.
#[cfg(feature = "zstd")]
fn compressed<R: BufRead>(src: Prefixed<R>, limit: ExpansionLimit) -> io::Result<Inner<R>> {
    Ok(Inner::Zstd(Box::new(ZstdInput::new(src, limit)?)))
}

/// Without the `zstd` feature: an error that says what the input is and what reading it needs.
#[cfg(not(feature = "zstd"))]
fn compressed<R>(_: Prefixed<R>, _: ExpansionLimit) -> io::Result<Inner<R>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "zstd-compressed trace: this build reads plain JSONL only (trace-record's `zstd` \
         feature reads compressed traces; or decompress it with `zstd -d`)",
    ))
}

/// Decoded bytes are produced in chunks of this size (zstd's largest block).
#[cfg(feature = "zstd")]
const OUT_CHUNK: usize = 128 * 1024;

#[cfg(feature = "zstd")]
struct ZstdInput<R> {
    src: R,
    decoder: Decoder<'static>,
    out: Vec<u8>,
    pos: usize,
    len: usize,
    /// Compressed bytes of the current frame have been consumed and its end not reached.
    in_frame: bool,
    /// The decoder may still hold output for the input it was given.
    pending: bool,
    eof: bool,
    stats: ZstdStats,
    limit: ExpansionLimit,
    /// Decoded bytes of whole lines that are not ASCII whitespace (what [`ExpansionLimit`]
    /// bounds; the line being decoded is bounded by the line limit until it ends).
    content: u64,
    /// Bytes that are not ASCII whitespace in the line being decoded.
    line_content: u64,
    /// Decoded bytes since the last newline (the line being decoded).
    line_run: u64,
}

#[cfg(feature = "zstd")]
impl<R: BufRead> ZstdInput<R> {
    fn new(src: R, limit: ExpansionLimit) -> io::Result<Self> {
        let mut decoder = Decoder::new()?;
        decoder.set_parameter(DParameter::WindowLogMax(MAX_WINDOW_LOG))?;
        Ok(ZstdInput {
            src,
            decoder,
            out: vec![0; OUT_CHUNK],
            pos: 0,
            len: 0,
            in_frame: false,
            pending: false,
            eof: false,
            stats: ZstdStats::default(),
            limit,
            content: 0,
            line_content: 0,
            line_run: 0,
        })
    }

    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.pos == self.len && !self.eof {
            self.decode()?;
        }
        Ok(&self.out[self.pos..self.len])
    }

    fn consume(&mut self, amt: usize) {
        self.pos = (self.pos + amt).min(self.len);
    }

    /// Decodes until some output is produced or the input ends.
    fn decode(&mut self) -> io::Result<()> {
        self.pos = 0;
        self.len = 0;
        loop {
            let input = match self.src.fill_buf() {
                Ok(i) => i,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let at_end = input.is_empty();
            if !at_end && !self.in_frame && !self.pending && !could_start_frame(input) {
                // Between frames, bytes that start none: the data ends at the last frame.
                return self.skip_trailing();
            }
            if at_end && !self.pending {
                // Nothing more to decode: a clean end between frames, or a cut frame.
                self.stats.truncated = self.in_frame;
                self.eof = true;
                return Ok(());
            }
            let mut src = InBuffer::around(input);
            let mut dst = OutBuffer::around(&mut self.out[..]);
            let offset = self.stats.compressed_bytes;
            let hint = self
                .decoder
                .run(&mut src, &mut dst)
                .map_err(|e| corrupt(e, offset))?;
            let (read, written) = (src.pos(), dst.pos());
            self.src.consume(read);
            self.stats.compressed_bytes += read as u64;
            self.stats.bytes += written as u64;
            // A full output buffer may leave decoded bytes inside the decoder.
            // (A frame decoded to its end, `hint == 0`, is fully flushed.)
            self.pending = written == self.out.len() && hint != 0;
            if hint == 0 {
                self.in_frame = false;
                self.stats.frames += 1;
            } else if read > 0 {
                self.in_frame = true;
            }
            if written > 0 {
                self.len = written;
                self.bound(written, offset)?;
                return Ok(());
            }
            if at_end {
                // The decoder had nothing left for the input it was given.
                self.pending = false;
            } else if read == 0 && hint != 0 {
                // Input and room for output, and no progress: never loop on it.
                return Err(corrupt(
                    io::Error::other("the decoder made no progress"),
                    offset,
                ));
            }
        }
    }
}

#[cfg(feature = "zstd")]
impl<R: BufRead> ZstdInput<R> {
    /// Counts the bytes after the last complete frame (reading them, keeping none) and ends
    /// the input there.
    fn skip_trailing(&mut self) -> io::Result<()> {
        loop {
            let n = match self.src.fill_buf() {
                Ok(i) => i.len(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                break;
            }
            self.src.consume(n);
            self.stats.trailing_bytes += n as u64;
        }
        self.eof = true;
        Ok(())
    }

    /// Checks the `written` bytes just decoded (from compressed byte `offset`) against the
    /// line limit and the expansion limit.
    fn bound(&mut self, written: usize, offset: u64) -> io::Result<()> {
        let out = &self.out[..written];
        let content = |b: &[u8]| b.iter().filter(|b| !b.is_ascii_whitespace()).count() as u64;
        match memchr::memrchr(b'\n', out) {
            Some(p) => {
                self.line_run = (written - p - 1) as u64;
                self.content += self.line_content + content(&out[..p]);
                self.line_content = content(&out[p + 1..]);
            }
            None => {
                self.line_run += written as u64;
                self.line_content += content(out);
            }
        }
        if self.line_run > MAX_LINE_BYTES as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "zstd-compressed trace, compressed byte {offset}: line longer than \
                     {MAX_LINE_BYTES} bytes (it starts at decompressed byte {}); readers stop \
                     there rather than hold it",
                    self.stats.bytes - self.line_run
                ),
            ));
        }
        if let Some(allowed) = self.limit.allowed(self.stats.compressed_bytes)
            && self.content > allowed
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "zstd-compressed trace, compressed byte {offset}: {} compressed bytes \
                     expand to more than {allowed} bytes of content (over {}x: a zstd bomb?); \
                     readers stop at max({} MiB, {}x the compressed size) to bound memory: set \
                     {} to a larger ratio (0: no limit) to read it anyway",
                    self.stats.compressed_bytes,
                    self.content / self.stats.compressed_bytes.max(1),
                    self.limit.floor >> 20,
                    self.limit.ratio,
                    Compression::MAX_RATIO_ENV,
                ),
            ));
        }
        Ok(())
    }
}

/// Whether `bytes` (what follows a complete frame) may start a zstd frame or skippable frame:
/// false as soon as one of its first four bytes differs from both magics.
#[cfg(feature = "zstd")]
fn could_start_frame(bytes: &[u8]) -> bool {
    let n = bytes.len().min(4);
    if n == 4 {
        return is_zstd(bytes);
    }
    let zstd = bytes[..n] == crate::compression::ZSTD_MAGIC[..n];
    let skippable = bytes.iter().take(n).enumerate().all(|(i, &b)| match i {
        0 => b & 0xF0 == 0x50,
        _ => b == [0x2A, 0x4D, 0x18][i - 1],
    });
    zstd || skippable
}

#[cfg(feature = "zstd")]
fn corrupt(e: io::Error, offset: u64) -> io::Error {
    let text = e.to_string();
    // zstd's words for a frame whose window is over the limit set above.
    let note = if text.contains("memory") {
        format!(
            " (readers accept zstd windows up to {} MiB; recompress without --long or --ultra)",
            (1u64 << MAX_WINDOW_LOG) >> 20
        )
    } else {
        String::new()
    };
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("zstd-compressed trace, compressed byte {offset}: {text}{note}"),
    )
}
