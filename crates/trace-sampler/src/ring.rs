//! The preallocated sample buffer the signal handler writes and the sampler thread drains.
//!
//! A fixed number of slots, each holding one raw stack (instruction pointers, innermost
//! first) with its thread, step and scope. A handler claims the next slot round-robin
//! (`EMPTY → WRITING`), fills it and publishes it (`FULL`, release); the sampler thread takes
//! every `FULL` slot (acquire) and frees it. A handler that finds its slot still taken counts
//! the sample as lost: nothing blocks, nothing allocates, no sample is half-read.
//!
//! The drain looks only at the slots claimed since the last drain (each handler counts itself
//! done when it has published or given up, so once every claim is done the drain's cursor
//! moves past them), not at all 2048 slots of a megabyte or more each time: at a drain every
//! few milliseconds a full scan was several percent of a core in cache misses alone.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Frames kept per sample (innermost first; deeper stacks lose their outermost frames).
pub(super) const MAX_DEPTH: usize = 128;
/// Slots: at 1 kHz per busy thread and a drain every few milliseconds, far more than needed.
pub(super) const SLOTS: usize = 2048;

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const FULL: u8 = 2;

struct Slot {
    state: AtomicU8,
    len: AtomicU32,
    truncated: AtomicU8,
    tid: AtomicU64,
    step: AtomicU64,
    scope: AtomicU64,
    ips: [AtomicUsize; MAX_DEPTH],
}

impl Slot {
    fn new() -> Slot {
        Slot {
            state: AtomicU8::new(EMPTY),
            len: AtomicU32::new(0),
            truncated: AtomicU8::new(0),
            tid: AtomicU64::new(0),
            step: AtomicU64::new(0),
            scope: AtomicU64::new(0),
            ips: std::array::from_fn(|_| AtomicUsize::new(0)),
        }
    }
}

/// The sample buffer (one per process, shared by successive samplers).
pub(super) struct Ring {
    slots: Box<[Slot]>,
    next: AtomicUsize,
    /// Claims finished (published, or counted lost): equal to `next` when no handler is
    /// writing.
    done: AtomicUsize,
    /// The first claim the drain has not yet seen finished.
    cursor: AtomicUsize,
    /// Samples lost (their slot was still full), by step modulo [`LOST_STEPS`]: each step's
    /// account takes its own, not those lost while later steps ran and the sampler thread
    /// lagged behind (which would claim more samples than the step's CPU time allows).
    lost: Box<[AtomicU64]>,
}

/// Steps whose lost samples are kept apart (a sampler thread lagging further behind folds
/// older steps' losses into a later step with the same residue).
const LOST_STEPS: usize = 64;

/// One drained sample.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct RawSample {
    pub(super) tid: u64,
    pub(super) step: u64,
    pub(super) scope: u64,
    /// Instruction pointers, innermost first.
    pub(super) ips: Vec<usize>,
    /// The stack was deeper than [`MAX_DEPTH`].
    pub(super) truncated: bool,
}

static RING: OnceLock<Ring> = OnceLock::new();

/// The process's ring (allocated on first use, about 2 MiB).
pub(super) fn ring() -> &'static Ring {
    RING.get_or_init(|| Ring::with_slots(SLOTS))
}

