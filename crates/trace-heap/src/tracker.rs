//! The process's one heap tracker: start, follow the session's steps, drain, stop.
//!
//! [`start`] checks that the global allocator is a [`crate::TrackingAlloc`], then starts the
//! tracker's thread, which drains the allocator's buffer into trace lines when woken (every
//! few step boundaries, or when the buffer fills) and at least every 10 ms: it keeps the live
//! blocks by address, gives each tracked allocation an id (never its address, which is
//! reused), matches each free to its allocation, and at each step boundary it reads in the
//! buffer (`boundary.rs`) closes the step that ended: that step's small-allocation sums and
//! its account. [`on_step`] hands a boundary over at once and returns; [`stop`] drains what
//! is left and ends the thread. The tracker is the process's (there is one global
//! allocator); each call names the session it is for.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use trace_record::TraceSession;
use trace_record::schema::{
    Event, ExecStep, HeapAccountEvent, HeapAllocEvent, HeapFreeEvent, HeapSmallEvent,
};

use crate::boundary::{self, Need};
use crate::hook::{self, ALLOCS, FREES};
use crate::ring::{self, Kind};
use crate::small;
use crate::{HeapConfig, HeapError, HeapStats};

/// How often the tracker's thread drains the buffer when nothing wakes it: rarely, since each
/// wake-up takes a core from the program (step boundaries wake it every few steps, and a
/// filling buffer at once).
const POLL: Duration = Duration::from_millis(10);
/// How many times [`stop`] looks again for entries claimed and not yet published.
const LAST_LOOKS: usize = 10_000;

/// A map keyed by small integers (block addresses, scopes): the tracker's thread looks one up
/// per tracked allocation and free, where SipHash's cost showed.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// The running tracker, if any.
static RUNNING: Mutex<Option<Running>> = Mutex::new(None);
/// Whether `RUNNING` holds a tracker (kept beside it, under its lock), so that a step boundary
/// with no tracker is one relaxed load rather than a lock.
static ANY_RUNNING: AtomicBool = AtomicBool::new(false);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct Running {
    drain: Arc<Mutex<Drain>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Keeps the recorder publishing its scopes while tracking.
    _scopes: trace_sampler::ScopeDemand,
}

/// The tracker's side of the buffer: what it needs to turn entries into lines.
struct Drain {
    session: Arc<TraceSession>,
    threshold: u64,
    /// Session time minus the allocator's clock, ns.
    offset: i128,
    /// Live tracked blocks: address → (id, bytes).
    live: FastMap<u64, (u64, u64)>,
    next_id: u64,
    /// The recorded step being tracked: (step, start ns), when a window is open.
    window: Option<(u64, u64)>,
    /// Counts for the current step's account.
    step_lost: u64,
    step_unmatched: u64,
    stats: HeapStats,
    events: Vec<Event>,
    /// A closing step's small sums per scope, and where each scope is in it (kept for their
    /// capacity).
    small: Vec<small::Taken>,
    small_at: FastMap<(Option<ExecStep>, Option<u64>), usize>,
    /// Since when a boundary of the session has not been handed over, if one is pending.
    behind_since: Option<Instant>,
}

