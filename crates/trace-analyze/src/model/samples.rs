//! The loaded sample model: interned frames and stacks, sample rows, the sampler's account.
//!
//! A trace written with a CPU sampler (trace-candle's `Capture::sample_stacks`, schema version
//! 2) holds interned frames and stacks and, per recorded step, how many samples landed in each
//! stack on each thread. [`SampledStacks`] is that part of a loaded [`Trace`](crate::Trace),
//! filled event by event while the trace is read; it also knows each frame's crate (from the
//! function's path, else from its source file) and the name a table shows for it. What the
//! samples say (rankings by function, crate group, phase or span) is the hot-spot report's.
//!
//! Loading is linear in the events; a stack's frames are one slice of a flat array. Frames
//! take little more than their text: one buffer holds every frame's function, file and shown
//! name (a frame is ranges into it, its crate and waiting class worked out once at load), and
//! wire ids that run on by one (as the sampler writes them) need no map.
//!
//! **Waiting is not work.** A stack whose innermost frames are a thread pool spinning or
//! parking (Candle's barrier spin-wait, rayon's idle loop, futex, condition-variable and
//! `sched_yield` waits) is classified *waiting* when loaded, by the frame patterns in
//! [`WAITING_FRAMES`]: walking from the innermost frame outwards past frames that say nothing
//! of their own (Rust's generic runtime, libc, unknown frames), the first frame either matches
//! a pattern (waiting) or belongs to some other code (work). Only the waiting side waits:
//! a waker (`futex_wake`, `unpark`, a mutex's `unlock`, `notify_one`: [`WAKER_FRAMES`]) is
//! work wherever it is called from.
//!
//! **The profiler's own work is neither.** A stack whose innermost frame of some code's own
//! (past the runtime, libc, wakers and waiting frames) is the sampler's, the recorder's, the
//! heap tracker's or the capture's ([`PROFILER_CRATE_NAMES`], by the frame's crate) is
//! classified *profiler*: the step-boundary wake (`Capture::step` → `advance` → `unpark` →
//! `futex_wake`), a recorder's lock, the heap tracker's bookkeeping. The allocator below the
//! heap tracker's allocator wrapper stays the program's (it would run without the tracker).

use serde::Serialize;
use trace_record::SamplerAccount;
use trace_record::schema::{Event, ExecStep, SamplerEvent};

use crate::model::intern::FastMap;

/// One interned frame of sampled stacks, as borrowed from the [`SampledStacks`] that hold it
/// ([`SampledStacks::frame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SampledFrame<'a> {
    /// The demangled function name.
    pub func: &'a str,
    /// The source file, when known.
    pub file: Option<&'a str>,
    /// Inlined into its caller.
    pub inlined: bool,
}

/// A frame as stored: ranges of [`SampledStacks`]' text, relative to `at` (see
/// [`SampledStacks::add_frame`] for the layout), and what the frame says when classified.
#[derive(Debug, Clone, Copy)]
struct FrameRec {
    /// Where the frame's text starts.
    at: usize,
    /// The function's length (it starts at `at`).
    func: u32,
    /// The source file's length; [`NONE`] when unknown.
    file: u32,
    /// The crate's start, relative to `at`; with `krate_len` [`NONE`]: no crate.
    krate: u32,
    /// The crate's length.
    krate_len: u32,
    /// [`INLINED`], [`SHOWN_WITH_FILE`], and the [`WaitClass`] in the low three bits
    /// ([`CLASS_BITS`]).
    flags: u8,
}

/// No file, no crate.
const NONE: u32 = u32::MAX;
/// [`FrameRec::flags`]: the bits of the frame's [`WaitClass`].
const CLASS_BITS: u8 = 7;
/// [`FrameRec::flags`]: inlined into its caller.
const INLINED: u8 = 8;
/// [`FrameRec::flags`]: the frame's text is `func (file)` and that is its shown name.
const SHOWN_WITH_FILE: u8 = 16;
/// The longest function or file kept (longer ones are cut at a character boundary): every
/// range of a frame then fits in a `u32`. A loaded line is at most 64 MiB, far below it.
const MAX_FRAME_TEXT: usize = (u32::MAX / 4) as usize;

/// `s` cut to at most [`MAX_FRAME_TEXT`] bytes, at a character boundary.
fn capped(s: &str) -> &str {
    if s.len() <= MAX_FRAME_TEXT {
        return s;
    }
    let mut end = MAX_FRAME_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Wire ids to indices, in load order, the first of a repeated id kept. Ids that run on by
/// one from the first (as the sampler writes them) take no memory; the first id out of that
/// run moves them all into a map.
#[derive(Debug, Clone, Default)]
struct IdIndex {
    /// The first id of the run.
    first: u64,
    /// Ids in the run (`first..first + dense` are indices `0..dense`), while not mapped.
    dense: u32,
    /// The ids once they are no run.
    map: Option<FastMap<u64, u32>>,
}

impl IdIndex {
    /// Records `id` at index `i` (the number of ids recorded before); a repeated id keeps its
    /// first index.
    fn insert(&mut self, id: u64, i: u32) {
        if self.map.is_none() {
            let next = self.first.checked_add(u64::from(self.dense));
            if i == self.dense && (self.dense == 0 || next == Some(id)) && i < u32::MAX {
                if self.dense == 0 {
                    self.first = id;
                }
                self.dense += 1;
                return;
            }
            let mut map = FastMap::default();
            map.reserve(self.dense as usize + 1);
            for k in 0..self.dense {
                map.insert(self.first + u64::from(k), k);
            }
            self.map = Some(map);
        }
        if let Some(map) = &mut self.map {
            map.entry(id).or_insert(i);
        }
    }

    /// The index of `id`, when recorded.
    fn get(&self, id: u64) -> Option<u32> {
        match &self.map {
            Some(map) => map.get(&id).copied(),
            None => id
                .checked_sub(self.first)
                .filter(|&k| k < u64::from(self.dense))
                .map(|k| k as u32),
        }
    }

    fn shrink_to_fit(&mut self) {
        if let Some(map) = &mut self.map {
            map.shrink_to_fit();
        }
    }
}

/// One `samples` line as loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleRow {
    /// The recorded step.
    pub step: u64,
    /// The sampled thread (operating-system id).
    pub thread: u64,
    /// The stack's wire id.
    pub stack: u64,
    /// Number of samples.
    pub n: u64,
    /// The phase the capture knew of.
    pub phase: Option<ExecStep>,
    /// The innermost open span the capture knew of (wire id).
    pub span: Option<u64>,
}

