//! The loaded sample model: interned frames and stacks, sample rows, the sampler's account.
//!
//! A trace written with a CPU sampler (trace-candle's `Capture::sample_stacks`, schema version
//! 2) holds interned frames and stacks and, per recorded step, how many samples landed in each
//! stack on each thread. [`SampledStacks`] is that part of a loaded [`Trace`](crate::Trace),
//! filled event by event while the trace is read; it also knows each frame's crate (from the
//! function's path, else from its source file) and the name a table shows for it. What the
//! samples say (rankings by function, crate group, phase or span) is the hot-spot report's.
//!
//! Loading is linear in the events; a stack's frames are one slice of a flat array.
//!
//! **Waiting is not work.** A stack whose innermost frames are a thread pool spinning or
//! parking (Candle's barrier spin-wait, rayon's idle loop, futex, condition-variable and
//! `sched_yield` waits) is classified *waiting* when loaded, by the frame patterns in
//! [`WAITING_FRAMES`]: walking from the innermost frame outwards past frames that say nothing
//! of their own (Rust's generic runtime, libc, unknown frames), the first frame either matches
//! a pattern (waiting) or belongs to some other code (work).

use serde::Serialize;
use trace_record::schema::{Event, ExecStep};

use crate::intern::FastMap;

/// One interned frame of sampled stacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SampledFrame {
    /// The demangled function name.
    pub func: String,
    /// The source file, when known.
    pub file: Option<String>,
    /// Inlined into its caller.
    pub inlined: bool,
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

/// One `sampler` line as loaded: the sampler's account of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SamplerStep {
    /// The recorded step.
    pub step: u64,
    /// Requested samples per second of process CPU time.
    pub hz: u64,
    /// Samples taken.
    pub taken: u64,
    /// Samples lost.
    pub lost: u64,
    /// Process CPU time in the step, when reported.
    pub cpu_ns: Option<u64>,
    /// Wall time sampled.
    pub dur_ns: u64,
}

/// The sampled stacks of a trace (empty for a trace without a sampler, and for version 1).
#[derive(Debug, Clone, Default)]
pub struct SampledStacks {
    /// Frames in the order they were read.
    pub frames: Vec<SampledFrame>,
    frame_index: FastMap<u64, u32>,
    /// Stacks as ranges of `stack_frames` (frame indices, outermost first).
    stacks: Vec<(u32, u32)>,
    stack_frames: Vec<u32>,
    stack_index: FastMap<u64, u32>,
    /// `samples` lines in the order they were read.
    pub samples: Vec<SampleRow>,
    /// `sampler` lines in the order they were read.
    pub steps: Vec<SamplerStep>,
    /// Per frame: its crate (from the function's path, else from its source file).
    crates: Vec<Option<String>>,
    /// Per frame: the name shown (the function; an unqualified one, as inlined functions are
    /// named by line-table-only debug information, with its source file).
    names: Vec<String>,
    /// Per frame: what it says about waiting.
    waits: Vec<WaitClass>,
    /// Per stack (by index): classified waiting.
    stack_waiting: Vec<bool>,
    /// Samples left out at load because their step is no step of the trace (the empty
    /// boundary a loop's last `step()` opens, an empty step 0): every analysis counts the
    /// steps the step rule counts.
    pub outside_steps: u64,
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
    wait(
        "futex",
        None,
        "a futex wait (parking, mutexes, condition variables)",
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
    // loop itself being inlined into it).
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

/// What a frame says when a stack is classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WaitClass {
    /// Matches [`WAITING_FRAMES`].
    Waiting,
    /// Says nothing of its own: look at its caller.
    Neutral,
    /// Some code's own work.
    Work,
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
/// source file `file`, matches, if any.
pub fn waiting_pattern(
    func: &str,
    krate: Option<&str>,
    file: Option<&str>,
) -> Option<&'static WaitPattern> {
    let file = file.map(|f| f.replace('\\', "/"));
    WAITING_FRAMES.iter().find(|p| {
        p.krate.is_none_or(|k| krate == Some(k))
            && p.file
                .is_none_or(|end| file.as_deref().is_some_and(|f| f.ends_with(end)))
            && contains_at_word_start(func, p.func)
    })
}

fn wait_class(frame: &SampledFrame, krate: Option<&str>) -> WaitClass {
    if waiting_pattern(&frame.func, krate, frame.file.as_deref()).is_some() {
        return WaitClass::Waiting;
    }
    if is_allocator(&frame.func) {
        return WaitClass::Work;
    }
    // Candle's pool closures inlined from candle-core utils.rs (unqualified, named by line
    // tables): the worker loop or the dispatch around a kernel; their callers tell which.
    let candle_pool_closure = krate == Some("candle_core")
        && frame.func.starts_with('{')
        && frame
            .file
            .as_deref()
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
    }