/// Starts tracking the heap allocations of the process into `session`, inside its recorded
/// steps, until [`stop`].
///
/// # Errors
/// [`HeapError::NotInstalled`] when the program's global allocator is not a
/// [`crate::TrackingAlloc`], [`HeapError::Busy`] when a tracker already runs (into a session
/// that has not finished),
/// [`HeapError::InvalidThreshold`] for a zero threshold, [`HeapError::Io`] when the thread
/// cannot start.
pub fn start(session: &Arc<TraceSession>, config: HeapConfig) -> Result<(), HeapError> {
    if config.threshold == 0 {
        return Err(HeapError::InvalidThreshold);
    }
    let mut running = lock(&RUNNING);
    if let Some(r) = running.as_mut() {
        // A tracker whose session finished without `stop` has ended its thread: it is done,
        // and makes way (its lines after the finish were not written, as counted).
        if !lock(&r.drain).session.is_finished() {
            return Err(HeapError::Busy);
        }
        boundary::disarm();
        r.stop.store(true, Ordering::Release);
        if let Some(t) = r.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        *running = None;
        ANY_RUNNING.store(false, Ordering::Relaxed);
    }
    if !hook::probe() {
        return Err(HeapError::NotInstalled);
    }
    // Entries and sums left by an earlier tracker are not this one's.
    let r = ring::ring();
    while r.pop().is_some() {}
    r.take_lost();
    small::clear();
    hook::keep_small_counts();
    hook::set_threshold(config.threshold);
    hook::start_clock();
    let a = hook::now_raw();
    let s = session.now_ns();
    let b = hook::now_raw();
    let offset = i128::from(s) - i128::from(a / 2 + b / 2);
    let drain = Arc::new(Mutex::new(Drain {
        session: Arc::clone(session),
        threshold: config.threshold as u64,
        offset,
        live: FastMap::default(),
        next_id: 1,
        window: None,
        step_lost: 0,
        step_unmatched: 0,
        stats: HeapStats {
            threshold: config.threshold as u64,
            ..HeapStats::default()
        },
        events: Vec::new(),
        small: Vec::new(),
        small_at: FastMap::default(),
        behind_since: None,
    }));
    let scopes = trace_sampler::ScopeDemand::new();
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let thread = {
        let drain = Arc::clone(&drain);
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("tg-heap".into())
            .spawn(move || {
                hook::ignore_this_thread();
                trace_record::record_beside_the_program();
                let _ = ready_tx.send(());
                let mut busy = false;
                loop {
                    // A buffer that was filling is drained again at once.
                    if !busy {
                        std::thread::park_timeout(POLL);
                    }
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let mut d = lock(&drain);
                    busy = d.pass() >= ring::SLOTS / 8;
                    if d.session.is_finished() {
                        hook::set_state(0);
                        break;
                    }
                }
            })
    };
    let thread = match thread {
        Ok(t) => t,
        Err(e) => {
            hook::set_state(0);
            return Err(e.into());
        }
    };
    // Recording starts once the thread runs and ignores itself: what the runtime allocates to
    // start it is not the program's.
    let _ = ready_rx.recv();
    {
        let mut d = lock(&drain);
        d.open();
        boundary::arm(session, thread.thread().clone());
    }
    *running = Some(Running {
        drain,
        stop,
        thread: Some(thread),
        _scopes: scopes,
    });
    ANY_RUNNING.store(true, Ordering::Relaxed);
    Ok(())
}

/// Call after each `session.step()`: hands the boundary to the tracker, which closes the step
/// that ended (its sums and account) in its place among the allocations, on its own thread.
/// It does no tracking work itself: it switches the small-allocation tables, puts a marker in
/// the allocator's buffer and wakes the tracker every few steps; it waits only when the
/// tracker is several steps behind. Without it the tracker sees a boundary when it next looks
/// (after 10 to 20 ms, later steps' first allocations then counted in the step before).
/// Nothing happens unless a tracker records into `session`.
pub fn on_step(session: &TraceSession) {
    if !ANY_RUNNING.load(Ordering::Relaxed) || !boundary::is_for(session) {
        return;
    }
    // The ended step's small counts this thread kept aside go to its table before the
    // boundary; from now on this thread ends steps and keeps its counts aside.
    hook::flush_kept();
    hook::keep_small_counts();
    boundary::drive();
    boundary::hand_over(session, &mut |need| {
        boundary::wait_for_tracker(session, need)
    });
}

/// The running tracker's drain when it records into `session`.
fn running_drain(session: &TraceSession) -> Option<Arc<Mutex<Drain>>> {
    let running = lock(&RUNNING);
    let r = running.as_ref()?;
    let d = Arc::clone(&r.drain);
    drop(running);
    let same = std::ptr::eq(Arc::as_ptr(&lock(&d).session), session);
    same.then_some(d)
}

/// Stops tracking into `session`: drains the buffer (every step boundary handed over, each
/// step closed in its place), writes the current step's sums and account, ends the tracker's
/// thread, and returns what was accounted for; `None` (and nothing stopped) unless a tracker
/// records into `session`. Call it before the session finishes (lines written after `finish`
/// are lost, counted in [`HeapStats::unwritten`]). Allocations still live stay without a
/// `heap_free` line.
pub fn stop(session: &TraceSession) -> Option<HeapStats> {
    let mut running = lock(&RUNNING);
    let same = running
        .as_ref()
        .is_some_and(|r| std::ptr::eq(Arc::as_ptr(&lock(&r.drain).session), session));
    if !same {
        return None;
    }
    let mut r = running.take()?;
    ANY_RUNNING.store(false, Ordering::Relaxed);
    boundary::disarm();
    drop(running);
    r.stop.store(true, Ordering::Release);
    if let Some(t) = r.thread.take() {
        t.thread().unpark();
        let _ = t.join();
    }
    // Nothing is recorded from here on; what was recorded before is all drained, with the
    // small counts this thread kept aside (those another thread keeps are dropped).
    hook::set_state(0);
    hook::flush_kept();
    let mut d = lock(&r.drain);
    d.finish();
    let stats = d.stats;
    drop(d);
    drop(r);
    Some(stats)
}

