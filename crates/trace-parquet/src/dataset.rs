//! A dataset directory written run by run: each run's partition built aside and swapped in
//! whole, and no link inside the dataset ever followed.
//!
//! [`Dataset::begin_run`] creates `ROOT/.tmp-run=<value>-<pid>-<n>` (a new directory, made
//! with `mkdirat` relative to the open root), [`RunBuild::rank_outputs`] creates
//! `rank=<rank>` in it and one new file per table (`O_CREAT | O_EXCL | O_NOFOLLOW`, relative
//! to the open directory), and [`RunBuild::commit`] replaces `ROOT/run=<value>` in one step:
//! with `renameat2(RENAME_EXCHANGE)` where the file system has it (Linux), else by renaming
//! the old partition aside, the new one in, and the old one back on failure. Only then is the
//! old partition removed, and only after checking that it held nothing but tables an export
//! wrote (`rank=<n>` directories of `<table>.parquet` files that are Parquet): anything else,
//! or a symbolic link anywhere in it, is an error naming it, and the old partition stays as
//! it was. A build dropped without commit removes its own directory and nothing else.
//!
//! The root is the one path followed as given (the user named it, a link included). A run's
//! build left behind by a killed process (SIGKILL; no handler can run) is removed by the
//! next [`Dataset::begin_run`] of that run, once `/proc` shows its process gone.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::ParquetError;
use crate::partition::{partition_value, run_partition_name};
use crate::tables::Table;
use crate::writer::MAX_RANK;

/// Builds of this process, numbered (the `<n>` of a temporary directory's name).
static BUILDS: AtomicU64 = AtomicU64::new(0);

/// A dataset's root directory, held open: every path below it is reached from it.
pub struct Dataset {
    root: PathBuf,
    dir: os::Dir,
}

/// One run's partition being built aside; [`commit`](Self::commit) swaps it in, dropping it
/// removes it.
pub struct RunBuild<'a> {
    dataset: &'a Dataset,
    /// `run=<value>`.
    name: String,
    /// `.tmp-run=<value>-<pid>-<n>`.
    tmp: String,
    dir: Option<os::Dir>,
    ranks: Vec<u32>,
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset").field("root", &self.root).finish()
    }
}

impl std::fmt::Debug for RunBuild<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunBuild")
            .field("name", &self.name)
            .field("tmp", &self.tmp)
            .field("ranks", &self.ranks)
            .finish_non_exhaustive()
    }
}

fn at(path: &Path) -> impl FnOnce(io::Error) -> ParquetError + '_ {
    move |source| ParquetError::Dataset {
        path: path.to_path_buf(),
        source,
    }
}

impl Dataset {
    /// Opens the dataset at `root`, creating it (and its parents) when missing. `root` itself
    /// may be a symbolic link to a directory: the user named it.
    pub fn open(root: &Path) -> Result<Dataset, ParquetError> {
        std::fs::create_dir_all(root).map_err(at(root))?;
        let dir = os::Dir::open_root(root).map_err(at(root))?;
        Ok(Dataset {
            root: root.to_path_buf(),
            dir,
        })
    }

