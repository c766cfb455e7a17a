//! What a session records: the [`Run`] builder and the schedule's per-step decisions.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::compression::Compression;
use crate::schema::{Phase, Schedule, TimingMode};

/// What a session is asked to record: the run's metadata and optional schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The program entry point being profiled.
    pub entrypoint: String,
    /// Training or inference.
    pub phase: Phase,
    /// The run's device.
    pub device: String,
    /// How durations are measured (default [`TimingMode::Host`]).
    pub timing: TimingMode,
    /// A run id; a fresh one (`<pid>-<unix ns>`) when `None`.
    pub run_id: Option<String>,
    /// Rank in a distributed run.
    pub rank: Option<u32>,
    /// World size in a distributed run.
    pub world_size: Option<u32>,
    /// User tags.
    pub tags: BTreeMap<String, String>,
    /// Library versions (`trace-record`'s own is always added).
    pub versions: BTreeMap<String, String>,
    /// Which steps are recorded; `None` records everything.
    pub schedule: Option<Schedule>,
    /// How long written events may wait in the session's buffer before a background thread
    /// writes them out (default [`DEFAULT_FLUSH_INTERVAL`], 200 ms): the trace on disk lags
    /// the program by about this much at most. A finished step waits less: within a quarter
    /// of the interval ([`Run::step_write_bound`], 50 ms by default) the thread writes the
    /// buffer out when a `step()` came since the last write-out. `None`: write only when
    /// the buffer is full, at each step (in the `step()` call) and at the end. With an
    /// interval, recording calls (`step()` included) never make a syscall for this.
    ///
    /// These are bounds on when the lines reach the file (the kernel's page cache), which is
    /// what a `kill -9` of the recording process cannot take back; they do not `fsync`.
    pub flush_interval: Option<Duration>,
    /// Whether [`TraceSession::open`](crate::TraceSession::open) may replace a file that
    /// exists at its path (default `false`: an existing file is an error). The old file is
    /// replaced by rename, never truncated in place, and never while another session is
    /// writing it.
    pub overwrite: bool,
    /// How the trace is stored; `None` (the default) lets the path decide
    /// ([`Compression::for_path`]: zstd for a `.zst` name) and writes plain JSONL into
    /// writers and memory. Compression runs on a writer thread of the session, never on the
    /// recording threads; each written block is one zstd frame.
    pub compression: Option<Compression>,
}

/// The default of [`Run::flush_interval`]: 200 ms.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_millis(200);

/// [`Run::step_write_bound`] is the flush interval divided by this.
const STEP_WRITE_FRACTION: u32 = 4;

/// The shortest wake-up period of the background thread, whatever the interval.
const MIN_TICK: Duration = Duration::from_millis(1);

impl Run {
    /// A run with host timing, no schedule, no tags.
    pub fn new(entrypoint: impl Into<String>, phase: Phase, device: impl Into<String>) -> Self {
        Run {
            entrypoint: entrypoint.into(),
            phase,
            device: device.into(),
            timing: TimingMode::Host,
            run_id: None,
            rank: None,
            world_size: None,
            tags: BTreeMap::new(),
            versions: BTreeMap::new(),
            schedule: None,
            flush_interval: Some(DEFAULT_FLUSH_INTERVAL),
            overwrite: false,
            compression: None,
        }
    }

    /// Sets how the trace is stored (see [`Run::compression`]), whatever the path's name.
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = Some(compression);
        self
    }

    /// How long after a `step()` returns the finished step's lines may wait before the
    /// session's background thread writes them out: a quarter of [`Run::flush_interval`] (at
    /// least 1 ms), so 50 ms by default. `None` without an interval, where each `step()`
    /// writes them out before returning.
    ///
    /// The thread wakes every four fifths of the bound (40 ms by default); a machine too busy
    /// to run it within the last fifth, or (for a compressed trace) a block that takes longer
    /// to compress, delays the write by as much. A `kill -9` loses at most the steps that ended within it, and the
    /// lines recorded since the last of them.
    pub fn step_write_bound(&self) -> Option<Duration> {
        self.flush_interval
            .map(|every| (every / STEP_WRITE_FRACTION).max(MIN_TICK))
    }

    /// How often the session's background thread wakes: four fifths of
    /// [`Run::step_write_bound`] (40 ms by default, at least 1 ms), leaving the last fifth of
    /// the bound for the wake-up's own delay and the write (or the hand-off to the
    /// compressor).
    pub(crate) fn flush_tick(&self) -> Option<Duration> {
        self.step_write_bound()
            .map(|bound| bound.saturating_sub(bound / 5).max(MIN_TICK))
    }

    /// Sets how long events may wait in the buffer before being written (see
    /// [`Run::flush_interval`]); `None` writes only full blocks, at steps and at the end.
    pub fn flush_interval(mut self, interval: Option<Duration>) -> Self {
        self.flush_interval = interval;
        self
    }

    /// Lets [`TraceSession::open`](crate::TraceSession::open) replace a trace file that
    /// exists at its path (see [`Run::overwrite`](Run#structfield.overwrite)).
    pub fn overwrite(mut self, yes: bool) -> Self {
        self.overwrite = yes;
        self
    }

    /// Sets the timing mode.
    pub fn timing(mut self, timing: TimingMode) -> Self {
        self.timing = timing;
        self
    }

    /// Sets the run id.
    pub fn run_id(mut self, id: impl Into<String>) -> Self {
        self.run_id = Some(id.into());
        self
    }

    /// Sets the rank and world size of a distributed run.
    pub fn rank(mut self, rank: u32, world_size: u32) -> Self {
        self.rank = Some(rank);
        self.world_size = Some(world_size);
        self
    }

    /// Adds a user tag.
    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.insert(key.into(), value.into());
        self
    }

    /// Adds a library version.
    pub fn version(mut self, library: impl Into<String>, version: impl Into<String>) -> Self {
        self.versions.insert(library.into(), version.into());
        self
    }

    /// Sets the schedule.
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = Some(schedule);
        self
    }
}

/// What a schedule does at a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepAction {
    /// Nothing is recorded (skip_first, wait, or after the last cycle).
    None,
    /// Warm-up: nothing is written.
    Warmup,
    /// Recorded.
    Record,
}

impl Schedule {
    /// A schedule that records every step.
    pub fn always() -> Self {
        Schedule {
            skip_first: 0,
            wait: 0,
            warmup: 0,
            active: 1,
            repeat: 0,
        }
    }

    /// What happens at `step` (0-based), with PyTorch's `torch.profiler.schedule` semantics.
    pub fn action(&self, step: u64) -> StepAction {
        if step < self.skip_first {
            return StepAction::None;
        }
        let s = step - self.skip_first;
        let cycle = self
            .wait
            .saturating_add(self.warmup)
            .saturating_add(self.active);
        if cycle == 0 || self.active == 0 {
            return StepAction::None;
        }
        if self.repeat > 0 && s / cycle >= self.repeat {
            return StepAction::None;
        }
        let pos = s % cycle;
        if pos < self.wait {
            StepAction::None
        } else if pos < self.wait.saturating_add(self.warmup) {
            StepAction::Warmup
        } else {
            StepAction::Record
        }
    }

    /// Whether `step` is recorded.
    pub fn is_active(&self, step: u64) -> bool {
        self.action(step) == StepAction::Record
    }
}
