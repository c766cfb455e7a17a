//! Counts and bytes of allocations below the threshold, per scope, in fixed atomic tables.
//!
//! An open-addressing table of scope keys with a count and a byte sum each, all atomics in
//! static memory: the allocator finds (or claims, by compare-exchange) its scope's slot
//! within a few probes and adds to it. A key is a scope and a shard of the counting thread
//! (the low bits of its number), so that threads attributed to one scope, such as a pool's
//! workers to the driving thread's, do not contend for one slot; the shards of a scope are
//! added up when taken. When the probes find no room, the allocation is counted under its
//! phase alone (four reserved slots), so every small allocation is counted somewhere.
//!
//! A step counts in a table of its own: the tables are numbered by **generation**, one per
//! step boundary, and generation `g` counts in `TABLES[g % GENERATIONS]`. At a boundary the
//! driving thread only switches the allocator to the next generation ([`try_advance`], one
//! store); the tracker's thread later takes the sums of the generation that ended and forgets
//! its keys ([`take_generation`]), visiting only the slots claimed in it (their indices are
//! listed as they are claimed). A table is used again only once it was taken, so the tracker
//! may lag a few steps behind the driving thread without two steps' sums meeting in one
//! table; when all tables are still waiting, [`try_advance`] refuses and the boundary waits
//! for the tracker. So a step's table holds only that step's scopes, whatever the run's
//! length: span ids are never reused, and one table for a whole run would fill after a few
//! hundred decode steps (every later allocation then probing a full table and losing its
//! span), while its every take visited every scope the run ever had. A thread preempted
//! inside [`Table::add`] across the switch may add one allocation to the table just left
//! after it was taken: that allocation is then counted in a later step, or, if its slot was
//! forgotten and claimed again, under that slot's next scope.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use trace_record::schema::ExecStep;

/// Scope slots (a power of two).
pub(crate) const SLOTS: usize = 1 << 14;
const MASK: usize = SLOTS - 1;
/// Slots looked at before falling back to the phase's own slot.
const PROBES: usize = 16;
/// Bits of the thread number in a key: the shard a thread counts its scopes in.
const SHARD_BITS: u32 = 3;
const SHARD_MASK: u64 = (1 << SHARD_BITS) - 1;

