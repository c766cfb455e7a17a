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
//! for plain JSONL ([`TraceInput::zstd`] says the frame was cut). Corrupt data, or data after a
//! frame that is not a frame, is an [`io::ErrorKind::InvalidData`] error naming the offset.
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
    /// Reads the first bytes of `src` to decide whether it is zstd-compressed. Compressed
    /// bytes are an [`io::ErrorKind::Unsupported`] error when the crate was built without its
    /// `zstd` feature.
    pub fn new(mut src: R) -> io::Result<Self> {
        let mut prefix = Vec::with_capacity(4);
        while prefix.len() < 4 {
            let avail = match src.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                break;
            }
            let take = avail.len().min(4 - prefix.len());
            prefix.extend_from_slice(&avail[..take]);
            src.consume(take);
        }
        let zstd = is_zstd(&prefix);
        let src = Cursor::new(prefix).chain(src);
        let inner = if zstd {
            compressed(src)?
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
fn compressed<R: BufRead>(src: Prefixed<R>) -> io::Result<Inner<R>> {
    Ok(Inner::Zstd(Box::new(ZstdInput::new(src)?)))
}

/// Without the `zstd` feature: an error that says what the input is and what reading it needs.
#[cfg(not(feature = "zstd"))]
fn compressed<R>(_: Prefixed<R>) -> io::Result<Inner<R>> {
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
}

#[cfg(feature = "zstd")]
impl<R: BufRead> ZstdInput<R> {
    fn new(src: R) -> io::Result<Self> {
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
            self.pending = written == self.out.len();
            if hint == 0 {
                self.in_frame = false;
                self.stats.frames += 1;
            } else if read > 0 {
                self.in_frame = true;
            }
            if written > 0 {
                self.len = written;
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
