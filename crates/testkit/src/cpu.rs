//! The calling thread's CPU time: what load-proof tests bound their work and waits by.

use std::time::Duration;

/// CPU time the calling thread has run, from `/proc/thread-self/schedstat` (its first field,
/// in ns; Linux). A test that needs a given amount of work, or of samples from a sampler
/// that samples per CPU period, runs for CPU time, not wall time: a loaded machine stretches
/// the wall time and leaves the CPU time, and so the outcome, as it is. The figure of a
/// running thread is brought up to date at its scheduler ticks and switches, so it can lag by
/// a tick: good for bounding work, not for timing a call.
///
/// # Panics
/// Where the kernel does not report it (not Linux).
pub fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat")
        .expect("the kernel reports the thread's CPU time (/proc/thread-self/schedstat)");
    let ns = stat
        .split_whitespace()
        .next()
        .and_then(|ns| ns.parse().ok())
        .expect("schedstat's first field");
    Duration::from_nanos(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn work_advances_the_threads_cpu_time_and_sleeping_does_not_much() {
        let c0 = thread_cpu();
        let mut x = 1u64;
        while thread_cpu().checked_sub(c0).unwrap() < Duration::from_millis(20) {
            for i in 0..10_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
        let c1 = thread_cpu();
        std::thread::sleep(Duration::from_millis(50));
        // Sleeping 50 ms costs far less than 50 ms of CPU (whatever the load).
        assert!(thread_cpu().checked_sub(c1).unwrap() < Duration::from_millis(25));
        std::hint::black_box(x);
    }
}
