//! The hint rules of the hot-spot report: what each recognises, its threshold, its sentence.
//!
//! One place for every rule ([`HINT_RULES`]) and its threshold: a rule fires when its evidence
//! reaches its share of the program's samples. The profiler's own samples (the sampler, the
//! recorder, the heap tracker on a program thread, the step-boundary wake) are never evidence
//! and are not in the denominator: a hint is about the program, not about its profiler.
//! Thresholds:
//!
//! | rule | fires at | constant |
//! |---|---|---|
//! | `proc_read_per_op` | 2 % of samples under Candle's per-op /proc read | [`PROC_READ_MIN_SHARE`] |
//! | `pool_waiting` | 20 % of samples thread pools waiting | [`POOL_WAITING_MIN_SHARE`] |
//! | `allocator` | 5 % of samples with the allocator innermost | [`ALLOCATOR_MIN_SHARE`] |
//! | `too_few_samples` | fewer than 385 samples (±5 points at 95 %) | [`SAMPLES_FOR_5_POINTS`] |

use serde::Serialize;

use crate::format::format_share;
use trace_record::SamplerAccount;

/// Shares of samples at or above which a rule's hint is given (the table in the module docs).
pub const PROC_READ_MIN_SHARE: f64 = 0.02;
/// See [`PROC_READ_MIN_SHARE`].
pub const POOL_WAITING_MIN_SHARE: f64 = 0.20;
/// See [`PROC_READ_MIN_SHARE`].
pub const ALLOCATOR_MIN_SHARE: f64 = 0.05;
/// Samples whose shares are within ±5 points at 95 % confidence (a share near one half:
/// 1.96² × 0.25 / 0.05²).
pub const SAMPLES_FOR_5_POINTS: u64 = 385;

/// The rules of [`HotReport::hints`](crate::sampled::HotReport::hints), by name, with what each recognises.
pub const HINT_RULES: &[(&str, &str)] = &[
    (
        "proc_read_per_op",
        "Candle re-reading /proc for its thread count on every op (RAYON_NUM_THREADS unset)",
    ),
    ("pool_waiting", "thread pools waiting instead of working"),
    (
        "allocator",
        "time in the allocator (malloc/free, mmap/munmap, page faults)",
    ),
    (
        "too_few_samples",
        "too few samples for the shares to mean much",
    ),
];

/// A recognised cost: the rule, a one-line hint, and its evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotHint {
    /// The rule's name ([`HINT_RULES`]).
    pub rule: &'static str,
    /// The hint, one line.
    pub hint: String,
    /// Samples that are its evidence (for `too_few_samples`, those the report has).
    pub samples: u64,
    /// Their share of the report's samples.
    pub share: f64,
}

/// A frame of Candle's per-op thread-count lookup that reads /proc when `RAYON_NUM_THREADS`
/// is unset: candle-core's `default_num_threads` and CPU-list detection, or `num_cpus`.
pub(crate) fn is_proc_read_frame(func: &str, krate: Option<&str>) -> bool {
    match krate {
        Some("num_cpus") => true,
        Some("candle_core") => {
            func.contains("default_num_threads") || func.contains("linux_detect_preferred_cpus")
        }
        _ => false,
    }
}

/// Frames of the allocator, and of the system calls behind large allocations (where their
/// page faults are taken).
pub(crate) fn is_allocator_frame(func: &str) -> bool {
    if crate::model::samples::is_allocator(func) {
        return true;
    }
    // libc's names: `mmap64`, `__mmap`, `__GI___munmap`, `madvise`, `__brk`, `sbrk`.
    let bare = func
        .trim_start_matches('_')
        .trim_start_matches("GI_")
        .trim_start_matches('_');
    let name = bare.split(' ').next().unwrap_or(bare);
    ["mmap", "munmap", "madvise", "mremap", "brk", "sbrk"]
        .iter()
        .any(|p| {
            name.strip_prefix(p)
                .is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// The hints of a report with `total` samples of the program (the profiler's own left out),
/// of which `waiting`, `proc_read` and `allocator` are each rule's evidence.
pub(crate) fn hints(
    total: u64,
    waiting: u64,
    proc_read: u64,
    allocator: u64,
    acc: &SamplerAccount,
) -> Vec<HotHint> {
    let mut out = Vec::new();
    if acc.steps == 0 {
        return out;
    }
    let share = |x: u64| {
        if total > 0 {
            x as f64 / total as f64
        } else {
            0.0
        }
    };
    let mut add = |rule, samples: u64, min: f64, hint: String| {
        if total > 0 && samples > 0 && share(samples) >= min {
            out.push(HotHint {
                rule,
                hint,
                samples,
                share: share(samples),
            });
        }
    };
    add(
        "proc_read_per_op",
        proc_read,
        PROC_READ_MIN_SHARE,
        format!(
            "{} of samples re-read /proc for Candle's thread count on every op \
             (candle_core::utils::get_num_threads, RAYON_NUM_THREADS unset): set \
             RAYON_NUM_THREADS to the number of cores",
            format_share(share(proc_read))
        ),
    );
    add(
        "pool_waiting",
        waiting,
        POOL_WAITING_MIN_SHARE,
        format!(
            "{} of samples are thread pools waiting (spinning at Candle's barrier, rayon \
             idle, parked): the ops are too small for the threads; try fewer threads \
             (RAYON_NUM_THREADS, CANDLE_NUM_THREADS) or larger batches",
            format_share(share(waiting))
        ),
    );
    add(
        "allocator",
        allocator,
        ALLOCATOR_MIN_SHARE,
        format!(
            "{} of samples are in the allocator (malloc/free, mmap/munmap and their page \
             faults): tensors are allocated and freed per op; reuse buffers or batch work",
            format_share(share(allocator))
        ),
    );
    if total < SAMPLES_FOR_5_POINTS {
        let hz = acc
            .effective_hz
            .filter(|&h| h > 0.0)
            .unwrap_or(acc.requested_hz as f64);
        let more = SAMPLES_FOR_5_POINTS - total;
        let cpu = if hz > 0.0 {
            format!(
                ", about {} of CPU at the {} {hz:.0} Hz",
                crate::format::format_ns((more as f64 / hz * 1e9).round()),
                if acc.effective_hz.is_some_and(|h| h > 0.0) {
                    "achieved"
                } else {
                    "requested"
                }
            )
        } else {
            String::new()
        };
        let margin = if total > 0 {
            format!(
                "shares are within ±{:.0} points (95%)",
                1.96 * (0.25 / total as f64).sqrt() * 100.0
            )
        } else {
            "no share can be told".to_string()
        };
        out.push(HotHint {
            rule: "too_few_samples",
            hint: format!(
                "{total} samples: {margin}; {SAMPLES_FOR_5_POINTS} are needed for ±5 points, \
                 {more} more{cpu}: record more steps or raise the rate"
            ),
            samples: total,
            share: 1.0,
        });
    }
    out
}
