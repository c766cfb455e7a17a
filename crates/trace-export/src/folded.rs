//! Folded stacks (`span;span;op self_ns` lines) for flamegraph.pl, inferno and speedscope.
//!
//! Each line is a stack of frames from the root, `;`-separated, then a space and the
//! *self* time of the last frame in nanoseconds, summed over every occurrence of that stack:
//!
//! ```text
//! train_step;forward;model;layers.0 1200
//! train_step;forward;model;layers.0;matmul 53000
//! ```
//!
//! A span's self time is its duration minus the durations of its children on the same
//! thread; an op's self time is its duration. Times are the nested times of
//! the span nester (the same as the Chrome export), so the weights of all lines sum
//! to the total duration of the root spans and root-level ops of every thread. Span frames
//! are named as every analysis names spans (a `#0` sibling index is dropped where the span
//! has no numbered sibling: [`crate::SpanNames`]), op frames as recorded; in both `;` becomes
//! `:` and line breaks become spaces (the format's separators), and an empty name becomes
//! `[empty name]`. An op recorded outside every span is a root frame of its own. Stacks with
//! zero self time are left out.
//!
//! A stack deeper than [`MAX_FOLDED_FRAMES`] frames is cut: its first
//! `MAX_FOLDED_FRAMES - 1` frames and then one `[deeper frames]` frame that carries the self
//! time of everything below (counted in [`FoldedStacks::truncated`]); flame graph tools cap
//! stack depth the same way. Without the cap the output of a deeply nested trace would grow
//! with the square of its depth.

use std::io::{BufRead, Write};

use trace_record::{ClosedStep, StepTracker, TraceReader};

use crate::ExportError;
use crate::FastMap;
use crate::nest::{Adjustments, Interval, Nester};

/// Stacks deeper than this many frames are cut (see the module documentation).
pub const MAX_FOLDED_FRAMES: u32 = 128;

/// The frame that stands for every frame below a cut stack.
pub const DEEPER_FRAMES: &str = "[deeper frames]";

/// Aggregated folded stacks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FoldedStacks {
    /// `(stack, self_ns)` sorted by stack; frames joined by `;`.
    pub lines: Vec<(String, u64)>,
    /// Sum of every line's weight.
    pub total_self_ns: u64,
    /// What the nesting had to adjust.
    pub adjustments: Adjustments,
    /// Whether the step asked for was found (true when no step was asked for).
    pub step_found: bool,
    /// Spans and ops whose stack was deeper than [`MAX_FOLDED_FRAMES`]: their self time is
    /// on a `[deeper frames]` frame.
    pub truncated: u64,
}

impl FoldedStacks {
    /// Writes one `stack weight` line per stack.
    pub fn write<W: Write>(&self, out: W) -> Result<(), ExportError> {
        write_lines(&self.lines, out)
    }
}

/// Writes `stack weight` lines (the folded format of both span and sampled stacks) and flushes.
pub(crate) fn write_lines<W: Write>(
    lines: &[(String, u64)],
    mut out: W,
) -> Result<(), ExportError> {
    for (stack, w) in lines {
        writeln!(out, "{stack} {w}").map_err(ExportError::Write)?;
    }
    out.flush().map_err(ExportError::Write)
}

/// The frame an empty name is shown as: an empty frame would leave an empty stack (a line
/// ` 30` that flame graph tools cannot parse) or `a;;b`.
pub(crate) const EMPTY_FRAME: &str = "[empty name]";

/// `name` as a folded frame: `;` (the frame separator) becomes `:`, line breaks become spaces,
/// an empty name becomes [`EMPTY_FRAME`].
pub(crate) fn frame_name(name: &str) -> String {
    if name.is_empty() {
        return EMPTY_FRAME.to_string();
    }
    name.chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
}