/// What read-time symbolization did ([`SampledStacks::read_time`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReadTimeSymbols {
    /// Stacks resolved from their raw addresses.
    pub stacks: u64,
    /// Modules whose frames are shown as `file+0xaddress`, and why.
    pub unresolved: Vec<UnresolvedModule>,
}

/// A module that could not be symbolized at read time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnresolvedModule {
    /// The path the recording process had mapped.
    pub path: String,
    /// Why: `missing` (no such file here), `build id differs`, `unreadable`, `not ELF`.
    pub reason: String,
}

impl ReadTimeSymbols {
    /// One line saying what was done, for a report's notes.
    pub fn note(&self) -> String {
        let mut s = format!(
            "{} sampled stacks were symbolized at read time from the binaries on disk (the run \
             stopped before its sampler did)",
            self.stacks
        );
        if !self.unresolved.is_empty() {
            let list: Vec<String> = self
                .unresolved
                .iter()
                .map(|u| {
                    format!(
                        "{} ({})",
                        trace_record::schema::shown_up_to(&u.path, 200),
                        u.reason
                    )
                })
                .collect();
            s.push_str("; frames of these modules are shown as module+offset: ");
            s.push_str(&list.join(", "));
        }
        s
    }
}

/// The sampled stacks of a trace (empty for a trace without a sampler, and for version 1).
///
/// Frames are stored compactly: every frame's strings in one text buffer, each frame a few
/// ranges into it ([`frame`](Self::frame), [`frame_name`](Self::frame_name),
/// [`frame_crate`](Self::frame_crate) borrow from it), so a trace of millions of distinct
/// frames costs little more than its text.
#[derive(Debug, Clone, Default)]
pub struct SampledStacks {
    /// Every frame's text (see [`add_frame`](Self::add_frame) for the layout).
    text: String,
    /// Frames in the order they were read.
    frames: Vec<FrameRec>,
    frame_index: IdIndex,
    /// Stacks as ranges of `stack_frames` (frame indices, outermost first).
    stacks: Vec<(u32, u32)>,
    stack_frames: Vec<u32>,
    stack_index: IdIndex,
    /// `samples` lines in the order they were read.
    pub samples: Vec<SampleRow>,
    /// `sampler` lines in the order they were read.
    pub steps: Vec<SamplerEvent>,
    /// Per stack (by index): its class (busy, waiting, the profiler's).
    stack_class: Vec<StackClass>,
    /// Samples left out at load because their step is no step of the trace (the empty
    /// boundary a loop's last `step()` opens, an empty step 0): every analysis counts the
    /// steps the step rule counts.
    pub outside_steps: u64,
    /// The `module` and `raw_stack` lines, kept until loading ends (then the raw stacks no
    /// `stack` line defined are resolved from the files on disk, and these are dropped).
    pub(crate) raw: RawLines,
    /// What read-time symbolization did, when the trace had stacks only as raw addresses
    /// (a run killed before its sampler stopped); `None` when every stack was resolved by
    /// the recorder.
    pub read_time: Option<ReadTimeSymbols>,
}

/// The `module` and `raw_stack` lines of a trace, as read.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawLines {
    pub(crate) modules: Vec<trace_record::schema::ModuleEvent>,
    pub(crate) stacks: Vec<trace_record::schema::RawStackEvent>,
}

/// A frame pattern of waiting: a function name containing `func` at a word start (the
/// character before it is not a letter or digit), in crate `krate` when given (the function's
/// path's crate, else its source file's), in a source file whose path ends with `file` when
/// given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPattern {
    /// Text the demangled function name contains, at a word start.
    pub func: &'static str,
    /// The crate the frame must belong to; `None`: any.
    pub krate: Option<&'static str>,
    /// The end of the frame's source-file path (`/` separated); `None`: any file.
    pub file: Option<&'static str>,
    /// What the pattern recognises.
    pub why: &'static str,
}

const fn wait(func: &'static str, krate: Option<&'static str>, why: &'static str) -> WaitPattern {
    WaitPattern {
        func,
        krate,
        file: None,
        why,
    }
}

/// The frames that mark a sample as waiting rather than working (how stacks are walked is in
/// the module docs). Qualified names (full debug information) and unqualified inlined ones
/// (line tables only, named with their file) both match: patterns are word-start substrings.
pub const WAITING_FRAMES: &[WaitPattern] = &[
    // Spinning.
    wait("spin_loop", None, "a spin-wait (`core::hint::spin_loop`)"),
    wait("_mm_pause", None, "the x86 spin-wait hint (`pause`)"),
    wait("__yield", None, "the Arm spin-wait hint (`yield`)"),
    wait("sched_yield", None, "giving the CPU away (`sched_yield`)"),
    wait(
        "yield_now",
        Some("std"),
        "giving the CPU away (`std::thread::yield_now`)",
    ),
    // Parking and blocking.
    // The waiting side of a futex only: `futex_wake` is a waker (see `WAKER_FRAMES`).
    wait(
        "futex_wait",
        None,
        "a futex wait (parking, mutexes, condition variables)",
    ),
    wait(
        "futex_abstimed_wait",
        None,
        "glibc's futex wait (mutexes, condition variables)",
    ),
    wait(
        "lock_contended",
        Some("std"),
        "a contended `std` lock (spinning, then a futex wait)",
    ),
    wait("pthread_cond_wait", None, "a condition-variable wait"),
    wait("pthread_cond_timedwait", None, "a condition-variable wait"),
    wait("pthread_cond_clockwait", None, "a condition-variable wait"),
    wait("__lll_lock_wait", None, "a contended glibc lock"),
    wait("nanosleep", None, "sleeping"),
    wait("park", Some("std"), "a parked thread (`std::thread::park`)"),
    wait(
        "park",
        Some("parking_lot_core"),
        "a parked thread (parking_lot)",
    ),
    // Candle's CPU thread pool (candle-core utils.rs): the caller waiting at the barrier for
    // the workers, and a worker's loop waiting for work (named by the thread's entry, the
    // loop itself being inlined into it; `BarrierPool::new::{` is that entry, and the loop's
    // own closure, as full debug information names them).
    wait(
        "BarrierGuard",
        Some("candle_core"),
        "Candle's thread-pool barrier",
    ),
    // The same, inlined and named by line tables: the only `drop`s in that file are the
    // barrier's and the pool's (which joins its workers).
    WaitPattern {
        func: "drop",
        krate: Some("candle_core"),
        file: Some("/src/utils.rs"),
        why: "Candle's thread-pool barrier (inlined)",
    },
    wait(
        "BarrierPool::new::{",
        None,
        "a Candle thread-pool worker waiting for work",
    ),
    // The same entry as release builds name it (line tables only: the pool's impl reads
    // `{impl#N}`, not `BarrierPool`, in `__rust_begin_short_backtrace<candle_core::utils::
    // {impl#4}::new::{closure#2}::..>`): std's entry frame generic over a closure of
    // candle-core's utils.rs, whose only spawned thread is the pool's worker.
    wait(
        "__rust_begin_short_backtrace<candle_core::utils::",
        None,
        "a Candle thread-pool worker waiting for work",
    ),
    // rayon's idle loop (gemm's parallel work runs on rayon).
    wait(
        "wait",
        Some("rayon_core"),
        "a rayon thread waiting (`wait_until`, latches)",
    ),
    wait(
        "find_work",
        Some("rayon_core"),
        "an idle rayon thread looking for work",
    ),
    wait(
        "sleep",
        Some("rayon_core"),
        "an idle rayon thread going to sleep",
    ),
    wait("no_work_found", Some("rayon_core"), "an idle rayon thread"),
    wait(
        "steal",
        Some("crossbeam_deque"),
        "an idle rayon thread stealing work",
    ),
];