    /// The root as given.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Starts building the partition of run `run_id` in a new temporary directory of the
    /// root, after removing the builds of that run that dead processes left behind.
    pub fn begin_run(&self, run_id: &str) -> Result<RunBuild<'_>, ParquetError> {
        let name = run_partition_name(run_id);
        let value = partition_value(run_id);
        self.sweep_stale(&value);
        let pid = std::process::id();
        let n = BUILDS.fetch_add(1, Ordering::Relaxed);
        let tmp = format!(".tmp-run={value}-{pid}-{n}");
        let path = self.root.join(&tmp);
        self.dir.mkdir(&tmp).map_err(at(&path))?;
        let mut build = RunBuild {
            dataset: self,
            name,
            tmp,
            dir: None,
            ranks: Vec::new(),
        };
        build.dir = Some(self.dir.open_dir(&build.tmp).map_err(at(&path))?);
        Ok(build)
    }

    /// Removes `.tmp-run=<value>-<pid>-<n>` and `.old-run=<value>-<pid>-<n>` directories whose
    /// process is known to be gone (`/proc` is there and `/proc/<pid>` is not). Errors leave
    /// them.
    fn sweep_stale(&self, value: &str) {
        if !Path::new("/proc/self").exists() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| builder_pid(n, value)) else {
                continue;
            };
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            // Only a build that holds nothing but what an export writes: a directory of the
            // same name with anything else in it is somebody's, and stays.
            if is_dir
                && pid != std::process::id()
                && !Path::new("/proc").join(pid.to_string()).exists()
                && name
                    .to_str()
                    .is_some_and(|n| check_old_partition(&self.dir, n, &entry.path()).is_ok())
            {
                // Symlink-safe: `remove_dir_all` never follows a link inside the tree.
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// The process of a build directory of partition value `value`
/// (`.tmp-run=<value>-<pid>-<n>` or `.old-run=<value>-<pid>-<n>`), if the name has exactly
/// that shape.
fn builder_pid(name: &str, value: &str) -> Option<u32> {
    let rest = name
        .strip_prefix(".tmp-run=")
        .or_else(|| name.strip_prefix(".old-run="))?
        .strip_prefix(value)?
        .strip_prefix('-')?;
    let (pid, n) = rest.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !(digits(pid) && digits(n)) {
        return None;
    }
    pid.parse().ok()
}

impl RunBuild<'_> {
    fn tmp_path(&self) -> PathBuf {
        self.dataset.root.join(&self.tmp)
    }

    /// Creates the rank's directory in the build and one new, empty file per table, in
    /// [`Table::ALL`] order (the outputs of [`write_tables`](crate::write_tables)).
    ///
    /// Errors: a rank beyond [`MAX_RANK`], a rank already added, or a directory or file that
    /// could not be created (an existing name is an error: nothing is opened through a link).
    pub fn rank_outputs(&mut self, rank: u32) -> Result<[File; Table::COUNT], ParquetError> {
        if rank > MAX_RANK {
            return Err(ParquetError::RankOutOfRange { rank });
        }
        let sub = format!("rank={rank}");
        let path = self.tmp_path().join(&sub);
        if self.ranks.contains(&rank) {
            return Err(ParquetError::Dataset {
                path,
                source: io::Error::new(io::ErrorKind::AlreadyExists, "rank given twice"),
            });
        }
        let dir = self.dir.as_ref().ok_or_else(|| ParquetError::Dataset {
            path: path.clone(),
            source: io::Error::other("the build was already committed"),
        })?;
        dir.mkdir(&sub).map_err(at(&path))?;
        let rank_dir = dir.open_dir(&sub).map_err(at(&path))?;
        self.ranks.push(rank);
        let mut files = Vec::with_capacity(Table::COUNT);
        for t in Table::ALL {
            let f = rank_dir
                .create_file(t.file_name())
                .map_err(at(&path.join(t.file_name())))?;
            files.push(f);
        }
        files.try_into().map_err(|_| ParquetError::Dataset {
            path,
            source: io::Error::other("one file per table"),
        })
    }

    /// Makes the build durable and swaps it in as the run's partition, replacing the old
    /// partition whole; then removes the old one. On any error before the swap the old
    /// partition is as it was and the build is removed.
    ///
    /// Errors: a symbolic link at `run=<value>` or anywhere in the old partition
    /// ([`ParquetError::Symlink`]), a file or directory there that no export wrote
    /// ([`ParquetError::Foreign`]), or a failed sync or rename.
    pub fn commit(mut self) -> Result<(), ParquetError> {
        let root = &self.dataset.root;
        let part = root.join(&self.name);
        let Some(dir) = self.dir.take() else {
            return Ok(());
        };
        dir.sync_all().map_err(at(&self.tmp_path()))?;
        drop(dir);
        let ds = &self.dataset.dir;
        // A race (another export of the run swapping its partition in meanwhile) is retried;
        // three tries end it with the last error.
        let mut tries = 0;
        loop {
            tries += 1;
            match ds.kind(&self.name).map_err(at(&part))? {
                None => match ds.rename_noreplace(&self.tmp, &self.name) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 3 => {}
                    Err(e) => return Err(at(&part)(e)),
                },
                Some(os::Kind::Symlink) => return Err(ParquetError::Symlink { path: part }),
                Some(os::Kind::Dir) => {
                    check_old_partition(ds, &self.name, &part)?;
                    self.swap(&part)?;
                    break;
                }
                Some(_) => {
                    return Err(ParquetError::Foreign {
                        path: part,
                        what: "not a directory",
                    });
                }
            }
        }
        ds.sync().map_err(at(root))?;
        Ok(())
    }

    /// Replaces the directory `self.name` by the build (both in the root), then removes the
    /// old one (its content checked by [`check_old_partition`]).
    fn swap(&mut self, part: &Path) -> Result<(), ParquetError> {
        let ds = &self.dataset.dir;
        let old = match ds.exchange(&self.tmp, &self.name) {
            // The old partition now has the build's name.
            Ok(true) => self.tmp.clone(),
            Ok(false) => {
                let aside = self.tmp.replacen(".tmp-run=", ".old-run=", 1);
                ds.rename(&self.name, &aside).map_err(at(part))?;
                if let Err(e) = ds.rename(&self.tmp, &self.name) {
                    // Put the old one back: the dataset is as it was.
                    let _ = ds.rename(&aside, &self.name);
                    return Err(at(part)(e));
                }
                aside
            }
            Err(e) => return Err(at(part)(e)),
        };
        // Committed: what remains to remove is the program's own replaced output.
        self.tmp.clear();
        let _ = std::fs::remove_dir_all(self.dataset.root.join(old));
        Ok(())
    }
}

