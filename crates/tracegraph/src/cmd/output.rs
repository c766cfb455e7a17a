//! Command outputs that never destroy a user's file.
//!
//! A temporary file beside the target renamed into place on success; devices, FIFOs and `-` written
//! in place; an output that is an input refused.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::temps;

/// A usage error (exit 2) found after argument parsing, e.g. an output that is an input.
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Where an output goes.
enum Target {
    /// Standard output (`-`).
    Stdout(BufWriter<io::StdoutLock<'static>>),
    /// A character device, FIFO or socket that already existed: written in place, never
    /// truncated or removed.
    InPlace(BufWriter<File>),
    /// A temporary file in the target's directory, renamed onto `dest` by
    /// [`Output::commit`]; dropped (and so removed) otherwise.
    Temp {
        file: BufWriter<tempfile::NamedTempFile>,
        dest: PathBuf,
        /// Keeps the output on the list whose temporary files SIGINT/SIGTERM remove.
        _live: temps::Live,
    },
}

/// One output of a command. Nothing at the target path changes until [`Output::commit`]
/// (for a regular file); dropping an uncommitted output removes only its temporary file.
pub(crate) struct Output {
    target: Target,
    shown: PathBuf,
}

impl Output {
    /// Prepares the output `path` (`-` for standard output). Fails with a [`UsageError`] when
    /// `path` is the same file as one of `inputs` (same device and inode, whatever the names),
    /// and with an I/O error when the temporary file cannot be created.
    pub(crate) fn create(path: &Path, inputs: &[&Path]) -> anyhow::Result<Output> {
        let shown = path.to_path_buf();
        if path.as_os_str() == "-" {
            let out = BufWriter::with_capacity(1 << 20, io::stdout().lock());
            return Ok(Output {
                target: Target::Stdout(out),
                shown,
            });
        }
        // `metadata` follows symlinks: the identity and kind are those of the file written.
        if let Ok(meta) = std::fs::metadata(path) {
            for input in inputs {
                if let Ok(im) = std::fs::metadata(input)
                    && same_file(&meta, &im)
                {
                    return Err(UsageError(format!(
                        "the output {} is the input {} (the same file); choose another output",
                        path.display(),
                        input.display()
                    ))
                    .into());
                }
            }
            if meta.is_dir() {
                anyhow::bail!("cannot write {}: it is a directory", path.display());
            }
            if !meta.is_file() {
                // A device, FIFO or socket: write into it, never truncate or remove it.
                let file = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .with_context(|| format!("cannot open {}", path.display()))?;
                return Ok(Output {
                    target: Target::InPlace(BufWriter::with_capacity(1 << 20, file)),
                    shown,
                });
            }
        }
        // A symlink to a file is followed: its target is replaced, the link stays.
        let dest = match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path)
                .with_context(|| format!("cannot resolve the symlink {}", path.display()))?,
            _ => path.to_path_buf(),
        };
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // `.NAME.PID.XXXXXX.tmp`: the pid tells a later run whether the writer is gone.
        temps::sweep_stale(&dir, &name);
        let live = temps::Live::new(&dir, &name);
        let prefix = temps::prefix(&name);
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp");
        if let Some(mode) = new_file_permissions(&dest) {
            builder.permissions(mode);
        }
        let tmp = builder
            .tempfile_in(&dir)
            .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
        // Held while the output is written: a later sweep never removes a temporary whose
        // writer still holds it (another host's process on a shared file system, say).
        temps::hold(tmp.as_file());
        Ok(Output {
            target: Target::Temp {
                file: BufWriter::with_capacity(1 << 20, tmp),
                dest,
                _live: live,
            },
            shown,
        })
    }

    /// Whether this output is standard output.
    pub(crate) fn is_stdout(&self) -> bool {
        matches!(self.target, Target::Stdout(_))
    }

    /// The path as given.
    pub(crate) fn shown(&self) -> &Path {
        &self.shown
    }

    /// Flushes and, for a regular file, renames the temporary file onto the target.
    pub(crate) fn commit(self) -> anyhow::Result<()> {
        let shown = self.shown;
        match self.target {
            Target::Stdout(mut w) => match w.flush() {
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
                r => r.context("writing to stdout"),
            },
            Target::InPlace(mut w) => w
                .flush()
                .with_context(|| format!("writing {}", shown.display())),
            Target::Temp { file, dest, .. } => {
                let tmp = file
                    .into_inner()
                    .map_err(std::io::IntoInnerError::into_error)
                    .with_context(|| format!("writing {}", shown.display()))?;
                tmp.as_file()
                    .sync_all()
                    .with_context(|| format!("writing {}", shown.display()))?;
                tmp.persist(&dest)
                    .map_err(|e| e.error)
                    .with_context(|| format!("cannot replace {}", shown.display()))?;
                Ok(())
            }
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.target {
            Target::Stdout(w) => w.write(buf),
            Target::InPlace(w) => w.write(buf),
            Target::Temp { file, .. } => file.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.target {
            Target::Stdout(w) => w.write_all(buf),
            Target::InPlace(w) => w.write_all(buf),
            Target::Temp { file, .. } => file.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.target {
            Target::Stdout(w) => w.flush(),
            Target::InPlace(w) => w.flush(),
            Target::Temp { file, .. } => file.flush(),
        }
    }
}

/// Whether an error chain holds a closed pipe (`| head`), which is not a failure.
pub(crate) fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    // Without inode numbers: same length and modification time is the best available hint.
    a.len() == b.len() && a.modified().ok() == b.modified().ok() && a.is_file() && b.is_file()
}

/// The mode of the file that replaces `dest`: the existing file's, or 0o666 less the umask
/// (applied by the OS at creation) for a new one, as `File::create` would give it.
#[cfg(unix)]
#[allow(
    clippy::unnecessary_wraps,
    reason = "the same signature as the other platforms', where the mode may be unknown"
)]
fn new_file_permissions(dest: &Path) -> Option<std::fs::Permissions> {
    use std::os::unix::fs::PermissionsExt;
    Some(match std::fs::metadata(dest) {
        Ok(m) => m.permissions(),
        Err(_) => std::fs::Permissions::from_mode(0o666),
    })
}

/// The existing file's permissions (a new file keeps the temporary file's defaults).
#[cfg(not(unix))]
fn new_file_permissions(dest: &Path) -> Option<std::fs::Permissions> {
    std::fs::metadata(dest).ok().map(|m| m.permissions())
}
