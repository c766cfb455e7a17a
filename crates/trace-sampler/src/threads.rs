//! One task-clock event per thread of the process, kept in step with the threads that live.
//!
//! The kernel has no "every thread of this process, on each thread's own clock" event that
//! signals the thread itself, so the set is kept by hand: [`Threads::arm`] opens (and
//! enables) an event for every thread listed in `/proc/self/task` but the sampler's own, and
//! the sampler thread calls [`Threads::rescan`] every few milliseconds while armed (which
//! lists the threads again when their count moved, see [`crate::tasks::Listing`]), opening
//! events for threads created since (a thread pool started inside a step) and closing those
//! of threads that exited. A thread is thus sampled from at most one rescan period after it
//! starts. A thread id the kernel reuses within one period (ids are handed out cyclically up
//! to `pid_max`, so only after that many thread creations) keeps the dead thread's event and
//! goes unsampled until the sampler stops.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};

use crate::perf_sys::TaskClock;
use crate::signal::{SELF_TID, gettid};
use crate::tasks;

/// The events of a sampling process's threads.
#[derive(Debug)]
pub(super) struct Threads {
    period_ns: u64,
    /// The kernel lets this process count only user-space CPU time.
    user_only: bool,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    armed: bool,
    events: HashMap<u64, TaskClock>,
    /// When the threads were last listed (listed again only when their count moved).
    listing: tasks::Listing,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Threads {
    /// A disarmed set sampling every `period_ns` of each thread's CPU time, after checking
    /// that the kernel lets this process open such an event (on the calling thread, whose
    /// event it keeps): the error is the kernel's refusal (`EACCES` under
    /// `perf_event_paranoid` 3, `ENOSYS` or `EPERM` under seccomp, …). Time in the kernel
    /// (system calls, page faults) is counted where the kernel allows it; where it allows
    /// only user space (`perf_event_paranoid` 2), that time is not sampled.
    pub(super) fn probe(period_ns: u64) -> io::Result<Threads> {
        let me = gettid();
        let (first, user_only) = match TaskClock::open(me, period_ns, libc::SIGPROF, false) {
            Ok(ev) => (ev, false),
            Err(_) => (TaskClock::open(me, period_ns, libc::SIGPROF, true)?, true),
        };
        // The scan must work too, or threads started later would go unsampled.
        tasks::list()?;
        Ok(Threads {
            period_ns,
            user_only,
            state: Mutex::new(State {
                armed: false,
                events: HashMap::from([(me, first)]),
                listing: tasks::Listing::new(),
            }),
        })
    }

    /// Starts sampling every live thread (but the sampler's own); returns the first error
    /// when no thread could be sampled.
    pub(super) fn arm(&self) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.armed = true;
        self.sync(&mut st);
        let mut enabled = 0usize;
        let mut first_err = None;
        for ev in st.events.values() {
            match ev.enable() {
                Ok(()) => enabled += 1,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) if enabled == 0 => {
                st.armed = false;
                Err(e)
            }
            _ => Ok(()),
        }
    }

    /// Stops sampling every thread (the events stay open for the next [`Threads::arm`]).
    pub(super) fn disarm(&self) {
        let mut st = lock(&self.state);
        st.armed = false;
        for ev in st.events.values() {
            let _ = ev.disable();
        }
    }

    /// While armed: opens events for threads started since the last scan, closes those of
    /// threads that exited.
    pub(super) fn rescan(&self) {
        let mut st = lock(&self.state);
        if st.armed {
            self.sync(&mut st);
        }
    }

    /// Threads with an open event.
    #[cfg(test)]
    fn sampled(&self) -> HashSet<u64> {
        lock(&self.state).events.keys().copied().collect()
    }

    fn sync(&self, st: &mut State) {
        let Some((tids, n)) = st.listing.if_due() else {
            return;
        };
        let skip = SELF_TID.load(Ordering::Relaxed);
        let live: HashSet<u64> = tids.into_iter().filter(|&t| t != skip).collect();
        st.listing.applied(n);
        st.events.retain(|tid, _| live.contains(tid));
        for tid in live {
            if st.events.contains_key(&tid) {
                continue;
            }
            // A thread that exited since the listing (ESRCH) or one the process may not
            // open (out of descriptors) is tried again at the next scan.
            if let Ok(ev) = TaskClock::open(tid, self.period_ns, libc::SIGPROF, self.user_only) {
                if st.armed {
                    let _ = ev.enable();
                }
                st.events.insert(tid, ev);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn threads_started_later_are_opened_and_exited_ones_closed() {
        // Signals are never delivered here: the events stay disabled (not armed), so only
        // the bookkeeping is exercised. Where the kernel refuses perf events, nothing to do.
        let Ok(threads) = Threads::probe(1_000_000) else {
            return;
        };
        let me = gettid();
        assert!(threads.sampled().contains(&me));
        let (tid_tx, tid_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tid_tx.send(gettid()).unwrap();
            let _ = go_rx.recv();
        });
        let other = tid_rx.recv().unwrap();
        // Disarmed, a rescan changes nothing.
        threads.rescan();
        assert!(!threads.sampled().contains(&other));
        {
            let mut st = lock(&threads.state);
            threads.sync(&mut st);
        }
        assert!(threads.sampled().contains(&other));
        drop(go_tx);
        t.join().unwrap();
        {
            let mut st = lock(&threads.state);
            threads.sync(&mut st);
        }
        let now = threads.sampled();
        assert!(!now.contains(&other) && now.contains(&me), "{now:?}");
    }
}
