//! The current scope of each thread: its phase and innermost open span, for attributing samples.
//!
//! The recorder (trace-candle: every span it opens or ends, whatever its kind) publishes
//! `(phase, span)` into a thread-local cell (read by the signal handler on that thread) and
//! into a process-wide atomic (read for threads that have none of their own, such as Candle's
//! and gemm's worker threads, which run on behalf of the thread that drives the capture).
//! [`set_scope`] writes both (what a recorder that knows its innermost open span calls after
//! each span start and end); [`enter_scope`] does so until its [`ScopeGuard`] drops, which
//! restores the previous scope. [`current_scope`] reads what a sample taken now on the calling
//! thread is attributed to. Each is a `Cell` write and a relaxed atomic store.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use trace_record::SpanId;
use trace_record::schema::ExecStep;

thread_local! {
    static SCOPE: Cell<u64> = const { Cell::new(0) };
}

/// The last scope entered or restored by any thread (the driving thread's, in a training loop).
static LAST: AtomicU64 = AtomicU64::new(0);

const PHASE_BITS: u64 = 2;

fn phase_code(p: Option<ExecStep>) -> u64 {
    match p {
        None => 0,
        Some(ExecStep::Forward) => 1,
        Some(ExecStep::Backward) => 2,
        Some(ExecStep::Optimizer) => 3,
    }
}

/// Packs a phase and a span id (0: none; ids at or above 2^62 are dropped) into one word, the
/// scope word samples (and tracked allocations) carry.
pub fn pack(phase: Option<ExecStep>, span: Option<u64>) -> u64 {
    let span = span.filter(|&s| s < 1 << (64 - PHASE_BITS)).unwrap_or(0);
    span << PHASE_BITS | phase_code(phase)
}

/// The phase and span of a packed scope word ([`pack`]).
pub fn unpack(v: u64) -> (Option<ExecStep>, Option<u64>) {
    let phase = match v & 0b11 {
        1 => Some(ExecStep::Forward),
        2 => Some(ExecStep::Backward),
        3 => Some(ExecStep::Optimizer),
        _ => None,
    };
    let span = v >> PHASE_BITS;
    (phase, (span != 0).then_some(span))
}

/// The calling thread's scope as a packed word ([`pack`]), else the process-wide last one
/// (signal-safe and allocation-free: a thread-local `Cell` with a constant initializer and an
/// atomic load), for recorders that keep the word as it is (a signal handler, an allocator).
pub fn current_packed() -> u64 {
    let own = SCOPE.try_with(Cell::get).unwrap_or(0);
    if own != 0 {
        own
    } else {
        LAST.load(Ordering::Relaxed)
    }
}

/// What a sample taken now is attributed to: an execution step and the innermost open phase
/// span of any kind (each absent when none is open).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scope {
    /// The execution step (forward, backward, optimizer).
    pub phase: Option<ExecStep>,
    /// The innermost open span (a phase, op, module, `tracing` or plain span).
    pub span: Option<SpanId>,
}

/// The calling thread's current scope, else the one last entered or restored by any thread
/// (the driving thread's, in a training loop).
pub fn current_scope() -> Scope {
    let (phase, span) = unpack(current_packed());
    Scope {
        phase,
        span: span.map(SpanId),
    }
}

/// Sets this thread's scope to exactly `phase` and `span` (each `None`: none), and makes it the
/// one threads without a scope of their own are attributed to. A recorder calls it after every
/// span start and end with the innermost span then open on the thread, so a sample taken after
/// a child span ended and before its parent ended names the parent. Span ids at or above 2^62
/// are not kept (the scope then names no span).
#[inline]
pub fn set_scope(phase: Option<ExecStep>, span: Option<SpanId>) {
    let next = pack(phase, span.map(|s| s.0));
    let _ = SCOPE.try_with(|c| c.set(next));
    LAST.store(next, Ordering::Relaxed);
}

/// Restores the previous scope when dropped.
#[derive(Debug)]
#[must_use = "the scope ends when the guard is dropped"]
pub struct ScopeGuard {
    prev: u64,
}

/// Enters a scope on this thread: `phase` (or the enclosing one when `None`) and `span` (or the
/// enclosing one when `None`, e.g. outside an active window). Span ids at or above 2^62 are
/// not kept (the scope then names no span).
pub fn enter_scope(phase: Option<ExecStep>, span: Option<SpanId>) -> ScopeGuard {
    let prev = SCOPE.with(Cell::get);
    let (prev_phase, prev_span) = unpack(prev);
    let next = pack(phase.or(prev_phase), span.map(|s| s.0).or(prev_span));
    SCOPE.with(|c| c.set(next));
    LAST.store(next, Ordering::Relaxed);
    ScopeGuard { prev }
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        SCOPE.with(|c| c.set(self.prev));
        LAST.store(self.prev, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_nest_and_restore() {
        assert_eq!(unpack(pack(None, None)), (None, None));
        for p in [
            None,
            Some(ExecStep::Forward),
            Some(ExecStep::Backward),
            Some(ExecStep::Optimizer),
        ] {
            assert_eq!(unpack(pack(p, Some(42))), (p, Some(42)));
            assert_eq!(unpack(pack(p, None)), (p, None));
        }
        assert_eq!(unpack(pack(None, Some(u64::MAX))), (None, None));
        assert_eq!(unpack(pack(None, Some(1 << 62))), (None, None));
        std::thread::spawn(|| {
            assert_eq!(SCOPE.with(Cell::get), 0);
            {
                let _b = enter_scope(Some(ExecStep::Backward), Some(SpanId(5)));
                assert_eq!(
                    unpack(current_packed()),
                    (Some(ExecStep::Backward), Some(5))
                );
                {
                    let _m = enter_scope(None, Some(SpanId(9)));
                    assert_eq!(
                        unpack(current_packed()),
                        (Some(ExecStep::Backward), Some(9))
                    );
                }
                assert_eq!(
                    unpack(current_packed()),
                    (Some(ExecStep::Backward), Some(5))
                );
            }
            assert_eq!(SCOPE.with(Cell::get), 0);
            let _p = enter_scope(Some(ExecStep::Forward), Some(SpanId(3)));
            assert_eq!(
                current_scope(),
                Scope {
                    phase: Some(ExecStep::Forward),
                    span: Some(SpanId(3))
                }
            );
            // `set_scope` replaces the scope outright, phase and span, and nothing is
            // inherited: a span ended and its parent named again, or no span at all.
            set_scope(None, Some(SpanId(7)));
            assert_eq!(unpack(current_packed()), (None, Some(7)));
            set_scope(Some(ExecStep::Optimizer), None);
            assert_eq!(unpack(current_packed()), (Some(ExecStep::Optimizer), None));
            // A thread with no scope of its own reads the last one set by any thread.
            set_scope(Some(ExecStep::Backward), Some(SpanId(11)));
            let seen = std::thread::spawn(current_scope).join().unwrap();
            assert_eq!(
                seen,
                Scope {
                    phase: Some(ExecStep::Backward),
                    span: Some(SpanId(11))
                }
            );
        })
        .join()
        .unwrap();
    }
}
