//! Samples per sampled call stack and phase, from the thread's entry: what a flame graph draws.

use trace_record::schema::ExecStep;

use crate::model::intern::FastMap;
use crate::model::trace::Trace;

/// The phases samples are counted by, in the order of [`StackSamples::by_phase`] (the last:
/// the capture did not say).
pub const STACK_PHASES: [Option<ExecStep>; 4] = [
    Some(ExecStep::Forward),
    Some(ExecStep::Backward),
    Some(ExecStep::Optimizer),
    None,
];

/// The slot of `phase` in [`STACK_PHASES`].
fn phase_slot(phase: Option<ExecStep>) -> usize {
    match phase {
        Some(ExecStep::Forward) => 0,
        Some(ExecStep::Backward) => 1,
        Some(ExecStep::Optimizer) => 2,
        None => 3,
    }
}

/// Whether a frame is part of how a thread starts rather than what it runs: the unknown
/// frames at a stack's root, libc's and the kernel's start (`_start`, `__libc_start_main`,
/// `start_thread`, `clone3`), the C `main` that rustc generates, and the Rust runtime's own
/// frames (crates `std`, `core` and `alloc`: `lang_start`, `catch_unwind`, the spawned
/// closure's `call_once`). A flame graph starts each stack below them, at the program's `main`
/// or the thread's own entry (a rayon or Candle worker loop).
pub fn is_entry_frame(func: &str, file: Option<&str>) -> bool {
    const LIBC: [&str; 6] = [
        "_start",
        "__libc_start",
        "start_thread",
        "clone",
        "__clone",
        "thread_start",
    ];
    if func == "[unknown]" || LIBC.iter().any(|p| func.starts_with(p)) {
        return true;
    }
    let krate = crate::model::samples::crate_of(func)
        .map(str::to_string)
        .or_else(|| file.and_then(crate::model::samples::crate_of_file));
    let runtime = matches!(krate.as_deref(), Some("std" | "core" | "alloc"));
    // The C `main` rustc emits has no Rust source file; the program's own `main` has one.
    runtime || (func == "main" && !file.is_some_and(|f| f.ends_with(".rs")))
}

/// One frame of a sampled stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackFrame<'t> {
    /// The name as `tracegraph hot` shows it (an unqualified function with its source file).
    pub name: &'t str,
    /// The function as recorded (the name when the frame is unknown).
    pub func: &'t str,
}

/// The samples of one distinct call stack, over every step and thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackSamples<'t> {
    /// The stack's id in the trace.
    pub stack: u64,
    /// Its frames, outermost first; empty when the trace did not define the stack.
    pub frames: Vec<StackFrame<'t>>,
    /// Samples per phase, in [`STACK_PHASES`] order (each capped at `u64::MAX`).
    pub by_phase: [u64; 4],
    /// The stack is a thread waiting, not working (classified at load, see the samples
    /// model's frame patterns).
    pub waiting: bool,
    /// The stack is the profiler's own work (classified at load; never waiting too).
    pub profiler: bool,
    /// Frames cut from the stack's root: how the thread started ([`is_entry_frame`]).
    pub entry_frames: usize,
}

impl StackSamples<'_> {
    /// Samples in every phase (capped at `u64::MAX`).
    pub fn total(&self) -> u64 {
        sum(&self.by_phase)
    }
}

/// Every sampled stack with its samples by phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampledStackReport<'t> {
    /// Distinct stacks, most samples first (ties by stack id).
    pub stacks: Vec<StackSamples<'t>>,
    /// Samples per phase over every stack, in [`STACK_PHASES`] order.
    pub by_phase: [u64; 4],
    /// Samples over every stack and phase.
    pub total: u64,
}