/// Folds the spans and ops of `events` by stack, weighted by self time in nanoseconds.
/// With `step`, only spans and ops that start in that step count (0: before the first `step`
/// event; steps numbered by trace-record's [`StepTracker`], so the empty boundary a loop's
/// last `step()` opens is not found).
///
/// Memory held: one entry per distinct stack, the open spans and one pending op per thread.
///
/// ```
/// use trace_export::folded_stacks;
/// use trace_record::schema::{Phase, SpanKind};
/// use trace_record::{OpRecord, ReadOptions, Run, TraceReader, TraceSession};
///
/// // Record a span with one op in it, in memory.
/// let (session, sink) = TraceSession::in_memory(Run::new("doc", Phase::Infer, "cpu"));
/// {
///     let _fwd = session.span("forward", SpanKind::Function, None);
///     let start = session.now_ns();
///     session.record_op(&OpRecord {
///         name: "matmul", inputs: &[1, 2], outputs: &[3], shape: &[2, 4], dtype: "f32",
///         device: "cpu", start_ns: start, dur_ns: 1_000, in_bytes: 64, out_bytes: 32,
///         category: None, flops: None,
///     });
/// }
/// session.finish()?;
/// let trace = sink.bytes();
/// let mut reader = TraceReader::new(&trace[..], ReadOptions::default())?;
/// let folded = folded_stacks(&mut reader, None)?;
/// assert!(folded.lines.iter().any(|(stack, _)| stack == "forward;matmul"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn folded_stacks<R: BufRead + Send>(
    reader: &mut TraceReader<R>,
    step: Option<u64>,
) -> Result<FoldedStacks, ExportError> {
    let keep_frames = MAX_FOLDED_FRAMES - 1;
    let mut nester = Nester::with_clip_depth(keep_frames);
    // Interned path id → self ns. Op leaves are interned lazily (their parent path + name).
    let mut weights: FastMap<u32, u64> = FastMap::default();
    // (parent path, op name) leaves seen, resolved to path ids after the stream ends.
    let mut op_leaves: FastMap<u32, FastMap<String, u64>> = FastMap::default();
    // Cut stacks: the path of their first `keep_frames` frames → self ns below it.
    let mut deeper: FastMap<u32, u64> = FastMap::default();
    let mut truncated = 0u64;
    let mut step_found = step.is_none();
    let mut steps = StepTracker::new();
    let mut found = |ended: Option<ClosedStep>| {
        if ended.is_some_and(|e| e.is_step && step == Some(e.index)) {
            step_found = true;
        }
    };
    let keep = |s: Option<u64>| step.is_none_or(|f| s == Some(f));
    let mut on = |n: &Nester, iv: Interval<'_>| match iv {
        Interval::Span { frame, end, .. } => {
            if keep(frame.step) {
                let self_ns = (end - frame.start).saturating_sub(frame.children_ns);
                if n.depth(frame.path) > MAX_FOLDED_FRAMES {
                    truncated += 1;
                    let w = deeper.entry(n.clip(frame.path)).or_default();
                    *w = w.saturating_add(self_ns);
                } else {
                    let w = weights.entry(frame.path).or_default();
                    *w = w.saturating_add(self_ns);
                }
            }
        }
        Interval::Op {
            op,
            start,
            end,
            parent_path,
            step: s,
            ..
        } => {
            if keep(s) {
                if n.depth(parent_path) >= MAX_FOLDED_FRAMES {
                    truncated += 1;
                    let w = deeper.entry(n.clip(parent_path)).or_default();
                    *w = w.saturating_add(end - start);
                } else {
                    let leaves = op_leaves.entry(parent_path).or_default();
                    match leaves.get_mut(op.name.as_str()) {
                        Some(w) => *w = w.saturating_add(end - start),
                        None => {
                            leaves.insert(op.name.clone(), end - start);
                        }
                    }
                }
            }
        }
    };
    reader.for_each_batched(|line| {
        let event = line.event;
        found(steps.event(&event));
        nester.push(event, &mut on);
        Ok::<(), ExportError>(())
    })?;
    found(steps.finish());
    nester.finish(&mut on);
    // Every span path is known now: show names as the analyses do (`block#0` alone → `block`).
    nester.set_names(nester.span_names());
    for (parent, leaves) in op_leaves {
        for (name, w) in leaves {
            let id = nester.intern_leaf(parent, &name);
            let e = weights.entry(id).or_default();
            *e = e.saturating_add(w);
        }
    }
    for (clip, w) in deeper {
        let id = nester.intern_leaf(clip, DEEPER_FRAMES);
        let e = weights.entry(id).or_default();
        *e = e.saturating_add(w);
    }
    let mut lines: Vec<(String, u64)> = weights
        .into_iter()
        .filter(|(_, w)| *w > 0)
        .map(|(path, w)| {
            let stack = nester
                .path_names(path)
                .into_iter()
                .map(frame_name)
                .collect::<Vec<_>>()
                .join(";");
            (stack, w)
        })
        .collect();
    lines.sort_unstable();
    // Distinct paths can print the same after renaming (`a;b` vs `a:b`): merge them.
    lines.dedup_by(|later, earlier| {
        if later.0 == earlier.0 {
            earlier.1 = earlier.1.saturating_add(later.1);
            true
        } else {
            false
        }
    });
    let total_self_ns = lines.iter().fold(0u64, |a, (_, w)| a.saturating_add(*w));
    Ok(FoldedStacks {
        lines,
        total_self_ns,
        adjustments: nester.adjustments(),
        step_found,
        truncated,
    })
}
