//! Hive-style partition directories: `run=<run id>/rank=<rank>`.

use std::fmt::Write as _;
use std::path::PathBuf;

/// The directory, relative to the export's root, that holds the tables of one rank of one
/// run: `run=<run id>/rank=<rank>` with the run id escaped by [`escape_partition_value`].
///
/// ```
/// assert_eq!(
///     trace_parquet::partition_dir("job 7", 3),
///     std::path::Path::new("run=job%207").join("rank=3")
/// );
/// ```
pub fn partition_dir(run_id: &str, rank: u32) -> PathBuf {
    PathBuf::from(format!("run={}", escape_partition_value(run_id))).join(format!("rank={rank}"))
}

/// A partition value safe as one path component and unambiguous to Hive-style readers:
/// ASCII letters, digits, `-`, `_` and `.` are kept, every other byte is written `%XX`
/// (upper-case hex, as URL encoding does), so `/`, `=` and `%` never appear raw; a value of
/// dots only (`.`, `..`) is escaped whole. The empty string stays empty (`run=`).
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