impl Drop for RunBuild<'_> {
    fn drop(&mut self) {
        // Uncommitted: remove the build (only this directory, which this build created).
        self.dir = None;
        if !self.tmp.is_empty() {
            let _ = std::fs::remove_dir_all(self.tmp_path());
        }
    }
}

/// Checks that the old partition `name` (a directory of `ds`) holds only what an export
/// writes: `rank=<n>` directories of `<table>.parquet` regular files starting with Parquet's
/// magic `PAR1`, or an earlier version's temporary tables (`.<table>.parquet.<pid>.<x>.tmp`).
fn check_old_partition(ds: &os::Dir, name: &str, part: &Path) -> Result<(), ParquetError> {
    let dir = ds.open_dir(name).map_err(at(part))?;
    for (entry, kind) in dir.list().map_err(at(part))? {
        let path = part.join(&entry);
        let rank_dir = entry
            .to_str()
            .and_then(|n| n.strip_prefix("rank="))
            .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()));
        match kind {
            os::Kind::Symlink => return Err(ParquetError::Symlink { path }),
            os::Kind::Dir if rank_dir => {}
            _ => {
                return Err(ParquetError::Foreign {
                    path,
                    what: "not a rank=<n> directory",
                });
            }
        }
        let sub = dir.open_dir(&entry).map_err(at(&path))?;
        for (file, kind) in sub.list().map_err(at(&path))? {
            let fpath = path.join(&file);
            let name = file.to_str().unwrap_or("");
            let table = Table::ALL.iter().any(|t| t.file_name() == name);
            let old_temp = Table::ALL.iter().any(|t| {
                name.strip_prefix('.')
                    .and_then(|n| n.strip_prefix(t.file_name()))
                    .is_some_and(|rest| rest.starts_with('.') && rest.ends_with(".tmp"))
            });
            match kind {
                os::Kind::Symlink => return Err(ParquetError::Symlink { path: fpath }),
                os::Kind::File if old_temp => {}
                os::Kind::File if table => {
                    let mut magic = [0u8; 4];
                    let mut f = sub.open_file(&file).map_err(at(&fpath))?;
                    let parquet = f.read_exact(&mut magic).is_ok() && &magic == b"PAR1";
                    if !parquet {
                        return Err(ParquetError::Foreign {
                            path: fpath,
                            what: "not a Parquet file",
                        });
                    }
                }
                _ => {
                    return Err(ParquetError::Foreign {
                        path: fpath,
                        what: "not a table's file",
                    });
                }
            }
        }
    }
    Ok(())
}

/// Directory handles: `openat`-style on Unix (nothing below the root is reached by a path),
/// paths elsewhere.
mod os {
    #[cfg(not(unix))]
    use super::PathBuf;
    use super::{File, OsString, Path, io};