/// Functions that wake a waiting thread (the last segment of the function's path, leading
/// underscores and glibc's `GI_` prefix left out): the waker's own work, never waiting,
/// wherever it is called from (a mutex's `unlock`, a thread's `unpark`, `futex_wake`).
pub(crate) const WAKER_FRAMES: &[&str] = &[
    "futex_wake",
    "futex_wake_all",
    "lll_lock_wake",
    "lll_lock_wake_private",
    "unpark",
    "unpark_one",
    "unpark_all",
    "unpark_requeue",
    "unpark_filter",
    "unlock",
    "unlock_slow",
    "unlock_contended",
    "wake",
    "wake_one",
    "wake_all",
    "wake_by_ref",
    "notify_one",
    "notify_all",
    "pthread_cond_signal",
    "pthread_cond_broadcast",
    "pthread_mutex_unlock",
    "pthread_mutex_unlock_usercnt",
];

/// The crates whose frames are the profiler's own work: the capture, the recorder, the CPU
/// sampler, the heap tracker, and the `tracing` machinery the capture's layer runs in.
pub(crate) const PROFILER_CRATE_NAMES: &[&str] = &[
    "trace_candle",
    "trace_record",
    "trace_sampler",
    "trace_heap",
    "tracing",
    "tracing_core",
    "tracing_subscriber",
];

/// The heap tracker's crate: its allocator wrapper around the program's allocation is
/// looked through when the allocator is below it.
const HEAP_TRACKER_CRATE: &str = "trace_heap";

/// What a frame says when a stack is classified (stored in [`CLASS_BITS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WaitClass {
    /// Matches [`WAITING_FRAMES`].
    Waiting = 0,
    /// Says nothing of its own: look at its caller.
    Neutral = 1,
    /// Some code's own work.
    Work = 2,
    /// The profiler's own code ([`PROFILER_CRATE_NAMES`]).
    Profiler = 3,
    /// The heap tracker's own code (the profiler's; looked through above the allocator).
    HeapTracker = 4,
    /// A waker ([`WAKER_FRAMES`]): work, but it tells nothing of whose.
    Waker = 5,
    /// The allocator: work, of whoever asked for the allocation.
    Alloc = 6,
}

impl WaitClass {
    fn from_bits(bits: u8) -> WaitClass {
        match bits & CLASS_BITS {
            0 => WaitClass::Waiting,
            2 => WaitClass::Work,
            3 => WaitClass::Profiler,
            4 => WaitClass::HeapTracker,
            5 => WaitClass::Waker,
            6 => WaitClass::Alloc,
            _ => WaitClass::Neutral,
        }
    }
}

/// What a sampled stack's samples are (classified at load, see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StackClass {
    /// Some code of the program working.
    Busy,
    /// A thread waiting ([`WAITING_FRAMES`]).
    Waiting,
    /// The profiler's own work ([`PROFILER_CRATE_NAMES`]).
    Profiler,
}

/// The class of a stack from the classes of its frames, innermost first (the module docs'
/// rules): the profiler's when the innermost frame of some code's own, past the runtime,
/// wakers, waiting frames and the allocator (and the heap tracker's wrapper right above the
/// allocator), is the profiler's; else waiting when the innermost telling frame waits.
fn classify(inner_first: impl Iterator<Item = WaitClass>) -> StackClass {
    let mut telling: Option<WaitClass> = None;
    let mut in_alloc = false;
    for c in inner_first {
        match c {
            WaitClass::Neutral => {}
            WaitClass::Waiting => {
                telling.get_or_insert(WaitClass::Waiting);
            }
            WaitClass::Waker => {
                telling.get_or_insert(WaitClass::Work);
            }
            WaitClass::Alloc => {
                telling.get_or_insert(WaitClass::Work);
                in_alloc = true;
            }
            WaitClass::HeapTracker if in_alloc => {}
            WaitClass::Profiler | WaitClass::HeapTracker => return StackClass::Profiler,
            WaitClass::Work => {
                telling.get_or_insert(WaitClass::Work);
                break;
            }
        }
    }
    if telling == Some(WaitClass::Waiting) {
        StackClass::Waiting
    } else {
        StackClass::Busy
    }
}

/// Whether a function wakes a waiting thread ([`WAKER_FRAMES`]): its path's last segment
/// outside generic arguments, less leading underscores, glibc's `GI_` prefix and a symbol
/// version (`@@GLIBC_2.3.2`).
fn is_waker(func: &str) -> bool {
    let mut depth = 0usize;
    let mut last_start = 0usize;
    let mut end = func.len();
    let b = func.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'<' => depth += 1,
            b'>' => depth = depth.saturating_sub(1),
            b':' if depth == 0 && b.get(i + 1) == Some(&b':') => {
                last_start = i + 2;
                i += 1;
            }
            b'@' | b'(' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
        i += 1;
    }
    let seg = func.get(last_start..end).unwrap_or("");
    // Generic arguments of the last segment (`unlock<T>`).
    let seg = seg.split('<').next().unwrap_or(seg).trim();
    let bare = seg.trim_start_matches('_');
    let bare = bare
        .strip_prefix("GI_")
        .unwrap_or(bare)
        .trim_start_matches('_');
    WAKER_FRAMES.contains(&bare)
}

/// Whether `text` occurs in `func` at a word start.
fn contains_at_word_start(func: &str, text: &str) -> bool {
    func.match_indices(text).any(|(i, _)| {
        func[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_ascii_alphanumeric())
    })
}