/// What the tracker recording into `session` has accounted for so far; `None` when none does.
pub fn stats(session: &TraceSession) -> Option<HeapStats> {
    running_drain(session).map(|d| lock(&d).stats)
}

/// Whether a tracker runs in this process.
pub fn is_tracking() -> bool {
    lock(&RUNNING).is_some()
}

impl Drain {
    /// Session time of a time on the allocator's clock. Every heap line's time is the
    /// allocator's clock converted so (the entries', the boundaries'), so that an allocation
    /// made inside a step lies inside its account's window: the session's own clock is
    /// calibrated apart and may be a microsecond off.
    fn session_ts(&self, raw: u64) -> u64 {
        let t = i128::from(raw) + self.offset;
        u64::try_from(t.max(0)).unwrap_or(u64::MAX)
    }

    /// Now, as [`Drain::session_ts`] gives it.
    fn now(&self) -> u64 {
        self.session_ts(hook::now_raw())
    }

    /// Opens the session's current step when it is recorded, and sets the allocator's state
    /// for it (at the start).
    fn open(&mut self) {
        let active = self.session.is_active() && !self.session.is_finished();
        if active {
            self.window = Some((self.session.current_step(), self.now()));
        }
        hook::set_state(if active { ALLOCS | FREES } else { 0 });
    }

    /// One pass of the tracker's thread: drains the buffer (closing each step at its
    /// boundary), hands over a boundary nobody handed over, stops seeing frees when nothing
    /// tracked is live outside a recorded step, and writes the lines. Returns how many
    /// entries were drained.
    fn pass(&mut self) -> usize {
        let mut drained = self.drain_ring();
        // A boundary the driving thread is about to hand over is left to it: the tracker
        // hands over none once the driving thread did (it calls `on_step` just after
        // `session.step()`), and before that only one that stayed pending for a whole poll,
        // so that the two never race for a step.
        let behind = self.session.current_step() > boundary::marked() && !boundary::is_driven();
        let due = behind && self.behind_since.get_or_insert_with(Instant::now).elapsed() >= POLL;
        if !behind {
            self.behind_since = None;
        }
        if due && boundary::is_for(&self.session) {
            self.behind_since = None;
            let session = Arc::clone(&self.session);
            // Never waits for a table or a turn: the tracker itself frees tables, and the
            // driving thread's hand-over is short; a full buffer is made room in by draining.
            boundary::hand_over(&session, &mut |need| match need {
                Need::Slot => {
                    drained += self.drain_ring();
                    std::thread::yield_now();
                    true
                }
                Need::Turn | Need::Table => false,
            });
            drained += self.drain_ring();
        }
        if self.window.is_none() && self.live.is_empty() {
            hook::stop_frees();
        }
        self.write();
        drained
    }

    /// The last pass, with recording off: drains everything, waiting for entries claimed
    /// before recording stopped, and closes the current step now.
    fn finish(&mut self) {
        let r = ring::ring();
        for _ in 0..LAST_LOOKS {
            self.drain_ring();
            if r.pending() == 0 {
                break;
            }
            std::thread::yield_now();
        }
        if let Some((step, start)) = self.window.take() {
            let now = self.now();
            self.close_step(step, start, now, small::current());
        }
        self.write();
    }

