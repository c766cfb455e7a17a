//! Golden files: compare output with a checked-in file, or rewrite it when asked to.

use std::path::{Path, PathBuf};

/// The environment variable that turns [`assert_golden`] from a check into a rewrite
/// (`UPDATE_GOLDENS=1 cargo test`); review the diff afterwards.
pub const UPDATE_GOLDENS: &str = "UPDATE_GOLDENS";

/// Asserts that `actual` equals the golden file at `path`. With [`UPDATE_GOLDENS`] set, writes
/// `actual` to `path` instead (creating its directory).
///
/// # Panics
/// When the file differs from `actual` or cannot be read (naming the variable that rewrites
/// it), or when rewriting it fails.
pub fn assert_golden(path: &Path, actual: &str) {
    let outcome = if std::env::var_os(UPDATE_GOLDENS).is_some() {
        rewrite(path, actual)
    } else {
        compare(path, actual)
    };
    if let Err(message) = outcome {
        panic!("{message}");
    }
}

/// Writes `actual` to `path`, creating its directory.
fn rewrite(path: &Path, actual: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(path, actual).map_err(|e| format!("{}: {e}", path.display()))
}

/// `Ok` when the file at `path` holds exactly `actual`; otherwise what differs or failed.
fn compare(path: &Path, actual: &str) -> Result<(), String> {
    let want = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "{}: {e} (run with {UPDATE_GOLDENS}=1 to create it)",
            path.display()
        )
    })?;
    if actual == want {
        return Ok(());
    }
    let line = actual
        .lines()
        .zip(want.lines())
        .position(|(a, w)| a != w)
        .unwrap_or_else(|| actual.lines().count().min(want.lines().count()));
    Err(format!(
        "golden {} differs from line {} on ({UPDATE_GOLDENS}=1 rewrites it)\n\
         --- got\n{actual}\n--- golden\n{want}",
        path.display(),
        line + 1
    ))
}

/// testkit's data directory (`crates/testkit/data/`): files shared by several test suites.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// The small hand-made training trace (`data/small.jsonl`: two steps of forward and backward
/// spans, ops, memory): the input of the analysis and CLI goldens.
pub fn small_jsonl() -> PathBuf {
    data_dir().join("small.jsonl")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system temporary directory, removed by the caller.
    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("testkit-golden-{}-{name}", std::process::id()))
    }

    #[test]
    fn the_small_trace_is_there_and_starts_with_its_header() {
        let text = std::fs::read_to_string(small_jsonl()).expect("small.jsonl is checked in");
        assert!(text.starts_with(r#"{"type":"header""#), "{text}");
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn compare_accepts_the_same_text_and_names_the_first_differing_line() {
        let dir = scratch("compare");
        let path = dir.join("nested/out.txt");
        let missing = compare(&path, "a\n").unwrap_err();
        assert!(
            missing.contains("UPDATE_GOLDENS=1 to create it"),
            "{missing}"
        );
        rewrite(&path, "a\nb\nc\n").unwrap();
        assert_eq!(compare(&path, "a\nb\nc\n"), Ok(()));
        let differs = compare(&path, "a\nB\nc\n").unwrap_err();
        assert!(differs.contains("differs from line 2 on"), "{differs}");
        let shorter = compare(&path, "a\nb\n").unwrap_err();
        assert!(shorter.contains("differs from line 3 on"), "{shorter}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
