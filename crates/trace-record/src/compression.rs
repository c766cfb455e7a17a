//! How a trace's bytes are stored: plain JSONL or zstd frames of it, and how to tell them apart.
//!
//! A compressed trace is a sequence of independent zstd frames whose concatenated content is
//! exactly the JSONL trace: the header is the first frame on its own, and every block the
//! session writes (when its buffer fills, on each flush interval, at each step and at the
//! end) is one more frame. A frame is written whole or, when the process dies mid-write, is
//! the file's last and truncated one, so a killed recording reads back to its last complete
//! frame like a plain trace reads back to its last complete line.
//!
//! Readers decide by content, not by name: a file that starts with a zstd frame's magic bytes
//! ([`ZSTD_MAGIC`], or a skippable frame's) is decompressed (`TraceInput`, with the `read`
//! and `zstd` features), and one that starts with another format's (gzip, xz, bzip2, lz4,
//! zip: [`Compression::foreign`]) is refused with an error naming it.

use std::path::Path;

/// The magic number that starts every zstd frame (`0xFD2FB528`, little-endian on disk).
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// The zstd level a `.jsonl.zst` path gets unless [`Run::compression`](crate::Run::compression)
/// says otherwise (zstd's own default: fast, and about 10× smaller on traces).
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// The largest zstd window (as a power of two) readers accept: 16 MiB. A decoder holds at most
/// one window, so this bounds a reader's memory whatever a file declares. It covers every
/// frame a session writes ([`WRITE_WINDOW_LOG`]) and `zstd` command-line output up to level 19;
/// frames that need more (`--long`, `--ultra`) are refused with an error saying so.
pub const MAX_WINDOW_LOG: u32 = 24;

/// The window (as a power of two) a session's compressor uses at most: 4 MiB. A frame holds
/// one written block, so in practice its window is the block's size.
pub const WRITE_WINDOW_LOG: u32 = 22;

/// How a session stores its trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Plain JSONL.
    #[default]
    None,
    /// JSONL in zstd frames, compressed at `level` (1 fastest … 19 smallest; zstd's negative
    /// levels are faster still). Compression runs on the session's writer thread, never on
    /// the threads that record.
    Zstd {
        /// The zstd compression level.
        level: i32,
    },
}

/// Compression formats other than zstd, by their magic bytes: (magic, name, how to decompress).
const FOREIGN: &[(&[u8], &str, &str)] = &[
    (&[0x1F, 0x8B], "gzip", "gunzip"),
    (&[0xFD, b'7', b'z', b'X', b'Z', 0x00], "xz", "unxz"),
    (b"BZh", "bzip2", "bunzip2"),
    (&[0x04, 0x22, 0x4D, 0x18], "lz4", "unlz4"),
    (&[0x02, 0x21, 0x4C, 0x18], "lz4 (legacy)", "unlz4"),
    (b"PK\x03\x04", "zip", "unzip"),
    (&[0x5D, 0x00, 0x00], "lzma", "unlzma"),
];

impl Compression {
    /// How many times its compressed size a zstd trace's content (its bytes that are not
    /// ASCII whitespace) may be, by default, once past [`EXPANSION_FLOOR`](Self::EXPANSION_FLOOR):
    /// 256. Traces a session writes compress about 10–30× (zstd level 19 included); a file
    /// that expands further is refused as it is read (a zstd bomb: 393 KB holding 4 GiB of
    /// one repeated op line expands 10,000×), so memory grows with what a reader was really
    /// given. [`MAX_RATIO_ENV`](Self::MAX_RATIO_ENV) overrides it.
    pub const DEFAULT_MAX_RATIO: u64 = 256;

    /// The content a compressed trace may always expand to, however small the file: 64 MiB.
    pub const EXPANSION_FLOOR: u64 = 64 << 20;

    /// The environment variable that overrides [`DEFAULT_MAX_RATIO`](Self::DEFAULT_MAX_RATIO)
    /// for every reader (an integer; `0` lifts the limit).
    pub const MAX_RATIO_ENV: &str = "TRACEGRAPH_ZSTD_MAX_RATIO";

    /// The expansion ratio readers use: [`MAX_RATIO_ENV`](Self::MAX_RATIO_ENV) when it is set
    /// to an integer, else [`DEFAULT_MAX_RATIO`](Self::DEFAULT_MAX_RATIO).
    pub fn max_ratio_from_env() -> u64 {
        std::env::var(Self::MAX_RATIO_ENV)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(Self::DEFAULT_MAX_RATIO)
    }

    /// The compression format other than zstd that `prefix` (a file's first bytes, 6 of them
    /// to tell every format) starts, if any, with the command that decompresses it. JSON
    /// never starts with these bytes, so a trace is never mistaken for one.
    ///
    /// ```
    /// use trace_record::Compression;
    /// assert_eq!(Compression::foreign(&[0x1F, 0x8B, 8, 0]), Some(("gzip", "gunzip")));
    /// assert_eq!(Compression::foreign(b"BZh91AY"), Some(("bzip2", "bunzip2")));
    /// assert_eq!(Compression::foreign(br#"{"type":"header"}"#), None);
    /// ```
    pub fn foreign(prefix: &[u8]) -> Option<(&'static str, &'static str)> {
        FOREIGN
            .iter()
            .find(|(magic, ..)| prefix.starts_with(magic))
            .map(|&(_, name, tool)| (name, tool))
    }

    /// zstd at [`DEFAULT_ZSTD_LEVEL`].
    pub const fn zstd() -> Compression {
        Compression::Zstd {
            level: DEFAULT_ZSTD_LEVEL,
        }
    }

    /// What a path asks for by its name: zstd for a name ending in `.zst`, plain otherwise.
    ///
    /// ```
    /// use trace_record::Compression;
    /// assert_eq!(Compression::for_path("run.jsonl.zst"), Compression::zstd());
    /// assert_eq!(Compression::for_path("run.jsonl"), Compression::None);
    /// ```
    pub fn for_path(path: impl AsRef<Path>) -> Compression {
        match path.as_ref().extension() {
            Some(ext) if ext.eq_ignore_ascii_case("zst") => Compression::zstd(),
            _ => Compression::None,
        }
    }

    /// `none` or `zstd`, as `tracegraph validate` reports it.
    pub fn name(&self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd { .. } => "zstd",
        }
    }
}

/// Whether `prefix` (a file's first bytes, at least 4 of them to decide) starts a zstd frame or
/// a zstd skippable frame (magic `0x184D2A50`..=`0x184D2A5F`).
///
/// ```
/// assert!(trace_record::is_zstd(&[0x28, 0xB5, 0x2F, 0xFD, 0x04]));
/// assert!(!trace_record::is_zstd(br#"{"type":"header"}"#));
/// ```
pub fn is_zstd(prefix: &[u8]) -> bool {
    match prefix {
        [a, b, c, d, ..] => {
            [*a, *b, *c, *d] == ZSTD_MAGIC
                || (*a & 0xF0 == 0x50 && [*b, *c, *d] == [0x2A, 0x4D, 0x18])
        }
        _ => false,
    }
}
