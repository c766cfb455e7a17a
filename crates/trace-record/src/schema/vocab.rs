//! The schema's enum vocabulary: one table per enum giving every variant its wire name.
//!
//! Each enum is declared once with [`wire_enum!`]; the macro derives the traits analysis
//! needs (`Copy`, `Eq`, `Hash`, `Ord` in declaration order) and generates, from the one list
//! of `Variant = "wire_name"` pairs, the serde names, [`as_str`](SpanKind::as_str),
//! [`FromStr`](std::str::FromStr) (error [`ParseEnumError`]), [`Display`](std::fmt::Display)
//! (the wire name, honouring width and alignment) and the `ALL` array (declaration order).

#[cfg(feature = "read")]
use serde::Deserialize;
use serde::Serialize;

/// A string that is not the wire name of any variant of a schema enum.
///
/// ```
/// use trace_record::schema::SpanKind;
/// let err = "widget".parse::<SpanKind>().unwrap_err();
/// assert_eq!(err.to_string(), "unknown span kind `widget` (expected one of: function, module, op)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{}` (expected one of: {})", shown(found), expected.join(", "))]
pub struct ParseEnumError {
    /// What was being parsed (`span kind`, `memory category`, ...).
    pub what: &'static str,
    /// The string that matched no variant.
    pub found: String,
    /// The wire names accepted, in declaration order.
    pub expected: &'static [&'static str],
}

/// The most characters of text read from a trace that a message shows ([`shown`]).
pub(crate) const SHOWN_CHARS: usize = 64;

/// Text read from a trace (a name, a value), made safe to print in a message: at most
/// [`SHOWN_CHARS`] characters (then `…`), and control, bidirectional-override and invisible
/// formatting characters escaped as `\u{202e}`, so a hostile name can neither flood a terminal
/// nor reorder or hide what is printed around it.
pub(crate) fn shown(s: &str) -> String {
    shown_up_to(s, SHOWN_CHARS)
}

