//! `TraceSession`: the recording side — spans, op/tensor/memory records, schedule, sinks.
//!
//! A session writes one JSONL trace (see [`crate::schema`]). It is `Send + Sync`; share it
//! between threads with an `Arc`. Records take borrowed data and allocate nothing per event
//! in steady state: each line is formatted by a hand-written encoder straight into the
//! session's reused block buffer under its lock (or, when another thread holds the lock, into
//! a reused per-thread buffer first), so lines from different threads never interleave, and
//! the block is written out every [`BLOCK_BYTES`]. The span stack is per thread (a reused
//! thread-local vector).
//!
//! The header is written when the session is created, and a background thread (the
//! flusher) writes the buffered lines out: every [`Run::flush_interval`] (200 ms by default)
//! at the latest, and within a quarter of that interval ([`Run::step_write_bound`], 50 ms by
//! default) of a `step()`, so that a finished step reaches the file within that bound while
//! the step boundary itself only marks the block (a fast decode loop pays for no write at its
//! steps, and the flusher writes at most once per bound however many steps end in it). With
//! no interval (or no thread) every `step()` writes the block out before it returns. A
//! process killed at any moment (even `kill -9`) leaves a trace that starts with its header,
//! holds every step that ended more than the bound before the kill and every line recorded
//! more than the interval before it, and reads to its last complete line.
//! [`TraceSession::close_on_signals`] also writes the `incomplete` trailer on SIGINT and
//! SIGTERM.
//!
//! A compressed session ([`Run::compression`], or a `.zst` path) hands each block to a writer
//! thread that compresses it into one zstd frame; the header is the first frame, so the
//! same holds (the bounds then include compressing one block): a killed recording reads back
//! to its last complete frame.
//!
//! Outside the schedule's active windows (and after `finish`) every record call returns after
//! one relaxed atomic load.
//!
//! ```
//! use trace_record::{Run, TraceSession, OpRecord};
//! use trace_record::schema::{Phase, SpanKind};
//!
//! let (session, sink) = TraceSession::in_memory(Run::new("doc::example", Phase::Infer, "cpu"));
//! {
//!     let _span = session.span("forward", SpanKind::Module, None);
//!     let t0 = session.now_ns();
//!     session.record_op(&OpRecord {
//!         name: "matmul", inputs: &[1, 2], outputs: &[3], shape: &[2, 2], dtype: "f32",
//!         device: "cpu", start_ns: t0, dur_ns: 10, in_bytes: 32, out_bytes: 16,
//!         category: None, flops: Some(16),
//!     });
//! }
//! let summary = session.finish().unwrap();
//! assert_eq!(summary.counts.op, 1);
//! let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
//! assert_eq!(trace.events.len(), 3);
//! ```

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::{self, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::compression::Compression;
use crate::encode;
use crate::flight::FlightConfig;
use crate::flight::FlightStats;
use crate::flight::recorder::{Fired, Flight};
use crate::json::LineBuf;
use crate::records::{MemoryRecord, OpRecord, SpanId, TensorRecord};
use crate::schema::{
    DumpEvidence, DumpTrigger, EventCounts, EventType, ExecStep, GradientState, Header, Outcome,
    RunMeta, SCHEMA_NAME, SCHEMA_VERSION, Schedule, SpanKind, TimingMode, Trailer,
};

/// Errors of a recording session.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Creating or writing the trace failed; the session stopped writing at that point.
    #[error("trace {}: {source}", path.as_ref().map_or_else(|| "<writer>".to_string(), |p| p.display().to_string()))]
    Io {
        /// The trace file, when the sink is a file.
        path: Option<PathBuf>,
        /// The underlying error.
        #[source]
        source: io::Error,
        /// Events recorded but not written because of the error.
        dropped: u64,
    },
    /// `finish` (or `fail`) was already called.
    #[error("the trace session was already finished")]
    AlreadyFinished,
    /// The trace path exists and the run did not ask to replace it
    /// ([`Run::overwrite`](crate::Run::overwrite)).
    #[error(
        "trace {}: the file exists; choose another path or replace it (Run::overwrite)",
        path.display()
    )]
    Exists {
        /// The trace path.
        path: PathBuf,
    },
    /// Another live session is writing the trace at this path (it holds the file's lock).
    #[error(
        "trace {}: being written by {}; two sessions never share a trace file",
        path.display(),
        pid.map_or_else(|| "another session".to_string(), |p| format!("pid {p}"))
    )]
    Busy {
        /// The trace path.
        path: PathBuf,
        /// The writing process, from the trace's header, when it is there.
        pid: Option<u32>,
    },
    /// The run asked for a zstd-compressed trace (a `.zst` path, or
    /// [`Run::compression`](crate::Run::compression)) and trace-record was built without its
    /// `zstd` feature. [`TraceSession::open`] creates no file; a session on a writer or in
    /// memory writes nothing and reports this at `finish`.
    #[error(
        "trace {}: writing zstd needs trace-record's `zstd` feature; enable it, or record plain \
         JSONL (a path not ending in `.zst`, or `Compression::None`)",
        path.as_ref().map_or_else(|| "<writer>".to_string(), |p| p.display().to_string())
    )]
    ZstdUnavailable {
        /// The trace file, when the sink is a file.
        path: Option<PathBuf>,
    },
}

