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
//! - `errno` is saved and restored around the handler;
//! - for the ticked source ([`crate::ticker`]): reading another thread's CPU-time clock
//!   (`clock_gettime` on the clock id the kernel defines for a thread of this process, as
//!   glibc's `pthread_getcpuclockid` builds it), queueing `SIGPROF` to one thread with a value
//!   (`rt_tgsigqueueinfo`: the ticker's slot for that thread), and in the handler reading the
//!   interrupted instruction (`REG_RIP` / `pc` of the signal context) to tell a thread that was
//!   blocked in a system call (the kernel points a call it will restart back at its `syscall`
//!   / `svc` instruction) from one that was running.
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
/// Set under `SamplerDiagnostic::DeliverOnly`: the handler counts the signal in
/// [`INTERRUPTS`] instead of reading the stack.
pub(super) static DELIVER_ONLY: AtomicBool = AtomicBool::new(false);
/// Signals the handler returned from at once under [`DELIVER_ONLY`] (reset when a sampler
/// starts).
pub(super) static INTERRUPTS: AtomicU64 = AtomicU64::new(0);
/// The sampler thread's id: its own samples are not recorded.
pub(super) static SELF_TID: AtomicU64 = AtomicU64::new(0);

/// Threads the ticked source keeps a slot for (a thread past this many shares the last one).
pub(super) const TICK_SLOTS: usize = 512;
/// Marks a queued signal's value as the ticker's: `TICK_TAG | slot`.
const TICK_TAG: usize = 0x7467_0000;
/// Per ticker slot: the ticker's signals that found their thread blocked in a system call
/// (no sample taken), which the ticker credits back to the thread.
pub(super) static BLOCKED: [AtomicU64; TICK_SLOTS] = [const { AtomicU64::new(0) }; TICK_SLOTS];
/// Per ticker slot: the ticker's signals handled, sample or not. A standard signal queued
/// while the same one is pending is merged into it, so the ticker sends its thread the next
/// only once this has caught up with what it sent.
pub(super) static HANDLED: [AtomicU64; TICK_SLOTS] = [const { AtomicU64::new(0) }; TICK_SLOTS];

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
    let rc = unsafe { libc::pthread_getcpuclockid(thread, &raw mut clock) };
    (rc == 0).then_some(clock)
}

/// A clock's time, ns (`None` where it fails: a thread clock whose thread exited).
pub(super) fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(clock, &raw mut ts) };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// The address of the SIGPROF handler's first instruction, to recognise its frames in
/// sampled stacks however the binary's debug info names it.
pub(super) fn handler_address() -> usize {
    on_sigprof as *const () as usize
}

