//! The second unsafe module: a thread's task-clock perf event that signals that thread.
//!
//! Why unsafe code of our own: the `libc` crate has the `perf_event_open` system call number
//! but neither `struct perf_event_attr` nor the `fcntl` commands that route an event's
//! overflow signal to one thread (`F_SETSIG`, `F_SETOWN_EX`), so they are declared here from
//! the kernel's uapi headers (`linux/perf_event.h`, `asm-generic/fcntl.h`). What the module
//! does, all outside any signal handler:
//!
//! - `perf_event_open` of a software `PERF_COUNT_SW_TASK_CLOCK` event on one thread
//!   (`pid` = its id, `cpu` = -1): the kernel's high-resolution timer counts that thread's own
//!   CPU time and overflows every `sample_period` ns of it: of all of it where the kernel
//!   allows (`perf_event_paranoid` ≤ 1, or `CAP_PERFMON`), else of its user-space part only
//!   (`exclude_kernel`, `exclude_hv`: what `perf_event_paranoid` 2 allows a process on
//!   itself);
//! - `fcntl(F_SETSIG)` (the signal to send), `fcntl(F_SETOWN_EX, F_OWNER_TID)` (to that thread
//!   only) and `O_ASYNC` (send it on every overflow), so that each overflow interrupts the
//!   thread that used the CPU time, whose handler then reads its own stack;
//! - `ioctl(PERF_EVENT_IOC_ENABLE / DISABLE)` to start and stop counting;
//! - the descriptor is owned by an [`OwnedFd`], so closing it is `Drop`.
//!
//! The numbers are those of the architectures whose `fcntl` and `ioctl` encodings are the
//! generic ones (x86-64, AArch64, RISC-V 64); elsewhere [`TaskClock::open`] reports
//! `Unsupported` and the sampler uses the process CPU-time timer.

// The reasons are in the module docs above: the workspace lints deny `unsafe_code` in every
// module but this one and `signal`.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `PERF_TYPE_SOFTWARE`.
const PERF_TYPE_SOFTWARE: u32 = 1;
/// `PERF_COUNT_SW_TASK_CLOCK`: the CPU time of the task, from a high-resolution timer.
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
/// `PERF_ATTR_SIZE_VER7`: the size of the struct below (up to `sig_data`).
const PERF_ATTR_SIZE: u32 = 128;
/// Bits of the flags word (`disabled`, `exclude_kernel`, `exclude_hv` bitfields).
const ATTR_DISABLED: u64 = 1 << 0;
const ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
const ATTR_EXCLUDE_HV: u64 = 1 << 6;
/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `F_SETSIG` and `F_SETOWN_EX` (asm-generic/fcntl.h), `F_OWNER_TID`.
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;
/// `PERF_EVENT_IOC_ENABLE` = `_IO('$', 0)`, `PERF_EVENT_IOC_DISABLE` = `_IO('$', 1)`.
const PERF_EVENT_IOC_ENABLE: u64 = 0x2400;
const PERF_EVENT_IOC_DISABLE: u64 = 0x2401;

/// Whether this architecture's numbers are the generic ones used above.
const GENERIC_ABI: bool = cfg!(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
));

/// `struct perf_event_attr` as of `PERF_ATTR_SIZE_VER7` (128 bytes); the bitfields are one
/// `u64` (`flags`), least significant bit first on these little-endian targets. Unions are
/// represented by their first member.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    reserved_3: u32,
    sig_data: u64,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == PERF_ATTR_SIZE as usize);

/// `struct f_owner_ex`.
#[repr(C)]
struct FOwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

/// One thread's task-clock event (disabled until [`TaskClock::enable`]); closed on drop.
#[derive(Debug)]
pub(super) struct TaskClock {
    fd: OwnedFd,
}

impl TaskClock {
    /// Opens a disabled task-clock event on thread `tid` that overflows every `period_ns` of
    /// its CPU time (of its user-space CPU time only, when `user_only`) and then sends
    /// `signal` to that thread.
    pub(super) fn open(
        tid: u64,
        period_ns: u64,
        signal: libc::c_int,
        user_only: bool,
    ) -> io::Result<TaskClock> {
        if !GENERIC_ABI {
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        }
        let pid =
            libc::pid_t::try_from(tid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
        let attr = PerfEventAttr {
            kind: PERF_TYPE_SOFTWARE,
            size: PERF_ATTR_SIZE,
            config: PERF_COUNT_SW_TASK_CLOCK,
            sample_period: period_ns.max(1),
            flags: if user_only {
                ATTR_DISABLED | ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV
            } else {
                ATTR_DISABLED
            },
            wakeup_events: 1,
            ..PerfEventAttr::default()
        };
        // SAFETY: `attr` is a valid, initialized perf_event_attr of the size it declares,
        // alive for the call; the other arguments are plain integers (pid = the thread,
        // cpu = -1: any CPU, group_fd = -1: no group).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &raw const attr,
                pid,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let raw =
            libc::c_int::try_from(rc).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        // SAFETY: the kernel just returned `raw` as a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let owner = FOwnerEx {
            kind: F_OWNER_TID,
            pid,
        };
        // SAFETY: fcntl on a descriptor we own; F_SETOWN_EX reads a valid f_owner_ex alive
        // for the call, F_SETSIG takes a signal number, F_GETFL/F_SETFL plain flags.
        unsafe {
            if libc::fcntl(fd.as_raw_fd(), F_SETSIG, signal) != 0
                || libc::fcntl(fd.as_raw_fd(), F_SETOWN_EX, &raw const owner) != 0
            {
                return Err(io::Error::last_os_error());
            }
            let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            if fl < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_ASYNC) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(TaskClock { fd })
    }

    /// Starts counting (and so signalling).
    pub(super) fn enable(&self) -> io::Result<()> {
        self.ioctl(PERF_EVENT_IOC_ENABLE)
    }

    /// Stops counting; the thread's CPU time until the next enable is not sampled.
    pub(super) fn disable(&self) -> io::Result<()> {
        self.ioctl(PERF_EVENT_IOC_DISABLE)
    }

    fn ioctl(&self, request: u64) -> io::Result<()> {
        // SAFETY: an argument-less perf ioctl on a perf event descriptor we own.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), request as _, 0) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kinds_of_event_open_enable_and_disable_where_the_kernel_allows_them() {
        let me = crate::signal::gettid();
        // A period far longer than the test's CPU time: no signal is raised (none is
        // handled here). Where the kernel refuses an event, it says why with an error.
        for user_only in [true, false] {
            match TaskClock::open(me, 60_000_000_000, libc::SIGPROF, user_only) {
                Ok(ev) => {
                    ev.enable().unwrap();
                    ev.disable().unwrap();
                }
                Err(e) => assert!(e.raw_os_error().is_some() || !GENERIC_ABI, "{e}"),
            }
        }
        // No such thread.
        assert!(TaskClock::open(u64::MAX, 1_000_000, libc::SIGPROF, true).is_err());
    }
}
