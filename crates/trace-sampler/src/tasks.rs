//! The process's threads as procfs lists them: their ids, and when to list them again.
//!
//! Listing `/proc/self/task` (a directory read, a name parse per thread) every few
//! milliseconds was a third of the ticker's own CPU time. procfs gives the task directory a
//! link count of the number of threads plus two, read with one `fstat` on the directory kept
//! open, so a [`Listing`] lists again only when that count moved (or cannot be read), and at
//! least every [`RELIST_EVERY`] in any case: one thread exiting and another starting between
//! two checks leave the count unchanged.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::time::{Duration, Instant};

/// How often the threads are listed again whatever their count.
pub(super) const RELIST_EVERY: Duration = Duration::from_millis(100);

/// The ids of the process's live threads.
pub(super) fn list() -> io::Result<Vec<u64>> {
    let mut tids = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

/// One thread's `/proc/self/task/<tid>/stat`, kept open to read its scheduling state again
/// and again (one `pread`, about 2 µs, where a signal sent to a thread that turns out to be
/// blocked costs the ticker a remote wake-up and the thread a wake-up, a handler run and a
/// return to its wait).
#[derive(Debug)]
pub(super) struct RunState(File);

impl RunState {
    /// Opens the state of the thread `tid` of this process (`None` when it cannot be opened:
    /// it exited, or the process is out of descriptors).
    pub(super) fn open(tid: u64) -> Option<RunState> {
        File::open(format!("/proc/self/task/{tid}/stat"))
            .ok()
            .map(RunState)
    }

    /// Whether the thread is running or runnable now (`R`): `Some(false)` when it waits
    /// (sleeping, in uninterruptible wait, stopped, …), `None` when the state cannot be read.
    pub(super) fn runnable(&self) -> Option<bool> {
        // The state follows the name in parentheses, at most 15 bytes, after the id: well
        // inside the first 64 bytes. Only numbers follow it, so the last `)` read ends the
        // name even when the name holds one.
        let mut buf = [0u8; 64];
        let n = self.0.read_at(&mut buf, 0).ok()?;
        state_is_runnable(buf.get(..n)?)
    }
}

/// Whether a `stat` line's state (the byte after the name's `) `) is `R`; `None` when the
/// line has no state.
fn state_is_runnable(line: &[u8]) -> Option<bool> {
    let close = line.iter().rposition(|&b| b == b')')?;
    line.get(close + 2).map(|&s| s == b'R')
}

/// When the threads were last listed, and whether they are due to be listed again.
#[derive(Debug)]
pub(super) struct Listing {
    /// `/proc/self/task`, open (`None` when it could not be opened: every check lists).
    dir: Option<File>,
    /// When the last listing that was applied was read, and the thread count then.
    last: Option<(Instant, Option<u64>)>,
}

/// A listing that was due: the thread ids, and the count to hand back to
/// [`Listing::applied`] once they are used.
pub(super) type Due = (Vec<u64>, Option<u64>);

impl Listing {
    /// Nothing listed yet: the first check lists.
    pub(super) fn new() -> Listing {
        Listing {
            dir: File::open("/proc/self/task").ok(),
            last: None,
        }
    }

    /// The thread count now, cheaply (`None` when it cannot be read).
    fn count(&self) -> Option<u64> {
        // Threads plus the directory's `.` and its entry in `/proc/self`.
        self.dir.as_ref()?.metadata().ok().map(|m| m.nlink())
    }

    /// The threads, when a listing is due: never applied yet, the count moved or cannot be
    /// read, or the last one is [`RELIST_EVERY`] old. `None` when none is due or the
    /// directory cannot be read (then the last listing stands).
    pub(super) fn if_due(&self) -> Option<Due> {
        let n = self.count();
        let due = self
            .last
            .is_none_or(|(at, was)| n.is_none() || n != was || at.elapsed() >= RELIST_EVERY);
        if !due {
            return None;
        }
        list().ok().map(|tids| (tids, n))
    }

    /// Records that a listing from [`Listing::if_due`] (read with count `n`) was applied: a
    /// listing read and then dropped (the window closed meanwhile) does not count, and the
    /// next check lists again.
    pub(super) fn applied(&mut self, n: Option<u64>) {
        self.last = Some((Instant::now(), n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn the_state_is_read_after_the_last_parenthesis() {
        assert_eq!(state_is_runnable(b"12 (a) R 1 2 3"), Some(true));
        assert_eq!(state_is_runnable(b"12 (a) S 1 2 3"), Some(false));
        // A name holding ") R " cannot pass for the state.
        assert_eq!(state_is_runnable(b"12 (x) R (y) S 1"), Some(false));
        assert_eq!(state_is_runnable(b"12 (x) D 0"), Some(false));
        assert_eq!(state_is_runnable(b"12 (cut"), None);
        assert_eq!(state_is_runnable(b"12 (x)"), None);
    }

    #[test]
    fn a_running_thread_reads_runnable_and_a_blocked_one_does_not() {
        let me = crate::signal::gettid();
        let mine = RunState::open(me).expect("this thread's stat");
        // The thread reading its own state is running.
        assert_eq!(mine.runnable(), Some(true));
        let (tid_tx, tid_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tid_tx.send(crate::signal::gettid()).unwrap();
            let _ = go_rx.recv();
        });
        let other = RunState::open(tid_rx.recv().unwrap()).expect("the other thread's stat");
        // It blocks in `recv` until told to go, which it is only after it was seen waiting.
        while other.runnable() != Some(false) {
            std::thread::yield_now();
        }
        drop(go_tx);
        t.join().unwrap();
    }

    #[test]
    fn a_listing_is_due_first_then_only_when_a_thread_starts_or_ends() {
        let mut listing = Listing::new();
        let (tids, n) = listing.if_due().expect("the first check lists");
        let me = crate::signal::gettid();
        assert!(tids.contains(&me), "{tids:?}");
        // Read but not applied: still due.
        assert!(listing.if_due().is_some());
        listing.applied(n);
        // Other tests' threads may start and end meanwhile: apply until a check finds the
        // count where the last listing left it.
        let settle = |listing: &mut Listing| {
            (0..100).any(|_| match listing.if_due() {
                None => true,
                Some((_, n)) => {
                    listing.applied(n);
                    false
                }
            })
        };
        assert!(settle(&mut listing), "the count never held still");
        // Three threads at once: the count moves by three, which other tests' threads
        // starting or ending at the same moment would hardly cancel.
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let go_rx = std::sync::Arc::new(std::sync::Mutex::new(go_rx));
        let (tid_tx, tid_rx) = mpsc::channel();
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let (tid_tx, go_rx) = (tid_tx.clone(), std::sync::Arc::clone(&go_rx));
                std::thread::spawn(move || {
                    tid_tx.send(crate::signal::gettid()).unwrap();
                    let _ = go_rx.lock().map(|rx| rx.recv());
                })
            })
            .collect();
        let others: Vec<u64> = (0..3).map(|_| tid_rx.recv().unwrap()).collect();
        let (tids, n) = listing.if_due().expect("threads started: due");
        assert!(
            others.iter().all(|t| tids.contains(t)),
            "{others:?} in {tids:?}"
        );
        listing.applied(n);
        assert!(settle(&mut listing), "the count never held still");
        drop(go_tx);
        for t in threads {
            t.join().unwrap();
        }
        let (tids, _) = listing.if_due().expect("threads ended: due");
        assert!(
            others.iter().all(|t| !tids.contains(t)),
            "{others:?} in {tids:?}"
        );
    }
}
