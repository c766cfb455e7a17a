//! The flight recorder: a session that records into a bounded in-memory ring of whole steps
//! (instead of a file, or beside one with [`FlightConfig::beside_file`]) and writes a dump (a
//! complete trace) when a trigger fires.
//!
//! [`TraceSession::flight`](crate::TraceSession::flight) starts one with a [`FlightConfig`].
//! The session encodes lines as always; at each `step()` the finished step's lines move into
//! the ring ([`ring`]) and the oldest whole steps leave it past the byte (and optional step)
//! bound, so the recording threads never write a file in steady state. Triggers
//! ([`triggers`]) are checked at step boundaries: an explicit
//! [`TraceSession::dump`](crate::TraceSession::dump), a step slower than a multiple of the
//! running median, a non-finite loss ([`TraceSession::record_loss`](crate::TraceSession::record_loss))
//! or gradient, SIGUSR2 (its handler only sets a flag), a trigger file. A fired trigger
//! waits [`FlightConfig::after`] more steps, then the dump thread ([`dump`]) writes the last
//! [`FlightConfig::before`] steps, the triggering one and those after as one trace, by
//! temporary file and a no-clobber link to its final name, bounded in count, bytes and rate.
//! A session ending without `finish` (SIGINT/SIGTERM with `close_on_signals`, a panic's drop,
//! `fail`) dumps its ring as trigger `exit`.
//!
//! # A dump is a consistent cut
//!
//! The ring holds whole steps, but spans, allocations and accounts can cross step
//! boundaries. The dump writer makes the dump a trace that validates on its own: it leaves out
//! the ends of spans that began before the dump's first step, frees of allocations made
//! before it, heap and sampler accounts of older steps, and spans not ended by its last step
//! (their start, and every reference to them, which then reads as the root); it keeps every
//! `frame` and `stack` line (interned for the whole run, kept beside the ring). The number of
//! lines left out is the dump record's `cut_lines`.

pub(crate) mod dump;
pub(crate) mod recorder;
pub(crate) mod ring;
pub(crate) mod triggers;

use std::path::PathBuf;
use std::time::Duration;

/// How a flight recorder keeps its ring and when it dumps it (see
/// [`TraceSession::flight`](crate::TraceSession::flight)). Built from [`FlightConfig::new`]
/// and its setters; every trigger but the explicit call and the non-finite checks is off until
/// asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct FlightConfig {
    /// Where dumps are written (created when missing).
    pub dir: PathBuf,
    /// The ring's bound in bytes of encoded lines (default 64 MiB). Whole oldest steps leave
    /// past it; the newest step always stays, however large.
    pub ring_bytes: usize,
    /// An optional bound in steps.
    pub ring_steps: Option<usize>,
    /// Steps before the triggering one that a dump holds (N, default 8).
    pub before: u64,
    /// Steps after the triggering one that a dump waits for (K, default 0).
    pub after: u64,
    /// The most dumps a run writes (default 16).
    pub max_dumps: u64,
    /// The most bytes all of a run's dumps may hold together (default 1 GiB).
    pub max_dump_bytes: u64,
    /// The shortest time between two dumps, by the session's clock (default 10 s); a trigger
    /// sooner is refused and counted.
    pub min_interval: Duration,
    /// The slow-step trigger, when set.
    pub slow_step: Option<SlowStep>,
    /// Whether a non-finite loss or gradient fires (default true).
    pub non_finite: bool,
    /// Whether SIGUSR2 fires (default false).
    pub signal: bool,
    /// A file whose appearance or change fires, when set; polled at step boundaries.
    pub trigger_file: Option<PathBuf>,
    /// How often the trigger file is looked at, at most (default 500 ms).
    pub poll_interval: Duration,
    /// Whether a session ending without `finish` dumps its ring (default true).
    pub dump_on_exit: bool,
    /// A trace file the session also writes, whole, beside the ring (default none: the ring
    /// only). See [`FlightConfig::beside_file`].
    pub file: Option<PathBuf>,
}

/// The slow-step trigger: a step longer than `factor` times the median of the `window`
/// steps before it fires. Nothing fires before `window` steps have been seen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowStep {
    /// The multiple of the median (k).
    pub factor: f64,
    /// How many earlier steps the median is taken over (M, 1 to 256).
    pub window: usize,
}