mod claim;
#[cfg(feature = "zstd")]
mod compressor;
mod flusher;
mod heap;
mod output;
mod run;
mod sampled;
mod scoped;
mod signals;

pub use claim::{Writer, writer_of};
pub use output::{BLOCK_BYTES, MemorySink, record_beside_the_program};
pub use run::{DEFAULT_FLUSH_INTERVAL, Run, StepAction};
pub use signals::AfterSignal;

use flusher::Flusher;

#[cfg(feature = "zstd")]
use compressor::ZstdSink;
use output::{Output, SharedVec, Sink, lock};

/// Whether this build can write `compression` (zstd needs the `zstd` feature).
fn compression_available(compression: Compression) -> bool {
    cfg!(feature = "zstd") || compression == Compression::None
}

/// What `finish` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The trace file, when the sink is a file.
    pub path: Option<PathBuf>,
    /// Events written, by type.
    pub counts: EventCounts,
    /// Bytes written, header and trailer included (compressed bytes for a compressed trace).
    pub bytes: u64,
    /// Events recorded but not written.
    pub dropped: u64,
    /// The outcome written in the trailer.
    pub outcome: Outcome,
}

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

/// This thread's number in traces, assigned on first use.
#[inline]
pub(super) fn thread_no() -> u64 {
    THREAD_NO.with(|t| match t.get() {
        0 => {
            let n = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
            t.set(n);
            n
        }
        n => n,
    })
}

#[derive(Clone, Copy)]
struct StackEntry {
    session: u64,
    span: u64,
    written: bool,
}

thread_local! {
    static SCRATCH: RefCell<LineBuf> = RefCell::new(LineBuf::default());
    static STACK: RefCell<Vec<StackEntry>> = const { RefCell::new(Vec::new()) };
    /// This thread's number in traces (0: not assigned yet); const-initialized, so reading
    /// it is a plain thread-local load.
    static THREAD_NO: Cell<u64> = const { Cell::new(0) };
    /// This thread's block of span ids: the session it was taken from, the next id and the
    /// end of the block (see [`TraceSession::new_span_id`]).
    static SPAN_IDS: Cell<(u64, u64, u64)> = const { Cell::new((0, 0, 0)) };
}

/// How many span ids a thread takes from its session at once.
const SPAN_ID_BLOCK: u64 = 256;

/// A recording session writing one JSONL trace. `Send + Sync`: share it with `Arc`.
pub struct TraceSession {
    id: u64,
    active: AtomicBool,
    finished: AtomicBool,
    /// The session's clock (the TSC where it is invariant, else the OS's monotonic clock) and
    /// its raw reading when the session started.
    clock: quanta::Clock,
    origin: u64,
    timing: TimingMode,
    device: Box<str>,
    schedule: Option<Schedule>,
    step: AtomicU64,
    next_span: AtomicU64,
    path: Option<PathBuf>,
    out: Arc<Mutex<Output>>,
    flusher: Mutex<Option<Flusher>>,
    /// Whether a step boundary writes the block out itself: when no flusher runs (no interval,
    /// or the OS refused the thread), the only way a finished step reaches the file in time.
    writes_at_steps: bool,
    /// A handle on the trace file's open description whose lock marks the file as being
    /// written; released when the session closes.
    lock: Option<File>,
    /// The run asked for zstd and the crate was built without it: nothing was written, and
    /// `finish` says why ([`TraceError::ZstdUnavailable`]).
    zstd_unavailable: bool,
}

impl std::fmt::Debug for TraceSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceSession")
            .field("path", &self.path)
            .field("device", &self.device)
            .field("active", &self.is_active())
            .finish_non_exhaustive()
    }
}

impl TraceSession {
    /// Creates the trace file at `path` and writes the header to it before returning.
    ///
    /// The path is taken exclusively: a file that exists is [`TraceError::Exists`] unless
    /// `run` asks to replace it ([`Run::overwrite`]), and a file another live session is
    /// writing is [`TraceError::Busy`]. The session holds an advisory lock on its file until
    /// it finishes, so two writers never share a trace; [`writer_of`] tells a reader whether
    /// a file is still being written. Devices (`/dev/null`) are written as they are.
    ///
    /// A zstd-compressed trace (a `.zst` path, or [`Run::compression`]) needs the crate's
    /// `zstd` feature; without it this is [`TraceError::ZstdUnavailable`] and no file is
    /// created.
    pub fn open(path: impl AsRef<Path>, run: Run) -> Result<Self, TraceError> {
        Self::build_file(path.as_ref().to_path_buf(), run, quanta::Clock::new).map(|b| b.0)
    }

    /// The session writing to the file at `path`, with its header line and run id: the
    /// compression from the run or the path (checked available first), the clock from
    /// `clock`, then the file claimed (see [`open`](Self::open)).
    fn build_file(
        path: PathBuf,
        mut run: Run,
        clock: impl FnOnce() -> quanta::Clock,
    ) -> Result<(Self, Vec<u8>, String), TraceError> {
        let compression = run
            .compression
            .unwrap_or_else(|| Compression::for_path(&path));
        if !compression_available(compression) {
            return Err(TraceError::ZstdUnavailable { path: Some(path) });
        }
        run.compression = Some(compression);
        // The clock before the file: its first creation in a process calibrates the TSC (up
        // to a few hundred ms), which must not come between the file's creation and its
        // header.
        let clock = clock();
        let claimed = claim::claim(&path, run.overwrite)?;
        let lock = if claimed.locked {
            claimed.file.try_clone().ok()
        } else {
            None
        };
        let (mut session, header, run_id) = Self::build(claimed.file, run, clock);
        session.path = Some(path);
        session.lock = lock;
        Ok((session, header, run_id))
    }