/// The pattern of [`WAITING_FRAMES`] that a frame of function `func` in crate `krate`, from
/// source file `file`, matches, if any; none for a waker (`futex_wake`, `unpark`, `unlock`:
/// work wherever it is called from).
pub fn waiting_pattern(
    func: &str,
    krate: Option<&str>,
    file: Option<&str>,
) -> Option<&'static WaitPattern> {
    if is_waker(func) {
        return None;
    }
    let file = file.map(|f| f.replace('\\', "/"));
    WAITING_FRAMES.iter().find(|p| {
        p.krate.is_none_or(|k| krate == Some(k))
            && p.file
                .is_none_or(|end| file.as_deref().is_some_and(|f| f.ends_with(end)))
            && contains_at_word_start(func, p.func)
    })
}

fn wait_class(frame: &SampledFrame<'_>, krate: Option<&str>) -> WaitClass {
    if let Some(k) = krate.filter(|k| PROFILER_CRATE_NAMES.contains(k)) {
        return if k == HEAP_TRACKER_CRATE {
            WaitClass::HeapTracker
        } else {
            WaitClass::Profiler
        };
    }
    if is_waker(frame.func) {
        return WaitClass::Waker;
    }
    if waiting_pattern(frame.func, krate, frame.file).is_some() {
        return WaitClass::Waiting;
    }
    if is_allocator(frame.func) {
        return WaitClass::Alloc;
    }
    // Candle's pool closures inlined from candle-core utils.rs (unqualified, named by line
    // tables): the worker loop or the dispatch around a kernel; their callers tell which.
    let candle_pool_closure = krate == Some("candle_core")
        && frame.func.starts_with('{')
        && frame
            .file
            .is_some_and(|f| f.replace('\\', "/").ends_with("/src/utils.rs"));
    if candle_pool_closure || matches!(krate, Some("core" | "std" | "alloc") | None) {
        WaitClass::Neutral
    } else {
        WaitClass::Work
    }
}

/// The crate a source file belongs to: `candle-core-0.11.1/src/...` → `candle_core`,
/// `library/core/src/...` → `core`, `.../crates/tracegraph/src/...` → `tracegraph`.
pub(crate) fn crate_of_file(file: &str) -> Option<String> {
    let file = file.replace('\\', "/");
    if let Some(rest) = file.strip_prefix("library/") {
        return rest.split('/').next().map(str::to_string);
    }
    let parts: Vec<&str> = file.split('/').collect();
    let src = parts.iter().rposition(|p| *p == "src")?;
    let dir = parts.get(src.checked_sub(1)?)?;
    // A registry crate's directory ends in its version: `name-1.2.3`.
    let name = match dir.rsplit_once('-') {
        Some((n, v)) if v.starts_with(|c: char| c.is_ascii_digit()) => n,
        _ => dir,
    };
    (!name.is_empty()).then(|| name.replace('-', "_"))
}

/// Whether a function name carries its path (`a::b`, `<T as U>::f`) outside generic arguments.
pub(crate) fn is_qualified(func: &str) -> bool {
    let mut depth = 0usize;
    let b = func.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'<' if i == 0 => return true,
            b'<' => depth += 1,
            b'>' => depth = depth.saturating_sub(1),
            b':' if depth == 0 && b.get(i + 1) == Some(&b':') => return true,
            _ => {}
        }
    }
    false
}

impl SampledStacks {
    /// Keeps only the samples and sampler accounts of steps `first..=last` (the trace's first
    /// and last step by the step rule), counting the samples left out in
    /// [`outside_steps`](Self::outside_steps) (saturating).
    pub(crate) fn keep_steps(&mut self, first: u64, last: u64) {
        let inside = |step: u64| (first..=last).contains(&step);
        let mut out = 0u64;
        self.samples.retain(|r| {
            let keep = inside(r.step);
            if !keep {
                out = out.saturating_add(r.n);
            }
            keep
        });
        self.steps.retain(|st| inside(st.step));
        self.outside_steps = self.outside_steps.saturating_add(out);
        self.shrink_to_fit();
    }

    /// Gives back what the loaded tables hold beyond their length (the growth of loading).
    pub(crate) fn shrink_to_fit(&mut self) {
        self.text.shrink_to_fit();
        self.frames.shrink_to_fit();
        self.frame_index.shrink_to_fit();
        self.stacks.shrink_to_fit();
        self.stack_frames.shrink_to_fit();
        self.stack_index.shrink_to_fit();
        self.samples.shrink_to_fit();
        self.steps.shrink_to_fit();
        self.stack_class.shrink_to_fit();
    }

    /// Loads one sampled-stack event (other events are ignored).
    pub fn add(&mut self, event: &Event) {
        match event {
            Event::Frame(f) => self.add_frame(f.id, &f.func, f.file.as_deref(), f.inlined),
            Event::Stack(s) => {
                // Frames are defined before the stacks naming them; an unknown one is
                // reported by validation and left out here.
                let frames: Vec<u32> = s
                    .frames
                    .iter()
                    .filter_map(|&f| self.frame_index.get(f))
                    .collect();
                self.push_stack(s.id, frames);
            }
            Event::Module(m) => self.raw.modules.push(m.clone()),
            Event::RawStack(r) => self.raw.stacks.push(r.clone()),
            Event::Samples(s) => self.samples.push(SampleRow {
                step: s.step,
                thread: s.thread,
                stack: s.stack,
                n: s.n,
                phase: s.phase,
                span: s.span,
            }),
            Event::Sampler(s) => self.steps.push(s.clone()),
            _ => {}
        }
    }

    /// Adds stack `id` of frame indices (outermost first), classified.
    pub(crate) fn push_stack(&mut self, id: u64, frames: Vec<u32>) {
        let start = self.stack_frames.len() as u32;
        self.stack_frames.extend(frames);
        let i = self.stacks.len() as u32;
        let class = classify(
            self.stack_frames[start as usize..]
                .iter()
                .rev()
                .map(|&f| self.wait_class_of(f)),
        );
        self.stack_class.push(class);
        self.stacks.push((start, self.stack_frames.len() as u32));
        self.stack_index.insert(id, i);
    }

    /// Whether stack `id` (wire id) is defined (by a `stack` line, or resolved from a
    /// `raw_stack` by [`resolve_read_time`](Self::resolve_read_time)).
    pub fn has_stack(&self, id: u64) -> bool {
        self.stack_index.get(id).is_some()
    }