/// Text read from a trace made safe to print to a terminal, with room for `max_chars`
/// characters (then `…`): control, bidirectional-override and invisible formatting characters
/// are escaped as `\u{202e}`, so a hostile name can neither flood a terminal nor reorder or
/// hide what is printed around it.
///
/// ```
/// use trace_record::schema::shown_up_to;
/// assert_eq!(shown_up_to("a\u{202e}b", 10), "a\\u{202e}b");
/// assert_eq!(shown_up_to("abcdef", 3), "abc…");
/// ```
pub fn shown_up_to(s: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max_chars.saturating_mul(4)) + 4);
    for (i, c) in s.chars().enumerate() {
        if i == max_chars {
            out.push('…');
            break;
        }
        if hidden(c) {
            use std::fmt::Write as _;
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// Characters that are not shown as themselves: controls, bidirectional formatting and
/// zero-width characters, separators other than the space, and the byte order mark.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// Declares a schema enum from one `Variant = "wire_name"` table (see the module docs).
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[cfg_attr(feature = "read", derive(Deserialize))]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $wire)] $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order (the order of `Ord`).
            pub const ALL: [$name; [$($wire),+].len()] = [$($name::$variant),+];

            /// The wire names, in declaration order.
            const NAMES: &'static [&'static str] = &[$($wire),+];

            /// The wire name (as written in a trace).
            #[inline]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )+
                }
            }

            /// The position of this variant in `ALL` (for per-variant counter arrays).
            #[inline]
            pub const fn index(self) -> usize {
                self as usize
            }

            /// Calls `f` with the wire name, monomorphised per variant so that every call
            /// sees a constant string (the encoder's fixed-size copies).
            #[inline(always)]
            #[allow(dead_code)]
            pub(crate) fn with_str<T>(self, f: impl FnOnce(&'static str) -> T) -> T {
                match self {
                    $( $name::$variant => f($wire), )+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = ParseEnumError;

            /// Parses a wire name.
            fn from_str(s: &str) -> Result<Self, ParseEnumError> {
                match s {
                    $( $wire => Ok($name::$variant), )+
                    _ => Err(ParseEnumError {
                        what: $what,
                        found: s.to_string(),
                        expected: $name::NAMES,
                    }),
                }
            }
        }

        impl std::fmt::Display for $name {
            /// The wire name.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }
    };
}

wire_enum! {
    /// Whether the run trains or only infers.
    pub enum Phase ("phase") {
        /// A training run (forward, backward, optimizer steps).
        Train = "train",
        /// An inference run.
        Infer = "infer",
    }
}

wire_enum! {
    /// How durations were measured.
    pub enum TimingMode ("timing mode") {
        /// Host wall time: device work may still be running when an op "ends".
        Host = "host",
        /// The device was synchronized around every timed region, so durations include
        /// device work.
        DeviceSynchronized = "device_synchronized",
    }
}

wire_enum! {
    /// What a span stands for.
    pub enum SpanKind ("span kind") {
        /// A user function or region.
        Function = "function",
        /// A model module (`Linear`, `Attention`, ...).
        Module = "module",
        /// A single tensor operation.
        Op = "op",
    }
}

wire_enum! {
    /// The training step a span belongs to (PyTorch's execution steps).
    pub enum ExecStep ("execution step") {
        /// The forward pass.
        Forward = "forward",
        /// The backward pass (gradient computation).
        Backward = "backward",
        /// The optimizer update.
        Optimizer = "optimizer",
    }
}

wire_enum! {
    /// What a piece of memory holds (logical bytes). `ALL` is also the report order.
    pub enum MemoryCategory ("memory category") {
        /// Model parameters (weights, biases).
        Parameter = "parameter",
        /// Activations kept for or produced by the forward pass.
        Activation = "activation",
        /// Gradients.
        Gradient = "gradient",
        /// Optimizer state (moments, ...).
        OptimizerState = "optimizer_state",
        /// Model inputs (data batches, targets).
        Input = "input",
        /// Short-lived temporaries.
        Temporary = "temporary",
        /// Anything else.
        Other = "other",
    }
}

impl MemoryCategory {
    /// True for memory expected to stay allocated for the whole run (parameters and
    /// optimizer state), so still being live at the end is not a leak.
    pub const fn is_persistent(self) -> bool {
        matches!(
            self,
            MemoryCategory::Parameter | MemoryCategory::OptimizerState
        )
    }
}

wire_enum! {
    /// Whether a memory event allocates or frees.
    pub enum AllocKind ("memory action") {
        /// Storage was allocated.
        Alloc = "alloc",
        /// Storage was released.
        Free = "free",
    }
}

wire_enum! {
    /// What was found for a parameter's gradient.
    pub enum GradientState ("gradient state") {
        /// A finite, non-zero gradient.
        Present = "present",
        /// No gradient was produced for the parameter.
        Missing = "missing",
        /// A gradient that is exactly zero everywhere.
        Zero = "zero",
        /// A gradient with NaN or infinite entries.
        NonFinite = "non_finite",
    }
}

wire_enum! {
    /// What interrupted the sampled threads to take their samples (the `source` of a
    /// [`sampler`](super::SamplerEvent) line).
    pub enum SamplingSource ("sampling source") {
        /// A thread of the sampler's own that signals each thread once per period of its own
        /// CPU time, read from its CPU-time clock.
        Ticker = "ticker",
        /// One task-clock perf event per thread (`perf_event_open`), overflowing after every
        /// period of that thread's CPU time.
        PerfEvent = "perf_event",
        /// The process CPU-time timer (`setitimer(ITIMER_PROF)`), checked on the kernel's
        /// scheduler tick: its achieved rate is capped near the tick rate.
        Itimer = "itimer",
    }
}

wire_enum! {
    /// What made a flight recorder write a dump (the `trigger` of a
    /// [`dump`](super::DumpRecord) line).
    pub enum DumpTrigger ("dump trigger") {
        /// The program asked for it (`TraceSession::dump`).
        Call = "call",
        /// A step took longer than the configured multiple of the running median.
        SlowStep = "slow_step",
        /// A non-finite loss was recorded (`TraceSession::record_loss`).
        NonFiniteLoss = "non_finite_loss",
        /// A non-finite gradient was recorded (state `non_finite`).
        NonFiniteGradient = "non_finite_gradient",
        /// The process received the dump signal (SIGUSR2).
        Signal = "signal",
        /// The trigger file appeared or changed.
        File = "file",
        /// The session ended without `finish`: SIGINT/SIGTERM with `close_on_signals`, a
        /// drop without `finish` (a panic), or `fail`.
        Exit = "exit",
    }
}

wire_enum! {
    /// How a session ended, without the failure's reason (the trailer's `outcome` field;
    /// see [`Outcome`](super::Outcome)).
    pub enum OutcomeKind ("outcome") {
        /// `finish()` was called and every event was written.
        Complete = "complete",
        /// The session failed; the trailer says why.
        Failed = "failed",
        /// The session was dropped without `finish()`.
        Incomplete = "incomplete",
    }
}

wire_enum! {
    /// The `type` of an event line, without its payload.
    pub enum EventType ("event type") {
        /// `span_start`
        SpanStart = "span_start",
        /// `span_end`
        SpanEnd = "span_end",
        /// `op`
        Op = "op",
        /// `tensor`
        Tensor = "tensor",
        /// `memory`
        Memory = "memory",
        /// `device_memory`
        DeviceMemory = "device_memory",
        /// `gradient`
        Gradient = "gradient",
        /// `step`
        Step = "step",
        /// `marker`
        Marker = "marker",
        /// `counter`
        Counter = "counter",
        /// `frame` (version 2): an interned frame of sampled call stacks
        Frame = "frame",
        /// `stack` (version 2): an interned sampled call stack
        Stack = "stack",
        /// `samples` (version 2): sample counts of one stack in one step
        Samples = "samples",
        /// `sampler` (version 2): the sampler's account of one recorded step
        Sampler = "sampler",
        /// `heap_alloc` (version 2): a tracked heap allocation at or above the threshold
        HeapAlloc = "heap_alloc",
        /// `heap_free` (version 2): the free of a tracked heap allocation
        HeapFree = "heap_free",
        /// `heap_small` (version 2): allocations below the threshold of one scope in one step
        HeapSmall = "heap_small",
        /// `heap_account` (version 2): the heap tracker's account of one recorded step
        HeapAccount = "heap_account",
        /// `module` (version 2): a loaded executable or shared object raw stacks point into
        Module = "module",
        /// `raw_stack` (version 2): a sampled stack as module addresses, before symbolization
        RawStack = "raw_stack",
    }
}

impl EventType {
    /// The schema version that introduced this type: 2 for the sampled-stack and tracked-heap
    /// types, 1 for the others. A trace whose header states an older version has no such
    /// lines (strict reading rejects them).
    ///
    /// ```
    /// use trace_record::schema::EventType;
    /// assert_eq!(EventType::Op.since_version(), 1);
    /// assert_eq!(EventType::HeapAccount.since_version(), 2);
    /// ```
    pub const fn since_version(self) -> u32 {
        match self {
            EventType::SpanStart
            | EventType::SpanEnd
            | EventType::Op
            | EventType::Tensor
            | EventType::Memory
            | EventType::DeviceMemory
            | EventType::Gradient
            | EventType::Step
            | EventType::Marker
            | EventType::Counter => 1,
            EventType::Frame
            | EventType::Stack
            | EventType::Samples
            | EventType::Sampler
            | EventType::HeapAlloc
            | EventType::HeapFree
            | EventType::HeapSmall
            | EventType::HeapAccount
            | EventType::Module
            | EventType::RawStack => 2,
        }
    }

    /// The type named `s` on the wire, if it is one.
    #[inline]
    pub fn from_wire(s: &[u8]) -> Option<EventType> {
        std::str::from_utf8(s).ok()?.parse().ok()
    }
}
