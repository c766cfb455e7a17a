//! Step boundaries handed to the tracker's thread: an ordered marker, no work on the caller.
//!
//! At a step boundary ([`crate::on_step`], on the driving thread) nothing is drained, matched
//! or written: the caller switches the small-allocation tables to the next generation (one
//! store), pushes a [`Kind::Step`] entry into the buffer, after every allocation entry pushed
//! before it and before every one pushed after it, sets the allocator's state for the new
//! step, and wakes the tracker only every few steps or when the buffer fills. The tracker
//! reads the marker in its place and closes the step there, so each step gets one account of
//! its own however far behind the tracker runs. When it runs too far behind (every table
//! still waiting to be taken, or the buffer full) the boundary wakes it and waits: a step's
//! sums are never merged with the next's and a boundary is never dropped. A boundary nobody
//! hands over (a program that calls `TraceSession::step` alone) is handed over by the tracker
//! itself once it stayed pending for a whole poll (10 ms), and never after the program handed
//! one over itself, so that the tracker does not race the driving thread's own hand-over just
//! after `session.step()`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::Thread;
use std::time::Duration;

use trace_record::TraceSession;

use crate::hook::{self, ALLOCS, FREES};
use crate::ring::{self, Entry, Kind};
use crate::small;

/// The tracker is woken when this many ended steps wait for it: it works in batches, at
/// most a few times per [`small::GENERATIONS`] steps rather than at every boundary (on a
/// machine with few cores each wake-up takes a core from the program).
const WAKE_AFTER_STEPS: usize = small::GENERATIONS / 2;
/// The tracker is woken when this many entries wait for it.
const WAKE_AFTER_ENTRIES: u64 = (ring::SLOTS / 8) as u64;
/// How long a boundary that waits for the tracker sleeps between looks.
const WAIT: Duration = Duration::from_micros(20);

/// The address of the session the running tracker records into (0: none).
static SESSION: AtomicUsize = AtomicUsize::new(0);
/// The last step whose boundary was handed over.
static MARKED: AtomicU64 = AtomicU64::new(0);
/// Held while a boundary is handed over (one at a time: the driving thread's, or the
/// tracker's own for a boundary nobody handed over).
static HANDING: AtomicBool = AtomicBool::new(false);
/// Whether the program hands boundaries over itself (it called `on_step` in this run).
static DRIVEN: AtomicBool = AtomicBool::new(false);
/// The tracker's thread, to wake.
static WAKER: Mutex<Option<Thread>> = Mutex::new(None);

fn waker() -> MutexGuard<'static, Option<Thread>> {
    WAKER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn address(session: &TraceSession) -> usize {
    std::ptr::from_ref(session) as usize
}

/// Boundaries of `session` are handed to `tracker` from now on; the current step counts as
/// handed over.
pub(crate) fn arm(session: &TraceSession, tracker: Thread) {
    *waker() = Some(tracker);
    DRIVEN.store(false, Ordering::Relaxed);
    MARKED.store(session.current_step(), Ordering::Release);
    SESSION.store(address(session), Ordering::Release);
}

/// No boundary is handed over any more.
pub(crate) fn disarm() {
    SESSION.store(0, Ordering::Release);
    *waker() = None;
}

/// Whether boundaries of `session` are handed to a tracker.
#[inline]
pub(crate) fn is_for(session: &TraceSession) -> bool {
    SESSION.load(Ordering::Acquire) == address(session)
}

/// The program hands boundaries over itself: the tracker never does it for it.
#[inline]
pub(crate) fn drive() {
    if !DRIVEN.load(Ordering::Relaxed) {
        DRIVEN.store(true, Ordering::Relaxed);
    }
}

/// Whether the program hands boundaries over itself.
pub(crate) fn is_driven() -> bool {
    DRIVEN.load(Ordering::Relaxed)
}

/// The last step whose boundary was handed over.
pub(crate) fn marked() -> u64 {
    MARKED.load(Ordering::Acquire)
}

/// Wakes the tracker's thread.
pub(crate) fn wake() {
    if let Some(t) = waker().as_ref() {
        t.unpark();
    }
}

/// What a hand-over waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Another hand-over is under way.
    Turn,
    /// Every small-allocation table waits to be taken.
    Table,
    /// The buffer is full.
    Slot,
}

/// The driving thread's way of waiting: wake the tracker and sleep a little; give up only
/// when the tracker no longer records into `session`.
pub(crate) fn wait_for_tracker(session: &TraceSession, need: Need) -> bool {
    if need != Need::Turn {
        wake();
    }
    std::thread::sleep(WAIT);
    is_for(session) && !session.is_finished()
}

/// Hands the boundary into `session`'s current step to the tracker, unless it was handed over
/// already; `room` is called whenever the hand-over has to wait and says whether to go on
/// (false: give up). Returns whether the boundary is handed over.
pub(crate) fn hand_over(session: &TraceSession, room: &mut dyn FnMut(Need) -> bool) -> bool {
    let step = session.current_step();
    if marked() >= step || session.is_finished() {
        return true;
    }
    while HANDING
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        if !room(Need::Turn) {
            return false;
        }
    }
    let done = marked() >= step || mark(session, step, room);
    HANDING.store(false, Ordering::Release);
    done
}

/// The hand-over itself, with [`HANDING`] held.
fn mark(session: &TraceSession, step: u64, room: &mut dyn FnMut(Need) -> bool) -> bool {
    // The new step counts its small allocations in a table of its own.
    let generation = loop {
        match small::try_advance() {
            Some(g) => break g,
            None if room(Need::Table) => {}
            None => return false,
        }
    };
    let active = session.is_active();
    if !active {
        // Allocations made from here on are outside a recorded step.
        hook::stop_allocs();
    }
    let marker = Entry {
        kind: Kind::Step,
        addr: step,
        size: u64::from(active),
        // The allocator's clock, as its entries': the tracker converts both alike.
        ts: hook::now_raw(),
        thread: 0,
        scope: generation as u64,
    };
    let r = ring::ring();
    while !r.try_push(marker) {
        if !room(Need::Slot) {
            return false;
        }
    }
    if active {
        // Allocations recorded from here on come after the marker: the new step's.
        hook::set_state(ALLOCS | FREES);
    }
    MARKED.store(step, Ordering::Release);
    if small::waiting() >= WAKE_AFTER_STEPS || r.pending() >= WAKE_AFTER_ENTRIES {
        wake();
    }
    true
}
