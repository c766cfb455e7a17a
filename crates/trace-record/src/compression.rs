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
//! and `zstd` features).

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

impl Compression {
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
