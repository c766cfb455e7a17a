//! The recording path the allocator calls: state word, re-entrancy guard, clock, ring, table.
//!
//! Everything here runs inside the global allocator, so nothing allocates, locks or panics:
//! atomics, thread-locals with constant initializers (no lazy registration, no destructor)
//! read through `try_with`, the current scope word ([`trace_sampler::current_packed`]: the
//! same thread-local and atomic reads) and the monotonic clock. Allocations at or above the
//! threshold go into the [`crate::ring`]; smaller ones are counted per scope in the
//! [`crate::small`] table.
//!
//! The thread that ends the steps (the one that started the tracker or calls
//! [`crate::on_step`], a model's driving thread, which makes nearly all of a Candle model's
//! small allocations) keeps its counts aside: while its allocations stay in one scope they
//! are summed in a thread-local cell, and added to the table only when the scope changes, at
//! each step boundary (before the step is handed over) and at [`crate::stop`]. A table slot
//! is a cache line that a step's first allocation in a new span misses, and a model's compute
//! between two allocations evicts it again; the thread-local cell is on the line the hook
//! reads anyway (its guard).

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};

use crate::ring::{self, Entry, Kind};
use crate::small::{self, Kept};

/// State bit: allocations are recorded (a recorded window of the session is open).
pub(crate) const ALLOCS: u8 = 1;
/// State bit: frees are recorded (allocations recorded earlier may still be live).
pub(crate) const FREES: u8 = 2;
/// State bit: a tracker is checking that this allocator is the global one.
pub(crate) const PROBE: u8 = 4;

/// What the allocator does now: 0 (nothing, the one relaxed load), or a set of the bits above.
static STATE: AtomicU8 = AtomicU8::new(0);
/// Allocations of at least this many bytes are tracked one by one.
static THRESHOLD: AtomicUsize = AtomicUsize::new(crate::DEFAULT_THRESHOLD);
/// Set by the allocator when it sees [`PROBE`]: it is the process's global allocator.
static PROBED: AtomicBool = AtomicBool::new(false);
/// The allocator's clock and its origin (set before any tracker turns recording on).
static EPOCH: OnceLock<(quanta::Clock, u64)> = OnceLock::new();
/// The next thread number.
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Set while this thread is inside the hook (re-entrancy), and for good on the tracker's
    /// own thread, whose allocations (its buffers, the trace lines) are not the program's.
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// This thread's number (0: not yet numbered).
    static THREAD_NO: Cell<u64> = const { Cell::new(0) };
    /// The tracking run in which this thread keeps its small counts aside (it ends steps);
    /// 0 or an earlier run: it adds them to the table one by one.
    static KEEPS: Cell<usize> = const { Cell::new(0) };
    /// The small counts this thread keeps aside, of one scope.
    static KEPT: Cell<Kept> = const { Cell::new(Kept::NONE) };
}

/// The state word (one relaxed load).
#[inline(always)]
pub(crate) fn state() -> u8 {
    STATE.load(Ordering::Relaxed)
}

/// Sets the state word.
pub(crate) fn set_state(s: u8) {
    STATE.store(s, Ordering::Release);
}

/// Stops recording allocations, keeping the other bits (a recorded step ended: its blocks'
/// frees are still seen).
pub(crate) fn stop_allocs() {
    STATE.fetch_and(!ALLOCS, Ordering::AcqRel);
}

/// Stops seeing frees when they are all that is recorded (no window open, no tracked block
/// live); a state that records allocations again is left as it is.
pub(crate) fn stop_frees() {
    let _ = STATE.compare_exchange(FREES, 0, Ordering::AcqRel, Ordering::Relaxed);
}

/// Sets the threshold.
pub(crate) fn set_threshold(bytes: usize) {
    THRESHOLD.store(bytes, Ordering::Relaxed);
}

/// Sets the allocator's clock and its origin, once (at the first tracker's start, outside
/// the allocator: making a `quanta::Clock` may allocate and calibrates the first time).
pub(crate) fn start_clock() {
    EPOCH.get_or_init(|| {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        (clock, origin)
    });
}

/// Nanoseconds since the clock's origin (0 before [`start_clock`]): the CPU's invariant
/// time-stamp counter through `quanta` (one `rdtsc` and a multiply), or the OS's monotonic
/// clock where the counter is not invariant.
#[inline]
pub(crate) fn now_raw() -> u64 {
    match EPOCH.get() {
        Some((clock, origin)) => clock.delta_as_nanos(*origin, clock.raw()),
        None => 0,
    }
}

