//! The background writer that bounds how long recorded lines wait in a session's buffer.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use super::output::{Output, lock};

/// A thread that wakes every `tick` and writes the session's buffered lines out when they
/// hold a finished step or would otherwise wait longer than `interval`
/// ([`Output::flush_due`]), so the trace on disk lags the program by about `interval` at most
/// and a finished step by about `tick`, while recording calls never make a syscall
/// themselves. Stopped (and joined) by [`Flusher::stop`] or on drop.
pub(super) struct Flusher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    /// Starts the thread, waking every `tick`; `None` when the OS refuses a thread (then
    /// lines are written when the block is full, at steps and at the end, as without an
    /// interval).
    pub(super) fn start(
        out: Weak<Mutex<Output>>,
        interval: Duration,
        tick: Duration,
    ) -> Option<Flusher> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let signal = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("trace-record-flush".into())
            .spawn(move || {
                loop {
                    let (flag, cv) = &*signal;
                    let stopped = cv
                        .wait_timeout_while(lock(flag), tick, |stopped| !*stopped)
                        .map_or(true, |(g, _)| *g);
                    if stopped {
                        return;
                    }
                    let Some(out) = out.upgrade() else { return };
                    let mut o = lock(&out);
                    if o.finished {
                        return;
                    }
                    if o.flush_due(interval, tick) {
                        o.write_block();
                        o.flush_sink();
                    }
                }
            })
            .ok()?;
        Some(Flusher {
            stop,
            thread: Some(thread),
        })
    }

    /// Asks the thread to stop (it ends at its next wake-up) without waiting for it.
    pub(super) fn request_stop(&self) {
        let (flag, cv) = &*self.stop;
        *lock(flag) = true;
        cv.notify_all();
    }

    /// Stops the thread and waits for it. Call it without holding the output's lock.
    pub(super) fn stop(&mut self) {
        self.request_stop();
        if let Some(t) = self.thread.take() {
            // The thread only writes under the output's lock and never panics on purpose; a
            // panic there has already been reported, and the session goes on without it.
            let _ = t.join();
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.stop();
    }
}