    /// A session writing into memory; the [`MemorySink`] reads the bytes back.
    pub fn in_memory(run: Run) -> (Self, MemorySink) {
        let sink = MemorySink::default();
        let s = Self::from_writer(SharedVec(Arc::clone(&sink.bytes)), run);
        (s, sink)
    }

    /// A session writing into any writer. The header is written (and the writer flushed)
    /// before this returns; an I/O error there stops the session's writing and surfaces at
    /// `finish`. A run asking for zstd in a build without the `zstd` feature writes nothing,
    /// and `finish` reports [`TraceError::ZstdUnavailable`].
    pub fn from_writer(writer: impl Write + Send + 'static, run: Run) -> Self {
        Self::build(writer, run, quanta::Clock::new()).0
    }

    /// A flight recorder: a session that records into a bounded in-memory ring of whole steps
    /// instead of a file (or beside one: [`FlightConfig::beside_file`]), and writes a dump (a complete trace) into [`FlightConfig::dir`] when
    /// a trigger fires (see [`FlightConfig`] and the `flight` module docs). The run's flush
    /// interval and compression apply only to the file beside the ring, if any (dumps are
    /// plain JSONL).
    ///
    /// # Errors
    ///
    /// The dump directory cannot be created or the dump thread cannot start
    /// ([`TraceError::Io`] naming the directory); with a file beside the ring, whatever
    /// [`open`](Self::open) returns for it.
    ///
    /// ```
    /// use trace_record::{FlightConfig, Run, TraceSession};
    /// use trace_record::schema::Phase;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let session = TraceSession::flight(
    ///     Run::new("doc::flight", Phase::Train, "cpu").run_id("doc"),
    ///     FlightConfig::new(dir.path()).before(2),
    /// )?;
    /// for step in 0..10 {
    ///     if step == 6 {
    ///         session.dump("looked odd");
    ///     }
    ///     session.record_loss(1.0 / f64::from(step + 1));
    ///     session.step();
    /// }
    /// session.finish()?;
    /// let stats = session.flight_stats().unwrap();
    /// assert_eq!(stats.dumps.len(), 1);
    /// assert!(stats.dumps[0].ends_with("doc-call-steps4-6.jsonl"));
    /// let trace = trace_record::read_trace(&stats.dumps[0])?;
    /// assert_eq!(trace.dump.unwrap().trigger_step, 6);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn flight(run: Run, config: FlightConfig) -> Result<Self, TraceError> {
        Self::flight_with_clock(run, config, quanta::Clock::new())
    }

    /// [`flight`](Self::flight) with the session's clock given, e.g. a
    /// [`quanta::Clock::mock`] whose time a test advances by exact step durations.
    pub fn flight_with_clock(
        run: Run,
        config: FlightConfig,
        clock: quanta::Clock,
    ) -> Result<Self, TraceError> {
        let dir = config.dir.clone();
        let (session, header, run_id) = match config.file.clone() {
            None => {
                let mut run = run.flush_interval(None);
                run.compression = Some(Compression::None);
                Self::build(io::sink(), run, clock)
            }
            // The trace file beside the ring, claimed as `open` claims it; its writes follow
            // the run's flush interval and compression.
            Some(path) => Self::build_file(path, run, || clock)?,
        };
        let beside = config.file.is_some();
        let flight =
            Flight::start(config, &header, &run_id, session.now_ns()).map_err(|source| {
                TraceError::Io {
                    path: Some(dir),
                    source,
                    dropped: 0,
                }
            })?;
        {
            let mut out = lock(&session.out);
            // Each step's buffer moves into the ring: it starts small and grows to the
            // steps' size (the file mode's block buffer would be kept by every step).
            out.buf = LineBuf::default();
            out.flight = Some(Box::new(flight));
            if beside {
                out.beside = Some(Vec::new());
            }
        }
        Ok(session)
    }

    /// The session, its header line and its run id.
    fn build(
        writer: impl Write + Send + 'static,
        run: Run,
        clock: quanta::Clock,
    ) -> (Self, Vec<u8>, String) {
        let origin = clock.raw();
        let flush_ticks = run.flush_interval.zip(run.flush_tick());
        let start_unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let pid = std::process::id();
        let mut versions = run.versions;
        versions.insert(
            "trace-record".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        );
        let header = Header {
            schema: SCHEMA_NAME.to_string(),
            version: SCHEMA_VERSION,
            run: RunMeta {
                run_id: run
                    .run_id
                    .unwrap_or_else(|| format!("{pid}-{start_unix_ns}")),
                entrypoint: run.entrypoint,
                phase: run.phase,
                device: run.device.clone(),
                timing: run.timing,
                start_unix_ns,
                pid,
                rank: run.rank,
                world_size: run.world_size,
                schedule: run.schedule,
                tags: run.tags,
                versions,
            },
        };
        let mut header_line = Vec::new();
        encode::encode_header(&header, &mut header_line);
        let capacity = BLOCK_BYTES + 64 * 1024;
        let mut buf = LineBuf::with_capacity(capacity);
        buf.extend(&header_line);
        let compression = run.compression.unwrap_or_default();
        let zstd_unavailable = !compression_available(compression);
        let active = run.schedule.is_none_or(|s| s.is_active(0));
        let writer: Box<dyn Write + Send> = Box::new(writer);
        let sink = match compression {
            #[cfg(feature = "zstd")]
            Compression::Zstd { level } => Sink::Zstd(ZstdSink::start(writer, level, capacity)),
            // Plain JSONL. Without the `zstd` feature a zstd run lands here too and writes
            // nothing (`zstd_unavailable` stops it below): never plain bytes where compressed
            // ones were asked for.
            _ => Sink::Plain(writer),
        };
        // A session that cannot write what was asked for stops before its header, as after a
        // failed write: every later event is counted as dropped.
        let error = zstd_unavailable
            .then(|| io::Error::new(io::ErrorKind::Unsupported, "zstd needs the `zstd` feature"));
        let mut output = Output::new(sink, buf, error);
        // The file starts with its header from the first moment (a frame of its own when
        // compressed).
        output.write_block();
        output.flush_sink();
        output.sync();
        let out = Arc::new(Mutex::new(output));
        let flusher =
            flush_ticks.and_then(|(every, tick)| Flusher::start(Arc::downgrade(&out), every, tick));
        let writes_at_steps = flusher.is_none();
        let run_id = header.run.run_id;
        let session = TraceSession {
            id: NEXT_SESSION.fetch_add(1, Ordering::Relaxed),
            active: AtomicBool::new(active),
            finished: AtomicBool::new(false),
            clock,
            origin,
            timing: run.timing,
            device: run.device.into_boxed_str(),
            schedule: run.schedule,
            step: AtomicU64::new(0),
            next_span: AtomicU64::new(1),
            path: None,
            out,
            flusher: Mutex::new(flusher),
            writes_at_steps,
            lock: None,
            zstd_unavailable,
        };
        (session, header_line, run_id)
    }

    /// Writes the `incomplete` trailer when the process receives SIGINT or SIGTERM, then
    /// lets the program's handling continue as `after` says: [`AfterSignal::Terminate`] for
    /// a program that does not handle them (it then ends as the signal's default action
    /// would end it), [`AfterSignal::Continue`] for one that handles them itself (installed
    /// before this call, or through `signal-hook`). One handler thread serves every
    /// registered session of the process; the session is held weakly.
    pub fn close_on_signals(self: &Arc<Self>, after: AfterSignal) -> Result<(), TraceError> {
        signals::register(self, after).map_err(|source| TraceError::Io {
            path: self.path.clone(),
            source,
            dropped: 0,
        })
    }

    /// Nanoseconds the recording threads have spent writing the trace out so far: each full
    /// block, written by the thread whose line filled it, and, in a session without a flusher
    /// ([`Run::flush_interval`] `None`), the write-outs at step boundaries (for a compressed
    /// session, handing the block to its writer thread and waiting for it). Part of what
    /// recording costs a program beyond encoding its lines, often the larger part where
    /// writing a file is slow. The background flusher's writes,
    /// those at finish and those of threads that record beside the program
    /// ([`record_beside_the_program`](crate::record_beside_the_program): a sampler's, a heap
    /// tracker's) are not counted: they are not taken from the program's own threads.
    pub fn recording_write_ns(&self) -> u64 {
        lock(&self.out).recording_write_ns
    }

    /// Whether records are written now (inside an active window, not finished). One relaxed
    /// atomic load.
    #[inline(always)]
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Nanoseconds since the session started, from its monotonic clock: the CPU's invariant
    /// time-stamp counter, calibrated once per process against the OS's monotonic clock
    /// (`quanta`; one `rdtsc`, about half of a `clock_gettime`), or that OS clock itself where
    /// the counter is not invariant.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }

    /// Counts of the events recorded so far, by type: written, on their way to the file, or
    /// still buffered (dropped ones and those after `finish` are not counted).
    pub fn recorded_counts(&self) -> EventCounts {
        lock(&self.out).appended
    }

    /// The run's timing mode.
    pub fn timing_mode(&self) -> TimingMode {
        self.timing
    }

    /// The run's device (events on it omit their device on the wire).
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The trace file, when the sink is a file.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The current step index (0 before the first `step()`).
    pub fn current_step(&self) -> u64 {
        self.step.load(Ordering::Relaxed)
    }

    /// The innermost written span open on this thread, if any.
    pub fn current_span(&self) -> Option<SpanId> {
        self.current_span_raw().map(SpanId)
    }

    /// A span id unique in this session. Each thread takes ids from the session in blocks of
    /// [`SPAN_ID_BLOCK`] and hands them out from a thread-local, so that opening a span costs
    /// no atomic read-modify-write on a counter all threads share: ids are unique, increasing
    /// on each thread, and not in time order across threads (the schema promises uniqueness
    /// only).
    #[inline]
    fn new_span_id(&self) -> u64 {
        SPAN_IDS.with(|ids| {
            let (session, next, end) = ids.get();
            if session == self.id && next < end {
                ids.set((session, next + 1, end));
                next
            } else {
                let start = self.next_span.fetch_add(SPAN_ID_BLOCK, Ordering::Relaxed);
                ids.set((self.id, start + 1, start + SPAN_ID_BLOCK));
                start
            }
        })
    }

    fn current_span_raw(&self) -> Option<u64> {
        STACK.with(|st| {
            st.borrow()
                .iter()
                .rev()
                .find(|e| e.session == self.id && e.written)
                .map(|e| e.span)
        })
    }

    /// Formats one line with `f` and appends it to the session's block buffer under its lock
    /// (so lines never interleave and keep the order in which the lock is taken). When the
    /// lock is free the line is formatted straight into the block; when another thread holds
    /// it, the line is formatted first into a reused per-thread buffer, outside the lock, and
    /// only copied in under it.
    #[inline]
    fn emit(&self, ty: EventType, f: impl FnOnce(&mut LineBuf)) {
        self.emit_lines(&[ty], f);
    }

    /// Like [`emit`](Self::emit) for `f` writing one line per entry of `types` (their event
    /// types, in order): the lines land adjacent in the trace, under one lock.
    #[inline]
    fn emit_lines(&self, types: &[EventType], f: impl FnOnce(&mut LineBuf)) {
        match self.out.try_lock() {
            Ok(mut out) => out.append_lines(types, f),
            Err(TryLockError::Poisoned(p)) => p.into_inner().append_lines(types, f),
            Err(TryLockError::WouldBlock) => self.emit_contended(types, f),
        }
    }

    #[cold]
    fn emit_contended(&self, types: &[EventType], f: impl FnOnce(&mut LineBuf)) {
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut line) => {
                line.clear();
                f(&mut line);
                lock(&self.out).append_lines(types, |b| b.extend(line.bytes()));
            }
            Err(_) => lock(&self.out).append_lines(types, f),
        });
    }

    /// Opens a span on this thread; it ends when the guard drops. Its parent is the
    /// innermost written span of this session open on this thread.
    pub fn span(&self, name: &str, kind: SpanKind, step: Option<ExecStep>) -> SpanGuard<'_> {
        self.open_span(name, |_| None, kind, step)
    }

    /// Like [`span`](Self::span) for a span named `name#k`, where `k = index(parent)` is
    /// chosen from the span's parent (the innermost written span of this session open on this
    /// thread, `None` at the root or outside an active window), e.g. the count of earlier
    /// children of that name under it; `index` returning `None` keeps the plain name. The name
    /// is written straight into the line, never built as a string.
    pub fn span_numbered_by(
        &self,
        name: &str,
        kind: SpanKind,
        step: Option<ExecStep>,
        index: impl FnOnce(Option<SpanId>) -> Option<u32>,
    ) -> SpanGuard<'_> {
        self.open_span(name, index, kind, step)
    }

    #[inline]
    fn open_span(
        &self,
        name: &str,
        index: impl FnOnce(Option<SpanId>) -> Option<u32>,
        kind: SpanKind,
        step: Option<ExecStep>,
    ) -> SpanGuard<'_> {
        let id = self.new_span_id();
        let written = self.is_active();
        let parent = if written {
            self.current_span_raw()
        } else {
            None
        };
        let index = index(parent.map(SpanId));
        STACK.with(|st| {
            st.borrow_mut().push(StackEntry {
                session: self.id,
                span: id,
                written,
            });
        });
        if written {
            let ts = self.now_ns();
            let thread = thread_no();
            self.emit(EventType::SpanStart, |b| {
                encode::span_start(b, id, parent, (name, index), kind, step, thread, ts);
            });
        }
        SpanGuard {
            session: self,
            id,
            written,
            _not_send: PhantomData,
        }
    }

    fn end_span(&self, id: u64) {
        self.end_span_at_or_now(id, None);
    }

    /// Closes span `id` and any of this session's spans opened after it on this thread
    /// (guards dropped out of order): all end at the same instant (`at`, else now), children
    /// first.
    pub(crate) fn end_span_at_or_now(&self, id: u64, at: Option<u64>) {
        let mut ended: [u64; 8] = [0; 8];
        let mut overflow: Vec<u64> = Vec::new();
        let mut n = 0usize;
        STACK.with(|st| {
            let mut st = st.borrow_mut();
            let Some(pos) = st
                .iter()
                .rposition(|e| e.session == self.id && e.span == id)
            else {
                return;
            };
            let mut i = st.len();
            while i > pos {
                i -= 1;
                let e = st[i];
                if e.session != self.id {
                    continue;
                }
                st.remove(i);
                if e.written {
                    if n < ended.len() {
                        ended[n] = e.span;
                    } else {
                        overflow.push(e.span);
                    }
                    n += 1;
                }
            }
        });
        if n == 0 {
            return;
        }
        let ts = at.unwrap_or_else(|| self.now_ns());
        for &span in ended.iter().take(n.min(ended.len())).chain(overflow.iter()) {
            self.emit(EventType::SpanEnd, |b| encode::span_end(b, span, ts));
        }
    }

    /// Records an executed op in the thread's current span.
    #[inline]
    pub fn record_op(&self, op: &OpRecord<'_>) {
        if !self.is_active() {
            return;
        }
        let span = self.current_span_raw();
        self.emit(EventType::Op, |b| encode::op(b, span, op, &self.device));
    }

    /// Records a tensor's metadata in the thread's current span.
    #[inline]
    pub fn record_tensor(&self, tensor: &TensorRecord<'_>) {
        if !self.is_active() {
            return;
        }
        let span = self.current_span_raw();
        self.emit(EventType::Tensor, |b| {
            encode::tensor(b, span, tensor, &self.device);
        });
    }

    /// Records an allocation or free, stamped now, in the thread's current span.
    #[inline]
    pub fn record_memory(&self, mem: &MemoryRecord<'_>) {
        if !self.is_active() {
            return;
        }
        let span = self.current_span_raw();
        let ts = self.now_ns();
        self.emit(EventType::Memory, |b| {
            encode::memory(b, span, mem, &self.device, ts);
        });
    }

    /// Records an allocation or free stamped `ts_ns` (from [`now_ns`](Self::now_ns), e.g. the
    /// end of the op that allocated) instead of now, in the thread's current span.
    #[inline]
    pub fn record_memory_at(&self, mem: &MemoryRecord<'_>, ts_ns: u64) {
        if !self.is_active() {
            return;
        }
        let span = self.current_span_raw();
        self.emit(EventType::Memory, |b| {
            encode::memory(b, span, mem, &self.device, ts_ns);
        });
    }

    /// Records an executed op together with its output: the `op` event, the output's
    /// `tensor` event and, when `alloc` is given, the output's `memory` event stamped at the
    /// op's end (`start_ns + dur_ns`), all in the thread's current span.
    ///
    /// The lines are exactly those of [`record_op`](Self::record_op),
    /// [`record_tensor`](Self::record_tensor) and [`record_memory_at`](Self::record_memory_at)
    /// (with the op's end as the time) called in that order, but they are formatted in one
    /// pass under one lock, with one span lookup and no clock read, and they stay adjacent in
    /// the trace (no other thread's line falls between them). Nothing outside an active
    /// window.
    ///
    /// ```
    /// use trace_record::{MemoryRecord, OpRecord, Run, TensorRecord, TraceSession};
    /// use trace_record::schema::{AllocKind, MemoryCategory, Phase};
    ///
    /// let (session, sink) = TraceSession::in_memory(Run::new("doc::op_output", Phase::Infer, "cpu"));
    /// let t0 = session.now_ns();
    /// let cat = MemoryCategory::Activation;
    /// session.record_op_with_output(
    ///     &OpRecord {
    ///         name: "relu", inputs: &[1], outputs: &[2], shape: &[4], dtype: "f32",
    ///         device: "cpu", start_ns: t0, dur_ns: 50, in_bytes: 16, out_bytes: 16,
    ///         category: Some(cat), flops: None,
    ///     },
    ///     &TensorRecord {
    ///         id: 2, label: None, shape: &[4], dtype: "f32", device: "cpu",
    ///         requires_grad: false, bytes: 16, category: cat,
    ///     },
    ///     Some(&MemoryRecord {
    ///         kind: AllocKind::Alloc, storage: 2, tensor: 2, bytes: 16, device: "cpu",
    ///         category: cat,
    ///     }),
    /// );
    /// let summary = session.finish().unwrap();
    /// assert_eq!((summary.counts.op, summary.counts.tensor, summary.counts.memory), (1, 1, 1));
    /// # let trace = trace_record::read_trace_bytes(&sink.bytes()).unwrap();
    /// # assert_eq!(trace.events.len(), 3);
    /// ```
    #[inline]
    pub fn record_op_with_output(
        &self,
        op: &OpRecord<'_>,
        tensor: &TensorRecord<'_>,
        alloc: Option<&MemoryRecord<'_>>,
    ) {
        if !self.is_active() {
            return;
        }
        let span = self.current_span_raw();
        let device: &str = &self.device;
        match alloc {
            Some(mem) => {
                let ts = op.start_ns.saturating_add(op.dur_ns);
                self.emit_lines(
                    &[EventType::Op, EventType::Tensor, EventType::Memory],
                    |b| encode::op_with_output(b, span, op, tensor, Some((mem, ts)), device),
                );
            }
            None => self.emit_lines(&[EventType::Op, EventType::Tensor], |b| {
                encode::op_with_output(b, span, op, tensor, None, device);
            }),
        }
    }

    /// Records what was found for a parameter's gradient (a non-finite norm is omitted). In
    /// a flight recorder, state `non_finite` or a non-finite norm fires trigger
    /// `non_finite_gradient` (unless [`FlightConfig::non_finite`] is off).
    pub fn record_gradient(&self, param: &str, state: GradientState, norm: Option<f64>) {
        if !self.is_active() {
            return;
        }
        let ts = self.now_ns();
        let non_finite = state == GradientState::NonFinite || norm.is_some_and(|n| !n.is_finite());
        if non_finite {
            let step = self.current_step();
            let mut out = lock(&self.out);
            out.append_lines(&[EventType::Gradient], |b| {
                encode::gradient(b, param, state, norm, ts);
            });
            if let Some(f) = out.flight.as_mut().filter(|f| f.on_non_finite()) {
                f.fire(Fired {
                    trigger: DumpTrigger::NonFiniteGradient,
                    step,
                    evidence: DumpEvidence {
                        param: Some(param.to_string()),
                        ..DumpEvidence::default()
                    },
                });
            }
            return;
        }
        self.emit(EventType::Gradient, |b| {
            encode::gradient(b, param, state, norm, ts);
        });
    }

    /// Records the training loss as the counter [`LOSS_COUNTER`](crate::schema::LOSS_COUNTER)
    /// (`loss`; a non-finite value is written as `null`). In a flight recorder a non-finite
    /// value fires trigger `non_finite_loss` (unless [`FlightConfig::non_finite`] is off).
    pub fn record_loss(&self, value: f64) {
        if !self.is_active() {
            return;
        }
        let ts = self.now_ns();
        let step = self.current_step();
        let mut out = lock(&self.out);
        out.append_lines(&[EventType::Counter], |b| {
            encode::counter(b, crate::schema::LOSS_COUNTER, value, ts);
        });
        if value.is_finite() {
            return;
        }
        if let Some(f) = out.flight.as_mut().filter(|f| f.on_non_finite()) {
            let shown = if value.is_nan() {
                "NaN"
            } else if value > 0.0 {
                "inf"
            } else {
                "-inf"
            };
            f.fire(Fired {
                trigger: DumpTrigger::NonFiniteLoss,
                step,
                evidence: DumpEvidence {
                    value: Some(shown.to_string()),
                    ..DumpEvidence::default()
                },
            });
        }
    }

    /// Asks a flight recorder for a dump (trigger `call`, with `reason`): it covers the
    /// current step, written when that step (and [`FlightConfig::after`] more) ended. Returns
    /// false when the session is not a flight recorder (nothing happens).
    pub fn dump(&self, reason: &str) -> bool {
        let step = self.current_step();
        let mut out = lock(&self.out);
        let Some(f) = out.flight.as_mut() else {
            return false;
        };
        f.fire(Fired {
            trigger: DumpTrigger::Call,
            step,
            evidence: DumpEvidence {
                reason: Some(reason.to_string()),
                ..DumpEvidence::default()
            },
        });
        true
    }

    /// What a flight recorder did so far (dumps written, refused triggers, the ring's size);
    /// `None` for a session that is not one.
    pub fn flight_stats(&self) -> Option<FlightStats> {
        lock(&self.out).flight.as_ref().map(|f| f.stats())
    }

    /// Records a physical device-memory sample (absent figures stay absent).
    pub fn record_device_memory(
        &self,
        device: &str,
        used: Option<u64>,
        free: Option<u64>,
        reserved: Option<u64>,
    ) {
        if !self.is_active() {
            return;
        }
        let ts = self.now_ns();
        self.emit(EventType::DeviceMemory, |b| {
            encode::device_memory(b, device, used, free, reserved, ts);
        });
    }

    /// Records a user-defined instant in the thread's current span.
    pub fn record_marker(&self, name: &str) {
        if !self.is_active() {
            return;
        }
        let span = self.current_span_raw();
        let ts = self.now_ns();
        self.emit(EventType::Marker, |b| encode::marker(b, name, span, ts));
    }

    /// Records a user-defined value.
    pub fn record_counter(&self, name: &str, value: f64) {
        if !self.is_active() {
            return;
        }
        let ts = self.now_ns();
        self.emit(EventType::Counter, |b| encode::counter(b, name, value, ts));
    }

    /// Ends the current step and starts the next: advances the schedule and, when the new
    /// step is recorded, writes a `step` event. Returns the new step's index.
    ///
    /// The finished step reaches the file within [`Run::step_write_bound`] of this call (a
    /// quarter of the flush interval, 50 ms by default), written by the session's background
    /// thread: the call itself only marks the block as holding a finished step, so a fast
    /// loop's step boundaries make no syscall. In a session without a flush interval the call
    /// writes the block out before it returns.
    ///
    /// Call it from one thread (the training loop): two concurrent calls each advance the
    /// index, but the window they leave switched on or off may be the older step's.
    pub fn step(&self) -> u64 {
        let index = self.step.fetch_add(1, Ordering::Relaxed) + 1;
        if self.finished.load(Ordering::Relaxed) {
            return index;
        }
        let active = self.schedule.is_none_or(|s| s.is_active(index));
        self.active.store(active, Ordering::Relaxed);
        let now = self.now_ns();
        let ts = active.then_some(now);
        let mut out = lock(&self.out);
        if out.finished {
            return index;
        }
        let o = &mut *out;
        if let Some(f) = o.flight.as_mut() {
            // The finished step moves into the ring; the triggers are checked.
            // The buffer itself moves into the ring (no copy); an evicted step's comes back.
            // A file beside the ring shares it until the step is written there.
            let lines = Arc::new(std::mem::take(&mut o.buf).into_vec());
            if let Some(queue) = o.beside.as_mut() {
                queue.push((Arc::clone(&lines), o.pending));
            } else {
                o.counts += o.pending;
            }
            o.pending = EventCounts::default();
            let next = f.step_ended(index - 1, lines, now);
            o.buf = LineBuf::from_vec(next);
            o.buf.clear();
            if let Some(ts) = ts {
                o.append_lines(&[EventType::Step], |b| encode::step(b, index, ts));
            }
            if o.beside.is_some() {
                if self.writes_at_steps {
                    // No flusher: this boundary writes the finished step to the file itself.
                    let start = Instant::now();
                    o.write_block();
                    o.flush_sink();
                    o.add_recording_write(start);
                } else {
                    o.finished_step = true;
                }
            }
            return index;
        }
        if let Some(ts) = ts {
            out.append_lines(&[EventType::Step], |b| encode::step(b, index, ts));
        }
        if !self.writes_at_steps {
            // The flusher writes the block out at its next tick (at most the bound away).
            out.finished_step = true;
            return index;
        }
        // No flusher: this boundary writes the block out itself.
        let start = Instant::now();
        out.write_block();
        out.flush_sink();
        out.add_recording_write(start);
        // A compressed block is written by the writer thread; wait for it without holding the
        // lock, so that other threads keep recording meanwhile.
        #[cfg(feature = "zstd")]
        {
            let ticket = out.ticket();
            drop(out);
            if let Some(t) = ticket {
                let start = Instant::now();
                t.wait();
                lock(&self.out).add_recording_write(start);
            }
        }
        index
    }

    /// Writes the trailer (outcome complete) and flushes. Returns the summary, or the first
    /// I/O error (everything written before it stays readable).
    ///
    /// End span guards first: a span still open when the session finishes has no `span_end`
    /// in the trace (its guard's later drop writes nothing), and validation reports it as
    /// left open.
    pub fn finish(&self) -> Result<Summary, TraceError> {
        self.close(Outcome::Complete)
    }

    /// Like [`finish`](Self::finish) but records outcome `failed` with `reason`.
    pub fn fail(&self, reason: &str) -> Result<Summary, TraceError> {
        self.close(Outcome::Failed {
            reason: reason.to_string(),
        })
    }

    fn close(&self, outcome: Outcome) -> Result<Summary, TraceError> {
        if self.finished.swap(true, Ordering::AcqRel) {
            // Another thread is closing (a signal handler, say): return once its trailer is
            // written, so that a program may exit right after this.
            while !lock(&self.out).finished {
                std::thread::yield_now();
            }
            return Err(TraceError::AlreadyFinished);
        }
        self.active.store(false, Ordering::Relaxed);
        // Tell the background writer to stop; it is joined after the trailer is written
        // (it would wait for the output's lock held below).
        let mut flusher = lock(&self.flusher).take();
        if let Some(f) = flusher.as_mut() {
            f.request_stop();
        }
        let ts = self.now_ns();
        let mut out = lock(&self.out);
        // A flight recorder is out of the output until the trailer is written, so that the
        // writes below go to the sink (the file beside the ring, if any).
        let mut flight = None;
        if let Some(mut f) = out.flight.take() {
            let exit = outcome != Outcome::Complete;
            let current = self.current_step();
            let o = &mut *out;
            let lines = o.buf.bytes().to_vec();
            if o.beside.is_none() {
                // Without a file the unfinished step goes to the ring only.
                o.counts += o.pending;
                o.pending = EventCounts::default();
                o.buf.clear();
            }
            // The dump thread is joined without the output's lock.
            drop(out);
            f.close(exit, current, &lines, ts);
            out = lock(&self.out);
            flight = Some(f);
        }
        out.write_block();
        // Whether everything so far was written decides whether a trailer follows.
        out.sync();
        let mut trailer_line = Vec::new();
        if out.error.is_none() {
            let trailer = Trailer {
                outcome: outcome.clone(),
                counts: out.counts,
                dropped: out.dropped,
                ts,
            };
            encode::encode_trailer(&trailer, &mut trailer_line);
            out.buf.extend(&trailer_line);
            out.write_block();
            out.flush_sink();
        }
        out.close_sink();
        if flight.is_some() {
            out.flight = flight;
        }
        out.finished = true;
        // The trace is whole (or as whole as it will get): readers no longer see a writer.
        if let Some(lock) = &self.lock {
            let _ = lock.unlock();
        }
        let error = out.error.take();
        let (counts, bytes, dropped) = (out.counts, out.bytes, out.dropped);
        drop(out);
        drop(flusher);
        match error {
            Some(_) if self.zstd_unavailable => Err(TraceError::ZstdUnavailable {
                path: self.path.clone(),
            }),
            Some(source) => Err(TraceError::Io {
                path: self.path.clone(),
                source,
                dropped,
            }),
            None => Ok(Summary {
                path: self.path.clone(),
                counts,
                bytes,
                dropped,
                outcome,
            }),
        }
    }
}

impl Drop for TraceSession {
    fn drop(&mut self) {
        if !self.finished.load(Ordering::Acquire) {
            // Errors cannot be reported from drop; the file keeps what was written.
            let _ = self.close(Outcome::Incomplete);
        }
    }
}

/// An open span; writes `span_end` when dropped (or on [`SpanGuard::end`]). Not `Send`:
/// spans live on the thread that opened them.
#[must_use = "a span ends when its guard is dropped"]
pub struct SpanGuard<'a> {
    session: &'a TraceSession,
    id: u64,
    written: bool,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for SpanGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanGuard")
            .field("id", &self.id)
            .field("written", &self.written)
            .finish()
    }
}

impl SpanGuard<'_> {
    /// The span's id when it was written (opened inside an active window).
    pub fn id(&self) -> Option<SpanId> {
        self.written.then_some(SpanId(self.id))
    }

    /// Ends the span now.
    pub fn end(self) {}
}

impl Drop for SpanGuard<'_> {
    fn drop(&mut self) {
        self.session.end_span(self.id);
    }
}