/// Whether this process's global allocator is a [`crate::TrackingAlloc`]: allocates one
/// block with the probe bit set and sees whether the allocator noticed.
pub(crate) fn probe() -> bool {
    PROBED.store(false, Ordering::Relaxed);
    set_state(PROBE);
    let block = std::hint::black_box(vec![0u8; 64]);
    drop(block);
    set_state(0);
    PROBED.load(Ordering::Relaxed)
}

/// Marks the calling thread as the tracker's own: its allocations are never recorded.
pub(crate) fn ignore_this_thread() {
    let _ = BUSY.try_with(|b| b.set(true));
}

/// Runs `f` unless this thread is already inside the hook (or is the tracker's own).
#[inline]
fn guarded(f: impl FnOnce()) {
    let entered = BUSY.try_with(|b| !b.replace(true)).unwrap_or(false);
    if entered {
        f();
        let _ = BUSY.try_with(|b| b.set(false));
    }
}

fn thread_no() -> u64 {
    THREAD_NO
        .try_with(|c| {
            let n = c.get();
            if n != 0 {
                return n;
            }
            let n = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
            c.set(n);
            n
        })
        .unwrap_or(0)
}

/// The current scope (phase and innermost span) packed into one word, read as the sampler
/// keeps it ([`trace_sampler::current_packed`]: no unpacking and packing again).
#[inline]
pub(crate) fn packed_scope() -> u64 {
    trace_sampler::current_packed()
}

/// Called after an allocation of `size` bytes at `addr` succeeded, with the state read once.
#[inline]
pub(crate) fn on_alloc(state: u8, addr: usize, size: usize) {
    if state & PROBE != 0 {
        PROBED.store(true, Ordering::Relaxed);
    }
    if state & ALLOCS == 0 {
        return;
    }
    record_alloc(addr, size);
}

#[inline(never)]
fn record_alloc(addr: usize, size: usize) {
    guarded(|| {
        let scope = packed_scope();
        if size >= THRESHOLD.load(Ordering::Relaxed) {
            ring::ring().push(Entry {
                kind: Kind::Alloc,
                addr: addr as u64,
                size: size as u64,
                ts: now_raw(),
                thread: thread_no(),
                scope,
            });
        } else {
            count_small(scope, size as u64);
        }
    });
}

/// Counts a small allocation: kept aside by a thread that ends steps, else in the table.
#[inline]
fn count_small(scope: u64, bytes: u64) {
    let run = small::run();
    let keeps = KEEPS.try_with(Cell::get).is_ok_and(|r| r == run);
    let kept = keeps
        && KEPT
            .try_with(|k| {
                let mut c = k.get();
                let generation = small::current();
                if c.count != 0 && c.scope == scope && c.generation == generation && c.run == run {
                    c.count += 1;
                    c.bytes = c.bytes.saturating_add(bytes);
                    k.set(c);
                } else {
                    k.set(Kept {
                        scope,
                        generation,
                        run,
                        count: 1,
                        bytes,
                    });
                    small::add_kept(c, thread_no());
                }
            })
            .is_ok();
    if !kept {
        small::table().add(scope, thread_no(), 1, bytes);
    }
}

/// The calling thread ends steps: from now on, in this tracking run, it keeps its small
/// counts aside (see the module's documentation).
pub(crate) fn keep_small_counts() {
    let _ = KEEPS.try_with(|r| r.set(small::run()));
}

/// Adds the small counts the calling thread kept aside to their table (at a step boundary,
/// before it is handed over, and when tracking stops).
pub(crate) fn flush_kept() {
    guarded(|| {
        let _ = KEPT.try_with(|k| small::add_kept(k.replace(Kept::NONE), thread_no()));
    });
}

/// Called before a block of `size` bytes at `addr` is freed (or reallocated), with the state
/// read once; returns whether a free was recorded.
#[inline]
pub(crate) fn on_free(state: u8, addr: usize, size: usize) -> bool {
    if state & FREES == 0 || size < THRESHOLD.load(Ordering::Relaxed) {
        return false;
    }
    record_free(addr, size)
}

#[inline(never)]
fn record_free(addr: usize, size: usize) -> bool {
    let mut recorded = false;
    guarded(|| {
        recorded = ring::ring().push(Entry {
            kind: Kind::Free,
            addr: addr as u64,
            size: size as u64,
            ts: now_raw(),
            thread: thread_no(),
            scope: 0,
        });
    });
    recorded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_refuses_reentry() {
        let mut inner_ran = false;
        guarded(|| guarded(|| inner_ran = true));
        assert!(!inner_ran);
        let mut ran = false;
        guarded(|| ran = true);
        assert!(ran);
    }
}
