//! The fixed lock-free buffer of tracked allocations, frees and step boundaries.
//!
//! A bounded multi-producer, single-consumer queue (Vyukov's, with each slot's sequence
//! stored relative to its index so that the whole buffer is zero-initialized static memory):
//! a producer claims the next position with a compare-exchange, fills the slot and publishes
//! it (release); the tracker's thread takes published slots in position order (acquire), so
//! entries come out in the order their positions were claimed. A free is pushed before its
//! block goes back to the allocator and an allocation after it was made, so a block's free
//! comes out before an allocation that reuses its address. A producer that finds the buffer
//! full drops its entry and counts it: nothing blocks, nothing allocates.
//!
//! A step boundary is an entry too ([`Kind::Step`], pushed by `boundary.rs` with
//! [`Ring::try_push`], which never drops: its caller makes room and tries again), so the
//! tracker reads each boundary in its place among the allocations: every entry before it
//! belongs to the step that ended, every entry after it to the next.

use std::sync::atomic::{AtomicU64, Ordering};

/// Slots (a power of two): at a drain every 10 ms (at once when an eighth full), room for
/// millions of tracked allocations and frees per second.
pub(crate) const SLOTS: usize = 1 << 16;
const MASK: u64 = SLOTS as u64 - 1;

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An allocation.
    Alloc,
    /// A free.
    Free,
    /// A step boundary: `addr` is the new step's index, `size` 1 when it is recorded, `scope` the small-allocation generation the
    /// new step counts in.
    Step,
}

impl Kind {
    const fn code(self) -> u64 {
        match self {
            Kind::Alloc => 0,
            Kind::Free => 1,
            Kind::Step => 2,
        }
    }

    const fn from_code(code: u64) -> Kind {
        match code {
            1 => Kind::Free,
            2 => Kind::Step,
            _ => Kind::Alloc,
        }
    }
}

/// One tracked allocation or free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) kind: Kind,
    pub(crate) addr: u64,
    pub(crate) size: u64,
    /// The allocator's clock ([`crate::hook::now_raw`]).
    pub(crate) ts: u64,
    pub(crate) thread: u64,
    /// The packed scope ([`trace_sampler::pack_scope`]); 0 for frees.
    pub(crate) scope: u64,
}

struct Slot {
    /// The slot's sequence minus its index: `lap` when free for the position `lap + index`,
    /// `lap + 1` when that position's entry is published.
    seq: AtomicU64,
    /// The size, shifted left by two, with the kind's code in bits 0 and 1.
    size_kind: AtomicU64,
    addr: AtomicU64,
    ts: AtomicU64,
    thread: AtomicU64,
    scope: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            seq: AtomicU64::new(0),
            size_kind: AtomicU64::new(0),
            addr: AtomicU64::new(0),
            ts: AtomicU64::new(0),
            thread: AtomicU64::new(0),
            scope: AtomicU64::new(0),
        }
    }
}

/// The buffer (one per process: there is one global allocator).
pub(crate) struct Ring {
    slots: [Slot; SLOTS],
    /// The next position a producer claims.
    tail: AtomicU64,
    /// The next position the consumer takes (written only by the consumer).
    head: AtomicU64,
    /// Entries dropped because the buffer was full.
    lost: AtomicU64,
}

static RING: Ring = Ring {
    slots: [const { Slot::new() }; SLOTS],
    tail: AtomicU64::new(0),
    head: AtomicU64::new(0),
    lost: AtomicU64::new(0),
};

/// The process's buffer.
pub(crate) fn ring() -> &'static Ring {
    &RING
}