    /// What a directory entry is (never following a link).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Kind {
        Dir,
        File,
        Symlink,
        Other,
    }

    #[cfg(unix)]
    pub(super) use unix::Dir;

    #[cfg(not(unix))]
    pub(super) use other::Dir;

    #[cfg(unix)]
    mod unix {
        use std::os::fd::OwnedFd;

        use rustix::fs::{AtFlags, FileType, Mode, OFlags};

        use super::{File, Kind, OsString, Path, io};

        /// An open directory.
        pub(in super::super) struct Dir {
            fd: OwnedFd,
        }

        fn dir_flags() -> OFlags {
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
        }

        impl Dir {
            /// Opens the root, following a link (the user named it).
            pub(in super::super) fn open_root(path: &Path) -> io::Result<Dir> {
                let fd = rustix::fs::open(path, dir_flags(), Mode::empty())?;
                Ok(Dir { fd })
            }

            /// Creates the directory `name` in this one (an existing name, a link included,
            /// is an error).
            pub(in super::super) fn mkdir(&self, name: &str) -> io::Result<()> {
                rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o777))?;
                Ok(())
            }

            /// Opens the directory `name` of this one, never through a link.
            pub(in super::super) fn open_dir(&self, name: impl AsRef<Path>) -> io::Result<Dir> {
                let fd = rustix::fs::openat(
                    &self.fd,
                    name.as_ref(),
                    dir_flags() | OFlags::NOFOLLOW,
                    Mode::empty(),
                )?;
                Ok(Dir { fd })
            }

            /// Creates the new file `name` (never an existing one, never through a link).
            pub(in super::super) fn create_file(&self, name: &str) -> io::Result<File> {
                let fd = rustix::fs::openat(
                    &self.fd,
                    name,
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o666),
                )?;
                Ok(File::from(fd))
            }

            /// Opens the regular file `name` to read, never through a link.
            pub(in super::super) fn open_file(&self, name: impl AsRef<Path>) -> io::Result<File> {
                let fd = rustix::fs::openat(
                    &self.fd,
                    name.as_ref(),
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                Ok(File::from(fd))
            }

            /// What `name` is, without following a link; `None` when absent.
            pub(in super::super) fn kind(&self, name: &str) -> io::Result<Option<Kind>> {
                match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => Ok(Some(kind_of(FileType::from_raw_mode(st.st_mode)))),
                    Err(rustix::io::Errno::NOENT) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            }

            /// Every entry but `.` and `..`, with what it is (not following links).
            pub(in super::super) fn list(&self) -> io::Result<Vec<(OsString, Kind)>> {
                use std::os::unix::ffi::OsStrExt as _;
                let mut out = Vec::new();
                for entry in rustix::fs::Dir::read_from(&self.fd)? {
                    let entry = entry?;
                    let bytes = entry.file_name().to_bytes();
                    if bytes == b"." || bytes == b".." {
                        continue;
                    }
                    let name = std::ffi::OsStr::from_bytes(bytes).to_os_string();
                    let st = rustix::fs::statat(&self.fd, &*name, AtFlags::SYMLINK_NOFOLLOW)?;
                    out.push((name, kind_of(FileType::from_raw_mode(st.st_mode))));
                }
                Ok(out)
            }

            /// Renames `from` to `to` in this directory when `to` does not exist.
            pub(in super::super) fn rename_noreplace(
                &self,
                from: &str,
                to: &str,
            ) -> io::Result<()> {
                #[cfg(any(target_os = "linux", target_os = "android"))]
                {
                    use rustix::fs::RenameFlags;
                    match rustix::fs::renameat_with(
                        &self.fd,
                        from,
                        &self.fd,
                        to,
                        RenameFlags::NOREPLACE,
                    ) {
                        Ok(()) => return Ok(()),
                        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                // Without the flag: `rename` of a directory fails on a non-empty one.
                self.rename(from, to)
            }

            /// Swaps `a` and `b` in this directory atomically; `false` when the file system
            /// cannot (the caller renames instead).
            pub(in super::super) fn exchange(&self, a: &str, b: &str) -> io::Result<bool> {
                #[cfg(any(target_os = "linux", target_os = "android"))]
                {
                    use rustix::fs::RenameFlags;
                    match rustix::fs::renameat_with(&self.fd, a, &self.fd, b, RenameFlags::EXCHANGE)
                    {
                        Ok(()) => return Ok(true),
                        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                let _ = (a, b);
                Ok(false)
            }

            /// Renames `from` to `to` in this directory.
            pub(in super::super) fn rename(&self, from: &str, to: &str) -> io::Result<()> {
                rustix::fs::renameat(&self.fd, from, &self.fd, to)?;
                Ok(())
            }

            /// Makes everything written under this directory durable: one `syncfs` on Linux
            /// (a build of many ranks costs one call, not one per file), else every file and
            /// directory synced.
            pub(in super::super) fn sync_all(&self) -> io::Result<()> {
                #[cfg(any(target_os = "linux", target_os = "android"))]
                {
                    rustix::fs::syncfs(&self.fd)?;
                    Ok(())
                }
                #[cfg(not(any(target_os = "linux", target_os = "android")))]
                {
                    for (name, kind) in self.list()? {
                        match kind {
                            Kind::Dir => self.open_dir(&name)?.sync_all()?,
                            Kind::File => rustix::fs::fsync(self.open_file(&name)?)?,
                            _ => {}
                        }
                    }
                    self.sync()
                }
            }

            /// Makes this directory's entries durable.
            pub(in super::super) fn sync(&self) -> io::Result<()> {
                rustix::fs::fsync(&self.fd)?;
                Ok(())
            }
        }

        fn kind_of(t: FileType) -> Kind {
            match t {
                FileType::Directory => Kind::Dir,
                FileType::RegularFile => Kind::File,
                FileType::Symlink => Kind::Symlink,
                _ => Kind::Other,
            }
        }
    }

    #[cfg(not(unix))]
    mod other {
        use super::{File, Kind, OsString, Path, PathBuf, io};

        /// A directory by path (no `openat` here): links are still refused by
        /// `symlink_metadata` checks and `create_new`.
        pub(in super::super) struct Dir {
            path: PathBuf,
        }

        fn kind_of(m: &std::fs::Metadata) -> Kind {
            let t = m.file_type();
            if t.is_symlink() {
                Kind::Symlink
            } else if t.is_dir() {
                Kind::Dir
            } else if t.is_file() {
                Kind::File
            } else {
                Kind::Other
            }
        }

        impl Dir {
            pub(in super::super) fn open_root(path: &Path) -> io::Result<Dir> {
                Ok(Dir {
                    path: std::fs::canonicalize(path)?,
                })
            }

            pub(in super::super) fn mkdir(&self, name: &str) -> io::Result<()> {
                std::fs::create_dir(self.path.join(name))
            }

            pub(in super::super) fn open_dir(&self, name: impl AsRef<Path>) -> io::Result<Dir> {
                let path = self.path.join(name);
                if kind_of(&std::fs::symlink_metadata(&path)?) != Kind::Dir {
                    return Err(io::Error::other("not a directory"));
                }
                Ok(Dir { path })
            }

            pub(in super::super) fn create_file(&self, name: &str) -> io::Result<File> {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(self.path.join(name))
            }

            pub(in super::super) fn open_file(&self, name: impl AsRef<Path>) -> io::Result<File> {
                let path = self.path.join(name);
                if kind_of(&std::fs::symlink_metadata(&path)?) != Kind::File {
                    return Err(io::Error::other("not a regular file"));
                }
                File::open(path)
            }

            pub(in super::super) fn kind(&self, name: &str) -> io::Result<Option<Kind>> {
                match std::fs::symlink_metadata(self.path.join(name)) {
                    Ok(m) => Ok(Some(kind_of(&m))),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e),
                }
            }

            pub(in super::super) fn list(&self) -> io::Result<Vec<(OsString, Kind)>> {
                let mut out = Vec::new();
                for e in std::fs::read_dir(&self.path)? {
                    let e = e?;
                    out.push((
                        e.file_name(),
                        kind_of(&std::fs::symlink_metadata(e.path())?),
                    ));
                }
                Ok(out)
            }

            pub(in super::super) fn rename_noreplace(
                &self,
                from: &str,
                to: &str,
            ) -> io::Result<()> {
                if self.kind(to)?.is_some() {
                    return Err(io::Error::from(io::ErrorKind::AlreadyExists));
                }
                self.rename(from, to)
            }

            pub(in super::super) fn exchange(&self, _: &str, _: &str) -> io::Result<bool> {
                Ok(false)
            }

            pub(in super::super) fn rename(&self, from: &str, to: &str) -> io::Result<()> {
                std::fs::rename(self.path.join(from), self.path.join(to))
            }

            pub(in super::super) fn sync_all(&self) -> io::Result<()> {
                for (name, kind) in self.list()? {
                    match kind {
                        Kind::Dir => self.open_dir(&name)?.sync_all()?,
                        Kind::File => File::open(self.path.join(&name))?.sync_all()?,
                        _ => {}
                    }
                }
                Ok(())
            }

            pub(in super::super) fn sync(&self) -> io::Result<()> {
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::builder_pid;

    #[test]
    fn only_the_exact_build_pattern_names_a_process() {
        assert_eq!(builder_pid(".tmp-run=job-12-0", "job"), Some(12));
        assert_eq!(builder_pid(".old-run=job-12-3", "job"), Some(12));
        assert_eq!(builder_pid(".tmp-run=job-x-12-0", "job"), None);
        assert_eq!(builder_pid(".tmp-run=job-12-0", "jo"), None);
        assert_eq!(builder_pid(".tmp-run=job-12-", "job"), None);
        assert_eq!(builder_pid("run=job-12-0", "job"), None);
        assert_eq!(builder_pid(".tmp-run=job-12-0.bak", "job"), None);
    }
}
