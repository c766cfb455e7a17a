//! The first unsafe module: the SIGPROF handler, the CPU-time timer, the CPU-time clocks.
//!
//! Why unsafe code of our own: a sample must record, at the instant it is taken, which step,
//! phase and span the program is in (so that every sample is attributed exactly, worker threads
//! included). Sampling libraries (pprof-rs) aggregate stacks inside their own handler and
//! give no hook for that, so the handler is ours. Everything it does is kept to the minimum
//! and to async-signal-safe operations:
//!
//! - installing and restoring a `SIGPROF` action (`sigaction`), which the per-thread perf
//!   events of [`crate::perf_sys`] raise or, where the kernel refuses those, the process
//!   CPU-time timer armed here (`setitimer(ITIMER_PROF)`: one signal per period of CPU time
//!   used by any thread, delivered to the thread that was running);
//! - reading CPU-time clocks (`clock_gettime`: the process's, and the sampler thread's own
//!   through `pthread_getcpuclockid`, so that its cost is reported apart);
//! - in the handler: relaxed/acquire/release atomics on a preallocated buffer
//!   ([`crate::ring`]), the thread id (`gettid`), a thread-local `Cell` read (constant
//!   initializer, no destructor, so no lazy registration), and one call to
//!   `backtrace::trace_unsynchronized`, the unwinder that `std` and pprof-rs use from signal
//!   handlers (it does not allocate or lock on Linux with glibc ≥ 2.35's `_dl_find_object`);
//! - `errno` is saved and restored around the handler.
//!
//! Symbolization, interning and writing happen later on the sampler's own thread.

// The reasons are in the module docs above. Nothing else in the library crates is unsafe but
// `perf_sys` (perf events, for the same handler): the workspace lints deny `unsafe_code`
// everywhere else.
#![allow(unsafe_code)]

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::ring::Ring;

/// Set while samples are recorded (inside an active schedule window).
pub(super) static RECORDING: AtomicBool = AtomicBool::new(false);
/// The step index samples are attributed to.
pub(super) static STEP: AtomicU64 = AtomicU64::new(0);
/// The sampler thread's id: its own samples are not recorded.
pub(super) static SELF_TID: AtomicU64 = AtomicU64::new(0);

/// The operating system's id of the calling thread.
pub(super) fn gettid() -> u64 {
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::gettid() };
    u64::try_from(tid).unwrap_or(0)
}

/// Process CPU time (all threads), ns, from `CLOCK_PROCESS_CPUTIME_ID`.
pub(super) fn process_cpu_ns() -> Option<u64> {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The CPU-time clock of a thread of this process that has not been joined, to read from
/// any thread with [`clock_ns`] (`pthread_getcpuclockid`).
pub(super) fn thread_cpu_clock(thread: libc::pthread_t) -> Option<libc::clockid_t> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `thread` names a thread that is not joined yet (the caller holds its join
    // handle), so it is a valid pthread_t; `clock` is writable for the call.
    let rc = unsafe { libc::pthread_getcpuclockid(thread, &mut clock) };
    (rc == 0).then_some(clock)
}

/// A clock's time, ns (`None` where it fails: a thread clock whose thread exited).
pub(super) fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// The SIGPROF handler: one sample of the interrupted thread into the ring.
extern "C" fn on_sigprof(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    if RECORDING.load(Ordering::Relaxed) {
        let tid = gettid();
        if tid != SELF_TID.load(Ordering::Relaxed) {
            let step = STEP.load(Ordering::Relaxed);
            let scope = crate::scope_cell::current_packed();
            crate::ring::ring().record(tid, step, scope, |push| {
                // SAFETY: trace_unsynchronized must not run concurrently with another
                // unsynchronized trace on this thread; SIGPROF is blocked while its own
                // handler runs (no SA_NODEFER), and nothing else in the process calls it.
                unsafe {
                    backtrace::trace_unsynchronized(|frame| push(frame.ip() as usize));
                }
            });
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// The SIGPROF action installed while a sampler runs; restores the previous one on drop.
pub(super) struct Handler {
    old: libc::sigaction,
}

impl Handler {
    /// Installs the handler (the ring must exist first).
    pub(super) fn install(_ring: &'static Ring) -> io::Result<Handler> {
        // SAFETY: zeroed is a valid `sigaction` (no handler, empty mask, no flags) to fill in.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_sigprof as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        // SAFETY: sa_mask is a valid sigset_t owned by `action`.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: zeroed is a valid `sigaction` for the kernel to write the old action into.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are valid for the call; the handler is an `extern "C"` fn
        // with the SA_SIGINFO signature.
        if unsafe { libc::sigaction(libc::SIGPROF, &action, &mut old) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Handler { old })
    }
}

impl Drop for Handler {
    fn drop(&mut self) {
        disarm();
        // SAFETY: restores the action saved at install; the pointer is valid for the call.
        unsafe { libc::sigaction(libc::SIGPROF, &self.old, std::ptr::null_mut()) };
    }
}

/// Arms the process CPU-time timer: one SIGPROF per `period_us` of CPU time.
pub(super) fn arm(period_us: u64) -> io::Result<()> {
    set_timer(period_us)
}

/// Stops the timer (no more SIGPROF).
pub(super) fn disarm() {
    let _ = set_timer(0);
}

fn set_timer(period_us: u64) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(period_us / 1_000_000).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::try_from(period_us % 1_000_000).unwrap_or(0),
    };
    let value = libc::itimerval {
        it_interval: tv,
        it_value: tv,
    };
    // SAFETY: `value` is a valid itimerval; the old value is not asked for.
    if unsafe { libc::setitimer(libc::ITIMER_PROF, &value, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ids_differ_between_threads_and_cpu_time_advances() {
        let me = gettid();
        assert!(me > 0);
        let other = std::thread::spawn(gettid).join().unwrap();
        assert_ne!(me, other);
        let a = process_cpu_ns().unwrap();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let b = process_cpu_ns().unwrap();
        assert!(b > a, "{a} -> {b} ({x})");
    }
}
