//! Temporary output files that outlive no one: removed on SIGINT/SIGTERM, swept when stale.
//!
//! An output is written to `.NAME.PID.XXXXXX.tmp` beside its target and renamed into place
//! (see `output.rs`). A command killed before the rename used to leave that file behind
//! (hundreds of MB for a large export). Now:
//!
//! - While an output is written its directory and name are on a process-wide list (put there
//!   before the temporary file is created); on SIGINT or SIGTERM a handler thread removes
//!   this process's temporary files of every listed output, then the signal's default action
//!   ends the process as before (exit by the signal).
//! - SIGKILL cannot be caught: the next command that writes an output in the same directory
//!   removes the temporary files *of that output's name* whose writing process is gone
//!   (`/proc/PID` absent) and whose advisory lock nobody holds (a writer holds its
//!   temporary's lock while writing, so a process of another host on a shared file system is
//!   never taken for a dead one). Only this exact pattern, only in that directory, never a file
//!   of a live process, never a symlink, and nowhere without `/proc` (when in doubt, keep).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// The outputs this process is writing now: (directory, output name) of each temporary
/// file, registered *before* the file is created so that no signal falls between the two.
static LIVE: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());
/// Whether the signal handler thread is installed.
static INSTALLED: Mutex<bool> = Mutex::new(false);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The prefix of this process's temporary files for an output named `name`.
pub(crate) fn prefix(name: &str) -> String {
    format!(".{name}.{}.", std::process::id())
}

/// An output being written through a temporary file: while it lives, SIGINT/SIGTERM remove
/// this process's temporary files of that output name in that directory.
pub(crate) struct Live {
    key: (PathBuf, String),
}

impl Live {
    /// Registers the output and installs the SIGINT/SIGTERM handler on first use; call it
    /// before creating the temporary file. Without a handler (it could not be installed) a
    /// leftover is still removed by a later [`sweep_stale`].
    pub(crate) fn new(dir: &Path, name: &str) -> Live {
        install();
        let key = (dir.to_path_buf(), name.to_string());
        lock(&LIVE).push(key.clone());
        Live { key }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let mut live = lock(&LIVE);
        if let Some(at) = live.iter().position(|k| *k == self.key) {
            live.swap_remove(at);
        }
    }
}

/// Removes this process's temporary files of every registered output.
fn remove_own() {
    let me = std::process::id();
    for (dir, name) in lock(&LIVE).iter() {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let ours = entry.file_name().to_str().and_then(|f| writer_pid(f, name)) == Some(me);
            if ours && entry.file_type().is_ok_and(|t| t.is_file()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

#[cfg(unix)]
fn install() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut installed = lock(&INSTALLED);
    if *installed {
        return;
    }
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return;
    };
    let spawned = std::thread::Builder::new()
        .name("tracegraph-temps".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                remove_own();
                // The process ends as the signal's default action would have ended it.
                let _ = signal_hook::low_level::emulate_default_handler(sig);
            }
        });
    *installed = spawned.is_ok();
}

#[cfg(not(unix))]
fn install() {}

/// Whether process `pid` is known to be gone: `/proc` is there and `/proc/PID` is not.
fn process_gone(pid: u32) -> bool {
    Path::new("/proc/self").exists() && !Path::new("/proc").join(pid.to_string()).exists()
}

/// The writing process of a temporary file of output `name` (`.NAME.PID.XXXXXX.tmp`), if the
/// file name has exactly that shape.
fn writer_pid(file_name: &str, name: &str) -> Option<u32> {
    let rest = file_name
        .strip_prefix('.')?
        .strip_prefix(name)?
        .strip_prefix('.')?
        .strip_suffix(".tmp")?;
    let (pid, random) = rest.split_once('.')?;
    let plain = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric());
    if !(pid.chars().all(|c| c.is_ascii_digit()) && plain(random)) {
        return None;
    }
    pid.parse().ok()
}

/// Takes the advisory lock of a temporary file being written (released when it is closed or
/// renamed into place and dropped). A file system without locks leaves it unlocked: the
/// sweep then relies on the pid alone.
pub(crate) fn hold(file: &std::fs::File) {
    let _ = file.try_lock();
}

/// Whether nobody holds the advisory lock of the file at `path` (checked without waiting).
fn unheld(path: &Path) -> bool {
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    match f.try_lock() {
        Ok(()) => {
            let _ = f.unlock();
            true
        }
        Err(_) => false,
    }
}

/// Removes the leftover temporary files of output `name` in `dir` whose writer is gone.
/// Returns how many were removed. Errors are ignored: a file that cannot be removed stays.
pub(crate) fn sweep_stale(dir: &Path, name: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let me = std::process::id();
    let mut removed = 0;
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name.to_str().and_then(|f| writer_pid(f, name)) else {
            continue;
        };
        // `file_type` does not follow symlinks: only plain files of ours are removed.
        let plain_file = entry.file_type().is_ok_and(|t| t.is_file());
        if pid != me
            && plain_file
            && process_gone(pid)
            && unheld(&entry.path())
            && std::fs::remove_file(entry.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_pattern_names_a_writer() {
        assert_eq!(
            writer_pid(".out.json.123.aB3xYz.tmp", "out.json"),
            Some(123)
        );
        assert_eq!(writer_pid(".out.json.aB3xYz.tmp", "out.json"), None);
        assert_eq!(writer_pid(".out.json.123.aB3xYz.tmp", "out"), None);
        assert_eq!(writer_pid(".out.json.12x.aB3xYz.tmp", "out.json"), None);
        assert_eq!(writer_pid(".out.json.123..tmp", "out.json"), None);
        assert_eq!(writer_pid("out.json.123.aB3xYz.tmp", "out.json"), None);
        assert_eq!(writer_pid(".out.json.123.aB3xYz.tmp.bak", "out.json"), None);
    }

    #[test]
    fn a_sweep_removes_only_dead_writers_files_of_that_output() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // pid_max is at most 2^22 on Linux: this pid is never alive.
        let dead = d.join(".out.json.999999999.abcdef.tmp");
        let mine = d.join(format!(".out.json.{}.abcdef.tmp", std::process::id()));
        let other_output = d.join(".other.json.999999999.abcdef.tmp");
        let user = d.join("out.json.999999999.abcdef.tmp");
        for p in [&dead, &mine, &other_output, &user] {
            std::fs::write(p, "x").unwrap();
        }
        // A dead pid whose file is still locked (another host's writer on a shared file
        // system) is kept.
        let held = d.join(".out.json.999999998.abcdef.tmp");
        std::fs::write(&held, "x").unwrap();
        let holder = std::fs::File::open(&held).unwrap();
        hold(&holder);
        let removed = sweep_stale(d, "out.json");
        assert!(held.exists(), "a held temporary is never swept");
        drop(holder);
        if Path::new("/proc/self").exists() {
            assert_eq!(removed, 1);
            assert!(!dead.exists());
        } else {
            assert_eq!(removed, 0);
        }
        assert!(mine.exists() && other_output.exists() && user.exists());
    }
}