    /// Loads one sampled-stack event (other events are ignored).
    pub fn add(&mut self, event: &Event) {
        match event {
            Event::Frame(f) => {
                let i = self.frames.len() as u32;
                self.frame_index.entry(f.id).or_insert(i);
                let qualified = is_qualified(&f.func);
                let krate = if qualified {
                    crate_of(&f.func).map(str::to_string)
                } else {
                    f.file.as_deref().and_then(crate_of_file)
                };
                let frame = SampledFrame {
                    func: f.func.clone(),
                    file: f.file.clone(),
                    inlined: f.inlined,
                };
                self.waits.push(wait_class(&frame, krate.as_deref()));
                self.crates.push(krate);
                self.names.push(match (&f.file, qualified) {
                    (Some(file), false) => format!("{} ({file})", f.func),
                    _ => f.func.clone(),
                });
                self.frames.push(frame);
            }
            Event::Stack(s) => {
                let start = self.stack_frames.len() as u32;
                // Frames are defined before the stacks naming them; an unknown one is
                // reported by validation and left out here.
                self.stack_frames.extend(
                    s.frames
                        .iter()
                        .filter_map(|f| self.frame_index.get(f).copied()),
                );
                let i = self.stacks.len() as u32;
                let waiting = self.stack_frames[start as usize..]
                    .iter()
                    .rev()
                    .map(|&f| self.waits[f as usize])
                    .find(|c| *c != WaitClass::Neutral)
                    == Some(WaitClass::Waiting);
                self.stack_waiting.push(waiting);
                self.stacks.push((start, self.stack_frames.len() as u32));
                self.stack_index.entry(s.id).or_insert(i);
            }
            Event::Samples(s) => self.samples.push(SampleRow {
                step: s.step,
                thread: s.thread,
                stack: s.stack,
                n: s.n,
                phase: s.phase,
                span: s.span,
            }),
            Event::Sampler(s) => self.steps.push(SamplerStep {
                step: s.step,
                hz: s.hz,
                taken: s.taken,
                lost: s.lost,
                cpu_ns: s.cpu_ns,
                dur_ns: s.dur,
            }),
            _ => {}
        }
    }

    /// A frame's crate (from its function's path, else its source file).
    pub fn frame_crate(&self, f: u32) -> Option<&str> {
        self.crates.get(f as usize).and_then(|c| c.as_deref())
    }

    /// A frame's name as shown (an unqualified function with its source file).
    pub fn frame_name(&self, f: u32) -> &str {
        self.names
            .get(f as usize)
            .map_or("[unknown]", String::as_str)
    }

    /// Whether a frame is the allocator's.
    pub(crate) fn frame_is_allocator(&self, f: u32) -> bool {
        self.frames
            .get(f as usize)
            .is_some_and(|fr| is_allocator(&fr.func))
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

    /// Whether a stack (by wire id) is classified waiting (see the module docs); false when
    /// unknown.
    pub fn stack_is_waiting(&self, id: u64) -> bool {
        self.stack_index
            .get(&id)
            .is_some_and(|&i| self.stack_waiting[i as usize])
    }

    /// The frame indices of a stack (by wire id), outermost first; empty when unknown.
    pub fn stack(&self, id: u64) -> &[u32] {
        match self.stack_index.get(&id) {
            Some(&i) => {
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
        s.stack_is_waiting(1)
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
}