/// The samples of one distinct call stack, its frames as indices of the trace's
/// [`SampledStacks`](crate::SampledStacks) ([`frame_name`](crate::SampledStacks::frame_name),
/// [`frame`](crate::SampledStacks::frame)): [`StackSamples`] without a copy of its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackCounts<'t> {
    /// The stack's id in the trace.
    pub stack: u64,
    /// Its frame indices from the thread's entry, outermost first; empty when the trace did
    /// not define the stack.
    pub frames: &'t [u32],
    /// Samples per phase, in [`STACK_PHASES`] order (each capped at `u64::MAX`).
    pub by_phase: [u64; 4],
    /// The stack is a thread waiting, not working.
    pub waiting: bool,
    /// The stack is the profiler's own work (never waiting too).
    pub profiler: bool,
    /// Frames cut from the stack's root: how the thread started ([`is_entry_frame`]).
    pub entry_frames: usize,
}

/// [`SampledStackReport`] with frames as indices ([`StackCounts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampledStackCounts<'t> {
    /// Distinct stacks, most samples first (ties by stack id).
    pub stacks: Vec<StackCounts<'t>>,
    /// Samples per phase over every stack, in [`STACK_PHASES`] order.
    pub by_phase: [u64; 4],
    /// Samples over every stack and phase.
    pub total: u64,
}

fn sum(c: &[u64; 4]) -> u64 {
    c.iter().fold(0u64, |a, &b| a.saturating_add(b))
}

/// Frame `f` of the trace's sampled stacks as a flame graph labels it: its shown name (the
/// function, with its file where `hot` shows one) and its function
/// ([`SampledStacks::frame_name`](crate::SampledStacks::frame_name) and the frame's `func`;
/// the shown name twice for an index the trace does not define).
pub fn frame_label(trace: &Trace, f: u32) -> (&str, &str) {
    let s = &trace.sampled;
    let name = s.frame_name(f);
    (name, s.frame(f).map_or(name, |fr| fr.func))
}

/// Samples per distinct stack and phase, frames as indices; `None` when the trace has no
/// sampled stacks. Counts saturate (a trace's numbers may be hostile). O(n log n) in the
/// distinct stacks plus the entry frames cut, O(n) in the sample rows; no frame is copied.
pub fn stack_counts(trace: &Trace) -> Option<SampledStackCounts<'_>> {
    let s = &trace.sampled;
    if s.is_empty() {
        return None;
    }
    let mut per_stack: FastMap<u64, [u64; 4]> = FastMap::default();
    for row in &s.samples {
        let c = per_stack.entry(row.stack).or_default();
        let p = phase_slot(row.phase);
        c[p] = c[p].saturating_add(row.n);
    }
    trace.work.add(s.samples.len() as u64);
    let mut counts: Vec<(u64, [u64; 4])> = per_stack.into_iter().collect();
    counts.sort_by(|a, b| sum(&b.1).cmp(&sum(&a.1)).then(a.0.cmp(&b.0)));
    trace.work.add_sort(counts.len());
    let total = counts
        .iter()
        .fold(0u64, |a, (_, c)| a.saturating_add(sum(c)));
    let mut by_phase = [0u64; 4];
    for (_, c) in &counts {
        for (p, n) in by_phase.iter_mut().zip(c) {
            *p = p.saturating_add(*n);
        }
    }
    let stacks: Vec<StackCounts<'_>> = counts
        .into_iter()
        .map(|(id, c)| {
            let all = s.stack(id);
            // Start at the thread's entry: the root frames of how it started are cut (one
            // frame at least is kept).
            let entry = all
                .iter()
                .take_while(|&&f| {
                    s.frame(f)
                        .is_some_and(|fr| is_entry_frame(fr.func, fr.file))
                })
                .count()
                .min(all.len().saturating_sub(1));
            StackCounts {
                stack: id,
                frames: &all[entry..],
                by_phase: c,
                waiting: s.stack_is_waiting(id),
                profiler: s.stack_is_profiler(id),
                entry_frames: entry,
            }
        })
        .collect();
    Some(SampledStackCounts {
        stacks,
        by_phase,
        total,
    })
}