    /// Loads one frame: its function, source file and whether it was inlined, under wire id
    /// `id` (a repeated id keeps naming the first frame).
    ///
    /// Its text goes to the end of the text buffer: `func (file)` when the frame is shown
    /// with its file (an unqualified function, as line-table-only debug information names
    /// inlined functions), else `func` then `file`; then the crate's name when it comes from
    /// the file (a qualified function's crate is a part of the function).
    fn add_frame(&mut self, id: u64, func: &str, file: Option<&str>, inlined: bool) {
        let i = u32::try_from(self.frames.len()).unwrap_or(u32::MAX);
        self.frame_index.insert(id, i);
        self.push_frame(func, file, inlined);
    }

    /// Adds one frame (no wire id) and returns its index.
    pub(crate) fn push_frame(&mut self, func: &str, file: Option<&str>, inlined: bool) -> u32 {
        let (func, file) = (capped(func), file.map(capped));
        let i = u32::try_from(self.frames.len()).unwrap_or(u32::MAX);
        let qualified = is_qualified(func);
        let at = self.text.len();
        self.text.push_str(func);
        let shown_with_file = !qualified && file.is_some();
        if let Some(file) = file {
            if shown_with_file {
                self.text.push_str(" (");
                self.text.push_str(file);
                self.text.push(')');
            } else {
                self.text.push_str(file);
            }
        }
        // Every length is at most a quarter of `u32::MAX` (`capped`), so these fit.
        let rel = |n: usize| u32::try_from(n).unwrap_or(NONE);
        let (krate, krate_len) = if qualified {
            match crate_of(func) {
                Some(c) => (
                    rel(c.as_ptr() as usize - func.as_ptr() as usize),
                    rel(c.len()),
                ),
                None => (NONE, NONE),
            }
        } else {
            match file.and_then(crate_of_file) {
                Some(c) => {
                    let start = self.text.len() - at;
                    self.text.push_str(&c);
                    (rel(start), rel(c.len()))
                }
                None => (NONE, NONE),
            }
        };
        let mut rec = FrameRec {
            at,
            func: rel(func.len()),
            file: file.map_or(NONE, |f| rel(f.len())),
            krate,
            krate_len,
            flags: if inlined { INLINED } else { 0 }
                | if shown_with_file { SHOWN_WITH_FILE } else { 0 },
        };
        let class = {
            let frame = self.view(&rec);
            wait_class(&frame, self.crate_of_rec(&rec))
        };
        rec.flags |= class as u8;
        self.frames.push(rec);
        i
    }

    /// The text of `rec` from `start` (relative to its start), `len` bytes.
    fn slice(&self, rec: &FrameRec, start: u32, len: u32) -> &str {
        let a = rec.at.saturating_add(start as usize);
        self.text
            .get(a..a.saturating_add(len as usize))
            .unwrap_or("")
    }

    fn view(&self, rec: &FrameRec) -> SampledFrame<'_> {
        let file = (rec.file != NONE).then(|| {
            let skip = if rec.flags & SHOWN_WITH_FILE != 0 {
                2
            } else {
                0
            };
            self.slice(rec, rec.func + skip, rec.file)
        });
        SampledFrame {
            func: self.slice(rec, 0, rec.func),
            file,
            inlined: rec.flags & INLINED != 0,
        }
    }

    fn crate_of_rec(&self, rec: &FrameRec) -> Option<&str> {
        (rec.krate_len != NONE).then(|| self.slice(rec, rec.krate, rec.krate_len))
    }

    fn wait_class_of(&self, f: u32) -> WaitClass {
        self.frames
            .get(f as usize)
            .map_or(WaitClass::Neutral, |r| WaitClass::from_bits(r.flags))
    }

    /// Frames loaded (indices `0..frame_count()`, in the order they were read).
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// A frame by index; `None` past [`frame_count`](Self::frame_count).
    pub fn frame(&self, f: u32) -> Option<SampledFrame<'_>> {
        self.frames.get(f as usize).map(|r| self.view(r))
    }

    /// Every frame, by index.
    pub fn frames(&self) -> impl ExactSizeIterator<Item = SampledFrame<'_>> + '_ {
        self.frames.iter().map(|r| self.view(r))
    }

    /// A frame's crate (from its function's path, else its source file).
    pub fn frame_crate(&self, f: u32) -> Option<&str> {
        self.frames
            .get(f as usize)
            .and_then(|r| self.crate_of_rec(r))
    }

    /// A frame's name as shown (an unqualified function with its source file).
    pub fn frame_name(&self, f: u32) -> &str {
        match self.frames.get(f as usize) {
            Some(r) if r.flags & SHOWN_WITH_FILE != 0 => {
                self.slice(r, 0, r.func.saturating_add(3).saturating_add(r.file))
            }
            Some(r) => self.slice(r, 0, r.func),
            None => "[unknown]",
        }
    }

    /// Whether a frame is the allocator's.
    pub(crate) fn frame_is_allocator(&self, f: u32) -> bool {
        self.frame(f).is_some_and(|fr| is_allocator(fr.func))
    }

    /// Rust's generic runtime (`core`, `std`, `alloc`) or an unknown crate: attributed to the
    /// nearest caller outside it when grouping by crate.
    pub(crate) fn frame_is_runtime(&self, f: u32) -> bool {
        matches!(self.frame_crate(f), Some("core" | "std" | "alloc") | None)
    }

    /// True when the trace has no samples.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The class of a stack by wire id; busy when unknown.
    fn stack_class(&self, id: u64) -> StackClass {
        self.stack_index
            .get(id)
            .and_then(|i| self.stack_class.get(i as usize).copied())
            .unwrap_or(StackClass::Busy)
    }

    /// Whether a stack (by wire id) is classified waiting (see the module docs); false when
    /// unknown.
    pub fn stack_is_waiting(&self, id: u64) -> bool {
        self.stack_class(id) == StackClass::Waiting
    }

    /// Whether a stack (by wire id) is classified the profiler's own work (see the module
    /// docs: never waiting too); false when unknown.
    pub fn stack_is_profiler(&self, id: u64) -> bool {
        self.stack_class(id) == StackClass::Profiler
    }

    /// The frame indices of a stack (by wire id), outermost first; empty when unknown.
    pub fn stack(&self, id: u64) -> &[u32] {
        match self.stack_index.get(id) {
            Some(i) => {
                let (a, b) = self.stacks[i as usize];
                &self.stack_frames[a as usize..b as usize]
            }
            None => &[],
        }
    }
}

/// The crate a demangled function name belongs to: its first path segment (the implementing
/// type's crate for `<T as Trait>::f`), or `None` for a symbol without a path (`malloc`).
pub(crate) fn crate_of(func: &str) -> Option<&str> {
    let s = func.trim_start_matches(['<', '&', '*', ' ']);
    let s = s
        .strip_prefix("mut ")
        .or_else(|| s.strip_prefix("dyn "))
        .unwrap_or(s);
    let end = s.find("::")?;
    let name = &s[..end];
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .then_some(name)
}