impl FlightConfig {
    /// Defaults: a 64 MiB ring, 8 steps before, none after, at most 16 dumps and 1 GiB, 10 s
    /// apart; explicit dumps, non-finite values and exit dump; no slow-step, signal or file
    /// trigger.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FlightConfig {
            dir: dir.into(),
            ring_bytes: 64 << 20,
            ring_steps: None,
            before: 8,
            after: 0,
            max_dumps: 16,
            max_dump_bytes: 1 << 30,
            min_interval: Duration::from_secs(10),
            slow_step: None,
            non_finite: true,
            signal: false,
            trigger_file: None,
            poll_interval: Duration::from_millis(500),
            dump_on_exit: true,
            file: None,
        }
    }

    /// Sets the ring's byte bound.
    pub fn ring_bytes(mut self, bytes: usize) -> Self {
        self.ring_bytes = bytes;
        self
    }

    /// Sets a bound in steps.
    pub fn ring_steps(mut self, steps: usize) -> Self {
        self.ring_steps = Some(steps);
        self
    }

    /// Sets the steps kept before the triggering one (N).
    pub fn before(mut self, steps: u64) -> Self {
        self.before = steps;
        self
    }

    /// Sets the steps waited for after the triggering one (K).
    pub fn after(mut self, steps: u64) -> Self {
        self.after = steps;
        self
    }

    /// Sets the most dumps of a run.
    pub fn max_dumps(mut self, n: u64) -> Self {
        self.max_dumps = n;
        self
    }

    /// Sets the most bytes of all of a run's dumps.
    pub fn max_dump_bytes(mut self, bytes: u64) -> Self {
        self.max_dump_bytes = bytes;
        self
    }

    /// Sets the shortest time between two dumps.
    pub fn min_interval(mut self, every: Duration) -> Self {
        self.min_interval = every;
        self
    }

    /// Fires on a step longer than `factor` × the median of the `window` steps before it.
    pub fn slow_step(mut self, factor: f64, window: usize) -> Self {
        self.slow_step = Some(SlowStep { factor, window });
        self
    }

    /// Sets whether a non-finite loss or gradient fires.
    pub fn on_non_finite(mut self, yes: bool) -> Self {
        self.non_finite = yes;
        self
    }

    /// Fires on SIGUSR2 (the handler sets a flag; the dump follows at the next step
    /// boundary).
    pub fn on_signal(mut self) -> Self {
        self.signal = true;
        self
    }

    /// Fires when `path` appears or its modification time changes (looked at, at most every
    /// [`poll_interval`](Self::poll_interval), at step boundaries). The file is never
    /// written or removed.
    pub fn trigger_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.trigger_file = Some(path.into());
        self
    }

    /// Sets how often the trigger file is looked at, at most.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// Sets whether a session ending without `finish` dumps its ring.
    pub fn dump_on_exit(mut self, yes: bool) -> Self {
        self.dump_on_exit = yes;
        self
    }

    /// Also writes the whole trace to `path`, beside the ring: the file is claimed as
    /// [`TraceSession::open`](crate::TraceSession::open) claims it (a file that exists is an
    /// error unless the run asks to replace it, zstd by its `.zst` name or the run's
    /// compression) and gets every step, the header first and the trailer at the end, while
    /// the ring keeps its last steps for dumps. Each finished step's lines are shared by the
    /// ring and the file (not copied) and reach the file within
    /// [`Run::step_write_bound`](crate::Run::step_write_bound) of the step's end, written by
    /// the session's background thread, so the recording threads still make no file write in
    /// steady state (with no flush interval, each `step()` writes the step itself). A step's
    /// lines reach the file only when the step ends (or at `finish`).
    pub fn beside_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.file = Some(path.into());
        self
    }
}

/// What a flight recorder did so far ([`TraceSession::flight_stats`](crate::TraceSession::flight_stats)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlightStats {
    /// Dumps written, in order (final paths).
    pub dumps: Vec<PathBuf>,
    /// Bytes of the dumps written.
    pub dump_bytes: u64,
    /// Dumps accepted and not yet written (waiting for steps after, or being written).
    pub pending: u64,
    /// Triggers refused by the limits (count, bytes, interval) or while a dump waited.
    pub suppressed: u64,
    /// Dumps that failed to be written.
    pub failed: u64,
    /// The first failure, with the path it concerned.
    pub first_error: Option<String>,
    /// Steps in the ring now.
    pub ring_steps: usize,
    /// Bytes of the steps in the ring now.
    pub ring_bytes: usize,
    /// Steps that left the ring.
    pub evicted_steps: u64,
    /// Bytes of the `frame` and `stack` lines kept beside the ring.
    pub interned_bytes: usize,
}
