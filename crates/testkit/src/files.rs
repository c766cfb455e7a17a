//! What a directory holds, for tests that check a write changed nothing it should not have.

use std::path::{Path, PathBuf};

/// Every file under `dir` as (path relative to `dir`, bytes), sorted by path; a symbolic link
/// is listed with the bytes `<link>`, never followed, so a test sees a link where a file or
/// directory should be and never reads (or lists) what it points at.
///
/// # Panics
///
/// When `dir` or anything below it cannot be read (a test's own directory: it can).
pub fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            let rel = e.path().strip_prefix(dir).unwrap().to_path_buf();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_symlink() {
                out.push((rel, b"<link>".to_vec()));
            } else {
                out.push((rel, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}
