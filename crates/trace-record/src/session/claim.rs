//! Taking a trace path for writing: exclusive create, a lock held while recording, replace.
//!
//! Two programs recording to one path used to interleave their lines or lose a run without a
//! word. A session now *claims* its path:
//!
//! - A path that does not exist is created exclusively (`O_EXCL`) and locked at once (an
//!   advisory `flock`-style lock, [`File::try_lock`]), held until the session finishes.
//! - A path that exists is an error naming it ([`TraceError::Exists`]) unless the run asks to
//!   replace it ([`Run::overwrite`](crate::Run::overwrite)). Replacing locks the old file
//!   first (a live writer holds it: [`TraceError::Busy`] with that writer's pid from its
//!   header), then writes a new file beside it under a hidden temporary name and renames it
//!   into place: a reader sees the old trace or the new one, never a mix, and a symlink at
//!   the path is replaced, not followed.
//! - Devices and pipes (`/dev/null`, a FIFO) are opened for writing as before: they hold no
//!   trace to protect.
//!
//! [`writer_of`] answers a reader's question "is this trace still being written, and by whom?".

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::TraceError;

/// Attempts to take a path whose file is replaced under us between the open and the lock.
const CLAIM_ATTEMPTS: usize = 8;

/// The file a session writes, with its lock held (for regular files).
pub(super) struct Claimed {
    /// The file to write.
    pub(super) file: File,
    /// Whether `file` holds the path's lock (regular files only).
    pub(super) locked: bool,
}

/// Opens `path` for a new trace: see the module docs.
pub(super) fn claim(path: &Path, overwrite: bool) -> Result<Claimed, TraceError> {
    let io_err = |source: io::Error| TraceError::Io {
        path: Some(path.to_path_buf()),
        source,
        dropped: 0,
    };
    for _ in 0..CLAIM_ATTEMPTS {
        match fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match OpenOptions::new().write(true).create_new(true).open(path) {
                    Ok(file) => return lock_new(path, file),
                    // Created by someone else since the check: look again.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(io_err(e)),
                }
            }
            Err(e) => return Err(io_err(e)),
            Ok(meta) if !meta.is_file() && !meta.file_type().is_symlink() => {
                // A device, a FIFO (or a directory, which the open refuses).
                let file = OpenOptions::new().write(true).open(path).map_err(io_err)?;
                return Ok(Claimed {
                    file,
                    locked: false,
                });
            }
            Ok(meta) => {
                if !overwrite {
                    return Err(TraceError::Exists {
                        path: path.to_path_buf(),
                    });
                }
                // Hold the old file's lock while replacing it, so that a live writer is
                // found and two replacing writers cannot both win.
                let old = if meta.is_file() {
                    let old = match File::open(path) {
                        Ok(f) => f,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(io_err(e)),
                    };
                    match old.try_lock() {
                        Ok(()) => {}
                        Err(TryLockError::WouldBlock) => {
                            return Err(TraceError::Busy {
                                path: path.to_path_buf(),
                                pid: header_pid(&old),
                            });
                        }
                        Err(TryLockError::Error(e)) => return Err(io_err(e)),
                    }
                    if !still_at(path, &old) {
                        // Replaced between our open and our lock: take the new one.
                        continue;
                    }
                    Some(old)
                } else {
                    None
                };
                let (tmp, file) = temporary_beside(path).map_err(io_err)?;
                if let Err(e) = file.try_lock() {
                    let _ = fs::remove_file(&tmp);
                    return Err(io_err(lock_error(e)));
                }
                if let Err(e) = fs::rename(&tmp, path) {
                    let _ = fs::remove_file(&tmp);
                    return Err(io_err(e));
                }
                drop(old);
                return Ok(Claimed { file, locked: true });
            }
        }
    }
    Err(io_err(io::Error::other(
        "the path kept changing while the session tried to take it",
    )))
}

/// Locks a file this session just created; a replacing writer that locked it first wins.
fn lock_new(path: &Path, file: File) -> Result<Claimed, TraceError> {
    match file.try_lock() {
        // A replacing writer may have locked the new file and renamed its own over it
        // before this lock: then the path is theirs, and this session must not write into
        // a file nobody can see.
        Ok(()) if still_at(path, &file) => Ok(Claimed { file, locked: true }),
        Ok(()) | Err(TryLockError::WouldBlock) => Err(TraceError::Busy {
            path: path.to_path_buf(),
            pid: None,
        }),
        Err(TryLockError::Error(source)) => Err(TraceError::Io {
            path: Some(path.to_path_buf()),
            source,
            dropped: 0,
        }),
    }
}

fn lock_error(e: TryLockError) -> io::Error {
    match e {
        TryLockError::WouldBlock => io::Error::from(io::ErrorKind::WouldBlock),
        TryLockError::Error(e) => e,
    }
}

/// Whether `path` still names the file `file` was opened from (same device and inode).
#[cfg(unix)]
fn still_at(path: &Path, file: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::metadata(path), file.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Elsewhere a file that is open cannot be renamed over, so the path cannot move under us.
#[cfg(not(unix))]
fn still_at(_path: &Path, _file: &File) -> bool {
    true
}

/// Creates `.NAME.PID.N.tmp` beside `path`, exclusively.
fn temporary_beside(path: &Path) -> io::Result<(PathBuf, File)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map_or_else(|| "trace".into(), |n| n.to_string_lossy().into_owned());
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The `pid` in a trace file's header line, if it has one (a writer that just created the
/// file may not have written it yet).
fn header_pid(file: &File) -> Option<u32> {
    let mut line = String::new();
    // The header is small; a hostile first line is not read past 64 KiB (of the file, and of
    // its decompressed content when it is zstd-compressed: the header is its first frame).
    let head = BufReader::new(io::Read::take(file, 64 * 1024));
    // Only a build that reads decompresses; a recorder alone reads a plain header, and a
    // compressed one (not UTF-8) gives no pid.
    #[cfg(feature = "read")]
    let head = crate::input::TraceInput::new(head).ok()?;
    let mut r = io::Read::take(head, 64 * 1024);
    r.read_line(&mut line).ok()?;
    let at = line.find("\"pid\":")? + "\"pid\":".len();
    let digits: String = line[at..]
        .chars()
        .skip_while(char::is_ascii_whitespace)
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Who is still writing a trace file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// No session holds the file: it is finished, or its writer ended (killed or crashed).
    None,
    /// A live session holds the file's lock; `pid` is the writer's process id from the
    /// header, when the header is already there.
    Live {
        /// The writing process, from the trace's header.
        pid: Option<u32>,
    },
}

/// Whether a session is still writing the trace at `path` (it holds the file's lock), and
/// which process it is. A reader of such a file reads to its last complete line and should
/// say that the trace is still growing. Files that cannot be opened or locked (devices,
/// missing files, file systems without locks) report [`Writer::None`].
pub fn writer_of(path: impl AsRef<Path>) -> Writer {
    let Ok(file) = File::open(path.as_ref()) else {
        return Writer::None;
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Writer::None;
    }
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            Writer::None
        }
        Err(TryLockError::WouldBlock) => Writer::Live {
            pid: header_pid(&file),
        },
        Err(TryLockError::Error(_)) => Writer::None,
    }
}
