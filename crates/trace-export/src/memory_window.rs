//! Memory counter time resolution: a window's states cut to its peaks and its end.
//!
//! The Chrome export's logical memory counters change whenever the live bytes do; a training
//! op that allocates its output and frees its input a few hundred ns later changes them twice.
//! At a resolution of `N` ns, the states of one device whose times fall in one window
//! `[k·N, (k+1)·N)` are reduced to those a viewer needs to show the same peaks and the same
//! value after the window:
//!
//! - the state at which the device's total was highest in the window (the first such state),
//!   at its own time;
//! - for each category whose bytes in the window went above every value of it written so
//!   far, the state at which that category was highest (when no other kept state already
//!   shows it that high), so each category's overall peak is still shown;
//! - the state at the window's end (the last one in it), at its own time.
//!
//! They are written in the order they happened, each as a whole state (every category that
//! differs from what is shown), so every category's counter always shows that category's
//! bytes at a real moment. Only the order of changes inside one window is simplified.

use trace_record::schema::MemoryCategory;

/// Bytes per memory category, in [`MemoryCategory::ALL`] order.
pub(crate) type PerCategory = [u64; MemoryCategory::ALL.len()];

/// The bytes of every category together (saturating).
pub(crate) fn total(bytes: &[u64]) -> u64 {
    bytes.iter().fold(0u64, |a, &b| a.saturating_add(b))
}

/// One state of a device: its bytes per category from time `ts` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct State {
    /// When the device got these bytes, ns.
    pub(crate) ts: u64,
    /// Live bytes per category.
    pub(crate) bytes: PerCategory,
    /// Position of the state in its window (0 for the first), to keep the written order.
    seq: u32,
}

/// Most states one window writes: its peak, one per category, its end.
const MAX_KEPT: usize = MemoryCategory::ALL.len() + 2;

/// The states of one device in the window now open.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    /// Which window (`ts / resolution`) is open; `None` when no state is held.
    index: Option<u64>,
    /// States seen in it.
    count: u32,
    /// The first state with the highest total, and that total.
    peak: State,
    peak_total: u64,
    /// Per category, the first state in which that category was highest.
    category_peaks: [State; MemoryCategory::ALL.len()],
    /// The last state.
    last: State,
}

impl Default for Window {
    fn default() -> Self {
        let empty = State {
            ts: 0,
            bytes: [0; MemoryCategory::ALL.len()],
            seq: 0,
        };
        Window {
            index: None,
            count: 0,
            peak: empty,
            peak_total: 0,
            category_peaks: [empty; MemoryCategory::ALL.len()],
            last: empty,
        }
    }
}

impl Window {
    /// The window index of time `ts` at `resolution` ns (> 0).
    pub(crate) fn index_of(ts: u64, resolution: u64) -> u64 {
        ts / resolution.max(1)
    }

    /// Whether a state of window `index` belongs to another window than the open one (the
    /// open one must be taken first).
    pub(crate) fn is_other(&self, index: u64) -> bool {
        self.index.is_some_and(|i| i != index)
    }

    /// Adds the state `bytes` from `ts` on, of window `index` (the open one, or the first).
    pub(crate) fn push(&mut self, index: u64, ts: u64, bytes: PerCategory) {
        let state = State {
            ts,
            bytes,
            seq: self.count,
        };
        let t = total(&bytes);
        if self.index.is_none() {
            self.index = Some(index);
            self.peak = state;
            self.peak_total = t;
            self.category_peaks = [state; MemoryCategory::ALL.len()];
        } else {
            if t > self.peak_total {
                self.peak = state;
                self.peak_total = t;
            }
            for (c, p) in self.category_peaks.iter_mut().enumerate() {
                if bytes[c] > p.bytes[c] {
                    *p = state;
                }
            }
        }
        self.last = state;
        self.count = self.count.saturating_add(1);
    }

    /// Closes the window: the states to write, in the order they happened, given the
    /// largest bytes of each category written so far (`shown_max`). Empty when no state was
    /// held; the window is then empty again.
    pub(crate) fn take(&mut self, shown_max: &PerCategory) -> Kept {
        let mut kept = Kept {
            states: [self.last; MAX_KEPT],
            len: 0,
        };
        if self.index.take().is_none() {
            return kept;
        }
        kept.add(self.peak);
        kept.add(self.last);
        for (c, p) in self.category_peaks.iter().enumerate() {
            let high = p.bytes[c];
            let shown = kept.states[..kept.len].iter().any(|s| s.bytes[c] >= high);
            if high > shown_max[c] && !shown {
                kept.add(*p);
            }
        }
        kept.states[..kept.len].sort_unstable_by_key(|s| s.seq);
        self.count = 0;
        kept
    }
}

/// The states a window keeps, in the order they happened.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kept {
    states: [State; MAX_KEPT],
    len: usize,
}

impl Kept {
    /// Adds `s` unless it is kept already.
    fn add(&mut self, s: State) {
        if !self.states[..self.len].iter().any(|k| k.seq == s.seq) && self.len < MAX_KEPT {
            self.states[self.len] = s;
            self.len += 1;
        }
    }

    /// The kept states, in the order they happened.
    pub(crate) fn states(&self) -> &[State] {
        &self.states[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &[u64]) -> PerCategory {
        let mut b = [0; MemoryCategory::ALL.len()];
        b[..v.len()].copy_from_slice(v);
        b
    }

    fn ts_of(k: &Kept) -> Vec<u64> {
        k.states().iter().map(|s| s.ts).collect()
    }

    #[test]
    fn a_window_keeps_its_peak_and_its_end() {
        let mut w = Window::default();
        for (ts, b) in [(1, [10]), (2, [30]), (3, [20]), (4, [25])] {
            w.push(0, ts, bytes(&b));
        }
        let k = w.take(&bytes(&[100]));
        assert_eq!(ts_of(&k), vec![2, 4]);
        assert!(w.take(&bytes(&[])).states().is_empty());
        // One state: written once.
        w.push(3, 7, bytes(&[5]));
        assert_eq!(ts_of(&w.take(&bytes(&[]))), vec![7]);
    }

    #[test]
    fn a_category_above_what_was_shown_keeps_its_own_peak() {
        let mut w = Window::default();
        // Category 0 peaks at ts 1, the total at ts 3 (category 1).
        for (ts, b) in [(1, [50, 0]), (2, [0, 0]), (3, [0, 80]), (4, [0, 10])] {
            w.push(0, ts, bytes(&b));
        }
        assert_eq!(ts_of(&w.take(&bytes(&[40]))), vec![1, 3, 4]);
        for (ts, b) in [(1, [50, 0]), (2, [0, 0]), (3, [0, 80]), (4, [0, 10])] {
            w.push(0, ts, bytes(&b));
        }
        // Category 0 was shown at 50 already: its peak needs no state.
        assert_eq!(ts_of(&w.take(&bytes(&[50]))), vec![3, 4]);
    }

    #[test]
    fn another_window_index_is_told_apart() {
        let mut w = Window::default();
        assert!(!w.is_other(5));
        w.push(5, 5_000, bytes(&[1]));
        assert!(!w.is_other(5));
        assert!(w.is_other(6));
        assert_eq!(Window::index_of(1_999, 1_000), 1);
    }
}