/// Whether a function is the memory allocator's.
pub(crate) fn is_allocator(func: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "malloc",
        "free",
        "calloc",
        "realloc",
        "cfree",
        "_int_malloc",
        "_int_free",
        "_int_realloc",
        "__libc_malloc",
        "__libc_free",
        "__libc_calloc",
        "__libc_realloc",
        "malloc_consolidate",
        "unlink_chunk",
        "tcache_",
        "__rust_alloc",
        "__rust_dealloc",
        "__rust_realloc",
        "__rdl_",
        "__rg_",
        "alloc::alloc::",
        "<alloc::alloc::Global as core::alloc::Allocator>",
        "std::alloc::",
        "<std::alloc::System as core::alloc::global::GlobalAlloc>",
        "mi_",
        "_mi_",
        "je_",
        "_rjem_",
        "tikv_jemallocator::",
        "mimalloc::",
    ];
    PREFIXES.iter().any(|p| func.starts_with(p))
}

/// `*acc += x`, stopping at `u64::MAX` and setting `flag` when it would pass it.
pub(crate) fn add_sat(acc: &mut u64, x: u64, flag: &mut bool) {
    if let Some(v) = acc.checked_add(x) {
        *acc = v;
    } else {
        *acc = u64::MAX;
        *flag = true;
    }
}

