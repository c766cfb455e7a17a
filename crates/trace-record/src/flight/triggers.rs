//! The flight recorder's triggers that need state: the slow-step window and the trigger file.

use std::path::PathBuf;
use std::time::SystemTime;

/// The largest slow-step window.
pub(crate) const MAX_WINDOW: usize = 256;

/// The durations of the last `window` steps, in a fixed ring; the median is found by
/// selection in a scratch copy (O(M), no allocation after the first).
#[derive(Debug)]
pub(crate) struct SlowWindow {
    factor: f64,
    durations: Vec<u64>,
    scratch: Vec<u64>,
    next: usize,
    window: usize,
}

/// A step slower than the median allows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Slow {
    pub(crate) step_ns: u64,
    pub(crate) median_ns: u64,
    pub(crate) factor: f64,
    pub(crate) window: usize,
}

impl SlowWindow {
    pub(crate) fn new(factor: f64, window: usize) -> Self {
        let window = window.clamp(1, MAX_WINDOW);
        SlowWindow {
            factor,
            durations: Vec::with_capacity(window),
            scratch: Vec::with_capacity(window),
            next: 0,
            window,
        }
    }

    /// Checks a finished step's duration against the median of the window before it, then
    /// adds it to the window.
    pub(crate) fn observe(&mut self, dur_ns: u64) -> Option<Slow> {
        let slow = if self.durations.len() == self.window {
            self.scratch.clear();
            self.scratch.extend_from_slice(&self.durations);
            let mid = self.window / 2;
            let (_, &mut median, _) = self.scratch.select_nth_unstable(mid);
            #[allow(
                clippy::cast_precision_loss,
                reason = "step durations far below 2^53 ns compare exactly enough"
            )]
            let fires = (dur_ns as f64) > self.factor * (median as f64);
            fires.then_some(Slow {
                step_ns: dur_ns,
                median_ns: median,
                factor: self.factor,
                window: self.window,
            })
        } else {
            None
        };
        if self.durations.len() < self.window {
            self.durations.push(dur_ns);
        } else {
            self.durations[self.next] = dur_ns;
        }
        self.next = (self.next + 1) % self.window;
        slow
    }
}

/// A trigger file looked at no more often than the poll interval.
#[derive(Debug)]
pub(crate) struct FilePoll {
    pub(crate) path: PathBuf,
    every_ns: u64,
    last_poll_ns: Option<u64>,
    seen: Option<SystemTime>,
}

impl FilePoll {
    pub(crate) fn new(path: PathBuf, every_ns: u64) -> Self {
        // A file there before the session started does not fire; a change to it does.
        let seen = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        FilePoll {
            path,
            every_ns,
            last_poll_ns: None,
            seen,
        }
    }

    /// Whether the file appeared or changed since it was last looked at (looks only when the
    /// interval has passed at `now_ns`).
    pub(crate) fn poll(&mut self, now_ns: u64) -> bool {
        if self
            .last_poll_ns
            .is_some_and(|t| now_ns.saturating_sub(t) < self.every_ns)
        {
            return false;
        }
        self.last_poll_ns = Some(now_ns);
        let Ok(modified) = std::fs::metadata(&self.path).and_then(|m| m.modified()) else {
            return false;
        };
        let fired = self.seen != Some(modified);
        self.seen = Some(modified);
        fired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_fires_only_above_factor_times_the_median_of_a_full_window() {
        let mut w = SlowWindow::new(3.0, 5);
        // Not before the window is full.
        for d in [10, 12, 1_000, 11, 9] {
            assert_eq!(w.observe(d), None);
        }
        // Median of [10, 12, 1000, 11, 9] is 11: 33 does not fire, 34 does.
        assert_eq!(w.observe(33), None);
        // Window now [33, 12, 1000, 11, 9] (oldest replaced): median 12.
        let s = w.observe(37).unwrap();
        assert_eq!((s.step_ns, s.median_ns, s.window), (37, 12, 5));
    }
}