/// The SIGPROF handler: one sample of the interrupted thread into the ring.
extern "C" fn on_sigprof(_sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo and context to an SA_SIGINFO handler.
    let ticked = unsafe { ticker_slot(info) };
    if RECORDING.load(Ordering::Relaxed) {
        let tid = gettid();
        // SAFETY: as above.
        let blocked_slot = ticked.filter(|_| unsafe { in_syscall(ctx) });
        if let Some(slot) = blocked_slot {
            // The ticker's signal found the thread waiting in the kernel, not working: no
            // sample; the ticker credits the period back and asks again while it runs.
            BLOCKED[slot].fetch_add(1, Ordering::Relaxed);
        } else if DELIVER_ONLY.load(Ordering::Relaxed) {
            INTERRUPTS.fetch_add(1, Ordering::Relaxed);
        } else if tid != SELF_TID.load(Ordering::Relaxed) {
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
    if let Some(slot) = ticked {
        HANDLED[slot].fetch_add(1, Ordering::Release);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// The ticker's slot when `info` is a signal the ticker queued (`SI_QUEUE` with its tag).
///
/// # Safety
/// `info` is the siginfo the kernel passed to the handler.
unsafe fn ticker_slot(info: *const libc::siginfo_t) -> Option<usize> {
    if info.is_null() {
        return None;
    }
    // SAFETY: valid per the caller; `si_value` is meaningful for `SI_QUEUE`, checked first.
    unsafe {
        if (*info).si_code != libc::SI_QUEUE {
            return None;
        }
        let v = (*info).si_value().sival_ptr as usize;
        (v & !0xffff == TICK_TAG).then_some((v & 0xffff).min(TICK_SLOTS - 1))
    }
}

/// Whether the interrupted thread was blocked in a system call: the kernel leaves a call it
/// will restart (`SA_RESTART`) pointing back at its `syscall` / `svc` instruction, and one
/// it ends with `EINTR` for the handler (sleeps, waits with a timeout) just past it with
/// `-EINTR` in the return register. Only called for the ticker's signals, which are
/// credited back and asked again while the thread runs; a running thread is almost never
/// exactly there. (A call that had just ended on its own, say a sleep that ran out while
/// the thread waited for a CPU, is sampled in that call, which the analysis counts as
/// waiting.)
///
/// # Safety
/// `ctx` is the `ucontext_t` the kernel passed to an SA_SIGINFO handler.
unsafe fn in_syscall(ctx: *const libc::c_void) -> bool {
    if ctx.is_null() {
        return false;
    }
    let uc = ctx.cast::<libc::ucontext_t>();
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the context is valid per the caller. The instruction pointer points at
        // mapped code; a byte after it is read only after a first byte of 0x0f, which begins
        // an instruction of at least two bytes. The two bytes before it are read only when
        // the return register holds -EINTR, that is, when a system call instruction has just
        // returned there, so they are that instruction.
        unsafe {
            let gregs = &(*uc).uc_mcontext.gregs;
            let rip = gregs[libc::REG_RIP as usize] as usize as *const u8;
            let is_syscall =
                |p: *const u8| p.read_volatile() == 0x0f && p.add(1).read_volatile() == 0x05;
            is_syscall(rip)
                || (gregs[libc::REG_RAX as usize] == -i64::from(libc::EINTR)
                    && is_syscall(rip.wrapping_sub(2)))
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: as above; aarch64 instructions are 4 aligned bytes (`svc #0` is d4000001).
        unsafe {
            let mc = &(*uc).uc_mcontext;
            let pc = mc.pc as usize;
            let svc = |p: usize| (p as *const u32).read_volatile() == 0xd400_0001;
            pc % 4 == 0
                && (svc(pc) || (mc.regs[0] as i64 == -i64::from(libc::EINTR) && svc(pc - 4)))
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = uc;
        false
    }
}

/// The CPU-time clock of the thread `tid` of this process (the kernel's per-thread CPU clock
/// id, `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`, which glibc's `pthread_getcpuclockid`
/// returns), to read with [`clock_ns`]; `None` for an id that does not fit.
pub(super) fn tid_cpu_clock(tid: u64) -> Option<libc::clockid_t> {
    let tid = libc::clockid_t::try_from(tid).ok()?;
    Some((!tid << 3) | 4 | 2)
}

/// Sets the calling thread's timer slack to 1 ns (`prctl(PR_SET_TIMERSLACK)`), so that its
/// sleeps end when asked; best effort.
pub(super) fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and affects the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Asks the scheduler for a time slice of `ns` for the calling thread (`sched_setattr` with
/// its policy and nice value as they are and `sched_runtime` set: the fair scheduler's
/// per-task slice, Linux 6.12 and later, allowed without privileges). A task with a shorter
/// slice gets an earlier virtual deadline when it wakes, so it preempts a running thread
/// sooner instead of waiting for that thread's slice to run out. Returns whether the kernel
/// took it (older kernels refuse or ignore the field).
pub(super) fn short_time_slice(ns: u64) -> bool {
    // SAFETY: getpriority takes two integers and reads the calling thread's nice value (0:
    // the calling thread); -1 with errno is an error, also a valid value, and either is
    // passed on unchanged below (a nice value the thread already has is always allowed).
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let attr = libc::sched_attr {
        size: std::mem::size_of::<libc::sched_attr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_flags: 0,
        sched_nice: nice,
        sched_priority: 0,
        sched_runtime: ns,
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: `attr` is a valid, fully initialised `sched_attr` of the size it declares; pid 0
    // is the calling thread; flags 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            0 as libc::pid_t,
            &raw const attr,
            0 as libc::c_uint,
        )
    };
    rc == 0
}

/// The sender a queued signal names (this process and its user), read once by the ticker
/// instead of two system calls per signal.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sender {
    pid: libc::pid_t,
    uid: libc::uid_t,
}

impl Sender {
    /// This process and its real user, now.
    pub(super) fn current() -> Sender {
        // SAFETY: getpid and getuid take no arguments and cannot fail.
        let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
        Sender { pid, uid }
    }
}

/// Queues `SIGPROF` from `sender` (this process) to its thread `tid`, carrying the ticker's
/// `slot`.
pub(super) fn queue_sigprof(sender: Sender, tid: u64, slot: usize) -> io::Result<()> {
    // The kernel's `siginfo` for `SI_QUEUE`: signo, errno, code, then the union (pid, uid,
    // value), aligned to a pointer (so after 4 bytes of padding on 64-bit Linux); 128 bytes
    // in all.
    #[repr(C)]
    struct Queued {
        signo: libc::c_int,
        errno: libc::c_int,
        code: libc::c_int,
        #[cfg(target_pointer_width = "64")]
        _pad: libc::c_int,
        pid: libc::pid_t,
        uid: libc::uid_t,
        value: usize,
        _rest: [u8; REST],
    }
    #[cfg(target_pointer_width = "64")]
    const REST: usize = 128 - 32;
    #[cfg(not(target_pointer_width = "64"))]
    const REST: usize = 128 - 24;
    const _: () = assert!(std::mem::size_of::<Queued>() == 128);
    let Sender { pid, uid } = sender;
    let info = Queued {
        signo: libc::SIGPROF,
        errno: 0,
        code: libc::SI_QUEUE,
        #[cfg(target_pointer_width = "64")]
        _pad: 0,
        pid,
        uid,
        value: TICK_TAG | slot.min(TICK_SLOTS - 1),
        _rest: [0; REST],
    };
    let tid = libc::pid_t::try_from(tid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: `info` is a valid 128-byte siginfo for the call; the target is a thread of
    // this process, which may be sent a queued signal with a negative `si_code`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            pid,
            tid,
            libc::SIGPROF,
            &raw const info,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The SIGPROF action installed while a sampler runs; restores the previous one on drop,
/// unless that was the default action (see `Drop`).
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
        unsafe { libc::sigemptyset(&raw mut action.sa_mask) };
        // SAFETY: zeroed is a valid `sigaction` for the kernel to write the old action into.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are valid for the call; the handler is an `extern "C"` fn
        // with the SA_SIGINFO signature.
        if unsafe { libc::sigaction(libc::SIGPROF, &raw const action, &raw mut old) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Handler { old })
    }
}

impl Drop for Handler {
    fn drop(&mut self) {
        disarm();
        // A signal the ticker queued before the disarm can still be pending on a thread that
        // has not run since (a loaded machine keeps a runnable thread waiting for many ms),
        // and SIGPROF's default action ends the process. So when the default was the previous
        // action the handler stays installed (it records nothing once `RECORDING` is off);
        // any other previous action (ignored, or the program's own handler) is restored.
        if self.old.sa_sigaction == libc::SIG_DFL {
            return;
        }
        // SAFETY: restores the action saved at install; the pointer is valid for the call.
        unsafe { libc::sigaction(libc::SIGPROF, &raw const self.old, std::ptr::null_mut()) };
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
    if unsafe { libc::setitimer(libc::ITIMER_PROF, &raw const value, std::ptr::null_mut()) } != 0 {
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

    /// The calling thread's scheduling attributes as the kernel reports them.
    fn sched_attr_now() -> libc::sched_attr {
        let mut attr = libc::sched_attr {
            size: 0,
            sched_policy: 0,
            sched_flags: 0,
            sched_nice: 0,
            sched_priority: 0,
            sched_runtime: 0,
            sched_deadline: 0,
            sched_period: 0,
        };
        let size = std::mem::size_of::<libc::sched_attr>() as libc::c_uint;
        // SAFETY: `attr` is writable and `size` bytes long; pid 0 is the calling thread.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sched_getattr,
                0 as libc::pid_t,
                &raw mut attr,
                size,
                0 as libc::c_uint,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        attr
    }

    #[test]
    fn a_short_time_slice_is_taken_as_asked_and_keeps_policy_and_nice() {
        std::thread::spawn(|| {
            let before = sched_attr_now();
            if short_time_slice(100_000) {
                let after = sched_attr_now();
                // Kernels without per-task slices take the call and leave the field as it
                // was; the others report the slice asked for.
                assert!(
                    after.sched_runtime == 100_000 || after.sched_runtime == before.sched_runtime,
                    "{} ns",
                    after.sched_runtime
                );
                assert_eq!(after.sched_policy, before.sched_policy);
                assert_eq!(after.sched_nice, before.sched_nice);
            }
        })
        .join()
        .unwrap();
    }
}