    fn drain_ring(&mut self) -> usize {
        let r = ring::ring();
        let mut drained = 0;
        while let Some(e) = r.pop() {
            drained += 1;
            match e.kind {
                Kind::Alloc => {
                    let ts = self.session_ts(e.ts);
                    if let Some((old, _)) = self.live.remove(&e.addr) {
                        // The address was handed out again, so its block was freed by now:
                        // that free was lost (counted), and is written here.
                        self.events
                            .push(Event::HeapFree(HeapFreeEvent { id: old, ts }));
                        self.stats.frees += 1;
                    }
                    let id = self.next_id;
                    self.next_id += 1;
                    self.live.insert(e.addr, (id, e.size));
                    let (phase, span) = trace_sampler::unpack_scope(e.scope);
                    self.events.push(Event::HeapAlloc(HeapAllocEvent {
                        id,
                        bytes: e.size,
                        thread: e.thread,
                        ts,
                        phase,
                        span,
                    }));
                    self.stats.allocs += 1;
                    self.stats.alloc_bytes = self.stats.alloc_bytes.saturating_add(e.size);
                }
                Kind::Free => {
                    if let Some((id, _)) = self.live.remove(&e.addr) {
                        let ts = self.session_ts(e.ts);
                        self.events.push(Event::HeapFree(HeapFreeEvent { id, ts }));
                        self.stats.frees += 1;
                    } else {
                        self.step_unmatched += 1;
                        self.stats.unmatched_frees += 1;
                    }
                }
                Kind::Step => {
                    let ts = self.session_ts(e.ts);
                    self.boundary(e.addr, e.size == 1, ts, e.scope as usize);
                }
            }
        }
        self.count_lost();
        drained
    }

    fn count_lost(&mut self) {
        let lost = ring::ring().take_lost();
        self.step_lost += lost;
        self.stats.lost += lost;
    }

    /// A step boundary read in its place: every entry before it was the ended step's. Closes
    /// that step (if recorded) with the sums of its generation, and opens the new one (if
    /// recorded), which counts in `generation`.
    fn boundary(&mut self, step: u64, active: bool, ts: u64, generation: usize) {
        self.count_lost();
        let ended = generation.wrapping_sub(1);
        match self.window.take() {
            Some((s, start)) => self.close_step(s, start, ts, ended),
            // Outside a recorded step nothing is counted; the table is freed for reuse.
            None => small::take_generation(ended, |_, _| {}),
        }
        if active {
            self.window = Some((step, ts));
        }
    }

    /// Writes the small sums (generation `generation`) and the account of `step`, recorded
    /// from `start` to `end`.
    fn close_step(&mut self, step: u64, start: u64, end: u64, generation: usize) {
        // Per scope, over the shards of the threads that counted it (in first-seen order).
        let (small, at) = (&mut self.small, &mut self.small_at);
        small.clear();
        at.clear();
        small::take_generation(generation, |_, t| {
            if let Some(&i) = at.get(&(t.phase, t.span)) {
                small[i].count = small[i].count.saturating_add(t.count);
                small[i].bytes = small[i].bytes.saturating_add(t.bytes);
            } else {
                at.insert((t.phase, t.span), small.len());
                small.push(t);
            }
        });
        for t in self.small.drain(..) {
            self.stats.small_allocs = self.stats.small_allocs.saturating_add(t.count);
            self.stats.small_bytes = self.stats.small_bytes.saturating_add(t.bytes);
            self.events.push(Event::HeapSmall(HeapSmallEvent {
                step,
                phase: t.phase,
                span: t.span,
                count: t.count,
                bytes: t.bytes,
            }));
        }
        self.events.push(Event::HeapAccount(HeapAccountEvent {
            step,
            threshold: self.threshold,
            lost: std::mem::take(&mut self.step_lost),
            unmatched_frees: std::mem::take(&mut self.step_unmatched),
            ts: start,
            dur: end.saturating_sub(start),
        }));
        self.stats.steps += 1;
    }

    fn write(&mut self) {
        if self.events.is_empty() {
            return;
        }
        let n = self.events.len() as u64;
        let written = self.session.record_heap(&self.events) as u64;
        self.stats.written += written;
        self.stats.unwritten += n - written;
        self.events.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace_record::Run;
    use trace_record::schema::Phase;

    /// This test binary's global allocator is the system one: a tracker refuses to start
    /// rather than record nothing.
    #[test]
    fn without_the_tracking_allocator_a_start_is_refused() {
        let (session, _sink) = TraceSession::in_memory(Run::new("off", Phase::Infer, "cpu"));
        let session = Arc::new(session);
        assert!(matches!(
            start(&session, HeapConfig::threshold(0)),
            Err(HeapError::InvalidThreshold)
        ));
        assert!(matches!(
            start(&session, HeapConfig::default()),
            Err(HeapError::NotInstalled)
        ));
        assert!(!is_tracking());
        assert_eq!(hook::state(), 0);
        assert!(stop(&session).is_none());
        assert!(stats(&session).is_none());
        on_step(&session);
    }
}