/// Samples per distinct stack and phase; `None` when the trace has no sampled stacks. Counts
/// saturate (a trace's numbers may be hostile). O(n log n) in the distinct stacks plus their
/// frames, O(n) in the sample rows.
pub fn stack_samples(trace: &Trace) -> Option<SampledStackReport<'_>> {
    let s = &trace.sampled;
    let counts = stack_counts(trace)?;
    let stacks: Vec<StackSamples<'_>> = counts
        .stacks
        .into_iter()
        .map(|st| StackSamples {
            stack: st.stack,
            frames: st
                .frames
                .iter()
                .map(|&f| {
                    let name = s.frame_name(f);
                    StackFrame {
                        name,
                        func: s.frame(f).map_or(name, |fr| fr.func),
                    }
                })
                .collect(),
            by_phase: st.by_phase,
            waiting: st.waiting,
            profiler: st.profiler,
            entry_frames: st.entry_frames,
        })
        .collect();
    trace
        .work
        .add(stacks.iter().map(|x| x.frames.len() as u64).sum::<u64>());
    Some(SampledStackReport {
        total: counts.total,
        stacks,
        by_phase: counts.by_phase,
    })
}

#[cfg(test)]
mod tests {
    use super::is_entry_frame;

    /// A real sampled stack's root, as the CPU sampler recorded it for candle-transformers'
    /// Llama example (func, file), outermost first, down to the program's own `main`.
    const MAIN_THREAD_ROOT: &[(&str, Option<&str>)] = &[
        ("[unknown]", None),
        ("_start", None),
        ("__libc_start_main_impl", Some("./csu/../csu/libc-start.c")),
        (
            "__libc_start_call_main",
            Some("./csu/../sysdeps/nptl/libc_start_call_main.h"),
        ),
        ("main", None),
        (
            "std::rt::lang_start_internal",
            Some("library/std/src/rt.rs"),
        ),
        (
            "std::panicking::catch_unwind::do_call::<std::rt::lang_start_internal::{closure#0}, isize>",
            Some("library/std/src/panicking.rs"),
        ),
        (
            "<&dyn core::ops::function::Fn<(), Output = i32> + core::marker::Sync + core::panic::unwind_safe::RefUnwindSafe as core::ops::function::FnOnce<()>>::call_once",
            Some("library/core/src/ops/function.rs"),
        ),
        (
            "{closure#0}<core::result::Result<(), alloc::boxed::Box<dyn core::error::Error, alloc::alloc::Global>>>",
            Some("library/std/src/rt.rs"),
        ),
        (
            "__rust_begin_short_backtrace<fn() -> core::result::Result<(), ()>, ()>",
            Some("library/std/src/sys/backtrace.rs"),
        ),
        (
            "call_once<fn(), ()>",
            Some("library/core/src/ops/function.rs"),
        ),
    ];

    #[test]
    fn a_threads_start_is_entry_and_the_programs_own_code_is_not() {
        for (func, file) in MAIN_THREAD_ROOT {
            assert!(
                is_entry_frame(func, *file),
                "{func} is how the thread started"
            );
        }
        // A worker thread's start.
        assert!(is_entry_frame(
            "start_thread",
            Some("./nptl/pthread_create.c")
        ));
        assert!(is_entry_frame("clone3", None));
        assert!(is_entry_frame(
            "std::sys::pal::unix::thread::Thread::new::thread_start",
            Some("library/std/src/sys/pal/unix/thread.rs")
        ));
        // Where the flame graph starts: the program's main, a worker's loop, the model.
        let work = [
            (
                "main",
                Some("/work/main/crates/trace-candle/examples/profile_llama.rs"),
            ),
            (
                "run",
                Some("/work/main/crates/trace-candle/examples/profile_llama.rs"),
            ),
            (
                "rayon_core::registry::ThreadBuilder::run",
                Some("rayon-core-1.12.1/src/registry.rs"),
            ),
            (
                "load",
                Some("candle-transformers-0.11.1/src/models/llama.rs"),
            ),
            ("candle_core::tensor::Tensor::matmul", None),
        ];
        for (func, file) in work {
            assert!(
                !is_entry_frame(func, file),
                "{func} is work, not the thread's start"
            );
        }
    }
}