impl Ring {
    fn with_slots(n: usize) -> Ring {
        Ring {
            slots: (0..n.max(1)).map(|_| Slot::new()).collect(),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            cursor: AtomicUsize::new(0),
            lost: (0..LOST_STEPS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records one sample: `walk` is called with a `push` function taking each frame's
    /// instruction pointer (innermost first) and returning whether to go on. Lock-free and
    /// allocation-free (safe to call from a signal handler).
    pub(super) fn record(
        &self,
        tid: u64,
        step: u64,
        scope: u64,
        walk: impl FnOnce(&mut dyn FnMut(usize) -> bool),
    ) {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let slot = &self.slots[i];
        if slot
            .state
            .compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lost[(step % LOST_STEPS as u64) as usize].fetch_add(1, Ordering::Relaxed);
            self.done.fetch_add(1, Ordering::Release);
            return;
        }
        let mut n = 0usize;
        let mut truncated = false;
        walk(&mut |ip| {
            if n < MAX_DEPTH {
                slot.ips[n].store(ip, Ordering::Relaxed);
                n += 1;
                true
            } else {
                truncated = true;
                false
            }
        });
        slot.len.store(n as u32, Ordering::Relaxed);
        slot.truncated.store(u8::from(truncated), Ordering::Relaxed);
        slot.tid.store(tid, Ordering::Relaxed);
        slot.step.store(step, Ordering::Relaxed);
        slot.scope.store(scope, Ordering::Relaxed);
        slot.state.store(FULL, Ordering::Release);
        self.done.fetch_add(1, Ordering::Release);
    }

    /// Takes every published sample, calling `f` with each (one buffer, refilled for each
    /// sample: a drain allocates once, not per sample). Returns whether some claim was still
    /// being written (its sample is taken by a later drain).
    pub(super) fn drain(&self, mut f: impl FnMut(&RawSample)) -> bool {
        // `done` first: when it equals `next` read after it, every claim before `next` has
        // finished and its slot's state is visible (acquire on the release of `done`).
        let done = self.done.load(Ordering::Acquire);
        let end = self.next.load(Ordering::Acquire);
        let n = self.slots.len();
        // Claims older than the last `n` share their slots with newer ones.
        let mut i = self
            .cursor
            .load(Ordering::Relaxed)
            .max(end.saturating_sub(n));
        let mut busy = done != end;
        let mut sample = RawSample::default();
        while i < end {
            let slot = &self.slots[i % n];
            match slot.state.load(Ordering::Acquire) {
                FULL => {
                    let len = (slot.len.load(Ordering::Relaxed) as usize).min(MAX_DEPTH);
                    sample.tid = slot.tid.load(Ordering::Relaxed);
                    sample.step = slot.step.load(Ordering::Relaxed);
                    sample.scope = slot.scope.load(Ordering::Relaxed);
                    sample.ips.clear();
                    sample
                        .ips
                        .extend(slot.ips[..len].iter().map(|ip| ip.load(Ordering::Relaxed)));
                    sample.truncated = slot.truncated.load(Ordering::Relaxed) != 0;
                    slot.state.store(EMPTY, Ordering::Release);
                    f(&sample);
                }
                WRITING => busy = true,
                _ => {}
            }
            i += 1;
        }
        if !busy {
            self.cursor.store(end, Ordering::Relaxed);
        }
        busy
    }

    /// Samples of `step` lost since the last call for it (their slot was still full).
    pub(super) fn take_lost(&self, step: u64) -> u64 {
        self.lost[(step % LOST_STEPS as u64) as usize].swap(0, Ordering::Relaxed)
    }

    /// Samples of every step lost since the last calls.
    pub(super) fn take_all_lost(&self) -> u64 {
        self.lost.iter().map(|l| l.swap(0, Ordering::Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_round_trip_and_a_full_ring_counts_losses() {
        let ring = Ring::with_slots(4);
        for k in 0..6u64 {
            ring.record(7, k, 3, |push| {
                for ip in [10usize, 20, 30] {
                    if !push(ip + k as usize) {
                        break;
                    }
                }
            });
        }
        // Four slots: the fifth and sixth samples found their slot full.
        // Per step: steps 4 and 5 lost theirs.
        assert_eq!((ring.take_lost(3), ring.take_lost(4)), (0, 1));
        assert_eq!(ring.take_all_lost(), 1);
        assert_eq!(ring.take_all_lost(), 0);
        let mut got = Vec::new();
        assert!(!ring.drain(|s| got.push(s.clone())));
        assert_eq!(got.len(), 4);
        // Taken in slot order from the oldest claim the slots still hold.
        got.sort_by_key(|s| s.step);
        assert_eq!(
            got[0],
            RawSample {
                tid: 7,
                step: 0,
                scope: 3,
                ips: vec![10, 20, 30],
                truncated: false
            }
        );
        // Drained slots are free again.
        ring.record(1, 9, 0, |push| {
            push(1);
        });
        let mut again = Vec::new();
        ring.drain(|s| again.push(s.clone()));
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].step, 9);
    }

    #[test]
    fn a_drain_during_a_write_leaves_the_claim_for_the_next_drain() {
        let ring = Ring::with_slots(8);
        ring.record(1, 0, 0, |push| {
            push(1);
        });
        let mut first = Vec::new();
        // A drain that runs while the second sample is half written (as the sampler thread
        // may, while a handler runs on another thread) takes the first, reports the writer
        // and leaves its cursor before the claim in flight.
        ring.record(2, 0, 0, |push| {
            push(2);
            assert!(ring.drain(|s| first.push(s.tid)));
        });
        assert_eq!(first, vec![1]);
        let mut second = Vec::new();
        assert!(!ring.drain(|s| second.push(s.tid)));
        assert_eq!(second, vec![2]);
        // Nothing new: nothing taken, nothing busy.
        assert!(!ring.drain(|_| panic!("no sample is taken twice")));
    }

    #[test]
    fn the_cursor_follows_the_claims_around_the_ring() {
        let ring = Ring::with_slots(4);
        let mut taken = Vec::new();
        for round in 0..10u64 {
            for k in 0..3u64 {
                ring.record(round, k, 0, |push| {
                    push(1);
                });
            }
            ring.drain(|s| taken.push((s.tid, s.step)));
        }
        let want: Vec<(u64, u64)> = (0..10).flat_map(|r| (0..3).map(move |k| (r, k))).collect();
        assert_eq!(taken, want);
        assert_eq!(ring.take_all_lost(), 0);
    }

    #[test]
    fn deep_stacks_keep_their_innermost_frames() {
        let ring = Ring::with_slots(1);
        ring.record(1, 0, 0, |push| {
            let mut ip = 0usize;
            while push(ip) {
                ip += 1;
            }
        });
        let mut got = Vec::new();
        ring.drain(|s| got.push(s.clone()));
        assert_eq!(got[0].ips.len(), MAX_DEPTH);
        assert_eq!(got[0].ips[0], 0);
        assert!(got[0].truncated);
    }

    #[test]
    fn concurrent_writers_lose_nothing_silently() {
        let ring = std::sync::Arc::new(Ring::with_slots(64));
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let ring = std::sync::Arc::clone(&ring);
                std::thread::spawn(move || {
                    for k in 0..1000u64 {
                        ring.record(t, k, 0, |push| {
                            push(1);
                        });
                    }
                })
            })
            .collect();
        let mut taken = 0u64;
        let mut done = false;
        while !done {
            done = handles.iter().all(std::thread::JoinHandle::is_finished);
            ring.drain(|_| taken += 1);
        }
        for h in handles {
            h.join().unwrap();
        }
        while ring.drain(|_| taken += 1) {}
        ring.drain(|_| taken += 1);
        // Every sample was either taken or counted lost.
        assert_eq!(taken + ring.take_all_lost(), 4000);
    }
}