struct Slot {
    /// The scope word plus one (0: empty).
    key: AtomicU64,
    count: AtomicU64,
    bytes: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            key: AtomicU64::new(0),
            count: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    #[inline]
    fn add(&self, count: u64, bytes: u64) {
        self.count.fetch_add(count, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// The table (one per process).
pub(crate) struct Table {
    slots: [Slot; SLOTS],
    /// By phase code (0: none), for scopes that found no slot.
    phases: [Slot; 4],
    /// The claimed slots' indices plus one, in claiming order (0: being written), so that a
    /// take visits only those.
    used: [AtomicU32; SLOTS],
    /// How many slots were claimed.
    used_len: AtomicUsize,
    /// Counts kept aside by a thread, appended as they are added ([`Table::append`]).
    log: [LogEntry; LOG],
    /// How many log entries were claimed.
    log_len: AtomicUsize,
}

/// Log entries per table: room for this many additions of kept counts per step before they
/// are added to the slots instead.
const LOG: usize = 1 << 12;

/// One addition of kept counts.
struct LogEntry {
    /// Whether the entry is written.
    ready: AtomicBool,
    /// The packed scope word.
    scope: AtomicU64,
    count: AtomicU64,
    bytes: AtomicU64,
}

impl LogEntry {
    const fn new() -> LogEntry {
        LogEntry {
            ready: AtomicBool::new(false),
            scope: AtomicU64::new(0),
            count: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }
}

/// Tables, one per generation in flight (a power of two): the tracker may be this many
/// steps behind the driving thread, less one, before a step boundary waits for it.
pub(crate) const GENERATIONS: usize = 8;

// A constant used to initialise the tables (each use is a fresh value).
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Table = Table {
    slots: [const { Slot::new() }; SLOTS],
    phases: [const { Slot::new() }; 4],
    used: [const { AtomicU32::new(0) }; SLOTS],
    used_len: AtomicUsize::new(0),
    log: [const { LogEntry::new() }; LOG],
    log_len: AtomicUsize::new(0),
};

static TABLES: [Table; GENERATIONS] = [EMPTY; GENERATIONS];

/// What every counting allocation reads, on a cache line of its own: written only at step
/// boundaries and tracking starts, so it stays in every core's cache.
#[repr(align(128))]
struct Counting {
    /// The generation the allocator counts in: `TABLES[current % GENERATIONS]`.
    current: AtomicUsize,
    /// The tracking run (advanced at each start): counts kept aside in an earlier run are
    /// not this one's.
    run: AtomicUsize,
}

static COUNTING: Counting = Counting {
    current: AtomicUsize::new(0),
    run: AtomicUsize::new(0),
};

/// The oldest generation not yet taken: every one before it was taken and forgotten. Written
/// by the tracker, apart from [`COUNTING`].
#[repr(align(128))]
struct Oldest(AtomicUsize);

static TAKEN: Oldest = Oldest(AtomicUsize::new(0));

/// The table the allocator counts in now.
#[inline]
pub(crate) fn table() -> &'static Table {
    &TABLES[current() % GENERATIONS]
}

/// The generation the allocator counts in now.
#[inline]
pub(crate) fn current() -> usize {
    COUNTING.current.load(Ordering::Acquire)
}

/// The tracking run.
#[inline]
pub(crate) fn run() -> usize {
    COUNTING.run.load(Ordering::Relaxed)
}

/// Generations that ended and wait to be taken.
pub(crate) fn waiting() -> usize {
    current().saturating_sub(TAKEN.0.load(Ordering::Acquire))
}

/// Counts of one scope that a thread kept aside instead of adding them one by one (see
/// `hook.rs`): `count` allocations of `bytes` in all, in `generation` of tracking run `run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kept {
    pub(crate) scope: u64,
    pub(crate) generation: usize,
    pub(crate) run: usize,
    pub(crate) count: u64,
    pub(crate) bytes: u64,
}

impl Kept {
    /// Nothing kept.
    pub(crate) const NONE: Kept = Kept {
        scope: 0,
        generation: 0,
        run: 0,
        count: 0,
        bytes: 0,
    };
}

/// Adds counts a thread (number `thread`) kept aside: to their generation's table while it
/// was not taken, else (another thread ended the step meanwhile) to the current one, a later
/// step's; counts kept in an earlier tracking run are dropped.
pub(crate) fn add_kept(k: Kept, thread: u64) {
    if k.count == 0 || k.run != run() {
        return;
    }
    let g = if k.generation >= TAKEN.0.load(Ordering::Acquire) {
        k.generation
    } else {
        current()
    };
    let t = &TABLES[g % GENERATIONS];
    if !t.append(k.scope, k.count, k.bytes) {
        t.add(k.scope, thread, k.count, k.bytes);
    }
}

/// Switches the allocator to the next generation and returns it, unless its table still
/// holds a generation not taken (then nothing changes). Called at a step boundary, by one
/// thread at a time.
pub(crate) fn try_advance() -> Option<usize> {
    let next = current().wrapping_add(1);
    if next >= TAKEN.0.load(Ordering::Acquire).wrapping_add(GENERATIONS) {
        return None;
    }
    COUNTING.current.store(next, Ordering::Release);
    Some(next)
}

/// Takes the sums of every generation from the oldest not taken through `last` (see
/// [`Table::take`]) and forgets their keys, so that their tables can count again; `f` gets
/// each generation's scopes with the generation. Called by the tracker (one at a time).
pub(crate) fn take_generation(last: usize, mut f: impl FnMut(usize, Taken)) {
    let mut g = TAKEN.0.load(Ordering::Acquire);
    while g <= last {
        let t = &TABLES[g % GENERATIONS];
        t.take(|x| f(g, x));
        t.forget();
        g += 1;
        TAKEN.0.store(g, Ordering::Release);
    }
}

/// Forgets every key and sum of every table, and every generation, and starts a new tracking
/// run (between tracking runs, when no allocation is counted).
pub(crate) fn clear() {
    for t in &TABLES {
        t.clear();
    }
    TAKEN.0.store(current(), Ordering::Release);
    COUNTING.run.fetch_add(1, Ordering::Relaxed);
}

/// Fibonacci hashing of a scope word (its low bits are the phase, its high bits the span).
#[inline]
fn home(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & MASK
}

/// One scope's small allocations taken from the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    pub(crate) phase: Option<ExecStep>,
    pub(crate) span: Option<u64>,
    pub(crate) count: u64,
    pub(crate) bytes: u64,
}

impl Table {
    /// Counts `count` allocations of `bytes` in all in `scope` (a packed scope word) made by
    /// thread number `thread`.
    #[inline]
    pub(crate) fn add(&self, scope: u64, thread: u64, count: u64, bytes: u64) {
        // Each thread counts a scope in a slot of its shard, so threads attributed to one
        // scope (a pool's workers, to the driving thread's) do not contend for one line.
        if scope >= 1 << (64 - SHARD_BITS) {
            self.phases[(scope & 0b11) as usize].add(count, bytes);
            return;
        }
        let key = (scope << SHARD_BITS | (thread & SHARD_MASK)) + 1;
        let h = home(key);
        for i in 0..PROBES {
            let slot = &self.slots[(h + i) & MASK];
            let k = slot.key.load(Ordering::Relaxed);
            if k == key {
                slot.add(count, bytes);
                return;
            }
            if k == 0 {
                match slot
                    .key
                    .compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        slot.add(count, bytes);
                        let n = self.used_len.fetch_add(1, Ordering::Relaxed);
                        if let Some(u) = self.used.get(n) {
                            u.store(((h + i) & MASK) as u32 + 1, Ordering::Release);
                        }
                        return;
                    }
                    Err(other) if other == key => {
                        slot.add(count, bytes);
                        return;
                    }
                    Err(_) => {}
                }
            }
        }
        self.phases[(scope & 0b11) as usize].add(count, bytes);
    }

    /// Appends `count` allocations of `bytes` in all in `scope` to the log, unless it is
    /// full. The kept counts of a thread change scope often (a span and its children take
    /// turns), and a step's new spans land on slots scattered over the table, each a cache
    /// miss; the log is written in order.
    #[inline]
    fn append(&self, scope: u64, count: u64, bytes: u64) -> bool {
        let n = self.log_len.fetch_add(1, Ordering::Relaxed);
        let Some(e) = self.log.get(n) else {
            return false;
        };
        e.scope.store(scope, Ordering::Relaxed);
        e.count.store(count, Ordering::Relaxed);
        e.bytes.store(bytes, Ordering::Relaxed);
        e.ready.store(true, Ordering::Release);
        true
    }

    /// Takes every scope's sums since the last take (each reset to zero), calling `f` for each
    /// slot with allocations and each log entry (a scope counted by threads of several shards,
    /// or kept and added several times, comes once each: the caller adds them up).
    pub(crate) fn take(&self, mut f: impl FnMut(Taken)) {
        let n = self.used_len.load(Ordering::Acquire).min(SLOTS);
        // A slot whose index is not written yet is taken the next time.
        let slots = self.used[..n]
            .iter()
            .filter_map(|u| match u.load(Ordering::Acquire) {
                0 => None,
                i => self.slots.get(i as usize - 1),
            })
            .map(|s| (s.key.load(Ordering::Relaxed), s));
        let phases = self
            .phases
            .iter()
            .enumerate()
            .map(|(code, s)| (((code as u64) << SHARD_BITS) + 1, s));
        for (key, slot) in slots.chain(phases) {
            if key == 0 {
                continue;
            }
            let count = slot.count.swap(0, Ordering::Relaxed);
            let bytes = slot.bytes.swap(0, Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            let (phase, span) = trace_sampler::unpack_scope((key - 1) >> SHARD_BITS);
            f(Taken {
                phase,
                span,
                count,
                bytes,
            });
        }
        let n = self.log_len.load(Ordering::Acquire).min(LOG);
        for e in &self.log[..n] {
            // An entry not written yet is taken the next time.
            if !e.ready.swap(false, Ordering::Acquire) {
                continue;
            }
            let count = e.count.swap(0, Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            let (phase, span) = trace_sampler::unpack_scope(e.scope.load(Ordering::Relaxed));
            f(Taken {
                phase,
                span,
                count,
                bytes: e.bytes.swap(0, Ordering::Relaxed),
            });
        }
    }

    /// Forgets the keys of the slots claimed so far (after their sums were taken) and the
    /// list of them, visiting only those slots.
    fn forget(&self) {
        let n = self.used_len.load(Ordering::Acquire).min(SLOTS);
        for u in &self.used[..n] {
            let i = u.swap(0, Ordering::AcqRel);
            if let Some(s) = i.checked_sub(1).and_then(|i| self.slots.get(i as usize)) {
                s.key.store(0, Ordering::Relaxed);
                s.count.store(0, Ordering::Relaxed);
                s.bytes.store(0, Ordering::Relaxed);
            }
        }
        self.used_len.store(0, Ordering::Release);
        self.log_len.store(0, Ordering::Release);
    }

    /// Forgets every key and sum (between tracking runs, when no allocation is counted).
    pub(crate) fn clear(&self) {
        for s in self.slots.iter().chain(&self.phases) {
            s.key.store(0, Ordering::Relaxed);
            s.count.store(0, Ordering::Relaxed);
            s.bytes.store(0, Ordering::Relaxed);
        }
        for u in &self.used {
            u.store(0, Ordering::Relaxed);
        }
        self.used_len.store(0, Ordering::Relaxed);
        for e in &self.log {
            e.ready.store(false, Ordering::Relaxed);
            e.count.store(0, Ordering::Relaxed);
            e.bytes.store(0, Ordering::Relaxed);
        }
        self.log_len.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace_sampler::pack_scope as pack;

    #[test]
    fn sums_per_scope_fall_back_to_the_phase_when_full_and_reset_when_taken() {
        let t = table();
        t.clear();
        let fwd = |span| pack(Some(ExecStep::Forward), Some(span));
        t.add(fwd(3), 1, 1, 10);
        t.add(fwd(3), 1, 1, 20);
        t.add(pack(None, None), 1, 1, 5);
        let mut got = Vec::new();
        t.take(|x| got.push(x));
        got.sort_by_key(|x| x.span);
        assert_eq!(
            got,
            vec![
                Taken {
                    phase: None,
                    span: None,
                    count: 1,
                    bytes: 5
                },
                Taken {
                    phase: Some(ExecStep::Forward),
                    span: Some(3),
                    count: 2,
                    bytes: 30
                },
            ]
        );
        let mut again = 0;
        t.take(|_| again += 1);
        assert_eq!(again, 0, "taken sums reset");
        // Two threads of different shards count one scope in two slots; the same shard in one.
        t.add(fwd(4), 1, 1, 7);
        t.add(fwd(4), 2, 1, 7);
        t.add(fwd(4), 9, 1, 7);
        let mut slots = Vec::new();
        t.take(|x| slots.push((x.span, x.count, x.bytes)));
        slots.sort_unstable();
        assert_eq!(slots, [(Some(4), 1, 7), (Some(4), 2, 14)]);
        // More scopes than slots: every allocation is still counted, the overflow under its
        // phase without a span.
        let n = SLOTS as u64 + 1000;
        for s in 1..=n {
            t.add(fwd(s), 1, 1, 1);
        }
        let (mut count, mut spanless) = (0, 0);
        t.take(|x| {
            count += x.count;
            if x.span.is_none() {
                spanless += x.count;
                assert_eq!(x.phase, Some(ExecStep::Forward));
            }
        });
        assert_eq!(count, n);
        assert!(spanless >= 1000, "{spanless}");
        t.clear();

        // Step by step (the boundary's advance, the tracker's take): each step's scopes get
        // a table of their own, so a run of new spans every step never fills it, and
        // nothing is lost or kept.
        clear();
        for step in 0..10u64 {
            let scopes = SLOTS as u64 / 4;
            for s in 1..=scopes {
                table().add(fwd(step * scopes + s), 1, 1, 3);
            }
            let ended = current();
            assert_eq!(try_advance(), Some(ended + 1));
            let (mut count, mut bytes, mut spanless) = (0, 0, 0);
            take_generation(ended, |g, x| {
                assert_eq!(g, ended);
                count += x.count;
                bytes += x.bytes;
                spanless += u64::from(x.span.is_none());
            });
            assert_eq!((count, bytes), (scopes, 3 * scopes), "step {step}");
            assert_eq!(spanless, 0, "step {step}: some scope found no room");
        }
        let mut left = 0;
        take_generation(current(), |_, _| left += 1);
        assert_eq!(left, 0, "a take leaves nothing behind");
        clear();

        // A tracker lagging behind: the generations not taken keep their own sums, and a
        // boundary is refused while every table waits, rather than two steps meeting in one.
        let first = current();
        for i in 0..GENERATIONS as u64 - 1 {
            table().add(fwd(1_000_000 + i), 1, 1, i + 1);
            assert!(try_advance().is_some(), "table {i} free");
        }
        assert_eq!(waiting(), GENERATIONS - 1);
        table().add(fwd(2_000_000), 1, 1, 100);
        assert_eq!(try_advance(), None, "every table waits to be taken");
        let mut per_generation = Vec::new();
        take_generation(first, |g, x| {
            per_generation.push((g - first, x.span, x.bytes));
        });
        assert_eq!(per_generation, [(0, Some(1_000_000), 1)]);
        assert!(try_advance().is_some(), "the oldest table was taken");
        per_generation.clear();
        take_generation(current(), |g, x| {
            per_generation.push((g - first, x.span, x.bytes));
        });
        let mut expected: Vec<_> = (1..GENERATIONS as u64 - 1)
            .map(|i| (i as usize, Some(1_000_000 + i), i + 1))
            .collect();
        expected.push((GENERATIONS - 1, Some(2_000_000), 100));
        assert_eq!(per_generation, expected);
        assert_eq!(waiting(), 0);
        clear();

        // Counts kept aside: appended to the log, then added to the slots once it is full;
        // kept for a generation already taken, they go to the current one; kept in an
        // earlier tracking run, they are dropped.
        let g = current();
        let kept = |span, count| Kept {
            scope: fwd(span),
            generation: g,
            run: run(),
            count,
            bytes: 2 * count,
        };
        for i in 0..LOG as u64 + 10 {
            add_kept(kept(3_000_000 + i % 3, 1), 1);
        }
        let mut sums: std::collections::BTreeMap<Option<u64>, (u64, u64)> = Default::default();
        take_generation(g, |_, x| {
            let e = sums.entry(x.span).or_default();
            e.0 += x.count;
            e.1 += x.bytes;
        });
        let n = LOG as u64 + 10;
        let third = |r: u64| n / 3 + u64::from(r < n % 3);
        let expected: Vec<_> = (0..3)
            .map(|r| (Some(3_000_000 + r), (third(r), 2 * third(r))))
            .collect();
        assert_eq!(sums.into_iter().collect::<Vec<_>>(), expected);
        assert!(try_advance().is_some());
        add_kept(kept(4_000_000, 5), 1);
        add_kept(
            Kept {
                run: run().wrapping_sub(1),
                ..kept(5_000_000, 7)
            },
            1,
        );
        let mut late = Vec::new();
        take_generation(current(), |generation, x| {
            late.push((generation, x.span, x.count));
        });
        assert_eq!(late, [(g + 1, Some(4_000_000), 5)]);
        clear();
    }
}