impl Ring {
    /// Appends `e`, or counts it lost when the buffer is full; returns whether it was kept.
    #[inline]
    pub(crate) fn push(&self, e: Entry) -> bool {
        let kept = self.try_push(e);
        if !kept {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
        kept
    }

    /// Appends `e` unless the buffer is full (then nothing is counted: the caller keeps it).
    #[inline]
    pub(crate) fn try_push(&self, e: Entry) -> bool {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[(pos & MASK) as usize];
            let lap = pos & !MASK;
            let seq = slot.seq.load(Ordering::Acquire);
            if seq == lap {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        slot.size_kind
                            .store(e.size << 2 | e.kind.code(), Ordering::Relaxed);
                        slot.addr.store(e.addr, Ordering::Relaxed);
                        slot.ts.store(e.ts, Ordering::Relaxed);
                        slot.thread.store(e.thread, Ordering::Relaxed);
                        slot.scope.store(e.scope, Ordering::Relaxed);
                        slot.seq.store(lap | 1, Ordering::Release);
                        return true;
                    }
                    Err(now) => pos = now,
                }
            } else if seq < lap {
                // The slot still holds the entry of the lap before: the buffer is full.
                return false;
            } else {
                // Another producer took this position; look again.
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest published entry, if any. One consumer at a time (the tracker holds
    /// its lock while draining).
    pub(crate) fn pop(&self) -> Option<Entry> {
        let pos = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[(pos & MASK) as usize];
        let lap = pos & !MASK;
        if slot.seq.load(Ordering::Acquire) != lap | 1 {
            return None;
        }
        let size_kind = slot.size_kind.load(Ordering::Relaxed);
        let e = Entry {
            kind: Kind::from_code(size_kind & 0b11),
            size: size_kind >> 2,
            addr: slot.addr.load(Ordering::Relaxed),
            ts: slot.ts.load(Ordering::Relaxed),
            thread: slot.thread.load(Ordering::Relaxed),
            scope: slot.scope.load(Ordering::Relaxed),
        };
        slot.seq
            .store(lap.wrapping_add(SLOTS as u64), Ordering::Release);
        self.head.store(pos.wrapping_add(1), Ordering::Relaxed);
        Some(e)
    }

    /// Entries claimed and not yet taken (an estimate while producers push).
    pub(crate) fn pending(&self) -> u64 {
        let tail = self.tail.load(Ordering::Relaxed);
        tail.saturating_sub(self.head.load(Ordering::Relaxed))
    }

    /// Takes and resets the count of lost entries.
    pub(crate) fn take_lost(&self) -> u64 {
        self.lost.swap(0, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u64) -> Entry {
        Entry {
            kind: match i % 3 {
                0 => Kind::Alloc,
                1 => Kind::Free,
                _ => Kind::Step,
            },
            addr: i * 16,
            size: 4096 + i,
            ts: i,
            thread: 1,
            scope: i << 2,
        }
    }

    /// One test drives the process's one buffer (the test binary's allocator is the system
    /// one, so nothing else pushes): order, fullness, loss and reuse across laps.
    #[test]
    fn entries_come_out_in_order_and_a_full_buffer_counts_losses() {
        let r = ring();
        while r.pop().is_some() {}
        r.take_lost();
        for lap in 0..3u64 {
            for i in 0..SLOTS as u64 {
                assert!(r.push(entry(lap * 7 + i)));
            }
            assert_eq!(r.pending(), SLOTS as u64);
            assert!(!r.push(entry(0)), "full");
            assert!(!r.push(entry(1)), "full");
            assert!(!r.try_push(entry(2)), "full, and not counted");
            assert_eq!(r.take_lost(), 2);
            for i in 0..SLOTS as u64 {
                assert_eq!(r.pop(), Some(entry(lap * 7 + i)));
            }
            assert_eq!(r.pop(), None);
            assert_eq!(r.pending(), 0);
        }
        // Producers on several threads: every entry comes out once.
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        while !ring().push(entry(t * 100_000 + i)) {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut seen = Vec::new();
        while seen.len() < 40_000 {
            match r.pop() {
                Some(e) => seen.push(e.ts),
                None => std::thread::yield_now(),
            }
        }
        for t in threads {
            t.join().unwrap();
        }
        r.take_lost();
        // Each producer's entries come out in its own order.
        for t in 0..4u64 {
            let mine: Vec<u64> = seen
                .iter()
                .copied()
                .filter(|&ts| ts / 100_000 == t)
                .collect();
            assert_eq!(
                mine,
                (0..10_000).map(|i| t * 100_000 + i).collect::<Vec<_>>()
            );
        }
    }
}