/// The sampler's account over the steps `in_steps` selects (trace-record's one rule).
pub(crate) fn sampler_account(s: &SampledStacks, in_steps: impl Fn(u64) -> bool) -> SamplerAccount {
    SamplerAccount::over(s.steps.iter().filter(|st| in_steps(st.step)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crates_of_files_and_qualified_names() {
        let check = |f: &str, c: Option<&str>| assert_eq!(crate_of_file(f).as_deref(), c, "{f}");
        check(
            "candle-core-0.11.1/src/cpu_backend/utils.rs",
            Some("candle_core"),
        );
        check("gemm-common-0.17.1/src/gemm.rs", Some("gemm_common"));
        check("library/core/src/ptr/mod.rs", Some("core"));
        check(
            "/work/main/crates/tracegraph/src/demo/mod.rs",
            Some("tracegraph"),
        );
        check("main.rs", None);
        assert!(is_qualified("candle_core::tensor::Tensor::matmul"));
        assert!(is_qualified("<f32 as core::ops::Add>::add"));
        assert!(!is_qualified(
            "execute_chunked<candle_core::cpu_backend::utils::Foo>"
        ));
        assert!(!is_qualified("spin_loop"));
        // An inlined (unqualified) function is grouped by its file and shown with it.
        let mut s = SampledStacks::default();
        s.add(&Event::Frame(trace_record::schema::FrameEvent {
            id: 1,
            func: "execute_chunked<candle_core::X>".into(),
            file: Some("candle-core-0.11.1/src/utils.rs".into()),
            inlined: true,
        }));
        assert_eq!(s.frame_crate(0), Some("candle_core"));
        assert_eq!(
            s.frame_name(0),
            "execute_chunked<candle_core::X> (candle-core-0.11.1/src/utils.rs)"
        );
    }

    /// Loads frames `(func, file)` and one stack of them (outermost first); is it waiting?
    fn waiting(frames: &[(&str, Option<&str>)]) -> bool {
        classes(frames).0
    }

    #[test]
    fn waiting_frames_match_spins_parks_and_pools_and_nothing_else() {
        let wait = |func: &str, file: Option<&str>| {
            let krate = if is_qualified(func) {
                crate_of(func).map(str::to_string)
            } else {
                file.and_then(crate_of_file)
            };
            waiting_pattern(func, krate.as_deref(), file).is_some()
        };
        let utils = Some("/r/candle-core-0.11.1/src/utils.rs");
        for (func, file) in [
            ("core::hint::spin_loop", None),
            ("core::core_arch::x86::sse2::_mm_pause", None),
            ("spin_loop", Some("library/core/src/hint.rs")),
            (
                "<candle_core::utils::BarrierGuard as core::ops::drop::Drop>::drop",
                None,
            ),
            ("drop", utils),
            (
                "std::sys::backtrace::__rust_begin_short_backtrace<candle_core::utils::BarrierPool::new::{{closure}}::{{closure}},()>",
                None,
            ),
            (
                "__rust_begin_short_backtrace<candle_core::utils::{impl#4}::new::{closure#2}::{closure_env#0}, ()>",
                Some("library/std/src/sys/backtrace.rs"),
            ),
            (
                "candle_core::utils::BarrierPool::new::{closure#0}::{closure#0}",
                None,
            ),
            ("std::thread::park", None),
            ("std::sys::pal::unix::futex::futex_wait", None),
            ("__futex_abstimed_wait_common", None),
            ("pthread_cond_wait", None),
            ("sched_yield", None),
            ("rayon_core::registry::WorkerThread::wait_until_cold", None),
            ("rayon_core::sleep::Sleep::sleep", None),
            ("rayon_core::latch::LockLatch::wait_and_reset", None),
            ("crossbeam_deque::deque::Stealer<T>::steal", None),
        ] {
            assert!(wait(func, file), "{func} waits");
        }
        for (func, file) in [
            ("std::thread::Thread::unpark", None),
            ("gemm_f32::microkernel::fma::f32::x3x4", None),
            ("candle_core::cpu_backend::utils::unary_map", None),
            (
                "drop",
                Some("/r/candle-core-0.11.1/src/cpu_backend/utils.rs"),
            ),
            ("drop", Some("/r/candle-core-0.11.1/src/tensor.rs")),
            (
                "core::ptr::drop_in_place<candle_core::tensor::Tensor>",
                None,
            ),
            ("rayon_core::job::StackJob<L,F,R>::execute", None),
            ("candle_core::utils::get_num_threads", None),
            ("read", None),
            ("malloc", None),
            ("my_model::barrier_wait_but_not_a_pool", None),
            (
                "__rust_begin_short_backtrace<rayon_core::registry::ThreadBuilder, ()>",
                Some("library/std/src/sys/backtrace.rs"),
            ),
        ] {
            assert!(!wait(func, file), "{func} works");
        }
        // Every pattern says why.
        assert!(WAITING_FRAMES.iter().all(|p| !p.why.is_empty()));
    }

    #[test]
    fn a_stack_waits_when_its_first_telling_frame_from_the_inside_waits() {
        let spin = [
            ("my::main", None),
            ("candle_core::utils::BarrierPool::execute", None),
            (
                "<candle_core::utils::BarrierGuard as core::ops::drop::Drop>::drop",
                None,
            ),
            ("core::hint::spin_loop", None),
            ("core::core_arch::x86::sse2::_mm_pause", None),
        ];
        assert!(waiting(&spin));
        // The barrier's own loop (no spin frame below it).
        assert!(waiting(&spin[..3]));
        // A pool worker between jobs, its loop inlined into the thread's entry.
        let utils = Some("/r/candle-core-0.11.1/src/utils.rs");
        let worker = "std::sys::backtrace::__rust_begin_short_backtrace<candle_core::utils::BarrierPool::new::{{closure}}::{{closure}},()>";
        assert!(waiting(&[(worker, None), ("{{closure}}", utils)]));
        // The same worker as a release build names it (line tables only: unqualified names,
        // the pool's impl as `{impl#4}`), spinning on its slot's atomic between jobs: the
        // frames `tracegraph demo --sample` records in release.
        let std_entry = Some("library/std/src/sys/backtrace.rs");
        let atomic = Some("library/core/src/sync/atomic.rs");
        let release_worker = "__rust_begin_short_backtrace<candle_core::utils::{impl#4}::new::{closure#2}::{closure_env#0}, ()>";
        let release_spin = [
            (release_worker, std_entry),
            ("{closure#0}", utils),
            ("load", atomic),
            ("atomic_load<usize>", atomic),
        ];
        assert!(waiting(&release_spin));
        assert!(waiting(&release_spin[..2]));
        // ... and running a kernel between them: work.
        assert!(!waiting(&[
            (release_worker, std_entry),
            ("{closure#0}", utils),
            ("call_trampoline<F>", utils),
            (
                "{closure#0}",
                Some("/r/candle-core-0.11.1/src/cpu/kernels.rs")
            ),
        ]));
        // The same worker running a kernel: work.
        assert!(!waiting(&[
            (worker, None),
            ("{{closure}}", utils),
            ("call_trampoline<F>", utils),
            ("candle_core::cpu_backend::utils::unary_map_vec_par", None),
            ("core::ptr::copy_nonoverlapping<f32>", None),
        ]));
        // Parked, through libc.
        assert!(waiting(&[
            ("rayon_core::registry::WorkerThread::wait_until_cold", None),
            ("std::thread::park", None),
            ("syscall", None),
        ]));
        // Candle's /proc read per op: libc and std frames say nothing, Candle's caller works.
        assert!(!waiting(&[
            ("candle_core::utils::get_num_threads", None),
            ("std::fs::read_to_string", None),
            ("read", None),
        ]));
        // The allocator works; a stack of runtime frames only is not waiting either.
        assert!(!waiting(&[
            ("my::f", None),
            ("std::thread::park", None),
            ("malloc", None)
        ]));
        assert!(!waiting(&[("core::ptr::copy", None), ("[unknown]", None)]));
        assert!(!waiting(&[]));
    }

    /// Loads frames `(func, file)` and one stack of them (outermost first); the stack's
    /// (waiting, profiler) classes. A frame with a file is loaded as inlined, as line-table
    /// debug information names inlined functions.
    fn classes(frames: &[(&str, Option<&str>)]) -> (bool, bool) {
        use trace_record::schema::{FrameEvent, StackEvent};
        let mut s = SampledStacks::default();
        for (i, (func, file)) in frames.iter().enumerate() {
            s.add(&Event::Frame(FrameEvent {
                id: i as u64,
                func: (*func).into(),
                file: file.map(str::to_string),
                inlined: file.is_some(),
            }));
        }
        s.add(&Event::Stack(StackEvent {
            id: 1,
            frames: (0..frames.len() as u64).collect(),
        }));
        (s.stack_is_waiting(1), s.stack_is_profiler(1))
    }

    #[test]
    fn wakers_are_work_wherever_they_are_called_from() {
        for func in [
            "std::sys::pal::unix::futex::futex_wake",
            "std::sys::sync::thread_parking::futex::Parker::unpark",
            "std::thread::Thread::unpark",
            "std::sys::sync::mutex::futex::Mutex::unlock",
            "<std::sys::sync::mutex::futex::Mutex>::wake",
            "std::sys::sync::condvar::futex::Condvar::notify_one",
            "parking_lot_core::parking_lot::unpark_one",
            "___pthread_cond_signal",
            "__GI___pthread_mutex_unlock_usercnt",
            "__lll_lock_wake_private",
            "futex_wake",
        ] {
            assert!(is_waker(func), "{func} wakes");
            let krate = crate_of(func);
            assert!(waiting_pattern(func, krate, None).is_none(), "{func} works");
        }
        for func in [
            "std::sys::pal::unix::futex::futex_wait",
            "std::thread::park",
            "std::sys::sync::mutex::futex::Mutex::lock_contended",
            "__futex_abstimed_wait_common",
            "my::unlocked_state",
        ] {
            assert!(!is_waker(func), "{func} is no waker");
        }
        // A mutex's unlock waking a waiter, from the program: work, not waiting.
        let unlock = [
            ("my::main", None),
            ("std::sys::sync::mutex::futex::Mutex::unlock", None),
            ("std::sys::sync::mutex::futex::Mutex::wake", None),
            ("std::sys::pal::unix::futex::futex_wake", None),
            ("syscall", None),
        ];
        assert_eq!(classes(&unlock), (false, false));
        // The waiting side still waits.
        assert_eq!(
            classes(&[
                ("my::main", None),
                ("std::sys::sync::mutex::futex::Mutex::lock_contended", None),
                ("std::sys::pal::unix::futex::futex_wait", None),
                ("syscall", None),
            ]),
            (true, false)
        );
    }

    #[test]
    fn the_profilers_own_frames_are_the_profilers_and_never_waiting() {
        let main = ("main", Some("/w/crates/app/src/main.rs"));
        // The step-boundary wake, qualified (symbol tables) and by line tables.
        let wake = [
            main,
            ("llama::generate", None),
            ("trace_candle::capture::Capture::step", None),
            ("trace_sampler::control::Sampler::on_step", None),
            ("trace_sampler::control::imp::Running::advance", None),
            ("std::thread::Thread::unpark", None),
            (
                "std::sys::sync::thread_parking::futex::Parker::unpark",
                None,
            ),
            ("std::sys::pal::unix::futex::futex_wake", None),
            ("syscall", None),
        ];
        assert_eq!(classes(&wake), (false, true));
        let by_lines = [
            main,
            ("step", Some("/w/crates/trace-candle/src/capture.rs")),
            ("advance", Some("/w/crates/trace-sampler/src/control.rs")),
            ("unpark", Some("library/std/src/thread/mod.rs")),
            ("futex_wake", Some("library/std/src/sys/pal/unix/futex.rs")),
        ];
        assert_eq!(classes(&by_lines), (false, true));
        // The recorder waiting for its lock on a program thread: the profiler's.
        assert_eq!(
            classes(&[
                main,
                ("trace_record::session::TraceSession::emit_lines", None),
                ("std::sys::sync::mutex::futex::Mutex::lock_contended", None),
                ("std::sys::pal::unix::futex::futex_wait", None),
            ]),
            (false, true)
        );
        // The recorder's own allocation: the profiler's.
        assert_eq!(
            classes(&[
                main,
                ("trace_record::json::raw", None),
                ("alloc::raw_vec::RawVec<T,A>::grow_one", None),
                ("__rust_alloc", None),
                ("malloc", None),
            ]),
            (false, true)
        );
        // The program's allocation through the heap tracker's allocator: the program's; the
        // tracker's own bookkeeping: the profiler's.
        let program_alloc = [
            main,
            ("my::model::forward", None),
            ("__rust_alloc", None),
            (
                "<trace_heap::Tracking as core::alloc::global::GlobalAlloc>::alloc",
                None,
            ),
            ("malloc", None),
        ];
        assert_eq!(classes(&program_alloc), (false, false));
        assert_eq!(
            classes(&[
                main,
                ("my::model::forward", None),
                ("__rust_alloc", None),
                (
                    "<trace_heap::Tracking as core::alloc::global::GlobalAlloc>::alloc",
                    None
                ),
                ("trace_heap::tracker::record", None),
            ]),
            (false, true)
        );
        // The capture around the model's code: the model's work, or its pool's waiting.
        assert_eq!(
            classes(&[
                main,
                ("trace_candle::capture::Capture::run", None),
                ("candle_core::tensor::Tensor::matmul", None),
            ]),
            (false, false)
        );
        assert_eq!(
            classes(&[
                main,
                ("trace_candle::capture::Capture::run", None),
                ("candle_core::utils::BarrierPool::execute", None),
                (
                    "<candle_core::utils::BarrierGuard as core::ops::drop::Drop>::drop",
                    None
                ),
                ("core::hint::spin_loop", None),
            ]),
            (true, false)
        );
    }

    #[test]
    fn stacks_resolve_known_frames_by_wire_id() {
        use trace_record::schema::{FrameEvent, StackEvent};
        let mut s = SampledStacks::default();
        for (id, func) in [
            (10, "tracegraph::main"),
            (20, "malloc"),
            (30, "std::rt::lang_start"),
        ] {
            s.add(&Event::Frame(FrameEvent {
                id,
                func: func.into(),
                file: None,
                inlined: false,
            }));
        }
        // Frame 99 was never defined: validation reports it, the stack leaves it out.
        s.add(&Event::Stack(StackEvent {
            id: 7,
            frames: vec![30, 10, 99, 20],
        }));
        assert_eq!(s.stack(7), [2, 0, 1]);
        assert!(s.stack(8).is_empty());
        assert!(s.is_empty(), "frames and stacks are not samples");
        assert!(s.frame_is_allocator(1) && !s.frame_is_allocator(0));
        assert!(s.frame_is_runtime(2) && !s.frame_is_runtime(0));
        assert_eq!(s.frame_crate(0), Some("tracegraph"));
        assert_eq!(s.frame_name(5), "[unknown]");
    }

    #[test]
    fn frames_read_back_from_the_text_buffer_as_loaded() {
        use trace_record::schema::FrameEvent;
        let mut s = SampledStacks::default();
        for (id, func, file, inlined) in [
            (1, "candle_core::tensor::Tensor::matmul", None, false),
            (
                2,
                "execute<f32>",
                Some("candle-core-0.11.1/src/utils.rs"),
                true,
            ),
            (
                3,
                "<&mut gemm::X as core::ops::Fn>::call",
                Some("x/src/lib.rs"),
                false,
            ),
            (4, "spin", None, false),
            (5, "f", Some("main.rs"), true),
        ] {
            s.add(&Event::Frame(FrameEvent {
                id,
                func: func.into(),
                file: file.map(str::to_string),
                inlined,
            }));
        }
        assert_eq!(s.frame_count(), 5);
        let all: Vec<SampledFrame<'_>> = s.frames().collect();
        assert_eq!(
            all[1],
            SampledFrame {
                func: "execute<f32>",
                file: Some("candle-core-0.11.1/src/utils.rs"),
                inlined: true
            }
        );
        assert_eq!(
            all[2].file,
            Some("x/src/lib.rs"),
            "a qualified function's file"
        );
        assert_eq!((all[3].file, all[4].file), (None, Some("main.rs")));
        let names: Vec<&str> = (0..5).map(|f| s.frame_name(f)).collect();
        assert_eq!(
            names,
            [
                "candle_core::tensor::Tensor::matmul",
                "execute<f32> (candle-core-0.11.1/src/utils.rs)",
                "<&mut gemm::X as core::ops::Fn>::call",
                "spin",
                "f (main.rs)"
            ]
        );
        let crates: Vec<Option<&str>> = (0..6).map(|f| s.frame_crate(f)).collect();
        assert_eq!(
            crates,
            [
                Some("candle_core"),
                Some("candle_core"),
                Some("gemm"),
                None,
                None,
                None
            ]
        );
        assert_eq!(s.frame(5), None);
    }

    #[test]
    fn wire_ids_out_of_order_or_repeated_still_name_their_first_frame() {
        let mut dense = IdIndex::default();
        for i in 0..4 {
            dense.insert(10 + u64::from(i), i);
        }
        assert!(dense.map.is_none(), "a run of ids takes no map");
        assert_eq!(
            (dense.get(10), dense.get(13), dense.get(14)),
            (Some(0), Some(3), None)
        );
        assert_eq!(dense.get(9), None);
        // Out of the run (a repeat, then a gap): every id keeps its first index.
        let mut ids = dense.clone();
        ids.insert(11, 4);
        ids.insert(100, 5);
        assert!(ids.map.is_some());
        assert_eq!(
            (ids.get(10), ids.get(11), ids.get(100)),
            (Some(0), Some(1), Some(5))
        );
        let mut wrap = IdIndex::default();
        wrap.insert(u64::MAX, 0);
        wrap.insert(0, 1);
        assert_eq!((wrap.get(u64::MAX), wrap.get(0)), (Some(0), Some(1)));
    }
}
