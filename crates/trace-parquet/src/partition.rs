//! Hive-style partition directories: `run=<run id>/rank=<rank>`, bounded in length.

use std::fmt::Write as _;
use std::path::PathBuf;

/// The longest partition value written as it is (escaped): longer ones are named by
/// [`partition_value`]'s hashed form, so `run=<value>` and the export's temporary
/// `.tmp-run=<value>-<pid>-<n>` stay within a path component's 255 bytes.
pub const MAX_PARTITION_VALUE: usize = 200;

/// The escaped prefix a hashed partition value keeps (at most this many bytes, cut at a
/// whole escape).
const HASHED_PREFIX: usize = 160;

/// The directory, relative to the export's root, that holds the tables of one rank of one
/// run: `run=<value>/rank=<rank>` with the value of [`partition_value`].
///
/// ```
/// assert_eq!(
///     trace_parquet::partition_dir("job 7", 3),
///     std::path::Path::new("run=job%207").join("rank=3")
/// );
/// ```
pub fn partition_dir(run_id: &str, rank: u32) -> PathBuf {
    PathBuf::from(run_partition_name(run_id)).join(format!("rank={rank}"))
}

/// The name of a run's partition directory: `run=<value>` (see [`partition_value`]).
pub fn run_partition_name(run_id: &str) -> String {
    format!("run={}", partition_value(run_id))
}

/// A run id as a partition value of at most [`MAX_PARTITION_VALUE`] bytes: its
/// [`escape_partition_value`] when that fits, else the first 160 bytes of it (cut at a whole
/// `%XX`), `~`, and the 32 hex digits of the id's XXH3-128. `~` is never in an escaped
/// value, so a hashed name is never the escape of another id; the `run_id` column always
/// holds the whole id.
///
/// ```
/// use trace_parquet::{MAX_PARTITION_VALUE, partition_value};
/// assert_eq!(partition_value("job/7"), "job%2F7");
/// let long = "j".repeat(300);
/// let v = partition_value(&long);
/// assert!(v.len() <= MAX_PARTITION_VALUE);
/// assert!(v.starts_with(&"j".repeat(160)) && v.as_bytes()[160] == b'~');
/// assert_ne!(v, partition_value(&"j".repeat(301)));
/// ```
pub fn partition_value(run_id: &str) -> String {
    let escaped = escape_partition_value(run_id);
    if escaped.len() <= MAX_PARTITION_VALUE {
        return escaped;
    }
    // Cut before a `%` whose escape would not fit whole.
    let mut cut = HASHED_PREFIX;
    if let Some(p) = escaped.as_bytes()[cut.saturating_sub(2)..cut]
        .iter()
        .position(|&b| b == b'%')
    {
        cut = cut - 2 + p;
    }
    let hash = xxhash_rust::xxh3::xxh3_128(run_id.as_bytes());
    format!("{}~{hash:032x}", &escaped[..cut])
}

/// A partition value safe as one path component and unambiguous to Hive-style readers:
/// ASCII letters, digits, `-`, `_` and `.` are kept, every other byte is written `%XX`
/// (upper-case hex, as URL encoding does), so `/`, `=` and `%` never appear raw; a value of
/// dots only (`.`, `..`) is escaped whole. The empty string stays empty (`run=`). Unbounded:
/// directory names use [`partition_value`], which bounds it.
///
/// ```
/// use trace_parquet::escape_partition_value;
/// assert_eq!(escape_partition_value("1234-1700000000"), "1234-1700000000");
/// assert_eq!(escape_partition_value("a/b=c%"), "a%2Fb%3Dc%25");
/// assert_eq!(escape_partition_value(".."), "%2E%2E");
/// assert_eq!(escape_partition_value(""), "");
/// ```
pub fn escape_partition_value(value: &str) -> String {
    // `.` and `..` alone would name the directory itself or its parent.
    if value.bytes().all(|b| b == b'.') {
        return value.bytes().fold(String::new(), |mut s, _| {
            s.push_str("%2E");
            s
        });
    }
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hashed_value_never_splits_an_escape_and_stays_bounded() {
        for pad in 0..4 {
            let id = format!("{}{}", "a".repeat(pad), "/".repeat(400));
            let v = partition_value(&id);
            assert!(v.len() <= MAX_PARTITION_VALUE, "{}", v.len());
            let (prefix, hash) = v.split_once('~').unwrap();
            assert_eq!(hash.len(), 32);
            assert!(escape_partition_value(&id).starts_with(prefix));
            // Every `%` of the prefix has its two hex digits.
            let b = prefix.as_bytes();
            for (i, &c) in b.iter().enumerate() {
                if c == b'%' {
                    assert!(b.len() >= i + 3, "{prefix}");
                }
            }
        }
        // Exactly at the bound: written as it is.
        let at = "x".repeat(MAX_PARTITION_VALUE);
        assert_eq!(partition_value(&at), at);
        assert!(partition_value(&format!("{at}x")).contains('~'));
    }
}
