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
fn is_qualified(func: &str) -> bool {
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
                self.crates.push(krate);
                self.names.push(match (&f.file, qualified) {
                    (Some(file), false) => format!("{} ({file})", f.func),
                    _ => f.func.clone(),
                });
                self.frames.push(SampledFrame {
                    func: f.func.clone(),
                    file: f.file.clone(),
                    inlined: f.inlined,
                });
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
